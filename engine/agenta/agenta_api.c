#include "agenta/agenta_api.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "base/jsonx.h"
#include "base/util.h"

#define DEFAULT_CALL_TIMEOUT_MS 10000
#define DEFAULT_QUERY_TIMEOUT_MS 5000
#define DEFAULT_ATTACHMENT_TIMEOUT_MS 15000
#define DEFAULT_TOOL_TTL_MS 3000
#define DEFAULT_INGEST_RETRIES 6
#define DEFAULT_HEARTBEAT_MS 30000 /* HEARTBEAT_INTERVAL_SECONDS */
#define DEFAULT_REFRESH_EVERY 10
#define INGEST_RETRIES_CAP 12
#define BACKOFF_CAP_MS 3600000ull
#define ANSWER_DEPTH 64
#define QUERY_DEPTH 128

struct agenta_api {
    atomic_int refs;
    struct agenta_config cfg;
    pthread_mutex_t lock; /* guards credential */
    char *credential;
};

/*
 * Parse an answer of the API strictly (UTF-8 validated). A tokener of its own each time, not
 * jsonx's per-thread cache: answers are parsed on short-lived threads (the heartbeat timer)
 * whose thread-local cache would outlive them.
 */
static int parse_answer(const char *data, size_t len, int depth, json_object **ret, char *err,
                        size_t errlen)
{
    struct json_tokener *tok;
    enum json_tokener_error jerr;
    json_object *o;
    size_t end;

    if (len > (size_t)0x7fffffff) {
        snprintf(err, errlen, "document too large");
        return -EBADMSG;
    }
    tok = json_tokener_new_ex(depth);
    if (!tok)
        return -ENOMEM;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    o = json_tokener_parse_ex(tok, data, (int)len);
    jerr = json_tokener_get_error(tok);
    end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (jerr != json_tokener_success) {
        snprintf(err, errlen, "%s", json_tokener_error_desc(jerr));
        json_object_put(o);
        return -EBADMSG;
    }
    while (end < len && strchr(" \t\r\n", data[end]))
        end++;
    if (end != len) {
        snprintf(err, errlen, "trailing data");
        json_object_put(o);
        return -EBADMSG;
    }
    *ret = o;
    return 0;
}

/* ---- configuration ---------------------------------------------------------------------- */

static const char *lookup_value(const char *(*lookup)(const char *, void *), void *ctx,
                                const char *name)
{
    const char *v = lookup ? lookup(name, ctx) : NULL;

    return v && v[0] ? v : NULL;
}

static int load_u64(const char *(*lookup)(const char *, void *), void *ctx, const char *name,
                    uint64_t def, uint64_t min, uint64_t max, uint64_t *ret, char *err,
                    size_t errlen)
{
    const char *v = lookup_value(lookup, ctx, name);
    uint64_t n;

    if (!v) {
        *ret = def;
        return 0;
    }
    if (util_parse_u64(v, min, max, &n) < 0) {
        util_seterr(err, errlen, "%s: expected a whole number in [%" PRIu64 ", %" PRIu64 "]", name,
                    min, max);
        return -EINVAL;
    }
    *ret = n;
    return 0;
}

/* Agenta's flags: only the literal "false" (any case, trimmed) turns them off. */
static bool flag_on(const char *(*lookup)(const char *, void *), void *ctx, const char *name)
{
    const char *v = lookup_value(lookup, ctx, name);
    size_t n;

    if (!v)
        return true;
    while (isspace((unsigned char)*v))
        v++;
    n = strlen(v);
    while (n > 0 && isspace((unsigned char)v[n - 1]))
        n--;
    return !(n == 5 && strncasecmp(v, "false", 5) == 0);
}

static bool clean_text(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x21 || *p == 0x7f)
            return false;
    return true;
}

