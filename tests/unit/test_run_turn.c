/*
 * run_turn — the pure part of a turn: ACP session/update -> AgentEvents, and the capability
 * flags derived from an initialize result.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "suites.h"
#include "turn/run_limits.h"
#include "turn/run_turn.h"

/* A turn translating into a recording sink. */
struct turn_fixture {
    struct turn_state st;
    struct event_stream es;
    struct event_sink sink;
    struct test_sink ts;
    struct run_result res;
};

static void fixture_init(struct turn_fixture *f, struct run_limits *limits)
{
    test_sink_init(&f->ts, 0, &f->sink);
    event_stream_init(&f->es, &f->sink);
    turn_state_init(&f->st, limits);
    run_result_init(&f->res);
}

static void fixture_release(struct turn_fixture *f)
{
    turn_state_release(&f->st);
    event_stream_release(&f->es);
    test_sink_release(&f->ts);
    run_result_release(&f->res);
}

/* Translate one update given as JSON text. */
static int feed(struct turn_fixture *f, const char *update_json)
{
    json_object *u = test_json(update_json);
    int r;

    CU_ASSERT_PTR_NOT_NULL(u);
    if (!u)
        return -1;
    r = turn_translate_update(&f->st, u, &f->es, &f->res);
    json_object_put(u);
    return r;
}

static void message_chunk(struct turn_fixture *f, const char *text)
{
    char json[512];

    snprintf(json, sizeof(json),
             "{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\","
             "\"text\":\"%s\"}}",
             text);
    CU_ASSERT_EQUAL(feed(f, json), 0);
}

static void thought_chunk(struct turn_fixture *f, const char *text)
{
    char json[512];

    snprintf(json, sizeof(json),
             "{\"sessionUpdate\":\"agent_thought_chunk\",\"content\":{\"type\":\"text\","
             "\"text\":\"%s\"}}",
             text);
    CU_ASSERT_EQUAL(feed(f, json), 0);
}

static size_t nevents(const struct turn_fixture *f)
{
    return test_sink_count(&f->ts);
}

static const char *ev_str(const struct turn_fixture *f, size_t i, const char *key)
{
    json_object *ev = test_sink_event(&f->ts, i);
    const char *s = jsonx_str(ev, key);

    return ev ? (s ? s : "(null)") : "(no event)";
}

/* Event i has this type and (when id is not NULL) this id. */
static void expect_event(const struct turn_fixture *f, size_t i, const char *type, const char *id)
{
    CU_ASSERT_STRING_EQUAL(ev_str(f, i, "type"), type);
    if (id)
        CU_ASSERT_STRING_EQUAL(ev_str(f, i, "id"), id);
}

static void test_run_turn_message_chunks_open_one_block(void)
{
    struct turn_fixture f;

    fixture_init(&f, NULL);
    message_chunk(&f, "Hel");
    message_chunk(&f, "lo");
    CU_ASSERT_EQUAL_FATAL(nevents(&f), 3);
    expect_event(&f, 0, "message_start", "msg-1");
    expect_event(&f, 1, "message_delta", "msg-1");
    CU_ASSERT_STRING_EQUAL(ev_str(&f, 1, "delta"), "Hel");
    expect_event(&f, 2, "message_delta", "msg-1");
    CU_ASSERT_STRING_EQUAL(ev_str(&f, 2, "delta"), "lo");
    CU_ASSERT_STRING_EQUAL(buf_str(&f.res.output), "Hello");
    CU_ASSERT_EQUAL(f.ts.bad_lines, 0);

    turn_close_block(&f.st, &f.es);
    CU_ASSERT_EQUAL_FATAL(nevents(&f), 4);
    expect_event(&f, 3, "message_end", "msg-1");
    turn_close_block(&f.st, &f.es); /* nothing open: nothing emitted */
    CU_ASSERT_EQUAL(nevents(&f), 4);
    fixture_release(&f);
}

