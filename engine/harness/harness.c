#include "harness/harness.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "core/policy.h"

#define SYSTEM_PATH "/usr/local/bin:/usr/bin:/bin"

/* The one registry of harnesses, by kind. */
static const struct harness_ops *const registry[HARNESS_COUNT] = {
    [HARNESS_PI] = &harness_pi,           [HARNESS_CLAUDE] = &harness_claude,
    [HARNESS_CODEX] = &harness_codex,     [HARNESS_OPENCODE] = &harness_opencode,
    [HARNESS_SCRIPTED] = &harness_scripted,
};

/* Names a request may use (the wire protocol's and ours), each listed by /health. */
static const struct {
    const char *name;
    enum harness_kind kind;
} wire_names[] = {
    {"pi_core", HARNESS_PI},     {"pi_agenta", HARNESS_PI},         {"pi", HARNESS_PI},
    {"claude", HARNESS_CLAUDE},  {"codex", HARNESS_CODEX},          {"opencode", HARNESS_OPENCODE},
    {"scripted", HARNESS_SCRIPTED},
};

const struct harness_ops *harness_get(enum harness_kind kind)
{
    return (unsigned)kind < HARNESS_COUNT ? registry[kind] : NULL;
}

int harness_lookup(const char *name, bool allow_scripted, enum harness_kind *ret)
{
    for (size_t i = 0; name && i < ARRAY_SIZE(wire_names); i++) {
        if (strcmp(wire_names[i].name, name) != 0)
            continue;
        if (wire_names[i].kind == HARNESS_SCRIPTED && !allow_scripted)
            return -ENOENT;
        *ret = wire_names[i].kind;
        return 0;
    }
    return -ENOENT;
}

size_t harness_wire_count(void)
{
    return ARRAY_SIZE(wire_names);
}

const char *harness_wire_name(size_t i, enum harness_kind *ret_kind)
{
    if (i >= ARRAY_SIZE(wire_names))
        return NULL;
    *ret_kind = wire_names[i].kind;
    return wire_names[i].name;
}

/* The last answer per kind, for the paths it was given (the engine's, one set per process). */
static struct {
    pthread_mutex_t lock;
    struct {
        const char *harness_dir, *scripted_agent, *pi_stdio;
        int64_t until_ms;
        bool installed;
    } kind[HARNESS_COUNT];
} installed_cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

bool harness_is_installed(const struct harness_ops *h, const struct harness_paths *paths)
{
    int64_t now = util_now_ms();
    bool hit, yes = false;
    unsigned k;

    if (!h || (unsigned)h->kind >= HARNESS_COUNT)
        return false;
    k = (unsigned)h->kind;
    pthread_mutex_lock(&installed_cache.lock);
    hit = installed_cache.kind[k].until_ms > now &&
          installed_cache.kind[k].harness_dir == paths->harness_dir &&
          installed_cache.kind[k].scripted_agent == paths->scripted_agent &&
          installed_cache.kind[k].pi_stdio == paths->pi_stdio;
    if (hit)
        yes = installed_cache.kind[k].installed;
    pthread_mutex_unlock(&installed_cache.lock);
    if (hit)
        return yes;
    yes = h->installed(paths);
    pthread_mutex_lock(&installed_cache.lock);
    installed_cache.kind[k].harness_dir = paths->harness_dir;
    installed_cache.kind[k].scripted_agent = paths->scripted_agent;
    installed_cache.kind[k].pi_stdio = paths->pi_stdio;
    installed_cache.kind[k].until_ms = now + HARNESS_INSTALLED_TTL_MS;
    installed_cache.kind[k].installed = yes;
    pthread_mutex_unlock(&installed_cache.lock);
    return yes;
}

json_object *harness_installed_names(const struct harness_paths *paths)
{
    json_object *list = json_object_new_array();

    for (size_t i = 0; list && i < ARRAY_SIZE(wire_names); i++) {
        const struct harness_ops *h = harness_get(wire_names[i].kind);

        if (h && h->installed(paths))
            json_object_array_add(list, json_object_new_string(wire_names[i].name));
    }
    return list;
}

void sandbox_plan_init(struct sandbox_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    plan->argv = json_object_new_array();
    plan->env = json_object_new_object();
    plan->ro_binds = json_object_new_array();
    plan->files = json_object_new_array();
}

