/*
 * daytona_exec — the pure parts (the command runs are in tests/integration): the command
 * label clamp, the span's closed attribute allowlist (ids hashed, non-finite numbers left out,
 * exit code only when known, outcome).
 */
#include <math.h>
#include <string.h>

#include "base/jsonx.h"
#include "provider/daytona/daytona_exec.h"
#include "suites.h"

static void test_daytona_exec_command_label(void)
{
    CU_ASSERT_STRING_EQUAL(daytona_exec_command_label("git clone https://x"), "git");
    CU_ASSERT_STRING_EQUAL(daytona_exec_command_label("  /usr/bin/tar -xf a"), "tar");
    CU_ASSERT_STRING_EQUAL(daytona_exec_command_label("(\nmkdir -p /x\n)"), "mkdir");
    CU_ASSERT_STRING_EQUAL(daytona_exec_command_label("echo;rm -rf /"), "echo");
    CU_ASSERT_STRING_EQUAL(daytona_exec_command_label("curl http://secret-host/?token=abc"),
                           "other");
    CU_ASSERT_STRING_EQUAL(daytona_exec_command_label("gitx"), "other");
    CU_ASSERT_STRING_EQUAL(daytona_exec_command_label(""), "other");
    CU_ASSERT_STRING_EQUAL(daytona_exec_command_label(NULL), "other");
}

static void test_daytona_exec_span_attrs(void)
{
    struct daytona_exec_result res = {.exited = true, .exit_code = 0, .wall_ms = 12.5};
    json_object *o = NULL;
    char h[13];

    CU_ASSERT_EQUAL(daytona_exec_span_attrs("sb-secret-id", "git status", &res, true, &o), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(o, "agent_runner.sandbox.outcome")), "ok");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(o, "agent_runner.sandbox.exec.command")), "git");
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(o, "agent_runner.sandbox.exec.exit_code")), 0);
    CU_ASSERT_DOUBLE_EQUAL(json_object_get_double(jsonx_get(o, "agent_runner.sandbox.exec."
                                                               "wall_ms")),
                           12.5, 1e-9);
    CU_ASSERT_EQUAL(daytona_hash_id("sb-secret-id", h), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(o, "agent_runner.sandbox.sandbox_id")), h);
    CU_ASSERT(strstr(jsonx_text(o, NULL), "sb-secret-id") == NULL);
    json_object_object_foreach(o, k, v)
    {
        (void)v;
        CU_ASSERT_TRUE(daytona_exec_attr_allowed(k));
    }
    json_object_put(o);
    /* not finite: no attribute at all; no exit code while unknown; failed outcomes */
    res.wall_ms = NAN;
    res.exited = false;
    res.timed_out = true;
    CU_ASSERT_EQUAL(daytona_exec_span_attrs("sb", "sleep 9", &res, false, &o), 0);
    CU_ASSERT_PTR_NULL(jsonx_get(o, "agent_runner.sandbox.exec.wall_ms"));
    CU_ASSERT_PTR_NULL(jsonx_get(o, "agent_runner.sandbox.exec.exit_code"));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(o, "agent_runner.sandbox.outcome")), "failed");
    json_object_put(o);
    res.wall_ms = INFINITY;
    res.exited = true;
    res.timed_out = false;
    res.exit_code = 2;
    CU_ASSERT_EQUAL(daytona_exec_span_attrs("sb", "ls", &res, false, &o), 0);
    CU_ASSERT_PTR_NULL(jsonx_get(o, "agent_runner.sandbox.exec.wall_ms"));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(o, "agent_runner.sandbox.outcome")), "failed");
    json_object_put(o);
    /* the provider failed: outcome failed, no result attributes */
    CU_ASSERT_EQUAL(daytona_exec_span_attrs(NULL, "ls", NULL, true, &o), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(o, "agent_runner.sandbox.outcome")), "failed");
    CU_ASSERT_PTR_NULL(jsonx_get(o, "agent_runner.sandbox.sandbox_id"));
    json_object_put(o);
    CU_ASSERT_FALSE(daytona_exec_attr_allowed("agent_runner.sandbox.exec.stdout"));
    CU_ASSERT_FALSE(daytona_exec_attr_allowed(NULL));
}

static void test_daytona_exec_hash_id(void)
{
    char a[13], b[13];

    CU_ASSERT_EQUAL(daytona_hash_id("abc", a), 0);
    CU_ASSERT_EQUAL(daytona_hash_id("abc", b), 0);
    CU_ASSERT_STRING_EQUAL(a, b);
    /* SHA-256("abc") starts ba7816bf8f01 */
    CU_ASSERT_STRING_EQUAL(a, "ba7816bf8f01");
}

CU_TestInfo daytona_exec_tests[] = {
    {"test_daytona_exec_command_label", test_daytona_exec_command_label},
    {"test_daytona_exec_span_attrs", test_daytona_exec_span_attrs},
    {"test_daytona_exec_hash_id", test_daytona_exec_hash_id},
    CU_TEST_INFO_NULL,
};
