/*
 * fuzz_request — request_parse() and request_parse_session_ref() on raw request bodies.
 *
 * The input is the HTTP body as nginx hands it over. Properties checked besides memory safety
 * and leaks:
 *   - a refusal returns -EBADMSG or AR_E_INVALID_REQUEST (or -ENOMEM) with a non-empty,
 *     NUL-terminated message that never quotes a credential value;
 *   - allow_scripted only widens what is accepted: the parse without it succeeds exactly when
 *     the parse with it succeeds on a harness other than the scripted one;
 *   - tighter limits only refuse more;
 *   - an accepted request satisfies the invariants the engine relies on (ids bounded and free
 *     of control characters, relative workspace paths, a turn id, a known harness), and its
 *     tools (customTools, mcpServers, toolCallback) are checked in full: each typed tool and
 *     server holds what its consumers assume, the tool set builds from them (tool_set_new
 *     cannot refuse) and the config fingerprint is computed (it cannot fail on a parse);
 *   - a refusal quotes no MCP credential or header value either;
 *   - request_parse_session_ref writes its result only on success, and then with a non-empty
 *     session id and a project id without ':'.
 */
#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "base/jsonx.h"
#include "fuzz.h"
#include "request/request.h"
#include "session/identity.h"
#include "tools/tool_spec.h"

#define ERR_SIZE 256
#define SECRET_MIN 12

static void check_err(int r, const char *err)
{
    if (r == 0)
        return;
    FUZZ_CHECK(memchr(err, '\0', ERR_SIZE) != NULL);
    FUZZ_CHECK(r == -EBADMSG || r == AR_E_INVALID_REQUEST || r == -ENOMEM);
    FUZZ_CHECK(err[0] != '\0');
}

static bool no_control(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return false;
    return true;
}

static bool id_ok(const char *s)
{
    return !s || (s[0] && strlen(s) <= 128 && no_control(s));
}

/* A relative path without "", "." or ".." components, as the workspace writers expect. */
static bool relative_path_ok(const char *p)
{
    const char *s = p;

    if (!p[0] || p[0] == '/' || strchr(p, '\\') || !no_control(p))
        return false;
    while (*s) {
        size_t n = strcspn(s, "/");

        if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
            return false;
        s += n;
        if (*s == '/' && !*++s)
            return false;
    }
    return true;
}

static void check_block(const struct content_block *b)
{
    FUZZ_CHECK(b->type_name != NULL);
    FUZZ_CHECK(b->type <= BLOCK_OTHER);
    /* touch every borrowed string: a dangling one shows up under a sanitizer */
    if (b->text)
        (void)strlen(b->text);
    if (b->data)
        (void)strlen(b->data);
    if (b->mime_type)
        (void)strlen(b->mime_type);
    if (b->uri)
        (void)strlen(b->uri);
    if (b->tool_name)
        (void)strlen(b->tool_name);
    if (b->type == BLOCK_TEXT)
        FUZZ_CHECK(b->text != NULL);
    if (b->type == BLOCK_TOOL_CALL || b->type == BLOCK_TOOL_RESULT)
        FUZZ_CHECK(b->tool_call_id != NULL);
}

