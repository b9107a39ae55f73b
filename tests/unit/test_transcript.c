/* transcript: the cold replay text. */
#include <string.h>

#include "request/request.h"
#include "suites.h"
#include "turn/transcript.h"

static int parse(const char *json, struct run_request *req)
{
    struct request_limits lim;
    char err[256];

    request_limits_default(&lim);
    return request_parse(json, strlen(json), &lim, req, err, sizeof(err));
}

static void test_transcript_single_message_is_just_the_text(void)
{
    struct run_request req;
    struct buf out;

    CU_ASSERT_EQUAL_FATAL(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &req),
                          0);
    buf_init(&out, 1 << 20);
    CU_ASSERT_EQUAL(transcript_turn_text(&req, NULL, &out), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&out), "hi");
    buf_release(&out);
    run_request_release(&req);
}

static void test_transcript_replays_history_with_tools(void)
{
    struct run_request req;
    struct buf out;

    CU_ASSERT_EQUAL_FATAL(
        parse("{\"messages\":[{\"role\":\"user\",\"content\":\"list\"},"
              "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"ok\"},"
              "{\"type\":\"tool_call\",\"toolCallId\":\"c1\",\"toolName\":\"bash\","
              "\"input\":{\"command\":\"ls\"}},{\"type\":\"tool_result\",\"toolCallId\":\"c1\","
              "\"output\":\"a b\"}]},{\"role\":\"user\",\"content\":\"next\"}]}",
              &req),
        0);
    buf_init(&out, 1 << 20);
    CU_ASSERT_EQUAL(transcript_turn_text(&req, NULL, &out), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&out),
                           "Conversation so far:\nuser: list\nassistant: ok "
                           "[called bash({\"command\":\"ls\"})] [bash returned: \"a b\"]\n\n"
                           "Continue the conversation. The user now says:\nnext");
    buf_release(&out);
    run_request_release(&req);
}

static void test_transcript_caps_history_from_the_front(void)
{
    struct run_request req;
    struct buf json, out;

    buf_init(&json, 1 << 22);
    buf_append_str(&json, "{\"messages\":[");
    for (int i = 0; i < 400; i++)
        buf_printf(&json, "{\"role\":\"user\",\"content\":\"%0500d\"},", i);
    buf_append_str(&json, "{\"role\":\"user\",\"content\":\"last\"}]}");
    CU_ASSERT_EQUAL_FATAL(parse(buf_str(&json), &req), 0);
    buf_init(&out, 1 << 22);
    CU_ASSERT_EQUAL(transcript_turn_text(&req, NULL, &out), 0);
    CU_ASSERT(out.len < TRANSCRIPT_HISTORY_MAX + 512);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&out), "[earlier messages omitted]"));
    CU_ASSERT(strstr(buf_str(&out), "The user now says:\nlast") != NULL);
    buf_release(&out);
    buf_release(&json);
    run_request_release(&req);
}

static void test_transcript_renders_approval_answers(void)
{
    struct run_request req;
    struct buf out;

    CU_ASSERT_EQUAL_FATAL(
        parse("{\"messages\":[{\"role\":\"user\",\"content\":\"write it\"},{\"role\":\"user\","
              "\"content\":[{\"type\":\"tool_result\",\"toolCallId\":\"w1\",\"toolName\":"
              "\"Write\",\"output\":{\"approved\":true}},{\"type\":\"tool_result\","
              "\"toolCallId\":\"w2\",\"output\":{\"approved\":false}}]}]}",
              &req),
        0);
    buf_init(&out, 1 << 20);
    CU_ASSERT_EQUAL(transcript_turn_text(&req, "CLOSE", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(buf_str(&out), "[user APPROVED Write (call w1); the call has NOT run yet]"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(buf_str(&out), "[user DENIED w2 (call w2); the call was not executed]"));
    CU_ASSERT(out.len >= 5 && strcmp(buf_str(&out) + out.len - 5, "CLOSE") == 0);
    buf_release(&out);
    run_request_release(&req);
}

static void test_transcript_names_attachments_by_file_name(void)
{
    struct run_request req;
    struct buf out;

    CU_ASSERT_EQUAL_FATAL(
        parse("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"attachment\","
              "\"attachmentId\":\"019c471b-5b91-71d2-9d4b-5486013e6e9b\",\"filename\":"
              "\"photo.png\"},{\"type\":\"attachment\",\"uri\":\"s3://b/k\"},{\"type\":"
              "\"attachment\"},{\"type\":\"text\",\"text\":\"look\"}]},"
              "{\"role\":\"assistant\",\"content\":\"seen\"},"
              "{\"role\":\"user\",\"content\":\"next\"}]}",
              &req),
        0);
    buf_init(&out, 1 << 20);
    CU_ASSERT_EQUAL(transcript_turn_text(&req, NULL, &out), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&out),
                           "Conversation so far:\nuser: [attachment: photo.png] "
                           "[attachment: s3://b/k] [attachment: file] look\nassistant: seen\n\n"
                           "Continue the conversation. The user now says:\nnext");
    buf_release(&out);
    run_request_release(&req);
}

CU_TestInfo transcript_tests[] = {
    {"test_transcript_single_message_is_just_the_text",
     test_transcript_single_message_is_just_the_text},
    {"test_transcript_replays_history_with_tools", test_transcript_replays_history_with_tools},
    {"test_transcript_caps_history_from_the_front", test_transcript_caps_history_from_the_front},
    {"test_transcript_renders_approval_answers", test_transcript_renders_approval_answers},
    {"test_transcript_names_attachments_by_file_name",
     test_transcript_names_attachments_by_file_name},
    CU_TEST_INFO_NULL,
};
