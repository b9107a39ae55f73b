#include "provider/daytona/daytona_client.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "base/httpc.h"
#include "base/jsonx.h"
#include "base/util.h"

#define API_ANSWER_MAX (4u * 1024 * 1024)

/* ---- errors, states ------------------------------------------------------------------- */

const char *daytona_strerror(int r)
{
    switch (r) {
    case DAYTONA_E_CAPACITY:
        return "sandbox_capacity: the sandbox provider is rate limiting";
    case DAYTONA_E_SERVER:
        return "sandbox provider error";
    case DAYTONA_E_SANDBOX_FAILED:
        return "the sandbox failed to start";
    case DAYTONA_E_UNCERTAIN:
        return "the sandbox create lost its answer";
    default:
        return ar_strerror(r);
    }
}

/* ---- configuration -------------------------------------------------------------------- */

static int copy_opt(const char *(*get)(const char *), const char *name, char *dst, size_t cap,
                    char *err, size_t errlen)
{
    const char *v = get(name);

    dst[0] = '\0';
    if (!v || !v[0])
        return 0;
    if (strlen(v) >= cap || util_has_ctl(v)) {
        snprintf(err, errlen, "%s: too long or holds control characters", name);
        return -EINVAL;
    }
    memcpy(dst, v, strlen(v) + 1);
    return 1;
}

/* http(s)://host[:port][/path]; plain http only for a loopback host. */
static int check_api_url(const char *url, char *err, size_t errlen)
{
    const char *host, *end;
    char h[256];
    size_t n;

    if (strncmp(url, "https://", 8) == 0) {
        host = url + 8;
    } else if (strncmp(url, "http://", 7) == 0) {
        host = url + 7;
    } else {
        snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_API_URL: must be an http(s) URL");
        return -EINVAL;
    }
    end = host + strcspn(host, ":/?#");
    n = (size_t)(end - host);
    if (n == 0 || n >= sizeof(h) || memchr(host, '@', strcspn(host, "/?#")) ||
        strpbrk(url, " \t")) {
        snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_API_URL: not a valid URL");
        return -EINVAL;
    }
    memcpy(h, host, n);
    h[n] = '\0';
    if (url[4] == ':' && strcmp(h, "localhost") != 0 && strncmp(h, "127.", 4) != 0 &&
        strcmp(h, "[::1]") != 0) {
        snprintf(err, errlen,
                 "AGENT_RUNNER_DAYTONA_API_URL: plain http is only allowed for "
                 "loopback hosts");
        return -EINVAL;
    }
    return 0;
}

int daytona_config_load(const char *(*get)(const char *name), struct daytona_config *ret, char *err,
                        size_t errlen)
{
    struct daytona_config *cfg;
    size_t n;
    int r;

    cfg = calloc(1, sizeof(*cfg));
    if (!cfg)
        return -ENOMEM;
    cfg->request_timeout_ms = 90000;
    cfg->connect_timeout_ms = 10000;
    cfg->max_429_retries = 3;
    cfg->retry_cap_ms = 30000;
    cfg->poll_step_ms = 250;
    r = copy_opt(get, "AGENT_RUNNER_DAYTONA_API_URL", cfg->api_url, sizeof(cfg->api_url), err,
                 errlen);
    if (r == 0) {
        snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_API_URL is not set");
        r = -ENOENT;
    }
    if (r < 0)
        goto out;
    n = strlen(cfg->api_url);
    while (n > 0 && cfg->api_url[n - 1] == '/')
        cfg->api_url[--n] = '\0';
    r = check_api_url(cfg->api_url, err, errlen);
    if (r < 0)
        goto out;
    r = copy_opt(get, "AGENT_RUNNER_DAYTONA_API_KEY", cfg->api_key, sizeof(cfg->api_key), err,
                 errlen);
    if (r == 0) {
        snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_API_KEY is not set");
        r = -ENOENT;
    }
    if (r < 0)
        goto out;
    r = copy_opt(get, "AGENT_RUNNER_DAYTONA_ORGANIZATION", cfg->organization,
                 sizeof(cfg->organization), err, errlen);
    if (r >= 0)
        r = copy_opt(get, "AGENT_RUNNER_DAYTONA_TARGET", cfg->target, sizeof(cfg->target), err,
                     errlen);
    if (r >= 0)
        r = copy_opt(get, "AGENT_RUNNER_DAYTONA_SNAPSHOT", cfg->snapshot, sizeof(cfg->snapshot),
                     err, errlen);
    if (r >= 0)
        r = copy_opt(get, "AGENT_RUNNER_DAYTONA_IMAGE", cfg->image, sizeof(cfg->image), err,
                     errlen);
    if (r >= 0)
        r = copy_opt(get, "AGENT_RUNNER_DAYTONA_CA_FILE", cfg->ca_file, sizeof(cfg->ca_file), err,
                     errlen);
    if (r < 0)
        goto out;
    if (cfg->snapshot[0] && cfg->image[0]) {
        snprintf(err, errlen,
                 "AGENT_RUNNER_DAYTONA_SNAPSHOT and AGENT_RUNNER_DAYTONA_IMAGE: "
                 "set one, not both");
        r = -EINVAL;
        goto out;
    }
    *ret = *cfg;
    r = 0;
out:
    daytona_config_wipe(cfg);
    free(cfg);
    return r;
}

