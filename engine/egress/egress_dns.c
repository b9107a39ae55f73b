/*
 * egress_dns — the sandbox's name server (see egress_dns.h).
 *
 * The loop thread owns everything but the lookup jobs in flight. A job is handed to the
 * resolver threads through a small shared core (mutex, condition variable, to-do and done
 * lists, an eventfd the loop polls); the core is reference counted so that a thread stuck in
 * getaddrinfo when the keeper tears down frees it last, and nothing waits for that thread.
 */
#include "egress/egress_dns.h"

#include <errno.h>
#include <linux/rtnetlink.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/util.h"
#include "egress/dnsmsg.h"
#include "egress/nl.h"

#define SOCKETS_MAX 4
#define RECV_BURST 64
#define TAG_SOCKET(i) ((uint64_t)(i))
#define TAG_EVENT ((uint64_t)0xffff)

struct job {
    char name[EGRESS_HOST_MAX + 1];
    int family;
    size_t slot; /* its pending entry */
    /* written by the resolver thread */
    enum dns_rcode rcode;
    size_t naddrs;
    struct egress_addr addrs[DNSMSG_ANSWERS_MAX];
    struct job *next;
};

struct core {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *todo, *todo_tail, *done;
    int efd;
    int refs;
    bool stop;
};

struct waiter {
    int sock;
    struct sockaddr_storage from;
    socklen_t fromlen;
    struct dnsmsg_query q;
};

struct pending {
    bool used;
    char name[EGRESS_HOST_MAX + 1];
    int family;
    bool named; /* a named endpoint's host: learn its addresses */
    size_t nwaiters;
    struct waiter waiters[EGRESS_DNS_WAITERS_MAX];
};

struct cache_entry {
    bool used;
    char name[EGRESS_HOST_MAX + 1];
    int family;
    enum dns_rcode rcode;
    size_t naddrs;
    struct egress_addr addrs[DNSMSG_ANSWERS_MAX];
    int64_t expires;
};

struct egress_dns {
    struct egress_policy *policy;
    egress_dns_report_fn report;
    void *ctx;
    int epfd;
    int nlfd;
    int socks[SOCKETS_MAX];
    size_t nsocks;
    struct core *core;
    int nthreads;
    /* allocated with the first query (a sandbox that never asks costs nothing) */
    struct pending *pending;   /* EGRESS_DNS_PENDING_MAX */
    struct cache_entry *cache; /* EGRESS_DNS_CACHE_MAX */
    struct egress_dns_stats stats;
};

/* ---- the resolver threads ----------------------------------------------------------------- */

static void core_unref_locked(struct core *c, bool *ret_last)
{
    *ret_last = --c->refs == 0;
}

