#include "tools/tool_spec.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "session/identity.h"

#define PATH_SEGMENTS_MAX 32
#define PATH_SEGMENT_MAX 128
#define CALL_REF_MAX 512
#define CALL_PATH_MAX 2048
#define EPHEMERAL_MAX 64
#define BINDINGS_MAX 64
#define MCP_SERVERS_MAX 32
#define REMOTE_NAME_MAX 256
#define CANON_MAX (64u * 1024 * 1024)

const char *tool_exec_name(enum tool_exec e)
{
    switch (e) {
    case TOOL_EXEC_CALLBACK:
        return "callback";
    case TOOL_EXEC_DIRECT:
        return "direct";
    case TOOL_EXEC_CLIENT:
        return "client";
    case TOOL_EXEC_MCP:
        return "mcp";
    }
    return "unknown";
}

bool tool_spec_path_ok(const char *path)
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

bool tool_spec_ctx_token_ok(const char *token)
{
    return token && strncmp(token, "$ctx.", 5) == 0 && tool_spec_path_ok(token + 5);
}

static bool tool_name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > TOOL_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

static void spec_release(struct tool_spec *t)
{
    free(t->name);
    free(t->description);
    json_object_put(t->input_schema);
    free(t->call_ref);
    json_object_put(t->call);
    json_object_put(t->context_bindings);
    json_object_put(t->ephemeral_args);
    json_object_put(t->render);
    free(t->remote_name);
    memset(t, 0, sizeof(*t));
}

static void server_release(struct tool_server *sv)
{
    free(sv->name);
    free(sv->url);
    json_object_put(sv->include);
    json_object_put(sv->header_names);
    memset(sv, 0, sizeof(*sv));
}

void tool_set_free(struct tool_set *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->ntools; i++)
        spec_release(&s->tools[i]);
    for (size_t i = 0; i < s->nservers; i++)
        server_release(&s->servers[i]);
    free(s->tools);
    free(s->servers);
    free(s->callback_endpoint);
    json_object_put(s->custom);
    free(s);
}

static json_object *copy(json_object *o)
{
    json_object *c = NULL;

    if (!o)
        return NULL;
    if (json_object_deep_copy(o, &c, NULL) != 0)
        return NULL;
    return c;
}

/* Copy member key of o into *ret when present: NULL member = absent. -ENOMEM only. */
static int copy_member(json_object *o, const char *key, json_object **ret)
{
    json_object *v = jsonx_get(o, key);

    *ret = NULL;
    if (!v)
        return 0;
    *ret = copy(v);
    return *ret ? 0 : -ENOMEM;
}

static const char *type_word(json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_null:
        return "null";
    case json_type_boolean:
        return "a boolean";
    case json_type_double:
    case json_type_int:
        return "a number";
    case json_type_string:
        return "a string";
    case json_type_array:
        return "an array";
    case json_type_object:
        return "an object";
    }
    return "a value";
}

/* A string member with a length cap: absent -> NULL; wrong type or too long -> error. */
static int opt_str(json_object *o, const char *key, size_t max, const char *field, const char **ret,
                   char *err, size_t errlen)
{
    json_object *v = jsonx_get(o, key);

    *ret = NULL;
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_string))
        return util_fail(-EINVAL, err, errlen, "%s.%s: expected a string, got %s", field, key,
                         type_word(v));
    if ((size_t)json_object_get_string_len(v) > max)
        return util_fail(-EINVAL, err, errlen, "%s.%s: longer than %zu bytes", field, key, max);
    *ret = json_object_get_string(v);
    return 0;
}

static int opt_type(json_object *o, const char *key, enum json_type type, const char *what,
                    const char *field, json_object **ret, char *err, size_t errlen)
{
    json_object *v = jsonx_get(o, key);

    *ret = NULL;
    if (!v)
        return 0;
    if (!json_object_is_type(v, type))
        return util_fail(-EINVAL, err, errlen, "%s.%s: expected %s, got %s", field, key, what,
                         type_word(v));
    *ret = v;
    return 0;
}

static int parse_permission(json_object *o, const char *field, enum permission *ret, char *err,
                            size_t errlen)
{
    const char *p;
    int r = opt_str(o, "permission", 16, field, &p, err, errlen);

    if (r < 0)
        return r;
    *ret = policy_permission_parse(p);
    if (p && *ret == PERMISSION_UNSET)
        return util_fail(-EINVAL, err, errlen, "%s.permission: expected allow, ask or deny", field);
    return 0;
}

