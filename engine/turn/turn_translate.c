/*
 * turn_translate — the pure part of a turn: ACP session/update notifications, permission
 * requests and the prompt's result translated into AgentEvents and the run result. Nothing
 * here does I/O; run_turn.c feeds it what the harness says.
 */
#include "turn/turn_translate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "session/identity.h"

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

struct turn_tool *turn_find_tool(struct turn_state *st, const char *id)
{
    for (size_t i = 0; i < st->ntools; i++)
        if (strcmp(st->tools[i].id, id) == 0)
            return &st->tools[i];
    return NULL;
}

struct turn_tool *turn_add_tool(struct turn_state *st, const char *id)
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

/* The arguments of a runner tool call as the harness reports them, canonical. */
static char *runner_args_of(json_object *update)
{
    json_object *raw = jsonx_get(update, "rawInput"), *args = raw;
    struct buf b;
    char *out = NULL;

    /* codex: {server, tool, arguments} */
    if (jsonx_str(raw, "server") && jsonx_str(raw, "tool"))
        args = jsonx_get(raw, "arguments");
    if (!args)
        return NULL;
    buf_init(&b, CANONICAL_ARGS_MAX);
    if (identity_canonical(args, &b) == 0)
        out = util_xstrdup(buf_str(&b));
    buf_release(&b);
    return out;
}

/*
 * The harness's own report of a runner tool call (hidden). When it finishes: the runner's
 * call of the same tool with the same arguments (codex and opencode give the bridge no id of
 * theirs) describes it; one the runner never saw — the harness refused it itself, e.g.
 * claude's own settings deny the tool — gets its events here, under the runner's name.
 */
static int hidden_update(struct turn_state *st, struct turn_tool *t, json_object *update,
                         struct event_stream *es)
{
    const char *status = jsonx_str(update, "status");
    json_object *raw = jsonx_get(update, "rawInput"), *input = NULL;
    char *args = runner_args_of(update), err[64];
    struct buf out;

