/*
 * model_gateway — the sandbox's model endpoint: the poll loop's side (accepting, a thread per
 * connection, the reports delivered) and the state the connections share (model_gateway.h,
 * gateway_conn.h): the route, the connection list, the body budget and the report queue, under
 * g->lock, which is never held across I/O.
 */
#include "gateway/model_gateway.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "gateway/gateway_conn.h"
#include "gateway/gateway_route.h"

#define SEND_TIMEOUT_S 300 /* a harness that stops reading its answer */
#define STACK_BYTES (512u * 1024)
#define STOP_WAIT_MS 5000

struct route_ref {
    struct gateway_route *r;
    unsigned refs; /* connections using it, plus one while it is the current route */
};

struct model_gateway {
    int listen_fd;
    int event_fd;
    model_gateway_report_fn report;
    void *ctx;
    pthread_mutex_t lock;
    pthread_cond_t quiet; /* signalled when a connection ends */
    struct route_ref *route;
    struct gateway_conn *conns;
    unsigned nconns; /* changed under lock, read lock-free by the poll loop: atomics */
    unsigned active;
    uint64_t budget; /* request body bytes still available */
    struct model_gateway_report *queue;
    size_t qhead, qlen;
    uint64_t dropped;
    bool stopping;
};

/* ---- shared state ------------------------------------------------------------------------- */

const struct gateway_route *model_gateway_route_take(struct model_gateway *g, void **ret_ref)
{
    struct route_ref *ref;

    pthread_mutex_lock(&g->lock);
    ref = g->route;
    if (ref)
        ref->refs++;
    pthread_mutex_unlock(&g->lock);
    *ret_ref = ref;
    return ref ? ref->r : NULL;
}

static void route_drop_locked(struct route_ref *ref)
{
    if (ref && --ref->refs == 0) {
        gateway_route_free(ref->r);
        free(ref);
    }
}

void model_gateway_route_drop(struct model_gateway *g, void *ref)
{
    pthread_mutex_lock(&g->lock);
    route_drop_locked(ref);
    pthread_mutex_unlock(&g->lock);
}

bool model_gateway_budget_take(struct model_gateway *g, uint64_t n)
{
    bool ok;

    pthread_mutex_lock(&g->lock);
    ok = g->budget >= n;
    if (ok)
        g->budget -= n;
    pthread_mutex_unlock(&g->lock);
    return ok;
}

void model_gateway_budget_give(struct model_gateway *g, uint64_t n)
{
    pthread_mutex_lock(&g->lock);
    g->budget += n;
    pthread_mutex_unlock(&g->lock);
}

bool model_gateway_stopping(struct model_gateway *g)
{
    return __atomic_load_n(&g->stopping, __ATOMIC_RELAXED);
}

void model_gateway_queue(struct model_gateway *g, const struct model_gateway_report *r)
{
    uint64_t one = 1;

    pthread_mutex_lock(&g->lock);
    if (g->qlen < MODEL_GATEWAY_QUEUE_MAX) {
        g->queue[(g->qhead + g->qlen) % MODEL_GATEWAY_QUEUE_MAX] = *r;
        g->qlen++;
    } else {
        g->dropped++;
    }
    pthread_mutex_unlock(&g->lock);
    (void)!write(g->event_fd, &one, sizeof(one));
}

void model_gateway_calls(struct model_gateway *g, int delta)
{
    if (delta > 0)
        __atomic_add_fetch(&g->active, 1, __ATOMIC_RELAXED);
    else
        __atomic_sub_fetch(&g->active, 1, __ATOMIC_RELAXED);
}

/* Take c off the gateway's list of connections (g->lock held). */
static void conn_unlink_locked(struct model_gateway *g, struct gateway_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        g->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    __atomic_sub_fetch(&g->nconns, 1, __ATOMIC_RELAXED);
}

static void *conn_main(void *arg)
{
    struct gateway_conn *c = arg;
    struct model_gateway *g = c->g;

    while (gateway_conn_serve(c))
        ;
    pthread_mutex_lock(&g->lock);
    conn_unlink_locked(g, c);
    close(c->fd);
    pthread_cond_broadcast(&g->quiet);
    pthread_mutex_unlock(&g->lock);
    buf_release(&c->in);
    buf_release(&c->head);
    free(c);
    return NULL;
}

/* ---- the poll loop's side ----------------------------------------------------------------- */

int model_gateway_new(int listen_fd, model_gateway_report_fn report, void *ctx,
                      struct model_gateway **ret)
{
    struct model_gateway *g = calloc(1, sizeof(*g));

