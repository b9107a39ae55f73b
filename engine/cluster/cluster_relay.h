/*
 * cluster_relay — a request forwarded to the member that owns its session, and the answer
 * relayed to the client as it arrives: the same method, path, body, Accept and request id,
 * the runner's token, and CLUSTER_FORWARDED_HEADER naming this member (the peer never forwards
 * it again), over https to the peer's advertised URL (libcurl through base/httpc: the calling
 * thread's handle, so its connection to the peer is kept alive between requests; peers are
 * verified against AGENT_RUNNER_CLUSTER_CA_FILE or the system's CAs).
 *
 * An NDJSON answer is relayed record by record: each complete line is written and flushed as
 * soon as it is in, and the peer's X-Agent-Runner-Turn (the turn the stream is) goes to the
 * sink with its status. A run's stream (POST) that breaks before its result record (the peer
 * died mid-turn) gets the ending every stream has, numbered after the last record relayed: an
 * `error` event naming the peer, `done`, and a result with ok:false. A reattach's (GET /turns/
 * {id}/events) is cut without one, as a local follower's is: its client reattaches from its
 * last seq. A client that goes away stops the transfer (the peer then sees its client gone,
 * exactly as if the client had been connected to it).
 */
#ifndef AR_CLUSTER_RELAY_H
#define AR_CLUSTER_RELAY_H

#include <stdbool.h>
#include <stddef.h>

#include "cluster/cluster.h"

/* Where the answer goes (the front's response). */
struct cluster_sink {
    /* the status line, content type and the peer's X-Agent-Runner-Turn (NULL: none; a valid
     * header value), once, before any body byte; <0 = client gone */
    int (*start)(void *ctx, int status, const char *content_type, const char *turn_id);
    int (*write)(void *ctx, const char *data, size_t len); /* <0 = client gone */
    int (*flush)(void *ctx);
    bool (*alive)(void *ctx); /* may be NULL */
    void *ctx;
};

struct cluster_request {
    const char *method; /* "POST", "GET" */
    const char *path;   /* with its query string, e.g. "/run" */
    const char *body;   /* may be NULL */
    size_t body_len;
    const char *accept;     /* the client's Accept (NULL: none) */
    const char *request_id; /* X-Request-Id, propagated */
    const char *token;      /* the runner's token */
    bool ndjson;            /* the client asked for NDJSON */
};

/*
 * Forward rq to peer and relay the answer into sink. 0 when the peer answered (its answer, or
 * what of it arrived plus the error ending, reached the sink, or the client went away);
 * -EHOSTDOWN / -ECONNREFUSED / -ETIMEDOUT / ... when the peer could not be reached or answered
 * 502, 503 or 504 before anything was relayed: nothing was written, the caller may route
 * again. err says why (never the token).
 */
int cluster_forward(const struct cluster_config *c, const struct cluster_member *peer,
                    const struct cluster_request *rq, const struct cluster_sink *sink, char *err,
                    size_t errlen);

#endif
