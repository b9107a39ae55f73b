/*
 * mcp_bridge — the protocol core of agent-runner-mcp, the stdio MCP server named
 * "agenta-tools" that runs inside the sandbox for claude, codex and opencode (README "Tools").
 * No I/O here: the program (tools/agent_runner_mcp.c) feeds lines in and writes out what the
 * bridge queued, so the fuzz target drives exactly this code.
 *
 * From the harness (MCP over stdio, one JSON-RPC message per line):
 *   initialize  -> {protocolVersion: the client's when it sent one (as Agenta's loopback server
 *                  does), else 2025-06-18; capabilities: {tools: {listChanged: false}};
 *                  serverInfo: {name: "agenta-tools", version}}
 *   tools/list  -> {tools: the public specs of $RUNNER_TOOLS_FILE}
 *   tools/call  -> forwarded to the runner as tool/call; its answer becomes the result
 *                  ({content, isError}); an unknown tool is -32602 "unknown tool: <name>"
 *   ping -> {}; other requests -> -32601; notifications are taken (a notifications/cancelled
 *   drops the pending call: its late answer is discarded); a batch (array) -> -32600.
 * The toolCallId sent to the runner is the harness's own id when the call carries one in _meta
 * ("claudecode/toolUseId", or "toolCallId"/"tool_call_id") and it is a valid id, else
 * "agenta-tools-<n>-<random>".
 *
 * Towards the runner (tool_channel): `hello` first when the channel comes up; tool/call per
 * call. When the channel is down a tools/call asks the program to reconnect once, and fails
 * with a tool error saying so if it cannot; when the channel goes down with calls pending,
 * each is answered with a tool error ("the agent-runner channel closed ...: the outcome of
 * the call is unknown"). Nothing here ever holds a credential: the bridge knows only the
 * public specs.
 *
 * Bounds: at most MCP_BRIDGE_PENDING_MAX calls in flight (more get a tool error), output
 * queues capped (MCP_BRIDGE_OUT_MAX; a full queue is an error the program treats as fatal).
 */
#ifndef AR_MCP_BRIDGE_H
#define AR_MCP_BRIDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "core/contracts.h" /* RUN_TOOLS_MCP_NAME only: a header, no code to link */
#include "proto/tool_channel.h"

#define MCP_BRIDGE_NAME RUN_TOOLS_MCP_NAME
#define MCP_BRIDGE_VERSION "0.1.0"
#define MCP_BRIDGE_PROTOCOL "2025-06-18"
#define MCP_BRIDGE_PENDING_MAX 64
#define MCP_BRIDGE_OUT_MAX (64u * 1024 * 1024)
#define MCP_BRIDGE_TOOLS_FILE_MAX (16u * 1024 * 1024)
#define MCP_BRIDGE_TOOLS_MAX 1024

struct mcp_bridge_call {
    json_object *mcp_id; /* the harness's request id (a reference) */
    int64_t channel_id;  /* our id on the channel */
};

struct mcp_bridge {
    json_object *tools;          /* the public specs (array) */
    struct buf to_harness;       /* complete lines for stdout */
    struct buf to_runner;        /* complete lines for the channel */
    bool channel_up;
    char channel_error[256];     /* why the channel is down */
    int64_t next_id;
    int64_t hello_id;            /* 0 once answered */
    struct mcp_bridge_call pending[MCP_BRIDGE_PENDING_MAX];
    size_t npending;
    uint64_t calls;              /* for generated toolCallIds */
    char id_salt[17];
    /* (re)open the channel: 0 when it is up now, else -errno and a reason in err */
    int (*reconnect)(void *ctx, char *err, size_t errlen);
    void *reconnect_ctx;
};

/*
 * Load the public specs (the text of $RUNNER_TOOLS_FILE: [{name, description, inputSchema}]).
 * -EINVAL + err when it is not such a list (the program exits with that message).
 */
int mcp_bridge_init(struct mcp_bridge *b, const char *tools_json, size_t len, char *err,
                    size_t errlen);
void mcp_bridge_release(struct mcp_bridge *b);
/*
 * The inputSchema of a public spec whose tool declares none, {"type": "object", "properties":
 * {}, "additionalProperties": true}: a new object, NULL on out of memory. The runner writes
 * the tools file with it too (tool_spec.c), so both ends agree.
 */
json_object *mcp_bridge_empty_schema(void);

/* The channel is connected: queue hello. */
int mcp_bridge_channel_up(struct mcp_bridge *b);
/* The channel is gone (why is kept for later errors): every pending call gets a tool error. */
int mcp_bridge_channel_down(struct mcp_bridge *b, const char *why);

/* One line from the harness (without '\n'). <0 only for -ENOMEM / -E2BIG (fatal). */
int mcp_bridge_on_harness_line(struct mcp_bridge *b, const char *line, size_t len);
/* One line from the runner. <0 only for -ENOMEM / -E2BIG (fatal); junk is dropped. */
int mcp_bridge_on_runner_line(struct mcp_bridge *b, const char *line, size_t len);
/* A harness line longer than the program's cap: answer -32700, nothing else. */
int mcp_bridge_line_too_long(struct mcp_bridge *b);

#endif
