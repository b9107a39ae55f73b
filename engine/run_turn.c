#include "run_turn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "log.h"
#include "policy.h"
#include "util.h"

#define TOOL_OUTPUT_MAX (4u * 1024 * 1024)
#define PAUSE_QUIET_MS 150   /* gates that arrive together park together */
#define CANCEL_POLL_MS 100
#define CANCEL_GRACE_MS 10000

void turn_state_init(struct turn_state *st, struct run_limits *limits)
{
    memset(st, 0, sizeof(*st));
    st->limits = limits;
}

void turn_state_release(struct turn_state *st)
{
    for (size_t i = 0; i < st->ntools; i++) {
        free(st->tools[i].id);
        free(st->tools[i].name);
        free(st->tools[i].input);
    }
    free(st->tools);
    memset(st, 0, sizeof(*st));
}

void turn_close_block(struct turn_state *st, struct event_stream *es)
{
    if (st->open == 0)
        return;
    event_emit(es, event_block(st->open == 1 ? "message_end" : "thought_end", st->open_id));
    st->open = 0;
}

static void open_block(struct turn_state *st, struct event_stream *es, int kind)
{
    if (st->open == kind)
        return;
    turn_close_block(st, es);
    st->open = kind;
    if (kind == 1)
        snprintf(st->open_id, sizeof(st->open_id), "msg-%u", ++st->msg_seq);
    else
        snprintf(st->open_id, sizeof(st->open_id), "reason-%u", ++st->thought_seq);
    event_emit(es, event_block(kind == 1 ? "message_start" : "thought_start", st->open_id));
}

static int text_chunk(struct turn_state *st, json_object *update, struct event_stream *es,
                      struct run_result *res, int kind)
{
    json_object *content = jsonx_get(update, "content");
    const char *type = jsonx_str(content, "type"), *text = jsonx_str(content, "text");

    if (!type || strcmp(type, "text") != 0 || !text || !text[0])
        return 0;
    if (kind == 1 && st->is_noise && st->is_noise(text))
        return 0;
    open_block(st, es, kind);
    if (kind == 1 && buf_append_str(&res->output, text) < 0)
        return -E2BIG;
    return event_emit(es, event_text(kind == 1 ? "message_delta" : "thought_delta", st->open_id,
                                     text));
}

static struct turn_tool *find_tool(struct turn_state *st, const char *id)
{
    for (size_t i = 0; i < st->ntools; i++)
        if (strcmp(st->tools[i].id, id) == 0)
            return &st->tools[i];
    return NULL;
}

static struct turn_tool *add_tool(struct turn_state *st, const char *id)
{
    struct turn_tool *t;

    if (st->ntools == st->cap_tools) {
        size_t cap = st->cap_tools ? st->cap_tools * 2 : 8;
        struct turn_tool *n = realloc(st->tools, cap * sizeof(*n));
        if (!n)
            return NULL;
        st->tools = n;
        st->cap_tools = cap;
    }
    t = &st->tools[st->ntools];
    memset(t, 0, sizeof(*t));
    t->id = strdup(id);
    if (!t->id)
        return NULL;
    st->ntools++;
    return t;
}

/* Claude names its tools in _meta.claudeCode.toolName; everyone else in title. */
static const char *tool_name_of(json_object *update)
{
    const char *n = jsonx_str(jsonx_path(update, "_meta.claudeCode"), "toolName");

    return n ? n : jsonx_str(update, "title");
}

/* The text a tool produced: text content blocks, diffs named by path, else rawOutput. */
static void tool_output(json_object *update, struct buf *out)
{
    json_object *content = jsonx_get(update, "content"), *raw;

    for (size_t i = 0; content && json_object_is_type(content, json_type_array) &&
                       i < json_object_array_length(content);
         i++) {
        json_object *c = json_object_array_get_idx(content, i);
        const char *type = jsonx_str(c, "type");

        if (type && strcmp(type, "content") == 0) {
            const char *text = jsonx_str(jsonx_get(c, "content"), "text");
            if (text) {
                if (out->len)
                    buf_append_char(out, '\n');
                buf_append_str(out, text);
            }
        } else if (type && strcmp(type, "diff") == 0) {
            const char *path = jsonx_str(c, "path");
            if (out->len)
                buf_append_char(out, '\n');
            buf_printf(out, "edited %s", path ? path : "a file");
        }
    }
    if (out->len)
        return;
    raw = jsonx_get(update, "rawOutput");
    if (raw) {
        if (json_object_is_type(raw, json_type_string))
            buf_append_str(out, json_object_get_string(raw));
        else
            buf_append_str(out, jsonx_text(raw, NULL));
    }
}

