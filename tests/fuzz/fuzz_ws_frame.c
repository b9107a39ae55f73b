/*
 * fuzz_ws_frame — the WebSocket frame parser (engine/provider/ws_client.c) on what a hostile
 * or broken server sends.
 *
 * Input layout: byte 0 picks the feeding step (1 + b % 17 bytes per call, 0 = everything at
 * once) and the frame limit (64 << (b >> 5 & 7) bytes); the rest is the server's byte stream.
 * Properties:
 *   - feeding in steps gives exactly the events of feeding everything at once: the same data
 *     bytes per message, the same control events and close code, the same error;
 *   - a DATA event's bytes lie inside the input just fed, and all DATA bytes together are no
 *     more than the input; control payloads are at most 125 bytes;
 *   - nothing is accepted after a close frame;
 *   - a frame we build from the input (unmasked, as a server sends it) parses back to exactly
 *     its payload, and the masked client frame the encoder makes unmasks to it.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "provider/ws_client.h"

struct trace {
    struct buf data;   /* DATA bytes, with a 0xff separator after each final fragment */
    struct buf events; /* one letter per event: D P O C, then the close code */
    int error;
};

static void trace_init(struct trace *t, size_t max)
{
    buf_init(&t->data, max * 2 + 64);
    buf_init(&t->events, max * 4 + 64);
    t->error = 0;
}

static void trace_release(struct trace *t)
{
    buf_release(&t->data);
    buf_release(&t->events);
}

static void run(const uint8_t *in, size_t len, size_t step, uint64_t max_frame, struct trace *t)
{
    struct ws_frame_parser p;
    size_t at = 0;
    bool closed = false;

    ws_frame_parser_init(&p, max_frame);
    while (at < len || len == 0) {
        size_t n = step && len - at > step ? step : len - at, off = 0;

        for (;;) {
            struct ws_event ev;
            size_t used;
            int r = ws_frame_feed(&p, in + at + off, n - off, &used, &ev);

            FUZZ_CHECK(used <= n - off);
            off += used;
            if (r < 0) {
                FUZZ_CHECK(r == -EPROTO || r == -EMSGSIZE);
                t->error = r;
                return;
            }
            if (r == 0) {
                FUZZ_CHECK(off == n);
                break;
            }
            FUZZ_CHECK(!closed);
            switch (ev.type) {
            case WS_EV_DATA:
                FUZZ_CHECK(ev.data >= in + at && ev.data + ev.len <= in + at + n);
                FUZZ_CHECK(ev.opcode == WS_OP_TEXT || ev.opcode == WS_OP_BINARY);
                FUZZ_CHECK(buf_append(&t->data, ev.data, ev.len) == 0);
                if (ev.fin) {
                    FUZZ_CHECK(buf_append_char(&t->data, (char)0xff) == 0);
                    FUZZ_CHECK(buf_append_char(&t->events, 'D') == 0);
                }
                break;
            case WS_EV_PING:
            case WS_EV_PONG:
                FUZZ_CHECK(ev.len <= WS_CONTROL_MAX);
                FUZZ_CHECK(buf_append_char(&t->events, ev.type == WS_EV_PING ? 'P' : 'O') == 0);
                FUZZ_CHECK(buf_append(&t->events, ev.data, ev.len) == 0);
                break;
            case WS_EV_CLOSE:
                FUZZ_CHECK(ev.len <= WS_CONTROL_MAX - 2);
                FUZZ_CHECK(buf_printf(&t->events, "C%u", ev.close_code) >= 0);
                closed = true;
                break;
            }
        }
        at += n;
        if (len == 0)
            break;
    }
}

/* An unmasked server frame of payload, built here, parses back to it. */
static void check_roundtrip(const uint8_t *payload, size_t len)
{
    uint8_t head[10];
    size_t hl = 0, got = 0;
    struct ws_frame_parser p;
    uint8_t *frame = malloc(len + sizeof(head));
    uint8_t mask[4] = {0x12, 0x34, 0x56, 0x78};
    struct buf enc;

    FUZZ_CHECK(frame != NULL);
    head[hl++] = 0x82;
    if (len < 126) {
        head[hl++] = (uint8_t)len;
    } else if (len < 65536) {
        head[hl++] = 126;
        head[hl++] = (uint8_t)(len >> 8);
        head[hl++] = (uint8_t)len;
    } else {
        head[hl++] = 127;
        for (int i = 7; i >= 0; i--)
            head[hl++] = (uint8_t)((uint64_t)len >> (8 * i));
    }
    memcpy(frame, head, hl);
    memcpy(frame + hl, payload, len);
    ws_frame_parser_init(&p, len + 1);
    for (size_t at = 0; at < hl + len;) {
        struct ws_event ev;
        size_t used;
        int r = ws_frame_feed(&p, frame + at, hl + len - at, &used, &ev);

        FUZZ_CHECK(r == 1 || (r == 0 && used == hl + len - at));
        at += used;
        if (r == 1) {
            FUZZ_CHECK(ev.type == WS_EV_DATA);
            FUZZ_CHECK(memcmp(ev.data, payload + got, ev.len) == 0);
            got += ev.len;
        }
    }
    FUZZ_CHECK(got == len);
    /* the encoder masks: xor with the key gives the payload back */
    buf_init(&enc, len + 32);
    FUZZ_CHECK(ws_frame_encode(WS_OP_BINARY, payload, len, mask, &enc) == 0);
    FUZZ_CHECK(enc.len == hl + 4 + len);
    FUZZ_CHECK(((uint8_t)enc.data[1] & 0x80) != 0);
    for (size_t i = 0; i < len; i++)
        FUZZ_CHECK(((uint8_t)enc.data[hl + 4 + i] ^ mask[i & 3]) == payload[i]);
    buf_release(&enc);
    free(frame);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct trace whole, stepped;
    size_t step;
    uint64_t max_frame;

    if (size < 1)
        return 0;
    step = data[0] % 18;
    max_frame = 64u << ((data[0] >> 5) & 7);
    trace_init(&whole, size);
    trace_init(&stepped, size);
    run(data + 1, size - 1, 0, max_frame, &whole);
    run(data + 1, size - 1, step, max_frame, &stepped);
    FUZZ_CHECK(whole.error == stepped.error);
    FUZZ_CHECK(whole.events.len == stepped.events.len &&
               memcmp(buf_str(&whole.events), buf_str(&stepped.events), whole.events.len) == 0);
    /* errors are found in headers only, so both saw the same payload bytes before one */
    FUZZ_CHECK(whole.data.len == stepped.data.len &&
               memcmp(buf_str(&whole.data), buf_str(&stepped.data), whole.data.len) == 0);
    trace_release(&whole);
    trace_release(&stepped);
    check_roundtrip(data + 1, size - 1 > 70000 ? 70000 : size - 1);
    return 0;
}
