/*
 * egress_proxy — accept, decide, connect, relay (see egress_proxy.h).
 *
 * Everything is level-triggered epoll on one set the keeper polls. A connection has two ends
 * (0: the sandbox side, accepted inside the sandbox's namespace; 1: the host side, connected
 * from the keeper's namespace) and two directions (0: sandbox -> host, 1: host -> sandbox),
 * each a fixed buffer of cfg.buf_bytes. An end asks for EPOLLIN while its outgoing direction
 * has room and has not seen EOF, and for EPOLLOUT while its incoming direction holds data (or
 * while the host side is connecting). A direction that saw EOF and drained passes the
 * half-close on (shutdown SHUT_WR); when both directions are shut the connection closes. Any
 * error resets both ends. Connections closed while handling a batch of events are freed only
 * after the batch, so a later event of the same batch never touches freed memory.
 */
#include "egress/egress_proxy.h"

#include <errno.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egress/nl.h"

/* SO_ORIGINAL_DST (linux/netfilter_ipv4.h) and IP6T_SO_ORIGINAL_DST share the number */
#define ORIGINAL_DST 80
#define BATCH 64
#define ACCEPT_BURST 32
#define PAUSE_MS 250 /* out of fds: stop accepting for a while */

enum tag_kind { TAG_LISTENER = 1, TAG_END };

struct listener {
    uint8_t kind; /* TAG_LISTENER: first, epoll's data.ptr points here */
    int fd;
    bool paused;
};

struct end {
    uint8_t kind; /* TAG_END */
    int fd;
    uint32_t interest; /* 0: not in the epoll set at all (no EPOLLHUP/EPOLLERR spinning) */
    struct conn *c;
};

struct dir {
    char *data; /* cfg.buf_bytes, allocated when the first bytes come (idle connections cost
                 * no buffer) */
    size_t start, len;
    bool eof;  /* the source end said EOF */
    bool shut; /* passed on to the other end */
};

struct conn {
    struct end ends[2];
    struct dir dirs[2];
    bool connecting;
    bool dead;
    int64_t deadline;
    struct egress_addr dst;
    uint16_t port;
    enum egress_reason why; /* why the policy allowed it */
    struct conn *next, *prev;
};

struct egress_proxy {
    const struct egress_policy *policy;
    struct egress_proxy_config cfg;
    egress_proxy_report_fn report;
    void *ctx;
    int epfd;
    int nlfd;
    struct listener listeners[EGRESS_PROXY_LISTEN_MAX];
    size_t nlisteners;
    int64_t paused_until;
    struct conn *conns;
    struct conn *dead;
    size_t nconns;
    struct egress_proxy_stats stats;
};

static void report(struct egress_proxy *p, enum egress_proxy_event ev,
                   const struct egress_addr *dst, uint16_t port, enum egress_reason reason,
                   int error)
{
    struct egress_proxy_report r = {.event = ev, .reason = reason, .error = error, .port = port};

    if (dst) {
        r.dst = *dst;
        r.has_dst = true;
    }
    if (p->report)
        p->report(p->ctx, &r);
}

/* Close so that the peer sees a reset, not an orderly end. */
static void close_reset(int fd)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};

    if (fd < 0)
        return;
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
}

static int ep_set(struct egress_proxy *p, int op, int fd, uint32_t events, void *tag)
{
    struct epoll_event ev = {.events = events, .data.ptr = tag};

    return epoll_ctl(p->epfd, op, fd, &ev) == -1 ? -errno : 0;
}

int egress_proxy_new(const struct egress_policy *policy, const int *listen_fds, size_t nfds,
                     const struct egress_proxy_config *cfg, egress_proxy_report_fn report_fn,
                     void *ctx, struct egress_proxy **ret_proxy)
{
    struct egress_proxy *p;
    int r;

    if (!policy)
        return -EINVAL;
    p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->policy = policy;
    p->report = report_fn;
    p->ctx = ctx;
    p->epfd = p->nlfd = -1;
    if (cfg)
        p->cfg = *cfg;
    if (p->cfg.max_conns == 0)
        p->cfg.max_conns = EGRESS_PROXY_CONNS_DEFAULT;
    if (p->cfg.buf_bytes == 0)
        p->cfg.buf_bytes = EGRESS_PROXY_BUF_DEFAULT;
    if (p->cfg.connect_timeout_ms <= 0)
        p->cfg.connect_timeout_ms = EGRESS_PROXY_CONNECT_MS_DEFAULT;
    p->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (p->epfd == -1) {
        r = -errno;
        goto fail;
    }
    /* route lookups in the keeper's (host) namespace: "is this one of the host's addresses" */
    p->nlfd = nl_open(NETLINK_ROUTE);
    if (p->nlfd < 0) {
        r = p->nlfd;
        goto fail;
    }
    for (size_t i = 0; i < nfds; i++) {
        struct listener *l;

        if (listen_fds[i] < 0)
            continue;
        if (p->nlisteners >= EGRESS_PROXY_LISTEN_MAX) {
            r = -E2BIG;
            goto fail;
        }
        l = &p->listeners[p->nlisteners++];
        l->kind = TAG_LISTENER;
        l->fd = listen_fds[i];
        r = ep_set(p, EPOLL_CTL_ADD, l->fd, EPOLLIN, l);
        if (r < 0)
            goto fail;
    }
    *ret_proxy = p;
    return 0;
fail:
    egress_proxy_free(p);
    return r;
}

