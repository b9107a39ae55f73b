/* login: the operator's harness logins, /subscription-status, and what a sandbox gets of them. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../fcgi/config.h"
#include "base/fstree.h"
#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "harness/harness.h"
#include "harness/login.h"
#include "request/request.h"
#include "suites.h"

/* A temp folder with one sub-folder per name; removed by rm_tree. */
static void mk_tree(char *root, size_t len)
{
    snprintf(root, len, "/tmp/ar-login.XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(root));
}

static void put(const char *root, const char *rel, const char *content)
{
    char path[PATH_MAX];

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    CU_ASSERT_EQUAL_FATAL(util_write_file(path, content, strlen(content), 0600), 0);
}

static void sub(const char *root, const char *rel, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", root, rel);
    CU_ASSERT_EQUAL_FATAL(util_mkdir_p(out, 0700), 0);
}

static enum login_state state_of(const char *dir, const char *name)
{
    json_object *doc = NULL;
    enum login_state s = login_read(dir, name, &doc);

    CU_ASSERT_EQUAL(doc != NULL, s == LOGIN_READY);
    json_object_put(doc);
    return s;
}

static void test_login_read_states(void)
{
    char root[64], d[PATH_MAX], fifo[PATH_MAX + 16], *big;
    size_t n = LOGIN_FILE_MAX + 10;

    mk_tree(root, sizeof(root));
    CU_ASSERT_EQUAL(state_of(NULL, "auth.json"), LOGIN_NOT_CONFIGURED);
    CU_ASSERT_EQUAL(state_of("", "auth.json"), LOGIN_NOT_CONFIGURED);
    snprintf(d, sizeof(d), "%s/absent", root);
    CU_ASSERT_EQUAL(state_of(d, "auth.json"), LOGIN_MISSING);
    sub(root, "empty", d, sizeof(d));
    CU_ASSERT_EQUAL(state_of(d, "auth.json"), LOGIN_MISSING);
    put(root, "file", "{}");
    snprintf(d, sizeof(d), "%s/file", root); /* the "folder" is a file */
    CU_ASSERT_EQUAL(state_of(d, "auth.json"), LOGIN_MISSING);

    sub(root, "bad", d, sizeof(d));
    put(d, "zero", "");
    CU_ASSERT_EQUAL(state_of(d, "zero"), LOGIN_UNUSABLE);
    put(d, "text", "not json");
    CU_ASSERT_EQUAL(state_of(d, "text"), LOGIN_UNUSABLE);
    put(d, "array", "[{\"a\":1}]");
    CU_ASSERT_EQUAL(state_of(d, "array"), LOGIN_UNUSABLE);
    put(d, "object0", " {} ");
    CU_ASSERT_EQUAL(state_of(d, "object0"), LOGIN_UNUSABLE);
    put(d, "trailing", "{\"a\":1} x");
    CU_ASSERT_EQUAL(state_of(d, "trailing"), LOGIN_UNUSABLE);
    sub(d, "adir", fifo, sizeof(fifo));
    CU_ASSERT_EQUAL(state_of(d, "adir"), LOGIN_UNUSABLE);
    /* a FIFO planted as the login neither blocks nor counts */
    snprintf(fifo, sizeof(fifo), "%s/fifo", d);
    CU_ASSERT_EQUAL_FATAL(mkfifo(fifo, 0600), 0);
    CU_ASSERT_EQUAL(state_of(d, "fifo"), LOGIN_UNUSABLE);
    big = malloc(n + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    memset(big, ' ', n);
    big[0] = '{';
    memcpy(big + 1, "\"a\":1", 5);
    big[n - 1] = '}';
    big[n] = '\0';
    put(d, "big", big);
    free(big);
    CU_ASSERT_EQUAL(state_of(d, "big"), LOGIN_UNUSABLE);

    sub(root, "good", d, sizeof(d));
    put(d, "auth.json", "{\"OPENAI_API_KEY\":\"sk-login-test-0001\"}");
    CU_ASSERT_EQUAL(state_of(d, "auth.json"), LOGIN_READY);
    /* a symlink the operator made is followed */
    snprintf(fifo, sizeof(fifo), "%s/link.json", d);
    CU_ASSERT_EQUAL_FATAL(symlink("auth.json", fifo), 0);
    CU_ASSERT_EQUAL(state_of(d, "link.json"), LOGIN_READY);
    CU_ASSERT_EQUAL(fstree_remove(root), 0);
}

static const char *harness_state(json_object *st, const char *harness, const char *key)
{
    return jsonx_str(jsonx_get(jsonx_get(st, "harnesses"), harness), key);
}

static void test_login_status_envelope(void)
{
    char root[64], codex[PATH_MAX], claude[PATH_MAX], pi[PATH_MAX];
    struct login_dirs dirs = {0};
    json_object *st, *providers;
    const char *text;

    mk_tree(root, sizeof(root));
    /* nothing configured: every harness but opencode says so; opencode is unsupported */
    st = login_status(&dirs);
    CU_ASSERT_PTR_NOT_NULL_FATAL(st);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(st, "version")), 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(harness_state(st, "codex", "state")), "not_configured");
    CU_ASSERT_STRING_EQUAL(TEST_STR(harness_state(st, "codex", "provider")), "openai");
    CU_ASSERT_STRING_EQUAL(TEST_STR(harness_state(st, "claude", "state")), "not_configured");
    CU_ASSERT_STRING_EQUAL(TEST_STR(harness_state(st, "claude", "provider")), "anthropic");
    CU_ASSERT_STRING_EQUAL(TEST_STR(harness_state(st, "pi_core", "state")), "not_configured");
    CU_ASSERT_PTR_NULL(harness_state(st, "pi_core", "provider"));
    CU_ASSERT_STRING_EQUAL(TEST_STR(harness_state(st, "pi_agenta", "state")), "not_configured");
    CU_ASSERT_STRING_EQUAL(TEST_STR(harness_state(st, "opencode", "state")), "unsupported");
    CU_ASSERT_EQUAL(json_object_object_length(jsonx_get(st, "harnesses")), 5);
    json_object_put(st);

    /* codex ready, claude missing, pi unusable */
    sub(root, "codex", codex, sizeof(codex));
    put(codex, "auth.json", "{\"OPENAI_API_KEY\":\"sk-status-secret-0001\"}");
    sub(root, "claude", claude, sizeof(claude));
    sub(root, "pi", pi, sizeof(pi));
    put(pi, "auth.json", "");
    dirs = (struct login_dirs){codex, claude, pi};
    st = login_status(&dirs);
    CU_ASSERT_PTR_NOT_NULL_FATAL(st);
    CU_ASSERT_STRING_EQUAL(TEST_STR(harness_state(st, "codex", "state")), "ready");
    CU_ASSERT_STRING_EQUAL(TEST_STR(harness_state(st, "claude", "state")), "login_missing");
    CU_ASSERT_STRING_EQUAL(TEST_STR(harness_state(st, "pi_core", "state")), "login_unusable");
    CU_ASSERT_STRING_EQUAL(TEST_STR(harness_state(st, "pi_agenta", "state")), "login_unusable");
    text = jsonx_text(st, NULL);
    CU_ASSERT_PTR_NULL(strstr(text, root)); /* never a path */
    CU_ASSERT_PTR_NULL(strstr(text, "sk-status-secret"));
    json_object_put(st);

    /* pi names the families of its subscription logins only: sorted, once each */
    put(claude, ".credentials.json",
        "{\"claudeAiOauth\":{\"accessToken\":\"sk-ant-oat01-status\",\"refreshToken\":\"r\"}}");
    put(pi, "auth.json",
        "{\"openai-codex\":{\"type\":\"oauth\",\"access\":\"a1-secret-value\",\"refresh\":\"r\","
        "\"expires\":1},\"anthropic\":{\"access\":\"a2-secret-value\",\"refresh\":\"r2\"},"
        "\"openai\":{\"type\":\"api_key\",\"key\":\"sk-pi-key-secret\"},"
        "\"github-copilot\":{\"type\":\"oauth\",\"access\":\"x\",\"refresh\":\"y\"}}");
    st = login_status(&dirs);
    CU_ASSERT_STRING_EQUAL(TEST_STR(harness_state(st, "claude", "state")), "ready");
    CU_ASSERT_STRING_EQUAL(TEST_STR(harness_state(st, "pi_core", "state")), "ready");
    providers = jsonx_get(jsonx_get(jsonx_get(st, "harnesses"), "pi_agenta"), "providers");
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(providers), 2);
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(providers, 0)),
                           "anthropic");
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(providers, 1)),
                           "openai");
    text = jsonx_text(st, NULL);
    CU_ASSERT_PTR_NULL(strstr(text, "secret"));
    CU_ASSERT_PTR_NULL(strstr(text, "github"));
    json_object_put(st);

    /* a pi login with only an API key is ready, and names no plan */
    put(pi, "auth.json", "{\"openai\":{\"type\":\"api_key\",\"key\":\"sk-pi-key-secret\"}}");
    st = login_status(&dirs);
    CU_ASSERT_STRING_EQUAL(TEST_STR(harness_state(st, "pi_core", "state")), "ready");
    CU_ASSERT_PTR_NULL(jsonx_get(jsonx_get(jsonx_get(st, "harnesses"), "pi_core"), "providers"));
    json_object_put(st);
    CU_ASSERT_EQUAL(fstree_remove(root), 0);
}

