/*
 * gateway_conn — one connection of a model gateway (gateway_conn.h): requests in, answers out.
 */
#include "gateway/gateway_conn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/httpc.h"
#include "base/jsonx.h"
#include "base/util.h"

#define HEAD_WAIT_MS 30000 /* the rest of a head, once its first byte came */
#define BODY_WAIT_MS 60000 /* the next piece of a request body */
#define CONNECT_MS 30000
#define UPSTREAM_HEADERS_MAX 120
#define BUDGET_STEP (256u * 1024)
#define LINGER_MS 2000                   /* a refused body still being sent: read and dropped */
#define LINGER_BYTES (64u * 1024 * 1024) /* ... at most this much */

/* Queue the call's report for the poll loop (once per call). */
static void report_call(struct gateway_conn *c)
{
    if (c->reported)
        return;
    c->reported = true;
    c->rep.ms = util_now_ms() - c->t0;
    if (c->rep.event == MODEL_GATEWAY_CALL)
        c->rep.usage = c->usage.counts;
    if (!c->rep.model[0] && c->usage.model[0])
        snprintf(c->rep.model, sizeof(c->rep.model), "%s", c->usage.model);
    model_gateway_queue(c->g, &c->rep);
}

/* ---- writing to the sandbox --------------------------------------------------------------- */

static int send_all(struct gateway_conn *c, const struct iovec *iov, int n)
{
    struct iovec v[4];
    struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)n};

    memcpy(v, iov, sizeof(v[0]) * (size_t)n);
    while (m.msg_iovlen > 0) {
        ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
        size_t k;

        if (w == -1 && errno == EINTR)
            continue;
        if (w == -1) {
            c->gone = true;
            return -EPIPE;
        }
        k = (size_t)w;
        while (m.msg_iovlen > 0 && k >= m.msg_iov[0].iov_len) {
            k -= m.msg_iov[0].iov_len;
            m.msg_iov++;
            m.msg_iovlen--;
        }
        if (m.msg_iovlen > 0) {
            m.msg_iov[0].iov_base = (char *)m.msg_iov[0].iov_base + k;
            m.msg_iov[0].iov_len -= k;
        }
    }
    return 0;
}

static int send_text(struct gateway_conn *c, const char *s, size_t n)
{
    struct iovec v = {.iov_base = (void *)s, .iov_len = n};

    return send_all(c, &v, 1);
}

static const char *reason_phrase(long status)
{
    switch (status) {
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 204:
        return "No Content";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 413:
        return "Content Too Large";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return status < 400 ? "OK" : "Error";
    }
}

/*
 * A connection closed after an answer while the sandbox may still be sending its body: stop
 * writing, read and drop what comes (at most LINGER_BYTES, LINGER_MS) so the client sees the
 * answer instead of a reset (nginx's lingering close).
 */
static void linger(struct gateway_conn *c)
{
    int64_t until = util_now_ms() + LINGER_MS;
    uint64_t dropped = 0;
    char chunk[16384];

    shutdown(c->fd, SHUT_WR);
    while (dropped < LINGER_BYTES && !model_gateway_stopping(c->g)) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int64_t left = until - util_now_ms();
        ssize_t n;

        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return;
        n = recv(c->fd, chunk, sizeof(chunk), 0);
        if (n <= 0)
            return;
        dropped += (uint64_t)n;
    }
}

/* An answer of the gateway's own, in the error shape of the call's API. */
static void answer_error(struct gateway_conn *c, long status, const char *msg, bool keep)
{
    json_object *o = json_object_new_object(), *e = json_object_new_object();
    const char *body;
    struct buf out;

    json_object_object_add(e, "type", json_object_new_string("agent_runner_model_gateway"));
    json_object_object_add(e, "message", json_object_new_string(msg));
    if (c->api == GATEWAY_API_MESSAGES)
        json_object_object_add(o, "type", json_object_new_string("error"));
    json_object_object_add(o, "error", e);
    body = jsonx_text(o, NULL);
    buf_init(&out, 16 * 1024);
    buf_printf(&out,
               "HTTP/1.%d %ld %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
               "Connection: %s\r\n\r\n%s",
               c->req.minor, status, reason_phrase(status), body ? strlen(body) : 0,
               keep ? "keep-alive" : "close", body ? body : "");
    (void)send_text(c, buf_str(&out), out.len);
    buf_release(&out);
    json_object_put(o);
}

