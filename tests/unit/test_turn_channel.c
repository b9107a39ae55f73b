/* turn_channel: the pure part of the worker's end of the keeper channel. */
#include <errno.h>
#include <string.h>

#include "base/jsonx.h"
#include "suites.h"
#include "turn/turn_channel.h"

static json_object *answer_of(struct buf *out)
{
    json_object *o = test_json(buf_str(out));

    buf_reset(out);
    return o;
}

/* Decode a channel line into m (and tm); the caller releases m. */
static void decode(const char *line, struct acp_msg *m, struct tool_channel_msg *tm)
{
    char err[128];

    CU_ASSERT_EQUAL_FATAL(acp_decode(line, strlen(line), m, err, sizeof(err)), 0);
    if (tm)
        CU_ASSERT_EQUAL(tool_channel_decode(m, tm, err, sizeof(err)), 0);
}

static void test_turn_channel_gate_of_pi_builtins_and_others(void)
{
    static const struct {
        const char *tool;
        int hint;
        const char *kind;
    } cases[] = {{"bash", 0, "execute"},
                 {"READ", 1, "read"},
                 {"ls", 1, "search"},
                 {"write", 0, "edit"},
                 {"my_ext_tool", -1, "other"}};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char line[512];
        struct tool_channel_msg tm;
        struct permission_gate pg;
        json_object *params;
        struct acp_msg m;

        snprintf(line, sizeof(line),
                 "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tool/permission\",\"params\":{"
                 "\"toolCallId\":\"call_1\",\"toolName\":\"%s\",\"input\":{\"path\":\"/a\"}}}",
                 cases[i].tool);
        decode(line, &m, &tm);
        turn_channel_gate(&tm, &pg, &params);
        CU_ASSERT_STRING_EQUAL(pg.tool_name, cases[i].tool);
        CU_ASSERT_EQUAL(pg.read_only_hint, cases[i].hint);
        CU_ASSERT_EQUAL(pg.spec, PERMISSION_UNSET);
        CU_ASSERT_EQUAL(pg.server, PERMISSION_UNSET);
        CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(pg.args, "path")), "/a");
        CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(params, "toolCall"), "kind")),
                               cases[i].kind);
        CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(params, "toolCall"), "toolCallId")),
                               "call_1");
        CU_ASSERT_EQUAL(json_object_array_length(jsonx_get(params, "options")), 2);
        json_object_put(params);
        acp_msg_release(&m);
    }
}

static void test_turn_channel_answers(void)
{
    struct buf out;
    json_object *a;

    buf_init(&out, 1 << 16);
    CU_ASSERT_EQUAL(turn_channel_answer(&out, "\"p7\"", TURN_CHANNEL_ALLOW, "bash", false), 0);
    a = answer_of(&out);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(a, "id")), "p7");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(a, "result"), "outcome")), "allow");
    json_object_put(a);
    CU_ASSERT_EQUAL(turn_channel_answer(&out, "12", TURN_CHANNEL_DENY, "bash", false), 0);
    a = answer_of(&out);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(a, "id")), 12);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(TEST_STR(jsonx_str(jsonx_get(a, "result"), "message")), "permission plan"));
    CU_ASSERT_PTR_NOT_NULL(strstr(TEST_STR(jsonx_str(jsonx_get(a, "result"), "message")), "bash"));
    json_object_put(a);
    CU_ASSERT_EQUAL(turn_channel_answer(&out, "12", TURN_CHANNEL_DENY, NULL, true), 0);
    a = answer_of(&out);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(TEST_STR(jsonx_str(jsonx_get(a, "result"), "message")), "user did not approve"));
    json_object_put(a);
    CU_ASSERT_EQUAL(turn_channel_answer(&out, "12", TURN_CHANNEL_CANCELLED, "x", false), 0);
    a = answer_of(&out);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(a, "result"), "outcome")), "cancelled");
    json_object_put(a);
    CU_ASSERT_EQUAL(turn_channel_answer(&out, "{not", TURN_CHANNEL_ALLOW, "x", false), -EINVAL);
    CU_ASSERT_EQUAL(turn_channel_answer(&out, "1", (enum turn_channel_answer)9, "x", false),
                    -EINVAL);
    CU_ASSERT_EQUAL(out.len, 0);
    buf_release(&out);
}

