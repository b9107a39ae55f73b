/*
 * jsonx — thin helpers over json-c used by every parser of untrusted JSON: strict parsing with a
 * depth cap and UTF-8 validation, typed member access, and compact serialisation.
 */
#ifndef AR_JSONX_H
#define AR_JSONX_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "base/buf.h"

#define JSONX_DEFAULT_DEPTH 64

/*
 * Parse exactly one JSON value from data[0..len). Trailing non-space bytes are an error.
 * Returns 0 and a new reference in *ret (which may be NULL for the literal null), or -EBADMSG
 * with a short description of the problem copied into err.
 */
int jsonx_parse(const char *data, size_t len, int depth, json_object **ret, char *err,
                size_t errlen);
/*
 * The same with a tokener of its own for this one document, freed after it, instead of the
 * thread's cached one (jsonx_parse keeps one per depth, eight a thread): for the parses of
 * short-lived threads (the Agenta heartbeat timer) and of depths no hot path uses.
 */
int jsonx_parse_once(const char *data, size_t len, int depth, json_object **ret, char *err,
                     size_t errlen);

/*
 * The parse budget of untrusted documents, checked on the text before any object is built (a
 * body of 2.8 million "{}" would otherwise cost gigabytes): at most max_elements values
 * (every object, array, string, number and literal) and at most max_depth nested
 * containers. -E2BIG (elements) or -ELOOP (depth) with err naming the limit; malformed text
 * is left to jsonx_parse.
 */
int jsonx_check_budget(const char *data, size_t len, size_t max_elements, int max_depth, char *err,
                       size_t errlen);

/* The member `key` of an object, or NULL when absent, null, or o is not an object. */
json_object *jsonx_get(json_object *o, const char *key);
/* The string member, or NULL when absent/null/not a string. */
const char *jsonx_str(json_object *o, const char *key);
/* Member by dotted path ("runContext.project.id"), NULL when any step is missing. */
json_object *jsonx_path(json_object *o, const char *path);

/* What a value is, as a refusal names it: "null", "a boolean", "a number", "a string", ... */
const char *jsonx_type_word(json_object *v);

/* Compact JSON text of o (valid until o changes or is freed). "null" for NULL. */
const char *jsonx_text(json_object *o, size_t *ret_len);
/* A deep copy of o (a new reference); NULL when o is NULL or on out of memory. */
json_object *jsonx_copy(json_object *o);
/*
 * Append s as a JSON string ("...", quote, backslash and control characters escaped; other
 * bytes as they are) to out: a line built with buf_printf, without an object for it. -errno.
 */
int jsonx_append_string(struct buf *out, const char *s);

#endif
