/*
 * mcp_client — the runner as the MCP client of a user's HTTP MCP server (a request's
 * mcpServers entry; MCP 2025-06-18, Streamable HTTP transport).
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
 * The server's headers (connection.headers and the credentials bound as headers, which the
 * request parser checked) are applied here, runner-side, and nowhere else: header values never
 * enter the sandbox, a log line (they are added to the thread's redaction set) or an error message.
 *
 * Caps: request/answer bodies 4,000,000 bytes, one SSE event 4,000,000 bytes, tools/list at
 * most 32 pages and 1000 tools, a tool result text result_max bytes with Agenta's note.
 *
 * Errors: functions return -errno (-EACCES/-EINVAL/-EHOSTUNREACH from the SSRF check,
 * -ETIMEDOUT, -ECANCELED, -EPROTO for a broken answer, a transport failure as base/httpc.h
 * maps it: -ECONNREFUSED, -EHOSTUNREACH, -ECONNRESET, -EIO, ...) with a message naming
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
#include "core/contracts.h"
#include "proto/tool_result.h"
#include "tools/ssrf_guard.h"

#define MCP_PROTOCOL_VERSION "2025-06-18"
#define MCP_BODY_MAX 4000000u
#define MCP_LIST_PAGES_MAX 32
#define MCP_LIST_TOOLS_MAX 1000
#define MCP_TIMEOUT_DEFAULT_MS 30000u

struct mcp_client_options {
    struct ssrf_policy ssrf;  /* allowlist and resolver (NULL resolver = getaddrinfo) */
    const char *ca_file;      /* CA bundle for https (tests), NULL = the system's */
    uint64_t timeout_ms;      /* initialize and tools/list; 0 = 30 s */
    const atomic_int *cancel; /* or NULL */
};

struct mcp_client;

/* Check, connect and initialize server (a request's, checked: request/request_mcp.h; copied). */
int mcp_client_open(const struct mcp_server *server, const struct mcp_client_options *opt,
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

#endif