static void test_login_state_names(void)
{
    CU_ASSERT_STRING_EQUAL(login_state_name(LOGIN_READY), "ready");
    CU_ASSERT_STRING_EQUAL(login_state_name(LOGIN_NOT_CONFIGURED), "not_configured");
    CU_ASSERT_STRING_EQUAL(login_state_name(LOGIN_MISSING), "login_missing");
    CU_ASSERT_STRING_EQUAL(login_state_name(LOGIN_UNUSABLE), "login_unusable");
    CU_ASSERT_STRING_EQUAL(login_state_name(LOGIN_UNSUPPORTED), "unsupported");
}

static void test_login_epoch_mix(void)
{
    uint8_t key[32], e1[32], e2[32], e3[32], d1[32], d2[32];

    memset(key, 7, sizeof(key));
    memset(e1, 1, sizeof(e1));
    memcpy(e2, e1, sizeof(e1));
    memcpy(e3, e1, sizeof(e1));
    memset(d1, 2, sizeof(d1));
    memset(d2, 3, sizeof(d2));
    CU_ASSERT_EQUAL(login_epoch_mix(key, e1, d1), 0);
    CU_ASSERT_EQUAL(login_epoch_mix(key, e2, d1), 0);
    CU_ASSERT_EQUAL(login_epoch_mix(key, e3, d2), 0);
    CU_ASSERT_EQUAL(memcmp(e1, e2, 32), 0); /* same login, same epoch */
    CU_ASSERT_NOT_EQUAL(memcmp(e1, e3, 32), 0);
    memset(e2, 1, sizeof(e2));
    CU_ASSERT_NOT_EQUAL(memcmp(e1, e2, 32), 0); /* the login changes the epoch */
}

