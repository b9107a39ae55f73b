#include "tools/tool_http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_TIMEOUT_MS 30000u
#define HEADER_VALUE_MAX 8192
#define HEADER_NAME_MAX 128

struct xfer {
    CURL *h;
    bool head_done;
    const struct tool_http_request *rq;
    struct tool_http_response *res;
    int data_error;   /* -errno from on_data or the cap */
    bool pin_mismatch;
    bool cancelled;
};

bool tool_http_header_value_ok(const char *v)
{
    size_t n;

    if (!v)
        return false;
    n = strlen(v);
    if (n > HEADER_VALUE_MAX)
        return false;
    return strcspn(v, "\r\n") == n;
}

bool tool_http_header_name_ok(const char *n)
{
    static const char extra[] = "!#$%&'*+-.^_`|~";
    size_t len;

    if (!n)
        return false;
    len = strlen(n);
    if (len == 0 || len > HEADER_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)n[i]) && !strchr(extra, n[i]))
            return false;
    return true;
}

static void media_type(const char *ct, char *out, size_t outlen)
{
    size_t i = 0;

    out[0] = '\0';
    if (!ct)
        return;
    while (*ct == ' ')
        ct++;
    for (; ct[i] && ct[i] != ';' && ct[i] != ' ' && i + 1 < outlen; i++)
        out[i] = (char)tolower((unsigned char)ct[i]);
    out[i] = '\0';
}

static size_t on_body(char *ptr, size_t size, size_t n, void *ctx)
{
    struct xfer *x = ctx;
    struct buf *b = &x->res->body;
    size_t len = size * n, room = b->max - b->len, take = len;
    int r;

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
        char *ct = NULL;

        x->head_done = true;
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->res->status);
        curl_easy_getinfo(x->h, CURLINFO_CONTENT_TYPE, &ct);
        media_type(ct, x->res->content_type, sizeof(x->res->content_type));
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

static size_t on_header(char *ptr, size_t size, size_t n, void *ctx)
{
    struct xfer *x = ctx;
    size_t len = size * n, nlen;
    const char *name = x->rq->capture_header, *v, *end;

    if (len >= 5 && strncmp(ptr, "HTTP/", 5) == 0) {
        x->res->captured[0] = '\0'; /* a new response (after 1xx): forget the old headers */
        return len;
    }
    if (!name)
        return len;
    nlen = strlen(name);
    if (len <= nlen || ptr[nlen] != ':' || strncasecmp(ptr, name, nlen) != 0)
        return len;
    v = ptr + nlen + 1;
    end = ptr + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if ((size_t)(end - v) < sizeof(x->res->captured)) {
        memcpy(x->res->captured, v, (size_t)(end - v));
        x->res->captured[end - v] = '\0';
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
    if (x->rq->cancel && atomic_load(x->rq->cancel)) {
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

static int method_setup(CURL *h, const struct tool_http_request *rq)
{
    bool with_body;

    if (strcmp(rq->method, "GET") == 0) {
        if (rq->body)
            return -EINVAL;
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        return 0;
    }
    if (strcmp(rq->method, "DELETE") == 0) {
        with_body = rq->body != NULL;
    } else if (strcmp(rq->method, "POST") == 0 || strcmp(rq->method, "PUT") == 0) {
        with_body = true;
    } else {
        return -EINVAL;
    }
    if (with_body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)(rq->body ? rq->body_len : 0));
    }
    if (strcmp(rq->method, "POST") != 0)
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, rq->method);
    return 0;
}

static int map_error(CURLcode rc, const struct xfer *x, char *err, size_t errlen)
{
    if (x->cancelled) {
        snprintf(err, errlen, "cancelled");
        return -ECANCELED;
    }
    if (x->pin_mismatch) {
        snprintf(err, errlen, "connection reached an address other than the checked one");
        return -EPERM;
    }
    if (x->data_error) {
        snprintf(err, errlen, "%s",
                 x->data_error == -E2BIG ? "response body too large" : strerror(-x->data_error));
        return x->data_error;
    }
    snprintf(err, errlen, "%s", curl_easy_strerror(rc));
    if (rc == CURLE_OPERATION_TIMEDOUT)
        return -ETIMEDOUT;
    return -EIO;
}

int tool_http_perform(CURL *h, const struct tool_http_request *rq, struct tool_http_response *ret,
                      char *err, size_t errlen)
{
    struct curl_slist *headers = NULL, *resolve = NULL, *grown;
    struct tool_http_response res;
    struct xfer x = {.rq = rq, .res = &res};
    CURL *own = NULL;
    uint64_t timeout;
    char *ct = NULL;
    CURLcode rc;
    int r;

    memset(&res, 0, sizeof(res));
    buf_init(&res.body, rq->max_body);
    if (!rq->method || !rq->url || rq->max_body == 0 || rq->nheaders > TOOL_HTTP_HEADERS_MAX) {
        snprintf(err, errlen, "invalid request");
        return -EINVAL;
    }
    if (!h) {
        own = curl_easy_init();
        if (!own) {
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
        h = own;
    } else {
        curl_easy_reset(h);
    }
    x.h = h;
    r = method_setup(h, rq);
    if (r < 0) {
        snprintf(err, errlen, "unsupported method or a body on GET");
        goto out;
    }
    /* no "Expect: 100-continue" round trip for big bodies */
    headers = curl_slist_append(headers, "Expect:");
    if (!headers) {
        r = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < rq->nheaders; i++) {
        const char *line = rq->headers[i], *colon = strchr(line, ':');

        if (!colon || !tool_http_header_value_ok(colon + 1)) {
            snprintf(err, errlen, "invalid header line");
            r = -EINVAL;
            goto out;
        }
        grown = curl_slist_append(headers, line);
        if (!grown) {
            r = -ENOMEM;
            goto out;
        }
        headers = grown;
    }
    if (rq->pin_resolve) {
        resolve = curl_slist_append(NULL, rq->pin_resolve);
        if (!resolve) {
            r = -ENOMEM;
            goto out;
        }
        curl_easy_setopt(h, CURLOPT_RESOLVE, resolve);
    }
    timeout = rq->timeout_ms ? rq->timeout_ms : DEFAULT_TIMEOUT_MS;
    curl_easy_setopt(h, CURLOPT_URL, rq->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(timeout < TOOL_HTTP_CONNECT_MS_MAX ? timeout : TOOL_HTTP_CONNECT_MS_MAX));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
    curl_easy_setopt(h, CURLOPT_PREREQFUNCTION, on_prereq);
    curl_easy_setopt(h, CURLOPT_PREREQDATA, &x);
    if (rq->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, rq->ca_file);
    rc = curl_easy_perform(h);
    if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && (res.truncated || res.stopped))) {
        r = map_error(rc, &x, err, errlen);
        goto out;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &res.status);
    curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ct);
    media_type(ct, res.content_type, sizeof(res.content_type));
    *ret = res;
    memset(&res, 0, sizeof(res));
    r = 0;
out:
    if (r == -ENOMEM)
        snprintf(err, errlen, "out of memory");
    /* the handle may be reused: drop the pointers into our stack and lists */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(h, CURLOPT_RESOLVE, NULL);
    curl_slist_free_all(headers);
    curl_slist_free_all(resolve);
    buf_release(&res.body);
    if (own)
        curl_easy_cleanup(own);
    return r;
}

void tool_http_response_release(struct tool_http_response *res)
{
    if (!res)
        return;
    buf_release(&res->body);
    memset(res, 0, sizeof(*res));
}
