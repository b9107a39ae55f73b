/*
 * daytona_relay: the frame codec, and the keeper's pump against a real keeper channel in a
 * temp folder, with pipes standing in for the relay's stdio (what the relay in the sandbox
 * would print is written to the pump's stdout pipe; what the pump sends it is read back).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../keeper/keeper_channel.h"
#include "base/fstree.h"
#include "base/jsonx.h"
#include "base/util.h"
#include "provider/daytona/daytona_relay.h"
#include "suites.h"

/* ---- framing ---------------------------------------------------------------------------- */

static void test_daytona_relay_frames_parse_and_refuse(void)
{
    struct daytona_relay_frame f;

    CU_ASSERT_EQUAL(daytona_relay_frame_parse("ready", 5, &f), 0);
    CU_ASSERT_EQUAL(f.kind, DAYTONA_RELAY_READY);
    CU_ASSERT_EQUAL(daytona_relay_frame_parse("o 7", 3, &f), 0);
    CU_ASSERT_TRUE(f.kind == DAYTONA_RELAY_OPEN && f.id == 7);
    CU_ASSERT_EQUAL(daytona_relay_frame_parse("c 2147483647", 12, &f), 0);
    CU_ASSERT_TRUE(f.kind == DAYTONA_RELAY_CLOSE && f.id == 2147483647u);
    CU_ASSERT_EQUAL(daytona_relay_frame_parse("d 12 aGk=", 9, &f), 0);
    CU_ASSERT_TRUE(f.kind == DAYTONA_RELAY_DATA && f.id == 12 && f.payload_len == 4);
    CU_ASSERT_EQUAL(strncmp(f.payload, "aGk=", 4), 0);
    CU_ASSERT_EQUAL(daytona_relay_frame_parse("d 3 ", 4, &f), 0); /* an empty line */
    CU_ASSERT_EQUAL(f.payload_len, 0);
    static const char *const bad[] = {
        "",          "readyx", "o",       "o ",           "o 0",
        "o 01",      "o -1",   "o 1 ",    "o 2147483648", "o 99999999999",
        "x 1",       "d 1",    "d 1 abc", "c 1 x",        "o  1",
        "d 1  aGk=", "READY",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CU_ASSERT_EQUAL(daytona_relay_frame_parse(bad[i], strlen(bad[i]), &f), -EINVAL);
}

static void test_daytona_relay_base64_round_trips_every_byte(void)
{
    unsigned char all[256];
    struct buf enc, dec;

    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    buf_init(&enc, 4096);
    buf_init(&dec, 4096);
    for (size_t n = 0; n <= 256; n += 1 + n / 3) {
        buf_reset(&enc);
        buf_reset(&dec);
        CU_ASSERT_EQUAL(daytona_relay_b64_encode(all, n, &enc), 0);
        CU_ASSERT_EQUAL(enc.len % 4, 0);
        CU_ASSERT_PTR_NULL(strchr(buf_str(&enc), '\n'));
        CU_ASSERT_EQUAL(daytona_relay_b64_decode(enc.data, enc.len, &dec), 0);
        CU_ASSERT_TRUE(dec.len == n && (n == 0 || memcmp(dec.data, all, n) == 0));
    }
    buf_reset(&enc);
    CU_ASSERT_EQUAL(daytona_relay_b64_encode("foobar", 4, &enc), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&enc), "Zm9vYg==");
    static const char *const bad[] = {"Zm9", "Zm9v\n", "Zm=v", "Z===", "Zg==Zm9v", "Zm9*"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        buf_reset(&dec);
        CU_ASSERT_EQUAL(daytona_relay_b64_decode(bad[i], strlen(bad[i]), &dec), -EINVAL);
    }
    /* a frame is one line whatever the payload holds (the log's 0x01 markers included) */
    buf_reset(&enc);
    CU_ASSERT_EQUAL(daytona_relay_frame_data(5, "\x01\x01\x01x\ny", 6, &enc), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&enc), "d 5 AQEBeAp5\n");
    CU_ASSERT_EQUAL(daytona_relay_frame_close(5, &enc), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&enc), "d 5 AQEBeAp5\nc 5\n");
    buf_release(&enc);
    buf_release(&dec);
}

/* ---- the pump against a real keeper channel --------------------------------------------- */

struct fixture {
    char dir[64];
    struct keeper_channel kc;
    int worker_fd; /* -1: no worker attached, the channel answers alone */
    bool gone;
    struct buf wout;
    struct daytona_relay *r;
    int relay_out; /* we write what the relay would print */
    int relay_in;  /* we read what the pump sends the relay */
    int relay_err;
    char heard[1 << 16];
    size_t nheard;
};

