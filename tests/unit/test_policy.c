/*
 * policy — the lifecycle rule as a table: every precedence step (admitted, managed
 * credentials, runner, request, default), the provider defaults, the explicit-warm error on a
 * provider without reusable leases, and the idle window order and clamping.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "core/contracts.h"
#include "core/policy.h"
#include "egress/egress_policy.h"
#include "suites.h"

#define DAY_MS POLICY_IDLE_MAX_MS

/* the three kinds of provider */
#define LOCAL .provider_remote = false, .provider_reusable_leases = true
#define REMOTE .provider_remote = true, .provider_reusable_leases = true
#define REMOTE_NO_LEASE .provider_remote = true, .provider_reusable_leases = false

#define WARM LIFECYCLE_WARM
#define PER_TURN LIFECYCLE_PER_TURN
#define RUNTIME CREDENTIAL_MODE_RUNTIME

struct policy_case {
    const char *name;
    struct lifecycle_input in;
    enum lifecycle_mode mode;
    uint64_t idle_ms;
    enum lifecycle_source source;
};

static const struct policy_case cases[] = {
    /* 1. the admitted policy wins over everything */
    {"admitted warm over managed credentials, runner and request",
     {.admitted_mode = WARM,
      .admitted_idle_ms = 5000,
      .credential_mode = RUNTIME,
      .harness = HARNESS_PI,
      LOCAL,
      .runner_mode = PER_TURN,
      .request_mode = PER_TURN},
     WARM,
     5000,
     LIFECYCLE_FROM_ADMITTED},
    {"admitted per_turn over runner warm",
     {.admitted_mode = PER_TURN,
      .admitted_idle_ms = 4000,
      .harness = HARNESS_CODEX,
      REMOTE,
      .runner_mode = WARM,
      .runner_idle_ms = 9000,
      .request_mode = WARM},
     PER_TURN,
     4000,
     LIFECYCLE_FROM_ADMITTED},
    {"admitted warm on a provider without reusable leases is no error",
     {.admitted_mode = WARM, .admitted_idle_ms = 1000, .harness = HARNESS_CLAUDE, REMOTE_NO_LEASE},
     WARM,
     1000,
     LIFECYCLE_FROM_ADMITTED},
    {"admitted without a window takes the runner's",
     {.admitted_mode = WARM,
      .harness = HARNESS_PI,
      LOCAL,
      .runner_idle_ms = 7000,
      .request_idle_ms = 8000},
     WARM,
     7000,
     LIFECYCLE_FROM_ADMITTED},
    {"admitted without a window and nothing configured: provider default",
     {.admitted_mode = WARM, .harness = HARNESS_CODEX, REMOTE},
     WARM,
     300000,
     LIFECYCLE_FROM_ADMITTED},
    {"admitted window clamped to 24 h",
     {.admitted_mode = WARM, .admitted_idle_ms = DAY_MS * 3, .harness = HARNESS_PI, LOCAL},
     WARM,
     DAY_MS,
     LIFECYCLE_FROM_ADMITTED},

    /* 2. managed credentials force per-turn, except on codex */
    {"managed credentials pi over runner warm",
     {.credential_mode = RUNTIME,
      .harness = HARNESS_PI,
      LOCAL,
      .runner_mode = WARM,
      .request_mode = WARM},
     PER_TURN,
     60000,
     LIFECYCLE_FROM_MANAGED_CREDENTIALS},
    {"managed credentials claude over request warm",
     {.credential_mode = RUNTIME, .harness = HARNESS_CLAUDE, REMOTE, .request_mode = WARM},
     PER_TURN,
     300000,
     LIFECYCLE_FROM_MANAGED_CREDENTIALS},
    {"managed credentials opencode",
     {.credential_mode = RUNTIME, .harness = HARNESS_OPENCODE, REMOTE},
     PER_TURN,
     300000,
     LIFECYCLE_FROM_MANAGED_CREDENTIALS},
    {"managed credentials on a lease-less provider is no error",
     {.credential_mode = RUNTIME, .harness = HARNESS_PI, REMOTE_NO_LEASE, .runner_mode = WARM},
     PER_TURN,
     300000,
     LIFECYCLE_FROM_MANAGED_CREDENTIALS},
    {"managed credentials codex: the runner decides",
     {.credential_mode = RUNTIME,
      .harness = HARNESS_CODEX,
      LOCAL,
      .runner_mode = WARM,
      .request_mode = PER_TURN},
     WARM,
     60000,
     LIFECYCLE_FROM_RUNNER},
    {"managed credentials codex: the request decides",
     {.credential_mode = RUNTIME, .harness = HARNESS_CODEX, REMOTE, .request_mode = PER_TURN},
     PER_TURN,
     300000,
     LIFECYCLE_FROM_REQUEST},
    {"managed credentials codex: the default (remote, reusable)",
     {.credential_mode = RUNTIME, .harness = HARNESS_CODEX, REMOTE},
     WARM,
     300000,
     LIFECYCLE_FROM_DEFAULT},
    {"env credentials do not force per-turn",
     {.credential_mode = CREDENTIAL_MODE_ENV, .harness = HARNESS_PI, LOCAL},
     WARM,
     60000,
     LIFECYCLE_FROM_DEFAULT},

    /* 3. the runner's mode over the request's */
    {"runner warm over request per_turn",
     {.harness = HARNESS_PI, LOCAL, .runner_mode = WARM, .request_mode = PER_TURN},
     WARM,
     60000,
     LIFECYCLE_FROM_RUNNER},
    {"runner per_turn over request warm",
     {.harness = HARNESS_CODEX, REMOTE, .runner_mode = PER_TURN, .request_mode = WARM},
     PER_TURN,
     300000,
     LIFECYCLE_FROM_RUNNER},
    {"runner warm for pi on a remote provider (explicit beats the default)",
     {.harness = HARNESS_PI, REMOTE, .runner_mode = WARM},
     WARM,
     300000,
     LIFECYCLE_FROM_RUNNER},
    {"runner per_turn on a lease-less provider is no error",
     {.harness = HARNESS_CODEX, REMOTE_NO_LEASE, .runner_mode = PER_TURN, .request_mode = WARM},
     PER_TURN,
     300000,
     LIFECYCLE_FROM_RUNNER},

    /* 4. the request's mode when the runner inherits */
    {"request warm",
     {.harness = HARNESS_PI, REMOTE, .request_mode = WARM},
     WARM,
     300000,
     LIFECYCLE_FROM_REQUEST},
    {"request per_turn",
     {.harness = HARNESS_PI, LOCAL, .request_mode = PER_TURN},
     PER_TURN,
     60000,
     LIFECYCLE_FROM_REQUEST},
    {"request per_turn on a lease-less provider",
     {.harness = HARNESS_CLAUDE, REMOTE_NO_LEASE, .request_mode = PER_TURN},
     PER_TURN,
     300000,
     LIFECYCLE_FROM_REQUEST},

    /* 5. defaults */
    {"default local pi", {.harness = HARNESS_PI, LOCAL}, WARM, 60000, LIFECYCLE_FROM_DEFAULT},
    {"default local scripted",
     {.harness = HARNESS_SCRIPTED, LOCAL},
     WARM,
     60000,
     LIFECYCLE_FROM_DEFAULT},
    {"default remote codex",
     {.harness = HARNESS_CODEX, REMOTE},
     WARM,
     300000,
     LIFECYCLE_FROM_DEFAULT},
    {"default remote opencode",
     {.harness = HARNESS_OPENCODE, REMOTE},
     WARM,
     300000,
     LIFECYCLE_FROM_DEFAULT},
    {"default remote claude",
     {.harness = HARNESS_CLAUDE, REMOTE},
     WARM,
     300000,
     LIFECYCLE_FROM_DEFAULT},
    {"default remote pi is per-turn",
     {.harness = HARNESS_PI, REMOTE},
     PER_TURN,
     300000,
     LIFECYCLE_FROM_DEFAULT},
    {"default remote scripted is per-turn",
     {.harness = HARNESS_SCRIPTED, REMOTE},
     PER_TURN,
     300000,
     LIFECYCLE_FROM_DEFAULT},
    {"default remote codex without reusable leases falls back to per-turn",
     {.harness = HARNESS_CODEX, REMOTE_NO_LEASE},
     PER_TURN,
     300000,
     LIFECYCLE_FROM_DEFAULT},
    {"default local without reusable leases falls back to per-turn",
     {.harness = HARNESS_PI, .provider_remote = false, .provider_reusable_leases = false},
     PER_TURN,
     60000,
     LIFECYCLE_FROM_DEFAULT},

    /* idle window: runner, then request, then provider default; clamped to 24 h */
    {"idle: runner window first",
     {.harness = HARNESS_PI, LOCAL, .runner_idle_ms = 1000, .request_idle_ms = 2000},
     WARM,
     1000,
     LIFECYCLE_FROM_DEFAULT},
    {"idle: request window without a runner window",
     {.harness = HARNESS_PI, LOCAL, .request_idle_ms = 2000},
     WARM,
     2000,
     LIFECYCLE_FROM_DEFAULT},
    {"idle: runner window 0 means none configured",
     {.harness = HARNESS_CODEX, REMOTE, .runner_idle_ms = 0, .request_idle_ms = 2500},
     WARM,
     2500,
     LIFECYCLE_FROM_DEFAULT},
    {"idle: the smallest window is kept",
     {.harness = HARNESS_PI, LOCAL, .runner_idle_ms = 1},
     WARM,
     1,
     LIFECYCLE_FROM_DEFAULT},
    {"idle: runner window clamped to 24 h",
     {.harness = HARNESS_PI, LOCAL, .runner_idle_ms = DAY_MS + 1, .request_idle_ms = 5},
     WARM,
     DAY_MS,
     LIFECYCLE_FROM_DEFAULT},
    {"idle: request window clamped to 24 h",
     {.harness = HARNESS_PI, LOCAL, .request_idle_ms = UINT64_MAX},
     WARM,
     DAY_MS,
     LIFECYCLE_FROM_DEFAULT},
    {"idle: exactly 24 h is kept",
     {.harness = HARNESS_PI, LOCAL, .request_idle_ms = DAY_MS},
     WARM,
     DAY_MS,
     LIFECYCLE_FROM_DEFAULT},
    {"idle: a per-turn policy still reports the window",
     {.harness = HARNESS_PI, REMOTE, .runner_idle_ms = 4321},
     PER_TURN,
     4321,
     LIFECYCLE_FROM_DEFAULT},
};

