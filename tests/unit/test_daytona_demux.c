/*
 * daytona_demux — markers at the start, in the middle and straddling any cut; agreement with
 * a whole-buffer reference (leftmost match) for many random logs cut at random places;
 * replays after reconnects deliver each byte once; the undelivered-suffix rule.
 */
#include <stdlib.h>
#include <string.h>

#include "provider/daytona/daytona_demux.h"
#include "suites.h"

struct sink {
    uint8_t out[2][8192];
    size_t len[2];
    int calls;
    int fail_at;
};

static int collect(void *ctx, enum daytona_stream s, const uint8_t *data, size_t len)
{
    struct sink *k = ctx;
    int i = s == DAYTONA_STDERR;

    k->calls++;
    if (k->fail_at && k->calls == k->fail_at)
        return -EPIPE;
    if (k->len[i] + len <= sizeof(k->out[i])) {
        memcpy(k->out[i] + k->len[i], data, len);
        k->len[i] += len;
    }
    return 0;
}

/* The reference: whole buffer, leftmost marker wins, data before any marker is stdout. */
static void reference(const uint8_t *log, size_t n, struct sink *k)
{
    int cur = 0;
    size_t i = 0;

    memset(k, 0, sizeof(*k));
    while (i < n) {
        if (i + 2 < n && (log[i] == 1 || log[i] == 2) && log[i + 1] == log[i] &&
            log[i + 2] == log[i]) {
            cur = log[i] == 2;
            i += 3;
            continue;
        }
        k->out[cur][k->len[cur]++] = log[i++];
    }
}

static void split_feed(const uint8_t *log, size_t n, const size_t *cuts, size_t ncuts,
                       struct sink *k)
{
    struct daytona_demux d;
    size_t at = 0;

    memset(k, 0, sizeof(*k));
    daytona_demux_init(&d);
    for (size_t c = 0; c <= ncuts; c++) {
        size_t end = c < ncuts ? cuts[c] : n;

        if (end < at)
            end = at;
        CU_ASSERT_EQUAL(daytona_demux_feed(&d, log + at, end - at, collect, k), 0);
        at = end;
    }
    CU_ASSERT_EQUAL(daytona_demux_finish(&d, collect, k), 0);
    CU_ASSERT_EQUAL(d.seen, n);
}

static void test_daytona_demux_basic_markers(void)
{
    static const uint8_t log[] = "\x01\x01\x01hello\n\x02\x02\x02oops\n\x01\x01\x01world\n";
    size_t n = sizeof(log) - 1;
    struct sink k;

    /* every single cut position, including inside markers */
    for (size_t cut = 0; cut <= n; cut++) {
        split_feed(log, n, &cut, 1, &k);
        CU_ASSERT_EQUAL(k.len[0], 12);
        CU_ASSERT(memcmp(k.out[0], "hello\nworld\n", 12) == 0);
        CU_ASSERT_EQUAL(k.len[1], 5);
        CU_ASSERT(memcmp(k.out[1], "oops\n", 5) == 0);
    }
}

static void test_daytona_demux_partial_markers_are_data(void)
{
    /* \x01\x01 then a letter is data; so is a lone \x02 at the very end */
    static const uint8_t log[] = "a\x01\x01"
                                 "b\x02\x02\x02"
                                 "c\x01\x02\x02\x02"
                                 "d\x02";
    size_t n = sizeof(log) - 1;
    struct sink want, got;

    reference(log, n, &want);
    for (size_t cut = 0; cut <= n; cut++) {
        split_feed(log, n, &cut, 1, &got);
        CU_ASSERT_EQUAL(got.len[0], want.len[0]);
        CU_ASSERT_EQUAL(got.len[1], want.len[1]);
        CU_ASSERT(memcmp(got.out[0], want.out[0], want.len[0]) == 0);
        CU_ASSERT(memcmp(got.out[1], want.out[1], want.len[1]) == 0);
    }
    CU_ASSERT_EQUAL(want.len[0], 4); /* a \x01 \x01 b, then everything is stderr */
}

static void test_daytona_demux_matches_reference_randomly(void)
{
    static const uint8_t alphabet[] = {1, 1, 1, 2, 2, 2, 'a', 'b', '\n', 0};
    unsigned seed = 12345;

    for (int round = 0; round < 2000; round++) {
        uint8_t log[300];
        size_t n = (size_t)rand_r(&seed) % sizeof(log), cuts[6];
        struct sink want, got;

        for (size_t i = 0; i < n; i++)
            log[i] = alphabet[(size_t)rand_r(&seed) % sizeof(alphabet)];
        for (size_t c = 0; c < 6; c++)
            cuts[c] = n ? (size_t)rand_r(&seed) % (n + 1) : 0;
        /* sorted cut points */
        for (size_t a = 0; a < 6; a++)
            for (size_t b = a + 1; b < 6; b++)
                if (cuts[b] < cuts[a]) {
                    size_t t = cuts[a];
                    cuts[a] = cuts[b];
                    cuts[b] = t;
                }
        reference(log, n, &want);
        split_feed(log, n, cuts, 6, &got);
        if (got.len[0] != want.len[0] || got.len[1] != want.len[1] ||
            memcmp(got.out[0], want.out[0], want.len[0]) != 0 ||
            memcmp(got.out[1], want.out[1], want.len[1]) != 0) {
            CU_FAIL("demux disagrees with the reference");
            break;
        }
    }
}

