/*
 * acp — the JSON-RPC line codec: message classification, encoders, and line framing.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "proto/acp.h"
#include "suites.h"

#define BIG_LINE (3u * 1024 * 1024)

/* Decode a NUL-terminated line; 0 or the decoder's error. */
static int decode(const char *line, struct acp_msg *ret)
{
    char err[256];

    return acp_decode(line, strlen(line), ret, err, sizeof(err));
}

/* One encoded line: ends in '\n', holds no other '\n'; decode it back (without the '\n'). */
static int decode_encoded(const struct buf *b, struct acp_msg *ret)
{
    char err[256];

    if (b->len == 0 || b->data[b->len - 1] != '\n' || memchr(b->data, '\n', b->len - 1))
        return -EINVAL;
    return acp_decode(b->data, b->len - 1, ret, err, sizeof(err));
}

static void test_acp_decode_request(void)
{
    struct acp_msg m;
    int64_t id = -1;

    CU_ASSERT_EQUAL_FATAL(decode("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"session/prompt\","
                                 "\"params\":{\"sessionId\":\"s1\"}}",
                                 &m),
                          0);
    CU_ASSERT_EQUAL(m.kind, ACP_REQUEST);
    CU_ASSERT_STRING_EQUAL(TEST_STR(m.method), "session/prompt");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(m.params, "sessionId")), "s1");
    CU_ASSERT_EQUAL(acp_msg_int_id(&m, &id), 0);
    CU_ASSERT_EQUAL(id, 3);
    CU_ASSERT_PTR_NULL(m.result);
    CU_ASSERT_PTR_NULL(m.error);
    acp_msg_release(&m);
    CU_ASSERT_PTR_NULL(m.root);
}

static void test_acp_decode_notification(void)
{
    struct acp_msg m;
    int64_t id = 42;

    CU_ASSERT_EQUAL_FATAL(decode("{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":"
                                 "{\"update\":{\"sessionUpdate\":\"plan\"}}}",
                                 &m),
                          0);
    CU_ASSERT_EQUAL(m.kind, ACP_NOTIFICATION);
    CU_ASSERT_PTR_NULL(m.id);
    CU_ASSERT_STRING_EQUAL(TEST_STR(m.method), "session/update");
    CU_ASSERT_PTR_NOT_NULL(jsonx_path(m.params, "update.sessionUpdate"));
    CU_ASSERT_EQUAL(acp_msg_int_id(&m, &id), -EINVAL);
    CU_ASSERT_EQUAL(id, 42); /* out-parameter untouched on failure */
    acp_msg_release(&m);

    /* no params at all is still a notification */
    CU_ASSERT_EQUAL_FATAL(decode("{\"jsonrpc\":\"2.0\",\"method\":\"x\"}", &m), 0);
    CU_ASSERT_EQUAL(m.kind, ACP_NOTIFICATION);
    CU_ASSERT_PTR_NULL(m.params);
    acp_msg_release(&m);
}

static void test_acp_decode_response_result(void)
{
    struct acp_msg m;
    int64_t id = -1;

    CU_ASSERT_EQUAL_FATAL(
        decode("{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"stopReason\":\"end_turn\"}}", &m), 0);
    CU_ASSERT_EQUAL(m.kind, ACP_RESPONSE);
    CU_ASSERT_PTR_NULL(m.method);
    CU_ASSERT_PTR_NULL(m.error);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(m.result, "stopReason")), "end_turn");
    CU_ASSERT_EQUAL(acp_msg_int_id(&m, &id), 0);
    CU_ASSERT_EQUAL(id, 5);
    acp_msg_release(&m);

    /* a null result is a successful response with no value */
    CU_ASSERT_EQUAL_FATAL(decode("{\"jsonrpc\":\"2.0\",\"id\":6,\"result\":null}", &m), 0);
    CU_ASSERT_EQUAL(m.kind, ACP_RESPONSE);
    CU_ASSERT_PTR_NULL(m.result);
    CU_ASSERT_PTR_NULL(m.error);
    acp_msg_release(&m);
}

