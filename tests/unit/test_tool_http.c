/*
 * tool_http — against the in-process HTTP stub: what is sent arrives byte for byte, the body
 * cap (error or truncation), deadlines, the cancel flag, redirects not followed, the address
 * pin (a connection to any other address is dropped before the request is written), header
 * injection refused, and a stream stopped early by its reader.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "http_stub.h"
#include "suites.h"
#include "tools/tool_http.h"

struct script {
    int status;
    const char *headers;
    const char *body;
    size_t repeat; /* body repeated this many times (0 = once) */
    bool hang;
};

static void scripted(void *ctx, const struct http_stub_request *rq, struct http_stub_reply *out)
{
    const struct script *s = ctx;
    size_t n = s->body ? strlen(s->body) : 0, times = s->repeat ? s->repeat : 1;

    (void)rq;
    out->status = s->status;
    out->hang = s->hang;
    snprintf(out->headers, sizeof(out->headers), "%s", s->headers ? s->headers : "");
    if (n) {
        out->body = malloc(n * times);
        for (size_t i = 0; i < times; i++)
            memcpy(out->body + i * n, s->body, n);
        out->body_len = n * times;
    }
}

static void test_tool_http_post_exact(void)
{
    struct script sc = {.status = 200,
                        .headers = "Content-Type: Application/JSON; charset=utf-8\r\n"
                                   "Mcp-Session-Id: abc-123\r\n",
                        .body = "{\"ok\":true}"};
    struct http_stub *s = http_stub_start(scripted, &sc);
    const char *hdr[] = {"Authorization: Access tok-123", "X-Agenta-Run-Kind: test"};
    struct tool_http_request rq = {.method = "POST", .body = "{\"a\":1}", .body_len = 7,
                                   .headers = hdr, .nheaders = 2, .max_body = 1024,
                                   .capture_header = "mcp-session-id"};
    struct httpc_response res;
    const struct http_stub_request *got;
    char url[128], err[256], v[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    http_stub_url(s, "/api/tools/call", url, sizeof(url));
    rq.url = url;
    CU_ASSERT_EQUAL_FATAL(tool_http_perform(NULL, &rq, &res, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(res.status, 200);
    CU_ASSERT_STRING_EQUAL(buf_str(&res.body), "{\"ok\":true}");
    CU_ASSERT_STRING_EQUAL(res.content_type, "application/json");
    CU_ASSERT_STRING_EQUAL(res.captured, "abc-123");
    CU_ASSERT(!res.truncated && !res.stopped);
    httpc_response_release(&res);

    CU_ASSERT_EQUAL_FATAL(http_stub_count(s), 1);
    got = http_stub_get(s, 0);
    CU_ASSERT_STRING_EQUAL(got->method, "POST");
    CU_ASSERT_STRING_EQUAL(got->target, "/api/tools/call");
    CU_ASSERT_STRING_EQUAL(got->body, "{\"a\":1}");
    CU_ASSERT(http_stub_header(got, "authorization", v, sizeof(v)));
    CU_ASSERT_STRING_EQUAL(v, "Access tok-123");
    CU_ASSERT(http_stub_header(got, "x-agenta-run-kind", v, sizeof(v)));
    CU_ASSERT_STRING_EQUAL(v, "test");
    CU_ASSERT(!http_stub_header(got, "expect", v, sizeof(v)));
    http_stub_stop(s);
}

static void test_tool_http_methods(void)
{
    struct script sc = {.status = 204};
    struct http_stub *s = http_stub_start(scripted, &sc);
    static const char *const methods[] = {"GET", "DELETE", "PUT", "POST"};
    struct httpc_response res;
    char url[128], err[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    http_stub_url(s, "/x?y=1", url, sizeof(url));
    for (size_t i = 0; i < 4; i++) {
        bool body = i >= 2;
        struct tool_http_request rq = {.method = methods[i], .url = url,
                                       .body = body ? "{}" : NULL, .body_len = body ? 2 : 0,
                                       .max_body = 16};

        CU_ASSERT_EQUAL(tool_http_perform(NULL, &rq, &res, err, sizeof(err)), 0);
        CU_ASSERT_EQUAL(res.status, 204);
        httpc_response_release(&res);
        CU_ASSERT_STRING_EQUAL(http_stub_get(s, i)->method, methods[i]);
        CU_ASSERT_STRING_EQUAL(http_stub_get(s, i)->target, "/x?y=1");
        CU_ASSERT_STRING_EQUAL(http_stub_get(s, i)->body, body ? "{}" : "");
    }
    {
        struct tool_http_request rq = {.method = "GET", .url = url, .body = "x", .body_len = 1,
                                       .max_body = 16};
        CU_ASSERT_EQUAL(tool_http_perform(NULL, &rq, &res, err, sizeof(err)), -EINVAL);
        rq.method = "PATCH";
        rq.body = NULL;
        CU_ASSERT_EQUAL(tool_http_perform(NULL, &rq, &res, err, sizeof(err)), -EINVAL);
    }
    http_stub_stop(s);
}

static void test_tool_http_body_cap(void)
{
    struct script sc = {.status = 200, .body = "0123456789", .repeat = 1000};
    struct http_stub *s = http_stub_start(scripted, &sc);
    struct tool_http_request rq = {.method = "GET", .max_body = 4096};
    struct httpc_response res;
    char url[128], err[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    http_stub_url(s, "/big", url, sizeof(url));
    rq.url = url;
    CU_ASSERT_EQUAL(tool_http_perform(NULL, &rq, &res, err, sizeof(err)), -E2BIG);
    CU_ASSERT_STRING_EQUAL(err, "response body too large");
    rq.truncate_ok = true;
    CU_ASSERT_EQUAL_FATAL(tool_http_perform(NULL, &rq, &res, err, sizeof(err)), 0);
    CU_ASSERT(res.truncated);
    CU_ASSERT_EQUAL(res.body.len, 4096);
    CU_ASSERT_EQUAL(memcmp(res.body.data, "0123456789", 10), 0);
    httpc_response_release(&res);
    /* exactly at the cap is not truncated */
    rq.max_body = 10000;
    CU_ASSERT_EQUAL_FATAL(tool_http_perform(NULL, &rq, &res, err, sizeof(err)), 0);
    CU_ASSERT(!res.truncated);
    CU_ASSERT_EQUAL(res.body.len, 10000);
    httpc_response_release(&res);
    http_stub_stop(s);
}

static void test_tool_http_deadline_and_cancel(void)
{
    struct script sc = {.status = 200, .hang = true};
    struct http_stub *s = http_stub_start(scripted, &sc);
    struct tool_http_request rq = {.method = "POST", .body = "{}", .body_len = 2,
                                   .timeout_ms = 300, .max_body = 64};
    struct httpc_response res;
    atomic_int cancel = 1;
    char url[128], err[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    http_stub_url(s, "/slow", url, sizeof(url));
    rq.url = url;
    CU_ASSERT_EQUAL(tool_http_perform(NULL, &rq, &res, err, sizeof(err)), -ETIMEDOUT);
    CU_ASSERT_PTR_NULL(strstr(err, "127.0.0.1"));
    rq.timeout_ms = 600000;
    rq.cancel = &cancel;
    CU_ASSERT_EQUAL(tool_http_perform(NULL, &rq, &res, err, sizeof(err)), -ECANCELED);
    http_stub_stop(s);
}

static void test_tool_http_no_redirects(void)
{
    struct script sc = {.status = 302,
                        .headers = "Location: http://169.254.169.254/latest\r\n",
                        .body = "moved"};
    struct http_stub *s = http_stub_start(scripted, &sc);
    struct tool_http_request rq = {.method = "GET", .max_body = 64};
    struct httpc_response res;
    char url[128], err[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    http_stub_url(s, "/r", url, sizeof(url));
    rq.url = url;
    CU_ASSERT_EQUAL_FATAL(tool_http_perform(NULL, &rq, &res, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(res.status, 302);
    httpc_response_release(&res);
    CU_ASSERT_EQUAL(http_stub_count(s), 1);
    http_stub_stop(s);
}

static void test_tool_http_pin(void)
{
    struct script sc = {.status = 200, .body = "pinned"};
    struct http_stub *s = http_stub_start(scripted, &sc);
    struct tool_http_request rq = {.method = "GET", .max_body = 64};
    struct httpc_response res;
    char url[128], resolve[128], err[256];
    CURL *h = curl_easy_init();

    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    /* a name no resolver knows reaches the stub only through the pin */
    snprintf(url, sizeof(url), "http://pinned.invalid:%d/p", http_stub_port(s));
    snprintf(resolve, sizeof(resolve), "pinned.invalid:%d:127.0.0.1", http_stub_port(s));
    rq.url = url;
    rq.pin_resolve = resolve;
    rq.pin_addr = "127.0.0.1";
    CU_ASSERT_EQUAL_FATAL(tool_http_perform(h, &rq, &res, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&res.body), "pinned");
    httpc_response_release(&res);
    /* the pin check compares addresses, not spellings */
    rq.pin_addr = "::ffff:127.0.0.2";
    CU_ASSERT_EQUAL(tool_http_perform(h, &rq, &res, err, sizeof(err)), -EPERM);
    rq.pin_addr = "127.0.0.2";
    CU_ASSERT_EQUAL(tool_http_perform(h, &rq, &res, err, sizeof(err)), -EPERM);
    CU_ASSERT_EQUAL(http_stub_count(s), 1);
    curl_easy_cleanup(h);
    http_stub_stop(s);
}

static void test_tool_http_header_injection(void)
{
    const char *hdr[] = {"X-Token: a\r\nHost: evil"};
    struct tool_http_request rq = {.method = "GET", .url = "http://127.0.0.1:1/", .headers = hdr,
                                   .nheaders = 1, .max_body = 64};
    struct httpc_response res;
    char err[256];

    CU_ASSERT_EQUAL(tool_http_perform(NULL, &rq, &res, err, sizeof(err)), -EINVAL);
}

static int stop_after_first(void *ctx, const struct httpc_response *res, const char *data,
                            size_t len)
{
    size_t *seen = ctx;

    (void)data;
    CU_ASSERT_EQUAL(res->status, 200);
    *seen += len;
    return 1;
}

static void test_tool_http_reader_stops(void)
{
    struct script sc = {.status = 200, .body = "data: x\n\n", .repeat = 1000};
    struct http_stub *s = http_stub_start(scripted, &sc);
    size_t seen = 0;
    struct tool_http_request rq = {.method = "GET", .max_body = 1 << 20,
                                   .on_data = stop_after_first, .on_data_ctx = &seen};
    struct httpc_response res;
    char url[128], err[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    http_stub_url(s, "/sse", url, sizeof(url));
    rq.url = url;
    CU_ASSERT_EQUAL_FATAL(tool_http_perform(NULL, &rq, &res, err, sizeof(err)), 0);
    CU_ASSERT(res.stopped);
    CU_ASSERT(seen > 0 && res.body.len == seen);
    httpc_response_release(&res);
    http_stub_stop(s);
}

CU_TestInfo tool_http_tests[] = {
    {"test_tool_http_post_exact", test_tool_http_post_exact},
    {"test_tool_http_methods", test_tool_http_methods},
    {"test_tool_http_body_cap", test_tool_http_body_cap},
    {"test_tool_http_deadline_and_cancel", test_tool_http_deadline_and_cancel},
    {"test_tool_http_no_redirects", test_tool_http_no_redirects},
    {"test_tool_http_pin", test_tool_http_pin},
    {"test_tool_http_header_injection", test_tool_http_header_injection},
    {"test_tool_http_reader_stops", test_tool_http_reader_stops},
    CU_TEST_INFO_NULL,
};
