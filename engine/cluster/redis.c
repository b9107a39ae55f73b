/*
 * redis — the cluster's Redis client (redis.h): URL, transport (socket or TLS), hiredis's
 * command formatter and reply reader.
 */
#include "cluster/redis.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "base/buf.h"
#include "base/util.h"

struct redis {
    struct redis_opts o;
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
    redisReader *reader;
};

/* ---- the URL ---------------------------------------------------------------------------- */

static int url_authority(const char *a, size_t alen, struct redis_url *u, char *err, size_t errlen)
{
    const char *at = memrchr(a, '@', alen), *host = a, *colon, *end = a + alen;
    char port[8];
    uint64_t v;

    if (at) {
        const char *sep = memchr(a, ':', (size_t)(at - a));

        if (!sep)
            return util_fail(-EINVAL, err, errlen,
                             "AGENT_RUNNER_REDIS_URL: expected [user]:password@ before the host");
        if (util_percent_decode(a, (size_t)(sep - a), false, u->user, sizeof(u->user)) < 0 ||
            util_percent_decode(sep + 1, (size_t)(at - sep - 1), false, u->password,
                                sizeof(u->password)) < 0)
            return util_fail(-EINVAL, err, errlen,
                             "AGENT_RUNNER_REDIS_URL: bad user or password (percent-encode it)");
        host = at + 1;
    }
    if (host < end && *host == '[') {
        const char *close = memchr(host, ']', (size_t)(end - host));

        if (!close || close == host + 1 || (size_t)(close - host - 1) >= sizeof(u->host))
            return util_fail(-EINVAL, err, errlen, "AGENT_RUNNER_REDIS_URL: bad IPv6 host");
        memcpy(u->host, host + 1, (size_t)(close - host - 1));
        colon = close + 1 < end && close[1] == ':' ? close + 1 : NULL;
        if (close + 1 < end && !colon)
            return util_fail(-EINVAL, err, errlen, "AGENT_RUNNER_REDIS_URL: bad IPv6 host");
    } else {
        colon = memchr(host, ':', (size_t)(end - host));
        size_t hlen = colon ? (size_t)(colon - host) : (size_t)(end - host);

        if (hlen == 0 || hlen >= sizeof(u->host))
            return util_fail(-EINVAL, err, errlen, "AGENT_RUNNER_REDIS_URL: no host");
        memcpy(u->host, host, hlen);
    }
    if (util_has_ctl(u->host) || strpbrk(u->host, " /?#@"))
        return util_fail(-EINVAL, err, errlen, "AGENT_RUNNER_REDIS_URL: bad host");
    u->port = 6379;
    if (colon) {
        size_t plen = (size_t)(end - colon - 1);

        if (plen == 0 || plen >= sizeof(port))
            return util_fail(-EINVAL, err, errlen, "AGENT_RUNNER_REDIS_URL: bad port");
        memcpy(port, colon + 1, plen);
        port[plen] = '\0';
        if (util_parse_u64(port, 1, 65535, &v) < 0)
            return util_fail(-EINVAL, err, errlen, "AGENT_RUNNER_REDIS_URL: bad port");
        u->port = (uint16_t)v;
    }
    return 0;
}

int redis_url_parse(const char *url, struct redis_url *ret, char *err, size_t errlen)
{
    struct redis_url u;
    const char *a, *slash;
    uint64_t v;
    int r;

    memset(&u, 0, sizeof(u));
    if (!url)
        return util_fail(-EINVAL, err, errlen, "AGENT_RUNNER_REDIS_URL: empty");
    if (strncmp(url, "redis://", 8) == 0) {
        a = url + 8;
    } else if (strncmp(url, "rediss://", 9) == 0) {
        a = url + 9;
        u.tls = true;
    } else {
        return util_fail(-EINVAL, err, errlen,
                         "AGENT_RUNNER_REDIS_URL: expected redis://host:port/db or rediss://");
    }
    slash = strchr(a, '/');
    r = url_authority(a, slash ? (size_t)(slash - a) : strlen(a), &u, err, errlen);
    if (r < 0)
        goto out;
    if (slash && slash[1]) {
        if (util_parse_u64(slash + 1, 0, 1u << 20, &v) < 0) {
            r = util_fail(-EINVAL, err, errlen, "AGENT_RUNNER_REDIS_URL: the db is a number");
            goto out;
        }
        u.db = (uint32_t)v;
    }
    *ret = u;
out:
    explicit_bzero(&u, sizeof(u));
    return r;
}

