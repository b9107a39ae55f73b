/*
 * env_stop — environments nobody is attached to, stopped: a keeper signalled and waited for
 * (eviction, /kill, the master reclaiming the slot of a dead worker), a session the pool
 * drained torn down, a ready spare evicted to make room for a session. Every call waits,
 * bounded, until the teardown it started has finished. A keeper's own teardown frees its slot
 * and its folder; nothing here touches them.
 */
#ifndef AR_ENV_STOP_H
#define AR_ENV_STOP_H

#include <stdint.h>
#include <sys/types.h>

#include "core/contracts.h"
#include "session/pool.h"

#define ENVIRONMENT_STOP_WAIT_MS 10000 /* how long a teardown is waited for */

/*
 * Tear down the environment of a slot that nobody is attached to (idle, parked, or whose
 * worker died): signal its keeper and wait until it is gone. Used by eviction, /kill and the
 * master. keeper_pid/start identify the process (pids are reused). -ETIMEDOUT (after a
 * SIGKILL) when it outlived wait_ms.
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

/*
 * The table is full: stop the oldest ready spare and wait until its slot is free. 1 when one
 * was stopped, 0 when there was none.
 */
int environment_evict_spare(const struct engine_config *cfg);

#endif
