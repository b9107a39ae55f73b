/*
 * daytona_lease — the pure decisions: resume actions for every state and flag, replacement
 * reasons, the remote warm-default table (measured harness x reusable leases x explicit
 * choice) with its backstop intervals, the capability snapshot and its fail-closed check,
 * lease downgrades, release dispositions, the keyed pool digest, and configuration.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "provider/daytona/daytona_lease.h"
#include "suites.h"

static const char *test_env_value;
static const char *test_env_name;

static const char *one_var(const char *name)
{
    return test_env_name && strcmp(name, test_env_name) == 0 ? test_env_value : NULL;
}

static const char *no_vars(const char *name)
{
    (void)name;
    return NULL;
}

struct decide_case {
    const char *name;
    struct daytona_observation o;
    enum daytona_resume_action action;
    enum daytona_lease_reason reason;
    bool delete_old;
};

#define FOUND(st) .lookup = 0, .state = (st), .identity_ok = true

static const struct decide_case decide_cases[] = {
    {"started is reused", {FOUND(DAYTONA_STATE_STARTED)}, DAYTONA_RESUME_REUSE, 0, false},
    {"stopped is started", {FOUND(DAYTONA_STATE_STOPPED)}, DAYTONA_RESUME_START, 0, false},
    {"archived is started", {FOUND(DAYTONA_STATE_ARCHIVED)}, DAYTONA_RESUME_START, 0, false},
    {"paused is started", {FOUND(DAYTONA_STATE_PAUSED)}, DAYTONA_RESUME_START, 0, false},
    {"stopped after two starts is replaced",
     {FOUND(DAYTONA_STATE_STOPPED), .attempts = 2},
     DAYTONA_RESUME_REPLACE,
     DAYTONA_REASON_RESUME_FAILED,
     true},
    {"starting is waited for", {FOUND(DAYTONA_STATE_STARTING)}, DAYTONA_RESUME_WAIT, 0, false},
    {"stopping is waited for", {FOUND(DAYTONA_STATE_STOPPING)}, DAYTONA_RESUME_WAIT, 0, false},
    {"restoring is waited for", {FOUND(DAYTONA_STATE_RESTORING)}, DAYTONA_RESUME_WAIT, 0, false},
    {"archiving is waited for", {FOUND(DAYTONA_STATE_ARCHIVING)}, DAYTONA_RESUME_WAIT, 0, false},
    {"creating is waited for", {FOUND(DAYTONA_STATE_CREATING)}, DAYTONA_RESUME_WAIT, 0, false},
    {"pulling is waited for",
     {FOUND(DAYTONA_STATE_PULLING_SNAPSHOT)},
     DAYTONA_RESUME_WAIT,
     0,
     false},
    {"server-unknown is waited for", {FOUND(DAYTONA_STATE_UNKNOWN)}, DAYTONA_RESUME_WAIT, 0, false},
    {"a transition past the deadline is replaced",
     {FOUND(DAYTONA_STATE_STARTING), .deadline_passed = true},
     DAYTONA_RESUME_REPLACE,
     DAYTONA_REASON_RESUME_FAILED,
     true},
    {"404 is not_found",
     {.lookup = -ENOENT},
     DAYTONA_RESUME_REPLACE,
     DAYTONA_REASON_NOT_FOUND,
     false},
    {"destroyed expired",
     {FOUND(DAYTONA_STATE_DESTROYED)},
     DAYTONA_RESUME_REPLACE,
     DAYTONA_REASON_EXPIRED,
     false},
    {"destroying expired",
     {FOUND(DAYTONA_STATE_DESTROYING)},
     DAYTONA_RESUME_REPLACE,
     DAYTONA_REASON_EXPIRED,
     false},
    {"error, not recoverable",
     {FOUND(DAYTONA_STATE_ERROR), .error_reason = "boom"},
     DAYTONA_RESUME_REPLACE,
     DAYTONA_REASON_RESUME_FAILED,
     true},
    {"error, recoverable",
     {FOUND(DAYTONA_STATE_ERROR), .recoverable = true},
     DAYTONA_RESUME_RECOVER,
     0,
     false},
    {"error, recoverable, tried twice",
     {FOUND(DAYTONA_STATE_ERROR), .recoverable = true, .attempts = 2},
     DAYTONA_RESUME_REPLACE,
     DAYTONA_REASON_RESUME_FAILED,
     true},
    {"error, container gone",
     {FOUND(DAYTONA_STATE_ERROR), .recoverable = true,
      .error_reason = "not found: failed to inspect sandbox container x: No such container: x"},
     DAYTONA_RESUME_REPLACE,
     DAYTONA_REASON_EXPIRED,
     true},
    {"build_failed, even recoverable",
     {FOUND(DAYTONA_STATE_BUILD_FAILED), .recoverable = true},
     DAYTONA_RESUME_REPLACE,
     DAYTONA_REASON_RESUME_FAILED,
     true},
    {"a state we do not know",
     {FOUND(DAYTONA_STATE_OTHER)},
     DAYTONA_RESUME_REPLACE,
     DAYTONA_REASON_RESUME_FAILED,
     true},
    {"labels of someone else: never deleted",
     {.lookup = 0, .state = DAYTONA_STATE_STARTED, .identity_ok = false},
     DAYTONA_RESUME_REPLACE,
     DAYTONA_REASON_IDENTITY_MISMATCH,
     false},
    {"a failed lookup is retried", {.lookup = -ETIMEDOUT}, DAYTONA_RESUME_RETRY, 0, false},
    {"a lookup that keeps failing",
     {.lookup = DAYTONA_E_SERVER, .retries = DAYTONA_LOOKUP_RETRIES},
     DAYTONA_RESUME_REPLACE,
     DAYTONA_REASON_RESUME_FAILED,
     false},
};

static void test_daytona_lease_decide_table(void)
{
    for (size_t i = 0; i < sizeof(decide_cases) / sizeof(decide_cases[0]); i++) {
        const struct decide_case *c = &decide_cases[i];
        struct daytona_resume_decision d;

        daytona_lease_decide(&c->o, &d);
        if (d.action != c->action || (c->action == DAYTONA_RESUME_REPLACE &&
                                      (d.reason != c->reason || d.delete_old != c->delete_old)))
            fprintf(stderr, "\n  case \"%s\": %s %s delete %d\n", c->name,
                    daytona_resume_action_name(d.action), daytona_lease_reason_name(d.reason),
                    d.delete_old);
        CU_ASSERT_EQUAL(d.action, c->action);
        if (c->action == DAYTONA_RESUME_REPLACE) {
            CU_ASSERT_EQUAL(d.reason, c->reason);
            CU_ASSERT_EQUAL(d.delete_old, c->delete_old);
        }
    }
}

/* Every state has exactly one decision, and resume loops end: attempts and deadlines bound
 * every path that does not reuse. */
