#include "tools/tool_callback.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "tools/tool_http.h"

#define HEADER_MAX (16 * 1024)
#define BODY_MAX (16u * 1024 * 1024)
#define REPLY_DEPTH 128
#define PARAM_MAX 1024
#define PARAMS_MAX 16

const char tool_callback_steering[] =
    "This result was too large to return in full. Narrow your query (add filters, a smaller "
    "date range, or specific fields), request a summary, or paginate and fetch fewer items per "
    "call, then try again.";

/* ---- capping ---------------------------------------------------------------------------- */

/* How many bytes at the end of text[0..end) are an incomplete UTF-8 sequence. */
static size_t trailing_incomplete(const char *text, size_t end)
{
    size_t max_back = end < 3 ? end : 3;

    for (size_t back = 1; back <= max_back; back++) {
        unsigned char b = (unsigned char)text[end - back];
        size_t seq;

        if ((b & 0xc0) == 0x80)
            continue;
        seq = (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3 : (b & 0xf8) == 0xf0 ? 4 : 1;
        return seq > back ? back : 0;
    }
    return 0;
}

static int suffix(struct buf *out, size_t omitted, const char *note)
{
    int r = buf_printf(out, " [... %zu bytes omitted]", omitted);

    if (r == 0 && note)
        r = buf_printf(out, "\n\n%s", note);
    return r;
}

int tool_callback_cap(const char *text, size_t len, size_t max, const char *note,
                      struct buf *out)
{
    struct buf probe;
    size_t reserved, budget, keep;
    int r;

    if (len <= max)
        return buf_append(out, text, len);
    /* the omitted count is at most len: reserve room for a marker that long */
    buf_init(&probe, 1024 + (note ? strlen(note) : 0));
    r = suffix(&probe, len, note);
    reserved = probe.len;
    buf_release(&probe);
    if (r < 0)
        return r;
    budget = max > reserved ? max - reserved : 0;
    keep = budget - trailing_incomplete(text, budget);
    r = buf_append(out, text, keep);
    if (r == 0)
        r = suffix(out, len - keep, note);
    return r;
}

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
static int deep_set(json_object *obj, const char *path, json_object *value)
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

static void deep_delete(json_object *obj, const char *path)
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
static int deep_get(json_object *obj, const char *path, json_object **ret)
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

static json_object *copy(json_object *o)
{
    json_object *c = NULL;

    if (!o)
        return NULL;
    if (json_object_deep_copy(o, &c, NULL) != 0)
        return NULL;
    return c;
}

/* overlay merged into base (base changes): plain objects merge, anything else replaces. */
static int deep_merge(json_object *base, json_object *overlay, int depth)
{
    if (depth > 64)
        return -ELOOP;
    json_object_object_foreach(overlay, key, val)
    {
        json_object *have = jsonx_get(base, key), *c;

        if (!strcmp(key, "__proto__") || !strcmp(key, "constructor") ||
            !strcmp(key, "prototype"))
            continue;
        if (val && have && json_object_is_type(val, json_type_object) &&
            json_object_is_type(have, json_type_object)) {
            int r = deep_merge(have, val, depth + 1);
            if (r < 0)
                return r;
            continue;
        }
        c = copy(val);
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

json_object *tool_callback_ctx_view(json_object *run_context, const char *session_id)
{
    json_object *view, *session;

    view = run_context && json_object_is_type(run_context, json_type_object)
               ? copy(run_context)
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

int tool_callback_resolve(json_object *view, const char *token, json_object **ret)
{
    if (!run_tools_ctx_token_ok(token))
        return -ENOENT;
    return deep_get(view, token + 5, ret);
}

/* Set the resolved value of token at path in obj; -ENOENT when it does not resolve. */
static int bind_one(json_object *obj, const char *path, const char *token, json_object *view)
{
    json_object *v, *c;
    int r;

    deep_delete(obj, path);
    r = tool_callback_resolve(view, token, &v);
    if (r < 0)
        return r;
    c = copy(v);
    if (v && !c)
        return -ENOMEM;
    return deep_set(obj, path, c);
}

json_object *tool_callback_strip_ephemeral(json_object *args, json_object *list)
{
    json_object *out;

    if (!args || !json_object_is_type(args, json_type_object) || !list ||
        !json_object_is_type(list, json_type_array) || json_object_array_length(list) == 0)
        return json_object_get(args);
    out = copy(args);
    if (!out)
        return NULL;
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        const char *name = json_object_get_string(json_object_array_get_idx(list, i));

        if (name)
            json_object_object_del(out, name);
    }
    return out;
}

int tool_callback_bind(json_object *args, json_object *bindings, json_object *view,
                       json_object **ret, char *err, size_t errlen)
{
    json_object *out;
    int r = 0;

    out = args && json_object_is_type(args, json_type_object) ? copy(args)
                                                              : json_object_new_object();
    if (!out)
        return -ENOMEM;
    if (bindings && json_object_is_type(bindings, json_type_object)) {
        json_object_object_foreach(bindings, path, token)
        {
            r = bind_one(out, path, json_object_get_string(token), view);
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

/* ---- callback tools --------------------------------------------------------------------- */

int tool_callback_body(const char *call_ref, const char *tool_call_id, json_object *args,
                       struct buf *out)
{
    json_object *doc = json_object_new_object(), *data = json_object_new_object();
    json_object *fn = json_object_new_object();
    const char *text;
    size_t len;
    int r;

    if (!doc || !data || !fn) {
        json_object_put(doc);
        json_object_put(data);
        json_object_put(fn);
        return -ENOMEM;
    }
    json_object_object_add(fn, "name", json_object_new_string(call_ref));
    json_object_object_add(fn, "arguments", args ? json_object_get(args)
                                                 : json_object_new_object());
    json_object_object_add(data, "id", json_object_new_string(tool_call_id ? tool_call_id : ""));
    json_object_object_add(data, "type", json_object_new_string("function"));
    json_object_object_add(data, "function", fn);
    json_object_object_add(doc, "data", data);
    text = jsonx_text(doc, &len);
    r = buf_append(out, text, len);
    json_object_put(doc);
    return r;
}

/* A result holding text[0..len) capped at max (NUL bytes become spaces). */
static int capped_result(struct tool_result *ret, bool is_error, const char *text, size_t len,
                         size_t max)
{
    struct buf b;
    int r;

    buf_init(&b, max + 4096);
    r = tool_callback_cap(text, len, max, tool_callback_steering, &b);
    for (size_t i = 0; r == 0 && i < b.len; i++)
        if (b.data[i] == '\0')
            b.data[i] = ' ';
    if (r == 0)
        r = tool_result_set(ret, is_error, buf_str(&b));
    buf_release(&b);
    return r;
}

int tool_callback_parse_reply(const char *call_ref, long status, const char *body, size_t len,
                              size_t result_max, struct tool_result *ret)
{
    json_object *doc = NULL, *content, *st;
    const char *code, *message, *detail = "";
    size_t detail_len = 0;
    char err[128], reason[1024];
    struct buf b;
    int r;

    ret->http_status = status;
    if (status < 200 || status > 299) {
        snprintf(reason, sizeof(reason), "tool call %s failed: HTTP %ld", call_ref, status);
        return tool_result_set(ret, true, reason);
    }
    if (jsonx_parse(body, len, REPLY_DEPTH, &doc, err, sizeof(err)) < 0)
        return capped_result(ret, false, body, len, result_max);
    content = jsonx_path(doc, "call.data.content");
    st = jsonx_path(doc, "call.status");
    if (content && json_object_is_type(content, json_type_string)) {
        detail = json_object_get_string(content);
        detail_len = (size_t)json_object_get_string_len(content);
    } else if (content) {
        detail = jsonx_text(content, &detail_len);
    }
    code = jsonx_str(st, "code");
    if (code && strcmp(code, "STATUS_CODE_ERROR") == 0) {
        message = jsonx_str(st, "message");
        if (message && *message)
            snprintf(reason, sizeof(reason), "tool call %s failed: %.512s", call_ref, message);
        else
            snprintf(reason, sizeof(reason), "tool call %s failed", call_ref);
        buf_init(&b, BODY_MAX);
        r = buf_append_str(&b, reason);
        if (r == 0 && detail_len)
            r = buf_printf(&b, "\n%.*s", (int)detail_len, detail);
        if (r == 0)
            r = capped_result(ret, true, buf_str(&b), b.len, result_max);
        buf_release(&b);
    } else if (content) {
        r = capped_result(ret, false, detail, detail_len, result_max);
    } else {
        r = capped_result(ret, false, body, len, result_max);
    }
    json_object_put(doc);
    return r;
}

/* ---- direct calls ----------------------------------------------------------------------- */

int tool_callback_direct_body(json_object *call, json_object *args, json_object *view,
                              json_object **ret, char *err, size_t errlen)
{
    const char *args_into = jsonx_str(call, "args_into");
    json_object *body, *fixed = jsonx_get(call, "body"), *context = jsonx_get(call, "context");
    int r = 0;

    body = json_object_new_object();
    if (!body)
        return -ENOMEM;
    if (args_into) {
        json_object *c = args ? copy(args) : json_object_new_object();

        if (!c) {
            r = -ENOMEM;
            goto out;
        }
        r = deep_set(body, args_into, c);
        if (r == -EINVAL)
            snprintf(err, errlen, "direct-call args_into '%s' is not a dotted path", args_into);
    } else if (args && json_object_is_type(args, json_type_object)) {
        r = deep_merge(body, args, 0);
    }
    if (r == 0 && fixed && json_object_is_type(fixed, json_type_object))
        r = deep_merge(body, fixed, 0);
    if (r == 0 && context && json_object_is_type(context, json_type_object)) {
        json_object_object_foreach(context, path, token)
        {
            r = bind_one(body, path, json_object_get_string(token), view);
            if (r == -ENOENT || r == -EINVAL) {
                snprintf(err, errlen, "missing run-context value for direct-call binding '%s'",
                         path);
                r = -ENOENT;
            }
            if (r < 0)
                break;
        }
    }
out:
    if (r < 0) {
        json_object_put(body);
        return r;
    }
    *ret = body;
    return 0;
}

static bool param_name_char(char c, bool first)
{
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_')
        return true;
    return !first && ((c >= '0' && c <= '9') || c == '.' || c == '-');
}

/* encodeURIComponent of s appended to out. */
static int uri_component(struct buf *out, const char *s)
{
    static const char keep[] = "-_.!~*'()";
    int r = 0;

    for (const unsigned char *p = (const unsigned char *)s; r == 0 && *p; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
            strchr(keep, *p))
            r = buf_append_char(out, (char)*p);
        else
            r = buf_printf(out, "%%%02X", *p);
    }
    return r;
}

/* Fill "{name}" parameters of path from body into out; names removed from body afterwards. */
static int fill_params(const char *path, json_object *body, struct buf *out, char *err,
                       size_t errlen)
{
    char names[PARAMS_MAX][PARAM_MAX / 8];
    size_t nnames = 0;
    int r = 0;

    for (const char *p = path; r == 0 && *p;) {
        const char *close;
        char name[PARAM_MAX / 8];
        json_object *v;
        size_t n;

        if (*p != '{') {
            r = buf_append_char(out, *p++);
            continue;
        }
        close = strchr(p, '}');
        n = close ? (size_t)(close - p - 1) : 0;
        if (!close || n == 0 || n >= sizeof(name) || !param_name_char(p[1], true)) {
            r = buf_append_char(out, *p++);
            continue;
        }
        for (size_t i = 1; i < n; i++) {
            if (!param_name_char(p[1 + i], false)) {
                n = 0;
                break;
            }
        }
        if (n == 0) {
            r = buf_append_char(out, *p++);
            continue;
        }
        memcpy(name, p + 1, n);
        name[n] = '\0';
        if (deep_get(body, name, &v) < 0 || !v) {
            snprintf(err, errlen, "direct-call path parameter '{%s}' is missing", name);
            return -EINVAL;
        }
        if (json_object_is_type(v, json_type_string)) {
            r = uri_component(out, json_object_get_string(v));
        } else if (json_object_is_type(v, json_type_int) ||
                   json_object_is_type(v, json_type_double) ||
                   json_object_is_type(v, json_type_boolean)) {
            r = uri_component(out, jsonx_text(v, NULL));
        } else {
            snprintf(err, errlen, "direct-call path parameter '{%s}' must be scalar", name);
            return -EINVAL;
        }
        if (nnames == PARAMS_MAX) {
            snprintf(err, errlen, "direct-call path has more than %d parameters", PARAMS_MAX);
            return -EINVAL;
        }
        memcpy(names[nnames++], name, n + 1);
        p = close + 1;
    }
    for (size_t i = 0; r == 0 && i < nnames; i++)
        deep_delete(body, names[i]);
    return r;
}

/* The refusals of directCallUrl, plus encoded dots and separators (no server-side decoding). */
static bool path_safe(const char *path)
{
    const char *q = strchr(path, '?');
    size_t plen = q ? (size_t)(q - path) : strlen(path);

    if (path[0] != '/' || path[1] == '/')
        return false;
    if (strstr(path, "..") || strchr(path, '\\') || strchr(path, '#'))
        return false;
    for (const unsigned char *p = (const unsigned char *)path; *p; p++)
        if (*p <= ' ' || *p == 0x7f)
            return false;
    if (strcasestr(path, "%2e") || strcasestr(path, "%2f") || strcasestr(path, "%5c") ||
        strcasestr(path, "%00"))
        return false;
    /* no "." segment in the path part */
    for (size_t i = 0; i < plen; i++)
        if (path[i] == '.' && path[i - 1] == '/' && (i + 1 == plen || path[i + 1] == '/'))
            return false;
    return true;
}

int tool_callback_direct_url(const char *endpoint, json_object *call, json_object *body,
                             char **ret, char *err, size_t errlen)
{
    const char *method = jsonx_str(call, "method"), *tmpl = jsonx_str(call, "path");
    char *base_path = NULL, *url = NULL, *query;
    size_t mount_len = 0, plen;
    CURLU *u = NULL;
    struct buf path;
    int r = -EINVAL;

    buf_init(&path, 8192);
    if (!method || (strcmp(method, "GET") && strcmp(method, "POST") && strcmp(method, "PUT") &&
                    strcmp(method, "DELETE"))) {
        snprintf(err, errlen, "direct-call method '%.16s' is not allowed",
                 method ? method : "");
        goto out;
    }
    if (!tmpl || !endpoint) {
        snprintf(err, errlen, "direct-call path is missing");
        goto out;
    }
    r = fill_params(tmpl, body, &path, err, errlen);
    if (r == -E2BIG)
        snprintf(err, errlen, "direct-call path is too long");
    if (r < 0)
        goto out;
    r = -EINVAL;
    if (!path_safe(buf_str(&path))) {
        snprintf(err, errlen, "direct-call path '%.256s' is not a safe absolute path",
                 buf_str(&path));
        goto out;
    }
    u = curl_url();
    if (!u) {
        r = -ENOMEM;
        goto out;
    }
    if (curl_url_set(u, CURLUPART_URL, endpoint, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PATH, &base_path, 0) != CURLUE_OK) {
        snprintf(err, errlen, "cannot derive the origin of the callback endpoint");
        goto out;
    }
    plen = strlen(base_path);
    if (plen >= 11 && strcmp(base_path + plen - 11, "/tools/call") == 0)
        mount_len = plen - 11;
    query = strchr(path.data, '?');
    if (query)
        *query++ = '\0';
    if (mount_len &&
        !(strncmp(path.data, base_path, mount_len) == 0 &&
          (path.data[mount_len] == '\0' || path.data[mount_len] == '/'))) {
        snprintf(err, errlen, "direct-call path '%.256s' is outside the API mount '%.*s'",
                 path.data, (int)mount_len, base_path);
        goto out;
    }
    if (curl_url_set(u, CURLUPART_PATH, path.data, 0) != CURLUE_OK ||
        curl_url_set(u, CURLUPART_QUERY, query && *query ? query : NULL, 0) != CURLUE_OK ||
        curl_url_set(u, CURLUPART_FRAGMENT, NULL, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_URL, &url, 0) != CURLUE_OK) {
        snprintf(err, errlen, "direct-call path '%.256s' is not a valid path", path.data);
        goto out;
    }
    *ret = strdup(url);
    r = *ret ? 0 : -ENOMEM;
out:
    curl_free(base_path);
    curl_free(url);
    curl_url_cleanup(u);
    buf_release(&path);
    return r;
}

/* ---- running a call --------------------------------------------------------------------- */

uint64_t tool_callback_timeout_ms(const struct tool_spec *spec, uint64_t default_ms)
{
    if (spec && spec->timeout_ms > 0)
        return spec->timeout_ms + TOOL_TIMEOUT_GRACE_MS;
    return default_ms ? default_ms : TOOL_TIMEOUT_DEFAULT_MS;
}

/* The header lines of a callback or direct request into lines[] (backed by store). */
static int headers_for(const struct tool_call_ctx *ctx, json_object *view, struct buf *store,
                       const char *lines[3], size_t *ret_n)
{
    const char *kind = jsonx_str(jsonx_get(view, "run"), "kind");
    size_t offs[3], n = 0;
    int r;

    offs[n++] = store->len;
    r = buf_append(store, "content-type: application/json", 31);
    if (r == 0 && ctx->authorization) {
        r = buf_append_char(store, '\0');
        offs[n++] = store->len;
        if (r == 0)
            r = buf_printf(store, "authorization: %s", ctx->authorization);
    }
    if (r == 0 && kind) {
        r = buf_append_char(store, '\0');
        offs[n++] = store->len;
        if (r == 0)
            r = buf_printf(store, "x-agenta-run-kind: %s", kind);
    }
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++)
        lines[i] = store->data + offs[i];
    *ret_n = n;
    return 0;
}

static const char *transport_reason(int r, uint64_t timeout_ms, const char *detail, char *out,
                                    size_t outlen)
{
    if (r == -ETIMEDOUT)
        snprintf(out, outlen, "timed out after %" PRIu64 " ms", timeout_ms);
    else if (r == -EINVAL)
        snprintf(out, outlen, "the request could not be built (check toolCallback)");
    else
        snprintf(out, outlen, "%.200s", detail);
    return out;
}

static int run_callback(const struct tool_call_ctx *ctx, const struct tool_spec *spec,
                        const char *tool_call_id, json_object *args, json_object *view,
                        struct tool_result *ret)
{
    struct tool_http_request rq = {.method = "POST", .url = ctx->endpoint,
                                   .max_body = TOOL_RAW_READ_MAX, .truncate_ok = true,
                                   .cancel = ctx->cancel};
    struct tool_http_response res;
    const char *lines[3];
    json_object *bound = NULL;
    struct buf body, store;
    char err[512], why[256];
    size_t result_max = ctx->result_max ? ctx->result_max : TOOL_RESULT_MAX_DEFAULT;
    int r;

    buf_init(&body, BODY_MAX);
    buf_init(&store, HEADER_MAX);
    r = tool_callback_bind(args, spec->context_bindings, view, &bound, err, sizeof(err));
    if (r == -ENOENT) {
        r = tool_result_set(ret, true, err);
        goto out;
    }
    if (r < 0)
        goto out;
    /* without bindings the model's arguments go as they are (an object or {} when absent) */
    r = tool_callback_body(spec->call_ref, tool_call_id,
                           spec->context_bindings ? bound : args, &body);
    if (r == 0)
        r = headers_for(ctx, view, &store, lines, &rq.nheaders);
    if (r < 0)
        goto out;
    rq.body = buf_str(&body);
    rq.body_len = body.len;
    rq.headers = lines;
    rq.timeout_ms = tool_callback_timeout_ms(spec, ctx->default_timeout_ms);
    r = tool_http_perform(ctx->curl, &rq, &res, err, sizeof(err));
    if (r == -ECANCELED || r == -ENOMEM)
        goto out;
    if (r < 0) {
        char text[1024];

        snprintf(text, sizeof(text), "tool call %s failed: %s", spec->call_ref,
                 transport_reason(r, rq.timeout_ms, err, why, sizeof(why)));
        log_debug("tool \"%s\": callback failed: %s", spec->name, why);
        r = tool_result_set(ret, true, text);
        goto out;
    }
    if (res.status < 200 || res.status > 299)
        log_debug("tool \"%s\": callback answered HTTP %ld", spec->name, res.status);
    r = tool_callback_parse_reply(spec->call_ref, res.status, res.body.data ? res.body.data : "",
                                  res.body.len, result_max, ret);
    tool_http_response_release(&res);
out:
    json_object_put(bound);
    buf_release(&body);
    buf_release(&store);
    return r;
}

static int run_direct(const struct tool_call_ctx *ctx, const struct tool_spec *spec,
                      json_object *args, json_object *view, struct tool_result *ret)
{
    const char *method = jsonx_str(spec->call, "method");
    struct tool_http_request rq = {.method = method, .max_body = TOOL_RAW_READ_MAX,
                                   .truncate_ok = true, .cancel = ctx->cancel};
    struct tool_http_response res;
    json_object *body = NULL;
    const char *lines[3];
    struct buf store;
    char err[512], why[256], text[1024];
    char *url = NULL;
    size_t result_max = ctx->result_max ? ctx->result_max : TOOL_RESULT_MAX_DEFAULT;
    int r;

    buf_init(&store, HEADER_MAX);
    r = tool_callback_direct_body(spec->call, args, view, &body, err, sizeof(err));
    if (r == 0)
        r = tool_callback_direct_url(ctx->endpoint, spec->call, body, &url, err, sizeof(err));
    if (r == -ENOENT || r == -EINVAL) {
        r = tool_result_set(ret, true, err);
        goto out;
    }
    if (r == 0)
        r = headers_for(ctx, view, &store, lines, &rq.nheaders);
    if (r < 0)
        goto out;
    rq.url = url;
    rq.headers = lines;
    if (method && (strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0)) {
        size_t len;

        rq.body = jsonx_text(body, &len);
        rq.body_len = len;
    }
    rq.timeout_ms = tool_callback_timeout_ms(spec, ctx->default_timeout_ms);
    r = tool_http_perform(ctx->curl, &rq, &res, err, sizeof(err));
    if (r == -ECANCELED || r == -ENOMEM)
        goto out;
    if (r < 0) {
        snprintf(text, sizeof(text), "direct tool call failed: %s",
                 transport_reason(r, rq.timeout_ms, err, why, sizeof(why)));
        log_debug("tool \"%s\": direct call failed: %s", spec->name, why);
        r = tool_result_set(ret, true, text);
        goto out;
    }
    ret->http_status = res.status;
    if (res.status < 200 || res.status > 299) {
        log_debug("tool \"%s\": direct call answered HTTP %ld", spec->name, res.status);
        snprintf(text, sizeof(text), "direct tool call failed: HTTP %ld", res.status);
        r = tool_result_set(ret, true, text);
    } else {
        r = capped_result(ret, false, res.body.data ? res.body.data : "", res.body.len,
                          result_max);
    }
    tool_http_response_release(&res);
out:
    free(url);
    json_object_put(body);
    buf_release(&store);
    return r;
}

int tool_callback_run(const struct tool_call_ctx *ctx, const struct tool_spec *spec,
                      const char *tool_call_id, json_object *args, struct tool_result *ret)
{
    struct tool_result res = {0};
    json_object *view = NULL, *stripped = NULL;
    struct buf missing;
    int r;

    if (spec->exec != TOOL_EXEC_CALLBACK && spec->exec != TOOL_EXEC_DIRECT)
        return -EINVAL;
    log_redact_add(ctx->authorization);
    buf_init(&missing, 64 * 1024);
    if (!ctx->endpoint) {
        r = tool_result_set(&res, true, "missing toolCallback endpoint");
        goto done;
    }
    r = tool_spec_check_required(spec, args, &missing);
    if (r != 0) {
        if (r > 0)
            r = tool_result_set(&res, true, buf_str(&missing));
        goto done;
    }
    stripped = tool_callback_strip_ephemeral(args, spec->ephemeral_args);
    view = tool_callback_ctx_view(ctx->run_context, ctx->session_id);
    if ((args && !stripped) || !view) {
        r = -ENOMEM;
        goto done;
    }
    if (spec->exec == TOOL_EXEC_CALLBACK)
        r = run_callback(ctx, spec, tool_call_id, stripped, view, &res);
    else
        r = run_direct(ctx, spec, stripped, view, &res);
done:
    if (r == 0 && !res.text)
        r = -EIO;
    if (r == 0) {
        *ret = res;
        memset(&res, 0, sizeof(res));
    }
    tool_result_release(&res);
    json_object_put(view);
    json_object_put(stripped);
    buf_release(&missing);
    return r;
}
