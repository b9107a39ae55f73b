/*
 * worker — one FastCGI worker process: T threads, each accepting on fd 0 (the socket
 * spawn-fcgi bound) with its own FCGX_Request, handling one request at a time.
 * SIGTERM stops accepting; requests in progress run to their end; then the process exits.
 */
#ifndef AR_WORKER_H
#define AR_WORKER_H

#include "config.h"
#include "session/pool.h"

/* Runs in the forked child; returns the exit status. */
int worker_main(const struct runner_config *cfg, struct pool *pool, unsigned index);

#endif
