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
    json_object *cluster;

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
    cluster = engine_cluster_describe(&rc->cfg->engine);
    if (cluster)
        json_object_object_add(o, "cluster", cluster);
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
    /* several hosts: "degraded" while Redis is unreachable; this host still serves (200) */
    if (engine_cluster_state(&rc->cfg->engine))
        json_object_object_add(o, "cluster",
                               json_object_new_string(engine_cluster_state(&rc->cfg->engine)));
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

static void run_streaming(struct engine_turn *turn, const char *turn_id, struct http_req *h)
{
    struct event_sink sink = {.write_line = http_stream_write,
                              .flush = http_stream_flush,
                              .client_alive = http_client_alive,
                              .ctx = h};
    struct event_stream es;
    struct run_result res;
    json_object *result;

    http_stream_start(h, turn_id);
    event_stream_init(&es, &sink);
    es.turn_id = turn_id;
    run_result_init(&res);
    engine_run(turn, &es, &res);
    result = run_result_to_json(&res);
    (void)event_stream_result(&es, result);
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
static void refuse_run(struct http_req *h, int status, const char *msg, const char *code,
                       const char *turn_id)
{
    struct event_sink sink = {
        .write_line = http_stream_write, .flush = http_stream_flush, .ctx = h};
    struct event_stream es;
    struct run_result res;
    json_object *result;

    if (!wants_ndjson(h)) {
        http_error(h, status, msg);
        return;
    }
    http_stream_start(h, turn_id);
    event_stream_init(&es, &sink);
    es.turn_id = turn_id;
    run_result_init(&res);
    run_result_fail(&res, "%s", msg);
    event_emit(&es, event_error(msg, code));
    event_emit(&es, event_done(NULL, NULL));
    result = run_result_to_json(&res);
    (void)event_stream_result(&es, result);
    json_object_put(result);
    run_result_release(&res);
    event_stream_release(&es);
}

/* The run's session key into key (ENGINE_KEY_MAX), NULL for a run without a session. */
static const char *session_key(const struct run_request *req, char *key)
{
    if (!req->session_id || !req->project_id ||
        engine_session_key(req->project_id, req->session_id, key, ENGINE_KEY_MAX) < 0)
        return NULL;
    return key;
}

/* ---- several hosts: a request for a session another member owns is forwarded there ---- */

static int relay_start(void *ctx, int status, const char *content_type, const char *turn_id)
{
    struct http_req *h = ctx;

    http_start(h, status, content_type, turn_id);
    return h->client_gone ? -1 : 0;
}

/*
 * Several hosts (engine_cluster_dispatch): false when the request runs here; true when it was
 * answered: forwarded to the session's owner and its answer relayed, or refused (a request
 * forwarded here for a session a third member owns; an owner that stayed unreachable). Every
 * route that acts on a session (or a turn) calls this once it knows which: one line.
 */
static bool routed_elsewhere(const struct route_ctx *rc, struct http_req *h, const struct buf *body,
                             const struct engine_subject *s)
{
    const char *uri = http_param(h, "REQUEST_URI");
    struct engine_forward_io io = {.start = relay_start,
                                   .write = http_stream_write,
                                   .flush = http_stream_flush,
                                   .alive = http_client_alive,
                                   .ctx = h};
    struct engine_forward_req fw = {.method = h->method,
                                    .path = uri && uri[0] == '/' ? uri : h->path,
                                    .body = body ? buf_str(body) : NULL,
                                    .body_len = body ? body->len : 0,
                                    .accept = http_param(h, "HTTP_ACCEPT"),
                                    .request_id = h->request_id,
                                    .token = rc->cfg->token,
                                    .forwarded_by = http_param(h, "HTTP_X_AGENT_RUNNER_FORWARDED"),
                                    .ndjson = wants_ndjson(h)};
    struct engine_refusal no;

    if (!engine_cluster_on(&rc->cfg->engine))
        return false;
    switch (engine_cluster_dispatch(&rc->cfg->engine, s, &fw, &io, &no)) {
    case ENGINE_DISPATCH_LOCAL:
        return false;
    case ENGINE_DISPATCH_DONE:
        log_info("forwarded to the session's owner");
        return true;
    case ENGINE_DISPATCH_REFUSED:
        break;
    }
    log_info("refused: %s", no.message);
    if (s->control)
        http_error(h, no.status, no.message);
    else
        refuse_run(h, no.status, no.message, no.code, s->turn_id);
    return true;
}

static void handle_run(const struct route_ctx *rc, struct http_req *h)
{
    struct request_limits lim;
    struct run_request req;
    struct engine_turn *turn = NULL;
    struct buf body;
    char err[512], key[ENGINE_KEY_MAX];
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
        refuse_run(h, r == -ENOMEM ? 500 : 400, err, "runner_error", NULL);
        goto out;
    }
    redact_request(&req);
    log_ctx_set(h->request_id, req.session_id, req.turn_id, engine_harness_name(req.harness));
    if (routed_elsewhere(rc, h, &body,
                         &(struct engine_subject){.session_key = session_key(&req, key),
                                                  .turn_id = req.turn_id,
                                                  .may_claim = true})) {
        run_request_release(&req);
        goto out;
    }
    r = engine_prepare(&rc->cfg->engine, &req, &turn, err, sizeof(err));
    if (r < 0) {
        log_info("run refused: %s", err);
        refuse_run(h, r == -ENOMEM ? 500 : 400, err, "runner_error", req.turn_id);
        run_request_release(&req);
        goto out;
    }
    if (wants_ndjson(h))
        run_streaming(turn, req.turn_id, h);
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
 * /kill and /cancel: a capped {"sessionId","projectId","targetTurnId"?} body (into body, which
 * the caller made and releases) naming a session. Answers the error itself and returns <0
 * when the body is not one.
 */
static int read_session_ref(const struct route_ctx *rc, struct http_req *h, struct buf *body,
                            struct session_ref *ref, char key[ENGINE_KEY_MAX])
{
    char err[256];
    int r;

    r = read_body(h, rc->cfg->max_small_body, body);
    if (r == 0) {
        r = request_parse_session_ref(buf_str(body), body->len, ref, err, sizeof(err));
        if (r < 0)
            http_error(h, 400, err);
    }
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
    struct buf body;
    int r;

    buf_init(&body, rc->cfg->max_small_body);
    if (read_session_ref(rc, h, &body, &ref, key) < 0 ||
        routed_elsewhere(rc, h, &body,
                         &(struct engine_subject){.session_key = key, .control = true}))
        goto out;
    r = engine_kill_session(&rc->cfg->engine, key, TEARDOWN_KILL);
    if (r < 0) {
        http_error(h, 500, ar_strerror(r));
        goto out;
    }
    log_info("kill: %s", r > 0 ? "environment destroyed" : "no environment");
    /* the harness's kept session state goes too, unless only the environment was to end */
    if (!ref.environment_only && engine_forget_session(&rc->cfg->engine, key) > 0)
        log_info("kill: kept harness state removed");
    ok_body(h, 200);
out:
    buf_release(&body);
}

static void handle_cancel(const struct route_ctx *rc, struct http_req *h)
{
    struct session_ref ref;
    char key[ENGINE_KEY_MAX];
    struct buf body;
    int r;

    buf_init(&body, rc->cfg->max_small_body);
    if (read_session_ref(rc, h, &body, &ref, key) < 0 ||
        routed_elsewhere(rc, h, &body,
                         &(struct engine_subject){.session_key = key, .control = true}))
        goto out;
    r = engine_cancel_session(&rc->cfg->engine, key, ref.target_turn_id);
    if (r == -ENOENT) {
        http_error(h, 404, "session not held here");
        goto out;
    }
    if (r < 0) {
        http_error(h, 500, ar_strerror(r));
        goto out;
    }
    log_info("cancel requested");
    ok_body(h, 202);
out:
    buf_release(&body);
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

/* GET /turns/{turnId}/events: the turn id of the path (without the rest), or false. */
static bool turn_of_path(const char *path, char *out, size_t outlen)
{
    static const char pre[] = "/turns/", post[] = "/events";
    size_t n = strlen(path);

    if (n <= strlen(pre) + strlen(post) || strncmp(path, pre, strlen(pre)) != 0 ||
        strcmp(path + n - strlen(post), post) != 0)
        return false;
    n -= strlen(pre) + strlen(post);
    if (n >= outlen)
        return false;
    memcpy(out, path + strlen(pre), n);
    out[n] = '\0';
    return true;
}

/*
 * GET /turns/{turnId}/events?after=N&projectId=P (token): the turn's records with seq > N from
 * its journal, then the live turn until its result record; 404 for a turn not held here
 * (unknown, expired, another project's), 410 when the journal no longer holds seq N + 1.
 * Several hosts: forwarded to the member that ran the turn (its `turn:` record).
 */
static void handle_turn_events(const struct route_ctx *rc, struct http_req *h)
{
    const char *query = http_param(h, "QUERY_STRING");
    char turn[160], project[160], after_text[32], msg[160];
    struct event_sink sink = {.write_line = http_stream_write,
                              .flush = http_stream_flush,
                              .client_alive = http_client_alive,
                              .ctx = h};
    struct engine_follow *f = NULL;
    uint64_t after = 0, oldest = 0;
    int r;

    if (!turn_of_path(h->path, turn, sizeof(turn)) || !turn[0]) {
        http_error(h, 404, "Not found");
        return;
    }
    r = http_query_get(query, "after", after_text, sizeof(after_text));
    if (r < 0 || (r == 1 && util_parse_u64(after_text, 0, UINT64_MAX - 1, &after) < 0)) {
        http_error(h, 400, "after: expected the seq of the last record received (0 or more)");
        return;
    }
    r = http_query_get(query, "projectId", project, sizeof(project));
    if (r < 0) {
        http_error(h, 400, "projectId: not a valid query value");
        return;
    }
    if (r == 0)
        project[0] = '\0';
    log_ctx_set(h->request_id, project[0] ? project : NULL, turn, NULL);
    /* several hosts: the member that ran the turn holds its journal */
    if (routed_elsewhere(rc, h, NULL, &(struct engine_subject){.turn_id = turn, .control = true}))
        return;
    r = engine_follow_open(&rc->cfg->engine, turn, project, after, &f, &oldest);
    if (r == -ENOENT) {
        http_error(h, 404, "turn not found (unknown, expired, or another project's)");
        return;
    }
    if (r == -ERANGE) {
        json_object *o = json_object_new_object();

        snprintf(msg, sizeof(msg),
                 "the turn's journal no longer holds seq %llu: the oldest it holds is %llu",
                 (unsigned long long)after + 1, (unsigned long long)oldest);
        json_object_object_add(o, "ok", json_object_new_boolean(0));
        json_object_object_add(o, "error", json_object_new_string(msg));
        json_object_object_add(o, "oldestSeq", json_object_new_int64((int64_t)oldest));
        http_json(h, 410, o);
        json_object_put(o);
        return;
    }
    if (r < 0) {
        http_error(h, 500, ar_strerror(r));
        return;
    }
    http_stream_start(h, turn);
    engine_follow_run(f, &sink);
    engine_follow_free(f);
    log_info("reattach finished%s", h->client_gone ? ": client gone" : "");
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
    {"/health", "GET", false, handle_health},
    {"/livez", "GET", false, handle_livez},
    {"/readyz", "GET", false, handle_readyz},
    {"/run", "POST", true, handle_run},
    {"/stream", "POST", true, handle_run},
    {"/kill", "POST", true, handle_kill},
    {"/cancel", "POST", true, handle_cancel},
    {"/metrics", "GET", true, handle_metrics},
    {"/subscription-status", "GET", true, handle_subscription_status},
};

static const struct route turn_events_route = {"/turns/{id}/events", "GET", true,
                                               handle_turn_events};

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
    if (!match && strncmp(h.path, "/turns/", 7) == 0)
        match = &turn_events_route;
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
