#include "request/request.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "harness/harness.h"
#include "provider/provider.h"
#include "request/request_fields.h"
#include "request/request_mcp.h"
#include "request/request_sections.h"
#include "request/request_tools.h"

#define ID_MAX RQ_ID_MAX
#define NAME_MAX_LEN RQ_NAME_MAX
#define HARNESS_FILES_MAX 64
#define REQUEST_TEXT_MAX (1024u * 1024) /* agentsMd, systemPrompt, appendSystemPrompt */
#define SKILLS_MAX 64
#define CREDENTIALS_MAX 32
#define TOOLS_MAX 128
#define MCP_SERVERS_MAX 32

void request_limits_default(struct request_limits *lim)
{
    lim->max_messages = 10000;
    lim->max_string = 4u * 1024 * 1024;
    lim->max_elements = REQUEST_ELEMENTS_MAX;
    lim->allow_scripted = false;
}

static const char *const credential_modes[] = {"env", "runtime_provided", "none", NULL};
static const char *const credential_usages[] = {"opaque_http", "local_use", NULL};

static const struct rq_field connection_fields[] = {
    {.key = "provider", .kind = RQ_STRING, .max = NAME_MAX_LEN, .need = RQ_NONEMPTY,
     .offset = offsetof(struct model_connection, provider)},
    {.key = "deployment", .kind = RQ_STRING, .max = NAME_MAX_LEN, .need = RQ_NONEMPTY,
     .offset = offsetof(struct model_connection, deployment)},
};

static const struct rq_field endpoint_fields[] = {
    {.key = "baseUrl", .kind = RQ_STRING, .max = 2048, .need = RQ_OPTIONAL,
     .offset = offsetof(struct model_connection, base_url)},
    {.key = "apiVersion", .kind = RQ_STRING, .max = NAME_MAX_LEN, .need = RQ_OPTIONAL,
     .offset = offsetof(struct model_connection, api_version)},
    {.key = "region", .kind = RQ_STRING, .max = NAME_MAX_LEN, .need = RQ_OPTIONAL,
     .offset = offsetof(struct model_connection, region)},
};

static int parse_endpoint(struct rq_ctx *c, json_object *endpoint, struct model_connection *mc)
{
    json_object *headers;
    int r;

    /* one field at a time: the URL is checked before the fields after it are read */
    r = rq_fields(c, endpoint, "modelConnection.endpoint", endpoint_fields, 1, mc);
    if (r == 0 && mc->base_url)
        r = rq_base_url(c, "modelConnection.endpoint.baseUrl", mc->base_url, true);
    if (r == 0)
        r = rq_fields(c, endpoint, "modelConnection.endpoint", endpoint_fields + 1,
                      ARRAY_SIZE(endpoint_fields) - 1, mc);
    if (r == 0)
        r = rq_object(c, endpoint, "headers", "modelConnection.endpoint.headers", &headers);
    if (r == 0)
        r = rq_string_map(c, headers, "modelConnection.endpoint.headers", false, &mc->headers,
                          &mc->nheaders);
    return r;
}