/* ---- what a harness gives its sandbox ------------------------------------------------------ */

static int plan_for(const char *body, const struct login_dirs *dirs, struct sandbox_plan *plan,
                    char *err, size_t errlen)
{
    struct harness_paths paths = {.harness_dir = "/opt/harnesses", .logins = dirs};
    struct request_limits lim;
    struct run_request req;
    int r;

    request_limits_default(&lim);
    r = request_parse(body, strlen(body), &lim, &req, err, errlen);
    CU_ASSERT_EQUAL_FATAL(r, 0);
    sandbox_plan_init(plan);
    r = harness_get(req.harness)->plan(&paths, &req, plan, err, errlen);
    run_request_release(&req);
    return r;
}

/* The plan's file at path, parsed (NULL when absent). */
static json_object *plan_file(const struct sandbox_plan *plan, const char *path, int *ret_mode)
{
    for (size_t i = 0; i < json_object_array_length(plan->files); i++) {
        json_object *f = json_object_array_get_idx(plan->files, i);
        if (strcmp(jsonx_str(f, "path"), path) == 0) {
            *ret_mode = json_object_get_int(jsonx_get(f, "mode"));
            return test_json(jsonx_str(f, "content"));
        }
    }
    return NULL;
}

static const char *plan_text(const struct sandbox_plan *plan, const char *path)
{
    for (size_t i = 0; i < json_object_array_length(plan->files); i++) {
        json_object *f = json_object_array_get_idx(plan->files, i);
        if (strcmp(jsonx_str(f, "path"), path) == 0)
            return jsonx_str(f, "content");
    }
    return "";
}

#define SUBSCRIPTION(harness, provider, extra)                                                     \
    "{\"harness\":\"" harness "\",\"model\":\"fake-model\",\"messages\":[{\"role\":\"user\","      \
    "\"content\":\"hi\"}],\"modelConnection\":{\"provider\":\"" provider "\",\"deployment\":"      \
    "\"direct\",\"credentialMode\":\"runtime_provided\",\"credentials\":[]" extra "}}"

