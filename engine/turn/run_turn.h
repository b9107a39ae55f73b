/*
 * run_turn — one turn on an environment: open (or reuse) the ACP session, send the prompt,
 * translate the harness's session/update notifications into AgentEvents as they arrive
 * (turn_translate), answer the harness's requests, race every wait against the run limits,
 * and fill the result.
 *
 * The environment is reached through struct turn_env (send a line, receive the next ACP
 * message before a deadline, mint a request id): environment.c provides the real one, the
 * unit tests a scripted fake. The same connection carries the sandbox's keeper channel
 * (harnesses/extension/PROTOCOL.md): its requests are gated, answered or handed to hooks here
 * (turn_channel.h), its answers go back through send_tool.
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
#include "turn/turn_translate.h"

/* recv's value for a message of the keeper channel (0: an ACP message of the harness) */
#define TURN_RECV_TOOL 1

/*
 * The harness connection a turn talks to. send writes one ACP line (-AR_E_HARNESS_EXITED when
 * it is gone), send_tool one keeper channel line (NULL: no channel); recv returns the next
 * message, 0 for the harness's ACP, TURN_RECV_TOOL for the channel's, -ETIMEDOUT at
 * deadline_ms (CLOCK_MONOTONIC, 0 = none), AR_E_HARNESS_EXITED / AR_E_PROTOCOL when the
 * connection is over; exited tells whether the harness itself went away (and its status).
 */
struct turn_env {
    void *ctx;
    int (*send)(void *ctx, const struct buf *line);
    int (*send_tool)(void *ctx, const struct buf *line);
    int (*recv)(void *ctx, int64_t deadline_ms, struct acp_msg *ret);
    int64_t (*next_id)(void *ctx);
    bool (*exited)(void *ctx, int *ret_status);
    /*
     * Optional: why the connection is over when the environment knows more than "the harness
     * exited" (a sandbox limit, the keeper's own reason, a dead keeper): a message and the
     * error event's code ("sandbox_memory_limit", ...); false when it knows nothing more.
     */
    bool (*failure)(void *ctx, char *msg, size_t msglen, const char **ret_code);
    const char *acp_session; /* the ACP session the turn runs in */
    const char *cwd;         /* the harness's working folder (NULL: SANDBOX_WORKSPACE) */
};

/* What run_turn_open_session learned. */
struct turn_session {
    json_object *mcp_servers; /* in: session/new's mcpServers (borrowed; NULL = none) */
    char acp_session[128];
    json_object *agent_caps; /* initialize's agentCapabilities (a reference, or NULL) */
    bool channel_hello;      /* the keeper channel said hello while the session opened */
    bool channel_gating;     /* ... with gating on (pi's extension gates its tools) */
};

/*
 * initialize + session/new (+ model selection) on a fresh environment, before deadline.
 * Strict model selection: when model_id is set and the harness cannot end up on it, the turn
 * fails with AR_E_MODEL. err receives the reason. ret->agent_caps is the caller's to put.
 */
int run_turn_open_session(const struct turn_env *te, const char *model_id, bool strict,
                          int64_t deadline, struct turn_session *ret, char *err, size_t errlen);

struct turn_options {
    json_object *prompt; /* array of ACP content blocks (borrowed); NULL when resuming */
    /* resume a parked approval: the in-flight prompt and its gates (decision -1 = carried) */
    int64_t resume_prompt_id;
    const struct approval_gate *resume;
    size_t nresume;
    /* a decision for (tool, args) already stored in the transcript, or PERMISSION_UNSET */
    enum permission (*stored)(void *ctx, const char *tool, json_object *args);
    void *stored_ctx;
    /* polled while the turn runs: true stops it (session/cancel, gates answered cancelled) */
    bool (*should_cancel)(void *ctx);
    void *cancel_ctx;
    const struct run_limits_config *limits;
    json_object *permissions; /* the request's permission plan, borrowed, may be NULL */
    bool (*is_noise)(const char *text);
    /* a failure before any event of the turn returns AR_E_RETRY silently (warm turns) */
    bool retry_if_silent;
    /* the run's tools (tool/call on the channel); NULL: none (a call gets an error result) */
    const struct turn_tools *tools;
    enum harness_kind harness; /* how the harness names runner tools in its own reports */
};

struct tool_spec;

/*
 * Runner tools as the turn sees them (the engine implements them with tool_runner, the
 * environment folder and the request's transcript; unit tests with fakes). A tool/call is
 * gated here like any permission request (tool_spec_gate: the spec's permission, its MCP
 * server's, the plan), then executed, denied, parked for approval ("ask") or handed to the
 * browser (client tools), and answered on the channel with the tool's result; the turn emits
 * tool_call / tool_result for it with the spec's render hint.
 */
struct turn_tools {
    /* the spec the harness calls name: 0, or <0 with err saying why (an error result) */
    int (*find)(void *ctx, const char *name, const struct tool_spec **ret, char *err,
                size_t errlen);
    /* run a callback, direct or MCP tool (blocking; stop polled): 0 + *ret, or -ECANCELED */
    int (*exec)(void *ctx, const struct tool_spec *spec, const char *call_id, json_object *args,
                bool (*stop)(void *stop_ctx), void *stop_ctx, struct tool_result *ret);
    /* keep a parked call's arguments under its gate's token for the turn that resumes it */
    int (*stash)(void *ctx, const char *token, json_object *args);
    /* ... and take them back (a new reference, NULL when gone) */
    json_object *(*unstash)(void *ctx, const char *token);
    /*
     * The browser's result for a client tool call in the request (a tool_result naming the
     * call, or one for the same tool and arguments): a new reference and *ret_is_error, or
     * NULL.
     */
    json_object *(*client_output)(void *ctx, const char *call_id, const char *tool,
                                  json_object *args, bool *ret_is_error);
    void *ctx;
};

struct turn_outcome {
    bool paused; /* stopReason paused: gates[] wait for approval, the prompt is in flight */
    bool cancelled;
    bool limit_tripped;
    int64_t prompt_id;
    struct approval_gate gates[APPROVAL_GATES_MAX];
    size_t ngates;
};

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
