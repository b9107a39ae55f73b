#include "tools/ssrf_guard.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "base/util.h"

/* IPv4 blocks as (network, prefix length); the address is in host byte order here. */
static const struct {
    uint32_t net;
    unsigned len;
} v4_blocked[] = {
    {0x00000000u, 8},  /* 0.0.0.0/8 "this network" */
    {0x0a000000u, 8},  /* 10/8 private */
    {0x64400000u, 10}, /* 100.64/10 shared address space (carrier NAT, some metadata) */
    {0x7f000000u, 8},  /* 127/8 loopback */
    {0xa9fe0000u, 16}, /* 169.254/16 link-local, 169.254.169.254 metadata */
    {0xac100000u, 12}, /* 172.16/12 private */
    {0xc0000000u, 24}, /* 192.0.0/24 IETF protocol assignments */
    {0xc0000200u, 24}, /* 192.0.2/24 documentation */
    {0xc0586300u, 24}, /* 192.88.99/24 6to4 relay anycast */
    {0xc0a80000u, 16}, /* 192.168/16 private */
    {0xc6120000u, 15}, /* 198.18/15 benchmarking */
    {0xc6336400u, 24}, /* 198.51.100/24 documentation */
    {0xcb007100u, 24}, /* 203.0.113/24 documentation */
    {0xe0000000u, 4},  /* 224/4 multicast */
    {0xf0000000u, 4},  /* 240/4 reserved, 255.255.255.255 broadcast */
};

bool ssrf_guard_ipv4_blocked(uint32_t addr_be)
{
    uint32_t a = ntohl(addr_be);

    for (size_t i = 0; i < ARRAY_SIZE(v4_blocked); i++) {
        uint32_t mask = v4_blocked[i].len ? ~0u << (32 - v4_blocked[i].len) : 0;

        if ((a & mask) == v4_blocked[i].net)
            return true;
    }
    return false;
}

static uint32_t v4_at(const uint8_t *p)
{
    uint32_t be;

    memcpy(&be, p, 4);
    return be;
}

static bool zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

bool ssrf_guard_ipv6_blocked(const uint8_t a[16])
{
    static const uint8_t nat64[12] = {0x00, 0x64, 0xff, 0x9b};

    if (zero(a, 15) && (a[15] == 0 || a[15] == 1))
        return true; /* :: unspecified, ::1 loopback */
    if (zero(a, 10) && a[10] == 0xff && a[11] == 0xff)
        return ssrf_guard_ipv4_blocked(v4_at(a + 12)); /* ::ffff:a.b.c.d mapped */
    if (zero(a, 12))
        return ssrf_guard_ipv4_blocked(v4_at(a + 12)); /* ::a.b.c.d compatible */
    if (memcmp(a, nat64, 12) == 0)
        return ssrf_guard_ipv4_blocked(v4_at(a + 12)); /* 64:ff9b::/96 NAT64 */
    if (a[0] == 0x00 && a[1] == 0x64 && a[2] == 0xff && a[3] == 0x9b && a[4] == 0 && a[5] == 1)
        return true; /* 64:ff9b:1::/48 local-use NAT64 */
    if (a[0] == 0x01 && a[1] == 0x00 && zero(a + 2, 6))
        return true; /* 100::/64 discard-only */
    if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x00 && a[3] < 0x02)
        return true; /* 2001::/23 IETF protocol assignments (Teredo 2001::/32 included) */
    if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0d && a[3] == 0xb8)
        return true; /* 2001:db8::/32 documentation */
    if (a[0] == 0x20 && a[1] == 0x02)
        return ssrf_guard_ipv4_blocked(v4_at(a + 2)); /* 2002::/16 6to4 */
    if (a[0] == 0x3f && a[1] == 0xff && (a[2] & 0xf0) == 0x00)
        return true; /* 3fff::/20 documentation */
    if ((a[0] & 0xfe) == 0xfc)
        return true; /* fc00::/7 unique local */
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
        return true; /* fe80::/10 link-local */
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0)
        return true; /* fec0::/10 site-local (deprecated) */
    if (a[0] == 0xff)
        return true; /* ff00::/8 multicast */
    return false;
}