static void test_run_turn_thought_closes_message_and_ids_advance(void)
{
    struct turn_fixture f;

    fixture_init(&f, NULL);
    message_chunk(&f, "one");
    thought_chunk(&f, "thinking");
    thought_chunk(&f, " more");
    message_chunk(&f, "two");
    thought_chunk(&f, "again");
    CU_ASSERT_EQUAL_FATAL(nevents(&f), 12);
    expect_event(&f, 0, "message_start", "msg-1");
    expect_event(&f, 1, "message_delta", "msg-1");
    expect_event(&f, 2, "message_end", "msg-1");
    expect_event(&f, 3, "thought_start", "reason-1");
    expect_event(&f, 4, "thought_delta", "reason-1");
    CU_ASSERT_STRING_EQUAL(ev_str(&f, 4, "delta"), "thinking");
    expect_event(&f, 5, "thought_delta", "reason-1");
    expect_event(&f, 6, "thought_end", "reason-1");
    expect_event(&f, 7, "message_start", "msg-2");
    expect_event(&f, 8, "message_delta", "msg-2");
    expect_event(&f, 9, "message_end", "msg-2");
    expect_event(&f, 10, "thought_start", "reason-2");
    expect_event(&f, 11, "thought_delta", "reason-2");
    CU_ASSERT_STRING_EQUAL(ev_str(&f, 11, "delta"), "again");
    /* the output is the assistant text only, without thoughts */
    CU_ASSERT_STRING_EQUAL(buf_str(&f.res.output), "onetwo");
    fixture_release(&f);
}

static void test_run_turn_empty_or_non_text_chunks_emit_nothing(void)
{
    struct turn_fixture f;

    fixture_init(&f, NULL);
    message_chunk(&f, ""); /* claude sends an empty first chunk */
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":"
                             "\"image\",\"data\":\"AAAA\",\"mimeType\":\"image/png\"}}"),
                    0);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"agent_message_chunk\"}"), 0);
    CU_ASSERT_EQUAL(nevents(&f), 0);
    CU_ASSERT_EQUAL(f.res.output.len, 0);
    fixture_release(&f);
}

static void test_run_turn_tool_call_closes_block_and_announces(void)
{
    struct turn_fixture f;
    json_object *input, *want = test_json("{\"command\":\"echo hi > out.txt\"}");

    fixture_init(&f, NULL);
    message_chunk(&f, "Let me run it.");
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"call-1\","
                             "\"title\":\"bash\",\"kind\":\"other\",\"status\":\"pending\","
                             "\"rawInput\":{\"command\":\"echo hi > out.txt\"}}"),
                    0);
    CU_ASSERT_EQUAL_FATAL(nevents(&f), 4);
    expect_event(&f, 2, "message_end", "msg-1");
    expect_event(&f, 3, "tool_call", "call-1");
    CU_ASSERT_STRING_EQUAL(ev_str(&f, 3, "name"), "bash");
    input = jsonx_get(test_sink_event(&f.ts, 3), "input");
    CU_ASSERT_TRUE(json_object_equal(input, want));
    /* text after the tool call opens a new message */
    message_chunk(&f, "Done.");
    CU_ASSERT_EQUAL_FATAL(nevents(&f), 6);
    expect_event(&f, 4, "message_start", "msg-2");
    CU_ASSERT_STRING_EQUAL(buf_str(&f.res.output), "Let me run it.Done.");
    json_object_put(want);
    fixture_release(&f);
}

static void test_run_turn_claude_tool_name_wins_over_title(void)
{
    struct turn_fixture f;

    fixture_init(&f, NULL);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"toolu_1\","
                             "\"title\":\"Terminal\",\"kind\":\"execute\",\"status\":\"pending\","
                             "\"_meta\":{\"claudeCode\":{\"toolName\":\"Bash\"}},"
                             "\"rawInput\":{}}"),
                    0);
    CU_ASSERT_EQUAL_FATAL(nevents(&f), 1);
    expect_event(&f, 0, "tool_call", "toolu_1");
    CU_ASSERT_STRING_EQUAL(ev_str(&f, 0, "name"), "Bash");
    fixture_release(&f);
}

