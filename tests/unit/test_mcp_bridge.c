/*
 * mcp_bridge — the agenta-tools stdio MCP server's protocol core, driven line by line: the
 * tools file (accepted shapes and refusals), initialize (the client's version echoed), tools/
 * list, tools/call forwarded as tool/call with the harness's id and answered from the runner's
 * result, errors for unknown tools and bad messages, cancellation, the pending cap, and every
 * way the channel can be missing or go away (each pending call answered with a tool error).
 */
#include <errno.h>
#include <string.h>

#include "base/jsonx.h"
#include "proto/acp.h"
#include "suites.h"
#include "tools/mcp_bridge.h"

#define TOOLS                                                                                  \
    "[{\"name\":\"get_user\",\"description\":\"Get a user\",\"inputSchema\":{\"type\":"          \
    "\"object\",\"properties\":{}},\"callRef\":\"must-not-leak\"},{\"name\":\"github__search\"}]"

static json_object *test_json_n(const char *p, size_t n)
{
    json_object *o = NULL;
    char err[128];

    if (jsonx_parse(p, n, JSONX_DEFAULT_DEPTH, &o, err, sizeof(err)) < 0)
        return NULL;
    return o;
}

/* Take the queued lines of q as parsed messages (array), then empty q. */
static json_object *take(struct buf *q)
{
    json_object *arr = json_object_new_array();
    const char *p = buf_str(q);

    while (*p) {
        const char *nl = strchr(p, '\n');
        json_object *o;

        CU_ASSERT_PTR_NOT_NULL_FATAL(nl);
        o = test_json_n(p, (size_t)(nl - p));
        CU_ASSERT_PTR_NOT_NULL(o);
        json_object_array_add(arr, o);
        p = nl + 1;
    }
    buf_reset(q);
    return arr;
}

static void line(struct mcp_bridge *b, const char *s)
{
    CU_ASSERT_EQUAL(mcp_bridge_on_harness_line(b, s, strlen(s)), 0);
}

static void runner(struct mcp_bridge *b, const char *s)
{
    CU_ASSERT_EQUAL(mcp_bridge_on_runner_line(b, s, strlen(s)), 0);
}

static int reconnects;
static int reconnect_result;

static int fake_reconnect(void *ctx, char *err, size_t errlen)
{
    (void)ctx;
    reconnects++;
    if (reconnect_result < 0)
        snprintf(err, errlen, "connection refused");
    return reconnect_result;
}

static void test_mcp_bridge_tools_file(void)
{
    static const char *const bad[] = {
        "{}", "[{\"name\":\"a b\"}]", "[{\"name\":\"a\"},{\"name\":\"a\"}]",
        "[{\"name\":\"a\",\"inputSchema\":[]}]", "[{\"name\":\"a\",\"description\":3}]", "[1]",
        "not json",
    };
    struct mcp_bridge b;
    char err[256];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        CU_ASSERT_EQUAL(mcp_bridge_init(&b, bad[i], strlen(bad[i]), err, sizeof(err)), -EINVAL);
        CU_ASSERT(err[0] != '\0');
        mcp_bridge_release(&b);
    }
    CU_ASSERT_EQUAL(mcp_bridge_init(&b, "[]", 2, err, sizeof(err)), 0);
    mcp_bridge_release(&b);
}