static void test_login_codex_gets_a_private_copy_without_refresh_token(void)
{
    char root[64], codex[PATH_MAX], err[512];
    struct login_dirs dirs = {0};
    struct sandbox_plan plan;
    json_object *auth;
    uint8_t first[32];
    int mode = 0;

    mk_tree(root, sizeof(root));
    sub(root, "codex", codex, sizeof(codex));
    put(codex, "auth.json",
        "{\"auth_mode\":\"chatgpt\",\"OPENAI_API_KEY\":null,\"tokens\":{\"id_token\":\"id.t.x\","
        "\"access_token\":\"acc.token.value\",\"refresh_token\":\"rt-operator-only\",\"account_"
        "id\":"
        "\"acct-1\"},\"last_refresh\":\"2026-01-01T00:00:00Z\"}");
    put(codex, "config.toml", "model = \"operator-only\"\n");
    dirs.codex_home = codex;
    /* with an endpoint: our provider authenticates with the login */
    CU_ASSERT_EQUAL(plan_for(SUBSCRIPTION("codex", "openai",
                                          ",\"endpoint\":{\"baseUrl\":\"http://127.0.0.1:1/v1\"}"),
                             &dirs, &plan, err, sizeof(err)),
                    0);
    auth = plan_file(&plan, SANDBOX_HOME "/.codex/auth.json", &mode);
    CU_ASSERT_PTR_NOT_NULL_FATAL(auth);
    CU_ASSERT_EQUAL(mode, 0600);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(auth, "tokens"), "refresh_token")), "");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(auth, "tokens"), "access_token")),
                           "acc.token.value");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(auth, "auth_mode")), "chatgpt");
    json_object_put(auth);
    CU_ASSERT_TRUE(plan.has_login);
    memcpy(first, plan.login_digest, 32);
    CU_ASSERT_PTR_NOT_NULL(strstr(plan_text(&plan, SANDBOX_HOME "/.codex/config.toml"),
                                  "requires_openai_auth = true"));
    CU_ASSERT_PTR_NOT_NULL(strstr(plan_text(&plan, SANDBOX_HOME "/.codex/config.toml"),
                                  "cli_auth_credentials_store = \"file\""));
    CU_ASSERT_PTR_NULL(strstr(plan_text(&plan, SANDBOX_HOME "/.codex/config.toml"), "env_key"));
    CU_ASSERT_PTR_NULL(
        strstr(plan_text(&plan, SANDBOX_HOME "/.codex/config.toml"), "operator-only"));
    CU_ASSERT_PTR_NULL(strstr(jsonx_text(plan.files, NULL), "rt-operator-only"));
    CU_ASSERT_PTR_NULL(strstr(jsonx_text(plan.env, NULL), "acc.token")); /* a file, not env */
    {
        /* what the sandbox got is scrubbed from this thread's log lines */
        char *line = log_redact_copy("token acc.token.value for acct-1", 256);
        CU_ASSERT_PTR_NOT_NULL_FATAL(line);
        CU_ASSERT_PTR_NULL(strstr(line, "acc.token.value"));
        free(line);
        log_redact_clear();
    }
    sandbox_plan_release(&plan);

    /* without one: codex's built-in provider; a changed login changes the digest */
    put(codex, "auth.json", "{\"OPENAI_API_KEY\":\"sk-codex-login-0002\"}");
    CU_ASSERT_EQUAL(plan_for(SUBSCRIPTION("codex", "openai", ""), &dirs, &plan, err, sizeof(err)),
                    0);
    CU_ASSERT_PTR_NOT_NULL(strstr(plan_text(&plan, SANDBOX_HOME "/.codex/config.toml"),
                                  "model_provider = \"openai\""));
    CU_ASSERT_NOT_EQUAL(memcmp(first, plan.login_digest, 32), 0);
    sandbox_plan_release(&plan);

    /* no login: refused, naming the setting and never the folder */
    put(codex, "auth.json", "");
    CU_ASSERT_EQUAL(plan_for(SUBSCRIPTION("codex", "openai", ""), &dirs, &plan, err, sizeof(err)),
                    AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENT_RUNNER_CODEX_HOME"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "login_unusable"));
    CU_ASSERT_PTR_NULL(strstr(err, root));
    sandbox_plan_release(&plan);
    dirs.codex_home = NULL;
    CU_ASSERT_EQUAL(plan_for(SUBSCRIPTION("codex", "openai", ""), &dirs, &plan, err, sizeof(err)),
                    AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "does not have"));
    sandbox_plan_release(&plan);
    CU_ASSERT_EQUAL(fstree_remove(root), 0);
}

