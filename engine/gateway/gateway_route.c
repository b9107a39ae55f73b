/*
 * gateway_route — the route of one environment's model gateway (gateway_route.h).
 */
#include "gateway/gateway_route.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/httpc.h"
#include "base/jsonx.h"
#include "base/util.h"

/* The route's keys: the only place they are spelled. */
#define K_UPSTREAM "upstream"
#define K_CREDENTIAL "credential"
#define K_AUTH "auth"
#define K_HEADERS "headers"
#define K_MODELS "models"
#define K_MAX_REQUEST "maxRequestBytes"
#define K_CA_FILE "caFile"

#define URL_MAX 2048
#define MODEL_NAME_MAX 256
#define REQUEST_CAP_MAX (1024ull * 1024 * 1024)

/* Never forwarded: hop-by-hop, framing, the host, and what would make the answer unreadable. */
static const char *const dropped[] = {
    "connection",          "keep-alive", "proxy-connection",
    "proxy-authorization", "te",         "trailer",
    "transfer-encoding",   "upgrade",    "host",
    "content-length",      "expect",     "accept-encoding",
};

json_object *gateway_route_encode(const struct gateway_route_spec *s)
{
    json_object *o = json_object_new_object(), *h;

    if (!o)
        return NULL;
    json_object_object_add(o, K_UPSTREAM, json_object_new_string(s->upstream));
    json_object_object_add(o, K_CREDENTIAL, json_object_new_string(s->credential));
    json_object_object_add(
        o, K_AUTH, json_object_new_string(s->auth == GATEWAY_AUTH_API_KEY ? "api-key" : "mirror"));
    if (s->nheaders > 0) {
        h = json_object_new_object();
        for (size_t i = 0; h && i < s->nheaders; i++)
            json_object_object_add(h, s->header_names[i],
                                   json_object_new_string(s->header_values[i]));
        json_object_object_add(o, K_HEADERS, h);
    }
    if (s->models)
        json_object_object_add(o, K_MODELS, json_object_get(s->models));
    if (s->max_request_bytes)
        json_object_object_add(o, K_MAX_REQUEST,
                               json_object_new_int64((int64_t)s->max_request_bytes));
    if (s->ca_file)
        json_object_object_add(o, K_CA_FILE, json_object_new_string(s->ca_file));
    return o;
}

void gateway_route_free(struct gateway_route *r)
{
    if (!r)
        return;
    free(r->origin);
    free(r->base_path);
    if (r->credential) {
        explicit_bzero(r->credential, strlen(r->credential));
        free(r->credential);
    }
    for (size_t i = 0; i < r->nheaders; i++) {
        explicit_bzero(r->header_lines[i], strlen(r->header_lines[i]));
        free(r->header_lines[i]);
    }
    for (size_t i = 0; i < r->nmodels; i++)
        free(r->models[i]);
    free(r->ca_file);
    free(r);
}

/* Split base_url into origin and path; -EINVAL for what the gateway cannot serve. */
static int split_url(const char *url, char *origin, size_t olen, char *path, size_t plen)
{
    const char *rest, *slash;
    size_t n;

    if (!url || strlen(url) >= URL_MAX)
        return -EINVAL;
    if (strncmp(url, "https://", 8) == 0)
        rest = url + 8;
    else if (strncmp(url, "http://", 7) == 0)
        rest = url + 7;
    else
        return -EINVAL;
    if (strpbrk(url, "?#@ \t\r\n\\") || util_has_ctl(url))
        return -EINVAL;
    slash = strchr(rest, '/');
    n = slash ? (size_t)(slash - url) : strlen(url);
    if (rest[0] == '\0' || rest[0] == '/' || n >= olen)
        return -EINVAL;
    memcpy(origin, url, n);
    origin[n] = '\0';
    n = slash ? strlen(slash) : 0;
    while (n > 0 && slash[n - 1] == '/')
        n--;
    if (n >= plen)
        return -ENAMETOOLONG;
    if (n)
        memcpy(path, slash, n);
    path[n] = '\0';
    return 0;
}

int gateway_route_base_path(const char *base_url, char *out, size_t outlen)
{
    char origin[URL_MAX];

    return split_url(base_url, origin, sizeof(origin), out, outlen);
}

