/*
 * codex — @zed-industries/codex-acp@0.16.0, a native binary bundling codex 0.137.
 *
 * Codex speaks only the OpenAI Responses API. The route goes into $CODEX_HOME/config.toml: a
 * `model_providers.agent-runner` entry with the endpoint and `env_key` naming the variable that
 * carries the key (the key itself only travels in the environment), or the built-in `openai`
 * provider without an endpoint. Through the model gateway (plan->gateway) it is always that
 * entry, with the sandbox's gateway as base_url and the placeholder in the variable. CODEX_HOME is
 * in the sandbox's private home, never under /tmp (codex refuses to install its helpers there).
 *
 * Permissions (tests/research/FINDINGS.md (a)). Our bubblewrap sandbox is the boundary and the
 * permission plan the policy: codex's own sandboxes (workspace-write, read-only) cannot start
 * inside ours, which allows no nested user namespaces, so sandbox_mode is always
 * danger-full-access. A plan that allows everything keeps approval_policy "never"; any other
 * plan gets "untrusted" (codex asks before every command it does not know to be safe), a rules
 * file that makes its "known safe" commands ask as well, and no provider-hosted web_search
 * (no approval covers it), so that every call reaches the runner's gate. harnessMode
 * "agent-full-access" (default) and "agent" both mean this (the workspace is the only writable
 * place either way); "read-only" needs codex's own read-only sandbox and is refused: send a
 * permission plan instead (e.g. {"default": "allow_reads"} or "deny").
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/jsonx.h"
#include "base/util.h"
#include "harness/harness.h"

#define CODEX_BIN "node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp"
#define CODEX_HOME SANDBOX_HOME "/.codex"

/* codex runs these without asking even under "untrusted" (codex-rs is_safe_command.rs) */
static const char *const known_safe[] = {
    "cat",  "cd",    "cut",   "echo",   "expr",   "false", "grep",   "head", "id",   "ls",
    "nl",   "paste", "pwd",   "rev",    "seq",    "stat",  "tail",   "tr",   "true", "uname",
    "uniq", "wc",    "which", "whoami", "numfmt", "tac",   "base64", "find", "rg",   "sed",
};

static bool codex_installed(const struct harness_paths *paths)
{
    return harness_file_exists(paths->harness_dir, CODEX_BIN);
}

