/*
 * mcp_client — the runner as the MCP client of a user's HTTP MCP server
 * (reference/agenta-runner.md §2.4, §3.22; MCP 2025-06-18, Streamable HTTP transport).
 *
 * mcp_client_open() checks the URL with ssrf_guard (and pins the address it resolved),
 * sends `initialize` (protocol 2025-06-18; the server may answer 2025-03-26), keeps the
 * Mcp-Session-Id the server assigns, and sends `notifications/initialized`. Every later
 * request carries MCP-Protocol-Version and the session id. A request is one JSON-RPC message
 * POSTed with Accept: application/json, text/event-stream; the answer is read either as one
 * JSON document or as an SSE stream (events parsed as they arrive; the transfer ends as soon
 * as the response with our id is in; a ping the server sends meanwhile is answered, any other
 * server request gets -32601). A 404 while a session is held means the session ended: the
 * client initializes again once and repeats the request.
 *
 * The server's headers (connection.headers and the credentials bound as headers) are applied
 * here, runner-side, and nowhere else: header values never enter the sandbox, a log line (they
 * are added to the thread's redaction set) or an error message.
 *
 * Caps: request/answer bodies 4,000,000 bytes, one SSE event 4,000,000 bytes, tools/list at
 * most 32 pages and 1000 tools, a tool result text result_max bytes with Agenta's note.
 *
 * Errors: functions return -errno (-EACCES/-EINVAL/-EHOSTUNREACH from the SSRF check,
 * -ETIMEDOUT, -ECANCELED, -EPROTO for a broken answer, -EIO otherwise) with a message naming
 * the server in err. mcp_client_call() turns every failure of the tool itself into a result
 * with is_error instead, and returns <0 only for -ECANCELED and -ENOMEM.
 *
 * Threads: a client is used by one thread at a time (it owns one CURL handle).
 */
#ifndef AR_MCP_CLIENT_H
#define AR_MCP_CLIENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "tools/ssrf_guard.h"
#include "tools/tool_spec.h"

#define MCP_PROTOCOL_VERSION "2025-06-18"
#define MCP_BODY_MAX 4000000u
#define MCP_LIST_PAGES_MAX 32
#define MCP_LIST_TOOLS_MAX 1000
#define MCP_TIMEOUT_DEFAULT_MS 30000u
#define MCP_CLIENT_HEADERS_MAX 32

/* One server of the request's mcpServers, with its header lines (values included). */
struct mcp_client_config {
    char *name;
    char *url;
    char *headers[MCP_CLIENT_HEADERS_MAX]; /* "Name: value" */
    size_t nheaders;
    char *secrets[MCP_CLIENT_HEADERS_MAX]; /* the credential values (for redaction) */
    size_t nsecrets;
};

/*
 * Read mcpServers[index] (json borrowed) into *ret: connection.url, connection.headers
 * {name: value} and connection.credentials [{binding:{kind:"header", name}, value,
 * usage:"opaque_http"}]. Header names must be tokens, values free of CR/LF, names unique
 * (case-insensitively) and none of the transport's own (Accept, Content-Type, Host,
 * Content-Length, Transfer-Encoding, Connection, Expect, Mcp-Session-Id,
 * MCP-Protocol-Version). -EINVAL + err naming the server and the header, never its value.
 */
int mcp_client_config_from_json(json_object *server, size_t index, struct mcp_client_config *ret,
                                char *err, size_t errlen);
void mcp_client_config_release(struct mcp_client_config *cfg);

struct mcp_client_options {
    struct ssrf_policy ssrf;  /* allowlist and resolver (NULL resolver = getaddrinfo) */
    const char *ca_file;      /* CA bundle for https (tests), NULL = the system's */
    uint64_t timeout_ms;      /* initialize and tools/list; 0 = 30 s */
    const atomic_int *cancel; /* or NULL */
};

struct mcp_client;

/* Check, connect and initialize. cfg is copied. */
int mcp_client_open(const struct mcp_client_config *cfg, const struct mcp_client_options *opt,
                    struct mcp_client **ret, char *err, size_t errlen);
/* Every tool the server lists (all pages), as a new array of its Tool objects. */
int mcp_client_list_tools(struct mcp_client *c, json_object **ret, char *err, size_t errlen);
/*
 * tools/call of the server's tool `tool` (its own name) with args (borrowed, NULL = {}).
 * timeout_ms 0 = the client's; result_max 0 = 100,000.
 */
int mcp_client_call(struct mcp_client *c, const char *tool, json_object *args,
                    uint64_t timeout_ms, const atomic_int *cancel, size_t result_max,
                    struct tool_result *ret);
/* End the session (DELETE, best effort, short deadline) and free. NULL is a no-op. */
void mcp_client_close(struct mcp_client *c);
/* The protocol version the server agreed to and the session id ("" when none). */
const char *mcp_client_protocol(const struct mcp_client *c);
const char *mcp_client_session(const struct mcp_client *c);

/*
 * A CallToolResult as a tool result: the text of its content items joined by newlines
 * (image/audio/resource items as short markers, an embedded text resource as its text), the
 * structuredContent JSON when there is no text, isError kept; capped at result_max.
 */
int mcp_client_render_result(json_object *result, size_t result_max, struct tool_result *ret);

/*
 * Server-Sent Events, parsed incrementally (WHATWG rules: lines end in LF, CRLF or CR; "data"
 * lines join with LF; a blank line dispatches; ':' starts a comment; "event" names the type).
 * on_event returns 0 to go on, 1 to stop, <0 to fail; feed returns the same.
 */
struct mcp_client_sse {
    struct buf line;
    struct buf data;
    char event[64];
    bool has_data;
    bool after_cr;
    int (*on_event)(void *ctx, const char *event, const char *data, size_t len);
    void *ctx;
};

void mcp_client_sse_init(struct mcp_client_sse *s, size_t max,
                         int (*on_event)(void *ctx, const char *event, const char *data,
                                         size_t len),
                         void *ctx);
int mcp_client_sse_feed(struct mcp_client_sse *s, const char *data, size_t len);
void mcp_client_sse_release(struct mcp_client_sse *s);

#endif
