#include "routes.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "admin.h"
#include "auth.h"
#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "engine.h"
#include "http.h"
#include "request/request.h"
#include "turn/events.h"

/* Bodies from this size on are followed by malloc_trim (their parse trees were large). */
#define TRIM_AFTER_BYTES (1u << 20)

static bool authorized(const struct route_ctx *rc, struct http_req *h)
{
    return auth_ok(rc->cfg->token, http_param(h, "HTTP_X_AGENTA_RUNNER_TOKEN"),
                   http_param(h, "HTTP_AUTHORIZATION"));
}

/* Read a capped body; answers the error itself and returns <0 when it cannot. */
static int read_body(struct http_req *h, uint64_t max, struct buf *body)
{
    int r = http_read_body(h, max, body);

    if (r == -EFBIG)
        http_error(h, 413, "request body too large");
    else if (r == -EINVAL)
        http_error(h, 400, "invalid Content-Length");
    else if (r < 0)
        http_error(h, 400, "request body ended early");
    return r;
}

static void handle_health(const struct route_ctx *rc, struct http_req *h)
{
    json_object *o = json_object_new_object(), *engines = json_object_new_array(), *sandbox;

    json_object_object_add(o, "status", json_object_new_string("ok"));
    json_object_object_add(o, "runner", json_object_new_string(AR_VERSION));
    json_object_object_add(o, "protocol", json_object_new_int(AR_PROTOCOL));
    json_object_array_add(engines, json_object_new_string("agent-runner"));
    json_object_object_add(o, "engines", engines);
    json_object_object_add(o, "harnesses", engine_installed_harnesses(&rc->cfg->engine));
    json_object_object_add(o, "sandboxes", engine_sandbox_names());
    json_object_object_add(o, "modelGateway", engine_model_gateway_describe(&rc->cfg->engine));
    sandbox = engine_sandbox_describe(&rc->cfg->engine);
    if (sandbox)
        json_object_object_add(o, "sandbox", sandbox);
    http_json(h, 200, o);
    json_object_put(o);
}

static void status_body(struct http_req *h, int code, const char *status, const char *reason)
{
    json_object *o = json_object_new_object();

    json_object_object_add(o, "status", json_object_new_string(status));
    if (reason)
        json_object_object_add(o, "reason", json_object_new_string(reason));
    http_json(h, code, o);
    json_object_put(o);
}

/*
 * 200 when a turn can be taken, else 503 with the reason: no session table, no master, every
 * run slot taken (saturated), no sandbox network, no harness. Either way the body says how
 * many runs are in flight of how many, and which sandbox limits this host cannot enforce.
 */
static void handle_readyz(const struct route_ctx *rc, struct http_req *h)
{
    struct engine_sandbox_facts sf;
    bool probed = engine_sandbox_facts(&rc->cfg->engine, &sf);
    pid_t master = engine_master_pid(&rc->cfg->engine);
    uint64_t runs = engine_runs_in_flight(&rc->cfg->engine);
    json_object *o = json_object_new_object(), *installed;
    char why[320] = "";

    if (master < 0)
        snprintf(why, sizeof(why), "session table not attached");
    else if (getppid() != master)
        snprintf(why, sizeof(why), "master is gone");
    else if (runs >= rc->cfg->runs_max)
        snprintf(why, sizeof(why), "at capacity: saturated (%llu of %llu runs in flight)",
                 (unsigned long long)runs, (unsigned long long)rc->cfg->runs_max);
    else if (probed && !sf.net_ok)
        snprintf(why, sizeof(why), "sandboxes cannot start: %s", sf.net_why);
    if (!why[0]) {
        installed = engine_installed_harnesses(&rc->cfg->engine);
        if (json_object_array_length(installed) == 0)
            snprintf(why, sizeof(why), "no harness installed");
        json_object_put(installed);
    }
    json_object_object_add(o, "status", json_object_new_string(why[0] ? "unavailable" : "ready"));
    if (why[0])
        json_object_object_add(o, "reason", json_object_new_string(why));
    json_object_object_add(o, "runsInFlight", json_object_new_int64((int64_t)runs));
    json_object_object_add(o, "runsMax", json_object_new_int64((int64_t)rc->cfg->runs_max));
    json_object_object_add(o, "saturated", json_object_new_boolean(runs >= rc->cfg->runs_max));
    if (probed && sf.missing[0])
        json_object_object_add(o, "limitsNotEnforced", json_object_new_string(sf.missing));
    http_json(h, why[0] ? 503 : 200, o);
    json_object_put(o);
}

