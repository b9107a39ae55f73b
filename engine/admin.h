/*
 * admin — the engine's operations for the master (agent-runnerd) and agent-runner-ctl: this
 * host's sandbox probe, the session table (create or adopt, reclaim what dead processes left,
 * destroy it at stop), the spares the master keeps, the start-up sweeps, the ctl's listings
 * and verbs, and the /metrics exposition. The front forks, waits and logs; what happens to
 * slots, keepers and environment folders happens here. Nothing here logs above debug: the
 * caller logs once, from what the functions return.
 */
#ifndef AR_ADMIN_H
#define AR_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <json-c/json.h>

#include "engine.h"

struct admin; /* the master's hold on this host's sandboxes and its session table (opaque) */
struct pool;  /* an attached session table (opaque) */
struct buf;

/* Workers a master runs at most: half the session table's in-flight entries, so a crashed
 * master's draining workers fit beside a new master's. */
#define ADMIN_WORKERS_MAX 64

/* ---- the master: start ------------------------------------------------------------------- */

/* configure() every sandbox provider from settings of its own (read through get; workers
 * inherit them). The first failure is returned, err names it. */
int admin_providers_configure(const char *(*get)(const char *name), char *err, size_t errlen);

/*
 * Probe this host for the local sandboxes of instance (before any thread or worker: the uid
 * range check enumerates users), point cfg->sandbox at the probe, and check, as the sandbox
 * user in a child, that it can reach every file a sandbox binds (the harness folder, the test
 * agent, agent-runner-mcp, agent-runner-pi-stdio): -EACCES with err naming the path and the
 * fix (a folder on the way not searchable by others, e.g. a checkout under /root). Other
 * failures as sandbox_host_init (-EINVAL with err). *ret is new; nothing is left on failure.
 * cfg must outlive *ret.
 */
int admin_open(struct engine_config *cfg, const char *instance, uint32_t slots, struct admin **ret,
               char *err, size_t errlen);

/* What admin_table_open did, for the master's log. */
struct admin_table_report {
    bool adopted;      /* a predecessor's table was adopted (else a new one was made) */
    uint32_t used;     /* adopted: its slots in use */
    uint32_t reset;    /* adopted: slots reset by the repair */
    int removed;       /* environments no live slot referred to, removed (or -errno) */
    bool stop_keepers; /* a table was rebuilt: the keepers it listed were told to stop */
};

/*
 * The session table. A master that restarts after a crash adopts the table its predecessor
 * left when it is of this layout, this instance, this kernel boot and this size and its
 * master is gone: warm environments (their keepers survived) stay warm, with the credential
 * epoch key kept beside the table (a root-only file under the state folder, never in shm).
 * Anything else is rebuilt, never trusted: the keepers the old table lists are told to stop,
 * and a new table and epoch key are made. Then the environments no live slot refers to are
 * removed. cfg->pool and cfg->epoch_key are set. On failure err is the whole log line:
 * -EBUSY (another master runs the instance), -ENOSPC / -EFBIG (/dev/shm has no room),
 * other -errno.
 */
int admin_table_open(struct admin *a, struct admin_table_report *ret, char *err, size_t errlen);
/*
 * Start the providers' sweep of remote sandboxes of an earlier run (a child the master reaps
 * like any other): the live ones are adopted, orphans deleted; after a grace period when the
 * old table's keepers were told to stop (they release their sandboxes first). 0 or -errno.
 */
int admin_providers_sweep(struct admin *a);

/* ---- the master: upkeep ------------------------------------------------------------------ */

/*
 * A child of the master exited: when it was a keeper that did not free its slot, the slot is
 * freed and 1 returned with dir (dirlen >= ADMIN_DIR_MAX) = the environment folder to remove
 * (admin_env_remove); 0 otherwise.
 */
#define ADMIN_DIR_MAX 192
int admin_keeper_exited(struct admin *a, pid_t pid, char *dir, size_t dirlen);
/*
 * Free the slots whose keeper died and those whose reserving worker died before its keeper
 * started; for each with an environment folder, each(ctx, folder, whether a keeper died).
 * Returns how many slots were freed.
 */