/* A refusal: answered, reported, counted. */
static void refuse(struct gateway_conn *c, long status, const char *why, bool keep)
{
    c->rep.event = MODEL_GATEWAY_REFUSED;
    c->rep.status = status;
    snprintf(c->rep.why, sizeof(c->rep.why), "%.250s", why);
    report_call(c);
    answer_error(c, status, why, keep);
}

/* ---- reading from the sandbox ------------------------------------------------------------- */

/* Wait for bytes (at most ms) and append what came to c->in. 0, -ETIMEDOUT, -EPIPE. */
static int read_more(struct gateway_conn *c, int ms, size_t max)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    char chunk[16384];
    ssize_t n;
    int r;

    do {
        r = poll(&p, 1, ms);
    } while (r == -1 && errno == EINTR);
    if (r == 0)
        return -ETIMEDOUT;
    if (r < 0 || model_gateway_stopping(c->g))
        return -EPIPE;
    do {
        n = recv(c->fd, chunk, sizeof(chunk), 0);
    } while (n == -1 && errno == EINTR);
    if (n <= 0)
        return -EPIPE;
    if (c->in.len + (size_t)n > max || buf_append(&c->in, chunk, (size_t)n) < 0)
        return -E2BIG;
    return 0;
}

/* The next request's head into c->head / c->req (its bytes consumed from c->in). 1 ok, 0 the
 * connection ends. */
static int read_head(struct gateway_conn *c)
{
    char err[160];
    ssize_t end;
    int r;

    for (;;) {
        end = gateway_http_head_end(c->in.data ? c->in.data : "", c->in.len);
        if (end > 0)
            break;
        if (end < 0) {
            answer_error(c, 431, "request head too large", false);
            return 0;
        }
        r = read_more(c, c->in.len ? HEAD_WAIT_MS : MODEL_GATEWAY_IDLE_MS,
                      GATEWAY_HTTP_HEAD_MAX + 16384);
        if (r < 0)
            return 0;
    }
    /* c->req points into c->head, which stays put while c->in moves on */
    buf_reset(&c->head);
    if (buf_append(&c->head, c->in.data, (size_t)end) < 0)
        return 0;
    buf_consume(&c->in, (size_t)end);
    r = gateway_http_parse(c->head.data, c->head.len, &c->req, err, sizeof(err));
    if (r < 0) {
        answer_error(c, r == -ENOSYS ? 501 : r == -E2BIG ? 431 : 400, err, false);
        return 0;
    }
    return 1;
}

/* Decode what c->in holds of a chunked body into body. 0 (c->in consumed), -E2BIG past the
 * cap, -EBADMSG for a malformed body, -EBUSY when the budget is spent. */
static int chunked_step(struct gateway_conn *c, struct gateway_chunked *ch, struct buf *body,
                        uint64_t cap, uint64_t *held)
{
    char tmp[16384];
    size_t pos = 0;

    while (pos < c->in.len && !ch->done) {
        size_t room = (size_t)(cap - body->len), got = 0;
        bool limited = room > sizeof(tmp);
        ssize_t used = gateway_chunked_decode(ch, c->in.data + pos, c->in.len - pos, tmp,
                                              limited ? sizeof(tmp) : room, &got);

        if (used < 0)
            return -EBADMSG;
        while (body->len + got > *held) {
            if (!model_gateway_budget_take(c->g, BUDGET_STEP))
                return -EBUSY;
            *held += BUDGET_STEP;
        }
        if (got && buf_append(body, tmp, got) < 0)
            return -E2BIG;
        pos += (size_t)used;
        if (used == 0 && got == 0)
            return -E2BIG; /* a chunk's data with no room left under the cap */
    }
    buf_consume(&c->in, pos);
    return 0;
}

