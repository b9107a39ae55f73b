/*
 * harness plans: what each harness is launched with for a permission plan (pi's channel gate,
 * codex's approval policy and rules, opencode's permission block) and on which Node.
 * The plans only need a harness folder path; nothing is read from it.
 */
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "harness/harness.h"
#include "request/request.h"
#include "suites.h"

#define HDIR "/opt/ar/harnesses"
#define MC_OPENAI                                                                                  \
    "\"modelConnection\":{\"provider\":\"openai\",\"deployment\":\"custom\",\"endpoint\":{"        \
    "\"baseUrl\":\"https://models.test/v1\"},\"credentialMode\":\"env\",\"credentials\":[{"        \
    "\"binding\":{\"kind\":\"environment\",\"name\":\"OPENAI_API_KEY\"},\"value\":\"sk-x\","       \
    "\"usage\":\"opaque_http\"}]}"
#define MC_ANTHROPIC                                                                               \
    "\"modelConnection\":{\"provider\":\"anthropic\",\"deployment\":\"custom\",\"endpoint\":{"     \
    "\"baseUrl\":\"https://models.test\"},\"credentialMode\":\"env\",\"credentials\":[{"           \
    "\"binding\":{\"kind\":\"environment\",\"name\":\"ANTHROPIC_API_KEY\"},\"value\":\"sk-x\","    \
    "\"usage\":\"opaque_http\"}]}"

struct planned {
    struct run_request req;
    struct sandbox_plan plan;
    int rc;
    char err[512];
};

/* Plan harness for a request whose other fields are `extra` (JSON members, may be ""). */
static void plan_for(struct planned *p, enum harness_kind kind, const char *harness, const char *mc,
                     const char *extra)
{
    struct harness_paths paths = {.harness_dir = HDIR};
    struct request_limits lim;
    char json[4096], err[256];

    memset(p, 0, sizeof(*p));
    snprintf(json, sizeof(json),
             "{\"harness\":\"%s\",\"model\":\"m1\",\"messages\":[{\"role\":\"user\",\"content\":"
             "\"hi\"}],%s%s%s}",
             harness, mc, extra[0] ? "," : "", extra);
    request_limits_default(&lim);
    CU_ASSERT_EQUAL_FATAL(request_parse(json, strlen(json), &lim, &p->req, err, sizeof(err)), 0);
    sandbox_plan_init(&p->plan);
    p->rc = harness_get(kind)->plan(&paths, &p->req, &p->plan, p->err, sizeof(p->err));
}

static void planned_release(struct planned *p)
{
    sandbox_plan_release(&p->plan);
    run_request_release(&p->req);
}

static const char *env_of(const struct planned *p, const char *name)
{
    return jsonx_str(p->plan.env, name);
}

/* The content of the plan's file at path, or NULL. */
static const char *file_of(const struct planned *p, const char *path)
{
    for (size_t i = 0; i < json_object_array_length(p->plan.files); i++) {
        json_object *f = json_object_array_get_idx(p->plan.files, i);
        if (strcmp(jsonx_str(f, "path"), path) == 0)
            return jsonx_str(f, "content");
    }
    return NULL;
}

static void test_harness_pi_gates_unless_the_plan_allows_all_builtins(void)
{
    static const struct {
        const char *permissions;
        bool gating;
    } cases[] = {
        {"", true}, /* allow_reads */
        {"\"permissions\":{\"default\":\"ask\"}", true},
        {"\"permissions\":{\"default\":\"deny\"}", true},
        {"\"permissions\":{\"default\":\"allow\"}", false},
        {"\"permissions\":{\"default\":\"allow\",\"rules\":[{\"pattern\":\"fetch\","
         "\"permission\":\"deny\"}]}",
         false}, /* no pi built-in named */
        {"\"permissions\":{\"default\":\"allow\",\"rules\":[{\"pattern\":\"Bash(rm:*)\","
         "\"permission\":\"deny\"}]}",
         true},
        {"\"permissions\":{\"default\":\"allow\",\"rules\":[{\"pattern\":\"read\","
         "\"permission\":\"allow\"}]}",
         true}, /* Agenta: a rule naming a built-in turns the gate on */
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct planned p;

        plan_for(&p, HARNESS_PI, "pi_core", MC_OPENAI, cases[i].permissions);
        CU_ASSERT_EQUAL_FATAL(p.rc, 0);
        CU_ASSERT_EQUAL(p.plan.channel_gating, cases[i].gating);
        if (cases[i].gating) {
            CU_ASSERT_STRING_EQUAL(TEST_STR(env_of(&p, "RUNNER_GATE_BUILTINS")), "1");
        } else {
            CU_ASSERT_PTR_NULL(env_of(&p, "RUNNER_GATE_BUILTINS"));
        }
        planned_release(&p);
    }
}

