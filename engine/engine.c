/*
 * engine — a prepared turn run (engine.h): the dispatch over the session table (warm, resume,
 * evict, cold), the turn on its environment, parking or teardown after it, /kill and /cancel.
 */
#include "engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "agenta/heartbeat.h"
#include "agenta/platform.h"
#include "base/log.h"
#include "base/util.h"
#include "engine_keep.h"
#include "engine_start.h"
#include "engine_tools.h"
#include "engine_turn.h"
#include "engine_turns.h"
#include "environment/environment.h"
#include "request/request.h"
#include "telemetry/metrics.h"
#include "telemetry/stages.h"
#include "telemetry/trace.h"
#include "turn/run_turn.h"
#include "turn/transcript.h"

/* A parked session that /cancel keeps warm without an admitted idle window of its own. */
#define CANCEL_IDLE_FALLBACK_MS 60000

/* ---- dispatch: judge a live slot (called under the pool lock: pure) ---------------------- */

static bool runtime_matches(const struct engine_turn *t, const struct pool_session *s)
{
    return s->harness == (uint8_t)t->req->harness &&
           memcmp(s->config_fp, t->config_fp, sizeof(t->config_fp)) == 0 &&
           memcmp(s->cred_epoch, t->epoch, sizeof(t->epoch)) == 0;
}

/* Why an idle environment cannot take this turn (TEARDOWN_NONE: it can). */
static enum teardown_reason judge_idle(void *ctx, const struct pool_session *s)
{
    const struct engine_turn *t = ctx;

    if (!runtime_matches(t, s))
        return TEARDOWN_RUNTIME_INCOMPATIBLE;
    if (s->history_broken || !identity_tail_is_fresh_user(t->req))
        return TEARDOWN_CONTINUITY_INVALID;
    if (!identity_minimal_history(t->req) &&
        memcmp(s->history_fp, t->prior_fp, sizeof(t->prior_fp)) != 0)
        return TEARDOWN_CONTINUITY_INVALID;
    return TEARDOWN_NONE;
}

/*
 * A parked approval can resume when the request answers at least one of its gates, the
 * credentials and runtime are unchanged, its approval window is still open, and (unless the
 * request only carries the answers) the conversation is the one it paused in.
 */
static enum teardown_reason judge_parked(void *ctx, struct pool_session *s)
{
    const struct engine_turn *t = ctx;
    size_t answered = 0;

    if (!runtime_matches(t, s))
        return TEARDOWN_RUNTIME_INCOMPATIBLE;
    if (s->approval_deadline_ms <= util_now_ms())
        return TEARDOWN_APPROVAL_EXPIRY;
    for (size_t i = 0; i < s->ngates; i++) {
        s->gates[i].decision = (int8_t)transcript_gate_decision(t->req, &s->gates[i]);
        if (s->gates[i].decision >= 0)
            answered++;
    }
    /* answers naming interactions it does not hold: refused, the session keeps waiting */
    if (answered == 0)
        return transcript_tail_has_tokens(t->req) ? POOL_JUDGE_KEEP : TEARDOWN_SESSION_INCOMPATIBLE;
    if (!transcript_answers_only(t->req) && t->req->nmessages > 1 &&
        memcmp(s->history_fp, t->prior_fp, sizeof(t->prior_fp)) != 0)
        return TEARDOWN_CONTINUITY_INVALID;
    return TEARDOWN_NONE;
}

int engine_kill_session(const struct engine_config *cfg, const char *key,
                        enum teardown_reason reason)
{
    return environment_kill(cfg->pool, key, reason);
}

int engine_forget_session(const struct engine_config *cfg, const char *key)
{
    return cfg->state_dir ? kept_remove(cfg->state_dir, key) : 0;
}

/* ---- after a turn ------------------------------------------------------------------------- */

/* The history fingerprint the session has after this turn (its tool calls included). */
static bool next_history_fp(const struct engine_turn *t, const struct run_result *res,
                            uint8_t fp[IDENTITY_DIGEST_LEN])
{
    size_t nids = res->tool_call_ids ? json_object_array_length(res->tool_call_ids) : 0;
    const char **ids = nids ? calloc(nids, sizeof(*ids)) : NULL;
    bool ok;

    for (size_t i = 0; ids && i < nids; i++)
        ids[i] = json_object_get_string(json_object_array_get_idx(res->tool_call_ids, i));
    ok = identity_history_fp(t->req->messages, t->req->nmessages, ids, ids ? nids : 0, fp) == 0;
    free(ids);
    return ok;
}

