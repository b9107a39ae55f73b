/*
 * events — NDJSON records, the streaming and collecting event streams, and the one-shot
 * AgentRunResult compared with the golden run_result fixtures.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "core/contracts.h"
#include "suites.h"
#include "turn/events.h"

/* Type of element i of an event array, "" when missing. */
static const char *type_at(json_object *arr, size_t i)
{
    const char *t;

    if (!arr || i >= json_object_array_length(arr))
        return "";
    t = jsonx_str(json_object_array_get_idx(arr, i), "type");
    return t ? t : "";
}

static const char *str_at(json_object *arr, size_t i, const char *key)
{
    const char *s;

    if (!arr || i >= json_object_array_length(arr))
        return "";
    s = jsonx_str(json_object_array_get_idx(arr, i), key);
    return s ? s : "(null)";
}

static void test_events_record_line_shape(void)
{
    json_object *ev = event_text("message_delta", "msg-1", "hi");
    struct buf b;

    buf_init(&b, 4096);
    CU_ASSERT_EQUAL_FATAL(events_record_line("event", ev, &b), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&b), "{\"kind\":\"event\",\"event\":{\"type\":\"message_delta\","
                                        "\"id\":\"msg-1\",\"delta\":\"hi\"}}\n");
    buf_release(&b);
    json_object_put(ev);
}

/* Control characters, quotes, backslashes and UTF-8 survive the record and its parse back. */
static void test_events_record_line_escapes(void)
{
    static const char text[] = "say \"hi\" \\ back\\slash\nline2\r\ttab \x01\x1f\x7f "
                               "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 /end";
    json_object *ev = event_text("message_delta", "msg-1", text), *rec = NULL, *back;
    char err[128];
    struct buf b;

    buf_init(&b, 4096);
    CU_ASSERT_EQUAL_FATAL(events_record_line("event", ev, &b), 0);
    CU_ASSERT_EQUAL_FATAL(b.len > 0, 1);
    CU_ASSERT_EQUAL(b.data[b.len - 1], '\n');
    CU_ASSERT_PTR_NULL(memchr(b.data, '\n', b.len - 1)); /* only the terminator */
    for (size_t i = 0; i + 1 < b.len; i++)
        CU_ASSERT((unsigned char)b.data[i] >= 0x20);
    CU_ASSERT_PTR_NOT_NULL(strstr(b.data, "caf\xc3\xa9")); /* UTF-8 passes through */
    CU_ASSERT_EQUAL_FATAL(jsonx_parse(b.data, b.len, 16, &rec, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(rec, "kind")), "event");
    back = jsonx_get(rec, "event");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(back, "type")), "message_delta");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(back, "delta")), text);
    CU_ASSERT_EQUAL(json_object_get_string_len(jsonx_get(back, "delta")), (int)strlen(text));
    CU_ASSERT_TRUE(json_object_equal(back, ev));
    json_object_put(rec);
    buf_release(&b);
    json_object_put(ev);
}

static void test_events_stream_streaming_one_line_per_event(void)
{
    struct event_stream es;
    struct event_sink sink;
    struct test_sink ts;

    test_sink_init(&ts, 0, &sink);
    event_stream_init(&es, &sink);
    CU_ASSERT_TRUE(es.streaming);
    CU_ASSERT_EQUAL(event_emit(&es, event_block("message_start", "msg-1")), 0);
    CU_ASSERT_EQUAL(ts.calls, 1);
    CU_ASSERT_TRUE(es.first_event_ms > 0);
    CU_ASSERT_EQUAL(event_emit(&es, event_text("message_delta", "msg-1", "a\nb")), 0);
    CU_ASSERT_EQUAL(event_emit(&es, event_block("message_end", "msg-1")), 0);
    CU_ASSERT_EQUAL(event_emit(&es, event_done("end_turn", "trace-1")), 0);
    CU_ASSERT_EQUAL(ts.calls, 4);
    CU_ASSERT_EQUAL(ts.bad_lines, 0);
    CU_ASSERT_EQUAL(es.nevents, 4);
    CU_ASSERT_TRUE(es.last_event_ms >= es.first_event_ms);
    CU_ASSERT_FALSE(es.client_gone);
    CU_ASSERT_EQUAL_FATAL(test_sink_count(&ts), 4);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(json_object_array_get_idx(ts.records, 0), "kind")),
                           "event");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(test_sink_event(&ts, 1), "delta")), "a\nb");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(test_sink_event(&ts, 3), "type")), "done");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(test_sink_event(&ts, 3), "stopReason")), "end_turn");
    /* a streaming stream collects nothing */
    json_object *taken = event_stream_take(&es);
    CU_ASSERT_EQUAL(json_object_array_length(taken), 0);
    json_object_put(taken);
    event_stream_release(&es);
    test_sink_release(&ts);
}

