/*
 * pool — the session module: the shared-memory session table and the only code that changes
 * a slot. Reserve, mark started, record the keeper, park, check out, look up, cancel, drain /
 * kill, free, reclaim dead ones, snapshot: each is a function here, and the slot layout is
 * private (pool_shm.h). Engine modules, the keeper and the engine's admin API (the master,
 * agent-runner-ctl) hold a struct pool * and call these functions.
 *
 * Slots are addressed by (index, generation) handles; every access through a handle compares
 * the generation, so a handle kept across a free/reuse is fenced off (-ESTALE).
 *
 * Locking: one process-shared, robust mutex (pool_locked.h, private to the module). Every
 * function here takes and drops it itself, except the lock-free readers that say so. No I/O,
 * malloc, logging or libcurl while the lock is held: the functions copy what the caller needs
 * out of the slot (struct pool_session).
 */
#ifndef AR_POOL_H
#define AR_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/contracts.h"
#include "session/identity.h"

#define POOL_KEY_MAX 272
#define POOL_DIR_MAX 192
#define POOL_WORKERS_MAX 128
#define POOL_STATE_NAME_MAX 24

struct pool; /* opaque: the mapping of one segment */
struct pool_metrics;
struct buf;

enum slot_state {
    SLOT_FREE = 0,
    SLOT_STARTING,          /* reserved; the keeper is being started */
    SLOT_IDLE,              /* warm, nobody attached, idle deadline running */
    SLOT_BUSY,              /* a worker runs a turn on it */
    SLOT_AWAITING_APPROVAL, /* parked on a permission gate, approval deadline running */
    SLOT_DRAINING,          /* being torn down */
    SLOT_SPARE,             /* a pre-started environment no session holds yet (pool_spare_*) */
    SLOT_STATE_COUNT,
};

/* Lock-free counters in the header. */
enum pool_counter {
    PC_ADMISSION_REJECTED = 0,
    PC_WORKER_RESTARTS,
    PC_WARM_HITS,
    PC_EGRESS_DENIED,  /* connections a sandbox's egress policy refused */
    PC_MODEL_CALLS,    /* model calls a sandbox's model gateway forwarded */
    PC_MODEL_REFUSED,  /* ... and refused */
    PC_USAGE_MISMATCH, /* turns whose harness-reported usage differed from the measured one */
    /* several hosts (engine/cluster): requests by where they ran, and the master's gauges */
    PC_CLUSTER_TURNS_LOCAL,         /* turns received from a client and run here */
    PC_CLUSTER_TURNS_FORWARDED,     /* turns forwarded to their owner */
    PC_CLUSTER_TURNS_RECEIVED,      /* turns a peer forwarded here */
    PC_CLUSTER_CONTROL_LOCAL,       /* /kill, /cancel acted on here */
    PC_CLUSTER_CONTROL_FORWARDED,   /* /kill, /cancel forwarded to the owner */
    PC_CLUSTER_CONTROL_RECEIVED,    /* /kill, /cancel a peer forwarded here */
    PC_CLUSTER_REFUSED_LOOP,        /* a forwarded request for a session owned by a third member */
    PC_CLUSTER_REFUSED_UNREACHABLE, /* the owner did not answer until its key could expire */
    PC_CLUSTER_CONFLICTS,           /* environments killed here: their session is owned elsewhere */
    PC_CLUSTER_REDIS_ERRORS,        /* Redis exchanges that failed (the request ran locally) */
    PC_CLUSTER_STATE,               /* gauge: 0 off, 1 ok, 2 degraded (Redis unreachable) */
    PC_CLUSTER_MEMBERS,             /* gauge: live members the master last saw */
    PC_CLUSTER_LOAD,                /* gauge: sessions this member holds */
    PC_FCGI_CONNECTIONS,            /* FastCGI connections the workers accepted from nginx */
    PC_FCGI_KEPT_REQUESTS,          /* requests read from a connection an earlier one left open */
};

struct pool_handle {
    uint32_t index;
    uint32_t generation;
};