/*
 * After a turn: park the environment — awaiting approval when the turn paused on gates, idle
 * under a warm policy when it ended well with the client still there — or destroy it. A full
 * pool evicts its least recently used idle environment.
 */
/*
 * A measured turn (the model gateway's) whose harness reported other usage over the keeper
 * channel: logged (the sandbox can cause it: rate-limited) and counted; the measured numbers
 * stand.
 */
static void note_usage_mismatch(struct engine_turn *t, const struct run_result *res,
                                const struct turn_outcome *out)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static struct log_budget budget; /* the worker's threads share it: under lock */
    uint64_t dropped;
    bool allowed;

    if (!out->usage_mismatch)
        return;
    pool_counter_add(t->cfg->pool, PC_USAGE_MISMATCH, 1);
    pthread_mutex_lock(&lock);
    allowed = log_budget_take(&budget, 5, &dropped);
    pthread_mutex_unlock(&lock);
    if (allowed)
        log_warn("usage mismatch: the harness reported output %lld / total %lld, the model "
                 "gateway measured output %lld / total %lld (the measured usage counts)",
                 (long long)out->reported.output, (long long)out->reported.total,
                 (long long)res->usage.output, (long long)res->usage.total);
}

static void finish_environment(struct engine_turn *t, struct environment *env,
                               struct event_stream *es, struct run_result *res, int turn_rc,
                               const struct turn_outcome *out,
                               const struct lifecycle_policy *policy)
{
    const struct engine_config *cfg = t->cfg;
    struct pool_victim victim = {0};
    enum teardown_reason reason = TEARDOWN_PER_TURN;
    uint8_t next_fp[IDENTITY_DIGEST_LEN];
    bool park = false, awaiting = out->paused;
    uint64_t window = awaiting ? cfg->approval_ttl_ms : policy->idle_ms;
    bool kept; /* someone takes the output: a detached turn counts as taken */

    note_usage_mismatch(t, res, out);
    platform_agent_session(t->plat, env->acp_session);
    /* the client (or a follower) must still be there for a session run to be kept: ask first */
    event_stream_flush(es);
    kept = t->req->detached || t->adopted || engine_turns_audience(t, es);
    if (env->limit)
        reason = TEARDOWN_SANDBOX_LIMIT;
    else if (env->keeper_lost)
        reason = TEARDOWN_KEEPER_DIED;
    else if (turn_rc < 0 || env->harness_exited)
        reason = TEARDOWN_FAILED_TURN;
    else if (!kept && t->client_gone_cancels)
        reason = TEARDOWN_ABORTED;
    /* a turn that ended well: the harness's own session state is kept (engine_keep.h) */
    if (t->key[0] && res->ok && reason == TEARDOWN_PER_TURN && !awaiting &&
        next_history_fp(t, res, next_fp))
        engine_keep_save(t, env, next_fp);
    if (t->key[0] && env->has_slot && res->ok && reason == TEARDOWN_PER_TURN &&
        cfg->session_pool_max > 0 && (awaiting || (policy->mode == LIFECYCLE_WARM && kept)))
        park = next_history_fp(t, res, next_fp);
    if (park) {
        struct pool_park pk = {.config_fp = t->config_fp,
                               .history_fp = next_fp,
                               .cred_epoch = t->epoch,
                               .acp_session = env->acp_session,
                               .caps = turn_caps_to_bits(&res->caps),
                               .policy_mode = (uint8_t)policy->mode,
                               .idle_ms = (uint32_t)policy->idle_ms,
                               .acp_next_id = env->next_id,
                               .prompt_id = out->prompt_id,
                               .awaiting = awaiting,
                               .gates = out->gates,
                               .ngates = out->ngates,
                               .deadline_ms = util_now_ms() + (int64_t)window};

        park = pool_session_park(cfg->pool, env->h, util_self_pid(), &pk, cfg->session_pool_max,
                                 &victim) == 0;
    }
    (void)environment_evict(cfg->pool, &victim);
    if (park) {
        environment_park(env, window, awaiting);
        log_debug("session '%s' parked %s for %llums", t->key, awaiting ? "on approval" : "idle",
                  (unsigned long long)window);
    } else if (!t->teardown) {
        /* nothing waits for it: torn down once the result is out (engine_turn_free) */
        t->teardown = env;
        t->teardown_reason = reason;
    } else {
        environment_destroy(env, reason);
    }
}

