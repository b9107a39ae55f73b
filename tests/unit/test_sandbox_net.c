/*
 * sandbox_net: the namespace it builds, seen from inside (as an unprivileged uid and as root
 * of a user namespace of its own, like a bubblewrap sandbox) and from the host. Needs root;
 * skipped (with a note) otherwise.
 */
#include <netinet/in.h>

#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "egress/nl.h"
#include "netns_helpers.h"
#include "suites.h"

static int wait_probe(pid_t pid, int fd)
{
    unsigned char b = 0;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int status;

    if (poll(&pf, 1, 20000) == 1 && read(fd, &b, 1) != 1)
        b = 0;
    close(fd);
    waitpid(pid, &status, 0);
    return b;
}

/* Try to delete the sandbox's nf_tables table: 'D' when it worked, 'P' when refused. */
static int try_delete_rules(void)
{
    struct nl_msg m;
    struct nfgenmsg g = {
        .nfgen_family = AF_UNSPEC, .version = NFNETLINK_V0, .res_id = htons(NFNL_SUBSYS_NFTABLES)};
    size_t off;
    int fd = nl_open(NETLINK_NETFILTER), r;

    if (fd < 0)
        return 'P';
    nl_msg_init(&m);
    off = nl_msg_begin(&m, NFNL_MSG_BATCH_BEGIN, 0, &g, sizeof(g));
    nl_msg_end(&m, off);
    g.nfgen_family = NFPROTO_INET;
    g.res_id = 0;
    off =
        nl_msg_begin(&m, (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_DELTABLE, NLM_F_ACK, &g, sizeof(g));
    nl_attr_str(&m, NFTA_TABLE_NAME, SANDBOX_NET_TABLE);
    nl_msg_end(&m, off);
    g.nfgen_family = AF_UNSPEC;
    g.res_id = htons(NFNL_SUBSYS_NFTABLES);
    off = nl_msg_begin(&m, NFNL_MSG_BATCH_END, 0, &g, sizeof(g));
    nl_msg_end(&m, off);
    r = nl_transact(fd, &m, NULL, 0);
    close(fd);
    return r == 0 ? 'D' : (r == -EPERM ? 'P' : 'O');
}

static int probe_rules_unprivileged(void *arg)
{
    (void)arg;
    return try_delete_rules();
}

/* Root of a fresh user namespace, as inside bubblewrap: full capabilities, but not here. */
static int probe_rules_userns(void *arg)
{
    int r;
    (void)arg;
    if (unshare(CLONE_NEWUSER) == -1)
        return 'U';
    r = try_delete_rules();
    if (r != 'P')
        return r;
    /* nor the routes or the link */
    r = nl_open(NETLINK_ROUTE);
    if (r < 0)
        return 'O';
    return nl_link_up(r, 1) == -EPERM ? 'P' : 'L';
}

static void test_sandbox_net_rules_are_fixed(void)
{
    struct sandbox_net n;
    struct sandbox_net_config cfg = {0};
    char err[256];
    int fd;
    pid_t pid;

    if (!netns_test_possible("sandbox_net rules_are_fixed"))
        return;
    CU_ASSERT_EQUAL_FATAL(sandbox_net_create(&cfg, &n, err, sizeof(err)), 0);
    pid = probe_spawn(&n, true, probe_rules_unprivileged, NULL, &fd);
    CU_ASSERT_FATAL(pid > 0);
    CU_ASSERT_EQUAL(wait_probe(pid, fd), 'P');
    pid = probe_spawn(&n, true, probe_rules_userns, NULL, &fd);
    CU_ASSERT_FATAL(pid > 0);
    CU_ASSERT_EQUAL(wait_probe(pid, fd), 'P');
    /* and root in the namespace could (the probe works) */
    pid = probe_spawn(&n, false, probe_rules_unprivileged, NULL, &fd);
    CU_ASSERT_FATAL(pid > 0);
    CU_ASSERT_EQUAL(wait_probe(pid, fd), 'D');
    sandbox_net_release(&n);
}

struct udp_target {
    const char *addr;
    uint16_t port;
};

/* 'S' sent and nothing came back in time, 'F' failed at once (rejected), 'A' answered */
static int probe_udp(void *arg)
{
    const struct udp_target *t = arg;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(t->port)};
    struct timeval tv = {.tv_sec = 2};
    char b[16];
    int fd = socket(AF_INET, SOCK_DGRAM, 0);

    inet_pton(AF_INET, t->addr, &sa.sin_addr);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1)
        return 'F';
    if (send(fd, "dns?", 4, 0) != 4)
        return 'F';
    if (recv(fd, b, sizeof(b), 0) > 0)
        return 'A';
    return errno == EAGAIN ? 'S' : 'F';
}

