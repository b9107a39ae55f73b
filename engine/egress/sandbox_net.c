/*
 * sandbox_net — the namespace, its loopback, routes, nf_tables rules and listening sockets
 * (see sandbox_net.h). The rules go in as one nf_tables netlink batch built here: the same
 * rules `nft -f` would load, at a fraction of the cost (no libnftables parser, cache fetch or
 * exec): the whole network setup of a cold start takes under 1 ms p50 (`make bench` row 2).
 */
#include "egress/sandbox_net.h"

/* glibc's netinet/in.h first: it tells the kernel headers not to redefine in_addr & co */
#include <netinet/in.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "egress/nl.h"

#define NFT_TYPE(msg) ((uint16_t)((NFNL_SUBSYS_NFTABLES << 8) | (msg)))
#define CHAIN_NAT "egress_nat"
#define CHAIN_FILTER "egress_filter"
#define FD_COUNT 6
#define PRIO_NAT_DST (-100) /* NF_IP_PRI_NAT_DST: before the filter chain sees the packet */
#define PRIO_FILTER 0

void sandbox_net_init(struct sandbox_net *n)
{
    n->ns_fd = n->proxy4_fd = n->proxy6_fd = n->dns4_fd = n->dns6_fd = n->model_fd = -1;
    n->user_fd = -1;
    n->ipv6 = false;
}

void sandbox_net_release(struct sandbox_net *n)
{
    int *fds[FD_COUNT] = {&n->ns_fd,   &n->proxy4_fd, &n->proxy6_fd,
                          &n->dns4_fd, &n->dns6_fd,   &n->model_fd};

    for (size_t i = 0; i < FD_COUNT; i++) {
        if (*fds[i] >= 0)
            close(*fds[i]);
        *fds[i] = -1;
    }
    if (n->user_fd >= 0)
        close(n->user_fd);
    n->user_fd = -1;
    n->ipv6 = false;
}

/* ---- the nf_tables batch ------------------------------------------------------------------ */

static void nfgen(struct nl_msg *m, uint16_t type, uint16_t flags, uint8_t family, uint16_t res_id,
                  size_t *ret_off)
{
    struct nfgenmsg g = {
        .nfgen_family = family,
        .version = NFNETLINK_V0,
        .res_id = htons(res_id),
    };

    *ret_off = nl_msg_begin(m, type, flags, &g, sizeof(g));
}

static size_t expr_begin(struct nl_msg *m, const char *name, size_t *ret_data)
{
    size_t elem = nl_nest_begin(m, NFTA_LIST_ELEM);

    nl_attr_str(m, NFTA_EXPR_NAME, name);
    *ret_data = nl_nest_begin(m, NFTA_EXPR_DATA);
    return elem;
}

static void expr_end(struct nl_msg *m, size_t elem, size_t data)
{
    nl_nest_end(m, data);
    nl_nest_end(m, elem);
}

static void expr_meta(struct nl_msg *m, uint32_t key)
{
    size_t d, e = expr_begin(m, "meta", &d);

    nl_attr_be32(m, NFTA_META_KEY, key);
    nl_attr_be32(m, NFTA_META_DREG, NFT_REG_1);
    expr_end(m, e, d);
}

static void expr_payload(struct nl_msg *m, uint32_t base, uint32_t offset, uint32_t len)
{
    size_t d, e = expr_begin(m, "payload", &d);

    nl_attr_be32(m, NFTA_PAYLOAD_DREG, NFT_REG_1);
    nl_attr_be32(m, NFTA_PAYLOAD_BASE, base);
    nl_attr_be32(m, NFTA_PAYLOAD_OFFSET, offset);
    nl_attr_be32(m, NFTA_PAYLOAD_LEN, len);
    expr_end(m, e, d);
}

static void expr_cmp(struct nl_msg *m, uint32_t op, const void *data, size_t len)
{
    size_t d, e = expr_begin(m, "cmp", &d), v;

    nl_attr_be32(m, NFTA_CMP_SREG, NFT_REG_1);
    nl_attr_be32(m, NFTA_CMP_OP, op);
    v = nl_nest_begin(m, NFTA_CMP_DATA);
    nl_attr(m, NFTA_DATA_VALUE, data, len);
    nl_nest_end(m, v);
    expr_end(m, e, d);
}

