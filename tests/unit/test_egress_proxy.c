/*
 * egress_proxy (with sandbox_net): real namespaces, real nf_tables rules, real connections.
 * A child enters the sandbox namespace as an unprivileged uid and connects; the test process
 * drives the proxy like the keeper's loop would and checks what got through and what was
 * reported. Needs root; skipped (with a note) otherwise.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "egress/egress_proxy.h"
#include "netns_helpers.h"
#include "suites.h"

#define REPORTS_MAX 32

struct reports {
    size_t n;
    struct egress_proxy_report r[REPORTS_MAX];
};

static void collect(void *ctx, const struct egress_proxy_report *r)
{
    struct reports *rs = ctx;

    if (rs->n < REPORTS_MAX)
        rs->r[rs->n++] = *r;
}

struct target {
    const char *addr;
    uint16_t port;
};

static int probe_target(void *arg)
{
    const struct target *t = arg;

    return probe_tcp(t->addr, t->port);
}

/* Run one probe in the sandbox while driving the proxy; returns the probe's result byte. */
static int drive(struct egress_proxy *p, const struct sandbox_net *net, probe_fn fn, void *arg)
{
    unsigned char b = 0;
    int fd = -1, status;
    pid_t pid = probe_spawn(net, true, fn, arg, &fd);

    if (pid < 0)
        return -1;
    for (;;) {
        struct pollfd pf[2] = {{.fd = egress_proxy_fd(p), .events = POLLIN},
                               {.fd = fd, .events = POLLIN}};
        int t = egress_proxy_timeout_ms(p, util_now_ms());

        if (poll(pf, 2, t < 0 || t > 100 ? 100 : t) < 0 && errno != EINTR)
            break;
        egress_proxy_handle(p, util_now_ms());
        if (pf[1].revents) {
            if (read(fd, &b, 1) != 1)
                b = 0;
            break;
        }
    }
    close(fd);
    waitpid(pid, &status, 0);
    return b;
}

static bool setup(struct sandbox_net *net, struct egress_policy *pol,
                  const struct echo_server *named)
{
    uint16_t ports[8];
    size_t n = 0;
    struct sandbox_net_config cfg = {0};
    char err[256] = "";

    CU_ASSERT_EQUAL_FATAL(egress_policy_add_endpoint(pol, "127.0.0.1", named->port, NULL, 0), 0);
    CU_ASSERT_EQUAL_FATAL(egress_policy_loopback_ports(pol, ports, 8, &n), 0);
    cfg.loopback_ports = ports;
    cfg.nloopback_ports = n;
    if (sandbox_net_create(&cfg, net, err, sizeof(err)) < 0) {
        fprintf(stderr, "sandbox_net_create: %s\n", err);
        return false;
    }
    return true;
}

