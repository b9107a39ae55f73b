/*
 * request_fields — the request module's field machinery (request_fields.h): typed member
 * readers that name the field in every refusal, the table of an object's members
 * (rq_fields) and the walk over an array of objects (rq_each).
 */
#include "request/request_fields.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "request/request_url.h"

int rq_fail(struct rq_ctx *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    util_vseterr(c->err, c->errlen, fmt, ap);
    va_end(ap);
    return AR_E_INVALID_REQUEST;
}

/* Optional string member: absent or null -> *ret = NULL. */
int rq_text(struct rq_ctx *c, json_object *o, const char *key, const char *field, size_t max,
            const char **ret)
{
    json_object *v = jsonx_get(o, key);

    *ret = NULL;
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_string))
        return rq_fail(c, "%s: expected a string, got %s", field, jsonx_type_word(v));
    if ((size_t)json_object_get_string_len(v) > max)
        return rq_fail(c, "%s: longer than %zu bytes", field, max);
    *ret = json_object_get_string(v);
    return 0;
}

int rq_string(struct rq_ctx *c, json_object *o, const char *key, const char *field, size_t max,
              const char **ret)
{
    json_object *v = jsonx_get(o, key);
    int r = rq_text(c, o, key, field, max, ret);

    if (r == 0 && *ret && memchr(*ret, '\0', (size_t)json_object_get_string_len(v))) {
        *ret = NULL;
        return rq_fail(c, "%s: contains a NUL character", field);
    }
    return r;
}

int rq_object(struct rq_ctx *c, json_object *o, const char *key, const char *field,
              json_object **ret)
{
    json_object *v = jsonx_get(o, key);

    *ret = NULL;
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_object))
        return rq_fail(c, "%s: expected an object, got %s", field, jsonx_type_word(v));
    *ret = v;
    return 0;
}

int rq_array(struct rq_ctx *c, json_object *o, const char *key, const char *field, size_t max,
             json_object **ret)
{
    json_object *v = jsonx_get(o, key);

    *ret = NULL;
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_array))
        return rq_fail(c, "%s: expected an array, got %s", field, jsonx_type_word(v));
    if (json_object_array_length(v) > max)
        return rq_fail(c, "%s: more than %zu entries", field, max);
    *ret = v;
    return 0;
}

int rq_bool(struct rq_ctx *c, json_object *o, const char *key, const char *field, bool *ret)
{
    json_object *v = jsonx_get(o, key);

    *ret = false;
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_boolean))
        return rq_fail(c, "%s: expected a boolean, got %s", field, jsonx_type_word(v));
    *ret = json_object_get_boolean(v);
    return 0;
}

const char *const rq_permission_words[] = {"allow", "ask", "deny", NULL};

bool rq_one_of(const char *s, const char *const *set)
{
    for (; *set; set++)
        if (strcmp(s, *set) == 0)
            return true;
    return false;
}

int rq_enum(struct rq_ctx *c, json_object *o, const char *key, const char *field,
            const char *const *set, const char *expected, const char **ret)
{
    const char *s;
    int r = rq_string(c, o, key, field, RQ_NAME_MAX, &s);

    if (r < 0)
        return r;
    if (s && !rq_one_of(s, set))
        return rq_fail(c, "%s: unsupported value \"%.64s\" (expected %s)", field, s, expected);
    *ret = s;
    return 0;
}

bool rq_has_control(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return true;
    return false;
}

int rq_id(struct rq_ctx *c, json_object *o, const char *key, const char **ret)
{
    const char *s;
    int r = rq_string(c, o, key, key, RQ_ID_MAX, &s);

    if (r < 0)
        return r;
    /* blank ids (whitespace only, as String.trim() sees it) count as absent, as in Agenta's
     * runner; checked before control characters, which tabs and newlines also are */
    if (s && !s[strspn(s, " \t\r\n\v\f")])
        s = NULL;
    if (s && rq_has_control(s))
        return rq_fail(c, "%s: contains control characters", key);
    *ret = s;
    return 0;
}

/* Environment variable names a request may bind: upper-case identifiers outside a denylist. */
bool rq_env_name_ok(const char *name)
{
    static const char *const reserved[] = {"PATH",
                                           "HOME",
                                           "USER",
                                           "LOGNAME",
                                           "SHELL",
                                           "PWD",
                                           "TMPDIR",
                                           "LANG",
                                           "TERM",
                                           "NODE_OPTIONS",
                                           "NODE_PATH",
                                           "NODE_EXTRA_CA_CERTS",
                                           "BASH_ENV",
                                           "ENV",
                                           "IS_SANDBOX",
                                           "PI_CODING_AGENT_DIR",
                                           "PI_OFFLINE",
                                           "CODEX_HOME",
                                           "CLAUDE_CONFIG_DIR",
                                           "AGENT_RUNNER_TOKEN",
                                           "HOSTNAME",
                                           "SSL_CERT_FILE",
                                           "SSL_CERT_DIR",
                                           NULL};
    size_t n = strlen(name);

    if (n == 0 || n > 128 || !(isupper((unsigned char)name[0]) || name[0] == '_'))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isupper((unsigned char)name[i]) && !isdigit((unsigned char)name[i]) && name[i] != '_')
            return false;
    if (strncmp(name, "LD_", 3) == 0 || strncmp(name, "AGENT_RUNNER_", 13) == 0 ||
        strncmp(name, "GLIBC_", 6) == 0)
        return false;
    return !rq_one_of(name, reserved);
}

