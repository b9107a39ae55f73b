/*
 * daytona_relay — the keeper channel (keeper_channel.h) carried to a remote sandbox.
 *
 * On a Daytona sandbox the keeper's channel socket cannot be bound in: the sandbox is on
 * another machine. A small relay runs inside the sandbox instead
 * (harnesses/extension/bin/channel-relay.js on the pinned Node, started through a
 * daytona_bridge of its own before the harness): it listens on the sandbox's $RUNNER_CHANNEL,
 * says "ready", and multiplexes every connection a sandbox program opens over its stdio.
 * This module is the keeper's end: for each relayed connection it opens a connection of its
 * own to the keeper's channel socket (<env_dir>/channel/channel.sock) and pumps lines both
 * ways, so the keeper channel sees exactly what it sees from a local sandbox.
 *
 * Framing (one text line per frame, so that it survives a toolbox process session: each
 * line the keeper writes is one `input` call, each line the relay prints arrives through the
 * command's log). Payloads are base64: a channel line from a hostile sandbox may hold any
 * byte, including the log stream's 0x01/0x02 markers, and must arrive exactly.
 *   relay -> keeper   "ready"              once, after it listens
 *                     "o <id>"             a connection was accepted
 *                     "d <id> <base64>"    one line the connection sent (without its '\n')
 *                     "c <id>"             the connection closed
 *   keeper -> relay   "d <id> <base64>"    one line for the connection
 *                     "c <id>"             close the connection (the keeper's side closed)
 * Ids are decimal 1..DAYTONA_RELAY_ID_MAX, chosen by the relay, never reused while open. A
 * frame the keeper cannot parse is dropped and counted; a frame line longer than
 * DAYTONA_RELAY_FRAME_MAX ends the relay (the pump treats it as dead).
 *
 * Bounds: at most DAYTONA_RELAY_CONNS_MAX connections at once (more are refused: "c <id>"),
 * channel lines of at most TOOL_CHANNEL_LINE_MAX (a longer one closes its connection, as the
 * keeper channel would), DAYTONA_RELAY_QUEUE_MAX bytes queued towards the relay (reading from
 * the local connections pauses above it) and towards each local connection (reading frames
 * pauses above it).
 *
 * A relay that dies (its stdout ends) closes every local connection: the keeper channel
 * answers what they left open, and the sandbox programs see their connections close.
 * Nothing here blocks except daytona_relay_wait_ready.
 */
#ifndef AR_DAYTONA_RELAY_H
#define AR_DAYTONA_RELAY_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define DAYTONA_RELAY_CONNS_MAX 16
#define DAYTONA_RELAY_ID_MAX 2147483647u
#define DAYTONA_RELAY_LINE_MAX (8u * 1024 * 1024) /* TOOL_CHANNEL_LINE_MAX */
#define DAYTONA_RELAY_FRAME_MAX (32 + (DAYTONA_RELAY_LINE_MAX + 2) / 3 * 4)
#define DAYTONA_RELAY_QUEUE_MAX (4u * DAYTONA_RELAY_FRAME_MAX)
/* The most pollfds daytona_relay_pollfds adds: stdin, stdout, stderr and each connection. */
#define DAYTONA_RELAY_POLLFDS (3 + DAYTONA_RELAY_CONNS_MAX)

/* ---- framing (pure) ------------------------------------------------------------------- */

enum daytona_relay_kind {
    DAYTONA_RELAY_READY = 0,
    DAYTONA_RELAY_OPEN,
    DAYTONA_RELAY_DATA,
    DAYTONA_RELAY_CLOSE,
};

struct daytona_relay_frame {
    enum daytona_relay_kind kind;
    uint32_t id;         /* 0 for ready */
    const char *payload; /* DATA: the base64 text inside line (not decoded), else NULL */
    size_t payload_len;
};

/* Parse one frame line (without its '\n'); -EINVAL when it is not one of the frames above. */
int daytona_relay_frame_parse(const char *line, size_t len, struct daytona_relay_frame *ret);
/* Append "d <id> <base64 of data>\n" to out; -E2BIG when out's maximum is reached. */
int daytona_relay_frame_data(uint32_t id, const void *data, size_t len, struct buf *out);
/* Append "c <id>\n" to out. */
int daytona_relay_frame_close(uint32_t id, struct buf *out);
/* Standard base64 with padding. decode: -EINVAL on anything else (whitespace included). */
int daytona_relay_b64_encode(const void *data, size_t len, struct buf *out);
int daytona_relay_b64_decode(const char *text, size_t len, struct buf *out);

/* ---- the pump ------------------------------------------------------------------------- */

struct daytona_relay;

struct daytona_relay_stats {
    unsigned opened;  /* connections relayed */
    unsigned refused; /* connections refused (table full, the keeper's socket refused) */
    uint64_t frames_in, frames_out;
    uint64_t dropped; /* frames that did not parse or named no open connection */
};

/*
 * A pump between the relay's stdio and the keeper channel at channel_sock. Takes ownership of
 * to_fd (the relay's stdin), from_fd (its stdout) and err_fd (its stderr, may be -1: kept as
 * a short tail for error messages); all three are made non-blocking. -ENAMETOOLONG for a
 * socket path that does not fit a unix address (the fds are closed then too).
 */
int daytona_relay_new(int to_fd, int from_fd, int err_fd, const char *channel_sock,
                      struct daytona_relay **ret);
/* Close every connection and fd, free. NULL is a no-op. */
void daytona_relay_free(struct daytona_relay *r);

/*
 * Block until the relay says "ready" (0), or fail: -ETIMEDOUT after timeout_ms, -EPIPE when
 * it ended first, -EPROTO when it said anything else first; err then names what happened and
 * quotes the start of its stderr.
 */
int daytona_relay_wait_ready(struct daytona_relay *r, int timeout_ms, char *err, size_t errlen);

/* Add this pump's fds with the events it waits for to p[0..max); returns how many. */
size_t daytona_relay_pollfds(struct daytona_relay *r, struct pollfd *p, size_t max);
/* Handle what poll reported on the n entries daytona_relay_pollfds added. Never blocks. */
void daytona_relay_handle(struct daytona_relay *r, const struct pollfd *p, size_t n);

/* For tests: the relay ended (its stdout closed or broke): no connection is relayed any more. */
bool daytona_relay_dead(const struct daytona_relay *r);
/* For tests: the connections relayed now (the cap and the closes are seen through it). */
size_t daytona_relay_conns(const struct daytona_relay *r);
/* For tests: the counters above (connections opened and refused, frames, drops). */
void daytona_relay_stats(const struct daytona_relay *r, struct daytona_relay_stats *ret);

#endif