static void test_egress_proxy_mode_on(void)
{
    struct echo_server model, other, alias;
    struct egress_policy pol;
    struct sandbox_net net;
    struct egress_proxy *p = NULL;
    struct reports rs = {0};
    struct egress_proxy_stats st;
    int fds[2];

    if (!netns_test_possible("egress_proxy mode_on"))
        return;
    CU_ASSERT_EQUAL_FATAL(echo_server_start(&model, "127.0.0.1"), 0);
    CU_ASSERT_EQUAL_FATAL(echo_server_start(&other, "127.0.0.1"), 0);
    CU_ASSERT_EQUAL_FATAL(echo_server_start(&alias, "127.0.0.2"), 0);
    egress_policy_init(&pol, EGRESS_MODE_ON, false);
    CU_ASSERT_FATAL(setup(&net, &pol, &model));
    fds[0] = net.proxy4_fd;
    fds[1] = net.proxy6_fd;
    CU_ASSERT_EQUAL_FATAL(egress_proxy_new(&pol, fds, 2, NULL, collect, &rs, &p), 0);

    {
        struct target named = {"127.0.0.1", model.port};
        struct target loop2 = {"127.0.0.1", other.port};
        struct target lo_alias = {"127.0.0.2", alias.port};
        struct target meta = {"169.254.169.254", 80};
        struct target priv = {"10.255.255.1", 80};
        struct target self = {"127.0.0.1", SANDBOX_NET_PROXY_PORT};

        /* the named endpoint on host loopback: through the proxy to the host's server */
        CU_ASSERT_EQUAL(drive(p, &net, probe_target, &named), PROBE_ECHOED);
        CU_ASSERT_EQUAL(model.accepted, 1);
        /* another host loopback port: the sandbox's own loopback, nothing listens there */
        CU_ASSERT_EQUAL(drive(p, &net, probe_target, &loop2), PROBE_REFUSED);
        CU_ASSERT_EQUAL(other.accepted, 0);
        CU_ASSERT_EQUAL(rs.n, 0);
        /* a loopback alias, the metadata service, a private address: reset and reported */
        CU_ASSERT_EQUAL(drive(p, &net, probe_target, &lo_alias), PROBE_RESET);
        CU_ASSERT_EQUAL(alias.accepted, 0);
        CU_ASSERT_EQUAL(drive(p, &net, probe_target, &meta), PROBE_RESET);
        CU_ASSERT_EQUAL(drive(p, &net, probe_target, &priv), PROBE_RESET);
        /* the proxy's own port, directly */
        CU_ASSERT_EQUAL(drive(p, &net, probe_target, &self), PROBE_RESET);
    }
    CU_ASSERT_EQUAL_FATAL(rs.n, 4);
    CU_ASSERT_EQUAL(rs.r[0].event, EGRESS_PROXY_DENIED);
    CU_ASSERT_EQUAL(rs.r[0].reason, EGRESS_DENY_LOOPBACK);
    CU_ASSERT_TRUE(rs.r[0].has_dst);
    CU_ASSERT_EQUAL(rs.r[0].port, alias.port);
    CU_ASSERT_EQUAL(rs.r[1].reason, EGRESS_DENY_METADATA);
    CU_ASSERT_EQUAL(rs.r[1].port, 80);
    CU_ASSERT_EQUAL(rs.r[2].reason, EGRESS_DENY_PRIVATE);
    CU_ASSERT_EQUAL(rs.r[3].reason, EGRESS_DENY_LOOPBACK);
    CU_ASSERT_EQUAL(rs.r[3].port, SANDBOX_NET_PROXY_PORT);
    egress_proxy_stats(p, &st);
    CU_ASSERT_EQUAL(st.accepted, 5);
    CU_ASSERT_EQUAL(st.allowed, 1);
    CU_ASSERT_EQUAL(st.denied, 4);
    CU_ASSERT_EQUAL(st.bytes_out, 4);
    CU_ASSERT_EQUAL(st.bytes_in, 4);
    CU_ASSERT_EQUAL(st.active, 0);

    egress_proxy_free(p);
    sandbox_net_release(&net);
    echo_server_stop(&model);
    echo_server_stop(&other);
    echo_server_stop(&alias);
}

static void test_egress_proxy_allowlist(void)
{
    struct echo_server model, alias, alias3;
    struct egress_policy pol;
    struct sandbox_net net;
    struct egress_proxy *p = NULL;
    struct reports rs = {0};
    int fds[2];

    if (!netns_test_possible("egress_proxy allowlist"))
        return;
    CU_ASSERT_EQUAL_FATAL(echo_server_start(&model, "::1"), 0);
    CU_ASSERT_EQUAL_FATAL(echo_server_start(&alias, "127.0.0.2"), 0);
    CU_ASSERT_EQUAL_FATAL(echo_server_start(&alias3, "127.0.0.3"), 0);
    egress_policy_init(&pol, EGRESS_MODE_ALLOWLIST, false);
    CU_ASSERT_EQUAL(egress_policy_add_cidr(&pol, "127.0.0.2/32", NULL, 0), 0);
    CU_ASSERT_EQUAL(egress_policy_add_endpoint(&pol, "::1", model.port, NULL, 0), 0);
    CU_ASSERT_FATAL(setup(&net, &pol, &model)); /* also names 127.0.0.1:<port> (not served) */
    fds[0] = net.proxy4_fd;
    fds[1] = net.proxy6_fd;
    CU_ASSERT_EQUAL_FATAL(egress_proxy_new(&pol, fds, 2, NULL, collect, &rs, &p), 0);
    {
        struct target listed = {"127.0.0.2", alias.port};
        struct target unlisted = {"127.0.0.3", alias3.port};
        struct target v6 = {"::1", model.port};
        struct target v6_other = {"::1", (uint16_t)(model.port + 1)};
        struct target mapped = {"::ffff:127.0.0.2", alias.port};
        struct target public_v4 = {"8.8.8.8", 53};

        CU_ASSERT_EQUAL(drive(p, &net, probe_target, &listed), PROBE_ECHOED);
        CU_ASSERT_EQUAL(drive(p, &net, probe_target, &mapped), PROBE_ECHOED);
        CU_ASSERT_EQUAL(alias.accepted, 2);
        CU_ASSERT_EQUAL(drive(p, &net, probe_target, &unlisted), PROBE_RESET);
        CU_ASSERT_EQUAL(alias3.accepted, 0);
        if (net.ipv6) {
            CU_ASSERT_EQUAL(drive(p, &net, probe_target, &v6), PROBE_ECHOED);
            CU_ASSERT_EQUAL(model.accepted, 1);
            CU_ASSERT_EQUAL(drive(p, &net, probe_target, &v6_other), PROBE_REFUSED);
        }
        CU_ASSERT_EQUAL(drive(p, &net, probe_target, &public_v4), PROBE_RESET);
    }
    CU_ASSERT_EQUAL_FATAL(rs.n, 2);
    CU_ASSERT_EQUAL(rs.r[0].reason, EGRESS_DENY_NOT_LISTED);
    CU_ASSERT_EQUAL(rs.r[1].reason, EGRESS_DENY_NOT_LISTED);
    egress_proxy_free(p);
    sandbox_net_release(&net);
    echo_server_stop(&model);
    echo_server_stop(&alias);
    echo_server_stop(&alias3);
}

