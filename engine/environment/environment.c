/*
 * environment — a new environment started cold, or the live one of a slot reattached
 * (environment.h).
 */
#include "environment/environment.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "environment/env_start.h"
#include "proto/keeper_proto.h"
#include "sandbox/host.h"
#include "telemetry/stages.h"

#define RECONNECT_HELLO_MS 5000 /* a live keeper says hello at once; one that does not is lost */

int environment_acquire(const struct engine_config *cfg, const struct run_request *req,
                        const struct sandbox_plan *plan, const char *key, uint64_t idle_ms,
                        bool per_turn, bool had_lease, struct environment **ret, char *err,
                        size_t errlen)
{
    struct environment *env;
    struct sandbox_env confine;
    struct buf spec;
    bool created = false, started = false;
    int r;

    stages_mark(STAGES_W_ENV0);
    env = environment_new(cfg);
    if (!env)
        return -ENOMEM;
    env->provider = provider_get(req->sandbox);
    if (!env->provider) {
        snprintf(err, errlen, "sandbox: provider \"%s\" is not enabled", req->sandbox);
        environment_free(env);
        return AR_E_INVALID_REQUEST;
    }
    if (cfg->pool) {
        struct pool_reservation rv = environment_reservation(req, plan, key, idle_ms, per_turn);

        r = pool_session_reserve(cfg->pool, &rv, &env->h);
        if (r == -ENOSPC && environment_evict_spare(cfg) > 0) /* sessions before spares */
            r = pool_session_reserve(cfg->pool, &rv, &env->h);
        if (r < 0) {
            snprintf(err, errlen, r == -ENOSPC ? "no free session slot" : "session table: %s",
                     ar_strerror(r));
            environment_free(env);
            return r == -ENOSPC ? AR_E_CAPACITY : r;
        }
        env->has_slot = true;
    }
    r = env_setup_create(cfg->state_dir, &env->paths, err, errlen);
    if (r < 0)
        goto fail;
    created = true;
    if (env->has_slot)
        (void)pool_session_set_env_dir(cfg->pool, env->h, env->paths.dir);
    r = environment_prepare_sandbox(env, req, &confine, err, errlen);
    if (r < 0)
        goto fail;
    stages_mark(STAGES_W_SETUP);
    buf_init(&spec, KEEPER_SPEC_MAX);
    /* host confinement and egress are the local sandbox's; a remote one has its own */
    r = environment_encode_spec(env, req, plan, key, idle_ms, per_turn, had_lease,
                                cfg->sandbox && !env->provider->acquire ? &confine : NULL, &spec,
                                err, errlen);
    stages_mark(STAGES_W_SPAWN);
    if (r == 0)
        r = environment_spawn_keeper(env, &spec, err, errlen);
    stages_mark(STAGES_W_READY);
    buf_release(&spec);
    if (r < 0)
        goto fail;
    started = true;
    if (env->provider->acquire) {
        /* what the keeper's lease was (outcome, spans, where the harness works) */
        r = provider_report_read(env->paths.dir, &env->lease_report);
        if (r < 0)
            log_debug("unreadable lease report: %s", ar_strerror(r));
        if (jsonx_str(env->lease_report, "workspace"))
            snprintf(env->cwd, sizeof(env->cwd), "%s", jsonx_str(env->lease_report, "workspace"));
    }
    r = environment_connect_keeper(env, util_now_ms() + (int64_t)cfg->keeper_start_ms, err, errlen);
    if (r < 0)
        goto fail;
    stages_mark(STAGES_W_ATTACHED);
    *ret = env;
    return 0;
fail:
    /* one error boundary: undo everything this call did */
    if (started) {
        if (environment_destroy(env, TEARDOWN_FAILED_TURN) < 0)
            log_debug("keeper %d did not finish its teardown", (int)env->keeper_pid);
    } else if (created) {
        /* the cgroup, the workspace mount and the folder, whatever exists of them */
        (void)sandbox_host_reclaim(cfg->sandbox, env->paths.dir);
    }
    environment_release_slot(env);
    environment_free(env);
    return r;
}

int environment_reconnect(const struct engine_config *cfg, struct pool_handle h, bool ahead,
                          struct environment **ret, char *err, size_t errlen)
{
    struct environment *env;
    struct pool_session *ps;
    int r;

    if (!cfg->pool)
        return -ENOENT;
    env = environment_new(cfg);
    ps = malloc(sizeof(*ps));
    if (!env || !ps) {
        free(ps);
        environment_free(env);
        return -ENOMEM;
    }
    r = pool_session_get_owned(cfg->pool, h, util_self_pid(), ps);
    if (r < 0) {
        free(ps);
        environment_free(env);
        snprintf(err, errlen, "the session slot changed hands");
        return -ESTALE;
    }
    memcpy(env->paths.dir, ps->env_dir, sizeof(ps->env_dir));
    memcpy(env->acp_session, ps->acp_session, sizeof(env->acp_session));
    env->keeper_pid = ps->keeper_pid; /* the hello says it again */
    env->sandbox_pid = ps->sandbox_pid;
    /* env->provider stays NULL: a live keeper already runs its sandbox (the slot's provider
     * field is the model's provider family, for logs) */
    free(ps);
    snprintf(env->paths.workspace, sizeof(env->paths.workspace), "%s/workspace", env->paths.dir);
    snprintf(env->paths.socket, sizeof(env->paths.socket), "%s/keeper.sock", env->paths.dir);
    env->h = h;
    env->has_slot = true;
    env->warm = true;
    if (ahead)
        r = environment_attach_ahead(env, util_now_ms() + RECONNECT_HELLO_MS, err, errlen);
    else
        r = environment_connect_keeper(env, util_now_ms() + RECONNECT_HELLO_MS, err, errlen);
    if (r < 0) {
        env->has_slot = false;
        environment_free(env);
        return r;
    }
    *ret = env;
    return 0;
}
