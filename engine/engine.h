/*
 * engine — the entry point of a turn.
 *
 * engine_prepare() refuses what can be refused before a response starts (uninstalled
 * harness, a request the harness cannot run, no user message, an impossible lifecycle) and
 * computes the turn's identity: pool key, config fingerprint, history fingerprint of the prior
 * conversation, credential epoch.
 *
 * engine_run() dispatches (DESIGN.md §4, reference/agenta-runner.md §3.15) and decides
 * whether to park; the pool (the session module) does the slot mechanics, environment the
 * keepers, transcript the approval lookups and prompts, run_turn the turn itself:
 *   - no pool key, or a per-turn policy: cold, destroyed after the turn;
 *   - an idle environment whose identity still matches and a fresh user message: warm — only
 *     the new user text is sent to the live harness; a failure before the harness said
 *     anything retries cold once;
 *   - any mismatch: the old environment is torn down with its named reason, then cold (the
 *     transcript is replayed as text when there is earlier history);
 *   - a busy environment of the same session is superseded.
 * After a successful turn under a warm policy the environment is parked in the pool (capacity:
 * the least recently used idle one is evicted when full; if every parked one is busy or
 * awaiting approval, this one is not kept). Every stream ends with `done` once the turn
 * started, and the result is always filled.
 */
#ifndef AR_ENGINE_H
#define AR_ENGINE_H

#include <stdbool.h>
#include <stddef.h>

#include "agenta/platform.h"
#include "core/contracts.h"
#include "core/policy.h"
#include "harness/harness.h"
#include "session/identity.h"
#include "session/pool.h"
#include "turn/events.h"

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
};

int engine_prepare(const struct engine_config *cfg, struct run_request *req,
                   struct engine_turn *ret, char *err, size_t errlen);
void engine_turn_release(struct engine_turn *t);

/* Run the prepared turn; events go to es, the outcome to res (initialised by the caller). */
void engine_run(struct engine_turn *t, struct event_stream *es, struct run_result *res);

/*
 * Destroy the environment of key (warm, parked or running) and wait for the teardown.
 * 0 also when there was none (idempotent).
 */
int engine_kill_session(const struct engine_config *cfg, const char *key,
                        enum teardown_reason reason);

/*
 * POST /cancel: stop the session's current turn but keep its environment warm. A running turn
 * is flagged (it sends session/cancel and ends with stopReason cancelled); a turn parked on
 * approvals gets its gates answered "cancelled". -ENOENT when the session is not held here.
 * A target_turn that is not the running one is a no-op.
 */
int engine_cancel_session(const struct engine_config *cfg, const char *key,
                          const char *target_turn);

/*
 * Admission (the front asks before it reads a /run body): count one run in flight on this
 * worker's entry; false, counted as rejected, when that makes more than max_runs in flight
 * over all workers or more than worker_max on this worker (whose threads beyond it stay free
 * for /health, /livez, /readyz, /kill, /cancel and /metrics). Every admitted run is released
 * once.
 */
bool engine_admit(const struct engine_config *cfg, int inflight_slot, uint64_t max_runs,
                  uint64_t worker_max);
void engine_admit_release(const struct engine_config *cfg, int inflight_slot);
uint64_t engine_runs_in_flight(const struct engine_config *cfg);

/* Harness names (as /health lists them) that are installed under cfg. */
json_object *engine_installed_harnesses(const struct engine_config *cfg);

#endif