/* An allowed destination that does not answer: reported as a failed connect, reset. */
static void test_egress_proxy_connect_failed(void)
{
    struct egress_policy pol;
    struct sandbox_net net;
    struct egress_proxy *p = NULL;
    struct reports rs = {0};
    struct echo_server gone;
    int fds[2];

    if (!netns_test_possible("egress_proxy connect_failed"))
        return;
    CU_ASSERT_EQUAL_FATAL(echo_server_start(&gone, "127.0.0.1"), 0);
    echo_server_stop(&gone); /* the port is closed now: connects are refused */
    egress_policy_init(&pol, EGRESS_MODE_OFF, false);
    CU_ASSERT_FATAL(setup(&net, &pol, &gone));
    fds[0] = net.proxy4_fd;
    fds[1] = net.proxy6_fd;
    CU_ASSERT_EQUAL_FATAL(egress_proxy_new(&pol, fds, 2, NULL, collect, &rs, &p), 0);
    {
        struct target t = {"127.0.0.1", gone.port};
        int r = drive(p, &net, probe_target, &t);
        CU_ASSERT(r == PROBE_RESET || r == PROBE_REFUSED);
    }
    CU_ASSERT_EQUAL_FATAL(rs.n, 1);
    CU_ASSERT_EQUAL(rs.r[0].event, EGRESS_PROXY_CONNECT_FAILED);
    CU_ASSERT_EQUAL(rs.r[0].error, -ECONNREFUSED);
    egress_proxy_free(p);
    sandbox_net_release(&net);
}

/* A bigger transfer both ways: the bounded buffers and half-close are exercised. */
struct bulk {
    uint16_t port;
    size_t bytes;
};

