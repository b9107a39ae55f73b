/*
 * mcp_sse — the SSE parser: line endings, multi-line data, comments, event types, byte-by-byte
 * feeding, a callback that stops the stream, and the cap.
 */
#include <errno.h>
#include <string.h>

#include "suites.h"
#include "tools/mcp_sse.h"

struct events {
    char text[4096];
    int stop_at; /* stop after this many events (0 = never) */
    int n;
};

static int collect(void *ctx, const char *event, const char *data, size_t len)
{
    struct events *e = ctx;
    size_t used = strlen(e->text);

    snprintf(e->text + used, sizeof(e->text) - used, "[%s|%.*s]", event, (int)len, data);
    e->n++;
    return e->stop_at && e->n >= e->stop_at ? 1 : 0;
}

static void test_mcp_sse_parser(void)
{
    static const char stream[] = ": comment\r\n"
                                 "event: message\r\n"
                                 "data: {\"a\":1}\r\n"
                                 "\r\n"
                                 "data:first\n"
                                 "data: second\n"
                                 "id: 7\n"
                                 "retry: 10\n"
                                 "\n"
                                 "event: ping\r"
                                 "data\r"
                                 "\r"
                                 "data: no blank line at the end";
    const char *want = "[message|{\"a\":1}][message|first\nsecond][ping|]";
    struct mcp_sse s;
    struct events e;

    /* whole, then one byte at a time: the same events */
    for (int mode = 0; mode < 2; mode++) {
        memset(&e, 0, sizeof(e));
        mcp_sse_init(&s, 1024, collect, &e);
        if (mode == 0) {
            CU_ASSERT_EQUAL(mcp_sse_feed(&s, stream, sizeof(stream) - 1), 0);
        } else {
            for (size_t i = 0; i < sizeof(stream) - 1; i++)
                CU_ASSERT_EQUAL(mcp_sse_feed(&s, stream + i, 1), 0);
        }
        CU_ASSERT_STRING_EQUAL(e.text, want);
        mcp_sse_release(&s);
    }
    /* the callback stops the stream */
    memset(&e, 0, sizeof(e));
    e.stop_at = 1;
    mcp_sse_init(&s, 1024, collect, &e);
    CU_ASSERT_EQUAL(mcp_sse_feed(&s, stream, sizeof(stream) - 1), 1);
    CU_ASSERT_EQUAL(e.n, 1);
    mcp_sse_release(&s);
    /* a line or an event over the cap is an error, not a truncation */
    memset(&e, 0, sizeof(e));
    mcp_sse_init(&s, 16, collect, &e);
    CU_ASSERT_EQUAL(mcp_sse_feed(&s, "data: 0123456789abcdefgh\n\n", 26), -E2BIG);
    mcp_sse_release(&s);
}

CU_TestInfo mcp_sse_tests[] = {
    {"test_mcp_sse_parser", test_mcp_sse_parser},
    CU_TEST_INFO_NULL,
};