/* The request body (after the head) into body. 0, or <0 with the refusal answered. */
static int read_body(struct gateway_conn *c, const struct gateway_route *route, struct buf *body,
                     uint64_t *held)
{
    uint64_t cap = route ? route->max_request_bytes : GATEWAY_ROUTE_REQUEST_DEFAULT;
    struct gateway_chunked ch;
    int r;

    if (c->req.has_length && c->req.length > cap) {
        refuse(c, 413, "request body larger than the model gateway's cap", false);
        if (!c->req.expect_100)
            linger(c);
        return -E2BIG;
    }
    if (!c->req.has_length && !c->req.chunked)
        return 0;
    if (c->req.has_length) {
        if (!model_gateway_budget_take(c->g, c->req.length))
            goto busy;
        *held = c->req.length;
    }
    if (c->req.expect_100 && send_text(c, "HTTP/1.1 100 Continue\r\n\r\n", 25) < 0)
        return -EPIPE;
    gateway_chunked_init(&ch);
    for (;;) {
        if (c->req.chunked) {
            r = chunked_step(c, &ch, body, cap, held);
            if (r == -EBUSY)
                goto busy;
            if (r == -E2BIG) {
                refuse(c, 413, "request body larger than the model gateway's cap", false);
                linger(c);
                return r;
            }
            if (r < 0) {
                answer_error(c, 400, "malformed chunked request body", false);
                return r;
            }
            if (ch.done)
                return 0;
        } else {
            size_t take = (size_t)c->req.length - body->len;
            if (take > c->in.len)
                take = c->in.len;
            if (buf_append(body, c->in.data, take) < 0)
                return -ENOMEM;
            buf_consume(&c->in, take);
            if (body->len == c->req.length)
                return 0;
        }
        r = read_more(c, BODY_WAIT_MS, GATEWAY_HTTP_HEAD_MAX + 256 * 1024);
        if (r < 0)
            return r;
    }
busy:
    refuse(c, 503, "the model gateway holds too many request bodies at once", false);
    return -EBUSY;
}

/*
 * The body's "model", and a Chat Completions stream made to report its usage
 * (stream_options.include_usage), as the gateway must read it. A body that is not a JSON
 * object (or is compressed) is forwarded as it is, with no model.
 */
static void inspect_body(struct gateway_conn *c, struct buf *body)
{
    json_tokener *tok;
    json_object *o, *so;
    const char *model, *text;
    size_t n;

    if (body->len == 0 || gateway_http_field(&c->req, "content-encoding"))
        return;
    tok = json_tokener_new_ex(256); /* tool schemas nest deeply */
    o = tok ? json_tokener_parse_ex(tok, body->data, (int)body->len) : NULL;
    json_tokener_free(tok);
    if (!o || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return;
    }
    model = jsonx_str(o, "model");
    if (model)
        snprintf(c->rep.model, sizeof(c->rep.model), "%s", model);
    so = jsonx_get(o, "stream_options");
    if (c->api == GATEWAY_API_CHAT && json_object_get_boolean(jsonx_get(o, "stream")) &&
        !json_object_get_boolean(jsonx_get(so, "include_usage"))) {
        if (!so || !json_object_is_type(so, json_type_object)) {
            so = json_object_new_object();
            json_object_object_add(o, "stream_options", so);
        }
        json_object_object_add(so, "include_usage", json_object_new_boolean(1));
        text = jsonx_text(o, &n);
        if (text) {
            buf_reset(body);
            if (buf_append(body, text, n) < 0)
                buf_reset(body);
        }
    }
    json_object_put(o);
}

/* ---- forwarding --------------------------------------------------------------------------- */

static bool client_gone(struct gateway_conn *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};

    if (c->gone || model_gateway_stopping(c->g))
        return true;
    if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        c->gone = true;
    return c->gone;
}

static bool on_abort(void *ctx)
{
    return client_gone(ctx);
}

/* Response header names that are the gateway's own business on the sandbox's side. */
static bool hop_by_hop(const char *line, size_t n)
{
    static const char *const names[] = {
        "connection",       "keep-alive", "transfer-encoding", "content-length",
        "proxy-connection", "trailer",    "upgrade",           "te"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        size_t k = strlen(names[i]);
        if (n > k && line[k] == ':' && strncasecmp(line, names[i], k) == 0)
            return true;
    }
    return false;
}

/* How the answer's body is delimited upstream: its Content-Length (-1: none), close. */
static void upstream_framing(const char *p, const char *end, int64_t *ret_length, bool *ret_close)
{
    *ret_length = -1;
    *ret_close = false;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        uint64_t v;
        char num[24];

        while (n > 0 && (p[n - 1] == '\r' || p[n - 1] == '\n' || p[n - 1] == ' '))
            n--;
        if (n > 15 && strncasecmp(p, "content-length:", 15) == 0) {
            size_t k = 15;
            while (k < n && p[k] == ' ')
                k++;
            snprintf(num, sizeof(num), "%.*s", (int)(n - k < 23 ? n - k : 23), p + k);
            if (util_parse_u64(num, 0, INT64_MAX, &v) == 0)
                *ret_length = (int64_t)v;
        } else if (n > 11 && strncasecmp(p, "connection:", 11) == 0 &&
                   memmem(p + 11, n - 11, "close", 5)) {
            *ret_close = true;
        } else if (n > 18 && strncasecmp(p, "transfer-encoding:", 18) == 0) {
            *ret_length = -2; /* chunked (or another coding): never a length */
        }
        p = nl ? nl + 1 : end;
    }
}