static void test_mcp_bridge_session(void)
{
    struct mcp_bridge b;
    json_object *out, *msg;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(mcp_bridge_init(&b, TOOLS, strlen(TOOLS), err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(mcp_bridge_channel_up(&b), 0);
    out = take(&b.to_runner);
    CU_ASSERT_STRING_EQUAL(jsonx_str(json_object_array_get_idx(out, 0), "method"), "hello");
    CU_ASSERT_STRING_EQUAL(
        jsonx_str(jsonx_get(json_object_array_get_idx(out, 0), "params"), "client"),
        "agenta-tools-mcp");
    json_object_put(out);
    runner(&b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocol\":1}}");
    CU_ASSERT(b.channel_up);

    line(&b, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
             "\"protocolVersion\":\"2025-03-26\",\"capabilities\":{}}}");
    line(&b, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
    line(&b, "{\"jsonrpc\":\"2.0\",\"id\":\"L\",\"method\":\"tools/list\",\"params\":{}}");
    out = take(&b.to_harness);
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(out), 2);
    msg = json_object_array_get_idx(out, 0);
    CU_ASSERT_STRING_EQUAL(jsonx_str(jsonx_get(msg, "result"), "protocolVersion"), "2025-03-26");
    CU_ASSERT_STRING_EQUAL(jsonx_str(jsonx_path(msg, "result.serverInfo"), "name"),
                           "agenta-tools");
    msg = json_object_array_get_idx(out, 1);
    CU_ASSERT_STRING_EQUAL(jsonx_str(msg, "id"), "L");
    CU_ASSERT_EQUAL(json_object_array_length(jsonx_path(msg, "result.tools")), 2);
    CU_ASSERT_PTR_NULL(strstr(jsonx_text(msg, NULL), "must-not-leak"));
    CU_ASSERT_STRING_EQUAL(
        jsonx_str(json_object_array_get_idx(jsonx_path(msg, "result.tools"), 1), "description"),
        "github__search");
    json_object_put(out);

    /* a call goes to the runner with the harness's own id, and its answer comes back */
    line(&b, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":"
             "\"get_user\",\"arguments\":{\"a\":1},\"_meta\":{\"claudecode/toolUseId\":"
             "\"toolu_01X\"}}}");
    line(&b, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":{\"name\":"
             "\"github__search\"}}");
    CU_ASSERT_EQUAL(b.to_harness.len, 0);
    out = take(&b.to_runner);
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(out), 2);
    msg = json_object_array_get_idx(out, 0);
    CU_ASSERT_STRING_EQUAL(jsonx_str(msg, "method"), "tool/call");
    CU_ASSERT_STRING_EQUAL(jsonx_str(jsonx_get(msg, "params"), "toolCallId"), "toolu_01X");
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(msg, "params.arguments.a")), 1);
    msg = json_object_array_get_idx(out, 1);
    CU_ASSERT_EQUAL(strncmp(jsonx_str(jsonx_get(msg, "params"), "toolCallId"), "agenta-tools-1-",
                            15),
                    0);
    CU_ASSERT(json_object_is_type(jsonx_path(msg, "params.arguments"), json_type_object));
    json_object_put(out);
    /* answers in another order than the calls */
    runner(&b, "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"content\":[{\"type\":\"text\","
               "\"text\":\"found\"}],\"isError\":false}}");
    runner(&b, "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[{\"type\":\"text\","
               "\"text\":\"denied\"}],\"isError\":true}}");
    runner(&b, "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[],\"isError\":false}}");
    out = take(&b.to_harness);
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(out), 2);
    msg = json_object_array_get_idx(out, 0);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(msg, "id")), 8);
    CU_ASSERT_STRING_EQUAL(
        jsonx_str(json_object_array_get_idx(jsonx_path(msg, "result.content"), 0), "text"),
        "found");
    msg = json_object_array_get_idx(out, 1);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(msg, "id")), 7);
    CU_ASSERT(json_object_get_boolean(jsonx_path(msg, "result.isError")));
    json_object_put(out);
    CU_ASSERT_EQUAL(b.npending, 0);

    /* a request from the runner side is refused; junk is dropped */
    runner(&b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"fs/read\"}");
    runner(&b, "garbage");
    out = take(&b.to_runner);
    CU_ASSERT_EQUAL(json_object_array_length(out), 1);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(json_object_array_get_idx(out, 0),
                                                   "error.code")),
                    -32601);
    json_object_put(out);
    mcp_bridge_release(&b);
}

static void test_mcp_bridge_errors(void)
{
    static const struct {
        const char *line;
        int code;
    } cases[] = {
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"nope\"}}",
         -32602},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
         "\"get_user\",\"arguments\":[]}}",
         -32602},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":[]}", -32602},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"prompts/list\"}", -32601},
        {"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", -32600},
        {"{\"id\":1,\"method\":\"ping\"}", -32600},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,", -32700},
    };
    struct mcp_bridge b;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(mcp_bridge_init(&b, TOOLS, strlen(TOOLS), err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(mcp_bridge_channel_up(&b), 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_object *out;

        line(&b, cases[i].line);
        out = take(&b.to_harness);
        CU_ASSERT_EQUAL(json_object_array_length(out), 1);
        CU_ASSERT_EQUAL(
            json_object_get_int(jsonx_path(json_object_array_get_idx(out, 0), "error.code")),
            cases[i].code);
        json_object_put(out);
    }
    CU_ASSERT_EQUAL(mcp_bridge_line_too_long(&b), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&b.to_harness), "message too large"));
    mcp_bridge_release(&b);
}