/* {"path": "$ctx.path"} maps (contextBindings, call.context). */
static int check_bindings(json_object *o, const char *field, const char *key, char *err,
                          size_t errlen)
{
    size_t n = 0;

    json_object_object_foreach(o, path, token)
    {
        if (++n > BINDINGS_MAX)
            return util_fail(-EINVAL, err, errlen, "%s.%s: more than %d bindings", field, key,
                             BINDINGS_MAX);
        if (!tool_spec_path_ok(path))
            return util_fail(-EINVAL, err, errlen, "%s.%s: \"%.64s\" is not a dotted path", field,
                             key, path);
        if (!token || !json_object_is_type(token, json_type_string) ||
            !tool_spec_ctx_token_ok(json_object_get_string(token)))
            return util_fail(-EINVAL, err, errlen, "%s.%s.%.64s: expected a \"$ctx.<path>\" token",
                             field, key, path);
    }
    return 0;
}

static int parse_call(json_object *call, const char *field, char *err, size_t errlen)
{
    static const char *const methods[] = {"GET", "POST", "PUT", "DELETE"};
    const char *method, *path, *args_into;
    json_object *v;
    bool known = false;
    int r;

    r = opt_str(call, "method", 16, field, &method, err, errlen);
    if (r < 0)
        return r;
    for (size_t i = 0; method && i < ARRAY_SIZE(methods); i++)
        known = known || strcmp(method, methods[i]) == 0;
    if (!known)
        return util_fail(-EINVAL, err, errlen, "%s.method: expected GET, POST, PUT or DELETE",
                         field);
    r = opt_str(call, "path", CALL_PATH_MAX, field, &path, err, errlen);
    if (r < 0)
        return r;
    if (!path || path[0] != '/' || path[1] == '/')
        return util_fail(-EINVAL, err, errlen,
                         "%s.path: must be an absolute path starting with one '/'", field);
    r = opt_type(call, "body", json_type_object, "an object", field, &v, err, errlen);
    if (r < 0)
        return r;
    r = opt_type(call, "context", json_type_object, "an object", field, &v, err, errlen);
    if (r < 0)
        return r;
    if (v && (r = check_bindings(v, field, "context", err, errlen)) < 0)
        return r;
    r = opt_str(call, "args_into", 1024, field, &args_into, err, errlen);
    if (r < 0)
        return r;
    if (args_into && !tool_spec_path_ok(args_into))
        return util_fail(-EINVAL, err, errlen, "%s.args_into: \"%.64s\" is not a dotted path",
                         field, args_into);
    return 0;
}

static int parse_timeout(json_object *t, const char *field, uint64_t *ret, char *err, size_t errlen)
{
    json_object *v = jsonx_get(t, "timeoutMs");
    int64_t ms;

    *ret = 0;
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_int))
        return util_fail(-EINVAL, err, errlen, "%s.timeoutMs: expected an integer, got %s", field,
                         type_word(v));
    ms = json_object_get_int64(v);
    if (ms < 0 || (uint64_t)ms > TOOL_TIMEOUT_MAX_MS)
        return util_fail(-EINVAL, err, errlen, "%s.timeoutMs: must be between 0 and %llu", field,
                         (unsigned long long)TOOL_TIMEOUT_MAX_MS);
    *ret = (uint64_t)ms;
    return 0;
}

static int schema_of(json_object *o, const char *field, json_object **ret, char *err, size_t errlen)
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
                         type_word(v));
    jsonx_text(v, &len);
    if (len > TOOL_SCHEMA_MAX)
        return util_fail(-EINVAL, err, errlen, "%s.inputSchema: longer than %d bytes", field,
                         TOOL_SCHEMA_MAX);
    *ret = copy(v);
    return *ret ? 0 : -ENOMEM;
}

static int set_str(char **dst, const char *src)
{
    if (!src)
        return 0;
    *dst = strdup(src);
    return *dst ? 0 : -ENOMEM;
}

