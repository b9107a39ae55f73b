#include "request.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"
#include "jsonx.h"
#include "provider/provider.h"
#include "util.h"

#define ID_MAX 128
#define NAME_MAX_LEN 256
#define HARNESS_FILES_MAX 64
#define HARNESS_FILE_MAX (1024 * 1024)
#define SKILLS_MAX 64
#define SKILL_FILES_MAX 64
#define SKILL_NAME_MAX 64
#define SKILL_DESCRIPTION_MAX 1024 /* code points */
#define SKILL_BODY_MAX 50000
#define SKILL_PATH_MAX 255
#define SKILL_CONTENT_MAX 200000
#define CREDENTIALS_MAX 32
#define TOOLS_MAX 128
#define MCP_SERVERS_MAX 32
#define RULES_MAX 256
#define LIFECYCLE_IDLE_MAX (24ull * 3600 * 1000)

struct pctx {
    char *err;
    size_t errlen;
    const struct request_limits *lim;
};

static int fail(struct pctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct pctx *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    return AR_E_INVALID_REQUEST;
}

void request_limits_default(struct request_limits *lim)
{
    lim->max_messages = 10000;
    lim->max_string = 4u * 1024 * 1024;
    lim->allow_scripted = false;
}

static const char *type_word(json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_null:
        return "null";
    case json_type_boolean:
        return "a boolean";
    case json_type_double:
    case json_type_int:
        return "a number";
    case json_type_string:
        return "a string";
    case json_type_array:
        return "an array";
    case json_type_object:
        return "an object";
    }
    return "a value";
}

/* Optional string member: absent or null -> *ret = NULL. */
static int opt_string(struct pctx *c, json_object *o, const char *key, const char *field,
                      size_t max, const char **ret)
{
    json_object *v = jsonx_get(o, key);
    size_t n;

    *ret = NULL;
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_string))
        return fail(c, "%s: expected a string, got %s", field, type_word(v));
    n = (size_t)json_object_get_string_len(v);
    if (n > max)
        return fail(c, "%s: longer than %zu bytes", field, max);
    if (memchr(json_object_get_string(v), '\0', n))
        return fail(c, "%s: contains a NUL character", field);
    *ret = json_object_get_string(v);
    return 0;
}

static int opt_object(struct pctx *c, json_object *o, const char *key, const char *field,
                      json_object **ret)
{
    json_object *v = jsonx_get(o, key);

    *ret = NULL;
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_object))
        return fail(c, "%s: expected an object, got %s", field, type_word(v));
    *ret = v;
    return 0;
}

static int opt_array(struct pctx *c, json_object *o, const char *key, const char *field,
                     size_t max, json_object **ret)
{
    json_object *v = jsonx_get(o, key);

    *ret = NULL;
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_array))
        return fail(c, "%s: expected an array, got %s", field, type_word(v));
    if (json_object_array_length(v) > max)
        return fail(c, "%s: more than %zu entries", field, max);
    *ret = v;
    return 0;
}

static int opt_bool(struct pctx *c, json_object *o, const char *key, const char *field, bool *ret)
{
    json_object *v = jsonx_get(o, key);

    *ret = false;
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_boolean))
        return fail(c, "%s: expected a boolean, got %s", field, type_word(v));
    *ret = json_object_get_boolean(v);
    return 0;
}

static bool one_of(const char *s, const char *const *set)
{
    for (; *set; set++)
        if (strcmp(s, *set) == 0)
            return true;
    return false;
}

static int enum_string(struct pctx *c, json_object *o, const char *key, const char *field,
                       const char *const *set, const char *expected, const char **ret)
{
    const char *s;
    int r = opt_string(c, o, key, field, NAME_MAX_LEN, &s);

    if (r < 0)
        return r;
    if (s && !one_of(s, set))
        return fail(c, "%s: unsupported value \"%.64s\" (expected %s)", field, s, expected);
    *ret = s;
    return 0;
}

static bool has_control(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return true;
    return false;
}

static int id_string(struct pctx *c, json_object *o, const char *key, const char **ret)
{
    const char *s;
    int r = opt_string(c, o, key, key, ID_MAX, &s);

    if (r < 0)
        return r;
    /* blank ids (whitespace only, as String.trim() sees it) count as absent, as in Agenta's
     * runner; checked before control characters, which tabs and newlines also are */
    if (s && !s[strspn(s, " \t\r\n\v\f")])
        s = NULL;
    if (s && has_control(s))
        return fail(c, "%s: contains control characters", key);
    *ret = s;
    return 0;
}

/* Environment variable names a request may bind: upper-case identifiers outside a denylist. */
static bool env_name_ok(const char *name)
{
    static const char *const reserved[] = {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "TMPDIR", "LANG", "TERM",
        "NODE_OPTIONS", "NODE_PATH", "NODE_EXTRA_CA_CERTS", "BASH_ENV", "ENV", "IS_SANDBOX",
        "PI_CODING_AGENT_DIR", "PI_OFFLINE", "CODEX_HOME", "CLAUDE_CONFIG_DIR",
        "AGENT_RUNNER_TOKEN", "HOSTNAME", "SSL_CERT_FILE", "SSL_CERT_DIR", NULL};
    size_t n = strlen(name);

    if (n == 0 || n > 128 || !(isupper((unsigned char)name[0]) || name[0] == '_'))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isupper((unsigned char)name[i]) && !isdigit((unsigned char)name[i]) &&
            name[i] != '_')
            return false;
    if (strncmp(name, "LD_", 3) == 0 || strncmp(name, "AGENT_RUNNER_", 13) == 0 ||
        strncmp(name, "GLIBC_", 6) == 0)
        return false;
    return !one_of(name, reserved);
}

bool request_host_is_loopback(const char *host)
{
    if (strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0 ||
        strcmp(host, "[::1]") == 0)
        return true;
    /* 127.0.0.0/8 */
    if (strncmp(host, "127.", 4) == 0) {
        int dots = 0;
        for (const char *p = host; *p; p++) {
            if (*p == '.')
                dots++;
            else if (!isdigit((unsigned char)*p))
                return false;
        }
        return dots == 3;
    }
    return false;
}