static int probe_bulk(void *arg)
{
    const struct bulk *b = arg;
    char buf[65536];
    size_t sent = 0, got = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(b->port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    memset(buf, 'x', sizeof(buf));
    if (fd == -1 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1)
        return PROBE_REFUSED;
    /* the server sinks everything, then answers with the byte count after our half-close */
    while (sent < b->bytes) {
        size_t k = b->bytes - sent < sizeof(buf) ? b->bytes - sent : sizeof(buf);
        ssize_t n = write(fd, buf, k);
        if (n <= 0)
            return PROBE_RESET;
        sent += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0)
            return PROBE_RESET;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    return got == b->bytes ? PROBE_ECHOED : PROBE_OTHER;
}

struct sink {
    int fd;
    size_t bytes;
};

/* Reads until EOF, then writes back as many bytes as it read, then closes. */
static void *sink_main(void *arg)
{
    struct sink *s = arg;
    char buf[65536];
    int c = accept(s->fd, NULL, NULL);
    size_t total = 0, back = 0;

    if (c < 0)
        return NULL;
    for (;;) {
        ssize_t n = read(c, buf, sizeof(buf));
        if (n <= 0)
            break;
        total += (size_t)n;
    }
    memset(buf, 'y', sizeof(buf));
    while (back < total) {
        size_t k = total - back < sizeof(buf) ? total - back : sizeof(buf);
        ssize_t n = write(c, buf, k);
        if (n <= 0)
            break;
        back += (size_t)n;
    }
    s->bytes = total;
    close(c);
    return NULL;
}

static void test_egress_proxy_bulk(void)
{
    struct egress_policy pol;
    struct sandbox_net net;
    struct egress_proxy *p = NULL;
    struct egress_proxy_config cfg = {.buf_bytes = 4096};
    struct egress_proxy_stats st;
    struct echo_server srv;
    struct sink sink;
    pthread_t t;
    int fds[2];
    struct bulk b = {.bytes = 3u * 1024 * 1024 + 17};

    if (!netns_test_possible("egress_proxy bulk"))
        return;
    /* borrow echo_server_start for a bound socket, then serve it with the sink instead */
    CU_ASSERT_EQUAL_FATAL(echo_server_start(&srv, "127.0.0.1"), 0);
    egress_policy_init(&pol, EGRESS_MODE_OFF, false);
    CU_ASSERT_FATAL(setup(&net, &pol, &srv));
    echo_server_stop(&srv);
    sink.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    {
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons(srv.port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int one = 1;
        setsockopt(sink.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        CU_ASSERT_EQUAL_FATAL(bind(sink.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        CU_ASSERT_EQUAL_FATAL(listen(sink.fd, 4), 0);
    }
    sink.bytes = 0;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, sink_main, &sink), 0);
    fds[0] = net.proxy4_fd;
    fds[1] = net.proxy6_fd;
    CU_ASSERT_EQUAL_FATAL(egress_proxy_new(&pol, fds, 2, &cfg, NULL, NULL, &p), 0);
    b.port = srv.port;
    CU_ASSERT_EQUAL(drive(p, &net, probe_bulk, &b), PROBE_ECHOED);
    pthread_join(t, NULL);
    close(sink.fd);
    CU_ASSERT_EQUAL(sink.bytes, b.bytes);
    egress_proxy_stats(p, &st);
    CU_ASSERT_EQUAL(st.bytes_out, b.bytes);
    CU_ASSERT_EQUAL(st.bytes_in, b.bytes);
    CU_ASSERT_EQUAL(st.active, 0);
    egress_proxy_free(p);
    sandbox_net_release(&net);
}

/* Over the connection cap: reset at once and reported, the others keep working. */
struct hold {
    uint16_t port;
};

static int probe_cap(void *arg)
{
    const struct hold *h = arg;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(h->port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int a = socket(AF_INET, SOCK_STREAM, 0), b = socket(AF_INET, SOCK_STREAM, 0);
    char c;
    struct timeval tv = {.tv_sec = 10};

    setsockopt(a, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(b, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(a, (struct sockaddr *)&sa, sizeof(sa)) == -1)
        return PROBE_OTHER;
    /* the proxy holds the first one once a byte came back through it (the echo server) */
    if (write(a, "x", 1) != 1 || read(a, &c, 1) != 1)
        return PROBE_OTHER;
    if (connect(b, (struct sockaddr *)&sa, sizeof(sa)) == -1)
        return PROBE_REFUSED;
    return read(b, &c, 1) <= 0 ? PROBE_RESET : PROBE_OTHER;
}

static void test_egress_proxy_cap(void)
{
    struct egress_policy pol;
    struct sandbox_net net;
    struct egress_proxy *p = NULL;
    struct egress_proxy_config cfg = {.max_conns = 1};
    struct reports rs = {0};
    struct echo_server srv;
    int fds[2];
    struct hold h;

    if (!netns_test_possible("egress_proxy cap"))
        return;
    CU_ASSERT_EQUAL_FATAL(echo_server_start(&srv, "127.0.0.1"), 0);
    egress_policy_init(&pol, EGRESS_MODE_OFF, false);
    CU_ASSERT_FATAL(setup(&net, &pol, &srv));
    fds[0] = net.proxy4_fd;
    fds[1] = net.proxy6_fd;
    CU_ASSERT_EQUAL_FATAL(egress_proxy_new(&pol, fds, 2, &cfg, collect, &rs, &p), 0);
    h.port = srv.port;
    CU_ASSERT_EQUAL(drive(p, &net, probe_cap, &h), PROBE_RESET);
    CU_ASSERT_EQUAL_FATAL(rs.n, 1);
    CU_ASSERT_EQUAL(rs.r[0].event, EGRESS_PROXY_OVERLOAD);
    CU_ASSERT_EQUAL(rs.r[0].error, -ENOBUFS);
    egress_proxy_free(p);
    sandbox_net_release(&net);
    echo_server_stop(&srv);
}

/* The first address of the host that is not loopback (its own eth0, say), or false. */
static bool host_address(char *out, size_t len)
{
    struct ifaddrs *ifs, *i;
    bool found = false;

    if (getifaddrs(&ifs) == -1)
        return false;
    for (i = ifs; i && !found; i = i->ifa_next) {
        struct egress_addr a;

        if (!i->ifa_addr || (i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP) ||
            i->ifa_addr->sa_family != AF_INET)
            continue;
        if (egress_addr_from_sockaddr(i->ifa_addr, sizeof(struct sockaddr_in), &a, NULL) < 0)
            continue;
        egress_addr_format(&a, out);
        (void)len;
        found = true;
    }
    freeifaddrs(ifs);
    return found;
}

/*
 * The runner host's own address (what a cloud VM's sandbox would use to reach the runner's
 * ports from "outside"): never, not even with private egress, unless listed exactly.
 */
static void test_egress_proxy_host_address(void)
{
    struct echo_server srv, unused;
    struct egress_policy pol;
    struct sandbox_net net;
    struct egress_proxy *p = NULL;
    struct reports rs = {0};
    char addr[EGRESS_ADDR_TEXT_MAX], entry[EGRESS_ADDR_TEXT_MAX + 4];
    struct target t;
    int fds[2];

    if (!netns_test_possible("egress_proxy host_address"))
        return;
    if (!host_address(addr, sizeof(addr))) {
        fprintf(stderr, "\n    egress_proxy host_address: skipped (no non-loopback address)\n");
        return;
    }
    CU_ASSERT_EQUAL_FATAL(echo_server_start(&srv, addr), 0);
    CU_ASSERT_EQUAL_FATAL(echo_server_start(&unused, "127.0.0.1"), 0);
    t.addr = addr;
    t.port = srv.port;
    egress_policy_init(&pol, EGRESS_MODE_ON, true);
    CU_ASSERT_FATAL(setup(&net, &pol, &unused));
    fds[0] = net.proxy4_fd;
    fds[1] = net.proxy6_fd;
    CU_ASSERT_EQUAL_FATAL(egress_proxy_new(&pol, fds, 2, NULL, collect, &rs, &p), 0);
    CU_ASSERT_EQUAL(drive(p, &net, probe_target, &t), PROBE_RESET);
    CU_ASSERT_EQUAL(srv.accepted, 0);
    CU_ASSERT_EQUAL_FATAL(rs.n, 1);
    CU_ASSERT_EQUAL(rs.r[0].reason, EGRESS_DENY_HOST);
    /* listed exactly, it is reachable */
    pol.mode = EGRESS_MODE_ALLOWLIST;
    snprintf(entry, sizeof(entry), "%s/32", addr);
    CU_ASSERT_EQUAL(egress_policy_add_cidr(&pol, entry, NULL, 0), 0);
    CU_ASSERT_EQUAL(drive(p, &net, probe_target, &t), PROBE_ECHOED);
    CU_ASSERT_EQUAL(srv.accepted, 1);
    egress_proxy_free(p);
    sandbox_net_release(&net);
    echo_server_stop(&srv);
    echo_server_stop(&unused);
}

CU_TestInfo egress_proxy_tests[] = {
    {"mode_on", test_egress_proxy_mode_on},
    {"allowlist", test_egress_proxy_allowlist},
    {"connect_failed", test_egress_proxy_connect_failed},
    {"bulk", test_egress_proxy_bulk},
    {"cap", test_egress_proxy_cap},
    {"host_address", test_egress_proxy_host_address},
    CU_TEST_INFO_NULL,
};
