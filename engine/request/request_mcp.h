/*
 * request_mcp — a run request's mcpServers, parsed into req->tools.servers (struct mcp_server,
 * core/contracts.h): the user's HTTP MCP servers the runner connects to as a client.
 *
 * Pass 1, with the other sections (rq_mcp_servers): each entry an object with a valid name
 * (unique; never RUN_TOOLS_MCP_NAME), a connection {type: "http", url} whose url is an
 * http(s) URL with a host (the SSRF guard judges its addresses when the runner connects), and
 * a policy {permission: allow | ask | deny, tools: {mode: all | include}}.
 * Pass 2, from rq_tools_check (request_tools.h): rq_mcp_servers_check — the url at most 2048
 * bytes, mode "include" with names an array of strings, at most 256 header names — and then,
 * after the custom tools' endpoint check, rq_mcp_servers_headers — connection.headers
 * {name: value} and connection.credentials [{binding: {kind: "header", name}, value,
 * usage: "opaque_http"?}] into the server's headers: names HTTP tokens of at most 128 bytes,
 * unique (case-insensitively) and none the transport sets itself (Accept, Content-Type, Host,
 * Content-Length, Transfer-Encoding, Connection, Expect, Mcp-Session-Id, MCP-Protocol-Version,
 * TE, Upgrade, Keep-Alive); values without CR or LF, at most 8192 bytes, a credential's
 * non-empty; at most MCP_SERVER_HEADERS_MAX of them. Pass 2 names a server
 * `mcpServers[i] "name"`, its headers `MCP server "name"`; no message holds a header value.
 *
 * Refusals: AR_E_INVALID_REQUEST with the message in the context's err; -ENOMEM.
 */
#ifndef AR_REQUEST_MCP_H
#define AR_REQUEST_MCP_H

#include <json-c/json.h>

#include "core/contracts.h"
#include "request/request_fields.h"

int rq_mcp_servers(struct rq_ctx *c, json_object *arr, struct run_request *req);
int rq_mcp_servers_check(struct rq_ctx *c, struct run_request *req);
int rq_mcp_servers_headers(struct rq_ctx *c, struct run_request *req);

#endif