static bool wants_ndjson(struct http_req *h)
{
    const char *accept = http_param(h, "HTTP_ACCEPT");

    return accept && strstr(accept, "application/x-ndjson");
}

static void redact_request(const struct run_request *req)
{
    for (size_t i = 0; i < req->mc.ncredentials; i++)
        log_redact_add(req->mc.credentials[i].value);
    log_redact_add(req->tools.callback_authorization);
    if (req->telemetry) {
        json_object *hdrs = jsonx_path(req->telemetry, "exporters.otlp.headers");

        /* an exporter without headers is fine (json-c's foreach cannot take NULL) */
        if (!hdrs || !json_object_is_type(hdrs, json_type_object))
            return;
        json_object_object_foreach(hdrs, k, v)
        {
            (void)k;
            if (v && json_object_is_type(v, json_type_string))
                log_redact_add(json_object_get_string(v));
        }
    }
}

static void run_streaming(struct engine_turn *turn, struct http_req *h)
{
    struct event_sink sink = {
        .write_line = http_stream_write,
        .flush = http_stream_flush,
        .client_alive = http_client_alive,
        .ctx = h};
    struct event_stream es;
    struct run_result res;
    json_object *result;
    struct buf line;

    http_stream_start(h);
    event_stream_init(&es, &sink);
    run_result_init(&res);
    engine_run(turn, &es, &res);
    result = run_result_to_json(&res);
    buf_init(&line, RESULT_LINE_MAX);
    if (events_record_line("result", result, &line) == 0 &&
        http_stream_write(h, line.data, line.len) == 0)
        (void)http_stream_flush(h);
    buf_release(&line);
    json_object_put(result);
    log_info("turn finished: ok %s, stop '%s', %llu events%s", res.ok ? "true" : "false",
             res.stop_reason ? res.stop_reason : "", (unsigned long long)es.nevents,
             h->client_gone ? ", client gone" : "");
    run_result_release(&res);
    event_stream_release(&es);
}

static void run_oneshot(struct engine_turn *turn, struct http_req *h)
{
    struct event_stream es;
    struct run_result res;
    json_object *result;

    event_stream_init(&es, NULL);
    run_result_init(&res);
    engine_run(turn, &es, &res);
    result = run_result_to_json(&res);
    http_json(h, res.ok ? 200 : 500, result);
    json_object_put(result);
    log_info("turn finished: ok %s, stop '%s'", res.ok ? "true" : "false",
             res.stop_reason ? res.stop_reason : "");
    run_result_release(&res);
    event_stream_release(&es);
}

/*
 * A request refused before its turn starts. The one-shot path answers `status` with
 * {"ok":false,"error":msg}. The NDJSON path answers 200 and reports the refusal in the stream
 * (an `error` event with msg and code, `done`, a result with ok:false), as Agenta's runner does:
 * its client shows nothing but "Agent runner HTTP 400" for an error status on this path.
 */
static void refuse_run(struct http_req *h, int status, const char *msg, const char *code)
{
    struct event_sink sink = {
        .write_line = http_stream_write, .flush = http_stream_flush, .ctx = h};
    struct event_stream es;
    struct run_result res;
    json_object *result;
    struct buf line;

    if (!wants_ndjson(h)) {
        http_error(h, status, msg);
        return;
    }
    http_stream_start(h);
    event_stream_init(&es, &sink);
    run_result_init(&res);
    run_result_fail(&res, "%s", msg);
    event_emit(&es, event_error(msg, code));
    event_emit(&es, event_done(NULL, NULL));
    result = run_result_to_json(&res);
    buf_init(&line, RESULT_LINE_MAX);
    if (result && events_record_line("result", result, &line) == 0 &&
        http_stream_write(h, line.data, line.len) == 0)
        (void)http_stream_flush(h);
    buf_release(&line);
    json_object_put(result);
    run_result_release(&res);
    event_stream_release(&es);
}