static void test_daytona_lease_decide_terminates(void)
{
    for (int s = 0; s < DAYTONA_STATE_COUNT; s++) {
        struct daytona_observation o = {FOUND((enum daytona_state)s)};
        struct daytona_resume_decision d;

        o.attempts = DAYTONA_RESUME_ATTEMPTS;
        o.deadline_passed = true;
        daytona_lease_decide(&o, &d);
        CU_ASSERT(d.action == DAYTONA_RESUME_REUSE || d.action == DAYTONA_RESUME_REPLACE);
        CU_ASSERT_STRING_NOT_EQUAL(daytona_state_name((enum daytona_state)s), "");
        CU_ASSERT_EQUAL(daytona_state_parse(daytona_state_name((enum daytona_state)s)),
                        (enum daytona_state)s);
    }
    CU_ASSERT_EQUAL(daytona_state_parse("no-such-state"), DAYTONA_STATE_OTHER);
    CU_ASSERT_EQUAL(daytona_state_parse(NULL), DAYTONA_STATE_OTHER);
}

static void test_daytona_lease_names(void)
{
    CU_ASSERT_STRING_EQUAL(daytona_lease_outcome_name(DAYTONA_LEASE_CREATED), "created");
    CU_ASSERT_STRING_EQUAL(daytona_lease_outcome_name(DAYTONA_LEASE_RESUMED), "resumed");
    CU_ASSERT_STRING_EQUAL(daytona_lease_outcome_name(DAYTONA_LEASE_REPLACEMENT), "replacement");
    CU_ASSERT_STRING_EQUAL(daytona_lease_reason_name(DAYTONA_REASON_NOT_FOUND), "not_found");
    CU_ASSERT_STRING_EQUAL(daytona_lease_reason_name(DAYTONA_REASON_EXPIRED), "expired");
    CU_ASSERT_STRING_EQUAL(daytona_lease_reason_name(DAYTONA_REASON_IDENTITY_MISMATCH),
                           "identity_mismatch");
    CU_ASSERT_STRING_EQUAL(daytona_lease_reason_name(DAYTONA_REASON_RESUME_FAILED),
                           "resume_failed");
}

