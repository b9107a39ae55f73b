/*
 * keeper_state — the small steps on a keeper's state every part of it takes (keeper_state.h).
 */
#include "keeper_state.h"

#include <errno.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

/*
 * A remote provider keeps its sandbox alive while a turn is in flight (a worker attached, or
 * a prompt waiting on an approval) and lets its idle backstop run otherwise.
 */
void keeper_sandbox_busy(struct keeper *k, bool busy)
{
    if (k->provider && k->provider->busy && k->proc.exit_fd >= 0)
        k->provider->busy(&k->proc, busy);
}

bool keeper_sandbox_log_allowed(struct keeper *k)
{
    uint64_t dropped;
    bool ok = log_budget_take(&k->sandbox_logs, KEEPER_SANDBOX_LOGS_PER_S, &dropped);

    if (dropped)
        log_warn("%llu more lines the harness provoked not logged", (unsigned long long)dropped);
    return ok;
}

/* A control line to the attached worker. */
void keeper_control_to_client(struct keeper *k, const struct keeper_msg *m)
{
    if (k->client_fd >= 0 && keeper_proto_encode(m, &k->client_out) < 0)
        log_warn("dropping a '%s' line: queue full", keeper_proto_kind_name(m->kind));
}

/* The keeper's slot steps (no-ops without a session table). */
void keeper_slot_set_pids(struct keeper *k)
{
    if (k->pool)
        (void)pool_session_set_keeper(k->pool, k->h, getpid(), util_proc_start_time(getpid()),
                                      k->child);
}

void keeper_slot_mark_broken(struct keeper *k)
{
    if (k->pool)
        (void)pool_session_mark_broken(k->pool, k->h);
}

/* The attached worker vanished without parking: keep a keyed session warm but broken. */
void keeper_slot_orphaned(struct keeper *k)
{
    if (k->pool)
        (void)pool_session_orphaned(k->pool, k->h, !k->per_turn, util_now_ms() + k->idle_ms);
}

void keeper_slot_release(struct keeper *k)
{
    if (k->pool)
        (void)pool_session_free(k->pool, k->h, k->reason);
}

void keeper_flush_fd(int fd, struct buf *q, bool *broken)
{
    while (q->len > 0 && fd >= 0) {
        ssize_t n = write(fd, q->data, q->len);
        if (n == -1) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                *broken = true;
            return;
        }
        buf_consume(q, (size_t)n);
    }
}