static void test_mcp_bridge_channel_lost(void)
{
    const char *call = "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{"
                       "\"name\":\"get_user\"}}";
    struct mcp_bridge b;
    json_object *out;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(mcp_bridge_init(&b, TOOLS, strlen(TOOLS), err, sizeof(err)), 0);
    b.reconnect = fake_reconnect;
    /* never connected, reconnect fails: a tool error saying why */
    reconnects = 0;
    reconnect_result = -ECONNREFUSED;
    line(&b, call);
    CU_ASSERT_EQUAL(reconnects, 1);
    out = take(&b.to_harness);
    CU_ASSERT(json_object_get_boolean(jsonx_path(json_object_array_get_idx(out, 0),
                                                 "result.isError")));
    CU_ASSERT_PTR_NOT_NULL(strstr(jsonx_text(out, NULL), "unavailable (connection refused)"));
    json_object_put(out);
    CU_ASSERT_EQUAL(b.to_runner.len, 0);

    /* reconnect works: hello then the call */
    reconnect_result = 0;
    line(&b, call);
    CU_ASSERT_EQUAL(reconnects, 2);
    out = take(&b.to_runner);
    CU_ASSERT_EQUAL(json_object_array_length(out), 2);
    CU_ASSERT_STRING_EQUAL(jsonx_str(json_object_array_get_idx(out, 0), "method"), "hello");
    CU_ASSERT_STRING_EQUAL(jsonx_str(json_object_array_get_idx(out, 1), "method"), "tool/call");
    json_object_put(out);
    line(&b, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":{\"name\":"
             "\"get_user\"}}");
    /* the harness cancels id 6: no answer for it, ever */
    line(&b, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
             "\"requestId\":6}}");
    CU_ASSERT_EQUAL(b.npending, 1);
    /* the channel goes away: the open call is answered */
    CU_ASSERT_EQUAL(mcp_bridge_channel_down(&b, "the runner closed the channel"), 0);
    out = take(&b.to_harness);
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(out), 1);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(json_object_array_get_idx(out, 0), "id")), 5);
    CU_ASSERT_PTR_NOT_NULL(strstr(jsonx_text(out, NULL), "outcome of the call is unknown"));
    json_object_put(out);
    CU_ASSERT_EQUAL(b.npending, 0);

    /* a runner that answers hello with another protocol takes the channel down */
    reconnect_result = 0;
    line(&b, call);
    buf_reset(&b.to_runner);
    runner(&b, "{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"protocol\":2}}");
    CU_ASSERT(!b.channel_up);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&b.to_harness), "another channel protocol"));
    buf_reset(&b.to_harness);
    mcp_bridge_release(&b);
}

static void test_mcp_bridge_pending_cap(void)
{
    struct mcp_bridge b;
    json_object *out;
    char err[256], l[256];

    CU_ASSERT_EQUAL_FATAL(mcp_bridge_init(&b, TOOLS, strlen(TOOLS), err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(mcp_bridge_channel_up(&b), 0);
    for (int i = 0; i <= MCP_BRIDGE_PENDING_MAX; i++) {
        snprintf(l, sizeof(l), "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\","
                               "\"params\":{\"name\":\"get_user\"}}",
                 100 + i);
        line(&b, l);
    }
    CU_ASSERT_EQUAL(b.npending, MCP_BRIDGE_PENDING_MAX);
    out = take(&b.to_harness);
    CU_ASSERT_EQUAL(json_object_array_length(out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(jsonx_text(out, NULL), "Too many tool calls in flight"));
    json_object_put(out);
    mcp_bridge_release(&b);
}

/* The schema both ends give a tool that declares none. */
static void test_mcp_bridge_empty_schema(void)
{
    json_object *o = mcp_bridge_empty_schema();

    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    CU_ASSERT_STRING_EQUAL(jsonx_text(o, NULL),
                           "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":true}");
    json_object_put(o);
}

CU_TestInfo mcp_bridge_tests[] = {
    {"test_mcp_bridge_tools_file", test_mcp_bridge_tools_file},
    {"test_mcp_bridge_session", test_mcp_bridge_session},
    {"test_mcp_bridge_errors", test_mcp_bridge_errors},
    {"test_mcp_bridge_channel_lost", test_mcp_bridge_channel_lost},
    {"test_mcp_bridge_pending_cap", test_mcp_bridge_pending_cap},
    {"test_mcp_bridge_empty_schema", test_mcp_bridge_empty_schema},
    CU_TEST_INFO_NULL,
};