int request_parse_url(const char *url, char *scheme, size_t schemelen, char *host, size_t hostlen,
                      unsigned *ret_port)
{
    const char *p, *hend, *aend;
    unsigned port;
    size_t n;

    if (strncmp(url, "https://", 8) == 0) {
        snprintf(scheme, schemelen, "https");
        p = url + 8;
        port = 443;
    } else if (strncmp(url, "http://", 7) == 0) {
        snprintf(scheme, schemelen, "http");
        p = url + 7;
        port = 80;
    } else {
        return -EINVAL;
    }
    aend = p + strcspn(p, "/?#");
    if (aend == p || memchr(p, '@', (size_t)(aend - p)))
        return -EINVAL; /* no host, or userinfo (credentials in URLs are refused) */
    if (*p == '[') {
        hend = memchr(p, ']', (size_t)(aend - p));
        if (!hend)
            return -EINVAL;
        hend++;
    } else {
        hend = memchr(p, ':', (size_t)(aend - p));
        if (!hend)
            hend = aend;
    }
    n = (size_t)(hend - p);
    if (n == 0 || n >= hostlen)
        return -EINVAL;
    memcpy(host, p, n);
    host[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (host[i] <= ' ' || host[i] == '\\' || host[i] == '%')
            return -EINVAL;
    if (hend < aend && *hend == ':') {
        char digits[8];
        uint64_t v;
        size_t dn = (size_t)(aend - hend - 1);

        if (dn == 0 || dn >= sizeof(digits))
            return -EINVAL;
        memcpy(digits, hend + 1, dn);
        digits[dn] = '\0';
        if (parse_u64(digits, 1, 65535, &v) < 0)
            return -EINVAL;
        port = (unsigned)v;
    } else if (hend != aend) {
        return -EINVAL;
    }
    *ret_port = port;
    return 0;
}

static int check_base_url(struct pctx *c, const char *field, const char *url, bool require_https)
{
    char scheme[8], host[256];
    unsigned port;

    if (request_parse_url(url, scheme, sizeof(scheme), host, sizeof(host), &port) < 0)
        return fail(c, "%s: not an http(s) URL with a host", field);
    if (strcmp(scheme, "http") == 0 && !request_host_is_loopback(host))
        return fail(c, "%s: plain http is only allowed for loopback hosts", field);
    (void)require_https;
    return 0;
}

static int parse_string_map(struct pctx *c, json_object *o, const char *field, bool env_names,
                            struct str_pair **ret, size_t *ret_n)
{
    struct str_pair *pairs;
    size_t n = 0, cap;

    *ret = NULL;
    *ret_n = 0;
    if (!o)
        return 0;
    cap = (size_t)json_object_object_length(o);
    if (cap > 256)
        return fail(c, "%s: more than 256 entries", field);
    if (cap == 0)
        return 0;
    pairs = calloc(cap, sizeof(*pairs));
    if (!pairs)
        return -ENOMEM;
    json_object_object_foreach(o, key, val)
    {
        if (!val || !json_object_is_type(val, json_type_string)) {
            free(pairs);
            return fail(c, "%s.%.64s: expected a string", field, key);
        }
        if (env_names && !env_name_ok(key)) {
            free(pairs);
            return fail(c, "%s: \"%.64s\" is not an allowed environment variable name", field,
                        key);
        }
        if (has_control(key) || strlen(key) == 0) {
            free(pairs);
            return fail(c, "%s: invalid name", field);
        }
        pairs[n].name = key;
        pairs[n].value = json_object_get_string(val);
        n++;
    }
    *ret = pairs;
    *ret_n = n;
    return 0;
}

static int parse_model_connection(struct pctx *c, json_object *o, struct model_connection *mc)
{
    static const char *const modes[] = {"env", "runtime_provided", "none", NULL};
    static const char *const usages[] = {"opaque_http", "local_use", NULL};
    json_object *endpoint, *env, *headers, *creds;
    const char *mode;
    char field[96];
    int r;

    mc->present = true;
    r = opt_string(c, o, "provider", "modelConnection.provider", NAME_MAX_LEN, &mc->provider);
    if (r < 0)
        return r;
    if (!mc->provider || !mc->provider[0])
        return fail(c, "modelConnection.provider: required");
    r = opt_string(c, o, "deployment", "modelConnection.deployment", NAME_MAX_LEN,
                   &mc->deployment);
    if (r < 0)
        return r;
    if (!mc->deployment || !mc->deployment[0])
        return fail(c, "modelConnection.deployment: required");
    r = enum_string(c, o, "credentialMode", "modelConnection.credentialMode", modes,
                    "env, runtime_provided, none", &mode);
    if (r < 0)
        return r;
    if (!mode)
        return fail(c, "modelConnection.credentialMode: required");
    mc->credential_mode = strcmp(mode, "env") == 0       ? CREDENTIAL_MODE_ENV
                          : strcmp(mode, "none") == 0    ? CREDENTIAL_MODE_NONE
                                                         : CREDENTIAL_MODE_RUNTIME;

    r = opt_object(c, o, "endpoint", "modelConnection.endpoint", &endpoint);
    if (r < 0)
        return r;
    if (endpoint) {
        r = opt_string(c, endpoint, "baseUrl", "modelConnection.endpoint.baseUrl", 2048,
                       &mc->base_url);
        if (r < 0)
            return r;
        if (mc->base_url) {
            r = check_base_url(c, "modelConnection.endpoint.baseUrl", mc->base_url, true);
            if (r < 0)
                return r;
        }
        r = opt_string(c, endpoint, "apiVersion", "modelConnection.endpoint.apiVersion",
                       NAME_MAX_LEN, &mc->api_version);
        if (r < 0)
            return r;
        r = opt_string(c, endpoint, "region", "modelConnection.endpoint.region", NAME_MAX_LEN,
                       &mc->region);
        if (r < 0)
            return r;
        r = opt_object(c, endpoint, "headers", "modelConnection.endpoint.headers", &headers);
        if (r < 0)
            return r;
        r = parse_string_map(c, headers, "modelConnection.endpoint.headers", false, &mc->headers,
                             &mc->nheaders);
        if (r < 0)
            return r;
    }
    r = opt_object(c, o, "environment", "modelConnection.environment", &env);
    if (r < 0)
        return r;
    r = parse_string_map(c, env, "modelConnection.environment", true, &mc->environment,
                         &mc->nenvironment);
    if (r < 0)
        return r;
    for (size_t i = 0; i < mc->nenvironment; i++)
        if (!mc->environment[i].value[0])
            return fail(c, "modelConnection.environment.%s: empty value",
                        mc->environment[i].name);

    r = opt_array(c, o, "credentials", "modelConnection.credentials", CREDENTIALS_MAX, &creds);
    if (r < 0)
        return r;
    mc->ncredentials = creds ? json_object_array_length(creds) : 0;
    if (mc->credential_mode == CREDENTIAL_MODE_ENV && mc->ncredentials == 0)
        return fail(c, "modelConnection.credentials: credentialMode \"env\" needs at least one "
                       "credential");
    if (mc->credential_mode != CREDENTIAL_MODE_ENV && mc->ncredentials > 0)
        return fail(c, "modelConnection.credentials: only allowed with credentialMode \"env\"");
    if (mc->ncredentials == 0)
        return 0;
    mc->credentials = calloc(mc->ncredentials, sizeof(*mc->credentials));
    if (!mc->credentials)
        return -ENOMEM;
    for (size_t i = 0; i < mc->ncredentials; i++) {
        json_object *cred = json_object_array_get_idx(creds, i), *binding;
        const char *kind, *usage;
        struct credential *cr = &mc->credentials[i];

        snprintf(field, sizeof(field), "modelConnection.credentials[%zu]", i);
        if (!cred || !json_object_is_type(cred, json_type_object))
            return fail(c, "%s: expected an object", field);
        binding = jsonx_get(cred, "binding");
        if (!binding || !json_object_is_type(binding, json_type_object))
            return fail(c, "%s.binding: expected an object", field);
        kind = jsonx_str(binding, "kind");
        if (!kind || strcmp(kind, "environment") != 0)
            return fail(c, "%s.binding.kind: must be \"environment\"", field);
        cr->name = jsonx_str(binding, "name");
        if (!cr->name || !cr->name[0])
            return fail(c, "%s.binding.name: required", field);
        if (!env_name_ok(cr->name))
            return fail(c, "%s.binding.name: \"%.64s\" is not an allowed environment variable "
                           "name",
                        field, cr->name);
        cr->value = jsonx_str(cred, "value");
        if (!cr->value || !cr->value[0])
            return fail(c, "%s.value: required non-empty string", field);
        if (strlen(cr->value) > 16384 || has_control(cr->value))
            return fail(c, "%s.value: malformed credential", field);
        usage = jsonx_str(cred, "usage");
        if (!usage || !one_of(usage, usages))
            return fail(c, "%s.usage: expected opaque_http or local_use", field);
        cr->usage = strcmp(usage, "opaque_http") == 0 ? CREDENTIAL_USAGE_OPAQUE_HTTP
                                                      : CREDENTIAL_USAGE_LOCAL_USE;
        if (cr->usage == CREDENTIAL_USAGE_OPAQUE_HTTP && !mc->base_url &&
            strcmp(mc->deployment, "custom") == 0)
            return fail(c, "%s.usage: opaque_http on a custom deployment needs "
                           "modelConnection.endpoint.baseUrl",
                        field);
        for (size_t j = 0; j < i; j++)
            if (strcmp(mc->credentials[j].name, cr->name) == 0)
                return fail(c, "%s.binding.name: duplicate binding \"%.64s\"", field, cr->name);
        for (size_t j = 0; j < mc->nenvironment; j++)
            if (strcmp(mc->environment[j].name, cr->name) == 0)
                return fail(c, "%s.binding.name: \"%.64s\" is also set in "
                               "modelConnection.environment",
                            field, cr->name);
    }
    return 0;
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

static int parse_block(struct pctx *c, json_object *o, const char *field,
                       struct content_block *b)
{
    char f[128];
    int r;

    if (!o || !json_object_is_type(o, json_type_object))
        return fail(c, "%s: expected an object", field);
    snprintf(f, sizeof(f), "%s.type", field);
    r = opt_string(c, o, "type", f, 64, &b->type_name);
    if (r < 0)
        return r;
    if (!b->type_name)
        return fail(c, "%s: required", f);
    b->type = block_type_of(b->type_name);
#define BLOCK_STR(key, member)                                                                  \
    do {                                                                                        \
        snprintf(f, sizeof(f), "%s.%s", field, key);                                            \
        r = opt_string(c, o, key, f, c->lim->max_string, &b->member);                           \
        if (r < 0)                                                                              \
            return r;                                                                           \
    } while (0)
    BLOCK_STR("text", text);
    BLOCK_STR("data", data);
    BLOCK_STR("mimeType", mime_type);
    BLOCK_STR("uri", uri);
    BLOCK_STR("toolCallId", tool_call_id);
    BLOCK_STR("toolName", tool_name);
#undef BLOCK_STR
    b->input = jsonx_get(o, "input");
    b->output = jsonx_get(o, "output");
    snprintf(f, sizeof(f), "%s.isError", field);
    r = opt_bool(c, o, "isError", f, &b->is_error);
    if (r < 0)
        return r;
    switch (b->type) {
    case BLOCK_TEXT:
        if (!b->text)
            return fail(c, "%s.text: required for a text block", field);
        break;
    case BLOCK_IMAGE:
        if (!b->data && !b->uri)
            return fail(c, "%s: an image block needs data or uri", field);
        break;
    case BLOCK_TOOL_CALL:
    case BLOCK_TOOL_RESULT:
        if (!b->tool_call_id)
            return fail(c, "%s.toolCallId: required for a %s block", field, b->type_name);
        break;
    default:
        break;
    }
    return 0;
}

static int parse_messages(struct pctx *c, json_object *arr, struct run_request *req)
{
    size_t n = json_object_array_length(arr);
    char field[96];
    int r;

    if (n == 0)
        return 0;
    req->messages = calloc(n, sizeof(*req->messages));
    if (!req->messages)
        return -ENOMEM;
    req->nmessages = n;
    for (size_t i = 0; i < n; i++) {
        json_object *m = json_object_array_get_idx(arr, i), *content;
        struct chat_message *cm = &req->messages[i];

        snprintf(field, sizeof(field), "messages[%zu]", i);
        if (!m || !json_object_is_type(m, json_type_object))
            return fail(c, "%s: expected an object", field);
        snprintf(field, sizeof(field), "messages[%zu].role", i);
        r = opt_string(c, m, "role", field, 32, &cm->role);
        if (r < 0)
            return r;
        if (!cm->role)
            return fail(c, "%s: required", field);
        content = jsonx_get(m, "content");
        snprintf(field, sizeof(field), "messages[%zu].content", i);
        if (!content)
            continue;
        if (json_object_is_type(content, json_type_string)) {
            cm->blocks = calloc(1, sizeof(*cm->blocks));
            if (!cm->blocks)
                return -ENOMEM;
            cm->nblocks = 1;
            cm->blocks[0].type = BLOCK_TEXT;
            cm->blocks[0].type_name = "text";
            if ((size_t)json_object_get_string_len(content) > c->lim->max_string)
                return fail(c, "%s: longer than %zu bytes", field, c->lim->max_string);
            if (memchr(json_object_get_string(content), '\0',
                       (size_t)json_object_get_string_len(content)))
                return fail(c, "%s: contains a NUL character", field);
            cm->blocks[0].text = json_object_get_string(content);
            continue;
        }
        if (!json_object_is_type(content, json_type_array))
            return fail(c, "%s: expected a string or an array of content blocks", field);
        cm->nblocks = json_object_array_length(content);
        if (cm->nblocks > 1024)
            return fail(c, "%s: more than 1024 content blocks", field);
        if (cm->nblocks == 0)
            continue;
        cm->blocks = calloc(cm->nblocks, sizeof(*cm->blocks));
        if (!cm->blocks)
            return -ENOMEM;
        for (size_t j = 0; j < cm->nblocks; j++) {
            char bf[96];

            snprintf(bf, sizeof(bf), "messages[%zu].content[%zu]", i, j);
            r = parse_block(c, json_object_array_get_idx(content, j), bf, &cm->blocks[j]);
            if (r < 0)
                return r;
        }
    }
    return 0;
}

/* A relative path inside the workspace: no absolute path, no "..", no empty components. */
static bool safe_relative_path(const char *p, size_t max)
{
    size_t n = strlen(p);
    const char *s = p;

    if (n == 0 || n > max || p[0] == '/' || has_control(p) || strchr(p, '\\'))
        return false;
    while (*s) {
        size_t len = strcspn(s, "/");

        if (len == 0)
            return false; /* "//" or trailing "/" */
        if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
            return false;
        s += len;
        if (*s == '/')
            s++;
    }
    return p[n - 1] != '/';
}

static int parse_harness_files(struct pctx *c, json_object *arr, struct run_request *req)
{
    size_t n = json_object_array_length(arr);
    char field[64];
    int r;

    if (n == 0)
        return 0;
    req->harness_files = calloc(n, sizeof(*req->harness_files));
    if (!req->harness_files)
        return -ENOMEM;
    req->nharness_files = n;
    for (size_t i = 0; i < n; i++) {
        json_object *f = json_object_array_get_idx(arr, i);
        struct harness_file *hf = &req->harness_files[i];

        snprintf(field, sizeof(field), "harnessFiles[%zu]", i);
        if (!f || !json_object_is_type(f, json_type_object))
            return fail(c, "%s: expected an object", field);
        snprintf(field, sizeof(field), "harnessFiles[%zu].path", i);
        r = opt_string(c, f, "path", field, 255, &hf->path);
        if (r < 0)
            return r;
        if (!hf->path || !safe_relative_path(hf->path, 255))
            return fail(c, "%s: must be a relative path inside the workspace", field);
        snprintf(field, sizeof(field), "harnessFiles[%zu].content", i);
        r = opt_string(c, f, "content", field, HARNESS_FILE_MAX, &hf->content);
        if (r < 0)
            return r;
        if (!hf->content)
            return fail(c, "%s: required", field);
        for (size_t j = 0; j < i; j++)
            if (strcmp(req->harness_files[j].path, hf->path) == 0)
                return fail(c, "harnessFiles[%zu].path: duplicate path", i);
    }
    return 0;
}

static size_t utf8_code_points(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        if (((unsigned char)*s & 0xc0) != 0x80)
            n++;
    return n;
}

static bool skill_name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > SKILL_NAME_MAX || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '-') {
            if (s[i + 1] == '-')
                return false;
            continue;
        }
        if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]))
            return false;
    }
    return true;
}

