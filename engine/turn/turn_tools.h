/*
 * turn_tools — the runner's tools inside a turn (DESIGN.md §6a; reference/agenta-runner.md
 * §3.21, §3.24): a tool/call from the keeper channel (pi's extension, or the agenta-tools MCP
 * bridge of claude, codex and opencode) is announced with the runner's own tool_call event
 * (the spec's render hint), gated like any permission request — the spec's own permission,
 * its MCP server's, the plan, a decision stored in the transcript — and then run (allow),
 * refused (deny: denied tool_result), parked for the user (ask) or handed to the browser
 * (client tools: interaction_request "client_tool"); a parked call keeps its tool/call open
 * until the request that answers it resumes the turn. Every failure of a tool is a tool
 * result the model reads, never a failed turn.
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
