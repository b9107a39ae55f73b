#include "engine.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "environment.h"
#include "jsonx.h"
#include "log.h"
#include "metrics.h"
#include "trace.h"
#include "provider/provider.h"
#include "run_turn.h"
#include "transcript.h"
#include "util.h"

#define EVICT_WAIT_MS 10000

json_object *engine_installed_harnesses(const struct engine_config *cfg)
{
    struct harness_paths paths = {.harness_dir = cfg->harness_dir,
                                  .scripted_agent = cfg->scripted_agent};

    return harness_installed_names(&paths);
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

static bool approval_reply_tail(const struct run_request *req);

static int refuse_unusable(const struct run_request *req, const struct provider_ops *provider,
                           char *err, size_t errlen)
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
    if (req->network == NETWORK_ALLOWLIST && !provider->caps.network_allowlist) {
        snprintf(err, errlen, "sandboxPermission.network.mode: \"allowlist\" cannot be enforced "
                              "by the %s sandbox",
                 provider->name);
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
    const struct provider_ops *provider = provider_get(req->sandbox);
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
    if (!provider) {
        snprintf(err, errlen, "sandbox: provider \"%s\" is not enabled", req->sandbox);
        return AR_E_INVALID_REQUEST;
    }
    r = refuse_unusable(req, provider, err, errlen);
    if (r < 0)
        return r;
    buf_init(&probe, 80u * 1024 * 1024);
    r = run_request_prompt_text(req, &probe);
    buf_release(&probe);
    if (r < 0 && approval_reply_tail(req))
        r = 0; /* an answer to pending approvals needs no new text */
    if (r < 0) {
        snprintf(err, errlen, "No user message to send (prompt/messages empty).");
        return AR_E_INVALID_REQUEST;
    }
    memset(&li, 0, sizeof(li));
    li.credential_mode = req->mc.credential_mode;
    li.harness = req->harness;
    li.provider_remote = provider->caps.remote;
    li.provider_reusable_leases = provider->caps.reusable_leases;
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

/* ---- transcript lookups ---------------------------------------------------------------- */

/* {"approved": bool, "interactionToken"?} of a tool_result block, or NULL */
static json_object *approval_output(const struct content_block *b)
{
    json_object *approved;

    if (b->type != BLOCK_TOOL_RESULT || !b->output ||
        !json_object_is_type(b->output, json_type_object))
        return NULL;
    approved = jsonx_get(b->output, "approved");
    return approved && json_object_is_type(approved, json_type_boolean) ? b->output : NULL;
}

/* The client's decision on the gate of tool_call_id in this request: -1 none, 0 deny, 1 allow. */
static int decision_for(const struct run_request *req, const struct pool_approval *g)
{
    for (size_t i = req->nmessages; i-- > 0;) {
        const struct chat_message *m = &req->messages[i];
        for (size_t j = 0; j < m->nblocks; j++) {
            const struct content_block *b = &m->blocks[j];
            json_object *out = approval_output(b);
            const char *token;

            if (!out || !b->tool_call_id || strcmp(b->tool_call_id, g->tool_call_id) != 0)
                continue;
            token = jsonx_str(out, "interactionToken");
            if (token && strcmp(token, g->token) != 0)
                return -1; /* an answer to another (older) interaction */
            return json_object_get_boolean(jsonx_get(out, "approved")) ? 1 : 0;
        }
    }
    return -1;
}

/* The tail message only answers approvals (tool_result blocks, no new user text). */
static bool approval_reply_tail(const struct run_request *req)
{
    const struct chat_message *m;
    bool any = false;

    if (req->nmessages == 0)
        return false;
    m = &req->messages[req->nmessages - 1];
    for (size_t i = 0; i < m->nblocks; i++) {
        if (approval_output(&m->blocks[i]))
            any = true;
        else if (m->blocks[i].type == BLOCK_TEXT && m->blocks[i].text && m->blocks[i].text[0])
            return false;
    }
    return any;
}

/* A stored decision: a tool_call with the same tool and canonical arguments was answered. */
static enum permission stored_decision(void *ctx, const char *tool, json_object *args)
{
    const struct run_request *req = ctx;
    struct buf want, have;
    enum permission found = PERMISSION_UNSET;

    if (!tool)
        return PERMISSION_UNSET;
    buf_init(&want, 1024 * 1024);
    buf_init(&have, 1024 * 1024);
    identity_canonical(args, &want);
    for (size_t i = 0; i < req->nmessages && found == PERMISSION_UNSET; i++) {
        const struct chat_message *m = &req->messages[i];
        for (size_t j = 0; j < m->nblocks; j++) {
            const struct content_block *b = &m->blocks[j];

            if (b->type != BLOCK_TOOL_CALL || !b->tool_name || !b->tool_call_id ||
                strcasecmp(b->tool_name, tool) != 0)
                continue;
            buf_reset(&have);
            identity_canonical(b->input, &have);
            if (strcmp(buf_str(&have), buf_str(&want)) != 0)
                continue;
            for (size_t k = i; k < req->nmessages; k++)
                for (size_t l = 0; l < req->messages[k].nblocks; l++) {
                    const struct content_block *rb = &req->messages[k].blocks[l];
                    json_object *out = approval_output(rb);
                    if (out && rb->tool_call_id && strcmp(rb->tool_call_id, b->tool_call_id) == 0)
                        found = json_object_get_boolean(jsonx_get(out, "approved"))
                                    ? PERMISSION_ALLOW
                                    : PERMISSION_DENY;
                }
        }
    }
    buf_release(&want);
    buf_release(&have);
    return found;
}

/* ---- the pool side of dispatch ----------------------------------------------------------- */

enum lookup_outcome { LOOKUP_MISS, LOOKUP_WARM, LOOKUP_RESUME, LOOKUP_EVICT };

struct lookup {
    enum lookup_outcome outcome;
    struct pool_handle h;
    pid_t keeper_pid;
    uint64_t keeper_start;
    enum teardown_reason reason;
    uint32_t caps;
    uint8_t admitted_mode;
    uint32_t admitted_idle_ms;
    int64_t prompt_id;
    int64_t next_id;
    struct pool_approval gates[POOL_APPROVALS_MAX];
    size_t ngates;
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

/*
 * A parked approval can resume when the request answers at least one of its gates, the
 * credentials and runtime are unchanged, its approval window is still open, and (unless the
 * request only carries the answers) the conversation is the one it paused in.
 */
static enum teardown_reason resume_mismatch_locked(const struct engine_turn *t,
                                                   const struct pool_slot *s,
                                                   struct lookup *lk)
{
    size_t answered = 0;

    if (s->harness != (uint8_t)t->req->harness ||
        memcmp(s->config_fp, t->config_fp, sizeof(t->config_fp)) != 0 ||
        memcmp(s->cred_epoch, t->epoch, sizeof(t->epoch)) != 0)
        return TEARDOWN_RUNTIME_INCOMPATIBLE;
    if (s->approval_deadline_ms <= now_ms())
        return TEARDOWN_APPROVAL_EXPIRY;
    lk->ngates = s->napprovals;
    for (size_t i = 0; i < lk->ngates; i++) {
        lk->gates[i] = s->approvals[i];
        lk->gates[i].decision = (int8_t)decision_for(t->req, &lk->gates[i]);
        if (lk->gates[i].decision >= 0)
            answered++;
    }
    if (answered == 0)
        return TEARDOWN_SESSION_INCOMPATIBLE;
    if (!approval_reply_tail(t->req) && t->req->nmessages > 1 &&
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
    lk->caps = s->caps;
    lk->admitted_mode = s->policy_mode;
    lk->admitted_idle_ms = s->idle_ms;
    lk->prompt_id = s->prompt_id;
    lk->next_id = s->acp_next_id;
    switch (s->state) {
    case SLOT_IDLE:
        lk->reason = mismatch_locked(t, s);
        if (lk->reason == TEARDOWN_NONE &&
            pool_checkout_locked(p, lk->h, false, self_pid(), t->req->turn_id) == 0) {
            lk->outcome = LOOKUP_WARM;
            return;
        }
        break;
    case SLOT_AWAITING_APPROVAL:
        lk->reason = resume_mismatch_locked(t, s, lk);
        if (lk->reason == TEARDOWN_NONE &&
            pool_checkout_locked(p, lk->h, true, self_pid(), t->req->turn_id) == 0) {
            lk->outcome = LOOKUP_RESUME;
            return;
        }
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

/* The slot index of key with the pool locked; unlocked again and <0 when there is none. */
static int lock_find(const struct engine_config *cfg, const char *key)
{
    int i, r;

    if (!cfg->pool)
        return -ENOENT;
    r = pool_lock(cfg->pool);
    if (r < 0)
        return r;
    i = pool_find_locked(cfg->pool, key);
    if (i < 0)
        pool_unlock(cfg->pool);
    return i;
}

int engine_kill_session(const struct engine_config *cfg, const char *key,
                        enum teardown_reason reason)
{
    struct lookup lk = {.reason = reason};
    int i = lock_find(cfg, key);

    if (i == -ENOENT)
        return 0;
    if (i < 0)
        return i;
    lk.h = pool_handle_of(cfg->pool, (uint32_t)i);
    lk.keeper_pid = cfg->pool->slots[i].keeper_pid;
    lk.keeper_start = cfg->pool->slots[i].keeper_start;
    if (cfg->pool->slots[i].state != SLOT_DRAINING)
        pool_drain_locked(cfg->pool, lk.h, (uint8_t)reason);
    pool_unlock(cfg->pool);
    evict(cfg, &lk, key);
    return 1;
}

/* ---- after a turn ------------------------------------------------------------------------- */

static void capacity_victim_locked(const struct engine_config *cfg, struct lookup *victim,
                                   bool *room)
{
    int lru;

    *room = true;
    if (pool_parked_count_locked(cfg->pool) < cfg->session_pool_max)
        return;
    lru = pool_lru_idle_locked(cfg->pool);
    if (lru < 0) {
        *room = false; /* every seat is busy or awaiting approval */
        return;
    }
    victim->h = pool_handle_of(cfg->pool, (uint32_t)lru);
    victim->keeper_pid = cfg->pool->slots[lru].keeper_pid;
    victim->keeper_start = cfg->pool->slots[lru].keeper_start;
    victim->reason = TEARDOWN_CAPACITY_EVICTION;
    victim->outcome = LOOKUP_EVICT;
    pool_drain_locked(cfg->pool, victim->h, TEARDOWN_CAPACITY_EVICTION);
}

static void evict_victim(const struct engine_config *cfg, const struct lookup *victim)
{
    char vkey[POOL_KEY_MAX] = "";

    if (victim->outcome != LOOKUP_EVICT)
        return;
    if (pool_lock(cfg->pool) >= 0) {
        struct pool_slot *vs = pool_slot_locked(cfg->pool, victim->h);
        if (vs)
            memcpy(vkey, vs->key, sizeof(vkey));
        pool_unlock(cfg->pool);
    }
    if (vkey[0])
        evict(cfg, victim, vkey);
}

/*
 * After a turn: park the environment — awaiting approval when the turn paused on gates, idle
 * under a warm policy when it ended well with the client still there — or destroy it. A full
 * pool evicts its least recently used idle environment.
 */
static void finish_environment(struct engine_turn *t, struct environment *env,
                               struct event_stream *es, struct run_result *res, int turn_rc,
                               const struct turn_outcome *out,
                               const struct lifecycle_policy *policy)
{
    const struct engine_config *cfg = t->cfg;
    struct lookup victim = {0};
    enum teardown_reason reason = TEARDOWN_PER_TURN;
    uint8_t next_fp[IDENTITY_DIGEST_LEN];
    bool park = false, awaiting = out->paused;
    uint64_t window = awaiting ? cfg->approval_ttl_ms : policy->idle_ms;

    /* the client must still be there for a session run to be kept: ask before deciding */
    event_stream_flush(es);
    (void)event_stream_client_alive(es);
    if (turn_rc < 0 || env->harness_exited)
        reason = TEARDOWN_FAILED_TURN;
    else if (es->client_gone && t->client_gone_cancels)
        reason = TEARDOWN_ABORTED;
    if (t->key[0] && env->has_slot && res->ok && reason == TEARDOWN_PER_TURN &&
        cfg->session_pool_max > 0 &&
        (awaiting || (policy->mode == LIFECYCLE_WARM && !es->client_gone))) {
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

        park = s && s->state == SLOT_BUSY && s->owner_pid == self_pid();
        if (park)
            capacity_victim_locked(cfg, &victim, &park);
        if (park) {
            memcpy(s->config_fp, t->config_fp, sizeof(s->config_fp));
            memcpy(s->history_fp, next_fp, sizeof(s->history_fp));
            memcpy(s->cred_epoch, t->epoch, sizeof(s->cred_epoch));
            memcpy(s->acp_session, env->acp_session, sizeof(s->acp_session));
            s->caps = turn_caps_to_bits(&res->caps);
            s->policy_mode = (uint8_t)policy->mode;
            s->idle_ms = (uint32_t)policy->idle_ms;
            s->flags &= ~(uint32_t)(SLOT_F_HISTORY_BROKEN | SLOT_F_PER_TURN | SLOT_F_CANCEL);
            s->acp_next_id = env->next_id;
            s->prompt_id = out->prompt_id;
            s->napprovals = (uint8_t)(awaiting ? out->ngates : 0);
            if (awaiting)
                memcpy(s->approvals, out->gates, out->ngates * sizeof(out->gates[0]));
            s->turns++;
            pool_park_locked(cfg->pool, env->h, awaiting ? SLOT_AWAITING_APPROVAL : SLOT_IDLE,
                             now_ms() + (int64_t)window);
        }
        pool_unlock(cfg->pool);
    }
    evict_victim(cfg, &victim);
    if (park) {
        environment_park(env, window, awaiting);
        log_debug("session '%s' parked %s for %llums", t->key, awaiting ? "on approval" : "idle",
                  (unsigned long long)window);
    } else {
        environment_destroy(env, reason);
    }
}

static void emit_done(struct event_stream *es, struct run_result *res)
{
    event_emit(es, event_done(res->stop_reason, res->trace_id));
}

static void flush_events(void *ctx)
{
    event_stream_flush(ctx);
}

/* Events reach the client before every wait for the harness. */
static void stream_before_waits(struct environment *env, struct event_stream *es)
{
    env->before_wait = flush_events;
    env->before_wait_ctx = es;
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
    metrics_turn(t->cfg->pool, (unsigned)t->req->harness, t->plan.provider, o);
    if (es->first_output_ms)
        metrics_observe(&t->cfg->pool->hdr->metrics.first_event,
                        (es->first_output_ms - started) * 1000);
}

struct cancel_probe {
    struct pool *pool;
    struct pool_handle h;
    bool has_slot;
    struct event_stream *es;
    bool on_client_gone;
};

/* /cancel sets the slot's flag; a client that went away cancels a run without a session. */
static bool should_cancel(void *ctx)
{
    struct cancel_probe *c = ctx;

    if (c->has_slot && c->pool) {
        const struct pool_slot *s = &c->pool->slots[c->h.index];
        uint32_t flags = __atomic_load_n(&s->flags, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&s->generation, __ATOMIC_ACQUIRE) == c->h.generation &&
            (flags & SLOT_F_CANCEL))
            return true;
    }
    return c->on_client_gone && !event_stream_client_alive(c->es);
}

static struct turn_options turn_options(struct engine_turn *t, json_object *prompt,
                                        struct cancel_probe *probe)
{
    struct turn_options opt;

    memset(&opt, 0, sizeof(opt));
    opt.prompt = prompt;
    opt.limits = &t->cfg->limits;
    opt.permissions = t->req->permissions;
    opt.is_noise = t->harness->is_noise;
    opt.stored = stored_decision;
    opt.stored_ctx = t->req;
    opt.should_cancel = should_cancel;
    opt.cancel_ctx = probe;
    return opt;
}

/* A turn on a live environment (warm follow-up, or approval resume); AR_E_RETRY when it failed
 * before the harness said anything. */
static int run_live(struct engine_turn *t, struct lookup *lk, struct event_stream *es,
                    struct run_result *res, bool *limit)
{
    const struct engine_config *cfg = t->cfg;
    struct lifecycle_policy policy = {.mode = (enum lifecycle_mode)lk->admitted_mode,
                                      .idle_ms = lk->admitted_idle_ms,
                                      .source = LIFECYCLE_FROM_ADMITTED};
    bool resume = lk->outcome == LOOKUP_RESUME;
    struct environment *env = NULL;
    struct cancel_probe probe;
    struct turn_outcome out;
    struct turn_options opt;
    json_object *prompt = NULL;
    char err[512];
    int r;

    event_stream_flush(es);
    r = environment_reconnect(cfg, lk->h, &env, err, sizeof(err));
    if (r < 0) {
        struct lookup gone = *lk;
        log_info("live session '%s' unreachable (%s): starting cold", t->key, err);
        gone.reason = TEARDOWN_HARNESS_EXITED;
        if (pool_lock(cfg->pool) >= 0) {
            pool_drain_locked(cfg->pool, lk->h, TEARDOWN_HARNESS_EXITED);
            pool_unlock(cfg->pool);
        }
        evict(cfg, &gone, t->key);
        return AR_E_RETRY;
    }
    if (lk->next_id > env->next_id)
        env->next_id = lk->next_id;
    stream_before_waits(env, es);
    pool_counter_add(cfg->pool, PC_WARM_HITS, 1);
    turn_caps_from_bits(lk->caps, &res->caps);
    if (!res->session_id)
        res->session_id = xstrdup(env->acp_session);
    event_emit(es, event_data_phase("environment_starting"));
    event_emit(es, event_data_phase("environment_ready"));
    probe = (struct cancel_probe){.pool = cfg->pool, .h = env->h, .has_slot = true, .es = es,
                                  .on_client_gone = t->client_gone_cancels};
    if (!resume)
        prompt = build_prompt(t->req, false, res->caps.images);
    opt = turn_options(t, prompt, &probe);
    if (resume) {
        opt.resume_prompt_id = lk->prompt_id;
        opt.resume = lk->gates;
        opt.nresume = lk->ngates;
    } else {
        opt.retry_if_silent = true;
    }
    r = run_turn_prompt(env, &opt, es, res, &out);
    json_object_put(prompt);
    *limit = out.limit_tripped;
    if (r == AR_E_RETRY) {
        log_info("warm turn of '%s' failed before any output: retrying cold", t->key);
        environment_destroy(env, TEARDOWN_FAILED_TURN);
        environment_free(env);
        evict(cfg, lk, t->key);
        return AR_E_RETRY;
    }
    finish_environment(t, env, es, res, r, &out, &policy);
    environment_free(env);
    return 0;
}

/* The prompt of a cold turn whose request answers approvals a lost session was waiting on. */
static json_object *approval_replay_prompt(const struct run_request *req)
{
    static const char closing[] =
        "The user has now answered the pending tool approvals above. Run the APPROVED calls "
        "again with the same arguments (they have NOT run yet); do not run the DENIED ones; "
        "then continue the task without restarting it.";
    struct buf text;
    json_object *blocks = json_object_new_array();

    buf_init(&text, 80u * 1024 * 1024);
    transcript_turn_text(req, closing, &text);
    json_object_array_add(blocks, text_block(buf_str(&text)));
    buf_release(&text);
    return blocks;
}

static void run_cold(struct engine_turn *t, struct event_stream *es, struct run_result *res,
                     bool *limit, enum teardown_reason why)
{
    const struct engine_config *cfg = t->cfg;
    const struct run_request *req = t->req;
    bool warm_policy = t->policy.mode == LIFECYCLE_WARM;
    struct environment *env = NULL;
    struct cancel_probe probe;
    struct turn_outcome out;
    struct turn_options opt;
    json_object *prompt;
    char err[512];
    int r;

    int64_t spawn_start = now_ns();

    metrics_cold_start(cfg->pool, (unsigned)why);
    event_emit(es, event_data_phase("environment_starting"));
    event_stream_flush(es);
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
    stream_before_waits(env, es);
    if (cfg->pool)
        metrics_observe(&cfg->pool->hdr->metrics.keeper_spawn, (now_ns() - spawn_start) / 1000);
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
            if (s->state == SLOT_STARTING)
                s->state = SLOT_BUSY;
        }
        pool_unlock(cfg->pool);
    }
    turn_caps_from_agent(env->agent_caps, req->harness, &res->caps);
    if (!res->session_id)
        res->session_id = xstrdup(env->acp_session);
    event_emit(es, event_data_phase("environment_ready"));
    if (approval_reply_tail(req))
        prompt = approval_replay_prompt(req);
    else
        prompt = build_prompt(req, req->nmessages > 1, res->caps.images);
    probe = (struct cancel_probe){.pool = cfg->pool, .h = env->h, .has_slot = env->has_slot,
                                  .es = es, .on_client_gone = t->client_gone_cancels};
    opt = turn_options(t, prompt, &probe);
    r = run_turn_prompt(env, &opt, es, res, &out);
    json_object_put(prompt);
    *limit = out.limit_tripped;
    finish_environment(t, env, es, res, r, &out, &t->policy);
    environment_free(env);
    emit_done(es, res);
}

static void observe_trace(void *ctx, json_object *ev)
{
    trace_run_event(ctx, ev);
}

void engine_run(struct engine_turn *t, struct event_stream *es, struct run_result *res)
{
    const struct engine_config *cfg = t->cfg;
    struct lookup lk = {0};
    enum teardown_reason why = TEARDOWN_NONE;
    int64_t started = now_ms();
    struct trace_run *trace;
    char trace_id[33];
    bool limit = false;

    res->model = xstrdup(t->plan.model_name[0] ? t->plan.model_name : NULL);
    res->session_id = xstrdup(t->req->session_id);
    trace = trace_run_start(t->req, t->plan.model_name, trace_id);
    res->trace_id = strdup(trace_id);
    es->observe = observe_trace;
    es->observe_ctx = trace;
    if (t->key[0] && cfg->pool && pool_lock(cfg->pool) >= 0) {
        lookup_locked(cfg->pool, t, &lk);
        pool_unlock(cfg->pool);
    }
    if (lk.outcome == LOOKUP_WARM || lk.outcome == LOOKUP_RESUME) {
        trace_run_environment(trace, lk.outcome == LOOKUP_WARM ? "warm" : "resume");
        if (run_live(t, &lk, es, res, &limit) == 0) {
            emit_done(es, res);
            goto out;
        }
        /* start over cold with a clean result */
        run_result_release(res);
        run_result_init(res);
        res->model = xstrdup(t->plan.model_name[0] ? t->plan.model_name : NULL);
        res->session_id = xstrdup(t->req->session_id);
        res->trace_id = strdup(trace_id);
        why = TEARDOWN_HARNESS_EXITED;
    } else if (lk.outcome == LOOKUP_EVICT) {
        why = lk.reason;
        evict(cfg, &lk, t->key);
    }
    trace_run_environment(trace, "cold");
    run_cold(t, es, res, &limit, why);
out:
    count_outcome(t, es, res, limit, started);
    es->observe = NULL;
    trace_run_finish(trace, res);
    collect_events(es, res);
}

static bool always(void *ctx)
{
    (void)ctx;
    return true;
}

/* Cancel a turn parked on approvals: answer its gates "cancelled" and keep it warm. */
static int cancel_parked(const struct engine_config *cfg, const char *key)
{
    struct lookup lk;
    struct environment *env = NULL;
    struct event_stream es;
    struct run_result res;
    struct turn_outcome out;
    struct turn_options opt;
    char err[256];
    uint32_t idle = 0;
    int i, r;

    memset(&lk, 0, sizeof(lk));
    i = lock_find(cfg, key);
    if (i < 0)
        return i == -ENOENT ? 0 : i;
    if (cfg->pool->slots[i].state != SLOT_AWAITING_APPROVAL) {
        pool_unlock(cfg->pool);
        return 0;
    }
    lk.h = pool_handle_of(cfg->pool, (uint32_t)i);
    lk.prompt_id = cfg->pool->slots[i].prompt_id;
    lk.next_id = cfg->pool->slots[i].acp_next_id;
    lk.ngates = cfg->pool->slots[i].napprovals;
    memcpy(lk.gates, cfg->pool->slots[i].approvals, sizeof(lk.gates));
    for (size_t g = 0; g < lk.ngates; g++)
        lk.gates[g].decision = -1;
    idle = cfg->pool->slots[i].idle_ms;
    r = pool_checkout_locked(cfg->pool, lk.h, true, self_pid(), "cancel");
    pool_unlock(cfg->pool);
    if (r < 0)
        return 0;
    r = environment_reconnect(cfg, lk.h, &env, err, sizeof(err));
    if (r < 0) {
        lk.reason = TEARDOWN_HARNESS_EXITED;
        lk.keeper_pid = 0;
        engine_kill_session(cfg, key, TEARDOWN_HARNESS_EXITED);
        return 0;
    }
    if (lk.next_id > env->next_id)
        env->next_id = lk.next_id;
    event_stream_init(&es, NULL);
    run_result_init(&res);
    memset(&opt, 0, sizeof(opt));
    opt.limits = &cfg->limits;
    opt.resume_prompt_id = lk.prompt_id;
    opt.resume = lk.gates;
    opt.nresume = lk.ngates;
    opt.should_cancel = always;
    r = run_turn_prompt(env, &opt, &es, &res, &out);
    if (r == 0 && res.ok && pool_lock(cfg->pool) >= 0) {
        struct pool_slot *s = pool_slot_locked(cfg->pool, env->h);
        if (s && s->state == SLOT_BUSY) {
            s->napprovals = 0;
            s->acp_next_id = env->next_id;
            s->flags &= ~(uint32_t)SLOT_F_CANCEL;
            pool_park_locked(cfg->pool, env->h, SLOT_IDLE, now_ms() + (int64_t)(idle ? idle : 60000));
        } else {
            r = -ESTALE;
        }
        pool_unlock(cfg->pool);
        if (r == 0)
            environment_park(env, idle ? idle : 60000, false);
    }
    if (r != 0 || !res.ok)
        environment_destroy(env, TEARDOWN_FAILED_TURN);
    environment_free(env);
    run_result_release(&res);
    event_stream_release(&es);
    return 0;
}

int engine_cancel_session(const struct engine_config *cfg, const char *key,
                          const char *target_turn)
{
    struct pool_slot *s;
    bool parked;
    int i = lock_find(cfg, key);

    if (i < 0)
        return i;
    s = &cfg->pool->slots[i];
    parked = s->state == SLOT_AWAITING_APPROVAL;
    /* a targetTurnId that is not the running turn: that turn is over already */
    if ((s->state == SLOT_BUSY || s->state == SLOT_STARTING) &&
        !(target_turn && target_turn[0] && strcmp(s->owner_turn, target_turn) != 0))
        __atomic_or_fetch(&s->flags, SLOT_F_CANCEL, __ATOMIC_RELEASE);
    pool_unlock(cfg->pool);
    return parked ? cancel_parked(cfg, key) : 0;
}