static int parse_skills(struct pctx *c, json_object *arr, struct run_request *req)
{
    size_t n = json_object_array_length(arr);
    char field[96];
    int r;

    if (n == 0)
        return 0;
    req->skills = calloc(n, sizeof(*req->skills));
    if (!req->skills)
        return -ENOMEM;
    req->nskills = n;
    for (size_t i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(arr, i), *files;
        struct skill *sk = &req->skills[i];

        snprintf(field, sizeof(field), "skills[%zu]", i);
        if (!s || !json_object_is_type(s, json_type_object))
            return fail(c, "%s: expected an object", field);
        snprintf(field, sizeof(field), "skills[%zu].name", i);
        r = opt_string(c, s, "name", field, SKILL_NAME_MAX * 4, &sk->name);
        if (r < 0)
            return r;
        if (!sk->name || !skill_name_ok(sk->name))
            return fail(c, "%s: must match ^[a-z0-9]+(-[a-z0-9]+)*$ and be at most %d "
                           "characters",
                        field, SKILL_NAME_MAX);
        for (size_t j = 0; j < i; j++)
            if (strcmp(req->skills[j].name, sk->name) == 0)
                return fail(c, "%s: duplicate skill \"%s\"", field, sk->name);
        snprintf(field, sizeof(field), "skills[%zu].description", i);
        r = opt_string(c, s, "description", field, SKILL_DESCRIPTION_MAX * 4, &sk->description);
        if (r < 0)
            return r;
        if (!sk->description || !sk->description[0])
            return fail(c, "%s: required", field);
        if (utf8_code_points(sk->description) > SKILL_DESCRIPTION_MAX)
            return fail(c, "%s: longer than %d characters", field, SKILL_DESCRIPTION_MAX);
        snprintf(field, sizeof(field), "skills[%zu].body", i);
        r = opt_string(c, s, "body", field, SKILL_BODY_MAX, &sk->body);
        if (r < 0)
            return r;
        if (!sk->body)
            return fail(c, "%s: required", field);
        snprintf(field, sizeof(field), "skills[%zu].disableModelInvocation", i);
        r = opt_bool(c, s, "disableModelInvocation", field, &sk->disable_model_invocation);
        if (r < 0)
            return r;
        snprintf(field, sizeof(field), "skills[%zu].allowExecutableFiles", i);
        r = opt_bool(c, s, "allowExecutableFiles", field, &sk->allow_executable_files);
        if (r < 0)
            return r;
        snprintf(field, sizeof(field), "skills[%zu].files", i);
        r = opt_array(c, s, "files", field, SKILL_FILES_MAX, &files);
        if (r < 0)
            return r;
        sk->nfiles = files ? json_object_array_length(files) : 0;
        if (sk->nfiles == 0)
            continue;
        sk->files = calloc(sk->nfiles, sizeof(*sk->files));
        if (!sk->files)
            return -ENOMEM;
        for (size_t j = 0; j < sk->nfiles; j++) {
            json_object *f = json_object_array_get_idx(files, j);
            struct skill_file *sf = &sk->files[j];

            snprintf(field, sizeof(field), "skills[%zu].files[%zu]", i, j);
            if (!f || !json_object_is_type(f, json_type_object))
                return fail(c, "%s: expected an object", field);
            snprintf(field, sizeof(field), "skills[%zu].files[%zu].path", i, j);
            r = opt_string(c, f, "path", field, SKILL_PATH_MAX, &sf->path);
            if (r < 0)
                return r;
            if (!sf->path || !safe_relative_path(sf->path, SKILL_PATH_MAX) ||
                strcmp(sf->path, "SKILL.md") == 0)
                return fail(c, "%s: must be a relative path inside the skill folder", field);
            snprintf(field, sizeof(field), "skills[%zu].files[%zu].content", i, j);
            r = opt_string(c, f, "content", field, SKILL_CONTENT_MAX, &sf->content);
            if (r < 0)
                return r;
            if (!sf->content)
                return fail(c, "%s: required", field);
            snprintf(field, sizeof(field), "skills[%zu].files[%zu].executable", i, j);
            r = opt_bool(c, f, "executable", field, &sf->executable);
            if (r < 0)
                return r;
            if (sf->executable && !sk->allow_executable_files)
                return fail(c, "%s: executable files need allowExecutableFiles", field);
        }
    }
    return 0;
}

