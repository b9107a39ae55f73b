#include "engine.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "environment.h"
#include "jsonx.h"
#include "log.h"
#include "provider/provider.h"
#include "run_turn.h"
#include "transcript.h"
#include "util.h"

#define EVICT_WAIT_MS 10000

json_object *engine_installed_harnesses(const struct engine_config *cfg)
{
    struct harness_paths paths = {.harness_dir = cfg->harness_dir,
                                  .scripted_agent = cfg->scripted_agent};
    json_object *list = json_object_new_array();
    static const struct {
        const char *name;
        enum harness_kind kind;
    } wire[] = {{"pi_core", HARNESS_PI},   {"pi_agenta", HARNESS_PI},
                {"claude", HARNESS_CLAUDE}, {"codex", HARNESS_CODEX},
                {"opencode", HARNESS_OPENCODE}, {"scripted", HARNESS_SCRIPTED}};

    for (size_t i = 0; i < ARRAY_SIZE(wire); i++) {
        const struct harness_ops *h = harness_get(wire[i].kind);
        if (h && h->installed(&paths))
            json_object_array_add(list, json_object_new_string(wire[i].name));
    }
    return list;
}

static json_object *text_block(const char *text)
{
    json_object *b = json_object_new_object();

    json_object_object_add(b, "type", json_object_new_string("text"));
    json_object_object_add(b, "text", json_object_new_string(text));
    return b;
}

/*
 * The ACP prompt: the tail user message's text (or, cold with earlier history, the replay
 * text) and its inline images when the harness takes images (else they are named in text).
 */
static json_object *build_prompt(const struct run_request *req, bool replay, bool images)
{
    const struct chat_message *m = &req->messages[req->nmessages - 1];
    json_object *blocks = json_object_new_array(), *media = json_object_new_array();
    struct buf text;

    buf_init(&text, 80u * 1024 * 1024);
    if (replay)
        transcript_turn_text(req, NULL, &text);
    else
        run_request_prompt_text(req, &text);
    for (size_t i = 0; i < m->nblocks; i++) {
        const struct content_block *b = &m->blocks[i];
        json_object *img;

        if (b->type != BLOCK_IMAGE)
            continue;
        if (!images || !b->data) {
            buf_append_str(&text, "\n[image omitted: the harness does not take images]");
            continue;
        }
        img = json_object_new_object();
        json_object_object_add(img, "type", json_object_new_string("image"));
        json_object_object_add(img, "data", json_object_new_string(b->data));
        json_object_object_add(img, "mimeType",
                               json_object_new_string(b->mime_type ? b->mime_type
                                                                   : "image/png"));
        json_object_array_add(media, img);
    }
    json_object_array_add(blocks, text_block(buf_str(&text)));
    for (size_t i = 0; i < json_object_array_length(media); i++)
        json_object_array_add(blocks, json_object_get(json_object_array_get_idx(media, i)));
    json_object_put(media);
    buf_release(&text);
    return blocks;
}

static int refuse_unusable(const struct run_request *req, char *err, size_t errlen)
{
    if (req->custom_tools && json_object_array_length(req->custom_tools) > 0) {
        snprintf(err, errlen, "customTools: harness %s cannot call runner-side tools on this "
                              "runner (no tool relay)",
                 harness_kind_name(req->harness));
        return AR_E_INVALID_REQUEST;
    }
    if (req->mcp_servers && json_object_array_length(req->mcp_servers) > 0) {
        snprintf(err, errlen, "mcpServers: harness %s cannot use MCP servers on this runner",
                 harness_kind_name(req->harness));
        return AR_E_INVALID_REQUEST;
    }
    if (req->network == NETWORK_ALLOWLIST) {
        snprintf(err, errlen, "sandboxPermission.network.mode: \"allowlist\" cannot be enforced "
                              "by the local sandbox");
        return AR_E_INVALID_REQUEST;
    }
    if (req->network == NETWORK_OFF && req->harness != HARNESS_SCRIPTED) {
        snprintf(err, errlen, "sandboxPermission.network.mode: \"off\" leaves harness %s no "
                              "route to its model endpoint",
                 harness_kind_name(req->harness));
        return AR_E_INVALID_REQUEST;
    }
    return 0;
}

