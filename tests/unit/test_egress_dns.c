/*
 * egress_dns — the sandbox's name server over a real UDP socket on host loopback (no namespace
 * needed), with the host's resolver for "localhost" (the hosts file: no network involved).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "egress/dnsmsg.h"
#include "egress/egress_dns.h"
#include "netns_helpers.h"
#include "suites.h"

struct rig {
    int server, client;
    struct egress_dns *dns;
    size_t nreports;
    char last_name[256];
    int last_rcode;
};

static void on_report(void *ctx, const struct egress_dns_report *r)
{
    struct rig *g = ctx;

    g->nreports++;
    snprintf(g->last_name, sizeof(g->last_name), "%s", r->name);
    g->last_rcode = r->rcode;
}

static int rig_open(struct rig *g, struct egress_policy *p)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);

    memset(g, 0, sizeof(*g));
    g->server = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    g->client = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (bind(g->server, (struct sockaddr *)&sa, sizeof(sa)) == -1 ||
        getsockname(g->server, (struct sockaddr *)&sa, &len) == -1 ||
        connect(g->client, (struct sockaddr *)&sa, sizeof(sa)) == -1)
        return -errno;
    return egress_dns_new(p, &g->server, 1, on_report, g, &g->dns);
}

static void rig_close(struct rig *g)
{
    egress_dns_free(g->dns);
    close(g->server);
    close(g->client);
}

/* Send a query, drive the module until the answer is back. Returns the address count. */
static int ask(struct rig *g, const char *name, uint16_t qtype, enum dns_rcode *ret_rcode,
               struct egress_addr *addrs)
{
    static uint16_t next_id = 100;
    uint8_t q[512], a[DNSMSG_UDP_MAX];
    uint16_t id = ++next_id, got_id = 0;
    int n = dnsmsg_build_query(id, name, qtype, q, sizeof(q));
    int64_t deadline = util_now_ms() + 15000;

    if (n < 0 || send(g->client, q, (size_t)n, 0) != n)
        return -EIO;
    while (util_now_ms() < deadline) {
        struct pollfd pf[2] = {{.fd = egress_dns_fd(g->dns), .events = POLLIN},
                               {.fd = g->client, .events = POLLIN}};

        poll(pf, 2, 100);
        egress_dns_handle(g->dns, util_now_ms());
        if (pf[1].revents & POLLIN) {
            ssize_t k = recv(g->client, a, sizeof(a), 0);
            int r;

            if (k <= 0)
                return -EIO;
            r = dnsmsg_parse_answer(a, (size_t)k, &got_id, ret_rcode, addrs, 8);
            if (r >= 0 && got_id != id)
                continue;
            return r;
        }
    }
    return -ETIMEDOUT;
}

/* "off" and "allowlist" resolve the run's named endpoints and nothing else. */
static void only_named_names(enum egress_mode mode)
{
    struct egress_policy p;
    struct egress_addr addrs[8], lo = {.family = AF_INET, .b = {127, 0, 0, 1}};
    struct egress_dns_stats st;
    enum dns_rcode rcode;
    struct rig g;

    egress_policy_init(&p, mode, false);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "http://LOCALHOST:18080/v1", NULL, 0), 0);
    CU_ASSERT_EQUAL_FATAL(rig_open(&g, &p), 0);
    /* a name the run did not name: refused, and the host's resolver is never asked */
    CU_ASSERT_EQUAL(ask(&g, "leak-the-secret.example.com", DNS_TYPE_A, &rcode, addrs), 0);
    CU_ASSERT_EQUAL(rcode, DNS_RCODE_REFUSED);
    CU_ASSERT_EQUAL(g.nreports, 1);
    CU_ASSERT_STRING_EQUAL(g.last_name, "leak-the-secret.example.com");
    egress_dns_stats(g.dns, &st);
    CU_ASSERT_EQUAL(st.lookups, 0);
    /* the named host: resolved now, learned by the policy (so the proxy allows it) */
    CU_ASSERT_FALSE(egress_policy_check(&p, &lo, 18080, false, NULL));
    CU_ASSERT_EQUAL(ask(&g, "localhost", DNS_TYPE_A, &rcode, addrs), 1);
    CU_ASSERT_EQUAL(rcode, DNS_RCODE_NOERROR);
    CU_ASSERT_TRUE(egress_addr_equal(&addrs[0], &lo));
    CU_ASSERT_TRUE(egress_policy_check(&p, &lo, 18080, false, NULL));
    CU_ASSERT_FALSE(egress_policy_check(&p, &lo, 18081, false, NULL));
    /* now answered from the policy, without a lookup; case does not matter */
    CU_ASSERT_EQUAL(ask(&g, "LocalHost", DNS_TYPE_A, &rcode, addrs), 1);
    egress_dns_stats(g.dns, &st);
    CU_ASSERT_EQUAL(st.lookups, 1);
    CU_ASSERT_EQUAL(st.refused, 1);
    CU_ASSERT_EQUAL(st.answered, 2);
    rig_close(&g);
}

