#include "engine.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "environment.h"
#include "jsonx.h"
#include "log.h"
#include "run_turn.h"
#include "util.h"

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

/* The ACP prompt of a fresh turn: the tail user message's text and inline images. */
static int build_prompt(const struct run_request *req, json_object **ret, char *err,
                        size_t errlen)
{
    const struct chat_message *m;
    json_object *blocks;
    struct buf text;
    int r;

    buf_init(&text, 16u * 1024 * 1024);
    r = run_request_prompt_text(req, &text);
    if (r < 0) {
        buf_release(&text);
        snprintf(err, errlen, "No user message to send (prompt/messages empty).");
        return AR_E_INVALID_REQUEST;
    }
    blocks = json_object_new_array();
    json_object_array_add(blocks, text_block(buf_str(&text)));
    buf_release(&text);
    m = &req->messages[req->nmessages - 1];
    for (size_t i = 0; i < m->nblocks; i++) {
        const struct content_block *b = &m->blocks[i];
        json_object *img;

        if (b->type != BLOCK_IMAGE || !b->data)
            continue;
        img = json_object_new_object();
        json_object_object_add(img, "type", json_object_new_string("image"));
        json_object_object_add(img, "data", json_object_new_string(b->data));
        json_object_object_add(img, "mimeType",
                               json_object_new_string(b->mime_type ? b->mime_type
                                                                   : "image/png"));
        json_object_array_add(blocks, img);
    }
    *ret = blocks;
    return 0;
}

int engine_prepare(const struct engine_config *cfg, struct run_request *req,
                   struct engine_turn *ret, char *err, size_t errlen)
{
    struct harness_paths paths = {.harness_dir = cfg->harness_dir,
                                  .scripted_agent = cfg->scripted_agent};
    struct engine_turn t;
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
    if (req->network == NETWORK_ALLOWLIST) {
        snprintf(err, errlen, "sandboxPermission.network.mode: \"allowlist\" cannot be enforced "
                              "by the local sandbox");
        return AR_E_INVALID_REQUEST;
    }
    r = build_prompt(req, &t.prompt, err, errlen);
    if (r < 0)
        return r;
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
    if (t->prompt)
        json_object_put(t->prompt);
    if (t->plan.argv)
        sandbox_plan_release(&t->plan);
    memset(t, 0, sizeof(*t));
}

static void finish(struct event_stream *es, struct run_result *res, bool turn_started)
{
    if (!res->ok && !res->stop_reason)
        res->stop_reason = NULL;
    if (turn_started || res->ok)
        event_emit(es, event_done(res->stop_reason, res->trace_id));
    if (!es->streaming) {
        if (res->events)
            json_object_put(res->events);
        res->events = event_stream_take(es);
    }
}

void engine_run(struct engine_turn *t, struct event_stream *es, struct run_result *res)
{
    const struct engine_config *cfg = t->cfg;
    const struct run_request *req = t->req;
    struct environment *env = NULL;
    struct turn_options opt;
    char err[512];
    int r;

    res->model = xstrdup(t->plan.model_name[0] ? t->plan.model_name : NULL);
    res->session_id = xstrdup(req->session_id);
    event_emit(es, event_data_phase("environment_starting"));
    r = environment_acquire(cfg, req, &t->plan, "", cfg->session_ttl_ms, true, &env, err,
                            sizeof(err));
    if (r < 0) {
        log_warn("environment acquisition failed: %s", err);
        run_result_fail(res, "%s", err);
        finish(es, res, false);
        return;
    }
    r = run_turn_open_session(env, t->plan.model_id, cfg->model_strict,
                              now_ms() + (int64_t)cfg->harness_init_ms, err, sizeof(err));
    if (r < 0) {
        log_warn("harness session failed: %s", err);
        event_emit(es, event_error(err, r == AR_E_MODEL ? "model_unavailable" : "runner_error"));
        run_result_fail(res, "%s", err);
        environment_destroy(env, TEARDOWN_FAILED_TURN);
        environment_free(env);
        finish(es, res, true);
        return;
    }
    turn_caps_from_agent(env->agent_caps, req->harness, &res->caps);
    if (!res->session_id)
        res->session_id = xstrdup(env->acp_session);
    event_emit(es, event_data_phase("environment_ready"));

    memset(&opt, 0, sizeof(opt));
    opt.prompt = t->prompt;
    opt.limits = &cfg->limits;
    opt.permissions = req->permissions;
    opt.is_noise = t->harness->is_noise;
    r = run_turn_prompt(env, &opt, es, res);
    environment_destroy(env, r < 0 ? TEARDOWN_FAILED_TURN : TEARDOWN_PER_TURN);
    environment_free(env);
    finish(es, res, true);
}
