/*
 * tool_spec — the run's tool set: every tool the harness is offered and the runner executes.
 *
 * Built in two steps:
 *   1. tool_set_new() from the request's parsed tools (struct run_tools, which the request
 *      parser checked in full: request/request_tools.h), so it cannot refuse: each custom tool
 *      as the request classified it (callback through /tools/call, direct call, client tool),
 *      the MCP servers' names, urls and policies (never a credential value), the callback
 *      endpoint;
 *   2. tool_set_add_mcp_tools() once per server with what its tools/list returned: the
 *      policy.tools include list filters, each tool is offered as "<server>__<tool>" (bytes
 *      outside [A-Za-z0-9_-] become '_'; a name over 64 bytes is cut to 55 and given an
 *      8-hex-digit hash suffix), and the server's permission applies to every one of them.
 *      A listed tool whose name clashes with another (after that mapping) is refused with a
 *      message naming both.
 *
 * The public specs (tool_set_public_json) are what crosses into the sandbox, as the file
 * named by RUNNER_TOOLS_FILE: [{name, description, inputSchema}] and nothing else — never a
 * callRef, a direct-call descriptor, a binding, an endpoint or a credential.
 *
 * Ownership: a tool_set owns copies of everything it holds; it does not borrow from the
 * request. Errors: -EINVAL with a message naming the server and the tool, -ENOMEM, -E2BIG when
 * a cap is passed.
 */
#ifndef AR_TOOL_SPEC_H
#define AR_TOOL_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "core/contracts.h"
#include "core/policy.h"
#include "proto/tool_result.h"

#define TOOL_SET_MAX 512 /* tools in one run, custom + MCP */
#define TOOL_PUBLIC_MAX (16u * 1024 * 1024)

struct tool_spec {
    char *name;                 /* what the harness sees */
    enum tool_exec exec;
    char *description;          /* NULL = none */
    json_object *input_schema;  /* NULL = none */
    char *call_ref;             /* CALLBACK */
    json_object *call;          /* DIRECT: {method, path, body?, context?, args_into?} */
    json_object *context_bindings; /* CALLBACK: {"arg.path": "$ctx.path"} or NULL */
    json_object *ephemeral_args;   /* array of top-level argument names or NULL */
    uint64_t timeout_ms;        /* 0 = the default */
    json_object *render;        /* the RenderHint, or NULL */
    int read_only;              /* -1 unknown, 0 no, 1 yes (readOnly / annotations.readOnlyHint) */
    enum permission permission; /* the spec's own, PERMISSION_UNSET when none */
    enum permission server_permission; /* MCP: the server's policy.permission */
    size_t server;              /* MCP: index into tool_set.servers */
    char *remote_name;          /* MCP: the server's own name for the tool */
};

struct tool_server {
    char *name;
    char *url;
    enum permission permission;
    bool include_all;           /* policy.tools.mode "all" (the default) */
    json_object *include;       /* mode "include": array of the server's tool names */
};

struct tool_set {
    struct tool_spec *tools;
    size_t ntools;
    struct tool_server *servers;
    size_t nservers;
    char *callback_endpoint; /* toolCallback.endpoint or NULL (never the authorization) */
};

/* Step 1: *ret is a new set the caller frees with tool_set_free(). 0 or -ENOMEM. */
int tool_set_new(const struct run_tools *tools, struct tool_set **ret);
void tool_set_free(struct tool_set *s);

/*
 * Step 2: add the tools server `server` listed (the array of MCP Tool objects from tools/list,
 * all pages). Tools the include list leaves out are skipped. On failure the set is unchanged.
 */
int tool_set_add_mcp_tools(struct tool_set *s, size_t server, json_object *listed, char *err,
                           size_t errlen);

/* The tool the harness calls `name`, or NULL. */
const struct tool_spec *tool_set_find(const struct tool_set *s, const char *name);

/* [{name, description, inputSchema}] as compact JSON appended to out (cap TOOL_PUBLIC_MAX). */
int tool_set_public_json(const struct tool_set *s, struct buf *out);

/* The permission gate of a call to t with args (borrowed) for policy_permission_effective(). */
void tool_spec_gate(const struct tool_spec *t, json_object *args, struct permission_gate *ret);

/*
 * The tool result text of a refused call: "Tool 'x' is denied by policy." when the spec
 * itself says deny, "Tool 'x' is denied by the permission policy." otherwise, and
 * "Client tool 'x' was denied." for a client tool (Agenta's wording).
 */
void tool_spec_denial(const struct tool_spec *t, char *out, size_t outlen);

/*
 * Agenta's required-argument check (spec-schema.ts): every name in inputSchema.required that
 * is absent or null in args, recursing into the properties that are present. 0 when nothing is
 * missing; else 1 and the model-facing message ("Tool 'x' missing required argument(s): a,
 * b.c. Retry the tool call with those argument fields populated.") in out.
 */
int tool_spec_check_required(const struct tool_spec *t, json_object *args, struct buf *out);

#endif