static void test_acp_decode_response_error(void)
{
    struct acp_msg m;

    CU_ASSERT_EQUAL_FATAL(decode("{\"jsonrpc\":\"2.0\",\"id\":9,\"error\":{\"code\":-32602,"
                                 "\"message\":\"Invalid params\"}}",
                                 &m),
                          0);
    CU_ASSERT_EQUAL(m.kind, ACP_RESPONSE);
    CU_ASSERT_PTR_NOT_NULL(m.error);
    CU_ASSERT_PTR_NULL(m.result);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(m.error, "code")), ACP_INVALID_PARAMS);
    CU_ASSERT_STRING_EQUAL(acp_msg_error_message(&m), "Invalid params");
    acp_msg_release(&m);

    /* an error without a message still reads as an error */
    CU_ASSERT_EQUAL_FATAL(decode("{\"jsonrpc\":\"2.0\",\"id\":10,\"error\":{\"code\":-32000}}", &m),
                          0);
    CU_ASSERT_EQUAL(m.kind, ACP_RESPONSE);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(m.error, "code")), -32000);
    CU_ASSERT_STRING_EQUAL(acp_msg_error_message(&m), "unknown error");
    acp_msg_release(&m);
}

/*
 * The agent numbers its requests from 0 like we do: its request id 0 and our response id 0
 * must be told apart by kind, never by id.
 */
static void test_acp_decode_agent_request_id_collision(void)
{
    struct acp_msg req, resp;
    int64_t rid = -1, sid = -1;

    CU_ASSERT_EQUAL_FATAL(decode("{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":"
                                 "\"session/request_permission\",\"params\":{\"options\":[]}}",
                                 &req),
                          0);
    CU_ASSERT_EQUAL_FATAL(
        decode("{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":1}}", &resp), 0);
    CU_ASSERT_EQUAL(req.kind, ACP_REQUEST);
    CU_ASSERT_EQUAL(resp.kind, ACP_RESPONSE);
    CU_ASSERT_EQUAL(acp_msg_int_id(&req, &rid), 0);
    CU_ASSERT_EQUAL(acp_msg_int_id(&resp, &sid), 0);
    CU_ASSERT_EQUAL(rid, 0);
    CU_ASSERT_EQUAL(sid, 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.method), "session/request_permission");
    CU_ASSERT_PTR_NULL(req.result);
    CU_ASSERT_PTR_NULL(resp.method);
    CU_ASSERT_PTR_NOT_NULL(jsonx_get(resp.result, "protocolVersion"));
    acp_msg_release(&req);
    acp_msg_release(&resp);
}

static void test_acp_decode_string_id(void)
{
    struct acp_msg m;
    int64_t id = 77;

    CU_ASSERT_EQUAL_FATAL(
        decode("{\"jsonrpc\":\"2.0\",\"id\":\"req-1\",\"method\":\"fs/read_text_file\"}", &m), 0);
    CU_ASSERT_EQUAL(m.kind, ACP_REQUEST);
    CU_ASSERT_TRUE(json_object_is_type(m.id, json_type_string));
    CU_ASSERT_STRING_EQUAL(json_object_get_string(m.id), "req-1");
    CU_ASSERT_EQUAL(acp_msg_int_id(&m, &id), -EINVAL);
    CU_ASSERT_EQUAL(id, 77);
    acp_msg_release(&m);

    /* a response with a string id is a response, but never one of ours */
    CU_ASSERT_EQUAL_FATAL(decode("{\"jsonrpc\":\"2.0\",\"id\":\"0\",\"result\":{}}", &m), 0);
    CU_ASSERT_EQUAL(m.kind, ACP_RESPONSE);
    CU_ASSERT_EQUAL(acp_msg_int_id(&m, &id), -EINVAL);
    acp_msg_release(&m);
}

