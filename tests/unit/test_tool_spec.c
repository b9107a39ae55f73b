/*
 * tool_spec — the golden pi request's tools classified, the public spec file holding nothing
 * private, every refusal (code tools, reserved and duplicate names, a callback tool without an
 * endpoint, bad bindings and timeouts) naming its field, MCP tools namespaced, filtered by the
 * include list and refused on a clash, the permission gate of each kind, and a fingerprint
 * that ignores credentials but not the tool set.
 */
#include <errno.h>
#include <string.h>

#include "base/jsonx.h"
#include "suites.h"
#include "tools/tool_spec.h"

static struct tool_set *build(const char *custom, const char *callback, const char *servers,
                              char *err, size_t errlen, int *ret_r)
{
    json_object *c = custom ? test_json(custom) : NULL, *cb = callback ? test_json(callback) : NULL;
    json_object *sv = servers ? test_json(servers) : NULL;
    struct tool_set *s = NULL;

    err[0] = '\0';
    *ret_r = tool_set_new(c, cb, sv, &s, err, errlen);
    json_object_put(c);
    json_object_put(cb);
    json_object_put(sv);
    return s;
}

static void test_tool_spec_golden_pi_tools(void)
{
    json_object *req = test_shared_json("run_request.pi_core.json");
    const struct tool_spec *t;
    struct tool_set *s = NULL;
    struct buf pub;
    char err[256];
    json_object *arr = NULL;

    CU_ASSERT_PTR_NOT_NULL_FATAL(req);
    CU_ASSERT_EQUAL_FATAL(tool_set_new(jsonx_get(req, "customTools"), jsonx_get(req, "toolCallback"),
                                       NULL, &s, err, sizeof(err)),
                          0);
    CU_ASSERT_EQUAL(s->ntools, 2);
    CU_ASSERT_STRING_EQUAL(s->callback_endpoint, "https://api.example/tools/call");
    t = tool_set_find(s, "get_user");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->exec, TOOL_EXEC_CALLBACK);
    CU_ASSERT_STRING_EQUAL(t->call_ref,
                           "tools__composio__github__GET_THE_AUTHENTICATED_USER__github-tvn");
    CU_ASSERT_EQUAL(t->timeout_ms, 120000);
    CU_ASSERT_EQUAL(t->read_only, 1);
    CU_ASSERT_STRING_EQUAL(jsonx_str(t->context_bindings, "target.workflow_variant_id"),
                           "$ctx.workflow.variant.id");
    t = tool_set_find(s, "get_weather");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->exec, TOOL_EXEC_DIRECT);
    CU_ASSERT_STRING_EQUAL(jsonx_str(t->call, "args_into"), "data.inputs");
    CU_ASSERT_EQUAL(t->read_only, -1);
    CU_ASSERT_PTR_NULL(tool_set_find(s, "nope"));

    buf_init(&pub, TOOL_PUBLIC_MAX);
    CU_ASSERT_EQUAL(tool_set_public_json(s, &pub), 0);
    /* nothing private crosses into the sandbox */
    CU_ASSERT_PTR_NULL(strstr(buf_str(&pub), "tok-123"));
    CU_ASSERT_PTR_NULL(strstr(buf_str(&pub), "callRef"));
    CU_ASSERT_PTR_NULL(strstr(buf_str(&pub), "composio"));
    CU_ASSERT_PTR_NULL(strstr(buf_str(&pub), "api.example"));
    CU_ASSERT_PTR_NULL(strstr(buf_str(&pub), "rev_abc123"));
    CU_ASSERT_PTR_NULL(strstr(buf_str(&pub), "$ctx"));
    arr = test_json(buf_str(&pub));
    CU_ASSERT_PTR_NOT_NULL_FATAL(arr);
    CU_ASSERT_EQUAL(json_object_array_length(arr), 2);
    for (size_t i = 0; i < 2; i++) {
        json_object *o = json_object_array_get_idx(arr, i);

        CU_ASSERT_EQUAL(json_object_object_length(o), 3);
        CU_ASSERT_PTR_NOT_NULL(jsonx_str(o, "name"));
        CU_ASSERT_PTR_NOT_NULL(jsonx_str(o, "description"));
        CU_ASSERT(json_object_is_type(jsonx_get(o, "inputSchema"), json_type_object));
    }
    CU_ASSERT_STRING_EQUAL(jsonx_str(json_object_array_get_idx(arr, 1), "description"),
                           "Look up weather for a city");
    json_object_put(arr);
    buf_release(&pub);
    tool_set_free(s);
    json_object_put(req);
}