/*
 * A limit the sandbox hit without ending the turn (a tool's process OOM-killed, a refused
 * fork, a full workspace): the turn fails naming it, and the environment is torn down.
 */
static int after_turn_limits(struct environment *env, struct event_stream *es,
                             struct run_result *res, struct turn_outcome *out, int turn_rc)
{
    if (turn_rc < 0 || !environment_check_limits(env))
        return turn_rc;
    event_emit(es, event_error(env->limit_msg, env->limit));
    run_result_fail(res, "%s", env->limit_msg);
    free(res->stop_reason);
    res->stop_reason = NULL;
    out->limit_tripped = true;
    out->paused = false;
    return AR_E_SANDBOX_LIMIT;
}

static void emit_done(struct event_stream *es, struct run_result *res)
{
    event_emit(es, event_done(res->stop_reason, res->trace_id));
}

/* The run ends before its turn: an error event (msg, code), the result's error, then done. */
static void fail_done(struct event_stream *es, struct run_result *res, const char *msg,
                      const char *code)
{
    event_emit(es, event_error(msg, code));
    run_result_fail(res, "%s", msg);
    emit_done(es, res);
}

static void collect_events(struct event_stream *es, struct run_result *res)
{
    if (es->streaming)
        return;
    if (res->events)
        json_object_put(res->events);
    res->events = event_stream_take(es);
}

static void count_outcome(const struct engine_turn *t, const struct event_stream *es,
                          const struct run_result *res, bool limit, int64_t started)
{
    enum metric_outcome o = OUTCOME_OK;

    if (!t->cfg->pool)
        return;
    if (limit)
        o = OUTCOME_LIMIT;
    else if (!res->ok)
        o = OUTCOME_ERROR;
    else if (res->stop_reason && strcmp(res->stop_reason, "paused") == 0)
        o = OUTCOME_PAUSED;
    else if (res->stop_reason && strcmp(res->stop_reason, "cancelled") == 0)
        o = OUTCOME_CANCELLED;
    pool_metrics_turn(t->cfg->pool, (unsigned)t->req->harness, t->plan.provider, o);
    if (es->first_output_ms)
        metrics_observe(&pool_metrics(t->cfg->pool)->first_event,
                        (es->first_output_ms - started) * 1000);
}

struct cancel_probe {
    struct pool *pool;
    struct pool_handle h;
    bool has_slot;
    struct event_stream *es;
    bool on_client_gone;
    struct platform *plat;
    const struct engine_turn *t;
};

/*
 * /cancel sets the slot's flag; a client that went away cancels a run without a session
 * (unless it is detached, adopted, followed by a reattached reader, or still in its grace
 * window); the platform takes a turn back with its heartbeat.
 */
static bool should_cancel(void *ctx)
{
    struct cancel_probe *c = ctx;

    if (c->has_slot && c->pool && pool_session_cancel_requested(c->pool, c->h))
        return true;
    if (platform_interrupted(c->plat))
        return true;
    return c->on_client_gone && !engine_turns_audience(c->t, c->es);
}

/* A gone client cancels the turn (a run without a session that is not detached). */
static bool cancels_on_client_gone(const struct engine_turn *t)
{
    return t->client_gone_cancels && !t->req->detached && !t->adopted;
}

static enum permission stored_decision(void *ctx, const char *tool, json_object *args)
{
    return transcript_stored_decision(ctx, tool, args);
}

static struct turn_options turn_options(struct engine_turn *t, json_object *prompt,
                                        struct cancel_probe *probe)
{
    struct turn_options opt;

    memset(&opt, 0, sizeof(opt));
    opt.harness = t->req->harness;
    opt.prompt = prompt;
    opt.limits = &t->cfg->limits;
    opt.permissions = t->req->permissions;
    opt.is_noise = t->harness->is_noise;
    opt.stored = stored_decision;
    opt.stored_ctx = t->req;
    opt.should_cancel = should_cancel;
    opt.cancel_ctx = probe;
    opt.measured = t->plan.gateway; /* the model gateway measures the turn's usage */
    opt.prices = t->cfg->gateway.prices;
    return opt;
}

