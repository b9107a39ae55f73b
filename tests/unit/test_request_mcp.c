/*
 * request_mcp — mcpServers parsed into struct mcp_server: the policy typed, headers and
 * credentials in order with the credentials marked secret, and every refusal (the reserved
 * name, a transport header, a duplicate, a bad binding, CR/LF in a value, a long url, a bad
 * include list) naming the server and never a header value.
 */
#include <string.h>

#include "base/buf.h"
#include "base/jsonx.h"
#include "request/request.h"
#include "suites.h"

/* {"mcpServers":[server]} parsed into req. */
static int parse_servers(const char *server, struct run_request *req, char *err, size_t errlen)
{
    struct request_limits lim;
    struct buf body;
    int r;

    request_limits_default(&lim);
    buf_init(&body, 1u << 20);
    buf_printf(&body, "{\"mcpServers\":[%s]}", server);
    err[0] = '\0';
    r = request_parse(buf_str(&body), body.len, &lim, req, err, errlen);
    buf_release(&body);
    return r;
}

static void test_request_mcp_policy(void)
{
    struct run_request req;
    char err[512];

    CU_ASSERT_EQUAL_FATAL(
        parse_servers(
            "{\"name\":\"gh\",\"connection\":{\"type\":\"http\",\"url\":\"https://m/mcp\"},"
            "\"policy\":{\"permission\":\"ask\",\"tools\":{\"mode\":\"include\","
            "\"names\":[\"a\",\"b\"]}}},"
            "{\"name\":\"docs\",\"connection\":{\"type\":\"http\","
            "\"url\":\"https://d/mcp\"},\"policy\":{\"tools\":{\"mode\":\"include\"}}},"
            "{\"name\":\"all\",\"connection\":{\"type\":\"http\",\"url\":\"https://e/\"}}",
            &req, err, sizeof(err)),
        0);
    CU_ASSERT_EQUAL_FATAL(req.tools.nservers, 3);
    CU_ASSERT_STRING_EQUAL(req.tools.servers[0].name, "gh");
    CU_ASSERT_STRING_EQUAL(req.tools.servers[0].url, "https://m/mcp");
    CU_ASSERT_EQUAL(req.tools.servers[0].permission, PERMISSION_ASK);
    CU_ASSERT_FALSE(req.tools.servers[0].include_all);
    CU_ASSERT_EQUAL(json_object_array_length(req.tools.servers[0].include), 2);
    CU_ASSERT_FALSE(req.tools.servers[1].include_all);
    CU_ASSERT_PTR_NULL(req.tools.servers[1].include); /* include nothing */
    CU_ASSERT_TRUE(req.tools.servers[2].include_all);
    CU_ASSERT_EQUAL(req.tools.servers[2].permission, PERMISSION_UNSET);
    CU_ASSERT_EQUAL(req.tools.servers[2].nheaders, 0);
    run_request_release(&req);
}

