/*
 * egress_report — what the keeper does with a connection its sandbox's egress policy refused:
 * one log line naming the destination and why (the keeper's log context adds the
 * session and the harness; never a byte of payload) and agent_runner_egress_denied_total in
 * the session table's counters. A hostile sandbox that loops on refused connects cannot flood
 * the log: at most EGRESS_REPORT_LINES_PER_S lines a second, then one line saying how many
 * were not logged (every one is still counted). Refused DNS questions and an overloaded proxy
 * are logged at debug and not counted.
 */
#ifndef AR_EGRESS_REPORT_H
#define AR_EGRESS_REPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/log.h"

#define EGRESS_REPORT_LINES_PER_S 20

struct pool;

struct egress_report {
    struct pool *pool;        /* may be NULL (no session table) */
    struct log_budget budget; /* EGRESS_REPORT_LINES_PER_S */
};

void egress_report_init(struct egress_report *r, struct pool *pool);
/* A provider_egress_fn: ctx is the struct egress_report. */
void egress_report_event(void *ctx, bool connection, const char *dest, const char *why);

#endif