int agenta_config_load(struct agenta_config *cfg,
                       const char *(*lookup)(const char *name, void *ctx), void *ctx, char *err,
                       size_t errlen)
{
    const char *base = lookup_value(lookup, ctx, "AGENTA_API_INTERNAL_URL"), *name;
    const char *replica = lookup_value(lookup, ctx, "AGENTA_RUNNER_REPLICA_ID");
    struct agenta_config c;
    uint64_t n;
    size_t len;
    int r;

    memset(&c, 0, sizeof(c));
    name = "AGENTA_API_INTERNAL_URL";
    if (!base) {
        base = lookup_value(lookup, ctx, "AGENTA_API_URL");
        name = "AGENTA_API_URL";
    }
    if (base) {
        len = strlen(base);
        while (len > 0 && base[len - 1] == '/')
            len--;
        if (len >= sizeof(c.base_url) || !clean_text(base) ||
            (strncmp(base, "http://", 7) != 0 && strncmp(base, "https://", 8) != 0) ||
            len <= (base[4] == 's' ? 8u : 7u)) {
            util_seterr(err, errlen, "%s: expected an http:// or https:// URL of at most %zu bytes",
                        name, sizeof(c.base_url) - 1);
            return -EINVAL;
        }
        memcpy(c.base_url, base, len);
        c.base_url[len] = '\0';
        c.enabled = true;
    }
    if (replica) {
        if (strlen(replica) >= sizeof(c.replica_id) || !clean_text(replica)) {
            util_seterr(err, errlen,
                        "AGENTA_RUNNER_REPLICA_ID: expected at most %zu printable bytes",
                        sizeof(c.replica_id) - 1);
            return -EINVAL;
        }
        snprintf(c.replica_id, sizeof(c.replica_id), "%s", replica);
    } else {
        /*
         * One id for the whole runner (master and every worker) that survives a restart: the
         * API routes a session's control signals to its owner replica and keeps the owner key
         * for two minutes, so a random id per process would refuse the session's next turn on
         * another worker, or after a restart.
         */
        const char *inst = lookup_value(lookup, ctx, "AGENT_RUNNER_INSTANCE");
        char host[256];

        if (gethostname(host, sizeof(host)) < 0)
            snprintf(host, sizeof(host), "localhost");
        host[sizeof(host) - 1] = '\0';
        r = snprintf(c.replica_id, sizeof(c.replica_id), "agent-runner@%s/%s", host,
                     inst ? inst : "default");
        if (r < 0 || (size_t)r >= sizeof(c.replica_id) || !clean_text(c.replica_id)) {
            util_seterr(err, errlen,
                        "AGENTA_RUNNER_REPLICA_ID: the host name and instance make no "
                        "usable replica id; set one");
            return -EINVAL;
        }
    }
    c.reconstruct = flag_on(lookup, ctx, "AGENTA_SESSIONS_RECONSTRUCT");
    c.records_durable = flag_on(lookup, ctx, "AGENTA_RECORDS_DURABLE");
    r = load_u64(lookup, ctx, "AGENTA_RECORDS_INGEST_MAX_RETRIES", DEFAULT_INGEST_RETRIES, 1,
                 INGEST_RETRIES_CAP, &n, err, errlen);
    if (r < 0)
        return r;
    c.ingest_max_retries = (unsigned)n;
    r = load_u64(lookup, ctx, "AGENTA_RECORD_TOOL_TTL_MS", DEFAULT_TOOL_TTL_MS, 1, 3600000,
                 &c.record_tool_ttl_ms, err, errlen);
    if (r == 0)
        r = load_u64(lookup, ctx, "AGENTA_SESSIONS_RECORDS_QUERY_TIMEOUT_MS",
                     DEFAULT_QUERY_TIMEOUT_MS, 1, 600000, &c.records_query_timeout_ms, err, errlen);
    if (r == 0)
        r = load_u64(lookup, ctx, "AGENTA_ATTACHMENTS_FETCH_TIMEOUT_MS",
                     DEFAULT_ATTACHMENT_TIMEOUT_MS, 1, 600000, &c.attachments_timeout_ms, err,
                     errlen);
    if (r == 0)
        r = load_u64(lookup, ctx, "AGENTA_ATTACHMENTS_MAX_PER_TURN", 100, 1, 10000, &n, err,
                     errlen);
    if (r < 0)
        return r;
    c.attachments_max_per_turn = (unsigned)n;
    r = load_u64(lookup, ctx, "AGENT_RUNNER_AGENTA_TIMEOUT_MS", DEFAULT_CALL_TIMEOUT_MS, 100,
                 600000, &c.call_timeout_ms, err, errlen);
    if (r < 0)
        return r;
    r = load_u64(lookup, ctx, "AGENT_RUNNER_AGENTA_HEARTBEAT_MS", DEFAULT_HEARTBEAT_MS, 50, 600000,
                 &c.heartbeat_interval_ms, err, errlen);
    if (r == 0)
        r = load_u64(lookup, ctx, "AGENT_RUNNER_AGENTA_REFRESH_EVERY", DEFAULT_REFRESH_EVERY, 1,
                     1000, &n, err, errlen);
    if (r < 0)
        return r;
    c.refresh_every = (unsigned)n;
    *cfg = c;
    return 0;
}

/* ---- the client ------------------------------------------------------------------------- */

static int check_credential(const char *credential)
{
    size_t n = strlen(credential);

    if (n > AGENTA_CREDENTIAL_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)credential[i] < 0x20 || credential[i] == 0x7f)
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

uint64_t agenta_backoff_ms(enum agenta_backoff b, uint64_t base_ms, unsigned attempt)
{
    uint64_t d;

    if (attempt == 0)
        attempt = 1;
    if (b == AGENTA_BACKOFF_LINEAR) {
        d = base_ms * attempt;
    } else {
        if (attempt > 40)
            return BACKOFF_CAP_MS;
        d = base_ms << (attempt - 1);
    }
    return d > BACKOFF_CAP_MS ? BACKOFF_CAP_MS : d;
}

bool agenta_status_retryable(long status)
{
    return status == 408 || status == 425 || status == 429 || (status >= 500 && status <= 599);
}

/* One curl handle per thread, so consecutive calls of a thread reuse their connection. */
static pthread_key_t curl_key;
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static bool curl_key_ok;

static void curl_handle_free(void *c)
{
    curl_easy_cleanup(c);
}

static void curl_key_make(void)
{
    curl_key_ok = pthread_key_create(&curl_key, curl_handle_free) == 0;
}

