/*
 * gateway_route — where a gateway may send a call, and the headers it sends it with.
 */
#include <errno.h>
#include <string.h>

#include "gateway/gateway_route.h"
#include "suites.h"

static struct gateway_route *route(const char *upstream, enum gateway_auth auth,
                                   json_object *models)
{
    const char *names[] = {"X-Org"}, *values[] = {"org-1"};
    struct gateway_route_spec s = {.upstream = upstream,
                                   .credential = "sk-real-123",
                                   .auth = auth,
                                   .header_names = names,
                                   .header_values = values,
                                   .nheaders = 1,
                                   .models = models};
    json_object *o = gateway_route_encode(&s);
    struct gateway_route *r = NULL;
    char err[160];

    CU_ASSERT_EQUAL(gateway_route_decode(o, &r, err, sizeof(err)), 0);
    json_object_put(o);
    return r;
}

static int check(const struct gateway_route *r, const char *method, const char *target,
                 const char *model)
{
    char why[320];

    return gateway_route_check(r, method, target, strlen(target), model, why, sizeof(why));
}

static void test_gateway_route_paths(void)
{
    struct gateway_route *r =
        route("https://api.example.com/openai/v1/", GATEWAY_AUTH_MIRROR, NULL);
    char base[64];

    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_STRING_EQUAL(r->origin, "https://api.example.com");
    CU_ASSERT_STRING_EQUAL(r->base_path, "/openai/v1");
    CU_ASSERT_EQUAL(check(r, "POST", "/openai/v1/chat/completions", "m"), 0);
    CU_ASSERT_EQUAL(check(r, "GET", "/openai/v1/models?x=1", NULL), 0);
    CU_ASSERT_EQUAL(check(r, "POST", "/openai/v1", "m"), 0);
    CU_ASSERT_EQUAL(check(r, "DELETE", "/openai/v1/files", NULL), 405);
    CU_ASSERT_EQUAL(check(r, "POST", "/openai/v10/chat", NULL), 403);
    CU_ASSERT_EQUAL(check(r, "POST", "/other/v1/chat", NULL), 403);
    CU_ASSERT_EQUAL(check(r, "POST", "/openai/v1/../../admin", NULL), 403);
    CU_ASSERT_EQUAL(check(r, "POST", "/openai/v1/%2e%2e/admin", NULL), 403);
    CU_ASSERT_EQUAL(check(r, "POST", "/openai/v1/a%2Fb", NULL), 403);
    CU_ASSERT_EQUAL(check(r, "POST", "/openai/v1//x", NULL), 403);
    CU_ASSERT_EQUAL(check(r, "POST", "http://evil.example/openai/v1/x", NULL), 403);
    gateway_route_free(r);
    CU_ASSERT_EQUAL(gateway_route_base_path("http://h:8080", base, sizeof(base)), 0);
    CU_ASSERT_STRING_EQUAL(base, "");
    CU_ASSERT_EQUAL(gateway_route_base_path("https://h/x?api-version=1", base, sizeof(base)),
                    -EINVAL);
    CU_ASSERT_EQUAL(gateway_route_base_path("https://u:p@h/x", base, sizeof(base)), -EINVAL);
    CU_ASSERT_EQUAL(gateway_route_base_path("ftp://h/x", base, sizeof(base)), -EINVAL);
}

static void test_gateway_route_models(void)
{
    json_object *m = json_tokener_parse("[\"fake-model\"]");
    struct gateway_route *r = route("http://127.0.0.1:9/v1", GATEWAY_AUTH_MIRROR, m);

    CU_ASSERT_EQUAL(check(r, "POST", "/v1/chat/completions", "fake-model"), 0);
    CU_ASSERT_EQUAL(check(r, "POST", "/v1/chat/completions", "gpt-x"), 403);
    CU_ASSERT_EQUAL(check(r, "POST", "/v1/chat/completions", NULL), 403);
    gateway_route_free(r);
    json_object_put(m);
}