static void test_egress_dns_mode_off(void)
{
    only_named_names(EGRESS_MODE_OFF);
}

/* no DNS exfiltration past an address allowlist: other names never reach the host's resolver */
static void test_egress_dns_mode_allowlist(void)
{
    only_named_names(EGRESS_MODE_ALLOWLIST);
}

static void test_egress_dns_mode_on_filters(void)
{
    struct egress_policy p;
    struct egress_addr addrs[8];
    struct egress_dns_stats st;
    enum dns_rcode rcode;
    struct rig g;

    egress_policy_init(&p, EGRESS_MODE_ON, true);
    CU_ASSERT_EQUAL_FATAL(rig_open(&g, &p), 0);
    /* localhost resolves to host loopback, which the sandbox may not reach: empty answer */
    CU_ASSERT_EQUAL(ask(&g, "localhost", DNS_TYPE_A, &rcode, addrs), 0);
    CU_ASSERT_EQUAL(rcode, DNS_RCODE_NOERROR);
    /* other types: empty, no lookup */
    CU_ASSERT_EQUAL(ask(&g, "localhost", 15 /* MX */, &rcode, addrs), 0);
    CU_ASSERT_EQUAL(rcode, DNS_RCODE_NOERROR);
    /* names that are not names */
    CU_ASSERT_EQUAL(ask(&g, "127.0.0.1", DNS_TYPE_A, &rcode, addrs), 0);
    CU_ASSERT_EQUAL(rcode, DNS_RCODE_REFUSED);
    CU_ASSERT_EQUAL(ask(&g, "a_b.c-d.0x7f", DNS_TYPE_A, &rcode, addrs), 0);
    CU_ASSERT_EQUAL(rcode, DNS_RCODE_REFUSED);
    /* the second ask is a cache hit */
    CU_ASSERT_EQUAL(ask(&g, "localhost", DNS_TYPE_A, &rcode, addrs), 0);
    egress_dns_stats(g.dns, &st);
    CU_ASSERT_EQUAL(st.lookups, 1);
    CU_ASSERT_EQUAL(st.cache_hits, 1);
    CU_ASSERT_EQUAL(st.queries, 5);
    rig_close(&g);
}

static void test_egress_dns_malformed(void)
{
    struct egress_policy p;
    struct rig g;
    uint8_t junk[40] = {0x12, 0x34, 0x01, 0x00, 0x00, 0x02}; /* QDCOUNT 2 */
    uint8_t a[DNSMSG_UDP_MAX];
    struct egress_addr addrs[4];
    enum dns_rcode rcode;
    uint16_t id;
    ssize_t k = -1;

    egress_policy_init(&p, EGRESS_MODE_ON, false);
    CU_ASSERT_EQUAL_FATAL(rig_open(&g, &p), 0);
    CU_ASSERT_EQUAL(send(g.client, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
    for (int i = 0; i < 50 && k < 0; i++) {
        struct pollfd pf = {.fd = g.client, .events = POLLIN};
        egress_dns_handle(g.dns, util_now_ms());
        if (poll(&pf, 1, 100) == 1)
            k = recv(g.client, a, sizeof(a), 0);
    }
    CU_ASSERT_EQUAL(k, DNSMSG_HEADER);
    CU_ASSERT_EQUAL(dnsmsg_parse_answer(a, (size_t)k, &id, &rcode, addrs, 4), 0);
    CU_ASSERT_EQUAL(id, 0x1234);
    CU_ASSERT_EQUAL(rcode, DNS_RCODE_FORMERR);
    /* a response is never answered */
    junk[2] = 0x81;
    CU_ASSERT_EQUAL(send(g.client, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
    egress_dns_handle(g.dns, util_now_ms());
    {
        struct pollfd pf = {.fd = g.client, .events = POLLIN};
        egress_dns_handle(g.dns, util_now_ms());
        CU_ASSERT_EQUAL(poll(&pf, 1, 200), 0);
    }
    rig_close(&g);
}

static void test_egress_dns_endpoints_and_files(void)
{
    struct egress_policy p;
    struct buf b;
    struct egress_addr lo = {.family = AF_INET, .b = {127, 0, 0, 1}};

    egress_policy_init(&p, EGRESS_MODE_OFF, false);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "http://localhost:18080", NULL, 0), 0);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "http://localhost:18081", NULL, 0), 0);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "http://10.1.2.3:80", NULL, 0), 0);
    CU_ASSERT_EQUAL(egress_dns_resolve_endpoints(&p), 0);
    CU_ASSERT_TRUE(egress_policy_check(&p, &lo, 18080, false, NULL));
    CU_ASSERT_TRUE(egress_policy_check(&p, &lo, 18081, false, NULL));
    buf_init(&b, 4096);
    CU_ASSERT_EQUAL(egress_policy_render_hosts(&p, &b), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&b), "127.0.0.1 localhost\n"));
    buf_reset(&b);
    CU_ASSERT_EQUAL(egress_dns_render_resolv_conf(&b), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&b), "nameserver 127.0.0.1\n"));
    CU_ASSERT_PTR_NULL(strstr(buf_str(&b), "search"));
    buf_release(&b);
}

