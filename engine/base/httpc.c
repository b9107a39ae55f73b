#include "base/httpc.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/util.h"

#define ABORT_POLL_MS 20

/* ---- libcurl, once per process; a handle per thread ------------------------------------- */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t handle_key;
static bool handle_key_ok;

static void global_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void handle_free(void *h)
{
    curl_easy_cleanup(h);
}

static void key_init(void)
{
    handle_key_ok = pthread_key_create(&handle_key, handle_free) == 0;
}

CURL *httpc_handle_new(void)
{
    pthread_once(&global_once, global_init);
    return curl_easy_init();
}

CURL *httpc_thread_handle(void)
{
    CURL *h;

    pthread_once(&global_once, global_init);
    pthread_once(&key_once, key_init);
    if (!handle_key_ok)
        return NULL;
    h = pthread_getspecific(handle_key);
    if (h)
        return h;
    h = curl_easy_init();
    if (h && pthread_setspecific(handle_key, h) != 0) {
        curl_easy_cleanup(h);
        h = NULL;
    }
    return h;
}

/* ---- policies ---------------------------------------------------------------------------- */

int httpc_curl_errno(CURLcode rc)
{
    switch (rc) {
    case CURLE_OK:
        return 0;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return -EHOSTUNREACH;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
        return -ECONNRESET;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
        return -EPROTO;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    case CURLE_ABORTED_BY_CALLBACK:
        return -ECANCELED;
    default:
        return -EIO;
    }
}

int httpc_status_errno(long status)
{
    switch (status) {
    case 400:
        return -EINVAL;
    case 401:
    case 403:
        return -EACCES;
    case 404:
        return -ENOENT;
    case 408:
        return -ETIMEDOUT;
    default:
        return -EPROTO;
    }
}

bool httpc_status_retryable(long status)
{
    return status == 408 || status == 425 || status == 429 || (status >= 500 && status <= 599);
}

uint64_t httpc_backoff_ms(enum httpc_backoff b, uint64_t base_ms, unsigned attempt, uint64_t cap_ms)
{
    uint64_t d;

    if (cap_ms == 0)
        cap_ms = HTTPC_BACKOFF_CAP_MS;
    if (attempt == 0)
        attempt = 1;
    if (b == HTTPC_BACKOFF_LINEAR) {
        d = base_ms * attempt;
    } else {
        if (attempt > 40)
            return cap_ms;
        d = base_ms << (attempt - 1);
    }
    return d > cap_ms ? cap_ms : d;
}

int64_t httpc_retry_after_ms(const char *value, int64_t now_wall_ms)
{
    uint64_t secs;
    int64_t delta;
    time_t when;
    int r;

    if (!value || !value[0])
        return -EINVAL;
    if (strspn(value, "0123456789") == strlen(value)) {
        r = util_parse_u64(value, 0, HTTPC_RETRY_AFTER_MAX_S, &secs);
        return r < 0 ? r : (int64_t)secs * 1000;
    }
    when = curl_getdate(value, NULL);
    if (when == -1)
        return -EINVAL;
    delta = (int64_t)when * 1000 - now_wall_ms;
    if (delta > (int64_t)HTTPC_RETRY_AFTER_MAX_S * 1000)
        return -ERANGE;
    return delta > 0 ? delta : 0;
}

/* ---- one transfer ------------------------------------------------------------------------ */

struct xfer {
    CURL *h;
    const struct httpc_request *rq;
    struct httpc_response *res;
    bool head_done;
    bool head_given; /* on_head was called for the current answer */
    long head_status;
    struct buf head; /* the current answer's header lines, for on_head */
    int data_error;  /* -errno from on_data, on_head or the cap */
    bool pin_mismatch;
    bool cancelled;
    int64_t retry_after_ms; /* the longest Retry-After(-scope) of the answer, -1 when none */
};

/* The media type of a Content-Type value: lower case, no parameters; "" when it does not fit. */
static void media_type(const char *ct, char *out, size_t outlen)
{
    size_t i = 0;

    out[0] = '\0';
    if (!ct)
        return;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    for (; ct[i] && ct[i] != ';' && ct[i] != ' ' && ct[i] != '\t'; i++) {
        if (i + 1 >= outlen) {
            out[0] = '\0';
            return;
        }
        out[i] = (char)tolower((unsigned char)ct[i]);
    }
    out[i] = '\0';
}

