/*
 * tool_args — the model's arguments shaped for a callback or direct call.
 *
 * Dotted paths ("data.inputs", run_tools_path_ok: core/contracts.h) address members through
 * objects only. The $ctx view is the request's runContext (a deep copy, or {}) with session.id
 * replaced by the live session id when one is given; "$ctx.<path>" tokens resolve in it. A
 * binding {"arg.path": "$ctx.path"} replaces whatever the model sent at arg.path with the
 * resolved value; a token that does not resolve fails the call (-ENOENT) before any request.
 * Merging skips the keys __proto__, constructor and prototype.
 *
 * Ownership: functions that return json_object give a new reference; arguments are borrowed
 * unless a comment says a reference is handed over. Errors: -ENOMEM, -EINVAL (a bad path),
 * -ENOENT, -ELOOP (merge deeper than 64).
 */
#ifndef AR_TOOL_ARGS_H
#define AR_TOOL_ARGS_H

#include <stddef.h>

#include <json-c/json.h>

/* Set value (a reference handed over) at path in obj, creating objects on the way. */
int tool_args_set(json_object *obj, const char *path, json_object *value);
/* The value at path: 0 and a borrowed *ret (NULL for a JSON null), or -ENOENT. */
int tool_args_get(json_object *obj, const char *path, json_object **ret);
/* Remove the member at path, when there is one. */
void tool_args_delete(json_object *obj, const char *path);
/* overlay merged into base (base changes): plain objects merge, anything else replaces. */
int tool_args_merge(json_object *base, json_object *overlay, int depth);

/* The $ctx view (see above): a new object, NULL when out of memory. */
json_object *tool_args_ctx_view(json_object *run_context, const char *session_id);
/* Resolve "$ctx.<path>" in view: 0 and a borrowed value (NULL for a JSON null), or -ENOENT. */
int tool_args_resolve(json_object *view, const char *token, json_object **ret);
/* Set the resolved value of token at path in obj; -ENOENT when it does not resolve. */
int tool_args_bind_one(json_object *obj, const char *path, const char *token, json_object *view);

/* args without the top-level names in list (a new reference; args itself is not changed). */
json_object *tool_args_strip_ephemeral(json_object *args, json_object *list);
/* contextBindings applied to (a copy of) args. -ENOENT + err when a token does not resolve. */
int tool_args_bind(json_object *args, json_object *bindings, json_object *view, json_object **ret,
                   char *err, size_t errlen);

#endif
