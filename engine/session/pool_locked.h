/*
 * pool_locked — the session table's lock and its raw transitions, private to the pool module
 * (pool.c, pool_shm.c, pool_spare.c), its unit tests and the benchmark. Every other module
 * changes a slot through the self-locking functions of pool.h.
 *
 * Locking: one process-shared, robust, error-checking mutex, always taken through pool_lock().
 * If the previous holder died, pool_lock() validates every slot, resets the ones that are not
 * consistent, rebuilds the derived lists, marks the mutex consistent and returns 1 (0 when the
 * lock was simply taken). A function ending in _locked requires the lock.
 */
#ifndef AR_POOL_LOCKED_H
#define AR_POOL_LOCKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "session/pool.h"

/* 0 = locked, 1 = locked after repairing a dead holder's mess, <0 = -errno. */
int pool_lock(struct pool *p);
void pool_unlock(struct pool *p);
/* Validate every slot and rebuild the derived lists; returns the number of slots reset. */
uint32_t pool_repair_locked(struct pool *p);
/* Consistency check: 0 or -EUCLEAN with a message in err. */
int pool_check_locked(struct pool *p, char *err, size_t errlen);
/* Record pid as the table's master. */
void pool_set_master(struct pool *p, pid_t pid);
/* The hash of a pool key (the key index's chains). */
uint32_t pool_key_hash(const char *key);

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
/* The least recently used idle slot, or -ENOENT. */
int pool_lru_idle_locked(struct pool *p);

#endif