static void test_acp_decode_invalid_lines(void)
{
    static const char *const bad[] = {
        "",
        "not json",
        "{\"jsonrpc\":\"2.0\",\"method\":\"x\"",    /* truncated */
        "{\"jsonrpc\":\"2.0\",\"method\":\"x\"} x", /* trailing garbage */
        "{\"id\":1,\"method\":\"initialize\"}",     /* no jsonrpc */
        "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"initialize\"}",
        "{\"jsonrpc\":2,\"id\":1,\"result\":{}}",
        "[{\"jsonrpc\":\"2.0\",\"method\":\"x\"}]", /* array (batch) */
        "\"jsonrpc\"",
        "null",
        "42",
        "{\"jsonrpc\":\"2.0\"}",                         /* neither method nor id */
        "{\"jsonrpc\":\"2.0\",\"params\":{}}",           /* neither method nor id */
        "{\"jsonrpc\":\"2.0\",\"id\":1}",                /* response without result/error */
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":null}", /* a null error is no error */
        "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"result\":{}}",
        "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"x\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":[1],\"result\":{}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}",
        "{\"jsonrpc\":\"2.0\",\"method\":\"\xff\xfe\"}", /* invalid UTF-8 */
    };

    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        struct acp_msg m;
        char err[256] = "";

        memset(&m, 0xa5, sizeof(m));
        CU_ASSERT_EQUAL(acp_decode(bad[i], strlen(bad[i]), &m, err, sizeof(err)), -EBADMSG);
        CU_ASSERT_NOT_EQUAL(err[0], '\0');              /* says why */
        CU_ASSERT_EQUAL((unsigned)m.kind, 0xa5a5a5a5u); /* untouched on failure */
    }
}

static void test_acp_encode_request_roundtrip(void)
{
    json_object *params = json_object_new_object();
    struct acp_msg m;
    struct buf b;
    int64_t id = -1;

    json_object_object_add(params, "protocolVersion", json_object_new_int(1));
    buf_init(&b, 4096);
    CU_ASSERT_EQUAL_FATAL(acp_encode_request(&b, 7, "initialize", params), 0);
    CU_ASSERT_EQUAL_FATAL(decode_encoded(&b, &m), 0);
    CU_ASSERT_EQUAL(m.kind, ACP_REQUEST);
    CU_ASSERT_EQUAL(acp_msg_int_id(&m, &id), 0);
    CU_ASSERT_EQUAL(id, 7);
    CU_ASSERT_STRING_EQUAL(TEST_STR(m.method), "initialize");
    CU_ASSERT_TRUE(json_object_equal(m.params, params));
    acp_msg_release(&m);

    /* NULL params are sent as {} and a second encode appends a second line */
    buf_reset(&b);
    CU_ASSERT_EQUAL_FATAL(acp_encode_request(&b, 8, "session/new", NULL), 0);
    CU_ASSERT_EQUAL_FATAL(decode_encoded(&b, &m), 0);
    CU_ASSERT_TRUE(json_object_is_type(m.params, json_type_object));
    CU_ASSERT_EQUAL(json_object_object_length(m.params), 0);
    acp_msg_release(&m);
    CU_ASSERT_EQUAL(acp_encode_request(&b, 9, "x", NULL), 0);
    CU_ASSERT_EQUAL(b.data[b.len - 1], '\n');
    CU_ASSERT_PTR_NOT_NULL(memchr(b.data, '\n', b.len - 1));
    buf_release(&b);
    json_object_put(params);
}

