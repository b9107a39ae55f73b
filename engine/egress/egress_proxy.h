/*
 * egress_proxy — the keeper's transparent TCP proxy for its sandbox (README "Network").
 *
 * sandbox_net redirects every TCP connection the sandbox opens beyond its own loopback to the
 * proxy's listening sockets inside the sandbox's namespace. For each accepted connection the
 * proxy reads the original destination (SO_ORIGINAL_DST, IPv4 and IPv6), asks the kernel of
 * the runner host whether that address is one of the host's own (a route lookup), and asks
 * egress_policy_check(). A refused connection is reset at once (the sandbox sees ECONNRESET)
 * and reported; an allowed one is connected from the host's namespace (non-blocking, with a
 * deadline) and relayed both ways through two bounded buffers, with half-closes passed on.
 *
 * Driven by the keeper's single-threaded poll loop, without threads:
 *   - egress_proxy_fd(): one fd (an epoll set) to poll for POLLIN;
 *   - egress_proxy_handle(): when it is readable (or a timeout passed) — never blocks;
 *   - egress_proxy_timeout_ms(): how long the loop may sleep at most for the proxy's sake.
 * Reports go to the callback synchronously from egress_proxy_handle(): the destination and
 * why (never payload). The callback must not call back into the proxy.
 *
 * Ownership: the policy and the listening fds are borrowed (they outlive the proxy); the
 * policy may be changed between calls (egress_dns adds the addresses of named hosts).
 * egress_proxy_free() closes every relayed connection.
 */
#ifndef AR_EGRESS_PROXY_H
#define AR_EGRESS_PROXY_H

#include <stddef.h>
#include <stdint.h>

#include "egress/egress_policy.h"

#define EGRESS_PROXY_CONNS_DEFAULT 256
#define EGRESS_PROXY_BUF_DEFAULT (32u * 1024)
#define EGRESS_PROXY_CONNECT_MS_DEFAULT 15000
#define EGRESS_PROXY_LISTEN_MAX 4

struct egress_proxy;

struct egress_proxy_config {
    size_t max_conns;       /* 0: EGRESS_PROXY_CONNS_DEFAULT; more are reset and reported */
    size_t buf_bytes;       /* per direction and busy connection (allocated when bytes come:
                             * at most 2 x max_conns x buf_bytes, 16 MiB by default);
                             * 0: EGRESS_PROXY_BUF_DEFAULT */
    int connect_timeout_ms; /* 0: EGRESS_PROXY_CONNECT_MS_DEFAULT */
    uint32_t mark;          /* SO_MARK for outbound sockets (host firewalling); 0: none */
};

enum egress_proxy_event {
    EGRESS_PROXY_DENIED = 0,     /* the policy refused: reason */
    EGRESS_PROXY_CONNECT_FAILED, /* allowed, but the destination did not answer: error */
    EGRESS_PROXY_OVERLOAD,       /* too many connections (or fds): error */
};

struct egress_proxy_report {
    enum egress_proxy_event event;
    struct egress_addr dst; /* valid when has_dst */
    uint16_t port;
    bool has_dst;
    enum egress_reason reason; /* DENIED: why; CONNECT_FAILED, OVERLOAD: why it was allowed */
    int error;                 /* -errno for CONNECT_FAILED and OVERLOAD */
};

typedef void (*egress_proxy_report_fn)(void *ctx, const struct egress_proxy_report *r);

struct egress_proxy_stats {
    uint64_t accepted;
    uint64_t allowed;
    uint64_t denied;
    uint64_t connect_failed;
    uint64_t overload;
    uint64_t bytes_out; /* sandbox -> destination */
    uint64_t bytes_in;  /* destination -> sandbox */
    size_t active;
};

/*
 * listen_fds: the proxy's listening sockets (sandbox_net's proxy4_fd, proxy6_fd; -1 entries
 * are skipped). cfg may be NULL (defaults). report may be NULL.
 */
int egress_proxy_new(const struct egress_policy *policy, const int *listen_fds, size_t nfds,
                     const struct egress_proxy_config *cfg, egress_proxy_report_fn report,
                     void *ctx, struct egress_proxy **ret_proxy);
void egress_proxy_free(struct egress_proxy *p);

int egress_proxy_fd(const struct egress_proxy *p);
/* Accept, decide, connect, relay, expire: whatever is ready now. now is util_now_ms(). */
void egress_proxy_handle(struct egress_proxy *p, int64_t now);
/* Milliseconds until the next deadline (>= 0), or -1 when there is none. */
int egress_proxy_timeout_ms(const struct egress_proxy *p, int64_t now);
/* For tests: the counters above (connections allowed, denied, shed; bytes each way). */
void egress_proxy_stats(const struct egress_proxy *p, struct egress_proxy_stats *ret_stats);

#endif
