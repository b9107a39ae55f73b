/*
 * gateway_route — where the model gateway (model_gateway.h) of one environment may send calls
 * and how: the run's real model endpoint, its credential, the extra endpoint headers, the
 * optional model allowlist and the request cap. The worker builds it from the run request
 * (gateway_route_encode, the only place its keys are spelled) and the keeper receives it in its
 * spec (or a spare's "#claim"); gateway_route_decode checks it.
 *
 * The rules a call must pass (gateway_route_check), each refusal a status and a reason:
 *   - GET, HEAD (claude checks its endpoint with one) or POST (405);
 *   - an origin-form target whose path is the endpoint's base path or under it, with no dot
 *     segment, backslash or encoded dot or slash that could step outside it once normalised
 *     (403): no other host and no other path ever goes through the gateway;
 *   - with a model allowlist, a JSON body whose "model" is on it (403).
 * The credential is added the way the harness's own configuration asks for it: every request
 * header that carries the placeholder key the sandbox holds gets the real credential in its
 * place (Authorization: Bearer, x-api-key, x-goog-api-key, ...); with auth "api-key" (Azure)
 * those headers are dropped and `api-key` is sent instead. Hop-by-hop headers, Host,
 * Content-Length, Expect and Accept-Encoding (the answer must come back readable) are never
 * forwarded; the endpoint's extra headers replace any the harness sent under the same name.
 *
 * Ownership: a decoded route owns its strings; gateway_route_free(NULL) is a no-op. The
 * credential is never part of an error message.
 */
#ifndef AR_GATEWAY_ROUTE_H
#define AR_GATEWAY_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "gateway/gateway_http.h"

#define GATEWAY_ROUTE_MODELS_MAX 64
#define GATEWAY_ROUTE_HEADERS_MAX 32
#define GATEWAY_ROUTE_REQUEST_DEFAULT (32u * 1024 * 1024)
#define GATEWAY_ROUTE_TIMEOUT_DEFAULT_MS (30u * 60 * 1000) /* one model call, all of it */
/* What the sandbox holds instead of the key: worthless anywhere but at its own gateway */
#define GATEWAY_PLACEHOLDER_KEY "agent-runner-model-gateway"
/* The sandbox's end of the gateway: a port in its own network namespace (sandbox_net.h) */
#define GATEWAY_SANDBOX_ORIGIN "http://127.0.0.1:1001"

enum gateway_auth {
    GATEWAY_AUTH_MIRROR = 0, /* the placeholder replaced wherever the harness sent it */
    GATEWAY_AUTH_API_KEY,    /* Azure: `api-key: <credential>` */
};

/* What the worker says (borrowed strings; NULL / 0 for absent). */
struct gateway_route_spec {
    const char *upstream;   /* the endpoint's base URL: http(s)://host[:port][/path] */
    const char *credential; /* the key */
    enum gateway_auth auth;
    const char *const *header_names; /* endpoint.headers */
    const char *const *header_values;
    size_t nheaders;
    json_object *models;        /* array of strings, or NULL: any model */
    uint64_t max_request_bytes; /* 0: GATEWAY_ROUTE_REQUEST_DEFAULT */
    const char *ca_file;        /* PEM bundle for https (NULL: the system's) */
};

struct gateway_route {
    char *origin;    /* "https://api.openai.com" */
    char *base_path; /* "/v1", "" for the root */
    char *credential;
    enum gateway_auth auth;
    char *header_lines[GATEWAY_ROUTE_HEADERS_MAX]; /* "Name: value" */
    size_t nheaders;
    char *models[GATEWAY_ROUTE_MODELS_MAX];
    size_t nmodels;
    uint64_t max_request_bytes;
    uint64_t timeout_ms;
    char *ca_file;
};

/* The route as the keeper spec carries it (a new object), NULL on ENOMEM. */
json_object *gateway_route_encode(const struct gateway_route_spec *s);
/* Check and copy a route; -EINVAL with err naming what is wrong (never the credential). */
int gateway_route_decode(json_object *o, struct gateway_route **ret, char *err, size_t errlen);
void gateway_route_free(struct gateway_route *r);

/*
 * The path part of base_url ("" for none, no trailing slash) into out: what the sandbox's base
 * URL appends to GATEWAY_SANDBOX_ORIGIN. -EINVAL for a URL the gateway cannot serve (no
 * http(s), user info, a query or fragment), -ENAMETOOLONG.
 */
int gateway_route_base_path(const char *base_url, char *out, size_t outlen);

/*
 * May this call go upstream? 0, or the HTTP status to refuse it with (403, 405) and why.
 * model is the body's "model" (NULL when it has none or is not JSON).
 */
int gateway_route_check(const struct gateway_route *r, const char *method, const char *target,
                        size_t target_len, const char *model, char *why, size_t whylen);

/*
 * The upstream request's header lines from the sandbox's request: appended to lines as
 * NUL-terminated "Name: value" strings, *ret_n of them (at most max). -E2BIG, -ENOMEM.
 */
int gateway_route_headers(const struct gateway_route *r, const struct gateway_http_request *req,
                          struct buf *lines, size_t max, size_t *ret_n);

#endif