static void test_acp_encode_notification_roundtrip(void)
{
    json_object *params = test_json("{\"sessionId\":\"s\\n1\",\"text\":\"line1\\nline2\"}");
    struct acp_msg m;
    struct buf b;

    CU_ASSERT_PTR_NOT_NULL_FATAL(params);
    buf_init(&b, 4096);
    CU_ASSERT_EQUAL_FATAL(acp_encode_notification(&b, "session/cancel", params), 0);
    CU_ASSERT_EQUAL_FATAL(decode_encoded(&b, &m), 0); /* embedded newlines stay escaped */
    CU_ASSERT_EQUAL(m.kind, ACP_NOTIFICATION);
    CU_ASSERT_PTR_NULL(m.id);
    CU_ASSERT_STRING_EQUAL(TEST_STR(m.method), "session/cancel");
    CU_ASSERT_TRUE(json_object_equal(m.params, params));
    acp_msg_release(&m);
    buf_release(&b);
    json_object_put(params);
}

static void test_acp_encode_result_roundtrip(void)
{
    json_object *id = json_object_new_string("perm-3");
    json_object *result = test_json("{\"outcome\":{\"outcome\":\"selected\",\"optionId\":\"a\"}}");
    struct acp_msg m;
    struct buf b;

    CU_ASSERT_PTR_NOT_NULL_FATAL(result);
    buf_init(&b, 4096);
    CU_ASSERT_EQUAL_FATAL(acp_encode_result(&b, id, result), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&b), "\"id\":\"perm-3\""));
    CU_ASSERT_EQUAL_FATAL(decode_encoded(&b, &m), 0);
    CU_ASSERT_EQUAL(m.kind, ACP_RESPONSE);
    CU_ASSERT_TRUE(json_object_equal(m.id, id));
    CU_ASSERT_TRUE(json_object_equal(m.result, result));
    CU_ASSERT_PTR_NULL(m.error);
    acp_msg_release(&m);

    /* a NULL result is "result":null, still a valid response */
    buf_reset(&b);
    CU_ASSERT_EQUAL_FATAL(acp_encode_result(&b, id, NULL), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&b), "\"result\":null"));
    CU_ASSERT_EQUAL_FATAL(decode_encoded(&b, &m), 0);
    CU_ASSERT_EQUAL(m.kind, ACP_RESPONSE);
    CU_ASSERT_PTR_NULL(m.result);
    acp_msg_release(&m);
    buf_release(&b);
    json_object_put(result);
    json_object_put(id);
}

/* An unknown agent request is answered with -32601 and its own id, whatever its type. */
static void test_acp_encode_error_method_not_found_echoes_id(void)
{
    static const struct {
        const char *line;
        const char *id_text;
    } cases[] = {
        {"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"x/unknown\",\"params\":{}}", "\"id\":0"},
        {"{\"jsonrpc\":\"2.0\",\"id\":\"abc-7\",\"method\":\"x/unknown\"}", "\"id\":\"abc-7\""},
        {"{\"jsonrpc\":\"2.0\",\"id\":9007199254740993,\"method\":\"terminal/create\"}",
         "\"id\":9007199254740993"},
    };

    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct acp_msg req, resp;
        struct buf b;

        buf_init(&b, 4096);
        CU_ASSERT_EQUAL_FATAL(decode(cases[i].line, &req), 0);
        CU_ASSERT_EQUAL(req.kind, ACP_REQUEST);
        CU_ASSERT_EQUAL_FATAL(
            acp_encode_error(&b, req.id, ACP_METHOD_NOT_FOUND, "Method not found: x/unknown"), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&b), cases[i].id_text));
        CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&b), "\"code\":-32601"));
        CU_ASSERT_EQUAL_FATAL(decode_encoded(&b, &resp), 0);
        CU_ASSERT_EQUAL(resp.kind, ACP_RESPONSE);
        CU_ASSERT_TRUE(json_object_equal(resp.id, req.id));
        CU_ASSERT_EQUAL(json_object_get_type(resp.id), json_object_get_type(req.id));
        CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(resp.error, "code")), -32601);
        CU_ASSERT_STRING_EQUAL(acp_msg_error_message(&resp), "Method not found: x/unknown");
        acp_msg_release(&resp);
        acp_msg_release(&req);
        buf_release(&b);
    }
}

