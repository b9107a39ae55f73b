/*
 * gateway_usage — the provider's usage read from answers as they pass, in any split.
 */
#include <string.h>

#include "gateway/gateway_usage.h"
#include "suites.h"

/* Feed text in pieces of n bytes; the number of pieces that made the usage final. */
static int feed(struct gateway_usage *u, const char *text, size_t n)
{
    int finals = 0;

    for (size_t i = 0; i < strlen(text); i += n)
        finals += gateway_usage_feed(u, text + i, strlen(text) - i < n ? strlen(text) - i : n);
    gateway_usage_finish(u);
    return finals;
}

static const char chat_stream[] =
    "data: {\"model\":\"m1\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":7,"
    "\"total_tokens\":37,\"prompt_tokens_details\":{\"cached_tokens\":20}}}\n\n"
    "data: [DONE]\n\n";

static void test_gateway_usage_chat_stream_any_split(void)
{
    for (size_t n = 1; n <= sizeof(chat_stream); n++) {
        struct gateway_usage u;

        gateway_usage_init(&u, GATEWAY_API_CHAT, true);
        CU_ASSERT_EQUAL(feed(&u, chat_stream, n), 1);
        CU_ASSERT_TRUE(u.counts.known);
        CU_ASSERT_EQUAL(u.counts.input, 30);
        CU_ASSERT_EQUAL(u.counts.output, 7);
        CU_ASSERT_EQUAL(u.counts.total, 37);
        CU_ASSERT_EQUAL(u.counts.cache_read, 20);
        CU_ASSERT_STRING_EQUAL(u.model, "m1");
        gateway_usage_release(&u);
    }
}

static void test_gateway_usage_anthropic_stream(void)
{
    const char *s =
        "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"c\","
        "\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":5,"
        "\"cache_creation_input_tokens\":2,\"output_tokens\":1}}}\r\n\r\n"
        "event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\"}\r\n\r\n"
        "event: message_delta\r\ndata: {\"type\":\"message_delta\",\"usage\":"
        "{\"output_tokens\":9}}\r\n\r\nevent: message_stop\r\ndata: {\"type\":\"message_stop\"}"
        "\r\n\r\n";
    struct gateway_usage u;

    gateway_usage_init(&u, GATEWAY_API_MESSAGES, true);
    CU_ASSERT_EQUAL(feed(&u, s, 7), 1);
    CU_ASSERT_EQUAL(u.counts.input, 17);
    CU_ASSERT_EQUAL(u.counts.cache_read, 5);
    CU_ASSERT_EQUAL(u.counts.cache_write, 2);
    CU_ASSERT_EQUAL(u.counts.output, 9);
    CU_ASSERT_EQUAL(u.counts.total, 26);
    gateway_usage_release(&u);
}

static void test_gateway_usage_responses_and_json_bodies(void)
{
    const char *s = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text"
                    ".delta\",\"delta\":\"x\"}\n\nevent: response.completed\ndata: {\"type\":"
                    "\"response.completed\",\"response\":{\"model\":\"g\",\"usage\":{"
                    "\"input_tokens\":4,\"output_tokens\":3,\"total_tokens\":7}}}\n\n";
    const char *body = "{\"id\":\"x\",\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":2}}";
    struct gateway_usage u;

    gateway_usage_init(&u, GATEWAY_API_RESPONSES, true);
    CU_ASSERT_EQUAL(feed(&u, s, 5), 1);
    CU_ASSERT_EQUAL(u.counts.input, 4);
    CU_ASSERT_EQUAL(u.counts.total, 7);
    gateway_usage_release(&u);
    gateway_usage_init(&u, GATEWAY_API_CHAT, false);
    CU_ASSERT_EQUAL(feed(&u, body, 3), 0);
    CU_ASSERT_TRUE(u.counts.known);
    CU_ASSERT_EQUAL(u.counts.input, 11);
    CU_ASSERT_EQUAL(u.counts.total, 13);
    gateway_usage_release(&u);
    /* garbage: nothing known, nothing crashes */
    gateway_usage_init(&u, GATEWAY_API_MESSAGES, true);
    feed(&u, "data: {\"type\":\"message_delta\",\"usage\":\"x\"\n\ndata: [1,2\n\n", 4);
    CU_ASSERT_FALSE(u.counts.known);
    gateway_usage_release(&u);
}

static void test_gateway_usage_gemini(void)
{
    const char *sse = "data: {\"candidates\":[],\"usageMetadata\":{\"promptTokenCount\":9,"
                      "\"candidatesTokenCount\":1}}\r\n\r\ndata: {\"usageMetadata\":{"
                      "\"promptTokenCount\":9,\"candidatesTokenCount\":4,\"thoughtsTokenCount\":2,"
                      "\"totalTokenCount\":15},\"modelVersion\":\"g\"}\r\n\r\n";
    const char *array = "[{\"usageMetadata\":{\"promptTokenCount\":3}},{\"usageMetadata\":{"
                        "\"promptTokenCount\":3,\"candidatesTokenCount\":5}}]";
    const char *path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";
    struct gateway_usage u;

    CU_ASSERT_EQUAL(gateway_api_of_path(path, strlen(path)), GATEWAY_API_GEMINI);
    gateway_usage_init(&u, GATEWAY_API_GEMINI, true);
    CU_ASSERT_EQUAL(feed(&u, sse, 11), 0); /* cumulative: final only at the end */
    CU_ASSERT_TRUE(u.final);
    CU_ASSERT_EQUAL(u.counts.input, 9);
    CU_ASSERT_EQUAL(u.counts.output, 6);
    CU_ASSERT_EQUAL(u.counts.total, 15);
    gateway_usage_release(&u);
    gateway_usage_init(&u, GATEWAY_API_GEMINI, false);
    feed(&u, array, 4);
    CU_ASSERT_EQUAL(u.counts.input, 3);
    CU_ASSERT_EQUAL(u.counts.output, 5);
    CU_ASSERT_EQUAL(u.counts.total, 8);
    gateway_usage_release(&u);
}

static void test_gateway_usage_api_of_path(void)
{
    const char *p = "/openai/v1/chat/completions";

    CU_ASSERT_EQUAL(gateway_api_of_path(p, strlen(p)), GATEWAY_API_CHAT);
    CU_ASSERT_EQUAL(gateway_api_of_path("/v1/responses", 13), GATEWAY_API_RESPONSES);
    CU_ASSERT_EQUAL(gateway_api_of_path("/v1/messages", 12), GATEWAY_API_MESSAGES);
    CU_ASSERT_EQUAL(gateway_api_of_path("/v1/messages/count_tokens", 25), GATEWAY_API_OTHER);
    CU_ASSERT_EQUAL(gateway_api_of_path("/v1/models", 10), GATEWAY_API_OTHER);
}

CU_TestInfo gateway_usage_tests[] = {
    {"test_gateway_usage_chat_stream_any_split", test_gateway_usage_chat_stream_any_split},
    {"test_gateway_usage_anthropic_stream", test_gateway_usage_anthropic_stream},
    {"test_gateway_usage_responses_and_json_bodies", test_gateway_usage_responses_and_json_bodies},
    {"test_gateway_usage_gemini", test_gateway_usage_gemini},
    {"test_gateway_usage_api_of_path", test_gateway_usage_api_of_path},
    CU_TEST_INFO_NULL,
};
