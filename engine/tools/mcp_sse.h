/*
 * mcp_sse — Server-Sent Events, parsed incrementally: the answer of an MCP server that streams
 * (Streamable HTTP transport). WHATWG rules: lines end in LF, CRLF or CR (also across chunks);
 * "data" lines join with LF; a blank line dispatches the event; ':' starts a comment; "event"
 * names the type (default "message", at most 63 bytes kept). A line or an event's data over
 * max bytes fails the feed (-E2BIG from buf).
 *
 * on_event returns 0 to go on, 1 to stop, <0 to fail; mcp_sse_feed returns the same. The
 * parser owns its buffers (mcp_sse_release); one thread at a time.
 */
#ifndef AR_MCP_SSE_H
#define AR_MCP_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

struct mcp_sse {
    struct buf line;
    struct buf data;
    char event[64];
    bool has_data;
    bool after_cr;
    int (*on_event)(void *ctx, const char *event, const char *data, size_t len);
    void *ctx;
};

void mcp_sse_init(struct mcp_sse *s, size_t max,
                  int (*on_event)(void *ctx, const char *event, const char *data, size_t len),
                  void *ctx);
int mcp_sse_feed(struct mcp_sse *s, const char *data, size_t len);
void mcp_sse_release(struct mcp_sse *s);

#endif
