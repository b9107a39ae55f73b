/*
 * request_mcp — mcpServers into struct mcp_server, in two passes (request_mcp.h).
 */
#include "request/request_mcp.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/httpc.h"
#include "base/jsonx.h"
#include "base/util.h"
#include "core/policy.h"
#include "request/request_url.h"

#define URL_MAX 2048
#define HEADER_NAMES_MAX 256 /* names a server's headers and credentials may list at all */
#define FIELD_MAX 192
#define MEMBER_MAX (FIELD_MAX + 32) /* a field and one of its keys */

/* ---- pass 1 ------------------------------------------------------------------------------ */

/* What pass 1 reads of an entry. */
struct server_members {
    const char *name;
    json_object *connection;
    json_object *policy;
};

static int check_server_name(struct rq_ctx *c, const char *field, void *elem)
{
    const struct server_members *s = elem;

    return rq_tool_name(c, field, s->name);
}

static int check_connection(struct rq_ctx *c, const char *field, void *elem)
{
    const struct server_members *s = elem;
    const char *type = jsonx_str(s->connection, "type"), *url = jsonx_str(s->connection, "url");
    char f[FIELD_MAX], scheme[8], host[256];
    unsigned port;

    if (!type || strcmp(type, "http") != 0)
        return rq_fail(c, "%s.type: only \"http\" is supported", field);
    snprintf(f, sizeof(f), "%s.url", field);
    if (!url)
        return rq_fail(c, "%s: required", f);
    /* only its shape here: https, the addresses and the allowlist are the SSRF guard's, which
     * the runner applies when it connects (tool_runner.h), naming the server */
    if (request_parse_url(url, scheme, sizeof(scheme), host, sizeof(host), &port) < 0)
        return rq_fail(c, "%s: not an http(s) URL with a host", f);
    return 0;
}

static const struct rq_field server_fields[] = {
    {.key = "name",
     .kind = RQ_STRING,
     .max = 256,
     .need = RQ_OPTIONAL,
     .offset = offsetof(struct server_members, name),
     .check = check_server_name},
    {.key = "connection",
     .kind = RQ_OBJECT,
     .max = 0,
     .need = RQ_PRESENT,
     .offset = offsetof(struct server_members, connection),
     .check = check_connection},
    {.key = "policy",
     .kind = RQ_OBJECT,
     .max = 0,
     .need = RQ_OPTIONAL,
     .offset = offsetof(struct server_members, policy)},
};

static const char *const tool_modes[] = {"all", "include", NULL};

static const struct rq_field policy_fields[] = {
    {.key = "permission",
     .kind = RQ_ENUM,
     .max = 0,
     .need = RQ_OPTIONAL,
     .offset = RQ_NOWHERE,
     .set = rq_permission_words,
     .expected = RQ_PERMISSION_EXPECTED},
    {.key = "tools", .kind = RQ_OBJECT, .max = 0, .need = RQ_OPTIONAL, .offset = 0},
};

static const struct rq_field policy_tools_fields[] = {
    {.key = "mode",
     .kind = RQ_ENUM,
     .max = 0,
     .need = RQ_OPTIONAL,
     .offset = RQ_NOWHERE,
     .set = tool_modes,
     .expected = "all, include"},
};

static int mcp_server(struct rq_ctx *c, json_object *o, const char *field, size_t i, void *elem,
                      void *ctx)
{
    const struct run_request *req = ctx;
    struct mcp_server *sv = elem;
    struct server_members m = {0};
    json_object *tools = NULL;
    const char *mode;
    char f[FIELD_MAX];
    int r = rq_fields(c, o, field, server_fields, ARRAY_SIZE(server_fields), &m);

    if (r == 0 && m.policy) {
        snprintf(f, sizeof(f), "%s.policy", field);
        r = rq_fields(c, m.policy, f, policy_fields, ARRAY_SIZE(policy_fields), &tools);
        if (r == 0 && tools) {
            snprintf(f, sizeof(f), "%s.policy.tools", field);
            r = rq_fields(c, tools, f, policy_tools_fields, ARRAY_SIZE(policy_tools_fields), NULL);
        }
    }
    if (r < 0)
        return r;
    for (size_t j = 0; j < i; j++)
        if (strcmp(req->tools.servers[j].name, m.name) == 0)
            return rq_fail(c, "%s.name: duplicate server \"%s\"", field, m.name);
    mode = jsonx_str(tools, "mode");
    sv->name = m.name;
    sv->url = jsonx_str(m.connection, "url");
    sv->permission = policy_permission_parse(jsonx_str(m.policy, "permission"));
    sv->include_all = !mode || strcmp(mode, "include") != 0;
    return 0;
}

