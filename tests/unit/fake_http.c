#include "fake_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/jsonx.h"

#define HEAD_MAX (64 * 1024)
#define BODY_MAX (64u * 1024 * 1024)
#define SLOTS 256

struct conn {
    bool used;
    bool done;
    int fd;
    pthread_t tid;
    struct fake_http *f;
};

struct fake_http {
    int lfd;
    int port;
    char url[64];
    fake_http_handler handler;
    void *ctx;
    pthread_t acceptor;
    pthread_mutex_t lock;
    bool stopping;
    struct conn conns[SLOTS];
    struct fake_request *reqs;
    size_t nreqs;
    size_t served; /* numbering for the handler */
};

static int write_all_fd(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static const char *header_of(const char *head, const char *name, size_t *ret_len)
{
    size_t nl = strlen(name);

    for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
        const char *line = p + 2, *v;

        if (strncasecmp(line, name, nl) != 0 || line[nl] != ':')
            continue;
        v = line + nl + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        *ret_len = strcspn(v, "\r\n");
        return v;
    }
    return NULL;
}

/* A copy of r into ret, body and headers duplicated; -1 (nothing allocated) on ENOMEM. */
static int copy_request(const struct fake_request *r, struct fake_request *ret)
{
    *ret = *r;
    ret->body = malloc(r->body_len + 1);
    ret->headers = strdup(r->headers ? r->headers : "");
    if (!ret->body || !ret->headers) {
        free(ret->body);
        free(ret->headers);
        return -1;
    }
    memcpy(ret->body, r->body, r->body_len + 1);
    return 0;
}

static void record(struct fake_http *f, const struct fake_request *r, size_t *ret_n)
{
    pthread_mutex_lock(&f->lock);
    *ret_n = f->served++;
    if (f->nreqs < FAKE_HTTP_REQUESTS_MAX && copy_request(r, &f->reqs[f->nreqs]) == 0)
        f->nreqs++;
    pthread_mutex_unlock(&f->lock);
}

/* Read and drop what the client sends until it closes or the server shuts the socket down. */
static void hold(int fd)
{
    char sink[256];
    ssize_t got;

    do {
        got = recv(fd, sink, sizeof(sink), 0);
    } while (got > 0 || (got < 0 && errno == EINTR));
}