static void core_destroy(struct core *c)
{
    while (c->todo) {
        struct job *j = c->todo;
        c->todo = j->next;
        free(j);
    }
    while (c->done) {
        struct job *j = c->done;
        c->done = j->next;
        free(j);
    }
    close(c->efd);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static void resolve(struct job *j)
{
    struct addrinfo hints = {.ai_family = j->family, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int r;

    /* as the host would resolve it: its hosts file first (a trailing dot would skip that);
     * whatever a search domain adds is judged by the policy like any other answer */
    r = getaddrinfo(j->name, NULL, &hints, &res);
    j->naddrs = 0;
    if (r == EAI_NONAME) {
        j->rcode = DNS_RCODE_NXDOMAIN;
        return;
    }
    if (r == EAI_NODATA || r == EAI_ADDRFAMILY) {
        j->rcode = DNS_RCODE_NOERROR; /* the name exists, without addresses of this family */
        return;
    }
    if (r != 0) {
        j->rcode = DNS_RCODE_SERVFAIL;
        return;
    }
    j->rcode = DNS_RCODE_NOERROR;
    for (struct addrinfo *ai = res; ai && j->naddrs < DNSMSG_ANSWERS_MAX; ai = ai->ai_next) {
        struct egress_addr a;
        bool dup = false;

        if (egress_addr_from_sockaddr(ai->ai_addr, ai->ai_addrlen, &a, NULL) < 0 ||
            a.family != j->family)
            continue;
        for (size_t i = 0; i < j->naddrs && !dup; i++)
            dup = egress_addr_equal(&j->addrs[i], &a);
        if (!dup)
            j->addrs[j->naddrs++] = a;
    }
    freeaddrinfo(res);
}

static void *resolver_main(void *arg)
{
    struct core *c = arg;
    bool last;

    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        struct job *j = c->todo;
        uint64_t one = 1;

        if (!j) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        c->todo = j->next;
        if (!c->todo)
            c->todo_tail = NULL;
        pthread_mutex_unlock(&c->mu);
        resolve(j);
        pthread_mutex_lock(&c->mu);
        if (c->stop) {
            free(j);
            break;
        }
        j->next = c->done;
        c->done = j;
        (void)!write(c->efd, &one, sizeof(one));
    }
    core_unref_locked(c, &last);
    pthread_mutex_unlock(&c->mu);
    if (last)
        core_destroy(c);
    return NULL;
}

/* Start the resolver threads on first use (not at creation: see the header on fork). */
static int start_threads(struct egress_dns *d)
{
    while (d->nthreads < EGRESS_DNS_THREADS) {
        pthread_attr_t attr;
        pthread_t t;
        int r;

        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        pthread_mutex_lock(&d->core->mu);
        d->core->refs++;
        pthread_mutex_unlock(&d->core->mu);
        r = pthread_create(&t, &attr, resolver_main, d->core);
        pthread_attr_destroy(&attr);
        if (r != 0) {
            pthread_mutex_lock(&d->core->mu);
            d->core->refs--;
            pthread_mutex_unlock(&d->core->mu);
            return d->nthreads > 0 ? 0 : -r;
        }
        d->nthreads++;
    }
    return 0;
}

/* ---- setup -------------------------------------------------------------------------------- */

int egress_dns_new(struct egress_policy *policy, const int *sockets, size_t nsockets,
                   egress_dns_report_fn report, void *ctx, struct egress_dns **ret_dns)
{
    struct egress_dns *d;
    struct epoll_event ev = {.events = EPOLLIN};
    int r;

    if (!policy)
        return -EINVAL;
    d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    d->policy = policy;
    d->report = report;
    d->ctx = ctx;
    d->epfd = d->nlfd = -1;
    d->core = calloc(1, sizeof(*d->core));
    if (!d->core) {
        r = -ENOMEM;
        goto fail;
    }
    d->core->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (d->core->efd == -1) {
        r = -errno;
        free(d->core);
        d->core = NULL;
        goto fail;
    }
    pthread_mutex_init(&d->core->mu, NULL);
    pthread_cond_init(&d->core->cv, NULL);
    d->core->refs = 1;
    d->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (d->epfd == -1) {
        r = -errno;
        goto fail;
    }
    d->nlfd = nl_open(NETLINK_ROUTE);
    if (d->nlfd < 0) {
        r = d->nlfd;
        goto fail;
    }
    ev.data.u64 = TAG_EVENT;
    if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->core->efd, &ev) == -1) {
        r = -errno;
        goto fail;
    }
    for (size_t i = 0; i < nsockets; i++) {
        if (sockets[i] < 0)
            continue;
        if (d->nsocks >= SOCKETS_MAX) {
            r = -E2BIG;
            goto fail;
        }
        ev.data.u64 = TAG_SOCKET(d->nsocks);
        if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, sockets[i], &ev) == -1) {
            r = -errno;
            goto fail;
        }
        d->socks[d->nsocks++] = sockets[i];
    }
    *ret_dns = d;
    return 0;
fail:
    egress_dns_free(d);
    return r;
}

void egress_dns_free(struct egress_dns *d)
{
    if (!d)
        return;
    if (d->core) {
        bool last;

        pthread_mutex_lock(&d->core->mu);
        d->core->stop = true;
        pthread_cond_broadcast(&d->core->cv);
        core_unref_locked(d->core, &last);
        pthread_mutex_unlock(&d->core->mu);
        if (last)
            core_destroy(d->core);
    }
    if (d->epfd >= 0)
        close(d->epfd);
    if (d->nlfd >= 0)
        close(d->nlfd);
    free(d->pending);
    free(d->cache);
    free(d);
}

int egress_dns_fd(const struct egress_dns *d)
{
    return d->epfd;
}

void egress_dns_stats(const struct egress_dns *d, struct egress_dns_stats *ret_stats)
{
    *ret_stats = d->stats;
}

/* ---- answering ---------------------------------------------------------------------------- */

