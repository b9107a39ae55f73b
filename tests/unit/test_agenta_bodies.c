/* agenta_bodies: the bodies sent to Agenta's API and the answers read back, without a server. */
#include <errno.h>
#include <string.h>

#include "agenta/agenta_bodies.h"
#include "base/jsonx.h"
#include "suites.h"
#include "suites_platform.h"

/* A JSON text compared to o by value. */
static bool json_is(json_object *o, const char *want)
{
    json_object *w = test_json(want);
    bool eq = w && o && json_object_equal(o, w);

    if (!eq)
        fprintf(stderr, "\n  got:  %s\n  want: %s\n", jsonx_text(o, NULL), want);
    json_object_put(w);
    return eq;
}

static void test_agenta_bodies_match_agentas(void)
{
    json_object *rc = test_json(
        "{\"workflow\":{\"artifact\":{\"id\":\"wf_abc\"},\"variant\":{\"id\":\"var_abc\","
        "\"slug\":\"weather-agent\"},\"revision\":{\"id\":\"rev_abc123\",\"version\":\"3\"},"
        "\"is_draft\":false}}");
    json_object *refs = agenta_workflow_reference_list(rc), *o, *args = test_json("{\"p\":1}");
    json_object *params = test_json("{\"agent\":{}}");
    struct agenta_beat b = {.session_id = "s1",
                            .replica_id = "r1",
                            .turn_id = "t1",
                            .is_running = true,
                            .name = "Hello",
                            .references = refs};
    struct agenta_interaction it = {.session_id = "s1",
                                    .turn_id = "t1",
                                    .token = "tok",
                                    .kind = "user_approval",
                                    .tool = "bash",
                                    .args = args,
                                    .tool_call_id = "call-1",
                                    .run_context = rc,
                                    .parameters = params};
    struct agenta_turn turn = {.session_id = "s1",
                               .stream_id = "st",
                               .turn_id = "t1",
                               .turn_index = 2,
                               .harness_kind = "pi",
                               .references = refs};
    const char *tokens[] = {"a", "b"};

    CU_ASSERT_TRUE(json_is(refs, "[{\"id\":\"wf_abc\",\"key\":\"workflow\"},"
                                 "{\"id\":\"var_abc\",\"slug\":\"weather-agent\","
                                 "\"key\":\"workflow_variant\"},"
                                 "{\"id\":\"rev_abc123\",\"version\":\"3\","
                                 "\"key\":\"workflow_revision\"}]"));
    o = agenta_beat_body(&b);
    CU_ASSERT_TRUE(json_is(o, "{\"session_id\":\"s1\",\"replica_id\":\"r1\",\"turn_id\":\"t1\","
                              "\"is_running\":true,\"name\":\"Hello\",\"references\":"
                              "[{\"id\":\"wf_abc\",\"key\":\"workflow\"},"
                              "{\"id\":\"var_abc\",\"slug\":\"weather-agent\","
                              "\"key\":\"workflow_variant\"},"
                              "{\"id\":\"rev_abc123\",\"version\":\"3\","
                              "\"key\":\"workflow_revision\"}]}"));
    json_object_put(o);
    b.turn_id = NULL; /* the ownership claim */
    b.name = NULL;
    b.references = NULL;
    b.is_running = true;
    o = agenta_beat_body(&b);
    CU_ASSERT_TRUE(json_is(o, "{\"session_id\":\"s1\",\"replica_id\":\"r1\",\"is_running\":true}"));
    json_object_put(o);

    o = agenta_interaction_body(&it);
    CU_ASSERT_TRUE(json_is(
        o,
        "{\"session_id\":\"s1\",\"turn_id\":\"t1\",\"token\":\"tok\",\"kind\":\"user_approval\","
        "\"data\":{\"request\":{\"tool\":\"bash\",\"args\":{\"p\":1},\"tool_call_id\":\"call-1\"},"
        "\"references\":{\"workflow\":{\"id\":\"wf_abc\"},\"workflow_variant\":{\"id\":"
        "\"var_abc\",\"slug\":\"weather-agent\"},\"workflow_revision\":{\"id\":\"rev_abc123\","
        "\"version\":\"3\"}},\"parameters\":{\"agent\":{}}},"
        "\"flags\":{\"delivered_in_band\":true}}"));
    json_object_put(o);
    o = agenta_transition_body("s1", "tok", "approved", "call-1");
    CU_ASSERT_TRUE(
        json_is(o, "{\"session_id\":\"s1\",\"token\":\"tok\",\"status\":\"resolved\","
                   "\"resolution\":{\"verdict\":\"approved\",\"tool_call_id\":\"call-1\"}}"));
    json_object_put(o);
    o = agenta_transition_body("s1", "tok", NULL, NULL);
    CU_ASSERT_TRUE(json_is(o, "{\"session_id\":\"s1\",\"token\":\"tok\",\"status\":\"resolved\"}"));
    json_object_put(o);
    o = agenta_cancel_stale_body("s1", "t1", tokens, 2);
    CU_ASSERT_TRUE(
        json_is(o, "{\"session_id\":\"s1\",\"turn_id\":\"t1\",\"tokens\":[\"a\",\"b\"]}"));
    json_object_put(o);
    o = agenta_cancel_stale_body("s1", "t1", NULL, 0);
    CU_ASSERT_TRUE(json_is(o, "{\"session_id\":\"s1\",\"turn_id\":\"t1\"}"));
    json_object_put(o);
    o = agenta_turn_body(&turn);
    CU_ASSERT_TRUE(json_is(o, "{\"session_id\":\"s1\",\"stream_id\":\"st\",\"turn_id\":\"t1\","
                              "\"turn_index\":2,\"harness_kind\":\"pi\",\"references\":"
                              "[{\"id\":\"wf_abc\",\"key\":\"workflow\"},"
                              "{\"id\":\"var_abc\",\"slug\":\"weather-agent\","
                              "\"key\":\"workflow_variant\"},"
                              "{\"id\":\"rev_abc123\",\"version\":\"3\","
                              "\"key\":\"workflow_revision\"}]}"));
    json_object_put(o);
    o = agenta_turn_complete_body("s1", 2, "acp-1", "2026-11-30T10:00:00.000Z");
    CU_ASSERT_TRUE(json_is(o, "{\"session_id\":\"s1\",\"turn_index\":2,\"agent_session_id\":"
                              "\"acp-1\",\"end_time\":\"2026-11-30T10:00:00.000Z\"}"));
    json_object_put(o);
    o = agenta_turn_query_body("s1", NULL);
    CU_ASSERT_TRUE(json_is(o, "{\"query\":{\"session_id\":\"s1\"},\"windowing\":{\"limit\":1,"
                              "\"order\":\"descending\"}}"));
    json_object_put(o);
    o = agenta_attachments_reference_body("s1", tokens, 2);
    CU_ASSERT_TRUE(json_is(o, "{\"session_id\":\"s1\",\"attachment_ids\":[\"a\",\"b\"]}"));
    json_object_put(o);
    CU_ASSERT_PTR_NULL(agenta_workflow_reference_list(NULL));
    json_object_put(refs);
    json_object_put(rc);
    json_object_put(args);
    json_object_put(params);
}