/* A copy of one live slot, taken under the lock (or lock-free by pool_session_peek). */
struct pool_session {
    struct pool_handle h;
    uint32_t state;
    bool per_turn;
    bool history_broken;
    bool cancel;
    bool spare;      /* a spare (SLOT_SPARE, or being built for one) */
    bool from_spare; /* a session that claimed a spare */
    uint32_t turns;
    uint8_t harness;
    uint8_t policy_mode;
    uint32_t idle_ms;
    uint32_t caps;
    uint8_t last_teardown;
    int32_t keeper_pid;
    uint64_t keeper_start;
    int32_t sandbox_pid;
    int32_t owner_pid;
    int64_t prompt_id;
    int64_t acp_next_id;
    int64_t created_ms;
    int64_t last_used_ms;
    int64_t idle_deadline_ms;
    int64_t approval_deadline_ms;
    char key[POOL_KEY_MAX];
    char owner_turn[64];
    char provider[64];
    char model[128];
    char env_dir[POOL_DIR_MAX];
    char acp_session[128];
    uint8_t config_fp[IDENTITY_DIGEST_LEN];
    uint8_t history_fp[IDENTITY_DIGEST_LEN];
    uint8_t cred_epoch[IDENTITY_DIGEST_LEN];
    size_t ngates;
    struct approval_gate gates[APPROVAL_GATES_MAX];
};

/* A teardown remembered after its slot was freed (agent-runner-ctl shows them). */
struct pool_teardown_view {
    char key[POOL_KEY_MAX];
    uint8_t reason;
    uint8_t harness;
    int64_t at_ms;
    uint32_t turns;
};

/* The header's numbers (agent-runner-ctl stats, /readyz, the master's adoption check). */
struct pool_info {
    bool valid; /* the magic is intact */
    uint32_t nslots;
    uint32_t nused;
    uint32_t nparked;
    uint32_t repairs;
    int32_t master_pid;
    uint64_t boot_id;
    char instance_id[64];
};

/* ---- the segment --------------------------------------------------------------------- */

/* "/agent-runner.<instance>": the one place the shm name is built. */
int pool_shm_name(const char *instance, char *out, size_t outlen);
/* Size of a segment with nslots slots. */
size_t pool_segment_size(uint32_t nslots);
/*
 * Master: create (replacing any old segment of that name) and initialise the segment.
 * nslots in [1, 1<<20]. *ret is a new struct pool.
 */
int pool_create(const char *name, uint32_t nslots, const char *instance_id, uint64_t boot_id,
                struct pool **ret);
/* Attach to an existing segment; -EPROTO when the header does not match (rebuild it). */
int pool_attach(const char *name, bool readonly, struct pool **ret);
/* Unmap (the segment stays). NULL is a no-op. */
void pool_detach(struct pool *p);
/* Unmap and unlink the segment. */
int pool_destroy(struct pool *p);
void pool_get_info(const struct pool *p, struct pool_info *ret);

/*
 * Master, adopting the table of a predecessor that died: under the lock, every slot is
 * validated (the inconsistent ones reset: *ret_reset), the derived lists rebuilt, the table
 * checked and pid recorded as its master. -EUCLEAN with err when the check fails after the
 * repair; other -errno when the lock cannot be taken.
 */
int pool_adopt(struct pool *p, pid_t pid, uint32_t *ret_reset, char *err, size_t errlen);
/* Consistency check (agent-runner-ctl check, chaos rounds): 0, -EUCLEAN with err, -errno. */
int pool_check(struct pool *p, char *err, size_t errlen);

/* ---- sessions: one function per step of a slot's life (self-locking) ----------------- */

/* What a new environment's slot starts with. */
struct pool_reservation {
    const char *key; /* "" for a per-turn run */
    pid_t by_pid;
    uint8_t harness;
    bool per_turn;
    uint32_t idle_ms;
    const char *provider;
    const char *model;
    const char *turn_id;
};

/* Reserve a slot (SLOT_STARTING). -EEXIST, -ENOSPC, -ENAMETOOLONG as pool_reserve_locked. */
int pool_session_reserve(struct pool *p, const struct pool_reservation *r, struct pool_handle *ret);
int pool_session_set_env_dir(struct pool *p, struct pool_handle h, const char *env_dir);
/* The keeper of h started: its pid, start time and the sandbox's pid. */
int pool_session_set_keeper(struct pool *p, struct pool_handle h, pid_t keeper_pid,
                            uint64_t keeper_start, pid_t sandbox_pid);
