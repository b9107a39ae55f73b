/*
 * engine_start — a new session's environment: a claimed spare (spare.h) or a cold start, then
 * initialize + session/new (engine_start.h).
 */
#include "engine_start.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "agenta/heartbeat.h"
#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "engine_keep.h"
#include "sandbox/host.h"
#include "telemetry/metrics.h"
#include "telemetry/stages.h"
#include "telemetry/trace.h"
#include "turn/run_turn.h"

static void flush_events(void *ctx)
{
    event_stream_flush(ctx);
}

void engine_stream_before_waits(struct environment *env, struct event_stream *es)
{
    env->before_wait = flush_events;
    env->before_wait_ctx = es;
}

/*
 * initialize + session/new on a fresh environment: its ACP session and capabilities. Then a
 * local sandbox gets its CPU quota (sandbox_host_env_throttle: the harness's own start ran
 * without it; nothing the agent does can run before the first prompt).
 */
static int open_session(const struct engine_turn *t, struct environment *env, char *err,
                        size_t errlen)
{
    struct turn_session sess = {.agent_caps = NULL, .mcp_servers = t->plan.session_mcp};
    struct engine_keep *k = t->keep;
    struct turn_env te;
    int r;

    /* a kept session: its files into the new sandbox (no agent code has run there yet) */
    if (k && k->resume == KEEP_LOAD) {
        r = engine_keep_restore(t, env, k, err, errlen);
        if (r < 0)
            engine_keep_fall_back(k, "the kept files could not be restored (%s)", err);
        else
            sess.load_id = k->st.acp_session;
    }
    environment_turn_env(env, &te);
    r = run_turn_open_session(&te, t->plan.model_id, t->cfg->model_strict,
                              util_now_ms() + (int64_t)t->cfg->harness_init_ms, &sess, err, errlen);
    stages_mark(STAGES_W_NEW1);
    if (k && k->resume == KEEP_LOAD && sess.load_failed) {
        /* the harness may be half-way into the load: another environment replays */
        engine_keep_fall_back(k, "%s", err);
        k->load_failed = true;
    } else if (k && k->resume == KEEP_LOAD && r == 0 && !sess.loaded) {
        engine_keep_fall_back(k, "the harness does not advertise loadSession");
    }
    if (env->agent_caps)
        json_object_put(env->agent_caps);
    env->agent_caps = sess.agent_caps;
    if (sess.acp_session[0])
        memcpy(env->acp_session, sess.acp_session, sizeof(env->acp_session));
    /* pi's extension gates its tools only if it is in place: it says hello while pi starts */
    if (r == 0 && t->plan.channel_gating && !sess.channel_gating) {
        snprintf(err, errlen,
                 "pi's permission gate did not start (its extension said no hello "
                 "with gating on the keeper channel): refusing to run pi ungated");
        r = AR_E_HARNESS_ERROR;
    }
    if (r == 0 && t->cfg->sandbox && !env->provider->acquire &&
        sandbox_host_env_throttle(t->cfg->sandbox, env->paths.dir, err, errlen) < 0)
        r = AR_E_SANDBOX;
    return r;
}

/*
 * The error event's code of an acquisition failure, as Agenta's runner names the same
 * failures: no room in the sandbox provider, no room on this runner, anything else.
 */
static const char *acquire_error_code(int r)
{
    if (r == AR_E_SANDBOX_CAPACITY)
        return "sandbox_capacity";
    if (r == AR_E_CAPACITY)
        return "runner_capacity";
    return "runner_error";
}

/* A claimed spare, open; -ENOENT when none is ready. Any other failure destroyed it. */
static int start_from_spare(struct engine_turn *t, struct event_stream *es,
                            struct environment **ret, char *err, size_t errlen)
{
    const struct engine_config *cfg = t->cfg;
    struct environment *env = NULL;
    int r;

    r = environment_claim_spare(cfg, t->req, &t->plan, t->key, t->policy.idle_ms,
                                t->policy.mode != LIFECYCLE_WARM, &env, err, errlen);
    if (r < 0)
        return r;
    engine_stream_before_waits(env, es);
    r = open_session(t, env, err, errlen);
    log_debug("the spare's harness session is open (%d)", r);
    if (r < 0) {
        (void)environment_destroy(env, TEARDOWN_FAILED_TURN);
        environment_free(env);
        return r;
    }
    *ret = env;
    return 0;
}

