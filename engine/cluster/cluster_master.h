/*
 * cluster_master — the master's side of the coordination plane: this member's record, the
 * owner keys of the sessions it holds, and what happens when Redis goes and comes back.
 *
 * The master refreshes, not a worker thread: the master is the instance's liveness (workers
 * die with it; keepers outlive it), so a host whose master died stops refreshing and its keys
 * expire a TTL later, which is exactly when its sessions may be claimed elsewhere. Every tick
 * (AGENT_RUNNER_CLUSTER_REFRESH_MS), in one pipelined round trip:
 *   - the member record (SET PX ttl) and the members set;
 *   - for every live slot with a session key: the refresh script, which extends this member's
 *     key, re-asserts a key that is gone (Redis restarted, or it expired while Redis was
 *     unreachable), and reports another member's: that session was claimed elsewhere, so the
 *     environment here is stale and is killed (teardown `owner-moved`, which leaves a remote
 *     sandbox running for its new owner);
 *   - for every key seen last tick whose slot is gone: the release script (deleted only when
 *     it still holds the value seen then).
 * Redis calls have short deadlines (connect 300 ms, exchange 1 s) so a lost Redis delays the
 * master's other chores by at most that per tick; while it is lost the state is `degraded`
 * (PC_CLUSTER_STATE: workers serve everything locally without asking), and the tick that
 * reaches it again reconciles as above. A clean stop releases every key and the record.
 *
 * One thread (the master's); no lock is held across a Redis call.
 */
#ifndef AR_CLUSTER_MASTER_H
#define AR_CLUSTER_MASTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"

struct pool;
struct cluster_master;

/* What one tick did, for the master's log. */
struct cluster_tick_report {
    bool ran;               /* the tick was due */
    bool up;                /* Redis answered */
    bool changed;           /* up differs from the tick before */
    char error[256];        /* !up: why */
    uint32_t held;          /* sessions held here */
    uint32_t members;       /* live members */
    uint32_t asserted;      /* keys re-asserted (they were gone) */
    uint32_t released;      /* keys released (their environment ended) */
    uint32_t conflicts;     /* environments killed: owned elsewhere */
    char conflict_key[272]; /* the first of them */
    char conflict_owner[CLUSTER_NAME_MAX];
};

/* c and p must outlive it; runs_max is the member record's runsMax. NULL on ENOMEM. */
struct cluster_master *cluster_master_new(const struct cluster_config *c, struct pool *p,
                                          uint64_t runs_max);
/* A tick when it is due (now or later: it returns at once). rep is always filled. */
void cluster_master_tick(struct cluster_master *m, struct cluster_tick_report *rep);
/* Milliseconds until the next tick is due (0: now). */
int64_t cluster_master_due_ms(const struct cluster_master *m);
/* Clean stop: release every key this member holds and its record. Best effort. */
void cluster_master_stop(struct cluster_master *m);
void cluster_master_free(struct cluster_master *m);
/* In a forked child: close the inherited connection without a word to Redis. */
void cluster_master_after_fork(struct cluster_master *m);

#endif
