/*
 * keeper — the small process that owns one live environment: the sandbox and the harness in
 * it. Workers come and go; the keeper stays, so a warm session survives the worker that
 * started it (a worker killed would otherwise take every warm session it started with it) and
 * any worker can run its next turn: the master, a child subreaper, adopts the keeper, and any
 * worker attaches through the socket named in the session's slot. A per-turn run is a keeper
 * destroyed after its turn: one code path.
 *
 * Its parts: keeper.c the start-up, keeper_loop.c the poll loop, keeper_relay.c the lines
 * between harness, worker and tool channel, keeper_teardown.c the end, keeper_state.h the
 * state they share; keeper_channel.c the sandbox's tool channel, keeper_claim.c a spare's
 * claim, egress_report.c the refused connections, keeper_model.c the model calls of the
 * sandbox's model gateway ("#model" lines to the worker).
 *
 * Start: agent-runner-keeper reads its spec (struct keeper_spec, keeper_proto.h) from stdin,
 * binds its unix socket, forks (the parent exits at once so the master, a child subreaper,
 * adopts the keeper), starts the sandbox through the spec's provider (provider_ops.start),
 * records its pids in its shm slot, and writes one start line to stdout: "ready <keeper-pid>
 * <sandbox-pid>" or "error <message>".
 *
 * The socket protocol (ACP lines both ways, "@tool" channel lines, and the control lines
 * "#park <ms>", "#await <ms>", "#destroy", "#claim <json>" (a spare bound to its session,
 * keeper_claim.h) from the worker and "#hello", "#busy", "#exit <status>" from the keeper) is
 * defined once in keeper_proto.h. One worker is attached at a time; a second connection gets
 * "#busy" and is closed. A harness line that is not an ACP object is never relayed, so the
 * harness cannot pose as the keeper.
 *
 * While no worker is attached the keeper answers the harness itself: permission requests are
 * rejected, other requests get -32601, notifications are dropped and counted. The sandbox's
 * tool channel (keeper_channel.h) is relayed to the attached worker as "@tool" lines and
 * answered the same way when nobody is attached. If the attached
 * worker vanishes while a session/prompt is in flight, the keeper sends session/cancel and
 * marks the slot's history broken. With nobody attached past its idle deadline (or past the
 * attach deadline right after start), or on SIGTERM, or when the harness exits, it kills the
 * sandbox's whole process tree (its cgroup), unmounts the workspace, frees its slot, closes
 * the worker's socket, removes the environment folder (fstree: a deep tree a sandbox left may
 * take a while, nobody waits for it) and exits. A harness line longer than ACP_LINE_MAX_DEFAULT
 * ends the environment with "#fail harness output line over N bytes".
 *
 * Local sandboxes: the provider makes the sandbox's network namespace, egress proxy, name
 * server and model gateway before it forks (sandbox_egress); the keeper's poll loop serves
 * them through provider_ops.poll_fds/service, each refused connection is logged and counted
 * (egress_report), each model call goes to the attached worker (keeper_model).
 */
#ifndef AR_KEEPER_H
#define AR_KEEPER_H

/* The keeper program; returns the process exit status. */
int keeper_main(int argc, char **argv);

#endif