void redis_url_text(const struct redis_url *u, char *out, size_t outlen)
{
    bool v6 = strchr(u->host, ':') != NULL;

    snprintf(out, outlen, "%s://%s%s%s%s%s%s:%u/%u", u->tls ? "rediss" : "redis", u->user,
             u->password[0] ? ":***" : "", u->user[0] || u->password[0] ? "@" : "", v6 ? "[" : "",
             u->host, v6 ? "]" : "", (unsigned)u->port, (unsigned)u->db);
}

void redis_url_wipe(struct redis_url *u)
{
    explicit_bzero(u->password, sizeof(u->password));
}

/* ---- the transport ---------------------------------------------------------------------- */

void redis_cmd_arg(struct redis_cmd *c, const char *s)
{
    if (c->argc < 0 || c->argc >= REDIS_ARGS_MAX) {
        c->argc = REDIS_ARGS_MAX + 1; /* refused by redis_pipeline */
        return;
    }
    c->argv[c->argc] = s;
    c->len[c->argc] = strlen(s);
    c->argc++;
}

struct redis *redis_new(const struct redis_opts *o)
{
    struct redis *r = calloc(1, sizeof(*r));

    if (!r)
        return NULL;
    r->o = *o;
    r->fd = -1;
    return r;
}

void redis_close(struct redis *r)
{
    if (!r)
        return;
    if (r->ssl) {
        SSL_free(r->ssl);
        r->ssl = NULL;
    }
    if (r->ctx) {
        SSL_CTX_free(r->ctx);
        r->ctx = NULL;
    }
    if (r->fd >= 0) {
        close(r->fd);
        r->fd = -1;
    }
    if (r->reader) {
        redisReaderFree(r->reader);
        r->reader = NULL;
    }
}

void redis_free(struct redis *r)
{
    if (!r)
        return;
    redis_close(r);
    free(r);
}

bool redis_connected(const struct redis *r)
{
    return r && r->fd >= 0;
}

/* Wait until fd is ready for events or the deadline passes: 0, -ETIMEDOUT, -errno. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int64_t left = deadline - util_now_ms();
        int n;

        if (left <= 0)
            return -ETIMEDOUT;
        n = poll(&p, 1, (int)(left > 60000 ? 60000 : left));
        if (n > 0)
            return (p.revents & (POLLERR | POLLNVAL)) && !(p.revents & (POLLIN | POLLOUT))
                       ? -ECONNRESET
                       : 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

static int tcp_connect_one(const struct addrinfo *ai, int64_t deadline)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    int one = 1, soerr = 0, r;
    socklen_t len = sizeof(soerr);

    if (fd < 0)
        return -errno;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
        r = -errno;
        goto fail;
    }
    r = wait_fd(fd, POLLOUT, deadline);
    if (r < 0 && r != -ECONNRESET)
        goto fail;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0 || soerr) {
        r = soerr ? -soerr : -errno;
        goto fail;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
fail:
    close(fd);
    return r;
}

static int tcp_connect(struct redis *r, int64_t deadline, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    char port[8];
    int fd = -EHOSTUNREACH;

    snprintf(port, sizeof(port), "%u", (unsigned)r->o.url->port);
    if (getaddrinfo(r->o.url->host, port, &hints, &res) != 0 || !res)
        return util_fail(-EHOSTUNREACH, err, errlen, "redis: cannot resolve the host");
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = tcp_connect_one(ai, deadline);
        if (fd >= 0)
            break;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return util_fail(fd, err, errlen, "redis: connect: %s", strerror(-fd));
    r->fd = fd;
    return 0;
}

/* Drive an SSL call that wants to read or write until it completes or the deadline passes. */
static int ssl_wait(struct redis *r, int rc, int64_t deadline)
{
    int e = SSL_get_error(r->ssl, rc);

    if (e == SSL_ERROR_WANT_READ)
        return wait_fd(r->fd, POLLIN, deadline);
    if (e == SSL_ERROR_WANT_WRITE)
        return wait_fd(r->fd, POLLOUT, deadline);
    if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0))
        return -ECONNRESET; /* the peer closed the connection */
    return -EPROTO;
}