bool ssrf_guard_addr_blocked(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ssrf_guard_ipv4_blocked(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
    if (sa->sa_family == AF_INET6)
        return ssrf_guard_ipv6_blocked(((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr);
    return true; /* anything else is not a network address we connect to */
}

/* host without brackets and one trailing dot, lower-cased, into out; false when too long. */
static bool bare_host(const char *host, size_t n, char *out, size_t outlen)
{
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
        host++;
        n -= 2;
    }
    if (n > 1 && host[n - 1] == '.')
        n--;
    if (n == 0 || n >= outlen)
        return false;
    for (size_t i = 0; i < n; i++)
        out[i] = (char)tolower((unsigned char)host[i]);
    out[n] = '\0';
    return true;
}

bool ssrf_guard_allowlisted(const char *allowlist, const char *host)
{
    char want[256], entry[256];
    const char *p = allowlist;

    if (!allowlist || !bare_host(host, strlen(host), want, sizeof(want)))
        return false;
    while (*p) {
        const char *end = p + strcspn(p, ",");
        const char *a = p, *b = end;

        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        if (b > a && bare_host(a, (size_t)(b - a), entry, sizeof(entry)) &&
            strcmp(entry, want) == 0)
            return true;
        p = *end ? end + 1 : end;
    }
    return false;
}

static int resolve_default(void *ctx, const char *host, struct sockaddr_storage *out, size_t max,
                           size_t *ret_n)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
    size_t n = 0;
    int r;

    (void)ctx;
    r = getaddrinfo(host, NULL, &hints, &res);
    if (r != 0)
        return r == EAI_MEMORY ? -ENOMEM : -EHOSTUNREACH;
    for (ai = res; ai && n < max; ai = ai->ai_next) {
        if (ai->ai_addrlen > sizeof(*out))
            continue;
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
            continue;
        memset(&out[n], 0, sizeof(out[n]));
        memcpy(&out[n], ai->ai_addr, ai->ai_addrlen);
        n++;
    }
    freeaddrinfo(res);
    if (n == 0)
        return -EHOSTUNREACH;
    *ret_n = n;
    return 0;
}

static void addr_text(const struct sockaddr_storage *ss, char *out, size_t outlen)
{
    const void *a = ss->ss_family == AF_INET
                        ? (const void *)&((const struct sockaddr_in *)ss)->sin_addr
                        : (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr;

    if (!inet_ntop(ss->ss_family, a, out, (socklen_t)outlen))
        snprintf(out, outlen, "?");
}

/* An IP literal host: its one address into *ss (no resolver involved); false for a name. */
static bool literal_addr(const char *host, struct sockaddr_storage *ss)
{
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;

    memset(ss, 0, sizeof(*ss));
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        return true;
    }
    return false;
}

/* Split url with libcurl's parser into t's scheme, host and port. */
static int parse(const char *name, const char *url, struct ssrf_target *t, char *err,
                 size_t errlen)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL, *user = NULL, *zone = NULL;
    uint64_t port_num;
    int r = -EINVAL;

    if (!u)
        return -ENOMEM;
    if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK) {
        snprintf(err, errlen, "MCP server \"%s\": url is not a valid URL", name);
        goto out;
    }
    if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK) {
        snprintf(err, errlen, "MCP server \"%s\": url must not carry user:password", name);
        goto out;
    }
    if (curl_url_get(u, CURLUPART_ZONEID, &zone, 0) == CURLUE_OK) {
        snprintf(err, errlen, "MCP server \"%s\": url must not carry an IPv6 zone", name);
        goto out;
    }
    if (strcasecmp(scheme, "https") != 0 && strcasecmp(scheme, "http") != 0) {
        snprintf(err, errlen, "MCP server \"%s\": url must use https", name);
        goto out;
    }
    for (const char *p = host; *p; p++) {
        if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f) {
            snprintf(err, errlen, "MCP server \"%s\": url host must be ASCII (use punycode)",
                     name);
            goto out;
        }
    }
    if (!bare_host(host, strlen(host), t->host, sizeof(t->host)) ||
        util_parse_u64(port, 1, 65535, &port_num) < 0) {
        snprintf(err, errlen, "MCP server \"%s\": url is not a valid URL", name);
        goto out;
    }
    snprintf(t->scheme, sizeof(t->scheme), "%s", strcasecmp(scheme, "https") == 0 ? "https"
                                                                                    : "http");
    t->port = (unsigned)port_num;
    r = 0;