static void conn_free(struct conn *c)
{
    free(c->dirs[0].data);
    free(c->dirs[1].data);
    free(c);
}

/* Unlink, close both ends (reset or orderly) and queue the memory for the end of the batch. */
static void conn_close(struct egress_proxy *p, struct conn *c, bool reset)
{
    if (c->dead)
        return;
    for (int i = 0; i < 2; i++) {
        if (c->ends[i].fd < 0)
            continue;
        (void)epoll_ctl(p->epfd, EPOLL_CTL_DEL, c->ends[i].fd, NULL);
        if (reset)
            close_reset(c->ends[i].fd);
        else
            close(c->ends[i].fd);
        c->ends[i].fd = -1;
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        p->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->dead = true;
    c->next = p->dead;
    c->prev = NULL;
    p->dead = c;
    p->nconns--;
    /* a slot is free again: a listener paused for want of fds may try again */
    p->paused_until = 0;
}

static void free_dead(struct egress_proxy *p)
{
    while (p->dead) {
        struct conn *c = p->dead;
        p->dead = c->next;
        conn_free(c);
    }
}

void egress_proxy_free(struct egress_proxy *p)
{
    if (!p)
        return;
    while (p->conns)
        conn_close(p, p->conns, true);
    free_dead(p);
    if (p->epfd >= 0)
        close(p->epfd);
    if (p->nlfd >= 0)
        close(p->nlfd);
    free(p);
}

int egress_proxy_fd(const struct egress_proxy *p)
{
    return p->epfd;
}

void egress_proxy_stats(const struct egress_proxy *p, struct egress_proxy_stats *ret_stats)
{
    *ret_stats = p->stats;
    ret_stats->active = p->nconns;
}

/* ---- relaying ----------------------------------------------------------------------------- */

static void update_interest(struct egress_proxy *p, struct conn *c)
{
    for (int i = 0; i < 2; i++) {
        struct end *e = &c->ends[i];
        const struct dir *out = &c->dirs[i], *in = &c->dirs[1 - i];
        uint32_t want = 0;

        if (e->fd < 0)
            continue;
        if (!c->connecting && !out->eof && out->len < p->cfg.buf_bytes)
            want |= EPOLLIN;
        if ((i == 1 && c->connecting) || in->len > 0)
            want |= EPOLLOUT;
        if (want == e->interest)
            continue;
        if (want == 0)
            (void)epoll_ctl(p->epfd, EPOLL_CTL_DEL, e->fd, NULL);
        else if (ep_set(p, e->interest ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, e->fd, want, e) < 0)
            continue; /* keeps the old interest; retried at the next update */
        e->interest = want;
    }
}

/* Read what end d has into direction d. -errno on a broken connection. */
static int pump_read(struct egress_proxy *p, struct conn *c, int d)
{
    struct dir *dir = &c->dirs[d];

    if (!dir->data && !dir->eof) {
        dir->data = malloc(p->cfg.buf_bytes);
        if (!dir->data)
            return -ENOMEM;
    }
    while (!dir->eof && dir->len < p->cfg.buf_bytes) {
        ssize_t n;

        if (dir->start > 0 && dir->start + dir->len == p->cfg.buf_bytes) {
            memmove(dir->data, dir->data + dir->start, dir->len);
            dir->start = 0;
        }
        n = read(c->ends[d].fd, dir->data + dir->start + dir->len,
                 p->cfg.buf_bytes - dir->start - dir->len);
        if (n == -1 && errno == EINTR)
            continue;
        if (n == -1)
            return errno == EAGAIN ? 0 : -errno;
        if (n == 0) {
            dir->eof = true;
            break;
        }
        dir->len += (size_t)n;
        if (d == 0)
            p->stats.bytes_out += (uint64_t)n;
        else
            p->stats.bytes_in += (uint64_t)n;
    }
    return 0;
}

/* Write direction d to the other end; pass a drained EOF on. -errno on a broken connection. */
static int pump_write(struct conn *c, int d)
{
    struct dir *dir = &c->dirs[d];
    int fd = c->ends[1 - d].fd;

    while (dir->len > 0) {
        ssize_t n = send(fd, dir->data + dir->start, dir->len, MSG_NOSIGNAL);

        if (n == -1 && errno == EINTR)
            continue;
        if (n == -1)
            return errno == EAGAIN ? 0 : -errno;
        dir->start += (size_t)n;
        dir->len -= (size_t)n;
    }
    dir->start = 0;
    if (dir->eof && !dir->shut) {
        if (shutdown(fd, SHUT_WR) == -1 && errno != ENOTCONN)
            return -errno;
        dir->shut = true;
    }
    return 0;
}

static void connect_done(struct egress_proxy *p, struct conn *c)
{
    int err = 0;
    socklen_t len = sizeof(err);

    if (getsockopt(c->ends[1].fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1)
        err = errno;
    if (err != 0) {
        p->stats.connect_failed++;
        report(p, EGRESS_PROXY_CONNECT_FAILED, &c->dst, c->port, c->why, -err);
        conn_close(p, c, true);
        return;
    }
    c->connecting = false;
}

static void handle_end(struct egress_proxy *p, struct end *e, uint32_t ev)
{
    struct conn *c = e->c;
    int i = e == &c->ends[0] ? 0 : 1, r = 0;

    if (c->dead)
        return;
    if (c->connecting) {
        /* only the host side is in the set while connecting */
        connect_done(p, c);
        if (c->dead)
            return;
        ev = EPOLLOUT; /* connected: nothing to relay yet, but start listening both ways */
    } else if (ev & EPOLLERR) {
        conn_close(p, c, true);
        return;
    }
    if ((ev & (EPOLLIN | EPOLLHUP)) && (e->interest & EPOLLIN)) {
        r = pump_read(p, c, i);
        if (r == 0)
            r = pump_write(c, i);
    }
    if (r == 0 && (ev & (EPOLLOUT | EPOLLHUP)))
        r = pump_write(c, 1 - i); /* a hung-up peer with data pending fails here: EPIPE */
    if (r < 0) {
        conn_close(p, c, true);
        return;
    }
    if (c->dirs[0].shut && c->dirs[1].shut) {
        conn_close(p, c, false);
        return;
    }
    update_interest(p, c);
}

/* ---- accepting ---------------------------------------------------------------------------- */

static int original_dst(int fd, struct egress_addr *ret_addr, uint16_t *ret_port)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int level;

    if (getsockname(fd, (struct sockaddr *)&ss, &len) == -1)
        return -errno;
    level = ss.ss_family == AF_INET6 ? SOL_IPV6 : SOL_IP;
    len = sizeof(ss);
    memset(&ss, 0, sizeof(ss));
    if (getsockopt(fd, level, ORIGINAL_DST, &ss, &len) == -1)
        return -errno;
    return egress_addr_from_sockaddr((struct sockaddr *)&ss, len, ret_addr, ret_port);
}

/* Whether the runner host delivers addr to itself; when unsure, say yes (fail closed). */
static bool host_local(struct egress_proxy *p, const struct egress_addr *a)
{
    unsigned type = RTN_UNSPEC;
    int r = nl_route_type(p->nlfd, a->family, a->b, &type);

    if (r == -ENETUNREACH || r == -EHOSTUNREACH || r == -ENETDOWN)
        return false; /* no route: the connect fails on its own */
    return r < 0 || type == RTN_LOCAL;
}

static void start_relay(struct egress_proxy *p, int in, const struct egress_addr *dst,
                        uint16_t port, enum egress_reason why, int64_t now)
{
    struct sockaddr_storage ss;
    socklen_t len = egress_addr_to_sockaddr(dst, port, &ss);
    struct conn *c = calloc(1, sizeof(*c));
    int out = -1, one = 1, r;

    if (!c) {
        r = -ENOMEM;
        goto fail;
    }
    out = socket(dst->family == AF_INET ? AF_INET : AF_INET6,
                 SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (out == -1) {
        r = -errno;
        goto fail;
    }
    if (p->cfg.mark && setsockopt(out, SOL_SOCKET, SO_MARK, &p->cfg.mark, sizeof(p->cfg.mark))) {
        r = -errno;
        goto fail;
    }
    (void)setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)setsockopt(in, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->connecting = true;
    if (connect(out, (struct sockaddr *)&ss, len) == -1 && errno != EINPROGRESS) {
        r = -errno;
        p->stats.connect_failed++;
        report(p, EGRESS_PROXY_CONNECT_FAILED, dst, port, why, r);
        close(out);
        close_reset(in);
        conn_free(c);
        return;
    }
    c->dst = *dst;
    c->port = port;
    c->why = why;
    c->deadline = now + p->cfg.connect_timeout_ms;
    for (int i = 0; i < 2; i++) {
        c->ends[i].kind = TAG_END;
        c->ends[i].c = c;
        c->ends[i].fd = i == 0 ? in : out;
    }
    /* the host side waits for the connect; the sandbox side waits for the host side */
    r = ep_set(p, EPOLL_CTL_ADD, out, EPOLLOUT, &c->ends[1]);
    if (r < 0)
        goto fail;
    c->ends[1].interest = EPOLLOUT;
    c->next = p->conns;
    if (p->conns)
        p->conns->prev = c;
    p->conns = c;
    p->nconns++;
    p->stats.allowed++;
    return;
fail:
    if (out >= 0)
        close(out);
    close_reset(in);
    if (c)
        conn_free(c);
    p->stats.overload++;
    report(p, EGRESS_PROXY_OVERLOAD, dst, port, why, r);
}

static void accept_burst(struct egress_proxy *p, struct listener *l, int64_t now)
{
    for (int k = 0; k < ACCEPT_BURST; k++) {
        struct egress_addr dst;
        enum egress_reason why;
        uint16_t port;
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), r;

        if (fd == -1) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* the connection stays queued; stop polling the listener for a while */
                p->stats.overload++;
                report(p, EGRESS_PROXY_OVERLOAD, NULL, 0, EGRESS_DENY_UNSPECIFIED, -errno);
                for (size_t i = 0; i < p->nlisteners; i++) {
                    if (!p->listeners[i].paused &&
                        ep_set(p, EPOLL_CTL_MOD, p->listeners[i].fd, 0, &p->listeners[i]) == 0)
                        p->listeners[i].paused = true;
                }
                p->paused_until = now + PAUSE_MS;
            }
            return;
        }
        p->stats.accepted++;
        r = original_dst(fd, &dst, &port);
        if (r < 0) {
            close_reset(fd);
            p->stats.denied++;
            report(p, EGRESS_PROXY_DENIED, NULL, 0, EGRESS_DENY_UNSPECIFIED, r);
            continue;
        }
        if (!egress_policy_check(p->policy, &dst, port, host_local(p, &dst), &why)) {
            close_reset(fd);
            p->stats.denied++;
            report(p, EGRESS_PROXY_DENIED, &dst, port, why, 0);
            continue;
        }
        if (p->nconns >= p->cfg.max_conns) {
            close_reset(fd);
            p->stats.overload++;
            report(p, EGRESS_PROXY_OVERLOAD, &dst, port, why, -ENOBUFS);
            continue;
        }
        start_relay(p, fd, &dst, port, why, now);
    }
}