/* A query sent inside a sandbox namespace to any server: 'A' answered with 127.0.0.1 for the
 * named host, then 'R' refused for an unnamed one, as one result byte each. */
static int probe_dns_inside(void *arg)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(53)};
    struct timeval tv = {.tv_sec = 10};
    struct egress_addr addrs[4];
    uint8_t q[512], a[DNSMSG_UDP_MAX];
    enum dns_rcode rcode;
    uint16_t id;
    const char *name = arg;
    int fd = socket(AF_INET, SOCK_DGRAM, 0), n;
    ssize_t k;

    inet_pton(AF_INET, "192.0.2.53", &sa.sin_addr); /* not ours: redirected to the keeper */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    n = dnsmsg_build_query(77, name, DNS_TYPE_A, q, sizeof(q));
    if (n < 0 || sendto(fd, q, (size_t)n, 0, (struct sockaddr *)&sa, sizeof(sa)) != n)
        return 'F';
    k = recv(fd, a, sizeof(a), 0);
    if (k <= 0)
        return 'T';
    n = dnsmsg_parse_answer(a, (size_t)k, &id, &rcode, addrs, 4);
    if (n == 1 && rcode == DNS_RCODE_NOERROR && addrs[0].b[0] == 127)
        return 'A';
    return rcode == DNS_RCODE_REFUSED ? 'R' : 'O';
}

static int drive_dns(struct egress_dns *d, const struct sandbox_net *net, const char *name)
{
    unsigned char b = 0;
    int fd = -1, status;
    pid_t pid = probe_spawn(net, true, probe_dns_inside, (void *)name, &fd);

    if (pid < 0)
        return -1;
    for (int i = 0; i < 300; i++) {
        struct pollfd pf[2] = {{.fd = egress_dns_fd(d), .events = POLLIN},
                               {.fd = fd, .events = POLLIN}};

        poll(pf, 2, 100);
        egress_dns_handle(d, util_now_ms());
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

static void test_egress_dns_through_the_namespace(void)
{
    struct egress_policy p;
    struct sandbox_net net;
    struct sandbox_net_config cfg = {0};
    struct egress_dns *d = NULL;
    char err[256];
    int socks[2];

    if (!netns_test_possible("egress_dns through_the_namespace"))
        return;
    egress_policy_init(&p, EGRESS_MODE_OFF, false);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "http://localhost:18080", NULL, 0), 0);
    CU_ASSERT_EQUAL_FATAL(sandbox_net_create(&cfg, &net, err, sizeof(err)), 0);
    socks[0] = net.dns4_fd;
    socks[1] = net.dns6_fd;
    CU_ASSERT_EQUAL_FATAL(egress_dns_new(&p, socks, 2, NULL, NULL, &d), 0);
    CU_ASSERT_EQUAL(drive_dns(d, &net, "localhost"), 'A');
    CU_ASSERT_EQUAL(drive_dns(d, &net, "exfiltrate.example.com"), 'R');
    egress_dns_free(d);
    sandbox_net_release(&net);
}

CU_TestInfo egress_dns_tests[] = {
    {"mode_off", test_egress_dns_mode_off},
    {"mode_allowlist", test_egress_dns_mode_allowlist},
    {"mode_on_filters", test_egress_dns_mode_on_filters},
    {"malformed", test_egress_dns_malformed},
    {"endpoints_and_files", test_egress_dns_endpoints_and_files},
    {"through_the_namespace", test_egress_dns_through_the_namespace},
    CU_TEST_INFO_NULL,
};
