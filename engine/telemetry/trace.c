#include "telemetry/trace.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/httpc.h"
#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "harness/harness.h"

#define TRACE_QUEUE_MAX 64
#define TRACE_TOOLS_MAX 128
#define TRACE_SANDBOX_MAX 8
#define TRACE_VALUE_MAX 4000
#define EXPORT_TIMEOUT_MS 5000u
#define EXPORT_CONNECT_MS 2000u

struct span {
    char id[17];
    char parent[17];
    char name[96];
    int64_t start_ns;
    int64_t end_ns;
    json_object *attrs; /* array of OTLP KeyValue */
    bool error;
    char tool_id[96];
};

struct trace_run {
    char trace_id[33];
    char endpoint[2048];
    char *authorization;
    bool capture_content;
    struct span invoke;
    struct span turn;
    struct span tools[TRACE_TOOLS_MAX];
    size_t ntools;
    struct span sandbox[TRACE_SANDBOX_MAX]; /* sandbox.acquire, sandbox.exec */
    size_t nsandbox;
};

static const char *const allowlist[] = {TRACE_ATTR_ALLOWLIST};

/* True when the attribute key is on the allowlist. */
static bool trace_attr_allowed(const char *key)
{
    for (size_t i = 0; i < ARRAY_SIZE(allowlist); i++)
        if (strcmp(allowlist[i], key) == 0)
            return true;
    return false;
}

static void attr_str(struct span *s, const char *key, const char *value)
{
    json_object *kv, *v;
    char *clean;

    if (!value || !trace_attr_allowed(key))
        return;
    clean = log_redact_copy(value, TRACE_VALUE_MAX);
    if (!clean)
        return;
    kv = json_object_new_object();
    v = json_object_new_object();
    json_object_object_add(v, "stringValue", json_object_new_string(clean));
    json_object_object_add(kv, "key", json_object_new_string(key));
    json_object_object_add(kv, "value", v);
    json_object_array_add(s->attrs, kv);
    free(clean);
}

static void attr_int(struct span *s, const char *key, int64_t value)
{
    json_object *kv, *v;
    char num[32];

    if (!trace_attr_allowed(key))
        return;
    kv = json_object_new_object();
    v = json_object_new_object();
    snprintf(num, sizeof(num), "%lld", (long long)value);
    json_object_object_add(v, "intValue", json_object_new_string(num));
    json_object_object_add(kv, "key", json_object_new_string(key));
    json_object_object_add(kv, "value", v);
    json_object_array_add(s->attrs, kv);
}

/* A JSON value as an attribute: string, bool, int, or a finite double. */
static void attr_json(struct span *s, const char *key, json_object *v)
{
    json_object *kv, *val;
    char num[32];

    if (!v || !trace_attr_allowed(key))
        return;
    switch (json_object_get_type(v)) {
    case json_type_string:
        attr_str(s, key, json_object_get_string(v));
        return;
    case json_type_int:
        attr_int(s, key, json_object_get_int64(v));
        return;
    case json_type_boolean:
        val = json_object_new_object();
        json_object_object_add(val, "boolValue",
                               json_object_new_boolean(json_object_get_boolean(v)));
        break;
    case json_type_double:
        if (!isfinite(json_object_get_double(v)))
            return;
        val = json_object_new_object();
        snprintf(num, sizeof(num), "%.17g", json_object_get_double(v));
        json_object_object_add(val, "doubleValue",
                               json_object_new_double_s(json_object_get_double(v), num));
        break;
    default:
        return;
    }
    kv = json_object_new_object();
    json_object_object_add(kv, "key", json_object_new_string(key));
    json_object_object_add(kv, "value", val);
    json_object_array_add(s->attrs, kv);
}

static void span_start(struct span *s, const char *name, const char *parent)
{
    memset(s, 0, sizeof(*s));
    (void)util_random_hex(s->id, 8);
    snprintf(s->parent, sizeof(s->parent), "%s", parent ? parent : "");
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->start_ns = util_wall_ns();
    s->attrs = json_object_new_array();
}

