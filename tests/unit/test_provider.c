/* provider + harness registries: one place lists what exists. */
#include <errno.h>
#include <string.h>

#include "harness/harness.h"
#include "provider/provider.h"
#include "sandbox/config.h"
#include "suites.h"

static void test_provider_registry_lists_local_first(void)
{
    const struct provider_ops *local = provider_get("local");

    CU_ASSERT_TRUE_FATAL(provider_count() >= 1);
    CU_ASSERT_PTR_EQUAL(provider_at(0), local);
    CU_ASSERT_PTR_NULL(provider_at(provider_count()));
    CU_ASSERT_PTR_NOT_NULL_FATAL(local);
    CU_ASSERT_STRING_EQUAL(local->name, "local");
    CU_ASSERT_FALSE(local->caps.remote);
    CU_ASSERT_TRUE(local->caps.reusable_leases);
    CU_ASSERT_TRUE(local->caps.network_off);
    /* the keeper enforces allowlists in the sandbox's own network namespace */
    CU_ASSERT_TRUE(local->caps.network_allowlist);
    /* the keeper is the local lease: start/stop, no lease verbs */
    CU_ASSERT_PTR_NOT_NULL(local->start);
    CU_ASSERT_PTR_NOT_NULL(local->stop);
    CU_ASSERT_PTR_NULL(local->acquire);
    CU_ASSERT_PTR_NULL(local->resume);
    CU_ASSERT_PTR_NULL(local->release);
    for (size_t i = 0; i < provider_count(); i++)
        CU_ASSERT_PTR_EQUAL(provider_get(provider_at(i)->name), provider_at(i));
}

static void test_provider_unknown_and_disabled(void)
{
    CU_ASSERT_PTR_NULL(provider_get("daytona"));
    CU_ASSERT_PTR_NULL(provider_get(""));
    CU_ASSERT_PTR_NULL(provider_get(NULL));
    CU_ASSERT_PTR_NULL(provider_get("LOCAL"));
    CU_ASSERT_TRUE(provider_known("daytona"));
    CU_ASSERT_TRUE(provider_known("e2b"));
    CU_ASSERT_TRUE(provider_known("local"));
    CU_ASSERT_FALSE(provider_known("docker"));
    CU_ASSERT_STRING_EQUAL(provider_lease_outcome_name(PROVIDER_LEASE_REPLACEMENT), "replacement");
    CU_ASSERT_STRING_EQUAL(provider_replacement_reason_name(PROVIDER_REPLACED_IDENTITY_MISMATCH),
                           "identity_mismatch");
}

static void test_provider_sandbox_description(void)
{
    struct sandbox_config limits;
    struct sandbox_plan plan;
    json_object *sb, *lim;

    sandbox_plan_init(&plan);
    sandbox_config_default(&limits);
    limits.tmp_max = 3u << 20;
    limits.home_max = 5u << 20;
    json_object_array_add(plan.argv, json_object_new_string("agent"));
    sb = provider_sandbox_description(&plan, "/state/envs/e/workspace", &limits);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sb);
    /* the network is the keeper spec's business (egress), not the description's */
    CU_ASSERT_PTR_NULL(json_object_object_get(sb, "network"));
    lim = json_object_object_get(sb, "limits");
    CU_ASSERT_EQUAL(json_object_get_int64(json_object_object_get(lim, "tmpBytes")), 3 << 20);
    CU_ASSERT_EQUAL(json_object_get_int64(json_object_object_get(lim, "homeBytes")), 5 << 20);
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_object_get(sb, "cwd")),
                           SANDBOX_WORKSPACE);
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_object_get(sb, "workspace")),
                           "/state/envs/e/workspace");
    CU_ASSERT_PTR_EQUAL(json_object_object_get(sb, "argv"), plan.argv);
    json_object_put(sb);
    sandbox_plan_release(&plan);
}

static void test_provider_harness_registry(void)
{
    enum harness_kind k = HARNESS_COUNT;
    bool pi_listed = false;

    for (int i = 0; i < HARNESS_COUNT; i++) {
        const struct harness_ops *h = harness_get((enum harness_kind)i);
        CU_ASSERT_PTR_NOT_NULL_FATAL(h);
        CU_ASSERT_EQUAL(h->kind, (enum harness_kind)i);
        CU_ASSERT_STRING_EQUAL(harness_kind_name((enum harness_kind)i), h->name);
    }
    CU_ASSERT_PTR_NULL(harness_get(HARNESS_COUNT));
    CU_ASSERT_STRING_EQUAL(harness_kind_name(HARNESS_COUNT), "unknown");
    CU_ASSERT_EQUAL(harness_lookup("pi_core", false, &k), 0);
    CU_ASSERT_EQUAL(k, HARNESS_PI);
    CU_ASSERT_EQUAL(harness_lookup("pi", false, &k), 0);
    CU_ASSERT_EQUAL(k, HARNESS_PI);
    CU_ASSERT_EQUAL(harness_lookup("codex", false, &k), 0);
    CU_ASSERT_EQUAL(k, HARNESS_CODEX);
    CU_ASSERT_EQUAL(harness_lookup("scripted", false, &k), -ENOENT);
    CU_ASSERT_EQUAL(harness_lookup("scripted", true, &k), 0);
    CU_ASSERT_EQUAL(k, HARNESS_SCRIPTED);
    CU_ASSERT_EQUAL(harness_lookup("Claude", false, &k), -ENOENT);
    /* every accepted name is one /health can list: "pi" included */
    for (size_t i = 0; i < harness_wire_count(); i++) {
        enum harness_kind kind;
        const char *name = harness_wire_name(i, &kind);
        CU_ASSERT_EQUAL(harness_lookup(name, true, &k), 0);
        CU_ASSERT_EQUAL(k, kind);
        if (strcmp(name, "pi") == 0)
            pi_listed = true;
    }
    CU_ASSERT_TRUE(pi_listed);
    CU_ASSERT_PTR_NULL(harness_wire_name(harness_wire_count(), &k));
}

CU_TestInfo provider_tests[] = {
    {"test_provider_registry_lists_local_first", test_provider_registry_lists_local_first},
    {"test_provider_unknown_and_disabled", test_provider_unknown_and_disabled},
    {"test_provider_sandbox_description", test_provider_sandbox_description},
    {"test_provider_harness_registry", test_provider_harness_registry},
    CU_TEST_INFO_NULL,
};
