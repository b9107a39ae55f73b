/*
 * run_limits — the deadlines of one turn (the four Agenta's own runner enforces):
 *   total         from the start of the turn
 *   first event   from the start until the first event leaves
 *   idle          since the last progress (an event, a harness message), armed by the first event
 *   tool call     per open tool call, from its announcement to its completion
 * Every wait in a turn asks run_limits_deadline() for the earliest deadline and, when it passes,
 * run_limits_check() names the limit that tripped. A pause (approval) freezes all of them.
 * Pure bookkeeping: no clocks are read here, the caller passes `now` (monotonic ms).
 */
#ifndef AR_RUN_LIMITS_H
#define AR_RUN_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/contracts.h"

#define RUN_LIMITS_TOOLS_MAX 64

struct run_limits {
    struct run_limits_config cfg;
    int64_t start;
    int64_t last_progress;
    bool first_event_seen;
    bool paused;
    size_t ntools;
    struct {
        char id[96];
        int64_t started;
    } tools[RUN_LIMITS_TOOLS_MAX];
};

/* An idle limit not below the total one becomes total/2 (the defaults are in fcgi/config.c). */
void run_limits_config_normalize(struct run_limits_config *cfg);

void run_limits_start(struct run_limits *l, const struct run_limits_config *cfg, int64_t now);
void run_limits_event(struct run_limits *l, int64_t now);    /* an event left */
void run_limits_progress(struct run_limits *l, int64_t now); /* any harness activity */
void run_limits_tool_start(struct run_limits *l, const char *id, int64_t now);
void run_limits_tool_end(struct run_limits *l, const char *id);
void run_limits_pause(struct run_limits *l);

/* Earliest deadline (0 = none). */
int64_t run_limits_deadline(const struct run_limits *l);
/* 0 while within limits; AR_E_TIMEOUT with the reason in msg once one tripped. */
int run_limits_check(const struct run_limits *l, int64_t now, char *msg, size_t msglen);

#endif
