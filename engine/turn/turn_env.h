/*
 * turn_env — the types a turn runs on (no code): the harness connection (struct turn_env, the
 * environment layer's or a test's fake), the options of one prompt (struct turn_options), the
 * runner tools as the turn sees them (struct turn_tools) and what a paused or cancelled turn
 * leaves (struct turn_outcome). run_turn.h runs a turn on them; turn_loop.h and turn_tools.h,
 * the parts of its loop, and the environment, which provides the connection, need only these.
 */
#ifndef AR_TURN_ENV_H
#define AR_TURN_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "core/contracts.h"
#include "core/policy.h"
#include "proto/acp.h"
#include "proto/tool_channel.h"
#include "turn/run_limits.h"

/* recv's value for a message of the keeper channel (0: an ACP message of the harness) */
#define TURN_RECV_TOOL 1
/* ... and for one of the model gateway (turn_model.h): method TURN_MODEL_CALL with the call's
 * report as params, or TURN_MODEL_SYNCED */
#define TURN_RECV_MODEL 2
#define TURN_MODEL_CALL "model/call"
#define TURN_MODEL_SYNCED "model/synced"

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
    /*
     * Optional (NULL: no model gateway): ask the keeper for a TURN_MODEL_SYNCED message behind
     * every model call report it has now (turn_model.h).
     */
    int (*model_sync)(void *ctx);
    const char *acp_session; /* the ACP session the turn runs in */
    const char *cwd;         /* the harness's working folder (NULL: SANDBOX_WORKSPACE) */
};

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
    /*
     * A turn adopted from a dead worker (engine_turns.c): its prompt (this request id) is
     * already in flight, nothing is sent; the lines the keeper kept since arrive first.
     */
    int64_t adopt_prompt_id;
    /* the run's tools (tool/call on the channel); NULL: none (a call gets an error result) */
    const struct turn_tools *tools;
    enum harness_kind harness; /* how the harness names runner tools in its own reports */
    /*
     * The model gateway measures the turn's usage (README "The model gateway"): usage events
     * and the result's usage come from its reports, what the harness reports is a cross-check
     * (turn_model.h). prices: the operator's price table (may be NULL: cost unknown).
     */
    bool measured;
    json_object *prices;
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
    /* measured turns: the harness's own usage report differed from the gateway's */
    bool usage_mismatch;
    struct run_usage reported; /* what the harness reported (with usage_mismatch) */
    bool cancelled;
    bool limit_tripped;
    int64_t prompt_id;
    struct approval_gate gates[APPROVAL_GATES_MAX];
    size_t ngates;
};

#endif
