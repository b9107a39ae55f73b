/*
 * ws_client — a small RFC 6455 WebSocket client: what reading a Daytona command log with
 * `follow=true` needs (Debian's libcurl 7.88 has no WebSocket support).
 *
 *   - HTTP/1.1 upgrade over TCP (ws://) or OpenSSL TLS (wss://, peer and host name verified);
 *     extra request headers (Authorization, X-Daytona-SDK-Version, ...) and an optional
 *     subprotocol; the Sec-WebSocket-Accept answer is checked;
 *   - frames: client frames are always masked with fresh random keys; server frames must not
 *     be masked; fragmentation (continuation frames) is followed; reserved bits, unknown
 *     opcodes, non-minimal lengths, oversized or fragmented control frames and frames larger
 *     than the configured maximum are protocol errors, never truncated;
 *   - ping is answered with pong inside ws_read(), close is echoed once.
 *
 * The frame parser (struct ws_parser) is pure and incremental so it can be fuzzed: it streams
 * data payloads out as they arrive (no whole-message buffering) and holds at most one control
 * payload (<= 125 bytes).
 *
 * Threads: one struct ws_conn is used by one thread at a time, except ws_shutdown(), which any
 * thread may call to wake a reader blocked in ws_read(). SIGPIPE is never raised by a write.
 */
#ifndef AR_WS_CLIENT_H
#define AR_WS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../buf.h"

#define WS_CONTROL_MAX 125
#define WS_DEFAULT_MAX_FRAME (1u << 20)

enum ws_opcode {
    WS_OP_CONT = 0x0,
    WS_OP_TEXT = 0x1,
    WS_OP_BINARY = 0x2,
    WS_OP_CLOSE = 0x8,
    WS_OP_PING = 0x9,
    WS_OP_PONG = 0xA,
};

/* Close codes with a meaning here (RFC 6455 §7.4.1). */
#define WS_CLOSE_NORMAL 1000
#define WS_CLOSE_GOING_AWAY 1001
#define WS_CLOSE_PROTOCOL 1002
#define WS_CLOSE_NO_STATUS 1005 /* the close frame had no code */
#define WS_CLOSE_ABNORMAL 1006  /* never on the wire: the connection dropped */
#define WS_CLOSE_TOO_BIG 1009

enum ws_event_type { WS_EV_DATA = 1, WS_EV_PING, WS_EV_PONG, WS_EV_CLOSE };

struct ws_event {
    enum ws_event_type type;
    uint8_t opcode;      /* DATA: WS_OP_TEXT or WS_OP_BINARY, the opcode of the message */
    bool fin;            /* DATA: these are the last bytes of the message */
    const uint8_t *data; /* DATA: into the caller's input; control: into the parser */
    size_t len;
    uint16_t close_code; /* CLOSE: WS_CLOSE_NO_STATUS when the frame had none */
};

struct ws_parser {
    uint64_t max_frame;
    uint8_t hdr[14];
    size_t nhdr;
    bool in_frame;      /* a header was parsed, payload bytes are due */
    uint8_t opcode;     /* of the current frame */
    bool fin;           /* of the current frame */
    uint64_t remaining; /* payload bytes of the current frame still due */
    uint8_t ctl[WS_CONTROL_MAX];
    size_t nctl;
    bool in_message; /* a data message started and its final frame has not been seen */
    uint8_t msg_opcode;
    bool closed; /* a close frame was parsed: the stream ends there */
};

/* max_frame: the largest payload one frame may carry (0 = WS_DEFAULT_MAX_FRAME). */
void ws_parser_init(struct ws_parser *p, uint64_t max_frame);

/*
 * Consume bytes of data[0..len) until one event is complete. Returns 1 with *ret_ev set,
 * 0 when every byte was consumed and no event completed, -EPROTO on a protocol violation
 * (the stream is then unusable), -EMSGSIZE for a frame over max_frame. *ret_used (always
 * written) is the number of bytes consumed. A DATA event may carry part of a frame's payload;
 * its data pointer points into data[] and is valid as long as data is.
 */
int ws_parser_feed(struct ws_parser *p, const uint8_t *data, size_t len, size_t *ret_used,
                   struct ws_event *ret_ev);

/*
 * Append one masked client frame (FIN set) to out. Control frames (close, ping, pong) must
 * carry at most WS_CONTROL_MAX bytes (-EINVAL otherwise); mask is the 4-byte masking key.
 */
int ws_frame_encode(uint8_t opcode, const void *payload, size_t len, const uint8_t mask[4],
                    struct buf *out);

/* Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 §4.2.2); out holds >= 29 bytes. */
int ws_accept_key(const char *key, char out[29]);

struct ws_options {
    const char *url;             /* ws://, wss://, http:// or https:// (mapped to ws/wss) */
    const char *const *headers;  /* "Name: value" lines without CR/LF, may be NULL */
    size_t nheaders;
    const char *subprotocol;     /* Sec-WebSocket-Protocol, or NULL */
    const char *ca_file;         /* wss: trust this PEM bundle instead of the system store */
    int connect_timeout_ms;      /* TCP + TLS + upgrade; 0 = 10 s */
    int io_timeout_ms;           /* a started read/write may block this long; 0 = 60 s */
    uint64_t max_frame;          /* 0 = WS_DEFAULT_MAX_FRAME */
};

struct ws_conn;

/*
 * Connect and upgrade. On failure err says why (the HTTP status and the start of the body
 * when the server refused the upgrade) and the return value is -ENOENT (404), -EINVAL (400),
 * -EACCES (401/403), -ETIMEDOUT, -ECONNREFUSED, -EPROTO (anything else unexpected) or another
 * -errno. The error text never contains the request headers.
 */
int ws_connect(const struct ws_options *o, struct ws_conn **ret, char *err, size_t errlen);

/*
 * Wait up to timeout_ms (-1 = no limit) for the next DATA or CLOSE event; pings are answered
 * and pongs dropped on the way. Returns 1 with *ret_ev, 0 on timeout, -ECONNRESET when the
 * connection ended without a close frame (code 1006), -EPROTO/-EMSGSIZE on a bad frame
 * (a close 1002/1009 is sent), or -errno. DATA bytes are valid until the next call.
 * After a CLOSE event (echoed automatically) every call returns -ECONNRESET.
 */
int ws_read(struct ws_conn *c, int timeout_ms, struct ws_event *ret_ev);

/* Send one whole message (or a control frame). */
int ws_send(struct ws_conn *c, uint8_t opcode, const void *data, size_t len);

/* Send a close frame with code (once) and wait up to wait_ms for the server's close. */
int ws_close(struct ws_conn *c, uint16_t code, int wait_ms);

/* Wake a reader blocked in ws_read() from another thread (it then returns -ECONNRESET). */
void ws_shutdown(struct ws_conn *c);

/* The close code the server sent (WS_CLOSE_ABNORMAL while none). */
uint16_t ws_close_code(const struct ws_conn *c);

/* Close the socket and free everything. NULL is a no-op. */
void ws_free(struct ws_conn *c);

#endif
