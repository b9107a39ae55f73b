/*
 * daytona_manifest — digests over path, mode and content; what is recorded counts as uploaded
 * until it changes; clearing; the cap. Uploads run in tests/integration.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "provider/daytona/daytona_manifest.h"
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

/* The record a sandbox keeps: what one keeper wrote, the next one reads back exactly. */
static void test_daytona_manifest_record_round_trip(void)
{
    struct daytona_manifest *m = NULL, *back = NULL;
    char d1[65], d2[65];
    struct buf text;

    CU_ASSERT_FATAL(daytona_manifest_new(&m) == 0 && daytona_manifest_new(&back) == 0);
    CU_ASSERT_EQUAL(daytona_manifest_digest("/h/a", 0644, "x", 1, d1), 0);
    CU_ASSERT_EQUAL(daytona_manifest_digest("/h/dir/", 0700, "", 0, d2), 0);
    CU_ASSERT_EQUAL(daytona_manifest_put(m, "/h/a", d1), 0);
    CU_ASSERT_EQUAL(daytona_manifest_put(m, "/h/dir/", d2), 0);
    CU_ASSERT_EQUAL(daytona_manifest_set_record(m, "/h/.agent-runner/manifest.json"), 0);
    buf_init(&text, 1u << 20);
    CU_ASSERT_EQUAL(daytona_manifest_serialize(m, &text), 0);
    CU_ASSERT_EQUAL(daytona_manifest_parse(back, text.data, text.len), 0);
    CU_ASSERT_EQUAL(daytona_manifest_count(back), 2);
    CU_ASSERT_TRUE(daytona_manifest_has(back, "/h/a", d1));
    CU_ASSERT_TRUE(daytona_manifest_has(back, "/h/dir/", d2));
    /* anything else is refused and leaves the manifest empty (everything uploads once) */
    CU_ASSERT_EQUAL(daytona_manifest_parse(back, "{\"v\":2,\"files\":{}}", 19), -EBADMSG);
    CU_ASSERT_EQUAL(daytona_manifest_count(back), 0);
    CU_ASSERT_EQUAL(daytona_manifest_parse(back, "{\"v\":1,\"files\":{\"rel\":\"00\"}}", 30),
                    -EBADMSG);
    CU_ASSERT_EQUAL(daytona_manifest_parse(back, "garbage", 7), -EBADMSG);
    CU_ASSERT_EQUAL(daytona_manifest_count(back), 0);
    buf_release(&text);
    daytona_manifest_free(m);
    daytona_manifest_free(back);
}

CU_TestInfo daytona_manifest_tests[] = {
    {"test_daytona_manifest_digests_and_records", test_daytona_manifest_digests_and_records},
    {"test_daytona_manifest_record_round_trip", test_daytona_manifest_record_round_trip},
    CU_TEST_INFO_NULL,
};