static bool tool_name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

static int parse_custom_tools(struct pctx *c, json_object *arr)
{
    static const char *const kinds[] = {"callback", "code", "client", NULL};
    static const char *const perms[] = {"allow", "ask", "deny", NULL};
    static const char *const methods[] = {"GET", "POST", "PUT", "DELETE", NULL};
    char field[96];
    int r;

    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        json_object *t = json_object_array_get_idx(arr, i), *call;
        const char *name, *kind, *perm, *call_ref, *method;

        snprintf(field, sizeof(field), "customTools[%zu]", i);
        if (!t || !json_object_is_type(t, json_type_object))
            return fail(c, "%s: expected an object", field);
        snprintf(field, sizeof(field), "customTools[%zu].name", i);
        r = opt_string(c, t, "name", field, 256, &name);
        if (r < 0)
            return r;
        if (!name || !tool_name_ok(name))
            return fail(c, "%s: must be 1-64 letters, digits, '_' or '-'", field);
        snprintf(field, sizeof(field), "customTools[%zu].kind", i);
        r = enum_string(c, t, "kind", field, kinds, "callback, code, client", &kind);
        if (r < 0)
            return r;
        if (kind && strcmp(kind, "code") == 0)
            return fail(c, "%s: \"code\" tools are not supported", field);
        snprintf(field, sizeof(field), "customTools[%zu].permission", i);
        r = enum_string(c, t, "permission", field, perms, "allow, ask, deny", &perm);
        if (r < 0)
            return r;
        snprintf(field, sizeof(field), "customTools[%zu].callRef", i);
        r = opt_string(c, t, "callRef", field, 512, &call_ref);
        if (r < 0)
            return r;
        snprintf(field, sizeof(field), "customTools[%zu].call", i);
        r = opt_object(c, t, "call", field, &call);
        if (r < 0)
            return r;
        if (call_ref && call)
            return fail(c, "customTools[%zu]: callRef and call are mutually exclusive", i);
        if (call) {
            snprintf(field, sizeof(field), "customTools[%zu].call.method", i);
            r = enum_string(c, call, "method", field, methods, "GET, POST, PUT, DELETE",
                            &method);
            if (r < 0)
                return r;
            if (!method)
                return fail(c, "%s: required", field);
            if (!jsonx_str(call, "path"))
                return fail(c, "customTools[%zu].call.path: required", i);
        }
        for (size_t j = 0; j < i; j++) {
            const char *other = jsonx_str(json_object_array_get_idx(arr, j), "name");
            if (other && strcmp(other, name) == 0)
                return fail(c, "customTools[%zu].name: duplicate tool \"%s\"", i, name);
        }
    }
    return 0;
}