/* One credential: bound to an allowed environment variable, never twice, never empty. */
static int parse_credential(struct rq_ctx *c, json_object *cred, const char *field, size_t i,
                            void *elem, void *ctx)
{
    const struct model_connection *mc = ctx;
    struct credential *cr = elem;
    json_object *binding = jsonx_get(cred, "binding");
    const char *kind, *usage;

    if (!binding || !json_object_is_type(binding, json_type_object))
        return rq_fail(c, "%s.binding: expected an object", field);
    kind = jsonx_str(binding, "kind");
    if (!kind || strcmp(kind, "environment") != 0)
        return rq_fail(c, "%s.binding.kind: must be \"environment\"", field);
    cr->name = jsonx_str(binding, "name");
    if (!cr->name || !cr->name[0])
        return rq_fail(c, "%s.binding.name: required", field);
    if (!rq_env_name_ok(cr->name))
        return rq_fail(c, "%s.binding.name: \"%.64s\" is not an allowed environment variable "
                          "name",
                       field, cr->name);
    cr->value = jsonx_str(cred, "value");
    if (!cr->value || !cr->value[0])
        return rq_fail(c, "%s.value: required non-empty string", field);
    if (strlen(cr->value) > 16384 || rq_has_control(cr->value))
        return rq_fail(c, "%s.value: malformed credential", field);
    usage = jsonx_str(cred, "usage");
    if (!usage || !rq_one_of(usage, credential_usages))
        return rq_fail(c, "%s.usage: expected opaque_http or local_use", field);
    cr->usage = strcmp(usage, "opaque_http") == 0 ? CREDENTIAL_USAGE_OPAQUE_HTTP
                                                  : CREDENTIAL_USAGE_LOCAL_USE;
    if (cr->usage == CREDENTIAL_USAGE_OPAQUE_HTTP && !mc->base_url &&
        strcmp(mc->deployment, "custom") == 0)
        return rq_fail(c, "%s.usage: opaque_http on a custom deployment needs "
                          "modelConnection.endpoint.baseUrl",
                       field);
    for (size_t j = 0; j < i; j++)
        if (strcmp(mc->credentials[j].name, cr->name) == 0)
            return rq_fail(c, "%s.binding.name: duplicate binding \"%.64s\"", field, cr->name);
    for (size_t j = 0; j < mc->nenvironment; j++)
        if (strcmp(mc->environment[j].name, cr->name) == 0)
            return rq_fail(c, "%s.binding.name: \"%.64s\" is also set in "
                              "modelConnection.environment",
                           field, cr->name);
    return 0;
}

static int parse_credentials(struct rq_ctx *c, json_object *o, struct model_connection *mc)
{
    json_object *creds;
    size_t n;
    int r = rq_array(c, o, "credentials", "modelConnection.credentials", CREDENTIALS_MAX, &creds);

    if (r < 0)
        return r;
    n = creds ? json_object_array_length(creds) : 0;
    if (mc->credential_mode == CREDENTIAL_MODE_ENV && n == 0)
        return rq_fail(c, "modelConnection.credentials: credentialMode \"env\" needs at least "
                          "one credential");
    if (mc->credential_mode != CREDENTIAL_MODE_ENV && n > 0)
        return rq_fail(c, "modelConnection.credentials: only allowed with credentialMode "
                          "\"env\"");
    return rq_each(c, creds, "modelConnection.credentials", sizeof(struct credential),
                   (void **)&mc->credentials, &mc->ncredentials, parse_credential, mc);
}

static int parse_model_connection(struct rq_ctx *c, json_object *o, struct model_connection *mc)
{
    json_object *endpoint, *env;
    const char *mode;
    int r;

    mc->present = true;
    r = rq_fields(c, o, "modelConnection", connection_fields, ARRAY_SIZE(connection_fields), mc);
    if (r < 0)
        return r;
    r = rq_enum(c, o, "credentialMode", "modelConnection.credentialMode", credential_modes,
                "env, runtime_provided, none", &mode);
    if (r < 0)
        return r;
    if (!mode)
        return rq_fail(c, "modelConnection.credentialMode: required");
    mc->credential_mode = strcmp(mode, "env") == 0    ? CREDENTIAL_MODE_ENV
                          : strcmp(mode, "none") == 0 ? CREDENTIAL_MODE_NONE
                                                      : CREDENTIAL_MODE_RUNTIME;
    r = rq_object(c, o, "endpoint", "modelConnection.endpoint", &endpoint);
    if (r == 0 && endpoint)
        r = parse_endpoint(c, endpoint, mc);
    if (r == 0)
        r = rq_object(c, o, "environment", "modelConnection.environment", &env);
    if (r == 0)
        r = rq_string_map(c, env, "modelConnection.environment", true, &mc->environment,
                          &mc->nenvironment);
    if (r < 0)
        return r;
    for (size_t i = 0; i < mc->nenvironment; i++)
        if (!mc->environment[i].value[0])
            return rq_fail(c, "modelConnection.environment.%s: empty value",
                           mc->environment[i].name);
    return parse_credentials(c, o, mc);
}