void sandbox_plan_release(struct sandbox_plan *plan)
{
    json_object_put(plan->gateway_route);
    json_object_put(plan->session_mcp);
    json_object_put(plan->argv);
    json_object_put(plan->env);
    json_object_put(plan->ro_binds);
    json_object_put(plan->files);
    memset(plan, 0, sizeof(*plan));
}

void harness_setenv(struct sandbox_plan *plan, const char *name, const char *value)
{
    json_object_object_add(plan->env, name, json_object_new_string(value));
}

void harness_base_env(struct sandbox_plan *plan, const char *extra_path)
{
    char path[PATH_MAX + 64];

    if (extra_path)
        snprintf(path, sizeof(path), "%s:%s", extra_path, SYSTEM_PATH);
    else
        snprintf(path, sizeof(path), "%s", SYSTEM_PATH);
    harness_setenv(plan, "PATH", path);
    harness_setenv(plan, "HOME", SANDBOX_HOME);
    harness_setenv(plan, "USER", "agent");
    harness_setenv(plan, "LOGNAME", "agent");
    harness_setenv(plan, "LANG", "C.UTF-8");
    harness_setenv(plan, "TERM", "dumb");
    harness_setenv(plan, "TMPDIR", "/tmp");
    harness_add_file(plan, "/etc/passwd",
                     "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                     "agent:x:1000:1000:agent:" SANDBOX_HOME ":/bin/bash\n"
                     "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                     0644);
    harness_add_file(plan, "/etc/group",
                     "root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n", 0644);
}

void harness_node_argv(const struct harness_paths *paths, struct sandbox_plan *plan,
                       const char *script)
{
    char path[PATH_MAX];

    snprintf(path, sizeof(path), "%s/%s", paths->harness_dir, HARNESS_NODE);
    json_object_array_add(plan->argv, json_object_new_string(path));
    snprintf(path, sizeof(path), "%s/%s", paths->harness_dir, script);
    json_object_array_add(plan->argv, json_object_new_string(path));
}

bool harness_plan_allows_all(json_object *permissions)
{
    const char *def = jsonx_str(permissions, "default");
    json_object *rules = jsonx_get(permissions, "rules");

    if (!def || strcmp(def, "allow") != 0)
        return false;
    for (size_t i = 0; rules && json_object_is_type(rules, json_type_array) &&
                       i < json_object_array_length(rules);
         i++) {
        const char *p = jsonx_str(json_object_array_get_idx(rules, i), "permission");

        if (!p || strcmp(p, "allow") != 0)
            return false;
    }
    return true;
}

void harness_connection_env(struct sandbox_plan *plan, const struct run_request *req)
{
    for (size_t i = 0; i < req->mc.nenvironment; i++)
        harness_setenv(plan, req->mc.environment[i].name, req->mc.environment[i].value);
    for (size_t i = 0; i < req->mc.ncredentials; i++)
        harness_setenv(plan, req->mc.credentials[i].name,
                       harness_key_value(plan, &req->mc.credentials[i]));
}

/* The endpoint the gateway forwards to: endpoint.baseUrl, else the provider's public API. */
static const char *upstream_of(const struct run_request *req)
{
    return req->mc.base_url ? req->mc.base_url : policy_provider_default_url(req->mc.provider);
}

const char *harness_gateway_refusal(const struct run_request *req)
{
    const char *dep = req->mc.deployment ? req->mc.deployment : "";
    char path[1024];

    if (!req->mc.present)
        return "no modelConnection";
    if (req->mc.credential_mode == CREDENTIAL_MODE_RUNTIME)
        return "runtime_provided: the harness holds the operator's login itself";
    if (req->mc.credential_mode != CREDENTIAL_MODE_ENV || req->mc.ncredentials != 1)
        return "the gateway forwards runs with exactly one credential";
    if (strcmp(dep, "bedrock") == 0 || strcmp(dep, "vertex") == 0 || strcmp(dep, "vertex_ai") == 0)
        return "Bedrock and Vertex requests are signed with cloud credentials by the harness";
    if (!upstream_of(req))
        return "no endpoint.baseUrl and no known public API for the provider";
    if (gateway_route_base_path(upstream_of(req), path, sizeof(path)) < 0)
        return "the endpoint's URL has a query, a fragment or user info";
    return NULL;
}

const char *harness_model_url(const struct sandbox_plan *plan, const struct run_request *req,
                              char *buf, size_t len)
{
    char path[1024];

    if (!plan->gateway)
        return req->mc.base_url;
    if (gateway_route_base_path(upstream_of(req), path, sizeof(path)) < 0)
        path[0] = '\0';
    snprintf(buf, len, "%s%s", GATEWAY_SANDBOX_ORIGIN, path);
    return buf;
}

json_object *harness_gateway_health(enum harness_kind kind, bool active)
{
    json_object *o = json_object_new_object(), *when = json_object_new_array();

    json_object_object_add(o, "keyStaysOut", json_object_new_boolean(active));
    if (!active)
        json_object_array_add(when, json_object_new_string("always (the gateway is off here)"));
    if (active && (kind == HARNESS_PI || kind == HARNESS_CLAUDE || kind == HARNESS_CODEX))
        json_object_array_add(when, json_object_new_string("credentialMode runtime_provided"));
    if (active && (kind == HARNESS_CLAUDE || kind == HARNESS_PI))
        json_object_array_add(when, json_object_new_string("deployment bedrock or vertex"));
    if (active) {
        json_object_array_add(when, json_object_new_string("more than one credential"));
        json_object_array_add(
            when, json_object_new_string("an endpoint with a query, or none the runner knows"));
        json_object_array_add(when, json_object_new_string("sandbox daytona"));
    }
    json_object_object_add(o, "keyInSandboxWhen", when);
    return o;
}

const char *harness_key_value(const struct sandbox_plan *plan, const struct credential *c)
{
    return plan->gateway ? GATEWAY_PLACEHOLDER_KEY : c->value;
}

int harness_gateway_route(struct sandbox_plan *plan, const struct run_request *req,
                          const struct model_gateway_config *cfg, char *err, size_t errlen)
{
    const char *names[GATEWAY_ROUTE_HEADERS_MAX], *values[GATEWAY_ROUTE_HEADERS_MAX];
    const char *prov = req->mc.provider ? req->mc.provider : "";
    const char *dep = req->mc.deployment ? req->mc.deployment : "";
    struct gateway_route_spec s = {
        .upstream = upstream_of(req),
        .credential = req->mc.ncredentials ? req->mc.credentials[0].value : NULL,
        .auth = strcasecmp(prov, "azure") == 0 || strcmp(dep, "azure") == 0 ? GATEWAY_AUTH_API_KEY
                                                                            : GATEWAY_AUTH_MIRROR,
        .header_names = names,
        .header_values = values,
        .models = req->gateway_models,
        .max_request_bytes = cfg ? cfg->max_request_bytes : 0,
        .ca_file = cfg ? cfg->ca_file : NULL,
    };
    struct gateway_route *check = NULL;
    int r;

    if (req->mc.nheaders > GATEWAY_ROUTE_HEADERS_MAX)
        return util_fail(-EINVAL, err, errlen,
                         "modelConnection.endpoint.headers: more than %d "
                         "for the model gateway",
                         GATEWAY_ROUTE_HEADERS_MAX);
    for (size_t i = 0; i < req->mc.nheaders; i++) {
        names[s.nheaders] = req->mc.headers[i].name;
        values[s.nheaders++] = req->mc.headers[i].value;
    }
    json_object_put(plan->gateway_route);
    plan->gateway_route = gateway_route_encode(&s);
    if (!plan->gateway_route)
        return util_fail(-ENOMEM, err, errlen, "out of memory");
    /* what the keeper will check, checked here: a run it would refuse fails before it starts */
    r = gateway_route_decode(plan->gateway_route, &check, err, errlen);
    gateway_route_free(check);
    return r;
}

void harness_add_file(struct sandbox_plan *plan, const char *path, const char *content,
                      int mode)
{
    json_object *f = json_object_new_object();

    json_object_object_add(f, "path", json_object_new_string(path));
    json_object_object_add(f, "content", json_object_new_string(content));
    json_object_object_add(f, "mode", json_object_new_int(mode));
    json_object_array_add(plan->files, f);
}

const struct credential *harness_credential(const struct run_request *req, int usage)
{
    for (size_t i = 0; i < req->mc.ncredentials; i++)
        if (usage < 0 || (int)req->mc.credentials[i].usage == usage)
            return &req->mc.credentials[i];
    return NULL;
}

bool harness_file_exists(const char *dir, const char *rel)
{
    char path[PATH_MAX];

    if (!dir)
        return false;
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    return access(path, R_OK) == 0;
}

json_object *harness_headers_json(const struct run_request *req)
{
    json_object *headers;

    if (req->mc.nheaders == 0)
        return NULL;
    headers = json_object_new_object();
    for (size_t i = 0; i < req->mc.nheaders; i++)
        json_object_object_add(headers, req->mc.headers[i].name,
                               json_object_new_string(req->mc.headers[i].value));
    return headers;
}

int harness_login_load(const char *dir, const char *name, const char *who, const char *setting,
                       json_object **ret_doc, char *err, size_t errlen)
{
    enum login_state s = login_read(dir, name, ret_doc);

    switch (s) {
    case LOGIN_READY:
        return 0;
    case LOGIN_NOT_CONFIGURED:
        snprintf(err, errlen, "modelConnection.credentialMode: \"runtime_provided\" needs the "
                              "operator's %s login (%s), which this runner does not have",
                 who, setting);
        break;
    case LOGIN_MISSING:
        snprintf(err, errlen, "modelConnection.credentialMode: \"runtime_provided\": the "
                              "operator's %s login (%s) holds no %s (login_missing)",
                 who, setting, name);
        break;
    default:
        snprintf(err, errlen, "modelConnection.credentialMode: \"runtime_provided\": the "
                              "operator's %s login (%s) is not usable: its %s is empty, "
                              "unreadable or not a JSON object (login_unusable)",
                 who, setting, name);
        break;
    }
    return AR_E_INVALID_REQUEST;
}

int harness_add_login_file(struct sandbox_plan *plan, const char *path, json_object *doc)
{
    size_t len;
    const char *text = jsonx_text(doc, &len);

    if (plan->has_login)
        return -EEXIST;
    if (!text || !SHA256((const unsigned char *)text, len, plan->login_digest))
        return -ENOMEM;
    harness_add_file(plan, path, text, 0600);
    login_redact(doc); /* what the sandbox holds; the rest of the login goes nowhere */
    plan->has_login = true;
    return 0;
}

static json_object *env_var(const char *name, const char *value)
{
    json_object *v = json_object_new_object();

    json_object_object_add(v, "name", json_object_new_string(name));
    json_object_object_add(v, "value", json_object_new_string(value));
    return v;
}

/* argv becomes [mcp_bin, "hold", "--", argv...]: the holder keeps the channel for the server. */
static void hold_argv(struct sandbox_plan *plan, const char *mcp_bin)
{
    json_object *argv = json_object_new_array();

    json_object_array_add(argv, json_object_new_string(mcp_bin));
    json_object_array_add(argv, json_object_new_string("hold"));
    json_object_array_add(argv, json_object_new_string("--"));
    for (size_t i = 0; i < json_object_array_length(plan->argv); i++)
        json_object_array_add(argv, json_object_get(json_object_array_get_idx(plan->argv, i)));
    json_object_put(plan->argv);
    plan->argv = argv;
}

void harness_add_runner_tools(struct sandbox_plan *plan, enum harness_kind kind,
                              const char *mcp_bin, const char *tools_file)
{
    json_object *server, *env, *args;

    if (kind == HARNESS_PI || kind == HARNESS_SCRIPTED || !mcp_bin) {
        harness_setenv(plan, "RUNNER_TOOLS_FILE", tools_file);
        return;
    }
    json_object_array_add(plan->ro_binds, json_object_new_string(mcp_bin));
    hold_argv(plan, mcp_bin);
    env = json_object_new_array();
    json_object_array_add(env, env_var("RUNNER_TOOLS_FILE", tools_file));
    args = json_object_new_array();
    server = json_object_new_object();
    json_object_object_add(server, "name", json_object_new_string(RUN_TOOLS_MCP_NAME));
    json_object_object_add(server, "command", json_object_new_string(mcp_bin));
    json_object_object_add(server, "args", args);
    json_object_object_add(server, "env", env);
    json_object_put(plan->session_mcp);
    plan->session_mcp = json_object_new_array();
    json_object_array_add(plan->session_mcp, server);
}