static void test_events_failing_sink_sets_client_gone(void)
{
    struct event_stream es;
    struct event_sink sink;
    struct test_sink ts;

    test_sink_init(&ts, 2, &sink); /* the second write fails */
    event_stream_init(&es, &sink);
    CU_ASSERT_EQUAL(event_emit(&es, event_block("message_start", "msg-1")), 0);
    CU_ASSERT_FALSE(es.client_gone);
    CU_ASSERT_EQUAL(event_emit(&es, event_text("message_delta", "msg-1", "x")), 0);
    CU_ASSERT_TRUE(es.client_gone);
    CU_ASSERT_EQUAL(ts.calls, 2);
    CU_ASSERT_EQUAL(event_emit(&es, event_block("message_end", "msg-1")), 0);
    CU_ASSERT_EQUAL(event_emit(&es, event_done("end_turn", NULL)), 0);
    CU_ASSERT_EQUAL(ts.calls, 2); /* never called again */
    CU_ASSERT_TRUE(es.client_gone);
    CU_ASSERT_EQUAL(test_sink_count(&ts), 1);
    CU_ASSERT_EQUAL(event_emit(&es, NULL), -ENOMEM);
    event_stream_release(&es);
    test_sink_release(&ts);
}

static void test_events_collecting_coalesces_blocks(void)
{
    struct run_usage u = {.input = 3, .output = 4, .total = 7, .cost = 0.5, .present = true};
    struct event_stream es;
    json_object *arr, *tool_input = test_json("{\"command\":\"ls\"}");

    event_stream_init(&es, NULL);
    CU_ASSERT_FALSE(es.streaming);
    event_emit(&es, event_block("message_start", "msg-1"));
    event_emit(&es, event_text("message_delta", "msg-1", "Hel"));
    event_emit(&es, event_text("message_delta", "msg-1", "lo"));
    event_emit(&es, event_block("message_end", "msg-1"));
    event_emit(&es, event_block("thought_start", "reason-1"));
    event_emit(&es, event_text("thought_delta", "reason-1", "hmm "));
    event_emit(&es, event_text("thought_delta", "reason-1", "ok"));
    /* a message opening without thought_end still closes the thought */
    event_emit(&es, event_block("message_start", "msg-2"));
    event_emit(&es, event_text("message_delta", "msg-2", "A"));
    event_emit(&es, event_tool_call("t1", "bash", tool_input));
    event_emit(&es, event_tool_result("t1", "out", false, false));
    event_emit(&es, event_block("message_start", "msg-3"));
    event_emit(&es, event_text("message_delta", "msg-3", "B"));
    event_emit(&es, event_usage(&u));
    event_emit(&es, event_done("end_turn", "trace-1"));
    CU_ASSERT_EQUAL(es.nevents, 15);

    arr = event_stream_take(&es);
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(arr), 8);
    CU_ASSERT_STRING_EQUAL(type_at(arr, 0), "message");
    CU_ASSERT_STRING_EQUAL(str_at(arr, 0, "text"), "Hello");
    CU_ASSERT_STRING_EQUAL(type_at(arr, 1), "thought");
    CU_ASSERT_STRING_EQUAL(str_at(arr, 1, "text"), "hmm ok");
    CU_ASSERT_STRING_EQUAL(type_at(arr, 2), "message");
    CU_ASSERT_STRING_EQUAL(str_at(arr, 2, "text"), "A");
    CU_ASSERT_STRING_EQUAL(type_at(arr, 3), "tool_call");
    CU_ASSERT_STRING_EQUAL(str_at(arr, 3, "id"), "t1");
    CU_ASSERT_STRING_EQUAL(str_at(arr, 3, "name"), "bash");
    CU_ASSERT_TRUE(
        json_object_equal(jsonx_get(json_object_array_get_idx(arr, 3), "input"), tool_input));
    CU_ASSERT_STRING_EQUAL(type_at(arr, 4), "tool_result");
    CU_ASSERT_STRING_EQUAL(type_at(arr, 5), "message");
    CU_ASSERT_STRING_EQUAL(str_at(arr, 5, "text"), "B");
    CU_ASSERT_STRING_EQUAL(type_at(arr, 6), "usage");
    CU_ASSERT_EQUAL(json_object_get_int64(jsonx_get(json_object_array_get_idx(arr, 6), "total")),
                    7);
    CU_ASSERT_STRING_EQUAL(type_at(arr, 7), "done");
    CU_ASSERT_STRING_EQUAL(str_at(arr, 7, "stopReason"), "end_turn");
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        const char *t = type_at(arr, i);
        CU_ASSERT(strncmp(t, "message_", 8) != 0 && strncmp(t, "thought_", 8) != 0);
    }
    json_object_put(arr);

    /* taken means moved out: the next take starts empty */
    arr = event_stream_take(&es);
    CU_ASSERT_EQUAL(json_object_array_length(arr), 0);
    json_object_put(arr);
    event_stream_release(&es);
    json_object_put(tool_input);
}