static enum block_type block_type_of(const char *t)
{
    static const struct {
        const char *name;
        enum block_type type;
    } map[] = {{"text", BLOCK_TEXT},           {"image", BLOCK_IMAGE},
               {"resource", BLOCK_RESOURCE},   {"attachment", BLOCK_ATTACHMENT},
               {"tool_call", BLOCK_TOOL_CALL}, {"tool_result", BLOCK_TOOL_RESULT}};

    for (size_t i = 0; i < ARRAY_SIZE(map); i++)
        if (strcmp(t, map[i].name) == 0)
            return map[i].type;
    return BLOCK_OTHER;
}

static int parse_block(struct rq_ctx *c, json_object *o, const char *field,
                       struct content_block *b)
{
    char f[128];
    int r;

    if (!o || !json_object_is_type(o, json_type_object))
        return rq_fail(c, "%s: expected an object", field);
    snprintf(f, sizeof(f), "%s.type", field);
    r = rq_string(c, o, "type", f, 64, &b->type_name);
    if (r < 0)
        return r;
    if (!b->type_name)
        return rq_fail(c, "%s: required", f);
    b->type = block_type_of(b->type_name);
#define BLOCK_STR(key, member)                                                                  \
    do {                                                                                        \
        snprintf(f, sizeof(f), "%s.%s", field, key);                                            \
        r = rq_string(c, o, key, f, c->lim->max_string, &b->member);                           \
        if (r < 0)                                                                              \
            return r;                                                                           \
    } while (0)
    BLOCK_STR("text", text);
    BLOCK_STR("data", data);
    BLOCK_STR("mimeType", mime_type);
    BLOCK_STR("uri", uri);
    BLOCK_STR("toolCallId", tool_call_id);
    BLOCK_STR("toolName", tool_name);
    BLOCK_STR("attachmentId", attachment_id);
    BLOCK_STR("filename", filename);
#undef BLOCK_STR
    b->input = jsonx_get(o, "input");
    b->output = jsonx_get(o, "output");
    snprintf(f, sizeof(f), "%s.isError", field);
    r = rq_bool(c, o, "isError", f, &b->is_error);
    if (r < 0)
        return r;
    switch (b->type) {
    case BLOCK_TEXT:
        if (!b->text)
            return rq_fail(c, "%s.text: required for a text block", field);
        break;
    case BLOCK_IMAGE:
        if (!b->data && !b->uri)
            return rq_fail(c, "%s: an image block needs data or uri", field);
        break;
    case BLOCK_TOOL_CALL:
    case BLOCK_TOOL_RESULT:
        if (!b->tool_call_id)
            return rq_fail(c, "%s.toolCallId: required for a %s block", field, b->type_name);
        break;
    default:
        break;
    }
    return 0;
}

/* A string content is one text block. */
static int text_content(struct rq_ctx *c, json_object *content, const char *field,
                        struct chat_message *cm)
{
    size_t n = (size_t)json_object_get_string_len(content);

    cm->blocks = calloc(1, sizeof(*cm->blocks));
    if (!cm->blocks)
        return -ENOMEM;
    cm->nblocks = 1;
    cm->blocks[0].type = BLOCK_TEXT;
    cm->blocks[0].type_name = "text";
    if (n > c->lim->max_string)
        return rq_fail(c, "%s: longer than %zu bytes", field, c->lim->max_string);
    if (memchr(json_object_get_string(content), '\0', n))
        return rq_fail(c, "%s: contains a NUL character", field);
    cm->blocks[0].text = json_object_get_string(content);
    return 0;
}

static int content_block(struct rq_ctx *c, json_object *o, const char *field, size_t i,
                         void *elem, void *ctx)
{
    (void)i;
    (void)ctx;
    return parse_block(c, o, field, elem);
}

static const struct rq_field message_fields[] = {
    {.key = "role", .kind = RQ_STRING, .max = 32, .need = RQ_PRESENT,
     .offset = offsetof(struct chat_message, role)},
};

