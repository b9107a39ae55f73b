/*
 * tool_args — the model's arguments shaped for a call: dotted paths set, read, removed and
 * merged, the $ctx view of the run context, bindings applied, ephemeral arguments dropped
 * (tool_args.h).
 */
#include "tools/tool_args.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/jsonx.h"
#include "core/contracts.h"

/* ---- JSON paths ------------------------------------------------------------------------- */

/* The segment of path starting at p into seg; the next segment's start (or NULL at the end). */
static const char *next_segment(const char *p, char seg[129])
{
    size_t n = strcspn(p, ".");

    if (n > 128)
        n = 128;
    memcpy(seg, p, n);
    seg[n] = '\0';
    return p[n] == '.' ? p + n + 1 : NULL;
}

/* Set value (a reference handed over) at the dotted path in obj, creating objects on the way. */
int tool_args_set(json_object *obj, const char *path, json_object *value)
{
    json_object *cur = obj;
    const char *p = path;
    char seg[129];

    if (!run_tools_path_ok(path) || !json_object_is_type(obj, json_type_object)) {
        json_object_put(value);
        return -EINVAL;
    }
    for (;;) {
        const char *next = next_segment(p, seg);
        json_object *child;

        if (!next)
            break;
        child = jsonx_get(cur, seg);
        if (!child || !json_object_is_type(child, json_type_object)) {
            child = json_object_new_object();
            if (!child || json_object_object_add(cur, seg, child) != 0) {
                json_object_put(child);
                json_object_put(value);
                return -ENOMEM;
            }
        }
        cur = child;
        p = next;
    }
    if (json_object_object_add(cur, seg, value) != 0) {
        json_object_put(value);
        return -ENOMEM;
    }
    return 0;
}

void tool_args_delete(json_object *obj, const char *path)
{
    json_object *cur = obj;
    const char *p = path;
    char seg[129];

    if (!run_tools_path_ok(path))
        return;
    for (;;) {
        const char *next = next_segment(p, seg);

        if (!next)
            break;
        cur = jsonx_get(cur, seg);
        if (!cur || !json_object_is_type(cur, json_type_object))
            return;
        p = next;
    }
    if (json_object_is_type(cur, json_type_object))
        json_object_object_del(cur, seg);
}

/* The value at a dotted path through objects only: 0 and *ret (NULL for null), or -ENOENT. */
int tool_args_get(json_object *obj, const char *path, json_object **ret)
{
    json_object *cur = obj;
    const char *p = path;
    char seg[129];

    if (!run_tools_path_ok(path))
        return -ENOENT;
    while (p) {
        json_object *v;

        p = next_segment(p, seg);
        if (!cur || !json_object_is_type(cur, json_type_object) ||
            !json_object_object_get_ex(cur, seg, &v))
            return -ENOENT;
        cur = v;
    }
    *ret = cur;
    return 0;
}

/* overlay merged into base (base changes): plain objects merge, anything else replaces. */
int tool_args_merge(json_object *base, json_object *overlay, int depth)
{
    if (depth > 64)
        return -ELOOP;
    json_object_object_foreach(overlay, key, val)
    {
        json_object *have = jsonx_get(base, key), *c;

        if (!strcmp(key, "__proto__") || !strcmp(key, "constructor") || !strcmp(key, "prototype"))
            continue;
        if (val && have && json_object_is_type(val, json_type_object) &&
            json_object_is_type(have, json_type_object)) {
            int r = tool_args_merge(have, val, depth + 1);
            if (r < 0)
                return r;
            continue;
        }
        c = jsonx_copy(val);
        if (val && !c)
            return -ENOMEM;
        if (json_object_object_add(base, key, c) != 0) {
            json_object_put(c);
            return -ENOMEM;
        }
    }
    return 0;
}

/* ---- $ctx ------------------------------------------------------------------------------- */

json_object *tool_args_ctx_view(json_object *run_context, const char *session_id)
{
    json_object *view, *session;

    view = run_context && json_object_is_type(run_context, json_type_object)
               ? jsonx_copy(run_context)
               : json_object_new_object();
    if (!view || !session_id)
        return view;
    session = jsonx_get(view, "session");
    if (!session || !json_object_is_type(session, json_type_object)) {
        session = json_object_new_object();
        if (!session || json_object_object_add(view, "session", session) != 0) {
            json_object_put(session);
            json_object_put(view);
            return NULL;
        }
    }
    if (json_object_object_add(session, "id", json_object_new_string(session_id)) != 0) {
        json_object_put(view);
        return NULL;
    }
    return view;
}

int tool_args_resolve(json_object *view, const char *token, json_object **ret)
{
    if (!run_tools_ctx_token_ok(token))
        return -ENOENT;
    return tool_args_get(view, token + 5, ret);
}

/* Set the resolved value of token at path in obj; -ENOENT when it does not resolve. */
int tool_args_bind_one(json_object *obj, const char *path, const char *token, json_object *view)
{
    json_object *v, *c;
    int r;

    tool_args_delete(obj, path);
    r = tool_args_resolve(view, token, &v);
    if (r < 0)
        return r;
    c = jsonx_copy(v);
    if (v && !c)
        return -ENOMEM;
    return tool_args_set(obj, path, c);
}

json_object *tool_args_strip_ephemeral(json_object *args, json_object *list)
{
    json_object *out;

    if (!args || !json_object_is_type(args, json_type_object) || !list ||
        !json_object_is_type(list, json_type_array) || json_object_array_length(list) == 0)
        return json_object_get(args);
    out = jsonx_copy(args);
    if (!out)
        return NULL;
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        const char *name = json_object_get_string(json_object_array_get_idx(list, i));

        if (name)
            json_object_object_del(out, name);
    }
    return out;
}

int tool_args_bind(json_object *args, json_object *bindings, json_object *view, json_object **ret,
                   char *err, size_t errlen)
{
    json_object *out;
    int r = 0;

    out = args && json_object_is_type(args, json_type_object) ? jsonx_copy(args)
                                                              : json_object_new_object();
    if (!out)
        return -ENOMEM;
    if (bindings && json_object_is_type(bindings, json_type_object)) {
        json_object_object_foreach(bindings, path, token)
        {
            r = tool_args_bind_one(out, path, json_object_get_string(token), view);
            if (r == -ENOENT || r == -EINVAL) {
                snprintf(err, errlen, "missing run-context value for tool binding '%s'", path);
                r = -ENOENT;
            }
            if (r < 0)
                break;
        }
    }
    if (r < 0) {
        json_object_put(out);
        return r;
    }
    *ret = out;
    return 0;
}