/* The slot of a lookup, evicted: its keeper stopped, its key gone from the table. */
static void evict_lookup(const struct engine_config *cfg, const struct pool_lookup *lk,
                         enum teardown_reason reason)
{
    struct pool_victim v = {.any = true,
                            .h = lk->s.h,
                            .keeper_pid = lk->s.keeper_pid,
                            .keeper_start = lk->s.keeper_start,
                            .reason = reason};

    memcpy(v.key, lk->s.key, sizeof(v.key));
    (void)environment_evict(cfg->pool, &v);
}

/* A turn on a live environment (warm follow-up, or approval resume); AR_E_RETRY when it failed
 * before the harness said anything. */
static int run_live(struct engine_turn *t, struct pool_lookup *lk, struct event_stream *es,
                    struct run_result *res, bool *limit)
{
    const struct engine_config *cfg = t->cfg;
    struct lifecycle_policy policy = {.mode = (enum lifecycle_mode)lk->s.policy_mode,
                                      .idle_ms = lk->s.idle_ms,
                                      .source = LIFECYCLE_FROM_ADMITTED};
    bool resume = lk->outcome == POOL_LOOKUP_RESUME;
    struct environment *env = NULL;
    struct engine_tools hooks;
    struct cancel_probe probe;
    struct turn_env te;
    struct turn_outcome out;
    struct turn_options opt;
    json_object *prompt = NULL;
    char err[512];
    int r;

    event_stream_flush(es);
    if (!resume)
        engine_turns_journal_now(t, es, lk->s.h.index, lk->s.h.generation);
    /* a new prompt goes out without waiting for the keeper's hello: a keeper that refuses or
     * is gone fails the turn before any harness line, which retries cold (retry_if_silent);
     * an approval's resume has no such retry, and waits for it */
    r = environment_reconnect(cfg, lk->s.h, !resume, &env, err, sizeof(err));
    if (r < 0) {
        log_debug("live session '%s' unreachable (%s): starting cold", t->key, err);
        (void)pool_session_drain(cfg->pool, lk->s.h, TEARDOWN_HARNESS_EXITED);
        evict_lookup(cfg, lk, TEARDOWN_HARNESS_EXITED);
        return AR_E_RETRY;
    }
    if (lk->s.acp_next_id > env->next_id)
        env->next_id = lk->s.acp_next_id;
    engine_stream_before_waits(env, es);
    pool_counter_add(cfg->pool, PC_WARM_HITS, 1);
    turn_caps_from_bits(lk->s.caps, &res->caps);
    if (!res->session_id)
        res->session_id = util_xstrdup(env->acp_session);
    event_emit(es, event_data_phase("environment_starting"));
    event_emit(es, event_environment_ready(false));
    probe = (struct cancel_probe){.pool = cfg->pool,
                                  .h = env->h,
                                  .has_slot = true,
                                  .es = es,
                                  .on_client_gone = cancels_on_client_gone(t),
                                  .plat = t->plat,
                                  .t = t};
    if (!resume) {
        prompt = transcript_prompt(t->req, false, res->caps.images);
        platform_attachments(t->plat, t->req, env->paths.workspace, &res->caps, false, prompt, es);
    }
    opt = turn_options(t, prompt, &probe);
    opt.tools = engine_tools_init(&hooks, t, env);
    if (resume) {
        opt.resume_prompt_id = lk->s.prompt_id;
        opt.resume = lk->s.gates;
        opt.nresume = lk->s.ngates;
    } else {
        opt.retry_if_silent = true;
    }
    engine_turns_register(t, env, es, res, &policy, resume);
    environment_turn_env(env, &te);
    r = run_turn_prompt(&te, &opt, es, res, &out);
    json_object_put(prompt);
    r = r == AR_E_RETRY ? r : after_turn_limits(env, es, res, &out, r);
    *limit = out.limit_tripped;
    if (r == AR_E_RETRY) {
        log_debug("warm turn of '%s' failed before any output: retrying cold", t->key);
        environment_destroy(env, TEARDOWN_FAILED_TURN);
        environment_free(env);
        evict_lookup(cfg, lk, lk->reason);
        return AR_E_RETRY;
    }
    finish_environment(t, env, es, res, r, &out, &policy);
    if (t->teardown != env)
        environment_free(env);
    return 0;
}

