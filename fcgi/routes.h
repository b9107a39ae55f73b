/*
 * routes — the runner's HTTP surface on one FastCGI request: method and path dispatch, token
 * auth, admission, body caps, and the handlers that call the engine. GET /health, /livez,
 * /readyz (no token); POST /run and /stream (a turn: one JSON answer, or NDJSON events when
 * the client accepts application/x-ndjson), POST /kill and /cancel (a session's environment),
 * GET /metrics and /subscription-status (token).
 */
#ifndef AR_ROUTES_H
#define AR_ROUTES_H

#include <fcgiapp.h>

#include "config.h"

struct route_ctx {
    const struct runner_config *cfg; /* cfg->engine.pool: the session table */
    unsigned worker_index;
    int inflight_slot; /* this worker process's entry in the in-flight table */
};

void routes_handle(const struct route_ctx *rc, FCGX_Request *fr);

#endif
