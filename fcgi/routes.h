/*
 * routes — the HTTP surface of CONTRACT.md on top of one FastCGI request: method and path
 * dispatch, token auth, admission, body caps, and the handlers that call the engine.
 */
#ifndef AR_ROUTES_H
#define AR_ROUTES_H

#include <fcgiapp.h>

#include "config.h"
#include "session/pool.h"

struct route_ctx {
    const struct runner_config *cfg;
    struct pool *pool;
    unsigned worker_index;
    int inflight_slot; /* this worker process's entry in the in-flight table */
};

void routes_handle(const struct route_ctx *rc, FCGX_Request *fr);

#endif