#define PI_STDIO "/opt/agent-runner/bin/agent-runner-pi-stdio"

/* Plan p's request again in a local sandbox with pi-stdio, in the given form. */
static void replan_pi_form(struct planned *p, enum plan_form form)
{
    struct harness_paths paths = {.harness_dir = HDIR, .pi_stdio = PI_STDIO};

    sandbox_plan_release(&p->plan);
    sandbox_plan_init(&p->plan);
    p->plan.form = form;
    p->req.sandbox = "local";
    p->rc = harness_get(HARNESS_PI)->plan(&paths, &p->req, &p->plan, p->err, sizeof(p->err));
    CU_ASSERT_EQUAL_FATAL(p->rc, 0);
}

/* Plan p's request again with pi-stdio at stdio and the given sandbox. */
static void replan_pi(struct planned *p, const char *stdio, const char *sandbox)
{
    struct harness_paths paths = {.harness_dir = HDIR, .pi_stdio = stdio};

    sandbox_plan_release(&p->plan);
    sandbox_plan_init(&p->plan);
    p->req.sandbox = sandbox;
    p->rc = harness_get(HARNESS_PI)->plan(&paths, &p->req, &p->plan, p->err, sizeof(p->err));
    CU_ASSERT_EQUAL_FATAL(p->rc, 0);
}

static bool has_ro_bind(const struct planned *p, const char *path)
{
    for (size_t i = 0; i < json_object_array_length(p->plan.ro_binds); i++)
        if (strcmp(json_object_get_string(json_object_array_get_idx(p->plan.ro_binds, i)),
                   path) == 0)
            return true;
    return false;
}

static void test_harness_pi_launch_and_settings(void)
{
    struct planned p;
    json_object *settings = NULL;
    char err[64];
    const char *s;

    /* without agent-runner-pi-stdio pi-acp starts pi itself, through pi-launch */
    plan_for(&p, HARNESS_PI, "pi_core", MC_OPENAI, "");
    CU_ASSERT_EQUAL_FATAL(p.rc, 0);
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(p.plan.argv, 0)),
                           HDIR "/" HARNESS_NODE);
    CU_ASSERT_STRING_EQUAL(TEST_STR(env_of(&p, "PI_ACP_PI_COMMAND")),
                           HDIR "/extension/bin/pi-launch");
    /* the version stub first, then the pinned node's .bin, then the system */
    CU_ASSERT_EQUAL(strncmp(TEST_STR(env_of(&p, "PATH")),
                            HDIR "/extension/bin:" HDIR "/node_modules/.bin:", 60),
                    0);
    /* a local sandbox with it: pi starts at once (pi-stdio start cold), pi-acp's pi attaches */
    replan_pi(&p, PI_STDIO, "local");
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(p.plan.argv), 15);
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(p.plan.argv, 0)),
                           PI_STDIO);
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(p.plan.argv, 1)),
                           "start");
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(p.plan.argv, 2)),
                           "cold");
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(p.plan.argv, 4)),
                           HDIR "/" HARNESS_NODE);
    /* cold: the one-file builds with their code caches (tools/bundle), for pi and pi-acp */
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(p.plan.argv, 5)),
                           HDIR "/node_modules/@mariozechner/pi-coding-agent/dist/agent-runner/"
                                "start.mjs");
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(p.plan.argv, 14)),
                           HDIR "/node_modules/pi-acp/dist/agent-runner/start.mjs");
    CU_ASSERT_STRING_EQUAL(TEST_STR(env_of(&p, "PI_ACP_PI_COMMAND")), PI_STDIO);
    CU_ASSERT_EQUAL(strncmp(TEST_STR(env_of(&p, "PATH")),
                            HDIR "/extension/bin/spare:" HDIR "/node_modules/.bin:", 66),
                    0);
    CU_ASSERT_TRUE(has_ro_bind(&p, PI_STDIO));
    /* a spare runs the packages' own files: its preload shares pi-ai's modules with pi, and
     * its start is on nobody's path */
    replan_pi_form(&p, PLAN_SPARE);
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(p.plan.argv), 19);
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(p.plan.argv, 8)),
                           HDIR "/node_modules/@mariozechner/pi-coding-agent/dist/cli.js");
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(p.plan.argv, 18)),
                           HDIR "/node_modules/pi-acp/dist/index.js");
    /* a remote sandbox keeps pi-acp's own way */
    replan_pi(&p, PI_STDIO, "daytona");
    CU_ASSERT_STRING_EQUAL(TEST_STR(env_of(&p, "PI_ACP_PI_COMMAND")),
                           HDIR "/extension/bin/pi-launch");
    CU_ASSERT_FALSE(has_ro_bind(&p, PI_STDIO));
    CU_ASSERT_PTR_NULL(env_of(&p, "RUNNER_CHANNEL")); /* no path: the keeper hands it over */
    s = file_of(&p, SANDBOX_HOME "/.pi/agent/settings.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL_FATAL(jsonx_parse(s, strlen(s), 8, &settings, err, sizeof(err)), 0);
    CU_ASSERT_FALSE(json_object_get_boolean(jsonx_path(settings, "retry.enabled")));
    CU_ASSERT_PTR_NOT_NULL(jsonx_path(settings, "retry.enabled"));
    json_object_put(settings);
    planned_release(&p);
}