static void send_answer(struct egress_dns *d, int sock, const struct sockaddr_storage *to,
                        socklen_t tolen, const struct dnsmsg_query *q, enum dns_rcode rcode,
                        const struct egress_addr *addrs, size_t naddrs)
{
    uint8_t out[DNSMSG_UDP_MAX];
    size_t len = dnsmsg_build_answer(q, rcode, addrs, naddrs, EGRESS_DNS_TTL, out);
    size_t matching = 0;

    for (size_t i = 0; i < naddrs; i++)
        matching += addrs[i].family == (q->qtype == DNS_TYPE_A ? AF_INET : AF_INET6);
    if (rcode == DNS_RCODE_REFUSED)
        d->stats.refused++;
    else if (rcode != DNS_RCODE_NOERROR)
        d->stats.failed++;
    else if (matching > 0)
        d->stats.answered++;
    else
        d->stats.empty++;
    (void)sendto(sock, out, len, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)to, tolen);
}

static void refuse(struct egress_dns *d, const struct waiter *w, enum dns_rcode rcode)
{
    struct egress_dns_report r = {.name = w->q.name, .qtype = w->q.qtype, .rcode = (int)rcode};

    if (d->report && w->q.has_question)
        d->report(d->ctx, &r);
    send_answer(d, w->sock, &w->from, w->fromlen, &w->q, rcode, NULL, 0);
}

/* The runner host delivers a to itself (fail closed when unsure), as egress_proxy asks it. */
static bool host_local(struct egress_dns *d, const struct egress_addr *a)
{
    unsigned type = RTN_UNSPEC;
    int r = nl_route_type(d->nlfd, a->family, a->b, &type);

    if (r == -ENETUNREACH || r == -EHOSTUNREACH || r == -ENETDOWN)
        return false;
    return r < 0 || type == RTN_LOCAL;
}

/* Answer with the addresses the policy might allow (all of them for a named host). */
static void answer_filtered(struct egress_dns *d, const struct waiter *w, enum dns_rcode rcode,
                            const struct egress_addr *addrs, size_t naddrs, bool named)
{
    struct egress_addr keep[DNSMSG_ANSWERS_MAX];
    size_t n = 0;

    for (size_t i = 0; i < naddrs && n < DNSMSG_ANSWERS_MAX; i++)
        if (named || egress_policy_addr_possible(d->policy, &addrs[i], host_local(d, &addrs[i])))
            keep[n++] = addrs[i];
    send_answer(d, w->sock, &w->from, w->fromlen, &w->q, rcode, keep, n);
}

/* The known addresses of a named host (every endpoint with that name), of one family. */
static size_t named_addrs(const struct egress_policy *p, const char *name, int family,
                          struct egress_addr *out, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < p->nnamed && n < max; i++) {
        const struct egress_named *nm = &p->named[i];
        bool dup = false;

        if (nm->addr.family != family || p->endpoints[nm->endpoint].literal ||
            strcmp(p->endpoints[nm->endpoint].host, name) != 0)
            continue;
        for (size_t j = 0; j < n && !dup; j++)
            dup = egress_addr_equal(&out[j], &nm->addr);
        if (!dup)
            out[n++] = nm->addr;
    }
    return n;
}

static void learn_named(struct egress_policy *p, const char *name, const struct egress_addr *a,
                        size_t n)
{
    for (size_t e = 0; e < p->nendpoints; e++) {
        if (p->endpoints[e].literal || strcmp(p->endpoints[e].host, name) != 0)
            continue;
        for (size_t i = 0; i < n; i++)
            (void)egress_policy_add_named_addr(p, e, &a[i]); /* a full table keeps the old */
    }
}

static struct cache_entry *cache_find(struct egress_dns *d, const char *name, int family,
                                      int64_t now)
{
    for (size_t i = 0; i < EGRESS_DNS_CACHE_MAX; i++) {
        struct cache_entry *c = &d->cache[i];

        if (c->used && c->family == family && c->expires > now && strcmp(c->name, name) == 0)
            return c;
    }
    return NULL;
}