struct life_case {
    const char *name;
    enum harness_kind harness;
    bool reusable;
    enum lifecycle_mode runner, request, admitted;
    enum credential_mode cred;
    uint64_t request_idle;
    int want; /* 0 or the error */
    enum lifecycle_mode mode;
    bool downgraded;
    int auto_stop;
};

static const struct life_case life_cases[] = {
    /* the default: measured harnesses warm on a leasing provider, with 5 min auto-stop */
    {"codex default", HARNESS_CODEX, true, 0, 0, 0, 0, 0, 0, LIFECYCLE_WARM, false, 5},
    {"claude default", HARNESS_CLAUDE, true, 0, 0, 0, 0, 0, 0, LIFECYCLE_WARM, false, 5},
    {"opencode default", HARNESS_OPENCODE, true, 0, 0, 0, 0, 0, 0, LIFECYCLE_WARM, false, 5},
    {"pi default is per-turn", HARNESS_PI, true, 0, 0, 0, 0, 0, 0, LIFECYCLE_PER_TURN, false, 15},
    {"codex default without leases", HARNESS_CODEX, false, 0, 0, 0, 0, 0, 0, LIFECYCLE_PER_TURN,
     false, 15},
    /* explicit choices win */
    {"pi asks warm", HARNESS_PI, true, 0, LIFECYCLE_WARM, 0, 0, 0, 0, LIFECYCLE_WARM, false, 5},
    {"codex asks per-turn", HARNESS_CODEX, true, 0, LIFECYCLE_PER_TURN, 0, 0, 0, 0,
     LIFECYCLE_PER_TURN, false, 15},
    {"runner per-turn beats request warm", HARNESS_CLAUDE, true, LIFECYCLE_PER_TURN, LIFECYCLE_WARM,
     0, 0, 0, 0, LIFECYCLE_PER_TURN, false, 15},
    {"request idle 90 s -> 2 min", HARNESS_CODEX, true, 0, LIFECYCLE_WARM, 0, 0, 90000, 0,
     LIFECYCLE_WARM, false, 2},
    /* fail closed: an explicit warm needs reusable leases */
    {"explicit warm without leases", HARNESS_CODEX, false, 0, LIFECYCLE_WARM, 0, 0, 0,
     AR_E_INVALID_REQUEST, 0, false, 0},
    {"runner warm without leases", HARNESS_PI, false, LIFECYCLE_WARM, 0, 0, 0, 0,
     AR_E_INVALID_REQUEST, 0, false, 0},
    /* an admitted warm session whose provider lost its leases: per-turn, not a failure */
    {"admitted warm, leases gone", HARNESS_CODEX, false, 0, 0, LIFECYCLE_WARM, 0, 0, 0,
     LIFECYCLE_PER_TURN, true, 15},
    /* managed credentials: per-turn unless codex */
    {"managed claude", HARNESS_CLAUDE, true, 0, LIFECYCLE_WARM, 0, CREDENTIAL_MODE_RUNTIME, 0, 0,
     LIFECYCLE_PER_TURN, false, 15},
    {"managed codex", HARNESS_CODEX, true, 0, 0, 0, CREDENTIAL_MODE_RUNTIME, 0, 0, LIFECYCLE_WARM,
     false, 5},
};