static void test_agenta_bodies_record(void)
{
    json_object *ev = test_json("{\"type\":\"tool_result\",\"id\":\"c1\",\"output\":\"x\"}"), *o;
    struct agenta_record rec = {.session_id = "s1",
                                .record_id = "rid",
                                .record_index = 3,
                                .timestamp = "2026-11-30T10:00:00.000Z",
                                .source = "agent",
                                .attributes = ev,
                                .turn_id = "t1",
                                .span_id = ""};
    char stamp[32];

    o = agenta_record_body(&rec);
    CU_ASSERT_TRUE(json_is(o, "{\"session_id\":\"s1\",\"record_id\":\"rid\",\"record_index\":3,"
                              "\"timestamp\":\"2026-11-30T10:00:00.000Z\",\"record_source\":"
                              "\"agent\",\"record_type\":\"tool_result\",\"attributes\":"
                              "{\"type\":\"tool_result\",\"id\":\"c1\",\"output\":\"x\"},"
                              "\"turn_id\":\"t1\"}"));
    json_object_put(o);
    json_object_put(ev);
    agenta_iso_time(1764496800123, stamp);
    CU_ASSERT_STRING_EQUAL(stamp, "2025-11-30T10:00:00.123Z");
}

static void test_agenta_bodies_parses_answers(void)
{
    struct agenta_beat_reply rep;
    struct agenta_turn_row row;
    json_object *o;
    const char *a = "{\"stream\":{\"id\":\"st-1\"},\"is_current_turn\":true,\"replica_id\":\"r\"}";
    const char *refused = "{\"stream\":{\"id\":\"st-1\"},\"is_current_turn\":false}";
    const char *explicit_no = "{\"is_current_turn\":true,\"admitted\":false}";

    CU_ASSERT_EQUAL_FATAL(agenta_beat_reply_parse(a, strlen(a), &rep), 0);
    CU_ASSERT_TRUE(rep.admitted);
    CU_ASSERT_TRUE(rep.is_current_turn);
    CU_ASSERT_STRING_EQUAL(rep.stream_id, "st-1");
    CU_ASSERT_STRING_EQUAL(rep.replica_id, "r");
    CU_ASSERT_EQUAL_FATAL(agenta_beat_reply_parse(refused, strlen(refused), &rep), 0);
    CU_ASSERT_FALSE(rep.admitted);
    CU_ASSERT_FALSE(rep.is_current_turn);
    CU_ASSERT_EQUAL_FATAL(agenta_beat_reply_parse(explicit_no, strlen(explicit_no), &rep), 0);
    CU_ASSERT_FALSE(rep.admitted);
    CU_ASSERT_EQUAL_FATAL(agenta_beat_reply_parse("{}", 2, &rep), 0);
    CU_ASSERT_TRUE(rep.admitted);
    CU_ASSERT_STRING_EQUAL(rep.stream_id, "");
    CU_ASSERT_EQUAL(agenta_beat_reply_parse("[]", 2, &rep), -EBADMSG);
    CU_ASSERT_EQUAL(agenta_beat_reply_parse("nope", 4, &rep), -EBADMSG);

    o = test_json("{\"count\":1,\"turns\":[{\"turn_id\":\"t1\",\"harness_kind\":\"pi\","
                  "\"agent_session_id\":\"acp\",\"turn_index\":4,\"end_time\":\"2026\"}]}");
    CU_ASSERT_EQUAL_FATAL(agenta_turn_query_parse(o, &row), 0);
    CU_ASSERT_TRUE(row.found);
    CU_ASSERT_TRUE(row.ended);
    CU_ASSERT_EQUAL(row.turn_index, 4);
    CU_ASSERT_STRING_EQUAL(row.agent_session_id, "acp");
    json_object_put(o);
    o = test_json("{\"turns\":[]}");
    CU_ASSERT_EQUAL_FATAL(agenta_turn_query_parse(o, &row), 0);
    CU_ASSERT_FALSE(row.found);
    CU_ASSERT_EQUAL(row.turn_index, -1);
    json_object_put(o);
}

CU_TestInfo agenta_bodies_tests[] = {
    {"match_agentas", test_agenta_bodies_match_agentas},
    {"record", test_agenta_bodies_record},
    {"parses_answers", test_agenta_bodies_parses_answers},
    CU_TEST_INFO_NULL,
};