static void *serve(void *arg)
{
    struct conn *c = arg;
    struct fake_http *f = c->f;
    char *buf = malloc(HEAD_MAX + 1);
    size_t have = 0;

    while (buf) {
        struct fake_request req;
        struct fake_response resp;
        char *end, head[4096];
        const char *v;
        size_t vlen, clen = 0, hlen, n;
        ssize_t got;

        /* read the head */
        while (!(end = (have ? memmem(buf, have, "\r\n\r\n", 4) : NULL))) {
            if (have >= HEAD_MAX)
                goto out;
            got = recv(c->fd, buf + have, HEAD_MAX - have, 0);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                goto out;
            have += (size_t)got;
        }
        hlen = (size_t)(end - buf) + 4;
        buf[hlen - 2] = '\0';
        memset(&req, 0, sizeof(req));
        if (sscanf(buf, "%15s %2047s", req.method, req.path) != 2)
            goto out;
        v = strstr(buf, "\r\n");
        req.headers = strdup(v ? v + 2 : "");
        if (!req.headers)
            goto out;
        v = header_of(buf, "Authorization", &vlen);
        if (v)
            snprintf(req.authorization, sizeof(req.authorization), "%.*s", (int)vlen, v);
        v = header_of(buf, "Content-Length", &vlen);
        if (v)
            clen = strtoul(v, NULL, 10);
        v = header_of(buf, "Expect", &vlen);
        if (clen > BODY_MAX || (v && strncasecmp(v, "100-continue", 12) == 0 &&
                                write_all_fd(c->fd, "HTTP/1.1 100 Continue\r\n\r\n", 25) < 0)) {
            free(req.headers);
            goto out;
        }
        req.body = malloc(clen + 1);
        if (!req.body) {
            free(req.headers);
            goto out;
        }
        n = have - hlen < clen ? have - hlen : clen;
        memcpy(req.body, buf + hlen, n);
        memmove(buf, buf + hlen + n, have - hlen - n);
        have -= hlen + n;
        while (n < clen) {
            got = recv(c->fd, req.body + n, clen - n, 0);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0) {
                free(req.body);
                free(req.headers);
                goto out;
            }
            n += (size_t)got;
        }
        req.body[clen] = '\0';
        req.body_len = clen;

        record(f, &req, &n);
        memset(&resp, 0, sizeof(resp));
        resp.status = 200;
        snprintf(resp.content_type, sizeof(resp.content_type), "application/json");
        if (f->handler)
            f->handler(f->ctx, n, &req, &resp);
        free(req.body);
        free(req.headers);
        if (resp.hang) {
            free(resp.body);
            hold(c->fd);
            goto out;
        }
        if (!resp.body) {
            resp.body = strdup("{}");
            resp.body_len = 2;
        }
        snprintf(head, sizeof(head), "HTTP/1.1 %d X\r\nContent-Length: %zu\r\n%s%s%s%s\r\n",
                 resp.status, resp.body_len, resp.content_type[0] ? "Content-Type: " : "",
                 resp.content_type, resp.content_type[0] ? "\r\n" : "", resp.extra_headers);
        if (write_all_fd(c->fd, head, strlen(head)) < 0 ||
            write_all_fd(c->fd, resp.body, resp.body_len) < 0) {
            free(resp.body);
            goto out;
        }
        free(resp.body);
        if (resp.close) {
            shutdown(c->fd, SHUT_WR);
            goto out;
        }
    }
out:
    free(buf);
    pthread_mutex_lock(&f->lock);
    c->done = true;
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

static void *acceptor(void *arg)
{
    struct fake_http *f = arg;

    for (;;) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        struct conn *slot = NULL;
        int fd;

        if (poll(&p, 1, 50) < 0 && errno != EINTR)
            break;
        pthread_mutex_lock(&f->lock);
        if (f->stopping) {
            pthread_mutex_unlock(&f->lock);
            break;
        }
        pthread_mutex_unlock(&f->lock);
        if (!(p.revents & POLLIN))
            continue;
        fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; i < SLOTS && !slot; i++) {
            struct conn *c = &f->conns[i];

            if (c->used && c->done) {
                pthread_join(c->tid, NULL);
                close(c->fd);
                c->used = false;
            }
            if (!c->used)
                slot = c;
        }
        if (slot) {
            memset(slot, 0, sizeof(*slot));
            slot->used = true;
            slot->fd = fd;
            slot->f = f;
            if (pthread_create(&slot->tid, NULL, serve, slot) != 0) {
                slot->used = false;
                close(fd);
            }
        } else {
            close(fd);
        }
        pthread_mutex_unlock(&f->lock);
    }
    return NULL;
}

struct fake_http *fake_http_start(fake_http_handler handler, void *ctx)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t alen = sizeof(a);
    struct fake_http *f = calloc(1, sizeof(*f));
    int one = 1;

    if (!f)
        return NULL;
    f->reqs = calloc(FAKE_HTTP_REQUESTS_MAX, sizeof(*f->reqs));
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!f->reqs || f->lfd < 0 ||
        setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(f->lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(f->lfd, 64) < 0 ||
        getsockname(f->lfd, (struct sockaddr *)&a, &alen) < 0)
        goto fail;
    f->port = ntohs(a.sin_port);
    snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%d", f->port);
    f->handler = handler;
    f->ctx = ctx;
    pthread_mutex_init(&f->lock, NULL);
    if (pthread_create(&f->acceptor, NULL, acceptor, f) != 0) {
        pthread_mutex_destroy(&f->lock);
        goto fail;
    }
    return f;
fail:
    if (f->lfd >= 0)
        close(f->lfd);
    free(f->reqs);
    free(f);
    return NULL;
}

