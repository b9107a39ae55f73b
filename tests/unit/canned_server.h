/*
 * canned_server — a loopback HTTP/1.1 server for unit tests of HTTP clients: it answers the
 * requests it gets, in order, with canned replies, on kept-alive connections like a real
 * server, and records every request it read.
 *
 * A reply containing "%ACCEPT%" is a WebSocket upgrade: the marker is replaced with the
 * Sec-WebSocket-Accept for the request's key; after it, the connection stays open and every
 * byte the client sends is recorded (client frames) until the client closes or 2 s pass.
 */
#ifndef AR_TEST_CANNED_SERVER_H
#define AR_TEST_CANNED_SERVER_H

#include <pthread.h>
#include <stddef.h>

#include "base/buf.h"

#define CANNED_MAX 16

struct canned_reply {
    const char *data;
    size_t len; /* 0 = strlen(data) */
};

struct canned_server {
    void *tls; /* SSL_CTX when serving TLS (canned_start_tls) */
    int listen_fd;
    int port;
    pthread_t thread;
    struct canned_reply replies[CANNED_MAX];
    size_t nreplies;
    size_t served;
    struct buf requests;  /* every request, head and body, in order */
    struct buf ws_frames; /* raw bytes clients sent after an upgrade */
};

/* Listen on 127.0.0.1 (any port) and serve replies[0..n) in a thread. */
int canned_start(struct canned_server *s, const struct canned_reply *replies, size_t n);
/* The same over TLS with the PEM certificate and key files given. */
int canned_start_tls(struct canned_server *s, const struct canned_reply *replies, size_t n,
                     const char *cert_file, const char *key_file);
/*
 * A self-signed certificate for subjectAltName san (e.g. "IP:127.0.0.1") written as
 * dir/<name>.crt and dir/<name>.key (openssl CLI). The paths go into cert and key (>= 512).
 */
int canned_make_cert(const char *dir, const char *name, const char *san, char *cert, char *key);

/* Wait for the thread (it ends after the last reply or 5 s without a client). The recorded
 * requests stay readable until canned_release(). */
void canned_stop(struct canned_server *s);
void canned_release(struct canned_server *s);

#endif
