/* redact: a run's known-value deny set, against Agenta's golden file. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "agenta/redact.h"
#include "base/jsonx.h"
#include "request/request.h"
#include "suites.h"
#include "suites_platform.h"

static void test_redact_golden_known_values(void)
{
    json_object *g = test_shared_json("redaction.known_value.json"), *secrets, *input, *expected;
    struct redact *rd = redact_new();
    json_object *copy = NULL;

    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rd);
    secrets = jsonx_get(g, "knownSecrets");
    input = jsonx_get(g, "input");
    expected = jsonx_get(g, "expected");
    for (size_t i = 0; i < json_object_array_length(secrets); i++)
        CU_ASSERT_EQUAL(redact_add(rd, json_object_get_string(json_object_array_get_idx(secrets, i))),
                        0);
    CU_ASSERT_EQUAL_FATAL(json_object_deep_copy(input, &copy, NULL), 0);
    CU_ASSERT_TRUE(redact_json(rd, copy) > 0);
    if (!json_object_equal(copy, expected))
        fprintf(stderr, "\n  got:  %s\n  want: %s\n", jsonx_text(copy, NULL),
                jsonx_text(expected, NULL));
    CU_ASSERT_TRUE(json_object_equal(copy, expected));
    json_object_put(copy);
    redact_free(rd);
    json_object_put(g);
}

static char *redacted(struct redact *rd, const char *s)
{
    struct buf out;
    char *ret = NULL;

    buf_init(&out, 1 << 20);
    if (redact_text(rd, s, strlen(s), &out) >= 0)
        ret = strdup(buf_str(&out));
    buf_release(&out);
    return ret;
}

static void test_redact_encoded_forms_and_parts(void)
{
    struct redact *rd = redact_new();
    char *s;

    CU_ASSERT_EQUAL(redact_add(rd, "p@ss word/é"), 0);
    /* raw, encodeURIComponent, base64 */
    s = redacted(rd, "a p@ss word/é b p%40ss%20word%2F%C3%A9 c cEBzcyB3b3JkL8Op d");
    CU_ASSERT_STRING_EQUAL(s, "a [ag:redacted:secret:rd/é] b [ag:redacted:secret:3%A9] c "
                              "[ag:redacted:secret:L8Op] d");
    free(s);
    /* a "user:password" pair: its halves alone, but only as whole words */
    CU_ASSERT_EQUAL(redact_add(rd, "serviceuser:longpassword1"), 0);
    s = redacted(rd, "pw longpassword1. xlongpassword1 longpassword1x");
    CU_ASSERT_STRING_EQUAL(s, "pw [ag:redacted:secret:ord1]. xlongpassword1 longpassword1x");
    free(s);
    /* "<scheme> <token>": the token alone too */
    CU_ASSERT_EQUAL(redact_add(rd, "Bearer tok-abcdefgh"), 0);
    s = redacted(rd, "sent Bearer tok-abcdefgh and later tok-abcdefgh");
    CU_ASSERT_STRING_EQUAL(s, "sent [ag:redacted:secret:efgh] and later [ag:redacted:secret:efgh]");
    free(s);
    redact_free(rd);
}

static void test_redact_ignores_short_and_common_values(void)
{
    struct redact *rd = redact_new();
    char *s;

    CU_ASSERT_EQUAL(redact_add(rd, "abc"), 0);
    CU_ASSERT_EQUAL(redact_add(rd, " TRUE "), 0);
    CU_ASSERT_EQUAL(redact_add(rd, "disabled"), 0);
    CU_ASSERT_EQUAL(redact_add(rd, NULL), 0);
    /* nothing was registered: the text passes unchanged */
    s = redacted(rd, "abc true disabled");
    CU_ASSERT_STRING_EQUAL(s, "abc true disabled");
    free(s);
    redact_free(rd);
}

