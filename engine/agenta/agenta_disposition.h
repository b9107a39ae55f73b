/*
 * agenta_disposition — the file name of an attachment Agenta's API serves: the
 * Content-Disposition header of GET /sessions/attachments/{id}/content, untrusted input (its
 * fuzz target is tests/fuzz/fuzz_agenta.c). RFC 6266 parameters: filename*=charset'lang'pct
 * (RFC 5987 ext-value, UTF-8 or ISO-8859-1) first, then filename="quoted", then filename=plain.
 * Whatever it finds is cut to a name safe to create in a directory.
 */
#ifndef AR_AGENTA_DISPOSITION_H
#define AR_AGENTA_DISPOSITION_H

#include <stddef.h>

/* A file name safe to create: the base name, control characters dropped, not "." or "..".
 * -EINVAL when nothing is left, -E2BIG when it does not fit. */
int agenta_sanitize_filename(const char *in, char *out, size_t outlen);
/* The file name of a Content-Disposition value: filename*=charset''pct (UTF-8, ISO-8859-1)
 * first, then filename="quoted", then filename=plain; sanitized. -ENOENT when there is none. */
int agenta_disposition_filename(const char *disposition, char *out, size_t outlen);

#endif
