#include "agenta/redact.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "base/jsonx.h"

#define PLACEHOLDER_MAX 64

struct form {
    char *s;
    size_t len;
    bool bounded;                  /* match only between non-word characters */
    char placeholder[PLACEHOLDER_MAX];
    size_t placeholder_len;
};

struct redact {
    pthread_mutex_t lock;
    struct form forms[REDACT_VALUES_MAX]; /* longest first */
    size_t nforms;
};

/* Values that would poison every text if a secret-named variable held them. */
static const char *const allowlist[] = {"true", "false", "none",    "null",     "nil", "yes",
                                        "no",   "on",    "off",     "enabled",  "disabled",
                                        "0",    "1",     "-1"};

struct redact *redact_new(void)
{
    struct redact *rd = calloc(1, sizeof(*rd));

    if (rd && pthread_mutex_init(&rd->lock, NULL) != 0) {
        free(rd);
        return NULL;
    }
    return rd;
}

void redact_free(struct redact *rd)
{
    if (!rd)
        return;
    for (size_t i = 0; i < rd->nforms; i++)
        free(rd->forms[i].s);
    pthread_mutex_destroy(&rd->lock);
    free(rd);
}

static bool allowlisted(const char *v)
{
    size_t n = strlen(v), start = 0;

    while (start < n && isspace((unsigned char)v[start]))
        start++;
    while (n > start && isspace((unsigned char)v[n - 1]))
        n--;
    if (n == start)
        return true;
    for (size_t i = 0; i < sizeof(allowlist) / sizeof(allowlist[0]); i++)
        if (strlen(allowlist[i]) == n - start && strncasecmp(allowlist[i], v + start, n - start) == 0)
            return true;
    return false;
}

/* "[ag:redacted:secret:<last four characters>]", never cutting a UTF-8 sequence. */
static void make_placeholder(struct form *f)
{
    size_t start = f->len;
    int chars = 0;

    while (start > 0 && chars < 4) {
        start--;
        if (((unsigned char)f->s[start] & 0xc0) != 0x80)
            chars++;
    }
    memcpy(f->placeholder, "[ag:redacted:secret:", 20);
    memcpy(f->placeholder + 20, f->s + start, f->len - start);
    f->placeholder[20 + f->len - start] = ']';
    f->placeholder_len = 21 + f->len - start;
    f->placeholder[f->placeholder_len] = '\0';
}

/* Insert one form, keeping the array sorted longest first; a duplicate is a no-op. */
static int add_form_locked(struct redact *rd, const char *s, size_t len, bool bounded)
{
    struct form f;
    size_t at;

    if (len < REDACT_MIN_LEN)
        return 0;
    for (size_t i = 0; i < rd->nforms; i++) {
        if (rd->forms[i].len == len && memcmp(rd->forms[i].s, s, len) == 0) {
            /* an unbounded registration wins over a bounded one */
            if (!bounded)
                rd->forms[i].bounded = false;
            return 0;
        }
    }
    if (rd->nforms >= REDACT_VALUES_MAX || len > REDACT_VALUE_MAX * 2)
        return -E2BIG;
    f.s = malloc(len + 1);
    if (!f.s)
        return -ENOMEM;
    memcpy(f.s, s, len);
    f.s[len] = '\0';
    f.len = len;
    f.bounded = bounded;
    make_placeholder(&f);
    for (at = 0; at < rd->nforms && rd->forms[at].len >= len; at++)
        ;
    memmove(&rd->forms[at + 1], &rd->forms[at], (rd->nforms - at) * sizeof(rd->forms[0]));
    rd->forms[at] = f;
    rd->nforms++;
    return 0;
}

/* encodeURIComponent: everything but A-Z a-z 0-9 - _ . ! ~ * ' ( ) as %XX. */
static int url_encode(const char *v, struct buf *out)
{
    static const char hex[] = "0123456789ABCDEF";
    int r = 0;

    for (const unsigned char *p = (const unsigned char *)v; *p && r == 0; p++) {
        if (isalnum(*p) || strchr("-_.!~*'()", *p))
            r = buf_append_char(out, (char)*p);
        else
            r = buf_printf(out, "%%%c%c", hex[*p >> 4], hex[*p & 15]);
    }
    return r;
}

static int base64(const char *v, size_t n, struct buf *out)
{
    size_t need = 4 * ((n + 2) / 3);
    int r;

    if (n > INT32_MAX / 2)
        return -E2BIG;
    /* grow the buffer by need bytes, then let OpenSSL write them (and a NUL) in place */
    for (size_t i = 0; i < need; i++) {
        r = buf_append_char(out, '=');
        if (r < 0)
            return r;
    }
    if (need)
        EVP_EncodeBlock((unsigned char *)out->data + out->len - need, (const unsigned char *)v,
                        (int)n);
    return 0;
}

static bool is_word(unsigned char c)
{
    return isalnum(c) || c == '_';
}

