/*
 * keeper_teardown — the end of a keeper's environment: the harness's exit noticed (a local
 * child reaped, a remote one announced on its exit fd, one that closed its output waited
 * for), and the teardown itself: the sandbox's process tree, cgroup and network stopped, a
 * remote lease ended, the worker told why ("#exit", "#fail"), the socket closed as the last
 * sign, the slot freed, the environment folder removed.
 */
#ifndef AR_KEEPER_TEARDOWN_H
#define AR_KEEPER_TEARDOWN_H

#include "keeper_state.h"

/* Reap exited children; the harness's exit status into k (SIGCHLD). */
void keeper_teardown_reap(struct keeper *k);
/* A remote harness's exit announced on proc.exit_fd. */
void keeper_teardown_remote_exited(struct keeper *k);
/* The harness closed its output: wait a moment for its exit, then end it (it may hide). */
void keeper_teardown_await_child(struct keeper *k);
/* Tear everything down (see the top); safe on a keeper that started only partly. */
void keeper_teardown(struct keeper *k);

#endif