/* A reconnect replays from byte 0: what was delivered is never delivered again. */
static void test_daytona_demux_replay_dedupe(void)
{
    static const uint8_t log[] = "\x01\x01\x01line1\nline2\n\x02\x02\x02"
                                 "err\n\x01\x01\x01line3\n";
    size_t n = sizeof(log) - 1;

    for (size_t first = 0; first <= n; first++) {
        for (size_t second = first; second <= n; second += 3) {
            struct daytona_demux d;
            struct sink k;

            memset(&k, 0, sizeof(k));
            daytona_demux_init(&d);
            /* connection 1 dies after `first` bytes */
            CU_ASSERT_EQUAL(daytona_demux_feed(&d, log, first, collect, &k), 0);
            /* connection 2 replays and dies after `second` bytes, in two frames */
            daytona_demux_reconnect(&d);
            CU_ASSERT_EQUAL(daytona_demux_feed(&d, log, second / 2, collect, &k), 0);
            CU_ASSERT_EQUAL(
                daytona_demux_feed(&d, log + second / 2, second - second / 2, collect, &k), 0);
            /* connection 3 replays everything */
            daytona_demux_reconnect(&d);
            CU_ASSERT_EQUAL(daytona_demux_feed(&d, log, n, collect, &k), 0);
            CU_ASSERT_EQUAL(daytona_demux_finish(&d, collect, &k), 0);
            CU_ASSERT_EQUAL(k.len[0], 18);
            CU_ASSERT(memcmp(k.out[0], "line1\nline2\nline3\n", 18) == 0);
            CU_ASSERT_EQUAL(k.len[1], 4);
            CU_ASSERT_EQUAL(d.seen, n);
            CU_ASSERT_EQUAL(d.delivered[DAYTONA_STDOUT], 18);
        }
    }
}

static void test_daytona_demux_sink_error_stops_the_feed(void)
{
    static const uint8_t log[] = "\x01\x01\x01"
                                 "a\x02\x02\x02"
                                 "b";
    struct daytona_demux d;
    struct sink k;

    memset(&k, 0, sizeof(k));
    k.fail_at = 1;
    daytona_demux_init(&d);
    CU_ASSERT_EQUAL(daytona_demux_feed(&d, log, sizeof(log) - 1, collect, &k), -EPIPE);
}

static void test_daytona_demux_undelivered_suffix(void)
{
    size_t off;

    CU_ASSERT_EQUAL(
        daytona_undelivered_suffix((const uint8_t *)"", 0, (const uint8_t *)"", 0, &off), 0);
    CU_ASSERT_EQUAL(
        daytona_undelivered_suffix((const uint8_t *)"abc", 3, (const uint8_t *)"", 0, &off), 0);
    CU_ASSERT_EQUAL(
        daytona_undelivered_suffix((const uint8_t *)"", 0, (const uint8_t *)"hello", 5, &off), 5);
    CU_ASSERT_EQUAL(off, 0);
    CU_ASSERT_EQUAL(
        daytona_undelivered_suffix((const uint8_t *)"hel", 3, (const uint8_t *)"hello", 5, &off),
        2);
    CU_ASSERT_EQUAL(off, 3);
    CU_ASSERT_EQUAL(
        daytona_undelivered_suffix((const uint8_t *)"hello", 5, (const uint8_t *)"hello", 5, &off),
        0);
    /* a different buffer: repeat all rather than lose or corrupt */
    CU_ASSERT_EQUAL(
        daytona_undelivered_suffix((const uint8_t *)"xyz", 3, (const uint8_t *)"hello", 5, &off),
        5);
    CU_ASSERT_EQUAL(off, 0);
    CU_ASSERT_EQUAL(daytona_undelivered_suffix((const uint8_t *)"hello world", 11,
                                               (const uint8_t *)"hello", 5, &off),
                    5);
}

CU_TestInfo daytona_demux_tests[] = {
    {"test_daytona_demux_basic_markers", test_daytona_demux_basic_markers},
    {"test_daytona_demux_partial_markers_are_data", test_daytona_demux_partial_markers_are_data},
    {"test_daytona_demux_matches_reference_randomly",
     test_daytona_demux_matches_reference_randomly},
    {"test_daytona_demux_replay_dedupe", test_daytona_demux_replay_dedupe},
    {"test_daytona_demux_sink_error_stops_the_feed", test_daytona_demux_sink_error_stops_the_feed},
    {"test_daytona_demux_undelivered_suffix", test_daytona_demux_undelivered_suffix},
    CU_TEST_INFO_NULL,
};