static void test_redact_collects_the_request_credentials(void)
{
    const char *json =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
        "\"telemetry\":{\"exporters\":{\"otlp\":{\"endpoint\":\"https://o.example\","
        "\"headers\":{\"Authorization\":\"  ApiKey run-credential-1234  \"}}}},"
        "\"toolCallback\":{\"endpoint\":\"https://t.example/tools/call\","
        "\"authorization\":\"Secret callback-credential\"},"
        "\"modelConnection\":{\"provider\":\"openai\",\"deployment\":\"custom\","
        "\"endpoint\":{\"baseUrl\":\"https://m.example/v1\",\"headers\":{\"x-api-key\":"
        "\"header-secret-9876\",\"accept\":\"application/json\"}},\"credentialMode\":\"env\","
        "\"environment\":{\"AWS_REGION\":\"us-east-1\"},"
        "\"credentials\":[{\"binding\":{\"kind\":\"environment\",\"name\":\"OPENAI_API_KEY\"},"
        "\"value\":\"sk-model-secret\",\"usage\":\"opaque_http\"}]}}";
    struct request_limits lim;
    struct run_request req;
    struct redact *rd = redact_new();
    char err[256], cred[256], *s;

    request_limits_default(&lim);
    CU_ASSERT_EQUAL_FATAL(request_parse(json, strlen(json), &lim, &req, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(redact_run_credential(&req, cred, sizeof(cred)), 0);
    CU_ASSERT_STRING_EQUAL(cred, "ApiKey run-credential-1234");
    CU_ASSERT_EQUAL(redact_add_request(rd, &req), 0);
    s = redacted(rd, "ApiKey run-credential-1234|run-credential-1234|Secret callback-credential|"
                     "header-secret-9876|sk-model-secret|us-east-1|application/json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_NULL(strstr(s, "run-credential"));
    CU_ASSERT_PTR_NULL(strstr(s, "callback-credential"));
    CU_ASSERT_PTR_NULL(strstr(s, "header-secret"));
    CU_ASSERT_PTR_NULL(strstr(s, "sk-model-secret"));
    CU_ASSERT_PTR_NULL(strstr(s, "us-east-1")); /* Agenta seeds the model environment too */
    CU_ASSERT_PTR_NOT_NULL(strstr(s, "application/json")); /* not a credential header */
    free(s);
    redact_free(rd);
    run_request_release(&req);
}

/* An MCP server's credential headers and its credential-looking plain headers; the others
 * stay readable. */
static void test_redact_collects_the_mcp_server_credentials(void)
{
    const char *json =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
        "\"toolCallback\":{\"endpoint\":\"https://t.example/tools/call\","
        "\"authorization\":\"Secret callback-credential\"},"
        "\"mcpServers\":[{\"name\":\"docs\",\"connection\":{\"type\":\"http\","
        "\"url\":\"https://mcp.example/mcp\",\"headers\":{\"X-Api-Key\":\"mcp-plain-key-5555\","
        "\"X-Tenant\":\"tenant-visible-1\"},\"credentials\":[{\"binding\":{\"kind\":"
        "\"header\",\"name\":\"X-Session\"},\"value\":\"mcp-secret-7777\"}]}}]}";
    struct request_limits lim;
    struct run_request req;
    struct redact *rd = redact_new();
    char err[256], *s;

    request_limits_default(&lim);
    CU_ASSERT_EQUAL_FATAL(request_parse(json, strlen(json), &lim, &req, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(redact_add_request(rd, &req), 0);
    s = redacted(rd, "Secret callback-credential|mcp-plain-key-5555|mcp-secret-7777|"
                     "tenant-visible-1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_NULL(strstr(s, "callback-credential"));
    CU_ASSERT_PTR_NULL(strstr(s, "mcp-plain-key"));
    CU_ASSERT_PTR_NULL(strstr(s, "mcp-secret"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s, "tenant-visible-1")); /* not a credential header */
    free(s);
    redact_free(rd);
    run_request_release(&req);
}

static void test_redact_caps_are_errors(void)
{
    struct redact *rd = redact_new();
    char *big = malloc(REDACT_VALUE_MAX + 2), value[32];
    struct buf out;
    int r = 0;

    memset(big, 'a', REDACT_VALUE_MAX + 1);
    big[REDACT_VALUE_MAX + 1] = '\0';
    CU_ASSERT_EQUAL(redact_add(rd, big), -E2BIG);
    free(big);
    for (int i = 0; i < REDACT_VALUES_MAX && r == 0; i++) {
        snprintf(value, sizeof(value), "secret-value-%05d", i);
        r = redact_add(rd, value);
    }
    CU_ASSERT_EQUAL(r, -E2BIG);
    /* a text that would outgrow its buffer is refused, not cut */
    buf_init(&out, 20);
    CU_ASSERT_EQUAL(redact_text(rd, "secret-value-00000", 18, &out), -E2BIG);
    CU_ASSERT_EQUAL(out.len, 0);
    buf_release(&out);
    redact_free(rd);
}

struct adder {
    struct redact *rd;
    int n;
};

static void *add_many(void *arg)
{
    struct adder *a = arg;
    char value[48];

    for (int i = 0; i < a->n; i++) {
        snprintf(value, sizeof(value), "refreshed-credential-%d", i);
        redact_add(a->rd, value);
    }
    return NULL;
}

static void test_redact_is_thread_safe(void)
{
    struct redact *rd = redact_new();
    struct adder a = {rd, 50};
    pthread_t t;
    char *s;

    CU_ASSERT_EQUAL(redact_add(rd, "first-credential"), 0);
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, add_many, &a), 0);
    for (int i = 0; i < 200; i++) {
        s = redacted(rd, "uses first-credential");
        CU_ASSERT_STRING_EQUAL(s, "uses [ag:redacted:secret:tial]");
        free(s);
    }
    pthread_join(t, NULL);
    s = redacted(rd, "refreshed-credential-49");
    CU_ASSERT_STRING_EQUAL(s, "[ag:redacted:secret:l-49]");
    free(s);
    redact_free(rd);
}

CU_TestInfo redact_tests[] = {
    {"golden_known_values", test_redact_golden_known_values},
    {"encoded_forms_and_parts", test_redact_encoded_forms_and_parts},
    {"ignores_short_and_common_values", test_redact_ignores_short_and_common_values},
    {"collects_the_request_credentials", test_redact_collects_the_request_credentials},
    {"collects_the_mcp_server_credentials", test_redact_collects_the_mcp_server_credentials},
    {"caps_are_errors", test_redact_caps_are_errors},
    {"is_thread_safe", test_redact_is_thread_safe},
    CU_TEST_INFO_NULL,
};
