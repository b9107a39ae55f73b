/*
 * request_tools — customTools and toolCallback into struct run_tools, in two passes
 * (request_tools.h).
 */
#include "request/request_tools.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "core/policy.h"
#include "request/request_mcp.h"

#define CALL_REF_MAX 512
#define CALL_PATH_MAX 2048
#define ARGS_INTO_MAX 1024
#define EPHEMERAL_MAX 64
#define EPHEMERAL_NAME_MAX 256
#define BINDINGS_MAX 64
#define FIELD_MAX 192
#define MEMBER_MAX (FIELD_MAX + 32) /* a field and one of its keys */

/* ---- pass 1 ------------------------------------------------------------------------------ */

/* What pass 1 reads of an entry. */
struct tool_members {
    const char *name;
    const char *kind;
    const char *permission;
    const char *call_ref;
    json_object *call;
};

static const char *const tool_kinds[] = {"callback", "code", "client", NULL};
static const char *const call_methods[] = {"GET", "POST", "PUT", "DELETE", NULL};

static int check_name(struct rq_ctx *c, const char *field, void *elem)
{
    const struct tool_members *t = elem;

    if (!t->name || !rq_tool_name_ok(t->name))
        return rq_fail(c, "%s: must be 1-64 letters, digits, '_' or '-'", field);
    return 0;
}

static int check_kind(struct rq_ctx *c, const char *field, void *elem)
{
    const struct tool_members *t = elem;

    if (t->kind && strcmp(t->kind, "code") == 0)
        return rq_fail(c, "%s: \"code\" tools are not supported", field);
    return 0;
}

static const struct rq_field tool_fields[] = {
    {.key = "name",
     .kind = RQ_STRING,
     .max = 256,
     .need = RQ_OPTIONAL,
     .offset = offsetof(struct tool_members, name),
     .check = check_name},
    {.key = "kind",
     .kind = RQ_ENUM,
     .max = 0,
     .need = RQ_OPTIONAL,
     .offset = offsetof(struct tool_members, kind),
     .set = tool_kinds,
     .expected = "callback, code, client",
     .check = check_kind},
    {.key = "permission",
     .kind = RQ_ENUM,
     .max = 0,
     .need = RQ_OPTIONAL,
     .offset = offsetof(struct tool_members, permission),
     .set = rq_permission_words,
     .expected = RQ_PERMISSION_EXPECTED},
    {.key = "callRef",
     .kind = RQ_STRING,
     .max = CALL_REF_MAX,
     .need = RQ_OPTIONAL,
     .offset = offsetof(struct tool_members, call_ref)},
    {.key = "call",
     .kind = RQ_OBJECT,
     .max = 0,
     .need = RQ_OPTIONAL,
     .offset = offsetof(struct tool_members, call)},
};

static const struct rq_field call_fields[] = {
    {.key = "method",
     .kind = RQ_ENUM,
     .max = 0,
     .need = RQ_PRESENT,
     .offset = RQ_NOWHERE,
     .set = call_methods,
     .expected = "GET, POST, PUT, DELETE"},
};

static int custom_tool(struct rq_ctx *c, json_object *o, const char *field, size_t i, void *elem,
                       void *ctx)
{
    const struct run_request *req = ctx;
    struct custom_tool *t = elem;
    struct tool_members m = {0};
    char f[MEMBER_MAX];
    int r = rq_fields(c, o, field, tool_fields, ARRAY_SIZE(tool_fields), &m);

    if (r < 0)
        return r;
    if (m.call_ref && m.call)
        return rq_fail(c, "%s: callRef and call are mutually exclusive", field);
    if (m.call) {
        snprintf(f, sizeof(f), "%s.call", field);
        r = rq_fields(c, m.call, f, call_fields, ARRAY_SIZE(call_fields), NULL);
        if (r < 0)
            return r;
        if (!jsonx_str(m.call, "path"))
            return rq_fail(c, "%s.call.path: required", field);
    }
    for (size_t j = 0; j < i; j++)
        if (strcmp(req->tools.custom[j].name, m.name) == 0)
            return rq_fail(c, "%s.name: duplicate tool \"%s\"", field, m.name);
    t->name = m.name;
    t->exec = m.kind && strcmp(m.kind, "client") == 0 ? TOOL_EXEC_CLIENT : TOOL_EXEC_CALLBACK;
    t->permission = policy_permission_parse(m.permission);
    t->call_ref = m.call_ref;
    t->call = m.call;
    t->read_only = -1;
    return 0;
}

