/*
 * model_gateway — the sandbox's model endpoint: connections, forwarding, reports
 * (model_gateway.h). A connection's thread owns everything of its connection; the shared part
 * (the route, the connection list, the body budget, the report queue) is under g->lock, which
 * is never held across I/O.
 */
#include "gateway/model_gateway.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/httpc.h"
#include "base/jsonx.h"
#include "base/util.h"
#include "gateway/gateway_http.h"
#include "gateway/gateway_route.h"

#define HEAD_WAIT_MS 30000   /* the rest of a head, once its first byte came */
#define BODY_WAIT_MS 60000   /* the next piece of a request body */
#define SEND_TIMEOUT_S 300   /* a harness that stops reading its answer */
#define CONNECT_MS 30000
#define STACK_BYTES (512u * 1024)
#define UPSTREAM_HEADERS_MAX 120
#define STOP_WAIT_MS 5000
#define BUDGET_STEP (256u * 1024)

struct route_ref {
    struct gateway_route *r;
    unsigned refs; /* connections using it, plus one while it is the current route */
};

struct conn {
    struct model_gateway *g;
    int fd;
    struct conn *next, *prev;
    struct buf in;   /* read and not yet consumed */
    struct buf head; /* the current request's head: c->req points into it */
    /* the call being served */
    struct gateway_http_request req;
    enum gateway_api api;
    struct gateway_usage usage;
    struct model_gateway_report rep;
    int64_t t0;
    bool head_sent, chunked_out, no_body, reported, gone;
};

struct model_gateway {
    int listen_fd;
    int event_fd;
    model_gateway_report_fn report;
    void *ctx;
    pthread_mutex_t lock;
    pthread_cond_t quiet; /* signalled when a connection ends */
    struct route_ref *route;
    struct conn *conns;
    unsigned nconns;
    unsigned active;
    uint64_t budget; /* request body bytes still available */
    struct model_gateway_report *queue;
    size_t qhead, qlen;
    uint64_t dropped;
    bool stopping;
};

/* ---- shared state ------------------------------------------------------------------------- */

static struct route_ref *route_take(struct model_gateway *g)
{
    struct route_ref *ref;

    pthread_mutex_lock(&g->lock);
    ref = g->route;
    if (ref)
        ref->refs++;
    pthread_mutex_unlock(&g->lock);
    return ref;
}

static void route_drop_locked(struct route_ref *ref)
{
    if (ref && --ref->refs == 0) {
        gateway_route_free(ref->r);
        free(ref);
    }
}

static void route_drop(struct model_gateway *g, struct route_ref *ref)
{
    pthread_mutex_lock(&g->lock);
    route_drop_locked(ref);
    pthread_mutex_unlock(&g->lock);
}

static bool budget_take(struct model_gateway *g, uint64_t n)
{
    bool ok;

    pthread_mutex_lock(&g->lock);
    ok = g->budget >= n;
    if (ok)
        g->budget -= n;
    pthread_mutex_unlock(&g->lock);
    return ok;
}

static void budget_give(struct model_gateway *g, uint64_t n)
{
    pthread_mutex_lock(&g->lock);
    g->budget += n;
    pthread_mutex_unlock(&g->lock);
}

static bool stopping(struct model_gateway *g)
{
    return __atomic_load_n(&g->stopping, __ATOMIC_RELAXED);
}

/* Queue the call's report for the poll loop (once per call) and wake it. */
static void report_call(struct conn *c)
{
    struct model_gateway *g = c->g;
    uint64_t one = 1;

    if (c->reported)
        return;
    c->reported = true;
    c->rep.ms = util_now_ms() - c->t0;
    if (c->rep.event == MODEL_GATEWAY_CALL)
        c->rep.usage = c->usage.counts;
    if (!c->rep.model[0] && c->usage.model[0])
        snprintf(c->rep.model, sizeof(c->rep.model), "%s", c->usage.model);
    pthread_mutex_lock(&g->lock);
    if (g->qlen < MODEL_GATEWAY_QUEUE_MAX) {
        g->queue[(g->qhead + g->qlen) % MODEL_GATEWAY_QUEUE_MAX] = c->rep;
        g->qlen++;
    } else {
        g->dropped++;
    }
    pthread_mutex_unlock(&g->lock);
    (void)!write(g->event_fd, &one, sizeof(one));
}

