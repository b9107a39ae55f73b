#include "egress_report.h"

#include <stddef.h>

#include "base/log.h"
#include "session/pool.h"

void egress_report_init(struct egress_report *r, struct pool *pool)
{
    r->pool = pool;
    r->budget = (struct log_budget){0};
}

void egress_report_event(void *ctx, bool connection, const char *dest, const char *why)
{
    struct egress_report *r = ctx;
    uint64_t dropped;
    bool allowed;

    if (!connection) {
        log_debug("egress: '%s' refused (%s)", dest, why);
        return;
    }
    if (r->pool)
        pool_counter_add(r->pool, PC_EGRESS_DENIED, 1);
    allowed = log_budget_take(&r->budget, EGRESS_REPORT_LINES_PER_S, &dropped);
    if (dropped)
        log_info("egress denied: %llu more connections not logged", (unsigned long long)dropped);
    if (allowed)
        log_info("egress denied: connection to '%s' (%s)", dest, why);
}
