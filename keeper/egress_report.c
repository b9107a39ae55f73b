#include "egress_report.h"

#include <stddef.h>

#include "base/log.h"
#include "base/util.h"
#include "session/pool.h"

void egress_report_init(struct egress_report *r, struct pool *pool)
{
    r->pool = pool;
    r->window_ms = 0;
    r->logged = 0;
    r->unlogged = 0;
}

void egress_report_event(void *ctx, bool connection, const char *dest, const char *why)
{
    struct egress_report *r = ctx;
    int64_t now;

    if (!connection) {
        log_debug("egress: '%s' refused (%s)", dest, why);
        return;
    }
    if (r->pool)
        pool_counter_add(r->pool, PC_EGRESS_DENIED, 1);
    now = util_now_ms();
    if (now - r->window_ms >= 1000) {
        if (r->unlogged)
            log_info("egress denied: %llu more connections not logged",
                     (unsigned long long)r->unlogged);
        r->window_ms = now;
        r->logged = 0;
        r->unlogged = 0;
    }
    if (r->logged >= EGRESS_REPORT_LINES_PER_S) {
        r->unlogged++;
        return;
    }
    r->logged++;
    log_info("egress denied: connection to '%s' (%s)", dest, why);
}
