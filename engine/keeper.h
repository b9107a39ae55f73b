/*
 * keeper — the small process that owns one live environment: the sandbox and the harness in
 * it (DESIGN.md §1). Workers come and go; the keeper stays, so a warm session survives the
 * worker that started it and any worker can run its next turn.
 *
 * Start: agent-runner-keeper reads its spec (JSON, see environment.c) from stdin, binds its
 * unix socket, forks (the parent exits at once so the master, a child subreaper, adopts the
 * keeper), starts the sandbox, records its pid in its shm slot, and writes one line to
 * stdout: "ready <keeper-pid> <sandbox-pid>" or "error <message>".
 *
 * Socket protocol, one line at a time in both directions:
 *   worker -> keeper   "{...}"           an ACP message for the harness (stdin)
 *                      "#park <idle-ms>" the turn ended and the session stays warm
 *                      "#destroy"        tear everything down now
 *   keeper -> worker   "#hello <keeper-pid> <sandbox-pid>" on attach
 *                      "{...}"           an ACP message from the harness (stdout)
 *                      "#exit <status>"  the harness went away
 * One worker is attached at a time; a second connection gets "#busy" and is closed.
 *
 * While no worker is attached the keeper answers the harness itself: permission requests are
 * rejected, other requests get -32601, notifications are dropped and counted. If the attached
 * worker vanishes while a session/prompt is in flight, the keeper sends session/cancel and
 * marks the slot's history broken. With nobody attached past its idle deadline (or past the
 * attach deadline right after start), or on SIGTERM, or when the harness exits, it kills the
 * sandbox's whole process tree, removes the environment folder, frees its slot and exits.
 */
#ifndef AR_KEEPER_H
#define AR_KEEPER_H

/* The keeper program; returns the process exit status. */
int keeper_main(int argc, char **argv);

#endif
