/*
 * pool — the shared-memory session table (DESIGN.md §2).
 *
 * One fixed-size POSIX shm segment, created by the master, mapped once by every process:
 *
 *   struct pool_header | struct pool_slot[nslots] | int32_t buckets[nbuckets]
 *
 * Slots are addressed by (index, generation) handles; every access through a handle compares
 * the generation, so a handle kept across a free/reuse is fenced off. Inside the segment
 * there are offsets (slot indexes), never pointers: the hash chains (by pool key), the free
 * list and the LRU list of idle slots. All of them are *derived* state and can be rebuilt from
 * the slot states alone, which is what the repair after EOWNERDEAD does.
 *
 * Locking: one process-shared, robust, error-checking mutex, always taken through pool_lock().
 * If the previous holder died, pool_lock() validates every slot, resets the ones that are not
 * consistent, rebuilds the derived lists, marks the mutex consistent and returns 1 (0 when
 * the lock was simply taken). Functions ending in _locked require the lock. No I/O, malloc,
 * logging or libcurl while the lock is held: callers copy what they need out of the slot.
 */
#ifndef AR_POOL_H
#define AR_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "metrics.h"

#define POOL_MAGIC 0x4152504f4f4c0001ull /* "ARPOOL" + 1 */
#define POOL_LAYOUT_VERSION 8u
#define POOL_KEY_MAX 272
#define POOL_DIR_MAX 192
#define POOL_APPROVALS_MAX 8
#define POOL_COUNTERS_MAX 128

enum slot_state {
    SLOT_FREE = 0,
    SLOT_STARTING,          /* reserved; the keeper is being started */
    SLOT_IDLE,              /* warm, nobody attached, idle deadline running */
    SLOT_BUSY,              /* a worker runs a turn on it */
    SLOT_AWAITING_APPROVAL, /* parked on a permission gate, approval deadline running */
    SLOT_DRAINING,          /* being torn down */
    SLOT_STATE_COUNT,
};

enum slot_flags {
    SLOT_F_PER_TURN = 1u << 0,       /* destroy after the current turn */
    SLOT_F_HISTORY_BROKEN = 1u << 1, /* a turn died mid-way: the next turn replays cold */
    SLOT_F_CANCEL = 1u << 3,         /* /cancel asked the current turn to stop */
};

/* Indexes into pool_header.counters. */
enum pool_counter {
    PC_ADMISSION_REJECTED = 0,
    PC_WORKER_RESTARTS,
    PC_WARM_HITS,
};

#define POOL_WORKERS_MAX 128

/*
 * In-flight runs, one entry per live worker process, claimed by the worker (lock-free CAS of
 * its pid into a free entry) and released by the master when that process is gone. Workers
 * of a crashed master keep counting their draining turns in their own entries, so a restarted
 * master neither loses them nor underflows.
 */
struct pool_inflight {
    int32_t pid;
    uint32_t pad;
    uint64_t start; /* process start time: pids are reused */
    uint64_t runs;
};

/* A permission gate the harness is waiting on (its request is unanswered). */
struct pool_approval {
    char tool_call_id[96];
    char token[48];
    char request_id[64]; /* the agent's JSON-RPC id of the permission request, as JSON text */
    char tool_name[64];
    char allow_option[48];  /* the allow_once option to answer "approved" with */
    char reject_option[48]; /* the reject option to answer "denied" with ("" = cancelled) */
    int8_t decision;        /* resume input: -1 undecided, 0 denied, 1 approved */
};

struct pool_slot {
    uint32_t state;
    uint32_t generation;
    uint32_t flags;
    uint32_t turns;
    uint32_t key_hash;
    int32_t hash_next; /* derived */
    int32_t free_next; /* derived */
    int32_t lru_prev;  /* derived */
    int32_t lru_next;  /* derived */
    uint32_t idle_ms;
    uint8_t policy_mode;
    uint8_t last_teardown;
    uint8_t harness;
    uint8_t napprovals;
    uint32_t caps; /* harness capability bits (run_turn.h TURN_CAP_*) */
    int32_t keeper_pid;
    int32_t sandbox_pid;
    uint64_t keeper_start;
    int64_t prompt_id;   /* the in-flight session/prompt of a parked approval */
    int64_t acp_next_id; /* next request id a reconnecting worker uses */
    int32_t owner_pid; /* worker running the turn (fencing) */
    int32_t reserved_by_pid;
    int64_t created_ms; /* CLOCK_MONOTONIC, shared by every process */
    int64_t last_used_ms;
    int64_t idle_deadline_ms;
    int64_t approval_deadline_ms;
    char key[POOL_KEY_MAX]; /* "<projectId>:<sessionId>" or "" for per-turn runs */
    char owner_turn[64];
    char provider[64];
    char env_dir[POOL_DIR_MAX]; /* the keeper socket is env_dir/keeper.sock */
    char acp_session[128];
    char model[128];
    uint8_t config_fp[32];
    uint8_t history_fp[32];
    uint8_t cred_epoch[32];
    struct pool_approval approvals[POOL_APPROVALS_MAX];
};

