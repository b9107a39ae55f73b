/*
 * pi — pi-acp@0.0.24 driving @mariozechner/pi-coding-agent@0.73.1.
 *
 * The model route is written as pi's models.json inside the sandbox home: a custom provider
 * (connection.slug, else "custom") for a custom deployment, or the model registered into one
 * of pi's built-in providers (modelConnection.provider, optionally routed through the given
 * endpoint), with `apiKey` naming the environment variable that carries the key — the key
 * itself only travels in the harness environment. settings.json makes that provider/model the
 * default (and turns pi's own retry off: it would run after pi-acp ended the turn); the engine
 * still selects it over ACP and fails the run when pi does not end up on it (strict model
 * selection).
 *
 * pi-acp starts pi through PI_ACP_PI_COMMAND: pi on the pinned Node with agent-runner's
 * extension as its only extension, which speaks the keeper channel pi inherits (RUNNER_CHANNEL_FD;
 * on Daytona the relay's socket, RUNNER_CHANNEL). With
 * RUNNER_GATE_BUILTINS=1 (whenever the plan does not allow all of pi's built-ins) every tool
 * call waits for the runner's tool/permission answer. In a local sandbox the sandbox command is
 * agent-runner-pi-stdio (tools/pi_stdio.c, bound read-only): pi starts at once on socket
 * pairs, alongside pi-acp instead of after its start and session/new (pi's start is the
 * longest step of a cold environment), and pi-acp's "pi" (PI_ACP_PI_COMMAND, the same
 * program) attaches to it; a cold one runs pi and pi-acp from their one-file builds with V8
 * code caches (dist/agent-runner/start.mjs in each package, made by tools/bundle/bundle.mjs at
 * install), which halves pi's own start. Elsewhere (Daytona) pi-acp starts pi itself through
 * bin/pi-launch. Either way the `pi` first on PATH answers pi-acp's `pi --version` probe
 * without starting pi.
 *
 * Model gateway (plan->gateway): models.json's baseUrl is the sandbox's gateway and every
 * credential the sandbox holds (its environment variable, the key file) is the placeholder.
 *
 * Spares (spare.h): PLAN_SESSION keeps the key out of the environment (models.json reads
 * PI_KEY_FILE with `!cat` at every model request) and puts the gating into
 * runner-session.json, which the extension reads whenever pi (re)loads it; PLAN_SPARE is the
 * placeholder a spare starts with (`agent-runner-pi-stdio start spare`): at the claim the
 * attaching side tells the running pi `new_session` (the session's files are in place by then)
 * before it relays.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "harness/harness.h"

#define PI_AGENT_DIR SANDBOX_HOME "/.pi/agent"
#define PI_ACP_JS "node_modules/pi-acp/dist/index.js"
#define PI_JS "node_modules/@mariozechner/pi-coding-agent/dist/cli.js"
/* the one-file builds a cold local start runs (tools/bundle/bundle.mjs, at install) */
#define PI_BUNDLE_START "node_modules/@mariozechner/pi-coding-agent/dist/agent-runner/start.mjs"
#define PI_ACP_BUNDLE_START "node_modules/pi-acp/dist/agent-runner/start.mjs"
#define PI_EXTENSION_BIN "extension/bin"
#define PI_ATTACH_BIN PI_EXTENSION_BIN "/spare" /* its `pi`: the version stub for pi-stdio */
#define PI_KEY_FILE PI_AGENT_DIR "/runner-key"
#define PI_SESSION_FILE PI_AGENT_DIR "/runner-session.json"

static const struct {
    const char *name;
    bool read_only;
    const char *kind;
} builtins[] = {
    {"read", true, "read"},   {"bash", false, "execute"}, {"edit", false, "edit"},
    {"write", false, "edit"}, {"grep", true, "search"},   {"find", true, "search"},
    {"ls", true, "search"},
};

