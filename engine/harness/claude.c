/*
 * claude — @zed-industries/claude-agent-acp@0.23.1, which drives the bundled Claude Code CLI.
 *
 * The route is pure environment, as Agenta's runner sets it: ANTHROPIC_BASE_URL from the
 * endpoint (the SDK appends /v1/messages itself, so a trailing /v1 is dropped), the key under
 * its binding name (ANTHROPIC_API_KEY normally), ANTHROPIC_MODEL for the model, Bedrock/Vertex
 * switches for those deployments; with credentialMode runtime_provided the operator's claude.ai
 * login instead of a key (claude_subscription_login). Non-essential traffic, telemetry and the
 * auto-updater are off; the configuration folder lives in the sandbox's private home. Through
 * the model gateway (plan->gateway) ANTHROPIC_BASE_URL is the sandbox's gateway and the key
 * variable holds the placeholder. The
 * adapter and the CLI it spawns (as `node`, from PATH) run on the pinned Node 20, whatever else
 * the host has.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "base/jsonx.h"
#include "harness/harness.h"

#define CLAUDE_JS "node_modules/@zed-industries/claude-agent-acp/dist/index.js"
#define CLAUDE_CONFIG SANDBOX_HOME "/.claude"

static bool claude_installed(const struct harness_paths *paths)
{
    return harness_file_exists(paths->harness_dir, CLAUDE_JS) &&
           harness_file_exists(paths->harness_dir, HARNESS_NODE);
}

/*
 * runtime_provided: the sandbox gets its own copy of the operator's Claude login — the
 * `claudeAiOauth` entry of .credentials.json and nothing else of the folder or the file (which
 * may also hold MCP servers' tokens) — in its private configuration folder. The refresh token
 * stays out, for the reasons codex.c gives: the sandbox runs on the access token.
 */
static int claude_subscription_login(const struct harness_paths *paths, struct sandbox_plan *plan,
                                     char *err, size_t errlen)
{
    json_object *doc = NULL, *oauth, *copy;
    int r;

    r = harness_login_load(paths->logins ? paths->logins->claude_config_dir : NULL,
                           ".credentials.json", "Claude", "AGENT_RUNNER_CLAUDE_CONFIG_DIR", &doc,
                           err, errlen);
    if (r < 0)
        return r;
    oauth = jsonx_get(doc, "claudeAiOauth");
    if (!jsonx_str(oauth, "accessToken")) {
        json_object_put(doc);
        snprintf(err, errlen, "modelConnection.credentialMode: \"runtime_provided\": the "
                              "operator's Claude login (AGENT_RUNNER_CLAUDE_CONFIG_DIR) holds no "
                              "claude.ai login (login_unusable)");
        return AR_E_INVALID_REQUEST;
    }
    if (jsonx_get(oauth, "refreshToken"))
        json_object_object_add(oauth, "refreshToken", json_object_new_string(""));
    copy = json_object_new_object();
    r = -ENOMEM;
    if (copy && json_object_object_add(copy, "claudeAiOauth", json_object_get(oauth)) == 0)
        r = harness_add_login_file(plan, CLAUDE_CONFIG "/.credentials.json", copy);
    json_object_put(copy);
    json_object_put(doc);
    if (r < 0)
        snprintf(err, errlen, "cannot copy the Claude login: %s", ar_strerror(r));
    return r;
}

static int claude_plan(const struct harness_paths *paths, const struct run_request *req,
                       struct sandbox_plan *plan, char *err, size_t errlen)
{
    char node_dir[PATH_MAX], base[2048], gw[1200];
    const char *deployment = req->mc.present ? req->mc.deployment : "direct", *url;

    /* the pinned node runs the adapter, and the Claude Code CLI the SDK spawns as `node` */
    harness_node_argv(paths, plan, CLAUDE_JS);
    snprintf(node_dir, sizeof(node_dir), "%s/%s", paths->harness_dir, HARNESS_NODE_DIR);
    json_object_array_add(plan->ro_binds, json_object_new_string(paths->harness_dir));
    harness_base_env(plan, node_dir);
    harness_setenv(plan, "CLAUDE_CONFIG_DIR", CLAUDE_CONFIG);
    harness_setenv(plan, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    harness_setenv(plan, "DISABLE_AUTOUPDATER", "1");
    harness_setenv(plan, "DISABLE_TELEMETRY", "1");
    harness_setenv(plan, "DISABLE_ERROR_REPORTING", "1");
    harness_setenv(plan, "ENABLE_TOOL_SEARCH", "false");
    harness_setenv(plan, "IS_SANDBOX", "1");
    if (!req->mc.present) {
        snprintf(err, errlen, "modelConnection: required for claude");
        return AR_E_INVALID_REQUEST;
    }
    if (req->mc.credential_mode == CREDENTIAL_MODE_RUNTIME) {
        int r = claude_subscription_login(paths, plan, err, errlen);
        if (r < 0)
            return r;
    }
    harness_connection_env(plan, req);
    url = harness_model_url(plan, req, gw, sizeof(gw));
    if (url) {
        size_t n;

        snprintf(base, sizeof(base), "%s", url);
        n = strlen(base);
        while (n > 0 && base[n - 1] == '/')
            base[--n] = '\0';
        if (n >= 3 && strcmp(base + n - 3, "/v1") == 0)
            base[n - 3] = '\0';
        harness_setenv(plan, "ANTHROPIC_BASE_URL", base);
    }
    if (strcmp(deployment, "bedrock") == 0) {
        harness_setenv(plan, "CLAUDE_CODE_USE_BEDROCK", "1");
        if (req->mc.region) {
            harness_setenv(plan, "AWS_REGION", req->mc.region);
            harness_setenv(plan, "AWS_DEFAULT_REGION", req->mc.region);
        }
    } else if (strcmp(deployment, "vertex") == 0 || strcmp(deployment, "vertex_ai") == 0) {
        harness_setenv(plan, "CLAUDE_CODE_USE_VERTEX", "1");
        if (req->mc.region)
            harness_setenv(plan, "CLOUD_ML_REGION", req->mc.region);
    }
    if (req->model && req->model[0]) {
        const char *model = req->model;
        /* "anthropic/claude-x" names the same model */
        if (strncmp(model, "anthropic/", 10) == 0)
            model += 10;
        harness_setenv(plan, "ANTHROPIC_MODEL", model);
        harness_setenv(plan, "ANTHROPIC_CUSTOM_MODEL_OPTION", model);
        snprintf(plan->model_id, sizeof(plan->model_id), "%s", model);
        snprintf(plan->model_name, sizeof(plan->model_name), "%s", model);
    }
    snprintf(plan->provider, sizeof(plan->provider), "%s", req->mc.provider);
    return 0;
}

/* Claude Code's session logs: $CLAUDE_CONFIG_DIR/projects/<cwd with / as ->/<session id>.jsonl,
 * which claude-agent-acp's session/load resumes (its login, .credentials.json, lies outside).
 * The CLI queues its log lines and appends them every 100 ms (FLUSH_INTERVAL_MS of its session
 * storage), after the prompt's answer. */
static const struct harness_keep claude_keep = {
    .dirs = {".claude/projects", NULL}, .suffix = ".jsonl", .settle_ms = 300};

const struct harness_ops harness_claude = {
    .kind = HARNESS_CLAUDE,
    .name = "claude",
    .installed = claude_installed,
    .plan = claude_plan,
    .keep = &claude_keep,
};