static int tls_start(struct redis *r, int64_t deadline, char *err, size_t errlen)
{
    const char *host = r->o.url->host;
    struct in6_addr a6;
    struct in_addr a4;
    bool ip = inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1;
    int rc, w;

    r->ctx = SSL_CTX_new(TLS_client_method());
    if (!r->ctx)
        return util_fail(-ENOMEM, err, errlen, "redis: TLS context");
    SSL_CTX_set_min_proto_version(r->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(r->ctx, SSL_VERIFY_PEER, NULL);
    if (r->o.ca_file ? SSL_CTX_load_verify_locations(r->ctx, r->o.ca_file, NULL) != 1
                     : SSL_CTX_set_default_verify_paths(r->ctx) != 1)
        return util_fail(-EPROTO, err, errlen, "redis: cannot load the CA bundle");
    r->ssl = SSL_new(r->ctx);
    if (!r->ssl || SSL_set_fd(r->ssl, r->fd) != 1)
        return util_fail(-ENOMEM, err, errlen, "redis: TLS session");
    if (ip) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(r->ssl), host);
    } else {
        SSL_set_tlsext_host_name(r->ssl, host);
        SSL_set1_host(r->ssl, host);
    }
    for (;;) {
        ERR_clear_error();
        rc = SSL_connect(r->ssl);
        if (rc == 1)
            return 0;
        w = ssl_wait(r, rc, deadline);
        if (w < 0)
            return util_fail(w, err, errlen, "redis: TLS handshake: %s",
                             w == -EPROTO ? "peer not verified or protocol error" : strerror(-w));
    }
}

static int io_write(struct redis *r, const char *p, size_t len, int64_t deadline)
{
    while (len > 0) {
        ssize_t n;
        int w;

        if (r->ssl) {
            int rc;

            ERR_clear_error();
            rc = SSL_write(r->ssl, p, len > INT32_MAX ? INT32_MAX : (int)len);
            if (rc > 0) {
                p += rc;
                len -= (size_t)rc;
                continue;
            }
            w = ssl_wait(r, rc, deadline);
            if (w < 0)
                return w;
            continue;
        }
        n = send(r->fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -errno;
        w = wait_fd(r->fd, POLLOUT, deadline);
        if (w < 0)
            return w;
    }
    return 0;
}

/* Read what is there (waiting until something is): bytes read (> 0), or -errno. */
static ssize_t io_read(struct redis *r, char *p, size_t cap, int64_t deadline)
{
    for (;;) {
        ssize_t n;
        int w;

        if (r->ssl) {
            int rc;

            ERR_clear_error();
            rc = SSL_read(r->ssl, p, cap > INT32_MAX ? INT32_MAX : (int)cap);
            if (rc > 0)
                return rc;
            w = ssl_wait(r, rc, deadline);
            if (w < 0)
                return w;
            continue;
        }
        n = recv(r->fd, p, cap, 0);
        if (n > 0)
            return n;
        if (n == 0)
            return -ECONNRESET;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -errno;
        w = wait_fd(r->fd, POLLIN, deadline);
        if (w < 0)
            return w;
    }
}

static void free_replies(redisReply **rep, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (rep[i])
            freeReplyObject(rep[i]);
        rep[i] = NULL;
    }
}

/* Write the formatted commands, read n replies. The connection must be open. */
static int exchange(struct redis *r, const struct redis_cmd *cmds, size_t n, redisReply **ret,
                    int64_t deadline, char *err, size_t errlen)
{
    struct buf out;
    size_t got = 0, total = 0;
    char chunk[16384];
    int rc = 0;

    buf_init(&out, REDIS_REPLY_MAX);
    for (size_t i = 0; i < n && rc == 0; i++) {
        char *cmd = NULL;
        int len;

        if (cmds[i].argc < 1 || cmds[i].argc > REDIS_ARGS_MAX) {
            rc = util_fail(-EINVAL, err, errlen, "redis: a command of %d arguments", cmds[i].argc);
            break;
        }
        /* hiredis 0.14 declares argv without the inner const; it never writes through it */
        len = redisFormatCommandArgv(&cmd, cmds[i].argc, (const char **)(uintptr_t)cmds[i].argv,
                                     cmds[i].len);
        if (len < 0 || !cmd) {
            rc = util_fail(-ENOMEM, err, errlen, "redis: out of memory");
            break;
        }
        rc = buf_append(&out, cmd, (size_t)len);
        redisFreeCommand(cmd);
        if (rc < 0)
            util_seterr(err, errlen, "redis: commands too large");
    }
    if (rc == 0) {
        rc = io_write(r, out.data, out.len, deadline);
        if (rc < 0)
            util_seterr(err, errlen, "redis: write: %s", strerror(-rc));
    }
    buf_release(&out);
    while (rc == 0 && got < n) {
        void *reply = NULL;
        ssize_t m;

        if (redisReaderGetReply(r->reader, &reply) != REDIS_OK) {
            rc = util_fail(-EPROTO, err, errlen, "redis: a reply that is not RESP");
            break;
        }
        if (reply) {
            ret[got++] = reply;
            continue;
        }
        m = io_read(r, chunk, sizeof(chunk), deadline);
        if (m < 0) {
            rc = util_fail((int)m, err, errlen, "redis: read: %s", strerror((int)-m));
            break;
        }
        total += (size_t)m;
        if (total > REDIS_REPLY_MAX) {
            rc = util_fail(-E2BIG, err, errlen, "redis: replies past %u bytes", REDIS_REPLY_MAX);
            break;
        }
        if (redisReaderFeed(r->reader, chunk, (size_t)m) != REDIS_OK)
            rc = util_fail(-ENOMEM, err, errlen, "redis: out of memory");
    }
    if (rc < 0)
        free_replies(ret, got);
    return rc;
}