static void expr_verdict(struct nl_msg *m, int32_t code)
{
    size_t d, e = expr_begin(m, "immediate", &d), data, verdict;

    nl_attr_be32(m, NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
    data = nl_nest_begin(m, NFTA_IMMEDIATE_DATA);
    verdict = nl_nest_begin(m, NFTA_DATA_VERDICT);
    nl_attr_be32(m, NFTA_VERDICT_CODE, (uint32_t)code);
    nl_nest_end(m, verdict);
    nl_nest_end(m, data);
    expr_end(m, e, d);
}

/* redirect to local port (loaded into register 1 first) */
static void expr_redirect(struct nl_msg *m, uint16_t port)
{
    uint8_t be[2] = {(uint8_t)(port >> 8), (uint8_t)port};
    size_t d, e = expr_begin(m, "immediate", &d), data;

    nl_attr_be32(m, NFTA_IMMEDIATE_DREG, NFT_REG_1);
    data = nl_nest_begin(m, NFTA_IMMEDIATE_DATA);
    nl_attr(m, NFTA_DATA_VALUE, be, sizeof(be));
    nl_nest_end(m, data);
    expr_end(m, e, d);
    e = expr_begin(m, "redir", &d);
    nl_attr_be32(m, NFTA_REDIR_REG_PROTO_MIN, NFT_REG_1);
    nl_attr_be32(m, NFTA_REDIR_FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED);
    expr_end(m, e, d);
}

static void expr_reject(struct nl_msg *m, uint32_t type, uint8_t code)
{
    size_t d, e = expr_begin(m, "reject", &d);

    nl_attr_be32(m, NFTA_REJECT_TYPE, type);
    nl_attr_u8(m, NFTA_REJECT_ICMP_CODE, code);
    expr_end(m, e, d);
}

/* meta nfproto <family> <daddr> == lo */
static void match_own_loopback(struct nl_msg *m, bool v6)
{
    static const uint8_t lo4[4] = {127, 0, 0, 1};
    static const uint8_t lo6[16] = {[15] = 1};
    uint8_t proto = v6 ? NFPROTO_IPV6 : NFPROTO_IPV4;

    expr_meta(m, NFT_META_NFPROTO);
    expr_cmp(m, NFT_CMP_EQ, &proto, 1);
    if (v6) {
        expr_payload(m, NFT_PAYLOAD_NETWORK_HEADER, 24, 16);
        expr_cmp(m, NFT_CMP_EQ, lo6, sizeof(lo6));
    } else {
        expr_payload(m, NFT_PAYLOAD_NETWORK_HEADER, 16, 4);
        expr_cmp(m, NFT_CMP_EQ, lo4, sizeof(lo4));
    }
}

static void match_l4(struct nl_msg *m, uint8_t proto)
{
    expr_meta(m, NFT_META_L4PROTO);
    expr_cmp(m, NFT_CMP_EQ, &proto, 1);
}

static void match_dport(struct nl_msg *m, uint16_t port)
{
    uint8_t be[2] = {(uint8_t)(port >> 8), (uint8_t)port};

    expr_payload(m, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
    expr_cmp(m, NFT_CMP_EQ, be, sizeof(be));
}

static size_t rule_begin(struct nl_msg *m, const char *chain, size_t *ret_exprs)
{
    size_t off;

    nfgen(m, NFT_TYPE(NFT_MSG_NEWRULE), NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK, NFPROTO_INET, 0,
          &off);
    nl_attr_str(m, NFTA_RULE_TABLE, SANDBOX_NET_TABLE);
    nl_attr_str(m, NFTA_RULE_CHAIN, chain);
    *ret_exprs = nl_nest_begin(m, NFTA_RULE_EXPRESSIONS);
    return off;
}

static void rule_end(struct nl_msg *m, size_t off, size_t exprs)
{
    nl_nest_end(m, exprs);
    nl_msg_end(m, off);
}

static void add_chain(struct nl_msg *m, const char *name, const char *type, int32_t prio)
{
    size_t off, hook;

    nfgen(m, NFT_TYPE(NFT_MSG_NEWCHAIN), NLM_F_CREATE | NLM_F_ACK, NFPROTO_INET, 0, &off);
    nl_attr_str(m, NFTA_CHAIN_TABLE, SANDBOX_NET_TABLE);
    nl_attr_str(m, NFTA_CHAIN_NAME, name);
    hook = nl_nest_begin(m, NFTA_CHAIN_HOOK);
    nl_attr_be32(m, NFTA_HOOK_HOOKNUM, NF_INET_LOCAL_OUT);
    nl_attr_be32(m, NFTA_HOOK_PRIORITY, (uint32_t)prio);
    nl_nest_end(m, hook);
    nl_attr_be32(m, NFTA_CHAIN_POLICY, NF_ACCEPT);
    nl_attr_str(m, NFTA_CHAIN_TYPE, type);
    nl_msg_end(m, off);
}

static void build_rules(struct nl_msg *m, const struct sandbox_net_config *cfg, uint16_t proxy,
                        uint16_t dns, bool replace)
{
    size_t off, ex;

    nfgen(m, NFNL_MSG_BATCH_BEGIN, 0, AF_UNSPEC, NFNL_SUBSYS_NFTABLES, &off);
    nl_msg_end(m, off);
    if (replace) {
        /* the old table goes in the same batch: the sandbox never sees it missing */
        nfgen(m, NFT_TYPE(NFT_MSG_DELTABLE), NLM_F_ACK, NFPROTO_INET, 0, &off);
        nl_attr_str(m, NFTA_TABLE_NAME, SANDBOX_NET_TABLE);
        nl_msg_end(m, off);
    }

    nfgen(m, NFT_TYPE(NFT_MSG_NEWTABLE), NLM_F_CREATE | NLM_F_ACK, NFPROTO_INET, 0, &off);
    nl_attr_str(m, NFTA_TABLE_NAME, SANDBOX_NET_TABLE);
    nl_msg_end(m, off);
    add_chain(m, CHAIN_NAT, "nat", PRIO_NAT_DST);
    add_chain(m, CHAIN_FILTER, "filter", PRIO_FILTER);

    /* nat: named endpoints on host loopback first, then the sandbox's own loopback stays */
    for (size_t i = 0; i < cfg->nloopback_ports; i++) {
        for (int v6 = 0; v6 <= 1; v6++) {
            off = rule_begin(m, CHAIN_NAT, &ex);
            match_own_loopback(m, v6);
            match_l4(m, IPPROTO_TCP);
            match_dport(m, cfg->loopback_ports[i]);
            expr_redirect(m, proxy);
            rule_end(m, off, ex);
        }
    }
    for (int v6 = 0; v6 <= 1; v6++) {
        off = rule_begin(m, CHAIN_NAT, &ex);
        match_own_loopback(m, v6);
        expr_verdict(m, NFT_RETURN);
        rule_end(m, off, ex);
    }
    off = rule_begin(m, CHAIN_NAT, &ex);
    match_l4(m, IPPROTO_TCP);
    expr_redirect(m, proxy);
    rule_end(m, off, ex);
    off = rule_begin(m, CHAIN_NAT, &ex);
    match_l4(m, IPPROTO_UDP);
    match_dport(m, 53);
    expr_redirect(m, dns);
    rule_end(m, off, ex);

    /* filter: after nat, what is not for the own loopback fails at once */
    for (int v6 = 0; v6 <= 1; v6++) {
        off = rule_begin(m, CHAIN_FILTER, &ex);
        match_own_loopback(m, v6);
        expr_verdict(m, NF_ACCEPT);
        rule_end(m, off, ex);
    }
    off = rule_begin(m, CHAIN_FILTER, &ex);
    match_l4(m, IPPROTO_TCP);
    expr_reject(m, NFT_REJECT_TCP_RST, 0);
    rule_end(m, off, ex);
    off = rule_begin(m, CHAIN_FILTER, &ex);
    expr_reject(m, NFT_REJECT_ICMPX_UNREACH, NFT_REJECT_ICMPX_ADMIN_PROHIBITED);
    rule_end(m, off, ex);

    nfgen(m, NFNL_MSG_BATCH_END, 0, AF_UNSPEC, NFNL_SUBSYS_NFTABLES, &off);
    nl_msg_end(m, off);
}

static int install_rules(const struct sandbox_net_config *cfg, uint16_t proxy, uint16_t dns,
                         bool replace, char *err, size_t errlen)
{
    struct nl_msg m;
    char why[128] = "";
    int fd, r;

    fd = nl_open(NETLINK_NETFILTER);
    if (fd < 0) {
        util_seterr(err, errlen, "sandbox network: netfilter netlink: %s", strerror(-fd));
        return fd;
    }
    nl_msg_init(&m);
    build_rules(&m, cfg, proxy, dns, replace);
    r = nl_transact(fd, &m, why, sizeof(why));
    close(fd);
    if (r < 0)
        util_seterr(err, errlen, "sandbox network: nf_tables rules: %s",
                    why[0] ? why : strerror(-r));
    return r;
}

/* ---- sockets ------------------------------------------------------------------------------ */

static int bound_socket(int family, int type, uint16_t port)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int fd, one = 1, r;

    memset(&ss, 0, sizeof(ss));
    if (family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        in->sin_family = AF_INET;
        in->sin_port = htons(port);
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof(*in);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        in6->sin6_addr = in6addr_loopback;
        len = sizeof(*in6);
    }
    fd = socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd == -1)
        return -errno;
    if (family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) == -1)
        goto fail;
    if (bind(fd, (struct sockaddr *)&ss, len) == -1)
        goto fail;
    if (type == SOCK_STREAM && listen(fd, SOMAXCONN) == -1)
        goto fail;
    return fd;