static CURL *thread_curl(void)
{
    CURL *c;

    pthread_once(&curl_once, curl_key_make);
    if (!curl_key_ok)
        return curl_easy_init();
    c = pthread_getspecific(curl_key);
    if (c) {
        curl_easy_reset(c);
        return c;
    }
    c = curl_easy_init();
    if (c && pthread_setspecific(curl_key, c) != 0) {
        curl_easy_cleanup(c);
        c = NULL;
    }
    return c;
}

static void thread_curl_done(CURL *c)
{
    if (!curl_key_ok || pthread_getspecific(curl_key) != c)
        curl_easy_cleanup(c);
}

struct exchange {
    struct agenta_response *res;
    bool over_cap;
    const atomic_bool *abort;
};

static size_t on_body(char *ptr, size_t size, size_t n, void *ctx)
{
    struct exchange *x = ctx;

    if (buf_append(&x->res->body, ptr, size * n) < 0) {
        x->over_cap = true;
        return 0;
    }
    return size * n;
}

/* Copy a header's value (trimmed) when the line is "name: value". */
static bool header_value(const char *line, size_t len, const char *name, char *out, size_t outlen)
{
    size_t nl = strlen(name), start, end;

    if (len <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
        return false;
    start = nl + 1;
    end = len;
    while (start < end && (line[start] == ' ' || line[start] == '\t'))
        start++;
    while (end > start && isspace((unsigned char)line[end - 1]))
        end--;
    if (end - start >= outlen) {
        out[0] = '\0';
        return true;
    }
    memcpy(out, line + start, end - start);
    out[end - start] = '\0';
    return true;
}

static size_t on_header(char *ptr, size_t size, size_t n, void *ctx)
{
    struct exchange *x = ctx;
    size_t len = size * n;

    if (len >= 5 && strncmp(ptr, "HTTP/", 5) == 0) {
        /* a new response (after a 100 Continue): forget the previous one's headers */
        x->res->content_type[0] = '\0';
        x->res->content_disposition[0] = '\0';
        return len;
    }
    if (header_value(ptr, len, "content-type", x->res->content_type,
                     sizeof(x->res->content_type))) {
        char *ct = x->res->content_type, *semi = strchr(ct, ';');
        size_t k;

        if (semi)
            *semi = '\0';
        for (char *p = ct; *p; p++)
            *p = (char)tolower((unsigned char)*p);
        k = strlen(ct);
        while (k > 0 && isspace((unsigned char)ct[k - 1]))
            ct[--k] = '\0';
        return len;
    }
    header_value(ptr, len, "content-disposition", x->res->content_disposition,
                 sizeof(x->res->content_disposition));
    return len;
}

static int on_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    struct exchange *x = ctx;

    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    return x->abort && atomic_load(x->abort) ? 1 : 0;
}

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

static int errno_of(CURLcode rc)
{
    switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return -EHOSTUNREACH;
    case CURLE_ABORTED_BY_CALLBACK:
        return -ECANCELED;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    case CURLE_WRITE_ERROR:
        return -E2BIG;
    default:
        return -EIO;
    }
}

/* One attempt: > 0 HTTP status, or -errno. */
static int attempt(struct agenta_api *api, CURL *c, const struct agenta_call *call, const char *url,
                   struct agenta_response *res, char *err, size_t errlen)
{
    struct exchange x = {.res = res, .abort = call->abort};
    struct curl_slist *headers = NULL, *h;
    uint64_t timeout = call->timeout_ms ? call->timeout_ms : api->cfg.call_timeout_ms;
    struct buf auth;
    long status = 0;
    CURLcode rc;
    int r = 0;

    buf_reset(&res->body);
    res->content_type[0] = '\0';
    res->content_disposition[0] = '\0';
    buf_init(&auth, AGENTA_CREDENTIAL_MAX + 64);
    pthread_mutex_lock(&api->lock);
    if (api->credential[0])
        r = buf_printf(&auth, "Authorization: %s", api->credential);
    pthread_mutex_unlock(&api->lock);
    h = curl_slist_append(NULL, "Accept: application/json");
    if (h && call->method == AGENTA_POST)
        h = curl_slist_append(h, "Content-Type: application/json");
    if (h && auth.len)
        h = curl_slist_append(h, auth.data);
    /* the credential's copy in auth is wiped: curl keeps its own until the slist is freed */
    if (auth.data)
        explicit_bzero(auth.data, auth.len);
    buf_release(&auth);
    if (!h || r < 0) {
        curl_slist_free_all(h);
        util_seterr(err, errlen, "agenta api: %s %.*s: out of memory", method_name(call->method),
                    path_len(call->path), call->path);
        return -ENOMEM;
    }
    headers = h;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout);
    curl_easy_setopt(
        c, CURLOPT_CONNECTTIMEOUT_MS,
        (long)(timeout < AGENTA_CONNECT_TIMEOUT_MS ? timeout : AGENTA_CONNECT_TIMEOUT_MS));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
    if (call->method == AGENTA_POST) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)(call->body ? call->body_len : 0));
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, call->body ? call->body : "");
    } else {
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    }
    rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    /* curl keeps pointers to headers and x: drop them before they go out of scope */
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(headers);
    if (x.over_cap) {
        util_seterr(err, errlen, "agenta api: %s %.*s: answer larger than %zu bytes",
                    method_name(call->method), path_len(call->path), call->path, res->body.max);
        return -E2BIG;
    }
    if (rc != CURLE_OK) {
        r = errno_of(rc);
        if (r == -ETIMEDOUT)
            util_seterr(err, errlen, "agenta api: %s %.*s: timed out after %" PRIu64 " ms",
                        method_name(call->method), path_len(call->path), call->path, timeout);
        else
            util_seterr(err, errlen, "agenta api: %s %.*s: %s", method_name(call->method),
                        path_len(call->path), call->path, curl_easy_strerror(rc));
        return r;
    }
    res->status = status;
    return status > 0 ? (int)status : -EPROTO;
}