/* An open block at take time is flushed, so no text is lost. */
static void test_events_collecting_take_flushes_open_block(void)
{
    struct event_stream es;
    json_object *arr;

    event_stream_init(&es, NULL);
    event_emit(&es, event_block("message_start", "msg-1"));
    event_emit(&es, event_text("message_delta", "msg-1", "partial"));
    arr = event_stream_take(&es);
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(arr), 1);
    CU_ASSERT_STRING_EQUAL(type_at(arr, 0), "message");
    CU_ASSERT_STRING_EQUAL(str_at(arr, 0, "text"), "partial");
    json_object_put(arr);
    event_stream_release(&es);
}

static void test_events_builders_shape(void)
{
    struct run_usage u = {.input = 10, .output = 5, .total = 15, .cost = 0.25};
    json_object *ev;

    ev = event_tool_result("t9", NULL, true, true);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(ev, "type")), "tool_result");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(ev, "output")), "");
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_get(ev, "isError")));
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_get(ev, "denied")));
    json_object_put(ev);

    ev = event_tool_result("t9", "fine", false, false);
    CU_ASSERT_FALSE(json_object_get_boolean(jsonx_get(ev, "isError")));
    CU_ASSERT_PTR_NULL(jsonx_get(ev, "denied"));
    json_object_put(ev);

    ev = event_usage(&u);
    CU_ASSERT_EQUAL(json_object_get_int64(jsonx_get(ev, "input")), 10);
    CU_ASSERT_EQUAL(json_object_get_int64(jsonx_get(ev, "output")), 5);
    CU_ASSERT_EQUAL(json_object_get_int64(jsonx_get(ev, "total")), 15);
    CU_ASSERT_DOUBLE_EQUAL(json_object_get_double(jsonx_get(ev, "cost")), 0.25, 1e-12);
    json_object_put(ev);

    ev = event_error("boom", "run_limit");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(ev, "message")), "boom");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(ev, "code")), "run_limit");
    json_object_put(ev);

    ev = event_tool_call("t1", NULL, NULL);
    CU_ASSERT_TRUE(json_object_is_type(jsonx_get(ev, "input"), json_type_object));
    CU_ASSERT_PTR_NULL(jsonx_get(ev, "name"));
    json_object_put(ev);

    ev = event_data_phase("starting");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(ev, "type")), "data");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(ev, "data"), "phase")), "starting");
    json_object_put(ev);
}

