/*
 * engine_turn — the prepared turn (struct engine_turn), the one type the engine's top files
 * share: engine_prepare.c fills it, engine.c dispatches it, engine_start.c starts its
 * environment, engine_tools.c serves its tools. Types only: each of those files includes
 * this header and the headers of the files it calls, so the includes run one way
 * (engine.c -> engine_start.h, engine_tools.h -> engine_turn.h). The front sees the turn as
 * an opaque handle (engine.h).
 */
#ifndef AR_ENGINE_TURN_H
#define AR_ENGINE_TURN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/contracts.h"
#include "core/policy.h"
#include "harness/harness.h"
#include "session/identity.h"
#include "session/pool.h"

struct engine_keep;
struct platform;
struct tool_runner;
struct trace_run;

struct engine_turn {
    const struct engine_config *cfg;
    struct run_request *req; /* borrowed */
    const struct harness_ops *harness;
    struct sandbox_plan plan;
    char key[POOL_KEY_MAX]; /* "" = per-turn */
    uint8_t config_fp[IDENTITY_DIGEST_LEN];
    uint8_t prior_fp[IDENTITY_DIGEST_LEN];
    uint8_t epoch[IDENTITY_DIGEST_LEN];
    struct lifecycle_policy policy; /* for a new session; a live one keeps its admitted one */
    bool client_gone_cancels;       /* no sessionId: a gone client cancels the turn */
    struct platform *plat;          /* platform mode (platform.h), set while engine_run runs */
    struct tool_runner *tools;      /* the run's tools (NULL: none), owned */
    bool tools_file;                /* the sandbox's tool list is in the plan */
    struct trace_run *trace;        /* the run's trace while engine_run runs (may be NULL) */
    bool spare_ok; /* a new environment may be a claimed spare (spare_ineligible said NULL) */
    bool adopted;  /* carried on from a dead worker (engine_turns.h): runs as if detached */
    /* the warm slot the turn's journal names from its first line (engine_turns_journal_now) */
    bool journal_slot;
    uint32_t journal_slot_index;
    uint32_t journal_slot_generation;
    struct engine_keep *keep; /* a cold start's use of the kept harness state (engine_keep.h) */
    /* a per-turn environment whose turn ended: torn down after the result is sent
     * (engine_turn_free), never before; owned */
    struct environment *teardown;
    enum teardown_reason teardown_reason;
};

#endif
