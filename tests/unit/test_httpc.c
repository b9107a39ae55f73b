/*
 * httpc — base/httpc against the in-test servers: the libcurl errno mapping, the total deadline,
 * the body cap (error, truncation, discard), retries only when asked (statuses, transport
 * failures, the backoff and Retry-After in seconds or as an HTTP-date, each wait capped), the
 * abort callback, header injection refused, and what is sent and captured.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/httpc.h"
#include "base/util.h"
#include "fake_http.h"
#include "http_stub.h"
#include "suites.h"

struct script {
    int fail_first;    /* answer fail_status to this many requests */
    int fail_status;   /* 0 = 503 */
    const char *extra; /* extra header lines of the failures */
    int status;        /* then this (0 = 200) */
    const char *body;  /* then this (NULL = "{}") */
    size_t big;        /* answer this many bytes instead */
};

static void scripted(void *ctx, size_t n, const struct fake_request *req,
                     struct fake_response *resp)
{
    const struct script *s = ctx;

    (void)req;
    if ((int)n < s->fail_first) {
        resp->status = s->fail_status ? s->fail_status : 503;
        if (s->extra)
            snprintf(resp->extra_headers, sizeof(resp->extra_headers), "%s", s->extra);
        return;
    }
    if (s->status)
        resp->status = s->status;
    if (s->big) {
        resp->body = malloc(s->big);
        memset(resp->body, 'x', s->big);
        resp->body_len = s->big;
    } else if (s->body) {
        resp->body = strdup(s->body);
        resp->body_len = strlen(s->body);
    }
}

static struct httpc_request get(const char *url)
{
    struct httpc_request rq = {.url = url, .max_body = 4096, .timeout_ms = 5000};

    return rq;
}

static void test_httpc_errno_mapping(void)
{
    struct httpc_request rq = get("http://127.0.0.1:1/");
    struct httpc_response res;
    char err[256];

    CU_ASSERT_EQUAL(httpc_curl_errno(CURLE_OK), 0);
    CU_ASSERT_EQUAL(httpc_curl_errno(CURLE_OPERATION_TIMEDOUT), -ETIMEDOUT);
    CU_ASSERT_EQUAL(httpc_curl_errno(CURLE_COULDNT_CONNECT), -ECONNREFUSED);
    CU_ASSERT_EQUAL(httpc_curl_errno(CURLE_COULDNT_RESOLVE_HOST), -EHOSTUNREACH);
    CU_ASSERT_EQUAL(httpc_curl_errno(CURLE_RECV_ERROR), -ECONNRESET);
    CU_ASSERT_EQUAL(httpc_curl_errno(CURLE_GOT_NOTHING), -ECONNRESET);
    CU_ASSERT_EQUAL(httpc_curl_errno(CURLE_PEER_FAILED_VERIFICATION), -EPROTO);
    CU_ASSERT_EQUAL(httpc_curl_errno(CURLE_OUT_OF_MEMORY), -ENOMEM);
    CU_ASSERT_EQUAL(httpc_curl_errno(CURLE_URL_MALFORMAT), -EIO);
    CU_ASSERT_EQUAL(httpc_status_errno(400), -EINVAL);
    CU_ASSERT_EQUAL(httpc_status_errno(401), -EACCES);
    CU_ASSERT_EQUAL(httpc_status_errno(403), -EACCES);
    CU_ASSERT_EQUAL(httpc_status_errno(404), -ENOENT);
    CU_ASSERT_EQUAL(httpc_status_errno(408), -ETIMEDOUT);
    CU_ASSERT_EQUAL(httpc_status_errno(409), -EPROTO);
    CU_ASSERT_EQUAL(httpc_status_errno(500), -EPROTO);
    /* a real refusal: nobody listens on port 1; the reason is libcurl's, without the URL */
    CU_ASSERT_EQUAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), -ECONNREFUSED);
    CU_ASSERT_PTR_NULL(strstr(err, "127.0.0.1:1"));
    /* a scheme other than http(s) is never spoken */
    rq.url = "file:///etc/passwd";
    CU_ASSERT_EQUAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), -EIO);
}

static void hang(void *ctx, const struct http_stub_request *rq, struct http_stub_reply *reply)
{
    (void)ctx;
    (void)rq;
    reply->hang = true;
}