static bool hex_of_len(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]))
            return false;
    return true;
}

/* A header value by name, whatever its casing. */
static const char *header(json_object *headers, const char *name)
{
    if (!headers || !json_object_is_type(headers, json_type_object))
        return NULL;
    json_object_object_foreach(headers, key, val)
    {
        if (strcasecmp(key, name) == 0 && val && json_object_is_type(val, json_type_string))
            return json_object_get_string(val);
    }
    return NULL;
}

struct trace_run *trace_run_start(const struct run_request *req, const char *model,
                                  char ret_trace_id[33])
{
    json_object *otlp = jsonx_path(req->telemetry, "exporters.otlp");
    json_object *enabled = jsonx_path(req->telemetry, "capture.content.enabled");
    const char *endpoint = jsonx_str(otlp, "endpoint"), *auth;
    char parent[17] = "";
    struct trace_run *t;

    if (req->traceparent && strlen(req->traceparent) == 55 &&
        hex_of_len(req->traceparent + 3, 32)) {
        memcpy(ret_trace_id, req->traceparent + 3, 32);
        ret_trace_id[32] = '\0';
        memcpy(parent, req->traceparent + 36, 16);
        parent[16] = '\0';
    } else {
        (void)util_random_hex(ret_trace_id, 16);
    }
    if (!endpoint)
        return NULL;
    t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    memcpy(t->trace_id, ret_trace_id, 33);
    snprintf(t->endpoint, sizeof(t->endpoint), "%s", endpoint);
    auth = header(jsonx_get(otlp, "headers"), "authorization");
    t->authorization = auth ? strdup(auth) : NULL;
    t->capture_content = !(enabled && json_object_is_type(enabled, json_type_boolean) &&
                           !json_object_get_boolean(enabled));
    span_start(&t->invoke, "invoke_agent", parent[0] ? parent : NULL);
    attr_str(&t->invoke, "gen_ai.operation.name", "invoke_agent");
    attr_str(&t->invoke, "gen_ai.system", harness_kind_name(req->harness));
    attr_str(&t->invoke, "gen_ai.agent.name", req->harness_name);
    attr_str(&t->invoke, "gen_ai.request.model", model);
    attr_str(&t->invoke, "gen_ai.conversation.id", req->session_id);
    span_start(&t->turn, "turn", t->invoke.id);
    attr_str(&t->turn, "agent_runner.turn.id", req->turn_id);
    attr_str(&t->turn, "agent_runner.harness", harness_kind_name(req->harness));
    return t;
}

void trace_run_environment(struct trace_run *t, const char *kind)
{
    if (t)
        attr_str(&t->turn, "agent_runner.environment", kind);
}

