/*
 * worker — one FastCGI worker process: T threads, each accepting on fd 0 (the socket
 * spawn-fcgi bound) with its own FCGX_Request, handling one request at a time.
 * SIGTERM stops accepting; requests in progress run to their end; then the process exits.
 */
#ifndef AR_WORKER_H
#define AR_WORKER_H

#include "config.h"

/*
 * Runs in the forked child, on the session table the master attached (cfg->engine.pool);
 * returns the exit status (1 at once when the process is not a child of the table's master).
 */
int worker_main(const struct runner_config *cfg, unsigned index);

#endif
