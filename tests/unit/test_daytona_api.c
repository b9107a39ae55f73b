/*
 * daytona_api — the create body (labels, env, intervals, snapshot or image, refused names)
 * and sandbox descriptions (hostile ids and URLs refused, unknown states kept apart). The
 * lifecycle calls are exercised by test_daytona_client.c and tests/integration.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "daytona_fixture.h"
#include "provider/daytona/daytona_api.h"
#include "suites.h"

static void test_daytona_api_create_body(void)
{
    struct daytona_config cfg = {.snapshot = "agent-sandbox-v1", .target = "eu"};
    struct daytona_kv labels[] = {{"agent-runner-instance", "i1"}, {"agent-runner-pool", "d1"}};
    struct daytona_kv env[] = {{"PI_OFFLINE", "1"}};
    struct daytona_create_params p = {
        .name = "ar-abc",
        .labels = labels,
        .nlabels = 2,
        .env = env,
        .nenv = 1,
        .auto_stop_min = 5,
        .auto_archive_min = 0,
        .auto_delete_min = 1440,
    };
    json_object *b;
    char err[256];

    b = daytona_fixture_body(&cfg, &p, 0, err, sizeof(err));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(b, "name")), "ar-abc");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(b, "snapshot")), "agent-sandbox-v1");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(b, "target")), "eu");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(b, "labels"), "agent-runner-pool")), "d1");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(b, "env"), "PI_OFFLINE")), "1");
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(b, "autoStopInterval")), 5);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(b, "autoArchiveInterval")), 0);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(b, "autoDeleteInterval")), 1440);
    CU_ASSERT_PTR_NULL(jsonx_get(b, "networkBlockAll")); /* network on: no field */
    CU_ASSERT_PTR_NULL(jsonx_get(b, "buildInfo"));
    CU_ASSERT_FALSE(json_object_get_boolean(jsonx_get(b, "public")));
    json_object_put(b);
    /* an image instead of a snapshot */
    memset(cfg.snapshot, 0, sizeof(cfg.snapshot));
    snprintf(cfg.image, sizeof(cfg.image), "debian:12");
    p.auto_archive_min = DAYTONA_INTERVAL_UNSET;
    b = daytona_fixture_body(&cfg, &p, 0, err, sizeof(err));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(b, "buildInfo"), "dockerfileContent")),
                           "FROM debian:12\n");
    CU_ASSERT_PTR_NULL(jsonx_get(b, "autoArchiveInterval"));
    json_object_put(b);
    /* bad names, env names and intervals are refused */
    p.name = "../x";
    b = daytona_fixture_body(&cfg, &p, -EINVAL, err, sizeof(err));
    p.name = "ar-abc";
    env[0].name = "BAD-NAME";
    b = daytona_fixture_body(&cfg, &p, -EINVAL, err, sizeof(err));
    env[0].name = "PI_OFFLINE";
    p.auto_stop_min = -3;
    b = daytona_fixture_body(&cfg, &p, -EINVAL, err, sizeof(err));
    (void)b;
}

static void test_daytona_api_sandbox_parse(void)
{
    struct daytona_sandbox sb;
    json_object *o = test_json(daytona_fixture_dto);
    char err[128];

    CU_ASSERT_FATAL(o != NULL);
    CU_ASSERT_EQUAL(daytona_sandbox_parse(o, &sb, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(sb.id, "0b5c7a44-1d7e-4f44-9d2a-1a2b3c4d5e6f");
    CU_ASSERT_EQUAL(sb.state, DAYTONA_STATE_STOPPED);
    CU_ASSERT_EQUAL(sb.auto_stop_min, 5);
    CU_ASSERT_STRING_EQUAL(sb.toolbox,
                           "http://127.0.0.1:9/toolbox/0b5c7a44-1d7e-4f44-9d2a-1a2b3c4d5e6f");
    CU_ASSERT_STRING_EQUAL(TEST_STR(daytona_sandbox_label(&sb, "agent-runner-pool")), "abc");
    CU_ASSERT_PTR_NULL(daytona_sandbox_label(&sb, "n")); /* not a string: dropped */
    daytona_sandbox_release(&sb);
    json_object_put(o);
    /* hostile descriptions */
    {
        static const char *bad[] = {
            "{\"id\":\"../../etc\",\"state\":\"started\"}",
            "{\"id\":\"a b\",\"state\":\"started\"}",
            "{\"id\":\"x\"}",
            "{\"id\":\"x\",\"state\":\"started\",\"toolboxProxyUrl\":\"file:///etc\"}",
            "{\"id\":\"x\",\"state\":\"started\",\"toolboxProxyUrl\":\"http://a b\"}",
            "[]",
        };

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            o = test_json(bad[i]);
            CU_ASSERT_EQUAL(daytona_sandbox_parse(o, &sb, err, sizeof(err)), -EBADMSG);
            json_object_put(o);
        }
    }
    o = test_json("{\"id\":\"x\",\"state\":\"hibernating\"}");
    CU_ASSERT_EQUAL(daytona_sandbox_parse(o, &sb, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(sb.state, DAYTONA_STATE_OTHER);
    daytona_sandbox_release(&sb);
    json_object_put(o);
}

CU_TestInfo daytona_api_tests[] = {
    {"test_daytona_api_create_body", test_daytona_api_create_body},
    {"test_daytona_api_sandbox_parse", test_daytona_api_sandbox_parse},
    CU_TEST_INFO_NULL,
};