int rq_mcp_servers(struct rq_ctx *c, json_object *arr, struct run_request *req)
{
    return rq_each(c, arr, "mcpServers", sizeof(struct mcp_server), (void **)&req->tools.servers,
                   &req->tools.nservers, mcp_server, req);
}

/* ---- pass 2: url, include list, how many headers ----------------------------------------- */

/* policy.tools.names of mode "include": an array of strings (absent: an empty list). */
static int include_list(struct rq_ctx *c, json_object *o, const char *field, struct mcp_server *sv)
{
    json_object *tools = jsonx_get(jsonx_get(o, "policy"), "tools"), *names;
    char f[MEMBER_MAX];
    int r;

    if (sv->include_all)
        return 0;
    snprintf(f, sizeof(f), "%s.names", field);
    r = rq_array(c, tools, "names", f, SIZE_MAX, &names);
    if (r < 0)
        return r;
    for (size_t j = 0; names && j < json_object_array_length(names); j++) {
        json_object *e = json_object_array_get_idx(names, j);

        if (!e || !json_object_is_type(e, json_type_string))
            return rq_fail(c, "%s.policy.tools.names[%zu]: expected a string", field, j);
    }
    sv->include = names;
    return 0;
}

/* The header names the entry lists at all (headers' keys, credentials' binding names). */
static int header_count(struct rq_ctx *c, json_object *conn, const char *field)
{
    json_object *headers = jsonx_get(conn, "headers"), *creds = jsonx_get(conn, "credentials");
    size_t n = 0;

    if (headers && json_object_is_type(headers, json_type_object))
        n = (size_t)json_object_object_length(headers);
    if (n > HEADER_NAMES_MAX)
        return rq_fail(c, "%s.connection.headers: too many headers", field);
    for (size_t i = 0; creds && json_object_is_type(creds, json_type_array) &&
                       i < json_object_array_length(creds);
         i++) {
        json_object *binding = jsonx_get(json_object_array_get_idx(creds, i), "binding");

        if (jsonx_str(binding, "name") && ++n > HEADER_NAMES_MAX)
            return rq_fail(c, "%s.connection.credentials: too many headers", field);
    }
    return 0;
}

int rq_mcp_servers_check(struct rq_ctx *c, struct run_request *req)
{
    int r = 0;

    for (size_t i = 0; i < req->tools.nservers && r == 0; i++) {
        struct mcp_server *sv = &req->tools.servers[i];
        json_object *o = json_object_array_get_idx(req->mcp_servers, i);
        json_object *conn = jsonx_get(o, "connection");
        char field[FIELD_MAX], f[MEMBER_MAX];
        const char *url;

        snprintf(field, sizeof(field), "mcpServers[%zu] \"%s\"", i, sv->name);
        snprintf(f, sizeof(f), "%s.url", field);
        r = rq_text(c, conn, "url", f, URL_MAX, &url);
        if (r == 0)
            r = include_list(c, o, field, sv);
        if (r == 0)
            r = header_count(c, conn, field);
    }
    return r;
}

/* ---- pass 2: headers and credentials ------------------------------------------------------- */

static const char *const transport_headers[] = {
    "accept",     "content-type", "host",           "content-length",       "transfer-encoding",
    "connection", "expect",       "mcp-session-id", "mcp-protocol-version", "te",
    "upgrade",    "keep-alive",
};