/* The request's head as the gateway parsed it, then the upstream header lines. */
static size_t upstream(const struct gateway_route *r, const char *head, struct buf *lines)
{
    struct gateway_http_request req;
    char err[160];
    size_t n = 0;

    CU_ASSERT_EQUAL_FATAL(gateway_http_parse(head, strlen(head), &req, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(gateway_route_headers(r, &req, lines, 64, &n), 0);
    return n;
}

static bool has_line(const struct buf *lines, size_t n, const char *line)
{
    const char *p = lines->data;

    for (size_t i = 0; i < n; i++, p += strlen(p) + 1)
        if (strcmp(p, line) == 0)
            return true;
    return false;
}

static void test_gateway_route_headers(void)
{
    const char *head = "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:1001\r\n"
                       "x-api-key: " GATEWAY_PLACEHOLDER_KEY "\r\nConnection: keep-alive\r\n"
                       "Accept-Encoding: gzip\r\nContent-Length: 2\r\nx-org: mine\r\n"
                       "anthropic-version: 2023-06-01\r\n\r\n";
    struct gateway_route *r = route("http://127.0.0.1:9", GATEWAY_AUTH_MIRROR, NULL);
    struct buf lines;
    size_t n;

    buf_init(&lines, 64 * 1024);
    n = upstream(r, head, &lines);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_TRUE(has_line(&lines, n, "x-api-key: sk-real-123"));
    CU_ASSERT_TRUE(has_line(&lines, n, "anthropic-version: 2023-06-01"));
    CU_ASSERT_TRUE(has_line(&lines, n, "X-Org: org-1")); /* the endpoint's header wins */
    gateway_route_free(r);
    /* Azure: api-key, whatever the harness sent the placeholder in */
    buf_reset(&lines);
    r = route("https://x.openai.azure.com/openai", GATEWAY_AUTH_API_KEY, NULL);
    n = upstream(
        r, "POST /openai/x HTTP/1.1\r\nAuthorization: Bearer " GATEWAY_PLACEHOLDER_KEY "\r\n\r\n",
        &lines);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_TRUE(has_line(&lines, n, "api-key: sk-real-123"));
    CU_ASSERT_FALSE(has_line(&lines, n, "Authorization: Bearer sk-real-123"));
    gateway_route_free(r);
    buf_release(&lines);
}

static void test_gateway_route_decode_refuses(void)
{
    const char *bad[] = {
        "{}",
        "{\"upstream\":\"ftp://x\",\"credential\":\"k\"}",
        "{\"upstream\":\"http://x\"}",
        "{\"upstream\":\"http://x\",\"credential\":\"k\\r\\nX: y\"}",
        "{\"upstream\":\"http://x\",\"credential\":\"k\",\"auth\":\"basic\"}",
        "{\"upstream\":\"http://x\",\"credential\":\"k\",\"maxRequestBytes\":0}",
        "{\"upstream\":\"http://x\",\"credential\":\"k\",\"models\":[1]}",
        "{\"upstream\":\"http://x\",\"credential\":\"k\",\"headers\":{\"Bad Name\":\"v\"}}",
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_object *o = json_tokener_parse(bad[i]);
        struct gateway_route *r = NULL;
        char err[160] = "";

        CU_ASSERT_EQUAL(gateway_route_decode(o, &r, err, sizeof(err)), -EINVAL);
        CU_ASSERT_PTR_NULL(strstr(err, "\"k"));
        json_object_put(o);
    }
}

CU_TestInfo gateway_route_tests[] = {
    {"test_gateway_route_paths", test_gateway_route_paths},
    {"test_gateway_route_models", test_gateway_route_models},
    {"test_gateway_route_headers", test_gateway_route_headers},
    {"test_gateway_route_decode_refuses", test_gateway_route_decode_refuses},
    CU_TEST_INFO_NULL,
};