int harness_pi_builtin(const char *name, bool *ret_read_only, const char **ret_kind)
{
    for (size_t i = 0; name && i < ARRAY_SIZE(builtins); i++) {
        if (strcasecmp(name, builtins[i].name) != 0)
            continue;
        *ret_read_only = builtins[i].read_only;
        *ret_kind = builtins[i].kind;
        return 1;
    }
    return 0;
}

/*
 * Agenta's computeBuiltinGatingActive: pi's built-in tool calls must go through the permission
 * plan unless it allows them all, i.e. when the default is not "allow" or a rule names a pi
 * built-in.
 */
static bool harness_pi_gating_active(json_object *permissions)
{
    const char *def = jsonx_str(permissions, "default");
    json_object *rules = jsonx_get(permissions, "rules");

    if (!def || strcmp(def, "allow") != 0)
        return true;
    for (size_t i = 0; rules && json_object_is_type(rules, json_type_array) &&
                       i < json_object_array_length(rules);
         i++) {
        const char *pattern = jsonx_str(json_object_array_get_idx(rules, i), "pattern");
        char name[32];
        size_t n;
        bool ro;
        const char *kind;

        if (!pattern)
            continue;
        n = strcspn(pattern, "(");
        if (n >= sizeof(name))
            continue;
        memcpy(name, pattern, n);
        name[n] = '\0';
        if (harness_pi_builtin(name, &ro, &kind))
            return true;
    }
    return false;
}

static bool pi_installed(const struct harness_paths *paths)
{
    return harness_file_exists(paths->harness_dir, PI_ACP_JS) &&
           harness_file_exists(paths->harness_dir, PI_JS) &&
           harness_file_exists(paths->harness_dir, PI_BUNDLE_START) &&
           harness_file_exists(paths->harness_dir, PI_ACP_BUNDLE_START) &&
           harness_file_exists(paths->harness_dir, HARNESS_NODE) &&
           harness_file_exists(paths->harness_dir, "extension/index.js") &&
           harness_file_exists(paths->harness_dir, PI_EXTENSION_BIN "/pi-launch") &&
           harness_file_exists(paths->harness_dir, PI_ATTACH_BIN "/pi");
}

/* A local sandbox: pi-stdio starts pi, pi-acp attaches (else pi-acp starts pi itself). */
static bool pi_prestarted(const struct harness_paths *paths, const struct run_request *req,
                          const struct sandbox_plan *plan)
{
    if (!paths->pi_stdio)
        return false;
    return plan->form == PLAN_SPARE || !req->sandbox || strcmp(req->sandbox, "local") == 0;
}

/* How pi-acp starts pi, and the keeper channel the extension gates pi's tools through. */
static void pi_launch_env(const struct harness_paths *paths, const struct run_request *req,
                          struct sandbox_plan *plan)
{
    bool attach = pi_prestarted(paths, req, plan);
    const char *bin = attach ? PI_ATTACH_BIN : PI_EXTENSION_BIN;
    char path[PATH_MAX * 3 + 8], launch[PATH_MAX];

    snprintf(path, sizeof(path), "%s/%s:%s/node_modules/.bin", paths->harness_dir, bin,
             paths->harness_dir);
    harness_base_env(plan, path);
    if (attach)
        snprintf(launch, sizeof(launch), "%s", paths->pi_stdio);
    else
        snprintf(launch, sizeof(launch), "%s/" PI_EXTENSION_BIN "/pi-launch", paths->harness_dir);
    harness_setenv(plan, "PI_ACP_PI_COMMAND", launch);
    plan->channel_env = true; /* the extension speaks the channel (harnesses/extension) */
    plan->channel_gating = harness_pi_gating_active(req->permissions);
    if (plan->form == PLAN_COLD) {
        if (plan->channel_gating)
            harness_setenv(plan, "RUNNER_GATE_BUILTINS", "1");
        return;
    }
    /* the gating the extension applies comes from the session file, written with the
     * session's configuration; until then (a spare's placeholder) every call is gated */
    harness_setenv(plan, "RUNNER_GATE_BUILTINS", "1");
    harness_setenv(plan, "RUNNER_SESSION_FILE", PI_SESSION_FILE);
    if (plan->form == PLAN_SESSION)
        harness_add_file(plan, PI_SESSION_FILE,
                         plan->channel_gating ? "{\"gateBuiltins\":true}\n"
                                              : "{\"gateBuiltins\":false}\n",
                         0600);
}