int engine_prepare(const struct engine_config *cfg, struct run_request *req,
                   struct engine_turn *ret, char *err, size_t errlen)
{
    struct harness_paths paths = {.harness_dir = cfg->harness_dir,
                                  .scripted_agent = cfg->scripted_agent};
    const struct provider_caps *pcaps = provider_capabilities(req->sandbox);
    struct lifecycle_input li;
    struct engine_turn t;
    struct buf probe;
    int r;

    memset(&t, 0, sizeof(t));
    t.cfg = cfg;
    t.req = req;
    t.harness = harness_get(req->harness);
    if (!t.harness || !t.harness->installed(&paths)) {
        snprintf(err, errlen, "harness: \"%s\" is not installed on this runner",
                 req->harness_name);
        return AR_E_UNAVAILABLE;
    }
    if (!pcaps) {
        snprintf(err, errlen, "sandbox: provider \"%s\" is not enabled", req->sandbox);
        return AR_E_INVALID_REQUEST;
    }
    r = refuse_unusable(req, err, errlen);
    if (r < 0)
        return r;
    buf_init(&probe, 80u * 1024 * 1024);
    r = run_request_prompt_text(req, &probe);
    buf_release(&probe);
    if (r < 0) {
        snprintf(err, errlen, "No user message to send (prompt/messages empty).");
        return AR_E_INVALID_REQUEST;
    }
    memset(&li, 0, sizeof(li));
    li.credential_mode = req->mc.credential_mode;
    li.harness = req->harness;
    li.provider_remote = strcmp(pcaps->name, "local") != 0;
    li.provider_reusable_leases = pcaps->reusable_leases;
    li.runner_mode = cfg->local_mode;
    li.runner_idle_ms = cfg->local_idle_ms;
    li.request_mode = req->lifecycle_mode;
    li.request_idle_ms = req->lifecycle_idle_ms;
    r = policy_lifecycle(&li, &t.policy, err, errlen);
    if (r < 0)
        return r;
    if (identity_pool_key(req, t.key, sizeof(t.key)) < 0)
        t.key[0] = '\0';
    r = identity_config_fp(req, t.config_fp);
    if (r == 0)
        r = identity_history_fp(req->messages, req->nmessages - 1, NULL, 0, t.prior_fp);
    if (r == 0)
        r = identity_credential_epoch(req, cfg->epoch_key, t.epoch);
    if (r < 0) {
        snprintf(err, errlen, "cannot fingerprint the request: %s", ar_strerror(r));
        return r;
    }
    t.client_gone_cancels = req->session_id == NULL;
    sandbox_plan_init(&t.plan);
    r = t.harness->plan(&paths, req, &t.plan, err, errlen);
    if (r < 0) {
        engine_turn_release(&t);
        return r;
    }
    *ret = t;
    return 0;
}

void engine_turn_release(struct engine_turn *t)
{
    if (t->plan.argv)
        sandbox_plan_release(&t->plan);
    memset(t, 0, sizeof(*t));
}

/* ---- the pool side of dispatch ----------------------------------------------------------- */

enum lookup_outcome { LOOKUP_MISS, LOOKUP_WARM, LOOKUP_EVICT };

struct lookup {
    enum lookup_outcome outcome;
    struct pool_handle h;
    pid_t keeper_pid;
    uint64_t keeper_start;
    enum teardown_reason reason;
    uint32_t caps;
    uint8_t admitted_mode;
    uint32_t admitted_idle_ms;
};

