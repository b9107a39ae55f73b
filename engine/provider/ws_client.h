/*
 * ws_client — a small RFC 6455 WebSocket client: what reading a Daytona command log with
 * `follow=true` needs (Debian's libcurl 7.88 has no WebSocket support). Frames are ws_frame's.
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
 * Threads: one struct ws_conn is used by one thread at a time, except ws_shutdown(), which any
 * thread may call to wake a reader blocked in ws_read(). SIGPIPE is never raised by a write.
 */
#ifndef AR_WS_CLIENT_H
#define AR_WS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#include "provider/ws_frame.h"

struct ws_options {
    const char *url;            /* ws://, wss://, http:// or https:// (mapped to ws/wss) */
    const char *const *headers; /* "Name: value" lines without CR/LF, may be NULL */
    size_t nheaders;
    const char *subprotocol; /* Sec-WebSocket-Protocol, or NULL */
    const char *ca_file;     /* wss: trust this PEM bundle instead of the system store */
    int connect_timeout_ms;  /* TCP + TLS + upgrade; 0 = 10 s */
    int io_timeout_ms;       /* a started read/write may block this long; 0 = 60 s */
    uint64_t max_frame;      /* 0 = WS_DEFAULT_MAX_FRAME */
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

/* Wake a reader blocked in ws_read() from another thread (it then returns -ECONNRESET). */
void ws_shutdown(struct ws_conn *c);

/* Close the socket and free everything. NULL is a no-op. */
void ws_free(struct ws_conn *c);

#endif