static void argv_add(struct sandbox_plan *plan, const char *dir, const char *rel)
{
    char path[PATH_MAX];

    if (rel)
        snprintf(path, sizeof(path), "%s/%s", dir, rel);
    else
        snprintf(path, sizeof(path), "%s", dir);
    json_object_array_add(plan->argv, json_object_new_string(path));
}

/*
 * A local sandbox's command: agent-runner-pi-stdio start cold|spare -- <pi> -- <pi-acp>, pi with
 * the arguments bin/pi-launch gives it. Cold: both from the one-file builds (their start is on
 * the user's path). A spare: the packages' own files, because its pi also preloads the
 * provider modules pi-ai imports at the first model call (bin/spare/preload.mjs, by their file
 * URLs), and both of its Node processes keep a small idle heap (--optimize-for-size: ~25 MiB
 * less per spare, at a slower start nobody waits for; a flag V8 would also refuse the code
 * cache under).
 */
static void pi_start_argv(const struct harness_paths *paths, struct sandbox_plan *plan)
{
    const char *h = paths->harness_dir;
    bool spare = plan->form == PLAN_SPARE;

    argv_add(plan, paths->pi_stdio, NULL);
    argv_add(plan, "start", NULL);
    argv_add(plan, spare ? "spare" : "cold", NULL);
    argv_add(plan, "--", NULL);
    argv_add(plan, h, HARNESS_NODE);
    if (spare) {
        argv_add(plan, "--optimize-for-size", NULL);
        argv_add(plan, "--import", NULL);
        argv_add(plan, h, PI_ATTACH_BIN "/preload.mjs");
    }
    argv_add(plan, h, spare ? PI_JS : PI_BUNDLE_START);
    argv_add(plan, "--no-extensions", NULL);
    argv_add(plan, "--extension", NULL);
    argv_add(plan, h, "extension/index.js");
    argv_add(plan, "--mode", NULL);
    argv_add(plan, "rpc", NULL);
    argv_add(plan, "--no-themes", NULL);
    argv_add(plan, "--", NULL);
    argv_add(plan, h, HARNESS_NODE);
    if (spare)
        argv_add(plan, "--optimize-for-size", NULL);
    argv_add(plan, h, spare ? PI_ACP_JS : PI_ACP_BUNDLE_START);
    json_object_array_add(plan->ro_binds, json_object_new_string(paths->pi_stdio));
}

static const char *pi_api_for(const char *provider)
{
    if (strcmp(provider, "anthropic") == 0)
        return "anthropic-messages";
    return "openai-completions";
}

/*
 * runtime_provided: the sandbox gets its own copy of the one login the run uses — the entry of
 * the operator's auth.json for pi provider `slug` (an OAuth login or an API key) — as the
 * auth.json of its private agent folder. Other providers' logins and the rest of the folder
 * (settings, extensions, sessions) stay out, and so does an OAuth refresh token, for the
 * reasons codex.c gives.
 */