static int message(struct rq_ctx *c, json_object *m, const char *field, size_t i, void *elem,
                   void *ctx)
{
    struct chat_message *cm = elem;
    json_object *content;
    char f[96];
    int r = rq_fields(c, m, field, message_fields, ARRAY_SIZE(message_fields), cm);

    (void)i;
    (void)ctx;
    content = jsonx_get(m, "content");
    snprintf(f, sizeof(f), "%s.content", field);
    if (r < 0 || !content)
        return r;
    if (json_object_is_type(content, json_type_string))
        return text_content(c, content, f, cm);
    if (!json_object_is_type(content, json_type_array))
        return rq_fail(c, "%s: expected a string or an array of content blocks", f);
    if (json_object_array_length(content) > 1024)
        return rq_fail(c, "%s: more than 1024 content blocks", f);
    return rq_each(c, content, f, sizeof(struct content_block), (void **)&cm->blocks,
                   &cm->nblocks, content_block, NULL);
}

static int parse_messages(struct rq_ctx *c, json_object *arr, struct run_request *req)
{
    return rq_each(c, arr, "messages", sizeof(struct chat_message), (void **)&req->messages,
                   &req->nmessages, message, NULL);
}

static bool traceparent_ok(const char *s)
{
    /* version "-" 32 hex trace id "-" 16 hex parent id "-" 2 hex flags */
    static const int groups[] = {2, 32, 16, 2};
    const char *p = s;

    for (size_t g = 0; g < ARRAY_SIZE(groups); g++) {
        for (int i = 0; i < groups[g]; i++, p++)
            if (!isxdigit((unsigned char)*p) || isupper((unsigned char)*p))
                return false;
        if (g + 1 < ARRAY_SIZE(groups) && *p++ != '-')
            return false;
    }
    return *p == '\0';
}

/* "pi_core, pi_agenta, ..." from the harness registry (the test agent left out). */
static const char *accepted_harnesses(void)
{
    static __thread char list[256];
    size_t n = 0;

    list[0] = '\0';
    for (size_t i = 0; i < harness_wire_count(); i++) {
        enum harness_kind kind;
        const char *name = harness_wire_name(i, &kind);
        int w;

        if (kind == HARNESS_SCRIPTED)
            continue;
        w = snprintf(list + n, sizeof(list) - n, "%s%s", n ? ", " : "", name);
        if (w < 0 || (size_t)w >= sizeof(list) - n)
            break;
        n += (size_t)w;
    }
    return list;
}

static int parse_harness(struct rq_ctx *c, json_object *root, struct run_request *req)
{
    const char *h;
    int r = rq_string(c, root, "harness", "harness", 64, &h);

    if (r < 0)
        return r;
    if (!h || !h[0])
        h = "pi_core";
    req->harness_name = h;
    if (harness_lookup(h, c->lim->allow_scripted, &req->harness) == 0)
        return 0;
    return rq_fail(c, "harness: unsupported value \"%.64s\" (expected %s)", h,
                   accepted_harnesses());
}

static int parse_legacy(struct rq_ctx *c, json_object *root)
{
    static const char *const legacy[] = {"secrets", "provider", "deployment", "credentialMode",
                                         "endpoint"};
    char names[128] = "";
    size_t off = 0;

    for (size_t i = 0; i < ARRAY_SIZE(legacy); i++) {
        json_object *v;
        if (!json_object_object_get_ex(root, legacy[i], &v))
            continue;
        off += (size_t)snprintf(names + off, sizeof(names) - off, "%s%s", off ? ", " : "",
                                legacy[i]);
    }
    if (off == 0)
        return 0;
    return rq_fail(c, "Legacy top-level model credential fields are not supported (%s); send the "
                   "resolved modelConnection object.",
                names);
}

static const char *const codex_modes[] = {"agent", "read-only", "agent-full-access", NULL};

static int check_model(struct rq_ctx *c, const char *field, void *dst)
{
    const struct run_request *req = dst;

    if (req->model && (rq_has_control(req->model) || !req->model[0]))
        return rq_fail(c, "%s: must be a non-empty name", field);
    return 0;
}

