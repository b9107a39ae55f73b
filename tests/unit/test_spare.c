/*
 * spare — the spare slots of the session table (pool_spare.c: reserve, ready, claim, evict;
 * a spare never serves two sessions, even with claims racing from forked processes), the
 * AGENT_RUNNER_SPARES parser and the eligibility rule (spare.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../keeper/keeper_claim.h"
#include "environment/spare.h"
#include "request/request.h"
#include "session/pool_shm.h"
#include "suites.h"

static struct pool *spare_pool(uint32_t nslots)
{
    static unsigned seq;
    struct pool *p = NULL;
    char name[64];

    snprintf(name, sizeof(name), "/ar-unit-spare-%d-%u", (int)getpid(), ++seq);
    if (pool_create(name, nslots, "unit", 42, &p) < 0)
        return NULL;
    return p;
}

static bool pool_ok(struct pool *p)
{
    char err[200] = "";
    int r;

    if (pool_lock(p) < 0)
        return false;
    r = pool_check_locked(p, err, sizeof(err));
    pool_unlock(p);
    if (r < 0)
        fprintf(stderr, "\n  pool check: %s\n", err);
    return r == 0;
}

/* A ready spare of harness, its keeper pid set as a keeper would. */
static struct pool_handle ready_spare(struct pool *p, uint8_t harness, pid_t keeper)
{
    struct pool_handle h = {0, 0};

    CU_ASSERT_EQUAL_FATAL(pool_spare_reserve(p, harness, getpid(), &h), 0);
    CU_ASSERT_EQUAL(pool_session_set_env_dir(p, h, "/tmp/envs/spare"), 0);
    /* not ready before its keeper runs */
    CU_ASSERT_EQUAL(pool_spare_ready(p, h), -EINVAL);
    CU_ASSERT_EQUAL(pool_session_set_keeper(p, h, keeper, 7, keeper + 1), 0);
    CU_ASSERT_EQUAL(pool_spare_ready(p, h), 0);
    return h;
}

static struct pool_reservation reservation(const char *key)
{
    struct pool_reservation rv = {.key = key,
                                  .by_pid = getpid(),
                                  .harness = HARNESS_PI,
                                  .idle_ms = 60000,
                                  .provider = "openai",
                                  .model = "m",
                                  .turn_id = "t1"};
    return rv;
}