/* Why an idle environment cannot take this turn (TEARDOWN_NONE: it can). */
static enum teardown_reason mismatch_locked(const struct engine_turn *t,
                                            const struct pool_slot *s)
{
    if (s->harness != (uint8_t)t->req->harness ||
        memcmp(s->config_fp, t->config_fp, sizeof(t->config_fp)) != 0 ||
        memcmp(s->cred_epoch, t->epoch, sizeof(t->epoch)) != 0)
        return TEARDOWN_RUNTIME_INCOMPATIBLE;
    if ((s->flags & SLOT_F_HISTORY_BROKEN) || !identity_tail_is_fresh_user(t->req))
        return TEARDOWN_CONTINUITY_INVALID;
    if (!identity_minimal_history(t->req) &&
        memcmp(s->history_fp, t->prior_fp, sizeof(t->prior_fp)) != 0)
        return TEARDOWN_CONTINUITY_INVALID;
    return TEARDOWN_NONE;
}

static void lookup_locked(struct pool *p, const struct engine_turn *t, struct lookup *lk)
{
    int i = pool_find_locked(p, t->key);
    struct pool_slot *s;

    memset(lk, 0, sizeof(*lk));
    if (i < 0)
        return;
    s = &p->slots[i];
    lk->h = pool_handle_of(p, (uint32_t)i);
    lk->keeper_pid = s->keeper_pid;
    lk->keeper_start = s->keeper_start;
    switch (s->state) {
    case SLOT_IDLE:
        lk->reason = mismatch_locked(t, s);
        if (lk->reason == TEARDOWN_NONE &&
            pool_checkout_locked(p, lk->h, false, getpid(), t->req->turn_id) == 0) {
            lk->outcome = LOOKUP_WARM;
            lk->caps = s->caps;
            lk->admitted_mode = s->policy_mode;
            lk->admitted_idle_ms = s->idle_ms;
            return;
        }
        break;
    case SLOT_AWAITING_APPROVAL:
        lk->reason = TEARDOWN_SESSION_INCOMPATIBLE;
        break;
    case SLOT_DRAINING:
        lk->outcome = LOOKUP_EVICT;
        lk->reason = (enum teardown_reason)s->last_teardown;
        return;
    default: /* starting or busy: a newer request for the session supersedes it */
        lk->reason = TEARDOWN_SUPERSEDED;
        break;
    }
    pool_drain_locked(p, lk->h, (uint8_t)lk->reason);
    lk->outcome = LOOKUP_EVICT;
}

/* Wait until key is gone from the table (its keeper finished tearing down). */
static bool wait_key_gone(struct pool *p, const char *key, int64_t wait_ms)
{
    int64_t deadline = now_ms() + wait_ms;

    for (;;) {
        int i;

        if (pool_lock(p) < 0)
            return false;
        i = pool_find_locked(p, key);
        pool_unlock(p);
        if (i < 0)
            return true;
        if (now_ms() > deadline)
            return false;
        usleep(2000);
    }
}

static void evict(const struct engine_config *cfg, const struct lookup *lk, const char *key)
{
    log_info("evicting session '%s' (%s)", key, teardown_reason_name(lk->reason));
    if (lk->keeper_pid > 0)
        (void)environment_destroy_keeper(lk->keeper_pid, lk->keeper_start, EVICT_WAIT_MS);
    if (!wait_key_gone(cfg->pool, key, EVICT_WAIT_MS))
        log_warn("session '%s' is still being torn down", key);
}

int engine_kill_session(const struct engine_config *cfg, const char *key,
                        enum teardown_reason reason)
{
    struct lookup lk = {.reason = reason};
    int i, r;

    if (!cfg->pool)
        return -ENOENT;
    r = pool_lock(cfg->pool);
    if (r < 0)
        return r;
    i = pool_find_locked(cfg->pool, key);
    if (i < 0) {
        pool_unlock(cfg->pool);
        return 0;
    }
    lk.h = pool_handle_of(cfg->pool, (uint32_t)i);
    lk.keeper_pid = cfg->pool->slots[i].keeper_pid;
    lk.keeper_start = cfg->pool->slots[i].keeper_start;
    if (cfg->pool->slots[i].state != SLOT_DRAINING)
        pool_drain_locked(cfg->pool, lk.h, (uint8_t)reason);
    pool_unlock(cfg->pool);
    evict(cfg, &lk, key);
    return 1;
}