void trace_run_sandbox(struct trace_run *t, json_object *report)
{
    const char *outcome = jsonx_str(report, "outcome"), *reason = jsonx_str(report, "reason");
    json_object *execs = jsonx_get(report, "execs"), *up = jsonx_get(report, "upload");
    int64_t now = util_wall_ns();
    struct span *s;

    if (!t || !report)
        return;
    attr_str(&t->turn, "agent_runner.sandbox.provider", jsonx_str(report, "provider"));
    attr_str(&t->turn, "agent_runner.sandbox.lease.outcome", outcome);
    attr_str(&t->turn, "agent_runner.sandbox.lease.reason", reason);
    if (t->nsandbox < TRACE_SANDBOX_MAX) {
        s = &t->sandbox[t->nsandbox++];
        span_start(s, "sandbox.acquire", t->turn.id);
        s->start_ns = now - json_object_get_int64(jsonx_get(report, "acquireMs")) * 1000000;
        s->end_ns = now;
        attr_str(s, "agent_runner.sandbox.provider", jsonx_str(report, "provider"));
        attr_str(s, "agent_runner.sandbox.lease.outcome", outcome);
        attr_str(s, "agent_runner.sandbox.lease.reason", reason);
        attr_str(s, "agent_runner.sandbox.sandbox_id", jsonx_str(report, "sandbox"));
        attr_json(s, "agent_runner.sandbox.acquire.wall_ms", jsonx_get(report, "acquireMs"));
        attr_json(s, "agent_runner.sandbox.upload.files", jsonx_get(up, "uploaded"));
        attr_json(s, "agent_runner.sandbox.upload.bytes", jsonx_get(up, "bytes"));
    }
    for (size_t i = 0; execs && json_object_is_type(execs, json_type_array) &&
                       i < json_object_array_length(execs) && t->nsandbox < TRACE_SANDBOX_MAX;
         i++) {
        json_object *e = json_object_array_get_idx(execs, i), *attrs = jsonx_get(e, "attrs");

        s = &t->sandbox[t->nsandbox++];
        span_start(s, "sandbox.exec", t->turn.id);
        s->start_ns = json_object_get_int64(jsonx_get(e, "startNs"));
        s->end_ns = json_object_get_int64(jsonx_get(e, "endNs"));
        if (s->start_ns <= 0 || s->end_ns < s->start_ns)
            s->start_ns = s->end_ns = now;
        if (attrs && json_object_is_type(attrs, json_type_object)) {
            json_object_object_foreach(attrs, key, val)
            {
                attr_json(s, key, val);
            }
        }
        s->error = !jsonx_str(attrs, "agent_runner.sandbox.outcome") ||
                   strcmp(jsonx_str(attrs, "agent_runner.sandbox.outcome"), "ok") != 0;
    }
}

void trace_run_event(struct trace_run *t, json_object *ev)
{
    const char *type = jsonx_str(ev, "type"), *id = jsonx_str(ev, "id");

    if (!t || !type)
        return;
    if (strcmp(type, "tool_call") == 0 && id) {
        char name[96];
        struct span *s;

        for (size_t i = 0; i < t->ntools; i++)
            if (strcmp(t->tools[i].tool_id, id) == 0)
                return; /* a re-announcement with new arguments: same span */
        if (t->ntools >= TRACE_TOOLS_MAX)
            return;
        s = &t->tools[t->ntools++];
        snprintf(name, sizeof(name), "execute_tool %.80s",
                 jsonx_str(ev, "name") ? jsonx_str(ev, "name") : "tool");
        span_start(s, name, t->turn.id);
        snprintf(s->tool_id, sizeof(s->tool_id), "%s", id);
        attr_str(s, "gen_ai.operation.name", "execute_tool");
        attr_str(s, "gen_ai.tool.name", jsonx_str(ev, "name"));
        attr_str(s, "gen_ai.tool.call.id", id);
        if (t->capture_content)
            attr_str(s, "gen_ai.tool.call.arguments", jsonx_text(jsonx_get(ev, "input"), NULL));
        return;
    }
    if (strcmp(type, "tool_result") == 0 && id) {
        for (size_t i = 0; i < t->ntools; i++) {
            struct span *s = &t->tools[i];
            if (strcmp(s->tool_id, id) != 0 || s->end_ns)
                continue;
            s->end_ns = util_wall_ns();
            s->error = json_object_get_boolean(jsonx_get(ev, "isError"));
            if (json_object_get_boolean(jsonx_get(ev, "denied")))
                attr_str(s, "agent_runner.tool.denied", "true");
            if (t->capture_content)
                attr_str(s, "gen_ai.tool.call.result", jsonx_str(ev, "output"));
        }
    }
}