static void test_run_turn_tool_call_update_reemits_on_new_input(void)
{
    struct turn_fixture f;
    json_object *want = test_json("{\"file_path\":\"/workspace/a.txt\"}");

    fixture_init(&f, NULL);
    /* announced without input first (claude streams the input afterwards) */
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"t1\","
                             "\"title\":\"Read\",\"status\":\"pending\"}"),
                    0);
    CU_ASSERT_EQUAL_FATAL(nevents(&f), 1);
    expect_event(&f, 0, "tool_call", "t1");
    CU_ASSERT_TRUE(
        json_object_is_type(jsonx_get(test_sink_event(&f.ts, 0), "input"), json_type_object));
    CU_ASSERT_EQUAL(json_object_object_length(jsonx_get(test_sink_event(&f.ts, 0), "input")), 0);

    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"t1\","
                             "\"rawInput\":{\"file_path\":\"/workspace/a.txt\"}}"),
                    0);
    CU_ASSERT_EQUAL_FATAL(nevents(&f), 2);
    expect_event(&f, 1, "tool_call", "t1");
    CU_ASSERT_STRING_EQUAL(ev_str(&f, 1, "name"), "Read");
    CU_ASSERT_TRUE(json_object_equal(jsonx_get(test_sink_event(&f.ts, 1), "input"), want));

    /* the same input again, or a bare status change, is not news */
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"t1\","
                             "\"rawInput\":{\"file_path\":\"/workspace/a.txt\"}}"),
                    0);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"t1\","
                             "\"status\":\"in_progress\"}"),
                    0);
    CU_ASSERT_EQUAL(nevents(&f), 2);
    /* an update without toolCallId is ignored */
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call_update\",\"status\":\"completed\"}"),
                    0);
    CU_ASSERT_EQUAL(nevents(&f), 2);
    json_object_put(want);
    fixture_release(&f);
}

static void test_run_turn_tool_completed_emits_result_once(void)
{
    struct turn_fixture f;
    json_object *ev;

    fixture_init(&f, NULL);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"t1\","
                             "\"title\":\"bash\",\"status\":\"pending\","
                             "\"rawInput\":{\"command\":\"echo hi-from-tool\"}}"),
                    0);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"t1\","
                             "\"status\":\"completed\",\"content\":[{\"type\":\"content\","
                             "\"content\":{\"type\":\"text\",\"text\":\"hi-from-tool\\n\"}}]}"),
                    0);
    CU_ASSERT_EQUAL_FATAL(nevents(&f), 2);
    expect_event(&f, 1, "tool_result", "t1");
    ev = test_sink_event(&f.ts, 1);
    CU_ASSERT_STRING_EQUAL(ev_str(&f, 1, "output"), "hi-from-tool\n");
    CU_ASSERT_TRUE(json_object_is_type(jsonx_get(ev, "isError"), json_type_boolean));
    CU_ASSERT_FALSE(json_object_get_boolean(jsonx_get(ev, "isError")));
    /* a repeated completion, even with a new input, changes nothing */
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"t1\","
                             "\"status\":\"completed\",\"rawInput\":{\"x\":1},"
                             "\"content\":[{\"type\":\"content\",\"content\":{\"type\":\"text\","
                             "\"text\":\"again\"}}]}"),
                    0);
    CU_ASSERT_EQUAL(nevents(&f), 2);
    fixture_release(&f);
}

