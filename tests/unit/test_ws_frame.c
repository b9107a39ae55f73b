/*
 * ws_frame — the frame parser (every RFC 6455 rule it enforces, streaming payloads, feeding
 * byte by byte at every step size), the masked encoder and the accept key.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "provider/ws_frame.h"
#include "suites.h"

/* Feed all of data; collect DATA payload bytes into out; count events; stop at the first
 * error (returned). */
struct collected {
    char data[4096];
    size_t len;
    int data_events, pings, pongs, closes, fins;
    uint16_t close_code;
    uint8_t opcode;
};

static int feed_all(struct ws_frame_parser *p, const uint8_t *data, size_t len, size_t step,
                    struct collected *c)
{
    size_t at = 0;

    while (at < len) {
        size_t n = step && len - at > step ? step : len - at, off = 0;

        while (off < n || (n == 0 && off == 0)) {
            struct ws_event ev;
            size_t used;
            int r = ws_frame_feed(p, data + at + off, n - off, &used, &ev);

            if (r < 0)
                return r;
            off += used;
            if (r == 0)
                break;
            switch (ev.type) {
            case WS_EV_DATA:
                memcpy(c->data + c->len, ev.data, ev.len);
                c->len += ev.len;
                c->data_events++;
                c->fins += ev.fin;
                c->opcode = ev.opcode;
                break;
            case WS_EV_PING:
                c->pings++;
                break;
            case WS_EV_PONG:
                c->pongs++;
                break;
            case WS_EV_CLOSE:
                c->closes++;
                c->close_code = ev.close_code;
                break;
            }
        }
        at += n;
    }
    return 0;
}

static int parse_bytes(const uint8_t *data, size_t len, size_t step, struct collected *c)
{
    struct ws_frame_parser p;

    memset(c, 0, sizeof(*c));
    ws_frame_parser_init(&p, 1024);
    return feed_all(&p, data, len, step, c);
}

/* A fragmented binary message with a ping in the middle, then a close: at every step size. */
static void test_ws_frame_parser_fragments_and_control(void)
{
    static const uint8_t msg[] = {
        0x02, 0x03, 'a',  'b',  'c', /* binary, not final */
        0x89, 0x02, 'h',  'i',       /* ping in the middle */
        0x00, 0x02, 'd',  'e',       /* continuation, not final */
        0x80, 0x01, 'f',             /* final continuation */
        0x88, 0x02, 0x03, 0xe8,      /* close 1000 */
    };

    for (size_t step = 0; step <= sizeof(msg); step++) {
        struct collected c;

        CU_ASSERT_EQUAL(parse_bytes(msg, sizeof(msg), step, &c), 0);
        CU_ASSERT_EQUAL(c.len, 6);
        CU_ASSERT(memcmp(c.data, "abcdef", 6) == 0);
        CU_ASSERT_EQUAL(c.pings, 1);
        CU_ASSERT_EQUAL(c.fins, 1);
        CU_ASSERT_EQUAL(c.opcode, WS_OP_BINARY);
        CU_ASSERT_EQUAL(c.closes, 1);
        CU_ASSERT_EQUAL(c.close_code, 1000);
    }
}

static void test_ws_frame_parser_extended_lengths(void)
{
    uint8_t f16[4 + 300], f64[10 + 70000];
    struct ws_frame_parser p;
    struct collected *c = calloc(1, sizeof(*c));
    size_t at = 0;

    f16[0] = 0x82;
    f16[1] = 126;
    f16[2] = 300 >> 8;
    f16[3] = 300 & 0xff;
    memset(f16 + 4, 'x', 300);
    CU_ASSERT_EQUAL(parse_bytes(f16, sizeof(f16), 7, c), 0);
    CU_ASSERT_EQUAL(c->len, 300);
    /* 64-bit length, streamed in pieces without buffering the frame */
    memset(f64, 0, 10);
    f64[0] = 0x82;
    f64[1] = 127;
    f64[7] = (70000 >> 16) & 0xff;
    f64[8] = (70000 >> 8) & 0xff;
    f64[9] = 70000 & 0xff;
    memset(f64 + 10, 'y', 70000);
    ws_frame_parser_init(&p, 100000);
    while (at < sizeof(f64)) {
        struct ws_event ev;
        size_t used;
        int r = ws_frame_feed(&p, f64 + at, sizeof(f64) - at, &used, &ev);

        CU_ASSERT(r >= 0);
        if (r <= 0)
            break;
        at += used;
        CU_ASSERT_EQUAL(ev.type, WS_EV_DATA);
    }
    CU_ASSERT_EQUAL(at, sizeof(f64));
    /* the same frame over a 64 KiB limit is refused, not truncated */
    ws_frame_parser_init(&p, 65536);
    {
        struct ws_event ev;
        size_t used;

        CU_ASSERT_EQUAL(ws_frame_feed(&p, f64, 10, &used, &ev), -EMSGSIZE);
    }
    free(c);
}

