/*
 * tool_direct — a direct call's URL: under the callback endpoint's mount, every unsafe path
 * refused (dot segments, encoded dots and separators, backslashes, blanks, fragments, another
 * origin), path parameters filled from the body or refused when missing or not scalar.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "suites.h"
#include "tools/tool_direct.h"

static void test_tool_direct_url_rules(void)
{
    static const struct {
        const char *endpoint;
        const char *path;
        const char *url; /* NULL = refused */
    } cases[] = {
        {"https://agenta.example/api/tools/call", "/api/x", "https://agenta.example/api/x"},
        {"https://agenta.example/api/tools/call", "/api", "https://agenta.example/api"},
        {"https://agenta.example/api/tools/call", "/admin", NULL},
        {"https://agenta.example/api/tools/call", "/apix/y", NULL},
        {"https://agenta.example/api/tools/call", "/api/../admin", NULL},
        {"https://agenta.example/api/tools/call", "/api/%2e%2e/admin", NULL},
        {"https://agenta.example/api/tools/call", "/api/%2E%2e/admin", NULL},
        {"https://agenta.example/api/tools/call", "/api/a%2fb", NULL},
        {"https://agenta.example/api/tools/call", "/api/./x", NULL},
        {"https://agenta.example/api/tools/call", "/api/x/.", NULL},
        {"https://agenta.example/api/tools/call", "/api/x\\y", NULL},
        {"https://agenta.example/api/tools/call", "/api/x y", NULL},
        {"https://agenta.example/api/tools/call", "/api/x#f", NULL},
        {"https://agenta.example/api/tools/call", "//evil.example/api", NULL},
        {"https://agenta.example/api/tools/call", "https://evil.example/api", NULL},
        {"https://agenta.example/api/tools/call?k=v", "/api/x?a=1",
         "https://agenta.example/api/x?a=1"},
        {"http://127.0.0.1:8000/tools/call", "/anything/at/all",
         "http://127.0.0.1:8000/anything/at/all"},
        {"https://agenta.example/api/tools/call", "/api/{id}", NULL}, /* the parameter is missing */
        {"https://agenta.example/api/tools/call", "/api/{obj}", NULL}, /* not a scalar */
        {"https://agenta.example/api/tools/call", "/api/{n}/{b}",
         "https://agenta.example/api/7/true"},
    };
    char err[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_object *call = json_object_new_object();
        json_object *body = test_json("{\"n\":7,\"b\":true,\"obj\":{}}");
        char *url = NULL;
        int r;

        json_object_object_add(call, "method", json_object_new_string("GET"));
        json_object_object_add(call, "path", json_object_new_string(cases[i].path));
        err[0] = '\0';
        r = tool_direct_url(cases[i].endpoint, call, body, &url, err, sizeof(err));
        if ((r == 0) != (cases[i].url != NULL))
            fprintf(stderr, "case %zu (%s): r=%d url=%s err=%s\n", i, cases[i].path, r,
                    url ? url : "-", err);
        if (cases[i].url) {
            CU_ASSERT_EQUAL(r, 0);
            CU_ASSERT_STRING_EQUAL(TEST_STR(url), cases[i].url);
        } else {
            CU_ASSERT_EQUAL(r, -EINVAL);
            CU_ASSERT(err[0] != '\0');
        }
        free(url);
        json_object_put(call);
        json_object_put(body);
    }
}

CU_TestInfo tool_direct_tests[] = {
    {"test_tool_direct_url_rules", test_tool_direct_url_rules},
    CU_TEST_INFO_NULL,
};
