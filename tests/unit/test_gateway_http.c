/*
 * gateway_http — request heads and chunked bodies as the model gateway reads them.
 */
#include <errno.h>
#include <string.h>

#include "gateway/gateway_http.h"
#include "suites.h"

static int parse(const char *text, struct gateway_http_request *r)
{
    char err[160];
    ssize_t end = gateway_http_head_end(text, strlen(text));

    if (end <= 0)
        return -EAGAIN;
    return gateway_http_parse(text, (size_t)end, r, err, sizeof(err));
}

static void test_gateway_http_head(void)
{
    struct gateway_http_request r;
    const char *t = "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: 127.0.0.1:1001\r\n"
                    "Authorization:  Bearer k  \r\nContent-Length: 12\r\n\r\n{\"a\":1}";
    const struct gateway_http_field *f;

    CU_ASSERT_EQUAL(gateway_http_head_end(t, 20), 0); /* not complete yet */
    CU_ASSERT_EQUAL_FATAL(parse(t, &r), 0);
    CU_ASSERT_STRING_EQUAL(r.method, "POST");
    CU_ASSERT_EQUAL(r.target_len, strlen("/v1/chat/completions?x=1"));
    CU_ASSERT_EQUAL(memcmp(r.target, "/v1/chat/completions?x=1", r.target_len), 0);
    CU_ASSERT_EQUAL(r.minor, 1);
    CU_ASSERT_TRUE(r.keep_alive);
    CU_ASSERT_TRUE(r.has_length);
    CU_ASSERT_EQUAL(r.length, 12);
    f = gateway_http_field(&r, "authorization");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_TRUE(gateway_http_value_is(f, "Bearer k"));
    CU_ASSERT_EQUAL(parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &r), 0);
    CU_ASSERT_TRUE(r.keep_alive);
    CU_ASSERT_EQUAL(parse("GET / HTTP/1.1\nConnection: Upgrade, close\n\n", &r), 0);
    CU_ASSERT_FALSE(r.keep_alive);
}

/* What could make two readers disagree about where a request ends is refused. */
static void test_gateway_http_refuses_ambiguity(void)
{
    struct gateway_http_request r;

    CU_ASSERT_EQUAL(parse("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked"
                          "\r\n\r\n",
                          &r),
                    -EBADMSG);
    CU_ASSERT_EQUAL(parse("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", &r),
                    -EBADMSG);
    CU_ASSERT_EQUAL(parse("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", &r),
                    -ENOSYS);
    CU_ASSERT_EQUAL(parse("POST / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", &r), -EBADMSG);
    CU_ASSERT_EQUAL(parse("POST / HTTP/1.1\r\nBad Name: a\r\n\r\n", &r), -EBADMSG);
    CU_ASSERT_EQUAL(parse("POST / HTTP/1.1\r\nX: a\rb\r\n\r\n", &r), -EBADMSG);
    CU_ASSERT_EQUAL(parse("POST / HTTP/2.0\r\n\r\n", &r), -EBADMSG);
    CU_ASSERT_EQUAL(parse("POST  / HTTP/1.1\r\n\r\n", &r), -EBADMSG);
    CU_ASSERT_EQUAL(parse("POST /a b HTTP/1.1\r\n\r\n", &r), -EBADMSG);
    CU_ASSERT_EQUAL(parse("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", &r), -EBADMSG);
}

static void test_gateway_http_head_cap(void)
{
    static char big[GATEWAY_HTTP_HEAD_MAX + 10];

    memset(big, 'a', sizeof(big));
    CU_ASSERT_EQUAL(gateway_http_head_end(big, sizeof(big)), -E2BIG);
}

/* A chunked body decoded whole or a byte at a time gives the same bytes. */
static void test_gateway_http_chunked(void)
{
    const char *in = "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\nNEXT";
    struct gateway_chunked c;
    char out[64];
    size_t got = 0, o = 0;
    ssize_t n;

    gateway_chunked_init(&c);
    n = gateway_chunked_decode(&c, in, strlen(in), out, sizeof(out), &got);
    CU_ASSERT_TRUE(c.done);
    CU_ASSERT_EQUAL(got, 11);
    CU_ASSERT_EQUAL(memcmp(out, "hello world", 11), 0);
    CU_ASSERT_EQUAL((size_t)n, strlen(in) - 4); /* stops before the next request */
    gateway_chunked_init(&c);
    for (size_t i = 0; i < strlen(in) && !c.done; i++) {
        n = gateway_chunked_decode(&c, in + i, 1, out + o, sizeof(out) - o, &got);
        CU_ASSERT_EQUAL(n, 1);
        o += got;
    }
    CU_ASSERT_TRUE(c.done);
    CU_ASSERT_EQUAL(o, 11);
    /* a full output stops the decoder without consuming the rest */
    gateway_chunked_init(&c);
    n = gateway_chunked_decode(&c, in, strlen(in), out, 3, &got);
    CU_ASSERT_EQUAL(got, 3);
    CU_ASSERT_FALSE(c.done);
    gateway_chunked_init(&c);
    CU_ASSERT_EQUAL(gateway_chunked_decode(&c, "x\r\n", 3, out, sizeof(out), &got), -EBADMSG);
    gateway_chunked_init(&c);
    CU_ASSERT_EQUAL(gateway_chunked_decode(&c, "5\r\nhelloX", 9, out, sizeof(out), &got), -EBADMSG);
}

CU_TestInfo gateway_http_tests[] = {
    {"test_gateway_http_head", test_gateway_http_head},
    {"test_gateway_http_refuses_ambiguity", test_gateway_http_refuses_ambiguity},
    {"test_gateway_http_head_cap", test_gateway_http_head_cap},
    {"test_gateway_http_chunked", test_gateway_http_chunked},
    CU_TEST_INFO_NULL,
};