static int parse_mcp_servers(struct pctx *c, json_object *arr)
{
    static const char *const perms[] = {"allow", "ask", "deny", NULL};
    static const char *const modes[] = {"all", "include", NULL};
    char field[96];
    int r;

    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        json_object *s = json_object_array_get_idx(arr, i), *conn, *policy, *tools;
        const char *name, *type, *url, *perm, *mode;

        snprintf(field, sizeof(field), "mcpServers[%zu]", i);
        if (!s || !json_object_is_type(s, json_type_object))
            return fail(c, "%s: expected an object", field);
        snprintf(field, sizeof(field), "mcpServers[%zu].name", i);
        r = opt_string(c, s, "name", field, 256, &name);
        if (r < 0)
            return r;
        if (!name || !tool_name_ok(name))
            return fail(c, "%s: must be 1-64 letters, digits, '_' or '-'", field);
        if (strcmp(name, "agenta-tools") == 0)
            return fail(c, "%s: \"agenta-tools\" is reserved", field);
        snprintf(field, sizeof(field), "mcpServers[%zu].connection", i);
        r = opt_object(c, s, "connection", field, &conn);
        if (r < 0)
            return r;
        if (!conn)
            return fail(c, "%s: required", field);
        type = jsonx_str(conn, "type");
        if (!type || strcmp(type, "http") != 0)
            return fail(c, "mcpServers[%zu].connection.type: only \"http\" is supported", i);
        url = jsonx_str(conn, "url");
        snprintf(field, sizeof(field), "mcpServers[%zu].connection.url", i);
        if (!url)
            return fail(c, "%s: required", field);
        r = check_base_url(c, field, url, true);
        if (r < 0)
            return r;
        snprintf(field, sizeof(field), "mcpServers[%zu].policy", i);
        r = opt_object(c, s, "policy", field, &policy);
        if (r < 0)
            return r;
        if (policy) {
            snprintf(field, sizeof(field), "mcpServers[%zu].policy.permission", i);
            r = enum_string(c, policy, "permission", field, perms, "allow, ask, deny", &perm);
            if (r < 0)
                return r;
            snprintf(field, sizeof(field), "mcpServers[%zu].policy.tools", i);
            r = opt_object(c, policy, "tools", field, &tools);
            if (r < 0)
                return r;
            if (tools) {
                snprintf(field, sizeof(field), "mcpServers[%zu].policy.tools.mode", i);
                r = enum_string(c, tools, "mode", field, modes, "all, include", &mode);
                if (r < 0)
                    return r;
            }
        }
        for (size_t j = 0; j < i; j++) {
            const char *other = jsonx_str(json_object_array_get_idx(arr, j), "name");
            if (other && strcmp(other, name) == 0)
                return fail(c, "mcpServers[%zu].name: duplicate server \"%s\"", i, name);
        }
    }
    return 0;
}

