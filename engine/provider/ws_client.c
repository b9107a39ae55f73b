#include "provider/ws_client.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "base/httpc.h"
#include "base/util.h"

#define WS_HANDSHAKE_MAX (16u * 1024)
#define WS_REQUEST_MAX (64u * 1024)
#define WS_RBUF 16384
#define WS_HOST_MAX 256

/* ---- the connection ------------------------------------------------------------------ */

struct ws_conn {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
    struct ws_frame_parser parser;
    uint8_t rbuf[WS_RBUF];
    size_t rstart, rend;
    bool close_sent;
    bool close_received;
    bool dead;
    int io_timeout_ms;
    uint8_t ping[WS_CONTROL_MAX];
};

struct ws_url {
    bool tls;
    char host[WS_HOST_MAX];
    char port[8];
    bool default_port;
    const char *path; /* into the url; "/" when empty */
};

static int parse_url(const char *url, struct ws_url *u)
{
    const char *p, *host, *host_end, *port = NULL;
    size_t hlen;

    memset(u, 0, sizeof(*u));
    if (strncmp(url, "wss://", 6) == 0 || strncmp(url, "https://", 8) == 0)
        u->tls = true;
    else if (strncmp(url, "ws://", 5) != 0 && strncmp(url, "http://", 7) != 0)
        return -EINVAL;
    p = strstr(url, "://") + 3;
    host = p;
    if (*p == '[') {
        host_end = strchr(p, ']');
        if (!host_end)
            return -EINVAL;
        host++;
        p = host_end + 1;
    } else {
        while (*p && *p != ':' && *p != '/' && *p != '?')
            p++;
        host_end = p;
    }
    if (*p == ':') {
        port = ++p;
        while (*p >= '0' && *p <= '9')
            p++;
        if (p == port || p - port > 5)
            return -EINVAL;
    }
    if (*p && *p != '/' && *p != '?')
        return -EINVAL;
    hlen = (size_t)(host_end - host);
    if (hlen == 0 || hlen >= sizeof(u->host) || memchr(host, '@', hlen))
        return -EINVAL;
    memcpy(u->host, host, hlen);
    u->host[hlen] = '\0';
    if (port) {
        uint64_t v;
        char tmp[8];

        memcpy(tmp, port, (size_t)(p - port));
        tmp[p - port] = '\0';
        if (util_parse_u64(tmp, 1, 65535, &v) < 0)
            return -EINVAL;
        snprintf(u->port, sizeof(u->port), "%u", (unsigned)v);
        u->default_port = v == (u->tls ? 443u : 80u);
    } else {
        snprintf(u->port, sizeof(u->port), "%s", u->tls ? "443" : "80");
        u->default_port = true;
    }
    u->path = *p ? p : "/";
    return util_visible(u->path) ? 0 : -EINVAL;
}

static void set_timeouts(int fd, int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};

    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* TCP connect with a deadline; the socket is blocking (with I/O timeouts) afterwards. */
static int tcp_connect(const struct ws_url *u, int timeout_ms, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int r = -ECONNREFUSED, fd = -1;

    r = getaddrinfo(u->host, u->port, &hints, &res);
    if (r != 0) {
        snprintf(err, errlen, "cannot resolve \"%s\": %s", u->host, gai_strerror(r));
        return -EHOSTUNREACH;
    }
    r = -ECONNREFUSED;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        struct pollfd pfd;
        int soerr = 0, one = 1;
        socklen_t sl = sizeof(soerr);

        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
            r = -errno;
            continue;
        }
        if (connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
            if (errno != EINPROGRESS) {
                r = -errno;
                goto next;
            }
            pfd = (struct pollfd){.fd = fd, .events = POLLOUT};
            r = poll(&pfd, 1, timeout_ms);
            if (r == 0) {
                r = -ETIMEDOUT;
                goto next;
            }
            if (r < 0) {
                r = -errno;
                goto next;
            }
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr) {
                r = soerr ? -soerr : -errno;
                goto next;
            }
        }
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        set_timeouts(fd, timeout_ms);
        freeaddrinfo(res);
        return fd;
    next:
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    snprintf(err, errlen, "cannot connect to \"%s\" port %s: %s", u->host, u->port, strerror(-r));
    return r;
}

