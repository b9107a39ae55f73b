/*
 * cluster_relay — forward a request to its owner and relay the answer (cluster_relay.h).
 */
#include "cluster/cluster_relay.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/httpc.h"
#include "base/log.h"
#include "base/util.h"
#include "core/contracts.h"
#include "turn/events.h"

#define CONNECT_MS 3000
#define FORWARD_MAX_MS (48ull * 3600 * 1000) /* a forwarded turn may run as long as a turn */

struct relay {
    const struct cluster_sink *sink;
    bool ndjson;
    bool started;     /* the sink got its status */
    bool unavailable; /* the peer's front said 502-504 before anything was relayed */
    bool gone;        /* the client went away */
    bool result_seen; /* the last complete record was the result */
    uint64_t seq;     /* the last numbered record relayed (0: none) */
    long status;
    struct buf line; /* NDJSON: the record being received */
};

static bool is_result(const char *line, size_t len)
{
    const char *needle = "\"kind\":\"result\"";
    size_t head = len < 80 ? len : 80;

    return memmem(line, head, needle, strlen(needle)) != NULL;
}

/* The "seq" of a record (within its first 80 bytes, where the writer puts it), or 0. */
static uint64_t seq_of(const char *line, size_t len)
{
    static const char key[] = "\"seq\":";
    size_t head = len < 80 ? len : 80, n = 0;
    const char *p = memmem(line, head, key, strlen(key));
    char digits[24];
    uint64_t v;

    if (!p)
        return 0;
    for (p += strlen(key); p < line + len && *p >= '0' && *p <= '9' && n + 1 < sizeof(digits);)
        digits[n++] = *p++;
    digits[n] = '\0';
    return n && util_parse_u64(digits, 1, UINT64_MAX - 1, &v) == 0 ? v : 0;
}

static int start(struct relay *rl, const struct httpc_response *res)
{
    const char *type = res->content_type[0] ? res->content_type : "application/json";
    const char *turn =
        res->captured[0] && httpc_header_value_ok(res->captured) ? res->captured : NULL;

    rl->started = true;
    rl->status = res->status;
    if (rl->sink->start(rl->sink->ctx, (int)res->status, type, turn) < 0) {
        rl->gone = true;
        return -1;
    }
    return 0;
}

/* Write the complete lines of the NDJSON body received so far. */
static int relay_lines(struct relay *rl, const char *data, size_t len)
{
    while (len > 0) {
        const char *nl = memchr(data, '\n', len);
        size_t take = nl ? (size_t)(nl - data) + 1 : len;

        if (buf_append(&rl->line, data, take) < 0)
            return -E2BIG;
        data += take;
        len -= take;
        if (!nl)
            break;
        rl->result_seen = is_result(rl->line.data, rl->line.len);
        if (seq_of(rl->line.data, rl->line.len) > rl->seq)
            rl->seq = seq_of(rl->line.data, rl->line.len);
        if (rl->sink->write(rl->sink->ctx, rl->line.data, rl->line.len) < 0) {
            rl->gone = true;
            return 1;
        }
        buf_reset(&rl->line);
    }
    return 0;
}

static int on_data(void *ctx, const struct httpc_response *res, const char *data, size_t len)
{
    struct relay *rl = ctx;
    int r;

    if (!rl->started) {
        if (res->status == 502 || res->status == 503 || res->status == 504) {
            rl->unavailable = true;
            rl->status = res->status;
            return 1;
        }
        if (start(rl, res) < 0)
            return 1;
    }
    if (rl->ndjson && res->status == 200) {
        r = relay_lines(rl, data, len);
        if (r != 0)
            return r;
    } else if (rl->sink->write(rl->sink->ctx, data, len) < 0) {
        rl->gone = true;
        return 1;
    }
    if (rl->sink->flush && rl->sink->flush(rl->sink->ctx) < 0) {
        rl->gone = true;
        return 1;
    }
    return 0;
}

static bool aborted(void *ctx)
{
    struct relay *rl = ctx;

    return rl->gone || (rl->sink->alive && !rl->sink->alive(rl->sink->ctx));
}

/* The stream broke before its result: end it as every stream ends, numbered after the last
 * record relayed. */