static void test_httpc_timeout(void)
{
    struct http_stub *s = http_stub_start(hang, NULL);
    struct httpc_response res;
    char url[128], err[256];
    struct httpc_request rq = get(NULL);
    int64_t t0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    http_stub_url(s, "/slow", url, sizeof(url));
    rq.url = url;
    rq.timeout_ms = 200;
    t0 = util_now_ms();
    CU_ASSERT_EQUAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), -ETIMEDOUT);
    CU_ASSERT(util_now_ms() - t0 < 20000); /* the stub never answers: the timeout ended it */
    /* a timeout is a transport failure: retried only when asked */
    CU_ASSERT_EQUAL(http_stub_count(s), 1);
    rq.retry = (struct httpc_retry){.attempts = 2, .base_ms = 1, .transport = true};
    t0 = util_now_ms();
    CU_ASSERT_EQUAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), -ETIMEDOUT);
    CU_ASSERT(util_now_ms() - t0 >= 390);
    CU_ASSERT_EQUAL(http_stub_count(s), 3);
    http_stub_stop(s);
}

static void test_httpc_body_cap(void)
{
    struct script sc = {.big = 10000};
    struct fake_http *f = fake_http_start(scripted, &sc);
    struct httpc_request rq = get(NULL);
    struct httpc_response res;
    char err[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    rq.url = fake_http_url(f);
    CU_ASSERT_EQUAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), -E2BIG);
    CU_ASSERT_STRING_EQUAL(err, "response body too large");
    /* the cap is never retried, whatever the policy */
    rq.retry = (struct httpc_retry){.attempts = 3, .base_ms = 1, .transport = true};
    CU_ASSERT_EQUAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), -E2BIG);
    CU_ASSERT_EQUAL(fake_http_count(f), 2);
    rq.truncate_ok = true;
    CU_ASSERT_EQUAL_FATAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), 0);
    CU_ASSERT_TRUE(res.truncated);
    CU_ASSERT_EQUAL(res.body.len, 4096);
    CU_ASSERT_EQUAL(res.status, 200);
    httpc_response_release(&res);
    rq.truncate_ok = false;
    rq.discard_body = true;
    rq.max_body = 0;
    CU_ASSERT_EQUAL_FATAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(res.body.len, 0);
    httpc_response_release(&res);
    /* no cap and no discard: refused before anything is sent */
    rq.discard_body = false;
    CU_ASSERT_EQUAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(fake_http_count(f), 4);
    fake_http_stop(f);
}

static void test_httpc_no_retry_unless_asked(void)
{
    struct script sc = {.fail_first = 1000};
    struct fake_http *f = fake_http_start(scripted, &sc);
    struct httpc_request rq = get(NULL);
    struct httpc_response res;
    char err[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    rq.url = fake_http_url(f);
    CU_ASSERT_EQUAL_FATAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(res.status, 503);
    CU_ASSERT_EQUAL(res.attempts, 1);
    httpc_response_release(&res);
    CU_ASSERT_EQUAL(fake_http_count(f), 1);
    /* asked: the default statuses (5xx) are retried, the last answer comes back */
    rq.retry = (struct httpc_retry){.attempts = 3, .base_ms = 1};
    CU_ASSERT_EQUAL_FATAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(res.status, 503);
    CU_ASSERT_EQUAL(res.attempts, 3);
    httpc_response_release(&res);
    CU_ASSERT_EQUAL(fake_http_count(f), 4);
    /* a 4xx is final under the default policy */
    sc.fail_status = 422;
    CU_ASSERT_EQUAL_FATAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(res.status, 422);
    CU_ASSERT_EQUAL(res.attempts, 1);
    httpc_response_release(&res);
    CU_ASSERT_EQUAL(fake_http_count(f), 5);
    fake_http_stop(f);
}

static bool only_429(long status)
{
    return status == 429;
}

static void test_httpc_retry_after(void)
{
    struct script sc = {
        .fail_first = 1, .fail_status = 429, .extra = "Retry-After: 1\r\n", .body = "done"};
    struct fake_http *f = fake_http_start(scripted, &sc);
    struct httpc_request rq = get(NULL);
    struct httpc_response res;
    char err[256];
    int64_t t0, took;

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    rq.url = fake_http_url(f);
    rq.retry = (struct httpc_retry){.attempts = 2,
                                    .backoff = HTTPC_BACKOFF_EXPONENTIAL,
                                    .base_ms = 10,
                                    .retry_after = true,
                                    .status_retryable = only_429};
    t0 = util_now_ms();
    CU_ASSERT_EQUAL_FATAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), 0);
    took = util_now_ms() - t0;
    CU_ASSERT_EQUAL(res.status, 200);
    CU_ASSERT_EQUAL(res.attempts, 2);
    CU_ASSERT_STRING_EQUAL(buf_str(&res.body), "done");
    httpc_response_release(&res);
    CU_ASSERT(took >= 950); /* the Retry-After, not the 10 ms backoff */
    /* each wait is capped; out of attempts, the last answer comes back */
    sc.fail_first = 1000;
    sc.extra = "Retry-After: 30\r\n";
    rq.retry.cap_ms = 50;
    t0 = util_now_ms();
    CU_ASSERT_EQUAL_FATAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), 0);
    took = util_now_ms() - t0;
    CU_ASSERT_EQUAL(res.status, 429);
    CU_ASSERT_EQUAL(res.attempts, 2);
    httpc_response_release(&res);
    CU_ASSERT(took < 15000); /* the cap, not the 30 s Retry-After */
    CU_ASSERT_EQUAL(fake_http_count(f), 4);
    fake_http_stop(f);
}