static int tls_start(struct ws_conn *c, const struct ws_url *u, const char *ca_file, char *err,
                     size_t errlen)
{
    unsigned char addr[16];
    bool literal =
        inet_pton(AF_INET, u->host, addr) == 1 || inet_pton(AF_INET6, u->host, addr) == 1;
    long vr;

    c->ctx = SSL_CTX_new(TLS_client_method());
    if (!c->ctx)
        goto fail;
    SSL_CTX_set_min_proto_version(c->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
    if (ca_file && ca_file[0]) {
        if (SSL_CTX_load_verify_locations(c->ctx, ca_file, NULL) != 1) {
            snprintf(err, errlen, "cannot load the CA file \"%s\"", ca_file);
            return -EINVAL;
        }
    } else if (SSL_CTX_set_default_verify_paths(c->ctx) != 1) {
        goto fail;
    }
    c->ssl = SSL_new(c->ctx);
    if (!c->ssl)
        goto fail;
    if (!literal && SSL_set_tlsext_host_name(c->ssl, u->host) != 1)
        goto fail;
    if (literal) {
        if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), u->host) != 1)
            goto fail;
    } else if (SSL_set1_host(c->ssl, u->host) != 1) {
        goto fail;
    }
    if (SSL_set_fd(c->ssl, c->fd) != 1)
        goto fail;
    if (SSL_connect(c->ssl) != 1) {
        vr = SSL_get_verify_result(c->ssl);
        if (vr != X509_V_OK)
            snprintf(err, errlen, "TLS with \"%s\": certificate not trusted: %s", u->host,
                     X509_verify_cert_error_string(vr));
        else
            snprintf(err, errlen, "TLS handshake with \"%s\" failed", u->host);
        ERR_clear_error();
        return -EPROTO;
    }
    return 0;
fail:
    snprintf(err, errlen, "TLS setup failed");
    ERR_clear_error();
    return -EIO;
}

/*
 * Write everything, never raising SIGPIPE: plain sockets use MSG_NOSIGNAL; around SSL_write
 * SIGPIPE is blocked in this thread and a pending one is consumed before unblocking.
 */
