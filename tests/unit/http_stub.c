#include "http_stub.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_MAX (64 * 1024)
#define BODY_MAX (16 * 1024 * 1024)

struct http_stub {
    int lfd;
    int stop_pipe[2];
    int port;
    pthread_t thread;
    http_stub_handler fn;
    void *ctx;
    pthread_mutex_t lock;
    struct http_stub_request kept[HTTP_STUB_KEEP];
    size_t nkept;
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

/* Wait until fd is readable or the stub is stopping; false when stopping. */
static bool wait_readable(struct http_stub *s, int fd)
{
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = s->stop_pipe[0], .events = POLLIN}};

    for (;;) {
        int n = poll(p, 2, -1);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || (p[1].revents & POLLIN))
            return false;
        if (p[0].revents)
            return true;
    }
}

static bool read_request(struct http_stub *s, int fd, struct http_stub_request *rq)
{
    char *head = malloc(HEAD_MAX + 1), *end = NULL, *cl;
    size_t len = 0, clen = 0, have;

    if (!head)
        return false;
    while (!end) {
        ssize_t n;

        if (len == HEAD_MAX || !wait_readable(s, fd))
            goto bad;
        n = recv(fd, head + len, HEAD_MAX - len, 0);
        if (n <= 0)
            goto bad;
        len += (size_t)n;
        head[len] = '\0';
        end = strstr(head, "\r\n\r\n");
    }
    if (sscanf(head, "%15s %2047s", rq->method, rq->target) != 2)
        goto bad;
    *end = '\0';
    rq->headers = strdup(strstr(head, "\r\n") ? strstr(head, "\r\n") + 2 : "");
    for (cl = head; (cl = strcasestr(cl, "\r\ncontent-length:")) != NULL; cl++) {
        clen = strtoul(cl + 17, NULL, 10);
        break;
    }
    if (clen > BODY_MAX)
        goto bad;
    rq->body = malloc(clen + 1);
    if (!rq->body || !rq->headers)
        goto bad;
    have = len - (size_t)(end + 4 - head);
    if (have > clen)
        have = clen;
    memcpy(rq->body, end + 4, have);
    while (have < clen) {
        ssize_t n;

        if (!wait_readable(s, fd))
            goto bad;
        n = recv(fd, rq->body + have, clen - have, 0);
        if (n <= 0)
            goto bad;
        have += (size_t)n;
    }
    rq->body[clen] = '\0';
    rq->body_len = clen;
    free(head);
    return true;
bad:
    free(head);
    return false;
}

static void serve(struct http_stub *s, int fd)
{
    struct http_stub_request rq;
    struct http_stub_reply reply;
    char head[2048];
    int n;

    memset(&rq, 0, sizeof(rq));
    memset(&reply, 0, sizeof(reply));
    if (!read_request(s, fd, &rq)) {
        free(rq.headers);
        free(rq.body);
        return;
    }
    reply.status = 200;
    s->fn(s->ctx, &rq, &reply);
    pthread_mutex_lock(&s->lock);
    if (s->nkept < HTTP_STUB_KEEP) {
        s->kept[s->nkept++] = rq;
        memset(&rq, 0, sizeof(rq));
    }
    pthread_mutex_unlock(&s->lock);
    free(rq.headers);
    free(rq.body);
    if (reply.hang) {
        char sink[256];
        /* keep the connection open until the client gives up or the stub stops */
        while (wait_readable(s, fd) && recv(fd, sink, sizeof(sink), 0) > 0)
            ;
        free(reply.body);
        return;
    }
    n = snprintf(head, sizeof(head),
                 "HTTP/1.1 %d Stub\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n",
                 reply.status, reply.body_len, reply.headers);
    if (n > 0 && (size_t)n < sizeof(head) && write_all_fd(fd, head, (size_t)n) == 0 &&
        reply.body_len)
        (void)write_all_fd(fd, reply.body, reply.body_len);
    free(reply.body);
}

static void *loop(void *arg)
{
    struct http_stub *s = arg;

    while (wait_readable(s, s->lfd)) {
        int fd = accept(s->lfd, NULL, NULL);

        if (fd < 0)
            continue;
        serve(s, fd);
        shutdown(fd, SHUT_WR);
        close(fd);
    }
    return NULL;
}

struct http_stub *http_stub_start(http_stub_handler fn, void *ctx)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    struct http_stub *s = calloc(1, sizeof(*s));

    if (!s)
        return NULL;
    s->fn = fn;
    s->ctx = ctx;
    pthread_mutex_init(&s->lock, NULL);
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        listen(s->lfd, 16) < 0 || getsockname(s->lfd, (struct sockaddr *)&a, &alen) < 0 ||
        pipe2(s->stop_pipe, O_CLOEXEC) < 0)
        goto bad;
    s->port = ntohs(a.sin_port);
    if (pthread_create(&s->thread, NULL, loop, s) != 0)
        goto bad;
    return s;
bad:
    if (s->lfd >= 0)
        close(s->lfd);
    free(s);
    return NULL;
}

void http_stub_stop(struct http_stub *s)
{
    if (!s)
        return;
    (void)!write(s->stop_pipe[1], "x", 1);
    pthread_join(s->thread, NULL);
    close(s->lfd);
    close(s->stop_pipe[0]);
    close(s->stop_pipe[1]);
    for (size_t i = 0; i < s->nkept; i++) {
        free(s->kept[i].headers);
        free(s->kept[i].body);
    }
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int http_stub_port(const struct http_stub *s)
{
    return s->port;
}

void http_stub_url(const struct http_stub *s, const char *path, char *out, size_t outlen)
{
    snprintf(out, outlen, "http://127.0.0.1:%d%s", s->port, path);
}

size_t http_stub_count(const struct http_stub *s)
{
    size_t n;

    pthread_mutex_lock((pthread_mutex_t *)&s->lock);
    n = s->nkept;
    pthread_mutex_unlock((pthread_mutex_t *)&s->lock);
    return n;
}

const struct http_stub_request *http_stub_get(const struct http_stub *s, size_t i)
{
    return i < http_stub_count(s) ? &s->kept[i] : NULL;
}

bool http_stub_header(const struct http_stub_request *rq, const char *name, char *out,
                      size_t outlen)
{
    size_t nlen = strlen(name);

    for (const char *line = rq->headers; line && *line;) {
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