static void test_spare_claim_takes_the_slot(void)
{
    struct pool *p = spare_pool(8);
    struct pool_reservation rv = reservation("proj:s1");
    struct pool_session s, again;
    struct pool_handle h;
    uint32_t ready, building;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    h = ready_spare(p, HARNESS_PI, 4242);
    pool_spare_count(p, HARNESS_PI, &ready, &building);
    CU_ASSERT_EQUAL(ready, 1);
    CU_ASSERT_EQUAL(building, 0);
    CU_ASSERT_TRUE(pool_session_peek(p, h.index, &s));
    CU_ASSERT_EQUAL(s.state, SLOT_SPARE);
    CU_ASSERT_TRUE(s.spare);
    CU_ASSERT_STRING_EQUAL(pool_state_name(SLOT_SPARE), "spare");

    CU_ASSERT_EQUAL(pool_spare_claim(p, &rv, &s), 0);
    /* the same slot, generation, keeper and folder, now the session's */
    CU_ASSERT_EQUAL(s.h.index, h.index);
    CU_ASSERT_EQUAL(s.h.generation, h.generation);
    CU_ASSERT_EQUAL(s.state, SLOT_STARTING);
    CU_ASSERT_EQUAL(s.keeper_pid, 4242);
    CU_ASSERT_EQUAL(s.sandbox_pid, 4243);
    CU_ASSERT_STRING_EQUAL(s.env_dir, "/tmp/envs/spare");
    CU_ASSERT_STRING_EQUAL(s.key, "proj:s1");
    CU_ASSERT_EQUAL(s.owner_pid, getpid());
    CU_ASSERT_FALSE(s.spare);
    CU_ASSERT_TRUE(s.from_spare);
    CU_ASSERT_FALSE(s.per_turn);
    CU_ASSERT_EQUAL(pool_lock(p), 0);
    CU_ASSERT_EQUAL(pool_find_locked(p, "proj:s1"), (int)h.index);
    pool_unlock(p);
    pool_spare_count(p, HARNESS_PI, &ready, &building);
    CU_ASSERT_EQUAL(ready, 0);
    /* a spare never serves two sessions */
    rv.key = "proj:s2";
    CU_ASSERT_EQUAL(pool_spare_claim(p, &rv, &again), -ENOENT);
    CU_ASSERT_TRUE(pool_ok(p));
    /* the claimed slot goes on like any reservation */
    CU_ASSERT_EQUAL(pool_session_mark_started(p, h, "acp-1"), 0);
    CU_ASSERT_TRUE(pool_session_peek(p, h.index, &s));
    CU_ASSERT_EQUAL(s.state, SLOT_BUSY);
    CU_ASSERT_EQUAL(pool_session_free(p, h, TEARDOWN_PER_TURN), 0);
    CU_ASSERT_TRUE(pool_ok(p));
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

/* A shell (POOL_SHELL) serves the cold start of any harness, once; a spare is not a shell. */
static void test_shell_claim_any_harness_once(void)
{
    struct pool *p = spare_pool(8);
    struct pool_reservation rv = reservation("proj:shell");
    struct pool_session s;
    uint32_t ready, building;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    (void)ready_spare(p, HARNESS_PI, 6000);
    CU_ASSERT_EQUAL(pool_shell_claim(p, &rv, &s), -ENOENT); /* a pi spare is no shell */
    (void)ready_spare(p, (uint8_t)POOL_SHELL, 6001);
    pool_spare_count(p, (uint8_t)POOL_SHELL, &ready, &building);
    CU_ASSERT_EQUAL(ready, 1);
    rv.harness = HARNESS_CODEX;
    CU_ASSERT_EQUAL(pool_spare_claim(p, &rv, &s), -ENOENT); /* a shell is no codex spare */
    CU_ASSERT_EQUAL(pool_shell_claim(p, &rv, &s), 0);
    CU_ASSERT_EQUAL(s.keeper_pid, 6001);
    CU_ASSERT_EQUAL(s.harness, HARNESS_CODEX); /* the slot is the claiming run's now */
    CU_ASSERT_TRUE(s.from_spare);
    rv.key = "proj:other";
    CU_ASSERT_EQUAL(pool_shell_claim(p, &rv, &s), -ENOENT); /* never a second session */
    pool_spare_count(p, (uint8_t)POOL_SHELL, &ready, &building);
    CU_ASSERT_EQUAL(ready + building, 0);
    CU_ASSERT_TRUE(pool_ok(p));
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_spare_claim_rules(void)
{
    struct pool *p = spare_pool(8);
    struct pool_reservation rv = reservation("proj:dup");
    struct pool_handle h, taken;
    struct pool_session s;
    char longkey[POOL_KEY_MAX + 8];

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    /* nothing to claim: no spare, a spare still being built, a spare of another harness */
    CU_ASSERT_EQUAL(pool_spare_claim(p, &rv, &s), -ENOENT);
    CU_ASSERT_EQUAL(pool_spare_reserve(p, HARNESS_PI, getpid(), &h), 0);
    CU_ASSERT_EQUAL(pool_spare_claim(p, &rv, &s), -ENOENT);
    (void)ready_spare(p, HARNESS_CLAUDE, 5000);
    CU_ASSERT_EQUAL(pool_spare_claim(p, &rv, &s), -ENOENT);
    /* a key already held: -EEXIST, the spare stays a spare */
    (void)ready_spare(p, HARNESS_PI, 5001);
    CU_ASSERT_EQUAL(pool_session_reserve(p, &rv, &taken), 0);
    CU_ASSERT_EQUAL(pool_spare_claim(p, &rv, &s), -EEXIST);
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    rv.key = longkey;
    CU_ASSERT_EQUAL(pool_spare_claim(p, &rv, &s), -ENAMETOOLONG);
    /* a per-turn run may take one too: anonymous, never found by key */
    rv.key = "";
    rv.per_turn = true;
    CU_ASSERT_EQUAL(pool_spare_claim(p, &rv, &s), 0);
    CU_ASSERT_TRUE(s.per_turn);
    CU_ASSERT_EQUAL(s.keeper_pid, 5001);
    /* only a slot reserved as a spare becomes one */
    CU_ASSERT_EQUAL(pool_session_set_keeper(p, taken, 77, 1, 78), 0);
    CU_ASSERT_EQUAL(pool_spare_ready(p, taken), -EINVAL);
    CU_ASSERT_TRUE(pool_ok(p));
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_spare_evict_for_capacity(void)
{
    struct pool *p = spare_pool(16);
    struct pool_victim v;
    struct pool_handle h;
    struct pool_session s;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(pool_spare_evict(p, &v), 0);
    CU_ASSERT_FALSE(v.any);
    h = ready_spare(p, HARNESS_PI, 6000);
    CU_ASSERT_EQUAL(pool_spare_evict(p, &v), 1);
    CU_ASSERT_TRUE(v.any);
    CU_ASSERT_EQUAL(v.h.index, h.index);
    CU_ASSERT_EQUAL(v.keeper_pid, 6000);
    CU_ASSERT_EQUAL(v.reason, TEARDOWN_CAPACITY_EVICTION);
    /* drained: nobody claims it any more, and its keeper frees it */
    CU_ASSERT_TRUE(pool_session_peek(p, h.index, &s));
    CU_ASSERT_EQUAL(s.state, SLOT_DRAINING);
    CU_ASSERT_EQUAL(pool_spare_evict(p, &v), 0);
    CU_ASSERT_EQUAL(pool_session_free(p, h, 0), 0);
    CU_ASSERT_TRUE(pool_ok(p));
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

/* Children race for the spares from separate processes: each spare is claimed at most once. */
static void test_spare_concurrent_claims_never_share(void)
{
    enum { SPARES = 4, CLAIMERS = 8 };
    struct pool *p = spare_pool(32);
    int *won = mmap(NULL, sizeof(int) * CLAIMERS, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int claimed = 0, seen[32] = {0};

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_NOT_EQUAL_FATAL(won, MAP_FAILED);
    for (int i = 0; i < SPARES; i++)
        (void)ready_spare(p, HARNESS_PI, 7000 + i);
    for (int i = 0; i < CLAIMERS; i++) {
        pid_t pid = fork();

        if (pid == 0) {
            char key[32];
            struct pool_reservation rv = reservation(key);
            struct pool_session s;

            snprintf(key, sizeof(key), "proj:c%d", i);
            won[i] = pool_spare_claim(p, &rv, &s) == 0 ? (int)s.h.index : -1;
            _exit(0);
        }
    }
    for (int i = 0; i < CLAIMERS; i++)
        wait(NULL);
    for (int i = 0; i < CLAIMERS; i++) {
        if (won[i] < 0)
            continue;
        claimed++;
        CU_ASSERT_EQUAL(seen[won[i]], 0); /* no slot handed out twice */
        seen[won[i]]++;
    }
    CU_ASSERT_EQUAL(claimed, SPARES);
    CU_ASSERT_TRUE(pool_ok(p));
    munmap(won, sizeof(int) * CLAIMERS);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_spare_settings_parse(void)
{
    struct spare_settings s;
    char err[200], text[SPARE_SETTINGS_TEXT_MAX];

    CU_ASSERT_EQUAL(spare_settings_parse("", &s, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(s.count[HARNESS_PI], 2); /* the default */
    CU_ASSERT_EQUAL(s.count[HARNESS_CLAUDE], 0);
    CU_ASSERT_TRUE(spare_settings_any(&s));
    CU_ASSERT_EQUAL(spare_settings_parse("pi=5,claude=0", &s, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(s.count[HARNESS_PI], 5);
    spare_settings_format(&s, text, sizeof(text));
    CU_ASSERT_STRING_EQUAL(text, "pi=5,claude=0,codex=0,opencode=0");
    CU_ASSERT_EQUAL(spare_settings_parse("pi=0", &s, err, sizeof(err)), 0);
    CU_ASSERT_FALSE(spare_settings_any(&s));
    CU_ASSERT_EQUAL(spare_settings_parse("0", &s, err, sizeof(err)), 0);
    CU_ASSERT_FALSE(spare_settings_any(&s));
    CU_ASSERT_EQUAL(spare_settings_parse("pi_core=1", &s, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(s.count[HARNESS_PI], 1);
    /* opencode spares are opt-in: named, they count; unnamed, they stay off */
    CU_ASSERT_EQUAL(spare_settings_parse("pi=0,opencode=3", &s, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(s.count[HARNESS_OPENCODE], 3);
    CU_ASSERT_EQUAL(s.count[HARNESS_PI], 0);
    CU_ASSERT_TRUE(spare_settings_any(&s));
    spare_settings_format(&s, text, sizeof(text));
    CU_ASSERT_STRING_EQUAL(text, "pi=0,claude=0,codex=0,opencode=3");
    CU_ASSERT_EQUAL(spare_settings_parse("pi=1", &s, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(s.count[HARNESS_OPENCODE], 0);
    CU_ASSERT_EQUAL(spare_settings_parse("opencode=65", &s, err, sizeof(err)), -EINVAL);

    s.count[HARNESS_PI] = 9; /* untouched on failure */
    CU_ASSERT_EQUAL(spare_settings_parse("pi", &s, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "<harness>=<count>"));
    CU_ASSERT_EQUAL(spare_settings_parse("pi=", &s, err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(spare_settings_parse("=2", &s, err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(spare_settings_parse("pi=2,,", &s, err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(spare_settings_parse("gpt=2", &s, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown harness \"gpt\""));
    CU_ASSERT_EQUAL(spare_settings_parse("scripted=1", &s, err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(spare_settings_parse("pi=-1", &s, err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(spare_settings_parse("pi=65", &s, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "0..64"));
    CU_ASSERT_EQUAL(spare_settings_parse("pi=2x", &s, err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(spare_settings_parse("codex=1", &s, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot have spares"));
    CU_ASSERT_EQUAL(spare_settings_parse("claude=1", &s, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot have spares"));
    CU_ASSERT_EQUAL(s.count[HARNESS_PI], 9);
    memset(text, 'x', sizeof(text) - 1);
    text[sizeof(text) - 1] = '\0';
    CU_ASSERT_EQUAL(spare_settings_parse(text, &s, err, sizeof(err)), -EINVAL);
}

static int parse(const char *body, struct run_request *req)
{
    struct request_limits lim;
    char err[256];
    int r;

    request_limits_default(&lim);
    r = request_parse(body, strlen(body), &lim, req, err, sizeof(err));
    if (r < 0)
        fprintf(stderr, "\n  parse: %s\n", err);
    return r;
}

#define PI_BASE                                                                                    \
    "\"harness\":\"pi\",\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define OC_BASE                                                                                    \
    "\"harness\":\"opencode\",\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"       \
    "\"hi\"}]"
#define PI_MC(extra)                                                                               \
    "\"modelConnection\":{\"provider\":\"openai\",\"deployment\":\"custom\",\"endpoint\":{"        \
    "\"baseUrl\":\"https://models.example/v1\"},\"credentialMode\":\"env\",\"credentials\":[{"     \
    "\"binding\":{\"kind\":\"environment\",\"name\":\"OPENAI_API_KEY\"},\"value\":\"sk\","         \
    "\"usage\":\"opaque_http\"}]" extra "}"

static void test_spare_eligibility_rule(void)
{
    static const struct {
        const char *body;
        const char *why; /* NULL: eligible */
    } cases[] = {
        {"{" PI_BASE "," PI_MC("") "}", NULL},
        {"{\"harness\":\"claude\",\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
         "\"hi\"}]," PI_MC("") "}",
         "no spares of this harness"},
        {"{" PI_BASE "," PI_MC("") ",\"sandboxPermission\":{\"network\":{\"mode\":\"off\"}}}",
         "network off"},
        {"{" PI_BASE "," PI_MC(",\"environment\":{\"AWS_REGION\":\"eu-west-1\"}") "}",
         "modelConnection.environment"},
        /* opencode, by the same rule once opencode=N is set */
        {"{" OC_BASE "," PI_MC("") "}", NULL},
        {"{" OC_BASE "," PI_MC("") ",\"sandboxPermission\":{\"network\":{\"mode\":\"off\"}}}",
         "network off"},
        {"{" OC_BASE "," PI_MC(",\"environment\":{\"AWS_REGION\":\"eu-west-1\"}") "}",
         "modelConnection.environment"},
    };
    struct spare_settings s;
    char err[128];

    CU_ASSERT_EQUAL_FATAL(spare_settings_parse("pi=1,opencode=1", &s, err, sizeof(err)), 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct run_request req;
        const char *why;

        if (parse(cases[i].body, &req) < 0) {
            CU_FAIL("request did not parse");
            continue;
        }
        why = spare_ineligible(&s, &req);
        if (cases[i].why) {
            CU_ASSERT_TRUE(why && strcmp(why, cases[i].why) == 0);
        } else {
            CU_ASSERT_PTR_NULL(why);
        }
        run_request_release(&req);
    }
    {
        struct run_request req;
        CU_ASSERT_EQUAL_FATAL(spare_placeholder_request(HARNESS_PI, &req, err, sizeof(err)), 0);
        /* the placeholder holds no session, and is itself eligible */
        CU_ASSERT_PTR_NULL(req.session_id);
        CU_ASSERT_PTR_NULL(spare_ineligible(&s, &req));
        CU_ASSERT_STRING_EQUAL(req.mc.base_url, SPARE_PLACEHOLDER_URL);
        run_request_release(&req);
        /* an opencode spare's placeholder, likewise; claude has none */
        CU_ASSERT_EQUAL_FATAL(spare_placeholder_request(HARNESS_OPENCODE, &req, err, sizeof(err)),
                              0);
        CU_ASSERT_EQUAL(req.harness, HARNESS_OPENCODE);
        CU_ASSERT_PTR_NULL(spare_ineligible(&s, &req));
        run_request_release(&req);
        CU_ASSERT_EQUAL(spare_placeholder_request(HARNESS_CLAUDE, &req, err, sizeof(err)),
                        -ENOTSUP);
        /* pi spares only (the default): an opencode session starts cold */
        CU_ASSERT_EQUAL_FATAL(spare_settings_parse("pi=1", &s, err, sizeof(err)), 0);
        CU_ASSERT_EQUAL_FATAL(parse("{" OC_BASE "," PI_MC("") "}", &req), 0);
        CU_ASSERT_STRING_EQUAL(TEST_STR(spare_ineligible(&s, &req)), "no spares of this harness");
        run_request_release(&req);
        /* spares disabled: nothing is eligible */
        CU_ASSERT_EQUAL_FATAL(spare_settings_parse("pi=0", &s, err, sizeof(err)), 0);
        CU_ASSERT_EQUAL_FATAL(spare_placeholder_request(HARNESS_PI, &req, err, sizeof(err)), 0);
        CU_ASSERT_PTR_NOT_NULL(spare_ineligible(&s, &req));
        run_request_release(&req);
    }
}

static int fake_claims;
static json_object *fake_egress_seen;

static int fake_claim(struct provider_process *proc, json_object *egress, json_object *route,
                      char *err, size_t errlen)
{
    (void)proc;
    (void)route;
    fake_claims++;
    fake_egress_seen = egress;
    if (json_object_object_get(egress, "refuse")) {
        snprintf(err, errlen, "refused by the provider");
        return -EPERM;
    }
    return 0;
}

/* "#claim": what a keeper accepts, what it refuses, and that the provider sees the policy. */
static void test_spare_keeper_claim(void)
{
    struct provider_ops with = {.name = "fake", .claim = fake_claim};
    struct provider_ops without = {.name = "fake"};
    struct keeper_spec spare = {.harness = "pi"};
    struct keeper_spec session = {.harness = "pi", .session_key = "proj:s"};
    struct provider_process proc = {0};
    struct keeper_claim c;
    char err[200];
    json_object *policy = json_object_new_object();
    static const char ok[] = "{\"idleMs\":60000,\"perTurn\":false,\"sessionKey\":\"p:s\","
                             "\"egress\":{\"mode\":\"on\"}}";
    static const char refused[] = "{\"idleMs\":60000,\"perTurn\":true,\"sessionKey\":\"\","
                                  "\"egress\":{\"refuse\":true}}";
    static const char *const bad[] = {
        "not json",
        "[]",
        "{\"perTurn\":false,\"sessionKey\":\"k\"}",
        "{\"idleMs\":0,\"perTurn\":false,\"sessionKey\":\"k\"}",
        "{\"idleMs\":86400001,\"perTurn\":false,\"sessionKey\":\"k\"}",
        "{\"idleMs\":5,\"perTurn\":\"no\",\"sessionKey\":\"k\"}",
        "{\"idleMs\":5,\"perTurn\":false}",
    };

    fake_claims = 0;
    CU_ASSERT_EQUAL(keeper_claim_apply(&spare, &with, &proc, ok, strlen(ok), &c, err, sizeof(err)),
                    0);
    CU_ASSERT_EQUAL(fake_claims, 1);
    CU_ASSERT_EQUAL(c.idle_ms, 60000);
    CU_ASSERT_FALSE(c.per_turn);
    /* the provider refuses: the claim fails with its word */
    CU_ASSERT_EQUAL(
        keeper_claim_apply(&spare, &with, &proc, refused, strlen(refused), &c, err, sizeof(err)),
        -EPERM);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "refused by the provider"));
    /* an environment that holds a session is no spare */
    CU_ASSERT_EQUAL(
        keeper_claim_apply(&session, &with, &proc, ok, strlen(ok), &c, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a spare"));
    /* a provider that cannot rebind a running sandbox cannot serve a claim with a policy */
    CU_ASSERT_EQUAL(
        keeper_claim_apply(&spare, &without, &proc, ok, strlen(ok), &c, err, sizeof(err)),
        -ENOTSUP);
    /* a confined spare (its spec has a policy) needs the session's */
    spare.egress = policy;
    CU_ASSERT_EQUAL(
        keeper_claim_apply(&spare, &with, &proc, bad[2], strlen(bad[2]), &c, err, sizeof(err)),
        -EINVAL);
    {
        static const char no_egress[] = "{\"idleMs\":5,\"perTurn\":false,\"sessionKey\":\"k\"}";
        CU_ASSERT_EQUAL(keeper_claim_apply(&spare, &with, &proc, no_egress, strlen(no_egress), &c,
                                           err, sizeof(err)),
                        -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "no egress policy"));
    }
    spare.egress = NULL;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CU_ASSERT_EQUAL(
            keeper_claim_apply(&spare, &with, &proc, bad[i], strlen(bad[i]), &c, err, sizeof(err)),
            -EINVAL);
    json_object_put(policy);
}

CU_TestInfo spare_tests[] = {
    {"test_spare_keeper_claim", test_spare_keeper_claim},
    {"test_shell_claim_any_harness_once", test_shell_claim_any_harness_once},
    {"test_spare_claim_takes_the_slot", test_spare_claim_takes_the_slot},
    {"test_spare_claim_rules", test_spare_claim_rules},
    {"test_spare_evict_for_capacity", test_spare_evict_for_capacity},
    {"test_spare_concurrent_claims_never_share", test_spare_concurrent_claims_never_share},
    {"test_spare_settings_parse", test_spare_settings_parse},
    {"test_spare_eligibility_rule", test_spare_eligibility_rule},
    CU_TEST_INFO_NULL,
};