static void run_cold(struct engine_turn *t, struct event_stream *es, struct run_result *res,
                     bool *limit, enum teardown_reason why, struct engine_keep *keep)
{
    const struct engine_config *cfg = t->cfg;
    const struct run_request *req = t->req;
    struct environment *env = NULL;
    struct engine_tools hooks;
    struct cancel_probe probe;
    struct turn_env te;
    struct turn_outcome out;
    struct turn_options opt;
    json_object *prompt, *ready;
    const char *code;
    char err[512];
    int r;

    event_emit(es, event_data_phase("environment_starting"));
    event_stream_flush(es);
    if (engine_tools_into_plan(t, err, sizeof(err)) < 0) {
        log_debug("run tools unavailable: %s", err);
        fail_done(es, res, err, "runner_error");
        return;
    }
    t->keep = keep;
    r = engine_start_environment(t, es, why, &env, limit, err, sizeof(err), &code);
    t->keep = NULL;
    if (r < 0) {
        fail_done(es, res, err, code);
        return;
    }
    if (env->has_slot)
        (void)pool_session_mark_started(cfg->pool, env->h, env->acp_session);
    turn_caps_from_agent(env->agent_caps, req->harness, &res->caps);
    if (!res->session_id)
        res->session_id = util_xstrdup(env->acp_session);
    ready = event_environment_ready_cold(env->from_spare, engine_keep_resume_name(keep->resume),
                                         keep->note);
    if (ready && env->from_shell) /* a pre-made shell served the start (environment_spare.h) */
        json_object_object_add(json_object_object_get(ready, "data"), "shell",
                               json_object_new_boolean(true));
    event_emit(es, ready);
    if (transcript_answers_only(req))
        prompt = transcript_approval_prompt(req);
    else /* a loaded session holds the conversation: only the new message, as when warm */
        prompt = transcript_prompt(req, req->nmessages > 1 && keep->resume != KEEP_LOAD,
                                   res->caps.images);
    platform_attachments(t->plat, req, env->paths.workspace, &res->caps, req->nmessages > 1, prompt,
                         es);
    probe = (struct cancel_probe){.pool = cfg->pool,
                                  .h = env->h,
                                  .has_slot = env->has_slot,
                                  .es = es,
                                  .on_client_gone = cancels_on_client_gone(t),
                                  .plat = t->plat,
                                  .t = t};
    opt = turn_options(t, prompt, &probe);
    opt.tools = engine_tools_init(&hooks, t, env);
    engine_turns_register(t, env, es, res, &t->policy, false);
    environment_turn_env(env, &te);
    r = run_turn_prompt(&te, &opt, es, res, &out);
    json_object_put(prompt);
    r = after_turn_limits(env, es, res, &out, r);
    *limit = out.limit_tripped;
    stages_mark(STAGES_W_TD0);
    finish_environment(t, env, es, res, r, &out, &t->policy);
    stages_mark(STAGES_W_TD1); /* a per-turn teardown runs after the result (engine_turn_free) */
    if (t->teardown != env)
        environment_free(env);
    emit_done(es, res);
    stages_turn_end();
}

/* The request answers approvals the parked session does not wait for: refused, kept parked. */
static void refuse_stale_answer(const struct pool_lookup *lk, struct event_stream *es,
                                struct run_result *res)
{
    char msg[320];

    snprintf(msg, sizeof(msg),
             "messages: the approval answer names an interaction this session is not waiting "
             "for (a stale or foreign interactionToken); it still waits for %zu approval(s): "
             "answer with the id of their interaction_request",
             (size_t)lk->s.ngates);
    fail_done(es, res, msg, "invalid_request");
}

/* Who sees every event of the run: the trace, and in platform mode the session's log. */
struct observers {
    struct trace_run *trace;
    struct platform *plat;
};

static void observe_run(void *ctx, json_object *ev)
{
    struct observers *o = ctx;

    trace_run_event(o->trace, ev);
    platform_event(o->plat, ev);
}