/* The harness session exists: record its id, SLOT_STARTING -> SLOT_BUSY. */
int pool_session_mark_started(struct pool *p, struct pool_handle h, const char *acp_session);
/* A reservation whose keeper never started: free it (a started keeper frees its own slot). */
int pool_session_release_unstarted(struct pool *p, struct pool_handle h, uint8_t reason);
/* A copy of h when it is busy and owned by owner; -ESTALE otherwise. */
int pool_session_get_owned(struct pool *p, struct pool_handle h, pid_t owner,
                           struct pool_session *ret);
/* Self-locking pool_drain_locked / pool_free_locked. */
int pool_session_drain(struct pool *p, struct pool_handle h, uint8_t reason);
int pool_session_free(struct pool *p, struct pool_handle h, uint8_t reason);
/*
 * A busy slot whose turn turn_id was run by dead (a process that is gone: its turn is taken
 * over, engine_turns.c) is owned by owner from now on. -ESTALE when h is not that turn's.
 */
int pool_session_adopt(struct pool *p, struct pool_handle h, const char *turn_id, pid_t dead,
                       pid_t owner);
/* The reason h was drained with (TEARDOWN_NONE when it was not), or -ESTALE. */
int pool_session_teardown_reason(struct pool *p, struct pool_handle h);
/* A turn died mid-way: the next turn replays cold. */
int pool_session_mark_broken(struct pool *p, struct pool_handle h);
/*
 * The keeper's worker vanished without parking: a busy or starting slot is marked broken and,
 * when keep_warm, parked idle until deadline_ms.
 */
int pool_session_orphaned(struct pool *p, struct pool_handle h, bool keep_warm,
                          int64_t deadline_ms);

enum pool_lookup_outcome {
    POOL_LOOKUP_MISS = 0, /* no slot for the key */
    POOL_LOOKUP_WARM,     /* an idle slot, checked out for the caller */
    POOL_LOOKUP_RESUME,   /* a slot awaiting approval, checked out for the caller */
    POOL_LOOKUP_EVICT,    /* a slot that cannot take the turn: drained with the reason */
    POOL_LOOKUP_REFUSE,   /* a slot awaiting approval the request must not disturb: left as is */
    POOL_LOOKUP_BUSY,     /* refuse_busy: the session runs a turn (or starts): left as is */
};

/*
 * How the caller judges a live slot, called under the lock (pure: no I/O, no malloc, no
 * logging). idle: why an idle slot cannot take the turn (TEARDOWN_NONE: it can). parked: the
 * same for a slot awaiting approval; it may set the decision of each gate of s, or return
 * POOL_JUDGE_KEEP: the request must be refused and the slot left parked (an approval answer
 * for an interaction the slot does not hold: stale or foreign).
 */
#define POOL_JUDGE_KEEP TEARDOWN_COUNT
struct pool_judge {
    enum teardown_reason (*idle)(void *ctx, const struct pool_session *s);
    enum teardown_reason (*parked)(void *ctx, struct pool_session *s);
    void *ctx;
    /* several hosts: a busy or starting slot refuses the turn instead of being superseded */
    bool refuse_busy;
};

struct pool_lookup {
    enum pool_lookup_outcome outcome;
    enum teardown_reason reason; /* EVICT: why */
    struct pool_session s;       /* the slot as found (gates judged for RESUME) */
};

/*
 * Dispatch for a turn of key: a warm or resumable slot is checked out for owner/turn_id; one
 * that cannot take the turn (mismatch, draining, starting or busy: superseded) is drained
 * (with judge->refuse_busy a starting or busy one is left alone: POOL_LOOKUP_BUSY).
 */
int pool_session_lookup(struct pool *p, const char *key, const struct pool_judge *judge,
                        pid_t owner, const char *turn_id, struct pool_lookup *ret);

/* A slot drained for eviction, with what its teardown needs. */
struct pool_victim {
    bool any;
    struct pool_handle h;
    char key[POOL_KEY_MAX];
    int32_t keeper_pid;
    uint64_t keeper_start;
    enum teardown_reason reason;
};

