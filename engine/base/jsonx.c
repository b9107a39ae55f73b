#include "base/jsonx.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/*
 * One tokener per thread and depth, reset between documents: a turn parses every line the
 * harness sends, and a fresh tokener for each was a measurable share of a warm turn.
 */
static _Thread_local struct {
    int depth;
    struct json_tokener *tok;
} cache[8];

#define ARRAY_LEN (sizeof(cache) / sizeof(cache[0]))

/* A thread that ends frees its tokeners (the Daytona bridge starts and ends threads). */
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t cache_key;

static void free_cache(void *unused)
{
    (void)unused;
    for (size_t i = 0; i < ARRAY_LEN; i++) {
        if (cache[i].tok)
            json_tokener_free(cache[i].tok);
        cache[i].tok = NULL;
    }
}

static void make_key(void)
{
    (void)pthread_key_create(&cache_key, free_cache);
}

/* A strict tokener that validates UTF-8, or NULL. */
static struct json_tokener *new_tokener(int depth)
{
    struct json_tokener *tok = json_tokener_new_ex(depth);

    if (tok)
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    return tok;
}

static struct json_tokener *tokener_for(int depth)
{
    for (size_t i = 0; i < ARRAY_LEN; i++) {
        if (cache[i].tok && cache[i].depth == depth) {
            json_tokener_reset(cache[i].tok);
            return cache[i].tok;
        }
    }
    for (size_t i = 0; i < ARRAY_LEN; i++) {
        if (!cache[i].tok) {
            cache[i].tok = new_tokener(depth);
            if (!cache[i].tok)
                return NULL;
            if (pthread_once(&key_once, make_key) == 0)
                (void)pthread_setspecific(cache_key, cache);
            cache[i].depth = depth;
            return cache[i].tok;
        }
    }
    return NULL;
}

/* jsonx_parse's work on a ready tokener (strict, UTF-8 validated, reset). */
static int parse_with(struct json_tokener *tok, const char *data, size_t len, json_object **ret,
                      char *err, size_t errlen)
{
    enum json_tokener_error jerr;
    json_object *o;
    size_t used;

    o = json_tokener_parse_ex(tok, data, (int)len);
    jerr = json_tokener_get_error(tok);
    used = json_tokener_get_parse_end(tok);
    if (jerr == json_tokener_continue) {
        /*
         * The input ended inside a value. A number or literal that ends the data ("42",
         * "null") is complete only once the tokener sees the end, so finish with a NUL;
         * anything else (and an empty document) is truncated.
         */
        o = json_tokener_parse_ex(tok, "", 1);
        if (json_tokener_get_error(tok) != json_tokener_success) {
            json_object_put(o);
            snprintf(err, errlen, "unexpected end of input");
            return -EBADMSG;
        }
        jerr = json_tokener_success;
        used = len;
    }
    if (jerr != json_tokener_success) {
        snprintf(err, errlen, "%s at offset %zu", json_tokener_error_desc(jerr), used);
        return -EBADMSG;
    }
    for (size_t i = used; i < len; i++) {
        if (data[i] != ' ' && data[i] != '\n' && data[i] != '\r' && data[i] != '\t') {
            snprintf(err, errlen, "unexpected data after the JSON value at offset %zu", i);
            json_object_put(o);
            return -EBADMSG;
        }
    }
    *ret = o;
    return 0;
}

/* A tokener of its own for one document (once), or the thread's cached one for depth. */
static int parse(const char *data, size_t len, int depth, bool once, json_object **ret, char *err,
                 size_t errlen)
{
    struct json_tokener *tok;
    int r;

    if (len > (size_t)0x7fffffff) {
        snprintf(err, errlen, "document too large");
        return -EBADMSG;
    }
    tok = once ? new_tokener(depth) : tokener_for(depth);
    if (!tok)
        return -ENOMEM;
    r = parse_with(tok, data, len, ret, err, errlen);
    if (once)
        json_tokener_free(tok);
    return r;
}

int jsonx_parse(const char *data, size_t len, int depth, json_object **ret, char *err,
                size_t errlen)
{
    return parse(data, len, depth, false, ret, err, errlen);
}

int jsonx_parse_once(const char *data, size_t len, int depth, json_object **ret, char *err,
                     size_t errlen)
{
    return parse(data, len, depth, true, ret, err, errlen);
}

json_object *jsonx_get(json_object *o, const char *key)
{
    json_object *v;

    if (!o || !json_object_is_type(o, json_type_object))
        return NULL;
    if (!json_object_object_get_ex(o, key, &v))
        return NULL;
    return v; /* json-c represents null as NULL */
}

const char *jsonx_str(json_object *o, const char *key)
{
    json_object *v = jsonx_get(o, key);

    if (!v || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

const char *jsonx_type_word(json_object *v)
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

json_object *jsonx_path(json_object *o, const char *path)
{
    char part[128];
    const char *p = path;

    while (o && *p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);

        if (n >= sizeof(part))
            return NULL;
        memcpy(part, p, n);
        part[n] = '\0';
        o = jsonx_get(o, part);
        p += n;
        if (*p == '.')
            p++;
    }
    return o;
}

const char *jsonx_text(json_object *o, size_t *ret_len)
{
    const char *s;
    size_t n;

    if (!o) {
        if (ret_len)
            *ret_len = 4;
        return "null";
    }
    s = json_object_to_json_string_length(
        o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &n);
    if (ret_len)
        *ret_len = n;
    return s;
}

int jsonx_check_budget(const char *data, size_t len, size_t max_elements, int max_depth, char *err,
                       size_t errlen)
{
    size_t elements = 0;
    bool in_string = false, in_token = false;
    int depth = 0;

    for (size_t i = 0; i < len; i++) {
        char c = data[i];

        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
            continue;
        }
        switch (c) {
        case ' ':
        case '\n':
        case '\r':
        case '\t':
            continue;
        case '{':
        case '[':
            if (++depth > max_depth) {
                snprintf(err, errlen, "nested deeper than %d levels", max_depth);
                return -ELOOP;
            }
            elements++;
            in_token = false;
            break;
        case '}':
        case ']':
            depth--;
            in_token = true;
            continue;
        case ',':
        case ':':
            in_token = false;
            continue;
        default: /* a string (a member name counts too: it costs as much), number, literal */
            in_string = c == '"';
            if (in_token)
                continue;
            in_token = true;
            elements++;
            break;
        }
        if (elements > max_elements) {
            snprintf(err, errlen, "more than %zu JSON elements", max_elements);
            return -E2BIG;
        }
    }
    return 0;
}

json_object *jsonx_copy(json_object *o)
{
    json_object *c = NULL;

    if (!o)
        return NULL;
    if (json_object_deep_copy(o, &c, NULL) != 0)
        return NULL;
    return c;
}

int jsonx_append_string(struct buf *out, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    int r = buf_append_char(out, '"');

    for (const unsigned char *p = (const unsigned char *)s; r == 0 && *p; p++) {
        const unsigned char *run = p;

        while (*p && *p >= 0x20 && *p != '"' && *p != '\\')
            p++;
        if (p > run)
            r = buf_append(out, (const char *)run, (size_t)(p - run));
        if (r < 0 || !*p)
            break;
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};

            r = buf_append(out, e, 2);
        } else {
            char e[6] = {'\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15]};

            r = buf_append(out, e, 6);
        }
    }
    if (r == 0)
        r = buf_append_char(out, '"');
    return r;
}