    if (!g)
        return -ENOMEM;
    g->queue = calloc(MODEL_GATEWAY_QUEUE_MAX, sizeof(*g->queue));
    g->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!g->queue || g->event_fd < 0) {
        int r = g->event_fd < 0 ? -errno : -ENOMEM;
        if (g->event_fd >= 0)
            close(g->event_fd);
        free(g->queue);
        free(g);
        return r;
    }
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->quiet, NULL);
    g->listen_fd = listen_fd;
    g->report = report;
    g->ctx = ctx;
    g->budget = MODEL_GATEWAY_BODY_BUDGET;
    *ret = g;
    return 0;
}

void model_gateway_free(struct model_gateway *g)
{
    struct timespec until;
    bool quiet = true;

    if (!g)
        return;
    util_deadline_ts(util_wall_ms() + STOP_WAIT_MS, &until); /* the condition's clock */
    pthread_mutex_lock(&g->lock);
    __atomic_store_n(&g->stopping, true, __ATOMIC_RELAXED);
    for (struct gateway_conn *c = g->conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    while (g->nconns > 0)
        if (pthread_cond_timedwait(&g->quiet, &g->lock, &until) == ETIMEDOUT) {
            quiet = false;
            break;
        }
    pthread_mutex_unlock(&g->lock);
    if (!quiet)
        return; /* a thread still runs: its memory must stay (the keeper is ending anyway) */
    route_drop_locked(g->route);
    close(g->event_fd);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->quiet);
    free(g->queue);
    free(g);
}

int model_gateway_set_route(struct model_gateway *g, json_object *route, char *err, size_t errlen)
{
    struct route_ref *ref = NULL, *old;
    struct gateway_route *r = NULL;
    int rc;

    if (route) {
        rc = gateway_route_decode(route, &r, err, errlen);
        if (rc < 0)
            return rc;
        ref = calloc(1, sizeof(*ref));
        if (!ref) {
            gateway_route_free(r);
            return -ENOMEM;
        }
        ref->r = r;
        ref->refs = 1;
    }
    pthread_mutex_lock(&g->lock);
    old = g->route;
    g->route = ref;
    route_drop_locked(old);
    pthread_mutex_unlock(&g->lock);
    return 0;
}

size_t model_gateway_fds(const struct model_gateway *g, int *fds, size_t max)
{
    size_t n = 0;
    unsigned conns = __atomic_load_n(&g->nconns, __ATOMIC_RELAXED);

    if (n < max)
        fds[n++] = g->event_fd;
    if (n < max && g->listen_fd >= 0 && conns < MODEL_GATEWAY_CONNS_MAX)
        fds[n++] = g->listen_fd;
    return n;
}

void model_gateway_flush(struct model_gateway *g)
{
    uint64_t v;

    (void)!read(g->event_fd, &v, sizeof(v));
    for (;;) {
        struct model_gateway_report r;

        pthread_mutex_lock(&g->lock);
        if (g->qlen == 0) {
            pthread_mutex_unlock(&g->lock);
            return;
        }
        r = g->queue[g->qhead];
        g->qhead = (g->qhead + 1) % MODEL_GATEWAY_QUEUE_MAX;
        g->qlen--;
        pthread_mutex_unlock(&g->lock);
        if (g->report)
            g->report(g->ctx, &r);
    }
}

static void accept_one(struct model_gateway *g)
{
    pthread_attr_t attr;
    pthread_t t;
    struct gateway_conn *c;
    struct timeval tv = {.tv_sec = SEND_TIMEOUT_S};
    int one = 1;
    int fd = accept4(g->listen_fd, NULL, NULL, SOCK_CLOEXEC);

    if (fd < 0)
        return;
    c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return;
    }
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    c->g = g;
    c->fd = fd;
    buf_init(&c->in, GATEWAY_HTTP_HEAD_MAX + 256 * 1024 + 16384);
    buf_init(&c->head, GATEWAY_HTTP_HEAD_MAX);
    pthread_mutex_lock(&g->lock);
    c->next = g->conns;
    if (g->conns)
        g->conns->prev = c;
    g->conns = c;
    __atomic_add_fetch(&g->nconns, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&g->lock);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, STACK_BYTES);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, conn_main, c) != 0) {
        pthread_mutex_lock(&g->lock);
        conn_unlink_locked(g, c);
        pthread_mutex_unlock(&g->lock);
        close(fd);
        free(c);
    }
    pthread_attr_destroy(&attr);
}

void model_gateway_handle(struct model_gateway *g)
{
    model_gateway_flush(g);
    for (int i = 0; i < 8 && g->listen_fd >= 0; i++) {
        struct pollfd p = {.fd = g->listen_fd, .events = POLLIN};

        if (__atomic_load_n(&g->nconns, __ATOMIC_RELAXED) >= MODEL_GATEWAY_CONNS_MAX ||
            poll(&p, 1, 0) != 1)
            break;
        accept_one(g);
    }
}

unsigned model_gateway_active(const struct model_gateway *g)
{
    return __atomic_load_n(&g->active, __ATOMIC_RELAXED);
}