static int tool_update(struct turn_state *st, json_object *update, struct event_stream *es,
                       bool announce)
{
    const char *id = jsonx_str(update, "toolCallId"), *status = jsonx_str(update, "status");
    json_object *raw = jsonx_get(update, "rawInput");
    const char *name = tool_name_of(update);
    struct turn_tool *t;

    if (!id)
        return 0;
    turn_close_block(st, es);
    t = find_tool(st, id);
    if (!t) {
        t = add_tool(st, id);
        if (!t)
            return -ENOMEM;
        announce = true;
        if (st->limits)
            run_limits_tool_start(st->limits, id, now_ms());
    }
    if (name && (!t->name || strcmp(t->name, name) != 0)) {
        free(t->name);
        t->name = strdup(name);
    }
    if (raw) {
        const char *text = jsonx_text(raw, NULL);
        if (!t->input || strcmp(t->input, text) != 0) {
            free(t->input);
            t->input = strdup(text);
            announce = true;
        }
    }
    if (announce && !t->done)
        event_emit(es, event_tool_call(id, t->name, raw));
    if (status && (strcmp(status, "completed") == 0 || strcmp(status, "failed") == 0) &&
        !t->done) {
        struct buf out;

        buf_init(&out, TOOL_OUTPUT_MAX);
        tool_output(update, &out);
        t->done = true;
        if (st->limits)
            run_limits_tool_end(st->limits, id);
        event_emit(es, event_tool_result(id, buf_str(&out), strcmp(status, "failed") == 0,
                                         t->denied));
        buf_release(&out);
    }
    return 0;
}

static int usage_update(json_object *update, struct event_stream *es, struct run_result *res)
{
    struct run_usage u = {0};
    json_object *used = jsonx_get(update, "used"), *cost = jsonx_get(update, "cost");

    if (used && (json_object_is_type(used, json_type_int) ||
                 json_object_is_type(used, json_type_double)))
        u.total = json_object_get_int64(used);
    if (cost) {
        json_object *amount = jsonx_get(cost, "amount");
        if (amount)
            u.cost = json_object_get_double(amount);
    }
    if (u.cost != 0.0)
        res->usage.cost = u.cost;
    return event_emit(es, event_usage(&u));
}

int turn_translate_update(struct turn_state *st, json_object *update, struct event_stream *es,
                          struct run_result *res)
{
    const char *kind = jsonx_str(update, "sessionUpdate");

    if (!kind)
        return 0;
    if (strcmp(kind, "agent_message_chunk") == 0)
        return text_chunk(st, update, es, res, 1);
    if (strcmp(kind, "agent_thought_chunk") == 0)
        return text_chunk(st, update, es, res, 2);
    if (strcmp(kind, "tool_call") == 0)
        return tool_update(st, update, es, true);
    if (strcmp(kind, "tool_call_update") == 0)
        return tool_update(st, update, es, false);
    if (strcmp(kind, "usage_update") == 0)
        return usage_update(update, es, res);
    /* plan, commands, modes, config options, session info, user chunks: not events */
    return 0;
}

static bool cap_bool(json_object *o, const char *path)
{
    json_object *v = jsonx_path(o, path);

    return v && json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v);
}

void turn_caps_from_agent(json_object *agent_caps, enum harness_kind kind,
                          struct harness_caps *caps)
{
    memset(caps, 0, sizeof(*caps));
    caps->known = true;
    caps->text_messages = true;
    caps->tool_calls = true;
    caps->streaming_deltas = true;
    caps->usage = true;
    caps->images = cap_bool(agent_caps, "promptCapabilities.image");
    caps->file_attachments = cap_bool(agent_caps, "promptCapabilities.embeddedContext");
    caps->mcp_tools = cap_bool(agent_caps, "mcpCapabilities.http");
    caps->session_lifecycle = cap_bool(agent_caps, "loadSession");
    caps->reasoning = kind == HARNESS_CLAUDE || kind == HARNESS_CODEX ||
                      kind == HARNESS_SCRIPTED;
    caps->plan_mode = kind == HARNESS_CLAUDE || kind == HARNESS_CODEX;
    caps->permissions = kind != HARNESS_PI;
}

