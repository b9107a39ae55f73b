/* reconstruct: the history rebuilt from a session's record log. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "agenta/reconstruct.h"
#include "agenta/records.h"
#include "agenta/records_incomplete.h"
#include "base/jsonx.h"
#include "base/util.h"
#include "fake_http.h"
#include "suites.h"
#include "suites_platform.h"
#include "turn/transcript.h"

/* Two earlier turns and the current one (t3), as /sessions/records/query returns them. */
static const char *const LOG =
    "[{\"record_source\":\"user\",\"record_type\":\"message\",\"turn_id\":\"t1\","
    "\"record_index\":0,\"attributes\":{\"type\":\"message\",\"text\":\"list the files\","
    "\"attachments\":[]}},"
    "{\"record_source\":\"agent\",\"turn_id\":\"t1\",\"attributes\":{\"type\":\"thought\","
    "\"text\":\"hmm\"}},"
    "{\"record_source\":\"agent\",\"turn_id\":\"t1\",\"attributes\":{\"type\":\"message\","
    "\"text\":\"Sure.\"}},"
    "{\"record_source\":\"agent\",\"turn_id\":\"t1\",\"attributes\":{\"type\":\"tool_call\","
    "\"id\":\"c1\",\"name\":\"bash\",\"input\":{\"command\":\"ls\"}}},"
    "{\"record_source\":\"agent\",\"turn_id\":\"t1\",\"attributes\":{\"type\":\"tool_result\","
    "\"id\":\"c1\",\"output\":\"a b\",\"isError\":false}},"
    "{\"record_source\":\"agent\",\"turn_id\":\"t1\",\"attributes\":{\"type\":"
    "\"interaction_request\",\"id\":\"c1\",\"kind\":\"user_approval\",\"payload\":{}}},"
    "{\"record_source\":\"agent\",\"turn_id\":\"t1\",\"attributes\":{\"type\":\"message\","
    "\"text\":\"Two files.\"}},"
    "{\"record_source\":\"agent\",\"turn_id\":\"t1\",\"attributes\":{\"type\":\"usage\","
    "\"input\":1}},"
    "{\"record_source\":\"agent\",\"turn_id\":\"t1\",\"attributes\":{\"type\":\"done\"}},"
    "{\"record_source\":\"user\",\"turn_id\":\"t2\",\"attributes\":{\"type\":\"message\","
    "\"text\":\"and now?\",\"attachments\":[{\"attachmentId\":\"a1\",\"filename\":\"x.png\","
    "\"mediaType\":\"image/png\",\"size\":3}]}},"
    "{\"record_source\":\"agent\",\"turn_id\":\"t2\",\"attributes\":{\"type\":\"message\","
    "\"text\":\"Hello\"}},"
    "{\"record_source\":\"agent\",\"turn_id\":\"t2\",\"attributes\":{\"type\":\"message\","
    "\"text\":\" world\"}},"
    "{\"record_source\":\"agent\",\"turn_id\":\"t2\",\"attributes\":{\"type\":\"error\","
    "\"message\":\"boom\"}},"
    "{\"record_source\":\"user\",\"turn_id\":\"t3\",\"attributes\":{\"type\":\"message\","
    "\"text\":\"current\",\"attachments\":[]}},"
    "{\"bogus\":1},"
    "{\"record_source\":\"agent\",\"attributes\":{\"type\":\"tool_call\",\"name\":\"noid\"}}]";

static const char *const REBUILT =
    "[{\"role\":\"user\",\"content\":\"list the files\"},"
    "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Sure.\"},"
    "{\"type\":\"tool_call\",\"toolCallId\":\"c1\",\"toolName\":\"bash\",\"input\":"
    "{\"command\":\"ls\"}},{\"type\":\"tool_result\",\"toolCallId\":\"c1\",\"toolName\":"
    "\"bash\",\"output\":\"a b\",\"isError\":false},{\"type\":\"text\",\"text\":"
    "\"Two files.\"}]},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"and now?\"},"
    "{\"type\":\"attachment\",\"attachmentId\":\"a1\",\"filename\":\"x.png\",\"mimeType\":"
    "\"image/png\",\"size\":3}]},"
    "{\"role\":\"assistant\",\"content\":\"Hello world[error: boom]\"}]";

static int parse(const char *json, struct run_request *req)
{
    struct request_limits lim;
    char err[256];

    request_limits_default(&lim);
    return request_parse(json, strlen(json), &lim, req, err, sizeof(err));
}