/* One customTools entry into t (released by the caller on failure). */
static int parse_custom(json_object *o, size_t i, struct tool_spec *t, char *err, size_t errlen)
{
    const char *name, *kind, *call_ref, *description;
    json_object *call, *v;
    char field[128];
    int r;

    snprintf(field, sizeof(field), "customTools[%zu]", i);
    if (!o || !json_object_is_type(o, json_type_object))
        return util_fail(-EINVAL, err, errlen, "%s: expected an object", field);
    r = opt_str(o, "name", 256, field, &name, err, errlen);
    if (r < 0)
        return r;
    if (!name || !tool_name_ok(name))
        return util_fail(-EINVAL, err, errlen, "%s.name: must be 1-%d letters, digits, '_' or '-'",
                         field, TOOL_NAME_MAX);
    if (strcmp(name, TOOL_SPEC_RESERVED_NAME) == 0)
        return util_fail(-EINVAL, err, errlen, "%s.name: \"%s\" is reserved", field,
                         TOOL_SPEC_RESERVED_NAME);
    snprintf(field, sizeof(field), "customTools[%zu] \"%s\"", i, name);
    r = opt_str(o, "kind", 32, field, &kind, err, errlen);
    if (r < 0)
        return r;
    if (kind && strcmp(kind, "code") == 0)
        return util_fail(-EINVAL, err, errlen,
                         "%s: kind \"code\" is not supported: this runner executes no code tools",
                         field);
    if (kind && strcmp(kind, "callback") != 0 && strcmp(kind, "client") != 0)
        return util_fail(-EINVAL, err, errlen, "%s.kind: expected callback or client", field);
    r = opt_str(o, "callRef", CALL_REF_MAX, field, &call_ref, err, errlen);
    if (r < 0)
        return r;
    r = opt_type(o, "call", json_type_object, "an object", field, &call, err, errlen);
    if (r < 0)
        return r;
    if (kind && strcmp(kind, "client") == 0) {
        t->exec = TOOL_EXEC_CLIENT;
    } else {
        if (call_ref && call)
            return util_fail(-EINVAL, err, errlen, "%s: callRef and call are mutually exclusive",
                             field);
        if (!call_ref && !call)
            return util_fail(-EINVAL, err, errlen, "%s: a callback tool needs callRef or call",
                             field);
        if (call_ref && !*call_ref)
            return util_fail(-EINVAL, err, errlen, "%s.callRef: must not be empty", field);
        t->exec = call ? TOOL_EXEC_DIRECT : TOOL_EXEC_CALLBACK;
        if (call) {
            char cfield[160];

            snprintf(cfield, sizeof(cfield), "%s.call", field);
            r = parse_call(call, cfield, err, errlen);
            if (r < 0)
                return r;
        }
    }
    r = opt_str(o, "description", TOOL_DESCRIPTION_MAX, field, &description, err, errlen);
    if (r < 0)
        return r;
    r = schema_of(o, field, &t->input_schema, err, errlen);
    if (r < 0)
        return r;
    r = opt_type(o, "contextBindings", json_type_object, "an object", field, &v, err, errlen);
    if (r < 0)
        return r;
    if (v && (r = check_bindings(v, field, "contextBindings", err, errlen)) < 0)
        return r;
    r = opt_type(o, "ephemeralArgs", json_type_array, "an array", field, &v, err, errlen);
    if (r < 0)
        return r;
    for (size_t j = 0; v && j < json_object_array_length(v); j++) {
        json_object *e = json_object_array_get_idx(v, j);

        if (j >= EPHEMERAL_MAX || !e || !json_object_is_type(e, json_type_string) ||
            json_object_get_string_len(e) == 0 || json_object_get_string_len(e) > 256)
            return util_fail(-EINVAL, err, errlen,
                             "%s.ephemeralArgs[%zu]: expected an argument name", field, j);
    }
    r = parse_timeout(o, field, &t->timeout_ms, err, errlen);
    if (r < 0)
        return r;
    r = opt_type(o, "render", json_type_object, "an object", field, &v, err, errlen);
    if (r < 0)
        return r;
    r = opt_type(o, "readOnly", json_type_boolean, "a boolean", field, &v, err, errlen);
    if (r < 0)
        return r;
    t->read_only = v ? json_object_get_boolean(v) : -1;
    r = parse_permission(o, field, &t->permission, err, errlen);
    if (r < 0)
        return r;
    t->server_permission = PERMISSION_UNSET;
    if (set_str(&t->name, name) < 0 || set_str(&t->description, description) < 0 ||
        set_str(&t->call_ref, t->exec == TOOL_EXEC_CALLBACK ? call_ref : NULL) < 0 ||
        copy_member(o, "contextBindings", &t->context_bindings) < 0 ||
        copy_member(o, "ephemeralArgs", &t->ephemeral_args) < 0 ||
        copy_member(o, "render", &t->render) < 0)
        return -ENOMEM;
    if (t->exec == TOOL_EXEC_DIRECT && copy_member(o, "call", &t->call) < 0)
        return -ENOMEM;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The sorted lower-case names of an MCP server's headers and credential headers. */
static int header_names(json_object *conn, const char *field, json_object **ret, char *err,
                        size_t errlen)
{
    json_object *headers = jsonx_get(conn, "headers"), *creds = jsonx_get(conn, "credentials");
    json_object *names = json_object_new_array();
    const char *list[256];
    char lower[129];
    size_t n = 0;
    int r = 0;

    if (!names)
        return -ENOMEM;
    if (headers && json_object_is_type(headers, json_type_object)) {
        json_object_object_foreach(headers, key, val)
        {
            (void)val;
            if (n == ARRAY_SIZE(list)) {
                r = util_fail(-EINVAL, err, errlen, "%s.connection.headers: too many headers",
                              field);
                goto out;
            }
            list[n++] = key;
        }
    }
    for (size_t i = 0; creds && json_object_is_type(creds, json_type_array) &&
                       i < json_object_array_length(creds);
         i++) {
        const char *name =
            jsonx_str(jsonx_get(json_object_array_get_idx(creds, i), "binding"), "name");

        if (!name)
            continue;
        if (n == ARRAY_SIZE(list)) {
            r = util_fail(-EINVAL, err, errlen, "%s.connection.credentials: too many headers",
                          field);
            goto out;
        }
        list[n++] = name;
    }
    qsort(list, n, sizeof(list[0]), cmp_str);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(list[i]);

        if (len >= sizeof(lower))
            len = sizeof(lower) - 1;
        for (size_t k = 0; k < len; k++)
            lower[k] = (char)tolower((unsigned char)list[i][k]);
        lower[len] = '\0';
        json_object_array_add(names, json_object_new_string(lower));
    }
    *ret = names;
    names = NULL;
out:
    json_object_put(names);
    return r;
}