static void test_daytona_lease_lifecycle_seed_004(void)
{
    struct daytona_lease_config lc;
    char err[256];

    CU_ASSERT_FATAL(daytona_lease_config_load(no_vars, &lc, err, sizeof(err)) == 0);
    for (size_t i = 0; i < sizeof(life_cases) / sizeof(life_cases[0]); i++) {
        const struct life_case *c = &life_cases[i];
        struct daytona_caps caps;
        struct lifecycle_input in;
        struct daytona_lifecycle out;
        int r;

        memset(&in, 0, sizeof(in));
        lc.reuse_leases = c->reusable;
        daytona_lease_caps(&lc, &caps);
        in.harness = c->harness;
        in.credential_mode = c->cred ? c->cred : CREDENTIAL_MODE_ENV;
        in.runner_mode = c->runner;
        in.request_mode = c->request;
        in.request_idle_ms = c->request_idle;
        in.admitted_mode = c->admitted;
        /* these are overwritten from the snapshot: a caller cannot get them wrong */
        in.provider_remote = false;
        in.provider_reusable_leases = !c->reusable;
        err[0] = '\0';
        r = daytona_lease_lifecycle(&caps, &lc, &in, &out, err, sizeof(err));
        if (r != c->want ||
            (r == 0 && (out.policy.mode != c->mode || out.downgraded != c->downgraded ||
                        out.auto_stop_min != c->auto_stop)))
            fprintf(stderr, "\n  case \"%s\": r %d mode %d downgraded %d stop %d\n", c->name, r,
                    out.policy.mode, out.downgraded, out.auto_stop_min);
        CU_ASSERT_EQUAL(r, c->want);
        if (r < 0) {
            CU_ASSERT(strstr(err, "runner_warm_environment_requires_reusable_lease") != NULL);
            continue;
        }
        CU_ASSERT_EQUAL(out.policy.mode, c->mode);
        CU_ASSERT_EQUAL(out.downgraded, c->downgraded);
        CU_ASSERT_EQUAL(out.auto_stop_min, c->auto_stop);
        CU_ASSERT_EQUAL(out.reusable, c->mode == LIFECYCLE_WARM);
        /* per-turn sandboxes are ephemeral (a stop deletes them); warm ones are retained */
        CU_ASSERT_EQUAL(out.auto_delete_min, c->mode == LIFECYCLE_WARM ? 1440 : 0);
    }
}

static void test_daytona_lease_idle_minutes(void)
{
    CU_ASSERT_EQUAL(daytona_lease_idle_minutes(300000), 5);
    CU_ASSERT_EQUAL(daytona_lease_idle_minutes(300001), 6);
    CU_ASSERT_EQUAL(daytona_lease_idle_minutes(1), 1);
    CU_ASSERT_EQUAL(daytona_lease_idle_minutes(0), 1);
    CU_ASSERT_EQUAL(daytona_lease_idle_minutes(POLICY_IDLE_MAX_MS), 1440);
    CU_ASSERT_EQUAL(daytona_lease_idle_minutes(UINT64_MAX / 2), 1440);
}