fail:
    r = -errno;
    close(fd);
    return r;
}

/*
 * Set up the calling thread's current network namespace, which must be fresh (just unshared):
 * the same as sandbox_net_create without the namespace switch (ns_fd stays -1). For a child
 * that unshares its own namespace and hands the sockets back (sandbox_net_send).
 */
static int sandbox_net_setup_current(const struct sandbox_net_config *cfg,
                                     struct sandbox_net *ret_net, char *err, size_t errlen)
{
    uint16_t proxy = cfg->proxy_port ? cfg->proxy_port : SANDBOX_NET_PROXY_PORT;
    uint16_t dns = cfg->dns_port ? cfg->dns_port : SANDBOX_NET_DNS_PORT;
    static const uint8_t lo4[4] = {127, 0, 0, 1};
    struct sandbox_net n;
    unsigned lo;
    int fd = -1, r;

    sandbox_net_init(&n);
    if (cfg->nloopback_ports > SANDBOX_NET_LOOPBACK_PORTS_MAX) {
        util_seterr(err, errlen, "sandbox network: more than %d loopback ports",
                    SANDBOX_NET_LOOPBACK_PORTS_MAX);
        return -E2BIG;
    }
    lo = if_nametoindex("lo");
    if (lo == 0) {
        r = -errno;
        util_seterr(err, errlen, "sandbox network: no loopback interface: %s", strerror(errno));
        return r;
    }
    fd = nl_open(NETLINK_ROUTE);
    if (fd < 0) {
        util_seterr(err, errlen, "sandbox network: rtnetlink: %s", strerror(-fd));
        return fd;
    }
    r = nl_link_up(fd, (int)lo);
    if (r < 0) {
        util_seterr(err, errlen, "sandbox network: loopback up: %s", strerror(-r));
        goto out;
    }
    r = nl_route_default_dev(fd, AF_INET, (int)lo, lo4);
    if (r < 0) {
        util_seterr(err, errlen, "sandbox network: IPv4 default route: %s", strerror(-r));
        goto out;
    }
    /* without IPv6 in the kernel (or disabled) the sandbox simply has none */
    n.ipv6 = nl_route_default_dev(fd, AF_INET6, (int)lo, NULL) == 0;

