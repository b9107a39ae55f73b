/*
 * daytona_manifest — digests over path, mode and content; what is recorded counts as uploaded
 * until it changes; clearing; the cap. Uploads run in tests/integration.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../../engine/provider/daytona_manifest.h"
#include "suites.h"

static void test_daytona_manifest_digests_and_records(void)
{
    struct daytona_manifest *m = NULL;
    char d1[65], d2[65], d3[65], d4[65];

    CU_ASSERT_FATAL(daytona_manifest_new(&m) == 0);
    CU_ASSERT_EQUAL(daytona_manifest_digest("/a", 0644, "x", 1, d1), 0);
    CU_ASSERT_EQUAL(daytona_manifest_digest("/a", 0600, "x", 1, d2), 0);
    CU_ASSERT_EQUAL(daytona_manifest_digest("/a", 0644, "y", 1, d3), 0);
    CU_ASSERT_EQUAL(daytona_manifest_digest("/b", 0644, "x", 1, d4), 0);
    CU_ASSERT_EQUAL(strlen(d1), 64);
    /* path, mode and content all count */
    CU_ASSERT_STRING_NOT_EQUAL(d1, d2);
    CU_ASSERT_STRING_NOT_EQUAL(d1, d3);
    CU_ASSERT_STRING_NOT_EQUAL(d1, d4);
    CU_ASSERT_FALSE(daytona_manifest_has(m, "/a", d1));
    CU_ASSERT_EQUAL(daytona_manifest_put(m, "/a", d1), 0);
    CU_ASSERT_TRUE(daytona_manifest_has(m, "/a", d1));
    CU_ASSERT_FALSE(daytona_manifest_has(m, "/a", d3)); /* changed content: upload again */
    CU_ASSERT_EQUAL(daytona_manifest_put(m, "/a", d3), 0);
    CU_ASSERT_TRUE(daytona_manifest_has(m, "/a", d3));
    CU_ASSERT_EQUAL(daytona_manifest_count(m), 1);
    CU_ASSERT_EQUAL(daytona_manifest_put(m, "/b", "short"), -EINVAL);
    daytona_manifest_clear(m);
    CU_ASSERT_EQUAL(daytona_manifest_count(m), 0);
    CU_ASSERT_FALSE(daytona_manifest_has(m, "/a", d3));
    /* bounded */
    for (int i = 0; i < 9000; i++) {
        char p[32];
        int r;

        snprintf(p, sizeof(p), "/f%d", i);
        r = daytona_manifest_put(m, p, d1);
        if (i < 8192) {
            CU_ASSERT_EQUAL(r, 0);
        } else if (r != -E2BIG) {
            CU_FAIL("manifest grew past its cap");
            break;
        }
    }
    daytona_manifest_free(m);
    daytona_manifest_free(NULL);
}

CU_TestInfo daytona_manifest_tests[] = {
    {"test_daytona_manifest_digests_and_records", test_daytona_manifest_digests_and_records},
    CU_TEST_INFO_NULL,
};
