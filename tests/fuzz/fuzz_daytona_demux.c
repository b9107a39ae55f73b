/*
 * fuzz_daytona_demux — the stdout/stderr demultiplexer of Daytona command logs
 * (engine/provider/daytona/daytona_demux.c) on arbitrary logs cut at arbitrary places, with replays.
 *
 * Input layout: bytes 0-3 choose up to four cut points and a replay point; the rest is the raw
 * log. Properties:
 *   - fed whole, the output equals a straightforward reference (leftmost marker wins, bytes
 *     before any marker are stdout, an incomplete marker at the end is data);
 *   - fed in pieces (markers straddling cuts), the output is the same;
 *   - with a connection that dies at the replay point and a new one that replays the whole log
 *     from byte 0, every byte is still delivered exactly once and in order;
 *   - the per-stream counters match what was handed out, and `seen` equals the log length;
 *   - the undelivered-suffix rule returns a suffix of final, all of it unless final starts
 *     with what was delivered.
 */
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "fuzz.h"
#include "provider/daytona/daytona_demux.h"

struct out {
    struct buf s[3];
};

static void out_init(struct out *o, size_t max)
{
    for (int i = 0; i < 3; i++)
        buf_init(&o->s[i], max + 16);
}

static void out_release(struct out *o)
{
    for (int i = 0; i < 3; i++)
        buf_release(&o->s[i]);
}

static int collect(void *ctx, enum daytona_stream s, const uint8_t *data, size_t len)
{
    struct out *o = ctx;

    FUZZ_CHECK(s == DAYTONA_STDOUT || s == DAYTONA_STDERR);
    FUZZ_CHECK(len > 0);
    FUZZ_CHECK(buf_append(&o->s[s], data, len) == 0);
    return 0;
}

static void reference(const uint8_t *log, size_t n, struct out *o)
{
    int cur = DAYTONA_STDOUT;

    for (size_t i = 0; i < n;) {
        if (i + 2 < n && (log[i] == 1 || log[i] == 2) && log[i + 1] == log[i] &&
            log[i + 2] == log[i]) {
            cur = log[i] == 1 ? DAYTONA_STDOUT : DAYTONA_STDERR;
            i += 3;
            continue;
        }
        FUZZ_CHECK(buf_append_char(&o->s[cur], (char)log[i++]) == 0);
    }
}

static bool same(const struct out *a, const struct out *b)
{
    for (int i = 1; i < 3; i++) {
        if (a->s[i].len != b->s[i].len ||
            (a->s[i].len && memcmp(a->s[i].data, b->s[i].data, a->s[i].len) != 0))
            return false;
    }
    return true;
}

static void check_counters(const struct daytona_demux *d, const struct out *o, size_t n)
{
    FUZZ_CHECK(d->seen == n);
    FUZZ_CHECK(d->delivered[DAYTONA_STDOUT] == o->s[DAYTONA_STDOUT].len);
    FUZZ_CHECK(d->delivered[DAYTONA_STDERR] == o->s[DAYTONA_STDERR].len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct out want, whole, cut, replay;
    struct daytona_demux d;
    const uint8_t *log;
    size_t n, cuts[4], at, rp;

    if (size < 4)
        return 0;
    log = data + 4;
    n = size - 4;
    out_init(&want, n);
    out_init(&whole, n);
    out_init(&cut, n);
    out_init(&replay, n);
    reference(log, n, &want);

    daytona_demux_init(&d);
    FUZZ_CHECK(daytona_demux_feed(&d, log, n, collect, &whole) == 0);
    FUZZ_CHECK(daytona_demux_finish(&d, collect, &whole) == 0);
    FUZZ_CHECK(same(&want, &whole));
    check_counters(&d, &whole, n);

    for (int i = 0; i < 4; i++)
        cuts[i] = n ? (size_t)data[i] * n / 255 : 0;
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            if (cuts[j] < cuts[i]) {
                size_t t = cuts[i];
                cuts[i] = cuts[j];
                cuts[j] = t;
            }
    daytona_demux_init(&d);
    at = 0;
    for (int i = 0; i <= 4; i++) {
        size_t end = i < 4 ? cuts[i] : n;

        FUZZ_CHECK(daytona_demux_feed(&d, log + at, end - at, collect, &cut) == 0);
        at = end;
    }
    FUZZ_CHECK(daytona_demux_finish(&d, collect, &cut) == 0);
    FUZZ_CHECK(same(&want, &cut));
    check_counters(&d, &cut, n);

    /* connection 1 dies after rp bytes (fed in two pieces); connection 2 replays it all */
    rp = n ? (size_t)(data[0] ^ data[3]) * n / 255 : 0;
    daytona_demux_init(&d);
    FUZZ_CHECK(daytona_demux_feed(&d, log, cuts[0] < rp ? cuts[0] : rp, collect, &replay) == 0);
    FUZZ_CHECK(daytona_demux_feed(&d, log + (cuts[0] < rp ? cuts[0] : rp),
                                  rp - (cuts[0] < rp ? cuts[0] : rp), collect, &replay) == 0);
    daytona_demux_reconnect(&d);
    FUZZ_CHECK(daytona_demux_feed(&d, log, cuts[1], collect, &replay) == 0);
    FUZZ_CHECK(daytona_demux_feed(&d, log + cuts[1], n - cuts[1], collect, &replay) == 0);
    FUZZ_CHECK(daytona_demux_finish(&d, collect, &replay) == 0);
    FUZZ_CHECK(same(&want, &replay));
    check_counters(&d, &replay, n);

    /* the undelivered suffix of the stdout we got against the whole log as "final" */
    {
        size_t off, k = daytona_undelivered_suffix((const uint8_t *)want.s[1].data, want.s[1].len,
                                                   log, n, &off);

        FUZZ_CHECK(off + k == n || (n == 0 && k == 0));
        if (off > 0)
            FUZZ_CHECK(off == want.s[1].len && memcmp(log, want.s[1].data, off) == 0);
    }
    out_release(&want);
    out_release(&whole);
    out_release(&cut);
    out_release(&replay);
    return 0;
}