/* Answer a harness request that is not part of the turn's logic. */
static void answer_unknown(struct environment *env, const struct acp_msg *m)
{
    char msg[160];
    struct buf out;

    buf_init(&out, 4096);
    snprintf(msg, sizeof(msg), "Method not found: %.120s", m->method);
    if (acp_encode_error(&out, m->id, ACP_METHOD_NOT_FOUND, msg) == 0)
        (void)environment_send(env, &out);
    buf_release(&out);
}

/* Wait for the response to request id, handling whatever arrives meanwhile. */
static int await_response(struct environment *env, int64_t id, int64_t deadline,
                          struct acp_msg *ret)
{
    for (;;) {
        struct acp_msg m;
        int64_t got;
        int r = environment_recv(env, deadline, &m);

        if (r < 0)
            return r;
        if (m.kind == ACP_RESPONSE && acp_msg_int_id(&m, &got) == 0 && got == id) {
            *ret = m;
            return 0;
        }
        if (m.kind == ACP_REQUEST)
            answer_unknown(env, &m);
        acp_msg_release(&m);
    }
}

static int call(struct environment *env, const char *method, json_object *params,
                int64_t deadline, json_object **ret_result, char *err, size_t errlen)
{
    struct acp_msg m;
    int64_t id;
    int r;

    r = environment_request(env, method, params, &id);
    if (r < 0) {
        snprintf(err, errlen, "%s: the harness is gone", method);
        return r;
    }
    r = await_response(env, id, deadline, &m);
    if (r == -ETIMEDOUT) {
        snprintf(err, errlen, "%s: no answer from the harness in time", method);
        return AR_E_TIMEOUT;
    }
    if (r < 0) {
        snprintf(err, errlen, "%s: the harness exited%s", method,
                 env->harness_exited ? "" : " (connection lost)");
        return r;
    }
    if (m.error) {
        snprintf(err, errlen, "%s failed: %.300s", method, acp_msg_error_message(&m));
        acp_msg_release(&m);
        return AR_E_HARNESS_ERROR;
    }
    *ret_result = m.result ? json_object_get(m.result) : NULL;
    acp_msg_release(&m);
    return 0;
}

/* The session's model config option (category "model"), or NULL. */
static json_object *model_option(json_object *session_result)
{
    json_object *opts = jsonx_get(session_result, "configOptions");

    for (size_t i = 0; opts && i < json_object_array_length(opts); i++) {
        json_object *o = json_object_array_get_idx(opts, i);
        const char *cat = jsonx_str(o, "category"), *id = jsonx_str(o, "id");
        if ((cat && strcmp(cat, "model") == 0) || (!cat && id && strcmp(id, "model") == 0))
            return o;
    }
    return NULL;
}

/*
 * Make the session run on model_id: nothing to do when it already does (models.currentModelId
 * or the model config option), else session/set_config_option for agents with a model option
 * (codex), else the older session/set_model (pi, claude). Strict: failing to select is fatal.
 */