static void test_login_claude_gets_only_its_oauth_entry(void)
{
    char root[64], claude[PATH_MAX], err[512];
    struct login_dirs dirs = {0};
    struct sandbox_plan plan;
    json_object *cred;
    int mode = 0;

    mk_tree(root, sizeof(root));
    sub(root, "claude", claude, sizeof(claude));
    put(claude, ".credentials.json",
        "{\"claudeAiOauth\":{\"accessToken\":\"sk-ant-oat01-copy\",\"refreshToken\":"
        "\"sk-ant-ort01-operator-only\",\"expiresAt\":4102444800000,\"scopes\":[\"user:inference\"]"
        "},"
        "\"mcpOAuth\":{\"server\":{\"accessToken\":\"mcp-token-operator-only\"}}}");
    dirs.claude_config_dir = claude;
    CU_ASSERT_EQUAL(
        plan_for(SUBSCRIPTION("claude", "anthropic", ""), &dirs, &plan, err, sizeof(err)), 0);
    cred = plan_file(&plan, SANDBOX_HOME "/.claude/.credentials.json", &mode);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cred);
    CU_ASSERT_EQUAL(mode, 0600);
    CU_ASSERT_EQUAL(json_object_object_length(cred), 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(cred, "claudeAiOauth"), "accessToken")),
                           "sk-ant-oat01-copy");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(cred, "claudeAiOauth"), "refreshToken")),
                           "");
    json_object_put(cred);
    CU_ASSERT_PTR_NULL(strstr(jsonx_text(plan.files, NULL), "operator-only"));
    CU_ASSERT_PTR_NULL(jsonx_get(plan.env, "ANTHROPIC_API_KEY"));
    sandbox_plan_release(&plan);

    /* a file without a claude.ai login is refused */
    put(claude, ".credentials.json", "{\"mcpOAuth\":{}}");
    CU_ASSERT_EQUAL(
        plan_for(SUBSCRIPTION("claude", "anthropic", ""), &dirs, &plan, err, sizeof(err)),
        AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENT_RUNNER_CLAUDE_CONFIG_DIR"));
    sandbox_plan_release(&plan);
    {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof(path), "%s/.credentials.json", claude);
        CU_ASSERT_EQUAL(unlink(path), 0);
    }
    CU_ASSERT_EQUAL(
        plan_for(SUBSCRIPTION("claude", "anthropic", ""), &dirs, &plan, err, sizeof(err)),
        AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "login_missing"));
    sandbox_plan_release(&plan);
    CU_ASSERT_EQUAL(fstree_remove(root), 0);
}

static void test_login_pi_golden_gets_the_run_providers_login(void)
{
    char root[64], pi[PATH_MAX], err[512], *golden;
    struct harness_paths paths = {.harness_dir = "/opt/harnesses"};
    struct login_dirs dirs = {0};
    struct request_limits lim;
    struct run_request req;
    struct sandbox_plan plan;
    json_object *auth;
    size_t len;
    int mode = 0;

    mk_tree(root, sizeof(root));
    sub(root, "pi", pi, sizeof(pi));
    put(pi, "auth.json",
        "{\"anthropic\":{\"type\":\"oauth\",\"access\":\"sk-ant-oat01-pi\",\"refresh\":"
        "\"operator-only-refresh\",\"expires\":4102444800000},\"openai-codex\":{\"type\":"
        "\"oauth\",\"access\":\"operator-only-access\",\"refresh\":\"x\",\"expires\":1}}");
    dirs.pi_agent_dir = pi;
    paths.logins = &dirs;
    /* the golden attachment request: pi_core, anthropic, runtime_provided */
    CU_ASSERT_EQUAL_FATAL(test_read_shared("run_request.attachment.json", &golden, &len), 0);
    request_limits_default(&lim);
    CU_ASSERT_EQUAL_FATAL(request_parse(golden, len, &lim, &req, err, sizeof(err)), 0);
    free(golden);
    sandbox_plan_init(&plan);
    CU_ASSERT_EQUAL(harness_pi.plan(&paths, &req, &plan, err, sizeof(err)), 0);
    auth = plan_file(&plan, SANDBOX_HOME "/.pi/agent/auth.json", &mode);
    CU_ASSERT_PTR_NOT_NULL_FATAL(auth);
    CU_ASSERT_EQUAL(mode, 0600);
    CU_ASSERT_EQUAL(json_object_object_length(auth), 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(auth, "anthropic"), "access")),
                           "sk-ant-oat01-pi");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(auth, "anthropic"), "refresh")), "");
    json_object_put(auth);
    CU_ASSERT_PTR_NULL(strstr(jsonx_text(plan.files, NULL), "operator-only"));
    CU_ASSERT_STRING_EQUAL(plan.model_id, "anthropic/claude-sonnet-4-6");
    sandbox_plan_release(&plan);

    /* a login without the run's provider is refused, naming the provider */
    put(pi, "auth.json",
        "{\"openai-codex\":{\"type\":\"oauth\",\"access\":\"a\",\"refresh\":\"r\"}}");
    sandbox_plan_init(&plan);
    CU_ASSERT_EQUAL(harness_pi.plan(&paths, &req, &plan, err, sizeof(err)), AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "\"anthropic\""));
    CU_ASSERT_PTR_NULL(strstr(err, root));
    sandbox_plan_release(&plan);
    run_request_release(&req);
    CU_ASSERT_EQUAL(fstree_remove(root), 0);
}

