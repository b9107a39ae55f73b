/*
 * tool_channel — both ends of the keeper channel: every sandbox -> runner message decoded
 * (and refused when its ids, names or params are wrong), the runner's answers encoded and read
 * back by the sandbox side, and text made valid UTF-8 on the way out.
 */
#include <errno.h>
#include <string.h>

#include "base/jsonx.h"
#include "proto/tool_channel.h"
#include "suites.h"

static int decode_line(const char *line, struct acp_msg *m, struct tool_channel_msg *out,
                       char *err, size_t errlen)
{
    char perr[128];
    int r = acp_decode(line, strlen(line), m, perr, sizeof(perr));

    CU_ASSERT_EQUAL_FATAL(r, 0);
    err[0] = '\0';
    return tool_channel_decode(m, out, err, errlen);
}

static void test_tool_channel_decode(void)
{
    struct tool_channel_msg t;
    struct acp_msg m;
    char err[256];

    CU_ASSERT_EQUAL(decode_line("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{"
                                "\"client\":\"pi-extension\",\"version\":\"1.2\"}}",
                                &m, &t, err, sizeof(err)),
                    0);
    CU_ASSERT_EQUAL(t.kind, TOOL_CHANNEL_HELLO);
    CU_ASSERT_STRING_EQUAL(t.client, "pi-extension");
    CU_ASSERT_STRING_EQUAL(t.version, "1.2");
    CU_ASSERT_EQUAL(json_object_get_int(t.id), 1);
    acp_msg_release(&m);

    CU_ASSERT_EQUAL(decode_line("{\"jsonrpc\":\"2.0\",\"id\":\"p7\",\"method\":\"tool/permission\","
                                "\"params\":{\"toolCallId\":\"call_1\",\"toolName\":\"bash\","
                                "\"input\":{\"command\":\"ls\"}}}",
                                &m, &t, err, sizeof(err)),
                    0);
    CU_ASSERT_EQUAL(t.kind, TOOL_CHANNEL_PERMISSION);
    CU_ASSERT_STRING_EQUAL(t.tool_call_id, "call_1");
    CU_ASSERT_STRING_EQUAL(t.tool_name, "bash");
    CU_ASSERT_STRING_EQUAL(jsonx_str(t.input, "command"), "ls");
    acp_msg_release(&m);

    CU_ASSERT_EQUAL(decode_line("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tool/call\",\"params\":"
                                "{\"toolCallId\":\"toolu_01:x.y-z\",\"toolName\":\"github__get\"}}",
                                &m, &t, err, sizeof(err)),
                    0);
    CU_ASSERT_EQUAL(t.kind, TOOL_CHANNEL_CALL);
    CU_ASSERT_PTR_NULL(t.input);
    acp_msg_release(&m);

    CU_ASSERT_EQUAL(decode_line("{\"jsonrpc\":\"2.0\",\"method\":\"usage\",\"params\":{\"input\":3}}",
                                &m, &t, err, sizeof(err)),
                    0);
    CU_ASSERT_EQUAL(t.kind, TOOL_CHANNEL_USAGE);
    CU_ASSERT_PTR_NULL(t.id);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(t.params, "input")), 3);
    acp_msg_release(&m);

    {
        static const struct {
            const char *line;
            int r;
            const char *needle;
        } bad[] = {
            {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tool/call\",\"params\":{\"toolCallId\":"
             "\"a b\",\"toolName\":\"t\"}}",
             -EINVAL, "toolCallId"},
            {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tool/call\",\"params\":{\"toolCallId\":"
             "\"a\",\"toolName\":\"../x\"}}",
             -EINVAL, "toolName"},
            {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tool/call\",\"params\":{\"toolCallId\":"
             "\"a\",\"toolName\":\"t\",\"arguments\":[1]}}",
             -EINVAL, "arguments: expected an object"},
            {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{}}", -EINVAL,
             "client: required"},
            {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":[]}", -EINVAL,
             "params: expected an object"},
            {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"fs/read\",\"params\":{}}", -ENOENT,
             "unknown method"},
            {"{\"jsonrpc\":\"2.0\",\"method\":\"tool/call\",\"params\":{}}", -ENOENT,
             "unknown method"},
            {"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}", -EBADMSG, "no requests"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            int r = decode_line(bad[i].line, &m, &t, err, sizeof(err));

            if (r != bad[i].r || !strstr(err, bad[i].needle))
                fprintf(stderr, "case %zu: r=%d err=%s\n", i, r, err);
            CU_ASSERT_EQUAL(r, bad[i].r);
            CU_ASSERT_PTR_NOT_NULL(strstr(err, bad[i].needle));
            acp_msg_release(&m);
        }
    }
}

static void decode_back(const struct buf *b, struct acp_msg *m)
{
    char err[128];

    CU_ASSERT_FATAL(b->len > 0 && b->data[b->len - 1] == '\n');
    CU_ASSERT_EQUAL_FATAL(acp_decode(b->data, b->len - 1, m, err, sizeof(err)), 0);
}