static void test_ws_frame_parser_rejects_protocol_errors(void)
{
    static const struct {
        const char *name;
        uint8_t bytes[16];
        size_t len;
        int want;
    } bad[] = {
        {"reserved bit", {0xc2, 0x01, 'a'}, 3, -EPROTO},
        {"masked server frame", {0x82, 0x81, 1, 2, 3, 4, 'a'}, 7, -EPROTO},
        {"unknown opcode 3", {0x83, 0x00}, 2, -EPROTO},
        {"unknown control 0xb", {0x8b, 0x00}, 2, -EPROTO},
        {"continuation first", {0x80, 0x01, 'a'}, 3, -EPROTO},
        {"data inside a message", {0x02, 0x01, 'a', 0x82, 0x01, 'b'}, 6, -EPROTO},
        {"fragmented ping", {0x09, 0x00}, 2, -EPROTO},
        {"control over 125", {0x89, 126, 0x00, 126}, 4, -EPROTO},
        {"16-bit length under 126", {0x82, 126, 0x00, 0x05}, 4, -EPROTO},
        {"64-bit length under 64 KiB", {0x82, 127, 0, 0, 0, 0, 0, 0, 0x01, 0x00}, 10, -EPROTO},
        {"64-bit length with the top bit", {0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0}, 10, -EPROTO},
        {"close with one byte", {0x88, 0x01, 0x03}, 3, -EPROTO},
        {"close code 1005 on the wire", {0x88, 0x02, 0x03, 0xed}, 4, -EPROTO},
        {"close code 999", {0x88, 0x02, 0x03, 0xe7}, 4, -EPROTO},
        {"bytes after close", {0x88, 0x00, 0x82, 0x00}, 4, -EPROTO},
        {"over the frame limit", {0x82, 126, 0x04, 0x01}, 4, -EMSGSIZE},
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct collected c;
        int r = parse_bytes(bad[i].bytes, bad[i].len, 0, &c);

        if (r != bad[i].want)
            fprintf(stderr, "\n  case \"%s\": got %d\n", bad[i].name, r);
        CU_ASSERT_EQUAL(r, bad[i].want);
    }
}

static void test_ws_frame_parser_close_without_code(void)
{
    static const uint8_t close0[] = {0x88, 0x00};
    struct collected c;

    CU_ASSERT_EQUAL(parse_bytes(close0, sizeof(close0), 0, &c), 0);
    CU_ASSERT_EQUAL(c.closes, 1);
    CU_ASSERT_EQUAL(c.close_code, WS_CLOSE_NO_STATUS);
}

/* Encode, then unmask by hand: the payload comes back; the header says masked and FIN. */
static void test_ws_frame_encode_masks(void)
{
    static const uint8_t mask[4] = {0xa1, 0xb2, 0xc3, 0xd4};
    size_t sizes[] = {0, 5, 125, 126, 65535, 65536};

    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k], hl = n < 126 ? 2 : n < 65536 ? 4 : 10;
        uint8_t *payload = malloc(n + 1);
        struct buf out;

        for (size_t i = 0; i < n; i++)
            payload[i] = (uint8_t)(i * 7);
        buf_init(&out, 1u << 20);
        CU_ASSERT_EQUAL(ws_frame_encode(WS_OP_BINARY, payload, n, mask, &out), 0);
        CU_ASSERT_EQUAL(out.len, hl + 4 + n);
        CU_ASSERT_EQUAL((uint8_t)out.data[0], 0x82);
        CU_ASSERT((uint8_t)out.data[1] & 0x80);
        CU_ASSERT(memcmp(out.data + hl, mask, 4) == 0);
        for (size_t i = 0; i < n; i++) {
            if (((uint8_t)out.data[hl + 4 + i] ^ mask[i & 3]) != payload[i]) {
                CU_FAIL("payload does not unmask");
                break;
            }
        }
        buf_release(&out);
        free(payload);
    }
    {
        struct buf out;
        uint8_t big[126] = {0};

        buf_init(&out, 1024);
        CU_ASSERT_EQUAL(ws_frame_encode(WS_OP_PING, big, sizeof(big), mask, &out), -EINVAL);
        CU_ASSERT_EQUAL(out.len, 0);
        buf_release(&out);
    }
}

/* RFC 6455 §1.3's example. */
static void test_ws_frame_accept_key(void)
{
    char out[29];

    CU_ASSERT_EQUAL(ws_frame_accept_key("dGhlIHNhbXBsZSBub25jZQ==", out), 0);
    CU_ASSERT_STRING_EQUAL(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

CU_TestInfo ws_frame_tests[] = {
    {"test_ws_frame_parser_fragments_and_control", test_ws_frame_parser_fragments_and_control},
    {"test_ws_frame_parser_extended_lengths", test_ws_frame_parser_extended_lengths},
    {"test_ws_frame_parser_rejects_protocol_errors", test_ws_frame_parser_rejects_protocol_errors},
    {"test_ws_frame_parser_close_without_code", test_ws_frame_parser_close_without_code},
    {"test_ws_frame_encode_masks", test_ws_frame_encode_masks},
    {"test_ws_frame_accept_key", test_ws_frame_accept_key},
    CU_TEST_INFO_NULL,
};
