/*
 * ssrf_guard — may the runner send a request (carrying a user's credential) to this URL?
 * reference/agenta-runner.md §3.22, for user MCP servers.
 *
 * The runner attaches MCP header credentials to requests it makes itself, from the host
 * network, so an author-supplied URL must never reach the host's own services, the private
 * network or a cloud metadata endpoint. A URL passes when:
 *   - it parses (with libcurl's own URL parser: the same parser the connection uses, so the
 *     check and the connect cannot disagree about the host) as https with a host, without
 *     user:password and without an IPv6 zone;
 *   - the host is not "localhost" or "*.localhost";
 *   - every address the host resolves to (resolved once, here) is outside the blocked ranges:
 *     unspecified, loopback, private (10/8, 172.16/12, 192.168/16, fc00::/7), shared
 *     100.64/10, link-local (169.254/16 with the 169.254.169.254 metadata address, fe80::/10),
 *     IETF/documentation/benchmark/reserved blocks, multicast, broadcast; IPv6 forms that embed
 *     an IPv4 address (mapped ::ffff:a.b.c.d, compatible ::a.b.c.d, NAT64 64:ff9b::/96, 6to4
 *     2002::/16) are judged by that IPv4 address.
 * A host listed in the allowlist (AGENT_RUNNER_MCP_HOST_ALLOWLIST: comma-separated host names
 * or addresses, compared case-insensitively, IPv6 with or without brackets) skips the https
 * and address rules; it is still resolved once and pinned.
 *
 * The result carries the address to pin: the caller hands `resolve` to CURLOPT_RESOLVE and
 * `addr` to tool_http's pin check, so a DNS answer that changes after the check (rebinding)
 * is never used.
 *
 * Errors name the server and the host, never the full URL (a query string may hold a token):
 * -EINVAL for a URL that does not parse, -EACCES for a refused one, -EHOSTUNREACH when the
 * host does not resolve.
 */
#ifndef AR_SSRF_GUARD_H
#define AR_SSRF_GUARD_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define SSRF_ADDRS_MAX 32

/* Resolve host to at most max addresses (ports ignored); 0 and *ret_n >= 1, or -errno. */
typedef int (*ssrf_resolve_fn)(void *ctx, const char *host, struct sockaddr_storage *out,
                               size_t max, size_t *ret_n);

struct ssrf_policy {
    const char *allowlist;     /* comma-separated hosts or NULL */
    ssrf_resolve_fn resolve;   /* NULL = getaddrinfo(3) */
    void *resolve_ctx;
};

struct ssrf_target {
    char scheme[8];            /* "https" (or "http" for an allowlisted host) */
    char host[256];            /* as in the URL, brackets stripped */
    unsigned port;
    bool allowlisted;
    char addr[46];             /* the address to connect to (INET6_ADDRSTRLEN) */
    char resolve[320];         /* "host:port:addr" for CURLOPT_RESOLVE; "" for an IP literal */
};

int ssrf_guard_check(const struct ssrf_policy *p, const char *server_name, const char *url,
                     struct ssrf_target *ret, char *err, size_t errlen);

/* The address rules alone (addr in network byte order / 16 raw bytes). */
bool ssrf_guard_ipv4_blocked(uint32_t addr_be);
bool ssrf_guard_ipv6_blocked(const uint8_t addr[16]);
bool ssrf_guard_addr_blocked(const struct sockaddr *sa);
/* host (brackets allowed) is on the comma-separated allowlist. */
bool ssrf_guard_allowlisted(const char *allowlist, const char *host);

#endif
