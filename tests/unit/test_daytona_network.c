/*
 * daytona_network — every mapping of sandboxPermission.network (off, allowlist, the run's own
 * endpoints, limits, what Daytona cannot enforce) and convergence of a retained sandbox.
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

static void test_daytona_network_network_mapping(void)
{
    struct daytona_config cfg = {0};
    const char *allow[12] = {"10.0.0.0/8", " 192.168.1.1 ", "API.Example.com", "*.npmjs.org",
                             "10.0.0.0/8"};
    const char *always[] = {"127.0.0.1"};
    struct daytona_create_params p = {.auto_stop_min = DAYTONA_INTERVAL_UNSET,
                                      .auto_archive_min = DAYTONA_INTERVAL_UNSET,
                                      .auto_delete_min = DAYTONA_INTERVAL_UNSET};
    json_object *b;
    char err[256];

    /* off: block everything */
    p.network = NETWORK_OFF;
    b = daytona_fixture_body(&cfg, &p, 0, err, sizeof(err));
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_get(b, "networkBlockAll")));
    CU_ASSERT_PTR_NULL(jsonx_get(b, "networkAllowList"));
    json_object_put(b);
    /* off, but the model endpoint stays reachable: only it */
    p.always_allow = always;
    p.nalways_allow = 1;
    b = daytona_fixture_body(&cfg, &p, 0, err, sizeof(err));
    CU_ASSERT_FALSE(json_object_get_boolean(jsonx_get(b, "networkBlockAll")));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(b, "networkAllowList")), "127.0.0.1/32");
    json_object_put(b);
    /* allowlist: CIDRs, bare addresses as /32, host names lower-cased, duplicates merged */
    p.network = NETWORK_ALLOWLIST;
    p.allow = allow;
    p.nallow = 5;
    b = daytona_fixture_body(&cfg, &p, 0, err, sizeof(err));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(b, "networkAllowList")),
                           "10.0.0.0/8,192.168.1.1/32,127.0.0.1/32");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(b, "domainAllowList")),
                           "api.example.com,*.npmjs.org");
    json_object_put(b);
    /* an empty allowlist blocks all (Agenta's mapping) */
    p.nallow = 0;
    p.nalways_allow = 0;
    b = daytona_fixture_body(&cfg, &p, 0, err, sizeof(err));
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_get(b, "networkBlockAll")));
    json_object_put(b);
    /* what Daytona cannot enforce is refused, never widened */
    {
        static const char *bad[] = {
            "::1", "fe80::/10", "https://x.com", "x.com:443", "10.0.0.0/33", "300.1.1.1",
            "",    "a..b.com",  "-x.com",        "1.2.3.4/",  "x com"};

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            p.allow = &bad[i];
            p.nallow = 1;
            err[0] = '\0';
            b = daytona_fixture_body(&cfg, &p, -EINVAL, err, sizeof(err));
            CU_ASSERT(strstr(err, "sandboxPermission.network.allowlist[0]") != NULL);
        }
    }
    /* at most 10 of each list */
    {
        char nets[11][24];
        const char *many[11];

        for (int i = 0; i < 11; i++) {
            snprintf(nets[i], sizeof(nets[i]), "10.0.%d.0/24", i);
            many[i] = nets[i];
        }
        p.allow = many;
        p.nallow = 10;
        b = daytona_fixture_body(&cfg, &p, 0, err, sizeof(err));
        json_object_put(b);
        p.nallow = 11;
        b = daytona_fixture_body(&cfg, &p, -EINVAL, err, sizeof(err));
        CU_ASSERT(strstr(err, "at most 10") != NULL);
    }
}

static void test_daytona_network_network_convergence(void)
{
    struct daytona_sandbox sb = {0};
    json_object *want = test_json("{\"networkBlockAll\":false,"
                                  "\"networkAllowList\":\"127.0.0.1/32,10.0.0.0/8\"}");
    json_object *settings = NULL;

    snprintf(sb.network_allow_list, sizeof(sb.network_allow_list), " 10.0.0.0/8 ,127.0.0.1/32");
    CU_ASSERT_TRUE(daytona_sandbox_network_matches(&sb, want));
    snprintf(sb.network_allow_list, sizeof(sb.network_allow_list), "10.0.0.0/8");
    CU_ASSERT_FALSE(daytona_sandbox_network_matches(&sb, want));
    snprintf(sb.network_allow_list, sizeof(sb.network_allow_list),
             "10.0.0.0/8,127.0.0.1/32,1.1.1.1/32");
    CU_ASSERT_FALSE(daytona_sandbox_network_matches(&sb, want));
    sb.network_block_all = true;
    CU_ASSERT_FALSE(daytona_sandbox_network_matches(&sb, want));
    CU_ASSERT_EQUAL(daytona_network_settings(want, &settings), 0);
    CU_ASSERT_FALSE(json_object_get_boolean(jsonx_get(settings, "networkBlockAll")));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(settings, "networkAllowList")),
                           "127.0.0.1/32,10.0.0.0/8");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(settings, "domainAllowList")), "");
    json_object_put(settings);
    json_object_put(want);
    /* a sandbox created open must not be reused as-is by a run that wants the network off */
    want = test_json("{\"networkBlockAll\":true}");
    sb.network_block_all = false;
    sb.network_allow_list[0] = '\0';
    CU_ASSERT_FALSE(daytona_sandbox_network_matches(&sb, want));
    CU_ASSERT_EQUAL(daytona_network_settings(want, &settings), 0);
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_get(settings, "networkBlockAll")));
    json_object_put(settings);
    json_object_put(want);
    want = test_json("{}"); /* network on */
    CU_ASSERT_TRUE(daytona_sandbox_network_matches(&sb, want));
    json_object_put(want);
}

CU_TestInfo daytona_network_tests[] = {
    {"test_daytona_network_network_mapping", test_daytona_network_network_mapping},
    {"test_daytona_network_network_convergence", test_daytona_network_network_convergence},
    CU_TEST_INFO_NULL,
};
