/*
 * ws_client — whole connections against a canned loopback server: upgrade with our headers,
 * binary frames, ping answered with a masked pong, close echoed, refused and malformed
 * upgrades, bad URLs and headers, and wss verified against the CA given.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/fstree.h"
#include "base/util.h"
#include "canned_server.h"
#include "provider/ws_client.h"
#include "suites.h"

#define UPGRADE                                                                                    \
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"            \
    "Sec-WebSocket-Accept: %ACCEPT%\r\n\r\n"

static void test_ws_client_connect_frames_ping_close(void)
{
    static const char reply[] = UPGRADE "\x82\x05hello"
                                        "\x89\x03"
                                        "abc"
                                        "\x02\x02"
                                        "wo\x80\x03"
                                        "rld"
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
    static const char reply[] = UPGRADE "\x82\x06"
                                        "secure"
                                        "\x88\x02\x03\xe8";
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
        CU_ASSERT_FATAL(
            canned_start_tls(&s, &r, 1, round == 2 ? other : cert, round == 2 ? okey : key) == 0);
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
    (void)fstree_remove(dir);
}

CU_TestInfo ws_client_tests[] = {
    {"test_ws_client_tls", test_ws_client_tls},
    {"test_ws_client_connect_frames_ping_close", test_ws_client_connect_frames_ping_close},
    {"test_ws_client_connect_refused_and_bad_upgrades",
     test_ws_client_connect_refused_and_bad_upgrades},
    {"test_ws_client_connect_rejects_bad_input", test_ws_client_connect_rejects_bad_input},
    CU_TEST_INFO_NULL,
};