/* Take the next line and compare it with want (NULL: expect no complete line). */
static void expect_line(struct acp_lines *l, const char *want)
{
    char *line = NULL;
    size_t len = 0;
    int r = acp_lines_next(l, &line, &len);

    if (!want) {
        CU_ASSERT_EQUAL(r, 0);
        CU_ASSERT_PTR_NULL(line);
        free(line);
        return;
    }
    CU_ASSERT_EQUAL(r, 1);
    if (r != 1)
        return;
    CU_ASSERT_EQUAL(len, strlen(want));
    CU_ASSERT_EQUAL(strlen(line), len); /* NUL-terminated right after the content */
    CU_ASSERT_STRING_EQUAL(line, want);
    free(line);
}

/* Hand data to l the way the runner reads a harness: acp_lines_fill on a file descriptor. */
static int feed(struct acp_lines *l, const char *data, size_t len)
{
    int fd = memfd_create("acp-feed", MFD_CLOEXEC);
    size_t got = 0;
    ssize_t n = 0;

    if (fd < 0)
        return -1;
    if (write(fd, data, len) != (ssize_t)len || lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return -1;
    }
    while (got < len && (n = acp_lines_fill(l, fd)) > 0)
        got += (size_t)n;
    close(fd);
    return got == len ? 0 : n < 0 ? (int)n : -1;
}

static int feed_str(struct acp_lines *l, const char *s)
{
    return feed(l, s, strlen(s));
}

static void test_acp_lines_split_across_feeds(void)
{
    struct acp_lines l;

    acp_lines_init(&l, ACP_LINE_MAX_DEFAULT);
    CU_ASSERT_EQUAL(feed_str(&l, "{\"jsonrpc\":"), 0);
    expect_line(&l, NULL);
    CU_ASSERT_EQUAL(feed_str(&l, "\"2.0\","), 0);
    expect_line(&l, NULL);
    CU_ASSERT_EQUAL(feed_str(&l, "\"method\":\"m\"}\n{\"a\""), 0);
    expect_line(&l, "{\"jsonrpc\":\"2.0\",\"method\":\"m\"}");
    expect_line(&l, NULL);
    CU_ASSERT_EQUAL(feed_str(&l, ":1}\n"), 0);
    expect_line(&l, "{\"a\":1}");
    expect_line(&l, NULL);
    acp_lines_release(&l);
}

static void test_acp_lines_several_lines_in_one_feed(void)
{
    static const char data[] = "one\ntwo\n\nthree\nfour";
    struct acp_lines l;

    acp_lines_init(&l, ACP_LINE_MAX_DEFAULT);
    CU_ASSERT_EQUAL(feed_str(&l, data), 0);
    expect_line(&l, "one");
    expect_line(&l, "two");
    expect_line(&l, ""); /* an empty line is a line */
    expect_line(&l, "three");
    expect_line(&l, NULL); /* "four" has no '\n' yet */
    CU_ASSERT_EQUAL(feed_str(&l, "\n"), 0);
    expect_line(&l, "four");
    expect_line(&l, NULL);
    acp_lines_release(&l);
}

static void test_acp_lines_crlf(void)
{
    struct acp_lines l;

    acp_lines_init(&l, ACP_LINE_MAX_DEFAULT);
    CU_ASSERT_EQUAL(feed_str(&l, "a\r\nbc\r\n\r\nd\re\n"), 0);
    expect_line(&l, "a");
    expect_line(&l, "bc");
    expect_line(&l, "");
    expect_line(&l, "d\re"); /* only a trailing '\r' is dropped */
    expect_line(&l, NULL);
    acp_lines_release(&l);
}

static char *big_message(size_t *ret_len)
{
    static const char head[] = "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":"
                               "{\"text\":\"";
    static const char tail[] = "\"}}";
    size_t n = BIG_LINE, hl = sizeof(head) - 1, tl = sizeof(tail) - 1;
    char *s = malloc(n + 2);

    if (!s)
        return NULL;
    memcpy(s, head, hl);
    for (size_t i = hl; i < n - tl; i++)
        s[i] = (char)('a' + i % 26);
    memcpy(s + n - tl, tail, tl);
    s[n] = '\n';
    s[n + 1] = '\0';
    *ret_len = n;
    return s;
}