int rq_custom_tools(struct rq_ctx *c, json_object *arr, struct run_request *req)
{
    return rq_each(c, arr, "customTools", sizeof(struct custom_tool), (void **)&req->tools.custom,
                   &req->tools.ncustom, custom_tool, req);
}

int rq_tool_callback(struct rq_ctx *c, json_object *o, struct run_request *req)
{
    const char *endpoint;
    int r = rq_string(c, o, "endpoint", "toolCallback.endpoint", 2048, &endpoint);

    if (r < 0)
        return r;
    if (!endpoint)
        return rq_fail(c, "toolCallback.endpoint: required");
    r = rq_base_url(c, "toolCallback.endpoint", endpoint, true);
    if (r < 0)
        return r;
    req->tools.callback_endpoint = endpoint;
    req->tools.callback_authorization = jsonx_str(o, "authorization");
    return 0;
}

/* ---- pass 2: each tool in full ------------------------------------------------------------ */

/* "<field>.<key>" in buf. */
static const char *member(char *buf, size_t n, const char *field, const char *key)
{
    snprintf(buf, n, "%s.%s", field, key);
    return buf;
}

/* A {"path": "$ctx.path"} map (contextBindings, call.context): field.key names it. */
static int bindings(struct rq_ctx *c, json_object *o, const char *field, const char *key)
{
    size_t n = 0;

    json_object_object_foreach(o, path, token)
    {
        if (++n > BINDINGS_MAX)
            return rq_fail(c, "%s.%s: more than %d bindings", field, key, BINDINGS_MAX);
        if (!run_tools_path_ok(path))
            return rq_fail(c, "%s.%s: \"%.64s\" is not a dotted path", field, key, path);
        if (!token || !json_object_is_type(token, json_type_string) ||
            !run_tools_ctx_token_ok(json_object_get_string(token)))
            return rq_fail(c, "%s.%s.%.64s: expected a \"$ctx.<path>\" token", field, key, path);
    }
    return 0;
}

/* A direct call's descriptor past its method (pass 1 read that and the path's type). */
static int call_members(struct rq_ctx *c, json_object *call, const char *field)
{
    const char *path, *args_into;
    json_object *v;
    char f[MEMBER_MAX + 32]; /* field is a member itself: customTools[i] "x".call */
    int r;

    r = rq_text(c, call, "path", member(f, sizeof(f), field, "path"), CALL_PATH_MAX, &path);
    if (r < 0)
        return r;
    if (!path || path[0] != '/' || path[1] == '/')
        return rq_fail(c, "%s.path: must be an absolute path starting with one '/'", field);
    r = rq_object(c, call, "body", member(f, sizeof(f), field, "body"), &v);
    if (r == 0)
        r = rq_object(c, call, "context", member(f, sizeof(f), field, "context"), &v);
    if (r == 0 && v)
        r = bindings(c, v, field, "context");
    if (r == 0)
        r = rq_text(c, call, "args_into", member(f, sizeof(f), field, "args_into"), ARGS_INTO_MAX,
                    &args_into);
    if (r < 0)
        return r;
    if (args_into && !run_tools_path_ok(args_into))
        return rq_fail(c, "%s.args_into: \"%.64s\" is not a dotted path", field, args_into);
    return 0;
}

/* Who runs t: callRef (non-empty) or a checked call, unless the browser does. */
static int tool_exec(struct rq_ctx *c, struct custom_tool *t, const char *field)
{
    char f[MEMBER_MAX];

    if (t->exec == TOOL_EXEC_CLIENT) {
        t->call_ref = NULL;
        t->call = NULL;
        return 0;
    }
    if (!t->call_ref && !t->call)
        return rq_fail(c, "%s: a callback tool needs callRef or call", field);
    if (t->call_ref && !*t->call_ref)
        return rq_fail(c, "%s.callRef: must not be empty", field);
    t->exec = t->call ? TOOL_EXEC_DIRECT : TOOL_EXEC_CALLBACK;
    return t->call ? call_members(c, t->call, member(f, sizeof(f), field, "call")) : 0;
}

/* inputSchema (else input_schema): run_tools_schema's rule. */
static int input_schema(struct rq_ctx *c, json_object *o, const char *field, json_object **ret)
{
    return run_tools_schema(o, field, ret, c->err, c->errlen) < 0 ? AR_E_INVALID_REQUEST : 0;
}