static int parse_server(json_object *o, size_t i, struct tool_server *sv, char *err, size_t errlen)
{
    json_object *conn, *policy, *tools, *names;
    const char *name, *url, *mode;
    char field[128];
    int r;

    snprintf(field, sizeof(field), "mcpServers[%zu]", i);
    if (!o || !json_object_is_type(o, json_type_object))
        return util_fail(-EINVAL, err, errlen, "%s: expected an object", field);
    r = opt_str(o, "name", 256, field, &name, err, errlen);
    if (r < 0)
        return r;
    if (!name || !tool_name_ok(name))
        return util_fail(-EINVAL, err, errlen, "%s.name: must be 1-%d letters, digits, '_' or '-'",
                         field, TOOL_NAME_MAX);
    if (strcmp(name, TOOL_SPEC_RESERVED_NAME) == 0)
        return util_fail(-EINVAL, err, errlen, "%s.name: \"%s\" is reserved", field,
                         TOOL_SPEC_RESERVED_NAME);
    snprintf(field, sizeof(field), "mcpServers[%zu] \"%s\"", i, name);
    r = opt_type(o, "connection", json_type_object, "an object", field, &conn, err, errlen);
    if (r < 0)
        return r;
    if (!conn)
        return util_fail(-EINVAL, err, errlen, "%s.connection: required", field);
    if (!jsonx_str(conn, "type") || strcmp(jsonx_str(conn, "type"), "http") != 0)
        return util_fail(-EINVAL, err, errlen, "%s.connection.type: only \"http\" is supported",
                         field);
    r = opt_str(conn, "url", 2048, field, &url, err, errlen);
    if (r < 0)
        return r;
    if (!url)
        return util_fail(-EINVAL, err, errlen, "%s.connection.url: required", field);
    r = opt_type(o, "policy", json_type_object, "an object", field, &policy, err, errlen);
    if (r < 0)
        return r;
    sv->permission = PERMISSION_UNSET;
    sv->include_all = true;
    if (policy) {
        r = parse_permission(policy, field, &sv->permission, err, errlen);
        if (r < 0)
            return r;
        r = opt_type(policy, "tools", json_type_object, "an object", field, &tools, err, errlen);
        if (r < 0)
            return r;
        r = opt_str(tools, "mode", 16, field, &mode, err, errlen);
        if (r < 0)
            return r;
        if (mode && strcmp(mode, "all") != 0 && strcmp(mode, "include") != 0)
            return util_fail(-EINVAL, err, errlen, "%s.policy.tools.mode: expected all or include",
                             field);
        if (mode && strcmp(mode, "include") == 0) {
            sv->include_all = false;
            r = opt_type(tools, "names", json_type_array, "an array", field, &names, err, errlen);
            if (r < 0)
                return r;
            for (size_t j = 0; names && j < json_object_array_length(names); j++) {
                json_object *e = json_object_array_get_idx(names, j);

                if (!e || !json_object_is_type(e, json_type_string))
                    return util_fail(-EINVAL, err, errlen,
                                     "%s.policy.tools.names[%zu]: expected a string", field, j);
            }
            sv->include = names ? copy(names) : json_object_new_array();
            if (!sv->include)
                return -ENOMEM;
        }
    }
    r = header_names(conn, field, &sv->header_names, err, errlen);
    if (r < 0)
        return r;
    if (set_str(&sv->name, name) < 0 || set_str(&sv->url, url) < 0)
        return -ENOMEM;
    return 0;
}

