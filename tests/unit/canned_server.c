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

#include "../../engine/provider/ws_client.h"
#include "../../engine/util.h"

#define WAIT_MS 5000

static int wait_readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};

    return poll(&p, 1, ms);
}

/* Read one request (head + Content-Length body) into req; 0 at a clean end, -1 on error. */
static int read_request(int fd, struct buf *req)
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
                if (parse_u64(num, 0, 1u << 30, &v) == 0)
                    body = (size_t)v;
            }
            if (req->len >= (size_t)(end - req->data) + 4 + body)
                return 1;
        }
        if (wait_readable(fd, WAIT_MS) <= 0)
            return -1;
        n = read(fd, chunk, sizeof(chunk));
        if (n <= 0)
            return req->len ? -1 : 0;
        if (buf_append(req, chunk, (size_t)n) < 0)
            return -1;
    }
}

static void send_reply(struct canned_server *s, int fd, const struct canned_reply *r,
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
        (void)ws_accept_key(key, accept);
        (void)write_all(fd, r->data, (size_t)(mark - r->data));
        (void)write_all(fd, accept, strlen(accept));
        (void)write_all(fd, mark + 8, len - (size_t)(mark - r->data) - 8);
        /* the upgraded connection: record what the client sends until it closes */
        for (;;) {
            char chunk[4096];
            ssize_t got;

            if (wait_readable(fd, 2000) <= 0)
                break;
            got = read(fd, chunk, sizeof(chunk));
            if (got <= 0)
                break;
            (void)buf_append(&s->ws_frames, chunk, (size_t)got);
        }
        return;
    }
    (void)write_all(fd, r->data, len);
}

static void *serve(void *arg)
{
    struct canned_server *s = arg;
    struct buf req;
    int conn = -1;

    buf_init(&req, 64u << 20);
    while (s->served < s->nreplies) {
        int r;

        if (conn < 0) {
            if (wait_readable(s->listen_fd, WAIT_MS) <= 0)
                break;
            conn = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (conn < 0)
                break;
        }
        r = read_request(conn, &req);
        if (r <= 0) {
            close(conn);
            conn = -1;
            if (r < 0)
                break;
            continue;
        }
        (void)buf_append(&s->requests, req.data, req.len);
        (void)buf_append_str(&s->requests, "\n--end--\n");
        send_reply(s, conn, &s->replies[s->served++], &req);
        if (strstr(s->replies[s->served - 1].data, "%ACCEPT%")) {
            close(conn);
            conn = -1;
        }
    }
    if (conn >= 0)
        close(conn);
    buf_release(&req);
    return NULL;
}

int canned_start(struct canned_server *s, const struct canned_reply *replies, size_t n)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);

    memset(s, 0, sizeof(*s));
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

void canned_stop(struct canned_server *s)
{
    pthread_join(s->thread, NULL);
    close(s->listen_fd);
}

void canned_release(struct canned_server *s)
{
    buf_release(&s->requests);
    buf_release(&s->ws_frames);
}