/* A TOML basic string: quotes, backslashes and control characters escaped. */
static void toml_string(struct buf *b, const char *s)
{
    buf_append_char(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            buf_printf(b, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            buf_printf(b, "\\u%04x", *p);
        else
            buf_append_char(b, (char)*p);
    }
    buf_append_char(b, '"');
}

static void toml_kv(struct buf *b, const char *key, const char *value)
{
    buf_printf(b, "%s = ", key);
    toml_string(b, value);
    buf_append_char(b, '\n');
}

/*
 * runtime_provided: the sandbox gets its own copy of the operator's auth.json (an API key or a
 * ChatGPT login) in its private home, where codex may rewrite it in place. The refresh token
 * stays out: an agent must not hold the operator's long-lived login, and a refresh inside a
 * sandbox would rotate the operator's login away (ChatGPT refresh tokens are single-use) into
 * a copy that dies with the sandbox. The sandbox runs on the access token; refreshing stays
 * with the operator's own login folder (README "Subscription logins").
 */
static int codex_subscription_login(const struct harness_paths *paths, struct sandbox_plan *plan,
                                    char *err, size_t errlen)
{
    json_object *doc = NULL, *tokens;
    int r;

    r = harness_login_load(paths->logins ? paths->logins->codex_home : NULL, "auth.json",
                           "Codex", "AGENT_RUNNER_CODEX_HOME", &doc, err, errlen);
    if (r < 0)
        return r;
    tokens = jsonx_get(doc, "tokens");
    if (tokens && json_object_is_type(tokens, json_type_object) &&
        jsonx_get(tokens, "refresh_token"))
        json_object_object_add(tokens, "refresh_token", json_object_new_string(""));
    r = harness_add_login_file(plan, CODEX_HOME "/auth.json", doc);
    json_object_put(doc);
    if (r < 0)
        snprintf(err, errlen, "cannot copy the Codex login: %s", ar_strerror(r));
    return r;
}

/* $CODEX_HOME/rules/agent-runner.rules: every known-safe command asks too (a prompt rule wins
 * over codex's safe list), by its bare name and its /bin and /usr/bin paths. */
static void ask_rules(struct sandbox_plan *plan)
{
    static const char *const prefixes[] = {"", "/bin/", "/usr/bin/"};
    struct buf rules;

    buf_init(&rules, 16 * 1024);
    buf_append_str(&rules, "prefix_rule(pattern = [[");
    for (size_t i = 0; i < ARRAY_SIZE(known_safe); i++)
        for (size_t j = 0; j < ARRAY_SIZE(prefixes); j++)
            buf_printf(&rules, "%s\"%s%s\"", i + j ? ", " : "", prefixes[j], known_safe[i]);
    buf_append_str(&rules, "]], decision = \"prompt\")\n");
    harness_add_file(plan, CODEX_HOME "/rules/agent-runner.rules", buf_str(&rules), 0600);
    buf_release(&rules);
}

/* harnessMode and the permission plan: the approval policy codex runs under (see the top). */
static int approval_lines(const struct run_request *req, struct sandbox_plan *plan,
                          struct buf *toml, char *err, size_t errlen)
{
    const char *mode = req->harness_mode ? req->harness_mode : "agent-full-access";

    if (strcmp(mode, "read-only") == 0) {
        snprintf(err, errlen,
                 "harnessMode: \"read-only\" needs codex's own read-only sandbox, "
                 "which cannot run inside this runner's sandbox (no nested user "
                 "namespaces); send a permission plan instead (permissions.default "
                 "\"allow_reads\" or \"deny\")");
        return AR_E_INVALID_REQUEST;
    }
    if (strcmp(mode, "agent") != 0 && strcmp(mode, "agent-full-access") != 0) {
        snprintf(err, errlen,
                 "harnessMode: expected \"agent-full-access\", \"agent\" or "
                 "\"read-only\"");
        return AR_E_INVALID_REQUEST;
    }
    toml_kv(toml, "sandbox_mode", "danger-full-access");
    if (harness_plan_allows_all(req->permissions)) {
        toml_kv(toml, "approval_policy", "never");
        return 0;
    }
    toml_kv(toml, "approval_policy", "untrusted");
    toml_kv(toml, "web_search", "disabled");
    ask_rules(plan);
    return 0;
}

static int codex_plan(const struct harness_paths *paths, const struct run_request *req,
                      struct sandbox_plan *plan, char *err, size_t errlen)
{
    const struct credential *key;
    char bin[PATH_MAX], gw[1200];
    const char *model = req->model, *url;
    bool subscription = req->mc.credential_mode == CREDENTIAL_MODE_RUNTIME;
    struct buf toml;

    snprintf(bin, sizeof(bin), "%s/%s", paths->harness_dir, CODEX_BIN);
    json_object_array_add(plan->argv, json_object_new_string(bin));
    json_object_array_add(plan->ro_binds, json_object_new_string(paths->harness_dir));
    harness_base_env(plan, NULL);
    harness_setenv(plan, "CODEX_HOME", CODEX_HOME);
    if (!req->mc.present) {
        snprintf(err, errlen, "modelConnection: required for codex");
        return AR_E_INVALID_REQUEST;
    }
    if (!model || !model[0]) {
        snprintf(err, errlen, "model: required for codex");
        return AR_E_INVALID_REQUEST;
    }
    if (strncmp(model, "openai/", 7) == 0)
        model += 7;
    if (subscription) {
        int r = codex_subscription_login(paths, plan, err, errlen);
        if (r < 0)
            return r;
    }
    harness_connection_env(plan, req);
    key = harness_credential(req, CREDENTIAL_USAGE_OPAQUE_HTTP);
    if (!key)
        key = harness_credential(req, -1);

    buf_init(&toml, 64 * 1024);
    toml_kv(&toml, "model", model);
    if (approval_lines(req, plan, &toml, err, errlen) < 0) {
        buf_release(&toml);
        return AR_E_INVALID_REQUEST;
    }
    buf_append_str(&toml, "check_for_update_on_startup = false\n");
    if (subscription) /* the login is the file we copied in, never a keyring */
        toml_kv(&toml, "cli_auth_credentials_store", "file");
    url = harness_model_url(plan, req, gw, sizeof(gw));
    if (url) {
        if (!key && !subscription) {
            snprintf(err, errlen, "modelConnection.credentials: codex needs an API key for a "
                                  "custom endpoint");
            buf_release(&toml);
            return AR_E_INVALID_REQUEST;
        }
        toml_kv(&toml, "model_provider", "agent-runner");
        buf_append_str(&toml, "\n[model_providers.agent-runner]\n");
        toml_kv(&toml, "name", req->mc.provider);
        toml_kv(&toml, "base_url", url);
        if (subscription) /* authenticate with the login in auth.json */
            buf_append_str(&toml, "requires_openai_auth = true\n");
        else
            toml_kv(&toml, "env_key", key->name);
        toml_kv(&toml, "wire_api", "responses");
        if (req->mc.nheaders > 0 && !plan->gateway) { /* else the gateway adds them */
            buf_append_str(&toml, "\n[model_providers.agent-runner.http_headers]\n");
            for (size_t i = 0; i < req->mc.nheaders; i++) {
                toml_string(&toml, req->mc.headers[i].name);
                buf_append_str(&toml, " = ");
                toml_string(&toml, req->mc.headers[i].value);
                buf_append_char(&toml, '\n');
            }
        }
    } else {
        if (!subscription && (!key || strcmp(key->name, "OPENAI_API_KEY") != 0)) {
            snprintf(err, errlen, "modelConnection.credentials: codex's built-in provider "
                                  "needs OPENAI_API_KEY");
            buf_release(&toml);
            return AR_E_INVALID_REQUEST;
        }
        toml_kv(&toml, "model_provider", "openai");
    }
    harness_add_file(plan, CODEX_HOME "/config.toml", buf_str(&toml), 0600);
    buf_release(&toml);
    snprintf(plan->model_id, sizeof(plan->model_id), "%s", model);
    snprintf(plan->model_name, sizeof(plan->model_name), "%s", model);
    snprintf(plan->provider, sizeof(plan->provider), "%s", req->mc.provider);
    return 0;
}

/* codex reports unknown model slugs as assistant text on every turn */
static bool codex_is_noise(const char *text)
{
    return strncmp(text, "Model metadata for `", 20) == 0 &&
           strstr(text, "` not found. Defaulting to fallback metadata") != NULL;
}

/* codex's rollouts: $CODEX_HOME/sessions/<yyyy>/<mm>/<dd>/rollout-<time>-<thread id>.jsonl,
 * which codex-acp's session/load resumes (its login, auth.json, and its databases lie outside).
 * Its rollout writer has flushed the turn by the time the prompt is answered. */
static const struct harness_keep codex_keep = {
    .dirs = {".codex/sessions", NULL}, .suffix = ".jsonl", .settle_ms = 0};

const struct harness_ops harness_codex = {
    .kind = HARNESS_CODEX,
    .name = "codex",
    .installed = codex_installed,
    .plan = codex_plan,
    .is_noise = codex_is_noise,
    .keep = &codex_keep,
};
