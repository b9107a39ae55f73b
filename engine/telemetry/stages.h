/*
 * stages — where a cold local turn's time and CPU go, stage by stage (`make bench`'s cold-start
 * budget, README "Benchmarks").
 *
 * Both sides stamp CLOCK_MONOTONIC (one clock for every process of the host) and their own CPU
 * clock at the stage boundaries they pass. The keeper's stamps (process CPU, counted across its
 * detaching fork) always travel to the worker in its ready line: a few clock reads per cold
 * start. The worker's (thread CPU) are taken, and a turn's stages written as one JSON line to
 * the file AGENT_RUNNER_STAGE_LOG names, only when that variable is set (the bench sets it);
 * otherwise every call here returns at once. Nothing here can fail a turn: a line that cannot
 * be written is dropped.
 */
#ifndef AR_STAGES_H
#define AR_STAGES_H

#include <stdbool.h>
#include <stddef.h>

/* The keeper's boundaries, in the order its ready line carries them. */
enum stages_kpoint {
    STAGES_K_MAIN,  /* keeper_main entered (the keeper exec'ed) */
    STAGES_K_NET0,  /* the sandbox's network namespace and egress: begun */
    STAGES_K_NET1,  /* ... done */
    STAGES_K_ETC0,  /* bwrap's command line: /etc texts, seccomp programme, files: begun */
    STAGES_K_ETC1,  /* ... done */
    STAGES_K_EXEC,  /* the forked child confined itself and exec'ed bwrap */
    STAGES_K_READY, /* the ready line is written */
    STAGES_K_COUNT,
};

/* The worker's boundaries of one cold turn. */
enum stages_wpoint {
    STAGES_W_REQ,      /* the engine took the parsed request */
    STAGES_W_ENV0,     /* the environment's acquisition began */
    STAGES_W_SETUP,    /* slot, folder, uid, workspace, cgroup: set up */
    STAGES_W_SPAWN,    /* the keeper is being spawned */
    STAGES_W_READY,    /* its ready line was read */
    STAGES_W_ATTACHED, /* connected to the keeper (its hello read) */
    STAGES_W_INIT1,    /* ACP initialize answered */
    STAGES_W_NEW1,     /* session/new (or load) answered */
    STAGES_W_DELTA,    /* the first message_delta was emitted */
    STAGES_W_TD0,      /* the environment's end (park or teardown) began */
    STAGES_W_TD1,      /* ... done */
    STAGES_W_COUNT,
};

/* Keeper: stamp p. */
void stages_keeper_mark(enum stages_kpoint p);
/* Keeper: just before its detaching fork; stages_keeper_forked() in the child after it. */
void stages_keeper_before_fork(void);
void stages_keeper_forked(void);
/* Keeper: its stamps as the ready line's text ("<ns>:<cpu ns>," per point, 0:0 not passed). */
void stages_keeper_text(char *out, size_t len);

/* Worker: true when AGENT_RUNNER_STAGE_LOG is set (read once per process). */
bool stages_enabled(void);
/* Worker: a new turn on this thread (forgets the last one's stamps). Stamping starts with
 * STAGES_W_ENV0: a warm turn takes no stamp. */
void stages_turn_begin(void);
/* Worker: true while this thread's turn is being stamped (a cheap test before a lookup). */
bool stages_turn_on(void);
/* Worker: stamp p on this thread's turn (first stamp of p wins). */
void stages_mark(enum stages_wpoint p);
/* Worker: the keeper's stamps from its ready line (text of stages_keeper_text). */
void stages_keeper_parse(const char *text, size_t len);
/* Worker: the cold turn ended: its stages as one JSON line into the stage log, when every
 * boundary was passed; then the stamps are forgotten. */
void stages_turn_end(void);

#endif
