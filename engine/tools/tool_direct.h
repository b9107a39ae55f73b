/*
 * tool_direct — a direct call's request (a custom tool with `call`), built from its descriptor.
 *
 * The body (POST/PUT) in Agenta's order: the model's arguments (minus ephemeralArgs) at
 * call.args_into, else at the root; then call.body over them (fixed fields win); then the
 * call.context bindings over everything. The URL: call.path resolved against the callback
 * endpoint's origin, staying under its mount (the endpoint path minus a trailing
 * "/tools/call"); "{name}" path parameters are filled from the assembled body (scalars only,
 * percent-encoded as encodeURIComponent does) and then removed from it. The path is refused
 * when it holds "..", ".", a backslash, whitespace, a control byte, '#', or an encoded dot,
 * slash, backslash or NUL (%2e %2f %5c %00).
 *
 * Errors: -ENOENT + err for a binding that does not resolve, -EINVAL + err for a refused path
 * or method, -ENOMEM. err never holds an argument value but a path parameter's name.
 */
#ifndef AR_TOOL_DIRECT_H
#define AR_TOOL_DIRECT_H

#include <stddef.h>

#include <json-c/json.h>

/* The body from call, args (borrowed, may be NULL) and the $ctx view: a new object in *ret. */
int tool_direct_body(json_object *call, json_object *args, json_object *view, json_object **ret,
                     char *err, size_t errlen);
/* The URL (malloc'ed) from the endpoint and call; fills the path parameters from body and
 * removes them from it. */
int tool_direct_url(const char *endpoint, json_object *call, json_object *body, char **ret,
                    char *err, size_t errlen);

#endif
