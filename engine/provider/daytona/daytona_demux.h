/*
 * daytona_demux — split a Daytona session-command log into stdout and stderr, across
 * reconnects.
 *
 * The daemon writes each chunk a command produced behind a marker: 0x01 0x01 0x01 (stdout) or
 * 0x02 0x02 0x02 (stderr). A followed log arrives in WebSocket frames cut at arbitrary bytes,
 * so a marker may straddle two frames: up to two trailing bytes that could start one are
 * carried to the next feed. Bytes before any marker are stdout. A marker is recognised at the
 * leftmost position it occurs (the same rule as the SDK's stdDemuxStream).
 *
 * Every new connection to the log replays it from byte 0. The demuxer counts the raw log
 * bytes it has processed (seen); after daytona_demux_reconnect() the first `seen` bytes of
 * the new connection are dropped, so every byte is delivered exactly once and in order.
 *
 * Pure: no I/O, no allocation.
 */
#ifndef AR_DAYTONA_DEMUX_H
#define AR_DAYTONA_DEMUX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum daytona_stream { DAYTONA_STDOUT = 1, DAYTONA_STDERR = 2 };

/*
 * Receives demultiplexed bytes in log order (len > 0). A negative return stops the feed and is
 * returned by daytona_demux_feed(); the bytes of that call count as delivered.
 */
typedef int (*daytona_demux_fn)(void *ctx, enum daytona_stream s, const uint8_t *data, size_t len);

struct daytona_demux {
    uint64_t seen;   /* raw log bytes processed, over every connection */
    uint64_t pos;    /* raw bytes received on the current connection */
    uint8_t pending; /* marker bytes held (0..2), all equal to `mark` */
    uint8_t mark;    /* 1 or 2 while pending > 0 */
    enum daytona_stream stream;
    uint64_t delivered[3]; /* demultiplexed bytes handed out, per stream */
};

void daytona_demux_init(struct daytona_demux *d);

/* A new connection starts: its bytes replay the log from offset 0. */
void daytona_demux_reconnect(struct daytona_demux *d);

/*
 * Feed raw bytes of the current connection. Returns 0, or the first negative value out
 * returned.
 */
int daytona_demux_feed(struct daytona_demux *d, const uint8_t *data, size_t len,
                       daytona_demux_fn out, void *ctx);

/* The log is complete: deliver held bytes that did not become a marker. */
int daytona_demux_finish(struct daytona_demux *d, daytona_demux_fn out, void *ctx);

/*
 * Paperclip's undelivered-suffix rule for one stream: given what was delivered while
 * streaming and the final output, the part of final still to deliver.
 * Empty final -> nothing; nothing delivered -> all of final; final starts with delivered ->
 * the rest; otherwise (the provider answered from a different buffer) all of final again:
 * repeat rather than lose or corrupt output. *ret_off is where the suffix starts in final.
 */
size_t daytona_undelivered_suffix(const uint8_t *delivered, size_t dlen, const uint8_t *final,
                                  size_t flen, size_t *ret_off);

#endif
