/*
 * request_fields — the request module's field machinery, shared by the request parser's files
 * (request.c, request_sections.c, request_tools.c, request_mcp.c) and no one else (like
 * fcgi/config.c's settings table, one table per object).
 *
 * Typed member readers write their out-parameter and name the offending field in the refusal
 * ("skills[2].files[0].path: ..."). rq_fields reads an object's members from a table of
 * {key, kind, limit, requirement, where to store, check}; rq_each walks an array of objects,
 * allocating one element per entry and naming each "<name>[i]". Every refusal is
 * AR_E_INVALID_REQUEST with the message in the context's err.
 */
#ifndef AR_REQUEST_FIELDS_H
#define AR_REQUEST_FIELDS_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "core/contracts.h"

#define RQ_ID_MAX 128   /* sessionId, turnId, projectId, ... */
#define RQ_NAME_MAX 256 /* names and enum words */

struct request_limits; /* request.h */

struct rq_ctx {
    char *err;
    size_t errlen;
    const struct request_limits *lim;
};

int rq_fail(struct rq_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Optional members (absent or null: *ret NULL / false); a wrong type or size is refused. */
int rq_string(struct rq_ctx *c, json_object *o, const char *key, const char *field, size_t max,
              const char **ret);
/* rq_string that lets an embedded NUL through (the text is then cut there). */
int rq_text(struct rq_ctx *c, json_object *o, const char *key, const char *field, size_t max,
            const char **ret);
int rq_object(struct rq_ctx *c, json_object *o, const char *key, const char *field,
              json_object **ret);
int rq_array(struct rq_ctx *c, json_object *o, const char *key, const char *field, size_t max,
             json_object **ret);
int rq_bool(struct rq_ctx *c, json_object *o, const char *key, const char *field, bool *ret);
/* A string out of set (NULL-terminated); expected lists it for the message. */
int rq_enum(struct rq_ctx *c, json_object *o, const char *key, const char *field,
            const char *const *set, const char *expected, const char **ret);
/* An id: blank counts as absent, control characters are refused. */
int rq_id(struct rq_ctx *c, json_object *o, const char *key, const char **ret);
bool rq_one_of(const char *s, const char *const *set);
/* allow, ask, deny: a permission word (RQ_ENUM set), as the refusal lists it */
extern const char *const rq_permission_words[];
#define RQ_PERMISSION_EXPECTED "allow, ask, deny"
bool rq_has_control(const char *s);
bool rq_env_name_ok(const char *name);
bool rq_tool_name_ok(const char *s);
/* A tool's or an MCP server's name: rq_tool_name_ok and not RUN_TOOLS_MCP_NAME. */
int rq_tool_name(struct rq_ctx *c, const char *field, const char *name);
/* The one check that name is not RUN_TOOLS_MCP_NAME ("<field>: \"agenta-tools\" is reserved"). */
int rq_tool_name_free(struct rq_ctx *c, const char *field, const char *name);
/* An http(s) URL with a host; plain http only for loopback hosts. */
int rq_base_url(struct rq_ctx *c, const char *field, const char *url, bool require_https);
/* An object of strings as name/value pairs (env_names: names must be allowed variables). */
int rq_string_map(struct rq_ctx *c, json_object *o, const char *field, bool env_names,
                  struct str_pair **ret, size_t *ret_n);

enum rq_kind { RQ_STRING, RQ_ENUM, RQ_BOOL, RQ_OBJECT, RQ_ARRAY };
enum rq_need { RQ_OPTIONAL, RQ_PRESENT, RQ_NONEMPTY };

#define RQ_NOWHERE ((size_t)-1) /* validate the member, keep nothing */

struct rq_field {
    const char *key;
    enum rq_kind kind;
    size_t max; /* string bytes, array entries */
    enum rq_need need;
    size_t offset;          /* where the value goes in the destination struct, or RQ_NOWHERE */
    const char *const *set; /* RQ_ENUM */
    const char *expected;   /* RQ_ENUM: the set as the message lists it */
    /* run right after the member was read and stored: a refusal names field */
    int (*check)(struct rq_ctx *c, const char *field, void *dst);
};

/* Read table[0..n) of o into dst, in order; field names are "<prefix>.<key>". */
int rq_fields(struct rq_ctx *c, json_object *o, const char *prefix, const struct rq_field *table,
              size_t n, void *dst);

/*
 * For each entry of arr (NULL: none): it must be an object named "<name>[i]"; fn parses it
 * into element i of a new array of size-byte elements (size 0: no array, elem NULL). The
 * array is stored in *ret / *ret_n before the first element is parsed, so the caller frees it
 * on failure too.
 */
int rq_each(struct rq_ctx *c, json_object *arr, const char *name, size_t size, void **ret,
            size_t *ret_n,
            int (*fn)(struct rq_ctx *c, json_object *o, const char *field, size_t i, void *elem,
                      void *ctx),
            void *ctx);

#endif