static void test_policy_lifecycle_table(void)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct policy_case *c = &cases[i];
        struct lifecycle_policy got;
        char err[256] = "";
        int r;

        memset(&got, 0xa5, sizeof(got));
        r = policy_lifecycle(&c->in, &got, err, sizeof(err));
        if (r != 0 || got.mode != c->mode || got.idle_ms != c->idle_ms || got.source != c->source)
            fprintf(stderr,
                    "\n  policy case \"%s\": rc %d mode %d idle %llu source %d (want %d %llu %d)",
                    c->name, r, (int)got.mode, (unsigned long long)got.idle_ms, (int)got.source,
                    (int)c->mode, (unsigned long long)c->idle_ms, (int)c->source);
        CU_ASSERT_EQUAL(r, 0);
        CU_ASSERT_EQUAL(got.mode, c->mode);
        CU_ASSERT_EQUAL(got.idle_ms, c->idle_ms);
        CU_ASSERT_EQUAL(got.source, c->source);
        CU_ASSERT_STRING_EQUAL(err, "");
    }
}

static void test_policy_explicit_warm_needs_reusable_lease(void)
{
    static const struct lifecycle_input bad[] = {
        {.harness = HARNESS_CODEX, REMOTE_NO_LEASE, .runner_mode = WARM},
        {.harness = HARNESS_CODEX, REMOTE_NO_LEASE, .runner_mode = WARM, .request_mode = PER_TURN},
        {.harness = HARNESS_PI, REMOTE_NO_LEASE, .request_mode = WARM},
        {.harness = HARNESS_CLAUDE, REMOTE_NO_LEASE, .request_mode = WARM, .request_idle_ms = 10},
        /* codex with managed credentials reaches the explicit choice too */
        {.harness = HARNESS_CODEX,
         .credential_mode = RUNTIME,
         REMOTE_NO_LEASE,
         .request_mode = WARM},
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct lifecycle_policy got = {.mode = LIFECYCLE_UNSET, .idle_ms = 77, .source = 0};
        char err[256] = "";
        int r = policy_lifecycle(&bad[i], &got, err, sizeof(err));

        CU_ASSERT_EQUAL(r, AR_E_INVALID_REQUEST);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "runner_warm_environment_requires_reusable_lease"));
        /* nothing written on failure */
        CU_ASSERT_EQUAL(got.mode, LIFECYCLE_UNSET);
        CU_ASSERT_EQUAL(got.idle_ms, 77);
        CU_ASSERT_EQUAL(got.source, 0);
    }
}