/* Same set of keys in both objects. */
static bool same_keys(json_object *a, json_object *b)
{
    if (!a || !b || json_object_object_length(a) != json_object_object_length(b))
        return false;
    json_object_object_foreach(a, key, val)
    {
        (void)val;
        if (!json_object_object_get_ex(b, key, NULL))
            return false;
    }
    return true;
}

static void test_events_run_result_ok_matches_fixture(void)
{
    json_object *want = test_shared_json("run_result.ok.json"), *got;
    struct event_stream es;
    struct run_result res;

    CU_ASSERT_PTR_NOT_NULL_FATAL(want);
    run_result_init(&res);
    res.ok = true;
    buf_append_str(&res.output, "Hello!");
    res.usage =
        (struct run_usage){.input = 10, .output = 5, .total = 15, .cost = 0.001, .present = true};
    res.stop_reason = strdup("end_turn");
    res.session_id = strdup("sess-42");
    res.model = strdup("gpt-5.5");
    res.trace_id = strdup("trace-abc");
    res.caps = (struct harness_caps){.known = true,
                                     .text_messages = true,
                                     .mcp_tools = true,
                                     .tool_calls = true,
                                     .reasoning = true,
                                     .usage = true};
    event_stream_init(&es, NULL);
    event_emit(&es, event_block("message_start", "msg-1"));
    event_emit(&es, event_text("message_delta", "msg-1", "Hello!"));
    event_emit(&es, event_block("message_end", "msg-1"));
    event_emit(&es, event_usage(&res.usage));
    event_emit(&es, event_done("end_turn", "trace-abc"));
    res.events = event_stream_take(&es);
    event_stream_release(&es);

    got = run_result_to_json(&res);
    CU_ASSERT_TRUE(same_keys(got, want));
    CU_ASSERT_TRUE(json_object_equal(jsonx_get(got, "ok"), jsonx_get(want, "ok")));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(got, "output")), TEST_STR(jsonx_str(want, "output")));
    CU_ASSERT_TRUE(json_object_equal(jsonx_get(got, "messages"), jsonx_get(want, "messages")));
    CU_ASSERT_STRING_EQUAL(str_at(jsonx_get(got, "messages"), 0, "role"), "assistant");
    CU_ASSERT_STRING_EQUAL(str_at(jsonx_get(got, "messages"), 0, "content"), "Hello!");
    CU_ASSERT_TRUE(same_keys(jsonx_get(got, "usage"), jsonx_get(want, "usage")));
    CU_ASSERT_TRUE(json_object_equal(jsonx_get(got, "usage"), jsonx_get(want, "usage")));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(got, "stopReason")),
                           TEST_STR(jsonx_str(want, "stopReason")));
    CU_ASSERT_TRUE(same_keys(jsonx_get(got, "capabilities"), jsonx_get(want, "capabilities")));
    CU_ASSERT_TRUE(
        json_object_equal(jsonx_get(got, "capabilities"), jsonx_get(want, "capabilities")));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(got, "sessionId")), "sess-42");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(got, "model")), TEST_STR(jsonx_str(want, "model")));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(got, "traceId")),
                           TEST_STR(jsonx_str(want, "traceId")));
    /* the typed events of the fixture, in order (its untyped one is dropped on parse) */
    for (size_t i = 0; i < 3; i++) {
        json_object *g = json_object_array_get_idx(jsonx_get(got, "events"), i);
        json_object *w = json_object_array_get_idx(jsonx_get(want, "events"), i);
        CU_ASSERT_TRUE(json_object_equal(g, w));
    }
    CU_ASSERT_EQUAL(json_object_array_length(jsonx_get(got, "events")), 3);
    json_object_put(got);
    run_result_release(&res);
    json_object_put(want);
}