/* AUTH and SELECT on a new connection. */
static int handshake(struct redis *r, int64_t deadline, char *err, size_t errlen)
{
    const struct redis_url *u = r->o.url;
    struct redis_cmd c[2];
    redisReply *rep[2] = {NULL, NULL};
    char db[16];
    size_t n = 0;
    int rc;

    memset(c, 0, sizeof(c));
    if (u->password[0]) {
        redis_cmd_arg(&c[n], "AUTH");
        if (u->user[0])
            redis_cmd_arg(&c[n], u->user);
        redis_cmd_arg(&c[n], u->password);
        n++;
    }
    if (u->db) {
        snprintf(db, sizeof(db), "%u", (unsigned)u->db);
        redis_cmd_arg(&c[n], "SELECT");
        redis_cmd_arg(&c[n], db);
        n++;
    }
    if (n == 0)
        return 0;
    rc = exchange(r, c, n, rep, deadline, err, errlen);
    explicit_bzero(c, sizeof(c));
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (rep[i]->type == REDIS_REPLY_ERROR)
            rc = util_fail(i == 0 && u->password[0] ? -EACCES : -EINVAL, err, errlen,
                           "redis: %s refused", i == 0 && u->password[0] ? "AUTH" : "SELECT");
    }
    free_replies(rep, n);
    return rc;
}

static int ensure_connected(struct redis *r, char *err, size_t errlen)
{
    int64_t deadline = util_now_ms() + (int64_t)r->o.connect_ms;
    int rc;

    if (r->fd >= 0)
        return 0;
    r->reader = redisReaderCreate();
    if (!r->reader)
        return util_fail(-ENOMEM, err, errlen, "redis: out of memory");
    rc = tcp_connect(r, deadline, err, errlen);
    if (rc == 0 && r->o.url->tls)
        rc = tls_start(r, deadline, err, errlen);
    if (rc == 0)
        rc = handshake(r, deadline, err, errlen);
    if (rc < 0)
        redis_close(r);
    return rc;
}

int redis_pipeline(struct redis *r, const struct redis_cmd *cmds, size_t n, redisReply **ret,
                   char *err, size_t errlen)
{
    bool reused = r->fd >= 0;
    int rc;

    if (n == 0)
        return 0;
    for (int attempt = 0;; attempt++) {
        rc = ensure_connected(r, err, errlen);
        if (rc < 0)
            return rc;
        for (size_t i = 0; i < n; i++)
            ret[i] = NULL;
        rc = exchange(r, cmds, n, ret, util_now_ms() + (int64_t)r->o.io_ms, err, errlen);
        if (rc >= 0)
            return rc;
        redis_close(r);
        /* a kept connection Redis closed meanwhile (it restarted, or dropped idle clients):
         * one more try on a new one. The scripts are safe to run twice. */
        if (!reused || attempt > 0 || (rc != -ECONNRESET && rc != -EPIPE))
            return rc;
    }
}

int redis_command(struct redis *r, const struct redis_cmd *cmd, redisReply **ret, char *err,
                  size_t errlen)
{
    return redis_pipeline(r, cmd, 1, ret, err, errlen);
}
