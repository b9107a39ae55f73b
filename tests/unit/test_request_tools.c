/*
 * request_tools — customTools and toolCallback parsed into struct run_tools: the golden pi
 * request's tools typed, every refusal (code tools, reserved and duplicate names, a callback
 * tool without an endpoint, bad bindings, paths and timeouts) naming its field and never the
 * authorization, and the order the two passes refuse a request with several faults in.
 */
#include <string.h>

#include "base/buf.h"
#include "base/jsonx.h"
#include "request/request.h"
#include "suites.h"

/* The request {customTools, toolCallback, mcpServers} (each JSON text or NULL) parsed into req. */
static int parse_tools(const char *custom, const char *callback, const char *servers,
                       struct run_request *req, char *err, size_t errlen)
{
    struct request_limits lim;
    struct buf body;
    int r;

    request_limits_default(&lim);
    buf_init(&body, 1u << 20);
    buf_printf(&body, "{\"customTools\":%s,\"toolCallback\":%s,\"mcpServers\":%s}",
               custom ? custom : "null", callback ? callback : "null", servers ? servers : "null");
    err[0] = '\0';
    r = request_parse(buf_str(&body), body.len, &lim, req, err, errlen);
    buf_release(&body);
    return r;
}

static void test_request_tools_golden_pi(void)
{
    json_object *golden = test_shared_json("run_request.pi_core.json");
    const struct custom_tool *t;
    struct request_limits lim;
    struct run_request req;
    const char *text;
    char err[512] = "";
    size_t len;

    CU_ASSERT_PTR_NOT_NULL_FATAL(golden);
    request_limits_default(&lim);
    text = jsonx_text(golden, &len);
    CU_ASSERT_EQUAL_FATAL(request_parse(text, len, &lim, &req, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.tools.callback_endpoint), "https://api.example/tools/call");
    CU_ASSERT_PTR_NOT_NULL(req.tools.callback_authorization);
    CU_ASSERT_EQUAL_FATAL(req.tools.ncustom, 2);
    CU_ASSERT_EQUAL(req.tools.nservers, 0);
    t = &req.tools.custom[0];
    CU_ASSERT_STRING_EQUAL(TEST_STR(t->name), "get_user");
    CU_ASSERT_EQUAL(t->exec, TOOL_EXEC_CALLBACK);
    CU_ASSERT_STRING_EQUAL(TEST_STR(t->call_ref),
                           "tools__composio__github__GET_THE_AUTHENTICATED_USER__github-tvn");
    CU_ASSERT_PTR_NULL(t->call);
    CU_ASSERT_EQUAL(t->timeout_ms, 120000);
    CU_ASSERT_EQUAL(t->read_only, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(t->context_bindings, "target.workflow_variant_id")),
                           "$ctx.workflow.variant.id");
    t = &req.tools.custom[1];
    CU_ASSERT_STRING_EQUAL(TEST_STR(t->name), "get_weather");
    CU_ASSERT_EQUAL(t->exec, TOOL_EXEC_DIRECT);
    CU_ASSERT_PTR_NULL(t->call_ref);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(t->call, "args_into")), "data.inputs");
    CU_ASSERT_EQUAL(t->read_only, -1);
    CU_ASSERT_EQUAL(t->permission, PERMISSION_UNSET);
    run_request_release(&req);
    json_object_put(golden);
}

static void test_request_tools_client_and_permission(void)
{
    struct run_request req;
    char err[512];

    CU_ASSERT_EQUAL_FATAL(
        parse_tools("[{\"name\":\"pick\",\"kind\":\"client\",\"callRef\":\"\","
                    "\"call\":null,\"render\":{\"kind\":\"component\"}},"
                    "{\"name\":\"drop\",\"callRef\":\"d\",\"permission\":\"deny\","
                    "\"readOnly\":false}]",
                    "{\"endpoint\":\"https://a/tools/call\"}", NULL, &req, err, sizeof(err)),
        0);
    CU_ASSERT_EQUAL_FATAL(req.tools.ncustom, 2);
    CU_ASSERT_EQUAL(req.tools.custom[0].exec, TOOL_EXEC_CLIENT);
    CU_ASSERT_PTR_NULL(req.tools.custom[0].call_ref); /* a client tool calls nothing */
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(req.tools.custom[0].render, "kind")), "component");
    CU_ASSERT_EQUAL(req.tools.custom[1].permission, PERMISSION_DENY);
    CU_ASSERT_EQUAL(req.tools.custom[1].read_only, 0);
    CU_ASSERT_PTR_NULL(req.tools.callback_authorization);
    run_request_release(&req);
}

