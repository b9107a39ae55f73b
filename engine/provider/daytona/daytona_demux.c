#include "provider/daytona/daytona_demux.h"

#include <string.h>

void daytona_demux_init(struct daytona_demux *d)
{
    memset(d, 0, sizeof(*d));
    d->stream = DAYTONA_STDOUT;
}

void daytona_demux_reconnect(struct daytona_demux *d)
{
    d->pos = 0;
}

static int emit(struct daytona_demux *d, const uint8_t *data, size_t len, daytona_demux_fn out,
                void *ctx)
{
    if (len == 0)
        return 0;
    d->delivered[d->stream] += len;
    return out(ctx, d->stream, data, len);
}

/* Held marker bytes that turned out not to be a marker are data of the current stream. */
static int flush_pending(struct daytona_demux *d, daytona_demux_fn out, void *ctx)
{
    uint8_t held[2] = {d->mark, d->mark};
    size_t n = d->pending;

    d->pending = 0;
    return emit(d, held, n, out, ctx);
}

int daytona_demux_feed(struct daytona_demux *d, const uint8_t *data, size_t len,
                       daytona_demux_fn out, void *ctx)
{
    size_t i = 0, run = 0;
    int r;

    /* a replay: drop what an earlier connection already delivered */
    if (d->pos < d->seen) {
        uint64_t skip = d->seen - d->pos;

        if (skip >= len) {
            d->pos += len;
            return 0;
        }
        i = (size_t)skip;
        d->pos += skip;
    }
    d->pos += len - i;
    d->seen += len - i;
    run = i;
    while (i < len) {
        uint8_t b = data[i];

        if (d->pending > 0) {
            if (b == d->mark) {
                if (++d->pending == 3) {
                    d->stream = d->mark == 1 ? DAYTONA_STDOUT : DAYTONA_STDERR;
                    d->pending = 0;
                }
                i++;
                run = i;
                continue;
            }
            r = flush_pending(d, out, ctx);
            if (r < 0)
                return r;
            /* b is looked at again with nothing held */
        }
        if (b == 1 || b == 2) {
            r = emit(d, data + run, i - run, out, ctx);
            if (r < 0)
                return r;
            d->mark = b;
            d->pending = 1;
            i++;
            run = i;
            continue;
        }
        i++;
    }
    return emit(d, data + run, i - run, out, ctx);
}

int daytona_demux_finish(struct daytona_demux *d, daytona_demux_fn out, void *ctx)
{
    return flush_pending(d, out, ctx);
}

size_t daytona_undelivered_suffix(const uint8_t *delivered, size_t dlen, const uint8_t *final,
                                  size_t flen, size_t *ret_off)
{
    *ret_off = 0;
    if (flen == 0)
        return 0;
    if (dlen == 0)
        return flen;
    if (dlen <= flen && memcmp(final, delivered, dlen) == 0) {
        *ret_off = dlen;
        return flen - dlen;
    }
    return flen;
}
