/*
 * model_gateway — a gateway on a loopback listener, its poll loop in a thread, forwarding to a
 * canned upstream: the real key goes upstream, the stream comes back as it was sent (its
 * framing kept), the call is reported with its usage, a refused call is answered and reported,
 * nothing is left.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "canned_server.h"
#include "gateway/gateway_route.h"
#include "gateway/model_gateway.h"
#include "suites.h"

struct loop {
    struct model_gateway *g;
    bool stop;                              /* atomic */
    struct model_gateway_report reports[8]; /* read after the loop's thread was joined */
    int nreports;                           /* atomic */
};

static void on_report(void *ctx, const struct model_gateway_report *r)
{
    struct loop *l = ctx;
    int n = __atomic_load_n(&l->nreports, __ATOMIC_ACQUIRE);

    if (n < 8) {
        l->reports[n] = *r;
        __atomic_store_n(&l->nreports, n + 1, __ATOMIC_RELEASE);
    }
}

static int reports(struct loop *l)
{
    return __atomic_load_n(&l->nreports, __ATOMIC_ACQUIRE);
}

static void stop_loop(struct loop *l, pthread_t t)
{
    __atomic_store_n(&l->stop, true, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
}

static void *run_loop(void *arg)
{
    struct loop *l = arg;

    while (!__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE)) {
        int fds[MODEL_GATEWAY_FDS];
        struct pollfd p[MODEL_GATEWAY_FDS];
        size_t n = model_gateway_fds(l->g, fds, MODEL_GATEWAY_FDS);

        for (size_t i = 0; i < n; i++)
            p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        poll(p, n, 20);
        model_gateway_handle(l->g);
    }
    return NULL;
}

static int listener(int *ret_port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 8) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        return -1;
    *ret_port = ntohs(a.sin_port);
    return fd;
}

/* Send one request and read its answer up to (and including) `until`. */
static void exchange(int fd, const char *req, const char *until, struct buf *out)
{
    char chunk[4096];

    buf_reset(out);
    CU_ASSERT_EQUAL((size_t)write(fd, req, strlen(req)), strlen(req));
    while (!strstr(buf_str(out), until)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t n;

        if (poll(&p, 1, 5000) != 1)
            break;
        n = read(fd, chunk, sizeof(chunk));
        if (n <= 0)
            break;
        buf_append(out, chunk, (size_t)n);
    }
}