static int raw_write(struct ws_conn *c, const void *data, size_t len)
{
    const uint8_t *p = data;
    sigset_t pipe_set, old;
    int r = 0;

    if (c->ssl) {
        sigemptyset(&pipe_set);
        sigaddset(&pipe_set, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    }
    while (len > 0) {
        ssize_t n;

        if (c->ssl) {
            int w = SSL_write(c->ssl, p, len > INT32_MAX ? INT32_MAX : (int)len);

            if (w <= 0) {
                ERR_clear_error();
                r = -EPIPE;
                break;
            }
            n = w;
        } else {
            n = send(c->fd, p, len, MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                r = errno == EAGAIN ? -ETIMEDOUT : -errno;
                break;
            }
        }
        p += n;
        len -= (size_t)n;
    }
    if (c->ssl) {
        struct timespec zero = {0, 0};
        sigset_t pending;

        sigpending(&pending);
        if (sigismember(&pending, SIGPIPE))
            (void)sigtimedwait(&pipe_set, NULL, &zero);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (r < 0)
        c->dead = true;
    return r;
}

/* One read(2)/SSL_read into buf: >0 bytes, 0 at end of stream, -errno. */
static ssize_t raw_read(struct ws_conn *c, void *buf, size_t len)
{
    for (;;) {
        ssize_t n;

        if (c->ssl) {
            int rr = SSL_read(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);

            if (rr > 0)
                return rr;
            switch (SSL_get_error(c->ssl, rr)) {
            case SSL_ERROR_ZERO_RETURN:
                return 0;
            case SSL_ERROR_WANT_READ:
            case SSL_ERROR_WANT_WRITE:
                ERR_clear_error();
                return -ETIMEDOUT;
            case SSL_ERROR_SYSCALL:
                ERR_clear_error();
                return errno == EAGAIN ? -ETIMEDOUT : 0;
            default:
                ERR_clear_error();
                return -EPROTO;
            }
        }
        n = recv(c->fd, buf, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EAGAIN ? -ETIMEDOUT : -errno;
        return n;
    }
}

static bool header_is(const char *line, size_t len, const char *name, const char **ret_value)
{
    size_t n = strlen(name);

    if (len <= n || strncasecmp(line, name, n) != 0 || line[n] != ':')
        return false;
    line += n + 1;
    while (*line == ' ' || *line == '\t')
        line++;
    *ret_value = line;
    return true;
}

static bool value_has_token(const char *v, size_t vlen, const char *token)
{
    size_t t = strlen(token);

    for (size_t i = 0; i + t <= vlen; i++) {
        if (strncasecmp(v + i, token, t) == 0 && (i == 0 || v[i - 1] == ',' || v[i - 1] == ' ') &&
            (i + t == vlen || v[i + t] == ',' || v[i + t] == ' ' || v[i + t] == '\r'))
            return true;
    }
    return false;
}

/* A refused upgrade: a gateway timeout is a timeout too, the rest httpc_status_errno. */
static int status_errno(int status)
{
    return status == 504 ? -ETIMEDOUT : httpc_status_errno(status);
}

/* Copy printable bytes of s[0..n) into out (at most outlen - 1), for error messages. */
static void printable(const uint8_t *s, size_t n, char *out, size_t outlen)
{
    size_t o = 0;

    for (size_t i = 0; i < n && o + 1 < outlen; i++)
        out[o++] = s[i] >= 0x20 && s[i] < 0x7f ? (char)s[i] : ' ';
    out[o] = '\0';
}

/* Read the upgrade answer; leftover bytes stay in c->rbuf. */
static int read_handshake(struct ws_conn *c, const char *accept, char *err, size_t errlen)
{
    char *end = NULL, *line, *next;
    size_t got = 0, body_have, body_len = 0;
    bool upgrade = false, connection = false, accepted = false;
    const char *v;
    int status = 0, r;

    for (;;) {
        ssize_t n;

        if (got >= sizeof(c->rbuf) - 1 || got >= WS_HANDSHAKE_MAX) {
            snprintf(err, errlen, "WebSocket upgrade answer too large");
            return -EPROTO;
        }
        n = raw_read(c, c->rbuf + got, sizeof(c->rbuf) - 1 - got);
        if (n <= 0) {
            snprintf(err, errlen, "WebSocket upgrade: %s",
                     n == 0 ? "connection closed" : strerror((int)-n));
            return n == 0 ? -ECONNRESET : (int)n;
        }
        got += (size_t)n;
        c->rbuf[got] = '\0';
        end = memmem(c->rbuf, got, "\r\n\r\n", 4);
        if (end)
            break;
    }
    *end = '\0';
    line = (char *)c->rbuf;
    next = strstr(line, "\r\n");
    if (next)
        *next = '\0';
    if (sscanf(line, "HTTP/1.%*1[01] %3d", &status) != 1) {
        snprintf(err, errlen, "WebSocket upgrade: not an HTTP answer");
        return -EPROTO;
    }
    while (next) {
        line = next + 2;
        next = strstr(line, "\r\n");
        if (next)
            *next = '\0';
        if (header_is(line, strlen(line), "Upgrade", &v))
            upgrade = strcasecmp(v, "websocket") == 0;
        else if (header_is(line, strlen(line), "Connection", &v))
            connection = value_has_token(v, strlen(v), "upgrade");
        else if (header_is(line, strlen(line), "Sec-WebSocket-Accept", &v))
            accepted = strcmp(v, accept) == 0;
        else if (header_is(line, strlen(line), "Content-Length", &v)) {
            uint64_t cl;

            if (util_parse_u64(v, 0, 1u << 20, &cl) == 0)
                body_len = (size_t)cl;
        }
    }
    c->rstart = (size_t)(end + 4 - (char *)c->rbuf);
    c->rend = got;
    if (status != 101) {
        char body[160];

        body_have = c->rend - c->rstart;
        while (body_have < body_len && body_have < sizeof(body) && c->rend < sizeof(c->rbuf)) {
            ssize_t n = raw_read(c, c->rbuf + c->rend, sizeof(c->rbuf) - c->rend);

            if (n <= 0)
                break;
            c->rend += (size_t)n;
            body_have += (size_t)n;
        }
        if (body_have > body_len && body_len)
            body_have = body_len;
        printable(c->rbuf + c->rstart, body_have, body, sizeof(body));
        snprintf(err, errlen, "WebSocket upgrade refused: HTTP %d%s%s", status, body[0] ? ": " : "",
                 body);
        return status_errno(status);
    }
    r = 0;
    if (!upgrade || !connection || !accepted) {
        snprintf(err, errlen, "WebSocket upgrade: bad %s",
                 !upgrade      ? "Upgrade header"
                 : !connection ? "Connection header"
                               : "Sec-WebSocket-Accept");
        r = -EPROTO;
    }
    return r;
}

static bool header_line_ok(const char *h)
{
    const char *colon = strchr(h, ':');

    if (!colon || colon == h)
        return false;
    for (const char *p = h; *p; p++) {
        if (*p == '\r' || *p == '\n')
            return false;
    }
    return true;
}

int ws_connect(const struct ws_options *o, struct ws_conn **ret, char *err, size_t errlen)
{
    struct ws_conn *c = NULL;
    struct ws_url u;
    struct buf req;
    uint8_t nonce[16];
    char key[32], accept[29];
    int timeout = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000;
    int r;

    buf_init(&req, WS_REQUEST_MAX);
    if (!o->url || parse_url(o->url, &u) < 0) {
        snprintf(err, errlen, "bad WebSocket URL");
        r = -EINVAL;
        goto out;
    }
    for (size_t i = 0; i < o->nheaders; i++) {
        if (!header_line_ok(o->headers[i])) {
            snprintf(err, errlen, "bad WebSocket request header #%zu", i);
            r = -EINVAL;
            goto out;
        }
    }
    if (o->subprotocol && strpbrk(o->subprotocol, "\r\n")) {
        snprintf(err, errlen, "bad WebSocket subprotocol");
        r = -EINVAL;
        goto out;
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        r = -ENOMEM;
        goto out;
    }
    c->fd = -1;
    c->io_timeout_ms = o->io_timeout_ms > 0 ? o->io_timeout_ms : 60000;
    ws_frame_parser_init(&c->parser, o->max_frame);
    r = util_random_bytes(nonce, sizeof(nonce));
    if (r < 0)
        goto out;
    EVP_EncodeBlock((unsigned char *)key, nonce, sizeof(nonce));
    r = ws_frame_accept_key(key, accept);
    if (r < 0)
        goto out;
    r = tcp_connect(&u, timeout, err, errlen);
    if (r < 0)
        goto out;
    c->fd = r;
    if (u.tls) {
        r = tls_start(c, &u, o->ca_file, err, errlen);
        if (r < 0)
            goto out;
    }
    r = buf_printf(&req, "GET %s HTTP/1.1\r\nHost: %s%s%s%s%s\r\n", u.path,
                   strchr(u.host, ':') ? "[" : "", u.host, strchr(u.host, ':') ? "]" : "",
                   u.default_port ? "" : ":", u.default_port ? "" : u.port);
    if (r >= 0)
        r = buf_printf(&req,
                       "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                       "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n",
                       key);
    if (r >= 0 && o->subprotocol)
        r = buf_printf(&req, "Sec-WebSocket-Protocol: %s\r\n", o->subprotocol);
    for (size_t i = 0; r >= 0 && i < o->nheaders; i++)
        r = buf_printf(&req, "%s\r\n", o->headers[i]);
    if (r >= 0)
        r = buf_append_str(&req, "\r\n");
    if (r < 0)
        goto out;
    r = raw_write(c, req.data, req.len);
    if (r < 0) {
        snprintf(err, errlen, "WebSocket upgrade: cannot send the request: %s", strerror(-r));
        goto out;
    }
    r = read_handshake(c, accept, err, errlen);
    if (r < 0)
        goto out;
    set_timeouts(c->fd, c->io_timeout_ms);
    *ret = c;
    c = NULL;
out:
    /* the request holds credentials: wipe it */
    if (req.data)
        explicit_bzero(req.data, req.cap);
    buf_release(&req);
    ws_free(c);
    return r;
}

static int send_frame(struct ws_conn *c, uint8_t opcode, const void *data, size_t len)
{
    struct buf out;
    uint8_t mask[4];
    int r;

    if (c->dead)
        return -EPIPE;
    r = util_random_bytes(mask, sizeof(mask));
    if (r < 0)
        return r;
    buf_init(&out, len + 16);
    r = ws_frame_encode(opcode, data, len, mask, &out);
    if (r >= 0)
        r = raw_write(c, out.data, out.len);
    buf_release(&out);
    return r;
}

static void send_close(struct ws_conn *c, uint16_t code)
{
    uint8_t payload[2] = {(uint8_t)(code >> 8), (uint8_t)code};

    if (c->close_sent || c->dead)
        return;
    c->close_sent = true;
    (void)send_frame(c, WS_OP_CLOSE, payload, sizeof(payload));
}

int ws_read(struct ws_conn *c, int timeout_ms, struct ws_event *ret_ev)
{
    int64_t deadline = timeout_ms >= 0 ? util_now_ms() + timeout_ms : -1;

    for (;;) {
        struct ws_event ev;
        size_t used;
        ssize_t n;
        int r;

        if (c->close_received || c->dead)
            return -ECONNRESET;
        if (c->rstart < c->rend) {
            r = ws_frame_feed(&c->parser, c->rbuf + c->rstart, c->rend - c->rstart, &used, &ev);
            c->rstart += used;
            if (r < 0) {
                send_close(c, r == -EMSGSIZE ? WS_CLOSE_TOO_BIG : WS_CLOSE_PROTOCOL);
                c->dead = true;
                return r;
            }
            if (r == 1) {
                switch (ev.type) {
                case WS_EV_PING:
                    memcpy(c->ping, ev.data, ev.len);
                    if (!c->close_sent)
                        (void)send_frame(c, WS_OP_PONG, c->ping, ev.len);
                    continue;
                case WS_EV_PONG:
                    continue;
                case WS_EV_CLOSE:
                    c->close_received = true;
                    send_close(c, ev.close_code == WS_CLOSE_NO_STATUS ? WS_CLOSE_NORMAL
                                                                      : ev.close_code);
                    *ret_ev = ev;
                    return 1;
                case WS_EV_DATA:
                    if (ev.len == 0 && !ev.fin)
                        continue;
                    *ret_ev = ev;
                    return 1;
                }
            }
            continue;
        }
        c->rstart = c->rend = 0;
        if (!(c->ssl && SSL_pending(c->ssl) > 0)) {
            struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
            int wait = -1;

            if (deadline >= 0) {
                int64_t left = deadline - util_now_ms();

                if (left <= 0)
                    return 0;
                wait = left > 60000 ? 60000 : (int)left;
            }
            r = poll(&pfd, 1, wait);
            if (r < 0) {
                if (errno == EINTR)
                    continue;
                return -errno;
            }
            if (r == 0)
                continue;
        }
        n = raw_read(c, c->rbuf, sizeof(c->rbuf));
        if (n == 0 || n == -ECONNRESET || n == -EPIPE) {
            c->dead = true;
            return -ECONNRESET;
        }
        if (n < 0) {
            c->dead = true;
            return (int)n;
        }
        c->rend = (size_t)n;
    }
}

void ws_shutdown(struct ws_conn *c)
{
    if (c && c->fd >= 0)
        (void)shutdown(c->fd, SHUT_RDWR);
}

void ws_free(struct ws_conn *c)
{
    if (!c)
        return;
    if (c->ssl) {
        if (!c->dead)
            (void)SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
    }
    SSL_CTX_free(c->ctx);
    if (c->fd >= 0)
        close(c->fd);
    ERR_clear_error();
    free(c);
}
