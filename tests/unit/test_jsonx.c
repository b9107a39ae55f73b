/* jsonx — strict parsing: the cached-tokener parse and the one-document parse agree. */
#include <errno.h>
#include <string.h>

#include "base/jsonx.h"
#include "suites.h"

static void test_jsonx_parse_once_reads_like_parse(void)
{
    static const char *const docs[] = {
        "{\"a\":[1,2,{\"b\":null}]}",
        " 42 ",
        "null",
        "\"x\"",
        "{} x",
        "{\"a\":",
        "",
        "[1,]",
        "\"\xc3\x28\"",
    };
    char err1[128], err2[128];

    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        json_object *a = NULL, *b = NULL;
        int ra = jsonx_parse(docs[i], strlen(docs[i]), 16, &a, err1, sizeof(err1));
        int rb = jsonx_parse_once(docs[i], strlen(docs[i]), 16, &b, err2, sizeof(err2));

        CU_ASSERT_EQUAL(ra, rb);
        if (ra == 0 && rb == 0) {
            CU_ASSERT_STRING_EQUAL(jsonx_text(a, NULL), jsonx_text(b, NULL));
        } else {
            CU_ASSERT_STRING_EQUAL(err1, err2);
        }
        json_object_put(a);
        json_object_put(b);
    }
}

static void test_jsonx_parse_once_keeps_the_depth_cap(void)
{
    json_object *o = NULL;
    char err[128];

    CU_ASSERT_EQUAL(jsonx_parse_once("[[[1]]]", 7, 4, &o, err, sizeof(err)), 0);
    json_object_put(o);
    o = NULL;
    CU_ASSERT_EQUAL(jsonx_parse_once("[[[[1]]]]", 9, 4, &o, err, sizeof(err)), -EBADMSG);
    CU_ASSERT_PTR_NULL(o);
}

/* A string appended as JSON text parses back to itself, whatever it holds. */
static void test_jsonx_append_string_round_trips(void)
{
    const char *in[] = {"", "plain-id_1.2:3", "q\"uote\\back/slash", "line\nbreak\ttab\x01\x1f",
                        "\xc3\xa9t\xc3\xa9 \xe2\x9c\x93", "\x7f"};
    struct buf b;

    buf_init(&b, 4096);
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
        json_object *o = NULL;
        char err[64];

        buf_reset(&b);
        CU_ASSERT_EQUAL_FATAL(jsonx_append_string(&b, in[i]), 0);
        CU_ASSERT_PTR_NULL(memchr(b.data, '\n', b.len)); /* one line */
        CU_ASSERT_EQUAL_FATAL(jsonx_parse(b.data, b.len, JSONX_DEFAULT_DEPTH, &o, err, sizeof(err)),
                              0);
        CU_ASSERT_TRUE(json_object_is_type(o, json_type_string));
        CU_ASSERT_STRING_EQUAL(json_object_get_string(o), in[i]);
        json_object_put(o);
    }
    buf_reset(&b);
    CU_ASSERT_EQUAL(jsonx_append_string(&b, "a\"b"), 0);
    CU_ASSERT_EQUAL(b.len, 6);
    CU_ASSERT_EQUAL(memcmp(b.data, "\"a\\\"b\"", 6), 0);
    /* a buffer at its cap refuses, it does not truncate silently */
    buf_release(&b);
    buf_init(&b, 4);
    CU_ASSERT_TRUE(jsonx_append_string(&b, "abcdef") < 0);
    buf_release(&b);
}

CU_TestInfo jsonx_tests[] = {
    {"test_jsonx_append_string_round_trips", test_jsonx_append_string_round_trips},
    {"test_jsonx_parse_once_reads_like_parse", test_jsonx_parse_once_reads_like_parse},
    {"test_jsonx_parse_once_keeps_the_depth_cap", test_jsonx_parse_once_keeps_the_depth_cap},
    CU_TEST_INFO_NULL,
};