static void test_harness_codex_asks_unless_the_plan_allows_all(void)
{
    struct planned p;
    const char *toml, *rules;

    plan_for(&p, HARNESS_CODEX, "codex", MC_OPENAI, "\"permissions\":{\"default\":\"allow\"}");
    CU_ASSERT_EQUAL_FATAL(p.rc, 0);
    toml = file_of(&p, SANDBOX_HOME "/.codex/config.toml");
    CU_ASSERT_PTR_NOT_NULL(strstr(TEST_STR(toml), "approval_policy = \"never\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(TEST_STR(toml), "sandbox_mode = \"danger-full-access\""));
    CU_ASSERT_PTR_NULL(file_of(&p, SANDBOX_HOME "/.codex/rules/agent-runner.rules"));
    planned_release(&p);

    /* allow_reads (no plan), and "agent" mapped onto the same */
    plan_for(&p, HARNESS_CODEX, "codex", MC_OPENAI, "\"harnessMode\":\"agent\"");
    CU_ASSERT_EQUAL_FATAL(p.rc, 0);
    toml = file_of(&p, SANDBOX_HOME "/.codex/config.toml");
    CU_ASSERT_PTR_NOT_NULL(strstr(TEST_STR(toml), "approval_policy = \"untrusted\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(TEST_STR(toml), "sandbox_mode = \"danger-full-access\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(TEST_STR(toml), "web_search = \"disabled\""));
    rules = file_of(&p, SANDBOX_HOME "/.codex/rules/agent-runner.rules");
    CU_ASSERT_PTR_NOT_NULL_FATAL(rules);
    CU_ASSERT_EQUAL(strncmp(rules, "prefix_rule(pattern = [[\"cat\", \"/bin/cat\"", 41), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(rules, "\"/usr/bin/sed\"]], decision = \"prompt\")\n"));
    planned_release(&p);

    /* a default allow with a rule that denies is not allow-all */
    plan_for(&p, HARNESS_CODEX, "codex", MC_OPENAI,
             "\"permissions\":{\"default\":\"allow\",\"rules\":[{\"pattern\":\"Bash\","
             "\"permission\":\"deny\"}]}");
    CU_ASSERT_EQUAL_FATAL(p.rc, 0);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(TEST_STR(file_of(&p, SANDBOX_HOME "/.codex/config.toml")), "\"untrusted\""));
    planned_release(&p);
}

static void test_harness_codex_read_only_is_refused(void)
{
    struct planned p;

    plan_for(&p, HARNESS_CODEX, "codex", MC_OPENAI, "\"harnessMode\":\"read-only\"");
    CU_ASSERT_EQUAL(p.rc, AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.err, "harnessMode"));
    CU_ASSERT_PTR_NOT_NULL(strstr(p.err, "permission plan"));
    planned_release(&p);
}