static int parse_permissions(struct pctx *c, json_object *o)
{
    static const char *const defaults[] = {"allow", "ask", "deny", "allow_reads", NULL};
    static const char *const perms[] = {"allow", "ask", "deny", NULL};
    json_object *rules;
    const char *def;
    char field[64];
    int r;

    r = enum_string(c, o, "default", "permissions.default", defaults,
                    "allow, ask, deny, allow_reads", &def);
    if (r < 0)
        return r;
    r = opt_array(c, o, "rules", "permissions.rules", RULES_MAX, &rules);
    if (r < 0)
        return r;
    for (size_t i = 0; rules && i < json_object_array_length(rules); i++) {
        json_object *rule = json_object_array_get_idx(rules, i);
        const char *pattern, *perm;

        snprintf(field, sizeof(field), "permissions.rules[%zu]", i);
        if (!rule || !json_object_is_type(rule, json_type_object))
            return fail(c, "%s: expected an object", field);
        snprintf(field, sizeof(field), "permissions.rules[%zu].pattern", i);
        r = opt_string(c, rule, "pattern", field, 512, &pattern);
        if (r < 0)
            return r;
        if (!pattern || !pattern[0])
            return fail(c, "%s: required", field);
        snprintf(field, sizeof(field), "permissions.rules[%zu].permission", i);
        r = enum_string(c, rule, "permission", field, perms, "allow, ask, deny", &perm);
        if (r < 0)
            return r;
        if (!perm)
            return fail(c, "%s: required", field);
    }
    return 0;
}

static int parse_sandbox_permission(struct pctx *c, json_object *o, struct run_request *req)
{
    static const char *const modes[] = {"on", "off", "allowlist", NULL};
    static const char *const enforcements[] = {"strict", "best_effort", NULL};
    json_object *network;
    const char *mode, *enforcement;
    int r;

    if (jsonx_get(o, "filesystem"))
        return fail(c, "sandboxPermission.filesystem: not supported by this runner");
    r = enum_string(c, o, "enforcement", "sandboxPermission.enforcement", enforcements,
                    "strict, best_effort", &enforcement);
    if (r < 0)
        return r;
    req->network_strict = !enforcement || strcmp(enforcement, "strict") == 0;
    r = opt_object(c, o, "network", "sandboxPermission.network", &network);
    if (r < 0 || !network)
        return r;
    r = enum_string(c, network, "mode", "sandboxPermission.network.mode", modes,
                    "on, off, allowlist", &mode);
    if (r < 0)
        return r;
    if (!mode || strcmp(mode, "on") == 0) {
        req->network = NETWORK_ON;
    } else if (strcmp(mode, "off") == 0) {
        req->network = NETWORK_OFF;
    } else {
        json_object *list = jsonx_get(network, "allowlist");
        if (list && !json_object_is_type(list, json_type_array))
            return fail(c, "sandboxPermission.network.allowlist: expected an array");
        req->network = NETWORK_ALLOWLIST;
    }
    return 0;
}

