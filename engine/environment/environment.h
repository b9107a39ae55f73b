/*
 * environment — a live sandbox + harness, reached through its keeper.
 *
 * environment_acquire() starts a new one: it reserves a slot in the session table, creates the
 * environment folder, runs env_setup, starts the keeper (which starts the sandbox), and
 * attaches to it. All of that is one error boundary: any failure rolls back everything done so
 * far (keeper, sandbox, folder, slot) before it returns.
 *
 * environment_reconnect() attaches to the keeper of a live slot the caller checked out.
 *
 * After a turn the caller either parks the environment (environment_park: the keeper keeps it
 * warm, the worker detaches) or destroys it (environment_destroy). Destroy is idempotent: the
 * keeper tears down once, and every caller returns only when that teardown has finished
 * (the keeper's socket closed or, for a keeper nobody is attached to, the keeper process gone).
 *
 * Messages: environment_send() writes one ACP line to the harness, environment_send_tool() one
 * line to the sandbox's keeper channel (tagged "@tool"); environment_recv() returns the next
 * message, waiting at most until deadline_ms (CLOCK_MONOTONIC ms; 0 = no deadline): 0 for an
 * ACP message of the harness, TURN_RECV_TOOL (run_turn.h) for one of the channel. Malformed
 * lines are skipped and counted; the keeper's own lines are handled here.
 */
#ifndef AR_ENVIRONMENT_H
#define AR_ENVIRONMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/contracts.h"
#include "environment/env_setup.h"
#include "harness/harness.h"
#include "proto/acp.h"
#include "provider/provider.h"
#include "session/pool.h"

struct environment {
    const struct engine_config *cfg;
    const struct provider_ops *provider;
    struct pool_handle h;
    bool has_slot;
    struct env_paths paths;
    pid_t keeper_pid;
    pid_t sandbox_pid;
    int fd;
    struct acp_lines lines;
    int64_t next_id;
    uint64_t malformed;
    bool harness_exited;
    int harness_status;
    bool destroyed;
    bool warm; /* reconnected to a live harness */
    bool from_spare; /* a claimed spare (environment_claim_spare) */
    bool keeper_lost;         /* the keeper's socket closed without "#exit" or "#fail" */
    char fail[192];           /* why the keeper ended the environment ("#fail"), or "" */
    const char *limit;        /* the sandbox limit that tripped ("sandbox_pids_limit"), or NULL */
    char limit_msg[192];      /* and what it says */
    int64_t next_limit_check; /* monotonic ms */
    char acp_session[128];
    json_object *agent_caps; /* initialize result agentCapabilities (owned) */
    json_object *lease_report; /* a remote provider's lease report (owned) or NULL */
    char cwd[1024];            /* the harness's working folder ("" = SANDBOX_WORKSPACE) */
    /* called before every wait for the harness (the turn flushes its events there) */
    void (*before_wait)(void *ctx);
    void *before_wait_ctx;
};

/*
 * Start a new environment for req with the harness plan. key is the pool key ("" for a
 * per-turn run). idle_ms is the keeper's idle window. had_lease: the session had a live
 * environment this turn could not use (a remote provider then reports a missing sandbox as a
 * replacement). On failure err names the problem and nothing is left behind;
 * AR_E_SANDBOX_CAPACITY when the sandbox provider refused for capacity.
 */
int environment_acquire(const struct engine_config *cfg, const struct run_request *req,
                        const struct sandbox_plan *plan, const char *key, uint64_t idle_ms,
                        bool per_turn, bool had_lease, struct environment **ret, char *err,
                        size_t errlen);

/*
 * Spares (spare.h, environment_spare.c). environment_start_spare: the master's spare maker
 * starts one spare of kind in a slot of its own (SLOT_SPARE once its keeper runs; the keeper
 * ends it, slot and all, after cfg->spare_ttl_ms unclaimed). Returns once the keeper is ready;
 * on failure nothing is left.
 *
 * environment_claim_spare: a new session's turn takes a ready spare instead of acquiring: the
 * slot (pool_spare_claim), the request's workspace files and the plan's home files written
 * into the running sandbox as its own uid, the keeper bound to the session ("#claim": idle
 * window, per-turn, the run's egress policy). The caller goes on with initialize / session/new
 * as after environment_acquire. -ENOENT when no spare is ready (nothing done); any other
 * failure has destroyed the spare (its slot is free again) and err says why: start cold.
 */
int environment_start_spare(const struct engine_config *cfg, enum harness_kind kind, char *err,
                            size_t errlen);
int environment_claim_spare(const struct engine_config *cfg, const struct run_request *req,
                            const struct sandbox_plan *plan, const char *key, uint64_t idle_ms,
                            bool per_turn, struct environment **ret, char *err, size_t errlen);

/* Attach to the keeper of the checked-out slot h (state busy, owned by the caller). */
int environment_reconnect(const struct engine_config *cfg, struct pool_handle h,
                          struct environment **ret, char *err, size_t errlen);

struct turn_env;
/* The turn's view of env (run_turn.h): valid while env lives. */
void environment_turn_env(struct environment *env, struct turn_env *ret);

int environment_send(struct environment *env, const struct buf *line);
int environment_send_tool(struct environment *env, const struct buf *line);
/* Encode and send a request with a fresh id; *ret_id receives the id. */
int environment_request(struct environment *env, const char *method, json_object *params,
                        int64_t *ret_id);
int environment_recv(struct environment *env, int64_t deadline_ms, struct acp_msg *ret);

/*
 * Keep it alive for window_ms and detach; awaiting: a prompt waits on approvals (its expiry is
 * approval-expiry). The slot must already be parked by the caller.
 */
int environment_park(struct environment *env, uint64_t window_ms, bool awaiting);
/*
 * Did the sandbox hit one of its limits (an OOM kill, a refused fork, a full workspace)?
 * 1 with env->limit and env->limit_msg set (and kept: a trip stays a trip), 0 when not (or
 * no probed host). environment_recv() asks every ENVIRONMENT_LIMIT_POLL_MS while it waits
 * and returns AR_E_SANDBOX_LIMIT on a trip; the engine asks again after every turn.
 */
#define ENVIRONMENT_LIMIT_POLL_MS 250
int environment_check_limits(struct environment *env);

/* Tear it down and wait for the teardown to finish (bounded). */
int environment_destroy(struct environment *env, enum teardown_reason reason);
/* Release the struct (does not tear down: destroy or park first). NULL is a no-op. */
void environment_free(struct environment *env);

/*
 * Tear down the environment of a slot that nobody is attached to (idle, parked, or whose
 * worker died): signal its keeper and wait until it is gone. Used by eviction, /kill and the
 * master. keeper_pid/start identify the process (pids are reused).
 */
int environment_destroy_keeper(pid_t keeper_pid, uint64_t keeper_start, int64_t wait_ms);

/*
 * Tear down a slot the pool drained (eviction, capacity, supersession): stop its keeper and
 * wait until its key has left the table (bounded). A victim without `any` is a no-op.
 */
int environment_evict(struct pool *p, const struct pool_victim *v);

/*
 * /kill, agent-runner-ctl kill: drain the session of key and tear it down (warm, parked or
 * running), waiting for the teardown. 0 when there was none (idempotent), 1 when killed.
 */
int environment_kill(struct pool *p, const char *key, enum teardown_reason reason);

#endif
