/* mountinfo — a /proc/self/mountinfo line split into root, point, type, source, options. */
#include <string.h>

#include "base/mountinfo.h"
#include "suites.h"

static void test_mountinfo_split_reads_the_fields(void)
{
    char line[] = "36 35 98:0 /mnt1 /mnt\\040two rw,noatime master:1 - ext3 /dev/root "
                  "rw,errors=continue";
    char short_tail[] = "36 35 98:0 / /w rw - tmpfs";
    struct mountinfo_line m;

    CU_ASSERT_TRUE_FATAL(mountinfo_split(line, &m));
    CU_ASSERT_STRING_EQUAL(m.root, "/mnt1");
    CU_ASSERT_STRING_EQUAL(m.point, "/mnt\\040two");
    CU_ASSERT_STRING_EQUAL(m.fstype, "ext3");
    CU_ASSERT_STRING_EQUAL(m.source, "/dev/root");
    CU_ASSERT_STRING_EQUAL(m.options, "rw,errors=continue");
    mountinfo_unescape(m.point);
    CU_ASSERT_STRING_EQUAL(m.point, "/mnt two");
    /* the source and the options may be missing; the type may not */
    CU_ASSERT_TRUE_FATAL(mountinfo_split(short_tail, &m));
    CU_ASSERT_STRING_EQUAL(m.fstype, "tmpfs");
    CU_ASSERT_PTR_NULL(m.source);
    CU_ASSERT_PTR_NULL(m.options);
}

static void test_mountinfo_split_refuses_short_lines(void)
{
    char no_sep[] = "36 35 98:0 / /w rw tmpfs x rw";
    char four[] = "36 35 98:0 / - tmpfs x rw";
    char no_type[] = "36 35 98:0 / /w rw - ";
    struct mountinfo_line m;

    CU_ASSERT_FALSE(mountinfo_split(no_sep, &m));
    CU_ASSERT_FALSE(mountinfo_split(four, &m));
    CU_ASSERT_FALSE(mountinfo_split(no_type, &m));
}

static void test_mountinfo_unescape_undoes_octal_escapes(void)
{
    char s[] = "/a\\040b\\134c\\011d\\08x\\4";

    mountinfo_unescape(s);
    CU_ASSERT_STRING_EQUAL(s, "/a b\\c\td\\08x\\4");
}

CU_TestInfo mountinfo_tests[] = {
    {"test_mountinfo_split_reads_the_fields", test_mountinfo_split_reads_the_fields},
    {"test_mountinfo_split_refuses_short_lines", test_mountinfo_split_refuses_short_lines},
    {"test_mountinfo_unescape_undoes_octal_escapes", test_mountinfo_unescape_undoes_octal_escapes},
    CU_TEST_INFO_NULL,
};