static int select_model(struct environment *env, json_object *session_result,
                        const char *model_id, bool strict, int64_t deadline, char *err,
                        size_t errlen)
{
    json_object *opt = model_option(session_result), *params, *res = NULL;
    const char *current = jsonx_str(jsonx_get(session_result, "models"), "currentModelId");
    const char *method;
    char why[256];
    int r;

    if (!model_id || !model_id[0])
        return 0;
    if (!current && opt)
        current = jsonx_str(opt, "currentValue");
    if (current && strcmp(current, model_id) == 0)
        return 0;
    params = json_object_new_object();
    json_object_object_add(params, "sessionId", json_object_new_string(env->acp_session));
    if (opt && jsonx_str(opt, "id")) {
        method = "session/set_config_option";
        json_object_object_add(params, "configId", json_object_new_string(jsonx_str(opt, "id")));
        json_object_object_add(params, "value", json_object_new_string(model_id));
    } else {
        method = "session/set_model";
        json_object_object_add(params, "modelId", json_object_new_string(model_id));
    }
    r = call(env, method, params, deadline, &res, err, errlen);
    json_object_put(params);
    json_object_put(res);
    if (r < 0 && strict) {
        snprintf(why, sizeof(why), "%s", err);
        snprintf(err, errlen, "model: cannot select \"%.200s\" (%s)", model_id, why);
        return r == AR_E_HARNESS_ERROR ? AR_E_MODEL : r;
    }
    if (r < 0)
        log_debug("model '%s' not selected, continuing (not strict)", model_id);
    return 0;
}

int run_turn_open_session(struct environment *env, const char *model_id, bool strict,
                          int64_t deadline, char *err, size_t errlen)
{
    json_object *params, *caps, *fs, *info, *result = NULL;
    const char *sid;
    int r;

    params = json_object_new_object();
    json_object_object_add(params, "protocolVersion", json_object_new_int(ACP_PROTOCOL_VERSION));
    caps = json_object_new_object();
    fs = json_object_new_object();
    json_object_object_add(fs, "readTextFile", json_object_new_boolean(0));
    json_object_object_add(fs, "writeTextFile", json_object_new_boolean(0));
    json_object_object_add(caps, "fs", fs);
    json_object_object_add(caps, "terminal", json_object_new_boolean(0));
    json_object_object_add(params, "clientCapabilities", caps);
    info = json_object_new_object();
    json_object_object_add(info, "name", json_object_new_string("agent-runner"));
    json_object_object_add(info, "version", json_object_new_string(AR_VERSION));
    json_object_object_add(params, "clientInfo", info);
    r = call(env, "initialize", params, deadline, &result, err, errlen);
    json_object_put(params);
    if (r < 0)
        return r;
    if (env->agent_caps)
        json_object_put(env->agent_caps);
    env->agent_caps = json_object_get(jsonx_get(result, "agentCapabilities"));
    json_object_put(result);
    result = NULL;

    params = json_object_new_object();
    json_object_object_add(params, "cwd", json_object_new_string("/workspace"));
    json_object_object_add(params, "mcpServers", json_object_new_array());
    r = call(env, "session/new", params, deadline, &result, err, errlen);
    json_object_put(params);
    if (r < 0)
        return r;
    sid = jsonx_str(result, "sessionId");
    if (!sid || !sid[0] || strlen(sid) >= sizeof(env->acp_session)) {
        snprintf(err, errlen, "session/new: the harness returned no usable sessionId");
        json_object_put(result);
        return AR_E_PROTOCOL;
    }
    snprintf(env->acp_session, sizeof(env->acp_session), "%s", sid);
    r = select_model(env, result, model_id, strict, deadline, err, errlen);
    json_object_put(result);
    return r;
}

static void send_cancel(struct environment *env)
{
    json_object *params = json_object_new_object();
    struct buf out;

    json_object_object_add(params, "sessionId", json_object_new_string(env->acp_session));
    buf_init(&out, 4096);
    if (acp_encode_notification(&out, "session/cancel", params) == 0)
        (void)environment_send(env, &out);
    buf_release(&out);
    json_object_put(params);
}

/* The optionId of the first option of kind (allow_once, reject_once), never an "always". */
static const char *option_of(json_object *params, const char *kind_prefix)
{
    json_object *opts = jsonx_get(params, "options");
    const char *fallback = NULL;

    for (size_t i = 0; opts && i < json_object_array_length(opts); i++) {
        json_object *o = json_object_array_get_idx(opts, i);
        const char *kind = jsonx_str(o, "kind"), *id = jsonx_str(o, "optionId");

        if (!kind || !id || strncmp(kind, kind_prefix, strlen(kind_prefix)) != 0 ||
            strstr(kind, "always"))
            continue;
        if (strstr(kind, "once"))
            return id;
        if (!fallback)
            fallback = id;
    }
    return fallback;
}