static void test_httpc_retry_after_values(void)
{
    int64_t now = 1764496800000; /* Sun, 30 Nov 2025 10:00:00 GMT */

    CU_ASSERT_EQUAL(httpc_retry_after_ms("0", now), 0);
    CU_ASSERT_EQUAL(httpc_retry_after_ms("7", now), 7000);
    CU_ASSERT_EQUAL(httpc_retry_after_ms("3600", now), 3600000);
    CU_ASSERT_EQUAL(httpc_retry_after_ms("3601", now), -ERANGE);
    CU_ASSERT_EQUAL(httpc_retry_after_ms("Sun, 30 Nov 2025 10:00:05 GMT", now), 5000);
    CU_ASSERT_EQUAL(httpc_retry_after_ms("Sun, 30 Nov 2025 09:59:00 GMT", now), 0);
    CU_ASSERT_EQUAL(httpc_retry_after_ms("Sun, 30 Nov 2025 12:00:00 GMT", now), -ERANGE);
    CU_ASSERT_EQUAL(httpc_retry_after_ms("soon", now), -EINVAL);
    CU_ASSERT_EQUAL(httpc_retry_after_ms("-1", now), -EINVAL);
    CU_ASSERT_EQUAL(httpc_retry_after_ms("", now), -EINVAL);
    CU_ASSERT_EQUAL(httpc_backoff_ms(HTTPC_BACKOFF_LINEAR, 100, 3, 0), 300);
    CU_ASSERT_EQUAL(httpc_backoff_ms(HTTPC_BACKOFF_EXPONENTIAL, 500, 3, 0), 2000);
    CU_ASSERT_EQUAL(httpc_backoff_ms(HTTPC_BACKOFF_EXPONENTIAL, 500, 3, 1500), 1500);
    CU_ASSERT_EQUAL(httpc_backoff_ms(HTTPC_BACKOFF_EXPONENTIAL, 500, 50, 0), HTTPC_BACKOFF_CAP_MS);
}

static bool flag_raised(void *ctx)
{
    return *(const bool *)ctx;
}

static bool past(void *ctx)
{
    return util_now_ms() > *(const int64_t *)ctx;
}

static void test_httpc_abort(void)
{
    struct script sc = {.fail_first = 1000};
    struct fake_http *f = fake_http_start(scripted, &sc);
    struct http_stub *s = http_stub_start(hang, NULL);
    struct httpc_request rq = get(NULL);
    struct httpc_response res;
    char url[128], err[256];
    bool stop = true;
    int64_t deadline;

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    http_stub_url(s, "/", url, sizeof(url));
    rq.url = url;
    rq.aborted = flag_raised;
    rq.abort_ctx = &stop;
    CU_ASSERT_EQUAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), -ECANCELED);
    CU_ASSERT_STRING_EQUAL(err, "cancelled");
    /* raised while waiting for the next attempt: the answer in hand comes back at once */
    rq.url = fake_http_url(f);
    rq.retry = (struct httpc_retry){.attempts = 3, .base_ms = 60000};
    rq.aborted = past;
    rq.abort_ctx = &deadline;
    deadline = util_now_ms() + 300;
    CU_ASSERT_EQUAL_FATAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), 0);
    CU_ASSERT(util_now_ms() - deadline < 30000); /* not the 60 s backoff */
    CU_ASSERT_EQUAL(res.status, 503);
    CU_ASSERT_EQUAL(res.attempts, 1);
    httpc_response_release(&res);
    http_stub_stop(s);
    fake_http_stop(f);
}