static void test_sandbox_net_udp(void)
{
    struct sandbox_net n;
    struct sandbox_net_config cfg = {0};
    struct udp_target ntp = {"8.8.8.8", 123}, dns = {"10.0.0.1", 53};
    char err[256], buf[16];
    int fd;
    pid_t pid;

    if (!netns_test_possible("sandbox_net udp"))
        return;
    CU_ASSERT_EQUAL_FATAL(sandbox_net_create(&cfg, &n, err, sizeof(err)), 0);
    /* UDP that is not DNS fails at once */
    pid = probe_spawn(&n, true, probe_udp, &ntp, &fd);
    CU_ASSERT_FATAL(pid > 0);
    CU_ASSERT_EQUAL(wait_probe(pid, fd), 'F');
    /* DNS to any server lands on the DNS socket, and the answer goes back */
    pid = probe_spawn(&n, true, probe_udp, &dns, &fd);
    CU_ASSERT_FATAL(pid > 0);
    {
        struct pollfd pf = {.fd = n.dns4_fd, .events = POLLIN};
        struct sockaddr_storage from;
        socklen_t flen = sizeof(from);
        ssize_t k;

        CU_ASSERT_EQUAL(poll(&pf, 1, 10000), 1);
        k = recvfrom(n.dns4_fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen);
        CU_ASSERT_EQUAL(k, 4);
        CU_ASSERT_EQUAL(sendto(n.dns4_fd, "ans", 3, 0, (struct sockaddr *)&from, flen), 3);
    }
    CU_ASSERT_EQUAL(wait_probe(pid, fd), 'A');
    sandbox_net_release(&n);
}