static void fx_init(struct fixture *f)
{
    int to[2], from[2], errp[2];
    char err[256], sock[128];
    int none;

    memset(f, 0, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/ar-relay.XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(f->dir));
    f->worker_fd = -1;
    buf_init(&f->wout, 1 << 20);
    keeper_channel_init(&f->kc);
    CU_ASSERT_EQUAL_FATAL(
        keeper_channel_open(
            &f->kc, f->dir, KEEPER_CHANNEL_HARNESS, true,
            &(struct keeper_channel_worker){.fd = &f->worker_fd, .gone = &f->gone, .out = &f->wout},
            &none, err, sizeof(err)),
        0);
    CU_ASSERT_EQUAL(none, -1);
    CU_ASSERT_EQUAL_FATAL(pipe2(to, O_CLOEXEC), 0);
    CU_ASSERT_EQUAL_FATAL(pipe2(from, O_CLOEXEC), 0);
    CU_ASSERT_EQUAL_FATAL(pipe2(errp, O_CLOEXEC), 0);
    snprintf(sock, sizeof(sock), "%s/channel/channel.sock", f->dir);
    CU_ASSERT_EQUAL_FATAL(daytona_relay_new(to[1], from[0], errp[0], sock, &f->r), 0);
    f->relay_in = to[0];
    f->relay_out = from[1];
    f->relay_err = errp[1];
    (void)fcntl(f->relay_in, F_SETFL, O_NONBLOCK);
}

static void fx_release(struct fixture *f)
{
    daytona_relay_free(f->r);
    if (f->relay_in >= 0)
        close(f->relay_in);
    if (f->relay_out >= 0)
        close(f->relay_out);
    if (f->relay_err >= 0)
        close(f->relay_err);
    keeper_channel_close(&f->kc);
    buf_release(&f->wout);
    CU_ASSERT_EQUAL(fstree_remove(f->dir), 0);
}

/* One round of the keeper's loop: the channel's fds and the pump's, as keeper.c polls them. */
static void round_once(struct fixture *f, int ms)
{
    struct pollfd p[KEEPER_CHANNEL_POLLFDS + DAYTONA_RELAY_POLLFDS];
    size_t nch = keeper_channel_pollfds(&f->kc, p, KEEPER_CHANNEL_POLLFDS, true);
    size_t nr = daytona_relay_pollfds(f->r, p + nch, DAYTONA_RELAY_POLLFDS);

    if (poll(p, (nfds_t)(nch + nr), ms) < 0)
        return;
    daytona_relay_handle(f->r, p + nch, nr);
    keeper_channel_handle(&f->kc, p, nch);
}

static void relay_says(struct fixture *f, const char *frames)
{
    CU_ASSERT_EQUAL(util_write_all(f->relay_out, frames, strlen(frames)), 0);
}

/* The next frame the pump sent the relay (pumping meanwhile) into line; false at timeout. */
static bool relay_hears(struct fixture *f, char *line, size_t len)
{
    for (int i = 0; i < 100; i++) {
        char *nl = memchr(f->heard, '\n', f->nheard);
        ssize_t n;

        if (nl) {
            size_t l = (size_t)(nl - f->heard);

            snprintf(line, len, "%.*s", (int)l, f->heard);
            memmove(f->heard, nl + 1, f->nheard - l - 1);
            f->nheard -= l + 1;
            return true;
        }
        round_once(f, 20);
        n = read(f->relay_in, f->heard + f->nheard, sizeof(f->heard) - f->nheard);
        if (n > 0)
            f->nheard += (size_t)n;
    }
    return false;
}

static void settle(struct fixture *f)
{
    for (int i = 0; i < 10; i++)
        round_once(f, 10);
}

#define HELLO                                                                                      \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{\"client\":\"pi-extension\","  \
    "\"version\":\"1\",\"gating\":true}}"

/* A channel request as the sandbox would send it, framed for connection id. */
static void relay_sends(struct fixture *f, uint32_t id, const char *json)
{
    struct buf b;

    buf_init(&b, 1 << 16);
    CU_ASSERT_EQUAL(daytona_relay_frame_data(id, json, strlen(json), &b), 0);
    relay_says(f, buf_str(&b));
    buf_release(&b);
}