/* A 3 MiB line (far over any pipe buffer) passes intact with the default maximum. */
static void test_acp_lines_big_line_default_max(void)
{
    struct acp_lines l;
    struct acp_msg m;
    char *msg, *line = NULL, err[128];
    size_t len = 0, got = 0;

    msg = big_message(&len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(msg);
    acp_lines_init(&l, ACP_LINE_MAX_DEFAULT);
    for (size_t off = 0; off < len + 1; off += 65536) {
        size_t n = len + 1 - off < 65536 ? len + 1 - off : 65536;

        CU_ASSERT_EQUAL(feed(&l, msg + off, n), 0);
        if (off + n < len + 1)
            CU_ASSERT_EQUAL(acp_lines_next(&l, &line, &got), 0);
    }
    CU_ASSERT_EQUAL_FATAL(acp_lines_next(&l, &line, &got), 1);
    CU_ASSERT_EQUAL(got, len);
    CU_ASSERT_EQUAL(memcmp(line, msg, len), 0);
    CU_ASSERT_EQUAL(acp_decode(line, got, &m, err, sizeof(err)), 0);
    CU_ASSERT(json_object_get_string_len(jsonx_get(m.params, "text")) > 3000000);
    acp_msg_release(&m);
    free(line);
    acp_lines_release(&l);
    free(msg);
}

/* The same big line read from a file descriptor with acp_lines_fill. */
static void test_acp_lines_fill_big_line_from_fd(void)
{
    struct acp_lines l;
    char *msg, *line = NULL;
    size_t len = 0, got = 0;
    ssize_t n;
    int fd, r = 0;

    msg = big_message(&len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(msg);
    fd = memfd_create("acp-lines", 0);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL_FATAL(write(fd, msg, len + 1), (ssize_t)(len + 1));
    CU_ASSERT_EQUAL_FATAL(write(fd, "tail", 4), 4);
    CU_ASSERT_EQUAL_FATAL(lseek(fd, 0, SEEK_SET), 0);
    acp_lines_init(&l, ACP_LINE_MAX_DEFAULT);
    for (;;) {
        n = acp_lines_fill(&l, fd);
        CU_ASSERT(n >= 0);
        if (n <= 0)
            break;
        r = acp_lines_next(&l, &line, &got);
        if (r != 0)
            break;
    }
    CU_ASSERT_EQUAL_FATAL(r, 1);
    CU_ASSERT_EQUAL(got, len);
    CU_ASSERT_EQUAL(memcmp(line, msg, len), 0);
    free(line);
    /* the bytes after the line stay buffered as a partial line */
    expect_line(&l, NULL);
    while ((n = acp_lines_fill(&l, fd)) > 0)
        ;
    CU_ASSERT_EQUAL(n, 0); /* end of file */
    expect_line(&l, NULL);
    CU_ASSERT_EQUAL(l.in.len, 4);
    CU_ASSERT_EQUAL(memcmp(l.in.data, "tail", 4), 0);
    acp_lines_release(&l);
    close(fd);
    free(msg);
}

static void test_acp_lines_over_max_is_e2big(void)
{
    struct acp_lines l;
    char *line = NULL;
    size_t len = 0;
    char data[64];
    int fd;

    /* a complete line longer than the maximum */
    acp_lines_init(&l, 16);
    memset(data, 'x', sizeof(data));
    data[40] = '\n';
    CU_ASSERT_EQUAL(feed(&l, data, 41), 0);
    CU_ASSERT_EQUAL(acp_lines_next(&l, &line, &len), -E2BIG);
    CU_ASSERT_PTR_NULL(line);
    acp_lines_release(&l);

    /* exactly the maximum is fine */
    acp_lines_init(&l, 16);
    CU_ASSERT_EQUAL(feed_str(&l, "0123456789abcdef\n"), 0);
    expect_line(&l, "0123456789abcdef");
    acp_lines_release(&l);

    /* a partial line already longer than the maximum: no need to wait for its end */
    acp_lines_init(&l, 16);
    CU_ASSERT_EQUAL(feed(&l, data, 20), 0);
    CU_ASSERT_EQUAL(acp_lines_next(&l, &line, &len), -E2BIG);
    CU_ASSERT_PTR_NULL(line);
    acp_lines_release(&l);

    /* through a file descriptor */
    fd = memfd_create("acp-lines", 0);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL_FATAL(write(fd, data, 30), 30);
    CU_ASSERT_EQUAL_FATAL(lseek(fd, 0, SEEK_SET), 0);
    acp_lines_init(&l, 16);
    CU_ASSERT_EQUAL(acp_lines_fill(&l, fd), 30);
    CU_ASSERT_EQUAL(acp_lines_fill(&l, fd), -E2BIG);
    CU_ASSERT_EQUAL(acp_lines_next(&l, &line, &len), -E2BIG);
    CU_ASSERT_PTR_NULL(line);
    acp_lines_release(&l);
    close(fd);
}

static void test_acp_lines_partial_line_stays_buffered(void)
{
    struct acp_lines l;

    acp_lines_init(&l, ACP_LINE_MAX_DEFAULT);
    expect_line(&l, NULL); /* empty */
    CU_ASSERT_EQUAL(feed_str(&l, "abc"), 0);
    expect_line(&l, NULL);
    expect_line(&l, NULL); /* asking again does not lose or duplicate bytes */
    CU_ASSERT_EQUAL(l.in.len, 3);
    CU_ASSERT_EQUAL(feed_str(&l, "def"), 0);
    expect_line(&l, NULL);
    CU_ASSERT_EQUAL(feed_str(&l, "\nghi"), 0);
    expect_line(&l, "abcdef");
    expect_line(&l, NULL);
    CU_ASSERT_EQUAL(l.in.len, 3);
    CU_ASSERT_EQUAL(memcmp(l.in.data, "ghi", 3), 0);
    acp_lines_release(&l);
}

CU_TestInfo acp_tests[] = {
    {"test_acp_decode_request", test_acp_decode_request},
    {"test_acp_decode_notification", test_acp_decode_notification},
    {"test_acp_decode_response_result", test_acp_decode_response_result},
    {"test_acp_decode_response_error", test_acp_decode_response_error},
    {"test_acp_decode_agent_request_id_collision", test_acp_decode_agent_request_id_collision},
    {"test_acp_decode_string_id", test_acp_decode_string_id},
    {"test_acp_decode_invalid_lines", test_acp_decode_invalid_lines},
    {"test_acp_encode_request_roundtrip", test_acp_encode_request_roundtrip},
    {"test_acp_encode_notification_roundtrip", test_acp_encode_notification_roundtrip},
    {"test_acp_encode_result_roundtrip", test_acp_encode_result_roundtrip},
    {"test_acp_encode_error_method_not_found_echoes_id",
     test_acp_encode_error_method_not_found_echoes_id},
    {"test_acp_lines_split_across_feeds", test_acp_lines_split_across_feeds},
    {"test_acp_lines_several_lines_in_one_feed", test_acp_lines_several_lines_in_one_feed},
    {"test_acp_lines_crlf", test_acp_lines_crlf},
    {"test_acp_lines_big_line_default_max", test_acp_lines_big_line_default_max},
    {"test_acp_lines_fill_big_line_from_fd", test_acp_lines_fill_big_line_from_fd},
    {"test_acp_lines_over_max_is_e2big", test_acp_lines_over_max_is_e2big},
    {"test_acp_lines_partial_line_stays_buffered", test_acp_lines_partial_line_stays_buffered},
    CU_TEST_INFO_NULL,
};