static void head_info(struct xfer *x)
{
    char *ct = NULL;

    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->res->status);
    curl_easy_getinfo(x->h, CURLINFO_CONTENT_TYPE, &ct);
    media_type(ct, x->res->content_type, sizeof(x->res->content_type));
}

static size_t on_body(char *ptr, size_t size, size_t n, void *ctx)
{
    struct xfer *x = ctx;
    struct buf *b = &x->res->body;
    size_t len = size * n, room = b->max - b->len, take = len;
    int r;

    if (x->rq->discard_body) {
        /* nothing kept; a streaming caller (on_data) still sees every piece */
        if (!x->head_done) {
            x->head_done = true;
            head_info(x);
        }
        if (x->rq->on_data && len > 0) {
            r = x->rq->on_data(x->rq->on_data_ctx, x->res, ptr, len);
            if (r != 0) {
                x->data_error = r < 0 ? r : 0;
                x->res->stopped = r > 0;
                return 0;
            }
        }
        return len;
    }
    if (len > room) {
        if (!x->rq->truncate_ok) {
            x->data_error = -E2BIG;
            return 0;
        }
        take = room;
    }
    if (take > 0 && buf_append(b, ptr, take) < 0) {
        x->data_error = -ENOMEM;
        return 0;
    }
    if (!x->head_done) {
        x->head_done = true;
        head_info(x);
    }
    if (x->rq->on_data && take > 0) {
        r = x->rq->on_data(x->rq->on_data_ctx, x->res, ptr, take);
        if (r < 0) {
            x->data_error = r;
            return 0;
        }
        if (r > 0) {
            x->res->stopped = true;
            return 0;
        }
    }
    if (take < len) {
        x->res->truncated = true;
        return 0;
    }
    return len;
}

/* The value of a "name: value" header line (not NUL-terminated), trimmed. */
static void header_value(const char *line, size_t len, size_t nlen, const char **ret_v,
                         size_t *ret_len)
{
    const char *v = line + nlen + 1, *end = line + len;

    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    *ret_v = v;
    *ret_len = (size_t)(end - v);
}

/* Retry-After and Retry-After-<scope> (Daytona's): the longest wait counts. */
static void note_retry_after(struct xfer *x, const char *line, size_t len)
{
    const char *colon = memchr(line, ':', len), *v;
    char val[64];
    size_t vlen;
    int64_t ms;

    if (!colon)
        return;
    header_value(line, len, (size_t)(colon - line), &v, &vlen);
    if (vlen == 0 || vlen >= sizeof(val))
        return;
    memcpy(val, v, vlen);
    val[vlen] = '\0';
    ms = httpc_retry_after_ms(val, util_wall_ms());
    if (ms > x->retry_after_ms)
        x->retry_after_ms = ms;
}

/* The status of a status line "HTTP/<v> <code> ...", 0 when there is none. */
static long status_of(const char *line, size_t len)
{
    const char *sp = memchr(line, ' ', len);
    size_t at = sp ? (size_t)(sp - line) + 1 : len;
    long code = 0;

    if (at + 3 > len)
        return 0;
    for (size_t i = at; i < at + 3; i++) {
        if (line[i] < '0' || line[i] > '9')
            return 0;
        code = code * 10 + (line[i] - '0');
    }
    return code;
}

/* on_head's part of a header line: collect the lines, call it at the blank line that ends a
 * final (non-1xx) answer's head. false when the exchange must stop. */
static bool head_line(struct xfer *x, const char *ptr, size_t len)
{
    int r;

    if (!x->rq->on_head || x->head_given)
        return true;
    if (len > 2 || (len > 0 && ptr[0] != '\r' && ptr[0] != '\n')) {
        if (buf_append(&x->head, ptr, len) == 0)
            return true;
        x->data_error = -E2BIG;
        return false;
    }
    if (x->head_status < 200)
        return true; /* the end of a 1xx answer: the final one follows */
    x->head_given = true;
    r = x->rq->on_head(x->rq->on_data_ctx, x->head_status, x->head.data ? x->head.data : "",
                       x->head.len);
    if (r < 0) {
        x->data_error = r;
        return false;
    }
    return true;
}

