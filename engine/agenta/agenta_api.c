#include "agenta/agenta_api.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "base/httpc.h"
#include "base/jsonx.h"
#include "base/util.h"

#define ANSWER_DEPTH 64
#define QUERY_DEPTH 128

struct agenta_api {
    atomic_int refs;
    struct agenta_config cfg;
    pthread_mutex_t lock; /* guards credential */
    char *credential;
};

/* ---- the client ------------------------------------------------------------------------- */

static int check_credential(const char *credential)
{
    size_t n = strlen(credential);

    if (n > AGENTA_CREDENTIAL_MAX || util_has_ctl(credential))
        return -EINVAL;
    return 0;
}

int agenta_api_new(const struct agenta_config *cfg, const char *credential,
                   struct agenta_api **ret_api)
{
    struct agenta_api *api;
    int r;

    if (!credential)
        credential = "";
    r = check_credential(credential);
    if (r < 0)
        return r;
    api = calloc(1, sizeof(*api));
    if (!api)
        return -ENOMEM;
    api->cfg = *cfg;
    api->credential = strdup(credential);
    if (!api->credential || pthread_mutex_init(&api->lock, NULL) != 0) {
        free(api->credential);
        free(api);
        return -ENOMEM;
    }
    atomic_init(&api->refs, 1);
    *ret_api = api;
    return 0;
}

struct agenta_api *agenta_api_ref(struct agenta_api *api)
{
    if (api)
        atomic_fetch_add(&api->refs, 1);
    return api;
}

