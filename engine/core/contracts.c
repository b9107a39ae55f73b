#include "core/contracts.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/jsonx.h"
#include "base/util.h"

const char *ar_strerror(int r)
{
    switch (r) {
    case AR_E_INVALID_REQUEST:
        return "invalid request";
    case AR_E_PROTOCOL:
        return "harness protocol error";
    case AR_E_HARNESS_EXITED:
        return "harness exited";
    case AR_E_HARNESS_ERROR:
        return "harness error";
    case AR_E_TIMEOUT:
        return "run limit exceeded";
    case AR_E_CAPACITY:
        return "runner at capacity";
    case AR_E_SANDBOX:
        return "sandbox failure";
    case AR_E_CANCELLED:
        return "cancelled";
    case AR_E_CLIENT_GONE:
        return "client disconnected";
    case AR_E_UNAVAILABLE:
        return "not available";
    case AR_E_MODEL:
        return "model unavailable";
    case AR_E_RETRY:
        return "retry";
    case AR_E_SANDBOX_CAPACITY:
        return "sandbox provider at capacity";
    case AR_E_SANDBOX_LIMIT:
        return "sandbox limit reached";
    case AR_E_KEEPER_LOST:
        return "the environment's keeper process died";
    default:
        if (r < 0 && r > -4096)
            return strerror(-r);
        return "unknown error";
    }
}

void run_request_release(struct run_request *req)
{
    if (req->skills) {
        for (size_t i = 0; i < req->nskills; i++)
            free(req->skills[i].files);
    }
    free(req->skills);
    if (req->messages) {
        for (size_t i = 0; i < req->nmessages; i++)
            free(req->messages[i].blocks);
    }
    free(req->messages);
    free(req->harness_files);
    if (req->tools.servers) {
        for (size_t i = 0; i < req->tools.nservers; i++)
            free(req->tools.servers[i].headers);
    }
    free(req->tools.servers);
    free(req->tools.custom);
    free(req->mc.headers);
    free(req->mc.environment);
    free(req->mc.credentials);
    if (req->root)
        json_object_put(req->root);
    memset(req, 0, sizeof(*req));
}

/* ---- the run's tools -------------------------------------------------------------------- */

#define PATH_SEGMENTS_MAX 32
#define PATH_SEGMENT_MAX 128

bool run_tools_path_ok(const char *path)
{
    const char *p = path;
    size_t segments = 0;

    if (!path || !*path)
        return false;
    for (;;) {
        size_t n = strcspn(p, ".");

        if (n == 0 || n > PATH_SEGMENT_MAX || ++segments > PATH_SEGMENTS_MAX)
            return false;
        if ((n == 9 && strncmp(p, "__proto__", 9) == 0) ||
            (n == 11 && strncmp(p, "constructor", 11) == 0) ||
            (n == 9 && strncmp(p, "prototype", 9) == 0))
            return false;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)p[i] < 0x20)
                return false;
        if (!p[n])
            return true;
        p += n + 1;
    }
}

bool run_tools_ctx_token_ok(const char *token)
{
    return token && strncmp(token, "$ctx.", 5) == 0 && run_tools_path_ok(token + 5);
}

int run_tools_schema(json_object *o, const char *field, json_object **ret, char *err, size_t errlen)
{
    json_object *v = jsonx_get(o, "inputSchema");
    size_t len;

    *ret = NULL;
    if (!v)
        v = jsonx_get(o, "input_schema");
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_object))
        return util_fail(-EINVAL, err, errlen, "%s.inputSchema: expected an object, got %s", field,
                         jsonx_type_word(v));
    jsonx_text(v, &len);
    if (len > TOOL_SCHEMA_MAX)
        return util_fail(-EINVAL, err, errlen, "%s.inputSchema: longer than %d bytes", field,
                         TOOL_SCHEMA_MAX);
    *ret = v;
    return 0;
}