static size_t on_header(char *ptr, size_t size, size_t n, void *ctx)
{
    struct xfer *x = ctx;
    size_t len = size * n, nlen, vlen;
    const char *name = x->rq->capture_header, *v;

    if (len >= 5 && strncmp(ptr, "HTTP/", 5) == 0) {
        /* a new response (after a 1xx): forget the previous one's headers */
        x->res->captured[0] = '\0';
        x->retry_after_ms = -1;
        x->head_status = status_of(ptr, len);
        buf_reset(&x->head);
        return len;
    }
    if (!head_line(x, ptr, len))
        return 0;
    if (len > 11 && strncasecmp(ptr, "retry-after", 11) == 0)
        note_retry_after(x, ptr, len);
    if (!name)
        return len;
    nlen = strlen(name);
    if (len <= nlen || ptr[nlen] != ':' || strncasecmp(ptr, name, nlen) != 0)
        return len;
    header_value(ptr, len, nlen, &v, &vlen);
    if (vlen < sizeof(x->res->captured)) {
        memcpy(x->res->captured, v, vlen);
        x->res->captured[vlen] = '\0';
    } else {
        x->res->captured[0] = '\0';
    }
    return len;
}

static int on_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    struct xfer *x = ctx;

    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    if (x->rq->aborted && x->rq->aborted(x->rq->abort_ctx)) {
        x->cancelled = true;
        return 1;
    }
    return 0;
}

/* Two textual IP addresses name the same address (compared in binary, whatever the notation). */
static bool same_address(const char *a, const char *b)
{
    unsigned char ba[16], bb[16];

    if (inet_pton(AF_INET, a, ba) == 1)
        return inet_pton(AF_INET, b, bb) == 1 && memcmp(ba, bb, 4) == 0;
    if (inet_pton(AF_INET6, a, ba) == 1)
        return inet_pton(AF_INET6, b, bb) == 1 && memcmp(ba, bb, 16) == 0;
    return false;
}

/* The connection is up, nothing was sent yet: it must have reached the pinned address. */
static int on_prereq(void *ctx, char *conn_primary_ip, char *conn_local_ip, int conn_primary_port,
                     int conn_local_port)
{
    struct xfer *x = ctx;

    (void)conn_local_ip;
    (void)conn_primary_port;
    (void)conn_local_port;
    if (x->rq->pin_addr && !same_address(conn_primary_ip, x->rq->pin_addr)) {
        x->pin_mismatch = true;
        return CURL_PREREQFUNC_ABORT;
    }
    return CURL_PREREQFUNC_OK;
}

/* ---- building the request ---------------------------------------------------------------- */

static bool method_ok(const char *m)
{
    size_t n = strlen(m);

    return n > 0 && n <= 16 && strspn(m, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == n;
}

static int set_method(CURL *h, const struct httpc_request *rq)
{
    const char *m = rq->method ? rq->method : "GET";
    bool post = strcmp(m, "POST") == 0;

    if (!method_ok(m))
        return -EINVAL;
    if (strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0) {
        if (rq->body || rq->mime)
            return -EINVAL;
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        if (m[0] == 'H') /* an answer without a body, whatever its Content-Length says */
            curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        return 0;
    }
    if (rq->mime) {
        curl_easy_setopt(h, CURLOPT_MIMEPOST, rq->mime);
    } else if (rq->body || post) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(rq->body ? rq->body_len : 0));
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
    }
    if (!post)
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, m);
    return 0;
}

static int header_list(const struct httpc_request *rq, struct curl_slist **ret)
{
    struct curl_slist *list = NULL, *grown;

    if (rq->nheaders > HTTPC_HEADERS_MAX)
        return -EINVAL;
    for (size_t i = 0; i < rq->nheaders; i++) {
        const char *line = rq->headers[i];

        if (!line || !strchr(line, ':') || strpbrk(line, "\r\n")) {
            curl_slist_free_all(list);
            return -EINVAL;
        }
        grown = curl_slist_append(list, line);
        if (!grown) {
            curl_slist_free_all(list);
            return -ENOMEM;
        }
        list = grown;
    }
    *ret = list;
    return 0;
}