static void cache_store(struct egress_dns *d, const struct job *j, int64_t now)
{
    struct cache_entry *victim = &d->cache[0];

    if (j->rcode == DNS_RCODE_SERVFAIL)
        return;
    for (size_t i = 0; i < EGRESS_DNS_CACHE_MAX; i++) {
        struct cache_entry *c = &d->cache[i];

        if (!c->used || c->expires <= now ||
            (c->family == j->family && strcmp(c->name, j->name) == 0)) {
            victim = c;
            break;
        }
        if (c->expires < victim->expires)
            victim = c;
    }
    victim->used = true;
    memcpy(victim->name, j->name, sizeof(victim->name));
    victim->family = j->family;
    victim->rcode = j->rcode;
    victim->naddrs = j->naddrs;
    memcpy(victim->addrs, j->addrs, sizeof(victim->addrs));
    victim->expires = now + 1000 * (j->naddrs ? EGRESS_DNS_TTL : EGRESS_DNS_NEGATIVE_TTL);
}

/* Queue a lookup for w (joining one in flight for the same name). */
static void lookup(struct egress_dns *d, const struct waiter *w, int family, bool named)
{
    struct pending *free_slot = NULL;
    struct job *j;
    size_t slot;

    for (size_t i = 0; i < EGRESS_DNS_PENDING_MAX; i++) {
        struct pending *p = &d->pending[i];

        if (!p->used) {
            if (!free_slot)
                free_slot = p;
            continue;
        }
        if (p->family == family && strcmp(p->name, w->q.name) == 0) {
            if (p->nwaiters >= EGRESS_DNS_WAITERS_MAX) {
                refuse(d, w, DNS_RCODE_SERVFAIL);
                return;
            }
            p->waiters[p->nwaiters++] = *w;
            return;
        }
    }
    if (!free_slot || start_threads(d) < 0) {
        refuse(d, w, DNS_RCODE_SERVFAIL);
        return;
    }
    j = calloc(1, sizeof(*j));
    if (!j) {
        refuse(d, w, DNS_RCODE_SERVFAIL);
        return;
    }
    slot = (size_t)(free_slot - d->pending);
    free_slot->used = true;
    memcpy(free_slot->name, w->q.name, sizeof(free_slot->name));
    free_slot->family = family;
    free_slot->named = named;
    free_slot->nwaiters = 1;
    free_slot->waiters[0] = *w;
    memcpy(j->name, w->q.name, sizeof(j->name));
    j->family = family;
    j->slot = slot;
    d->stats.lookups++;
    pthread_mutex_lock(&d->core->mu);
    if (d->core->todo_tail)
        d->core->todo_tail->next = j;
    else
        d->core->todo = j;
    d->core->todo_tail = j;
    pthread_cond_signal(&d->core->cv);
    pthread_mutex_unlock(&d->core->mu);
}

static void query(struct egress_dns *d, const struct waiter *w, int64_t now)
{
    const struct dnsmsg_query *q = &w->q;
    char name[EGRESS_HOST_MAX + 1];
    struct cache_entry *c;
    bool named;
    int family;

    if (q->qclass != DNS_CLASS_IN) {
        send_answer(d, w->sock, &w->from, w->fromlen, q, DNS_RCODE_NOTIMP, NULL, 0);
        return;
    }
    if (!q->name_ok || egress_host_normalize(q->name, name) < 0) {
        refuse(d, w, DNS_RCODE_REFUSED);
        return;
    }
    named = egress_policy_find_endpoint(d->policy, name) >= 0;
    if (!named && d->policy->mode != EGRESS_MODE_ON) {
        refuse(d, w, DNS_RCODE_REFUSED);
        return;
    }
    if (q->qtype != DNS_TYPE_A && q->qtype != DNS_TYPE_AAAA) {
        send_answer(d, w->sock, &w->from, w->fromlen, q, DNS_RCODE_NOERROR, NULL, 0);
        return;
    }
    family = q->qtype == DNS_TYPE_A ? AF_INET : AF_INET6;
    if (named) {
        struct egress_addr known[DNSMSG_ANSWERS_MAX];
        size_t n = named_addrs(d->policy, name, family, known, DNSMSG_ANSWERS_MAX);

        if (n > 0) {
            send_answer(d, w->sock, &w->from, w->fromlen, q, DNS_RCODE_NOERROR, known, n);
            return;
        }
    }
    c = cache_find(d, name, family, now);
    if (c) {
        d->stats.cache_hits++;
        if (named)
            learn_named(d->policy, name, c->addrs, c->naddrs);
        answer_filtered(d, w, c->rcode, c->addrs, c->naddrs, named);
        return;
    }
    lookup(d, w, family, named);
}