static void test_events_run_result_error_matches_fixture(void)
{
    json_object *want = test_shared_json("run_result.error.json"), *got;
    struct run_result res;

    CU_ASSERT_PTR_NOT_NULL_FATAL(want);
    run_result_init(&res);
    buf_append_str(&res.output, "partial text is not reported on failure");
    run_result_fail(&res, "model %s", "exploded");
    run_result_fail(&res, "a later failure does not replace the first");
    got = run_result_to_json(&res);
    CU_ASSERT_TRUE(same_keys(got, want));
    CU_ASSERT_EQUAL(json_object_object_length(got), 2);
    CU_ASSERT_TRUE(json_object_equal(got, want));
    CU_ASSERT_FALSE(json_object_get_boolean(jsonx_get(got, "ok")));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(got, "error")), "model exploded");
    json_object_put(got);
    run_result_release(&res);
    json_object_put(want);
}

/* Streaming records are numbered from 1, the first names the turn, the result comes last. */
static void test_events_records_are_numbered(void)
{
    struct event_stream es;
    struct event_sink sink;
    struct test_sink ts;
    json_object *res = json_object_new_object(), *rec;

    test_sink_init(&ts, 0, &sink);
    event_stream_init(&es, &sink);
    es.turn_id = "turn-7";
    event_emit(&es, event_data_phase("environment_starting"));
    event_emit(&es, event_text("message_delta", "msg-1", "a"));
    event_emit(&es, event_done("end_turn", NULL));
    json_object_object_add(res, "ok", json_object_new_boolean(1));
    CU_ASSERT_EQUAL(event_stream_result(&es, res), 0);
    CU_ASSERT_TRUE(es.result_written);
    CU_ASSERT_EQUAL_FATAL(test_sink_count(&ts), 4);
    for (size_t i = 0; i < 4; i++) {
        rec = json_object_array_get_idx(ts.records, i);
        CU_ASSERT_EQUAL(json_object_get_int64(jsonx_get(rec, "seq")), (int64_t)i + 1);
        CU_ASSERT_EQUAL(jsonx_get(rec, "turnId") != NULL, i == 0);
    }
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(json_object_array_get_idx(ts.records, 0), "turnId")),
                           "turn-7");
    rec = json_object_array_get_idx(ts.records, 3);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(rec, "kind")), "result");
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_path(rec, "result.ok")));
    CU_ASSERT_EQUAL(es.det, 3);
    json_object_put(res);
    event_stream_release(&es);
    test_sink_release(&ts);
}

/* An adopted turn rebuilds the events the dead worker delivered: they are not written again. */
static void test_events_adoption_skips_what_was_delivered(void)
{
    struct event_stream es;
    struct event_sink sink;
    struct test_sink ts;

    test_sink_init(&ts, 0, &sink);
    event_stream_init(&es, &sink);
    es.seq = 10; /* the journal's last record */
    es.det = 2;  /* the turn's own events when its prompt went out */
    es.skip_det = 5;
    for (int i = 0; i < 5; i++)
        event_emit(&es, event_text("message_delta", "msg-1", "x"));
    CU_ASSERT_EQUAL_FATAL(test_sink_count(&ts), 2); /* det 3..5 dropped, 6 and 7 written */
    CU_ASSERT_EQUAL(
        json_object_get_int64(jsonx_get(json_object_array_get_idx(ts.records, 0), "seq")), 11);
    CU_ASSERT_EQUAL(es.seq, 12);
    CU_ASSERT_EQUAL(es.det, 7);
    event_stream_release(&es);
    test_sink_release(&ts);
}