static int decode_headers(json_object *h, struct gateway_route *r, char *err, size_t errlen)
{
    if (!h)
        return 0;
    if (!json_object_is_type(h, json_type_object))
        return util_fail(-EINVAL, err, errlen, "gateway route: headers is not an object");
    json_object_object_foreach(h, name, v)
    {
        const char *value =
            json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
        size_t n;

        if (r->nheaders >= GATEWAY_ROUTE_HEADERS_MAX || !httpc_header_name_ok(name) ||
            !httpc_header_value_ok(value))
            return util_fail(-EINVAL, err, errlen, "gateway route: a header is not valid");
        n = strlen(name) + strlen(value) + 3;
        r->header_lines[r->nheaders] = malloc(n);
        if (!r->header_lines[r->nheaders])
            return -ENOMEM;
        snprintf(r->header_lines[r->nheaders++], n, "%s: %s", name, value);
    }
    return 0;
}

static int decode_models(json_object *m, struct gateway_route *r, char *err, size_t errlen)
{
    size_t n;

    if (!m)
        return 0;
    if (!json_object_is_type(m, json_type_array) ||
        (n = json_object_array_length(m)) > GATEWAY_ROUTE_MODELS_MAX)
        return util_fail(-EINVAL, err, errlen, "gateway route: models is not a short list");
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(m, i);
        const char *s = json_object_is_type(e, json_type_string) ? json_object_get_string(e) : NULL;

        if (!s || !s[0] || strlen(s) > MODEL_NAME_MAX)
            return util_fail(-EINVAL, err, errlen, "gateway route: models[%zu] is not a name", i);
        r->models[r->nmodels] = strdup(s);
        if (!r->models[r->nmodels++])
            return -ENOMEM;
    }
    return 0;
}

int gateway_route_decode(json_object *o, struct gateway_route **ret, char *err, size_t errlen)
{
    struct gateway_route *r = calloc(1, sizeof(*r));
    char origin[URL_MAX], path[URL_MAX];
    const char *cred = jsonx_str(o, K_CREDENTIAL), *auth = jsonx_str(o, K_AUTH);
    const char *ca = jsonx_str(o, K_CA_FILE);
    json_object *cap = jsonx_get(o, K_MAX_REQUEST);
    int rc;

    if (!r)
        return -ENOMEM;
    rc = -EINVAL;
    if (!o || !json_object_is_type(o, json_type_object) ||
        split_url(jsonx_str(o, K_UPSTREAM), origin, sizeof(origin), path, sizeof(path)) < 0) {
        util_seterr(err, errlen, "gateway route: upstream is not an http(s) base URL");
        goto fail;
    }
    if (!cred || !cred[0] || !httpc_header_value_ok(cred)) {
        util_seterr(err, errlen, "gateway route: no usable credential");
        goto fail;
    }
    if (auth && strcmp(auth, "mirror") != 0 && strcmp(auth, "api-key") != 0) {
        util_seterr(err, errlen, "gateway route: auth must be \"mirror\" or \"api-key\"");
        goto fail;
    }
    r->auth = auth && strcmp(auth, "api-key") == 0 ? GATEWAY_AUTH_API_KEY : GATEWAY_AUTH_MIRROR;
    r->max_request_bytes = GATEWAY_ROUTE_REQUEST_DEFAULT;
    if (cap) {
        int64_t v = json_object_get_int64(cap);
        if (!json_object_is_type(cap, json_type_int) || v <= 0 || (uint64_t)v > REQUEST_CAP_MAX) {
            util_seterr(err, errlen, "gateway route: maxRequestBytes out of range");
            goto fail;
        }
        r->max_request_bytes = (uint64_t)v;
    }
    r->timeout_ms = GATEWAY_ROUTE_TIMEOUT_DEFAULT_MS;
    r->origin = strdup(origin);
    r->base_path = strdup(path);
    r->credential = strdup(cred);
    r->ca_file = ca ? strdup(ca) : NULL;
    if (!r->origin || !r->base_path || !r->credential || (ca && !r->ca_file)) {
        rc = -ENOMEM;
        goto fail;
    }
    rc = decode_headers(jsonx_get(o, K_HEADERS), r, err, errlen);
    if (rc == 0)
        rc = decode_models(jsonx_get(o, K_MODELS), r, err, errlen);
    if (rc < 0)
        goto fail;
    *ret = r;
    return 0;
fail:
    gateway_route_free(r);
    return rc;
}

/* A path that could mean another one once a server or libcurl normalised it. */
static bool path_escapes(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\\')
            return true;
        if (p[i] == '%' && i + 2 < n) {
            char a = p[i + 1], b = (char)(p[i + 2] | 0x20);
            if ((a == '2' && (b == 'e' || b == 'f')) || (a == '5' && b == 'c'))
                return true;
        }
        if (p[i] == '/' && i + 1 < n && p[i + 1] == '.' &&
            (i + 2 == n || p[i + 2] == '/' || (p[i + 2] == '.' && (i + 3 == n || p[i + 3] == '/'))))
            return true;
        if (p[i] == '/' && i + 1 < n && p[i + 1] == '/')
            return true;
    }
    return false;
}