static const struct tool_spec *find(const struct tool_set *s, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s->tools[i].name, name) == 0)
            return &s->tools[i];
    return NULL;
}

int tool_set_new(json_object *custom_tools, json_object *tool_callback, json_object *mcp_servers,
                 struct tool_set **ret, char *err, size_t errlen)
{
    struct tool_set *s;
    size_t nt = 0, ns = 0;
    int r = 0;

    if (custom_tools && !json_object_is_type(custom_tools, json_type_array))
        return util_fail(-EINVAL, err, errlen, "customTools: expected an array");
    if (mcp_servers && !json_object_is_type(mcp_servers, json_type_array))
        return util_fail(-EINVAL, err, errlen, "mcpServers: expected an array");
    if (tool_callback && !json_object_is_type(tool_callback, json_type_object))
        return util_fail(-EINVAL, err, errlen, "toolCallback: expected an object");
    nt = custom_tools ? json_object_array_length(custom_tools) : 0;
    ns = mcp_servers ? json_object_array_length(mcp_servers) : 0;
    if (nt > TOOL_SET_MAX)
        return util_fail(-EINVAL, err, errlen, "customTools: more than %d tools", TOOL_SET_MAX);
    if (ns > MCP_SERVERS_MAX)
        return util_fail(-EINVAL, err, errlen, "mcpServers: more than %d servers", MCP_SERVERS_MAX);
    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->tools = calloc(nt ? nt : 1, sizeof(*s->tools));
    s->servers = calloc(ns ? ns : 1, sizeof(*s->servers));
    if (!s->tools || !s->servers) {
        r = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < nt; i++) {
        struct tool_spec *t = &s->tools[i];

        r = parse_custom(json_object_array_get_idx(custom_tools, i), i, t, err, errlen);
        if (r < 0) {
            spec_release(t);
            goto out;
        }
        s->ntools++;
        if (find(s, i, t->name)) {
            r = util_fail(-EINVAL, err, errlen, "customTools[%zu] \"%s\": duplicate tool name", i,
                          t->name);
            goto out;
        }
    }
    for (size_t i = 0; i < ns; i++) {
        struct tool_server *sv = &s->servers[i];

        r = parse_server(json_object_array_get_idx(mcp_servers, i), i, sv, err, errlen);
        if (r < 0) {
            server_release(sv);
            goto out;
        }
        s->nservers++;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(s->servers[j].name, sv->name) == 0) {
                r = util_fail(-EINVAL, err, errlen, "mcpServers[%zu] \"%s\": duplicate server name",
                              i, sv->name);
                goto out;
            }
        }
    }
    if (tool_callback) {
        const char *endpoint = jsonx_str(tool_callback, "endpoint");

        if (!endpoint || !*endpoint) {
            r = util_fail(-EINVAL, err, errlen, "toolCallback.endpoint: required");
            goto out;
        }
        if (set_str(&s->callback_endpoint, endpoint) < 0) {
            r = -ENOMEM;
            goto out;
        }
    }
    for (size_t i = 0; i < s->ntools; i++) {
        const struct tool_spec *t = &s->tools[i];

        if ((t->exec == TOOL_EXEC_CALLBACK || t->exec == TOOL_EXEC_DIRECT) &&
            !s->callback_endpoint) {
            r = util_fail(-EINVAL, err, errlen,
                          "customTools[%zu] \"%s\": a callback tool needs toolCallback.endpoint", i,
                          t->name);
            goto out;
        }
    }
    if (custom_tools && !(s->custom = copy(custom_tools))) {
        r = -ENOMEM;
        goto out;
    }
    *ret = s;
    s = NULL;