/* The JSON of a "d <id> ..." frame the relay heard for id. */
static json_object *decode(const char *line, uint32_t id)
{
    struct daytona_relay_frame fr;
    json_object *o = NULL;
    char err[64];
    struct buf b;

    if (daytona_relay_frame_parse(line, strlen(line), &fr) < 0 || fr.kind != DAYTONA_RELAY_DATA ||
        fr.id != id)
        return NULL;
    buf_init(&b, 1 << 16);
    if (daytona_relay_b64_decode(fr.payload, fr.payload_len, &b) < 0 ||
        jsonx_parse(b.data, b.len, 16, &o, err, sizeof(err)) < 0)
        o = NULL;
    buf_release(&b);
    return o;
}

static void test_daytona_relay_connections_reach_the_keeper_channel(void)
{
    struct fixture f;
    char line[4096];
    json_object *o;

    fx_init(&f);
    /* two sandbox connections, each says hello with id 1: the first one relayed is the
     * harness's and is answered; the second is a stranger, refused and closed */
    relay_says(&f, "o 1\no 2\n");
    settle(&f);
    CU_ASSERT_EQUAL(daytona_relay_conns(f.r), 2);
    CU_ASSERT_EQUAL(f.kc.nconns, 2);
    relay_sends(&f, 1, HELLO);
    CU_ASSERT_TRUE_FATAL(relay_hears(&f, line, sizeof(line)));
    o = decode(line, 1);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(o, "result.protocol")), 1);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(o, "id")), 1);
    json_object_put(o);
    relay_sends(&f, 2, HELLO);
    CU_ASSERT_TRUE_FATAL(relay_hears(&f, line, sizeof(line)));
    o = decode(line, 2);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(o, "error.code")), KEEPER_CHANNEL_UNAUTHORIZED);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(o, "error"), "message")),
                           KEEPER_CHANNEL_STRANGER);
    json_object_put(o);
    CU_ASSERT_TRUE_FATAL(relay_hears(&f, line, sizeof(line)));
    CU_ASSERT_STRING_EQUAL(line, "c 2");
    settle(&f);
    CU_ASSERT_EQUAL(daytona_relay_conns(f.r), 1);
    CU_ASSERT_EQUAL(f.kc.nconns, 1);
    /* garbage on the channel is the keeper channel's to refuse: an error comes back */
    relay_sends(&f, 1, "\x01\x01\x01 not json");
    CU_ASSERT_TRUE_FATAL(relay_hears(&f, line, sizeof(line)));
    o = decode(line, 1);
    CU_ASSERT_TRUE(json_object_get_int(jsonx_path(o, "error.code")) < 0);
    json_object_put(o);
    /* a frame for no connection, and frames that do not parse, are dropped */
    relay_says(&f, "d 9 aGk=\nbogus\nd 1 abc\n");
    settle(&f);
    CU_ASSERT_EQUAL(daytona_relay_conns(f.r), 1);
    /* a payload that is not base64 breaks its connection: closed here, the relay hears so */
    relay_says(&f, "d 1 a*b=\n");
    CU_ASSERT_TRUE_FATAL(relay_hears(&f, line, sizeof(line)));
    CU_ASSERT_STRING_EQUAL(line, "c 1");
    settle(&f);
    CU_ASSERT_EQUAL(daytona_relay_conns(f.r), 0);
    CU_ASSERT_EQUAL(f.kc.nconns, 0);
    /* the harness's role went with it: a new connection is a stranger */
    relay_says(&f, "o 3\n");
    settle(&f);
    CU_ASSERT_EQUAL(f.kc.nconns, 1);
    CU_ASSERT_EQUAL(f.kc.conns[0].role, KEEPER_CHANNEL_NONE);
    relay_says(&f, "c 3\n");
    settle(&f);
    CU_ASSERT_EQUAL(f.kc.nconns, 0);
    {
        struct daytona_relay_stats st;

        daytona_relay_stats(f.r, &st);
        CU_ASSERT_EQUAL(st.opened, 3);
        CU_ASSERT_TRUE(st.dropped >= 2);
    }
    CU_ASSERT_FALSE(daytona_relay_dead(f.r));
    fx_release(&f);
}

