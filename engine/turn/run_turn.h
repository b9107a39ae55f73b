/*
 * run_turn — one turn on an environment: open (or reuse) the ACP session, send the prompt,
 * translate the harness's session/update notifications into AgentEvents as they arrive
 * (turn_translate), answer the harness's requests, race every wait against the run limits,
 * and fill the result.
 *
 * The environment is reached through struct turn_env (turn_env.h: send a line, receive the
 * next ACP message before a deadline, mint a request id): the environment layer provides the
 * real one, the unit tests a scripted fake. The same connection carries the sandbox's keeper
 * channel (harnesses/extension/PROTOCOL.md): its requests are gated, answered or handed to hooks
 * here (turn_channel.h), its answers go back through send_tool.
 */
#ifndef AR_RUN_TURN_H
#define AR_RUN_TURN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "core/contracts.h"
#include "core/policy.h"
#include "proto/acp.h"
#include "proto/tool_channel.h"
#include "turn/events.h"
#include "turn/run_limits.h"
#include "turn/turn_env.h"
#include "turn/turn_translate.h"

/* What run_turn_open_session learned. */
struct turn_session {
    json_object *mcp_servers; /* in: session/new's mcpServers (borrowed; NULL = none) */
    char acp_session[128];
    json_object *agent_caps; /* initialize's agentCapabilities (a reference, or NULL) */
    bool channel_hello;      /* the keeper channel said hello while the session opened */
    bool channel_gating;     /* ... with gating on (pi's extension gates its tools) */
    /* in: reopen this earlier session of the harness with session/load (its files are in the
     * sandbox) when the agent advertises loadSession; NULL or "": session/new */
    const char *load_id;
    bool loaded;      /* out: session/load opened load_id */
    bool load_failed; /* out: session/load was asked and failed (the error is the return) */
};

/*
 * initialize + session/new or session/load (ret->load_id) (+ model selection) on a fresh
 * environment, before deadline. An agent without loadSession gets session/new.
 * Strict model selection: when model_id is set and the harness cannot end up on it, the turn
 * fails with AR_E_MODEL. err receives the reason. ret->agent_caps is the caller's to put.
 */
int run_turn_open_session(const struct turn_env *te, const char *model_id, bool strict,
                          int64_t deadline, struct turn_session *ret, char *err, size_t errlen);

/*
 * Run the prompt (or resume a parked one) to its end. Permission requests — ACP's
 * session/request_permission and the channel's tool/permission alike, through one gate — are
 * decided by the permission plan: allow -> "once", deny -> reject (the tool result says
 * denied), ask -> an interaction_request event and a pause: the turn ends with stopReason
 * "paused" after a short quiet period, leaving the requests unanswered. A turn that ends
 * without output after the channel reported a model error fails with that error. On success
 * res->stop_reason is set and ok is true; on failure the error event has been emitted and
 * res->error says why.
 * Returns 0 when the environment can be reused afterwards, <0 when it must be torn down
 * (limit tripped, harness gone, protocol error), AR_E_RETRY (see retry_if_silent).
 */
int run_turn_prompt(const struct turn_env *te, const struct turn_options *opt,
                    struct event_stream *es, struct run_result *res, struct turn_outcome *out);

#endif