/* Sleep ms, waking every 20 ms to look at the abort flag. */
static int pause_ms(uint64_t ms, const atomic_bool *abort)
{
    int64_t until = util_now_ms() + (int64_t)ms;

    for (;;) {
        int64_t left = until - util_now_ms();
        struct timespec ts;

        if (abort && atomic_load(abort))
            return -ECANCELED;
        if (left <= 0)
            return 0;
        if (left > 20)
            left = 20;
        ts.tv_sec = 0;
        ts.tv_nsec = left * 1000000;
        nanosleep(&ts, NULL);
    }
}

int agenta_api_call(struct agenta_api *api, const struct agenta_call *call,
                    struct agenta_response *ret, char *err, size_t errlen)
{
    unsigned attempts = call->attempts ? call->attempts : 1, n;
    char url[AGENTA_URL_MAX * 2];
    CURL *c;
    int r = -EIO;

    memset(ret, 0, sizeof(*ret));
    buf_init(&ret->body, call->response_max ? call->response_max : AGENTA_RESPONSE_MAX);
    if (!call->path || call->path[0] != '/' ||
        (size_t)snprintf(url, sizeof(url), "%s%s", api->cfg.base_url, call->path) >= sizeof(url)) {
        util_seterr(err, errlen, "agenta api: a path that does not fit a URL");
        return -EINVAL;
    }
    c = thread_curl();
    if (!c) {
        util_seterr(err, errlen, "agenta api: cannot make a curl handle");
        return -ENOMEM;
    }
    for (n = 1; n <= attempts; n++) {
        r = attempt(api, c, call, url, ret, err, errlen);
        ret->attempts = n;
        if (r > 0 && !agenta_status_retryable(r))
            break;
        if (r == -ECANCELED || r == -E2BIG || r == -ENOMEM || r == -EINVAL)
            break;
        if (n < attempts &&
            pause_ms(agenta_backoff_ms(call->backoff, call->backoff_base_ms, n), call->abort) < 0) {
            if (r > 0)
                break; /* keep the last answer */
            r = -ECANCELED;
            util_seterr(err, errlen, "agenta api: %s %.*s: cancelled", method_name(call->method),
                        path_len(call->path), call->path);
            break;
        }
    }
    thread_curl_done(c);
    if (r < 0)
        buf_release(&ret->body);
    return r;
}

void agenta_response_release(struct agenta_response *r)
{
    buf_release(&r->body);
}

/* POST a JSON document: 0 on 2xx, -EREMOTEIO (message naming the status) otherwise. When
 * ret_answer is set the answer must be a JSON value and is parsed into it. */