static bool tool_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;

    if (n == 0 || n > TOOL_NAME_MAX || strcmp(s, RUN_TOOLS_MCP_NAME) == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

static void check_custom_tool(const struct run_tools *tools, size_t i)
{
    const struct custom_tool *t = &tools->custom[i];

    FUZZ_CHECK(tool_name_ok(t->name));
    for (size_t j = 0; j < i; j++)
        FUZZ_CHECK(strcmp(tools->custom[j].name, t->name) != 0);
    FUZZ_CHECK(t->exec != TOOL_EXEC_MCP); /* only a listed MCP tool is run by its server */
    switch (t->exec) {
    case TOOL_EXEC_CALLBACK:
        FUZZ_CHECK(t->call_ref && t->call_ref[0] && !t->call && tools->callback_endpoint);
        break;
    case TOOL_EXEC_DIRECT:
        FUZZ_CHECK(!t->call_ref && t->call && tools->callback_endpoint);
        FUZZ_CHECK(json_object_is_type(t->call, json_type_object));
        FUZZ_CHECK(jsonx_str(t->call, "path") && jsonx_str(t->call, "path")[0] == '/');
        break;
    case TOOL_EXEC_CLIENT:
        FUZZ_CHECK(!t->call_ref && !t->call);
        break;
    case TOOL_EXEC_MCP:
        break;
    }
    FUZZ_CHECK(t->read_only >= -1 && t->read_only <= 1);
    FUZZ_CHECK(t->timeout_ms <= TOOL_TIMEOUT_MAX_MS);
    FUZZ_CHECK(t->permission >= PERMISSION_UNSET && t->permission <= PERMISSION_DENY);
    FUZZ_CHECK(!t->input_schema || json_object_is_type(t->input_schema, json_type_object));
    FUZZ_CHECK(!t->render || json_object_is_type(t->render, json_type_object));
    FUZZ_CHECK(!t->ephemeral_args || json_object_is_type(t->ephemeral_args, json_type_array));
    if (t->context_bindings) {
        json_object_object_foreach(t->context_bindings, path, token)
        {
            FUZZ_CHECK(run_tools_path_ok(path));
            FUZZ_CHECK(run_tools_ctx_token_ok(json_object_get_string(token)));
        }
    }
}

static void check_mcp_server(const struct run_tools *tools, size_t i)
{
    const struct mcp_server *sv = &tools->servers[i];

    FUZZ_CHECK(tool_name_ok(sv->name));
    for (size_t j = 0; j < i; j++)
        FUZZ_CHECK(strcmp(tools->servers[j].name, sv->name) != 0);
    FUZZ_CHECK(sv->url &&
               (strncmp(sv->url, "http://", 7) == 0 || strncmp(sv->url, "https://", 8) == 0));
    FUZZ_CHECK(!sv->include_all || !sv->include);
    FUZZ_CHECK(sv->nheaders <= MCP_SERVER_HEADERS_MAX);
    FUZZ_CHECK((sv->nheaders == 0) == (sv->headers == NULL));
    for (size_t j = 0; j < sv->nheaders; j++) {
        const struct mcp_header *h = &sv->headers[j];

        FUZZ_CHECK(h->name[0] && no_control(h->name) && !strchr(h->name, ':'));
        FUZZ_CHECK(!strpbrk(h->value, "\r\n"));
        FUZZ_CHECK(!h->secret || h->value[0]);
        for (size_t k = 0; k < j; k++)
            FUZZ_CHECK(strcasecmp(sv->headers[k].name, h->name) != 0);
    }
}

/* The typed tools, the set built from them, and the fingerprint over them. */
static void check_tools(const struct run_request *req)
{
    const struct run_tools *tools = &req->tools;
    struct tool_set *set = NULL;
    uint8_t fp[IDENTITY_DIGEST_LEN];
    struct buf pub;
    int r;

    FUZZ_CHECK((tools->ncustom == 0) == (tools->custom == NULL));
    FUZZ_CHECK((tools->nservers == 0) == (tools->servers == NULL));
    FUZZ_CHECK(tools->ncustom ==
               (req->custom_tools ? json_object_array_length(req->custom_tools) : 0));
    FUZZ_CHECK(tools->nservers ==
               (req->mcp_servers ? json_object_array_length(req->mcp_servers) : 0));
    FUZZ_CHECK(!tools->callback_endpoint == !jsonx_get(req->root, "toolCallback"));
    for (size_t i = 0; i < tools->ncustom; i++)
        check_custom_tool(tools, i);
    for (size_t i = 0; i < tools->nservers; i++)
        check_mcp_server(tools, i);
    r = tool_set_new(tools, &set);
    FUZZ_CHECK(r == 0 || r == -ENOMEM);
    if (r == 0) {
        FUZZ_CHECK(set->ntools == tools->ncustom && set->nservers == tools->nservers);
        for (size_t i = 0; i < tools->ncustom; i++)
            FUZZ_CHECK(tool_set_find(set, tools->custom[i].name) == &set->tools[i]);
        buf_init(&pub, TOOL_PUBLIC_MAX);
        r = tool_set_public_json(set, &pub);
        FUZZ_CHECK(r == 0 || r == -ENOMEM || r == -E2BIG);
        buf_release(&pub);
        tool_set_free(set);
    }
    r = identity_config_fp(req, fp);
    FUZZ_CHECK(r == 0 || r == -ENOMEM);
}

static void check_request(const struct run_request *req, const struct request_limits *lim)
{
    struct buf prompt;

    FUZZ_CHECK(req->root && json_object_is_type(req->root, json_type_object));
    FUZZ_CHECK(req->harness_name != NULL);
    FUZZ_CHECK(req->harness < HARNESS_COUNT);
    FUZZ_CHECK(req->harness != HARNESS_SCRIPTED || lim->allow_scripted);
    FUZZ_CHECK(req->sandbox && strcmp(req->sandbox, "local") == 0);
    FUZZ_CHECK(req->turn_id && id_ok(req->turn_id));
    FUZZ_CHECK(id_ok(req->session_id));
    FUZZ_CHECK(id_ok(req->project_id));
    FUZZ_CHECK(!req->project_id || !strchr(req->project_id, ':'));
    FUZZ_CHECK(!req->model || (req->model[0] && no_control(req->model)));
    FUZZ_CHECK(!req->traceparent || strlen(req->traceparent) == 55);
    FUZZ_CHECK(req->lifecycle_idle_ms <= 24ull * 3600 * 1000);
    FUZZ_CHECK(req->nmessages <= lim->max_messages);
    FUZZ_CHECK((req->nmessages == 0) == (req->messages == NULL));
    for (size_t i = 0; i < req->nmessages; i++) {
        const struct chat_message *m = &req->messages[i];

        FUZZ_CHECK(m->role != NULL);
        FUZZ_CHECK(m->nblocks == 0 || m->blocks != NULL);
        for (size_t j = 0; j < m->nblocks; j++)
            check_block(&m->blocks[j]);
    }
    for (size_t i = 0; i < req->nharness_files; i++) {
        FUZZ_CHECK(relative_path_ok(req->harness_files[i].path));
        FUZZ_CHECK(req->harness_files[i].content != NULL);
    }
    for (size_t i = 0; i < req->nskills; i++) {
        const struct skill *sk = &req->skills[i];

        FUZZ_CHECK(sk->name && sk->name[0] && sk->description && sk->body);
        for (size_t j = 0; j < sk->nfiles; j++) {
            FUZZ_CHECK(relative_path_ok(sk->files[j].path));
            FUZZ_CHECK(sk->files[j].content != NULL);
            FUZZ_CHECK(!sk->files[j].executable || sk->allow_executable_files);
        }
    }
    if (req->mc.present) {
        FUZZ_CHECK(req->mc.provider && req->mc.provider[0]);
        FUZZ_CHECK(req->mc.deployment && req->mc.deployment[0]);
        FUZZ_CHECK((req->mc.ncredentials > 0) == (req->mc.credential_mode == CREDENTIAL_MODE_ENV));
        for (size_t i = 0; i < req->mc.ncredentials; i++) {
            const struct credential *c = &req->mc.credentials[i];

            FUZZ_CHECK(c->name && c->name[0] && strncmp(c->name, "LD_", 3) != 0);
            FUZZ_CHECK(c->value && c->value[0] && no_control(c->value));
        }
        for (size_t i = 0; i < req->mc.nenvironment; i++)
            FUZZ_CHECK(req->mc.environment[i].name[0] && req->mc.environment[i].value[0]);
        for (size_t i = 0; i < req->mc.nheaders; i++)
            FUZZ_CHECK(req->mc.headers[i].name[0] && req->mc.headers[i].value);
    }
    check_tools(req);
    buf_init(&prompt, 64u * 1024 * 1024);
    (void)run_request_prompt_text(req, &prompt);
    buf_release(&prompt);
}

static size_t count_occurrences(const uint8_t *data, size_t size, const char *s)
{
    size_t n = 0, len = strlen(s);
    const uint8_t *p = data, *end = data + size;

    while ((size_t)(end - p) >= len) {
        const uint8_t *hit = memmem(p, (size_t)(end - p), s, len);

        if (!hit)
            break;
        n++;
        p = hit + 1;
    }
    return n;
}

/*
 * A refusal must not quote a credential. To keep the oracle free of false alarms, only values
 * that look like keys (letters and digits, SECRET_MIN or more, two digits at least) and appear
 * exactly once in a body without \u escapes are checked: then no other field can carry the same
 * text into the message.
 */
static void check_secret_absent(const uint8_t *data, size_t size, const char *err,
                                const char *value)
{
    size_t n = value ? strlen(value) : 0, digits = 0;

    if (n < SECRET_MIN)
        return;
    for (size_t i = 0; i < n; i++) {
        if (!isalnum((unsigned char)value[i]))
            return;
        if (isdigit((unsigned char)value[i]))
            digits++;
    }
    if (digits < 2 || count_occurrences(data, size, value) != 1)
        return;
    FUZZ_CHECK(strstr(err, value) == NULL);
}

/* No MCP server's header value or credential value in a refusal. */
static void check_mcp_secrets(const uint8_t *data, size_t size, const char *err,
                              json_object *servers)
{
    for (size_t i = 0; servers && json_object_is_type(servers, json_type_array) &&
                       i < json_object_array_length(servers);
         i++) {
        json_object *conn = jsonx_get(json_object_array_get_idx(servers, i), "connection");
        json_object *headers = jsonx_get(conn, "headers"), *creds = jsonx_get(conn, "credentials");

        if (headers && json_object_is_type(headers, json_type_object)) {
            json_object_object_foreach(headers, key, val)
            {
                (void)key;
                if (val && json_object_is_type(val, json_type_string))
                    check_secret_absent(data, size, err, json_object_get_string(val));
            }
        }
        for (size_t j = 0; creds && json_object_is_type(creds, json_type_array) &&
                           j < json_object_array_length(creds);
             j++)
            check_secret_absent(data, size, err,
                                jsonx_str(json_object_array_get_idx(creds, j), "value"));
    }
}

static void check_redaction(const uint8_t *data, size_t size, const char *err)
{
    json_object *root, *creds, *headers;
    char jerr[128];

    if (memmem(data, size, "\\u", 2))
        return;
    if (jsonx_parse((const char *)data, size, JSONX_DEFAULT_DEPTH, &root, jerr, sizeof(jerr)) < 0)
        return;
    creds = jsonx_path(root, "modelConnection.credentials");
    if (creds && json_object_is_type(creds, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(creds); i++)
            check_secret_absent(data, size, err,
                                jsonx_str(json_object_array_get_idx(creds, i), "value"));
    }
    headers = jsonx_path(root, "modelConnection.endpoint.headers");
    if (headers && json_object_is_type(headers, json_type_object)) {
        json_object_object_foreach(headers, key, val)
        {
            (void)key;
            if (val && json_object_is_type(val, json_type_string))
                check_secret_absent(data, size, err, json_object_get_string(val));
        }
    }
    check_secret_absent(data, size, err,
                        jsonx_str(jsonx_get(root, "toolCallback"), "authorization"));
    check_mcp_secrets(data, size, err, jsonx_get(root, "mcpServers"));
    json_object_put(root);
}

static int parse(const uint8_t *data, size_t size, const struct request_limits *lim,
                 struct run_request *req)
{
    char err[ERR_SIZE];
    int r;

    memset(err, 'x', sizeof(err));
    r = request_parse((const char *)data, size, lim, req, err, sizeof(err));
    check_err(r, err);
    if (r < 0)
        check_redaction(data, size, err);
    else
        check_request(req, lim);
    return r;
}

static void fuzz_session_ref(const uint8_t *data, size_t size)
{
    struct session_ref ref, untouched;
    char err[ERR_SIZE];
    int r;

    memset(&ref, 0x5a, sizeof(ref));
    memset(&untouched, 0x5a, sizeof(untouched));
    memset(err, 'x', sizeof(err));
    r = request_parse_session_ref((const char *)data, size, &ref, err, sizeof(err));
    check_err(r, err);
    if (r < 0) {
        FUZZ_CHECK(memcmp(&ref, &untouched, sizeof(ref)) == 0);
        return;
    }
    FUZZ_CHECK(memchr(ref.session_id, '\0', sizeof(ref.session_id)) != NULL);
    FUZZ_CHECK(memchr(ref.project_id, '\0', sizeof(ref.project_id)) != NULL);
    FUZZ_CHECK(memchr(ref.target_turn_id, '\0', sizeof(ref.target_turn_id)) != NULL);
    FUZZ_CHECK(id_ok(ref.session_id) && ref.session_id[0]);
    FUZZ_CHECK(id_ok(ref.project_id) && ref.project_id[0]);
    FUZZ_CHECK(!strchr(ref.project_id, ':'));
    FUZZ_CHECK(!ref.target_turn_id[0] || id_ok(ref.target_turn_id));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct request_limits lim, tight;
    struct run_request strict, wide, small;
    int r_strict, r_wide, r_small;

    request_limits_default(&lim);
    lim.allow_scripted = false;
    r_strict = parse(data, size, &lim, &strict);
    lim.allow_scripted = true;
    r_wide = parse(data, size, &lim, &wide);
    FUZZ_CHECK((r_strict == 0) == (r_wide == 0 && wide.harness != HARNESS_SCRIPTED));

    tight = lim;
    tight.max_messages = 2;
    tight.max_string = 16;
    r_small = parse(data, size, &tight, &small);
    FUZZ_CHECK(r_small < 0 || r_wide == 0);

    if (r_strict == 0)
        run_request_release(&strict);
    if (r_wide == 0)
        run_request_release(&wide);
    if (r_small == 0)
        run_request_release(&small);

    fuzz_session_ref(data, size);
    return 0;
}