static void test_reconstruct_folds_records_like_agenta(void)
{
    json_object *log = test_json(LOG);
    struct reconstruct_history h;

    CU_ASSERT_PTR_NOT_NULL_FATAL(log);
    CU_ASSERT_EQUAL_FATAL(reconstruct_from_records(log, "t3", &h), 0);
    CU_ASSERT_TRUE(test_json_is(h.messages, REBUILT));
    CU_ASSERT_EQUAL(h.nrecords, 16);
    CU_ASSERT_EQUAL(h.nprior, 15);
    reconstruct_history_release(&h);
    /* without a current turn the current user message is history too */
    CU_ASSERT_EQUAL_FATAL(reconstruct_from_records(log, NULL, &h), 0);
    CU_ASSERT_EQUAL(json_object_array_length(h.messages), 5);
    reconstruct_history_release(&h);
    /* nothing at all */
    CU_ASSERT_EQUAL_FATAL(reconstruct_from_records(NULL, "t3", &h), 0);
    CU_ASSERT_TRUE(test_json_is(h.messages, "[]"));
    reconstruct_history_release(&h);
    json_object_put(log);
}

static void test_reconstruct_splices_into_the_cold_replay(void)
{
    json_object *log = test_json(LOG);
    struct reconstruct_history h;
    struct request_limits lim;
    struct run_request req;
    struct buf text;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(
        parse("{\"sessionId\":\"s1\",\"projectId\":\"p1\",\"turnId\":\"t3\",\"messages\":"
              "[{\"role\":\"user\",\"content\":\"current\"}]}",
              &req),
        0);
    CU_ASSERT_TRUE(reconstruct_minimal_history(&req));
    CU_ASSERT_EQUAL_FATAL(reconstruct_from_records(log, req.turn_id, &h), 0);
    request_limits_default(&lim);
    CU_ASSERT_EQUAL_FATAL(reconstruct_splice(&h, &lim, &req, err, sizeof(err)), 0);
    reconstruct_history_release(&h);
    json_object_put(log);
    CU_ASSERT_EQUAL(req.nmessages, 5);
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.turn_id), "t3");
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.session_id), "s1");
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.project_id), "p1");
    CU_ASSERT_FALSE(reconstruct_minimal_history(&req));
    buf_init(&text, 1 << 20);
    CU_ASSERT_EQUAL(transcript_turn_text(&req, NULL, &text), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&text),
                           "Conversation so far:\n"
                           "user: list the files\n"
                           "assistant: Sure. [called bash({\"command\":\"ls\"})] "
                           "[bash returned: \"a b\"] Two files.\n"
                           "user: and now? [attachment: x.png]\n"
                           "assistant: Hello world[error: boom]\n\n"
                           "Continue the conversation. The user now says:\ncurrent");
    buf_release(&text);
    run_request_release(&req);
}

static void test_reconstruct_splice_keeps_a_minted_turn_id_and_the_caps(void)
{
    json_object *log = test_json(LOG);
    struct reconstruct_history h;
    struct request_limits lim;
    struct run_request req;
    char minted[64], err[256];

    CU_ASSERT_EQUAL_FATAL(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"current\"}]}",
                                &req),
                          0);
    snprintf(minted, sizeof(minted), "%s", req.turn_id);
    CU_ASSERT_EQUAL_FATAL(reconstruct_from_records(log, "t3", &h), 0);
    request_limits_default(&lim);
    lim.max_messages = 3; /* the oldest rebuilt messages go first */
    CU_ASSERT_EQUAL_FATAL(reconstruct_splice(&h, &lim, &req, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(req.nmessages, 3);
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.turn_id), minted);
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.messages[0].role), "user");
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.messages[2].blocks[0].text), "current");
    reconstruct_history_release(&h);
    json_object_put(log);
    run_request_release(&req);
}