out:
    tool_set_free(s);
    return r;
}

/* SHA-256 over "server\0tool", the first 4 bytes as hex: the suffix of a shortened name. */
static int pair_hash(const char *server, const char *tool, char hex[9])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int r = -EIO;

    if (ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
        EVP_DigestUpdate(ctx, server, strlen(server) + 1) == 1 &&
        EVP_DigestUpdate(ctx, tool, strlen(tool)) == 1 &&
        EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 && mdlen >= 4) {
        util_hex_encode(md, 4, hex);
        r = 0;
    }
    EVP_MD_CTX_free(ctx);
    return r;
}

/* "<server>__<tool>" mapped onto [A-Za-z0-9_-], at most TOOL_NAME_MAX bytes. */
static int exposed_name(const char *server, const char *tool, char out[TOOL_NAME_MAX + 1])
{
    char full[2 * REMOTE_NAME_MAX + 8], hex[9];
    size_t n;
    int r;

    n = (size_t)snprintf(full, sizeof(full), "%s__%s", server, tool);
    if (n >= sizeof(full))
        return -E2BIG;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)full[i]) && full[i] != '_' && full[i] != '-')
            full[i] = '_';
    if (n > TOOL_NAME_MAX) {
        /* the hash is over the original pair, so two long names that share a prefix differ */
        r = pair_hash(server, tool, hex);
        if (r < 0)
            return r;
        full[TOOL_NAME_MAX - 9] = '_';
        memcpy(full + TOOL_NAME_MAX - 8, hex, 8);
        n = TOOL_NAME_MAX;
    }
    memcpy(out, full, n);
    out[n] = '\0';
    return 0;
}

static bool included(const struct tool_server *sv, const char *remote)
{
    if (sv->include_all)
        return true;
    for (size_t i = 0; i < json_object_array_length(sv->include); i++) {
        const char *n = json_object_get_string(json_object_array_get_idx(sv->include, i));

        if (n && strcmp(n, remote) == 0)
            return true;
    }
    return false;
}

/* One listed MCP Tool into t (released by the caller on failure). */
static int parse_listed(const struct tool_server *sv, size_t server, json_object *o,
                        const char *name, const char *exposed, struct tool_spec *t, char *err,
                        size_t errlen)
{
    const char *description;
    json_object *hint;
    char field[REMOTE_NAME_MAX + 128];
    int r;

    snprintf(field, sizeof(field), "MCP server \"%s\" tool \"%s\"", sv->name, name);
    r = opt_str(o, "description", TOOL_DESCRIPTION_MAX, field, &description, err, errlen);
    if (r < 0)
        return r;
    r = schema_of(o, field, &t->input_schema, err, errlen);
    if (r < 0)
        return r;
    hint = jsonx_get(jsonx_get(o, "annotations"), "readOnlyHint");
    t->read_only =
        hint && json_object_is_type(hint, json_type_boolean) ? json_object_get_boolean(hint) : -1;
    t->exec = TOOL_EXEC_MCP;
    t->permission = PERMISSION_UNSET;
    t->server_permission = sv->permission;
    t->server = server;
    if (set_str(&t->name, exposed) < 0 || set_str(&t->remote_name, name) < 0 ||
        set_str(&t->description, description) < 0)
        return -ENOMEM;
    return 0;
}