/* The root's plain members, read in this order. */
static const struct rq_field root_texts[] = {
    {.key = "agentsMd", .kind = RQ_STRING, .max = REQUEST_TEXT_MAX,
     .offset = offsetof(struct run_request, agents_md)},
    {.key = "systemPrompt", .kind = RQ_STRING, .max = REQUEST_TEXT_MAX,
     .offset = offsetof(struct run_request, system_prompt)},
    {.key = "appendSystemPrompt", .kind = RQ_STRING, .max = REQUEST_TEXT_MAX,
     .offset = offsetof(struct run_request, append_system_prompt)},
    {.key = "model", .kind = RQ_STRING, .max = 256, .offset = offsetof(struct run_request, model),
     .check = check_model},
    {.key = "harnessMode", .kind = RQ_ENUM, .offset = offsetof(struct run_request, harness_mode),
     .set = codex_modes, .expected = "agent, read-only, agent-full-access"},
};

static int parse_sandbox(struct rq_ctx *c, json_object *root, struct run_request *req)
{
    int r = rq_string(c, root, "sandbox", "sandbox", 64, &req->sandbox);

    if (r < 0)
        return r;
    if (!req->sandbox || !req->sandbox[0])
        req->sandbox = provider_at(0)->name; /* the first registered provider: local */
    if (provider_known(req->sandbox) && !provider_get(req->sandbox))
        return rq_fail(c, "sandbox: provider \"%.64s\" is not enabled on this runner",
                       req->sandbox);
    if (!provider_get(req->sandbox))
        return rq_fail(c, "sandbox: unsupported value \"%.64s\" (expected %s)", req->sandbox,
                       provider_at(0)->name);
    return 0;
}

static int parse_connection(struct rq_ctx *c, json_object *o, struct run_request *req)
{
    int r;

    if ((r = rq_string(c, o, "mode", "connection.mode", 64, &req->connection_mode)) < 0 ||
        (r = rq_string(c, o, "slug", "connection.slug", 64, &req->connection_slug)) < 0)
        return r;
    if (req->connection_slug && !rq_tool_name_ok(req->connection_slug))
        return rq_fail(c, "connection.slug: must be 1-64 letters, digits, '_' or '-'");
    return 0;
}

static int section_model_connection(struct rq_ctx *c, json_object *o, struct run_request *req)
{
    return parse_model_connection(c, o, &req->mc);
}

static int section_permissions(struct rq_ctx *c, json_object *o, struct run_request *req)
{
    (void)req;
    return rq_permissions(c, o);
}

static int section_telemetry(struct rq_ctx *c, json_object *o, struct run_request *req)
{
    (void)req;
    return rq_telemetry(c, o);
}

static int section_context(struct rq_ctx *c, json_object *o, struct run_request *req)
{
    json_object *prop;
    int r = rq_object(c, o, "propagation", "context.propagation", &prop);

    if (r < 0)
        return r;
    r = rq_string(c, prop, "traceparent", "context.propagation.traceparent", 128,
                  &req->traceparent);
    if (r < 0)
        return r;
    if (req->traceparent && !traceparent_ok(req->traceparent))
        return rq_fail(c, "context.propagation.traceparent: not a W3C traceparent");
    return 0;
}

/* runContext.project.id wins over projectId (blank or with control characters: ignored). */
static int section_run_context(struct rq_ctx *c, json_object *o, struct run_request *req)
{
    json_object *proj = jsonx_get(o, "project");
    const char *project = NULL;
    int r;

    if (proj && !json_object_is_type(proj, json_type_object))
        return rq_fail(c, "runContext.project: expected an object");
    r = rq_string(c, proj, "id", "runContext.project.id", ID_MAX, &project);
    if (r < 0)
        return r;
    if (project && !rq_has_control(project) && project[0])
        req->project_id = project;
    return 0;
}

