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
#include "run_limits.h"

struct turn_tool {
    char *id;
    char *name;
    char *input; /* compact JSON of the last rawInput sent */
    bool done;
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
    json_object *prompt; /* array of ACP content blocks (borrowed) */
    const struct run_limits_config *limits;
    json_object *permissions; /* the request's permission plan, borrowed, may be NULL */
    bool cancel_on_client_gone;
    bool (*is_noise)(const char *text);
    /* a failure before any event of the turn returns AR_E_RETRY silently (warm turns) */
    bool retry_if_silent;
};

/*
 * Run the prompt to its end. On success res->stop_reason is set and ok is true; on failure the
 * error event has been emitted and res->error says why. Returns 0 when the environment can be
 * reused afterwards, <0 when it must be torn down (limit tripped, harness gone, protocol error).
 */
int run_turn_prompt(struct environment *env, const struct turn_options *opt,
                    struct event_stream *es, struct run_result *res);

#endif
