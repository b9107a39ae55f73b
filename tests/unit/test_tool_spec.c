/*
 * tool_spec — the golden pi request's tools classified, the public spec file holding nothing
 * private, MCP tools namespaced, filtered by the include list and refused on a clash, the
 * permission gate of each kind, the dotted-path rule. (The request's tool refusals are
 * test_request_tools.c's; the tool set's fingerprint is test_identity.c's.)
 */
#include <errno.h>
#include <string.h>

#include "base/jsonx.h"
#include "request/request.h"
#include "suites.h"
#include "tools/tool_spec.h"

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

/* The tool set of such a request; *ret_r is request_parse's answer, then tool_set_new's. */
static struct tool_set *build(const char *custom, const char *callback, const char *servers,
                              char *err, size_t errlen, int *ret_r)
{
    struct run_request req;
    struct tool_set *s = NULL;

    *ret_r = parse_tools(custom, callback, servers, &req, err, errlen);
    if (*ret_r < 0)
        return NULL;
    *ret_r = tool_set_new(&req.tools, &s);
    run_request_release(&req);
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
    int r;

    CU_ASSERT_PTR_NOT_NULL_FATAL(req);
    s = build(jsonx_text(jsonx_get(req, "customTools"), NULL),
              jsonx_text(jsonx_get(req, "toolCallback"), NULL), NULL, err, sizeof(err), &r);
    CU_ASSERT_EQUAL_FATAL(r, 0);
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
    CU_ASSERT_EQUAL(r, AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "\"agenta-tools\" is reserved"));
    s = build(NULL, NULL, "[{\"name\":\"a\",\"connection\":{\"type\":\"stdio\",\"command\":\"sh\"}}]",
              err, sizeof(err), &r);
    CU_ASSERT_EQUAL(r, AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "only \"http\" is supported"));
    tool_set_free(s);
}

static void test_tool_spec_paths(void)
{
    CU_ASSERT(run_tools_path_ok("a"));
    CU_ASSERT(run_tools_path_ok("data.inputs"));
    CU_ASSERT(!run_tools_path_ok(""));
    CU_ASSERT(!run_tools_path_ok("a."));
    CU_ASSERT(!run_tools_path_ok(".a"));
    CU_ASSERT(!run_tools_path_ok("a..b"));
    CU_ASSERT(!run_tools_path_ok("a.constructor"));
    CU_ASSERT(!run_tools_path_ok("prototype"));
    CU_ASSERT(run_tools_path_ok("prototypes"));
    CU_ASSERT(run_tools_ctx_token_ok("$ctx.workflow.variant.id"));
    CU_ASSERT(!run_tools_ctx_token_ok("$ctx."));
    CU_ASSERT(!run_tools_ctx_token_ok("ctx.a"));
}

CU_TestInfo tool_spec_tests[] = {
    {"test_tool_spec_golden_pi_tools", test_tool_spec_golden_pi_tools},
    {"test_tool_spec_client_and_gate", test_tool_spec_client_and_gate},
    {"test_tool_spec_mcp_tools", test_tool_spec_mcp_tools},
    {"test_tool_spec_mcp_clash_with_custom", test_tool_spec_mcp_clash_with_custom},
    {"test_tool_spec_paths", test_tool_spec_paths},
    CU_TEST_INFO_NULL,
};