/* The two halves of "scheme://user:pass@..." or of a bare "user:pass" (no spaces). */
static bool decompose(const char *v, const char **u, size_t *ulen, const char **p, size_t *plen)
{
    const char *s = v, *colon, *end;

    if (isalpha((unsigned char)*s)) {
        const char *q = s + 1;
        while (is_word((unsigned char)*q) || *q == '+' || *q == '.' || *q == '-')
            q++;
        if (strncmp(q, "://", 3) == 0) {
            const char *at;

            s = q + 3;
            colon = s + strcspn(s, ":/@ \t\r\n");
            if (*colon != ':' || colon == s)
                return false;
            at = colon + 1 + strcspn(colon + 1, "@/ \t\r\n");
            if (*at != '@' || at == colon + 1)
                return false;
            *u = s;
            *ulen = (size_t)(colon - s);
            *p = colon + 1;
            *plen = (size_t)(at - colon - 1);
            return true;
        }
    }
    colon = strchr(v, ':');
    if (!colon || colon == v || strchr(colon + 1, ':'))
        return false;
    end = colon + 1 + strlen(colon + 1);
    if (end == colon + 1 || strpbrk(v, " \t\r\n\f\v"))
        return false;
    *u = v;
    *ulen = (size_t)(colon - v);
    *p = colon + 1;
    *plen = (size_t)(end - colon - 1);
    return true;
}

int redact_add(struct redact *rd, const char *value)
{
    const char *u, *p, *sp;
    size_t ulen, plen, n;
    struct buf enc, b64;
    int r;

    if (!value || allowlisted(value))
        return 0;
    n = strlen(value);
    if (n < REDACT_MIN_LEN)
        return 0;
    if (n > REDACT_VALUE_MAX)
        return -E2BIG;
    buf_init(&enc, 3 * REDACT_VALUE_MAX + 1);
    buf_init(&b64, 2 * REDACT_VALUE_MAX + 8);
    r = url_encode(value, &enc);
    if (r == 0)
        r = base64(value, n, &b64);
    if (r < 0)
        goto out;
    pthread_mutex_lock(&rd->lock);
    r = add_form_locked(rd, value, n, false);
    if (r == 0)
        r = add_form_locked(rd, enc.data, enc.len, false);
    if (r == 0)
        r = add_form_locked(rd, b64.data, b64.len, false);
    if (r == 0 && decompose(value, &u, &ulen, &p, &plen)) {
        if (ulen >= REDACT_PART_MIN_LEN)
            r = add_form_locked(rd, u, ulen, true);
        if (r == 0 && plen >= REDACT_PART_MIN_LEN)
            r = add_form_locked(rd, p, plen, true);
    }
    /* "Bearer <token>", "ApiKey <token>": the token alone is as secret as the whole */
    sp = strchr(value, ' ');
    if (r == 0 && sp && sp != value && !strchr(sp + 1, ' ') && strlen(sp + 1) >= REDACT_PART_MIN_LEN)
        r = add_form_locked(rd, sp + 1, strlen(sp + 1), false);
    pthread_mutex_unlock(&rd->lock);
out:
    buf_release(&enc);
    buf_release(&b64);
    return r;
}

static bool credential_header(const char *name)
{
    static const char *const words[] = {"auth", "key", "token", "secret", "cookie", "password",
                                        "credential", "signature"};

    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strcasestr(name, words[i]))
            return true;
    return false;
}

static int add_headers(struct redact *rd, json_object *headers)
{
    int r = 0;

    if (!headers || !json_object_is_type(headers, json_type_object))
        return 0;
    json_object_object_foreach(headers, k, v)
    {
        if (r == 0 && credential_header(k) && json_object_is_type(v, json_type_string))
            r = redact_add(rd, json_object_get_string(v));
    }
    return r;
}

int redact_run_credential(const struct run_request *req, char *out, size_t outlen)
{
    json_object *headers = jsonx_path(req->telemetry, "exporters.otlp.headers");
    const char *v = NULL;
    size_t n;

    if (headers && json_object_is_type(headers, json_type_object)) {
        v = jsonx_str(headers, "authorization");
        if (!v)
            v = jsonx_str(headers, "Authorization");
    }
    if (!v)
        v = "";
    while (isspace((unsigned char)*v))
        v++;
    n = strlen(v);
    while (n > 0 && isspace((unsigned char)v[n - 1]))
        n--;
    if (n + 1 > outlen)
        return -E2BIG;
    memcpy(out, v, n);
    out[n] = '\0';
    return 0;
}