static void test_tool_spec_refusals(void)
{
    static const struct {
        const char *custom;
        const char *callback;
        const char *needle;
    } cases[] = {
        {"[{\"name\":\"run\",\"kind\":\"code\",\"code\":\"x\"}]", NULL,
         "customTools[0] \"run\": kind \"code\" is not supported"},
        {"[{\"name\":\"agenta-tools\",\"callRef\":\"x\"}]", "{\"endpoint\":\"https://a/tools/call\"}",
         "customTools[0].name: \"agenta-tools\" is reserved"},
        {"[{\"name\":\"a\",\"callRef\":\"x\"},{\"name\":\"a\",\"callRef\":\"y\"}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "customTools[1] \"a\": duplicate tool name"},
        {"[{\"name\":\"a\",\"callRef\":\"x\"}]", NULL,
         "customTools[0] \"a\": a callback tool needs toolCallback.endpoint"},
        {"[{\"name\":\"a\"}]", "{\"endpoint\":\"https://a/tools/call\"}",
         "a callback tool needs callRef or call"},
        {"[{\"name\":\"a\",\"callRef\":\"x\",\"call\":{\"method\":\"GET\",\"path\":\"/x\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "callRef and call are mutually exclusive"},
        {"[{\"name\":\"a b\",\"callRef\":\"x\"}]", NULL, "customTools[0].name: must be"},
        {"[{\"name\":\"a\",\"callRef\":\"x\",\"contextBindings\":{\"v\":\"workflow.id\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "contextBindings.v: expected a \"$ctx.<path>\""},
        {"[{\"name\":\"a\",\"callRef\":\"x\",\"contextBindings\":{\"a..b\":\"$ctx.x\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "is not a dotted path"},
        {"[{\"name\":\"a\",\"callRef\":\"x\",\"contextBindings\":{\"__proto__.x\":\"$ctx.x\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "is not a dotted path"},
        {"[{\"name\":\"a\",\"callRef\":\"x\",\"timeoutMs\":-1}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "timeoutMs: must be between"},
        {"[{\"name\":\"a\",\"callRef\":\"x\",\"timeoutMs\":1.5}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "timeoutMs: expected an integer"},
        {"[{\"name\":\"a\",\"call\":{\"method\":\"PATCH\",\"path\":\"/x\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "call.method: expected GET, POST, PUT or DELETE"},
        {"[{\"name\":\"a\",\"call\":{\"method\":\"GET\",\"path\":\"//evil.example/x\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "call.path: must be an absolute path"},
        {"[{\"name\":\"a\",\"call\":{\"method\":\"GET\",\"path\":\"https://evil/x\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "call.path: must be an absolute path"},
        {"[{\"name\":\"a\",\"call\":{\"method\":\"POST\",\"path\":\"/x\",\"body\":[1]}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "call.body: expected an object"},
        {"[{\"name\":\"a\",\"call\":{\"method\":\"POST\",\"path\":\"/x\",\"args_into\":\".x\"}}]",
         "{\"endpoint\":\"https://a/tools/call\"}", "call.args_into"},
        {"[{\"name\":\"a\",\"kind\":\"client\",\"permission\":\"maybe\"}]", NULL,
         "permission: expected allow, ask or deny"},
        {"[{\"name\":\"a\",\"kind\":\"client\",\"ephemeralArgs\":[1]}]", NULL,
         "ephemeralArgs[0]: expected an argument name"},
        {"[{\"name\":\"a\",\"kind\":\"client\",\"inputSchema\":\"x\"}]", NULL,
         "inputSchema: expected an object"},
        {"[{\"name\":\"a\",\"kind\":\"shell\"}]", NULL, "kind: expected callback or client"},
        {"[{\"name\":\"a\",\"callRef\":\"x\"}]", "{\"authorization\":\"Access tok-SECRET\"}",
         "toolCallback.endpoint: required"},
    };
    char err[512];
    int r;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tool_set *s = build(cases[i].custom, cases[i].callback, NULL, err, sizeof(err), &r);

        if (r != -EINVAL || !strstr(err, cases[i].needle))
            fprintf(stderr, "case %zu: r=%d err=%s\n", i, r, err);
        CU_ASSERT_EQUAL(r, -EINVAL);
        CU_ASSERT_PTR_NULL(s);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, cases[i].needle));
        CU_ASSERT_PTR_NULL(strstr(err, "SECRET"));
        tool_set_free(s);
    }
}

static void test_tool_spec_client_and_gate(void)
{
    char err[256], text[128];
    struct permission_gate g;
    const struct tool_spec *t;
    int r;
    struct tool_set *s = build("[{\"name\":\"pick_file\",\"kind\":\"client\",\"render\":{\"kind\":"
                               "\"component\",\"component\":\"FilePicker\"}},"
                               "{\"name\":\"drop\",\"callRef\":\"d\",\"permission\":\"deny\"},"
                               "{\"name\":\"look\",\"callRef\":\"l\",\"readOnly\":true}]",
                               "{\"endpoint\":\"https://a/tools/call\",\"authorization\":\"x\"}",
                               NULL, err, sizeof(err), &r);
    json_object *plan = test_json("{\"default\":\"allow_reads\"}");

    CU_ASSERT_EQUAL_FATAL(r, 0);
    t = tool_set_find(s, "pick_file");
    CU_ASSERT_EQUAL(t->exec, TOOL_EXEC_CLIENT);
    CU_ASSERT_STRING_EQUAL(jsonx_str(t->render, "component"), "FilePicker");
    tool_spec_denial(t, text, sizeof(text));
    CU_ASSERT_STRING_EQUAL(text, "Client tool 'pick_file' was denied.");

    t = tool_set_find(s, "drop");
    tool_spec_gate(t, NULL, &g);
    CU_ASSERT_EQUAL(policy_permission_effective(plan, &g), PERMISSION_DENY);
    tool_spec_denial(t, text, sizeof(text));
    CU_ASSERT_STRING_EQUAL(text, "Tool 'drop' is denied by policy.");

    t = tool_set_find(s, "look");
    tool_spec_gate(t, NULL, &g);
    CU_ASSERT_STRING_EQUAL(g.tool_name, "look");
    CU_ASSERT_EQUAL(policy_permission_effective(plan, &g), PERMISSION_ALLOW);
    tool_spec_denial(t, text, sizeof(text));
    CU_ASSERT_STRING_EQUAL(text, "Tool 'look' is denied by the permission policy.");
    json_object_put(plan);
    tool_set_free(s);
}

#define SERVERS                                                                                \
    "[{\"name\":\"github\",\"connection\":{\"type\":\"http\",\"url\":\"https://mcp.gh/mcp\","    \
    "\"headers\":{\"X-Org\":\"acme\"},\"credentials\":[{\"binding\":{\"kind\":\"header\","     \
    "\"name\":\"Authorization\"},\"value\":\"Bearer gh-SECRET\",\"usage\":\"opaque_http\"}]},"   \
    "\"policy\":{\"tools\":{\"mode\":\"include\",\"names\":[\"create_issue\",\"search.code\","   \
    "\"absent\"]},\"permission\":\"ask\"}},"                                                    \
    "{\"name\":\"docs\",\"connection\":{\"type\":\"http\",\"url\":\"https://mcp.docs/mcp\"},"   \
    "\"policy\":{\"tools\":{\"mode\":\"all\"}}}]"

static void test_tool_spec_mcp_tools(void)
{
    json_object *gh = test_json("[{\"name\":\"create_issue\",\"description\":\"Open an issue\","
                                "\"inputSchema\":{\"type\":\"object\"}},"
                                "{\"name\":\"delete_repo\",\"inputSchema\":{\"type\":\"object\"}},"
                                "{\"name\":\"search.code\",\"annotations\":{\"readOnlyHint\":true}}]");
    json_object *docs = test_json("[{\"name\":\"a-very-long-tool-name-that-goes-on-and-on-and-on-"
                                  "and-on-forever\"},{\"name\":\"a-very-long-tool-name-that-goes-"
                                  "on-and-on-and-on-and-on-forever2\"}]");
    json_object *plan = test_json("{\"default\":\"allow\"}");
    const struct tool_spec *t;
    struct permission_gate g;
    struct tool_set *s;
    char err[512];
    struct buf pub;
    int r;

    s = build("[{\"name\":\"get_user\",\"callRef\":\"u\"}]",
              "{\"endpoint\":\"https://a/tools/call\"}", SERVERS, err, sizeof(err), &r);
    CU_ASSERT_EQUAL_FATAL(r, 0);
    CU_ASSERT_EQUAL(s->nservers, 2);
    CU_ASSERT_EQUAL(tool_set_add_mcp_tools(s, 0, gh, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(s->ntools, 3); /* delete_repo is not on the include list */
    CU_ASSERT_PTR_NULL(tool_set_find(s, "github__delete_repo"));
    t = tool_set_find(s, "github__create_issue");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->exec, TOOL_EXEC_MCP);
    CU_ASSERT_STRING_EQUAL(t->remote_name, "create_issue");
    CU_ASSERT_EQUAL(t->server, 0);
    tool_spec_gate(t, NULL, &g);
    CU_ASSERT_EQUAL(g.server, PERMISSION_ASK);
    CU_ASSERT_EQUAL(policy_permission_effective(plan, &g), PERMISSION_ASK);
    t = tool_set_find(s, "github__search_code");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_STRING_EQUAL(t->remote_name, "search.code");
    CU_ASSERT_EQUAL(t->read_only, 1);

    CU_ASSERT_EQUAL(tool_set_add_mcp_tools(s, 1, docs, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(s->ntools, 5);
    for (size_t i = 3; i < 5; i++) {
        CU_ASSERT_EQUAL(strlen(s->tools[i].name), TOOL_NAME_MAX);
        CU_ASSERT_EQUAL(strncmp(s->tools[i].name, "docs__a-very-long", 17), 0);
    }
    CU_ASSERT_STRING_NOT_EQUAL(s->tools[3].name, s->tools[4].name);
    /* a second listing of the same tools clashes and leaves the set unchanged */
    CU_ASSERT_EQUAL(tool_set_add_mcp_tools(s, 0, gh, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "MCP server \"github\" tool \"create_issue\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "clashes with MCP tool \"create_issue\""));
    CU_ASSERT_EQUAL(s->ntools, 5);
    CU_ASSERT_EQUAL(tool_set_add_mcp_tools(s, 7, gh, err, sizeof(err)), -EINVAL);

    buf_init(&pub, TOOL_PUBLIC_MAX);
    CU_ASSERT_EQUAL(tool_set_public_json(s, &pub), 0);
    CU_ASSERT_PTR_NULL(strstr(buf_str(&pub), "SECRET"));
    CU_ASSERT_PTR_NULL(strstr(buf_str(&pub), "mcp.gh"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&pub), "\"github__create_issue\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&pub), "\"additionalProperties\":true"));
    buf_release(&pub);
    json_object_put(plan);
    json_object_put(gh);
    json_object_put(docs);
    tool_set_free(s);
}

static void test_tool_spec_mcp_clash_with_custom(void)
{
    json_object *listed = test_json("[{\"name\":\"issue\"}]");
    struct tool_set *s;
    char err[512];
    int r;

    s = build("[{\"name\":\"gh__issue\",\"kind\":\"client\"}]", NULL,
              "[{\"name\":\"gh\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/\"}}]", err,
              sizeof(err), &r);
    CU_ASSERT_EQUAL_FATAL(r, 0);
    CU_ASSERT_EQUAL(tool_set_add_mcp_tools(s, 0, listed, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "clashes with custom tool \"gh__issue\""));
    tool_set_free(s);
    json_object_put(listed);

    s = build(NULL, NULL, "[{\"name\":\"agenta-tools\",\"connection\":{\"type\":\"http\","
                          "\"url\":\"https://x/\"}}]",
              err, sizeof(err), &r);
    CU_ASSERT_EQUAL(r, -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "\"agenta-tools\" is reserved"));
    s = build(NULL, NULL, "[{\"name\":\"a\",\"connection\":{\"type\":\"stdio\",\"command\":\"sh\"}}]",
              err, sizeof(err), &r);
    CU_ASSERT_EQUAL(r, -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "only \"http\" is supported"));
    tool_set_free(s);
}

static void fp(const char *custom, const char *callback, const char *servers, uint8_t out[32])
{
    struct tool_set *s;
    char err[256];
    int r;

    s = build(custom, callback, servers, err, sizeof(err), &r);
    CU_ASSERT_EQUAL_FATAL(r, 0);
    CU_ASSERT_EQUAL(tool_set_fingerprint(s, out), 0);
    tool_set_free(s);
}

static void test_tool_spec_fingerprint(void)
{
    uint8_t a[32], b[32];
    const char *tools = "[{\"name\":\"t\",\"callRef\":\"r\",\"timeoutMs\":5}]";
    const char *srv = "[{\"name\":\"s\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/\","
                      "\"headers\":{\"X-Key\":\"one\"}}}]";

    fp(tools, "{\"endpoint\":\"https://a/tools/call\",\"authorization\":\"Access one\"}", srv, a);
    /* a rotated authorization and a changed header value keep the fingerprint */
    fp(tools, "{\"endpoint\":\"https://a/tools/call\",\"authorization\":\"Access two\"}",
       "[{\"name\":\"s\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/\","
       "\"headers\":{\"x-key\":\"two\"}}}]",
       b);
    CU_ASSERT_EQUAL(memcmp(a, b, 32), 0);
    /* key order does not matter */
    fp("[{\"timeoutMs\":5,\"callRef\":\"r\",\"name\":\"t\"}]",
       "{\"authorization\":\"z\",\"endpoint\":\"https://a/tools/call\"}", srv, b);
    CU_ASSERT_EQUAL(memcmp(a, b, 32), 0);
    /* the tool set, the endpoint, a header name and the server policy do */
    fp("[{\"name\":\"t\",\"callRef\":\"r\",\"timeoutMs\":6}]",
       "{\"endpoint\":\"https://a/tools/call\"}", srv, b);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, 32), 0);
    fp(tools, "{\"endpoint\":\"https://b/tools/call\"}", srv, b);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, 32), 0);
    fp(tools, "{\"endpoint\":\"https://a/tools/call\"}",
       "[{\"name\":\"s\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/\","
       "\"headers\":{\"X-Other\":\"one\"}}}]",
       b);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, 32), 0);
    fp(tools, "{\"endpoint\":\"https://a/tools/call\"}",
       "[{\"name\":\"s\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/\","
       "\"headers\":{\"X-Key\":\"one\"}},\"policy\":{\"permission\":\"deny\"}}]",
       b);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, 32), 0);
}