/* Platform mode, a cold turn whose request carries only the new message: its history. */
static int rebuild_history(struct engine_turn *t, struct event_stream *es, struct run_result *res)
{
    struct request_limits lim;
    char err[512];
    int r;

    if (!t->plat)
        return 0;
    request_limits_default(&lim);
    lim.allow_scripted = t->cfg->scripted_agent != NULL;
    r = platform_rebuild(t->plat, t->req, &lim, err, sizeof(err));
    if (r < 0) {
        log_debug("history rebuild failed: %s", err);
        fail_done(es, res, err, "runner_error");
    }
    return r;
}

static void result_identity(const struct engine_turn *t, struct run_result *res,
                            const char *trace_id)
{
    res->model = util_xstrdup(t->plan.model_name[0] ? t->plan.model_name : NULL);
    res->session_id = util_xstrdup(t->req->session_id);
    res->trace_id = strdup(trace_id);
}

void engine_run(struct engine_turn *t, struct event_stream *es, struct run_result *res)
{
    const struct engine_config *cfg = t->cfg;
    struct pool_judge judge = {
        .idle = judge_idle, .parked = judge_parked, .ctx = t, .refuse_busy = cfg->cluster != NULL};
    struct pool_lookup *lk = calloc(1, sizeof(*lk));
    enum teardown_reason why = TEARDOWN_NONE;
    int64_t started = util_now_ms();
    struct observers obs = {.trace = NULL};
    size_t nmessages = t->req->nmessages; /* before a platform rebuild */
    struct engine_keep keep;
    struct trace_run *trace;
    char trace_id[33];
    bool limit = false, resume, refused = false;

    stages_turn_begin();
    if (es->streaming) {
        engine_turns_journal_open(t, es);
        es->keepalive_ms = cfg->turns.keepalive_ms;
    }
    trace = trace_run_start(t->req, t->plan.model_name, trace_id);
    t->trace = trace;
    result_identity(t, res, trace_id);
    /* platform mode: admission by the first heartbeat, before any side effect */
    if (platform_start(cfg, t->req, t->key, trace_id, es, res, &t->plat) < 0) {
        refused = true; /* before any side effect: no environment, no trace either */
        goto out;
    }
    obs = (struct observers){.trace = trace, .plat = t->plat};
    es->observe = observe_run;
    es->observe_ctx = &obs;
    if (lk && t->key[0] && cfg->pool)
        (void)pool_session_lookup(cfg->pool, t->key, &judge, util_self_pid(), t->req->turn_id, lk);
    resume = lk && lk->outcome == POOL_LOOKUP_RESUME;
    platform_turn_begins(t->plat, t->req, resume ? lk->s.gates : NULL, resume ? lk->s.ngates : 0,
                         resume);
    if (lk && (lk->outcome == POOL_LOOKUP_WARM || lk->outcome == POOL_LOOKUP_RESUME)) {
        trace_run_environment(trace, lk->outcome == POOL_LOOKUP_WARM ? "warm" : "resume");
        if (run_live(t, lk, es, res, &limit) == 0) {
            emit_done(es, res);
            goto out;
        }
        /* start over cold with a clean result */
        run_result_release(res);
        run_result_init(res);
        result_identity(t, res, trace_id);
        why = TEARDOWN_HARNESS_EXITED;
    } else if (lk && lk->outcome == POOL_LOOKUP_REFUSE) {
        refuse_stale_answer(lk, es, res);
        goto out;
    } else if (lk && lk->outcome == POOL_LOOKUP_BUSY) {
        /* several hosts: the owner runs one turn of a session at a time */
        fail_done(es, res, HEARTBEAT_REFUSED_MESSAGE, HEARTBEAT_REFUSED_CODE);
        goto out;
    } else if (lk && lk->outcome == POOL_LOOKUP_EVICT) {
        why = lk->reason;
        evict_lookup(cfg, lk, lk->reason);
    }
    trace_run_environment(trace, "cold");
    if (rebuild_history(t, es, res) == 0) {
        engine_keep_plan(t, t->req->nmessages > nmessages, &keep);
        run_cold(t, es, res, &limit, why, &keep);
        engine_keep_release(&keep);
    }
out:
    free(lk);
    count_outcome(t, es, res, limit, started);
    es->observe = NULL;
    /* the turn's records delivered, the ledger told, the final beat: then the result */
    platform_finish(t->plat, res, NULL);
    platform_free(t->plat);
    t->plat = NULL;
    t->trace = NULL;
    if (refused)
        trace_run_discard(trace);
    else
        trace_run_finish(trace, res);
    collect_events(es, res);
}