void agenta_api_free(struct agenta_api *api)
{
    if (!api || atomic_fetch_sub(&api->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&api->lock);
    free(api->credential);
    free(api);
}

const struct agenta_config *agenta_api_config(const struct agenta_api *api)
{
    return &api->cfg;
}

int agenta_api_set_credential(struct agenta_api *api, const char *credential)
{
    char *copy, *old;
    int r = check_credential(credential);

    if (r < 0)
        return r;
    copy = strdup(credential);
    if (!copy)
        return -ENOMEM;
    pthread_mutex_lock(&api->lock);
    old = api->credential;
    api->credential = copy;
    pthread_mutex_unlock(&api->lock);
    free(old);
    return 0;
}

/* ---- the transport ---------------------------------------------------------------------- */

static const char *method_name(enum agenta_method m)
{
    return m == AGENTA_POST ? "POST" : "GET";
}

/* The path for messages: without its query (which may carry ids we need not repeat). */
static int path_len(const char *path)
{
    size_t n = strcspn(path, "?");

    return n > 200 ? 200 : (int)n;
}

static bool abort_raised(void *ctx)
{
    return atomic_load((const atomic_bool *)ctx);
}

/* "Authorization: <credential>" into auth (a copy the caller wipes), nothing without one. */
static int auth_line(struct agenta_api *api, struct buf *auth)
{
    int r = 0;

    pthread_mutex_lock(&api->lock);
    if (api->credential[0])
        r = buf_printf(auth, "Authorization: %s", api->credential);
    pthread_mutex_unlock(&api->lock);
    return r;
}

/* The failure of an exchange, named by method and path (never a header). */
static int call_failed(const struct agenta_call *call, const struct httpc_request *rq, int r,
                       const char *why, char *err, size_t errlen)
{
    const char *m = method_name(call->method);
    int pl = path_len(call->path);

    if (r == -ETIMEDOUT)
        return util_fail(r, err, errlen, "agenta api: %s %.*s: timed out after %" PRIu64 " ms", m,
                         pl, call->path, rq->timeout_ms);
    if (r == -E2BIG)
        return util_fail(r, err, errlen, "agenta api: %s %.*s: answer larger than %zu bytes", m, pl,
                         call->path, rq->max_body);
    if (r == -ENOMEM)
        return util_fail(r, err, errlen, "agenta api: %s %.*s: out of memory", m, pl, call->path);
    return util_fail(r, err, errlen, "agenta api: %s %.*s: %s", m, pl, call->path, why);
}

int agenta_api_call(struct agenta_api *api, const struct agenta_call *call,
                    struct agenta_response *ret, char *err, size_t errlen)
{
    const char *lines[3];
    char url[AGENTA_URL_MAX * 2], why[256];
    struct httpc_request rq = {
        .method = method_name(call->method),
        .url = url,
        .headers = lines,
        .body = call->body,
        .body_len = call->body ? call->body_len : 0,
        .timeout_ms = call->timeout_ms ? call->timeout_ms : api->cfg.call_timeout_ms,
        .connect_timeout_ms = AGENTA_CONNECT_TIMEOUT_MS,
        .max_body = call->response_max ? call->response_max : AGENTA_RESPONSE_MAX,
        .capture_header = "content-disposition",
        .aborted = call->abort ? abort_raised : NULL,
        .abort_ctx = (void *)call->abort,
        .retry = {.attempts = call->attempts,
                  .backoff = call->backoff == AGENTA_BACKOFF_EXPONENTIAL ? HTTPC_BACKOFF_EXPONENTIAL
                                                                         : HTTPC_BACKOFF_LINEAR,
                  .base_ms = call->backoff_base_ms,
                  .transport = true},
    };
    struct httpc_response res;
    struct buf auth;
    size_t n = 0;
    int r;

    memset(ret, 0, sizeof(*ret));
    if (!call->path || call->path[0] != '/' ||
        (size_t)snprintf(url, sizeof(url), "%s%s", api->cfg.base_url, call->path) >= sizeof(url))
        return util_fail(-EINVAL, err, errlen, "agenta api: a path that does not fit a URL");
    if (call->method == AGENTA_GET)
        rq.body = NULL;
    lines[n++] = "Accept: application/json";
    if (call->method == AGENTA_POST)
        lines[n++] = "Content-Type: application/json";
    buf_init(&auth, AGENTA_CREDENTIAL_MAX + 64);
    r = auth_line(api, &auth);
    if (auth.len)
        lines[n++] = auth.data;
    rq.nheaders = n;
    if (r == 0)
        r = httpc_perform(httpc_thread_handle(), &rq, &res, why, sizeof(why));
    else
        snprintf(why, sizeof(why), "out of memory");
    /* the credential's copies are gone: curl's went with the request's header list */
    if (auth.data)
        explicit_bzero(auth.data, auth.len);
    buf_release(&auth);
    if (r < 0)
        return call_failed(call, &rq, r, why, err, errlen);
    ret->status = res.status;
    ret->attempts = res.attempts;
    ret->body = res.body; /* moved */
    memcpy(ret->content_type, res.content_type, sizeof(ret->content_type));
    memcpy(ret->content_disposition, res.captured, sizeof(ret->content_disposition));
    return (int)res.status;
}

void agenta_response_release(struct agenta_response *r)
{
    buf_release(&r->body);
}

/* 0 for a 2xx answer, else -EREMOTEIO with "agenta api: METHOD path: HTTP status" (the path
 * without its query). */
static int status_ok(const struct agenta_response *res, const char *method, const char *path,
                     char *err, size_t errlen)
{
    if (res->status >= 200 && res->status <= 299)
        return 0;
    return util_fail(-EREMOTEIO, err, errlen, "agenta api: %s %.*s: HTTP %ld", method,
                     path_len(path), path, res->status);
}

/* POST a JSON document: 0 on 2xx, -EREMOTEIO (message naming the status) otherwise. When
 * ret_answer is set the answer must be a JSON value and is parsed into it. One attempt. */
static int post_json(struct agenta_api *api, const char *path, json_object *body,
                     uint64_t timeout_ms, size_t response_max, long *ret_status,
                     json_object **ret_answer, char *err, size_t errlen)
{
    struct agenta_call call = {
        .method = AGENTA_POST,
        .path = path,
        .timeout_ms = timeout_ms,
        .response_max = response_max,
        .attempts = 1,
    };
    struct agenta_response res;
    char perr[128];
    int r;

    if (!body) {
        util_seterr(err, errlen, "agenta api: POST %.*s: out of memory", path_len(path), path);
        return -ENOMEM;
    }
    call.body = jsonx_text(body, &call.body_len);
    r = agenta_api_call(api, &call, &res, err, errlen);
    if (r < 0)
        return r;
    if (ret_status)
        *ret_status = res.status;
    if (res.status == 409 && ret_status) {
        agenta_response_release(&res);
        return 0;
    }
    r = status_ok(&res, "POST", path, err, errlen);
    if (r < 0) {
        agenta_response_release(&res);
        return r;
    }
    if (ret_answer) {
        json_object *o = NULL;

        r = jsonx_parse_once(buf_str(&res.body), res.body.len, QUERY_DEPTH, &o, perr, sizeof(perr));
        if (r < 0) {
            util_seterr(err, errlen, "agenta api: POST %.*s: the answer is not JSON (%s)",
                        path_len(path), path, perr);
            agenta_response_release(&res);
            return -EBADMSG;
        }
        *ret_answer = o;
    }
    agenta_response_release(&res);
    return 0;
}

/* ---- the calls -------------------------------------------------------------------------- */

int agenta_api_heartbeat(struct agenta_api *api, const struct agenta_beat *b,
                         const atomic_bool *abort, struct agenta_beat_reply *ret, char *err,
                         size_t errlen)
{
    struct agenta_call call = {.method = AGENTA_POST,
                               .path = AGENTA_PATH_HEARTBEAT,
                               .timeout_ms = AGENTA_HEARTBEAT_TIMEOUT_MS,
                               .attempts = 1,
                               .abort = abort};
    json_object *body = agenta_beat_body(b);
    struct agenta_response res;
    int r;

    if (!body) {
        util_seterr(err, errlen, "agenta api: heartbeat: out of memory");
        return -ENOMEM;
    }
    call.body = jsonx_text(body, &call.body_len);
    r = agenta_api_call(api, &call, &res, err, errlen);
    json_object_put(body);
    if (r < 0)
        return r;
    r = status_ok(&res, "POST", AGENTA_PATH_HEARTBEAT, err, errlen);
    if (r == 0 && agenta_beat_reply_parse(buf_str(&res.body), res.body.len, ret) < 0) {
        util_seterr(err, errlen, "agenta api: POST %s: the answer is not a JSON object",
                    AGENTA_PATH_HEARTBEAT);
        r = -EBADMSG;
    }
    agenta_response_release(&res);
    return r;
}

int agenta_api_refresh_credential(struct agenta_api *api, const atomic_bool *abort,
                                  char **ret_credential, char *err, size_t errlen)
{
    struct agenta_call call = {
        .method = AGENTA_GET, .path = AGENTA_PATH_REFRESH, .attempts = 1, .abort = abort};
    struct agenta_response res;
    json_object *o = NULL;
    const char *cred;
    char perr[64];
    int r;

    r = agenta_api_call(api, &call, &res, err, errlen);
    if (r < 0)
        return r;
    r = status_ok(&res, "GET", AGENTA_PATH_REFRESH, err, errlen);
    if (r < 0) {
        agenta_response_release(&res);
        return r;
    }
    r = jsonx_parse_once(buf_str(&res.body), res.body.len, ANSWER_DEPTH, &o, perr, sizeof(perr));
    agenta_response_release(&res);
    cred = r == 0 ? jsonx_str(o, "credentials") : NULL;
    if (!cred || !cred[0] || check_credential(cred) < 0) {
        util_seterr(err, errlen,
                    "agenta api: GET /access/permissions/check: no usable credentials "
                    "in the answer");
        json_object_put(o);
        return -EBADMSG;
    }
    *ret_credential = strdup(cred);
    json_object_put(o);
    if (!*ret_credential)
        return -ENOMEM;
    return 0;
}

int agenta_api_records_query(struct agenta_api *api, const char *session_id,
                             json_object **ret_records, char *err, size_t errlen)
{
    json_object *body = json_object_new_object(), *answer = NULL, *records;
    int r;

    if (body && session_id)
        json_object_object_add(body, "session_id", json_object_new_string(session_id));
    r = post_json(api, AGENTA_PATH_RECORDS_QUERY, body, api->cfg.records_query_timeout_ms,
                  AGENTA_QUERY_RESPONSE_MAX, NULL, &answer, err, errlen);
    json_object_put(body);
    if (r < 0)
        return r;
    if (!answer || !json_object_is_type(answer, json_type_object)) {
        util_seterr(err, errlen, "agenta api: POST %s: the answer is not a JSON object",
                    AGENTA_PATH_RECORDS_QUERY);
        json_object_put(answer);
        return -EBADMSG;
    }
    records = jsonx_get(answer, "records");
    if (records && json_object_is_type(records, json_type_array))
        *ret_records = json_object_get(records);
    else
        *ret_records = json_object_new_array();
    json_object_put(answer);
    return *ret_records ? 0 : -ENOMEM;
}

int agenta_api_turn_create(struct agenta_api *api, const struct agenta_turn *t, char *err,
                           size_t errlen)
{
    json_object *body;
    long status = 0;
    int r;

    if (!t->stream_id || !t->stream_id[0]) {
        util_seterr(err, errlen,
                    "agenta api: a turn row needs the stream id of the first heartbeat");
        return -EINVAL;
    }
    body = agenta_turn_body(t);
    r = post_json(api, AGENTA_PATH_TURNS, body, 0, 0, &status, NULL, err, errlen);
    json_object_put(body);
    if (r < 0)
        return r;
    return status == 409 ? 1 : 0; /* post_json failed any other status */
}

int agenta_api_turn_complete(struct agenta_api *api, const char *session_id, uint64_t turn_index,
                             const char *agent_session_id, const char *end_time, char *err,
                             size_t errlen)
{
    json_object *body =
        agenta_turn_complete_body(session_id, turn_index, agent_session_id, end_time);
    int r;

    r = post_json(api, AGENTA_PATH_TURNS_COMPLETE, body, 0, 0, NULL, NULL, err, errlen);
    json_object_put(body);
    return r;
}

int agenta_api_turn_query_latest(struct agenta_api *api, const char *session_id,
                                 const char *harness_kind, struct agenta_turn_row *ret, char *err,
                                 size_t errlen)
{
    json_object *body = agenta_turn_query_body(session_id, harness_kind), *answer = NULL;
    int r;

    r = post_json(api, AGENTA_PATH_TURNS_QUERY, body, 0, 0, NULL, &answer, err, errlen);
    json_object_put(body);
    if (r < 0)
        return r;
    r = agenta_turn_query_parse(answer, ret);
    json_object_put(answer);
    if (r < 0)
        util_seterr(err, errlen, "agenta api: POST %s: the answer has no turns list",
                    AGENTA_PATH_TURNS_QUERY);
    return r;
}

int agenta_api_attachment_content(struct agenta_api *api, const char *session_id,
                                  const char *attachment_id, struct agenta_attachment *ret,
                                  char *err, size_t errlen)
{
    struct agenta_call call = {.method = AGENTA_GET,
                               .timeout_ms = api->cfg.attachments_timeout_ms,
                               .response_max = AGENTA_ATTACHMENT_MAX,
                               .attempts = 1};
    struct agenta_attachment a;
    struct agenta_response res;
    char *id = NULL, *sid = NULL, path[1024];
    CURL *esc = httpc_handle_new();
    int r;

    memset(&a, 0, sizeof(a));
    if (esc) {
        id = curl_easy_escape(esc, attachment_id, 0);
        sid = curl_easy_escape(esc, session_id, 0);
        curl_easy_cleanup(esc);
    }
    if (!id || !sid) {
        curl_free(id);
        curl_free(sid);
        util_seterr(err, errlen, "agenta api: attachment: out of memory");
        return -ENOMEM;
    }
    r = snprintf(path, sizeof(path), "/sessions/attachments/%s/content?session_id=%s", id, sid);
    curl_free(id);
    curl_free(sid);
    if (r < 0 || (size_t)r >= sizeof(path)) {
        util_seterr(err, errlen, "agenta api: attachment: the ids are too long");
        return -EINVAL;
    }
    call.path = path;
    r = agenta_api_call(api, &call, &res, err, errlen);
    if (r < 0)
        return r;
    r = status_ok(&res, "GET", "/sessions/attachments/{id}/content", err, errlen);
    if (r < 0)
        goto out;
    if (!res.content_type[0] || strlen(res.content_type) >= sizeof(a.media_type) ||
        agenta_disposition_filename(res.content_disposition, a.filename, sizeof(a.filename)) < 0) {
        util_seterr(err, errlen,
                    "agenta api: GET /sessions/attachments/{id}/content: missing "
                    "verified attachment headers");
        r = -EBADMSG;
        goto out;
    }
    snprintf(a.media_type, sizeof(a.media_type), "%s", res.content_type);
    a.len = res.body.len;
    a.data = (uint8_t *)res.body.data;
    if (!a.data) {
        a.data = calloc(1, 1);
        if (!a.data) {
            r = -ENOMEM;
            goto out;
        }
    }
    res.body.data = NULL; /* moved into a */
    *ret = a;
    r = 0;
out:
    agenta_response_release(&res);
    return r;
}

void agenta_attachment_release(struct agenta_attachment *a)
{
    free(a->data);
    memset(a, 0, sizeof(*a));
}