uint32_t admin_reclaim_dead(struct admin *a,
                            void (*each)(void *ctx, const char *env_dir, bool keeper), void *ctx);
/*
 * Remove what a dead keeper's environment left: its cgroup, workspace mount and folder. May
 * take long (a tree the sandbox built): the master calls it in a child. 0 or -errno.
 */
int admin_env_remove(const struct admin *a, const char *env_dir);
/*
 * Remove the environments no live slot refers to (after admin_table_close: all of them):
 * their cgroups, workspace mounts and folders. How many, or -errno.
 */
int admin_sweep_envs(const struct admin *a);
/*
 * The turn journals (AGENT_RUNNER_TURN_JOURNAL_DIR, turn/journal_sweep.h): remove the expired
 * and abandoned ones and keep their total under AGENT_RUNNER_TURN_JOURNAL_TOTAL_BYTES. How
 * many were removed, or -errno.
 */
int admin_turns_sweep(const struct admin *a);
/* The default journal folder of an instance (engine_turns_dir); -ENAMETOOLONG. */
int admin_turns_dir(const char *instance, char *out, size_t outlen);
/*
 * At most once a minute (every TTL / 2 for a TTL under two minutes, at least a second apart):
 * remove the kept harness states (session/kept.h) neither saved nor
 * loaded for AGENT_RUNNER_SESSION_STATE_TTL_MS, and hold the store to its total bound. How many
 * were removed, or -errno.
 */
int admin_kept_sweep(struct admin *a);
/* The in-flight entry of worker pid (0: of every process that is gone) is freed: what it had
 * admitted is not in flight any more. */
void admin_inflight_release(struct admin *a, pid_t pid);
/* One more worker restart (agent-runner-ctl stats, /metrics). */
void admin_worker_restarted(struct admin *a);

/* ---- the master: stop --------------------------------------------------------------------- */

/*
 * Destroy every environment: the shutdown reason noted on each slot with a keeper, each keeper
 * sent SIGTERM and waited for (SIGKILL after 5 s); any child of the caller that exits
 * meanwhile is reaped. Returns how many keepers there were.
 */
uint32_t admin_destroy_all(struct admin *a);
/* Unlink the session table and its epoch key (a clean stop); cfg->pool becomes NULL. */
void admin_table_close(struct admin *a);
/* Let the host probe go (clean_stop: also the instance's cgroup folders) and free a. The
 * table, when still open, is only unmapped. NULL is a no-op. */
void admin_close(struct admin *a, bool clean_stop);

/* ---- the master: spares (pre-started environments) ---------------------------------------- */

/* Spares are wanted: a table is attached and AGENT_RUNNER_SPARES asks for some. */
bool admin_spares_wanted(const struct engine_config *cfg);
/* Turn spares off (cfg's counts zeroed); true when some had been asked for. */
bool admin_spares_disable(struct engine_config *cfg);
/*
 * The next harness short of spares, round robin from *rr (advanced past it), or -1: none is
 * short, or the table has only its last free slot left (it is a session's).
 */
int admin_spare_next(const struct engine_config *cfg, unsigned *rr);
/* Memory is short: drain the oldest ready spare and SIGTERM its keeper. The keeper's pid
 * (> 0), or 0 when no spare was drained. */
pid_t admin_spare_shed(const struct engine_config *cfg);
/* In the maker child: start one spare of harness kind (its keeper is adopted by the master
 * like any other). 0, or -errno with err. */
/* ---- shells (pre-made sandbox shells, environment_spare.h) ---- */
#define ADMIN_SHELLS_MAX 64 /* AGENT_RUNNER_SHELLS at most */
bool admin_shells_wanted(const struct engine_config *cfg);
/* How many shells are missing (never counting the table's last free slot); <= 0: none. */
int admin_shell_missing(const struct engine_config *cfg);
/* In the shell maker child: make one shell (its keeper is adopted by the master). */
int admin_shell_make(const struct engine_config *cfg, char *err, size_t errlen);
int admin_spare_make(const struct engine_config *cfg, enum harness_kind kind, char *err,
                     size_t errlen);