/* Every option of the exchange on h (reset before). */
static int set_options(CURL *h, const struct httpc_request *rq, struct xfer *x,
                       struct curl_slist *headers, struct curl_slist *resolve)
{
    uint64_t timeout = rq->timeout_ms ? rq->timeout_ms : HTTPC_TIMEOUT_DEFAULT_MS;
    uint64_t connect = rq->connect_timeout_ms ? rq->connect_timeout_ms : timeout;

    if (connect > timeout)
        connect = timeout;
    curl_easy_setopt(h, CURLOPT_URL, rq->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)connect);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    if (rq->aborted) {
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
    }
    if (rq->no_proxy)
        curl_easy_setopt(h, CURLOPT_PROXY, "");
    if (resolve)
        curl_easy_setopt(h, CURLOPT_RESOLVE, resolve);
    if (rq->pin_addr) {
        curl_easy_setopt(h, CURLOPT_PREREQFUNCTION, on_prereq);
        curl_easy_setopt(h, CURLOPT_PREREQDATA, x);
    }
    if (rq->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, rq->ca_file);
    if (rq->bearer) {
        curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        curl_easy_setopt(h, CURLOPT_XOAUTH2_BEARER, rq->bearer);
    }
    if (rq->user_agent)
        curl_easy_setopt(h, CURLOPT_USERAGENT, rq->user_agent);
    if (rq->tcp_keepalive)
        curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    return set_method(h, rq);
}

/* ---- the exchange ------------------------------------------------------------------------ */

/* One attempt: 0 with res->status set, or -errno with err set. */
static int attempt(struct xfer *x, char *err, size_t errlen)
{
    struct httpc_response *res = x->res;
    CURLcode rc;

    buf_reset(&res->body);
    res->status = 0;
    res->content_type[0] = '\0';
    res->captured[0] = '\0';
    res->truncated = res->stopped = false;
    x->head_done = x->pin_mismatch = x->cancelled = x->head_given = false;
    x->head_status = 0;
    buf_reset(&x->head);
    x->data_error = 0;
    x->retry_after_ms = -1;
    rc = curl_easy_perform(x->h);
    if (x->cancelled)
        return util_fail(-ECANCELED, err, errlen, "cancelled");
    if (x->pin_mismatch)
        return util_fail(-EPERM, err, errlen,
                         "connection reached an address other than the checked one");
    if (x->data_error)
        return util_fail(x->data_error, err, errlen, "%s",
                         x->data_error == -E2BIG ? "response body too large"
                                                 : strerror(-x->data_error));
    if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && (res->truncated || res->stopped)))
        return util_fail(httpc_curl_errno(rc), err, errlen, "%s", curl_easy_strerror(rc));
    head_info(x);
    if (res->status <= 0)
        return util_fail(-EPROTO, err, errlen, "no HTTP status in the answer");
    return 0;
}

static bool aborted(const struct httpc_request *rq)
{
    return rq->aborted && rq->aborted(rq->abort_ctx);
}

/* Sleep ms, waking every ABORT_POLL_MS to ask the abort callback: -ECANCELED when it fired. */
static int pause_ms(const struct httpc_request *rq, uint64_t ms)
{
    int64_t until = util_now_ms() + (int64_t)ms;

    for (;;) {
        int64_t left = until - util_now_ms();
        struct timespec ts;

        if (aborted(rq))
            return -ECANCELED;
        if (left <= 0)
            return 0;
        if (rq->aborted && left > ABORT_POLL_MS)
            left = ABORT_POLL_MS;
        ts.tv_sec = (time_t)(left / 1000);
        ts.tv_nsec = (long)(left % 1000) * 1000000L;
        nanosleep(&ts, NULL);
    }
}

