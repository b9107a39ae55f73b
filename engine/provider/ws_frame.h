/*
 * ws_frame — the RFC 6455 frame codec, pure and incremental (fuzzed: tests/fuzz/fuzz_ws_frame.c).
 *
 * The parser takes what a server sends: it streams data payloads out as they arrive (no
 * whole-message buffering), follows fragmentation (continuation frames), holds at most one
 * control payload (<= 125 bytes), and refuses as protocol errors reserved bits, unknown
 * opcodes, masked server frames, non-minimal lengths, oversized or fragmented control frames,
 * a continuation without a message, a new message inside one, bad close codes, anything after
 * a close, and frames larger than its limit (never truncated). The encoder makes masked client
 * frames. ws_client puts both on a socket.
 */
#ifndef AR_WS_FRAME_H
#define AR_WS_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

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
#define WS_CLOSE_PROTOCOL 1002
#define WS_CLOSE_NO_STATUS 1005 /* the close frame had no code */
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

struct ws_frame_parser {
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
void ws_frame_parser_init(struct ws_frame_parser *p, uint64_t max_frame);

/*
 * Consume bytes of data[0..len) until one event is complete. Returns 1 with *ret_ev set,
 * 0 when every byte was consumed and no event completed, -EPROTO on a protocol violation
 * (the stream is then unusable), -EMSGSIZE for a frame over max_frame. *ret_used (always
 * written) is the number of bytes consumed. A DATA event may carry part of a frame's payload;
 * its data pointer points into data[] and is valid as long as data is.
 */
int ws_frame_feed(struct ws_frame_parser *p, const uint8_t *data, size_t len, size_t *ret_used,
                  struct ws_event *ret_ev);

/*
 * Append one masked client frame (FIN set) to out. Control frames (close, ping, pong) must
 * carry at most WS_CONTROL_MAX bytes (-EINVAL otherwise); mask is the 4-byte masking key.
 */
int ws_frame_encode(uint8_t opcode, const void *payload, size_t len, const uint8_t mask[4],
                    struct buf *out);

/* Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 §4.2.2); out holds >= 29 bytes. */
int ws_frame_accept_key(const char *key, char out[29]);

#endif
