/*
 * buf — a growable byte buffer with a hard maximum set at creation (curl's dynbuf).
 *
 * The contents are always NUL-terminated (the terminator is not counted in len and does not
 * count against max). Appending past max fails with -E2BIG and leaves the buffer unchanged:
 * nothing is ever truncated silently. buf_release() frees the storage; a released or
 * zero-initialised buffer must be buf_init()ed again before use.
 */
#ifndef AR_BUF_H
#define AR_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct buf {
    char *data;
    size_t len;
    size_t cap;
    size_t max;
};

void buf_init(struct buf *b, size_t max);
void buf_release(struct buf *b);
/* Drop the contents, keep the storage. */
void buf_reset(struct buf *b);
int buf_append(struct buf *b, const void *data, size_t len);
int buf_append_str(struct buf *b, const char *s);
int buf_append_char(struct buf *b, char c);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vprintf(struct buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Remove the first n bytes (n <= len). */
void buf_consume(struct buf *b, size_t n);
/* Hand the storage to the caller (NUL-terminated, never NULL on success); the buffer is reset. */
int buf_steal(struct buf *b, char **ret);
/* Never NULL: "" for an empty buffer. */
const char *buf_str(const struct buf *b);

#endif