/* Answer a permission request (id given as JSON text): option, or "cancelled" when NULL. */
static void reply_permission(struct environment *env, const char *id_json, const char *option)
{
    json_object *id = NULL, *res = json_object_new_object(), *outcome = json_object_new_object();
    char err[64];
    struct buf out;

    if (jsonx_parse(id_json, strlen(id_json), 4, &id, err, sizeof(err)) < 0)
        id = NULL;
    if (option && option[0]) {
        json_object_object_add(outcome, "outcome", json_object_new_string("selected"));
        json_object_object_add(outcome, "optionId", json_object_new_string(option));
    } else {
        json_object_object_add(outcome, "outcome", json_object_new_string("cancelled"));
    }
    json_object_object_add(res, "outcome", outcome);
    buf_init(&out, 4096);
    if (acp_encode_result(&out, id, res) == 0)
        (void)environment_send(env, &out);
    buf_release(&out);
    json_object_put(res);
    json_object_put(id);
}

static void mark_denied(struct turn_state *st, const char *tool_call_id)
{
    struct turn_tool *t = find_tool(st, tool_call_id);

    if (!t)
        t = add_tool(st, tool_call_id);
    if (t)
        t->denied = true;
}

/*
 * The gate of a session/request_permission as the permission plan sees it. The tool's name is
 * the one its announcement carried (claude names the tool there, and only a title here).
 */
static void gate_of(struct turn_state *st, json_object *params, struct permission_gate *g)
{
    json_object *tc = jsonx_get(params, "toolCall");
    const char *kind = jsonx_str(tc, "kind"), *id = jsonx_str(tc, "toolCallId");
    struct turn_tool *known = id ? find_tool(st, id) : NULL;

    memset(g, 0, sizeof(*g));
    g->tool_name = known && known->name ? known->name : tool_name_of(tc);
    g->args = jsonx_get(tc, "rawInput");
    g->spec = PERMISSION_UNSET;
    g->server = PERMISSION_UNSET;
    if (!kind)
        g->read_only_hint = -1;
    else
        g->read_only_hint = strcmp(kind, "read") == 0 || strcmp(kind, "search") == 0 ||
                            strcmp(kind, "think") == 0;
}

static json_object *interaction_request(const struct pool_approval *g, json_object *params)
{
    json_object *ev = event_new("interaction_request"), *payload = json_object_new_object();
    json_object *tc = params ? jsonx_get(params, "toolCall") : NULL, *copy = NULL;

    json_object_object_add(ev, "id", json_object_new_string(g->tool_call_id));
    json_object_object_add(ev, "kind", json_object_new_string("user_approval"));
    json_object_object_add(payload, "toolCallId", json_object_new_string(g->tool_call_id));
    if (tc && json_object_is_type(tc, json_type_object) &&
        json_object_deep_copy(tc, &copy, NULL) == 0) {
        json_object_object_add(copy, "resolvedName", json_object_new_string(g->tool_name));
        json_object_object_add(payload, "toolCall", copy);
    } else {
        json_object *min = json_object_new_object();
        json_object_object_add(min, "toolCallId", json_object_new_string(g->tool_call_id));
        json_object_object_add(min, "resolvedName", json_object_new_string(g->tool_name));
        json_object_object_add(payload, "toolCall", min);
    }
    if (params && jsonx_get(params, "options"))
        json_object_object_add(payload, "options", json_object_get(jsonx_get(params, "options")));
    json_object_object_add(payload, "interactionToken", json_object_new_string(g->token));
    json_object_object_add(ev, "payload", payload);
    return ev;
}

static json_object *interaction_response(const struct pool_approval *g)
{
    json_object *ev = event_new("interaction_response"), *payload = json_object_new_object();

    json_object_object_add(ev, "id", json_object_new_string(g->tool_call_id));
    json_object_object_add(ev, "kind", json_object_new_string("user_approval"));
    json_object_object_add(payload, "approved", json_object_new_boolean(g->decision == 1));
    json_object_object_add(payload, "toolCallId", json_object_new_string(g->tool_call_id));
    json_object_object_add(ev, "payload", payload);
    return ev;
}