static void test_policy_error_message_fits_small_buffer(void)
{
    struct lifecycle_input in = {.harness = HARNESS_PI, REMOTE_NO_LEASE, .runner_mode = WARM};
    struct lifecycle_policy got;
    char err[16];

    memset(err, 'z', sizeof(err));
    CU_ASSERT_EQUAL(policy_lifecycle(&in, &got, err, sizeof(err)), AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(memchr(err, '\0', sizeof(err)));
    CU_ASSERT_EQUAL(strncmp(err, "runner_warm_env", 15), 0);
}

static void test_policy_same_input_same_answer(void)
{
    struct lifecycle_input in = {.harness = HARNESS_OPENCODE, REMOTE, .request_idle_ms = 1234};
    struct lifecycle_policy a, b;
    char err[64];

    CU_ASSERT_EQUAL(policy_lifecycle(&in, &a, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(policy_lifecycle(&in, &b, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(a.mode, b.mode);
    CU_ASSERT_EQUAL(a.idle_ms, b.idle_ms);
    CU_ASSERT_EQUAL(a.source, b.source);
    /* the admitted policy of the next turn reproduces this one */
    in.admitted_mode = a.mode;
    in.admitted_idle_ms = a.idle_ms;
    in.runner_mode = PER_TURN;
    CU_ASSERT_EQUAL(policy_lifecycle(&in, &b, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(b.mode, a.mode);
    CU_ASSERT_EQUAL(b.idle_ms, a.idle_ms);
    CU_ASSERT_EQUAL(b.source, LIFECYCLE_FROM_ADMITTED);
}

static enum permission perm_of(json_object *o, const char *key)
{
    return policy_permission_parse(jsonx_str(o, key));
}

/* Every case of permission_decisions.json: the effective permission and the verdict. */
static void test_policy_permission_golden_vectors(void)
{
    json_object *doc = test_shared_json("permission_decisions.json");
    json_object *vectors = jsonx_get(doc, "cases");
    size_t n;

    CU_ASSERT_PTR_NOT_NULL_FATAL(vectors);
    n = json_object_array_length(vectors);
    CU_ASSERT(n >= 40);
    for (size_t i = 0; i < n; i++) {
        json_object *c = json_object_array_get_idx(vectors, i), *gate = jsonx_get(c, "gate");
        json_object *hint = jsonx_get(gate, "readOnlyHint");
        const char *want_eff = jsonx_str(jsonx_get(c, "expected"), "effective");
        const char *want_verdict = jsonx_str(jsonx_get(c, "expected"), "verdict");
        struct permission_gate g = {
            .tool_name = jsonx_str(gate, "toolName"),
            .args = jsonx_get(gate, "args"),
            .read_only_hint = hint ? (json_object_get_boolean(hint) ? 1 : 0) : -1,
            .spec = perm_of(gate, "specPermission"),
            .server = perm_of(gate, "serverPermission"),
        };
        enum permission eff = policy_permission_effective(jsonx_get(c, "plan"), &g);
        enum verdict v = policy_permission_decide(eff, perm_of(c, "stored"));
        const char *verdict = v == VERDICT_ALLOW ? "allow"
                              : v == VERDICT_DENY ? "deny"
                                                  : "pendingApproval";

        if (strcmp(policy_permission_name(eff), want_eff) != 0 ||
            strcmp(verdict, want_verdict) != 0)
            fprintf(stderr, "\n  case '%s': got %s/%s, want %s/%s\n", jsonx_str(c, "name"),
                    policy_permission_name(eff), verdict, want_eff, want_verdict);
        CU_ASSERT_STRING_EQUAL(policy_permission_name(eff), want_eff);
        CU_ASSERT_STRING_EQUAL(verdict, want_verdict);
    }
    json_object_put(doc);
}

/* Allow replies never pick "always"; a malformed plan asks. */
static void test_policy_permission_malformed_plan_asks(void)
{
    json_object *plan = json_object_new_string("allow");
    struct permission_gate g = {.tool_name = "Bash", .read_only_hint = 1,
                                .spec = PERMISSION_UNSET, .server = PERMISSION_UNSET};

    CU_ASSERT_EQUAL(policy_permission_effective(plan, &g), PERMISSION_ASK);
    CU_ASSERT_EQUAL(policy_permission_effective(NULL, &g), PERMISSION_ALLOW);
    g.read_only_hint = -1;
    CU_ASSERT_EQUAL(policy_permission_effective(NULL, &g), PERMISSION_ASK);
    json_object_put(plan);
}

/*
 * Egress: the mode and allowlist of the request, the model endpoint named in every mode (its
 * baseUrl, else the provider's public API), the runner's ports never reachable locally.
 */
static void test_policy_egress_names_the_model_endpoint(void)
{
    static const uint16_t ports[] = {443, 8443};
    struct egress_policy *p = malloc(sizeof(*p));
    struct run_request req;
    struct egress_addr lo, other, ten, model;
    enum egress_reason why;
    char err[256] = "";

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    memset(&req, 0, sizeof(req));
    req.network = NETWORK_OFF;
    req.mc.present = true;
    req.mc.provider = "openai";
    req.mc.base_url = "http://127.0.0.1:18080/v1";
    CU_ASSERT_EQUAL_FATAL(policy_egress(&req, false, false, ports, 2, p, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(p->mode, EGRESS_MODE_OFF);
    CU_ASSERT_EQUAL(egress_addr_parse("127.0.0.1", &lo), 0);
    CU_ASSERT_EQUAL(egress_addr_parse("127.0.0.2", &other), 0);
    CU_ASSERT_EQUAL(egress_addr_parse("10.1.2.3", &ten), 0);
    CU_ASSERT_TRUE(egress_policy_check(p, &lo, 18080, false, &why)); /* the model */
    CU_ASSERT_EQUAL(why, EGRESS_ALLOW_NAMED);
    CU_ASSERT_FALSE(egress_policy_check(p, &lo, 18081, false, NULL)); /* a neighbour */
    CU_ASSERT_FALSE(egress_policy_check(p, &ten, 443, false, NULL));
    CU_ASSERT_EQUAL(p->nrunner_ports, 2);

    /* allowlist: listed ranges plus the model; a loopback alias only when listed exactly */
    req.network = NETWORK_ALLOWLIST;
    req.network_allowlist = json_tokener_parse("[\"10.0.0.0/8\",\"127.0.0.2/32\"]");
    CU_ASSERT_EQUAL_FATAL(policy_egress(&req, false, false, ports, 2, p, err, sizeof(err)), 0);
    CU_ASSERT_TRUE(egress_policy_check(p, &ten, 443, false, NULL));
    CU_ASSERT_TRUE(egress_policy_check(p, &other, 9000, false, NULL));
    CU_ASSERT_TRUE(egress_policy_check(p, &lo, 18080, false, NULL));
    CU_ASSERT_FALSE(egress_policy_check(p, &lo, 9000, false, NULL));
    json_object_put(req.network_allowlist);
    req.network_allowlist = NULL;

    /* on without an endpoint: the provider's public API is the named one */
    req.network = NETWORK_ON;
    req.mc.base_url = NULL;
    req.mc.provider = "anthropic";
    CU_ASSERT_EQUAL_FATAL(policy_egress(&req, false, false, ports, 2, p, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(p->nendpoints, 1);
    CU_ASSERT_STRING_EQUAL(p->endpoints[0].host, "api.anthropic.com");
    CU_ASSERT_EQUAL(p->endpoints[0].port, 443);
    CU_ASSERT_EQUAL(egress_addr_parse("8.8.8.8", &model), 0);
    CU_ASSERT_TRUE(egress_policy_check(p, &model, 443, false, NULL)); /* public */
    CU_ASSERT_FALSE(egress_policy_check(p, &ten, 443, false, NULL));  /* private */
    CU_ASSERT_EQUAL_FATAL(policy_egress(&req, false, true, ports, 2, p, err, sizeof(err)), 0);
    CU_ASSERT_TRUE(egress_policy_check(p, &ten, 443, false, NULL)); /* private egress on */
    CU_ASSERT_PTR_NULL(policy_provider_default_url("azure"));
    free(p);
}

CU_TestInfo policy_tests[] = {
    {"test_policy_egress_names_the_model_endpoint", test_policy_egress_names_the_model_endpoint},
    {"test_policy_permission_golden_vectors", test_policy_permission_golden_vectors},
    {"test_policy_permission_malformed_plan_asks", test_policy_permission_malformed_plan_asks},
    {"test_policy_lifecycle_table", test_policy_lifecycle_table},
    {"test_policy_explicit_warm_needs_reusable_lease",
     test_policy_explicit_warm_needs_reusable_lease},
    {"test_policy_error_message_fits_small_buffer", test_policy_error_message_fits_small_buffer},
    {"test_policy_same_input_same_answer", test_policy_same_input_same_answer},
    CU_TEST_INFO_NULL,
};
