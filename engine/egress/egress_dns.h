/*
 * egress_dns — the sandbox's name server, run by the keeper: names resolve through the
 * runner's policy, not the sandbox's own resolver.
 *
 * sandbox_net sends every DNS datagram the sandbox emits (to 127.0.0.1:53 named in its
 * resolv.conf, or to any server it picks) to the DNS sockets this module reads. It answers
 * A and AAAA questions only (other types get an empty answer, other opcodes NOTIMP):
 *
 *   - a named endpoint's host name: its addresses (known ones, or resolved now and then added
 *     to the policy, so the proxy allows them), in every mode;
 *   - under `off`: nothing else (REFUSED) — the host's resolver is never asked, so the sandbox
 *     cannot leak data through queries for names it makes up;
 *   - under `on` / `allowlist`: resolved with the host's resolver (getaddrinfo) on a small pool
 *     of resolver threads, cached briefly, and answered with only the addresses the policy
 *     might allow (egress_policy_addr_possible): a name that resolves to the metadata service
 *     or host loopback answers empty.
 * Invalid names get REFUSED; queries beyond the pending cap get SERVFAIL at once.
 *
 * Driven by the keeper's poll loop like egress_proxy: egress_dns_fd() to poll for POLLIN,
 * egress_dns_handle() when readable, never blocking. The resolver threads start with the
 * first lookup, so a keeper that forks (and runs code other than exec in the child) must
 * do so before then. egress_dns_free() does not wait for a lookup stuck in getaddrinfo: the
 * thread finishes it and frees the shared state last.
 *
 * Ownership: the policy and the DNS sockets are borrowed (they outlive the module); answers
 * for named hosts add addresses to the policy.
 */
#ifndef AR_EGRESS_DNS_H
#define AR_EGRESS_DNS_H

#include <stddef.h>
#include <stdint.h>

#include "egress/egress_policy.h"

#define EGRESS_DNS_THREADS 2
#define EGRESS_DNS_PENDING_MAX 64 /* names being resolved at once */
#define EGRESS_DNS_WAITERS_MAX 8  /* queries waiting for the same name */
#define EGRESS_DNS_CACHE_MAX 256
#define EGRESS_DNS_TTL 30 /* seconds: cache lifetime and answer TTL */
#define EGRESS_DNS_NEGATIVE_TTL 5

struct egress_dns;

/* Why a query was refused (the name only: never anything else the sandbox sent). */
struct egress_dns_report {
    const char *name; /* presentation form; valid during the call */
    uint16_t qtype;
    int rcode; /* REFUSED (policy or bad name), SERVFAIL (overload, resolver failure) */
};

typedef void (*egress_dns_report_fn)(void *ctx, const struct egress_dns_report *r);

struct egress_dns_stats {
    uint64_t queries;
    uint64_t answered; /* NOERROR with at least one address */
    uint64_t empty;    /* NOERROR without addresses (filtered, other types) */
    uint64_t refused;
    uint64_t failed;  /* SERVFAIL, NXDOMAIN, FORMERR, NOTIMP */
    uint64_t lookups; /* getaddrinfo calls */
    uint64_t cache_hits;
};

/* sockets: sandbox_net's dns4_fd, dns6_fd (-1 entries skipped). report may be NULL. */
int egress_dns_new(struct egress_policy *policy, const int *sockets, size_t nsockets,
                   egress_dns_report_fn report, void *ctx, struct egress_dns **ret_dns);
void egress_dns_free(struct egress_dns *d);
int egress_dns_fd(const struct egress_dns *d);
void egress_dns_handle(struct egress_dns *d, int64_t now);
/* For tests: the counters above (queries, answers, refusals, lookups, cache hits). */
void egress_dns_stats(const struct egress_dns *d, struct egress_dns_stats *ret_stats);

/*
 * Blocking: resolve every named endpoint that is a host name (getaddrinfo, the host's
 * resolver) and add its addresses to the policy. For the keeper before it starts the
 * sandbox, so /etc/hosts can carry them (egress_policy_render_hosts). A name that does not
 * resolve is skipped (the sandbox's own query retries it later); returns how many did not.
 */
int egress_dns_resolve_endpoints(struct egress_policy *policy);

/*
 * The sandbox's /etc/resolv.conf: "nameserver 127.0.0.1" (the DNS socket sandbox_net made;
 * a sandbox that asks another server lands there too), no search domains. Appended to out.
 */
int egress_dns_render_resolv_conf(struct buf *out);

#endif
