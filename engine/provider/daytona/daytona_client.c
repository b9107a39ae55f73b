#include "provider/daytona/daytona_client.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

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

static bool has_ctl(const char *s)
{
    for (; *s; s++) {
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    }
    return false;
}

static int copy_opt(const char *(*get)(const char *), const char *name, char *dst, size_t cap,
                    char *err, size_t errlen)
{
    const char *v = get(name);

    dst[0] = '\0';
    if (!v || !v[0])
        return 0;
    if (strlen(v) >= cap || has_ctl(v)) {
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

static const char *env_get(const char *name)
{
    return getenv(name);
}

int daytona_config_from_env(struct daytona_config *ret, char *err, size_t errlen)
{
    return daytona_config_load(env_get, ret, err, errlen);
}

void daytona_config_wipe(struct daytona_config *cfg)
{
    explicit_bzero(cfg->api_key, sizeof(cfg->api_key));
}

/* ---- names and URLs ------------------------------------------------------------------- */

bool daytona_id_ok(const char *s)
{
    size_t n = 0;

    if (!s || !s[0] || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (; s[n]; n++) {
        char ch = s[n];

        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.'))
            return false;
    }
    return n < DAYTONA_ID_MAX;
}

bool daytona_text_ok(const char *s)
{
    return s && !has_ctl(s);
}

bool daytona_url_ok(const char *u)
{
    return u && (strncmp(u, "http://", 7) == 0 || strncmp(u, "https://", 8) == 0) && !has_ctl(u) &&
           !strchr(u, ' ');
}

/* ---- HTTP core ------------------------------------------------------------------------ */

struct daytona_client {
    struct daytona_config cfg;
    CURL *curl;
    long status;
    char message[DAYTONA_MESSAGE_MAX];
    unsigned throttled;
    /* the exchange in flight */
    long retry_after_ms;
    struct buf *resp;
    bool overflow;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

int daytona_client_new(const struct daytona_config *cfg, struct daytona_client **ret)
{
    struct daytona_client *c;

    pthread_once(&curl_once, curl_init_once);
    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->cfg = *cfg;
    c->curl = curl_easy_init();
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

long daytona_client_status(const struct daytona_client *c)
{
    return c->status;
}

const char *daytona_client_message(const struct daytona_client *c)
{
    return c->message;
}

unsigned daytona_client_throttled(const struct daytona_client *c)
{
    return c->throttled;
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

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
    struct daytona_client *c = ctx;

    if (!c->resp)
        return size * n;
    if (buf_append(c->resp, data, size * n) < 0) {
        c->overflow = true;
        return 0;
    }
    return size * n;
}

/* Retry-After and Retry-After-<scope>, in seconds (honour both spellings). */
static size_t on_header(char *data, size_t size, size_t n, void *ctx)
{
    struct daytona_client *c = ctx;
    size_t len = size * n;
    const char *colon, *end = data + len;
    char val[32];
    size_t vlen = 0;
    uint64_t secs;

    if (len <= 11 || strncasecmp(data, "retry-after", 11) != 0)
        return len;
    colon = memchr(data, ':', len); /* the header line is not NUL-terminated */
    if (colon) {
        colon++;
        while (colon < end && (*colon == ' ' || *colon == '\t'))
            colon++;
        while (colon + vlen < end && colon[vlen] != '\r' && colon[vlen] != '\n')
            vlen++;
        if (vlen > 0 && vlen < sizeof(val)) {
            memcpy(val, colon, vlen);
            val[vlen] = '\0';
            if (util_parse_u64(val, 0, 3600, &secs) == 0 && (long)secs * 1000 > c->retry_after_ms)
                c->retry_after_ms = (long)secs * 1000;
        }
    }
    return len;
}

static int status_errno(long status)
{
    if (status >= 200 && status < 300)
        return 0;
    switch (status) {
    case 400:
    case 422:
        return -EINVAL;
    case 401:
    case 403:
        return -EACCES;
    case 404:
        return -ENOENT;
    case 408:
        return -ETIMEDOUT;
    case 409:
        return -EBUSY;
    case 410:
        return -EPIPE;
    case 429:
        return DAYTONA_E_CAPACITY;
    default:
        return status >= 500 ? DAYTONA_E_SERVER : -EPROTO;
    }
}

static int curl_errno(CURLcode rc, bool overflow)
{
    switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
        return -EHOSTUNREACH;
    case CURLE_WRITE_ERROR:
        return overflow ? -E2BIG : -EIO;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
        return -ECONNRESET;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
        return -EPROTO;
    default:
        return -EIO;
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

/* What perform() sends: the request plus its serialised body and the answer buffer. */
struct exchange {
    const struct daytona_request *rq;
    const char *body; /* JSON text, or NULL */
    size_t body_len;
    struct buf *resp; /* the answer body (its cap applies) */
};

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/*
 * One exchange, with the 429 retries. Returns 0 for a 2xx answer (status in *ret_status),
 * the mapped error otherwise (the body of an error answer feeds the message).
 */
static int perform(struct daytona_client *c, const struct exchange *rq, long *ret_status)
{
    struct curl_slist *h = NULL;
    long status = 0;
    int r = 0;

    c->status = 0;
    c->message[0] = '\0';
    h = curl_slist_append(h, "X-Daytona-SDK-Version: " DAYTONA_SDK_VERSION);
    h = curl_slist_append(h, "X-Daytona-Source: agent-runner");
    h = curl_slist_append(h, "Expect:");
    if (rq->body)
        h = curl_slist_append(h, "Content-Type: application/json");
    if (rq->rq->skip_activity)
        h = curl_slist_append(h, "X-Daytona-Skip-Last-Activity-Update: true");
    if (c->cfg.organization[0]) {
        char org[200];

        snprintf(org, sizeof(org), "X-Daytona-Organization-ID: %s", c->cfg.organization);
        h = curl_slist_append(h, org);
    }
    if (!h) {
        r = -ENOMEM;
        goto out;
    }
    for (unsigned attempt = 0;; attempt++) {
        CURLcode rc;
        CURL *e = c->curl;

        curl_easy_reset(e);
        c->retry_after_ms = 0;
        c->overflow = false;
        c->resp = rq->resp;
        if (rq->resp)
            buf_reset(rq->resp);
        curl_easy_setopt(e, CURLOPT_URL, rq->rq->url);
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                         rq->rq->timeout_ms > 0 ? rq->rq->timeout_ms : c->cfg.request_timeout_ms);
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->cfg.connect_timeout_ms);
        curl_easy_setopt(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        curl_easy_setopt(e, CURLOPT_XOAUTH2_BEARER, c->cfg.api_key);
        curl_easy_setopt(e, CURLOPT_USERAGENT, "agent-runner/" AR_VERSION);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
        curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
        if (c->cfg.ca_file[0])
            curl_easy_setopt(e, CURLOPT_CAINFO, c->cfg.ca_file);
        if (rq->rq->mime) {
            curl_easy_setopt(e, CURLOPT_MIMEPOST, rq->rq->mime);
        } else if (rq->body) {
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, rq->body);
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
        }
        if (strcmp(rq->rq->method, "GET") != 0 &&
            !(strcmp(rq->rq->method, "POST") == 0 && (rq->rq->mime || rq->body)))
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, rq->rq->method);
        if (strcmp(rq->rq->method, "POST") == 0 && !rq->rq->mime && !rq->body) {
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
        }
        rc = curl_easy_perform(e);
        if (rc == CURLE_OK)
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        if (rc != CURLE_OK) {
            r = curl_errno(rc, c->overflow);
            c->status = 0;
            daytona_client_set_message(c,
                                       r == -E2BIG ? "answer too large" : curl_easy_strerror(rc));
            goto out;
        }
        if (status == 429 && attempt < c->cfg.max_429_retries) {
            long wait = c->retry_after_ms > 0 ? c->retry_after_ms : 500L << attempt;

            if (wait > c->cfg.retry_cap_ms)
                wait = c->cfg.retry_cap_ms;
            c->throttled++;
            sleep_ms(wait);
            continue;
        }
        break;
    }
    *ret_status = status;
    r = status_errno(status);
    if (r < 0) {
        c->status = status;
        message_from_body(c, rq->resp);
        if (status == 429)
            daytona_client_set_message(c, "rate limited by Daytona: retries exhausted");
        else if (!c->message[0])
            snprintf(c->message, sizeof(c->message), "HTTP %ld", status);
    }
out:
    c->resp = NULL;
    curl_slist_free_all(h);
    return r;
}

int daytona_client_fetch(struct daytona_client *c, const struct daytona_request *rq,
                         struct buf *ret_body, long *ret_status)
{
    struct exchange x = {.rq = rq, .resp = ret_body};
    long status = 0;
    size_t blen = 0;
    int r;

    if (rq->body) {
        x.body = jsonx_text(rq->body, &blen);
        x.body_len = blen;
    }
    r = perform(c, &x, &status);
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
        c->status = status;
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