static void test_login_opencode_refuses_runtime_provided(void)
{
    struct login_dirs dirs = {"/nonexistent", "/nonexistent", "/nonexistent"};
    struct sandbox_plan plan;
    char err[512];

    CU_ASSERT_EQUAL(plan_for(SUBSCRIPTION("opencode", "openai",
                                          ",\"endpoint\":{\"baseUrl\":\"http://127.0.0.1:1/v1\"}"),
                             &dirs, &plan, err, sizeof(err)),
                    AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "runtime_provided"));
    CU_ASSERT_FALSE(plan.has_login);
    sandbox_plan_release(&plan);
}

/* The three login settings: unset or blank = not configured; relative = start-up error. */
static void test_login_settings_must_be_absolute(void)
{
    struct runner_config cfg;
    int saved_level = log_max_level;
    char err[256];

    setenv("AGENT_RUNNER_TOKEN", "unit-token", 1);
    setenv("AGENT_RUNNER_CODEX_HOME", "/srv/codex-login", 1);
    setenv("AGENT_RUNNER_CLAUDE_CONFIG_DIR", "  ", 1);
    unsetenv("AGENT_RUNNER_PI_AGENT_DIR");
    CU_ASSERT_EQUAL_FATAL(config_load(&cfg, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(cfg.engine.logins.codex_home), "/srv/codex-login");
    CU_ASSERT_PTR_NULL(cfg.engine.logins.claude_config_dir);
    CU_ASSERT_PTR_NULL(cfg.engine.logins.pi_agent_dir);
    config_release(&cfg);
    setenv("AGENT_RUNNER_PI_AGENT_DIR", "relative/pi", 1);
    CU_ASSERT_EQUAL(config_load(&cfg, err, sizeof(err)), -EINVAL);
    CU_ASSERT_STRING_EQUAL(err, "AGENT_RUNNER_PI_AGENT_DIR must be an absolute path");
    config_release(&cfg);
    unsetenv("AGENT_RUNNER_TOKEN");
    unsetenv("AGENT_RUNNER_CODEX_HOME");
    unsetenv("AGENT_RUNNER_CLAUDE_CONFIG_DIR");
    unsetenv("AGENT_RUNNER_PI_AGENT_DIR");
    log_max_level = saved_level;
}

CU_TestInfo login_tests[] = {
    {"test_login_settings_must_be_absolute", test_login_settings_must_be_absolute},
    {"test_login_read_states", test_login_read_states},
    {"test_login_status_envelope", test_login_status_envelope},
    {"test_login_state_names", test_login_state_names},
    {"test_login_epoch_mix", test_login_epoch_mix},
    {"test_login_codex_gets_a_private_copy_without_refresh_token",
     test_login_codex_gets_a_private_copy_without_refresh_token},
    {"test_login_claude_gets_only_its_oauth_entry", test_login_claude_gets_only_its_oauth_entry},
    {"test_login_pi_golden_gets_the_run_providers_login",
     test_login_pi_golden_gets_the_run_providers_login},
    {"test_login_opencode_refuses_runtime_provided", test_login_opencode_refuses_runtime_provided},
    CU_TEST_INFO_NULL,
};
