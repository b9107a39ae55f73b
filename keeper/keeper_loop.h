/*
 * keeper_loop — the keeper's poll loop: signals, the listening socket or the attached worker,
 * the tool channel, the harness's stdin/stdout/stderr, a remote harness's exit fd and the
 * provider's own fds (the local sandbox's egress proxy and name server, which log and count
 * each refused connection), until a signal, the idle deadline, a "#destroy" or the harness's
 * exit ends it (k->reason says which).
 */
#ifndef AR_KEEPER_LOOP_H
#define AR_KEEPER_LOOP_H

#include "keeper_state.h"

/* Run until the keeper must end. 0, or -errno when poll failed. */
int keeper_loop(struct keeper *k);

#endif