static void test_run_turn_tool_failed_is_error_once(void)
{
    struct turn_fixture f;
    json_object *ev;

    fixture_init(&f, NULL);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"t2\","
                             "\"title\":\"edit\",\"rawInput\":{\"path\":\"a\"}}"),
                    0);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"t2\","
                             "\"status\":\"failed\",\"rawOutput\":\"permission denied\"}"),
                    0);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"t2\","
                             "\"status\":\"failed\",\"rawOutput\":\"again\"}"),
                    0);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"t2\","
                             "\"status\":\"completed\"}"),
                    0);
    CU_ASSERT_EQUAL_FATAL(nevents(&f), 2);
    expect_event(&f, 0, "tool_call", "t2");
    expect_event(&f, 1, "tool_result", "t2");
    ev = test_sink_event(&f.ts, 1);
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_get(ev, "isError")));
    CU_ASSERT_STRING_EQUAL(ev_str(&f, 1, "output"), "permission denied");
    fixture_release(&f);
}

/* Open tool calls are tracked by the run limits until they complete. */
static void test_run_turn_tool_calls_feed_run_limits(void)
{
    struct run_limits_config cfg = {.tool_call_ms = 1000};
    struct run_limits limits;
    struct turn_fixture f;

    run_limits_start(&limits, &cfg, 0);
    fixture_init(&f, &limits);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"t1\","
                             "\"title\":\"bash\"}"),
                    0);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"t2\","
                             "\"title\":\"bash\"}"),
                    0);
    CU_ASSERT_EQUAL(limits.ntools, 2);
    CU_ASSERT_NOT_EQUAL(run_limits_deadline(&limits), 0);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"t1\","
                             "\"status\":\"completed\"}"),
                    0);
    CU_ASSERT_EQUAL_FATAL(limits.ntools, 1);
    CU_ASSERT_STRING_EQUAL(limits.tools[0].id, "t2");
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"t2\","
                             "\"status\":\"failed\"}"),
                    0);
    CU_ASSERT_EQUAL(limits.ntools, 0);
    CU_ASSERT_EQUAL(run_limits_deadline(&limits), 0);
    fixture_release(&f);
}

static void test_run_turn_usage_update(void)
{
    struct turn_fixture f;
    json_object *ev;

    fixture_init(&f, NULL);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"usage_update\",\"used\":1234,"
                             "\"size\":200000,\"cost\":{\"amount\":0.25,\"currency\":\"USD\"}}"),
                    0);
    CU_ASSERT_EQUAL_FATAL(nevents(&f), 1);
    expect_event(&f, 0, "usage", NULL);
    ev = test_sink_event(&f.ts, 0);
    CU_ASSERT_EQUAL(json_object_get_int64(jsonx_get(ev, "total")), 1234);
    CU_ASSERT_DOUBLE_EQUAL(json_object_get_double(jsonx_get(ev, "cost")), 0.25, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(f.res.usage.cost, 0.25, 1e-12);

    /* claude reports "used": null with a cost: no zeroed usage event, the cost is kept */
    CU_ASSERT_EQUAL(feed(&f,
                         "{\"sessionUpdate\":\"usage_update\",\"used\":null,"
                         "\"size\":200000,\"cost\":{\"amount\":0.000105,\"currency\":\"USD\"}}"),
                    0);
    CU_ASSERT_EQUAL(nevents(&f), 1);
    CU_ASSERT_DOUBLE_EQUAL(f.res.usage.cost, 0.000105, 1e-12);
    fixture_release(&f);
}

/* A harness's failure message names the error event's code. */
static void test_run_turn_error_codes_of_harness_messages(void)
{
    CU_ASSERT_STRING_EQUAL(turn_error_code("Internal error: API Error: Unable to connect to API "
                                           "(ECONNREFUSED)"),
                           "model_unavailable");
    CU_ASSERT_STRING_EQUAL(turn_error_code("Internal error: stream disconnected before "
                                           "completion: error sending request for url"),
                           "model_unavailable");
    CU_ASSERT_STRING_EQUAL(turn_error_code("404 The model `x` does not exist"),
                           "model_unavailable");
    CU_ASSERT_STRING_EQUAL(turn_error_code("Internal error: bad thing happened"), "provider_error");
    CU_ASSERT_STRING_EQUAL(turn_error_code(NULL), "provider_error");
}

