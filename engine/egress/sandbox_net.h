/*
 * sandbox_net — a sandbox's own network namespace, wired so that every way out leads to the
 * keeper (README "Network").
 *
 * The namespace has only `lo` (up, 127.0.0.1 and ::1) with default routes through it, and an
 * nf_tables table `agent_runner` (family inet, installed over netlink in one batch) hooked on
 * output:
 *
 *   nat (priority -100):
 *     tcp to 127.0.0.1 / ::1 on a "loopback port" (a named endpoint on host loopback)
 *                                                  -> redirect to the proxy port
 *     anything else to 127.0.0.1 / ::1             -> stays inside (the sandbox's own loopback)
 *     any other tcp (public, private, 127.0.0.2, 169.254.169.254, ...)
 *                                                  -> redirect to the proxy port
 *     udp to port 53 anywhere                      -> redirect to the DNS port
 *   filter (priority 0): to 127.0.0.1 / ::1 accept; other tcp: reset; anything else (udp,
 *     icmp, other protocols): reject (administratively prohibited), so it fails at once.
 *
 * The proxy's listening sockets (TCP 127.0.0.1:<proxy>, [::1]:<proxy>), the DNS sockets
 * (UDP 127.0.0.1:<dns>, [::1]:<dns>) and the model gateway's (TCP 127.0.0.1:1001, reached
 * directly on the sandbox's own loopback) are created inside the namespace and returned: the
 * keeper reads them from its own (host) namespace, reads SO_ORIGINAL_DST of each accepted
 * connection, and decides (egress_proxy, egress_dns). Nothing on the host can connect in: the
 * namespace has no interface but its loopback.
 *
 * The namespace belongs to the user namespace of its creator (the host's, when the keeper runs
 * as root), so a sandbox started in it by bubblewrap (`--unshare-all --share-net`, its own
 * user namespace, all capabilities dropped) holds no CAP_NET_ADMIN over it and cannot change
 * the rules, bind the privileged ports, or open raw sockets. Abstract unix sockets are per
 * network namespace too: the host's are out of reach.
 *
 * Needs CAP_SYS_ADMIN and CAP_NET_ADMIN (root) and a kernel with nf_tables, nft_nat, nft_redir
 * and nft_reject_inet. Fails closed: any step that fails fails the whole setup.
 *
 * A creator that is not root (a runner started as an ordinary user) gets the same namespace
 * from a helper child that makes a user namespace of its own (the runner's uid and gid mapped
 * to themselves, so it holds CAP_NET_ADMIN there) owning the new network namespace; both come
 * back (user_fd, ns_fd) and sandbox_net_enter joins the user namespace first. The sandbox's
 * own user namespace (bubblewrap's) nests inside it, without capabilities over the network.
 */
#ifndef AR_SANDBOX_NET_H
#define AR_SANDBOX_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Privileged ports: the sandbox (unprivileged in its namespace) could not bind them anyway. */
#define SANDBOX_NET_PROXY_PORT 1000
#define SANDBOX_NET_DNS_PORT 53
/* the model gateway's listener (gateway/model_gateway.h): GATEWAY_SANDBOX_ORIGIN */
#define SANDBOX_NET_MODEL_PORT 1001
#define SANDBOX_NET_LOOPBACK_PORTS_MAX 64
#define SANDBOX_NET_TABLE "agent_runner"

struct sandbox_net_config {
    uint16_t proxy_port; /* 0: SANDBOX_NET_PROXY_PORT */
    uint16_t dns_port;   /* 0: SANDBOX_NET_DNS_PORT */
    /* ports of named endpoints on 127.0.0.1 / ::1 (egress_policy_loopback_ports) */
    const uint16_t *loopback_ports;
    size_t nloopback_ports;
};

/* Every fd is close-on-exec and non-blocking; -1 when absent. */
struct sandbox_net {
    int ns_fd;     /* the namespace: setns(ns_fd, CLONE_NEWNET) enters it */
    int proxy4_fd; /* listening TCP 127.0.0.1:proxy_port */
    int proxy6_fd; /* listening TCP [::1]:proxy_port (-1 when the kernel has no IPv6) */
    int dns4_fd;   /* UDP 127.0.0.1:dns_port */
    int dns6_fd;   /* UDP [::1]:dns_port (-1 without IPv6) */
    int model_fd;  /* listening TCP 127.0.0.1:SANDBOX_NET_MODEL_PORT: the model gateway's end
                    * in the sandbox (a connection to it stays on the sandbox's loopback) */
    int user_fd;   /* the user namespace owning ns_fd when the creator is not root, else -1 */
    bool ipv6;
};

/*
 * Replace the namespace's rules (one nf_tables batch: the table never goes missing) so that
 * exactly `ports` on 127.0.0.1 / ::1 reach the proxy: a spare's claim (spare.h). Root keepers
 * only (-ENOTSUP otherwise); -ENOTRECOVERABLE when the thread could not return to its own
 * namespace (the process must exit).
 */
int sandbox_net_set_loopback_ports(const struct sandbox_net *n, const uint16_t *ports,
                                   size_t nports, char *err, size_t errlen);
/* All fds -1. */
void sandbox_net_init(struct sandbox_net *n);
/* Close every fd; the namespace goes when its last process and socket are gone. */
void sandbox_net_release(struct sandbox_net *n);

/*
 * Create a new network namespace, set it up, keep it (ns_fd) and the sockets, and return the
 * calling thread to the namespace it was in. Call from the keeper before it starts the
 * sandbox; the sandbox's child process then calls sandbox_net_enter() before exec'ing bwrap.
 * -ENOTRECOVERABLE: the thread could not get back to its own namespace (exit the process).
 */
int sandbox_net_create(const struct sandbox_net_config *cfg, struct sandbox_net *ret_net, char *err,
                       size_t errlen);

/*
 * An idle namespace with the same rules, kept by a long-lived process (the master) for as
 * long as it runs: returns its fd (close it to let it go). Without one, the first sandbox to
 * start after none was running switches the kernel's netfilter hooks on system-wide and the
 * last one to end switches them off again (code patching across CPUs): measured here, that
 * makes sandbox_net_create cost 7-9 ms of CPU instead of about 1 ms.
 */
int sandbox_net_anchor(char *err, size_t errlen);

/*
 * In a forked child before exec: move into the namespace (and, for an unprivileged creator,
 * its user namespace first). Async-signal-safe; -errno.
 */
int sandbox_net_enter(const struct sandbox_net *n);

/*
 * Hand the sockets (and ns_fd when set) over a unix socket (SCM_RIGHTS) and take them on the
 * other side; the sender keeps its copies (release them after). For the child variant.
 */
int sandbox_net_send(int sock, const struct sandbox_net *n);
int sandbox_net_recv(int sock, struct sandbox_net *ret_net);

#endif