static int parse_lifecycle(struct pctx *c, json_object *o, struct run_request *req)
{
    static const char *const modes[] = {"warm", "per_turn", NULL};
    json_object *idle;
    const char *mode;
    int r;

    r = enum_string(c, o, "mode", "lifecycle.mode", modes, "warm, per_turn", &mode);
    if (r < 0)
        return r;
    if (mode)
        req->lifecycle_mode = strcmp(mode, "warm") == 0 ? LIFECYCLE_WARM : LIFECYCLE_PER_TURN;
    idle = jsonx_get(o, "idleTimeoutMs");
    if (idle) {
        int64_t v;

        if (!json_object_is_type(idle, json_type_int))
            return fail(c, "lifecycle.idleTimeoutMs: expected an integer");
        v = json_object_get_int64(idle);
        if (v <= 0 || (uint64_t)v > LIFECYCLE_IDLE_MAX)
            return fail(c, "lifecycle.idleTimeoutMs: must be between 1 and %llu",
                        (unsigned long long)LIFECYCLE_IDLE_MAX);
        req->lifecycle_idle_ms = (uint64_t)v;
    }
    return 0;
}

static int parse_telemetry(struct pctx *c, json_object *o)
{
    json_object *otlp = jsonx_path(o, "exporters.otlp"), *headers;
    const char *endpoint;
    int r;

    if (!otlp)
        return 0;
    if (!json_object_is_type(otlp, json_type_object))
        return fail(c, "telemetry.exporters.otlp: expected an object");
    r = opt_string(c, otlp, "endpoint", "telemetry.exporters.otlp.endpoint", 2048, &endpoint);
    if (r < 0)
        return r;
    if (endpoint) {
        char scheme[8], host[256];
        unsigned port;
        if (request_parse_url(endpoint, scheme, sizeof(scheme), host, sizeof(host), &port) < 0)
            return fail(c, "telemetry.exporters.otlp.endpoint: not an http(s) URL with a host");
    }
    r = opt_object(c, otlp, "headers", "telemetry.exporters.otlp.headers", &headers);
    if (r < 0)
        return r;
    if (headers) {
        json_object_object_foreach(headers, key, val)
        {
            if (!val || !json_object_is_type(val, json_type_string))
                return fail(c, "telemetry.exporters.otlp.headers.%.64s: expected a string", key);
        }
    }
    return 0;
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

static int parse_harness(struct pctx *c, json_object *root, struct run_request *req)
{
    const char *h;
    int r = opt_string(c, root, "harness", "harness", 64, &h);

    if (r < 0)
        return r;
    if (!h || !h[0])
        h = "pi_core";
    req->harness_name = h;
    if (harness_lookup(h, c->lim->allow_scripted, &req->harness) == 0)
        return 0;
    return fail(c, "harness: unsupported value \"%.64s\" (expected %s)", h, accepted_harnesses());
}

static int parse_legacy(struct pctx *c, json_object *root)
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
    return fail(c, "Legacy top-level model credential fields are not supported (%s); send the "
                   "resolved modelConnection object.",
                names);
}