static json_object *span_json(const char *trace_id, const struct span *s, int64_t end_ns)
{
    json_object *o = json_object_new_object(), *status = json_object_new_object();
    char num[32];

    json_object_object_add(o, "traceId", json_object_new_string(trace_id));
    json_object_object_add(o, "spanId", json_object_new_string(s->id));
    if (s->parent[0])
        json_object_object_add(o, "parentSpanId", json_object_new_string(s->parent));
    json_object_object_add(o, "name", json_object_new_string(s->name));
    json_object_object_add(o, "kind", json_object_new_int(1));
    snprintf(num, sizeof(num), "%lld", (long long)s->start_ns);
    json_object_object_add(o, "startTimeUnixNano", json_object_new_string(num));
    snprintf(num, sizeof(num), "%lld", (long long)(s->end_ns ? s->end_ns : end_ns));
    json_object_object_add(o, "endTimeUnixNano", json_object_new_string(num));
    json_object_object_add(o, "attributes", json_object_get(s->attrs));
    json_object_object_add(status, "code", json_object_new_int(s->error ? 2 : 1));
    json_object_object_add(o, "status", status);
    return o;
}

/* ---- the exporter thread --------------------------------------------------------------- */

struct export_item {
    char *url;
    char *authorization;
    char *body;
};

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cond = PTHREAD_COND_INITIALIZER;
static struct export_item queue[TRACE_QUEUE_MAX];
static size_t q_head, q_len;
static bool exporter_running;
static pid_t exporter_pid;

static void item_free(struct export_item *it)
{
    free(it->url);
    free(it->authorization);
    free(it->body);
    memset(it, 0, sizeof(*it));
}

static void post(const struct export_item *it)
{
    char auth[8192], err[256];
    const char *lines[2] = {"Content-Type: application/json", auth};
    struct httpc_request rq = {
        .method = "POST",
        .url = it->url,
        .headers = lines,
        .nheaders = 1,
        .body = it->body,
        .body_len = strlen(it->body),
        .timeout_ms = EXPORT_TIMEOUT_MS,
        .connect_timeout_ms = EXPORT_CONNECT_MS,
        .discard_body = true,
    };
    struct httpc_response res;
    int r;

    if (it->authorization) {
        snprintf(auth, sizeof(auth), "Authorization: %s", it->authorization);
        rq.nheaders = 2;
    }
    r = httpc_perform(httpc_thread_handle(), &rq, &res, err, sizeof(err));
    if (r < 0) {
        log_debug("trace export failed: %s", err);
        return;
    }
    if (res.status >= 300)
        log_debug("trace export failed: HTTP %ld", res.status);
    httpc_response_release(&res);
}

static void *exporter(void *arg)
{
    (void)arg;
    for (;;) {
        struct export_item it;

        pthread_mutex_lock(&q_lock);
        while (q_len == 0)
            pthread_cond_wait(&q_cond, &q_lock);
        it = queue[q_head];
        memset(&queue[q_head], 0, sizeof(queue[q_head]));
        q_head = (q_head + 1) % TRACE_QUEUE_MAX;
        q_len--;
        pthread_mutex_unlock(&q_lock);
        post(&it);
        item_free(&it);
    }
    return NULL;
}

static void enqueue(struct export_item *it)
{
    pthread_mutex_lock(&q_lock);
    /* a forked child inherits the flag but not the thread */
    if (!exporter_running || exporter_pid != getpid()) {
        pthread_t tid;
        pthread_attr_t attr;

        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        exporter_running = pthread_create(&tid, &attr, exporter, NULL) == 0;
        exporter_pid = getpid();
        pthread_attr_destroy(&attr);
    }
    if (!exporter_running || q_len == TRACE_QUEUE_MAX) {
        pthread_mutex_unlock(&q_lock);
        log_debug("trace export queue full: dropping a trace");
        item_free(it);
        return;
    }
    queue[(q_head + q_len) % TRACE_QUEUE_MAX] = *it;
    q_len++;
    pthread_cond_signal(&q_cond);
    pthread_mutex_unlock(&q_lock);
}