int run_request_prompt_text(const struct run_request *req, struct buf *out)
{
    const struct chat_message *m;
    bool any = false;
    int r;

    if (req->nmessages == 0)
        return -ENOENT;
    m = &req->messages[req->nmessages - 1];
    if (!m->role || strcmp(m->role, "user") != 0)
        return -ENOENT;
    for (size_t i = 0; i < m->nblocks; i++) {
        if (m->blocks[i].type != BLOCK_TEXT || !m->blocks[i].text)
            continue;
        if (any) {
            r = buf_append_char(out, '\n');
            if (r < 0)
                return r;
        }
        r = buf_append_str(out, m->blocks[i].text);
        if (r < 0)
            return r;
        any = true;
    }
    return any ? 0 : -ENOENT;
}

bool run_request_model_takes_images(const struct run_request *req)
{
    json_object *m = jsonx_path(req->root, "modelCapabilities.inputModalities");

    if (!m || !json_object_is_type(m, json_type_array))
        return false;
    for (size_t i = 0; i < json_object_array_length(m); i++) {
        json_object *v = json_object_array_get_idx(m, i);
        const char *s;

        if (!json_object_is_type(v, json_type_string))
            continue;
        s = json_object_get_string(v);
        while (*s == ' ')
            s++;
        if (strncasecmp(s, "image", 5) == 0 &&
            (s[5] == '\0' || s[5] == ' ' ||
             ((s[5] == 's' || s[5] == 'S') && (s[6] == '\0' || s[6] == ' '))))
            return true;
    }
    return false;
}

void run_result_init(struct run_result *res)
{
    memset(res, 0, sizeof(*res));
    buf_init(&res->output, RUN_OUTPUT_MAX);
}

void run_result_release(struct run_result *res)
{
    buf_release(&res->output);
    free(res->error);
    free(res->stop_reason);
    free(res->session_id);
    free(res->model);
    free(res->trace_id);
    if (res->events)
        json_object_put(res->events);
    if (res->tool_call_ids)
        json_object_put(res->tool_call_ids);
    memset(res, 0, sizeof(*res));
}

void run_result_fail(struct run_result *res, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    res->ok = false;
    if (res->error)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    res->error = strdup(msg);
}

static void add_str(json_object *o, const char *key, const char *value)
{
    if (value)
        json_object_object_add(o, key, json_object_new_string(value));
}

static json_object *caps_to_json(const struct harness_caps *c)
{
    json_object *o = json_object_new_object();

    json_object_object_add(o, "textMessages", json_object_new_boolean(c->text_messages));
    json_object_object_add(o, "images", json_object_new_boolean(c->images));
    json_object_object_add(o, "fileAttachments", json_object_new_boolean(c->file_attachments));
    json_object_object_add(o, "mcpTools", json_object_new_boolean(c->mcp_tools));
    json_object_object_add(o, "toolCalls", json_object_new_boolean(c->tool_calls));
    json_object_object_add(o, "reasoning", json_object_new_boolean(c->reasoning));
    json_object_object_add(o, "planMode", json_object_new_boolean(c->plan_mode));
    json_object_object_add(o, "permissions", json_object_new_boolean(c->permissions));
    json_object_object_add(o, "usage", json_object_new_boolean(c->usage));
    json_object_object_add(o, "streamingDeltas", json_object_new_boolean(c->streaming_deltas));
    json_object_object_add(o, "sessionLifecycle", json_object_new_boolean(c->session_lifecycle));
    return o;
}

void run_usage_fill(json_object *o, const struct run_usage *u)
{
    json_object_object_add(o, "input", json_object_new_int64(u->input));
    json_object_object_add(o, "output", json_object_new_int64(u->output));
    json_object_object_add(o, "total", json_object_new_int64(u->total));
    if (!u->cost_unknown)
        json_object_object_add(o, "cost", json_object_new_double(u->cost));
}