    r = n.proxy4_fd = bound_socket(AF_INET, SOCK_STREAM, proxy);
    if (r >= 0)
        r = n.dns4_fd = bound_socket(AF_INET, SOCK_DGRAM, dns);
    if (r >= 0 && n.ipv6)
        r = n.proxy6_fd = bound_socket(AF_INET6, SOCK_STREAM, proxy);
    if (r >= 0 && n.ipv6)
        r = n.dns6_fd = bound_socket(AF_INET6, SOCK_DGRAM, dns);
    if (r >= 0)
        r = n.model_fd = bound_socket(AF_INET, SOCK_STREAM, SANDBOX_NET_MODEL_PORT);
    if (r < 0) {
        util_seterr(err, errlen, "sandbox network: listening sockets: %s", strerror(-r));
        goto out;
    }
    r = install_rules(cfg, proxy, dns, false, err, errlen);
    if (r < 0)
        goto out;
    *ret_net = n;
    sandbox_net_init(&n);
    r = 0;
out:
    close(fd);
    sandbox_net_release(&n);
    return r;
}

/* ---- a runner that is not root ------------------------------------------------------------ */

static int write_text(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC), r = 0;

    if (fd == -1)
        return -errno;
    if (write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        r = -EIO;
    close(fd);
    return r;
}