    if (args) {
        free(t->input);
        t->input = args;
    }
    if (!status || (strcmp(status, "completed") != 0 && strcmp(status, "failed") != 0) ||
        t->done)
        return 0;
    t->done = true;
    for (size_t i = 0; i < st->ntools; i++) {
        struct turn_tool *r = &st->tools[i];

        if (!r->runner || r->matched || !r->name)
            continue;
        if (!t->name) { /* the anonymous report of a resumed call: the first one open */
            r->matched = true;
            return 0;
        }
        if (strcmp(r->name, t->name) != 0)
            continue;
        if (t->input && r->input && strcmp(t->input, r->input) != 0)
            continue;
        r->matched = true;
        return 0; /* the runner's own events describe it */
    }
    if (!t->name)
        return 0; /* nothing says which call it was: the runner reported its calls itself */
    t->hidden = false; /* a call the runner never saw: report the harness's view */
    turn_close_block(st, es);
    if (t->input && jsonx_parse(t->input, strlen(t->input), 64, &input, err, sizeof(err)) < 0)
        input = NULL;
    event_emit(es, event_tool_call(t->id, t->name, input ? input : raw));
    json_object_put(input);
    buf_init(&out, TOOL_OUTPUT_MAX);
    tool_output(update, &out);
    event_emit(es, event_tool_result(t->id, buf_str(&out), strcmp(status, "failed") == 0,
                                     false));
    buf_release(&out);
    return 0;
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
    t = turn_find_tool(st, id);
    if (t && t->runner)
        return 0; /* a runner tool: the runner reports it */
    if (!t) {
        char runner[TURN_RUNNER_NAME_MAX];

        if (turn_runner_tool_of(st, update, runner, sizeof(runner))) {
            t = turn_add_tool(st, id);
            if (!t)
                return -ENOMEM;
            t->hidden = true;
            t->name = util_xstrdup(runner);
        } else if (st->resumed_runner_calls > 0 && !name && !raw &&
                   !jsonx_get(update, "kind")) {
            t = turn_add_tool(st, id); /* a resumed runner call, in the harness's words */
            if (!t)
                return -ENOMEM;
            t->hidden = true;
        }
    }
    if (t && t->hidden)
        return hidden_update(st, t, update, es);
    turn_close_block(st, es);
    if (!t) {
        t = turn_add_tool(st, id);
        if (!t)
            return -ENOMEM;
        announce = true;
        if (st->limits)
            run_limits_tool_start(st->limits, id, util_now_ms());
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

/*
 * usage_update: "used" is the context of the last model call (codex reports one per call),
 * "cost" the session's cost so far. Only a count makes a usage event: claude's report carries
 * a cost and no count, and its prompt result has the turn's real numbers.
 */
static int usage_update(struct turn_state *st, json_object *update, struct event_stream *es,
                        struct run_result *res)
{
    struct run_usage u = {.present = true};
    json_object *used = jsonx_get(update, "used"), *cost = jsonx_get(update, "cost");

    if (used && (json_object_is_type(used, json_type_int) ||
                 json_object_is_type(used, json_type_double)))
        u.total = json_object_get_int64(used);
    if (cost) {
        json_object *amount = jsonx_get(cost, "amount");
        if (amount)
            u.cost = json_object_get_double(amount);
    }
    if (st->measured)
        return 0; /* the gateway measures; ACP's numbers are not the channel's cross-check */
    if (u.cost > 0.0)
        res->usage.cost = u.cost;
    if (u.total <= 0)
        return 0;
    st->call_usages++;
    st->calls.total += u.total;
    return event_emit(es, event_usage(&u));
}

void turn_call_usage(struct turn_state *st, const struct run_usage *u, struct event_stream *es)
{
    st->call_usages++;
    st->channel_usage = true;
    st->calls.input += u->input;
    st->calls.output += u->output;
    st->calls.total += u->total;
    st->calls.cost += u->cost;
    if (!st->measured)
        event_emit(es, event_usage(u));
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
        return usage_update(st, update, es, res);
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
    caps->permissions = true; /* pi: through agent-runner's extension and the channel */
}

void turn_resume_tool(struct turn_state *st, const char *tool_call_id, const char *name)
{
    struct turn_tool *t = turn_find_tool(st, tool_call_id);

    if (t)
        return;
    t = turn_add_tool(st, tool_call_id);
    if (!t)
        return;
    t->name = util_xstrdup(name);
    t->input = strdup("{}"); /* an update with no arguments is no new announcement */
    if (st->limits)
        run_limits_tool_start(st->limits, tool_call_id, util_now_ms());
}

void turn_mark_denied(struct turn_state *st, const char *tool_call_id, const char *name,
                      json_object *args)
{
    struct turn_tool *t = turn_find_tool(st, tool_call_id);

    if (!t) {
        t = turn_add_tool(st, tool_call_id);
        if (!t)
            return;
        t->unannounced = true;
        t->name = util_xstrdup(name);
        t->input = args ? strdup(jsonx_text(args, NULL)) : NULL;
    }
    t->denied = true;
}

size_t turn_settle_denied(struct turn_state *st, struct event_stream *es)
{
    size_t n = 0;

    for (size_t i = 0; i < st->ntools; i++) {
        struct turn_tool *t = &st->tools[i];
        json_object *input = NULL;
        char err[64];

        if (!t->denied || t->done || t->hidden || t->runner)
            continue;
        if (t->unannounced) {
            if (t->input &&
                jsonx_parse(t->input, strlen(t->input), 64, &input, err, sizeof(err)) < 0)
                input = NULL;
            event_emit(es, event_tool_call(t->id, t->name, input));
            json_object_put(input);
            t->unannounced = false;
        }
        t->done = true;
        event_emit(
            es, event_tool_result(t->id, "Permission denied: the call was not run.", true, true));
        n++;
    }
    return n;
}

/*
 * The gate of a session/request_permission as the permission plan sees it. The tool's name is
 * the one its announcement carried (claude names the tool there, and only a title here).
 */
void turn_gate_of(struct turn_state *st, json_object *params, struct permission_gate *g)
{
    json_object *tc = jsonx_get(params, "toolCall");
    const char *kind = jsonx_str(tc, "kind"), *id = jsonx_str(tc, "toolCallId");
    struct turn_tool *known = id ? turn_find_tool(st, id) : NULL;

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

json_object *turn_interaction_request(const struct approval_gate *g, json_object *params)
{
    json_object *ev = event_new("interaction_request"), *payload = json_object_new_object();
    json_object *tc = params ? jsonx_get(params, "toolCall") : NULL, *copy = NULL;
    json_object *replies = json_object_new_array();

    json_object_object_add(ev, "id", json_object_new_string(g->token));
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
    /* allowed "once" (never "always"); rejected or, without a reject option, cancelled */
    if (g->allow_option[0] || g->channel)
        json_object_array_add(replies, json_object_new_string("once"));
    json_object_array_add(replies, json_object_new_string("reject"));
    json_object_object_add(payload, "availableReplies", replies);
    json_object_object_add(payload, "interactionToken", json_object_new_string(g->token));
    json_object_object_add(ev, "payload", payload);
    return ev;
}

/* The runner's MCP server as the harnesses name it: RUN_TOOLS_MCP_NAME, and codex's spelling
 * of it with '_' for '-'. */
static const char *const runner_servers[] = {RUN_TOOLS_MCP_NAME, "agenta_tools"};

static bool is_runner_server(const char *s)
{
    for (size_t i = 0; i < ARRAY_SIZE(runner_servers); i++)
        if (strcmp(s, runner_servers[i]) == 0)
            return true;
    return false;
}

/* The runner tool named after the runner's server in s ("mcp__agenta-tools__x",
 * "agenta-tools_x", codex's "mcp__agenta_tools" namespace), or false. */
static bool after_server_name(const char *s, char *name, size_t namelen)
{
    const char *p = NULL;
    size_t n;

    for (size_t i = 0; s && !p && i < ARRAY_SIZE(runner_servers); i++) {
        p = strstr(s, runner_servers[i]);
        if (p)
            p += strlen(runner_servers[i]);
    }
    if (!p)
        return false;
    n = strspn(p, "_./:");
    if (n == 0)
        return false;
    p += n;
    n = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
    if (n == 0)
        return false;
    if (name && namelen)
        snprintf(name, namelen, "%.*s", (int)(n < namelen ? n : namelen - 1), p);
    return true;
}

bool turn_runner_tool_of(const struct turn_state *st, json_object *tool_call, char *name,
                         size_t namelen)
{
    json_object *raw = jsonx_get(tool_call, "rawInput");
    const char *n = tool_name_of(tool_call), *server = jsonx_str(raw, "server");

    if (st->kind == HARNESS_PI || st->kind == HARNESS_SCRIPTED) {
        /* pi names the tool itself (no pi built-in can be a runner tool) */
        if (!n || !st->is_runner || !st->is_runner(st->is_runner_ctx, n))
            return false;
        if (name && namelen)
            snprintf(name, namelen, "%s", n);
        return true;
    }
    /* codex: rawInput {server, tool, arguments} */
    if (server && is_runner_server(server) && jsonx_str(raw, "tool")) {
        if (name && namelen)
            snprintf(name, namelen, "%s", jsonx_str(raw, "tool"));
        return true;
    }
    return after_server_name(n, name, namelen) ||
           after_server_name(jsonx_str(tool_call, "title"), name, namelen);
}

json_object *turn_client_tool_request(const struct approval_gate *g, json_object *args,
                                      json_object *render)
{
    json_object *ev = event_new("interaction_request"), *payload = json_object_new_object();
    json_object *tc = json_object_new_object();

    json_object_object_add(ev, "id", json_object_new_string(g->token));
    json_object_object_add(ev, "kind", json_object_new_string("client_tool"));
    json_object_object_add(payload, "toolCallId", json_object_new_string(g->tool_call_id));
    json_object_object_add(payload, "toolName", json_object_new_string(g->tool_name));
    json_object_object_add(payload, "input",
                           args ? json_object_get(args) : json_object_new_object());
    if (render)
        json_object_object_add(payload, "render", json_object_get(render));
    json_object_object_add(tc, "toolCallId", json_object_new_string(g->tool_call_id));
    json_object_object_add(tc, "title", json_object_new_string(g->tool_name));
    json_object_object_add(tc, "resolvedName", json_object_new_string(g->tool_name));
    json_object_object_add(tc, "rawInput", args ? json_object_get(args) : json_object_new_object());
    json_object_object_add(payload, "toolCall", tc);
    json_object_object_add(payload, "interactionToken", json_object_new_string(g->token));
    json_object_object_add(ev, "payload", payload);
    return ev;
}

json_object *turn_interaction_response(const struct approval_gate *g)
{
    json_object *ev = event_new("interaction_response"), *payload = json_object_new_object();

    json_object_object_add(ev, "id", json_object_new_string(g->token));
    json_object_object_add(ev, "kind", json_object_new_string(g->kind == GATE_CLIENT
                                                                  ? "client_tool"
                                                                  : "user_approval"));
    json_object_object_add(payload, "approved", json_object_new_boolean(g->decision == 1));
    json_object_object_add(payload, "toolCallId", json_object_new_string(g->tool_call_id));
    json_object_object_add(ev, "payload", payload);
    return ev;
}

/* A cancelled turn settles the tool calls that never finished. */
void turn_settle_open_tools(struct turn_state *st, struct event_stream *es)
{
    for (size_t i = 0; i < st->ntools; i++) {
        struct turn_tool *t = &st->tools[i];
        if (t->done || t->hidden)
            continue;
        t->done = true;
        event_emit(es, event_tool_result(t->id, "INTERRUPTED_BY_USER: the turn was cancelled "
                                                "before this call finished",
                                         true, false));
    }
}

void turn_finish_usage(struct turn_state *st, struct run_result *res, json_object *prompt_result,
                       struct event_stream *es)
{
    json_object *u = jsonx_get(prompt_result, "usage");
    struct run_usage *r = &res->usage;

    if (st->channel_usage) {
        r->input = st->calls.input;
        r->output = st->calls.output;
        r->total = st->calls.total;
        if (st->calls.cost > 0)
            r->cost = st->calls.cost;
    } else if (u && json_object_is_type(u, json_type_object)) {
        r->input = json_object_get_int64(jsonx_get(u, "inputTokens"));
        r->output = json_object_get_int64(jsonx_get(u, "outputTokens"));
        r->total = json_object_get_int64(jsonx_get(u, "totalTokens"));
        if (!r->total)
            r->total = r->input + r->output;
    }
    if (!r->total && !r->input && !r->output)
        r->total = st->calls.total;
    r->present = true;
    if (st->call_usages == 0 && (r->total > 0 || r->cost > 0))
        event_emit(es, event_usage(r));
}

void turn_record_tool_ids(const struct turn_state *st, struct run_result *res)
{
    if (!res->tool_call_ids)
        res->tool_call_ids = json_object_new_array();
    for (size_t i = 0; i < st->ntools; i++)
        if (!st->tools[i].hidden) /* the ids the client saw in events */
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

/* error.message of a failed response, with its data when the harness put details there. */
void turn_error_text(const struct acp_msg *m, char *out, size_t len)
{
    json_object *data = jsonx_get(m->error, "data");
    const char *detail = NULL;

    if (data && json_object_is_type(data, json_type_string))
        detail = json_object_get_string(data);
    else if (data)
        detail = jsonx_str(data, "message") ? jsonx_str(data, "message") : jsonx_text(data, NULL);
    if (detail && detail[0] && !strstr(acp_msg_error_message(m), detail))
        snprintf(out, len, "%.300s: %.300s", acp_msg_error_message(m), detail);
    else
        snprintf(out, len, "%.300s", acp_msg_error_message(m));
}

/* The session's model config option (category "model"), or NULL. */
json_object *turn_model_option(json_object *session_result)
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

/* The optionId of the first option of kind (allow_once, reject_once), never an "always". */
const char *turn_option_of(json_object *params, const char *kind_prefix)
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

const char *turn_error_code(const char *message)
{
    /* as pi's extension classifies (harnesses/extension/PROTOCOL.md, `error`) */
    static const char *const unavailable[] = {
        "Connection error", "Unable to connect",     "Cannot connect to API", "ECONNREFUSED",
        "ENOTFOUND",        "error sending request", "model_not_found",       "does not exist",
    };

    for (size_t i = 0; message && i < ARRAY_SIZE(unavailable); i++)
        if (strstr(message, unavailable[i]))
            return "model_unavailable";
    return "provider_error";
}
