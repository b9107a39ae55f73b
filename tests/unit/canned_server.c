#include "canned_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "base/util.h"
#include "provider/ws_client.h"

#define WAIT_MS 5000

struct conn {
    int fd;
    SSL *ssl;
};

static int wait_readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};

    return poll(&p, 1, ms);
}

static int conn_wait(struct conn *c, int ms)
{
    if (c->ssl && SSL_pending(c->ssl) > 0)
        return 1;
    return wait_readable(c->fd, ms);
}

static ssize_t conn_read(struct conn *c, void *buf, size_t len)
{
    if (c->ssl) {
        int n = SSL_read(c->ssl, buf, (int)len);

        ERR_clear_error();
        return n > 0 ? n : 0;
    }
    return read(c->fd, buf, len);
}

static void conn_write(struct conn *c, const void *buf, size_t len)
{
    if (c->ssl) {
        if (len > 0)
            (void)SSL_write(c->ssl, buf, (int)len);
        ERR_clear_error();
        return;
    }
    (void)util_write_all(c->fd, buf, len);
}

static void conn_close(struct conn *c)
{
    if (c->ssl) {
        (void)SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
        ERR_clear_error();
    }
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->ssl = NULL;
}

/* Read one request (head + Content-Length body) into req; 0 at a clean end, -1 on error. */
static int read_request(struct conn *fd, struct buf *req)
{
    char *end;
    size_t body = 0;

    buf_reset(req);
    for (;;) {
        char chunk[4096];
        ssize_t n;

        end = req->len ? memmem(req->data, req->len, "\r\n\r\n", 4) : NULL;
        if (end) {
            const char *cl = strcasestr(req->data, "\r\nContent-Length:");

            if (cl && cl < end) {
                uint64_t v;
                char num[32];
                size_t k = 0;

                cl += 17;
                while (*cl == ' ')
                    cl++;
                while (k + 1 < sizeof(num) && cl[k] >= '0' && cl[k] <= '9') {
                    num[k] = cl[k];
                    k++;
                }
                num[k] = '\0';
                if (util_parse_u64(num, 0, 1u << 30, &v) == 0)
                    body = (size_t)v;
            }
            if (req->len >= (size_t)(end - req->data) + 4 + body)
                return 1;
        }
        if (conn_wait(fd, WAIT_MS) <= 0)
            return -1;
        n = conn_read(fd, chunk, sizeof(chunk));
        if (n <= 0)
            return req->len ? -1 : 0;
        if (buf_append(req, chunk, (size_t)n) < 0)
            return -1;
    }
}

static void send_reply(struct canned_server *s, struct conn *fd, const struct canned_reply *r,
                       const struct buf *req)
{
    size_t len = r->len ? r->len : strlen(r->data);
    const char *mark = memmem(r->data, len, "%ACCEPT%", 8);

    if (mark) {
        const char *k = strcasestr(req->data, "\r\nSec-WebSocket-Key:");
        char key[64] = "", accept[29] = "";
        size_t n = 0;

        if (k) {
            k += 20;
            while (*k == ' ')
                k++;
            while (n + 1 < sizeof(key) && k[n] && k[n] != '\r')
                n++;
            memcpy(key, k, n);
            key[n] = '\0';
        }
        (void)ws_frame_accept_key(key, accept);
        conn_write(fd, r->data, (size_t)(mark - r->data));
        conn_write(fd, accept, strlen(accept));
        conn_write(fd, mark + 8, len - (size_t)(mark - r->data) - 8);
        /* the upgraded connection: record what the client sends until it closes */
        for (;;) {
            char chunk[4096];
            ssize_t got;

            if (conn_wait(fd, 2000) <= 0)
                break;
            got = conn_read(fd, chunk, sizeof(chunk));
            if (got <= 0)
                break;
            (void)buf_append(&s->ws_frames, chunk, (size_t)got);
        }
        return;
    }
    conn_write(fd, r->data, len);
}

static void *serve(void *arg)
{
    struct canned_server *s = arg;
    struct conn c = {.fd = -1};
    struct buf req;

    buf_init(&req, 64u << 20);
    while (s->served < s->nreplies) {
        int r;

        if (c.fd < 0) {
            if (wait_readable(s->listen_fd, WAIT_MS) <= 0)
                break;
            c.fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (c.fd < 0)
                break;
            if (s->tls) {
                c.ssl = SSL_new(s->tls);
                if (!c.ssl || SSL_set_fd(c.ssl, c.fd) != 1 || SSL_accept(c.ssl) != 1) {
                    /* the client refused our certificate: that was the test */
                    conn_close(&c);
                    break;
                }
            }
        }
        r = read_request(&c, &req);
        if (r <= 0) {
            conn_close(&c);
            if (r < 0)
                break;
            continue;
        }
        (void)buf_append(&s->requests, req.data, req.len);
        (void)buf_append_str(&s->requests, "\n--end--\n");
        send_reply(s, &c, &s->replies[s->served++], &req);
        if (strstr(s->replies[s->served - 1].data, "%ACCEPT%"))
            conn_close(&c);
    }
    conn_close(&c);
    buf_release(&req);
    return NULL;
}

static int start(struct canned_server *s, const struct canned_reply *replies, size_t n,
                 SSL_CTX *tls)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);

    memset(s, 0, sizeof(*s));
    s->tls = tls;
    if (n > CANNED_MAX)
        return -E2BIG;
    memcpy(s->replies, replies, n * sizeof(*replies));
    s->nreplies = n;
    buf_init(&s->requests, 64u << 20);
    buf_init(&s->ws_frames, 1u << 20);
    s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0 || bind(s->listen_fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        listen(s->listen_fd, 8) < 0 || getsockname(s->listen_fd, (struct sockaddr *)&a, &al) < 0)
        return -errno;
    s->port = ntohs(a.sin_port);
    return -pthread_create(&s->thread, NULL, serve, s);
}

int canned_start_tls(struct canned_server *s, const struct canned_reply *replies, size_t n,
                     const char *cert_file, const char *key_file)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

    if (!ctx || SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1) {
        SSL_CTX_free(ctx);
        ERR_clear_error();
        return -EINVAL;
    }
    return start(s, replies, n, ctx);
}

int canned_start(struct canned_server *s, const struct canned_reply *replies, size_t n)
{
    return start(s, replies, n, NULL);
}

int canned_make_cert(const char *dir, const char *name, const char *san, char *cert, char *key)
{
    char cmd[2048];

    snprintf(cert, 512, "%s/%s.crt", dir, name);
    snprintf(key, 512, "%s/%s.key", dir, name);
    snprintf(cmd, sizeof(cmd),
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-keyout '%s' -out '%s' -days 1 -subj /CN=canned -addext "
             "subjectAltName=%s >/dev/null 2>&1",
             key, cert, san);
    return system(cmd) == 0 ? 0 : -EIO;
}

void canned_stop(struct canned_server *s)
{
    pthread_join(s->thread, NULL);
    close(s->listen_fd);
    SSL_CTX_free(s->tls);
    s->tls = NULL;
}

void canned_release(struct canned_server *s)
{
    buf_release(&s->requests);
    buf_release(&s->ws_frames);
}