static void test_harness_opencode_asks_for_every_tool(void)
{
    struct planned p;
    json_object *cfg = NULL;
    const char *text;
    char err[64];

    plan_for(&p, HARNESS_OPENCODE, "opencode", MC_OPENAI, "\"permissions\":{\"default\":\"ask\"}");
    CU_ASSERT_EQUAL_FATAL(p.rc, 0);
    text = env_of(&p, "OPENCODE_CONFIG_CONTENT");
    CU_ASSERT_EQUAL_FATAL(jsonx_parse(text, strlen(text), 16, &cfg, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(cfg, "permission"), "*")), "ask");
    CU_ASSERT_EQUAL(json_object_object_length(jsonx_get(cfg, "permission")), 1);
    json_object_put(cfg);
    planned_release(&p);

    plan_for(&p, HARNESS_OPENCODE, "opencode", MC_OPENAI,
             "\"permissions\":{\"default\":\"allow\"}");
    CU_ASSERT_EQUAL_FATAL(p.rc, 0);
    text = env_of(&p, "OPENCODE_CONFIG_CONTENT");
    CU_ASSERT_EQUAL_FATAL(jsonx_parse(text, strlen(text), 16, &cfg, err, sizeof(err)), 0);
    CU_ASSERT_PTR_NULL(jsonx_get(cfg, "permission"));
    json_object_put(cfg);
    planned_release(&p);
}

/* Plan p's request again in the given form (PLAN_SESSION, PLAN_SPARE). */
static void replan_form(struct planned *p, enum harness_kind kind, enum plan_form form)
{
    struct harness_paths paths = {.harness_dir = HDIR};

    sandbox_plan_release(&p->plan);
    sandbox_plan_init(&p->plan);
    p->plan.form = form;
    p->rc = harness_get(kind)->plan(&paths, &p->req, &p->plan, p->err, sizeof(p->err));
}

#define OC_JSON SANDBOX_HOME "/.config/opencode/opencode.json"
#define OC_KEY SANDBOX_HOME "/.config/opencode/runner-key"

/*
 * opencode's spare forms: PLAN_SESSION gives the configuration as the global opencode.json
 * with the key in a 0600 file it names ({file:}), nothing of it in the environment; PLAN_SPARE
 * holds no session data at all (no config, no key, no OPENCODE_CONFIG_CONTENT), with the same
 * command and config home.
 */
static void test_harness_opencode_session_and_spare_forms(void)
{
    struct planned p;
    json_object *cfg = NULL, *opts;
    const char *text, *cold_argv;
    char err[64];

    plan_for(&p, HARNESS_OPENCODE, "opencode", MC_OPENAI, "");
    CU_ASSERT_EQUAL_FATAL(p.rc, 0);
    cold_argv = jsonx_text(p.plan.argv, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cold_argv);
    cold_argv = strdup(cold_argv);
    CU_ASSERT_STRING_EQUAL(TEST_STR(env_of(&p, "OPENAI_API_KEY")), "sk-x"); /* PLAN_COLD */
    CU_ASSERT_PTR_NULL(file_of(&p, OC_JSON));

    replan_form(&p, HARNESS_OPENCODE, PLAN_SESSION);
    CU_ASSERT_EQUAL_FATAL(p.rc, 0);
    CU_ASSERT_PTR_NULL(env_of(&p, "OPENCODE_CONFIG_CONTENT"));
    CU_ASSERT_PTR_NULL(env_of(&p, "OPENAI_API_KEY"));
    CU_ASSERT_PTR_NULL(strstr(TEST_STR(jsonx_text(p.plan.env, NULL)), "sk-x"));
    CU_ASSERT_STRING_EQUAL(TEST_STR(file_of(&p, OC_KEY)), "sk-x");
    text = file_of(&p, OC_JSON);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NULL(strstr(text, "sk-x"));
    CU_ASSERT_EQUAL_FATAL(jsonx_parse(text, strlen(text), 16, &cfg, err, sizeof(err)), 0);
    opts = jsonx_get(jsonx_get(jsonx_get(cfg, "provider"), "custom"), "options");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(opts, "apiKey")), "{file:" OC_KEY "}");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(opts, "baseURL")), "https://models.test/v1");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(cfg, "model")), "custom/m1");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(cfg, "permission"), "*")), "ask");
    CU_ASSERT_STRING_EQUAL(p.plan.model_id, "custom/m1");
    for (size_t i = 0; i < json_object_array_length(p.plan.files); i++) {
        json_object *f = json_object_array_get_idx(p.plan.files, i);
        if (strcmp(jsonx_str(f, "path"), OC_JSON) == 0 || strcmp(jsonx_str(f, "path"), OC_KEY) == 0)
            CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(f, "mode")), 0600);
    }
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_text(p.plan.argv, NULL)), cold_argv);
    json_object_put(cfg);

    replan_form(&p, HARNESS_OPENCODE, PLAN_SPARE);
    CU_ASSERT_EQUAL_FATAL(p.rc, 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_text(p.plan.argv, NULL)), cold_argv);
    CU_ASSERT_STRING_EQUAL(TEST_STR(env_of(&p, "XDG_CONFIG_HOME")), SANDBOX_HOME "/.config");
    CU_ASSERT_PTR_NULL(env_of(&p, "OPENCODE_CONFIG_CONTENT"));
    CU_ASSERT_PTR_NULL(env_of(&p, "OPENAI_API_KEY"));
    CU_ASSERT_PTR_NULL(file_of(&p, OC_JSON));
    CU_ASSERT_PTR_NULL(file_of(&p, OC_KEY));
    CU_ASSERT_PTR_NULL(strstr(TEST_STR(jsonx_text(p.plan.env, NULL)), "sk-x"));
    CU_ASSERT_PTR_NULL(strstr(TEST_STR(jsonx_text(p.plan.files, NULL)), "sk-x"));
    free((char *)cold_argv);
    planned_release(&p);
}

