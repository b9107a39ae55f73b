/*
 * tool_direct — a direct call's request built from its descriptor: the body in Agenta's order
 * and the URL under the callback endpoint's mount (tool_direct.h).
 */
#include "tools/tool_direct.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "base/buf.h"
#include "base/jsonx.h"
#include "tools/tool_args.h"

#define PARAM_MAX 1024
#define PARAMS_MAX 16

int tool_direct_body(json_object *call, json_object *args, json_object *view, json_object **ret,
                     char *err, size_t errlen)
{
    const char *args_into = jsonx_str(call, "args_into");
    json_object *body, *fixed = jsonx_get(call, "body"), *context = jsonx_get(call, "context");
    int r = 0;

    body = json_object_new_object();
    if (!body)
        return -ENOMEM;
    if (args_into) {
        json_object *c = args ? jsonx_copy(args) : json_object_new_object();

        if (!c) {
            r = -ENOMEM;
            goto out;
        }
        r = tool_args_set(body, args_into, c);
        if (r == -EINVAL)
            snprintf(err, errlen, "direct-call args_into '%s' is not a dotted path", args_into);
    } else if (args && json_object_is_type(args, json_type_object)) {
        r = tool_args_merge(body, args, 0);
    }
    if (r == 0 && fixed && json_object_is_type(fixed, json_type_object))
        r = tool_args_merge(body, fixed, 0);
    if (r == 0 && context && json_object_is_type(context, json_type_object)) {
        json_object_object_foreach(context, path, token)
        {
            r = tool_args_bind_one(body, path, json_object_get_string(token), view);
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
        if (tool_args_get(body, name, &v) < 0 || !v) {
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
        tool_args_delete(body, names[i]);
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

int tool_direct_url(const char *endpoint, json_object *call, json_object *body, char **ret,
                    char *err, size_t errlen)
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
        snprintf(err, errlen, "direct-call method '%.16s' is not allowed", method ? method : "");
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
    if (mount_len && !(strncmp(path.data, base_path, mount_len) == 0 &&
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