static int post_json(struct agenta_api *api, const char *path, json_object *body, unsigned attempts,
                     uint64_t timeout_ms, size_t response_max, const atomic_bool *abort,
                     long *ret_status, json_object **ret_answer, char *err, size_t errlen)
{
    struct agenta_call call = {
        .method = AGENTA_POST,
        .path = path,
        .timeout_ms = timeout_ms,
        .response_max = response_max,
        .attempts = attempts,
        .backoff = AGENTA_BACKOFF_LINEAR,
        .backoff_base_ms = AGENTA_RETRY_BASE_MS,
        .abort = abort,
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
    if (res.status < 200 || res.status > 299) {
        util_seterr(err, errlen, "agenta api: POST %.*s: HTTP %ld", path_len(path), path,
                    res.status);
        agenta_response_release(&res);
        return -EREMOTEIO;
    }
    if (ret_answer) {
        json_object *o = NULL;

        r = parse_answer(buf_str(&res.body), res.body.len, QUERY_DEPTH, &o, perr, sizeof(perr));
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

/* ---- bodies and answers ----------------------------------------------------------------- */

static void add_str(json_object *o, const char *key, const char *v)
{
    if (v)
        json_object_object_add(o, key, json_object_new_string(v));
}

/* {id?, slug?, version?} of a reference object; NULL when it has none of them. */
static json_object *reference_of(json_object *ref)
{
    static const char *const keys[] = {"id", "slug", "version"};
    json_object *o;

    if (!ref || !json_object_is_type(ref, json_type_object))
        return NULL;
    o = json_object_new_object();
    if (!o)
        return NULL;
    for (size_t i = 0; i < 3; i++) {
        json_object *v = jsonx_get(ref, keys[i]);

        /* a version may arrive as a number; the API's Reference holds strings */
        if (v && json_object_is_type(v, json_type_string))
            add_str(o, keys[i], json_object_get_string(v));
        else if (v && json_object_is_type(v, json_type_int))
            add_str(o, keys[i], json_object_get_string(v));
    }
    if (json_object_object_length(o) == 0) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

static const struct {
    const char *from;
    const char *key;
} workflow_refs[] = {
    {"artifact", "workflow"}, {"variant", "workflow_variant"}, {"revision", "workflow_revision"}};

json_object *agenta_workflow_references(json_object *run_context)
{
    json_object *wf = jsonx_get(run_context, "workflow"), *out = NULL;

    for (size_t i = 0; i < 3; i++) {
        json_object *ref = reference_of(jsonx_get(wf, workflow_refs[i].from));

        if (!ref)
            continue;
        if (!out)
            out = json_object_new_object();
        json_object_object_add(out, workflow_refs[i].key, ref);
    }
    return out;
}

json_object *agenta_workflow_reference_list(json_object *run_context)
{
    json_object *wf = jsonx_get(run_context, "workflow"), *out = NULL;

    for (size_t i = 0; i < 3; i++) {
        json_object *ref = reference_of(jsonx_get(wf, workflow_refs[i].from));

        if (!ref)
            continue;
        add_str(ref, "key", workflow_refs[i].key);
        if (!out)
            out = json_object_new_array();
        json_object_array_add(out, ref);
    }
    return out;
}

json_object *agenta_beat_body(const struct agenta_beat *b)
{
    json_object *o = json_object_new_object();

    if (!o)
        return NULL;
    add_str(o, "session_id", b->session_id);
    add_str(o, "replica_id", b->replica_id);
    add_str(o, "turn_id", b->turn_id);
    json_object_object_add(o, "is_running", json_object_new_boolean(b->is_running));
    if (b->name && b->name[0])
        add_str(o, "name", b->name);
    if (b->references && json_object_is_type(b->references, json_type_array) &&
        json_object_array_length(b->references) > 0)
        json_object_object_add(o, "references", json_object_get(b->references));
    return o;
}

static void copy_str(json_object *o, const char *key, char *out, size_t outlen)
{
    const char *v = jsonx_str(o, key);

    out[0] = '\0';
    if (v && strlen(v) < outlen && clean_text(v))
        memcpy(out, v, strlen(v) + 1);
}

int agenta_beat_reply_parse(const char *body, size_t len, struct agenta_beat_reply *ret)
{
    struct agenta_beat_reply rep;
    json_object *o = NULL, *v;
    char perr[64];

    if (parse_answer(body, len, ANSWER_DEPTH, &o, perr, sizeof(perr)) < 0 || !o ||
        !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return -EBADMSG;
    }
    memset(&rep, 0, sizeof(rep));
    v = jsonx_get(o, "is_current_turn");
    rep.is_current_turn =
        !(v && json_object_is_type(v, json_type_boolean) && !json_object_get_boolean(v));
    v = jsonx_get(o, "admitted");
    if (v && json_object_is_type(v, json_type_boolean))
        rep.admitted = json_object_get_boolean(v);
    else
        rep.admitted = rep.is_current_turn;
    copy_str(jsonx_get(o, "stream"), "id", rep.stream_id, sizeof(rep.stream_id));
    copy_str(o, "replica_id", rep.replica_id, sizeof(rep.replica_id));
    json_object_put(o);
    *ret = rep;
    return 0;
}

json_object *agenta_record_body(const struct agenta_record *rec)
{
    json_object *o = json_object_new_object();

    if (!o)
        return NULL;
    add_str(o, "session_id", rec->session_id);
    add_str(o, "record_id", rec->record_id);
    json_object_object_add(o, "record_index", json_object_new_int64((int64_t)rec->record_index));
    add_str(o, "timestamp", rec->timestamp);
    add_str(o, "record_source", rec->source);
    add_str(o, "record_type", jsonx_str(rec->attributes, "type"));
    json_object_object_add(o, "attributes", json_object_get(rec->attributes));
    add_str(o, "turn_id", rec->turn_id && rec->turn_id[0] ? rec->turn_id : NULL);
    add_str(o, "span_id", rec->span_id && rec->span_id[0] ? rec->span_id : NULL);
    return o;
}

json_object *agenta_interaction_body(const struct agenta_interaction *it)
{
    json_object *o = json_object_new_object(), *data = json_object_new_object();
    json_object *req = json_object_new_object(), *flags = json_object_new_object(), *refs;

    if (!o || !data || !req || !flags) {
        json_object_put(o);
        json_object_put(data);
        json_object_put(req);
        json_object_put(flags);
        return NULL;
    }
    add_str(o, "session_id", it->session_id);
    add_str(o, "turn_id", it->turn_id);
    add_str(o, "token", it->token);
    add_str(o, "kind", it->kind);
    add_str(req, "tool", it->tool ? it->tool : "");
    json_object_object_add(req, "args", it->args ? json_object_get(it->args) : NULL);
    add_str(req, "tool_call_id", it->tool_call_id);
    json_object_object_add(data, "request", req);
    refs = agenta_workflow_references(it->run_context);
    if (refs)
        json_object_object_add(data, "references", refs);
    if (it->parameters && json_object_is_type(it->parameters, json_type_object) &&
        json_object_object_length(it->parameters) > 0)
        json_object_object_add(data, "parameters", json_object_get(it->parameters));
    json_object_object_add(o, "data", data);
    json_object_object_add(flags, "delivered_in_band", json_object_new_boolean(1));
    json_object_object_add(o, "flags", flags);
    return o;
}

json_object *agenta_transition_body(const char *session_id, const char *token, const char *verdict,
                                    const char *tool_call_id)
{
    json_object *o = json_object_new_object();

    if (!o)
        return NULL;
    add_str(o, "session_id", session_id);
    add_str(o, "token", token);
    add_str(o, "status", "resolved");
    if (verdict) {
        json_object *res = json_object_new_object();

        add_str(res, "verdict", verdict);
        add_str(res, "tool_call_id", tool_call_id ? tool_call_id : "");
        json_object_object_add(o, "resolution", res);
    }
    return o;
}

json_object *agenta_cancel_stale_body(const char *session_id, const char *turn_id,
                                      const char *const *tokens, size_t ntokens)
{
    json_object *o = json_object_new_object();

    if (!o)
        return NULL;
    add_str(o, "session_id", session_id);
    add_str(o, "turn_id", turn_id);
    if (ntokens > 0) {
        json_object *arr = json_object_new_array();

        for (size_t i = 0; i < ntokens; i++)
            json_object_array_add(arr, json_object_new_string(tokens[i]));
        json_object_object_add(o, "tokens", arr);
    }
    return o;
}

json_object *agenta_turn_body(const struct agenta_turn *t)
{
    json_object *o = json_object_new_object();

    if (!o)
        return NULL;
    add_str(o, "session_id", t->session_id);
    add_str(o, "stream_id", t->stream_id);
    add_str(o, "turn_id", t->turn_id);
    json_object_object_add(o, "turn_index", json_object_new_int64((int64_t)t->turn_index));
    add_str(o, "harness_kind", t->harness_kind);
    add_str(o, "agent_session_id", t->agent_session_id);
    add_str(o, "sandbox_id", t->sandbox_id);
    if (t->references && json_object_is_type(t->references, json_type_array) &&
        json_object_array_length(t->references) > 0)
        json_object_object_add(o, "references", json_object_get(t->references));
    add_str(o, "trace_id", t->trace_id);
    add_str(o, "span_id", t->span_id);
    add_str(o, "start_time", t->start_time);
    return o;
}

json_object *agenta_turn_complete_body(const char *session_id, uint64_t turn_index,
                                       const char *agent_session_id, const char *end_time)
{
    json_object *o = json_object_new_object();

    if (!o)
        return NULL;
    add_str(o, "session_id", session_id);
    json_object_object_add(o, "turn_index", json_object_new_int64((int64_t)turn_index));
    add_str(o, "agent_session_id", agent_session_id);
    add_str(o, "end_time", end_time);
    return o;
}

json_object *agenta_turn_query_body(const char *session_id, const char *harness_kind)
{
    json_object *o = json_object_new_object(), *q = json_object_new_object();
    json_object *w = json_object_new_object();

    if (!o || !q || !w) {
        json_object_put(o);
        json_object_put(q);
        json_object_put(w);
        return NULL;
    }
    add_str(q, "session_id", session_id);
    add_str(q, "harness_kind", harness_kind);
    json_object_object_add(o, "query", q);
    json_object_object_add(w, "limit", json_object_new_int(1));
    add_str(w, "order", "descending");
    json_object_object_add(o, "windowing", w);
    return o;
}

int agenta_turn_query_parse(json_object *answer, struct agenta_turn_row *ret)
{
    json_object *turns = jsonx_get(answer, "turns"), *row, *v;
    struct agenta_turn_row t;

    if (!answer || !json_object_is_type(answer, json_type_object))
        return -EBADMSG;
    memset(&t, 0, sizeof(t));
    t.turn_index = -1;
    if (turns && json_object_is_type(turns, json_type_array) &&
        json_object_array_length(turns) > 0) {
        row = json_object_array_get_idx(turns, 0);
        if (!row || !json_object_is_type(row, json_type_object))
            return -EBADMSG;
        t.found = true;
        copy_str(row, "turn_id", t.turn_id, sizeof(t.turn_id));
        copy_str(row, "harness_kind", t.harness_kind, sizeof(t.harness_kind));
        copy_str(row, "agent_session_id", t.agent_session_id, sizeof(t.agent_session_id));
        copy_str(row, "sandbox_id", t.sandbox_id, sizeof(t.sandbox_id));
        v = jsonx_get(row, "turn_index");
        if (v && json_object_is_type(v, json_type_int) && json_object_get_int64(v) >= 0)
            t.turn_index = json_object_get_int64(v);
        t.ended = jsonx_str(row, "end_time") && jsonx_str(row, "end_time")[0];
    }
    *ret = t;
    return 0;
}

json_object *agenta_attachments_reference_body(const char *session_id, const char *const *ids,
                                               size_t nids)
{
    json_object *o = json_object_new_object(), *arr = json_object_new_array();

    if (!o || !arr) {
        json_object_put(o);
        json_object_put(arr);
        return NULL;
    }
    add_str(o, "session_id", session_id);
    for (size_t i = 0; i < nids; i++)
        json_object_array_add(arr, json_object_new_string(ids[i]));
    json_object_object_add(o, "attachment_ids", arr);
    return o;
}

int agenta_sanitize_filename(const char *in, char *out, size_t outlen)
{
    size_t end = strlen(in), start, n = 0;

    /* the base name, with '\' read as '/' and trailing separators ignored */
    while (end > 0 && (in[end - 1] == '/' || in[end - 1] == '\\'))
        end--;
    start = end;
    while (start > 0 && in[start - 1] != '/' && in[start - 1] != '\\')
        start--;
    for (size_t i = start; i < end; i++) {
        unsigned char ch = (unsigned char)in[i];

        if (ch < 0x20 || ch == 0x7f)
            continue;
        if (n + 1 >= outlen)
            return -E2BIG;
        out[n++] = (char)ch;
    }
    if (outlen == 0)
        return -E2BIG;
    out[n] = '\0';
    if (n == 0 || strcmp(out, ".") == 0 || strcmp(out, "..") == 0)
        return -EINVAL;
    return 0;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static bool utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;

    while (i < n) {
        unsigned char c = s[i];
        size_t k;
        uint32_t cp;

        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xe0) == 0xc0) {
            k = 1;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (i + k >= n)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k + 1;
    }
    return true;
}

/* RFC 5987 ext-value: charset'lang'pct-encoded, UTF-8 or ISO-8859-1. */
static int decode_5987(const char *v, size_t len, struct buf *out)
{
    const char *q1 = memchr(v, '\'', len), *q2, *p, *end = v + len;
    bool latin1;
    size_t cs;

    if (!q1)
        return -EINVAL;
    q2 = memchr(q1 + 1, '\'', (size_t)(end - q1 - 1));
    if (!q2)
        return -EINVAL;
    cs = (size_t)(q1 - v);
    if ((cs == 5 && strncasecmp(v, "utf-8", 5) == 0) || (cs == 4 && strncasecmp(v, "utf8", 4) == 0))
        latin1 = false;
    else if ((cs == 10 && strncasecmp(v, "iso-8859-1", 10) == 0) ||
             (cs == 6 && strncasecmp(v, "latin1", 6) == 0))
        latin1 = true;
    else
        return -EINVAL;
    for (p = q2 + 1; p < end; p++) {
        unsigned ch = (unsigned char)*p;
        int r;

        if (ch == '%') {
            if (end - p < 3 || hexval(p[1]) < 0 || hexval(p[2]) < 0) {
                if (!latin1)
                    return -EINVAL; /* decodeURIComponent refuses a stray '%' */
                r = buf_append_char(out, '%');
            } else {
                ch = (unsigned)(hexval(p[1]) * 16 + hexval(p[2]));
                p += 2;
                if (latin1 && ch >= 0x80)
                    r = buf_printf(out, "%c%c", (char)(0xc0 | (ch >> 6)),
                                   (char)(0x80 | (ch & 0x3f)));
                else
                    r = buf_append_char(out, (char)ch);
            }
        } else {
            r = buf_append_char(out, (char)ch);
        }
        if (r < 0)
            return r;
    }
    if (!latin1 && !utf8_valid((const unsigned char *)out->data, out->len))
        return -EINVAL;
    return 0;
}

/*
 * Find the value of parameter `name` (case-insensitive) at the start of the value or after a
 * ';': returns a pointer to what follows '=' (leading blanks skipped) or NULL.
 */
static const char *find_param(const char *s, const char *name)
{
    size_t nl = strlen(name);
    const char *p = s;

    for (;;) {
        const char *q = p;

        while (isspace((unsigned char)*q))
            q++;
        if (strncasecmp(q, name, nl) == 0) {
            q += nl;
            while (isspace((unsigned char)*q))
                q++;
            if (*q == '=') {
                q++;
                while (isspace((unsigned char)*q))
                    q++;
                return q;
            }
        }
        p = strchr(p, ';');
        if (!p)
            return NULL;
        p++;
    }
}

int agenta_disposition_filename(const char *disposition, char *out, size_t outlen)
{
    const char *v;
    struct buf tmp;
    int r;

    if (!disposition)
        return -ENOENT;
    buf_init(&tmp, 4096);
    v = find_param(disposition, "filename*");
    if (v) {
        size_t n = strcspn(v, ";");

        while (n > 0 && isspace((unsigned char)v[n - 1]))
            n--;
        if (decode_5987(v, n, &tmp) == 0 && tmp.len > 0 &&
            agenta_sanitize_filename(buf_str(&tmp), out, outlen) == 0) {
            buf_release(&tmp);
            return 0;
        }
        buf_reset(&tmp);
    }
    v = find_param(disposition, "filename");
    r = -ENOENT;
    if (v && *v == '"') {
        const char *p = v + 1;

        while (*p && *p != '"') {
            if (*p == '\\' && p[1])
                p++;
            if (buf_append_char(&tmp, *p) < 0)
                break;
            p++;
        }
        if (*p == '"')
            r = agenta_sanitize_filename(buf_str(&tmp), out, outlen);
        else
            v = NULL; /* an unterminated quote: try it as a plain value */
    }
    if (r == -ENOENT && v) {
        size_t n = strcspn(v, ";");

        while (n > 0 && isspace((unsigned char)v[n - 1]))
            n--;
        buf_reset(&tmp);
        if (n > 0 && buf_append(&tmp, v, n) == 0)
            r = agenta_sanitize_filename(buf_str(&tmp), out, outlen);
    }
    buf_release(&tmp);
    return r == 0 ? 0 : r == -E2BIG ? -E2BIG : -ENOENT;
}

void agenta_iso_time(int64_t wall, char out[32])
{
    time_t secs = (time_t)(wall / 1000);
    struct tm tm;
    char date[24];

    gmtime_r(&secs, &tm);
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 32, "%s.%03dZ", date, (int)(wall % 1000));
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
    if (res.status < 200 || res.status > 299) {
        util_seterr(err, errlen, "agenta api: POST %s: HTTP %ld", AGENTA_PATH_HEARTBEAT,
                    res.status);
        r = -EREMOTEIO;
    } else if (agenta_beat_reply_parse(buf_str(&res.body), res.body.len, ret) < 0) {
        util_seterr(err, errlen, "agenta api: POST %s: the answer is not a JSON object",
                    AGENTA_PATH_HEARTBEAT);
        r = -EBADMSG;
    } else {
        r = 0;
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
    if (res.status < 200 || res.status > 299) {
        util_seterr(err, errlen, "agenta api: GET /access/permissions/check: HTTP %ld", res.status);
        agenta_response_release(&res);
        return -EREMOTEIO;
    }
    r = parse_answer(buf_str(&res.body), res.body.len, ANSWER_DEPTH, &o, perr, sizeof(perr));
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

    if (body)
        add_str(body, "session_id", session_id);
    r = post_json(api, AGENTA_PATH_RECORDS_QUERY, body, 1, api->cfg.records_query_timeout_ms,
                  AGENTA_QUERY_RESPONSE_MAX, NULL, NULL, &answer, err, errlen);
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

int agenta_api_interaction_create(struct agenta_api *api, const struct agenta_interaction *it,
                                  char *err, size_t errlen)
{
    json_object *body = agenta_interaction_body(it);
    int r;

    r = post_json(api, AGENTA_PATH_INTERACTIONS, body, AGENTA_INTERACTION_ATTEMPTS, 0, 0, NULL,
                  NULL, NULL, err, errlen);
    json_object_put(body);
    return r;
}

int agenta_api_interaction_transition(struct agenta_api *api, const char *session_id,
                                      const char *token, const char *verdict,
                                      const char *tool_call_id, char *err, size_t errlen)
{
    json_object *body = agenta_transition_body(session_id, token, verdict, tool_call_id);
    int r;

    r = post_json(api, AGENTA_PATH_INTERACTIONS_TRANSITION, body, 1, 0, 0, NULL, NULL, NULL, err,
                  errlen);
    json_object_put(body);
    return r;
}

int agenta_api_interactions_cancel_stale(struct agenta_api *api, const char *session_id,
                                         const char *turn_id, const char *const *tokens,
                                         size_t ntokens, char *err, size_t errlen)
{
    json_object *body = agenta_cancel_stale_body(session_id, turn_id, tokens, ntokens);
    int r;

    r = post_json(api, AGENTA_PATH_INTERACTIONS_CANCEL_STALE, body, 1, 0, 0, NULL, NULL, NULL, err,
                  errlen);
    json_object_put(body);
    return r;
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
    r = post_json(api, AGENTA_PATH_TURNS, body, 1, 0, 0, NULL, &status, NULL, err, errlen);
    json_object_put(body);
    if (r < 0)
        return r;
    if (status == 409)
        return 1;
    if (status < 200 || status > 299) {
        util_seterr(err, errlen, "agenta api: POST %s: HTTP %ld", AGENTA_PATH_TURNS, status);
        return -EREMOTEIO;
    }
    return 0;
}

int agenta_api_turn_complete(struct agenta_api *api, const char *session_id, uint64_t turn_index,
                             const char *agent_session_id, const char *end_time, char *err,
                             size_t errlen)
{
    json_object *body =
        agenta_turn_complete_body(session_id, turn_index, agent_session_id, end_time);
    int r;

    r = post_json(api, AGENTA_PATH_TURNS_COMPLETE, body, 1, 0, 0, NULL, NULL, NULL, err, errlen);
    json_object_put(body);
    return r;
}

int agenta_api_turn_query_latest(struct agenta_api *api, const char *session_id,
                                 const char *harness_kind, struct agenta_turn_row *ret, char *err,
                                 size_t errlen)
{
    json_object *body = agenta_turn_query_body(session_id, harness_kind), *answer = NULL;
    int r;

    r = post_json(api, AGENTA_PATH_TURNS_QUERY, body, 1, 0, 0, NULL, NULL, &answer, err, errlen);
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
    CURL *esc = curl_easy_init();
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
    if (res.status < 200 || res.status > 299) {
        util_seterr(err, errlen, "agenta api: GET /sessions/attachments/{id}/content: HTTP %ld",
                    res.status);
        r = -EREMOTEIO;
        goto out;
    }
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

int agenta_api_attachments_reference(struct agenta_api *api, const char *session_id,
                                     const char *const *ids, size_t nids, char *err, size_t errlen)
{
    json_object *body;
    int r;

    if (nids == 0)
        return 0;
    body = agenta_attachments_reference_body(session_id, ids, nids);
    r = post_json(api, AGENTA_PATH_ATTACHMENTS_REFERENCE, body, 1, api->cfg.attachments_timeout_ms,
                  0, NULL, NULL, NULL, err, errlen);
    json_object_put(body);
    return r;
}