static void test_model_gateway_forwards_streams_and_reports(void)
{
    static const char sse[] =
        "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":7}}\n\n"
        "data: [DONE]\n\n";
    char reply[1024];
    static const char chunked[] =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        "1a\r\n{\"usage\":{\"prompt_tokens\":\r\n19\r\n3,\"completion_tokens\":4}}\r\n0\r\n\r\n";
    struct canned_reply replies[2] = {{reply, 0}, {chunked, 0}};
    struct canned_server up;
    struct loop l = {0};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char upstream[64], req[1024], err[160];
    const char *body = "{\"model\":\"fake-model\",\"stream\":true,\"messages\":[]}";
    struct gateway_route_spec spec = {.upstream = upstream, .credential = "sk-real-123"};
    json_object *route;
    pthread_t t;
    struct buf out;
    int port, lfd, cfd;

    snprintf(reply, sizeof(reply),
             "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(sse), sse);
    CU_ASSERT_EQUAL_FATAL(canned_start(&up, replies, 2), 0);
    snprintf(upstream, sizeof(upstream), "http://127.0.0.1:%d/v1", up.port);
    lfd = listener(&port);
    CU_ASSERT_FATAL(lfd >= 0);
    CU_ASSERT_EQUAL_FATAL(model_gateway_new(lfd, on_report, &l, &l.g), 0);
    route = gateway_route_encode(&spec);
    CU_ASSERT_EQUAL(model_gateway_set_route(l.g, route, err, sizeof(err)), 0);
    json_object_put(route);
    pthread_create(&t, NULL, run_loop, &l);
    cfd = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_port = htons((uint16_t)port);
    CU_ASSERT_EQUAL_FATAL(connect(cfd, (struct sockaddr *)&a, sizeof(a)), 0);
    buf_init(&out, 1 << 20);
    snprintf(req, sizeof(req),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "
             "Bearer " GATEWAY_PLACEHOLDER_KEY "\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             strlen(body), body);
    exchange(cfd, req, "data: [DONE]\n\n", &out);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&out), "HTTP/1.1 200 OK\r\n"));
    /* the upstream's framing kept: its Content-Length, the body as it came */
    snprintf(req, sizeof(req), "Content-Length: %zu\r\n", strlen(sse));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&out), req));
    CU_ASSERT_PTR_NULL(strstr(buf_str(&out), "Transfer-Encoding"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&out), sse));
    /* a call outside the endpoint, on the same kept-alive connection: refused */
    exchange(cfd, "GET /admin HTTP/1.1\r\nHost: x\r\n\r\n", "}}", &out);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&out), "HTTP/1.1 403 Forbidden\r\n"));
    /* a chunked upstream answer goes on chunked (its pieces as they came) */
    snprintf(req, sizeof(req),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(body), body);
    exchange(cfd, req, "\r\n0\r\n\r\n", &out);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&out), "Transfer-Encoding: chunked\r\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&out), "\"completion_tokens\":4"));
    close(cfd);
    canned_stop(&up);
    /* the upstream got the real key and a stream that reports its usage */
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&up.requests), "Authorization: Bearer sk-real-123"));
    CU_ASSERT_PTR_NULL(strstr(buf_str(&up.requests), GATEWAY_PLACEHOLDER_KEY));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&up.requests), "\"include_usage\":true"));
    for (int i = 0; i < 500 && reports(&l) < 3; i++) /* up to 10 s: a slow machine */
        usleep(20000);
    stop_loop(&l, t);
    CU_ASSERT_EQUAL_FATAL(l.nreports, 3);
    CU_ASSERT_EQUAL(l.reports[0].event, MODEL_GATEWAY_CALL);
    CU_ASSERT_EQUAL(l.reports[0].status, 200);
    CU_ASSERT_TRUE(l.reports[0].stream);
    CU_ASSERT_TRUE(l.reports[0].usage.known);
    CU_ASSERT_EQUAL(l.reports[0].usage.input, 30);
    CU_ASSERT_EQUAL(l.reports[0].usage.total, 37);
    CU_ASSERT_STRING_EQUAL(l.reports[0].model, "fake-model");
    CU_ASSERT_EQUAL(l.reports[1].event, MODEL_GATEWAY_REFUSED);
    CU_ASSERT_EQUAL(l.reports[1].status, 403);
    CU_ASSERT_EQUAL(l.reports[2].event, MODEL_GATEWAY_CALL);
    CU_ASSERT_FALSE(l.reports[2].stream);
    CU_ASSERT_EQUAL(l.reports[2].usage.input, 3);
    CU_ASSERT_EQUAL(l.reports[2].usage.output, 4);
    CU_ASSERT_EQUAL(model_gateway_active(l.g), 0);
    model_gateway_free(l.g);
    close(lfd);
    canned_release(&up);
    buf_release(&out);
}

/* Without a route (a spare before its claim) every call is refused. */
static void test_model_gateway_without_route_refuses(void)
{
    struct loop l = {0};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    pthread_t t;
    struct buf out;
    int port, lfd = listener(&port), cfd;

    CU_ASSERT_FATAL(lfd >= 0);
    CU_ASSERT_EQUAL_FATAL(model_gateway_new(lfd, on_report, &l, &l.g), 0);
    pthread_create(&t, NULL, run_loop, &l);
    cfd = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_port = htons((uint16_t)port);
    CU_ASSERT_EQUAL_FATAL(connect(cfd, (struct sockaddr *)&a, sizeof(a)), 0);
    buf_init(&out, 1 << 16);
    exchange(cfd, "POST /v1/messages HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", "}}", &out);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&out), " 503 "));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&out), "\"type\":\"error\"")); /* Anthropic's shape */
    close(cfd);
    for (int i = 0; i < 500 && reports(&l) < 1; i++)
        usleep(20000);
    stop_loop(&l, t);
    CU_ASSERT_EQUAL(l.nreports, 1);
    model_gateway_free(l.g);
    close(lfd);
    buf_release(&out);
}

CU_TestInfo model_gateway_tests[] = {
    {"test_model_gateway_forwards_streams_and_reports",
     test_model_gateway_forwards_streams_and_reports},
    {"test_model_gateway_without_route_refuses", test_model_gateway_without_route_refuses},
    CU_TEST_INFO_NULL,
};