/* One fd over a unix socket (SCM_RIGHTS). */
static int send_fd(int sock, int fd)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    char byte = 'u';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    struct cmsghdr *c;

    memset(&u, 0, sizeof(u));
    c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sendmsg(sock, &msg, MSG_NOSIGNAL) == 1 ? 0 : -EIO;
}

static int recv_fd(int sock, int *ret_fd)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    struct cmsghdr *c;

    if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1)
        return -EPROTO;
    c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
        return -EPROTO;
    memcpy(ret_fd, CMSG_DATA(c), sizeof(int));
    return 0;
}

/*
 * The helper child of an unprivileged creator: a user namespace of its own (the runner's
 * uid and gid mapped to themselves) owning a new network namespace, set up like a root
 * runner's, handed back with both namespaces. A failure is sent as "\0<message>".
 */
static void helper(int sock, const struct sandbox_net_config *cfg, uid_t uid, gid_t gid)
{
    struct sandbox_net n;
    char map[64], err[256] = "";
    int user_fd;

    err[0] = '\0';
    /* its own uid_map must be writable by it (a process that changed ids is not dumpable) */
    (void)prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    if (unshare(CLONE_NEWUSER | CLONE_NEWNET) == -1) {
        snprintf(err + 1, sizeof(err) - 1, "sandbox network: new user and network namespace: %s",
                 strerror(errno));
        goto fail;
    }
    snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)uid, (unsigned)uid);
    if (write_text("/proc/self/uid_map", map) < 0 ||
        write_text("/proc/self/setgroups", "deny") < 0) {
        snprintf(err + 1, sizeof(err) - 1, "sandbox network: cannot map the runner's uid");
        goto fail;
    }
    snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)gid);
    if (write_text("/proc/self/gid_map", map) < 0) {
        snprintf(err + 1, sizeof(err) - 1, "sandbox network: cannot map the runner's gid");
        goto fail;
    }
    if (sandbox_net_setup_current(cfg, &n, err + 1, sizeof(err) - 1) < 0)
        goto fail;
    n.ns_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    user_fd = open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC);
    if (n.ns_fd >= 0 && user_fd >= 0 && sandbox_net_send(sock, &n) == 0 &&
        send_fd(sock, user_fd) == 0)
        _exit(0);
    snprintf(err + 1, sizeof(err) - 1, "sandbox network: cannot hand the namespace over");
fail:
    (void)send(sock, err, 1 + strlen(err + 1), MSG_NOSIGNAL);
    _exit(1);
}

