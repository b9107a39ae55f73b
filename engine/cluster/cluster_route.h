/*
 * cluster_route — a worker's side of the coordination plane: where a request for a session (or
 * a turn) runs. One Redis script per request (cluster.h "claim"), on the calling thread's own
 * connection:
 *
 *   - this member owns the session, or nobody does and the request may claim it (a /run):
 *     LOCAL (claimed: the owner key is now this member's, with a fresh nonce);
 *   - a live peer owns it: FORWARD to that peer, unless the request was itself forwarded,
 *     which is REFUSE 409 naming both members (a forwarded request is never forwarded again);
 *   - a turn (no session key): FORWARD to the live peer its record names; LOCAL when it names
 *     this member or nobody (unknown, expired, or a run without a session: never recorded);
 *   - a new session while this member is at capacity (its master's load gauge against
 *     AGENT_RUNNER_CLUSTER_CAPACITY): FORWARD to the least-loaded live member with room, else
 *     LOCAL;
 *   - Redis unreachable (the master says degraded, or this exchange failed): LOCAL, degraded.
 *
 * Nothing here holds the pool lock; the pool is only read for the master's gauges and its
 * counters are bumped by the caller.
 */
#ifndef AR_CLUSTER_ROUTE_H
#define AR_CLUSTER_ROUTE_H

#include <stdbool.h>
#include <stddef.h>

#include "cluster/cluster.h"

struct pool;

enum cluster_route_kind {
    CLUSTER_ROUTE_LOCAL = 0,
    CLUSTER_ROUTE_FORWARD,
    CLUSTER_ROUTE_REFUSE,
};

struct cluster_subject {
    const char *session_key; /* "<projectId>:<sessionId>", or NULL */
    /* a /run's turn id (recorded with the claim of its session), or, without a session key
     * and may_claim, the turn a request is about (routed to the member that ran it) */
    const char *turn_id;
    bool may_claim; /* a /run: a session nobody owns is claimed; a run without one is local */
};

struct cluster_route {
    enum cluster_route_kind kind;
    bool received;              /* LOCAL: a peer forwarded the request here */
    bool degraded;              /* LOCAL: Redis could not be asked */
    struct cluster_member peer; /* FORWARD: where to */
    int status;                 /* REFUSE: the HTTP status */
    char code[48];              /* REFUSE: the stream's error code */
    char message[512];          /* REFUSE */
};

/*
 * Decide where the request runs. forwarded_by is the forwarding member's name from
 * CLUSTER_FORWARDED_HEADER (NULL for a client's request). Always fills *ret (a failure is a
 * degraded LOCAL); returns 0, or -EIO when Redis failed (ret says LOCAL, degraded).
 */
int cluster_route(const struct cluster_config *c, struct pool *p, const struct cluster_subject *s,
                  const char *forwarded_by, struct cluster_route *ret);

/* The live members (at most max) into out: how many, or -errno with err (may be NULL). */
int cluster_members_list(const struct cluster_config *c, struct cluster_member *out, size_t max,
                         char *err, size_t errlen);

/* The calling thread's Redis connection (made on first use, freed when the thread exits). */
struct redis *cluster_thread_redis(const struct cluster_config *c);

#endif
