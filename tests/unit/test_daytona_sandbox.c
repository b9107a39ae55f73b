/*
 * daytona_sandbox — the lease driver's pure parts (acquire, release and the sweep against a
 * server are in tests/integration/test_daytona_bridge.py): the restart sweep's default
 * decisions and the parameter checks made before any request.
 */
#include <errno.h>
#include <string.h>

#include "provider/daytona/daytona_sandbox.h"
#include "suites.h"

static struct daytona_sandbox sandbox(enum daytona_state st, const char *lease)
{
    struct daytona_sandbox sb = {.state = st};

    sb.labels = json_object_new_object();
    if (lease)
        json_object_object_add(sb.labels, DAYTONA_LABEL_LEASE, json_object_new_string(lease));
    return sb;
}

static void test_daytona_sandbox_sweep_default(void)
{
    static const struct {
        enum daytona_state st;
        const char *lease;
        bool live;
        enum daytona_sweep_action want;
    } cases[] = {
        {DAYTONA_STATE_STARTED, "reusable", true, DAYTONA_SWEEP_KEEP},
        {DAYTONA_STATE_STARTED, "per_turn", true, DAYTONA_SWEEP_KEEP},
        {DAYTONA_STATE_STARTED, "reusable", false, DAYTONA_SWEEP_DELETE},
        {DAYTONA_STATE_STOPPED, "reusable", false, DAYTONA_SWEEP_KEEP},
        {DAYTONA_STATE_ARCHIVED, "reusable", false, DAYTONA_SWEEP_KEEP},
        {DAYTONA_STATE_STOPPING, "reusable", false, DAYTONA_SWEEP_KEEP},
        {DAYTONA_STATE_STOPPED, "per_turn", false, DAYTONA_SWEEP_DELETE},
        {DAYTONA_STATE_STARTED, "per_turn", false, DAYTONA_SWEEP_DELETE},
        {DAYTONA_STATE_ERROR, "reusable", false, DAYTONA_SWEEP_DELETE},
        {DAYTONA_STATE_CREATING, "reusable", false, DAYTONA_SWEEP_DELETE},
        {DAYTONA_STATE_STOPPED, NULL, false, DAYTONA_SWEEP_DELETE},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct daytona_sandbox sb = sandbox(cases[i].st, cases[i].lease);

        CU_ASSERT_EQUAL(daytona_sweep_default(&sb, cases[i].live), cases[i].want);
        daytona_sandbox_release(&sb);
    }
}

static void test_daytona_sandbox_acquire_needs_identity(void)
{
    struct daytona_acquire_params p = {0};
    struct daytona_lease l;
    char err[128];

    /* refused before any request: no client is needed */
    CU_ASSERT_EQUAL(daytona_acquire(NULL, &p, &l, err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(daytona_sweep(NULL, "", 10, NULL, NULL, NULL), -EINVAL);
}

CU_TestInfo daytona_sandbox_tests[] = {
    {"test_daytona_sandbox_sweep_default", test_daytona_sandbox_sweep_default},
    {"test_daytona_sandbox_acquire_needs_identity", test_daytona_sandbox_acquire_needs_identity},
    CU_TEST_INFO_NULL,
};