out:
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(user);
    curl_free(zone);
    curl_url_cleanup(u);
    return r;
}

static bool localhost_name(const char *host)
{
    size_t n = strlen(host);

    return strcmp(host, "localhost") == 0 ||
           (n > 10 && strcmp(host + n - 10, ".localhost") == 0);
}

int ssrf_guard_check(const struct ssrf_policy *p, const char *server_name, const char *url,
                     struct ssrf_target *ret, char *err, size_t errlen)
{
    struct sockaddr_storage addrs[SSRF_ADDRS_MAX];
    struct ssrf_target t;
    const char *name = server_name ? server_name : "?";
    ssrf_resolve_fn resolve = p && p->resolve ? p->resolve : resolve_default;
    bool literal;
    size_t n = 0;
    int r;

    memset(&t, 0, sizeof(t));
    if (!url) {
        snprintf(err, errlen, "MCP server \"%s\": url is required", name);
        return -EINVAL;
    }
    r = parse(name, url, &t, err, errlen);
    if (r < 0)
        return r;
    t.allowlisted = ssrf_guard_allowlisted(p ? p->allowlist : NULL, t.host);
    if (!t.allowlisted) {
        if (strcmp(t.scheme, "https") != 0) {
            snprintf(err, errlen,
                     "MCP server \"%s\": url must use https (host \"%s\" is not in "
                     "AGENT_RUNNER_MCP_HOST_ALLOWLIST)",
                     name, t.host);
            return -EACCES;
        }
        if (localhost_name(t.host)) {
            snprintf(err, errlen,
                     "MCP server \"%s\": host \"%s\" is a loopback name; not allowed", name,
                     t.host);
            return -EACCES;
        }
    }
    literal = literal_addr(t.host, &addrs[0]);
    if (literal)
        n = 1;
    else
        r = resolve(p ? p->resolve_ctx : NULL, t.host, addrs, SSRF_ADDRS_MAX, &n);
    if (r < 0 || n == 0) {
        snprintf(err, errlen, "MCP server \"%s\": host \"%s\" could not be resolved", name,
                 t.host);
        return r == -ENOMEM ? -ENOMEM : -EHOSTUNREACH;
    }
    for (size_t i = 0; !t.allowlisted && i < n; i++) {
        if (ssrf_guard_addr_blocked((const struct sockaddr *)&addrs[i])) {
            char a[46];

            addr_text(&addrs[i], a, sizeof(a));
            if (literal)
                snprintf(err, errlen,
                         "MCP server \"%s\": host \"%s\" is a loopback, private, link-local or "
                         "metadata address; not allowed",
                         name, t.host);
            else
                snprintf(err, errlen,
                         "MCP server \"%s\": host \"%s\" resolves to %s, a loopback, private, "
                         "link-local or metadata address; not allowed",
                         name, t.host, a);
            return -EACCES;
        }
    }
    addr_text(&addrs[0], t.addr, sizeof(t.addr));
    if (!literal) {
        bool v6 = addrs[0].ss_family == AF_INET6;

        snprintf(t.resolve, sizeof(t.resolve), v6 ? "%s:%u:[%s]" : "%s:%u:%s", t.host, t.port,
                 t.addr);
    }
    *ret = t;
    return 0;
}
