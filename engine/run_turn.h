/*
 * run_turn — one turn on an environment: open (or reuse) the ACP session, send the prompt,
 * translate the harness's session/update notifications into AgentEvents as they arrive,
 * answer the harness's requests, race every wait against the run limits, and fill the result.
 *
 * The translation (turn_translate_update) is pure: it reads one ACP `update` object and
 * emits zero or more events into the stream, keeping the small state it needs (open text
 * block, known tool calls) in struct turn_state. Message and thought blocks never overlap:
 * starting one closes the other.
 */
#ifndef AR_RUN_TURN_H
#define AR_RUN_TURN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "contracts.h"
#include "environment.h"
#include "events.h"
#include "policy.h"
#include "pool.h"
#include "run_limits.h"

struct turn_tool {
    char *id;
    char *name;
    char *input; /* compact JSON of the last rawInput sent */
    bool done;
    bool denied; /* its permission was refused: its result says denied */
};

struct turn_state {
    int open; /* 0 none, 1 message, 2 thought */
    unsigned msg_seq;
    unsigned thought_seq;
    char open_id[32];
    struct turn_tool *tools;
    size_t ntools;
    size_t cap_tools;
    struct run_limits *limits; /* may be NULL */
    bool (*is_noise)(const char *text); /* drop such message chunks (may be NULL) */
};

void turn_state_init(struct turn_state *st, struct run_limits *limits);
void turn_state_release(struct turn_state *st);

/* Translate one ACP SessionUpdate; output text is appended to res->output. */
int turn_translate_update(struct turn_state *st, json_object *update, struct event_stream *es,
                          struct run_result *res);
/* Close an open message/thought block (emits *_end). */
void turn_close_block(struct turn_state *st, struct event_stream *es);

/* Map an initialize result's agentCapabilities onto the result's capability flags. */
void turn_caps_from_agent(json_object *agent_caps, enum harness_kind kind,
                          struct harness_caps *caps);

/* Capability flags as stored in a pool slot. */
uint32_t turn_caps_to_bits(const struct harness_caps *caps);
void turn_caps_from_bits(uint32_t bits, struct harness_caps *caps);

/*
 * initialize + session/new (+ model selection) on a fresh environment, before deadline.
 * Strict model selection: when model_id is set and the harness cannot end up on it, the turn
 * fails with AR_E_MODEL. err receives the reason.
 */
int run_turn_open_session(struct environment *env, const char *model_id, bool strict,
                          int64_t deadline, char *err, size_t errlen);

struct turn_options {
    json_object *prompt; /* array of ACP content blocks (borrowed); NULL when resuming */
    /* resume a parked approval: the in-flight prompt and its gates (decision -1 = carried) */
    int64_t resume_prompt_id;
    const struct pool_approval *resume;
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
};

struct turn_outcome {
    bool paused; /* stopReason paused: gates[] wait for approval, the prompt is in flight */
    bool cancelled;
    bool limit_tripped;
    int64_t prompt_id;
    struct pool_approval gates[POOL_APPROVALS_MAX];
    size_t ngates;
};

/*
 * Run the prompt (or resume a parked one) to its end. Permission requests are decided by the
 * permission plan: allow -> "once", deny -> reject (the tool result says denied), ask -> an
 * interaction_request event and a pause: the turn ends with stopReason "paused" after a short
 * quiet period, leaving the harness's requests unanswered. On success res->stop_reason is set
 * and ok is true; on failure the error event has been emitted and res->error says why.
 * Returns 0 when the environment can be reused afterwards, <0 when it must be torn down
 * (limit tripped, harness gone, protocol error), AR_E_RETRY (see retry_if_silent).
 */
int run_turn_prompt(struct environment *env, const struct turn_options *opt,
                    struct event_stream *es, struct run_result *res, struct turn_outcome *out);

#endif