#define POOL_RECENT_MAX 64

/* A teardown, remembered after its slot was freed (agent-runner-ctl shows them). */
struct pool_teardown {
    char key[POOL_KEY_MAX];
    uint8_t reason;
    uint8_t harness;
    int64_t at_ms;
    uint32_t turns;
};

struct pool_header {
    uint64_t magic;
    uint32_t layout_version;
    uint32_t nslots;
    uint64_t size;
    uint32_t nbuckets;
    int32_t master_pid;
    uint64_t boot_id;
    char instance_id[64];
    pthread_mutex_t lock;
    int32_t lock_holder_pid; /* diagnostics: who holds the lock */
    uint32_t repairs;        /* how many times a dead holder was repaired */
    int32_t free_head;       /* derived */
    int32_t lru_head;        /* derived: least recently used idle slot */
    int32_t lru_tail;        /* derived */
    uint32_t nused;          /* derived */
    uint32_t nparked;        /* derived: keyed slots idle or awaiting approval */
    uint64_t counters[POOL_COUNTERS_MAX]; /* atomically updated, read without the lock */
    struct pool_inflight inflight[POOL_WORKERS_MAX];
    uint32_t recent_next;
    struct pool_teardown recent[POOL_RECENT_MAX];
    struct pool_metrics metrics;
};

struct pool {
    struct pool_header *hdr;
    struct pool_slot *slots;
    int32_t *buckets;
    size_t map_size;
    bool readonly;
    char name[96];
};

struct pool_handle {
    uint32_t index;
    uint32_t generation;
};

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

/* 0 = locked, 1 = locked after repairing a dead holder's mess, <0 = -errno. */
int pool_lock(struct pool *p);
void pool_unlock(struct pool *p);
/* Validate every slot and rebuild the derived lists; returns the number of slots reset. */
uint32_t pool_repair_locked(struct pool *p);
/* Consistency check for tests and chaos rounds: 0 or -EUCLEAN with a message in err. */
int pool_check_locked(struct pool *p, char *err, size_t errlen);

/* The slot behind h if its generation still matches, else NULL. */
struct pool_slot *pool_slot_locked(struct pool *p, struct pool_handle h);
struct pool_handle pool_handle_of(struct pool *p, uint32_t index);

/* Index of the live slot holding key, or -ENOENT. */
int pool_find_locked(struct pool *p, const char *key);

/*
 * Take a free slot in state SLOT_STARTING for key ("" = anonymous, never found by key).
 * A key that is already present is -EEXIST. -ENOSPC when the table is full.
 */
int pool_reserve_locked(struct pool *p, const char *key, pid_t by_pid, struct pool_handle *ret);

/* Move an idle (or awaiting-approval when approval is true) slot to SLOT_BUSY for owner. */
int pool_checkout_locked(struct pool *p, struct pool_handle h, bool approval, pid_t owner,
                         const char *turn_id);

/* Park a busy slot: SLOT_IDLE (deadline = idle) or SLOT_AWAITING_APPROVAL. */
int pool_park_locked(struct pool *p, struct pool_handle h, enum slot_state state,
                     int64_t deadline_ms);

/* Mark a slot draining (it leaves the LRU and the key index keeps it until freed). */
int pool_drain_locked(struct pool *p, struct pool_handle h, uint8_t reason);

/*
 * Free the slot: generation bumped, key index/LRU updated, and the teardown remembered with
 * reason (0 = the reason recorded by pool_drain_locked, if any).
 */
int pool_free_locked(struct pool *p, struct pool_handle h, uint8_t reason);

/* Count of parked slots (idle + awaiting approval) holding a key. */
uint32_t pool_parked_count_locked(struct pool *p);

/* The most recent teardown remembered for key, or NULL. */
const struct pool_teardown *pool_recent_teardown_locked(struct pool *p, const char *key);

/* The least recently used idle slot, or -ENOENT. */
int pool_lru_idle_locked(struct pool *p);

/* Counter helpers (lock-free). */
void pool_counter_add(struct pool *p, unsigned idx, uint64_t n);
uint64_t pool_counter_get(const struct pool *p, unsigned idx);

/* A worker claims its in-flight entry: the index, or -ENOSPC. */
int pool_inflight_claim(struct pool *p, pid_t pid, uint64_t start);
/* Add (or, with a negative delta, take) runs on the caller's own entry. */
void pool_inflight_add(struct pool *p, int idx, int delta);
/* Runs in flight over every live worker. */
uint64_t pool_inflight_total(const struct pool *p);
/* Master: free the entries of processes that are gone (pid given: that one; 0: all dead). */
void pool_inflight_release(struct pool *p, pid_t pid);

const char *pool_state_name(uint32_t state);

uint32_t pool_key_hash(const char *key);

#endif