/* The usage event count of a fixture, and the total of the last one. */
static size_t usage_events(struct turn_fixture *f, int64_t *ret_last_total)
{
    size_t n = 0;

    for (size_t i = 0; i < nevents(f); i++) {
        json_object *ev = test_sink_event(&f->ts, i);
        if (strcmp(jsonx_str(ev, "type"), "usage") == 0) {
            n++;
            *ret_last_total = json_object_get_int64(jsonx_get(ev, "total"));
        }
    }
    return n;
}

/* claude: the prompt result's usage is the turn's, one event with its numbers and the cost */
static void test_run_turn_usage_from_the_prompt_result(void)
{
    struct turn_fixture f;
    json_object *result = test_json("{\"stopReason\":\"end_turn\",\"usage\":{\"inputTokens\":"
                                    "444,\"outputTokens\":66,\"totalTokens\":510}}");
    int64_t last = 0;

    fixture_init(&f, NULL);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"usage_update\",\"used\":null,\"size\":1,"
                             "\"cost\":{\"amount\":0.5,\"currency\":\"USD\"}}"),
                    0);
    turn_finish_usage(&f.st, &f.res, result, &f.es);
    CU_ASSERT_EQUAL(usage_events(&f, &last), 1);
    CU_ASSERT_EQUAL(last, 510);
    CU_ASSERT_EQUAL(f.res.usage.input, 444);
    CU_ASSERT_EQUAL(f.res.usage.output, 66);
    CU_ASSERT_EQUAL(f.res.usage.total, 510);
    CU_ASSERT_DOUBLE_EQUAL(f.res.usage.cost, 0.5, 1e-12);
    CU_ASSERT_TRUE(f.res.usage.present);
    json_object_put(result);
    fixture_release(&f);
}

/* codex: a usage_update count per model call, no usage in the result: the turn is their sum */
static void test_run_turn_usage_per_call_counts(void)
{
    struct turn_fixture f;
    json_object *result = test_json("{\"stopReason\":\"end_turn\"}");
    int64_t last = 0;

    fixture_init(&f, NULL);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"usage_update\",\"used\":133,\"size\":9}"), 0);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"usage_update\",\"used\":377,\"size\":9}"), 0);
    turn_finish_usage(&f.st, &f.res, result, &f.es);
    CU_ASSERT_EQUAL(usage_events(&f, &last), 2); /* no third event for the total */
    CU_ASSERT_EQUAL(last, 377);
    CU_ASSERT_EQUAL(f.res.usage.total, 510);
    json_object_put(result);
    fixture_release(&f);
}

/* pi: the channel's usage per model call; the result is their sum, cost included */
static void test_run_turn_usage_from_the_channel(void)
{
    struct turn_fixture f;
    struct run_usage a = {.input = 100, .output = 20, .total = 150, .cost = 0.25, .present = 1};
    struct run_usage b = {.input = 300, .output = 40, .total = 340, .cost = 0.5, .present = 1};
    json_object *result = test_json("{\"stopReason\":\"end_turn\",\"usage\":{\"inputTokens\":"
                                    "1,\"outputTokens\":1}}");
    int64_t last = 0;

    fixture_init(&f, NULL);
    turn_call_usage(&f.st, &a, &f.es);
    turn_call_usage(&f.st, &b, &f.es);
    turn_finish_usage(&f.st, &f.res, result, &f.es);
    CU_ASSERT_EQUAL(usage_events(&f, &last), 2);
    CU_ASSERT_EQUAL(last, 340);
    CU_ASSERT_EQUAL(f.res.usage.input, 400);
    CU_ASSERT_EQUAL(f.res.usage.output, 60);
    CU_ASSERT_EQUAL(f.res.usage.total, 490);
    CU_ASSERT_DOUBLE_EQUAL(f.res.usage.cost, 0.75, 1e-12);
    json_object_put(result);
    fixture_release(&f);
}