static void test_reconstruct_cuts_what_the_parser_would_refuse(void)
{
    struct reconstruct_history h;
    struct request_limits lim;
    struct run_request req;
    struct buf log, deep;
    char err[256];
    size_t n;

    /* a 2 MiB message and a tool input nested 100 deep */
    buf_init(&log, 8u << 20);
    buf_init(&deep, 1 << 20);
    for (int i = 0; i < 100; i++)
        buf_append_str(&deep, "{\"a\":");
    buf_append_str(&deep, "1");
    for (int i = 0; i < 100; i++)
        buf_append_char(&deep, '}');
    buf_append_str(&log, "[{\"record_source\":\"user\",\"attributes\":{\"type\":\"message\","
                         "\"text\":\"");
    for (size_t i = 0; i < 2u << 20; i++)
        buf_append_char(&log, i % 3 == 0 ? 'x' : 'y');
    buf_printf(&log, "\"}},{\"record_source\":\"agent\",\"attributes\":{\"type\":\"tool_call\","
                     "\"id\":\"c\\u00001\",\"name\":\"t\",\"input\":%s}},"
                     "{\"record_source\":\"agent\",\"attributes\":{\"type\":\"error\","
                     "\"message\":\"nul\\u0000byte\"}}]",
               deep.data);
    {
        json_object *o = NULL;

        CU_ASSERT_EQUAL_FATAL(jsonx_parse(log.data, log.len, 256, &o, err, sizeof(err)), 0);
        CU_ASSERT_EQUAL_FATAL(reconstruct_from_records(o, NULL, &h), 0);
        json_object_put(o);
    }
    n = (size_t)json_object_get_string_len(
        jsonx_get(json_object_array_get_idx(h.messages, 0), "content"));
    CU_ASSERT_TRUE(n <= RECONSTRUCT_STRING_MAX);
    CU_ASSERT_PTR_NOT_NULL(strstr(json_object_get_string(jsonx_get(
                                      json_object_array_get_idx(h.messages, 0), "content")),
                                  "[... cut"));
    CU_ASSERT_EQUAL_FATAL(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"now\"}]}", &req),
                          0);
    request_limits_default(&lim);
    CU_ASSERT_EQUAL(reconstruct_splice(&h, &lim, &req, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(req.nmessages, 3);
    /* NUL bytes (which the parser refuses) are dropped */
    CU_ASSERT_EQUAL_FATAL(req.messages[1].nblocks, 2);
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.messages[1].blocks[0].tool_call_id), "c1");
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.messages[1].blocks[1].text), "[error: nulbyte]");
    run_request_release(&req);
    reconstruct_history_release(&h);
    buf_release(&log);
    buf_release(&deep);
}

static void test_reconstruct_request_shapes(void)
{
    struct run_request req;

    CU_ASSERT_EQUAL_FATAL(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &req),
                          0);
    CU_ASSERT_TRUE(reconstruct_minimal_history(&req));
    CU_ASSERT_FALSE(reconstruct_approval_reply_only(&req));
    run_request_release(&req);
    CU_ASSERT_EQUAL_FATAL(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
                                "{\"role\":\"assistant\",\"content\":\"yo\"},"
                                "{\"role\":\"user\",\"content\":\"more\"}]}",
                                &req),
                          0);
    CU_ASSERT_FALSE(reconstruct_minimal_history(&req));
    run_request_release(&req);
    /* an out-of-band approval reply: the envelope alone */
    CU_ASSERT_EQUAL_FATAL(
        parse("{\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_call\","
              "\"toolCallId\":\"c1\",\"toolName\":\"bash\"}]},{\"role\":\"user\",\"content\":"
              "[{\"type\":\"tool_result\",\"toolCallId\":\"c1\",\"output\":{\"approved\":true}}]}]}",
              &req),
        0);
    CU_ASSERT_TRUE(reconstruct_approval_reply_only(&req));
    CU_ASSERT_FALSE(reconstruct_minimal_history(&req));
    run_request_release(&req);
    /* the playground's approval reply carries the transcript: not this shape */
    CU_ASSERT_EQUAL_FATAL(
        parse("{\"messages\":[{\"role\":\"user\",\"content\":\"edit it\"},{\"role\":"
              "\"assistant\",\"content\":[{\"type\":\"tool_call\",\"toolCallId\":\"c1\","
              "\"toolName\":\"edit\"}]},{\"role\":\"user\",\"content\":[{\"type\":"
              "\"tool_result\",\"toolCallId\":\"c1\",\"output\":{\"approved\":false}}]}]}",
              &req),
        0);
    CU_ASSERT_FALSE(reconstruct_approval_reply_only(&req));
    run_request_release(&req);
    /* a client tool's result is no approval */
    CU_ASSERT_EQUAL_FATAL(
        parse("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
              "\"toolCallId\":\"c1\",\"output\":{\"temp\":20}}]}]}",
              &req),
        0);
    CU_ASSERT_FALSE(reconstruct_approval_reply_only(&req));
    run_request_release(&req);
}