void trace_run_finish(struct trace_run *t, const struct run_result *res)
{
    json_object *doc, *rs, *resource, *rattrs, *kv, *v, *scope_spans, *ss, *scope, *spans;
    struct export_item it;
    int64_t end = util_wall_ns();
    char url[2100];

    if (!t)
        return;
    if (res->stop_reason)
        attr_str(&t->turn, "gen_ai.response.finish_reasons", res->stop_reason);
    if (res->usage.present) {
        attr_int(&t->turn, "gen_ai.usage.input_tokens", res->usage.input);
        attr_int(&t->turn, "gen_ai.usage.output_tokens", res->usage.output);
        attr_int(&t->invoke, "gen_ai.usage.input_tokens", res->usage.input);
        attr_int(&t->invoke, "gen_ai.usage.output_tokens", res->usage.output);
    }
    if (!res->ok) {
        t->turn.error = t->invoke.error = true;
        attr_str(&t->turn, "error.type", "run_failed");
    }
    t->turn.end_ns = end;
    t->invoke.end_ns = end;
    spans = json_object_new_array();
    json_object_array_add(spans, span_json(t->trace_id, &t->invoke, end));
    json_object_array_add(spans, span_json(t->trace_id, &t->turn, end));
    for (size_t i = 0; i < t->ntools; i++)
        json_object_array_add(spans, span_json(t->trace_id, &t->tools[i], end));
    for (size_t i = 0; i < t->nsandbox; i++)
        json_object_array_add(spans, span_json(t->trace_id, &t->sandbox[i], end));
    scope = json_object_new_object();
    json_object_object_add(scope, "name", json_object_new_string("agent-runner"));
    json_object_object_add(scope, "version", json_object_new_string(AR_VERSION));
    ss = json_object_new_object();
    json_object_object_add(ss, "scope", scope);
    json_object_object_add(ss, "spans", spans);
    scope_spans = json_object_new_array();
    json_object_array_add(scope_spans, ss);
    rattrs = json_object_new_array();
    kv = json_object_new_object();
    v = json_object_new_object();
    json_object_object_add(v, "stringValue", json_object_new_string("agent-runner"));
    json_object_object_add(kv, "key", json_object_new_string("service.name"));
    json_object_object_add(kv, "value", v);
    json_object_array_add(rattrs, kv);
    resource = json_object_new_object();
    json_object_object_add(resource, "attributes", rattrs);
    rs = json_object_new_object();
    json_object_object_add(rs, "resource", resource);
    json_object_object_add(rs, "scopeSpans", scope_spans);
    doc = json_object_new_object();
    json_object_object_add(doc, "resourceSpans", json_object_new_array());
    json_object_array_add(jsonx_get(doc, "resourceSpans"), rs);

    /* an endpoint ending in /v1/traces is used as is; a base URL gets it appended */
    if (strstr(t->endpoint, "/v1/traces"))
        snprintf(url, sizeof(url), "%s", t->endpoint);
    else
        snprintf(url, sizeof(url), "%s%sv1/traces", t->endpoint,
                 t->endpoint[strlen(t->endpoint) - 1] == '/' ? "" : "/");
    it.url = strdup(url);
    it.authorization = t->authorization;
    t->authorization = NULL;
    it.body = strdup(jsonx_text(doc, NULL));
    json_object_put(doc);
    if (it.url && it.body)
        enqueue(&it);
    else
        item_free(&it);
    json_object_put(t->invoke.attrs);
    json_object_put(t->turn.attrs);
    for (size_t i = 0; i < t->ntools; i++)
        json_object_put(t->tools[i].attrs);
    for (size_t i = 0; i < t->nsandbox; i++)
        json_object_put(t->sandbox[i].attrs);
    free(t);
}

void trace_run_discard(struct trace_run *t)
{
    if (!t)
        return;
    free(t->authorization);
    json_object_put(t->invoke.attrs);
    json_object_put(t->turn.attrs);
    for (size_t i = 0; i < t->ntools; i++)
        json_object_put(t->tools[i].attrs);
    free(t);
}
