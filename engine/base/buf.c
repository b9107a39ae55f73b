#include "base/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(struct buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

void buf_release(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static int buf_reserve(struct buf *b, size_t extra)
{
    size_t need, cap;
    char *d;

    if (extra > b->max || b->len > b->max - extra)
        return -E2BIG;
    need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    if (cap > b->max + 1)
        cap = b->max + 1;
    d = realloc(b->data, cap);
    if (!d)
        return -ENOMEM;
    b->data = d;
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *data, size_t len)
{
    int r = buf_reserve(b, len);

    if (r < 0)
        return r;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int buf_append_str(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_append_char(struct buf *b, char c)
{
    return buf_append(b, &c, 1);
}

int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list aq;
    int n, r;

    va_copy(aq, ap);
    n = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    if (n < 0)
        return -EINVAL;
    r = buf_reserve(b, (size_t)n);
    if (r < 0)
        return r;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    int r;

    va_start(ap, fmt);
    r = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return r;
}

void buf_consume(struct buf *b, size_t n)
{
    if (n >= b->len) {
        buf_reset(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

int buf_steal(struct buf *b, char **ret)
{
    if (!b->data) {
        int r = buf_reserve(b, 0);
        if (r < 0)
            return r;
        b->data[0] = '\0';
    }
    *ret = b->data;
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return 0;
}

const char *buf_str(const struct buf *b)
{
    return b->data ? b->data : "";
}
