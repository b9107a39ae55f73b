/*
 * gateway_conn — one connection of a model gateway (model_gateway.h), served by its own thread:
 * its requests read (keep-alive), checked against the route, forwarded upstream with libcurl and
 * their answers written back as they arrive, each call reported. Private to gateway/: the
 * struct and the shared state model_gateway.c lends its connections (each call takes g's lock
 * and never holds it across I/O).
 */
#ifndef AR_GATEWAY_CONN_H
#define AR_GATEWAY_CONN_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "gateway/gateway_http.h"
#include "gateway/gateway_route.h"
#include "gateway/gateway_usage.h"
#include "gateway/model_gateway.h"

struct gateway_conn {
    struct model_gateway *g;
    int fd;
    struct gateway_conn *next, *prev;
    struct buf in;   /* read and not yet consumed */
    struct buf head; /* the current request's head: req points into it */
    /* the call being served */
    struct gateway_http_request req;
    enum gateway_api api;
    struct gateway_usage usage;
    struct model_gateway_report rep;
    int64_t t0;
    int64_t out_length; /* the answer's Content-Length to the sandbox, -1 when none */
    bool head_sent, chunked_out, no_body, reported, gone;
};

/* Read, check, forward and answer the connection's next request: true when it stays open. */
bool gateway_conn_serve(struct gateway_conn *c);

/* The current route and a reference on it (*ret_ref; NULL route: none), and its release. */
const struct gateway_route *model_gateway_route_take(struct model_gateway *g, void **ret_ref);
void model_gateway_route_drop(struct model_gateway *g, void *ref);
/* Request body bytes held by all connections together (MODEL_GATEWAY_BODY_BUDGET). */
bool model_gateway_budget_take(struct model_gateway *g, uint64_t n);
void model_gateway_budget_give(struct model_gateway *g, uint64_t n);
/* model_gateway_free has begun: every connection stops. */
bool model_gateway_stopping(struct model_gateway *g);
/* A call's report for the poll loop (woken), in the order queued. */
void model_gateway_queue(struct model_gateway *g, const struct model_gateway_report *r);
/* A call went upstream (+1) or came back (-1): model_gateway_active. */
void model_gateway_calls(struct model_gateway *g, int delta);

#endif