/*
 * After a turn: park the environment (warm policy, turn ok, client still there, a seat in the
 * pool) or destroy it. A full pool evicts its least recently used idle environment.
 */
static void finish_environment(struct engine_turn *t, struct environment *env,
                               struct event_stream *es, struct run_result *res, int turn_rc,
                               const struct lifecycle_policy *policy)
{
    const struct engine_config *cfg = t->cfg;
    struct lookup victim = {0};
    enum teardown_reason reason = TEARDOWN_PER_TURN;
    uint8_t next_fp[IDENTITY_DIGEST_LEN];
    bool park = false;

    if (turn_rc < 0 || env->harness_exited)
        reason = TEARDOWN_FAILED_TURN;
    else if (es->client_gone && t->client_gone_cancels)
        reason = TEARDOWN_ABORTED;
    if (t->key[0] && env->has_slot && policy->mode == LIFECYCLE_WARM && res->ok &&
        reason == TEARDOWN_PER_TURN && !es->client_gone && cfg->session_pool_max > 0) {
        const char **ids = NULL;
        size_t nids = res->tool_call_ids ? json_object_array_length(res->tool_call_ids) : 0;

        ids = nids ? calloc(nids, sizeof(*ids)) : NULL;
        for (size_t i = 0; ids && i < nids; i++)
            ids[i] = json_object_get_string(json_object_array_get_idx(res->tool_call_ids, i));
        park = identity_history_fp(t->req->messages, t->req->nmessages, ids, ids ? nids : 0,
                                   next_fp) == 0;
        free(ids);
    }
    if (park && pool_lock(cfg->pool) >= 0) {
        struct pool_slot *s = pool_slot_locked(cfg->pool, env->h);

        park = s && s->state == SLOT_BUSY && s->owner_pid == getpid();
        if (park && pool_parked_count_locked(cfg->pool) >= cfg->session_pool_max) {
            int lru = pool_lru_idle_locked(cfg->pool);
            if (lru >= 0) {
                victim.h = pool_handle_of(cfg->pool, (uint32_t)lru);
                victim.keeper_pid = cfg->pool->slots[lru].keeper_pid;
                victim.keeper_start = cfg->pool->slots[lru].keeper_start;
                victim.reason = TEARDOWN_CAPACITY_EVICTION;
                victim.outcome = LOOKUP_EVICT;
                pool_drain_locked(cfg->pool, victim.h, TEARDOWN_CAPACITY_EVICTION);
            } else {
                park = false; /* every seat is busy or awaiting approval */
            }
        }
        if (park) {
            memcpy(s->config_fp, t->config_fp, sizeof(s->config_fp));
            memcpy(s->history_fp, next_fp, sizeof(s->history_fp));
            memcpy(s->cred_epoch, t->epoch, sizeof(s->cred_epoch));
            memcpy(s->acp_session, env->acp_session, sizeof(s->acp_session));
            s->caps = turn_caps_to_bits(&res->caps);
            s->policy_mode = (uint8_t)policy->mode;
            s->idle_ms = (uint32_t)policy->idle_ms;
            s->flags &= ~(uint32_t)(SLOT_F_HISTORY_BROKEN | SLOT_F_PER_TURN);
            s->turns++;
            pool_park_locked(cfg->pool, env->h, SLOT_IDLE, now_ms() + (int64_t)policy->idle_ms);
        }
        pool_unlock(cfg->pool);
    }
    if (victim.outcome == LOOKUP_EVICT) {
        char vkey[POOL_KEY_MAX] = "";
        if (pool_lock(cfg->pool) >= 0) {
            struct pool_slot *vs = pool_slot_locked(cfg->pool, victim.h);
            if (vs)
                memcpy(vkey, vs->key, sizeof(vkey));
            pool_unlock(cfg->pool);
        }
        if (vkey[0])
            evict(cfg, &victim, vkey);
    }
    if (park) {
        environment_park(env, policy->idle_ms);
        log_debug("session '%s' parked for %llums", t->key,
                  (unsigned long long)policy->idle_ms);
    } else {
        environment_destroy(env, reason);
    }
}