/* A cancelled turn settles the tool calls that never finished. */
static void settle_open_tools(struct turn_state *st, struct event_stream *es)
{
    for (size_t i = 0; i < st->ntools; i++) {
        struct turn_tool *t = &st->tools[i];
        if (t->done)
            continue;
        t->done = true;
        event_emit(es, event_tool_result(t->id, "INTERRUPTED_BY_USER: the turn was cancelled "
                                                "before this call finished",
                                         true, false));
    }
}

static void finish_usage(struct run_result *res, json_object *prompt_result)
{
    json_object *u = jsonx_get(prompt_result, "usage");

    if (u) {
        res->usage.input = json_object_get_int64(jsonx_get(u, "inputTokens"));
        res->usage.output = json_object_get_int64(jsonx_get(u, "outputTokens"));
        res->usage.total = json_object_get_int64(jsonx_get(u, "totalTokens"));
        if (!res->usage.total)
            res->usage.total = res->usage.input + res->usage.output;
    }
    res->usage.present = true;
}

static void record_tool_ids(const struct turn_state *st, struct run_result *res)
{
    if (!res->tool_call_ids)
        res->tool_call_ids = json_object_new_array();
    for (size_t i = 0; i < st->ntools; i++)
        json_object_array_add(res->tool_call_ids, json_object_new_string(st->tools[i].id));
}

uint32_t turn_caps_to_bits(const struct harness_caps *c)
{
    const bool v[] = {c->text_messages, c->images,      c->file_attachments, c->mcp_tools,
                      c->tool_calls,    c->reasoning,   c->plan_mode,        c->permissions,
                      c->usage,         c->streaming_deltas, c->session_lifecycle};
    uint32_t bits = 1u << 31; /* known */

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        if (v[i])
            bits |= 1u << i;
    return bits;
}

void turn_caps_from_bits(uint32_t bits, struct harness_caps *c)
{
    bool *v[] = {&c->text_messages, &c->images,      &c->file_attachments, &c->mcp_tools,
                 &c->tool_calls,    &c->reasoning,   &c->plan_mode,        &c->permissions,
                 &c->usage,         &c->streaming_deltas, &c->session_lifecycle};

    memset(c, 0, sizeof(*c));
    c->known = (bits >> 31) & 1u;
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        *v[i] = (bits >> i) & 1u;
}

int run_turn_prompt(struct environment *env, const struct turn_options *opt,
                    struct event_stream *es, struct run_result *res, struct turn_outcome *out)
{
    struct pool_approval gates[POOL_APPROVALS_MAX];
    char waiting_for[POOL_APPROVALS_MAX][96]; /* approved calls still running (resume) */
    size_t ngates = 0, nwaiting = 0;
    struct run_limits limits;
    struct turn_state st;
    char why[256];
    int64_t prompt_id, quiet_until = 0, cancel_deadline = 0;
    uint64_t seen_events, start_events = es->nevents;
    bool cancelling = false;
    int r;