static void echo(void *ctx, const struct http_stub_request *rq, struct http_stub_reply *reply)
{
    (void)ctx;
    (void)rq;
    reply->status = 201;
    snprintf(reply->headers, sizeof(reply->headers),
             "Content-Type: Text/Event-Stream; charset=utf-8\r\nX-Session: \t abc \r\n");
}

static void test_httpc_request_and_answer(void)
{
    struct http_stub *s = http_stub_start(echo, NULL);
    const char *lines[] = {"X-One: 1", "Expect:"};
    const char *evil[] = {"X-One: 1\r\nX-Evil: 2"};
    struct httpc_request rq = get(NULL);
    const struct http_stub_request *got;
    struct httpc_response res;
    char url[128], err[256], v[64];

    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    http_stub_url(s, "/p?q=1", url, sizeof(url));
    rq.url = url;
    rq.method = "PUT";
    rq.body = "{}";
    rq.body_len = 2;
    rq.headers = lines;
    rq.nheaders = 2;
    rq.bearer = "tok-1";
    rq.capture_header = "x-session";
    CU_ASSERT_EQUAL_FATAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(res.status, 201);
    CU_ASSERT_STRING_EQUAL(res.content_type, "text/event-stream");
    CU_ASSERT_STRING_EQUAL(res.captured, "abc");
    httpc_response_release(&res);
    got = http_stub_get(s, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT_STRING_EQUAL(got->method, "PUT");
    CU_ASSERT_STRING_EQUAL(got->target, "/p?q=1");
    CU_ASSERT_STRING_EQUAL(got->body, "{}");
    CU_ASSERT(http_stub_header(got, "x-one", v, sizeof(v)) && strcmp(v, "1") == 0);
    CU_ASSERT(http_stub_header(got, "authorization", v, sizeof(v)) &&
              strcmp(v, "Bearer tok-1") == 0);
    /* a header line that would inject another one, a GET with a body, a bad method */
    rq.headers = evil;
    rq.nheaders = 1;
    CU_ASSERT_EQUAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), -EINVAL);
    rq.nheaders = 0;
    rq.method = "GET";
    CU_ASSERT_EQUAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), -EINVAL);
    rq.method = "GET /x HTTP/1.0\r\n";
    rq.body = NULL;
    CU_ASSERT_EQUAL(httpc_perform(NULL, &rq, &res, err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(http_stub_count(s), 1);
    /* POST without a body sends an empty one; a kept handle is reused */
    rq.method = "POST";
    CU_ASSERT_EQUAL_FATAL(httpc_perform(httpc_thread_handle(), &rq, &res, err, sizeof(err)), 0);
    httpc_response_release(&res);
    CU_ASSERT(http_stub_header(http_stub_get(s, 1), "content-length", v, sizeof(v)) &&
              strcmp(v, "0") == 0);
    http_stub_stop(s);
}

/* The header rules a caller's headers are checked with (MCP headers, tool calls). */
static void test_httpc_header_rules(void)
{
    char big[HTTPC_HEADER_VALUE_MAX + 2];

    CU_ASSERT(!httpc_header_value_ok("a\nb"));
    CU_ASSERT(!httpc_header_value_ok("a\rb"));
    CU_ASSERT(!httpc_header_value_ok(NULL));
    CU_ASSERT(httpc_header_value_ok("Bearer x y"));
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    CU_ASSERT(!httpc_header_value_ok(big));
    big[HTTPC_HEADER_VALUE_MAX] = '\0';
    CU_ASSERT(httpc_header_value_ok(big));
    CU_ASSERT(httpc_header_name_ok("X-Api-Key"));
    CU_ASSERT(!httpc_header_name_ok("X Api"));
    CU_ASSERT(!httpc_header_name_ok("X:Api"));
    CU_ASSERT(!httpc_header_name_ok(""));
    CU_ASSERT(!httpc_header_name_ok(NULL));
}

CU_TestInfo httpc_tests[] = {
    {"test_httpc_header_rules", test_httpc_header_rules},
    {"errno_mapping", test_httpc_errno_mapping},
    {"timeout", test_httpc_timeout},
    {"body_cap", test_httpc_body_cap},
    {"no_retry_unless_asked", test_httpc_no_retry_unless_asked},
    {"retry_after", test_httpc_retry_after},
    {"retry_after_values", test_httpc_retry_after_values},
    {"abort", test_httpc_abort},
    {"request_and_answer", test_httpc_request_and_answer},
    CU_TEST_INFO_NULL,
};