static void test_daytona_lease_capability_check(void)
{
    struct daytona_lease_config lc;
    struct daytona_caps caps;
    struct daytona_needs n = {.network = NETWORK_OFF, .network_strict = true};
    char err[256];

    CU_ASSERT_FATAL(daytona_lease_config_load(no_vars, &lc, err, sizeof(err)) == 0);
    daytona_lease_caps(&lc, &caps);
    CU_ASSERT(caps.reusable_leases && caps.network_off && caps.network_allowlist &&
              caps.auto_stop && caps.process_sessions);
    CU_ASSERT_EQUAL(daytona_lease_check(&caps, &n, err, sizeof(err)), 0);
    n.network = NETWORK_ALLOWLIST;
    n.nallow = 20;
    CU_ASSERT_EQUAL(daytona_lease_check(&caps, &n, err, sizeof(err)), 0);
    n.nallow = 21;
    CU_ASSERT_EQUAL(daytona_lease_check(&caps, &n, err, sizeof(err)), AR_E_UNAVAILABLE);
    /* an organization whose tier forbids network rules */
    lc.network_rules = false;
    daytona_lease_caps(&lc, &caps);
    n.nallow = 1;
    err[0] = '\0';
    CU_ASSERT_EQUAL(daytona_lease_check(&caps, &n, err, sizeof(err)), AR_E_UNAVAILABLE);
    CU_ASSERT(strncmp(err, "sandbox_capability_missing: network allowlist ", 46) == 0);
    n.network = NETWORK_OFF;
    CU_ASSERT_EQUAL(daytona_lease_check(&caps, &n, err, sizeof(err)), AR_E_UNAVAILABLE);
    CU_ASSERT(strstr(err, "network off") != NULL);
    /* best effort runs relaxed instead */
    n.network_strict = false;
    CU_ASSERT_EQUAL(daytona_lease_check(&caps, &n, err, sizeof(err)), 1);
    n.network = NETWORK_ON;
    n.network_strict = true;
    CU_ASSERT_EQUAL(daytona_lease_check(&caps, &n, err, sizeof(err)), 0);
    /* no auto-stop would leak sandboxes of a crashed runner: refused */
    caps.auto_stop = false;
    CU_ASSERT_EQUAL(daytona_lease_check(&caps, &n, err, sizeof(err)), AR_E_UNAVAILABLE);
    CU_ASSERT(strstr(err, "auto-stop") != NULL);
}

static void test_daytona_lease_downgrade(void)
{
    struct daytona_lifecycle lc = {.policy = {.mode = LIFECYCLE_WARM}, .reusable = true};
    struct daytona_sandbox sb = {.auto_delete_min = 1440};

    sb.labels = json_object_new_object();
    json_object_object_add(sb.labels, DAYTONA_LABEL_LEASE, json_object_new_string("reusable"));
    CU_ASSERT_FALSE(daytona_lease_downgrade(&lc, &sb));
    CU_ASSERT_EQUAL(lc.policy.mode, LIFECYCLE_WARM);
    sb.auto_delete_min = 0; /* ephemeral: cannot be stopped and resumed */
    CU_ASSERT_TRUE(daytona_lease_downgrade(&lc, &sb));
    CU_ASSERT_EQUAL(lc.policy.mode, LIFECYCLE_PER_TURN);
    CU_ASSERT(lc.downgraded && !lc.reusable);
    lc = (struct daytona_lifecycle){.policy = {.mode = LIFECYCLE_WARM}, .reusable = true};
    sb.auto_delete_min = 60;
    json_object_object_add(sb.labels, DAYTONA_LABEL_LEASE, json_object_new_string("per_turn"));
    CU_ASSERT_TRUE(daytona_lease_downgrade(&lc, &sb));
    daytona_sandbox_release(&sb);
}