int rq_base_url(struct rq_ctx *c, const char *field, const char *url, bool require_https)
{
    char scheme[8], host[256];
    unsigned port;

    if (request_parse_url(url, scheme, sizeof(scheme), host, sizeof(host), &port) < 0)
        return rq_fail(c, "%s: not an http(s) URL with a host", field);
    if (strcmp(scheme, "http") == 0 && !request_host_is_loopback(host))
        return rq_fail(c, "%s: plain http is only allowed for loopback hosts", field);
    (void)require_https;
    return 0;
}

int rq_string_map(struct rq_ctx *c, json_object *o, const char *field, bool env_names,
                  struct str_pair **ret, size_t *ret_n)
{
    struct str_pair *pairs;
    size_t n = 0, cap;

    *ret = NULL;
    *ret_n = 0;
    if (!o)
        return 0;
    cap = (size_t)json_object_object_length(o);
    if (cap > 256)
        return rq_fail(c, "%s: more than 256 entries", field);
    if (cap == 0)
        return 0;
    pairs = calloc(cap, sizeof(*pairs));
    if (!pairs)
        return -ENOMEM;
    json_object_object_foreach(o, key, val)
    {
        if (!val || !json_object_is_type(val, json_type_string)) {
            free(pairs);
            return rq_fail(c, "%s.%.64s: expected a string", field, key);
        }
        if (env_names && !rq_env_name_ok(key)) {
            free(pairs);
            return rq_fail(c, "%s: \"%.64s\" is not an allowed environment variable name", field,
                           key);
        }
        if (rq_has_control(key) || strlen(key) == 0) {
            free(pairs);
            return rq_fail(c, "%s: invalid name", field);
        }
        pairs[n].name = key;
        pairs[n].value = json_object_get_string(val);
        n++;
    }
    *ret = pairs;
    *ret_n = n;
    return 0;
}

bool rq_tool_name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

int rq_tool_name(struct rq_ctx *c, const char *field, const char *name)
{
    if (!name || !rq_tool_name_ok(name))
        return rq_fail(c, "%s: must be 1-64 letters, digits, '_' or '-'", field);
    return rq_tool_name_free(c, field, name);
}

int rq_tool_name_free(struct rq_ctx *c, const char *field, const char *name)
{
    if (strcmp(name, RUN_TOOLS_MCP_NAME) == 0)
        return rq_fail(c, "%s: \"%s\" is reserved", field, RUN_TOOLS_MCP_NAME);
    return 0;
}

/* ---- tables ------------------------------------------------------------------------------ */

int rq_fields(struct rq_ctx *c, json_object *o, const char *prefix, const struct rq_field *table,
              size_t n, void *dst)
{
    char field[160];
    int r = 0;

    for (size_t i = 0; i < n && r == 0; i++) {
        const struct rq_field *t = &table[i];
        bool store = dst && t->offset != RQ_NOWHERE;
        const char *s = NULL;
        json_object *v = NULL;
        bool b = false;

        snprintf(field, sizeof(field), "%s%s%s", prefix, prefix[0] ? "." : "", t->key);
        switch (t->kind) {
        case RQ_STRING:
            r = rq_string(c, o, t->key, field, t->max, &s);
            break;
        case RQ_ENUM:
            r = rq_enum(c, o, t->key, field, t->set, t->expected, &s);
            break;
        case RQ_BOOL:
            r = rq_bool(c, o, t->key, field, &b);
            break;
        case RQ_OBJECT:
            r = rq_object(c, o, t->key, field, &v);
            break;
        case RQ_ARRAY:
            r = rq_array(c, o, t->key, field, t->max, &v);
            break;
        }
        if (r < 0)
            break;
        if (t->need == RQ_PRESENT && !s && !v && t->kind != RQ_BOOL)
            r = rq_fail(c, "%s: required", field);
        else if (t->need == RQ_NONEMPTY && (!s || !s[0]))
            r = rq_fail(c, "%s: required", field);
        else if (store && (t->kind == RQ_STRING || t->kind == RQ_ENUM))
            memcpy((char *)dst + t->offset, &s, sizeof(s));
        else if (store && t->kind == RQ_BOOL)
            memcpy((char *)dst + t->offset, &b, sizeof(b));
        else if (store)
            memcpy((char *)dst + t->offset, &v, sizeof(v));
        if (r == 0 && t->check)
            r = t->check(c, field, dst);
    }
    return r;
}

int rq_each(struct rq_ctx *c, json_object *arr, const char *name, size_t size, void **ret,
            size_t *ret_n,
            int (*fn)(struct rq_ctx *c, json_object *o, const char *field, size_t i, void *elem,
                      void *ctx),
            void *ctx)
{
    size_t n = arr ? json_object_array_length(arr) : 0;
    char field[160];
    char *elems = NULL;
    int r = 0;

    if (ret)
        *ret = NULL;
    if (ret_n)
        *ret_n = 0;
    if (n == 0)
        return 0;
    if (size) {
        elems = calloc(n, size);
        if (!elems)
            return -ENOMEM;
        /* the caller owns the array from here on, even when an element is refused */
        *ret = elems;
        *ret_n = n;
    }
    for (size_t i = 0; i < n && r == 0; i++) {
        json_object *o = json_object_array_get_idx(arr, i);

        snprintf(field, sizeof(field), "%s[%zu]", name, i);
        if (!o || !json_object_is_type(o, json_type_object))
            r = rq_fail(c, "%s: expected an object", field);
        else
            r = fn(c, o, field, i, elems ? elems + i * size : NULL, ctx);
    }
    return r;
}