static void write_ending(struct relay *rl, const char *peer, const char *why)
{
    struct event_stream es;
    struct event_sink es_sink = {
        .write_line = rl->sink->write, .flush = rl->sink->flush, .ctx = rl->sink->ctx};
    struct run_result res;
    json_object *result;
    char msg[384];

    snprintf(msg, sizeof(msg), "the session's owner '%s' stopped answering mid-turn (%s)", peer,
             why);
    event_stream_init(&es, &es_sink);
    es.seq = rl->seq;
    run_result_init(&res);
    run_result_fail(&res, "%s", msg);
    event_emit(&es, event_error(msg, "runner_error"));
    event_emit(&es, event_done(NULL, NULL));
    result = run_result_to_json(&res);
    if (result)
        (void)event_stream_result(&es, result);
    json_object_put(result);
    run_result_release(&res);
    event_stream_release(&es);
}

static int build_headers(const struct cluster_config *c, const struct cluster_request *rq,
                         char hdr[4][320], const char *lines[4], size_t *n)
{
    int k;

    *n = 0;
    k = snprintf(hdr[*n], 320, "%s: %s", CLUSTER_FORWARDED_HEADER, c->member);
    lines[*n] = hdr[*n];
    (*n)++;
    if (rq->accept && httpc_header_value_ok(rq->accept) && strlen(rq->accept) < 256) {
        snprintf(hdr[*n], 320, "Accept: %s", rq->accept);
        lines[*n] = hdr[*n];
        (*n)++;
    }
    if (rq->request_id && httpc_header_value_ok(rq->request_id) && strlen(rq->request_id) < 64) {
        snprintf(hdr[*n], 320, "X-Request-Id: %s", rq->request_id);
        lines[*n] = hdr[*n];
        (*n)++;
    }
    /* never "Expect: 100-continue": one round trip less for a large body */
    snprintf(hdr[*n], 320, "Expect:");
    lines[*n] = hdr[*n];
    (*n)++;
    return k < 0 || k >= 320 ? -ENAMETOOLONG : 0;
}

int cluster_forward(const struct cluster_config *c, const struct cluster_member *peer,
                    const struct cluster_request *rq, const struct cluster_sink *sink, char *err,
                    size_t errlen)
{
    struct relay rl = {.sink = sink, .ndjson = rq->ndjson};
    struct httpc_request hr;
    struct httpc_response res;
    char url[CLUSTER_URL_MAX + CLUSTER_PATH_MAX], hdr[4][320];
    const char *lines[4];
    size_t nh = 0;
    int r;

    if (snprintf(url, sizeof(url), "%s%s", peer->url, rq->path) >= (int)sizeof(url) ||
        build_headers(c, rq, hdr, lines, &nh) < 0)
        return util_fail(-ENAMETOOLONG, err, errlen, "forwarding: the URL is too long");
    buf_init(&rl.line, EVENT_LINE_MAX);
    memset(&hr, 0, sizeof(hr));
    hr.method = rq->method;
    hr.url = url;
    hr.headers = lines;
    hr.nheaders = nh;
    hr.body = rq->body;
    hr.body_len = rq->body_len;
    hr.timeout_ms = FORWARD_MAX_MS;
    hr.connect_timeout_ms = CONNECT_MS;
    hr.discard_body = true;
    hr.bearer = rq->token;
    hr.user_agent = "agent-runner/" AR_VERSION " (forwarding)";
    hr.ca_file = c->peer_ca_file[0] ? c->peer_ca_file : NULL;
    hr.no_proxy = true;
    hr.tcp_keepalive = true;
    hr.aborted = aborted;
    hr.abort_ctx = &rl;
    hr.on_data = on_data;
    hr.on_data_ctx = &rl;
    hr.capture_header = "X-Agent-Runner-Turn";
    r = httpc_perform(httpc_thread_handle(), &hr, &res, err, errlen);
    if (r == 0) {
        if (!rl.started && !rl.unavailable && !rl.gone)
            (void)start(&rl, &res); /* an answer without a body */
        httpc_response_release(&res);
    }
    if (rl.unavailable) {
        r = util_fail(-EHOSTDOWN, err, errlen, "'%s' answered %ld", peer->name, rl.status);
    } else if (!rl.started && r < 0) {
        /* nothing reached the client: the caller may route again */
    } else {
        /* a run's stream ends as every stream does; a reattach's is cut (its client
         * reattaches from its last seq, as when a local follower is cut) */
        if (rl.ndjson && rl.status == 200 && !rl.result_seen && !rl.gone &&
            strcmp(rq->method, "POST") == 0)
            write_ending(&rl, peer->name, r < 0 ? err : "its stream ended");
        r = 0;
    }
    buf_release(&rl.line);
    return r;
}