/* What a finished turn leaves in its slot when it parks. */
struct pool_park {
    const uint8_t *config_fp; /* IDENTITY_DIGEST_LEN bytes each */
    const uint8_t *history_fp;
    const uint8_t *cred_epoch;
    const char *acp_session;
    uint32_t caps;
    uint8_t policy_mode;
    uint32_t idle_ms;
    int64_t acp_next_id;
    int64_t prompt_id;
    bool awaiting; /* park on approvals (gates) instead of idle */
    const struct approval_gate *gates;
    size_t ngates;
    int64_t deadline_ms;
};

/*
 * Park the busy slot h owned by owner. With parked_max parked slots already, the least
 * recently used idle one is drained for capacity (returned in victim for its teardown). 0 when
 * parked; -ESTALE when h is not the caller's any more; -ENOSPC when every parked slot is busy
 * or awaiting approval (h is left as it was).
 */
int pool_session_park(struct pool *p, struct pool_handle h, pid_t owner, const struct pool_park *pk,
                      uint64_t parked_max, struct pool_victim *victim);

/*
 * /cancel of a session parked on approvals: check it out for owner (turn "cancel") with its
 * gates undecided. -ENOENT no such key, -EBUSY when it is not awaiting approval.
 */
int pool_session_checkout_parked(struct pool *p, const char *key, pid_t owner,
                                 struct pool_session *ret);
/* After the cancel answered its gates: no gates, next request id, parked idle to deadline. */
int pool_session_park_cancelled(struct pool *p, struct pool_handle h, int64_t acp_next_id,
                                int64_t deadline_ms);
/*
 * /cancel: flag the running turn of key (unless target_turn names another turn). -ENOENT no
 * such key; *ret_parked tells whether it is parked on approvals instead.
 */
int pool_session_request_cancel(struct pool *p, const char *key, const char *target_turn,
                                bool *ret_parked);
/* Lock-free: the turn on h was asked to stop. */
bool pool_session_cancel_requested(const struct pool *p, struct pool_handle h);
/*
 * Drain the slot of key for its teardown (a draining one keeps its first reason). 0 when
 * there is none, 1 with *ret filled.
 */
int pool_session_kill(struct pool *p, const char *key, enum teardown_reason reason,
                      struct pool_victim *ret);
/* 1 while key is in the table (its keeper has not finished its teardown), 0, or -errno. */
int pool_session_present(struct pool *p, const char *key);

/* A session's slot as the cluster's master sees it (engine/cluster/cluster_master.c). */
struct pool_key_entry {
    struct pool_handle h;
    uint32_t state;
    char key[POOL_KEY_MAX];
};
/* Every live slot holding a session key (spares left out), at most max: how many, or -errno. */
int pool_session_keys(struct pool *p, struct pool_key_entry *out, size_t max);

/* ---- the master and agent-runner-ctl ---------------------------------------------------- */

/* A slot of a dead keeper or a dead reserving worker, reclaimed by pool_reclaim_dead. */
struct pool_reclaimed {
    struct pool_handle h;
    int32_t keeper_pid;
    uint64_t keeper_start;
    int32_t owner_pid;
    char env_dir[POOL_DIR_MAX];
};

/* Scratch for pool_reclaim_dead / pool_shutdown_begin: one entry per slot (NULL on ENOMEM). */
struct pool_reclaimed *pool_scratch_new(const struct pool *p);
/*
 * Free the slot of keeper pid (it exited without freeing it); env_dir receives its folder.
 * 1 when one was freed, 0 when none was its.
 */
int pool_reclaim_keeper(struct pool *p, pid_t keeper_pid, char env_dir[POOL_DIR_MAX]);
/*
 * Free the slots whose keeper died (pids re-checked with their start time) or whose reserving
 * worker died before its keeper started. Pids are read under the lock, checked without it,
 * and the slots freed under the lock again by handle. The freed ones are scratch[0..n).
 */
uint32_t pool_reclaim_dead(struct pool *p, struct pool_reclaimed *scratch);
/*
 * Shutdown: note the shutdown reason on every slot with a keeper and list those keepers in
 * scratch[0..n) for the caller to stop.
 */
