/*
 * turn_channel — the worker's end of the keeper channel inside a turn, the pure part
 * (harnesses/extension/PROTOCOL.md; the codec is tool_channel.h, the keeper's relay
 * keeper_channel.h). run_turn.c feeds it decoded channel messages and sends what it encodes.
 *
 *   tool/permission  the SAME gate as an ACP session/request_permission: turn_channel_gate
 *                    gives the permission plan's view of the call (pi's built-ins carry their
 *                    read-only flag) and an ACP-shaped request (toolCall, options) for the
 *                    approval events; turn_channel_answer encodes allow / deny / cancelled.
 *   usage            one model call's usage (turn_channel_usage)
 *   error            a failed model call as the harness tells it (turn_channel_error): the
 *                    turn fails when it ends without output, with the harness's text labelled
 *                    as the harness's and code "harness_error", never a runner code such as
 *                    model_unavailable (what the harness says is not what the runner saw)
 *   hello            answered {protocol: 1}; its `gating` flag says pi's gate is in place
 *   tool/call        runner tools (turn_tools.h): the turn's tool_call hook, else an error
 *                    result
 * Outside a turn (while a session opens) turn_channel_outside answers requests as the keeper
 * would between turns.
 */
#ifndef AR_TURN_CHANNEL_H
#define AR_TURN_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "core/contracts.h"
#include "core/policy.h"
#include "proto/tool_channel.h"

#define TURN_CHANNEL_NO_TOOLS "agent-runner: no runner tools in this run"
#define TURN_CHANNEL_ERROR_LABEL "the harness reported: "
#define TURN_CHANNEL_ERROR_CODE "harness_error"

/* What a gate answers: the plan's allow, its deny (or the user's), or cancelled. */
enum turn_channel_answer { TURN_CHANNEL_ALLOW = 0, TURN_CHANNEL_DENY, TURN_CHANNEL_CANCELLED };

/*
 * The gate of a tool/permission: pg borrows from m (tool name, input as args); *ret_params is
 * a new ACP-shaped permission request {toolCall: {toolCallId, title, kind, rawInput}, options:
 * [allow_once "once", reject_once "reject"]} for the interaction events (NULL on ENOMEM).
 */
void turn_channel_gate(const struct tool_channel_msg *m, struct permission_gate *pg,
                       json_object **ret_params);
/* The answer to a tool/permission whose id is id_json (JSON text); the deny message names
 * the tool and who denied it. -EINVAL for an id that does not parse. */
int turn_channel_answer(struct buf *out, const char *id_json, enum turn_channel_answer a,
                        const char *tool_name, bool by_user);
/*
 * A usage notification's counts: input, output, cacheRead, cacheWrite, total and cost, each a
 * non-negative number (anything else counts 0); total defaults to the sum of the counts.
 */
void turn_channel_usage(json_object *params, struct run_usage *ret);
/* An error notification: its message (made one line, capped) after TURN_CHANNEL_ERROR_LABEL,
 * and the code TURN_CHANNEL_ERROR_CODE whatever the notification's own code says. */
void turn_channel_error(json_object *params, char *msg, size_t msglen, const char **ret_code);
/*
 * Answer a channel request that arrives while no turn runs (a session opening): hello
 * {protocol: 1} (*ret_gating: its gating flag), tool/permission cancelled, tool/call an error
 * result; malformed requests -32601/-32602. Notifications need no answer: out stays empty.
 * Returns 1 for a hello, 0 otherwise.
 */
int turn_channel_outside(const struct acp_msg *m, struct buf *out, bool *ret_gating);

#endif
