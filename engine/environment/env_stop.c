/*
 * env_stop — environments nobody is attached to, stopped (env_stop.h).
 */
#include "environment/env_stop.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

int environment_destroy_keeper(pid_t keeper_pid, uint64_t keeper_start, int64_t wait_ms)
{
    int64_t deadline = util_now_ms() + wait_ms;

    if (!util_proc_alive(keeper_pid, keeper_start))
        return 0;
    kill(keeper_pid, SIGTERM);
    while (util_now_ms() < deadline) {
        if (!util_proc_alive(keeper_pid, keeper_start))
            return 0;
        usleep(2000);
    }
    if (util_proc_alive(keeper_pid, keeper_start))
        kill(keeper_pid, SIGKILL);
    return -ETIMEDOUT;
}

/* Wait until key is gone from the table (its keeper finished tearing down). */
static bool wait_key_gone(struct pool *p, const char *key, int64_t wait_ms)
{
    int64_t deadline = util_now_ms() + wait_ms;

    for (;;) {
        int r = pool_session_present(p, key);

        if (r < 0)
            return false;
        if (r == 0)
            return true;
        if (util_now_ms() > deadline)
            return false;
        usleep(2000);
    }
}

int environment_evict(struct pool *p, const struct pool_victim *v)
{
    int r = 0;

    if (!v->any)
        return 0;
    log_debug("evicting session '%s' (%s)", v->key, teardown_reason_name(v->reason));
    if (v->keeper_pid > 0)
        (void)environment_destroy_keeper(v->keeper_pid, v->keeper_start, ENVIRONMENT_STOP_WAIT_MS);
    if (v->key[0] && !wait_key_gone(p, v->key, ENVIRONMENT_STOP_WAIT_MS)) {
        log_debug("session '%s' is still being torn down", v->key);
        r = -ETIMEDOUT;
    }
    return r;
}

int environment_kill(struct pool *p, const char *key, enum teardown_reason reason)
{
    struct pool_victim v;
    int r;

    if (!p)
        return 0;
    r = pool_session_kill(p, key, reason, &v);
    if (r <= 0)
        return r;
    (void)environment_evict(p, &v);
    return 1;
}

int environment_evict_spare(const struct engine_config *cfg)
{
    int64_t deadline = util_now_ms() + ENVIRONMENT_STOP_WAIT_MS;
    struct pool_session s;
    struct pool_victim v;

    if (!cfg->pool || pool_spare_evict(cfg->pool, &v) != 1)
        return 0;
    log_debug("evicting a spare for a session (keeper %d)", (int)v.keeper_pid);
    (void)environment_destroy_keeper(v.keeper_pid, v.keeper_start, ENVIRONMENT_STOP_WAIT_MS);
    /* its keeper frees the slot at the end of its teardown */
    while (pool_session_peek(cfg->pool, v.h.index, &s) && s.h.generation == v.h.generation &&
           util_now_ms() < deadline)
        usleep(2000);
    return 1;
}
