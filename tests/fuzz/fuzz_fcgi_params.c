/*
 * fuzz_fcgi_params — the FastCGI parameters a worker trusts nginx to pass through from the
 * client: the backend token check (auth_ok), and what http_parse_params / http_req_init make of
 * REQUEST_METHOD, DOCUMENT_URI, REQUEST_URI, CONTENT_LENGTH and HTTP_X_REQUEST_ID, followed by
 * http_read_body over an in-memory libfcgi stream.
 *
 * Input layout: byte 0 says which of the eight string fields are present (bit i: field i is
 * not NULL), byte 1 holds mode bits (bit 0: the header token is the expected token, bit 1: the
 * Authorization header is "Bearer " + expected token + field 7, bits 2-4: the body cap); the
 * rest is the fields, NUL-separated, in the order method, document_uri, request_uri,
 * content_length, request_id, expected token, header token, authorization; whatever follows
 * the eighth NUL is the body. Properties:
 *   - auth_ok never grants access unless a presented token equals the configured one exactly,
 *     and always grants it for an exact X-Agenta-Runner-Token or Bearer token;
 *   - the copied strings are NUL-terminated truncations of the parameters, the path has no
 *     query, a usable request id is kept and any other replaced by 32 hex digits;
 *   - CONTENT_LENGTH is exact when it is a plain decimal and flagged bad (refused) otherwise;
 *   - http_read_body reads exactly CONTENT_LENGTH bytes, refuses an over-cap length before
 *     reading, and reports a short body;
 *   - http_req_init over an FCGX parameter array agrees with http_parse_params.
 */
#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "../../fcgi/auth.h"
#include "../../fcgi/http.h"
#include "fuzz.h"

#define NFIELDS 8
#define BEARER_MAX 4096 /* longer tokens are refused, in either header */

enum {
    F_METHOD,
    F_DOCUMENT_URI,
    F_REQUEST_URI,
    F_CONTENT_LENGTH,
    F_REQUEST_ID,
    F_EXPECTED,
    F_HEADER,
    F_AUTHORIZATION,
};

static const uint64_t body_caps[] = {0, 1, 7, 64, 1000, 65536, 1u << 20, UINT64_MAX - 1};

/* The token auth_ok should accept from header/authorization, per auth.h. */
static bool auth_oracle(const char *expected, const char *header, const char *authorization)
{
    const char *t;
    size_t n;

    if (!expected || !expected[0])
        return false;
    if (header && header[0])
        return strlen(header) < BEARER_MAX && strcmp(header, expected) == 0;
    if (!authorization || strncasecmp(authorization, "Bearer", 6) != 0 ||
        !isspace((unsigned char)authorization[6]))
        return false;
    t = authorization + 6;
    while (isspace((unsigned char)*t))
        t++;
    n = strlen(t);
    while (n > 0 && isspace((unsigned char)t[n - 1]))
        n--;
    return n < BEARER_MAX && n == strlen(expected) && memcmp(t, expected, n) == 0;
}

static void check_auth(const char *expected, const char *header, const char *authorization)
{
    bool ok = auth_ok(expected, header, authorization);

    FUZZ_CHECK(ok == auth_oracle(expected, header, authorization));
    /* the property that matters, stated without the oracle: access means an exact token */
    if (ok) {
        FUZZ_CHECK(expected && expected[0]);
        FUZZ_CHECK((header && strcmp(header, expected) == 0) ||
                   (authorization && strstr(authorization, expected)));
    }
}

/* A whole decimal string that fits in 64 bits. */
static bool plain_u64(const char *s, uint64_t *ret)
{
    uint64_t v = 0;

    if (!s[0])
        return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *ret = v;
    return true;
}

/* Request ids a caller may choose: they are echoed in a header and the logs. */
static bool token_chars(const char *s)
{
    return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
           strlen(s);
}

static bool is_truncation(const char *copy, size_t size, const char *orig)
{
    size_t n = strlen(orig);

    if (n > size - 1)
        n = size - 1;
    return strlen(copy) == n && memcmp(copy, orig, n) == 0;
}

static void check_params(const struct http_req *h, const char *f[NFIELDS])
{
    const char *uri = f[F_DOCUMENT_URI] ? f[F_DOCUMENT_URI] : f[F_REQUEST_URI];
    const char *id = f[F_REQUEST_ID], *len = f[F_CONTENT_LENGTH];
    char path[sizeof(h->path)];
    uint64_t v;

    FUZZ_CHECK(h->fr == NULL && !h->headers_sent && !h->client_gone);
    FUZZ_CHECK(is_truncation(h->method, sizeof(h->method), f[F_METHOD] ? f[F_METHOD] : ""));
    snprintf(path, sizeof(path), "%s", uri ? uri : "");
    path[strcspn(path, "?")] = '\0';
    FUZZ_CHECK(memchr(h->path, '\0', sizeof(h->path)) && strcmp(h->path, path) == 0);
    FUZZ_CHECK(!strchr(h->path, '?'));
    if (id && id[0] && strlen(id) < sizeof(h->request_id) && token_chars(id)) {
        FUZZ_CHECK(strcmp(h->request_id, id) == 0);
    } else {
        FUZZ_CHECK(strlen(h->request_id) == 32);
        FUZZ_CHECK(strspn(h->request_id, "0123456789abcdef") == 32);
    }
    if (!len || !len[0])
        FUZZ_CHECK(!h->has_length && h->content_length == 0);
    else if (plain_u64(len, &v))
        FUZZ_CHECK(h->has_length && h->content_length == v);
    else
        FUZZ_CHECK(h->has_length && h->bad_length);
}