uint32_t pool_shutdown_begin(struct pool *p, struct pool_reclaimed *scratch);
/* SIGTERM every live keeper a table lists (before the table is rebuilt). */
void pool_stop_keepers(const struct pool *p);
/* Some live slot's environment folder is path (lock-free read). */
bool pool_dir_in_use(const struct pool *p, const char *path);
/* Lock-free consistent copy of slot i (retried until two reads agree); false when free. */
bool pool_session_peek(const struct pool *p, uint32_t i, struct pool_session *ret);
/* The recent teardowns, newest first, at most max. */
size_t pool_recent_teardowns(const struct pool *p, struct pool_teardown_view *out, size_t max);

/* ---- counters, admission, metrics (lock-free except a provider label's registration) -- */

void pool_counter_add(struct pool *p, unsigned idx, uint64_t n);
/* A gauge kept among the counters (the cluster's state, members, load: the master sets them). */
void pool_counter_set(struct pool *p, unsigned idx, uint64_t v);
uint64_t pool_counter_get(const struct pool *p, unsigned idx);
/* A worker claims its in-flight entry: the index, or -ENOSPC. */
int pool_inflight_claim(struct pool *p, pid_t pid, uint64_t start);
/* Add (or, with a negative delta, take) runs on the caller's own entry; returns its new count. */
uint64_t pool_inflight_add(struct pool *p, int idx, int delta);
/* Runs in flight over every live worker. */
uint64_t pool_inflight_total(const struct pool *p);
/* Master: free the entries of processes that are gone (pid given: that one; 0: all dead). */
void pool_inflight_release(struct pool *p, pid_t pid);
/* The metrics block of the header (metrics.h). */
struct pool_metrics *pool_metrics(struct pool *p);
const struct pool_metrics *pool_metrics_const(const struct pool *p);
/* metrics_turn with the provider label registered under the lock the first time. */
void pool_metrics_turn(struct pool *p, unsigned harness, const char *provider, unsigned outcome);
/* The Prometheus exposition of the table's metrics and gauges. */
int pool_metrics_render(const struct pool *p, struct buf *out);

/* ---- spares (pool_spare.c): pre-started environments a new session claims ------------ */

/*
 * The master's spare maker: an anonymous SLOT_STARTING slot marked as a spare of harness.
 * -ENOSPC when the table is full.
 */
int pool_spare_reserve(struct pool *p, uint8_t harness, pid_t by_pid, struct pool_handle *ret);
/* Its keeper runs: SLOT_STARTING -> SLOT_SPARE (only a slot reserved as a spare). */
int pool_spare_ready(struct pool *p, struct pool_handle h);
/* Spares of harness: ready ones and ones being built (lock-free, approximate). */
void pool_spare_count(const struct pool *p, uint8_t harness, uint32_t *ret_ready,
                      uint32_t *ret_building);
/*
 * A new session takes a ready spare of rv->harness, atomically: SLOT_SPARE -> SLOT_STARTING
 * with the reservation's key, owner and settings, exactly like pool_session_reserve, so no
 * spare ever serves two sessions. ret is the slot after the claim (env_dir, keeper, sandbox).
 * -ENOENT when no spare is ready, -EEXIST when the key is present, -ENAMETOOLONG.
 */
int pool_spare_claim(struct pool *p, const struct pool_reservation *rv, struct pool_session *ret);
/*
 * Shells: spare slots of harness POOL_SHELL (pre-made sandbox shells, env_shell.h: identity,
 * cgroup, network namespace and egress ready, no harness yet). pool_shell_claim is
 * pool_spare_claim for a ready shell: the slot takes rv->harness; the same errors.
 */
#define POOL_SHELL 0xfeu
int pool_shell_claim(struct pool *p, const struct pool_reservation *rv, struct pool_session *ret);
/*
 * Capacity: drain one ready spare (any harness) for a session that needs its slot; 1 with
 * victim filled (the caller stops its keeper: environment_evict), 0 when there is none.
 */
int pool_spare_evict(struct pool *p, struct pool_victim *victim);

const char *pool_state_name(uint32_t state);

#endif