static void finish_jobs(struct egress_dns *d, int64_t now)
{
    struct job *done;
    uint64_t count;

    (void)!read(d->core->efd, &count, sizeof(count));
    pthread_mutex_lock(&d->core->mu);
    done = d->core->done;
    d->core->done = NULL;
    pthread_mutex_unlock(&d->core->mu);
    while (done) {
        struct job *j = done;
        struct pending *p = &d->pending[j->slot];

        done = j->next;
        cache_store(d, j, now);
        if (p->named)
            learn_named(d->policy, j->name, j->addrs, j->naddrs);
        for (size_t i = 0; i < p->nwaiters; i++) {
            if (j->rcode == DNS_RCODE_SERVFAIL)
                refuse(d, &p->waiters[i], DNS_RCODE_SERVFAIL);
            else
                answer_filtered(d, &p->waiters[i], j->rcode, j->addrs, j->naddrs, p->named);
        }
        memset(p, 0, sizeof(*p));
        free(j);
    }
}

static void read_queries(struct egress_dns *d, size_t si, int64_t now)
{
    for (int k = 0; k < RECV_BURST; k++) {
        uint8_t pkt[1500];
        struct waiter w = {.sock = d->socks[si]};
        enum dns_rcode rcode;
        ssize_t n;
        int r;

        w.fromlen = sizeof(w.from);
        n = recvfrom(w.sock, pkt, sizeof(pkt), MSG_DONTWAIT, (struct sockaddr *)&w.from,
                     &w.fromlen);
        if (n == -1 && errno == EINTR)
            continue;
        if (n < 0)
            return;
        r = dnsmsg_parse_query(pkt, (size_t)n, &w.q, &rcode);
        if (r == -EINVAL)
            continue;
        d->stats.queries++;
        if (r < 0) {
            send_answer(d, w.sock, &w.from, w.fromlen, &w.q, rcode, NULL, 0);
            continue;
        }
        if (!d->pending)
            d->pending = calloc(EGRESS_DNS_PENDING_MAX, sizeof(*d->pending));
        if (!d->cache)
            d->cache = calloc(EGRESS_DNS_CACHE_MAX, sizeof(*d->cache));
        if (!d->pending || !d->cache) {
            refuse(d, &w, DNS_RCODE_SERVFAIL);
            continue;
        }
        query(d, &w, now);
    }
}

void egress_dns_handle(struct egress_dns *d, int64_t now)
{
    struct epoll_event evs[SOCKETS_MAX + 1];
    int n;

    do {
        n = epoll_wait(d->epfd, evs, SOCKETS_MAX + 1, 0);
    } while (n == -1 && errno == EINTR);
    for (int i = 0; i < n; i++) {
        if (evs[i].data.u64 == TAG_EVENT)
            finish_jobs(d, now);
        else if (evs[i].data.u64 < d->nsocks)
            read_queries(d, (size_t)evs[i].data.u64, now);
    }
}

/* ---- before the sandbox starts ------------------------------------------------------------ */

int egress_dns_resolve_endpoints(struct egress_policy *policy)
{
    int failed = 0;

    for (size_t e = 0; e < policy->nendpoints; e++) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        struct addrinfo *res = NULL;
        bool seen = false;

        if (policy->endpoints[e].literal)
            continue;
        /* a name already resolved for another port */
        for (size_t j = 0; j < e && !seen; j++)
            seen = !policy->endpoints[j].literal &&
                   strcmp(policy->endpoints[j].host, policy->endpoints[e].host) == 0;
        if (seen)
            continue;
        if (getaddrinfo(policy->endpoints[e].host, NULL, &hints, &res) != 0) {
            failed++;
            continue;
        }
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            struct egress_addr a;

            if (egress_addr_from_sockaddr(ai->ai_addr, ai->ai_addrlen, &a, NULL) == 0)
                learn_named(policy, policy->endpoints[e].host, &a, 1);
        }
        freeaddrinfo(res);
    }
    return failed;
}

int egress_dns_render_resolv_conf(struct buf *out)
{
    return buf_append_str(out, "# agent-runner: names resolve through the runner's policy\n"
                               "nameserver 127.0.0.1\n"
                               "options timeout:2 attempts:2\n");
}