const char *fake_http_url(struct fake_http *f)
{
    return f->url;
}

int fake_http_port(struct fake_http *f)
{
    return f->port;
}

void fake_http_stop(struct fake_http *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    f->stopping = true;
    pthread_mutex_unlock(&f->lock);
    pthread_join(f->acceptor, NULL);
    close(f->lfd);
    for (size_t i = 0; i < SLOTS; i++) {
        struct conn *c = &f->conns[i];

        if (!c->used)
            continue;
        shutdown(c->fd, SHUT_RDWR);
        pthread_join(c->tid, NULL);
        close(c->fd);
    }
    for (size_t i = 0; i < f->nreqs; i++)
        fake_request_release(&f->reqs[i]);
    free(f->reqs);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

size_t fake_http_count(struct fake_http *f)
{
    size_t n;

    pthread_mutex_lock(&f->lock);
    n = f->nreqs;
    pthread_mutex_unlock(&f->lock);
    return n;
}

static bool path_is(const char *full, const char *path)
{
    size_t n = strcspn(full, "?");

    return strlen(path) == n && strncmp(full, path, n) == 0;
}

size_t fake_http_count_path(struct fake_http *f, const char *path)
{
    size_t n = 0;

    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->nreqs; i++)
        n += path_is(f->reqs[i].path, path);
    pthread_mutex_unlock(&f->lock);
    return n;
}

int fake_http_get(struct fake_http *f, size_t i, struct fake_request *ret)
{
    int r = -1;

    pthread_mutex_lock(&f->lock);
    if (i < f->nreqs)
        r = copy_request(&f->reqs[i], ret);
    pthread_mutex_unlock(&f->lock);
    return r;
}

void fake_request_release(struct fake_request *r)
{
    free(r->body);
    free(r->headers);
    r->body = NULL;
    r->headers = NULL;
}

bool fake_request_header(const struct fake_request *r, const char *name, char *out, size_t outlen)
{
    size_t nlen = strlen(name);

    for (const char *line = r->headers; line && *line;) {
        const char *eol = strstr(line, "\r\n");
        size_t llen = eol ? (size_t)(eol - line) : strlen(line);

        if (llen > nlen && line[nlen] == ':' && strncasecmp(line, name, nlen) == 0) {
            const char *v = line + nlen + 1;
            size_t vlen;

            while (*v == ' ')
                v++;
            vlen = llen - (size_t)(v - line);
            if (vlen >= outlen)
                return false;
            memcpy(out, v, vlen);
            out[vlen] = '\0';
            return true;
        }
        line = eol ? eol + 2 : line + llen;
    }
    return false;
}

json_object *fake_http_json(struct fake_http *f, const char *path, size_t i)
{
    json_object *o = NULL;
    size_t seen = 0;
    char err[128];

    pthread_mutex_lock(&f->lock);
    for (size_t k = 0; k < f->nreqs; k++) {
        if (!path_is(f->reqs[k].path, path))
            continue;
        if (seen++ == i) {
            if (jsonx_parse(f->reqs[k].body, f->reqs[k].body_len, 128, &o, err, sizeof(err)) < 0)
                o = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return o;
}

size_t fake_http_wait(struct fake_http *f, const char *path, size_t n, int timeout_ms)
{
    for (int waited = 0;; waited += 5) {
        size_t have = fake_http_count_path(f, path);
        struct timespec ts = {0, 5 * 1000000};

        if (have >= n || waited >= timeout_ms)
            return have;
        nanosleep(&ts, NULL);
    }
}

bool fake_http_saw(struct fake_http *f, const char *s)
{
    bool seen = false;

    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->nreqs && !seen; i++)
        seen = strstr(f->reqs[i].method, s) || strstr(f->reqs[i].path, s) ||
               strstr(f->reqs[i].authorization, s) || strstr(f->reqs[i].body, s);
    pthread_mutex_unlock(&f->lock);
    return seen;
}