static void test_run_turn_unknown_kinds_emit_nothing(void)
{
    static const char *const updates[] = {
        "{\"sessionUpdate\":\"plan\",\"entries\":[{\"content\":\"x\",\"status\":\"pending\"}]}",
        "{\"sessionUpdate\":\"available_commands_update\",\"availableCommands\":[]}",
        "{\"sessionUpdate\":\"current_mode_update\",\"currentModeId\":\"off\"}",
        "{\"sessionUpdate\":\"session_info_update\",\"_meta\":{\"piAcp\":{\"running\":true}}}",
        "{\"sessionUpdate\":\"user_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"u\"}}",
        "{\"sessionUpdate\":\"config_option_update\"}",
        "{\"sessionUpdate\":\"something_new\",\"content\":{\"type\":\"text\",\"text\":\"x\"}}",
        "{\"sessionUpdate\":5}",
        "{\"content\":{\"type\":\"text\",\"text\":\"no kind\"}}",
        "{}",
    };
    struct turn_fixture f;

    fixture_init(&f, NULL);
    message_chunk(&f, "open");
    CU_ASSERT_EQUAL(nevents(&f), 2);
    for (size_t i = 0; i < ARRAY_SIZE(updates); i++)
        CU_ASSERT_EQUAL(feed(&f, updates[i]), 0);
    CU_ASSERT_EQUAL(nevents(&f), 2); /* and the open message stays open */
    CU_ASSERT_EQUAL(f.st.open, 1);
    CU_ASSERT_STRING_EQUAL(buf_str(&f.res.output), "open");
    fixture_release(&f);
}

/* With a collecting stream the one-shot result gets whole messages. */
static void test_run_turn_collecting_stream_coalesces(void)
{
    struct turn_state st;
    struct event_stream es;
    struct run_result res;
    json_object *arr, *u;

    event_stream_init(&es, NULL);
    turn_state_init(&st, NULL);
    run_result_init(&res);
    u = test_json("{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\","
                  "\"text\":\"Hello \"}}");
    CU_ASSERT_EQUAL(turn_translate_update(&st, u, &es, &res), 0);
    CU_ASSERT_EQUAL(turn_translate_update(&st, u, &es, &res), 0);
    json_object_put(u);
    u = test_json("{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"t\",\"title\":\"ls\"}");
    CU_ASSERT_EQUAL(turn_translate_update(&st, u, &es, &res), 0);
    json_object_put(u);
    arr = event_stream_take(&es);
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(arr), 2);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(json_object_array_get_idx(arr, 0), "type")),
                           "message");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(json_object_array_get_idx(arr, 0), "text")),
                           "Hello Hello ");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(json_object_array_get_idx(arr, 1), "type")),
                           "tool_call");
    CU_ASSERT_STRING_EQUAL(buf_str(&res.output), "Hello Hello ");
    json_object_put(arr);
    run_result_release(&res);
    turn_state_release(&st);
    event_stream_release(&es);
}

static void test_run_turn_caps_from_pi_initialize(void)
{
    /* pi-acp 0.0.24's initialize result, as a real run returned it */
    json_object *init = test_json(
        "{\"protocolVersion\":1,\"agentInfo\":{\"name\":\"pi-acp\",\"version\":\"0.0.24\"},"
        "\"authMethods\":[{\"id\":\"pi_terminal_login\",\"type\":\"terminal\","
        "\"args\":[\"--terminal-login\"]}],"
        "\"agentCapabilities\":{\"loadSession\":true,"
        "\"mcpCapabilities\":{\"http\":false,\"sse\":false},"
        "\"promptCapabilities\":{\"image\":true,\"audio\":false,\"embeddedContext\":false},"
        "\"sessionCapabilities\":{\"list\":{}}}}");
    struct harness_caps caps;

    CU_ASSERT_PTR_NOT_NULL_FATAL(init);
    memset(&caps, 0xff, sizeof(caps));
    turn_caps_from_agent(jsonx_get(init, "agentCapabilities"), HARNESS_PI, &caps);
    CU_ASSERT_TRUE(caps.known);
    CU_ASSERT_TRUE(caps.text_messages);
    CU_ASSERT_TRUE(caps.tool_calls);
    CU_ASSERT_TRUE(caps.streaming_deltas);
    CU_ASSERT_TRUE(caps.usage);
    CU_ASSERT_TRUE(caps.images);
    CU_ASSERT_FALSE(caps.file_attachments);
    CU_ASSERT_FALSE(caps.mcp_tools);
    CU_ASSERT_TRUE(caps.session_lifecycle);
    CU_ASSERT_FALSE(caps.reasoning);
    CU_ASSERT_FALSE(caps.plan_mode);
    CU_ASSERT_TRUE(caps.permissions); /* through agent-runner's extension */
    json_object_put(init);
}

