#include "http.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"

static const char *reason_of(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 202:
        return "Accepted";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 410:
        return "Gone";
    case 409:
        return "Conflict";
    case 413:
        return "Payload Too Large";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    default:
        return "Status";
    }
}

void http_parse_params(struct http_req *h, const char *method, const char *document_uri,
                       const char *request_uri, const char *content_length, const char *request_id)
{
    const char *p = document_uri ? document_uri : request_uri;

    memset(h, 0, sizeof(*h));
    snprintf(h->method, sizeof(h->method), "%s", method ? method : "");
    snprintf(h->path, sizeof(h->path), "%s", p ? p : "");
    h->path[strcspn(h->path, "?")] = '\0';
    /* a caller's id is echoed in a header and logs: only plain token characters */
    if (request_id && request_id[0] && strlen(request_id) < sizeof(h->request_id) &&
        strspn(request_id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
            strlen(request_id))
        snprintf(h->request_id, sizeof(h->request_id), "%s", request_id);
    else
        (void)util_random_hex(h->request_id, 16);
    if (content_length && content_length[0]) {
        h->has_length = true;
        if (util_parse_u64(content_length, 0, UINT64_MAX, &h->content_length) < 0)
            h->bad_length = true; /* refused by http_read_body */
    }
}

void http_req_init(struct http_req *h, FCGX_Request *fr)
{
    http_parse_params(
        h, FCGX_GetParam("REQUEST_METHOD", fr->envp), FCGX_GetParam("DOCUMENT_URI", fr->envp),
        FCGX_GetParam("REQUEST_URI", fr->envp), FCGX_GetParam("CONTENT_LENGTH", fr->envp),
        FCGX_GetParam("HTTP_X_REQUEST_ID", fr->envp));
    h->fr = fr;
}

const char *http_param(const struct http_req *h, const char *name)
{
    return FCGX_GetParam(name, h->fr->envp);
}

int http_read_body(struct http_req *h, uint64_t max, struct buf *out)
{
    char chunk[65536];
    uint64_t left;
    int r;

    if (!h->has_length || h->content_length == 0)
        return 0;
    if (h->bad_length)
        return -EINVAL;
    if (h->content_length > max)
        return -EFBIG;
    left = h->content_length;
    while (left > 0) {
        int want = left > sizeof(chunk) ? (int)sizeof(chunk) : (int)left;
        int n = FCGX_GetStr(chunk, want, h->fr->in);
        if (n <= 0)
            return -EBADMSG;
        r = buf_append(out, chunk, (size_t)n);
        if (r < 0)
            return r;
        left -= (uint64_t)n;
    }
    return 0;
}

static void put_headers(struct http_req *h, int status, const char *type, const char *extra)
{
    FCGX_FPrintF(h->fr->out,
                 "Status: %d %s\r\nContent-Type: %s\r\nCache-Control: no-cache\r\n"
                 "X-Request-Id: %s\r\n%s\r\n",
                 status, reason_of(status), type, h->request_id, extra ? extra : "");
    h->headers_sent = true;
}

void http_json(struct http_req *h, int status, json_object *body)
{
    size_t n;
    const char *text = jsonx_text(body, &n);

    put_headers(h, status, "application/json", NULL);
    FCGX_PutStr(text, (int)n, h->fr->out);
    FCGX_PutStr("\n", 1, h->fr->out);
}

void http_error(struct http_req *h, int status, const char *msg)
{
    json_object *o = json_object_new_object();

    json_object_object_add(o, "ok", json_object_new_boolean(0));
    json_object_object_add(o, "error", json_object_new_string(msg));
    http_json(h, status, o);
    json_object_put(o);
}

/* The extra headers of a stream: unbuffered, and the turn it is (when one fits). */
static void stream_headers(char *out, size_t outlen, const char *turn_id)
{
    /* a turn id has no control characters (request.c, cluster_relay.c) */
    if (turn_id && strlen(turn_id) < outlen - 64)
        snprintf(out, outlen, "X-Accel-Buffering: no\r\nX-Agent-Runner-Turn: %s\r\n", turn_id);
    else
        snprintf(out, outlen, "X-Accel-Buffering: no\r\n");
}

void http_start(struct http_req *h, int status, const char *content_type, const char *turn_id)
{
    bool ndjson = strcmp(content_type, "application/x-ndjson") == 0;
    char extra[256];

    stream_headers(extra, sizeof(extra), turn_id);
    put_headers(h, status, content_type, ndjson ? extra : NULL);
    if (FCGX_FFlush(h->fr->out) < 0)
        h->client_gone = true;
}

void http_stream_start(struct http_req *h, const char *turn_id)
{
    char extra[256];

    stream_headers(extra, sizeof(extra), turn_id);
    put_headers(h, 200, "application/x-ndjson", extra);
    if (FCGX_FFlush(h->fr->out) < 0)
        h->client_gone = true;
}

int http_query_get(const char *query, const char *name, char *out, size_t outlen)
{
    size_t nlen = strlen(name);
    const char *p = query;

    if (!query || outlen == 0 || nlen == 0)
        return 0;
    while (*p) {
        const char *end = strchr(p, '&'), *eq;
        size_t len = end ? (size_t)(end - p) : strlen(p);

        eq = memchr(p, '=', len);
        if ((size_t)((eq ? eq : p + len) - p) == nlen && memcmp(p, name, nlen) == 0) {
            int r = eq ? util_percent_decode(eq + 1, len - nlen - 1, true, out, outlen)
                       : util_percent_decode("", 0, true, out, outlen);
            return r < 0 ? r : 1;
        }
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

bool http_client_alive(void *ctx)
{
    struct http_req *h = ctx;
    struct pollfd p = {.fd = h->fr->ipcFd, .events = POLLRDHUP};

    if (h->client_gone)
        return false;
    if (p.fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        h->client_gone = true;
    return !h->client_gone;
}

int http_stream_write(void *ctx, const char *line, size_t len)
{
    struct http_req *h = ctx;

    if (h->client_gone)
        return -1;
    while (len > 0) {
        int part = len > (1u << 30) ? (1 << 30) : (int)len;
        if (FCGX_PutStr(line, part, h->fr->out) != part) {
            h->client_gone = true;
            return -1;
        }
        line += part;
        len -= (size_t)part;
    }
    return 0;
}

int http_stream_flush(void *ctx)
{
    struct http_req *h = ctx;

    if (h->client_gone)
        return -1;
    if (FCGX_FFlush(h->fr->out) < 0 || FCGX_GetError(h->fr->out) != 0) {
        h->client_gone = true;
        return -1;
    }
    return 0;
}