static void test_sandbox_net_no_way_in(void)
{
    struct sandbox_net n;
    struct sandbox_net_config cfg = {0};
    struct echo_server tmp;
    uint16_t port;
    char err[256], b = 0;
    int ready[2], c, status;
    pid_t pid;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

    if (!netns_test_possible("sandbox_net no_way_in"))
        return;
    /* a port that is free on the host */
    CU_ASSERT_EQUAL_FATAL(echo_server_start(&tmp, "127.0.0.1"), 0);
    port = tmp.port;
    echo_server_stop(&tmp);
    CU_ASSERT_EQUAL_FATAL(sandbox_net_create(&cfg, &n, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(pipe(ready), 0);
    pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        /* inside: listen on 0.0.0.0:port (and [::]:port), then wait to be killed */
        struct sockaddr_in any = {.sin_family = AF_INET, .sin_port = htons(port)};
        struct sockaddr_in6 any6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
        int fd, fd6;

        close(ready[0]);
        alarm(20);
        if (sandbox_net_enter(&n) < 0 || setgid(65534) == -1 || setuid(65534) == -1)
            _exit(3);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        fd6 = socket(AF_INET6, SOCK_STREAM, 0);
        if (bind(fd, (struct sockaddr *)&any, sizeof(any)) == -1 || listen(fd, 4) == -1)
            _exit(4);
        if (fd6 >= 0 && bind(fd6, (struct sockaddr *)&any6, sizeof(any6)) == 0)
            (void)listen(fd6, 4);
        (void)!write(ready[1], "L", 1);
        pause();
        _exit(0);
    }
    close(ready[1]);
    CU_ASSERT_EQUAL(read(ready[0], &b, 1), 1);
    CU_ASSERT_EQUAL(b, 'L');
    close(ready[0]);
    /* from the host: nothing there */
    sa.sin_port = htons(port);
    c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CU_ASSERT_EQUAL(connect(c, (struct sockaddr *)&sa, sizeof(sa)), -1);
    CU_ASSERT_EQUAL(errno, ECONNREFUSED);
    close(c);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    sandbox_net_release(&n);
}

static void test_sandbox_net_hand_over(void)
{
    struct sandbox_net n, m;
    struct sandbox_net_config cfg = {0};
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    char err[256];
    int sp[2];

    if (!netns_test_possible("sandbox_net hand_over"))
        return;
    CU_ASSERT_EQUAL_FATAL(sandbox_net_create(&cfg, &n, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
    CU_ASSERT_EQUAL(sandbox_net_send(sp[0], &n), 0);
    CU_ASSERT_EQUAL(sandbox_net_recv(sp[1], &m), 0);
    CU_ASSERT(m.ns_fd >= 0 && m.proxy4_fd >= 0 && m.dns4_fd >= 0);
    CU_ASSERT_EQUAL(m.ipv6, n.ipv6);
    CU_ASSERT_EQUAL(m.proxy6_fd >= 0, n.proxy6_fd >= 0);
    CU_ASSERT_EQUAL(getsockname(m.proxy4_fd, (struct sockaddr *)&sa, &len), 0);
    CU_ASSERT_EQUAL(ntohs(sa.sin_port), SANDBOX_NET_PROXY_PORT);
    CU_ASSERT_EQUAL(sa.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
    /* garbage is refused */
    CU_ASSERT_EQUAL(write(sp[0], "nope", 4), 4);
    CU_ASSERT_EQUAL(sandbox_net_recv(sp[1], &m), -EPROTO);
    sandbox_net_release(&m);
    sandbox_net_release(&n);
    close(sp[0]);
    close(sp[1]);
}

/* The anchor keeps its rules without sockets; sandboxes made meanwhile are unaffected. */
static int probe_anchor_rules(void *arg)
{
    (void)arg;
    return try_delete_rules(); /* 'D': the table was there (and root in it may delete it) */
}

static void test_sandbox_net_anchor(void)
{
    struct sandbox_net anchor = {.ns_fd = -1}, n;
    struct sandbox_net_config cfg = {0};
    char err[256];
    int fd;
    pid_t pid;

    if (!netns_test_possible("sandbox_net anchor"))
        return;
    sandbox_net_init(&anchor);
    anchor.ns_fd = sandbox_net_anchor(err, sizeof(err));
    CU_ASSERT_FATAL(anchor.ns_fd >= 0);
    CU_ASSERT_EQUAL_FATAL(sandbox_net_create(&cfg, &n, err, sizeof(err)), 0);
    pid = probe_spawn(&anchor, false, probe_anchor_rules, NULL, &fd);
    CU_ASSERT_FATAL(pid > 0);
    CU_ASSERT_EQUAL(wait_probe(pid, fd), 'D');
    sandbox_net_release(&n);
    sandbox_net_release(&anchor);
}

static void test_sandbox_net_bad_config(void)
{
    uint16_t ports[SANDBOX_NET_LOOPBACK_PORTS_MAX + 1] = {0};
    struct sandbox_net_config cfg = {.loopback_ports = ports,
                                     .nloopback_ports = SANDBOX_NET_LOOPBACK_PORTS_MAX + 1};
    struct sandbox_net n;
    char err[256] = "";

    sandbox_net_init(&n);
    CU_ASSERT_EQUAL(sandbox_net_create(&cfg, &n, err, sizeof(err)) == -E2BIG || geteuid() != 0, 1);
    CU_ASSERT_EQUAL(n.ns_fd, -1);
    CU_ASSERT_EQUAL(sandbox_net_enter(&n), -EBADF);
    sandbox_net_release(&n); /* all -1: a no-op */
}

/*
 * A runner that is not root gets the same namespace through a user namespace of its own: made
 * here as uid 65534, entered by a grandchild whose connection to a public address lands on
 * the proxy socket with its original destination intact.
 */
static int unprivileged_case(void)
{
    struct sandbox_net_config cfg = {0};
    struct sandbox_net n;
    struct sockaddr_in dst;
    struct pollfd pf;
    socklen_t len = sizeof(dst);
    char err[256] = "";
    int status, c;
    pid_t pid;

    if (setgroups(0, NULL) == -1 || setresgid(65534, 65534, 65534) == -1 ||
        setresuid(65534, 65534, 65534) == -1)
        return 10;
    if (sandbox_net_create(&cfg, &n, err, sizeof(err)) < 0) {
        fprintf(stderr, "\n    unprivileged sandbox_net_create: %s\n", err);
        return 11;
    }
    if (n.user_fd < 0 || n.ns_fd < 0 || n.proxy4_fd < 0)
        return 12;
    pid = fork();
    if (pid == 0) {
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(80)};

        alarm(20);
        inet_pton(AF_INET, "192.0.2.77", &to.sin_addr);
        c = socket(AF_INET, SOCK_STREAM, 0);
        if (sandbox_net_enter(&n) < 0)
            _exit(2);
        c = socket(AF_INET, SOCK_STREAM, 0);
        _exit(connect(c, (struct sockaddr *)&to, sizeof(to)) == 0 ? 0 : 3);
    }
    pf = (struct pollfd){.fd = n.proxy4_fd, .events = POLLIN};
    if (pid < 0 || poll(&pf, 1, 20000) != 1)
        return 13;
    c = accept(n.proxy4_fd, NULL, NULL);
    if (c < 0 || getsockopt(c, SOL_IP, 80 /* SO_ORIGINAL_DST */, &dst, &len) == -1)
        return 14;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 15;
    return ntohs(dst.sin_port) == 80 && ntohl(dst.sin_addr.s_addr) == 0xc000024d ? 0 : 16;
}

static void test_sandbox_net_unprivileged_creator(void)
{
    int status;
    pid_t pid;

    if (!netns_test_possible("sandbox_net unprivileged_creator"))
        return;
    pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0)
        _exit(unprivileged_case());
    waitpid(pid, &status, 0);
    CU_ASSERT_TRUE(WIFEXITED(status));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 11)
        printf("\n    skipped: unprivileged user namespaces with nf_tables are not allowed here\n");
    else
        CU_ASSERT_EQUAL(WEXITSTATUS(status), 0);
}

CU_TestInfo sandbox_net_tests[] = {
    {"unprivileged_creator", test_sandbox_net_unprivileged_creator},
    {"rules_are_fixed", test_sandbox_net_rules_are_fixed},
    {"udp", test_sandbox_net_udp},
    {"no_way_in", test_sandbox_net_no_way_in},
    {"hand_over", test_sandbox_net_hand_over},
    {"anchor", test_sandbox_net_anchor},
    {"bad_config", test_sandbox_net_bad_config},
    CU_TEST_INFO_NULL,
};