static void test_run_turn_caps_from_claude_and_missing(void)
{
    json_object *caps_json = test_json(
        "{\"loadSession\":true,\"promptCapabilities\":{\"image\":true,\"embeddedContext\":true},"
        "\"mcpCapabilities\":{\"http\":true,\"sse\":true},"
        "\"_meta\":{\"claudeCode\":{\"promptQueueing\":true}}}");
    struct harness_caps caps;

    CU_ASSERT_PTR_NOT_NULL_FATAL(caps_json);
    turn_caps_from_agent(caps_json, HARNESS_CLAUDE, &caps);
    CU_ASSERT_TRUE(caps.images);
    CU_ASSERT_TRUE(caps.file_attachments);
    CU_ASSERT_TRUE(caps.mcp_tools);
    CU_ASSERT_TRUE(caps.session_lifecycle);
    CU_ASSERT_TRUE(caps.reasoning);
    CU_ASSERT_TRUE(caps.plan_mode);
    CU_ASSERT_TRUE(caps.permissions);
    json_object_put(caps_json);

    /* omitted capabilities are unsupported; non-boolean values do not count as true */
    caps_json = test_json("{\"loadSession\":\"yes\",\"promptCapabilities\":{\"image\":1}}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(caps_json);
    turn_caps_from_agent(caps_json, HARNESS_CODEX, &caps);
    CU_ASSERT_FALSE(caps.session_lifecycle);
    CU_ASSERT_FALSE(caps.images);
    json_object_put(caps_json);
    turn_caps_from_agent(NULL, HARNESS_OPENCODE, &caps);
    CU_ASSERT_TRUE(caps.known);
    CU_ASSERT_FALSE(caps.images);
    CU_ASSERT_FALSE(caps.mcp_tools);
    CU_ASSERT_FALSE(caps.session_lifecycle);
    CU_ASSERT_TRUE(caps.text_messages);
}

/* A runner-executed call as run_turn registers it (its events come from the runner). */
static void runner_call(struct turn_fixture *f, const char *id, const char *name)
{
    struct turn_tool *t = turn_add_tool(&f->st, id);

    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    t->runner = true;
    t->name = util_xstrdup(name);
}

/* codex reports its own view of a runner tool (server agenta-tools): no events of its own */
static void test_run_turn_codex_report_of_a_runner_call_is_hidden(void)
{
    struct turn_fixture f;

    fixture_init(&f, NULL);
    f.st.kind = HARNESS_CODEX;
    runner_call(&f, "agenta-tools-1-ab", "get_user");
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"call_1\","
                             "\"title\":\"Tool: agenta-tools/get_user\",\"status\":\"in_progress\","
                             "\"rawInput\":{\"server\":\"agenta-tools\",\"tool\":\"get_user\","
                             "\"arguments\":{}}}"),
                    0);
    CU_ASSERT_EQUAL(feed(&f, "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"call_1\","
                             "\"status\":\"completed\"}"),
                    0);
    CU_ASSERT_EQUAL(nevents(&f), 0);
    CU_ASSERT_TRUE(turn_find_tool(&f.st, "agenta-tools-1-ab")->matched);
    fixture_release(&f);
}