static int create_unprivileged(const struct sandbox_net_config *cfg, struct sandbox_net *ret_net,
                               char *err, size_t errlen)
{
    struct sandbox_net n;
    char first = 'x', text[256];
    int sv[2], r;
    pid_t pid;

    sandbox_net_init(&n);
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == -1) {
        r = -errno;
        util_seterr(err, errlen, "sandbox network: socketpair: %s", strerror(errno));
        return r;
    }
    pid = fork();
    if (pid == 0) {
        close(sv[0]);
        helper(sv[1], cfg, geteuid(), getegid());
    }
    close(sv[1]);
    if (pid == -1) {
        r = -errno;
        util_seterr(err, errlen, "sandbox network: fork: %s", strerror(errno));
        close(sv[0]);
        return r;
    }
    if (recv(sv[0], &first, 1, MSG_PEEK) == 1 && first == '\0') {
        ssize_t k = recv(sv[0], text, sizeof(text) - 1, 0);

        text[k > 1 ? k : 1] = '\0';
        util_seterr(err, errlen, "%s", text + 1);
        r = -EPERM;
    } else {
        r = sandbox_net_recv(sv[0], &n);
        if (r == 0)
            r = recv_fd(sv[0], &n.user_fd);
        if (r < 0)
            util_seterr(err, errlen, "sandbox network: the namespace helper failed: %s",
                        strerror(-r));
    }
    close(sv[0]);
    while (waitpid(pid, NULL, 0) == -1 && errno == EINTR)
        ;
    if (r < 0) {
        sandbox_net_release(&n);
        return r;
    }
    *ret_net = n;
    return 0;
}

int sandbox_net_create(const struct sandbox_net_config *cfg, struct sandbox_net *ret_net, char *err,
                       size_t errlen)
{
    struct sandbox_net n;
    int home, r;

    if (geteuid() != 0)
        return create_unprivileged(cfg, ret_net, err, errlen);

    sandbox_net_init(&n);
    home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home == -1) {
        r = -errno;
        util_seterr(err, errlen, "sandbox network: /proc/thread-self/ns/net: %s", strerror(errno));
        return r;
    }
    if (unshare(CLONE_NEWNET) == -1) {
        r = -errno;
        util_seterr(err, errlen, "sandbox network: new namespace: %s", strerror(errno));
        close(home);
        return r;
    }
    r = sandbox_net_setup_current(cfg, &n, err, errlen);
    if (r == 0) {
        n.ns_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        if (n.ns_fd == -1) {
            r = -errno;
            util_seterr(err, errlen, "sandbox network: keep namespace: %s", strerror(errno));
        }
    }
    if (setns(home, CLONE_NEWNET) == -1) {
        util_seterr(err, errlen, "sandbox network: back to the host namespace: %s",
                    strerror(errno));
        r = -ENOTRECOVERABLE;
    }
    close(home);
    if (r < 0) {
        sandbox_net_release(&n);
        return r;
    }
    *ret_net = n;
    return 0;
}

int sandbox_net_set_loopback_ports(const struct sandbox_net *n, const uint16_t *ports,
                                   size_t nports, char *err, size_t errlen)
{
    struct sandbox_net_config cfg = {.loopback_ports = ports, .nloopback_ports = nports};
    int home, r;

    if (nports > SANDBOX_NET_LOOPBACK_PORTS_MAX) {
        util_seterr(err, errlen, "sandbox network: more than %d loopback ports",
                    SANDBOX_NET_LOOPBACK_PORTS_MAX);
        return -E2BIG;
    }
    if (n->ns_fd < 0 || n->user_fd >= 0 || geteuid() != 0) {
        util_seterr(err, errlen,
                    "sandbox network: only a root keeper can change a namespace's rules");
        return -ENOTSUP;
    }
    home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home == -1) {
        r = -errno;
        util_seterr(err, errlen, "sandbox network: /proc/thread-self/ns/net: %s", strerror(errno));
        return r;
    }
    if (setns(n->ns_fd, CLONE_NEWNET) == -1) {
        r = -errno;
        util_seterr(err, errlen, "sandbox network: enter the namespace: %s", strerror(errno));
        close(home);
        return r;
    }
    r = install_rules(&cfg, SANDBOX_NET_PROXY_PORT, SANDBOX_NET_DNS_PORT, true, err, errlen);
    if (setns(home, CLONE_NEWNET) == -1) {
        util_seterr(err, errlen, "sandbox network: back to the host namespace: %s",
                    strerror(errno));
        r = -ENOTRECOVERABLE;
    }
    close(home);
    return r;
}