    memset(out, 0, sizeof(*out));
    run_limits_start(&limits, opt->limits, now_ms());
    turn_state_init(&st, &limits);
    st.is_noise = opt->is_noise;
    if (opt->resume_prompt_id > 0) {
        prompt_id = opt->resume_prompt_id;
        for (size_t i = 0; i < opt->nresume; i++) {
            const struct pool_approval *g = &opt->resume[i];

            if (g->decision < 0) {
                gates[ngates++] = *g; /* carried forward */
                continue;
            }
            event_emit(es, interaction_response(g));
            reply_permission(env, g->request_id, g->decision == 1 ? g->allow_option
                                                                  : g->reject_option);
            if (g->decision == 1)
                snprintf(waiting_for[nwaiting++], sizeof(waiting_for[0]), "%s",
                         g->tool_call_id);
            else
                mark_denied(&st, g->tool_call_id);
        }
        if (ngates > 0 && nwaiting == 0)
            quiet_until = now_ms() + PAUSE_QUIET_MS;
        r = 0;
    } else {
        json_object *params = json_object_new_object();
        json_object_object_add(params, "sessionId", json_object_new_string(env->acp_session));
        json_object_object_add(params, "prompt", json_object_get(opt->prompt));
        r = environment_request(env, "session/prompt", params, &prompt_id);
        json_object_put(params);
    }
    if (r < 0) {
        snprintf(why, sizeof(why), "the harness is gone before the prompt");
        goto fail;
    }
    out->prompt_id = prompt_id;
    seen_events = es->nevents;
    for (;;) {
        struct acp_msg m;
        int64_t got, now = now_ms(), deadline;
        bool check_cancel = opt->should_cancel != NULL;

        if (check_cancel && !cancelling && opt->should_cancel(opt->cancel_ctx)) {
            cancelling = true;
            cancel_deadline = now + CANCEL_GRACE_MS;
            send_cancel(env);
            for (size_t i = 0; i < ngates; i++)
                reply_permission(env, gates[i].request_id, NULL);
            ngates = 0;
            quiet_until = 0;
            run_limits_pause(&limits);
            log_debug("cancelling the turn");
        }
        deadline = run_limits_deadline(&limits);
        if (quiet_until && (!deadline || quiet_until < deadline))
            deadline = quiet_until;
        if (cancelling && (!deadline || cancel_deadline < deadline))
            deadline = cancel_deadline;
        if (check_cancel && !cancelling && (!deadline || now + CANCEL_POLL_MS < deadline))
            deadline = now + CANCEL_POLL_MS;
        r = environment_recv(env, deadline, &m);
        now = now_ms();
        if (es->nevents != seen_events) {
            run_limits_event(&limits, now);
            seen_events = es->nevents;
        }
        if (r == -ETIMEDOUT) {
            if (cancelling && now >= cancel_deadline) {
                snprintf(why, sizeof(why), "the harness did not stop within %dms of the cancel",
                         CANCEL_GRACE_MS);
                r = AR_E_TIMEOUT;
                goto fail;
            }
            if (quiet_until && now >= quiet_until)
                goto paused;
            r = run_limits_check(&limits, now, why, sizeof(why));
            if (r < 0) {
                send_cancel(env);
                goto fail;
            }
            continue;
        }
        if (r < 0) {
            if (env->harness_exited)
                snprintf(why, sizeof(why), "the harness exited during the turn (status %d)",
                         env->harness_status);
            else
                snprintf(why, sizeof(why), "lost the harness: %s", ar_strerror(r));
            goto fail;
        }
        run_limits_progress(&limits, now);
        if (m.kind == ACP_NOTIFICATION && strcmp(m.method, "session/update") == 0) {
            json_object *update = jsonx_get(m.params, "update");
            const char *sid = jsonx_str(m.params, "sessionId");
            if (update && (!sid || strcmp(sid, env->acp_session) == 0)) {
                r = turn_translate_update(&st, update, es, res);
                /* an approved call that finished lets a carried-forward pause happen */
                for (size_t i = 0; r == 0 && i < nwaiting; i++) {
                    struct turn_tool *t = find_tool(&st, waiting_for[i]);
                    if (t && t->done) {
                        memmove(waiting_for[i], waiting_for[--nwaiting], sizeof(waiting_for[0]));
                        if (nwaiting == 0 && ngates > 0)
                            quiet_until = now + PAUSE_QUIET_MS;
                        break;
                    }
                }
            }
            acp_msg_release(&m);
            if (r < 0) {
                snprintf(why, sizeof(why), "turn output exceeds its limit");
                send_cancel(env);
                goto fail;
            }
            continue;
        }
        if (m.kind == ACP_REQUEST && strcmp(m.method, "session/request_permission") == 0) {
            struct permission_gate pg;
            enum permission eff, stored = PERMISSION_UNSET;
            enum verdict v;
            const char *tcid = jsonx_str(jsonx_get(m.params, "toolCall"), "toolCallId");
            const char *id_json = jsonx_text(m.id, NULL);

            gate_of(&st, m.params, &pg);
            eff = policy_permission_effective(opt->permissions, &pg);
            if (opt->stored && eff == PERMISSION_ASK)
                stored = opt->stored(opt->stored_ctx, pg.tool_name, pg.args);
            v = policy_permission_decide(eff, stored);
            if (cancelling) {
                reply_permission(env, id_json, NULL);
            } else if (v == VERDICT_ALLOW) {
                reply_permission(env, id_json, option_of(m.params, "allow"));
            } else if (v == VERDICT_DENY || !tcid || ngates >= POOL_APPROVALS_MAX ||
                       strlen(id_json) >= sizeof(gates[0].request_id)) {
                reply_permission(env, id_json, option_of(m.params, "reject"));
                if (tcid)
                    mark_denied(&st, tcid);
            } else {
                struct pool_approval *g = &gates[ngates++];
                const char *allow = option_of(m.params, "allow");
                const char *reject = option_of(m.params, "reject");

                memset(g, 0, sizeof(*g));
                snprintf(g->tool_call_id, sizeof(g->tool_call_id), "%s", tcid);
                snprintf(g->request_id, sizeof(g->request_id), "%s", id_json);
                snprintf(g->tool_name, sizeof(g->tool_name), "%s",
                         pg.tool_name ? pg.tool_name : "tool");
                snprintf(g->allow_option, sizeof(g->allow_option), "%s", allow ? allow : "");
                snprintf(g->reject_option, sizeof(g->reject_option), "%s", reject ? reject : "");
                g->decision = -1;
                (void)random_hex(g->token, 16);
                turn_close_block(&st, es);
                event_emit(es, interaction_request(g, m.params));
                run_limits_pause(&limits);
                quiet_until = now + PAUSE_QUIET_MS;
            }
            acp_msg_release(&m);
            continue;
        }
        if (m.kind == ACP_REQUEST) {
            answer_unknown(env, &m);
            acp_msg_release(&m);
            continue;
        }
        if (m.kind == ACP_RESPONSE && acp_msg_int_id(&m, &got) == 0 && got == prompt_id) {
            turn_close_block(&st, es);
            if (m.error) {
                snprintf(why, sizeof(why), "the harness failed the prompt: %.200s",
                         acp_msg_error_message(&m));
                acp_msg_release(&m);
                r = AR_E_HARNESS_ERROR;
                goto fail_reusable;
            }
            {
                const char *stop = jsonx_str(m.result, "stopReason");
                res->stop_reason = strdup(cancelling ? "cancelled" : stop ? stop : "end_turn");
            }
            if (cancelling || (res->stop_reason && strcmp(res->stop_reason, "cancelled") == 0))
                settle_open_tools(&st, es);
            finish_usage(res, m.result);
            acp_msg_release(&m);
            res->ok = true;
            out->cancelled = cancelling;
            record_tool_ids(&st, res);
            event_emit(es, event_usage(&res->usage));
            turn_state_release(&st);
            return 0;
        }
        acp_msg_release(&m);
    }
paused:
    /* the prompt stays in flight: its gates wait, unanswered, for the client's decision */
    turn_close_block(&st, es);
    for (size_t i = 0; i < opt->nresume; i++)
        for (size_t j = 0; j < ngates; j++)
            if (opt->resume[i].decision < 0 &&
                strcmp(opt->resume[i].tool_call_id, gates[j].tool_call_id) == 0)
                event_emit(es, interaction_request(&gates[j], NULL));
    memcpy(out->gates, gates, ngates * sizeof(gates[0]));
    out->ngates = ngates;
    out->paused = true;
    res->ok = true;
    res->stop_reason = strdup("paused");
    res->usage.present = true;
    record_tool_ids(&st, res);
    turn_state_release(&st);
    return 0;
fail:
    if (opt->retry_if_silent && es->nevents == start_events) {
        turn_state_release(&st);
        return AR_E_RETRY;
    }
    turn_close_block(&st, es);
    record_tool_ids(&st, res);
    event_emit(es, event_error(why, r == AR_E_TIMEOUT ? "run_limit" : "runner_error"));
    run_result_fail(res, "%s", why);
    out->limit_tripped = r == AR_E_TIMEOUT;
    turn_state_release(&st);
    return r < 0 ? r : AR_E_PROTOCOL;
fail_reusable:
    if (opt->retry_if_silent && es->nevents == start_events) {
        turn_state_release(&st);
        return AR_E_RETRY;
    }
    record_tool_ids(&st, res);
    event_emit(es, event_error(why, "provider_error"));
    run_result_fail(res, "%s", why);
    turn_state_release(&st);
    return 0;
}