static int ephemeral_args(struct rq_ctx *c, json_object *o, const char *field, json_object **ret)
{
    char f[MEMBER_MAX];
    json_object *v;
    int r =
        rq_array(c, o, "ephemeralArgs", member(f, sizeof(f), field, "ephemeralArgs"), SIZE_MAX, &v);

    if (r < 0)
        return r;
    for (size_t j = 0; v && j < json_object_array_length(v); j++) {
        json_object *e = json_object_array_get_idx(v, j);

        if (j >= EPHEMERAL_MAX || !e || !json_object_is_type(e, json_type_string) ||
            json_object_get_string_len(e) == 0 ||
            json_object_get_string_len(e) > EPHEMERAL_NAME_MAX)
            return rq_fail(c, "%s.ephemeralArgs[%zu]: expected an argument name", field, j);
    }
    *ret = v;
    return 0;
}

static int timeout_ms(struct rq_ctx *c, json_object *o, const char *field, uint64_t *ret)
{
    json_object *v = jsonx_get(o, "timeoutMs");
    int64_t ms;

    *ret = 0;
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_int))
        return rq_fail(c, "%s.timeoutMs: expected an integer, got %s", field, jsonx_type_word(v));
    ms = json_object_get_int64(v);
    if (ms < 0 || (uint64_t)ms > TOOL_TIMEOUT_MAX_MS)
        return rq_fail(c, "%s.timeoutMs: must be between 0 and %llu", field,
                       (unsigned long long)TOOL_TIMEOUT_MAX_MS);
    *ret = (uint64_t)ms;
    return 0;
}

/* Pass 2 of customTools[i] (o: the entry as sent) into t. */
static int tool_check(struct rq_ctx *c, json_object *o, size_t i, struct custom_tool *t)
{
    json_object *bound;
    char field[FIELD_MAX], f[MEMBER_MAX];
    bool read_only;
    int r;

    snprintf(field, sizeof(field), "customTools[%zu].name", i);
    r = rq_tool_name_free(c, field, t->name);
    if (r < 0)
        return r;
    snprintf(field, sizeof(field), "customTools[%zu] \"%s\"", i, t->name);
    r = tool_exec(c, t, field);
    if (r == 0)
        r = rq_text(c, o, "description", member(f, sizeof(f), field, "description"),
                    TOOL_DESCRIPTION_MAX, &t->description);
    if (r == 0)
        r = input_schema(c, o, field, &t->input_schema);
    if (r == 0)
        r = rq_object(c, o, "contextBindings", member(f, sizeof(f), field, "contextBindings"),
                      &bound);
    if (r == 0 && bound)
        r = bindings(c, bound, field, "contextBindings");
    if (r == 0)
        r = ephemeral_args(c, o, field, &t->ephemeral_args);
    if (r == 0)
        r = timeout_ms(c, o, field, &t->timeout_ms);
    if (r == 0)
        r = rq_object(c, o, "render", member(f, sizeof(f), field, "render"), &t->render);
    if (r == 0)
        r = rq_bool(c, o, "readOnly", member(f, sizeof(f), field, "readOnly"), &read_only);
    if (r < 0)
        return r;
    t->context_bindings = bound;
    t->read_only = jsonx_get(o, "readOnly") ? read_only : -1;
    return 0;
}

/* Every callback or direct tool needs the endpoint of toolCallback. */
static int tools_reach_endpoint(struct rq_ctx *c, const struct run_tools *tools)
{
    for (size_t i = 0; i < tools->ncustom; i++) {
        const struct custom_tool *t = &tools->custom[i];

        if ((t->exec == TOOL_EXEC_CALLBACK || t->exec == TOOL_EXEC_DIRECT) &&
            !tools->callback_endpoint)
            return rq_fail(c,
                           "customTools[%zu] \"%s\": a callback tool needs "
                           "toolCallback.endpoint",
                           i, t->name);
    }
    return 0;
}

int rq_tools_check(struct rq_ctx *c, struct run_request *req)
{
    struct run_tools *tools = &req->tools;
    int r = 0;

    for (size_t i = 0; i < tools->ncustom && r == 0; i++)
        r = tool_check(c, json_object_array_get_idx(req->custom_tools, i), i, &tools->custom[i]);
    if (r == 0)
        r = rq_mcp_servers_check(c, req);
    if (r == 0)
        r = tools_reach_endpoint(c, tools);
    if (r == 0)
        r = rq_mcp_servers_headers(c, req);
    return r;
}