static void close_stream(FCGX_Stream *s)
{
    s->isClosed = 1;
}

static void check_read_body(struct http_req *h, uint64_t max, const uint8_t *body, size_t blen)
{
    FCGX_Stream in = {0};
    FCGX_Request fr = {0};
    struct buf out;
    int r;

    in.rdNext = (unsigned char *)body;
    in.stopUnget = (unsigned char *)body;
    in.stop = (unsigned char *)body + blen;
    in.wrNext = in.stop;
    in.isReader = 1;
    in.fillBuffProc = close_stream;
    fr.in = &in;
    h->fr = &fr;
    buf_init(&out, blen + 1);
    r = http_read_body(h, max, &out);
    if (!h->has_length || h->content_length == 0) {
        FUZZ_CHECK(r == 0 && out.len == 0);
    } else if (h->bad_length) {
        FUZZ_CHECK(r == -EINVAL && out.len == 0);
    } else if (h->content_length > max) {
        FUZZ_CHECK(r == -EFBIG && out.len == 0);
    } else if (h->content_length <= blen) {
        FUZZ_CHECK(r == 0 && out.len == h->content_length);
        FUZZ_CHECK(out.len == 0 || memcmp(out.data, body, out.len) == 0);
        FUZZ_CHECK(in.rdNext == body + out.len);
    } else {
        FUZZ_CHECK(r == -EBADMSG && out.len <= blen);
    }
    buf_release(&out);
    h->fr = NULL;
}

/* "NAME=value" for an FCGX parameter array, or NULL when value is NULL. */
static char *param(const char *name, const char *value)
{
    char *s;

    if (!value)
        return NULL;
    if (asprintf(&s, "%s=%s", name, value) < 0)
        return NULL;
    return s;
}

/* http_req_init reads the same five parameters http_parse_params takes. */
static void check_req_init(const struct http_req *want, const char *f[NFIELDS])
{
    static const char *const names[] = {"REQUEST_METHOD", "DOCUMENT_URI", "REQUEST_URI",
                                        "CONTENT_LENGTH", "HTTP_X_REQUEST_ID"};
    char *env[8] = {NULL}, *vars[5];
    FCGX_Request fr = {0};
    struct http_req h;
    size_t n = 0;

    for (size_t i = 0; i < 5; i++) {
        vars[i] = param(names[i], f[i]);
        FUZZ_CHECK(vars[i] || !f[i]);
        if (vars[i])
            env[n++] = vars[i];
    }
    fr.envp = env;
    http_req_init(&h, &fr);
    FUZZ_CHECK(h.fr == &fr);
    FUZZ_CHECK(strcmp(h.method, want->method) == 0 && strcmp(h.path, want->path) == 0);
    FUZZ_CHECK(h.has_length == want->has_length && h.content_length == want->content_length &&
               h.bad_length == want->bad_length);
    if (f[F_REQUEST_ID] && f[F_REQUEST_ID][0] && strlen(f[F_REQUEST_ID]) < sizeof(h.request_id) &&
        token_chars(f[F_REQUEST_ID]))
        FUZZ_CHECK(strcmp(h.request_id, want->request_id) == 0);
    for (size_t i = 0; i < 5; i++)
        free(vars[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *f[NFIELDS] = {NULL};
    char *copy, *bearer = NULL;
    const uint8_t *body;
    struct http_req h;
    size_t off = 2, blen;
    uint8_t present, mode;

    if (size < 2)
        return 0;
    present = data[0];
    mode = data[1];
    copy = malloc(size + 1);
    FUZZ_CHECK(copy != NULL);
    memcpy(copy, data, size);
    copy[size] = '\0';
    for (size_t i = 0; i < NFIELDS; i++) {
        const char *s = ""; /* a field past the end of the input is empty */

        if (off <= size) {
            s = copy + off;
            off += strlen(s) + 1;
        }
        if ((present >> i) & 1)
            f[i] = s;
    }
    if (off > size)
        off = size;
    body = data + off;
    blen = size - off;

    if ((mode & 1) && f[F_EXPECTED])
        f[F_HEADER] = f[F_EXPECTED];
    if ((mode & 2) && f[F_EXPECTED]) {
        FUZZ_CHECK(asprintf(&bearer, "Bearer %s%s", f[F_EXPECTED],
                            f[F_AUTHORIZATION] ? f[F_AUTHORIZATION] : "") >= 0);
        f[F_AUTHORIZATION] = bearer;
    }
    check_auth(f[F_EXPECTED], f[F_HEADER], f[F_AUTHORIZATION]);
    check_auth(f[F_EXPECTED], NULL, f[F_AUTHORIZATION]);

    http_parse_params(&h, f[F_METHOD], f[F_DOCUMENT_URI], f[F_REQUEST_URI], f[F_CONTENT_LENGTH],
                      f[F_REQUEST_ID]);
    check_params(&h, f);
    check_req_init(&h, f);
    check_read_body(&h, body_caps[(mode >> 2) & 7], body, blen);

    free(bearer);
    free(copy);
    return 0;
}