/* ---- writing to the sandbox --------------------------------------------------------------- */

static int send_all(struct conn *c, const struct iovec *iov, int n)
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

static int send_text(struct conn *c, const char *s, size_t n)
{
    struct iovec v = {.iov_base = (void *)s, .iov_len = n};

    return send_all(c, &v, 1);
}

static const char *reason_phrase(long status)
{
    switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return status < 400 ? "OK" : "Error";
    }
}

/* An answer of the gateway's own, in the error shape of the call's API. */
static void answer_error(struct conn *c, long status, const char *msg, bool keep)
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
static void refuse(struct conn *c, long status, const char *why, bool keep)
{
    c->rep.event = MODEL_GATEWAY_REFUSED;
    c->rep.status = status;
    snprintf(c->rep.why, sizeof(c->rep.why), "%.250s", why);
    report_call(c);
    answer_error(c, status, why, keep);
}

/* ---- reading from the sandbox ------------------------------------------------------------- */

/* Wait for bytes (at most ms) and append what came to c->in. 0, -ETIMEDOUT, -EPIPE. */
static int read_more(struct conn *c, int ms, size_t max)
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
    if (r < 0 || stopping(c->g))
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
static int read_head(struct conn *c)
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
static int chunked_step(struct conn *c, struct gateway_chunked *ch, struct buf *body,
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
            if (!budget_take(c->g, BUDGET_STEP))
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
static int read_body(struct conn *c, const struct gateway_route *route, struct buf *body,
                     uint64_t *held)
{
    uint64_t cap = route ? route->max_request_bytes : GATEWAY_ROUTE_REQUEST_DEFAULT;
    struct gateway_chunked ch;
    int r;

    if (c->req.has_length && c->req.length > cap) {
        refuse(c, 413, "request body larger than the model gateway's cap", false);
        return -E2BIG;
    }
    if (!c->req.has_length && !c->req.chunked)
        return 0;
    if (c->req.has_length) {
        if (!budget_take(c->g, c->req.length))
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
static void inspect_body(struct conn *c, struct buf *body)
{
    json_tokener *tok;
    json_object *o, *so;
    const char *model, *text;
    size_t n;

    if (body->len == 0 || gateway_http_field(&c->req, "content-encoding"))
        return;
    tok = json_tokener_new_ex(64);
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

static bool client_gone(struct conn *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};

    if (c->gone || stopping(c->g))
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
    static const char *const names[] = {"connection", "keep-alive",     "transfer-encoding",
                                        "content-length", "proxy-connection", "trailer",
                                        "upgrade",    "te"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        size_t k = strlen(names[i]);
        if (n > k && line[k] == ':' && strncasecmp(line, names[i], k) == 0)
            return true;
    }
    return false;
}

static int on_head(void *ctx, long status, const char *lines, size_t len)
{
    struct conn *c = ctx;
    const char *p = lines, *end = lines + len;
    bool sse = false;
    struct buf h;
    int r;

    c->rep.status = status;
    c->rep.first_byte_ms = util_now_ms() - c->t0;
    c->no_body = status == 204 || status == 304;
    c->chunked_out = c->req.minor == 1 && !c->no_body;
    if (c->req.minor == 0)
        c->req.keep_alive = false;
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
    struct conn *c = ctx;
    char size[24];
    struct iovec v[3];
    int n;

    (void)res;
    c->rep.bytes_down += len;
    /* the call is reported before the harness has the bytes that end it */
    if (gateway_usage_feed(&c->usage, data, len))
        report_call(c);
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
static bool forward(struct conn *c, const struct gateway_route *route, const struct buf *body)
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
        .body = strcmp(c->req.method, "GET") == 0 ? NULL : buf_str(body),
        .body_len = body->len,
        .timeout_ms = route->timeout_ms,
        .connect_timeout_ms = CONNECT_MS,
        .stream_body = true,
        .on_head = on_head,
        .on_data = on_data,
        .on_data_ctx = c,
        .aborted = on_abort,
        .abort_ctx = c,
        .ca_file = route->ca_file,
        .no_proxy = true,
        .tcp_keepalive = true,
    };
    __atomic_add_fetch(&c->g->active, 1, __ATOMIC_RELAXED);
    r = httpc_perform(httpc_thread_handle(), &rq, &res, err, sizeof(err));
    __atomic_sub_fetch(&c->g->active, 1, __ATOMIC_RELAXED);
    buf_release(&lines);
    buf_release(&url);
    if (r == 0)
        httpc_response_release(&res);
    gateway_usage_finish(&c->usage);
    if (r < 0) {
        c->rep.error = r;
        snprintf(c->rep.why, sizeof(c->rep.why), "model endpoint: %.200s", err);
    }
    if (r < 0 && !c->head_sent) {
        long status = r == -ETIMEDOUT ? 504 : 502;
        report_call(c);
        if (!c->gone)
            answer_error(c, status, c->rep.why, c->req.keep_alive);
        return c->req.keep_alive && !c->gone;
    }
    report_call(c);
    if (r < 0 || c->gone)
        return false; /* cut mid-answer: the sandbox sees it end without its last chunk */
    if (c->chunked_out && send_text(c, "0\r\n\r\n", 5) < 0)
        return false;
    return c->req.keep_alive;
}

/* One request and its answer: true when the connection stays for the next one. */
static bool serve_one(struct conn *c)
{
    struct route_ref *ref;
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
    c->api = gateway_api_of_path(c->req.target,
                                 strcspn(c->req.target, "?") < c->req.target_len
                                     ? strcspn(c->req.target, "?")
                                     : c->req.target_len);
    c->rep.api = c->api;
    gateway_usage_init(&c->usage, c->api, false);
    ref = route_take(c->g);
    buf_init(&body, ref ? ref->r->max_request_bytes + 64 : GATEWAY_ROUTE_REQUEST_DEFAULT);
    if (read_body(c, ref ? ref->r : NULL, &body, &held) < 0)
        goto out;
    c->rep.bytes_up = body.len;
    if (!ref) {
        refuse(c, 503, "no model endpoint is configured for this sandbox", c->req.keep_alive);
        keep = c->req.keep_alive;
        goto out;
    }
    inspect_body(c, &body);
    st = gateway_route_check(ref->r, c->req.method, c->req.target, c->req.target_len,
                             c->rep.model[0] ? c->rep.model : NULL, why, sizeof(why));
    if (st) {
        refuse(c, st, why, c->req.keep_alive);
        keep = c->req.keep_alive;
        goto out;
    }
    keep = forward(c, ref->r, &body);
out:
    gateway_usage_release(&c->usage);
    buf_release(&body);
    if (held)
        budget_give(c->g, held);
    route_drop(c->g, ref);
    return keep && !stopping(c->g);
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    struct model_gateway *g = c->g;

    while (serve_one(c))
        ;
    pthread_mutex_lock(&g->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        g->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    g->nconns--;
    close(c->fd);
    pthread_cond_broadcast(&g->quiet);
    pthread_mutex_unlock(&g->lock);
    buf_release(&c->in);
    buf_release(&c->head);
    free(c);
    return NULL;
}

/* ---- the poll loop's side ----------------------------------------------------------------- */

int model_gateway_new(int listen_fd, model_gateway_report_fn report, void *ctx,
                      struct model_gateway **ret)
{
    struct model_gateway *g = calloc(1, sizeof(*g));

    if (!g)
        return -ENOMEM;
    g->queue = calloc(MODEL_GATEWAY_QUEUE_MAX, sizeof(*g->queue));
    g->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!g->queue || g->event_fd < 0) {
        int r = g->event_fd < 0 ? -errno : -ENOMEM;
        if (g->event_fd >= 0)
            close(g->event_fd);
        free(g->queue);
        free(g);
        return r;
    }
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->quiet, NULL);
    g->listen_fd = listen_fd;
    g->report = report;
    g->ctx = ctx;
    g->budget = MODEL_GATEWAY_BODY_BUDGET;
    *ret = g;
    return 0;
}

void model_gateway_free(struct model_gateway *g)
{
    struct timespec until;
    bool quiet = true;

    if (!g)
        return;
    util_deadline_ts(STOP_WAIT_MS, &until);
    pthread_mutex_lock(&g->lock);
    __atomic_store_n(&g->stopping, true, __ATOMIC_RELAXED);
    for (struct conn *c = g->conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    while (g->nconns > 0)
        if (pthread_cond_timedwait(&g->quiet, &g->lock, &until) == ETIMEDOUT) {
            quiet = false;
            break;
        }
    pthread_mutex_unlock(&g->lock);
    if (!quiet)
        return; /* a thread still runs: its memory must stay (the keeper is ending anyway) */
    route_drop_locked(g->route);
    close(g->event_fd);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->quiet);
    free(g->queue);
    free(g);
}

int model_gateway_set_route(struct model_gateway *g, json_object *route, char *err,
                            size_t errlen)
{
    struct route_ref *ref = NULL, *old;
    struct gateway_route *r = NULL;
    int rc;

    if (route) {
        rc = gateway_route_decode(route, &r, err, errlen);
        if (rc < 0)
            return rc;
        ref = calloc(1, sizeof(*ref));
        if (!ref) {
            gateway_route_free(r);
            return -ENOMEM;
        }
        ref->r = r;
        ref->refs = 1;
    }
    pthread_mutex_lock(&g->lock);
    old = g->route;
    g->route = ref;
    route_drop_locked(old);
    pthread_mutex_unlock(&g->lock);
    return 0;
}

size_t model_gateway_fds(const struct model_gateway *g, int *fds, size_t max)
{
    size_t n = 0;
    unsigned conns = __atomic_load_n(&g->nconns, __ATOMIC_RELAXED);

    if (n < max)
        fds[n++] = g->event_fd;
    if (n < max && g->listen_fd >= 0 && conns < MODEL_GATEWAY_CONNS_MAX)
        fds[n++] = g->listen_fd;
    return n;
}

void model_gateway_flush(struct model_gateway *g)
{
    uint64_t v;

    (void)!read(g->event_fd, &v, sizeof(v));
    for (;;) {
        struct model_gateway_report r;

        pthread_mutex_lock(&g->lock);
        if (g->qlen == 0) {
            pthread_mutex_unlock(&g->lock);
            return;
        }
        r = g->queue[g->qhead];
        g->qhead = (g->qhead + 1) % MODEL_GATEWAY_QUEUE_MAX;
        g->qlen--;
        pthread_mutex_unlock(&g->lock);
        if (g->report)
            g->report(g->ctx, &r);
    }
}

static void accept_one(struct model_gateway *g)
{
    pthread_attr_t attr;
    pthread_t t;
    struct conn *c;
    struct timeval tv = {.tv_sec = SEND_TIMEOUT_S};
    int one = 1;
    int fd = accept4(g->listen_fd, NULL, NULL, SOCK_CLOEXEC);

    if (fd < 0)
        return;
    c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return;
    }
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    c->g = g;
    c->fd = fd;
    buf_init(&c->in, GATEWAY_HTTP_HEAD_MAX + 256 * 1024 + 16384);
    buf_init(&c->head, GATEWAY_HTTP_HEAD_MAX);
    pthread_mutex_lock(&g->lock);
    c->next = g->conns;
    if (g->conns)
        g->conns->prev = c;
    g->conns = c;
    g->nconns++;
    pthread_mutex_unlock(&g->lock);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, STACK_BYTES);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, conn_main, c) != 0) {
        pthread_mutex_lock(&g->lock);
        if (c->prev)
            c->prev->next = c->next;
        else
            g->conns = c->next;
        if (c->next)
            c->next->prev = c->prev;
        g->nconns--;
        pthread_mutex_unlock(&g->lock);
        close(fd);
        free(c);
    }
    pthread_attr_destroy(&attr);
}

void model_gateway_handle(struct model_gateway *g)
{
    model_gateway_flush(g);
    for (int i = 0; i < 8 && g->listen_fd >= 0; i++) {
        struct pollfd p = {.fd = g->listen_fd, .events = POLLIN};

        if (__atomic_load_n(&g->nconns, __ATOMIC_RELAXED) >= MODEL_GATEWAY_CONNS_MAX ||
            poll(&p, 1, 0) != 1)
            break;
        accept_one(g);
    }
}

unsigned model_gateway_active(const struct model_gateway *g)
{
    return __atomic_load_n(&g->active, __ATOMIC_RELAXED);
}
