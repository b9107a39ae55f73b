/* agenta_disposition: attachment file names from Content-Disposition values. */
#include <errno.h>
#include <string.h>

#include "agenta/agenta_disposition.h"
#include "suites.h"
#include "suites_platform.h"

static void test_agenta_disposition_file_names(void)
{
    char out[256];

    CU_ASSERT_EQUAL(
        agenta_disposition_filename("attachment; filename=\"photo.png\"", out, sizeof(out)), 0);
    CU_ASSERT_STRING_EQUAL(out, "photo.png");
    /* the extended form wins and is percent-decoded */
    CU_ASSERT_EQUAL(
        agenta_disposition_filename(
            "attachment; filename=\"fallback.txt\"; filename*=UTF-8''na%C3%AFve%20r.txt", out,
            sizeof(out)),
        0);
    CU_ASSERT_STRING_EQUAL(out, "na\xc3\xafve r.txt");
    CU_ASSERT_EQUAL(agenta_disposition_filename("attachment; filename*=iso-8859-1''caf%E9.txt", out,
                                                sizeof(out)),
                    0);
    CU_ASSERT_STRING_EQUAL(out, "caf\xc3\xa9.txt");
    /* a broken extended value falls back to the plain one */
    CU_ASSERT_EQUAL(agenta_disposition_filename("attachment; filename*=UTF-8''%ZZ; filename=a.txt",
                                                out, sizeof(out)),
                    0);
    CU_ASSERT_STRING_EQUAL(out, "a.txt");
    /* paths are cut to the base name, escapes unquoted, control characters dropped */
    CU_ASSERT_EQUAL(agenta_disposition_filename("inline; filename=\"..\\\\..\\\\etc/pass\\\"wd\"",
                                                out, sizeof(out)),
                    0);
    CU_ASSERT_STRING_EQUAL(out, "pass\"wd");
    CU_ASSERT_EQUAL(
        agenta_disposition_filename("attachment; filename=../../x\x01y", out, sizeof(out)), 0);
    CU_ASSERT_STRING_EQUAL(out, "xy");
    CU_ASSERT_EQUAL(agenta_disposition_filename("attachment; filename=\"..\"", out, sizeof(out)),
                    -ENOENT);
    CU_ASSERT_EQUAL(agenta_disposition_filename("attachment", out, sizeof(out)), -ENOENT);
    CU_ASSERT_EQUAL(agenta_disposition_filename(NULL, out, sizeof(out)), -ENOENT);
    CU_ASSERT_EQUAL(agenta_sanitize_filename("a/b/", out, sizeof(out)), 0);
    CU_ASSERT_STRING_EQUAL(out, "b");
    CU_ASSERT_EQUAL(agenta_sanitize_filename("/", out, sizeof(out)), -EINVAL);
}

CU_TestInfo agenta_disposition_tests[] = {
    {"file_names", test_agenta_disposition_file_names},
    CU_TEST_INFO_NULL,
};