static void test_request_tools_refusals(void)
{
    static const struct {
        const char *custom;
        const char *callback;
        const char *needle;
    } cases[] = {
        {"[{\"name\":\"run\",\"kind\":\"code\",\"code\":\"x\"}]", NULL,
         "customTools[0].kind: \"code\" tools are not supported"},
        {"[{\"name\":\"agenta-tools\",\"callRef\":\"x\"}]",
         "{\"endpoint\":\"https://a/tools/call\"}",
         "customTools[0].name: \"agenta-tools\" is reserved"},
        {"[{\"name\":\"a\",\"callRef\":\"x\"},{\"name\":\"a\",\"callRef\":\"y\"}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "customTools[1].name: duplicate tool \"a\""},
        {"[{\"name\":\"a\",\"callRef\":\"x\"}]", NULL,
         "customTools[0] \"a\": a callback tool needs toolCallback.endpoint"},
        {"[{\"name\":\"a\"}]", "{\"endpoint\":\"https://a/tools/call\"}",
         "a callback tool needs callRef or call"},
        {"[{\"name\":\"a\",\"callRef\":\"x\",\"call\":{\"method\":\"GET\",\"path\":\"/x\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "callRef and call are mutually exclusive"},
        {"[{\"name\":\"a b\",\"callRef\":\"x\"}]", NULL, "customTools[0].name: must be"},
        {"[{\"name\":\"a\",\"callRef\":\"x\",\"contextBindings\":{\"v\":\"workflow.id\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}",
         "contextBindings.v: expected a \"$ctx.<path>\""},
        {"[{\"name\":\"a\",\"callRef\":\"x\",\"contextBindings\":{\"a..b\":\"$ctx.x\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "is not a dotted path"},
        {"[{\"name\":\"a\",\"callRef\":\"x\",\"contextBindings\":{\"__proto__.x\":\"$ctx.x\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "is not a dotted path"},
        {"[{\"name\":\"a\",\"callRef\":\"x\",\"timeoutMs\":-1}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "timeoutMs: must be between"},
        {"[{\"name\":\"a\",\"callRef\":\"x\",\"timeoutMs\":1.5}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "timeoutMs: expected an integer"},
        {"[{\"name\":\"a\",\"call\":{\"method\":\"PATCH\",\"path\":\"/x\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}",
         "customTools[0].call.method: unsupported value \"PATCH\" (expected GET, POST, PUT, "
         "DELETE)"},
        {"[{\"name\":\"a\",\"call\":{\"method\":\"GET\",\"path\":\"//evil.example/x\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "call.path: must be an absolute path"},
        {"[{\"name\":\"a\",\"call\":{\"method\":\"GET\",\"path\":\"https://evil/x\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "call.path: must be an absolute path"},
        {"[{\"name\":\"a\",\"call\":{\"method\":\"POST\",\"path\":\"/x\",\"body\":[1]}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "call.body: expected an object"},
        {"[{\"name\":\"a\",\"call\":{\"method\":\"POST\",\"path\":\"/x\",\"args_into\":\".x\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "call.args_into"},
        {"[{\"name\":\"a\",\"kind\":\"client\",\"permission\":\"maybe\"}]", NULL,
         "customTools[0].permission: unsupported value \"maybe\" (expected allow, ask, deny)"},
        {"[{\"name\":\"a\",\"kind\":\"client\",\"ephemeralArgs\":[1]}]", NULL,
         "ephemeralArgs[0]: expected an argument name"},
        {"[{\"name\":\"a\",\"kind\":\"client\",\"inputSchema\":\"x\"}]", NULL,
         "inputSchema: expected an object"},
        {"[{\"name\":\"a\",\"kind\":\"shell\"}]", NULL,
         "customTools[0].kind: unsupported value \"shell\" (expected callback, code, client)"},
        {"[{\"name\":\"a\",\"callRef\":\"x\"}]", "{\"authorization\":\"Access tok-SECRET\"}",
         "toolCallback.endpoint: required"},
    };
    char err[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct run_request req;
        int r = parse_tools(cases[i].custom, cases[i].callback, NULL, &req, err, sizeof(err));

        if (r != AR_E_INVALID_REQUEST || !strstr(err, cases[i].needle))
            fprintf(stderr, "case %zu: r=%d err=%s\n", i, r, err);
        CU_ASSERT_EQUAL(r, AR_E_INVALID_REQUEST);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, cases[i].needle));
        CU_ASSERT_PTR_NULL(strstr(err, "SECRET"));
        if (r == 0)
            run_request_release(&req);
    }
}

/* Pass 1 over every section first, then pass 2: a request's first fault by that order. */
static void test_request_tools_order(void)
{
    static const struct {
        const char *custom;
        const char *servers;
        const char *needle;
    } cases[] = {
        /* a duplicate (pass 1) in the third entry beats the first's missing callRef (pass 2) */
        {"[{\"name\":\"t\"},{\"name\":\"u\"},{\"name\":\"t\"}]", NULL,
         "customTools[2].name: duplicate tool \"t\""},
        /* the tools before the servers */
        {"[{\"name\":\"a\"}]",
         "[{\"name\":\"s\",\"connection\":{\"type\":\"http\","
         "\"url\":\"https://m/\",\"headers\":[1]}}]",
         "customTools[0] \"a\": a callback tool needs callRef or call"},
        /* a server's include list before the tools' endpoint */
        {"[{\"name\":\"a\",\"callRef\":\"r\"}]",
         "[{\"name\":\"s\",\"connection\":{\"type\":\"http\",\"url\":\"https://m/\"},"
         "\"policy\":{\"tools\":{\"mode\":\"include\",\"names\":[1]}}}]",
         "mcpServers[0] \"s\".policy.tools.names[0]: expected a string"},
        /* the endpoint before the servers' headers */
        {"[{\"name\":\"a\",\"callRef\":\"r\"}]",
         "[{\"name\":\"s\",\"connection\":{\"type\":\"http\",\"url\":\"https://m/\","
         "\"headers\":[1]}}]",
         "customTools[0] \"a\": a callback tool needs toolCallback.endpoint"},
    };
    char err[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct run_request req;
        int r = parse_tools(cases[i].custom, NULL, cases[i].servers, &req, err, sizeof(err));

        if (!strstr(err, cases[i].needle))
            fprintf(stderr, "case %zu: r=%d err=%s\n", i, r, err);
        CU_ASSERT_EQUAL(r, AR_E_INVALID_REQUEST);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, cases[i].needle));
        if (r == 0)
            run_request_release(&req);
    }
}

CU_TestInfo request_tools_tests[] = {
    {"test_request_tools_golden_pi", test_request_tools_golden_pi},
    {"test_request_tools_client_and_permission", test_request_tools_client_and_permission},
    {"test_request_tools_refusals", test_request_tools_refusals},
    {"test_request_tools_order", test_request_tools_order},
    CU_TEST_INFO_NULL,
};