static void test_tool_spec_paths(void)
{
    CU_ASSERT(tool_spec_path_ok("a"));
    CU_ASSERT(tool_spec_path_ok("data.inputs"));
    CU_ASSERT(!tool_spec_path_ok(""));
    CU_ASSERT(!tool_spec_path_ok("a."));
    CU_ASSERT(!tool_spec_path_ok(".a"));
    CU_ASSERT(!tool_spec_path_ok("a..b"));
    CU_ASSERT(!tool_spec_path_ok("a.constructor"));
    CU_ASSERT(!tool_spec_path_ok("prototype"));
    CU_ASSERT(tool_spec_path_ok("prototypes"));
    CU_ASSERT(tool_spec_ctx_token_ok("$ctx.workflow.variant.id"));
    CU_ASSERT(!tool_spec_ctx_token_ok("$ctx."));
    CU_ASSERT(!tool_spec_ctx_token_ok("ctx.a"));
    CU_ASSERT_STRING_EQUAL(tool_exec_name(TOOL_EXEC_DIRECT), "direct");
}

CU_TestInfo tool_spec_tests[] = {
    {"test_tool_spec_golden_pi_tools", test_tool_spec_golden_pi_tools},
    {"test_tool_spec_refusals", test_tool_spec_refusals},
    {"test_tool_spec_client_and_gate", test_tool_spec_client_and_gate},
    {"test_tool_spec_mcp_tools", test_tool_spec_mcp_tools},
    {"test_tool_spec_mcp_clash_with_custom", test_tool_spec_mcp_clash_with_custom},
    {"test_tool_spec_fingerprint", test_tool_spec_fingerprint},
    {"test_tool_spec_paths", test_tool_spec_paths},
    CU_TEST_INFO_NULL,
};