/* ---- the master: several hosts (engine/cluster/cluster_master.h) -------------------------- */

struct admin_cluster; /* the master's hold on the coordination plane (opaque) */

/* What a tick did, for the master's log. */
struct admin_cluster_tick {
    bool ran;        /* it was due */
    bool up;         /* Redis answered */
    bool changed;    /* up changed since the tick before */
    char error[256]; /* !up: why (never the password) */
    uint32_t held, members, asserted, released, conflicts;
    char conflict_key[272]; /* the first environment killed as owned elsewhere */
    char conflict_owner[64];
};

/* The master's cluster side (cfg->pool attached): 0 with *ret, 1 without a cluster (*ret
 * NULL), -ENOMEM. runs_max goes into the member record. */
int admin_cluster_new(const struct engine_config *cfg, uint64_t runs_max,
                      struct admin_cluster **ret);
/* Register, refresh and reconcile when due (README "Several hosts"). */
void admin_cluster_tick(struct admin_cluster *ac, struct admin_cluster_tick *rep);
/* Milliseconds until the next tick is due. */
int64_t admin_cluster_due_ms(const struct admin_cluster *ac);
/* In a child the master forked: let go of the master's Redis connection (nothing is sent). */
void admin_cluster_after_fork(struct admin_cluster *ac);
/* Free; leave: release every owner key held here and the member record (a clean stop). NULL is
 * a no-op. */
void admin_cluster_free(struct admin_cluster *ac, bool leave);
/*
 * agent-runner-ctl cluster: the cluster's settings read through get (the runner's environment),
 * its live members and, for each, whether it is this instance. A new object in *ret, 1 when
 * AGENT_RUNNER_REDIS_URL is not set, -EINVAL with err (a setting), other -errno with err
 * (Redis unreachable).
 */
int admin_cluster_members(engine_getenv_fn get, void *ctx, json_object **ret, char *err,
                          size_t errlen);

/* ---- agent-runner-ctl --------------------------------------------------------------------- */

/*
 * Attach to instance's session table (read-only: never locked, a slot is copied until two
 * reads agree). name (namelen >= 96) receives the table's name for messages. -ENAMETOOLONG
 * when the instance is too long; -EPROTO when the segment is not a table of this version.
 */
int admin_attach(const char *instance, bool readonly, struct pool **ret, char *name,
                 size_t namelen);
void admin_detach(struct pool *p);
/*
 * {"sessions": [...], "recent": [...]}: every live slot (key, state, harness, provider, model,
 * keeperPid, sandboxPid, envDir, approvals, ownerPid, idleLeftMs, turns, spare, fromSpare,
 * slot, generation, lastTeardown) and the recent teardowns (key, reason, harness, agoMs,
 * turns). A new object, NULL on ENOMEM.
 */
json_object *admin_sessions_json(const struct pool *p);
/*
 * agent-runner-ctl turns: {"turns": [...]}, the running and journaled turns under dir
 * (turnId, projectId, sessionKey, seq: the last record's, ageMs, state: running | done |
 * orphaned (no live writer), detached, pid, bytes), newest first. A new object, NULL on
 * ENOMEM; an empty list when there is no journal folder.
 */
json_object *admin_turns_json(const char *dir);
/* {"instance", "masterPid", "slots", "used", "parked", "repairs", "counters": {...}}. */
json_object *admin_stats_json(const struct pool *p);
/* Drain and tear down key's session (waits): 1 killed, 0 no such session, -errno. */
int admin_kill(struct pool *p, const char *key);
/* The table's consistency: 0; -EUCLEAN with err; other -errno when it cannot be locked. */
int admin_check(struct pool *p, char *err, size_t errlen);

/* ---- /metrics ------------------------------------------------------------------------------ */

/*
 * The Prometheus exposition of cfg's table: out is initialised here (capped) and released by
 * the caller, also on failure. -ENOENT without a table, -ENOMEM / -EFBIG.
 */
int admin_metrics_render(const struct engine_config *cfg, struct buf *out);

#endif
