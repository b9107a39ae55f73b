/*
 * tool_spec — the run's tool set: built from the request's parsed tools, joined by what each
 * MCP server lists, found by name, shown to the sandbox; a spec's gate, denial text and
 * required-argument check (tool_spec.h).
 */
#include "tools/tool_spec.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "tools/mcp_bridge.h"

#define REMOTE_NAME_MAX 256

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
    free(s);
}

static const struct tool_spec *find(const struct tool_set *s, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s->tools[i].name, name) == 0)
            return &s->tools[i];
    return NULL;
}

static int set_str(char **dst, const char *src)
{
    if (!src)
        return 0;
    *dst = strdup(src);
    return *dst ? 0 : -ENOMEM;
}

/* A copy of o into *ret (NULL stays NULL). */
static int set_json(json_object **dst, json_object *o)
{
    if (!o)
        return 0;
    *dst = jsonx_copy(o);
    return *dst ? 0 : -ENOMEM;
}

static int custom_spec(const struct custom_tool *c, struct tool_spec *t)
{
    t->exec = c->exec;
    t->timeout_ms = c->timeout_ms;
    t->read_only = c->read_only;
    t->permission = c->permission;
    t->server_permission = PERMISSION_UNSET;
    if (set_str(&t->name, c->name) < 0 || set_str(&t->description, c->description) < 0 ||
        set_str(&t->call_ref, c->call_ref) < 0 || set_json(&t->input_schema, c->input_schema) < 0 ||
        set_json(&t->call, c->call) < 0 ||
        set_json(&t->context_bindings, c->context_bindings) < 0 ||
        set_json(&t->ephemeral_args, c->ephemeral_args) < 0 || set_json(&t->render, c->render) < 0)
        return -ENOMEM;
    return 0;
}

static int server_of(const struct mcp_server *m, struct tool_server *sv)
{
    sv->permission = m->permission;
    sv->include_all = m->include_all;
    if (set_str(&sv->name, m->name) < 0 || set_str(&sv->url, m->url) < 0)
        return -ENOMEM;
    if (!m->include_all) {
        sv->include = m->include ? jsonx_copy(m->include) : json_object_new_array();
        if (!sv->include)
            return -ENOMEM;
    }
    return 0;
}

int tool_set_new(const struct run_tools *tools, struct tool_set **ret)
{
    struct tool_set *s = calloc(1, sizeof(*s));
    size_t nt = tools->ncustom, ns = tools->nservers;
    int r = -ENOMEM;

    if (!s)
        return -ENOMEM;
    s->tools = calloc(nt ? nt : 1, sizeof(*s->tools));
    s->servers = calloc(ns ? ns : 1, sizeof(*s->servers));
    if (!s->tools || !s->servers || set_str(&s->callback_endpoint, tools->callback_endpoint) < 0)
        goto out;
    r = 0;
    /* each counted as soon as it is begun: the set releases a half-made one too */
    for (size_t i = 0; i < nt && r == 0; i++, s->ntools++)
        r = custom_spec(&tools->custom[i], &s->tools[i]);
    for (size_t i = 0; i < ns && r == 0; i++, s->nservers++)
        r = server_of(&tools->servers[i], &s->servers[i]);
    if (r < 0)
        goto out;
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

/* The listed tool's description: absent, or a string of at most TOOL_DESCRIPTION_MAX bytes. */
static int listed_description(json_object *o, const char *field, const char **ret, char *err,
                              size_t errlen)
{
    json_object *v = jsonx_get(o, "description");

    *ret = NULL;
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_string))
        return util_fail(-EINVAL, err, errlen, "%s.description: expected a string, got %s", field,
                         jsonx_type_word(v));
    if ((size_t)json_object_get_string_len(v) > TOOL_DESCRIPTION_MAX)
        return util_fail(-EINVAL, err, errlen, "%s.description: longer than %d bytes", field,
                         TOOL_DESCRIPTION_MAX);
    *ret = json_object_get_string(v);
    return 0;
}

/* inputSchema (else input_schema): run_tools_schema's rule; *ret a copy (NULL when absent). */
static int listed_schema(json_object *o, const char *field, json_object **ret, char *err,
                         size_t errlen)
{
    json_object *v;
    int r = run_tools_schema(o, field, &v, err, errlen);

    *ret = NULL;
    if (r < 0 || !v)
        return r;
    *ret = jsonx_copy(v);
    return *ret ? 0 : -ENOMEM;
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
    r = listed_description(o, field, &description, err, errlen);
    if (r < 0)
        return r;
    r = listed_schema(o, field, &t->input_schema, err, errlen);
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
                               t->input_schema ? json_object_get(t->input_schema)
                                               : mcp_bridge_empty_schema());
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
