/*
 * tool_args — the $ctx view (the live session id over runContext's, the request's own object
 * untouched) and what "$ctx.<path>" tokens resolve to (a null, a missing member, a bad token).
 */
#include <errno.h>

#include "base/jsonx.h"
#include "suites.h"
#include "tools/tool_args.h"

static void test_tool_args_ctx_view(void)
{
    json_object *rc = test_json("{\"session\":{\"id\":\"old\",\"x\":1},\"a\":{\"b\":null}}");
    json_object *view = tool_args_ctx_view(rc, "live"), *v = NULL;

    CU_ASSERT_EQUAL(tool_args_resolve(view, "$ctx.session.id", &v), 0);
    CU_ASSERT_STRING_EQUAL(json_object_get_string(v), "live");
    CU_ASSERT_EQUAL(tool_args_resolve(view, "$ctx.session.x", &v), 0);
    CU_ASSERT_EQUAL(tool_args_resolve(view, "$ctx.a.b", &v), 0);
    CU_ASSERT_PTR_NULL(v);
    CU_ASSERT_EQUAL(tool_args_resolve(view, "$ctx.a.b.c", &v), -ENOENT);
    CU_ASSERT_EQUAL(tool_args_resolve(view, "$ctx.nope", &v), -ENOENT);
    CU_ASSERT_EQUAL(tool_args_resolve(view, "ctx.a", &v), -ENOENT);
    /* the request's runContext itself is not changed */
    CU_ASSERT_STRING_EQUAL(jsonx_str(jsonx_get(rc, "session"), "id"), "old");
    json_object_put(view);
    view = tool_args_ctx_view(NULL, "s2");
    CU_ASSERT_EQUAL(tool_args_resolve(view, "$ctx.session.id", &v), 0);
    CU_ASSERT_STRING_EQUAL(json_object_get_string(v), "s2");
    json_object_put(view);
    json_object_put(rc);
}

CU_TestInfo tool_args_tests[] = {
    {"test_tool_args_ctx_view", test_tool_args_ctx_view},
    CU_TEST_INFO_NULL,
};