/*
 * The root's sections, in the order they are checked: an array or object member, where the
 * borrowed value is kept in the request (or RQ_NOWHERE), and its parser. max 0 on an array:
 * the request limits' max_messages.
 */
static const struct section {
    const char *key;
    enum rq_kind kind;
    size_t max;
    size_t offset;
    int (*parse)(struct rq_ctx *c, json_object *o, struct run_request *req);
} sections[] = {
    {"connection", RQ_OBJECT, 0, RQ_NOWHERE, parse_connection},
    {"modelConnection", RQ_OBJECT, 0, RQ_NOWHERE, section_model_connection},
    {"messages", RQ_ARRAY, 0, RQ_NOWHERE, parse_messages},
    {"harnessFiles", RQ_ARRAY, HARNESS_FILES_MAX, RQ_NOWHERE, rq_harness_files},
    {"skills", RQ_ARRAY, SKILLS_MAX, RQ_NOWHERE, rq_skills},
    {"customTools", RQ_ARRAY, TOOLS_MAX, offsetof(struct run_request, custom_tools),
     rq_custom_tools},
    {"mcpServers", RQ_ARRAY, MCP_SERVERS_MAX, offsetof(struct run_request, mcp_servers),
     rq_mcp_servers},
    {"toolCallback", RQ_OBJECT, 0, RQ_NOWHERE, rq_tool_callback},
    {"permissions", RQ_OBJECT, 0, offsetof(struct run_request, permissions), section_permissions},
    {"sandboxPermission", RQ_OBJECT, 0, RQ_NOWHERE, rq_sandbox_permission},
    {"lifecycle", RQ_OBJECT, 0, RQ_NOWHERE, rq_lifecycle},
    {"modelGateway", RQ_OBJECT, 0, RQ_NOWHERE, rq_model_gateway},
    {"telemetry", RQ_OBJECT, 0, offsetof(struct run_request, telemetry), section_telemetry},
    {"context", RQ_OBJECT, 0, RQ_NOWHERE, section_context},
    {"runContext", RQ_OBJECT, 0, offsetof(struct run_request, run_context), section_run_context},
};

static int parse_sections(struct rq_ctx *c, json_object *root, struct run_request *req)
{
    int r = 0;

    req->network_strict = true;
    for (size_t i = 0; i < ARRAY_SIZE(sections) && r == 0; i++) {
        const struct section *s = &sections[i];
        json_object *v;

        if (s->kind == RQ_ARRAY)
            r = rq_array(c, root, s->key, s->key, s->max ? s->max : c->lim->max_messages, &v);
        else
            r = rq_object(c, root, s->key, s->key, &v);
        if (r < 0)
            break;
        if (s->offset != RQ_NOWHERE)
            memcpy((char *)req + s->offset, &v, sizeof(v));
        if (v)
            r = s->parse(c, v, req);
    }
    return r;
}

static int parse_root(struct rq_ctx *c, json_object *root, struct run_request *req)
{
    int r;

    if ((r = parse_legacy(c, root)) < 0 || (r = parse_harness(c, root, req)) < 0 ||
        (r = parse_sandbox(c, root, req)) < 0)
        return r;
    if ((r = rq_id(c, root, "sessionId", &req->session_id)) < 0 ||
        (r = rq_id(c, root, "turnId", &req->turn_id)) < 0 ||
        (r = rq_id(c, root, "projectId", &req->project_id)) < 0)
        return r;
    r = rq_fields(c, root, "", root_texts, ARRAY_SIZE(root_texts), req);
    if (r == 0)
        r = rq_bool(c, root, "detached", "detached", &req->detached);
    if (r == 0)
        r = parse_sections(c, root, req);
    if (r < 0)
        return r;
    if (req->project_id && strchr(req->project_id, ':'))
        return rq_fail(c, "projectId: must not contain ':'");
    /* the tools' second pass: what needs more than one section, or the other sections read */
    return rq_tools_check(c, req);
}

int request_parse(const char *body, size_t len, const struct request_limits *lim,
                  struct run_request *ret, char *err, size_t errlen)
{
    struct rq_ctx c = {.err = err, .errlen = errlen, .lim = lim};
    struct run_request req;
    json_object *root = NULL;
    char jerr[128];
    size_t i;
    int r;

