/*
 * fuzz_mcp_sse — the Server-Sent Events parser (engine/tools/mcp_sse.c) on what a hostile or
 * broken MCP server streams.
 *
 * Input layout: byte 0 picks the feeding step (1 + b % 13 bytes per call, 0 = everything at
 * once) and the line/data limit (16 << (b >> 4 & 7) bytes); the rest is the server's stream.
 * Properties:
 *   - feeding in steps gives exactly the events of feeding everything at once (a CR LF split
 *     across two chunks is one line end): the same event names, the same data, the same result;
 *   - an event's data is at most the limit and never holds more bytes than the input; an event
 *     name is at most 63 bytes and never empty.
 */
#include <string.h>

#include "base/buf.h"
#include "fuzz.h"
#include "tools/mcp_sse.h"

struct trace {
    struct buf out; /* per event: name, 0x00, data, 0xff */
    size_t limit;
    size_t input;
};

static int on_event(void *ctx, const char *event, const char *data, size_t len)
{
    struct trace *t = ctx;
    size_t elen = strlen(event);

    FUZZ_CHECK(elen > 0 && elen <= 63);
    FUZZ_CHECK(len <= t->limit && len <= t->input);
    if (buf_append(&t->out, event, elen) < 0 || buf_append(&t->out, "\0", 1) < 0 ||
        buf_append(&t->out, data, len) < 0 || buf_append(&t->out, "\xff", 1) < 0)
        return -1;
    return 0;
}

static int run(const uint8_t *in, size_t len, size_t step, size_t limit, struct trace *t)
{
    struct mcp_sse s;
    size_t at = 0;
    int r = 0;

    t->limit = limit;
    t->input = len;
    buf_init(&t->out, len * 4 + 4096);
    mcp_sse_init(&s, limit, on_event, t);
    while (at < len) {
        size_t n = step && len - at > step ? step : len - at;

        r = mcp_sse_feed(&s, (const char *)in + at, n);
        if (r != 0)
            break;
        at += n;
    }
    mcp_sse_release(&s);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct trace whole, steps;
    size_t step, limit;
    int r1, r2;

    if (size < 1)
        return 0;
    step = data[0] % 14;
    limit = (size_t)16 << (data[0] >> 4 & 7);
    data++;
    size--;
    r1 = run(data, size, 0, limit, &whole);
    r2 = run(data, size, step, limit, &steps);
    FUZZ_CHECK(r1 == r2);
    FUZZ_CHECK(whole.out.len == steps.out.len);
    FUZZ_CHECK(whole.out.len == 0 || memcmp(whole.out.data, steps.out.data, whole.out.len) == 0);
    buf_release(&whole.out);
    buf_release(&steps.out);
    return 0;
}