static void emit_done(struct event_stream *es, struct run_result *res)
{
    event_emit(es, event_done(res->stop_reason, res->trace_id));
}

static void collect_events(struct event_stream *es, struct run_result *res)
{
    if (es->streaming)
        return;
    if (res->events)
        json_object_put(res->events);
    res->events = event_stream_take(es);
}

static void count_outcome(const struct engine_config *cfg, const struct run_result *res)
{
    unsigned idx = PC_TURNS_OK;

    if (!cfg->pool)
        return;
    if (!res->ok)
        idx = PC_TURNS_ERROR;
    else if (res->stop_reason && strcmp(res->stop_reason, "paused") == 0)
        idx = PC_TURNS_PAUSED;
    else if (res->stop_reason && strcmp(res->stop_reason, "cancelled") == 0)
        idx = PC_TURNS_CANCELLED;
    pool_counter_add(cfg->pool, idx, 1);
}

static struct turn_options turn_options(const struct engine_turn *t, json_object *prompt)
{
    struct turn_options opt;

    memset(&opt, 0, sizeof(opt));
    opt.prompt = prompt;
    opt.limits = &t->cfg->limits;
    opt.permissions = t->req->permissions;
    opt.is_noise = t->harness->is_noise;
    opt.cancel_on_client_gone = t->client_gone_cancels;
    return opt;
}

/* A turn on a live environment; AR_E_RETRY when it failed before the harness said anything. */
static int run_warm(struct engine_turn *t, const struct lookup *lk, struct event_stream *es,
                    struct run_result *res)
{
    const struct engine_config *cfg = t->cfg;
    struct lifecycle_policy policy = {.mode = (enum lifecycle_mode)lk->admitted_mode,
                                      .idle_ms = lk->admitted_idle_ms,
                                      .source = LIFECYCLE_FROM_ADMITTED};
    struct environment *env = NULL;
    struct turn_options opt;
    json_object *prompt;
    char err[512];
    int r;

    r = environment_reconnect(cfg, lk->h, &env, err, sizeof(err));
    if (r < 0) {
        struct lookup gone = *lk;
        log_info("warm session '%s' unreachable (%s): starting cold", t->key, err);
        gone.reason = TEARDOWN_HARNESS_EXITED;
        if (pool_lock(cfg->pool) >= 0) {
            pool_drain_locked(cfg->pool, lk->h, TEARDOWN_HARNESS_EXITED);
            pool_unlock(cfg->pool);
        }
        evict(cfg, &gone, t->key);
        return AR_E_RETRY;
    }
    pool_counter_add(cfg->pool, PC_WARM_HITS, 1);
    turn_caps_from_bits(lk->caps, &res->caps);
    if (!res->session_id)
        res->session_id = xstrdup(env->acp_session);
    event_emit(es, event_data_phase("environment_starting"));
    event_emit(es, event_data_phase("environment_ready"));
    prompt = build_prompt(t->req, false, res->caps.images);
    opt = turn_options(t, prompt);
    opt.retry_if_silent = true;
    r = run_turn_prompt(env, &opt, es, res);
    json_object_put(prompt);
    if (r == AR_E_RETRY) {
        log_info("warm turn of '%s' failed before any output: retrying cold", t->key);
        environment_destroy(env, TEARDOWN_FAILED_TURN);
        environment_free(env);
        evict(cfg, lk, t->key);
        return AR_E_RETRY;
    }
    finish_environment(t, env, es, res, r, &policy);
    environment_free(env);
    return 0;
}