/* A silent stream's keepalive: numbered, transient, not one of the turn's own events. */
static void test_events_keepalive(void)
{
    struct event_stream es;
    struct event_sink sink;
    struct test_sink ts;
    json_object *ev;
    int64_t at;

    test_sink_init(&ts, 0, &sink);
    event_stream_init(&es, &sink);
    CU_ASSERT_EQUAL(event_stream_keepalive_at(&es), 0); /* off */
    es.keepalive_ms = 1000;
    event_emit(&es, event_text("message_delta", "msg-1", "x"));
    at = event_stream_keepalive_at(&es);
    CU_ASSERT_TRUE(at >= es.last_write_ms + 1000 && at <= util_now_ms() + 1000);
    event_stream_keepalive(&es);
    CU_ASSERT_EQUAL_FATAL(test_sink_count(&ts), 2);
    ev = test_sink_event(&ts, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(ev, "type")), "data");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(ev, "name")), "agent-status");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(ev, "data"), "phase")), "working");
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_get(ev, "transient")));
    CU_ASSERT_EQUAL(es.seq, 2);
    CU_ASSERT_EQUAL(es.det, 1);     /* not the turn's own */
    CU_ASSERT_EQUAL(es.nevents, 1); /* run limits do not see it */
    event_stream_release(&es);
    test_sink_release(&ts);
}

/*
 * The numbered records keep the shape Agenta's client reads (kind, and event or result): the
 * golden stream.numbered.ndjson holds one such stream, and ours has the same keys per record.
 */
static void test_events_numbered_stream_matches_the_golden(void)
{
    char path[1024], *text = NULL;
    struct event_stream es;
    struct event_sink sink;
    struct test_sink ts;
    json_object *res = json_object_new_object();
    size_t len = 0, i = 0;
    char *line, *end;

    snprintf(path, sizeof(path), "%s/stream.numbered.ndjson", test_shared_dir());
    CU_ASSERT_EQUAL_FATAL(util_read_file(path, 1 << 20, &text, &len), 0);
    test_sink_init(&ts, 0, &sink);
    event_stream_init(&es, &sink);
    es.turn_id = "turn-golden";
    event_emit(&es, event_data_phase("environment_starting"));
    event_emit(&es, event_text("message_delta", "msg-1", "Hello!"));
    event_stream_keepalive(&es);
    event_emit(&es, event_done("end_turn", "trace-abc"));
    json_object_object_add(res, "ok", json_object_new_boolean(1));
    event_stream_result(&es, res);
    for (line = text; line < text + len && (end = strchr(line, '\n')); line = end + 1, i++) {
        json_object *want, *got = json_object_array_get_idx(ts.records, i);

        *end = '\0';
        want = test_json(line);
        CU_ASSERT_PTR_NOT_NULL_FATAL(got);
        CU_ASSERT_TRUE(same_keys(got, want));
        CU_ASSERT_TRUE(json_object_equal(jsonx_get(got, "seq"), jsonx_get(want, "seq")));
        json_object_put(want);
    }
    CU_ASSERT_EQUAL(i, test_sink_count(&ts));
    free(text);
    json_object_put(res);
    event_stream_release(&es);
    test_sink_release(&ts);
}

CU_TestInfo events_tests[] = {
    {"test_events_record_line_shape", test_events_record_line_shape},
    {"test_events_record_line_escapes", test_events_record_line_escapes},
    {"test_events_stream_streaming_one_line_per_event",
     test_events_stream_streaming_one_line_per_event},
    {"test_events_failing_sink_sets_client_gone", test_events_failing_sink_sets_client_gone},
    {"test_events_collecting_coalesces_blocks", test_events_collecting_coalesces_blocks},
    {"test_events_collecting_take_flushes_open_block",
     test_events_collecting_take_flushes_open_block},
    {"test_events_builders_shape", test_events_builders_shape},
    {"test_events_run_result_ok_matches_fixture", test_events_run_result_ok_matches_fixture},
    {"test_events_run_result_error_matches_fixture", test_events_run_result_error_matches_fixture},
    {"test_events_records_are_numbered", test_events_records_are_numbered},
    {"test_events_adoption_skips_what_was_delivered",
     test_events_adoption_skips_what_was_delivered},
    {"test_events_keepalive", test_events_keepalive},
    {"test_events_numbered_stream_matches_the_golden",
     test_events_numbered_stream_matches_the_golden},
    CU_TEST_INFO_NULL,
};