static void resume_listeners(struct egress_proxy *p, int64_t now)
{
    if (p->paused_until > now)
        return;
    for (size_t i = 0; i < p->nlisteners; i++) {
        struct listener *l = &p->listeners[i];

        if (l->paused && ep_set(p, EPOLL_CTL_MOD, l->fd, EPOLLIN, l) == 0)
            l->paused = false;
    }
}

void egress_proxy_handle(struct egress_proxy *p, int64_t now)
{
    struct epoll_event evs[BATCH];
    int n;

    resume_listeners(p, now);
    do {
        n = epoll_wait(p->epfd, evs, BATCH, 0);
    } while (n == -1 && errno == EINTR);
    for (int i = 0; i < n; i++) {
        uint8_t kind = *(uint8_t *)evs[i].data.ptr;

        if (kind == TAG_LISTENER)
            accept_burst(p, evs[i].data.ptr, now);
        else
            handle_end(p, evs[i].data.ptr, evs[i].events);
    }
    for (struct conn *c = p->conns, *next; c; c = next) {
        next = c->next;
        if (c->connecting && c->deadline <= now) {
            p->stats.connect_failed++;
            report(p, EGRESS_PROXY_CONNECT_FAILED, &c->dst, c->port, c->why, -ETIMEDOUT);
            conn_close(p, c, true);
        }
    }
    free_dead(p);
}

int egress_proxy_timeout_ms(const struct egress_proxy *p, int64_t now)
{
    int64_t next = -1;
    bool paused = false;

    for (size_t i = 0; i < p->nlisteners; i++)
        paused |= p->listeners[i].paused;
    if (paused)
        next = p->paused_until;
    for (const struct conn *c = p->conns; c; c = c->next)
        if (c->connecting && (next < 0 || c->deadline < next))
            next = c->deadline;
    if (next < 0)
        return -1;
    if (next <= now)
        return 0;
    return next - now > 60000 ? 60000 : (int)(next - now);
}