/*
 * The answer's head for the sandbox. Its body keeps the upstream's framing where HTTP/1.1 lets
 * it: a Content-Length stays (the body is relayed as is), a body the upstream ends by closing
 * ends the same way; otherwise (chunked upstream, HTTP/2) it is chunked.
 */
static int on_head(void *ctx, long status, const char *lines, size_t len)
{
    struct gateway_conn *c = ctx;
    const char *p = lines, *end = lines + len;
    bool sse = false, up_close;
    struct buf h;
    int r;

    c->rep.status = status;
    c->rep.first_byte_ms = util_now_ms() - c->t0;
    c->no_body = status == 204 || status == 304 || strcmp(c->req.method, "HEAD") == 0;
    upstream_framing(lines, end, &c->out_length, &up_close);
    if (c->req.minor == 0 || (!c->no_body && c->out_length == -1 && up_close))
        c->req.keep_alive = false; /* close-delimited, as upstream */
    if (c->out_length < 0)
        c->out_length = -1;
    c->chunked_out = c->req.minor == 1 && !c->no_body && c->out_length < 0 && c->req.keep_alive;
    buf_init(&h, HTTPC_HEAD_MAX + 256);
    buf_printf(&h, "HTTP/1.%d %ld %s\r\n", c->req.minor, status, reason_phrase(status));
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

        while (n > 0 && (p[n - 1] == '\r' || p[n - 1] == '\n'))
            n--;
        if (n > 0 && !hop_by_hop(p, n)) {
            if (n > 13 && strncasecmp(p, "content-type:", 13) == 0 &&
                memmem(p, n, "text/event-stream", 17))
                sse = true;
            buf_append(&h, p, n);
            buf_append_str(&h, "\r\n");
        }
        p = nl ? nl + 1 : end;
    }
    if (c->chunked_out)
        buf_append_str(&h, "Transfer-Encoding: chunked\r\n");
    else if (c->out_length >= 0)
        buf_printf(&h, "Content-Length: %lld\r\n", (long long)c->out_length);
    else if (c->no_body)
        buf_append_str(&h, "Content-Length: 0\r\n");
    buf_printf(&h, "Connection: %s\r\n\r\n", c->req.keep_alive ? "keep-alive" : "close");
    c->rep.stream = sse;
    gateway_usage_release(&c->usage);
    gateway_usage_init(&c->usage, c->api, sse);
    r = send_text(c, buf_str(&h), h.len);
    buf_release(&h);
    c->head_sent = r == 0;
    return r;
}

static int on_data(void *ctx, const struct httpc_response *res, const char *data, size_t len)
{
    struct gateway_conn *c = ctx;
    char size[24];
    struct iovec v[3];
    int n;

    (void)res;
    c->rep.bytes_down += len;
    /* the call is reported before the harness has the bytes that end it: the stream's usage
     * event, or the last byte of a body with a length */
    if (gateway_usage_feed(&c->usage, data, len))
        report_call(c);
    if (c->out_length >= 0 && (int64_t)c->rep.bytes_down >= c->out_length) {
        gateway_usage_finish(&c->usage);
        report_call(c);
    }
    if (c->no_body)
        return 0;
    if (!c->chunked_out) {
        v[0] = (struct iovec){.iov_base = (void *)data, .iov_len = len};
        return send_all(c, v, 1);
    }
    n = snprintf(size, sizeof(size), "%zx\r\n", len);
    v[0] = (struct iovec){.iov_base = size, .iov_len = (size_t)n};
    v[1] = (struct iovec){.iov_base = (void *)data, .iov_len = len};
    v[2] = (struct iovec){.iov_base = (void *)"\r\n", .iov_len = 2};
    return send_all(c, v, 3);
}

