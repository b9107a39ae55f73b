/*
 * turn_tools — the runner's tools inside a turn. Each sandbox reaches its keeper through one
 * channel (a unix socket bound into it, never the network): pi through our extension, claude,
 * codex and opencode through our stdio MCP server `agenta-tools`. The keeper forwards each
 * tool/call to the worker running the turn, where it lands here: it is announced with the
 * runner's own tool_call event (the spec's render hint), gated like any permission request —
 * the spec's own permission, its MCP server's, the plan, a decision stored in the transcript —
 * and then run (allow: a callback or direct HTTP call, or a user MCP server the runner itself
 * is the client of), refused (deny: denied tool_result), parked for the user (ask) or handed
 * to the browser (client tools: interaction_request "client_tool"); a parked call keeps its
 * tool/call open until the request that answers it resumes the turn. Every failure of a tool
 * is a tool result the model reads, never a failed turn. The harness never connects to an MCP
 * server or a callback itself.
 *
 * Part of run_turn's loop (turn_loop.h): the functions run on the turn's thread; executing a
 * call blocks it (the executor polls the turn's cancel every 100 ms).
 */
#ifndef AR_TURN_TOOLS_H
#define AR_TURN_TOOLS_H

#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include "proto/acp.h"
#include "proto/tool_channel.h"
#include "turn/turn_loop.h"

/* A tool/call of the keeper channel (m its message, tm decoded). */
void turn_tools_on_call(struct turn_loop *L, const struct acp_msg *m,
                        const struct tool_channel_msg *tm, int64_t now);
/* Answer a parked gate: the client's decision (or the browser's answer), or cancelled. */
void turn_tools_answer_parked(struct turn_loop *L, const struct approval_gate *g,
                              enum turn_channel_answer a);
/* A carried-forward gate's interaction_request again (the same token; a permission gate's or
 * a parked call's with its stashed arguments). */
json_object *turn_tools_reannounce(struct turn_loop *L, const struct approval_gate *g);
/* turn_state.is_runner for pi: is `name` one of the run's tools (ctx: struct turn_tools)? */
bool turn_tools_runner_named(void *ctx, const char *name);

#endif