static int start_once(struct engine_turn *t, struct event_stream *es, enum teardown_reason why,
                      struct environment **ret, bool *ret_limit, char *err, size_t errlen,
                      const char **ret_code)
{
    const struct engine_config *cfg = t->cfg;
    const struct run_request *req = t->req;
    bool warm_policy = t->policy.mode == LIFECYCLE_WARM;
    struct environment *env = NULL;
    int64_t spawn_start = util_now_ns();
    int r;

    if (t->spare_ok) {
        r = start_from_spare(t, es, &env, err, errlen);
        if (r == 0) {
            if (cfg->pool)
                metrics_observe(&pool_metrics(cfg->pool)->keeper_spawn,
                                (util_now_ns() - spawn_start) / 1000);
            *ret = env;
            return 0;
        }
        if (r != -ENOENT && r != -EEXIST)
            log_info("a spare could not serve the session, starting cold: %s", err);
        if (t->keep)
            t->keep->load_failed = false; /* the cold start below replays */
    }
    r = -ENOENT;
    /* a pre-made shell (uid, cgroup, network ready) for any harness on the local provider */
    if (cfg->shells && cfg->sandbox && req->sandbox && strcmp(req->sandbox, "local") == 0) {
        r = environment_claim_shell(cfg, req, &t->plan, t->key, t->policy.idle_ms, !warm_policy,
                                    &env, err, errlen);
        if (r < 0 && r != -ENOENT && r != -EEXIST)
            log_info("a shell could not serve the run, starting cold: %s", err);
    }
    if (r < 0)
        r = environment_acquire(cfg, req, &t->plan, t->key, t->policy.idle_ms, !warm_policy,
                                why != TEARDOWN_NONE, &env, err, errlen);
    if (r == -EEXIST && cfg->cluster) {
        /* several hosts: one turn of a session at a time, everywhere (as engine_run refuses) */
        snprintf(err, errlen, "%s", HEARTBEAT_REFUSED_MESSAGE);
        *ret_code = HEARTBEAT_REFUSED_CODE;
        return -EBUSY;
    }
    if (r == -EEXIST) {
        /* another request of the session got there first: run without a seat */
        t->key[0] = '\0';
        r = environment_acquire(cfg, req, &t->plan, "", t->policy.idle_ms, true, false, &env, err,
                                errlen);
    }
    if (r < 0) {
        log_debug("environment acquisition failed: %s", err);
        *ret_code = acquire_error_code(r);
        return r;
    }
    if (env->lease_report) {
        trace_run_sandbox(t->trace, env->lease_report);
        /* a lease the provider downgraded runs per-turn, it never fails the run */
        if (json_object_get_boolean(jsonx_get(env->lease_report, "downgraded")))
            t->policy.mode = LIFECYCLE_PER_TURN;
    }
    engine_stream_before_waits(env, es);
    if (cfg->pool)
        metrics_observe(&pool_metrics(cfg->pool)->keeper_spawn,
                        (util_now_ns() - spawn_start) / 1000);
    r = open_session(t, env, err, errlen);
    if (r < 0 && environment_check_limits(env)) {
        snprintf(err, errlen, "%s", env->limit_msg);
        *ret_code = env->limit;
    } else if (r < 0) {
        *ret_code = r == AR_E_MODEL ? "model_unavailable" : "runner_error";
    }
    if (r < 0) {
        log_debug("harness session failed: %s", err);
        *ret_limit = env->limit != NULL;
        environment_destroy(env, env->limit ? TEARDOWN_SANDBOX_LIMIT : TEARDOWN_FAILED_TURN);
        environment_free(env);
        return r;
    }
    *ret = env;
    return 0;
}

int engine_start_environment(struct engine_turn *t, struct event_stream *es,
                             enum teardown_reason why, struct environment **ret, bool *ret_limit,
                             char *err, size_t errlen, const char **ret_code)
{
    int r;

    metrics_cold_start(pool_metrics(t->cfg->pool), (unsigned)why);
    r = start_once(t, es, why, ret, ret_limit, err, errlen, ret_code);
    if (r < 0 && t->keep && t->keep->load_failed) {
        /* session/load failed: that environment is gone, a fresh one replays instead */
        t->keep->load_failed = false;
        r = start_once(t, es, why, ret, ret_limit, err, errlen, ret_code);
    }
    return r;
}
