/*
 * request_tools — a run request's customTools and toolCallback, parsed into req->tools
 * (struct run_tools, core/contracts.h), and the checks that join them with mcpServers
 * (request_mcp.h).
 *
 * Two passes, so that a request with several faults is refused for the one it always was:
 *   1. with the other sections, in the request's order (rq_custom_tools, rq_tool_callback):
 *      each entry an object with a valid name (unique), kind callback or client ("code" is
 *      refused: this runner executes no code), permission allow | ask | deny, callRef or call
 *      (never both), call.method GET | POST | PUT | DELETE and call.path; the callback endpoint
 *      an http(s) URL (plain http only to a loopback host);
 *   2. after every section (rq_tools_check): each tool in full — the reserved name, callRef or
 *      call present, call.path absolute, the {"arg.path": "$ctx.path"} bindings, ephemeralArgs,
 *      timeoutMs (0 to 24 h), description, inputSchema, render, readOnly — then each MCP
 *      server's policy (request_mcp.c), then that every callback or direct tool has
 *      toolCallback.endpoint, then each MCP server's headers and credentials.
 * Pass 2 names a tool `customTools[i] "name"`.
 *
 * Everything stays borrowed from the request document but the arrays (run_request_release
 * frees them). Refusals: AR_E_INVALID_REQUEST with the message in the context's err, never a
 * credential value; -ENOMEM.
 */
#ifndef AR_REQUEST_TOOLS_H
#define AR_REQUEST_TOOLS_H

#include <json-c/json.h>

#include "core/contracts.h"
#include "request/request_fields.h"

/* Pass 1: customTools (arr, an array of at most the section's entries) into req->tools.custom. */
int rq_custom_tools(struct rq_ctx *c, json_object *arr, struct run_request *req);
/* Pass 1: toolCallback (o, an object) into req->tools.callback_endpoint / _authorization. */
int rq_tool_callback(struct rq_ctx *c, json_object *o, struct run_request *req);
/* Pass 2, once every section is in. */
int rq_tools_check(struct rq_ctx *c, struct run_request *req);

#endif