static int pi_subscription_login(const struct harness_paths *paths, struct sandbox_plan *plan,
                                 const char *slug, char *err, size_t errlen)
{
    json_object *doc = NULL, *entry, *copy;
    int r;

    r = harness_login_load(paths->logins ? paths->logins->pi_agent_dir : NULL, "auth.json", "pi",
                           "AGENT_RUNNER_PI_AGENT_DIR", &doc, err, errlen);
    if (r < 0)
        return r;
    entry = jsonx_get(doc, slug);
    if (!entry || !json_object_is_type(entry, json_type_object)) {
        json_object_put(doc);
        snprintf(err, errlen, "modelConnection.credentialMode: \"runtime_provided\": the "
                              "operator's pi login (AGENT_RUNNER_PI_AGENT_DIR) holds no login for "
                              "provider \"%s\"",
                 slug);
        return AR_E_INVALID_REQUEST;
    }
    if (jsonx_get(entry, "refresh"))
        json_object_object_add(entry, "refresh", json_object_new_string(""));
    copy = json_object_new_object();
    r = -ENOMEM;
    if (copy && json_object_object_add(copy, slug, json_object_get(entry)) == 0)
        r = harness_add_login_file(plan, PI_AGENT_DIR "/auth.json", copy);
    json_object_put(copy);
    json_object_put(doc);
    if (r < 0)
        snprintf(err, errlen, "cannot copy the pi login: %s", ar_strerror(r));
    return r;
}

/* The provider's baseUrl: the endpoint's, or the sandbox's model gateway. */
static void pi_base_url(const struct sandbox_plan *plan, const struct run_request *req,
                        json_object *prov)
{
    char gw[1200];
    const char *url = harness_model_url(plan, req, gw, sizeof(gw));

    if (url)
        json_object_object_add(prov, "baseUrl", json_object_new_string(url));
}

static int pi_plan(const struct harness_paths *paths, const struct run_request *req,
                   struct sandbox_plan *plan, char *err, size_t errlen)
{
    json_object *models, *providers, *prov, *model_list, *entry, *settings, *retry;
    const struct credential *key;
    const char *slug, *model;
    bool custom;

    if (pi_prestarted(paths, req, plan))
        pi_start_argv(paths, plan);
    else
        harness_node_argv(paths, plan, PI_ACP_JS);
    json_object_array_add(plan->ro_binds, json_object_new_string(paths->harness_dir));
    pi_launch_env(paths, req, plan);
    harness_setenv(plan, "PI_OFFLINE", "1");
    harness_setenv(plan, "PI_CODING_AGENT_DIR", PI_AGENT_DIR);
    /* a spare's environment exists before any session: no key, no connection variables
     * (spare_ineligible keeps runs that need them cold) */
    if (plan->form == PLAN_COLD)
        harness_connection_env(plan, req);

    if (req->system_prompt)
        harness_add_file(plan, PI_AGENT_DIR "/SYSTEM.md", req->system_prompt, 0600);
    if (req->append_system_prompt)
        harness_add_file(plan, PI_AGENT_DIR "/APPEND_SYSTEM.md", req->append_system_prompt,
                         0600);

    if (!req->mc.present) {
        snprintf(err, errlen, "modelConnection: required for pi");
        return AR_E_INVALID_REQUEST;
    }
    model = req->model;
    if (!model || !model[0]) {
        snprintf(err, errlen, "model: required for pi");
        return AR_E_INVALID_REQUEST;
    }
    key = harness_credential(req, CREDENTIAL_USAGE_OPAQUE_HTTP);
    if (!key)
        key = harness_credential(req, -1);
    custom = strcmp(req->mc.deployment, "custom") == 0 || req->connection_slug;
    if (custom && !req->mc.base_url) {
        snprintf(err, errlen, "modelConnection.endpoint.baseUrl: required for a custom "
                              "deployment");
        return AR_E_INVALID_REQUEST;
    }
    if (!key && req->mc.credential_mode != CREDENTIAL_MODE_RUNTIME) {
        snprintf(err, errlen, "modelConnection.credentials: pi needs an API key");
        return AR_E_INVALID_REQUEST;
    }
    /*
     * custom: a provider of our own (connection.slug, else "custom"); otherwise the request's
     * provider is one of pi's built-ins and the model is registered into it (its endpoint, when
     * given, routes the built-in provider through it).
     */
    slug = custom ? (req->connection_slug ? req->connection_slug : "custom") : req->mc.provider;
    /* "<provider>/<id>" names the same route: the fully qualified form is what pi selects */
    if (strncmp(model, slug, strlen(slug)) == 0 && model[strlen(slug)] == '/')
        model += strlen(slug) + 1;
    if (req->mc.credential_mode == CREDENTIAL_MODE_RUNTIME) {
        int r = pi_subscription_login(paths, plan, slug, err, errlen);
        if (r < 0)
            return r;
    }