/* Whether the outcome r of an attempt (0: an answer in res) is worth another one. */
static bool worth_retrying(const struct httpc_retry *p, int r, const struct httpc_response *res)
{
    if (r == 0)
        return p->status_retryable ? p->status_retryable(res->status)
                                   : httpc_status_retryable(res->status);
    return p->transport && r != -ECANCELED && r != -E2BIG && r != -ENOMEM && r != -EINVAL &&
           r != -EPERM;
}

static uint64_t wait_ms(const struct httpc_retry *p, unsigned n, int64_t retry_after_ms)
{
    uint64_t cap = p->cap_ms ? p->cap_ms : HTTPC_BACKOFF_CAP_MS;

    /* a Retry-After of 0 (or a date that passed) falls back to the backoff */
    if (p->retry_after && retry_after_ms > 0)
        return (uint64_t)retry_after_ms > cap ? cap : (uint64_t)retry_after_ms;
    return httpc_backoff_ms(p->backoff, p->base_ms, n, cap);
}

static int exchange(struct xfer *x, char *err, size_t errlen)
{
    const struct httpc_retry *p = &x->rq->retry;
    unsigned attempts = p->attempts ? p->attempts : 1;
    int r = -EIO;

    for (unsigned n = 1; n <= attempts; n++) {
        r = attempt(x, err, errlen);
        x->res->attempts = n;
        if (n == attempts || !worth_retrying(p, r, x->res))
            break;
        if (pause_ms(x->rq, wait_ms(p, n, x->retry_after_ms)) < 0) {
            if (r == 0)
                break; /* keep the last answer */
            r = util_fail(-ECANCELED, err, errlen, "cancelled");
            break;
        }
    }
    return r;
}

int httpc_perform(CURL *h, const struct httpc_request *rq, struct httpc_response *ret, char *err,
                  size_t errlen)
{
    struct curl_slist *headers = NULL, *resolve = NULL;
    struct httpc_response res;
    struct xfer x = {.rq = rq, .res = &res};
    CURL *own = NULL;
    int r;

    memset(&res, 0, sizeof(res));
    buf_init(&res.body, rq->max_body);
    buf_init(&x.head, HTTPC_HEAD_MAX);
    if (!rq->url || (rq->max_body == 0 && !rq->discard_body))
        return util_fail(-EINVAL, err, errlen, "invalid request");
    r = header_list(rq, &headers);
    if (r < 0)
        return util_fail(r, err, errlen, r == -ENOMEM ? "out of memory" : "invalid header line");
    pthread_once(&global_once, global_init);
    if (!h) {
        own = curl_easy_init();
        h = own;
    }
    if (rq->pin_resolve)
        resolve = curl_slist_append(NULL, rq->pin_resolve);
    if (!h || (rq->pin_resolve && !resolve)) {
        r = util_fail(-ENOMEM, err, errlen, "out of memory");
        goto out;
    }
    x.h = h;
    curl_easy_reset(h);
    r = set_options(h, rq, &x, headers, resolve);
    if (r < 0) {
        util_seterr(err, errlen, "unsupported method or a body on GET");
        goto out;
    }
    r = exchange(&x, err, errlen);
    if (r == 0) {
        *ret = res;
        memset(&res, 0, sizeof(res));
    }
out:
    /* the handle may be reused: drop every pointer into this call's stack and lists */
    if (h)
        curl_easy_reset(h);
    curl_slist_free_all(headers);
    curl_slist_free_all(resolve);
    buf_release(&res.body);
    buf_release(&x.head);
    if (own)
        curl_easy_cleanup(own);
    return r;
}

void httpc_response_release(struct httpc_response *res)
{
    if (!res)
        return;
    buf_release(&res->body);
    memset(res, 0, sizeof(*res));
}

bool httpc_header_name_ok(const char *n)
{
    static const char extra[] = "!#$%&'*+-.^_`|~";
    size_t len;

    if (!n)
        return false;
    len = strlen(n);
    if (len == 0 || len > HTTPC_HEADER_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)n[i]) && !strchr(extra, n[i]))
            return false;
    return true;
}

bool httpc_header_value_ok(const char *v)
{
    size_t n;

    if (!v)
        return false;
    n = strlen(v);
    return n <= HTTPC_HEADER_VALUE_MAX && strcspn(v, "\r\n") == n;
}