static void test_daytona_lease_pool_digest(void)
{
    char a[33], b[33], c[33], d[33];

    CU_ASSERT_EQUAL(daytona_lease_pool_digest("key-1", "inst", "proj:sess", a), 0);
    CU_ASSERT_EQUAL(daytona_lease_pool_digest("key-1", "inst", "proj:sess", b), 0);
    CU_ASSERT_STRING_EQUAL(a, b);
    CU_ASSERT_EQUAL(strlen(a), 32);
    CU_ASSERT_EQUAL(strspn(a, "0123456789abcdef"), 32);
    CU_ASSERT(strstr(a, "sess") == NULL);
    CU_ASSERT_EQUAL(daytona_lease_pool_digest("key-2", "inst", "proj:sess", c), 0);
    CU_ASSERT_STRING_NOT_EQUAL(a, c);
    CU_ASSERT_EQUAL(daytona_lease_pool_digest("key-1", "other", "proj:sess", d), 0);
    CU_ASSERT_STRING_NOT_EQUAL(a, d);
    /* "a\nb" + "c" must not collide with "a" + "b\nc" */
    CU_ASSERT_EQUAL(daytona_lease_pool_digest("key-1", "a\nb", "c", c), 0);
    CU_ASSERT_EQUAL(daytona_lease_pool_digest("key-1", "a", "b\nc", d), 0);
    CU_ASSERT_STRING_NOT_EQUAL(c, d);
    CU_ASSERT_EQUAL(daytona_lease_pool_digest("", "inst", "p:s", d), -EINVAL);
}

static void test_daytona_lease_config(void)
{
    struct daytona_lease_config lc;
    char err[256];

    CU_ASSERT_EQUAL(daytona_lease_config_load(no_vars, &lc, err, sizeof(err)), 0);
    CU_ASSERT(lc.reuse_leases && lc.network_rules);
    CU_ASSERT_EQUAL(lc.per_turn_auto_stop_min, 15);
    CU_ASSERT_EQUAL(lc.auto_delete_min, 1440);
    test_env_name = "AGENT_RUNNER_DAYTONA_REUSE_LEASES";
    test_env_value = "false";
    CU_ASSERT_EQUAL(daytona_lease_config_load(one_var, &lc, err, sizeof(err)), 0);
    CU_ASSERT_FALSE(lc.reuse_leases);
    test_env_value = "maybe";
    CU_ASSERT_EQUAL(daytona_lease_config_load(one_var, &lc, err, sizeof(err)), -EINVAL);
    CU_ASSERT(strstr(err, "AGENT_RUNNER_DAYTONA_REUSE_LEASES") != NULL);
    test_env_name = "AGENT_RUNNER_DAYTONA_PER_TURN_AUTO_STOP_MINUTES";
    test_env_value = "0";
    CU_ASSERT_EQUAL(daytona_lease_config_load(one_var, &lc, err, sizeof(err)), -EINVAL);
    test_env_value = "12x";
    CU_ASSERT_EQUAL(daytona_lease_config_load(one_var, &lc, err, sizeof(err)), -EINVAL);
    test_env_name = "AGENT_RUNNER_DAYTONA_AUTO_DELETE_MINUTES";
    test_env_value = "60";
    CU_ASSERT_EQUAL(daytona_lease_config_load(one_var, &lc, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(lc.auto_delete_min, 60);
    test_env_name = NULL;
}

CU_TestInfo daytona_lease_tests[] = {
    {"test_daytona_lease_decide_table", test_daytona_lease_decide_table},
    {"test_daytona_lease_decide_terminates", test_daytona_lease_decide_terminates},
    {"test_daytona_lease_names", test_daytona_lease_names},
    {"test_daytona_lease_lifecycle_seed_004", test_daytona_lease_lifecycle_seed_004},
    {"test_daytona_lease_idle_minutes", test_daytona_lease_idle_minutes},
    {"test_daytona_lease_capability_check", test_daytona_lease_capability_check},
    {"test_daytona_lease_downgrade", test_daytona_lease_downgrade},
    {"test_daytona_lease_pool_digest", test_daytona_lease_pool_digest},
    {"test_daytona_lease_config", test_daytona_lease_config},
    CU_TEST_INFO_NULL,
};