static void test_request_mcp_headers(void)
{
    static const struct {
        const char *server;
        const char *needle; /* NULL = accepted */
    } cases[] = {
        {"{\"name\":\"gh\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/mcp\",\"headers\":"
         "{\"X-Org\":\"acme\"},\"credentials\":[{\"binding\":{\"kind\":\"header\",\"name\":"
         "\"Authorization\"},\"value\":\"Bearer SECRET-1\",\"usage\":\"opaque_http\"}]}}",
         NULL},
        {"{\"name\":\"gh\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/"
         "mcp\",\"headers\":{\"Accept\":\"x\"}}}",
         "header \"Accept\" is set by the runner itself"},
        {"{\"name\":\"gh\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/"
         "mcp\",\"headers\":{\"X-A\":\"1\"},"
         "\"credentials\":[{\"binding\":{\"kind\":\"header\",\"name\":\"x-a\"},\"value\":"
         "\"SECRET-2\"}]}}",
         "header \"x-a\" is given twice"},
        {"{\"name\":\"gh\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/"
         "mcp\",\"credentials\":[{\"binding\":"
         "{\"kind\":\"environment\",\"name\":\"TOKEN\"},\"value\":\"SECRET-3\"}]}}",
         "credentials[0].binding must be {kind:\"header\", name}"},
        {"{\"name\":\"gh\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/"
         "mcp\",\"credentials\":[{\"binding\":"
         "{\"kind\":\"header\",\"name\":\"X-T\"},\"value\":\"SECRET-4\\r\\nHost: evil\"}]}}",
         "header \"X-T\": invalid value"},
        {"{\"name\":\"gh\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/"
         "mcp\",\"credentials\":[{\"binding\":"
         "{\"kind\":\"header\",\"name\":\"X-T\"},\"value\":\"SECRET-5\",\"usage\":\"local_use\"}]}"
         "}",
         "usage must be \"opaque_http\""},
        {"{\"name\":\"gh\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/"
         "mcp\",\"headers\":{\"Bad Name\":\"v\"}}}",
         "is not a header name"},
        {"{\"name\":\"gh\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/"
         "mcp\",\"headers\":{\"Mcp-Session-Id\":"
         "\"v\"}}}",
         "set by the runner itself"},
    };
    char err[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct run_request req;
        int r = parse_servers(cases[i].server, &req, err, sizeof(err));

        if (!cases[i].needle) {
            const struct mcp_server *sv = &req.tools.servers[0];

            CU_ASSERT_EQUAL_FATAL(r, 0);
            CU_ASSERT_EQUAL_FATAL(sv->nheaders, 2);
            CU_ASSERT_STRING_EQUAL(sv->headers[0].name, "X-Org");
            CU_ASSERT_STRING_EQUAL(sv->headers[0].value, "acme");
            CU_ASSERT_FALSE(sv->headers[0].secret);
            CU_ASSERT_STRING_EQUAL(sv->headers[1].name, "Authorization");
            CU_ASSERT_STRING_EQUAL(sv->headers[1].value, "Bearer SECRET-1");
            CU_ASSERT_TRUE(sv->headers[1].secret);
            run_request_release(&req);
        } else {
            if (r != AR_E_INVALID_REQUEST || !strstr(err, cases[i].needle))
                fprintf(stderr, "case %zu: r=%d err=%s\n", i, r, err);
            CU_ASSERT_EQUAL(r, AR_E_INVALID_REQUEST);
            CU_ASSERT_PTR_NOT_NULL(strstr(err, cases[i].needle));
            CU_ASSERT_PTR_NOT_NULL(strstr(err, "MCP server \"gh\""));
            CU_ASSERT_PTR_NULL(strstr(err, "SECRET"));
        }
    }
}

static void test_request_mcp_refusals(void)
{
    static const struct {
        const char *server;
        const char *needle;
    } cases[] = {
        {"{\"name\":\"agenta-tools\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/\"}}",
         "mcpServers[0].name: \"agenta-tools\" is reserved"},
        {"{\"name\":\"s\",\"connection\":{\"type\":\"stdio\",\"command\":\"sh\"}}",
         "mcpServers[0].connection.type: only \"http\" is supported"},
        {"{\"name\":\"s\",\"connection\":{\"type\":\"http\",\"url\":\"https://h/"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789012345678901234567890123456789"
         "\"}}",
         "mcpServers[0] \"s\".url: longer than 2048 bytes"},
        {"{\"name\":\"s\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/\"},"
         "\"policy\":{\"tools\":{\"mode\":\"include\",\"names\":\"x\"}}}",
         "mcpServers[0] \"s\".names: expected an array, got a string"},
        {"{\"name\":\"s\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/\","
         "\"headers\":[\"SECRET\"]}}",
         "MCP server \"s\": connection.headers must be an object"},
        {"{\"name\":\"s\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/\","
         "\"credentials\":{}}}",
         "MCP server \"s\": connection.credentials must be an array"},
        {"{\"name\":\"s\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/\","
         "\"credentials\":[{\"binding\":{\"kind\":\"header\",\"name\":\"X-T\"},\"value\":\"\"}]}}",
         "MCP server \"s\": header \"X-T\": invalid value"},
    };
    char err[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct run_request req;
        int r = parse_servers(cases[i].server, &req, err, sizeof(err));

        if (r != AR_E_INVALID_REQUEST || !strstr(err, cases[i].needle))
            fprintf(stderr, "case %zu: r=%d err=%s\n", i, r, err);
        CU_ASSERT_EQUAL(r, AR_E_INVALID_REQUEST);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, cases[i].needle));
        CU_ASSERT_PTR_NULL(strstr(err, "SECRET"));
        if (r == 0)
            run_request_release(&req);
    }
}

CU_TestInfo request_mcp_tests[] = {
    {"test_request_mcp_policy", test_request_mcp_policy},
    {"test_request_mcp_headers", test_request_mcp_headers},
    {"test_request_mcp_refusals", test_request_mcp_refusals},
    CU_TEST_INFO_NULL,
};
