/*
 * tool_runner — one run's tools on the worker: the tool set of the request (tool_spec), the MCP
 * clients of its servers (mcp_client), one libcurl handle for the callback, and the thread
 * that runs a call.
 *
 * Lifecycle of a run:
 *   tool_runner_new       pure, and it cannot refuse (the request parser checked the tools in
 *                         full: request/request_tools.h): the tool set built once, for the turn;
 *   tool_runner_connect   I/O: each MCP server checked by the SSRF guard (https, no private,
 *                         loopback, link-local or metadata address after DNS unless the host
 *                         is on the allowlist), initialized and listed; its tools join the set
 *                         (include lists applied). Any failure names the server. A cold turn
 *                         connects before the sandbox starts (the sandbox's tool list needs
 *                         the listing); a warm turn connects at its first call of an unknown
 *                         tool (tool_runner_find);
 *   tool_runner_public_json  the specs the sandbox sees (RUNNER_TOOLS_FILE): names, descriptions
 *                         and schemas only;
 *   tool_runner_exec      one call of a callback, direct or MCP tool, on a thread of its own
 *                         while the caller polls `stop` every 100 ms (a POST /cancel raises the
 *                         transfer's cancel flag); every failure of the tool is a result with
 *                         is_error, never a failed turn.
 *
 * Credentials (toolCallback.authorization, MCP header values) live here and in the executors
 * only: they are registered for log redaction on every thread that runs a call and never
 * appear in a result, an error message or the public specs.
 *
 * Threads: one turn thread uses a runner at a time (a call's own thread runs only while
 * tool_runner_exec waits for it).
 */
#ifndef AR_TOOL_RUNNER_H
#define AR_TOOL_RUNNER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "core/contracts.h"
#include "proto/tool_result.h"
#include "tools/ssrf_guard.h"
#include "tools/tool_spec.h"

/* Where the sandbox finds the public specs (a file in its private home). */
#define TOOL_RUNNER_TOOLS_FILE SANDBOX_HOME "/.agent-runner/tools.json"
#define TOOL_RUNNER_RESOLVE_MAX 16

struct tool_runner;

/* The test-only "name=address,..." resolver override, parsed (AGENT_RUNNER_TOOLS_TEST_RESOLVE). */
struct tool_runner_resolve {
    char host[TOOL_RUNNER_RESOLVE_MAX][256];
    char addr[TOOL_RUNNER_RESOLVE_MAX][46];
    size_t n;
};

/*
 * Parse "name=address[,name=address...]" (addresses IPv4 or IPv6 literals). -EINVAL + err
 * naming the entry at fault.
 */
int tool_runner_resolve_parse(const char *spec, struct tool_runner_resolve *ret, char *err,
                              size_t errlen);
/* An ssrf_resolve_fn: the override's address for a listed name, else getaddrinfo(3). */
int tool_runner_resolve_fn(void *ctx, const char *host, struct sockaddr_storage *out,
                           size_t max, size_t *ret_n);

/* The request's tools as a runner (no I/O); *ret is NULL when the run has none. -ENOMEM. */
int tool_runner_new(const struct tools_config *cfg, const struct run_request *req,
                    struct tool_runner **ret, char *err, size_t errlen);
void tool_runner_free(struct tool_runner *r);

/* The run offers the harness tools (custom tools or MCP servers): agenta-tools / the file. */
bool tool_runner_any(const struct tool_runner *r);

/* Open and list every MCP server (once). err names the server that failed. */
int tool_runner_connect(struct tool_runner *r, char *err, size_t errlen);

/* [{name, description, inputSchema}] appended to out. */
int tool_runner_public_json(const struct tool_runner *r, struct buf *out);

/*
 * The tool the harness calls `name`. A name the set does not hold makes an unconnected runner
 * connect first (a warm turn); -ENOENT when it is still unknown, other errors with err naming
 * the MCP server that could not be reached.
 */
int tool_runner_find(struct tool_runner *r, const char *name, const struct tool_spec **ret,
                     char *err, size_t errlen);

/*
 * Run a call of spec (callback, direct or MCP) with the model's args. session_id is the live
 * session id for $ctx.session.id (may be NULL). stop is polled every 100 ms from the calling
 * thread (may be NULL): true ends the call, -ECANCELED with no result. 0 and *ret otherwise.
 */
int tool_runner_exec(struct tool_runner *r, const struct tool_spec *spec, const char *call_id,
                     json_object *args, const char *session_id, bool (*stop)(void *ctx),
                     void *stop_ctx, struct tool_result *ret);

#endif