/* Forward the checked request; false when the connection must close. */
static bool forward(struct gateway_conn *c, const struct gateway_route *route,
                    const struct buf *body)
{
    struct buf lines, url;
    const char *hdr[UPSTREAM_HEADERS_MAX + 1];
    size_t nh = 0;
    struct httpc_response res;
    char err[256];
    int r;

    buf_init(&lines, 256 * 1024);
    buf_init(&url, 16 * 1024);
    r = gateway_route_headers(route, &c->req, &lines, UPSTREAM_HEADERS_MAX, &nh);
    if (r == 0)
        r = buf_printf(&url, "%s%.*s", route->origin, (int)c->req.target_len, c->req.target);
    if (r < 0) {
        buf_release(&lines);
        buf_release(&url);
        refuse(c, 400, "request headers the model gateway cannot forward", false);
        return false;
    }
    for (size_t i = 0, off = 0; i < nh; i++) {
        hdr[i] = lines.data + off;
        off += strlen(hdr[i]) + 1;
    }
    hdr[nh++] = "Expect:"; /* never wait for a 100-continue upstream */
    struct httpc_request rq = {
        .method = c->req.method,
        .url = buf_str(&url),
        .headers = hdr,
        .nheaders = nh,
        .body = strcmp(c->req.method, "POST") == 0 ? buf_str(body) : NULL,
        .body_len = body->len,
        .timeout_ms = route->timeout_ms,
        .connect_timeout_ms = CONNECT_MS,
        .discard_body = true,
        .on_head = on_head,
        .on_data = on_data,
        .on_data_ctx = c,
        .aborted = on_abort,
        .abort_ctx = c,
        .ca_file = route->ca_file,
        .no_proxy = true,
        .tcp_keepalive = true,
    };
    model_gateway_calls(c->g, 1);
    r = httpc_perform(httpc_thread_handle(), &rq, &res, err, sizeof(err));
    model_gateway_calls(c->g, -1);
    buf_release(&lines);
    buf_release(&url);
    if (r == 0)
        httpc_response_release(&res);
    if (!c->reported)
        gateway_usage_finish(&c->usage);
    if (r < 0) {
        c->rep.error = r;
        snprintf(c->rep.why, sizeof(c->rep.why), "model endpoint: %.200s", err);
    }
    if (r < 0 && !c->head_sent) {
        struct linger reset = {.l_onoff = 1, .l_linger = 0};

        /* no answer came: the harness sees its connection fail, as it would without the
         * gateway (and retries or says so as it always does); the report says why */
        report_call(c);
        (void)setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
        return false;
    }
    report_call(c);
    if (r < 0 || c->gone)
        return false; /* cut mid-answer: the sandbox sees it end without its last chunk */
    if (c->chunked_out && send_text(c, "0\r\n\r\n", 5) < 0)
        return false;
    return c->req.keep_alive;
}

/* One request and its answer: true when the connection stays for the next one. */
bool gateway_conn_serve(struct gateway_conn *c)
{
    const struct gateway_route *route;
    const char *query;
    void *ref;
    struct buf body;
    uint64_t held = 0;
    char why[320];
    bool keep = false;
    int st;

    if (!read_head(c))
        return false;
    memset(&c->rep, 0, sizeof(c->rep));
    c->rep.first_byte_ms = -1;
    c->t0 = util_now_ms();
    c->head_sent = c->chunked_out = c->no_body = c->reported = false;
    c->out_length = -1;
    query = memchr(c->req.target, '?', c->req.target_len);
    c->api = gateway_api_of_path(c->req.target,
                                 query ? (size_t)(query - c->req.target) : c->req.target_len);
    c->rep.api = c->api;
    gateway_usage_init(&c->usage, c->api, false);
    route = model_gateway_route_take(c->g, &ref);
    buf_init(&body, route ? route->max_request_bytes + 64 : GATEWAY_ROUTE_REQUEST_DEFAULT);
    if (read_body(c, route, &body, &held) < 0)
        goto out;
    c->rep.bytes_up = body.len;
    if (!route) {
        refuse(c, 503, "no model endpoint is configured for this sandbox", c->req.keep_alive);
        keep = c->req.keep_alive;
        goto out;
    }
    inspect_body(c, &body);
    st = gateway_route_check(route, c->req.method, c->req.target, c->req.target_len,
                             c->rep.model[0] ? c->rep.model : NULL, why, sizeof(why));
    if (st) {
        refuse(c, st, why, c->req.keep_alive);
        keep = c->req.keep_alive;
        goto out;
    }
    keep = forward(c, route, &body);
out:
    gateway_usage_release(&c->usage);
    buf_release(&body);
    if (held)
        model_gateway_budget_give(c->g, held);
    model_gateway_route_drop(c->g, ref);
    return keep && !model_gateway_stopping(c->g);
}