json_object *run_result_to_json(const struct run_result *res)
{
    json_object *o = json_object_new_object();

    json_object_object_add(o, "ok", json_object_new_boolean(res->ok));
    if (!res->ok) {
        add_str(o, "error", res->error ? res->error : "run failed");
        add_str(o, "stopReason", res->stop_reason);
        add_str(o, "sessionId", res->session_id);
        add_str(o, "traceId", res->trace_id);
        if (res->events)
            json_object_object_add(o, "events", json_object_get(res->events));
        return o;
    }
    json_object *msgs = json_object_new_array();
    if (res->output.len > 0) {
        json_object *m = json_object_new_object();
        add_str(m, "role", "assistant");
        json_object_object_add(m, "content",
                               json_object_new_string_len(res->output.data, (int)res->output.len));
        json_object_array_add(msgs, m);
    }
    json_object_object_add(o, "output",
                           json_object_new_string_len(buf_str(&res->output), (int)res->output.len));
    json_object_object_add(o, "messages", msgs);
    json_object_object_add(o, "events",
                           res->events ? json_object_get(res->events) : json_object_new_array());
    if (res->usage.present) {
        json_object *u = json_object_new_object();
        run_usage_fill(u, &res->usage);
        json_object_object_add(o, "usage", u);
    }
    add_str(o, "stopReason", res->stop_reason);
    if (res->caps.known)
        json_object_object_add(o, "capabilities", caps_to_json(&res->caps));
    add_str(o, "sessionId", res->session_id);
    add_str(o, "model", res->model);
    add_str(o, "traceId", res->trace_id);
    return o;
}

static const char *const teardown_names[TEARDOWN_COUNT] = {
    [TEARDOWN_NONE] = "none",
    [TEARDOWN_PER_TURN] = "per-turn",
    [TEARDOWN_CONTINUITY_INVALID] = "continuity-invalid",
    [TEARDOWN_RUNTIME_INCOMPATIBLE] = "runtime-incompatible",
    [TEARDOWN_SESSION_INCOMPATIBLE] = "session-incompatible",
    [TEARDOWN_CAPACITY_EVICTION] = "capacity-eviction",
    [TEARDOWN_IDLE_EXPIRY] = "idle-expiry",
    [TEARDOWN_KILL] = "kill",
    [TEARDOWN_FAILED_TURN] = "failed-turn",
    [TEARDOWN_ABORTED] = "aborted",
    [TEARDOWN_SHUTDOWN_IDLE] = "shutdown-idle",
    [TEARDOWN_SHUTDOWN_IN_FLIGHT] = "shutdown-in-flight",
    [TEARDOWN_HARNESS_EXITED] = "harness-exited",
    [TEARDOWN_APPROVAL_EXPIRY] = "approval-expiry",
    [TEARDOWN_SUPERSEDED] = "superseded",
    [TEARDOWN_SANDBOX_LIMIT] = "sandbox-limit",
    [TEARDOWN_KEEPER_DIED] = "keeper-died",
    [TEARDOWN_OWNER_MOVED] = "owner-moved",
};

const char *teardown_reason_name(enum teardown_reason r)
{
    if ((int)r < 0 || r >= TEARDOWN_COUNT)
        return "unknown";
    return teardown_names[r];
}

const char *harness_kind_name(enum harness_kind kind)
{
    static const char *const names[HARNESS_COUNT] = {
        [HARNESS_PI] = "pi",
        [HARNESS_CLAUDE] = "claude",
        [HARNESS_CODEX] = "codex",
        [HARNESS_OPENCODE] = "opencode",
        [HARNESS_SCRIPTED] = "scripted",
    };

    return (unsigned)kind < HARNESS_COUNT ? names[kind] : "unknown";
}

const char *provider_disposition_name(enum provider_disposition d)
{
    static const char *const names[] = {"keep_running", "stop_and_retain", "destroy"};

    return (unsigned)d < ARRAY_SIZE(names) ? names[d] : "unknown";
}

const char *provider_lease_outcome_name(enum provider_lease_outcome o)
{
    static const char *const names[] = {"created", "resumed", "replacement"};

    return (unsigned)o < ARRAY_SIZE(names) ? names[o] : "unknown";
}

const char *provider_replacement_reason_name(enum provider_replacement_reason r)
{
    static const char *const names[] = {"", "not_found", "expired", "identity_mismatch",
                                        "resume_failed"};

    return (unsigned)r < ARRAY_SIZE(names) ? names[r] : "unknown";
}