int tool_set_add_mcp_tools(struct tool_set *s, size_t server, json_object *listed, char *err,
                           size_t errlen)
{
    const struct tool_server *sv;
    struct tool_spec *grown;
    size_t n, keep = 0, first = s->ntools;
    int r = 0;

    if (server >= s->nservers)
        return util_fail(-EINVAL, err, errlen, "MCP server #%zu: no such server", server);
    sv = &s->servers[server];
    if (!listed || !json_object_is_type(listed, json_type_array))
        return util_fail(-EINVAL, err, errlen,
                         "MCP server \"%s\": tools/list did not return a tools array", sv->name);
    n = json_object_array_length(listed);
    for (size_t i = 0; i < n; i++) {
        const char *name = jsonx_str(json_object_array_get_idx(listed, i), "name");

        keep += name && included(sv, name);
    }
    if (s->ntools + keep > TOOL_SET_MAX) {
        snprintf(err, errlen, "MCP server \"%s\": more than %d tools in the run", sv->name,
                 TOOL_SET_MAX);
        return -E2BIG;
    }
    grown = realloc(s->tools, (s->ntools + keep + 1) * sizeof(*s->tools));
    if (!grown)
        return -ENOMEM;
    s->tools = grown;
    for (size_t i = 0; i < n; i++) {
        json_object *o = json_object_array_get_idx(listed, i);
        const char *name = jsonx_str(o, "name");
        char exposed[TOOL_NAME_MAX + 1];
        struct tool_spec *t = &s->tools[s->ntools];
        const struct tool_spec *other;

        if (!o || !json_object_is_type(o, json_type_object) || !name || !*name ||
            strlen(name) > REMOTE_NAME_MAX) {
            r = util_fail(-EINVAL, err, errlen,
                          "MCP server \"%s\": tools/list entry %zu has no valid name", sv->name, i);
            goto out;
        }
        if (!included(sv, name))
            continue;
        r = exposed_name(sv->name, name, exposed);
        if (r < 0)
            goto out;
        other = find(s, s->ntools, exposed);
        if (other) {
            r = util_fail(-EINVAL, err, errlen,
                          "MCP server \"%s\" tool \"%.128s\": its name \"%s\" clashes with %s tool "
                          "\"%s\"",
                          sv->name, name, exposed, other->exec == TOOL_EXEC_MCP ? "MCP" : "custom",
                          other->exec == TOOL_EXEC_MCP ? other->remote_name : other->name);
            goto out;
        }
        memset(t, 0, sizeof(*t));
        r = parse_listed(sv, server, o, name, exposed, t, err, errlen);
        if (r < 0) {
            spec_release(t);
            goto out;
        }
        s->ntools++;
    }
out:
    if (r < 0) {
        for (size_t i = first; i < s->ntools; i++)
            spec_release(&s->tools[i]);
        s->ntools = first;
    }
    return r;
}

const struct tool_spec *tool_set_find(const struct tool_set *s, const char *name)
{
    if (!s || !name)
        return NULL;
    return find(s, s->ntools, name);
}

static json_object *empty_schema(void)
{
    json_object *o = json_object_new_object();

    json_object_object_add(o, "type", json_object_new_string("object"));
    json_object_object_add(o, "properties", json_object_new_object());
    json_object_object_add(o, "additionalProperties", json_object_new_boolean(1));
    return o;
}

int tool_set_public_json(const struct tool_set *s, struct buf *out)
{
    json_object *arr = json_object_new_array();
    const char *text;
    size_t len;
    int r;

    if (!arr)
        return -ENOMEM;
    for (size_t i = 0; s && i < s->ntools; i++) {
        const struct tool_spec *t = &s->tools[i];
        json_object *o = json_object_new_object();

        json_object_object_add(o, "name", json_object_new_string(t->name));
        json_object_object_add(o, "description",
                               json_object_new_string(t->description ? t->description : t->name));
        json_object_object_add(o, "inputSchema",
                               t->input_schema ? json_object_get(t->input_schema) : empty_schema());
        json_object_array_add(arr, o);
    }
    text = jsonx_text(arr, &len);
    if (len > TOOL_PUBLIC_MAX)
        r = -E2BIG;
    else
        r = buf_append(out, text, len);
    json_object_put(arr);
    return r;
}