static int parse_root(struct pctx *c, json_object *root, struct run_request *req)
{
    static const char *const codex_modes[] = {"agent", "read-only", "agent-full-access", NULL};
    json_object *o, *arr;
    const char *project;
    int r;

    r = parse_legacy(c, root);
    if (r < 0)
        return r;
    r = parse_harness(c, root, req);
    if (r < 0)
        return r;
    r = opt_string(c, root, "sandbox", "sandbox", 64, &req->sandbox);
    if (r < 0)
        return r;
    if (!req->sandbox || !req->sandbox[0])
        req->sandbox = provider_at(0)->name; /* the first registered provider: local */
    if (provider_known(req->sandbox) && !provider_get(req->sandbox))
        return fail(c, "sandbox: provider \"%.64s\" is not enabled on this runner",
                    req->sandbox);
    if (!provider_get(req->sandbox))
        return fail(c, "sandbox: unsupported value \"%.64s\" (expected %s)", req->sandbox,
                    provider_at(0)->name);

    if ((r = id_string(c, root, "sessionId", &req->session_id)) < 0 ||
        (r = id_string(c, root, "turnId", &req->turn_id)) < 0 ||
        (r = id_string(c, root, "projectId", &req->project_id)) < 0)
        return r;
    if ((r = opt_string(c, root, "agentsMd", "agentsMd", 1024 * 1024, &req->agents_md)) < 0 ||
        (r = opt_string(c, root, "systemPrompt", "systemPrompt", 1024 * 1024,
                        &req->system_prompt)) < 0 ||
        (r = opt_string(c, root, "appendSystemPrompt", "appendSystemPrompt", 1024 * 1024,
                        &req->append_system_prompt)) < 0 ||
        (r = opt_string(c, root, "model", "model", 256, &req->model)) < 0)
        return r;
    if (req->model && (has_control(req->model) || !req->model[0]))
        return fail(c, "model: must be a non-empty name");
    r = enum_string(c, root, "harnessMode", "harnessMode", codex_modes,
                    "agent, read-only, agent-full-access", &req->harness_mode);
    if (r < 0)
        return r;

    r = opt_object(c, root, "connection", "connection", &o);
    if (r < 0)
        return r;
    if (o) {
        if ((r = opt_string(c, o, "mode", "connection.mode", 64, &req->connection_mode)) < 0 ||
            (r = opt_string(c, o, "slug", "connection.slug", 64, &req->connection_slug)) < 0)
            return r;
        if (req->connection_slug && !tool_name_ok(req->connection_slug))
            return fail(c, "connection.slug: must be 1-64 letters, digits, '_' or '-'");
    }

    r = opt_object(c, root, "modelConnection", "modelConnection", &o);
    if (r < 0)
        return r;
    if (o) {
        r = parse_model_connection(c, o, &req->mc);
        if (r < 0)
            return r;
    }

    r = opt_array(c, root, "messages", "messages", c->lim->max_messages, &arr);
    if (r < 0)
        return r;
    if (arr) {
        r = parse_messages(c, arr, req);
        if (r < 0)
            return r;
    }

    r = opt_array(c, root, "harnessFiles", "harnessFiles", HARNESS_FILES_MAX, &arr);
    if (r < 0)
        return r;
    if (arr && (r = parse_harness_files(c, arr, req)) < 0)
        return r;
    r = opt_array(c, root, "skills", "skills", SKILLS_MAX, &arr);
    if (r < 0)
        return r;
    if (arr && (r = parse_skills(c, arr, req)) < 0)
        return r;
    r = opt_array(c, root, "customTools", "customTools", TOOLS_MAX, &req->custom_tools);
    if (r < 0)
        return r;
    if (req->custom_tools && (r = parse_custom_tools(c, req->custom_tools)) < 0)
        return r;
    r = opt_array(c, root, "mcpServers", "mcpServers", MCP_SERVERS_MAX, &req->mcp_servers);
    if (r < 0)
        return r;
    if (req->mcp_servers && (r = parse_mcp_servers(c, req->mcp_servers)) < 0)
        return r;
    r = opt_object(c, root, "toolCallback", "toolCallback", &req->tool_callback);
    if (r < 0)
        return r;
    if (req->tool_callback) {
        const char *endpoint;
        r = opt_string(c, req->tool_callback, "endpoint", "toolCallback.endpoint", 2048,
                       &endpoint);
        if (r < 0)
            return r;
        if (!endpoint)
            return fail(c, "toolCallback.endpoint: required");
        r = check_base_url(c, "toolCallback.endpoint", endpoint, true);
        if (r < 0)
            return r;
    }
    r = opt_object(c, root, "permissions", "permissions", &req->permissions);
    if (r < 0)
        return r;
    if (req->permissions && (r = parse_permissions(c, req->permissions)) < 0)
        return r;
    r = opt_object(c, root, "sandboxPermission", "sandboxPermission", &o);
    if (r < 0)
        return r;
    req->network_strict = true;
    if (o && (r = parse_sandbox_permission(c, o, req)) < 0)
        return r;
    r = opt_object(c, root, "lifecycle", "lifecycle", &o);
    if (r < 0)
        return r;
    if (o && (r = parse_lifecycle(c, o, req)) < 0)
        return r;
    r = opt_object(c, root, "telemetry", "telemetry", &req->telemetry);
    if (r < 0)
        return r;
    if (req->telemetry && (r = parse_telemetry(c, req->telemetry)) < 0)
        return r;
    r = opt_object(c, root, "context", "context", &o);
    if (r < 0)
        return r;
    if (o) {
        json_object *prop;
        r = opt_object(c, o, "propagation", "context.propagation", &prop);
        if (r < 0)
            return r;
        r = opt_string(c, prop, "traceparent", "context.propagation.traceparent", 128,
                       &req->traceparent);
        if (r < 0)
            return r;
        if (req->traceparent && !traceparent_ok(req->traceparent))
            return fail(c, "context.propagation.traceparent: not a W3C traceparent");
    }
    r = opt_object(c, root, "runContext", "runContext", &req->run_context);
    if (r < 0)
        return r;
    project = NULL;
    if (req->run_context) {
        json_object *proj = jsonx_get(req->run_context, "project");
        if (proj && !json_object_is_type(proj, json_type_object))
            return fail(c, "runContext.project: expected an object");
        r = opt_string(c, proj, "id", "runContext.project.id", ID_MAX, &project);
        if (r < 0)
            return r;
        if (project && (has_control(project) || !project[0]))
            project = NULL;
    }
    if (project)
        req->project_id = project;
    if (req->project_id && strchr(req->project_id, ':'))
        return fail(c, "projectId: must not contain ':'");
    return 0;
}

int request_parse(const char *body, size_t len, const struct request_limits *lim,
                  struct run_request *ret, char *err, size_t errlen)
{
    struct pctx c = {.err = err, .errlen = errlen, .lim = lim};
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
    r = parse_root(&c, root, &req);
    if (r < 0) {
        if (r == -ENOMEM)
            snprintf(err, errlen, "out of memory");
        run_request_release(&req);
        return r;
    }
    if (!req.turn_id) {
        r = random_uuid(req.turn_id_buf);
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
    struct pctx c = {.err = err, .errlen = errlen, .lim = &lim};
    struct session_ref ref;
    json_object *root = NULL;
    const char *sid, *pid, *tid;
    char jerr[128];
    int r;

    request_limits_default(&lim);
    memset(&ref, 0, sizeof(ref));
    r = jsonx_parse(body, len, 8, &root, jerr, sizeof(jerr));
    if (r < 0) {
        snprintf(err, errlen, "Invalid JSON: %s", jerr);
        return r;
    }
    if (!root || !json_object_is_type(root, json_type_object)) {
        r = fail(&c, "request: expected a JSON object");
        goto out;
    }
    if ((r = id_string(&c, root, "sessionId", &sid)) < 0 ||
        (r = id_string(&c, root, "projectId", &pid)) < 0 ||
        (r = id_string(&c, root, "targetTurnId", &tid)) < 0)
        goto out;
    if (!sid) {
        r = fail(&c, "sessionId: required non-empty string");
        goto out;
    }
    if (!pid) {
        r = fail(&c, "projectId: required non-empty string");
        goto out;
    }
    if (strchr(pid, ':')) {
        r = fail(&c, "projectId: must not contain ':'");
        goto out;
    }
    snprintf(ref.session_id, sizeof(ref.session_id), "%s", sid);
    snprintf(ref.project_id, sizeof(ref.project_id), "%s", pid);
    if (tid)
        snprintf(ref.target_turn_id, sizeof(ref.target_turn_id), "%s", tid);
    *ret = ref;
    r = 0;
out:
    json_object_put(root);
    return r;
}