static void test_daytona_relay_refuses_past_the_connection_cap(void)
{
    struct fixture f;
    char line[256], frames[64];

    fx_init(&f);
    for (uint32_t id = 1; id <= DAYTONA_RELAY_CONNS_MAX + 1; id++) {
        snprintf(frames, sizeof(frames), "o %u\n", id);
        relay_says(&f, frames);
    }
    relay_says(&f, "o 3\n"); /* an id already open is refused too */
    settle(&f);
    CU_ASSERT_EQUAL(daytona_relay_conns(f.r), DAYTONA_RELAY_CONNS_MAX);
    CU_ASSERT_TRUE_FATAL(relay_hears(&f, line, sizeof(line)));
    snprintf(frames, sizeof(frames), "c %u", DAYTONA_RELAY_CONNS_MAX + 1);
    CU_ASSERT_STRING_EQUAL(line, frames);
    CU_ASSERT_TRUE_FATAL(relay_hears(&f, line, sizeof(line)));
    CU_ASSERT_STRING_EQUAL(line, "c 3");
    fx_release(&f);
}

static void test_daytona_relay_that_dies_closes_every_connection(void)
{
    struct fixture f;

    fx_init(&f);
    relay_says(&f, "o 1\no 2\n");
    settle(&f);
    CU_ASSERT_EQUAL(f.kc.nconns, 2);
    close(f.relay_out); /* the relay's stdout ends: it died */
    f.relay_out = -1;
    settle(&f);
    CU_ASSERT_TRUE(daytona_relay_dead(f.r));
    CU_ASSERT_EQUAL(daytona_relay_conns(f.r), 0);
    CU_ASSERT_EQUAL(f.kc.nconns, 0);
    fx_release(&f);
}

static void test_daytona_relay_waits_for_ready(void)
{
    struct fixture f;
    char err[512];

    /* ready and what followed it in the same write */
    fx_init(&f);
    relay_says(&f, "ready\no 1\n");
    CU_ASSERT_EQUAL(daytona_relay_wait_ready(f.r, 5000, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(daytona_relay_conns(f.r), 1);
    fx_release(&f);
    /* something else first */
    fx_init(&f);
    relay_says(&f, "o 1\n");
    CU_ASSERT_EQUAL(daytona_relay_wait_ready(f.r, 5000, err, sizeof(err)), -EPROTO);
    CU_ASSERT_TRUE(daytona_relay_dead(f.r));
    fx_release(&f);
    /* it ended: its stderr is quoted */
    fx_init(&f);
    CU_ASSERT_EQUAL(util_write_all(f.relay_err, "channel-relay: no node\n", 23), 0);
    close(f.relay_out);
    f.relay_out = -1;
    close(f.relay_err);
    f.relay_err = -1;
    CU_ASSERT_EQUAL(daytona_relay_wait_ready(f.r, 5000, err, sizeof(err)), -EPIPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "channel-relay: no node"));
    fx_release(&f);
    /* silence */
    fx_init(&f);
    CU_ASSERT_EQUAL(daytona_relay_wait_ready(f.r, 30, err, sizeof(err)), -ETIMEDOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "did not say ready"));
    fx_release(&f);
}

static void test_daytona_relay_refuses_a_socket_path_too_long(void)
{
    char path[200];
    struct daytona_relay *r = NULL;
    int p[2];

    memset(path, 'a', sizeof(path) - 1);
    path[0] = '/';
    path[sizeof(path) - 1] = '\0';
    CU_ASSERT_EQUAL_FATAL(pipe2(p, O_CLOEXEC), 0);
    CU_ASSERT_EQUAL(daytona_relay_new(p[0], p[1], -1, path, &r), -ENAMETOOLONG);
    CU_ASSERT_PTR_NULL(r);
    /* the fds were taken and closed */
    CU_ASSERT_EQUAL(fcntl(p[0], F_GETFD), -1);
    CU_ASSERT_EQUAL(fcntl(p[1], F_GETFD), -1);
    daytona_relay_free(NULL);
}

CU_TestInfo daytona_relay_tests[] = {
    {"test_daytona_relay_frames_parse_and_refuse", test_daytona_relay_frames_parse_and_refuse},
    {"test_daytona_relay_base64_round_trips_every_byte",
     test_daytona_relay_base64_round_trips_every_byte},
    {"test_daytona_relay_connections_reach_the_keeper_channel",
     test_daytona_relay_connections_reach_the_keeper_channel},
    {"test_daytona_relay_refuses_past_the_connection_cap",
     test_daytona_relay_refuses_past_the_connection_cap},
    {"test_daytona_relay_that_dies_closes_every_connection",
     test_daytona_relay_that_dies_closes_every_connection},
    {"test_daytona_relay_waits_for_ready", test_daytona_relay_waits_for_ready},
    {"test_daytona_relay_refuses_a_socket_path_too_long",
     test_daytona_relay_refuses_a_socket_path_too_long},
    CU_TEST_INFO_NULL,
};