void engine_run_adopted(struct engine_turn *t, struct environment *env,
                        const struct engine_adopted *ad, struct event_stream *es,
                        struct run_result *res)
{
    const struct engine_config *cfg = t->cfg;
    int64_t started = util_now_ms();
    struct engine_tools hooks;
    struct cancel_probe probe;
    struct turn_env te;
    struct turn_outcome out;
    struct turn_options opt;
    bool limit;
    int r;

    t->adopted = true;
    result_identity(t, res, ad->trace_id);
    turn_caps_from_bits(ad->caps, &res->caps);
    if (!res->session_id)
        res->session_id = util_xstrdup(env->acp_session);
    if (ad->next_id > env->next_id)
        env->next_id = ad->next_id;
    engine_stream_before_waits(env, es);
    probe = (struct cancel_probe){
        .pool = cfg->pool, .h = env->h, .has_slot = env->has_slot, .es = es, .t = t};
    opt = turn_options(t, NULL, &probe);
    opt.tools = engine_tools_init(&hooks, t, env);
    opt.adopt_prompt_id = ad->prompt_id;
    environment_turn_env(env, &te);
    r = run_turn_prompt(&te, &opt, es, res, &out);
    r = after_turn_limits(env, es, res, &out, r);
    limit = out.limit_tripped;
    finish_environment(t, env, es, res, r, &out, &ad->policy);
    if (t->teardown != env)
        environment_free(env);
    emit_done(es, res);
    count_outcome(t, es, res, limit, started);
}

static bool always(void *ctx)
{
    (void)ctx;
    return true;
}

/* Cancel a turn parked on approvals: answer its gates "cancelled" and keep it warm. */
static int cancel_parked(const struct engine_config *cfg, const char *key)
{
    struct pool_session *s = calloc(1, sizeof(*s));
    struct environment *env = NULL;
    struct event_stream es;
    struct run_result res;
    struct turn_env te;
    struct turn_outcome out;
    struct turn_options opt;
    char err[256];
    uint64_t idle;
    int r;

    if (!s)
        return -ENOMEM;
    r = pool_session_checkout_parked(cfg->pool, key, util_self_pid(), s);
    if (r < 0)
        goto out;
    idle = s->idle_ms ? s->idle_ms : CANCEL_IDLE_FALLBACK_MS;
    r = environment_reconnect(cfg, s->h, false, &env, err, sizeof(err));
    if (r < 0) {
        engine_kill_session(cfg, key, TEARDOWN_HARNESS_EXITED);
        goto out;
    }
    if (s->acp_next_id > env->next_id)
        env->next_id = s->acp_next_id;
    event_stream_init(&es, NULL);
    run_result_init(&res);
    memset(&opt, 0, sizeof(opt));
    opt.limits = &cfg->limits;
    opt.resume_prompt_id = s->prompt_id;
    opt.resume = s->gates;
    opt.nresume = s->ngates;
    opt.should_cancel = always;
    environment_turn_env(env, &te);
    r = run_turn_prompt(&te, &opt, &es, &res, &out);
    if (r == 0 && res.ok) {
        r = pool_session_park_cancelled(cfg->pool, env->h, env->next_id,
                                        util_now_ms() + (int64_t)idle);
        if (r == 0)
            environment_park(env, idle, false);
    }
    if (r != 0 || !res.ok)
        environment_destroy(env, TEARDOWN_FAILED_TURN);
    environment_free(env);
    run_result_release(&res);
    event_stream_release(&es);
out:
    free(s);
    return 0;
}

int engine_cancel_session(const struct engine_config *cfg, const char *key, const char *target_turn)
{
    bool parked = false;
    int r;

    if (!cfg->pool)
        return -ENOENT;
    r = pool_session_request_cancel(cfg->pool, key, target_turn, &parked);
    if (r < 0)
        return r;
    return parked ? cancel_parked(cfg, key) : 0;
}