    memset(&req, 0, sizeof(req));
    for (i = 0; i < len; i++)
        if (body[i] != ' ' && body[i] != '\n' && body[i] != '\r' && body[i] != '\t')
            break;
    if (i == len) {
        root = json_object_new_object();
        if (!root)
            return -ENOMEM;
    } else {
        /* the depth is the tokener's to refuse (an "Invalid JSON" like any parse error) */
        r = jsonx_check_budget(body, len, lim->max_elements, INT_MAX, jerr, sizeof(jerr));
        if (r < 0) {
            snprintf(err, errlen, "request body: %s", jerr);
            return AR_E_INVALID_REQUEST;
        }
        r = jsonx_parse(body, len, JSONX_DEFAULT_DEPTH, &root, jerr, sizeof(jerr));
        if (r < 0) {
            snprintf(err, errlen, "Invalid JSON: %s", jerr);
            return r;
        }
    }
    if (!root || !json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        snprintf(err, errlen, "request: expected a JSON object");
        return AR_E_INVALID_REQUEST;
    }
    req.root = root;
    req.body = body;
    req.body_len = len;
    r = parse_root(&c, root, &req);
    if (r < 0) {
        if (r == -ENOMEM)
            snprintf(err, errlen, "out of memory");
        run_request_release(&req);
        return r;
    }
    if (!req.turn_id) {
        r = util_random_uuid(req.turn_id_buf);
        if (r < 0) {
            run_request_release(&req);
            return r;
        }
        req.turn_id = req.turn_id_buf;
    }
    *ret = req;
    /* turn_id may point into the struct itself */
    if (ret->turn_id == req.turn_id_buf)
        ret->turn_id = ret->turn_id_buf;
    return 0;
}

int request_parse_session_ref(const char *body, size_t len, struct session_ref *ret, char *err,
                              size_t errlen)
{
    struct request_limits lim;
    struct rq_ctx c = {.err = err, .errlen = errlen, .lim = &lim};
    struct session_ref ref;
    json_object *root = NULL;
    const char *sid, *pid, *tid;
    char jerr[128];
    int r;

    request_limits_default(&lim);
    memset(&ref, 0, sizeof(ref));
    r = jsonx_check_budget(body, len, 64, INT_MAX, jerr, sizeof(jerr));
    if (r < 0) {
        snprintf(err, errlen, "request body: %s", jerr);
        return AR_E_INVALID_REQUEST;
    }
    r = jsonx_parse(body, len, 8, &root, jerr, sizeof(jerr));
    if (r < 0) {
        snprintf(err, errlen, "Invalid JSON: %s", jerr);
        return r;
    }
    if (!root || !json_object_is_type(root, json_type_object)) {
        r = rq_fail(&c, "request: expected a JSON object");
        goto out;
    }
    if ((r = rq_id(&c, root, "sessionId", &sid)) < 0 ||
        (r = rq_id(&c, root, "projectId", &pid)) < 0 ||
        (r = rq_id(&c, root, "targetTurnId", &tid)) < 0)
        goto out;
    if (!sid) {
        r = rq_fail(&c, "sessionId: required non-empty string");
        goto out;
    }
    if (!pid) {
        r = rq_fail(&c, "projectId: required non-empty string");
        goto out;
    }
    if (strchr(pid, ':')) {
        r = rq_fail(&c, "projectId: must not contain ':'");
        goto out;
    }
    snprintf(ref.session_id, sizeof(ref.session_id), "%s", sid);
    snprintf(ref.project_id, sizeof(ref.project_id), "%s", pid);
    if (tid)
        snprintf(ref.target_turn_id, sizeof(ref.target_turn_id), "%s", tid);
    r = rq_bool(&c, root, "environmentOnly", "environmentOnly", &ref.environment_only);
    if (r < 0)
        goto out;
    *ret = ref;
    r = 0;
out:
    json_object_put(root);
    return r;
}