void daytona_config_wipe(struct daytona_config *cfg)
{
    explicit_bzero(cfg->api_key, sizeof(cfg->api_key));
}

/* ---- names and URLs ------------------------------------------------------------------- */

bool daytona_id_ok(const char *s)
{
    return util_plain_name(s, DAYTONA_ID_MAX - 1);
}

bool daytona_text_ok(const char *s)
{
    return s && !util_has_ctl(s);
}

bool daytona_env_name_ok(const char *s)
{
    if (!s || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
        return false;
    for (; *s; s++) {
        if (!(isalnum((unsigned char)*s) || *s == '_'))
            return false;
    }
    return true;
}

bool daytona_abs_path_ok(const char *p)
{
    if (!p || p[0] != '/' || strlen(p) > 4000 || util_has_ctl(p))
        return false;
    for (const char *s = strchr(p, '/'); s; s = strchr(s + 1, '/')) {
        if ((s[1] == '.' && (s[2] == '/' || s[2] == '\0')) ||
            (s[1] == '.' && s[2] == '.' && (s[3] == '/' || s[3] == '\0')))
            return false;
    }
    return true;
}

bool daytona_url_ok(const char *u)
{
    return u && (strncmp(u, "http://", 7) == 0 || strncmp(u, "https://", 8) == 0) &&
           util_visible(u);
}

/* ---- HTTP core ------------------------------------------------------------------------ */

struct daytona_client {
    struct daytona_config cfg;
    CURL *curl;
    char message[DAYTONA_MESSAGE_MAX];
};

int daytona_client_new(const struct daytona_config *cfg, struct daytona_client **ret)
{
    struct daytona_client *c;

    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->cfg = *cfg;
    c->curl = httpc_handle_new();
    if (!c->curl) {
        daytona_client_free(c);
        return -ENOMEM;
    }
    *ret = c;
    return 0;
}

void daytona_client_free(struct daytona_client *c)
{
    if (!c)
        return;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    daytona_config_wipe(&c->cfg);
    free(c);
}

const struct daytona_config *daytona_client_config(const struct daytona_client *c)
{
    return &c->cfg;
}

const char *daytona_client_message(const struct daytona_client *c)
{
    return c->message;
}

void daytona_client_set_message(struct daytona_client *c, const char *msg)
{
    char *hit;
    size_t klen = strlen(c->cfg.api_key);

    snprintf(c->message, sizeof(c->message), "%s", msg ? msg : "");
    for (char *p = c->message; *p; p++) {
        if ((unsigned char)*p < 0x20)
            *p = ' ';
    }
    if (klen < 4)
        return;
    for (hit = strstr(c->message, c->cfg.api_key); hit; hit = strstr(hit, c->cfg.api_key)) {
        memmove(hit + 3, hit + klen, strlen(hit + klen) + 1);
        memcpy(hit, "***", 3);
    }
}

/* Daytona's own meanings first (daytona_client.h), then httpc_status_errno. */
static int status_errno(long status)
{
    if (status >= 200 && status < 300)
        return 0;
    switch (status) {
    case 422:
        return -EINVAL;
    case 409:
        return -EBUSY;
    case 410:
        return -EPIPE;
    case 429:
        return DAYTONA_E_CAPACITY;
    default:
        return status >= 500 ? DAYTONA_E_SERVER : httpc_status_errno(status);
    }
}

/* The server's error text: `message` (a string, or NestJS's array of strings). */
static void message_from_body(struct daytona_client *c, const struct buf *body)
{
    json_object *doc = NULL, *m;
    char err[64];

    c->message[0] = '\0';
    if (!body || body->len == 0)
        return;
    if (jsonx_parse(body->data, body->len, 16, &doc, err, sizeof(err)) < 0 || !doc) {
        daytona_client_set_message(c, "");
        return;
    }
    m = jsonx_get(doc, "message");
    if (m && json_object_is_type(m, json_type_array) && json_object_array_length(m) > 0)
        m = json_object_array_get_idx(m, 0);
    if (m && json_object_is_type(m, json_type_string))
        daytona_client_set_message(c, json_object_get_string(m));
    json_object_put(doc);
}

static bool only_429(long status)
{
    return status == 429;
}

/*
 * One exchange, with the 429 retries (after the server's Retry-After or Retry-After-<scope>,
 * else 500 ms doubling; each wait capped at retry_cap_ms). Returns 0 for a 2xx answer (status
 * in *ret_status), the mapped error otherwise (the body of an error answer feeds the message).
 * The answer's body replaces *ret_body (its cap applies), or is dropped when ret_body is NULL.
 */
static int perform(struct daytona_client *c, const struct daytona_request *rq, const char *body,
                   size_t body_len, struct buf *ret_body, long *ret_status)
{
    const char *lines[6];
    char org[200], err[DAYTONA_MESSAGE_MAX];
    struct httpc_request hrq = {
        .method = rq->method,
        .url = rq->url,
        .headers = lines,
        .body = rq->mime ? NULL : body,
        .body_len = body_len,
        .mime = rq->mime,
        .timeout_ms = (uint64_t)(rq->timeout_ms > 0 ? rq->timeout_ms : c->cfg.request_timeout_ms),
        .connect_timeout_ms = (uint64_t)c->cfg.connect_timeout_ms,
        .max_body = ret_body ? ret_body->max : 0,
        .discard_body = !ret_body,
        .bearer = c->cfg.api_key,
        .user_agent = "agent-runner/" AR_VERSION,
        .ca_file = c->cfg.ca_file[0] ? c->cfg.ca_file : NULL,
        .tcp_keepalive = true,
        .retry = {.attempts = c->cfg.max_429_retries + 1,
                  .backoff = HTTPC_BACKOFF_EXPONENTIAL,
                  .base_ms = 500,
                  .cap_ms = (uint64_t)c->cfg.retry_cap_ms,
                  .retry_after = true,
                  .status_retryable = only_429},
    };
    struct httpc_response res;
    size_t n = 0;
    int r;

    c->message[0] = '\0';
    lines[n++] = "X-Daytona-SDK-Version: " DAYTONA_SDK_VERSION;
    lines[n++] = "X-Daytona-Source: agent-runner";
    lines[n++] = "Expect:";
    if (body)
        lines[n++] = "Content-Type: application/json";
    if (rq->skip_activity)
        lines[n++] = "X-Daytona-Skip-Last-Activity-Update: true";
    if (c->cfg.organization[0]) {
        snprintf(org, sizeof(org), "X-Daytona-Organization-ID: %s", c->cfg.organization);
        lines[n++] = org;
    }
    hrq.nheaders = n;
    if (ret_body)
        buf_reset(ret_body);
    r = httpc_perform(c->curl, &hrq, &res, err, sizeof(err));
    if (r < 0) {
        daytona_client_set_message(c, r == -E2BIG ? "answer too large" : err);
        return r;
    }
    *ret_status = res.status;
    if (ret_body) {
        buf_release(ret_body);
        *ret_body = res.body; /* moved */
        memset(&res.body, 0, sizeof(res.body));
    }
    r = status_errno(res.status);
    if (r < 0) {
        message_from_body(c, ret_body);
        if (res.status == 429)
            daytona_client_set_message(c, "rate limited by Daytona: retries exhausted");
        else if (!c->message[0])
            snprintf(c->message, sizeof(c->message), "HTTP %ld", res.status);
    }
    httpc_response_release(&res);
    return r;
}

int daytona_client_fetch(struct daytona_client *c, const struct daytona_request *rq,
                         struct buf *ret_body, long *ret_status)
{
    const char *body = NULL;
    size_t body_len = 0;
    long status = 0;
    int r;

    if (rq->body)
        body = jsonx_text(rq->body, &body_len);
    r = perform(c, rq, body, body_len, ret_body, &status);
    if (ret_status)
        *ret_status = status;
    return r;
}

int daytona_client_call(struct daytona_client *c, const struct daytona_request *rq,
                        json_object **ret_doc, long *ret_status)
{
    json_object *doc = NULL;
    struct buf resp;
    long status = 0;
    char err[96];
    int r;

    buf_init(&resp, rq->answer_max ? rq->answer_max : API_ANSWER_MAX);
    r = daytona_client_fetch(c, rq, &resp, &status);
    if (ret_status)
        *ret_status = status;
    if (r < 0)
        goto out;
    if (ret_doc && resp.len > 0 &&
        jsonx_parse(resp.data, resp.len, 32, &doc, err, sizeof(err)) < 0) {
        daytona_client_set_message(c, "the answer is not JSON");
        r = DAYTONA_E_SERVER;
        goto out;
    }
    if (ret_doc) {
        *ret_doc = doc;
        doc = NULL;
    }
out:
    json_object_put(doc);
    buf_release(&resp);
    return r;
}

char *daytona_client_escape(struct daytona_client *c, const char *s)
{
    char *e = curl_easy_escape(c->curl, s, 0), *copy;

    if (!e)
        return NULL;
    copy = strdup(e);
    curl_free(e);
    return copy;
}

struct curl_mime *daytona_client_mime(struct daytona_client *c)
{
    return curl_mime_init(c->curl);
}