static void handle_run(const struct route_ctx *rc, struct http_req *h)
{
    struct request_limits lim;
    struct run_request req;
    struct engine_turn *turn = NULL;
    struct buf body;
    char err[512];
    bool big;
    int r;

    if (!engine_admit(&rc->cfg->engine, rc->inflight_slot, rc->cfg->runs_max,
                      rc->cfg->worker_runs_max)) {
        char msg[96];
        snprintf(msg, sizeof(msg), "Runner at capacity (%llu concurrent runs)",
                 (unsigned long long)rc->cfg->runs_max);
        http_error(h, 429, msg);
        return;
    }
    buf_init(&body, rc->cfg->max_body);
    if (read_body(h, rc->cfg->max_body, &body) < 0)
        goto out;
    request_limits_default(&lim);
    lim.allow_scripted = rc->cfg->engine.scripted_agent != NULL;
    r = request_parse(buf_str(&body), body.len, &lim, &req, err, sizeof(err));
    if (r == -EBADMSG) {
        http_error(h, 400, err); /* not JSON: 400 on both paths */
        goto out;
    }
    if (r < 0) {
        log_info("run refused: %s", err);
        refuse_run(h, r == -ENOMEM ? 500 : 400, err, "runner_error");
        goto out;
    }
    redact_request(&req);
    log_ctx_set(h->request_id, req.session_id, req.turn_id, engine_harness_name(req.harness));
    r = engine_prepare(&rc->cfg->engine, &req, &turn, err, sizeof(err));
    if (r < 0) {
        log_info("run refused: %s", err);
        refuse_run(h, r == -ENOMEM ? 500 : 400, err, "runner_error");
        run_request_release(&req);
        goto out;
    }
    if (wants_ndjson(h))
        run_streaming(turn, h);
    else
        run_oneshot(turn, h);
    engine_turn_free(turn);
    run_request_release(&req);
out:
    big = body.len >= TRIM_AFTER_BYTES;
    buf_release(&body);
    engine_admit_release(&rc->cfg->engine, rc->inflight_slot);
    /* a large body's parse tree went back to malloc: give the pages back to the system */
    if (big)
        malloc_trim(0);
}

/*
 * /kill and /cancel: a capped {"sessionId","projectId","targetTurnId"?} body naming a session.
 * Answers the error itself and returns <0 when the body is not one.
 */
static int read_session_ref(const struct route_ctx *rc, struct http_req *h,
                            struct session_ref *ref, char key[ENGINE_KEY_MAX])
{
    struct buf body;
    char err[256];
    int r;

    buf_init(&body, rc->cfg->max_small_body);
    r = read_body(h, rc->cfg->max_small_body, &body);
    if (r == 0) {
        r = request_parse_session_ref(buf_str(&body), body.len, ref, err, sizeof(err));
        if (r < 0)
            http_error(h, 400, err);
    }
    buf_release(&body);
    if (r < 0)
        return r;
    if (engine_session_key(ref->project_id, ref->session_id, key, ENGINE_KEY_MAX) < 0) {
        http_error(h, 400, "sessionId: too long");
        return -ENAMETOOLONG;
    }
    log_ctx_set(h->request_id, key, ref->target_turn_id, NULL);
    return 0;
}

static void ok_body(struct http_req *h, int status)
{
    json_object *ok = json_object_new_object();

    json_object_object_add(ok, "ok", json_object_new_boolean(1));
    http_json(h, status, ok);
    json_object_put(ok);
}