static bool model_allowed(const struct gateway_route *r, const char *model)
{
    if (r->nmodels == 0)
        return true;
    for (size_t i = 0; model && i < r->nmodels; i++)
        if (strcmp(r->models[i], model) == 0)
            return true;
    return false;
}

int gateway_route_check(const struct gateway_route *r, const char *method, const char *target,
                        size_t target_len, const char *model, char *why, size_t whylen)
{
    const char *q = memchr(target, '?', target_len);
    size_t plen = q ? (size_t)(q - target) : target_len, blen = strlen(r->base_path);

    if (strcmp(method, "POST") != 0 && strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        util_seterr(why, whylen, "method %.16s is not forwarded (GET, HEAD and POST only)", method);
        return 405;
    }
    if (target_len == 0 || target[0] != '/' || path_escapes(target, plen) ||
        memchr(target, '#', target_len) || plen < blen || memcmp(target, r->base_path, blen) != 0 ||
        (plen > blen && target[blen] != '/')) {
        util_seterr(why, whylen,
                    "path \"%.*s\" is not under the run's model endpoint (only %s/... is "
                    "forwarded)",
                    (int)(plen > 200 ? 200 : plen), target, r->base_path);
        return 403;
    }
    if (!model_allowed(r, model)) {
        if (model)
            util_seterr(why, whylen, "model \"%.*s\" is not in modelGateway.allowedModels",
                        MODEL_NAME_MAX, model);
        else
            util_seterr(why, whylen,
                        "the call names no model, and modelGateway.allowedModels is set");
        return 403;
    }
    return 0;
}

static bool is_dropped(const struct gateway_http_field *f)
{
    for (size_t i = 0; i < sizeof(dropped) / sizeof(dropped[0]); i++)
        if (f->name_len == strlen(dropped[i]) && strncasecmp(f->name, dropped[i], f->name_len) == 0)
            return true;
    return false;
}

/* One of the route's extra headers has this field's name: the route's wins. */
static bool overridden(const struct gateway_route *r, const struct gateway_http_field *f)
{
    for (size_t i = 0; i < r->nheaders; i++)
        if (strncasecmp(r->header_lines[i], f->name, f->name_len) == 0 &&
            r->header_lines[i][f->name_len] == ':')
            return true;
    return false;
}

/* The field's value with every placeholder replaced by the credential. */
static int substituted(const struct gateway_route *r, const struct gateway_http_field *f,
                       struct buf *out)
{
    const char *v = f->value, *end = f->value + f->value_len, *hit;
    size_t pl = strlen(GATEWAY_PLACEHOLDER_KEY);
    int rc = buf_append(out, f->name, f->name_len);

    if (rc == 0)
        rc = buf_append_str(out, ": ");
    while (rc == 0 && (hit = memmem(v, (size_t)(end - v), GATEWAY_PLACEHOLDER_KEY, pl))) {
        rc = buf_append(out, v, (size_t)(hit - v));
        if (rc == 0)
            rc = buf_append_str(out, r->credential);
        v = hit + pl;
    }
    if (rc == 0)
        rc = buf_append(out, v, (size_t)(end - v));
    return rc == 0 ? buf_append_char(out, '\0') : rc;
}

int gateway_route_headers(const struct gateway_route *r, const struct gateway_http_request *req,
                          struct buf *lines, size_t max, size_t *ret_n)
{
    size_t n = 0, pl = strlen(GATEWAY_PLACEHOLDER_KEY);
    int rc = 0;

    for (size_t i = 0; rc == 0 && i < req->nfields; i++) {
        const struct gateway_http_field *f = &req->fields[i];
        bool carries = memmem(f->value, f->value_len, GATEWAY_PLACEHOLDER_KEY, pl) != NULL;

        if (is_dropped(f) || overridden(r, f) || (carries && r->auth == GATEWAY_AUTH_API_KEY))
            continue;
        if (n >= max)
            return -E2BIG;
        rc = substituted(r, f, lines);
        n++;
    }
    if (rc == 0 && r->auth == GATEWAY_AUTH_API_KEY) {
        if (n >= max)
            return -E2BIG;
        rc = buf_printf(lines, "api-key: %s", r->credential);
        if (rc == 0)
            rc = buf_append_char(lines, '\0');
        n++;
    }
    for (size_t i = 0; rc == 0 && i < r->nheaders; i++) {
        if (n >= max)
            return -E2BIG;
        rc = buf_append(lines, r->header_lines[i], strlen(r->header_lines[i]) + 1);
        n++;
    }
    if (rc < 0)
        return rc;
    *ret_n = n;
    return 0;
}
