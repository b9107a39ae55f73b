/*
 * spares — the master keeps AGENT_RUNNER_SPARES pre-started environments per harness
 * (engine/environment/spare.h). One maker child at a time starts one spare (admin_spare_make:
 * the keeper it spawns is adopted by the master like any other); a claimed, expired or
 * evicted spare is replaced at the next tick. Rules:
 *   - a spare never takes the last free slot of the table (sessions come first), and a
 *     session that finds the table full evicts a spare (the engine does);
 *   - memory pressure: no spare starts while MemAvailable < SPARES_START_MIN_MIB, and while it
 *     is below SPARES_KEEP_MIN_MIB the oldest spare is drained, one per tick (spares go first);
 *   - a maker that fails backs off (1 s doubling to 60 s) and logs why once per failure;
 *   - draining (SIGTERM) starts no spare and waits for a running maker, so destroy_all finds
 *     every spare's keeper in the table.
 * Shells (AGENT_RUNNER_SHELLS, environment_spare.h) have a maker child of their own, so a
 * slow pi spare never holds them up: it makes shells one after another until the count is
 * back (each takes milliseconds), under the same slot, memory, backoff and draining rules;
 * the master looks every SHELLS_TICK_MS, so a claimed shell is replaced off the request path
 * while the turn that claimed it runs.
 */
#ifndef AR_SPARES_H
#define AR_SPARES_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct engine_config;

#define SPARES_START_MIN_MIB 1024
#define SPARES_KEEP_MIN_MIB 512

struct spares {
    const struct engine_config *cfg;
    pid_t maker;        /* the running maker child, 0 */
    int maker_fd_close; /* fd the maker closes first (the master's signalfd) */
    unsigned next_kind; /* round robin over the harnesses (admin_spare_next) */
    int64_t not_before; /* backoff after a failed maker (monotonic ms) */
    int64_t backoff_ms;
    pid_t shell_maker; /* the running shell maker child, 0 */
    int64_t shell_not_before;
    int64_t shell_backoff_ms;
};
#define SHELLS_TICK_MS 20

void spares_init(struct spares *s, const struct engine_config *cfg, int sig_fd);
/* Start a maker when a harness is short of spares (and the rules above allow it). */
void spares_tick(struct spares *s, bool draining);
/* 1 when pid was the maker (reaped: its status noted), 0 otherwise. */
int spares_reaped(struct spares *s, pid_t pid, int status);
/* Draining: wait for a running maker (bounded), then no more. */
void spares_stop(struct spares *s);
/* How soon the master should tick again (ms; -1: no hurry). */
int spares_timeout_ms(const struct spares *s);

#endif