int sandbox_net_anchor(char *err, size_t errlen)
{
    struct sandbox_net_config cfg = {0};
    struct sandbox_net n;
    int r, fd;

    r = sandbox_net_create(&cfg, &n, err, errlen);
    if (r < 0)
        return r;
    fd = n.ns_fd;
    n.ns_fd = -1; /* the rules live as long as the namespace; the sockets are not needed */
    sandbox_net_release(&n);
    return fd;
}

int sandbox_net_enter(const struct sandbox_net *n)
{
    if (n->ns_fd < 0)
        return -EBADF;
    /* an unprivileged creator's namespace: join its user namespace first (we own it) */
    if (n->user_fd >= 0 && setns(n->user_fd, CLONE_NEWUSER) == -1)
        return -errno;
    return setns(n->ns_fd, CLONE_NEWNET) == -1 ? -errno : 0;
}

/* ---- handing the sockets over ------------------------------------------------------------- */

struct wire {
    uint32_t magic;
    uint8_t ipv6;
    uint8_t present[FD_COUNT];
};

#define WIRE_MAGIC 0x736e6574u /* "snet" */

int sandbox_net_send(int sock, const struct sandbox_net *n)
{
    const int fds[FD_COUNT] = {n->ns_fd,   n->proxy4_fd, n->proxy6_fd,
                               n->dns4_fd, n->dns6_fd,   n->model_fd};
    union {
        char buf[CMSG_SPACE(sizeof(int) * FD_COUNT)];
        struct cmsghdr align;
    } u;
    struct wire w = {.magic = WIRE_MAGIC, .ipv6 = n->ipv6};
    struct iovec iov = {.iov_base = &w, .iov_len = sizeof(w)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    int sent[FD_COUNT];
    size_t nfds = 0;
    ssize_t r;

    for (size_t i = 0; i < FD_COUNT; i++) {
        if (fds[i] >= 0) {
            w.present[i] = 1;
            sent[nfds++] = fds[i];
        }
    }
    memset(&u, 0, sizeof(u));
    if (nfds > 0) {
        struct cmsghdr *c;

        msg.msg_control = u.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(c), sent, sizeof(int) * nfds);
    }
    do {
        r = sendmsg(sock, &msg, MSG_NOSIGNAL);
    } while (r == -1 && errno == EINTR);
    if (r == -1)
        return -errno;
    return (size_t)r == sizeof(w) ? 0 : -EIO;
}

int sandbox_net_recv(int sock, struct sandbox_net *ret_net)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * FD_COUNT)];
        struct cmsghdr align;
    } u;
    struct wire w;
    struct iovec iov = {.iov_base = &w, .iov_len = sizeof(w)};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    struct sandbox_net n;
    int got[FD_COUNT], *slots[FD_COUNT];
    size_t ngot = 0, want = 0, used = 0;
    struct cmsghdr *c;
    ssize_t r;

    sandbox_net_init(&n);
    slots[0] = &n.ns_fd;
    slots[1] = &n.proxy4_fd;
    slots[2] = &n.proxy6_fd;
    slots[3] = &n.dns4_fd;
    slots[4] = &n.dns6_fd;
    slots[5] = &n.model_fd;
    do {
        r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    } while (r == -1 && errno == EINTR);
    if (r == -1)
        return -errno;
    for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            if (k > FD_COUNT - ngot)
                k = FD_COUNT - ngot;
            memcpy(got + ngot, CMSG_DATA(c), k * sizeof(int));
            ngot += k;
        }
    }
    if ((size_t)r == sizeof(w) && w.magic == WIRE_MAGIC && !(msg.msg_flags & MSG_CTRUNC)) {
        for (size_t i = 0; i < FD_COUNT; i++)
            want += w.present[i] ? 1 : 0;
    }
    if (want == 0 || want != ngot) {
        for (size_t i = 0; i < ngot; i++)
            close(got[i]);
        return -EPROTO;
    }
    for (size_t i = 0; i < FD_COUNT; i++) {
        if (w.present[i]) {
            *slots[i] = got[used++];
            fcntl(*slots[i], F_SETFL, fcntl(*slots[i], F_GETFL) | O_NONBLOCK);
        }
    }
    n.ipv6 = w.ipv6 != 0;
    *ret_net = n;
    return 0;
}