int tool_set_fingerprint(const struct tool_set *s, uint8_t ret[TOOL_FINGERPRINT_LEN])
{
    json_object *doc = json_object_new_object(), *servers = json_object_new_array();
    unsigned int n = 0;
    struct buf b;
    int r;

    if (!doc || !servers) {
        json_object_put(doc);
        json_object_put(servers);
        return -ENOMEM;
    }
    json_object_object_add(doc, "v", json_object_new_int(1));
    if (s->callback_endpoint)
        json_object_object_add(doc, "callbackEndpoint",
                               json_object_new_string(s->callback_endpoint));
    if (s->custom)
        json_object_object_add(doc, "customTools", json_object_get(s->custom));
    for (size_t i = 0; i < s->nservers; i++) {
        const struct tool_server *sv = &s->servers[i];
        json_object *o = json_object_new_object();

        json_object_object_add(o, "name", json_object_new_string(sv->name));
        json_object_object_add(o, "url", json_object_new_string(sv->url));
        json_object_object_add(o, "permission",
                               json_object_new_string(policy_permission_name(sv->permission)));
        json_object_object_add(o, "include",
                               sv->include_all ? json_object_new_string("all")
                                               : json_object_get(sv->include));
        json_object_object_add(o, "headers", json_object_get(sv->header_names));
        json_object_array_add(servers, o);
    }
    json_object_object_add(doc, "mcpServers", servers);
    buf_init(&b, CANON_MAX);
    r = identity_canonical(doc, &b);
    if (r == 0 && (EVP_Digest(buf_str(&b), b.len, ret, &n, EVP_sha256(), NULL) != 1 ||
                   n != TOOL_FINGERPRINT_LEN))
        r = -EIO;
    buf_release(&b);
    json_object_put(doc);
    return r;
}

void tool_spec_gate(const struct tool_spec *t, json_object *args, struct permission_gate *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->tool_name = t->name;
    ret->args = args;
    ret->read_only_hint = t->read_only;
    ret->spec = t->permission;
    ret->server = t->server_permission;
}

void tool_spec_denial(const struct tool_spec *t, char *out, size_t outlen)
{
    if (t->exec == TOOL_EXEC_CLIENT)
        snprintf(out, outlen, "Client tool '%s' was denied.", t->name);
    else if (t->permission == PERMISSION_DENY)
        snprintf(out, outlen, "Tool '%s' is denied by policy.", t->name);
    else
        snprintf(out, outlen, "Tool '%s' is denied by the permission policy.", t->name);
}

/* The missing required fields of value under schema, as dotted paths appended to out. */
static int missing_required(json_object *schema, json_object *value, struct buf *path,
                            struct buf *out, int depth)
{
    json_object *required = jsonx_get(schema, "required"), *props;
    bool is_obj = value && json_object_is_type(value, json_type_object);
    int r = 0;

    if (!schema || !json_object_is_type(schema, json_type_object) || depth > 32)
        return 0;
    for (size_t i = 0; required && json_object_is_type(required, json_type_array) &&
                       i < json_object_array_length(required);
         i++) {
        json_object *f = json_object_array_get_idx(required, i);
        const char *name =
            f && json_object_is_type(f, json_type_string) ? json_object_get_string(f) : NULL;

        if (!name || (is_obj && jsonx_get(value, name)))
            continue;
        if (out->len)
            r = buf_append_str(out, ", ");
        if (r == 0 && path->len)
            r = buf_printf(out, "%s.", buf_str(path));
        if (r == 0)
            r = buf_append_str(out, name);
        if (r < 0)
            return r;
    }
    props = jsonx_get(schema, "properties");
    if (!is_obj || !props || !json_object_is_type(props, json_type_object))
        return 0;
    json_object_object_foreach(props, field, child)
    {
        json_object *v = jsonx_get(value, field);
        size_t mark = path->len;

        if (!v)
            continue;
        r = path->len ? buf_printf(path, ".%s", field) : buf_append_str(path, field);
        if (r == 0)
            r = missing_required(child, v, path, out, depth + 1);
        path->len = mark;
        if (path->data)
            path->data[mark] = '\0';
        if (r < 0)
            return r;
    }
    return 0;
}

int tool_spec_check_required(const struct tool_spec *t, json_object *args, struct buf *out)
{
    struct buf path, missing;
    int r;

    buf_init(&path, 4096);
    buf_init(&missing, 16384);
    r = missing_required(t->input_schema, args, &path, &missing, 0);
    if (r == 0 && missing.len) {
        r = buf_printf(out,
                       "Tool '%s' missing required argument(s): %s. Retry the tool call with "
                       "those argument fields populated.",
                       t->name, buf_str(&missing));
        if (r == 0)
            r = 1;
    }
    buf_release(&path);
    buf_release(&missing);
    return r;
}