/*
 * After an approval resumes a parked runner call, codex reports its own call with the id
 * alone: hidden too (it produced a second tool_call / tool_result pair before).
 */
static void test_run_turn_anonymous_report_of_a_resumed_runner_call_is_hidden(void)
{
    struct turn_fixture f;
    const char *done = "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"call_1\","
                       "\"status\":\"completed\",\"content\":[{\"type\":\"content\","
                       "\"content\":{\"type\":\"text\",\"text\":\"approved\"}}]}";

    fixture_init(&f, NULL);
    f.st.kind = HARNESS_CODEX;
    runner_call(&f, "agenta-tools-1-ab", "get_user");
    f.st.resumed_runner_calls = 1;
    CU_ASSERT_EQUAL(feed(&f, done), 0);
    CU_ASSERT_EQUAL(nevents(&f), 0);
    CU_ASSERT_TRUE(turn_find_tool(&f.st, "agenta-tools-1-ab")->matched);
    fixture_release(&f);

    /* the same update in a turn that resumed no runner call is a tool of the harness's own */
    fixture_init(&f, NULL);
    f.st.kind = HARNESS_CODEX;
    CU_ASSERT_EQUAL(feed(&f, done), 0);
    CU_ASSERT_EQUAL(nevents(&f), 2);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(test_sink_event(&f.ts, 0), "type")), "tool_call");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(test_sink_event(&f.ts, 1), "type")), "tool_result");
    fixture_release(&f);
}

CU_TestInfo run_turn_tests[] = {
    {"test_run_turn_message_chunks_open_one_block", test_run_turn_message_chunks_open_one_block},
    {"test_run_turn_thought_closes_message_and_ids_advance",
     test_run_turn_thought_closes_message_and_ids_advance},
    {"test_run_turn_empty_or_non_text_chunks_emit_nothing",
     test_run_turn_empty_or_non_text_chunks_emit_nothing},
    {"test_run_turn_tool_call_closes_block_and_announces",
     test_run_turn_tool_call_closes_block_and_announces},
    {"test_run_turn_claude_tool_name_wins_over_title",
     test_run_turn_claude_tool_name_wins_over_title},
    {"test_run_turn_tool_call_update_reemits_on_new_input",
     test_run_turn_tool_call_update_reemits_on_new_input},
    {"test_run_turn_tool_completed_emits_result_once",
     test_run_turn_tool_completed_emits_result_once},
    {"test_run_turn_tool_failed_is_error_once", test_run_turn_tool_failed_is_error_once},
    {"test_run_turn_tool_calls_feed_run_limits", test_run_turn_tool_calls_feed_run_limits},
    {"test_run_turn_usage_update", test_run_turn_usage_update},
    {"test_run_turn_error_codes_of_harness_messages",
     test_run_turn_error_codes_of_harness_messages},
    {"test_run_turn_usage_from_the_prompt_result", test_run_turn_usage_from_the_prompt_result},
    {"test_run_turn_usage_per_call_counts", test_run_turn_usage_per_call_counts},
    {"test_run_turn_usage_from_the_channel", test_run_turn_usage_from_the_channel},
    {"test_run_turn_unknown_kinds_emit_nothing", test_run_turn_unknown_kinds_emit_nothing},
    {"test_run_turn_collecting_stream_coalesces", test_run_turn_collecting_stream_coalesces},
    {"test_run_turn_caps_from_pi_initialize", test_run_turn_caps_from_pi_initialize},
    {"test_run_turn_caps_from_claude_and_missing", test_run_turn_caps_from_claude_and_missing},
    {"test_run_turn_codex_report_of_a_runner_call_is_hidden",
     test_run_turn_codex_report_of_a_runner_call_is_hidden},
    {"test_run_turn_anonymous_report_of_a_resumed_runner_call_is_hidden",
     test_run_turn_anonymous_report_of_a_resumed_runner_call_is_hidden},
    CU_TEST_INFO_NULL,
};
