/*
 * gateway_http — request heads and chunked bodies (gateway_http.h).
 */
#include "gateway/gateway_http.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"

#define LINE_MAX_CHUNK 4096 /* a chunk-size line (with extensions) or a trailer line */

enum {
    CH_SIZE = 0,
    CH_EXT,
    CH_SIZE_LF,
    CH_DATA,
    CH_DATA_CR,
    CH_DATA_LF,
    CH_TRAILER,
    CH_TRAILER_LF
};

ssize_t gateway_http_head_end(const char *data, size_t len)
{
    size_t n = len < GATEWAY_HTTP_HEAD_MAX ? len : GATEWAY_HTTP_HEAD_MAX;

    for (size_t i = 0; i + 1 < n; i++) {
        if (data[i] != '\n')
            continue;
        if (data[i + 1] == '\n')
            return (ssize_t)(i + 2);
        if (i + 2 < n && data[i + 1] == '\r' && data[i + 2] == '\n')
            return (ssize_t)(i + 3);
    }
    return len >= GATEWAY_HTTP_HEAD_MAX ? -E2BIG : 0;
}

static bool tchar(unsigned char c)
{
    return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The next line of [p, end): its length without CRLF / LF; *ret_next after it. -1: bare CR. */
static ssize_t next_line(const char *p, const char *end, const char **ret_next)
{
    const char *lf = memchr(p, '\n', (size_t)(end - p));
    size_t n;

    if (!lf)
        return -1;
    n = (size_t)(lf - p);
    if (n > 0 && p[n - 1] == '\r')
        n--;
    if (memchr(p, '\r', n))
        return -1;
    *ret_next = lf + 1;
    return (ssize_t)n;
}

static int request_line(const char *p, size_t n, struct gateway_http_request *r, char *err,
                        size_t errlen)
{
    const char *sp1 = memchr(p, ' ', n), *sp2;
    size_t mlen;

    if (!sp1)
        return util_fail(-EBADMSG, err, errlen, "malformed request line");
    mlen = (size_t)(sp1 - p);
    if (mlen == 0 || mlen > GATEWAY_HTTP_METHOD_MAX)
        return util_fail(-EBADMSG, err, errlen, "malformed method");
    for (size_t i = 0; i < mlen; i++)
        if (!tchar((unsigned char)p[i]))
            return util_fail(-EBADMSG, err, errlen, "malformed method");
    memcpy(r->method, p, mlen);
    r->method[mlen] = '\0';
    sp2 = memchr(sp1 + 1, ' ', n - mlen - 1);
    if (!sp2 || sp2 == sp1 + 1)
        return util_fail(-EBADMSG, err, errlen, "malformed request line");
    r->target = sp1 + 1;
    r->target_len = (size_t)(sp2 - sp1 - 1);
    for (size_t i = 0; i < r->target_len; i++) {
        unsigned char c = (unsigned char)r->target[i];
        if (c <= 0x20 || c >= 0x7f)
            return util_fail(-EBADMSG, err, errlen, "malformed request target");
    }
    if ((size_t)(p + n - sp2 - 1) != 8 || memcmp(sp2 + 1, "HTTP/1.", 7) != 0 ||
        (sp2[8] != '0' && sp2[8] != '1'))
        return util_fail(-EBADMSG, err, errlen, "unsupported HTTP version");
    r->minor = sp2[8] - '0';
    return 0;
}

static int field_line(const char *p, size_t n, struct gateway_http_request *r, char *err,
                      size_t errlen)
{
    const char *colon = memchr(p, ':', n), *v, *end = p + n;
    struct gateway_http_field *f;

    if (p[0] == ' ' || p[0] == '\t')
        return util_fail(-EBADMSG, err, errlen, "obsolete line folding");
    if (!colon || colon == p)
        return util_fail(-EBADMSG, err, errlen, "malformed header field");
    for (const char *c = p; c < colon; c++)
        if (!tchar((unsigned char)*c))
            return util_fail(-EBADMSG, err, errlen, "malformed header field name");
    for (const char *c = colon + 1; c < end; c++)
        if ((unsigned char)*c < 0x20 && *c != '\t')
            return util_fail(-EBADMSG, err, errlen, "control byte in a header field value");
    if (r->nfields >= GATEWAY_HTTP_FIELDS_MAX)
        return util_fail(-E2BIG, err, errlen, "too many header fields");
    v = colon + 1;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    f = &r->fields[r->nfields++];
    f->name = p;
    f->name_len = (size_t)(colon - p);
    f->value = v;
    f->value_len = (size_t)(end - v);
    return 0;
}

static bool name_is(const struct gateway_http_field *f, const char *name)
{
    return f->name_len == strlen(name) && strncasecmp(f->name, name, f->name_len) == 0;
}

/* Content-Length, Transfer-Encoding, Connection, Expect: the framing of the request. */
static int framing(struct gateway_http_request *r, char *err, size_t errlen)
{
    bool close_ = false, keep = false;

    for (size_t i = 0; i < r->nfields; i++) {
        const struct gateway_http_field *f = &r->fields[i];

        if (name_is(f, "content-length")) {
            uint64_t v = 0;
            if (r->has_length || f->value_len == 0 || f->value_len > 15)
                return util_fail(-EBADMSG, err, errlen, "malformed or repeated Content-Length");
            for (size_t k = 0; k < f->value_len; k++) {
                if (!isdigit((unsigned char)f->value[k]))
                    return util_fail(-EBADMSG, err, errlen, "malformed Content-Length");
                v = v * 10 + (uint64_t)(f->value[k] - '0');
            }
            r->has_length = true;
            r->length = v;
        } else if (name_is(f, "transfer-encoding")) {
            if (r->chunked || !gateway_http_value_is(f, "chunked"))
                return util_fail(-ENOSYS, err, errlen, "unsupported Transfer-Encoding");
            r->chunked = true;
        } else if (name_is(f, "connection")) {
            close_ |= gateway_http_value_has(f, "close");
            keep |= gateway_http_value_has(f, "keep-alive");
        } else if (name_is(f, "expect")) {
            r->expect_100 = gateway_http_value_is(f, "100-continue");
        }
    }
    if (r->chunked && r->has_length)
        return util_fail(-EBADMSG, err, errlen, "both Content-Length and Transfer-Encoding");
    if (r->chunked && r->minor == 0)
        return util_fail(-EBADMSG, err, errlen, "chunked body in HTTP/1.0");
    r->keep_alive = r->minor == 1 ? !close_ : keep && !close_;
    return 0;
}

int gateway_http_parse(const char *head, size_t len, struct gateway_http_request *ret, char *err,
                       size_t errlen)
{
    const char *p = head, *end = head + len, *next = NULL;
    ssize_t n;
    int r;

    memset(ret, 0, sizeof(*ret));
    if (memchr(head, '\0', len))
        return util_fail(-EBADMSG, err, errlen, "NUL byte in the request head");
    n = next_line(p, end, &next);
    if (n <= 0)
        return util_fail(-EBADMSG, err, errlen, "malformed request line");
    r = request_line(p, (size_t)n, ret, err, errlen);
    if (r < 0)
        return r;
    for (p = next;;) {
        n = next_line(p, end, &next);
        if (n < 0)
            return util_fail(-EBADMSG, err, errlen, "malformed header line");
        if (n == 0)
            break;
        r = field_line(p, (size_t)n, ret, err, errlen);
        if (r < 0)
            return r;
        p = next;
    }
    return framing(ret, err, errlen);
}

const struct gateway_http_field *gateway_http_field(const struct gateway_http_request *r,
                                                    const char *name)
{
    for (size_t i = 0; i < r->nfields; i++)
        if (name_is(&r->fields[i], name))
            return &r->fields[i];
    return NULL;
}

bool gateway_http_value_is(const struct gateway_http_field *f, const char *text)
{
    return f && f->value_len == strlen(text) && strncasecmp(f->value, text, f->value_len) == 0;
}

bool gateway_http_value_has(const struct gateway_http_field *f, const char *tok)
{
    size_t tl = strlen(tok), i = 0;

    while (f && i < f->value_len) {
        size_t s, e;

        while (i < f->value_len &&
               (f->value[i] == ' ' || f->value[i] == '\t' || f->value[i] == ','))
            i++;
        s = i;
        while (i < f->value_len && f->value[i] != ',')
            i++;
        e = i;
        while (e > s && (f->value[e - 1] == ' ' || f->value[e - 1] == '\t'))
            e--;
        if (e - s == tl && strncasecmp(f->value + s, tok, tl) == 0)
            return true;
    }
    return false;
}

/* ---- chunked bodies ----------------------------------------------------------------------- */

void gateway_chunked_init(struct gateway_chunked *c)
{
    memset(c, 0, sizeof(*c));
}

/* One byte of a size line, an extension, or a trailer line. -EBADMSG when malformed. */
static int framing_byte(struct gateway_chunked *c, char ch)
{
    int d;

    if (++c->line > LINE_MAX_CHUNK)
        return -EBADMSG;
    switch (c->state) {
    case CH_SIZE:
        d = util_hex_digit(ch);
        if (d >= 0) {
            if (c->left > (UINT64_MAX >> 4) >> 8) /* 2^52 bytes: nobody sends that */
                return -EBADMSG;
            c->left = c->left * 16 + (uint64_t)d;
            c->digits = true;
            return 0;
        }
        if (!c->digits)
            return -EBADMSG;
        if (ch == ';' || ch == ' ' || ch == '\t') {
            c->state = CH_EXT;
            return 0;
        }
        if (ch != '\r' && ch != '\n')
            return -EBADMSG;
        /* the end of the size line */
        /* fall through */
    case CH_EXT:
        if (ch == '\r') {
            c->state = CH_SIZE_LF;
            return 0;
        }
        if (ch == '\n')
            goto size_done;
        return (unsigned char)ch < 0x20 && ch != '\t' ? -EBADMSG : 0;
    case CH_SIZE_LF:
        if (ch != '\n')
            return -EBADMSG;
    size_done:
        c->line = 0;
        c->state = c->left ? CH_DATA : CH_TRAILER;
        c->digits = false;
        return 0;
    case CH_DATA_CR:
        if (ch == '\n') {
            c->state = CH_SIZE;
            c->line = 0;
            return 0;
        }
        if (ch != '\r')
            return -EBADMSG;
        c->state = CH_DATA_LF;
        return 0;
    case CH_DATA_LF:
        if (ch != '\n')
            return -EBADMSG;
        c->state = CH_SIZE;
        c->line = 0;
        return 0;
    case CH_TRAILER:
        if (ch == '\r' && c->line == 1) {
            c->state = CH_TRAILER_LF;
            return 0;
        }
        if (ch == '\n') {
            if (c->line == 1)
                c->done = true;
            c->line = 0;
            return 0;
        }
        return 0; /* a trailer field: skipped */
    case CH_TRAILER_LF:
        if (ch != '\n')
            return -EBADMSG;
        c->done = true;
        return 0;
    default:
        return -EBADMSG;
    }
}

ssize_t gateway_chunked_decode(struct gateway_chunked *c, const char *in, size_t len, char *out,
                               size_t out_room, size_t *ret_out)
{
    size_t i = 0, o = 0;

    while (i < len && !c->done) {
        if (c->state == CH_DATA) {
            size_t take = len - i;
            if (take > c->left)
                take = (size_t)c->left;
            if (take > out_room - o)
                take = out_room - o;
            if (take == 0)
                break; /* no room left: the caller's cap */
            memcpy(out + o, in + i, take);
            o += take;
            i += take;
            c->left -= take;
            if (c->left == 0) {
                c->state = CH_DATA_CR;
                c->line = 0;
            }
            continue;
        }
        if (framing_byte(c, in[i]) < 0) {
            *ret_out = o;
            return -EBADMSG;
        }
        i++;
    }
    *ret_out = o;
    return (ssize_t)i;
}