static void test_tool_channel_roundtrip(void)
{
    json_object *id = json_object_new_int(9), *args = test_json("{\"q\":1}");
    struct tool_result res = {0};
    struct tool_channel_msg t;
    struct acp_msg m;
    struct buf b;
    char err[128];

    buf_init(&b, 1 << 20);
    /* sandbox -> runner */
    CU_ASSERT_EQUAL(tool_channel_encode_call(&b, 4, "toolu_1", "get_user", args), 0);
    decode_back(&b, &m);
    CU_ASSERT_EQUAL(tool_channel_decode(&m, &t, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(t.kind, TOOL_CHANNEL_CALL);
    CU_ASSERT_STRING_EQUAL(t.tool_name, "get_user");
    CU_ASSERT(json_object_equal(t.input, args));
    acp_msg_release(&m);
    buf_reset(&b);
    /* the permission request harnesses/extension/index.js sends */
    CU_ASSERT_EQUAL(buf_append_str(&b, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":"
                                       "\"tool/permission\",\"params\":{\"toolCallId\":\"c1\","
                                       "\"toolName\":\"bash\",\"input\":{}}}\n"),
                    0);
    decode_back(&b, &m);
    CU_ASSERT_EQUAL(tool_channel_decode(&m, &t, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(t.kind, TOOL_CHANNEL_PERMISSION);
    CU_ASSERT(json_object_is_type(t.input, json_type_object));
    acp_msg_release(&m);

    /* runner -> sandbox: a result with invalid UTF-8 arrives as valid text */
    buf_reset(&b);
    CU_ASSERT_EQUAL(tool_channel_encode_call_result(&b, id, "ok \xff\xfe end \xc3\xa9", true), 0);
    decode_back(&b, &m);
    CU_ASSERT_EQUAL(tool_channel_decode_call_result(&m, &res), 0);
    CU_ASSERT(res.is_error);
    CU_ASSERT_STRING_EQUAL(res.text, "ok \xef\xbf\xbd\xef\xbf\xbd end \xc3\xa9");
    tool_result_release(&res);
    acp_msg_release(&m);

    buf_reset(&b);
    CU_ASSERT_EQUAL(acp_encode_error(&b, id, -32602, "toolName: bad"), 0);
    decode_back(&b, &m);
    CU_ASSERT_EQUAL(tool_channel_decode_call_result(&m, &res), 0);
    CU_ASSERT(res.is_error);
    CU_ASSERT_STRING_EQUAL(res.text, "agent-runner: toolName: bad");
    tool_result_release(&res);
    acp_msg_release(&m);

    buf_reset(&b);
    CU_ASSERT_EQUAL(tool_channel_encode_permission_result(&b, id, TOOL_CHANNEL_DENY, NULL), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&b), "{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{\"outcome\":"
                                        "\"deny\",\"message\":\"Denied by policy.\"}}\n");
    buf_reset(&b);
    CU_ASSERT_EQUAL(tool_channel_encode_permission_result(&b, id, TOOL_CHANNEL_ALLOW, NULL), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&b),
                           "{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{\"outcome\":\"allow\"}}\n");

    buf_reset(&b);
    CU_ASSERT_EQUAL(tool_channel_encode_hello_result(&b, id), 0);
    decode_back(&b, &m);
    CU_ASSERT_EQUAL(tool_channel_decode_hello_result(&m, err, sizeof(err)), 0);
    acp_msg_release(&m);
    buf_reset(&b);
    CU_ASSERT_EQUAL(tool_channel_encode_hello(&b, 1, TOOL_CHANNEL_CLIENT_MCP, "0.1.0"), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&b),
                           "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{"
                           "\"client\":\"agenta-tools-mcp\",\"version\":\"0.1.0\"}}\n");
    decode_back(&b, &m);
    {
        struct tool_channel_msg tm;

        CU_ASSERT_EQUAL(tool_channel_decode(&m, &tm, err, sizeof(err)), 0);
        CU_ASSERT_EQUAL(tm.kind, TOOL_CHANNEL_HELLO);
        CU_ASSERT_STRING_EQUAL(TEST_STR(tm.client), TOOL_CHANNEL_CLIENT_MCP);
    }
    acp_msg_release(&m);
    buf_release(&b);
    json_object_put(id);
    json_object_put(args);
}

static void test_tool_channel_utf8(void)
{
    static const struct {
        const char *in;
        size_t len;
        const char *out;
    } cases[] = {
        {"plain", 5, "plain"},
        {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd"},             /* overlong '/' */
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* a surrogate */
        {"a\xe2\x82", 3, "a\xef\xbf\xbd\xef\xbf\xbd"},           /* truncated */
        {"a\0b", 3, "a\xef\xbf\xbd" "b"},                        /* NUL */
        {"\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80"},             /* 4 bytes, valid */
        {"\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
    };
    struct buf b;

    buf_init(&b, 1024);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        buf_reset(&b);
        CU_ASSERT_EQUAL(tool_channel_utf8_clean(cases[i].in, cases[i].len, &b), 0);
        CU_ASSERT_STRING_EQUAL(buf_str(&b), cases[i].out);
    }
    buf_release(&b);
    CU_ASSERT(tool_channel_call_id_ok("toolu_01ABC"));
    CU_ASSERT(!tool_channel_call_id_ok(""));
    CU_ASSERT(!tool_channel_call_id_ok("a/b"));
    CU_ASSERT(tool_channel_tool_name_ok("mcp__github__x.y"));
    CU_ASSERT(!tool_channel_tool_name_ok("a:b"));
}

CU_TestInfo tool_channel_tests[] = {
    {"test_tool_channel_decode", test_tool_channel_decode},
    {"test_tool_channel_roundtrip", test_tool_channel_roundtrip},
    {"test_tool_channel_utf8", test_tool_channel_utf8},
    CU_TEST_INFO_NULL,
};