    entry = json_object_new_object();
    json_object_object_add(entry, "id", json_object_new_string(model));
    json_object_object_add(entry, "name", json_object_new_string(model));
    if (run_request_model_takes_images(req)) {
        /* pi takes a custom model for text-only unless told: images would never reach it */
        json_object *input = json_object_new_array();
        json_object_array_add(input, json_object_new_string("text"));
        json_object_array_add(input, json_object_new_string("image"));
        json_object_object_add(entry, "input", input);
    }
    model_list = json_object_new_array();
    json_object_array_add(model_list, entry);
    prov = json_object_new_object();
    pi_base_url(plan, req, prov);
    if (custom) {
        json_object *compat = json_object_new_object();
        json_object_object_add(prov, "api", json_object_new_string(pi_api_for(req->mc.provider)));
        json_object_object_add(compat, "supportsDeveloperRole", json_object_new_boolean(0));
        json_object_object_add(compat, "supportsReasoningEffort", json_object_new_boolean(0));
        json_object_object_add(prov, "compat", compat);
    }
    if (key && plan->form != PLAN_COLD) {
        /* read at every model request (pi runs it through the shell), never an env */
        harness_add_file(plan, PI_KEY_FILE, harness_key_value(plan, key), 0600);
        json_object_object_add(prov, "apiKey", json_object_new_string("!cat " PI_KEY_FILE));
    } else if (key) {
        json_object_object_add(prov, "apiKey", json_object_new_string(key->name));
    }
    if (req->mc.nheaders > 0 && !plan->gateway) /* else the gateway adds them */
        json_object_object_add(prov, "headers", harness_headers_json(req));
    json_object_object_add(prov, "models", model_list);
    providers = json_object_new_object();
    json_object_object_add(providers, slug, prov);
    models = json_object_new_object();
    json_object_object_add(models, "providers", providers);
    harness_add_file(plan, PI_AGENT_DIR "/models.json", jsonx_text(models, NULL), 0600);
    json_object_put(models);

    settings = json_object_new_object();
    json_object_object_add(settings, "defaultProvider", json_object_new_string(slug));
    json_object_object_add(settings, "defaultModel", json_object_new_string(model));
    json_object_object_add(settings, "quietStartup", json_object_new_boolean(1));
    json_object_object_add(settings, "enableInstallTelemetry", json_object_new_boolean(0));
    retry = json_object_new_object();
    json_object_object_add(retry, "enabled", json_object_new_boolean(0));
    json_object_object_add(settings, "retry", retry);
    harness_add_file(plan, PI_AGENT_DIR "/settings.json", jsonx_text(settings, NULL), 0600);
    json_object_put(settings);

    snprintf(plan->model_id, sizeof(plan->model_id), "%s/%s", slug, model);
    snprintf(plan->model_name, sizeof(plan->model_name), "%s", model);
    snprintf(plan->provider, sizeof(plan->provider), "%s", req->mc.provider);
    return 0;
}

/* pi's session files: <agent dir>/sessions/--<cwd>--/<time>_<id>.jsonl; pi-acp's session/load
 * finds the file by the id in its header line (the map pi-acp keeps beside it is not needed) */
static const struct harness_keep pi_keep = {.dirs = {".pi/agent/sessions", NULL},
                                            .suffix = ".jsonl"};

const struct harness_ops harness_pi = {
    .kind = HARNESS_PI,
    .name = "pi",
    .installed = pi_installed,
    .plan = pi_plan,
    .keep = &pi_keep,
};
