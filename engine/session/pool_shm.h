/*
 * pool_shm — the layout of the shared-memory session table, private to the pool module
 * (pool.c, pool_shm.c, pool_spare.c) and its unit tests. Nothing else includes this file: every
 * other module reaches the table through pool.h, so no other module can write a slot field.
 *
 *   struct pool_header | struct pool_slot[nslots] | int32_t buckets[nbuckets]
 *
 * Inside the segment there are offsets (slot indexes), never pointers: the hash chains (by
 * pool key), the free list and the LRU list of idle slots. All of them are *derived* state and
 * can be rebuilt from the slot states alone, which is what the repair after EOWNERDEAD does.
 */
#ifndef AR_POOL_SHM_H
#define AR_POOL_SHM_H

#include <pthread.h>

#include "core/contracts.h"
#include "session/pool.h"
#include "session/pool_locked.h"
#include "telemetry/metrics.h"

#define POOL_MAGIC 0x4152504f4f4c0001ull /* "ARPOOL" + 1 */
#define POOL_LAYOUT_VERSION 12u /* bumped with every change of the layout below (gate kinds, spares) */
#define POOL_APPROVALS_MAX APPROVAL_GATES_MAX
#define POOL_COUNTERS_MAX 128

enum slot_flags {
    SLOT_F_PER_TURN = 1u << 0,       /* destroy after the current turn */
    SLOT_F_HISTORY_BROKEN = 1u << 1, /* a turn died mid-way: the next turn replays cold */
    SLOT_F_CANCEL = 1u << 3,         /* /cancel asked the current turn to stop */
    SLOT_F_SPARE = 1u << 4,          /* reserved for, or holding, a spare */
    SLOT_F_FROM_SPARE = 1u << 5,     /* a session that claimed a spare */
};

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
    uint32_t caps; /* harness capability bits (turn_caps_to_bits) */
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
    struct approval_gate approvals[POOL_APPROVALS_MAX];
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

/* Internal to the pool module. Every state change goes through here so the derived parked
 * count stays exact. */
void pool_set_state(struct pool *p, struct pool_slot *s, uint32_t state);
/* Zero the slot and bump its generation (state free). */
void pool_slot_reset(struct pool_slot *s);
/* The public copy of slot index s. */
void pool_copy_session(const struct pool_slot *s, uint32_t index, struct pool_session *ret);
/* The slot behind h if its generation still matches, else NULL. */
struct pool_slot *pool_slot_locked(struct pool *p, struct pool_handle h);

#endif