struct log_script {
    int status;
    const char *records; /* the "records" array */
};

static void answer_log(void *ctx, size_t n, const struct fake_request *req,
                       struct fake_response *resp)
{
    const struct log_script *s = ctx;
    size_t len;

    (void)n;
    (void)req;
    if (s->status) {
        resp->status = s->status;
        return;
    }
    len = strlen(s->records) + 32;
    resp->body = malloc(len);
    snprintf(resp->body, len, "{\"count\":1,\"records\":%s}", s->records);
    resp->body_len = strlen(resp->body);
}

static void test_reconstruct_fetch_succeeds_or_fails_clearly(void)
{
    struct log_script s = {.records = LOG};
    struct fake_http *f = fake_http_start(answer_log, &s);
    struct reconstruct_history h;
    struct agenta_config cfg;
    struct agenta_api *api;
    json_object *body;
    char err[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL_FATAL(test_agenta_config(fake_http_url(f), &cfg), 0);
    CU_ASSERT_EQUAL_FATAL(agenta_api_new(&cfg, "Access tok-123", &api), 0);

    CU_ASSERT_EQUAL_FATAL(reconstruct_fetch(api, "p1:s1", "s1", "t3", false, &h, err,
                                            sizeof(err)), 0);
    CU_ASSERT_TRUE(test_json_is(h.messages, REBUILT));
    reconstruct_history_release(&h);
    body = fake_http_json(f, AGENTA_PATH_RECORDS_QUERY, 0);
    CU_ASSERT_TRUE(test_json_is(body, "{\"session_id\":\"s1\"}"));
    json_object_put(body);

    /* a first turn: the log holds only this turn, nothing to rebuild, no error */
    s.records = "[{\"record_source\":\"user\",\"turn_id\":\"t1\",\"attributes\":{\"type\":"
                "\"message\",\"text\":\"hi\"}}]";
    CU_ASSERT_EQUAL_FATAL(reconstruct_fetch(api, "p1:s1", "s1", "t1", false, &h, err,
                                            sizeof(err)), 0);
    CU_ASSERT_EQUAL(json_object_array_length(h.messages), 0);
    reconstruct_history_release(&h);
    /* ... but an approval reply then has no task at all */
    CU_ASSERT_EQUAL(reconstruct_fetch(api, "p1:s1", "s1", "t1", true, &h, err, sizeof(err)),
                    -ENOENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot resume an approval reply"));

    /* an unreadable log fails the turn */
    s.status = 500;
    CU_ASSERT_EQUAL(reconstruct_fetch(api, "p1:s1", "s1", "t3", false, &h, err, sizeof(err)),
                    -EREMOTEIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "session s1 record log is unreadable; cannot rebuild "
                                       "the conversation"));
    CU_ASSERT_PTR_NULL(strstr(err, "tok-123"));

    /* a log with a hole fails before asking */
    s.status = 0;
    records_incomplete_note("p1:s-hole");
    CU_ASSERT_EQUAL(reconstruct_fetch(api, "p1:s-hole", "s-hole", "t3", false, &h, err,
                                      sizeof(err)), -ENOTRECOVERABLE);
    CU_ASSERT_STRING_EQUAL(err, "session s-hole lost a durable record; refusing to rebuild an "
                                "incomplete conversation");
    CU_ASSERT_EQUAL(fake_http_count(f), 4);
    agenta_api_free(api);
    fake_http_stop(f);
}

CU_TestInfo reconstruct_tests[] = {
    {"folds_records_like_agenta", test_reconstruct_folds_records_like_agenta},
    {"splices_into_the_cold_replay", test_reconstruct_splices_into_the_cold_replay},
    {"splice_keeps_a_minted_turn_id_and_the_caps",
     test_reconstruct_splice_keeps_a_minted_turn_id_and_the_caps},
    {"cuts_what_the_parser_would_refuse", test_reconstruct_cuts_what_the_parser_would_refuse},
    {"request_shapes", test_reconstruct_request_shapes},
    {"fetch_succeeds_or_fails_clearly", test_reconstruct_fetch_succeeds_or_fails_clearly},
    CU_TEST_INFO_NULL,
};