static void run_cold(struct engine_turn *t, struct event_stream *es, struct run_result *res)
{
    const struct engine_config *cfg = t->cfg;
    const struct run_request *req = t->req;
    bool warm_policy = t->policy.mode == LIFECYCLE_WARM;
    struct environment *env = NULL;
    struct turn_options opt;
    json_object *prompt;
    char err[512];
    int r;

    if (cfg->pool)
        pool_counter_add(cfg->pool, PC_COLD_STARTS, 1);
    event_emit(es, event_data_phase("environment_starting"));
    r = environment_acquire(cfg, req, &t->plan, t->key, t->policy.idle_ms, !warm_policy, &env,
                            err, sizeof(err));
    if (r == -EEXIST) {
        /* another request of the session got there first: run without a seat */
        t->key[0] = '\0';
        r = environment_acquire(cfg, req, &t->plan, "", t->policy.idle_ms, true, &env, err,
                                sizeof(err));
    }
    if (r < 0) {
        log_warn("environment acquisition failed: %s", err);
        run_result_fail(res, "%s", err);
        return;
    }
    if (cfg->pool)
        pool_counter_add(cfg->pool, PC_KEEPER_SPAWNS, 1);
    r = run_turn_open_session(env, t->plan.model_id, cfg->model_strict,
                              now_ms() + (int64_t)cfg->harness_init_ms, err, sizeof(err));
    if (r < 0) {
        log_warn("harness session failed: %s", err);
        event_emit(es, event_error(err, r == AR_E_MODEL ? "model_unavailable" : "runner_error"));
        run_result_fail(res, "%s", err);
        environment_destroy(env, TEARDOWN_FAILED_TURN);
        environment_free(env);
        emit_done(es, res);
        return;
    }
    if (env->has_slot && pool_lock(cfg->pool) >= 0) {
        struct pool_slot *s = pool_slot_locked(cfg->pool, env->h);
        if (s) {
            memcpy(s->acp_session, env->acp_session, sizeof(s->acp_session));
            s->state = s->state == SLOT_STARTING ? SLOT_BUSY : s->state;
        }
        pool_unlock(cfg->pool);
    }
    turn_caps_from_agent(env->agent_caps, req->harness, &res->caps);
    if (!res->session_id)
        res->session_id = xstrdup(env->acp_session);
    event_emit(es, event_data_phase("environment_ready"));
    prompt = build_prompt(req, req->nmessages > 1, res->caps.images);
    opt = turn_options(t, prompt);
    r = run_turn_prompt(env, &opt, es, res);
    json_object_put(prompt);
    finish_environment(t, env, es, res, r, &t->policy);
    environment_free(env);
    emit_done(es, res);
}

void engine_run(struct engine_turn *t, struct event_stream *es, struct run_result *res)
{
    const struct engine_config *cfg = t->cfg;
    struct lookup lk = {0};

    res->model = xstrdup(t->plan.model_name[0] ? t->plan.model_name : NULL);
    res->session_id = xstrdup(t->req->session_id);
    if (t->key[0] && cfg->pool && pool_lock(cfg->pool) >= 0) {
        lookup_locked(cfg->pool, t, &lk);
        pool_unlock(cfg->pool);
    }
    if (lk.outcome == LOOKUP_WARM) {
        if (run_warm(t, &lk, es, res) == 0) {
            emit_done(es, res);
            goto out;
        }
        /* start over cold with a clean result */
        run_result_release(res);
        run_result_init(res);
        res->model = xstrdup(t->plan.model_name[0] ? t->plan.model_name : NULL);
        res->session_id = xstrdup(t->req->session_id);
    } else if (lk.outcome == LOOKUP_EVICT) {
        evict(cfg, &lk, t->key);
    }
    run_cold(t, es, res);
out:
    count_outcome(cfg, res);
    collect_events(es, res);
}