static void test_harness_claude_runs_on_the_pinned_node(void)
{
    struct planned p;

    plan_for(&p, HARNESS_CLAUDE, "claude", MC_ANTHROPIC, "");
    CU_ASSERT_EQUAL_FATAL(p.rc, 0);
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(p.plan.argv, 0)),
                           HDIR "/" HARNESS_NODE);
    /* the CLI the SDK spawns as `node` resolves to the same binary */
    CU_ASSERT_EQUAL(strncmp(TEST_STR(env_of(&p, "PATH")), HDIR "/" HARNESS_NODE_DIR ":",
                            strlen(HDIR "/" HARNESS_NODE_DIR ":")),
                    0);
    CU_ASSERT_PTR_NULL(env_of(&p, "RUNNER_CHANNEL")); /* no path: the keeper hands it over */
    planned_release(&p);
}

static void test_harness_pi_builtins_and_allow_all(void)
{
    json_object *plan;
    const char *kind = NULL;
    bool ro = true;

    CU_ASSERT_EQUAL(harness_pi_builtin("Bash", &ro, &kind), 1);
    CU_ASSERT_FALSE(ro);
    CU_ASSERT_STRING_EQUAL(kind, "execute");
    CU_ASSERT_EQUAL(harness_pi_builtin("grep", &ro, &kind), 1);
    CU_ASSERT_TRUE(ro);
    CU_ASSERT_EQUAL(harness_pi_builtin("lookup_weather", &ro, &kind), 0);
    CU_ASSERT_EQUAL(harness_pi_builtin(NULL, &ro, &kind), 0);
    CU_ASSERT_FALSE(harness_plan_allows_all(NULL));
    plan = test_json("{\"default\":\"allow\",\"rules\":[{\"pattern\":\"Bash\",\"permission\":"
                     "\"allow\"}]}");
    CU_ASSERT_TRUE(harness_plan_allows_all(plan));
    json_object_put(plan);
    plan = test_json("{\"default\":\"allow\",\"rules\":[{\"pattern\":\"Bash\",\"permission\":"
                     "\"ask\"}]}");
    CU_ASSERT_FALSE(harness_plan_allows_all(plan));
    json_object_put(plan);
}

/* true when s appears in any string of the JSON document o */
static bool json_mentions(json_object *o, const char *s)
{
    return strstr(TEST_STR(jsonx_text(o, NULL)), s) != NULL;
}

/*
 * No channel secret anywhere in a plan: the keeper hands the harness side its connection. pi
 * speaks the channel itself; claude and opencode only through agent-runner-mcp, whose holder
 * wraps the harness's command (`mcp hold -- <command>`) and whose mcpServers entry gets the
 * tools file alone.
 */
