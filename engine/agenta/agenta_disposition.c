#include "agenta/agenta_disposition.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/util.h"

int agenta_sanitize_filename(const char *in, char *out, size_t outlen)
{
    size_t end = strlen(in), start, n = 0;

    /* the base name, with '\' read as '/' and trailing separators ignored */
    while (end > 0 && (in[end - 1] == '/' || in[end - 1] == '\\'))
        end--;
    start = end;
    while (start > 0 && in[start - 1] != '/' && in[start - 1] != '\\')
        start--;
    for (size_t i = start; i < end; i++) {
        unsigned char ch = (unsigned char)in[i];

        if (ch < 0x20 || ch == 0x7f)
            continue;
        if (n + 1 >= outlen)
            return -E2BIG;
        out[n++] = (char)ch;
    }
    if (outlen == 0)
        return -E2BIG;
    out[n] = '\0';
    if (n == 0 || strcmp(out, ".") == 0 || strcmp(out, "..") == 0)
        return -EINVAL;
    return 0;
}

static bool utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;

    while (i < n) {
        unsigned char c = s[i];
        size_t k;
        uint32_t cp;

        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xe0) == 0xc0) {
            k = 1;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (i + k >= n)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k + 1;
    }
    return true;
}

/* RFC 5987 ext-value: charset'lang'pct-encoded, UTF-8 or ISO-8859-1. */
static int decode_5987(const char *v, size_t len, struct buf *out)
{
    const char *q1 = memchr(v, '\'', len), *q2, *p, *end = v + len;
    bool latin1;
    size_t cs;

    if (!q1)
        return -EINVAL;
    q2 = memchr(q1 + 1, '\'', (size_t)(end - q1 - 1));
    if (!q2)
        return -EINVAL;
    cs = (size_t)(q1 - v);
    if ((cs == 5 && strncasecmp(v, "utf-8", 5) == 0) || (cs == 4 && strncasecmp(v, "utf8", 4) == 0))
        latin1 = false;
    else if ((cs == 10 && strncasecmp(v, "iso-8859-1", 10) == 0) ||
             (cs == 6 && strncasecmp(v, "latin1", 6) == 0))
        latin1 = true;
    else
        return -EINVAL;
    for (p = q2 + 1; p < end; p++) {
        unsigned ch = (unsigned char)*p;
        int r;

        if (ch == '%') {
            if (end - p < 3 || util_hex_digit(p[1]) < 0 || util_hex_digit(p[2]) < 0) {
                if (!latin1)
                    return -EINVAL; /* decodeURIComponent refuses a stray '%' */
                r = buf_append_char(out, '%');
            } else {
                ch = (unsigned)(util_hex_digit(p[1]) * 16 + util_hex_digit(p[2]));
                p += 2;
                if (latin1 && ch >= 0x80)
                    r = buf_printf(out, "%c%c", (char)(0xc0 | (ch >> 6)),
                                   (char)(0x80 | (ch & 0x3f)));
                else
                    r = buf_append_char(out, (char)ch);
            }
        } else {
            r = buf_append_char(out, (char)ch);
        }
        if (r < 0)
            return r;
    }
    if (!latin1 && !utf8_valid((const unsigned char *)out->data, out->len))
        return -EINVAL;
    return 0;
}

/*
 * Find the value of parameter `name` (case-insensitive) at the start of the value or after a
 * ';': returns a pointer to what follows '=' (leading blanks skipped) or NULL.
 */
static const char *find_param(const char *s, const char *name)
{
    size_t nl = strlen(name);
    const char *p = s;

    for (;;) {
        const char *q = p;

        while (isspace((unsigned char)*q))
            q++;
        if (strncasecmp(q, name, nl) == 0) {
            q += nl;
            while (isspace((unsigned char)*q))
                q++;
            if (*q == '=') {
                q++;
                while (isspace((unsigned char)*q))
                    q++;
                return q;
            }
        }
        p = strchr(p, ';');
        if (!p)
            return NULL;
        p++;
    }
}

int agenta_disposition_filename(const char *disposition, char *out, size_t outlen)
{
    const char *v;
    struct buf tmp;
    int r;

    if (!disposition)
        return -ENOENT;
    buf_init(&tmp, 4096);
    v = find_param(disposition, "filename*");
    if (v) {
        size_t n = strcspn(v, ";");

        while (n > 0 && isspace((unsigned char)v[n - 1]))
            n--;
        if (decode_5987(v, n, &tmp) == 0 && tmp.len > 0 &&
            agenta_sanitize_filename(buf_str(&tmp), out, outlen) == 0) {
            buf_release(&tmp);
            return 0;
        }
        buf_reset(&tmp);
    }
    v = find_param(disposition, "filename");
    r = -ENOENT;
    if (v && *v == '"') {
        const char *p = v + 1;

        while (*p && *p != '"') {
            if (*p == '\\' && p[1])
                p++;
            if (buf_append_char(&tmp, *p) < 0)
                break;
            p++;
        }
        if (*p == '"')
            r = agenta_sanitize_filename(buf_str(&tmp), out, outlen);
        else
            v = NULL; /* an unterminated quote: try it as a plain value */
    }
    if (r == -ENOENT && v) {
        size_t n = strcspn(v, ";");

        while (n > 0 && isspace((unsigned char)v[n - 1]))
            n--;
        buf_reset(&tmp);
        if (n > 0 && buf_append(&tmp, v, n) == 0)
            r = agenta_sanitize_filename(buf_str(&tmp), out, outlen);
    }
    buf_release(&tmp);
    return r == 0 ? 0 : r == -E2BIG ? -E2BIG : -ENOENT;
}