static void handle_kill(const struct route_ctx *rc, struct http_req *h)
{
    struct session_ref ref;
    char key[ENGINE_KEY_MAX];
    int r;

    if (read_session_ref(rc, h, &ref, key) < 0)
        return;
    r = engine_kill_session(&rc->cfg->engine, key, TEARDOWN_KILL);
    if (r < 0) {
        http_error(h, 500, ar_strerror(r));
        return;
    }
    log_info("kill: %s", r > 0 ? "environment destroyed" : "no environment");
    ok_body(h, 200);
}

static void handle_cancel(const struct route_ctx *rc, struct http_req *h)
{
    struct session_ref ref;
    char key[ENGINE_KEY_MAX];
    int r;

    if (read_session_ref(rc, h, &ref, key) < 0)
        return;
    r = engine_cancel_session(&rc->cfg->engine, key, ref.target_turn_id);
    if (r == -ENOENT) {
        http_error(h, 404, "session not held here");
        return;
    }
    if (r < 0) {
        http_error(h, 500, ar_strerror(r));
        return;
    }
    log_info("cancel requested");
    ok_body(h, 202);
}

static void handle_metrics(const struct route_ctx *rc, struct http_req *h)
{
    struct buf out;

    if (admin_metrics_render(&rc->cfg->engine, &out) < 0) {
        http_error(h, 500, "metrics unavailable");
    } else {
        FCGX_FPrintF(h->fr->out,
                     "Status: 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                     "Cache-Control: no-cache\r\n\r\n");
        FCGX_PutStr(buf_str(&out), (int)out.len, h->fr->out);
    }
    buf_release(&out);
}

/*
 * GET /subscription-status (token, as Agenta's runner: operator state): per harness whether
 * this runner holds a login it could use for credentialMode runtime_provided. A local file
 * check, never a provider call; the answer holds state words and provider families only.
 */
static void handle_subscription_status(const struct route_ctx *rc, struct http_req *h)
{
    json_object *o = engine_subscription_status(&rc->cfg->engine);

    if (!o) {
        http_error(h, 500, "out of memory");
        return;
    }
    http_json(h, 200, o);
    json_object_put(o);
}

struct route {
    const char *path;
    const char *method;
    bool auth;
    void (*fn)(const struct route_ctx *rc, struct http_req *h);
};

static void handle_livez(const struct route_ctx *rc, struct http_req *h)
{
    (void)rc;
    status_body(h, 200, "alive", NULL);
}

static const struct route routes[] = {
    {"/health", "GET", false, handle_health}, {"/livez", "GET", false, handle_livez},
    {"/readyz", "GET", false, handle_readyz}, {"/run", "POST", true, handle_run},
    {"/stream", "POST", true, handle_run},    {"/kill", "POST", true, handle_kill},
    {"/cancel", "POST", true, handle_cancel},
    {"/metrics", "GET", true, handle_metrics},
    {"/subscription-status", "GET", true, handle_subscription_status},
};

void routes_handle(const struct route_ctx *rc, FCGX_Request *fr)
{
    struct http_req h;
    const struct route *match = NULL;

    /* libfcgi accepts without close-on-exec: keepers started meanwhile must not inherit it */
    if (fr->ipcFd >= 0)
        fcntl(fr->ipcFd, F_SETFD, FD_CLOEXEC);
    http_req_init(&h, fr);
    for (size_t i = 0; i < ARRAY_SIZE(routes); i++) {
        if (strcmp(routes[i].path, h.path) == 0) {
            match = &routes[i];
            break;
        }
    }
    if (!match) {
        http_error(&h, 404, "Not found");
        return;
    }
    if (strcmp(match->method, h.method) != 0 &&
        !(strcmp(match->method, "GET") == 0 && strcmp(h.method, "HEAD") == 0)) {
        http_error(&h, 405, "Method not allowed");
        return;
    }
    if (match->auth && !authorized(rc, &h)) {
        http_error(&h, 401, "Unauthorized");
        return;
    }
    match->fn(rc, &h);
    log_ctx_clear();
    log_redact_clear();
}