int redact_add_request(struct redact *rd, const struct run_request *req)
{
    int r = 0;

    for (size_t i = 0; r == 0 && i < req->mc.ncredentials; i++)
        r = redact_add(rd, req->mc.credentials[i].value);
    for (size_t i = 0; r == 0 && i < req->mc.nenvironment; i++)
        r = redact_add(rd, req->mc.environment[i].value);
    for (size_t i = 0; r == 0 && i < req->mc.nheaders; i++)
        if (req->mc.headers[i].name && credential_header(req->mc.headers[i].name))
            r = redact_add(rd, req->mc.headers[i].value);
    if (r == 0)
        r = redact_add(rd, req->tools.callback_authorization);
    if (r == 0 && req->telemetry)
        r = add_headers(rd, jsonx_path(req->telemetry, "exporters.otlp.headers"));
    if (r == 0) {
        /* the run credential as Agenta reads it: trimmed, either casing */
        char *cred = malloc(REDACT_VALUE_MAX + 1);

        if (!cred)
            return -ENOMEM;
        r = redact_run_credential(req, cred, REDACT_VALUE_MAX + 1);
        if (r == 0)
            r = redact_add(rd, cred);
        free(cred);
    }
    /* an MCP server's credentials, and its plain headers that look like one */
    for (size_t i = 0; r == 0 && i < req->tools.nservers; i++) {
        const struct mcp_server *sv = &req->tools.servers[i];

        for (size_t j = 0; r == 0 && j < sv->nheaders; j++)
            if (sv->headers[j].secret || credential_header(sv->headers[j].name))
                r = redact_add(rd, sv->headers[j].value);
    }
    return r;
}

/* Replace every occurrence of f in cur (into next). Returns the count or -E2BIG. */
static int replace_form(const struct form *f, const struct buf *cur, struct buf *next)
{
    const char *s = cur->data, *end = cur->data + cur->len, *p = s;
    int count = 0, r;

    while (p < end) {
        const char *hit = memmem(p, (size_t)(end - p), f->s, f->len);

        if (!hit)
            break;
        if (f->bounded && ((hit > s && is_word((unsigned char)hit[-1])) ||
                           (hit + f->len < end && is_word((unsigned char)hit[f->len])))) {
            r = buf_append(next, p, (size_t)(hit - p) + 1);
            if (r < 0)
                return r;
            p = hit + 1;
            continue;
        }
        r = buf_append(next, p, (size_t)(hit - p));
        if (r == 0)
            r = buf_append(next, f->placeholder, f->placeholder_len);
        if (r < 0)
            return r;
        p = hit + f->len;
        count++;
    }
    r = buf_append(next, p, (size_t)(end - p));
    return r < 0 ? r : count;
}

static int redact_locked(struct redact *rd, const char *s, size_t len, size_t max, struct buf *res)
{
    struct buf cur, next;
    int total = 0, r = 0;

    buf_init(&cur, max);
    r = buf_append(&cur, s, len);
    for (size_t i = 0; r == 0 && i < rd->nforms; i++) {
        if (cur.len < rd->forms[i].len ||
            !memmem(cur.data, cur.len, rd->forms[i].s, rd->forms[i].len))
            continue;
        buf_init(&next, max);
        r = replace_form(&rd->forms[i], &cur, &next);
        if (r < 0) {
            buf_release(&next);
            break;
        }
        total += r;
        buf_release(&cur);
        cur = next;
        r = 0;
    }
    if (r < 0) {
        buf_release(&cur);
        return r;
    }
    *res = cur;
    return total;
}

int redact_text(struct redact *rd, const char *s, size_t len, struct buf *out)
{
    struct buf res;
    int n, r;

    if (out->len > out->max)
        return -E2BIG;
    pthread_mutex_lock(&rd->lock);
    n = redact_locked(rd, s, len, out->max - out->len, &res);
    pthread_mutex_unlock(&rd->lock);
    if (n < 0)
        return n;
    r = buf_append(out, res.data ? res.data : "", res.len);
    buf_release(&res);
    return r < 0 ? r : n;
}

static int redact_walk_locked(struct redact *rd, json_object *o, int depth)
{
    int total = 0, r;

    if (!o || depth > JSONX_DEFAULT_DEPTH * 4)
        return depth > JSONX_DEFAULT_DEPTH * 4 ? -E2BIG : 0;
    switch (json_object_get_type(o)) {
    case json_type_string: {
        struct buf res;
        const char *s = json_object_get_string(o);
        size_t n = (size_t)json_object_get_string_len(o);

        r = redact_locked(rd, s, n, RUN_OUTPUT_MAX, &res);
        if (r < 0)
            return r;
        if (r > 0 && json_object_set_string_len(o, res.data, (int)res.len) == 0)
            r = -ENOMEM;
        buf_release(&res);
        return r;
    }
    case json_type_array:
        for (size_t i = 0; i < json_object_array_length(o); i++) {
            r = redact_walk_locked(rd, json_object_array_get_idx(o, i), depth + 1);
            if (r < 0)
                return r;
            total += r;
        }
        return total;
    case json_type_object: {
        json_object_object_foreach(o, k, v)
        {
            (void)k;
            r = redact_walk_locked(rd, v, depth + 1);
            if (r < 0)
                return r;
            total += r;
        }
        return total;
    }
    default:
        return 0;
    }
}

int redact_json(struct redact *rd, json_object *o)
{
    int r;

    pthread_mutex_lock(&rd->lock);
    r = redact_walk_locked(rd, o, 0);
    pthread_mutex_unlock(&rd->lock);
    return r;
}
