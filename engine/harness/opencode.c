/*
 * opencode — opencode-ai@1.18.33 (`opencode acp`), a Bun binary with the AI SDK built in.
 *
 * Offline it needs: ripgrep on PATH (else it downloads one for its grep/glob tools), and a
 * config folder holding `.gitignore` and the plugin SDK's package.json (else it `npm install`s
 * @opencode-ai/plugin on every start). Both are satisfied inside the sandbox: rg comes from
 * /usr/bin, the config folder is written into the private home. The model route is
 * OPENCODE_CONFIG_CONTENT: an @ai-sdk/openai-compatible provider (connection.slug, else
 * "custom") whose apiKey is "{env:<binding>}" — the key itself only travels in the
 * environment (through the model gateway: the placeholder, and baseURL is the sandbox's
 * gateway). Its local control server gets a random password per environment.
 * Unless the plan allows everything, every tool asks ({"*": "ask"}), so the runner's permission
 * plan decides each call.
 *
 * Spares (spare.h): PLAN_SPARE is the command and environment alone — no provider, no key, no
 * OPENCODE_CONFIG_CONTENT (an environment variable would override the files written at the
 * claim) — and the spare stops at ACP initialize (a session/new would cache the workspace's
 * configuration). PLAN_SESSION writes the same configuration as the global opencode.json of
 * the private home (OPENCODE_JSON) with "apiKey": "{file:OPENCODE_KEY_FILE}" and the key in
 * that 0600 file: a cold start reads it at its start, a claimed spare at session/new (opencode
 * re-reads its global and project configuration for every new session's instance: measured,
 * README "Spares"). PLAN_COLD keeps OPENCODE_CONFIG_CONTENT and the key in the environment.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "harness/harness.h"

#define OPENCODE_BIN "node_modules/opencode-linux-x64/bin/opencode"
#define OPENCODE_VERSION "1.18.33"
#define OPENCODE_CONFIG SANDBOX_HOME "/.config"
#define OPENCODE_JSON OPENCODE_CONFIG "/opencode/opencode.json"
#define OPENCODE_KEY_FILE OPENCODE_CONFIG "/opencode/runner-key"

static bool opencode_installed(const struct harness_paths *paths)
{
    return harness_file_exists(paths->harness_dir, OPENCODE_BIN);
}

static int opencode_plan(const struct harness_paths *paths, const struct run_request *req,
                         struct sandbox_plan *plan, char *err, size_t errlen)
{
    json_object *cfg, *providers, *prov, *options, *models, *agent, *title;
    const struct credential *key;
    const char *slug, *model;
    char bin[PATH_MAX], apikey[160], password[33], gw[1200];
    bool cold = plan->form == PLAN_COLD;

    snprintf(bin, sizeof(bin), "%s/%s", paths->harness_dir, OPENCODE_BIN);
    json_object_array_add(plan->argv, json_object_new_string(bin));
    json_object_array_add(plan->argv, json_object_new_string("acp"));
    json_object_array_add(plan->ro_binds, json_object_new_string(paths->harness_dir));
    harness_base_env(plan, NULL);
    harness_setenv(plan, "XDG_CONFIG_HOME", OPENCODE_CONFIG);
    harness_setenv(plan, "OPENCODE_DISABLE_MODELS_FETCH", "1");
    harness_setenv(plan, "OPENCODE_DISABLE_AUTOUPDATE", "1");
    harness_setenv(plan, "OPENCODE_DISABLE_DEFAULT_PLUGINS", "1");
    harness_setenv(plan, "OPENCODE_DISABLE_LSP_DOWNLOAD", "1");
    if (util_random_hex(password, 16) < 0) {
        snprintf(err, errlen, "cannot make a server password");
        return -EIO;
    }
    harness_setenv(plan, "OPENCODE_SERVER_PASSWORD", password);
    harness_add_file(plan, OPENCODE_CONFIG "/opencode/.gitignore", "node_modules\n", 0644);
    harness_add_file(plan,
                     OPENCODE_CONFIG "/opencode/node_modules/@opencode-ai/plugin/package.json",
                     "{\"name\":\"@opencode-ai/plugin\",\"version\":\"" OPENCODE_VERSION "\"}\n",
                     0644);
    /* a spare exists before any session: nothing of one (the claim writes OPENCODE_JSON) */
    if (plan->form == PLAN_SPARE)
        return 0;
    if (req->mc.credential_mode == CREDENTIAL_MODE_RUNTIME) {
        snprintf(err, errlen, "modelConnection.credentialMode: \"runtime_provided\" is not "
                              "supported for opencode on this runner (no operator login for it)");
        return AR_E_INVALID_REQUEST;
    }
    if (!req->mc.present || !req->mc.base_url) {
        snprintf(err, errlen, "modelConnection.endpoint.baseUrl: required for opencode on this "
                              "runner");
        return AR_E_INVALID_REQUEST;
    }
    if (!req->model || !req->model[0]) {
        snprintf(err, errlen, "model: required for opencode");
        return AR_E_INVALID_REQUEST;
    }
    key = harness_credential(req, CREDENTIAL_USAGE_OPAQUE_HTTP);
    if (!key)
        key = harness_credential(req, -1);
    if (!key) {
        snprintf(err, errlen, "modelConnection.credentials: opencode needs an API key");
        return AR_E_INVALID_REQUEST;
    }
    /* PLAN_SESSION: the key only in OPENCODE_KEY_FILE (spare_ineligible: one credential and
     * no modelConnection.environment, so nothing else would go into the environment) */
    if (cold)
        harness_connection_env(plan, req);
    else
        harness_add_file(plan, OPENCODE_KEY_FILE, harness_key_value(plan, key), 0600);
    slug = req->connection_slug ? req->connection_slug : "custom";
    model = req->model;
    if (strncmp(model, slug, strlen(slug)) == 0 && model[strlen(slug)] == '/')
        model += strlen(slug) + 1;
    if (cold)
        snprintf(apikey, sizeof(apikey), "{env:%s}", key->name);
    else
        snprintf(apikey, sizeof(apikey), "{file:" OPENCODE_KEY_FILE "}");

    options = json_object_new_object();
    json_object_object_add(options, "baseURL",
                           json_object_new_string(harness_model_url(plan, req, gw, sizeof(gw))));
    json_object_object_add(options, "apiKey", json_object_new_string(apikey));
    if (req->mc.nheaders > 0 && !plan->gateway) /* else the gateway adds them */
        json_object_object_add(options, "headers", harness_headers_json(req));
    models = json_object_new_object();
    json_object_object_add(models, model, json_object_new_object());
    prov = json_object_new_object();
    json_object_object_add(prov, "npm", json_object_new_string("@ai-sdk/openai-compatible"));
    json_object_object_add(prov, "name", json_object_new_string(req->mc.provider));
    json_object_object_add(prov, "options", options);
    json_object_object_add(prov, "models", models);
    providers = json_object_new_object();
    json_object_object_add(providers, slug, prov);
    cfg = json_object_new_object();
    json_object_object_add(cfg, "provider", providers);
    snprintf(plan->model_id, sizeof(plan->model_id), "%s/%s", slug, model);
    json_object_object_add(cfg, "model", json_object_new_string(plan->model_id));
    json_object_object_add(cfg, "autoupdate", json_object_new_boolean(0));
    json_object_object_add(cfg, "share", json_object_new_string("disabled"));
    title = json_object_new_object();
    json_object_object_add(title, "disable", json_object_new_boolean(1));
    agent = json_object_new_object();
    json_object_object_add(agent, "title", title);
    json_object_object_add(cfg, "agent", agent);
    if (!harness_plan_allows_all(req->permissions)) {
        /* every tool asks ("deny" would remove tools instead: FINDINGS.md (b)) */
        json_object *perm = json_object_new_object();
        json_object_object_add(perm, "*", json_object_new_string("ask"));
        json_object_object_add(cfg, "permission", perm);
    }
    if (cold)
        harness_setenv(plan, "OPENCODE_CONFIG_CONTENT", jsonx_text(cfg, NULL));
    else
        harness_add_file(plan, OPENCODE_JSON, jsonx_text(cfg, NULL), 0600);
    json_object_put(cfg);
    snprintf(plan->model_name, sizeof(plan->model_name), "%s", model);
    snprintf(plan->provider, sizeof(plan->provider), "%s", req->mc.provider);
    return 0;
}

const struct harness_ops harness_opencode = {
    .kind = HARNESS_OPENCODE,
    .name = "opencode",
    .installed = opencode_installed,
    .plan = opencode_plan,
};