static bool transport_header(const char *name)
{
    for (size_t i = 0; i < ARRAY_SIZE(transport_headers); i++)
        if (strcasecmp(name, transport_headers[i]) == 0)
            return true;
    return false;
}

/* Append name: value to sv's headers after the checks; secret marks a credential. */
static int add_header(struct rq_ctx *c, struct mcp_server *sv, const char *name, const char *value,
                      bool secret)
{
    if (!httpc_header_name_ok(name))
        return rq_fail(c, "MCP server \"%s\": \"%.64s\" is not a header name", sv->name, name);
    if (transport_header(name))
        return rq_fail(c, "MCP server \"%s\": header \"%s\" is set by the runner itself", sv->name,
                       name);
    if (!value || !httpc_header_value_ok(value) || (secret && !*value))
        return rq_fail(c, "MCP server \"%s\": header \"%s\": invalid value", sv->name, name);
    for (size_t i = 0; i < sv->nheaders; i++)
        if (strcasecmp(sv->headers[i].name, name) == 0)
            return rq_fail(c, "MCP server \"%s\": header \"%s\" is given twice", sv->name, name);
    if (sv->nheaders == MCP_SERVER_HEADERS_MAX)
        return rq_fail(c, "MCP server \"%s\": more than %d headers", sv->name,
                       MCP_SERVER_HEADERS_MAX);
    if (!sv->headers) {
        sv->headers = calloc(MCP_SERVER_HEADERS_MAX, sizeof(*sv->headers));
        if (!sv->headers)
            return -ENOMEM;
    }
    sv->headers[sv->nheaders++] =
        (struct mcp_header){.name = name, .value = value, .secret = secret};
    return 0;
}

static int plain_headers(struct rq_ctx *c, json_object *conn, struct mcp_server *sv)
{
    json_object *headers = jsonx_get(conn, "headers");
    int r;

    if (!headers)
        return 0;
    if (!json_object_is_type(headers, json_type_object))
        return rq_fail(c, "MCP server \"%s\": connection.headers must be an object", sv->name);
    json_object_object_foreach(headers, key, val)
    {
        if (!val || !json_object_is_type(val, json_type_string))
            return rq_fail(c, "MCP server \"%s\": header \"%.64s\": expected a string", sv->name,
                           key);
        r = add_header(c, sv, key, json_object_get_string(val), false);
        if (r < 0)
            return r;
    }
    return 0;
}

static int credential_headers(struct rq_ctx *c, json_object *conn, struct mcp_server *sv)
{
    json_object *creds = jsonx_get(conn, "credentials");
    int r;

    if (creds && !json_object_is_type(creds, json_type_array))
        return rq_fail(c, "MCP server \"%s\": connection.credentials must be an array", sv->name);
    for (size_t i = 0; creds && i < json_object_array_length(creds); i++) {
        json_object *cr = json_object_array_get_idx(creds, i), *binding = jsonx_get(cr, "binding");
        const char *kind = jsonx_str(binding, "kind"), *name = jsonx_str(binding, "name");
        const char *usage = jsonx_str(cr, "usage");

        if (!kind || strcmp(kind, "header") != 0 || !name)
            return rq_fail(c,
                           "MCP server \"%s\": credentials[%zu].binding must be "
                           "{kind:\"header\", name}",
                           sv->name, i);
        if (usage && strcmp(usage, "opaque_http") != 0)
            return rq_fail(c, "MCP server \"%s\": credentials[%zu].usage must be \"opaque_http\"",
                           sv->name, i);
        r = add_header(c, sv, name, jsonx_str(cr, "value"), true);
        if (r < 0)
            return r;
    }
    return 0;
}

int rq_mcp_servers_headers(struct rq_ctx *c, struct run_request *req)
{
    int r = 0;

    for (size_t i = 0; i < req->tools.nservers && r == 0; i++) {
        json_object *o = json_object_array_get_idx(req->mcp_servers, i);
        json_object *conn = jsonx_get(o, "connection");

        r = plain_headers(c, conn, &req->tools.servers[i]);
        if (r == 0)
            r = credential_headers(c, conn, &req->tools.servers[i]);
    }
    return r;
}