static void test_turn_channel_usage_and_error_are_read_defensively(void)
{
    json_object *p = test_json("{\"input\":100,\"output\":20,\"cacheRead\":5,\"cacheWrite\":2,"
                               "\"cost\":0.5}");
    struct run_usage u;
    const char *code;
    char msg[64];

    turn_channel_usage(p, &u);
    CU_ASSERT_EQUAL(u.input, 100);
    CU_ASSERT_EQUAL(u.output, 20);
    CU_ASSERT_EQUAL(u.total, 127); /* default: every count */
    CU_ASSERT_DOUBLE_EQUAL(u.cost, 0.5, 1e-12);
    json_object_put(p);
    p = test_json("{\"input\":-5,\"output\":\"many\",\"total\":1e300,\"cost\":null}");
    turn_channel_usage(p, &u);
    CU_ASSERT_EQUAL(u.input, 0);
    CU_ASSERT_EQUAL(u.output, 0);
    CU_ASSERT_EQUAL(u.total, 0);
    CU_ASSERT_TRUE(u.present);
    json_object_put(p);
    turn_channel_usage(NULL, &u);
    CU_ASSERT_EQUAL(u.total, 0);

    p = test_json("{\"message\":\"500 upstream\\nexploded\",\"code\":\"model_unavailable\"}");
    turn_channel_error(p, msg, sizeof(msg), &code);
    /* the harness's word, labelled as the harness's; never a runner code, whatever it says */
    CU_ASSERT_STRING_EQUAL(msg, "the harness reported: 500 upstream exploded");
    CU_ASSERT_STRING_EQUAL(code, "harness_error");
    json_object_put(p);
    p = test_json("{\"code\":\"rm -rf\"}");
    turn_channel_error(p, msg, sizeof(msg), &code);
    CU_ASSERT_STRING_EQUAL(msg, "the harness reported: a model call failed");
    CU_ASSERT_STRING_EQUAL(code, "harness_error");
    json_object_put(p);
}

static void test_turn_channel_outside_a_turn(void)
{
    struct acp_msg m;
    struct buf out;
    bool gating = false;
    json_object *a;

    buf_init(&out, 1 << 16);
    decode("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{\"client\":"
           "\"pi-extension\",\"gating\":true}}",
           &m, NULL);
    CU_ASSERT_EQUAL(turn_channel_outside(&m, &out, &gating), 1);
    CU_ASSERT_TRUE(gating);
    a = answer_of(&out);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(a, "result.protocol")), 1);
    json_object_put(a);
    acp_msg_release(&m);
    decode("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tool/permission\",\"params\":{"
           "\"toolCallId\":\"c\",\"toolName\":\"bash\"}}",
           &m, NULL);
    CU_ASSERT_EQUAL(turn_channel_outside(&m, &out, &gating), 0);
    a = answer_of(&out);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(a, "result"), "outcome")), "cancelled");
    json_object_put(a);
    acp_msg_release(&m);
    decode("{\"jsonrpc\":\"2.0\",\"method\":\"usage\",\"params\":{}}", &m, NULL);
    CU_ASSERT_EQUAL(turn_channel_outside(&m, &out, &gating), 0);
    CU_ASSERT_EQUAL(out.len, 0); /* a notification needs no answer */
    acp_msg_release(&m);
    decode("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tool/call\",\"params\":{\"toolCallId\":"
           "\"bad id\",\"toolName\":\"x\"}}",
           &m, NULL);
    CU_ASSERT_EQUAL(turn_channel_outside(&m, &out, &gating), 0);
    a = answer_of(&out);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(a, "error.code")), -32602);
    json_object_put(a);
    acp_msg_release(&m);
    buf_release(&out);
}

CU_TestInfo turn_channel_tests[] = {
    {"test_turn_channel_gate_of_pi_builtins_and_others",
     test_turn_channel_gate_of_pi_builtins_and_others},
    {"test_turn_channel_answers", test_turn_channel_answers},
    {"test_turn_channel_usage_and_error_are_read_defensively",
     test_turn_channel_usage_and_error_are_read_defensively},
    {"test_turn_channel_outside_a_turn", test_turn_channel_outside_a_turn},
    CU_TEST_INFO_NULL,
};