static void test_harness_no_channel_secret_and_the_mcp_holder(void)
{
    static const struct {
        enum harness_kind kind;
        const char *name;
        const char *mc;
        bool speaks;
    } cases[] = {
        {HARNESS_PI, "pi_core", MC_OPENAI, true},
        {HARNESS_CLAUDE, "claude", MC_ANTHROPIC, false},
        {HARNESS_OPENCODE, "opencode", MC_OPENAI, false},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct planned p;
        char *argv0;

        plan_for(&p, cases[i].kind, cases[i].name, cases[i].mc, "");
        CU_ASSERT_EQUAL_FATAL(p.rc, 0);
        CU_ASSERT_EQUAL(p.plan.channel_env, cases[i].speaks);
        argv0 = strdup(json_object_get_string(json_object_array_get_idx(p.plan.argv, 0)));
        harness_add_runner_tools(&p.plan, cases[i].kind, "/opt/agent-runner-mcp",
                                 "/run/tools.json");
        CU_ASSERT_FALSE(json_mentions(p.plan.env, "TOKEN"));
        CU_ASSERT_FALSE(json_mentions(p.plan.argv, "TOKEN"));
        CU_ASSERT_PTR_NULL(env_of(&p, "RUNNER_CHANNEL"));
        if (cases[i].speaks) {
            CU_ASSERT_PTR_NULL(p.plan.session_mcp);
            CU_ASSERT_STRING_EQUAL(TEST_STR(env_of(&p, "RUNNER_TOOLS_FILE")), "/run/tools.json");
        } else {
            json_object *server = json_object_array_get_idx(p.plan.session_mcp, 0);
            json_object *env = jsonx_get(server, "env");

            CU_ASSERT_STRING_EQUAL(
                json_object_get_string(json_object_array_get_idx(p.plan.argv, 0)),
                "/opt/agent-runner-mcp");
            CU_ASSERT_STRING_EQUAL(
                json_object_get_string(json_object_array_get_idx(p.plan.argv, 1)), "hold");
            CU_ASSERT_STRING_EQUAL(
                json_object_get_string(json_object_array_get_idx(p.plan.argv, 2)), "--");
            CU_ASSERT_STRING_EQUAL(
                json_object_get_string(json_object_array_get_idx(p.plan.argv, 3)), TEST_STR(argv0));
            CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(server, "command")), "/opt/agent-runner-mcp");
            CU_ASSERT_EQUAL_FATAL(json_object_array_length(env), 1);
            CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(json_object_array_get_idx(env, 0), "name")),
                                   "RUNNER_TOOLS_FILE");
            CU_ASSERT_FALSE(json_mentions(server, "TOKEN"));
        }
        free(argv0);
        planned_release(&p);
    }
}

/* harness_kind_name (core/contracts.c, kept out of the registry) names each kind as its ops do */
static void test_harness_kind_names_are_the_ops_names(void)
{
    for (int k = 0; k < HARNESS_COUNT; k++)
        CU_ASSERT_STRING_EQUAL(harness_kind_name((enum harness_kind)k),
                               harness_get((enum harness_kind)k)->name);
    CU_ASSERT_STRING_EQUAL(harness_kind_name(HARNESS_COUNT), "unknown");
}

CU_TestInfo harness_tests[] = {
    {"test_harness_kind_names_are_the_ops_names", test_harness_kind_names_are_the_ops_names},
    {"test_harness_no_channel_secret_and_the_mcp_holder",
     test_harness_no_channel_secret_and_the_mcp_holder},
    {"test_harness_pi_gates_unless_the_plan_allows_all_builtins",
     test_harness_pi_gates_unless_the_plan_allows_all_builtins},
    {"test_harness_pi_launch_and_settings", test_harness_pi_launch_and_settings},
    {"test_harness_codex_asks_unless_the_plan_allows_all",
     test_harness_codex_asks_unless_the_plan_allows_all},
    {"test_harness_codex_read_only_is_refused", test_harness_codex_read_only_is_refused},
    {"test_harness_opencode_asks_for_every_tool", test_harness_opencode_asks_for_every_tool},
    {"test_harness_opencode_session_and_spare_forms",
     test_harness_opencode_session_and_spare_forms},
    {"test_harness_claude_runs_on_the_pinned_node", test_harness_claude_runs_on_the_pinned_node},
    {"test_harness_pi_builtins_and_allow_all", test_harness_pi_builtins_and_allow_all},
    CU_TEST_INFO_NULL,
};
