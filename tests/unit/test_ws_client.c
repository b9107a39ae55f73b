/*
 * ws_client — the frame parser (every RFC 6455 rule it enforces, streaming payloads, feeding
 * byte by byte), the masked encoder, the accept key, and whole connections against a canned
 * loopback server: upgrade, binary frames, ping answered with a masked pong, close echoed,
 * refused and malformed upgrades.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../../engine/provider/ws_client.h"
#include "../../engine/util.h"
#include "canned_server.h"
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

static int feed_all(struct ws_parser *p, const uint8_t *data, size_t len, size_t step,
                    struct collected *c)
{
    size_t at = 0;

    while (at < len) {
        size_t n = step && len - at > step ? step : len - at, off = 0;

        while (off < n || (n == 0 && off == 0)) {
            struct ws_event ev;
            size_t used;
            int r = ws_parser_feed(p, data + at + off, n - off, &used, &ev);

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
    struct ws_parser p;

    memset(c, 0, sizeof(*c));
    ws_parser_init(&p, 1024);
    return feed_all(&p, data, len, step, c);
}

/* A fragmented binary message with a ping in the middle, then a close: at every step size. */
static void test_ws_client_parser_fragments_and_control(void)
{
    static const uint8_t msg[] = {
        0x02, 0x03, 'a', 'b', 'c',       /* binary, not final */
        0x89, 0x02, 'h', 'i',            /* ping in the middle */
        0x00, 0x02, 'd', 'e',            /* continuation, not final */
        0x80, 0x01, 'f',                 /* final continuation */
        0x88, 0x02, 0x03, 0xe8,          /* close 1000 */
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

static void test_ws_client_parser_extended_lengths(void)
{
    uint8_t f16[4 + 300], f64[10 + 70000];
    struct ws_parser p;
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
    ws_parser_init(&p, 100000);
    while (at < sizeof(f64)) {
        struct ws_event ev;
        size_t used;
        int r = ws_parser_feed(&p, f64 + at, sizeof(f64) - at, &used, &ev);

        CU_ASSERT(r >= 0);
        if (r <= 0)
            break;
        at += used;
        CU_ASSERT_EQUAL(ev.type, WS_EV_DATA);
    }
    CU_ASSERT_EQUAL(at, sizeof(f64));
    /* the same frame over a 64 KiB limit is refused, not truncated */
    ws_parser_init(&p, 65536);
    {
        struct ws_event ev;
        size_t used;

        CU_ASSERT_EQUAL(ws_parser_feed(&p, f64, 10, &used, &ev), -EMSGSIZE);
    }
    free(c);
}

static void test_ws_client_parser_rejects_protocol_errors(void)
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

static void test_ws_client_parser_close_without_code(void)
{
    static const uint8_t close0[] = {0x88, 0x00};
    struct collected c;

    CU_ASSERT_EQUAL(parse_bytes(close0, sizeof(close0), 0, &c), 0);
    CU_ASSERT_EQUAL(c.closes, 1);
    CU_ASSERT_EQUAL(c.close_code, WS_CLOSE_NO_STATUS);
}

/* Encode, then unmask by hand: the payload comes back; the header says masked and FIN. */
static void test_ws_client_encode_masks(void)
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
static void test_ws_client_accept_key(void)
{
    char out[29];

    CU_ASSERT_EQUAL(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", out), 0);
    CU_ASSERT_STRING_EQUAL(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

#define UPGRADE                                                                                 \
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"       \
    "Sec-WebSocket-Accept: %ACCEPT%\r\n\r\n"

static void test_ws_client_connect_frames_ping_close(void)
{
    static const char reply[] = UPGRADE "\x82\x05hello"
                                        "\x89\x03" "abc"
                                        "\x02\x02" "wo\x80\x03" "rld"
                                        "\x88\x02\x03\xe8";
    struct canned_reply r = {reply, sizeof(reply) - 1};
    const char *headers[] = {"Authorization: Bearer k-123", "X-Daytona-SDK-Version: 0.198.0"};
    struct canned_server s;
    struct ws_options o = {0};
    struct ws_conn *ws = NULL;
    struct ws_event ev;
    char url[128], err[256] = "", got[64] = "";
    size_t glen = 0;
    int n;

    CU_ASSERT_FATAL(canned_start(&s, &r, 1) == 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/logs?follow=true", s.port);
    o.url = url;
    o.headers = headers;
    o.nheaders = 2;
    o.subprotocol = "X-Daytona-SDK-Version~0.198.0";
    CU_ASSERT_EQUAL(ws_connect(&o, &ws, err, sizeof(err)), 0);
    if (!ws) {
        fprintf(stderr, "\n  connect: %s\n", err);
        canned_stop(&s);
        canned_release(&s);
        return;
    }
    while ((n = ws_read(ws, 3000, &ev)) == 1 && ev.type == WS_EV_DATA) {
        memcpy(got + glen, ev.data, ev.len);
        glen += ev.len;
    }
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(ev.type, WS_EV_CLOSE);
    CU_ASSERT_EQUAL(ev.close_code, 1000);
    CU_ASSERT_EQUAL(glen, 10);
    CU_ASSERT(memcmp(got, "helloworld", 10) == 0);
    CU_ASSERT_EQUAL(ws_read(ws, 10, &ev), -ECONNRESET);
    ws_free(ws);
    canned_stop(&s);
    /* the request carried our headers; the client answered the ping and the close, masked */
    CU_ASSERT(strstr(buf_str(&s.requests), "GET /logs?follow=true HTTP/1.1\r\n") != NULL);
    CU_ASSERT(strstr(buf_str(&s.requests), "\r\nAuthorization: Bearer k-123\r\n") != NULL);
    CU_ASSERT(strstr(buf_str(&s.requests), "\r\nSec-WebSocket-Version: 13\r\n") != NULL);
    CU_ASSERT(strstr(buf_str(&s.requests),
                     "\r\nSec-WebSocket-Protocol: X-Daytona-SDK-Version~0.198.0\r\n") != NULL);
    CU_ASSERT_FATAL(s.ws_frames.len >= 2 * 6 + 3 + 2);
    {
        const uint8_t *f = (const uint8_t *)s.ws_frames.data;
        char pong[4];

        CU_ASSERT_EQUAL(f[0], 0x8a); /* pong */
        CU_ASSERT_EQUAL(f[1], 0x83); /* masked, 3 bytes */
        for (int i = 0; i < 3; i++)
            pong[i] = (char)(f[6 + i] ^ f[2 + (i & 3)]);
        CU_ASSERT(memcmp(pong, "abc", 3) == 0);
        CU_ASSERT_EQUAL(f[9], 0x88); /* close echoed */
        CU_ASSERT_EQUAL(f[10], 0x82);
    }
    canned_release(&s);
}

static void test_ws_client_connect_refused_and_bad_upgrades(void)
{
    static const struct {
        const char *reply;
        int want;
        const char *text;
    } cases[] = {
        {"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nno sandbx", -ENOENT,
         "HTTP 404: no sandbx"},
        {"HTTP/1.1 400 Bad Request\r\nContent-Length: 26\r\n\r\nIs the Sandbox started?...",
         -EINVAL, "HTTP 400"},
        {"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n", -EACCES, "HTTP 401"},
        {"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n\r\n",
         -EPROTO, "Sec-WebSocket-Accept"},
        {"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Accept: %ACCEPT%\r\n\r\n",
         -EPROTO, "Upgrade header"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct canned_reply r = {cases[i].reply, 0};
        struct canned_server s;
        struct ws_options o = {0};
        struct ws_conn *ws = NULL;
        char url[128], err[256] = "";

        CU_ASSERT_FATAL(canned_start(&s, &r, 1) == 0);
        snprintf(url, sizeof(url), "ws://127.0.0.1:%d/x", s.port);
        o.url = url;
        o.connect_timeout_ms = 3000;
        CU_ASSERT_EQUAL(ws_connect(&o, &ws, err, sizeof(err)), cases[i].want);
        CU_ASSERT_PTR_NULL(ws);
        CU_ASSERT(strstr(err, cases[i].text) != NULL);
        ws_free(ws);
        canned_stop(&s);
        canned_release(&s);
    }
}

static void test_ws_client_connect_rejects_bad_input(void)
{
    const char *bad_header[] = {"X-Evil: a\r\nInjected: b"};
    struct ws_options o = {0};
    struct ws_conn *ws = NULL;
    char err[256];

    o.url = "ftp://127.0.0.1/x";
    CU_ASSERT_EQUAL(ws_connect(&o, &ws, err, sizeof(err)), -EINVAL);
    o.url = "ws://user@127.0.0.1/x";
    CU_ASSERT_EQUAL(ws_connect(&o, &ws, err, sizeof(err)), -EINVAL);
    o.url = "ws://127.0.0.1:99999/x";
    CU_ASSERT_EQUAL(ws_connect(&o, &ws, err, sizeof(err)), -EINVAL);
    o.url = "ws://127.0.0.1/a b";
    CU_ASSERT_EQUAL(ws_connect(&o, &ws, err, sizeof(err)), -EINVAL);
    o.url = "ws://127.0.0.1:1/x";
    o.headers = bad_header;
    o.nheaders = 1;
    CU_ASSERT_EQUAL(ws_connect(&o, &ws, err, sizeof(err)), -EINVAL);
    CU_ASSERT(strstr(err, "Injected") == NULL);
    CU_ASSERT_PTR_NULL(ws);
}

/* wss: the peer is verified against the CA given (or the system's), host or IP included. */
static void test_ws_client_tls(void)
{
    static const char reply[] = UPGRADE "\x82\x06" "secure" "\x88\x02\x03\xe8";
    char dir[] = "/tmp/ar-unit-tls-XXXXXX", cert[512], key[512], other[512], okey[512];
    struct canned_reply r = {reply, sizeof(reply) - 1};
    struct ws_options o = {0};
    char url[128], err[256];

    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
    CU_ASSERT_FATAL(canned_make_cert(dir, "ip", "IP:127.0.0.1", cert, key) == 0);
    CU_ASSERT_FATAL(canned_make_cert(dir, "other", "DNS:example.com", other, okey) == 0);
    o.connect_timeout_ms = 5000;
    o.url = url;
    for (int round = 0; round < 3; round++) {
        struct canned_server s;
        struct ws_conn *ws = NULL;
        struct ws_event ev;
        int rr;

        /* 0: trusted and matching; 1: not trusted (system store); 2: trusted, wrong name */
        CU_ASSERT_FATAL(canned_start_tls(&s, &r, 1, round == 2 ? other : cert,
                                         round == 2 ? okey : key) == 0);
        snprintf(url, sizeof(url), "wss://127.0.0.1:%d/logs", s.port);
        o.ca_file = round == 0 ? cert : round == 2 ? other : NULL;
        err[0] = '\0';
        rr = ws_connect(&o, &ws, err, sizeof(err));
        if (round == 0) {
            CU_ASSERT_EQUAL(rr, 0);
            if (ws) {
                CU_ASSERT_EQUAL(ws_read(ws, 3000, &ev), 1);
                CU_ASSERT(ev.type == WS_EV_DATA && ev.len == 6 &&
                          memcmp(ev.data, "secure", 6) == 0);
                CU_ASSERT_EQUAL(ws_read(ws, 3000, &ev), 1);
                CU_ASSERT_EQUAL(ev.type, WS_EV_CLOSE);
            }
        } else {
            CU_ASSERT_EQUAL(rr, -EPROTO);
            CU_ASSERT(strstr(err, "not trusted") != NULL);
            CU_ASSERT_PTR_NULL(ws);
        }
        ws_free(ws);
        canned_stop(&s);
        canned_release(&s);
    }
    (void)rm_rf(dir);
}

CU_TestInfo ws_client_tests[] = {
    {"test_ws_client_tls", test_ws_client_tls},
    {"test_ws_client_parser_fragments_and_control", test_ws_client_parser_fragments_and_control},
    {"test_ws_client_parser_extended_lengths", test_ws_client_parser_extended_lengths},
    {"test_ws_client_parser_rejects_protocol_errors",
     test_ws_client_parser_rejects_protocol_errors},
    {"test_ws_client_parser_close_without_code", test_ws_client_parser_close_without_code},
    {"test_ws_client_encode_masks", test_ws_client_encode_masks},
    {"test_ws_client_accept_key", test_ws_client_accept_key},
    {"test_ws_client_connect_frames_ping_close", test_ws_client_connect_frames_ping_close},
    {"test_ws_client_connect_refused_and_bad_upgrades",
     test_ws_client_connect_refused_and_bad_upgrades},
    {"test_ws_client_connect_rejects_bad_input", test_ws_client_connect_rejects_bad_input},
    CU_TEST_INFO_NULL,
};
