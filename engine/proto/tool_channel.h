/*
 * tool_channel — the one definition of the keeper channel protocol, used by both ends: the
 * runner (worker/keeper) and the sandbox side (agent-runner-mcp here; pi's extension speaks
 * the same lines in JavaScript).
 *
 * Transport: a unix stream socket the keeper hands the harness side (an inherited descriptor,
 * $RUNNER_CHANNEL_FD; on a remote sandbox a relay's socket at $RUNNER_CHANNEL): no secret,
 * the connection itself is the capability (keeper_channel.h). Newline-delimited JSON-RPC 2.0
 * (the acp line codec); ids are chosen by the sandbox side. Sandbox -> runner:
 *
 *   request  hello            {client: "pi-extension"|"agenta-tools-mcp", version}
 *                             -> {protocol: 1}    (first on every connection)
 *   request  tool/permission  {toolCallId, toolName, input}
 *                             -> {outcome: "allow"} | {outcome: "deny", message}
 *                                | {outcome: "cancelled"}          (may take minutes)
 *   request  tool/call        {toolCallId, toolName, arguments}
 *                             -> {content: [{type: "text", text}], isError: bool}
 *                                                                  (may take minutes)
 *   notification usage, error (params passed through as they are)
 *
 * The list of tools the sandbox offers is the file named by $RUNNER_TOOLS_FILE (public specs,
 * tool_set_public_json()), never part of this protocol.
 *
 * Decoding is strict (the sandbox is hostile): a toolCallId is 1-256 bytes of [A-Za-z0-9._:|-],
 * a toolName 1-128 bytes of [A-Za-z0-9_.-], input/arguments an object (absent = {}), client
 * and version short strings. Every text a runner encodes is made valid UTF-8 first (an invalid
 * byte becomes U+FFFD): the other end parses with UTF-8 validation on.
 */
#ifndef AR_TOOL_CHANNEL_H
#define AR_TOOL_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "proto/acp.h"
#include "proto/tool_result.h"

#define TOOL_CHANNEL_PROTOCOL 1
#define TOOL_CHANNEL_LINE_MAX (8u * 1024 * 1024)
#define TOOL_CHANNEL_CALL_ID_MAX 256
#define TOOL_CHANNEL_TOOL_NAME_MAX 128

#define TOOL_CHANNEL_CLIENT_PI "pi-extension"
#define TOOL_CHANNEL_CLIENT_MCP "agenta-tools-mcp"

enum tool_channel_kind {
    TOOL_CHANNEL_HELLO = 1,
    TOOL_CHANNEL_PERMISSION,
    TOOL_CHANNEL_CALL,
    TOOL_CHANNEL_USAGE,
    TOOL_CHANNEL_ERROR,
};

enum tool_channel_outcome {
    TOOL_CHANNEL_ALLOW = 0,
    TOOL_CHANNEL_DENY,
    TOOL_CHANNEL_CANCELLED,
};

/* A decoded sandbox -> runner message; every pointer borrows from the acp_msg. */
struct tool_channel_msg {
    enum tool_channel_kind kind;
    json_object *id;          /* requests; NULL for notifications */
    const char *client;       /* hello */
    const char *version;      /* hello */
    const char *tool_call_id; /* permission, call */
    const char *tool_name;    /* permission, call */
    json_object *input;       /* permission: input, call: arguments; NULL = {} */
    json_object *params;      /* usage, error: the params as sent */
};

/* ---- runner side ------------------------------------------------------------------------ */

/*
 * Decode m (from acp_decode). -ENOENT for a request or notification of another method (answer
 * a request with -32601), -EINVAL + err for bad params (answer -32602 with err), -EBADMSG for
 * a response (the sandbox never answers anything).
 */
int tool_channel_decode(const struct acp_msg *m, struct tool_channel_msg *ret, char *err,
                        size_t errlen);

int tool_channel_encode_hello_result(struct buf *out, json_object *id);
int tool_channel_encode_permission_result(struct buf *out, json_object *id,
                                          enum tool_channel_outcome outcome, const char *message);
int tool_channel_encode_call_result(struct buf *out, json_object *id, const char *text,
                                    bool is_error);
/*
 * The result object of a tools/call, as MCP shapes it and both ends of the channel send it:
 * {"content":[{"type":"text","text":<text made valid UTF-8>}],"isError":is_error}. A new
 * reference; NULL on out of memory.
 */
json_object *tool_channel_call_result_new(const char *text, bool is_error);

/* ---- sandbox side ----------------------------------------------------------------------- */

int tool_channel_encode_hello(struct buf *out, int64_t id, const char *client, const char *version);
int tool_channel_encode_call(struct buf *out, int64_t id, const char *tool_call_id,
                             const char *tool_name, json_object *arguments);
/*
 * The answer to a tool/call: its text and isError. A JSON-RPC error becomes an error result
 * holding its message; a malformed result is -EBADMSG.
 */
int tool_channel_decode_call_result(const struct acp_msg *m, struct tool_result *ret);
/* The answer to hello: 0 when the runner speaks TOOL_CHANNEL_PROTOCOL, else -EPROTO + err. */
int tool_channel_decode_hello_result(const struct acp_msg *m, char *err, size_t errlen);

/* ---- shared ----------------------------------------------------------------------------- */

bool tool_channel_call_id_ok(const char *s);
bool tool_channel_tool_name_ok(const char *s);
/* text[0..len) with every invalid UTF-8 sequence (and NUL) replaced by U+FFFD, appended. */
int tool_channel_utf8_clean(const char *text, size_t len, struct buf *out);

#endif
