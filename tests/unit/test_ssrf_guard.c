/*
 * ssrf_guard — the address table (IPv4, IPv6, IPv4 embedded in IPv6), the URL rules (https,
 * localhost names, credentials in the URL), DNS answers that point inside (a name resolving
 * to loopback, a mixed answer), the allowlist, the pin it hands out, and that errors name the
 * server and never the URL's query.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <string.h>
#include <unistd.h>

#include "suites.h"
#include "tools/ssrf_guard.h"

static bool v4(const char *s)
{
    struct in_addr a;

    CU_ASSERT_FATAL(inet_pton(AF_INET, s, &a) == 1);
    return ssrf_guard_ipv4_blocked(a.s_addr);
}

static bool v6(const char *s)
{
    struct in6_addr a;

    CU_ASSERT_FATAL(inet_pton(AF_INET6, s, &a) == 1);
    return ssrf_guard_ipv6_blocked(a.s6_addr);
}

static void test_ssrf_guard_ipv4_table(void)
{
    static const char *const blocked[] = {
        "0.0.0.0",       "10.0.0.1",      "10.255.255.255", "100.64.0.1",  "100.127.255.254",
        "127.0.0.1",     "127.255.0.9",   "169.254.169.254", "169.254.0.1", "172.16.0.1",
        "172.31.255.255", "192.0.0.8",    "192.0.2.1",      "192.168.1.1", "198.18.0.1",
        "198.19.255.255", "198.51.100.7", "203.0.113.9",    "224.0.0.1",   "239.1.2.3",
        "240.0.0.1",     "255.255.255.255"};
    static const char *const open[] = {"1.1.1.1",     "8.8.8.8",      "100.63.255.255",
                                       "100.128.0.0", "172.15.255.255", "172.32.0.0",
                                       "192.169.0.1", "198.20.0.1",   "93.184.216.34",
                                       "11.0.0.1",    "126.255.255.255", "128.0.0.1"};

    for (size_t i = 0; i < sizeof(blocked) / sizeof(blocked[0]); i++) {
        if (!v4(blocked[i]))
            fprintf(stderr, "not blocked: %s\n", blocked[i]);
        CU_ASSERT(v4(blocked[i]));
    }
    for (size_t i = 0; i < sizeof(open) / sizeof(open[0]); i++) {
        if (v4(open[i]))
            fprintf(stderr, "blocked: %s\n", open[i]);
        CU_ASSERT(!v4(open[i]));
    }
}

static void test_ssrf_guard_ipv6_table(void)
{
    static const char *const blocked[] = {
        "::",
        "::1",
        "::ffff:127.0.0.1",     /* IPv4-mapped loopback */
        "::ffff:169.254.169.254", /* IPv4-mapped metadata */
        "::ffff:10.1.2.3",
        "::10.0.0.1",           /* IPv4-compatible */
        "64:ff9b::7f00:1",      /* NAT64 of 127.0.0.1 */
        "64:ff9b:1::1",
        "100::1",
        "2001::1",              /* Teredo */
        "2001:db8::1",
        "2002:7f00:1::1",       /* 6to4 of 127.0.0.1 */
        "2002:a9fe:a9fe::1",    /* 6to4 of 169.254.169.254 */
        "fc00::1",
        "fd00:ec2::254",        /* AWS IPv6 metadata */
        "fe80::1",
        "fec0::1",
        "ff02::1",
        "3fff::1",
    };
    static const char *const open[] = {"2606:4700:4700::1111", "2a00:1450:4001:80b::200e",
                                       "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1",
                                       "2001:4860:4860::8888"};

    for (size_t i = 0; i < sizeof(blocked) / sizeof(blocked[0]); i++) {
        if (!v6(blocked[i]))
            fprintf(stderr, "not blocked: %s\n", blocked[i]);
        CU_ASSERT(v6(blocked[i]));
    }
    for (size_t i = 0; i < sizeof(open) / sizeof(open[0]); i++) {
        if (v6(open[i]))
            fprintf(stderr, "blocked: %s\n", open[i]);
        CU_ASSERT(!v6(open[i]));
    }
}

/* A resolver that answers from a fixed table: "name=addr,addr;name=addr". */
static int table_resolve(void *ctx, const char *host, struct sockaddr_storage *out, size_t max,
                         size_t *ret_n)
{
    const char *table = ctx;
    char copy[512], *save = NULL;
    size_t n = 0;

    snprintf(copy, sizeof(copy), "%s", table);
    for (char *e = strtok_r(copy, ";", &save); e; e = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(e, '='), *save2 = NULL;

        if (!eq)
            continue;
        *eq = '\0';
        if (strcmp(e, host) != 0)
            continue;
        for (char *a = strtok_r(eq + 1, ",", &save2); a && n < max;
             a = strtok_r(NULL, ",", &save2)) {
            memset(&out[n], 0, sizeof(out[n]));
            if (inet_pton(AF_INET, a, &((struct sockaddr_in *)&out[n])->sin_addr) == 1) {
                out[n].ss_family = AF_INET;
                n++;
            } else if (inet_pton(AF_INET6, a, &((struct sockaddr_in6 *)&out[n])->sin6_addr) == 1) {
                out[n].ss_family = AF_INET6;
                n++;
            }
        }
    }
    if (n == 0)
        return -EHOSTUNREACH;
    *ret_n = n;
    return 0;
}

#define DNS                                                                                    \
    "mcp.example.com=93.184.216.34;rebind.example.com=127.0.0.1;"                              \
    "mixed.example.com=93.184.216.34,10.0.0.7;meta.example.com=169.254.169.254;"               \
    "v6.example.com=2606:4700::1;mapped.example.com=::ffff:127.0.0.1;"                         \
    "internal.corp=10.1.2.3"

static int check(const char *allow, const char *url, struct ssrf_target *t, char *err,
                 size_t errlen)
{
    struct ssrf_policy p = {.allowlist = allow, .resolve = table_resolve, .resolve_ctx = DNS};

    err[0] = '\0';
    return ssrf_guard_check(&p, "github", url, t, err, errlen);
}

static void test_ssrf_guard_refusals_name_the_server(void)
{
    static const struct {
        const char *url;
        int r;
        const char *needle;
    } cases[] = {
        {"http://mcp.example.com/mcp", -EACCES, "must use https"},
        {"https://localhost/mcp", -EACCES, "loopback name"},
        {"https://LOCALHOST./mcp", -EACCES, "loopback name"},
        {"https://api.localhost/mcp", -EACCES, "loopback name"},
        {"https://127.0.0.1/mcp", -EACCES, "\"127.0.0.1\" is a loopback"},
        {"https://10.0.0.1:8443/mcp", -EACCES, "\"10.0.0.1\""},
        {"https://169.254.169.254/latest/meta-data", -EACCES, "\"169.254.169.254\""},
        {"https://[::1]/mcp", -EACCES, "\"::1\""},
        {"https://[::ffff:127.0.0.1]/mcp", -EACCES, "is a loopback"},
        {"https://[fe80::1%25eth0]/mcp", -EINVAL, "zone"},
        {"https://rebind.example.com/mcp", -EACCES, "resolves to 127.0.0.1"},
        {"https://mixed.example.com/mcp", -EACCES, "resolves to 10.0.0.7"},
        {"https://meta.example.com/mcp", -EACCES, "resolves to 169.254.169.254"},
        {"https://mapped.example.com/mcp", -EACCES, "resolves to ::ffff:127.0.0.1"},
        {"https://nowhere.example.com/mcp?token=SECRET", -EHOSTUNREACH, "could not be resolved"},
        {"https://user:pw@mcp.example.com/mcp", -EINVAL, "user:password"},
        {"ftp://mcp.example.com/mcp", -EINVAL, "must use https"},
        {"not a url", -EINVAL, "not a valid URL"},
    };
    struct ssrf_target t;
    char err[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int r = check(NULL, cases[i].url, &t, err, sizeof(err));

        if (r != cases[i].r || !strstr(err, cases[i].needle))
            fprintf(stderr, "%s: r=%d err=%s\n", cases[i].url, r, err);
        CU_ASSERT_EQUAL(r, cases[i].r);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "MCP server \"github\""));
        CU_ASSERT_PTR_NOT_NULL(strstr(err, cases[i].needle));
        CU_ASSERT_PTR_NULL(strstr(err, "SECRET"));
        CU_ASSERT_PTR_NULL(strstr(err, "pw@"));
    }
}

static void test_ssrf_guard_pins_the_checked_address(void)
{
    struct ssrf_target t;
    char err[512];

    CU_ASSERT_EQUAL(check(NULL, "https://mcp.example.com/mcp", &t, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(t.scheme, "https");
    CU_ASSERT_STRING_EQUAL(t.host, "mcp.example.com");
    CU_ASSERT_EQUAL(t.port, 443);
    CU_ASSERT_STRING_EQUAL(t.addr, "93.184.216.34");
    CU_ASSERT_STRING_EQUAL(t.resolve, "mcp.example.com:443:93.184.216.34");
    CU_ASSERT(!t.allowlisted);

    CU_ASSERT_EQUAL(check(NULL, "https://v6.example.com:8443/x", &t, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(t.resolve, "v6.example.com:8443:[2606:4700::1]");
    CU_ASSERT_EQUAL(t.port, 8443);

    /* an IP literal needs no resolve entry, only the address check */
    CU_ASSERT_EQUAL(check(NULL, "https://93.184.216.34/x", &t, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(t.resolve, "");
    CU_ASSERT_STRING_EQUAL(t.addr, "93.184.216.34");
}

static void test_ssrf_guard_allowlist(void)
{
    struct ssrf_target t;
    char err[512];

    CU_ASSERT(ssrf_guard_allowlisted(" internal.corp , 127.0.0.1,[::1]", "INTERNAL.corp"));
    CU_ASSERT(ssrf_guard_allowlisted("internal.corp,127.0.0.1,[::1]", "[::1]"));
    CU_ASSERT(ssrf_guard_allowlisted("internal.corp,127.0.0.1,::1", "[::1]"));
    CU_ASSERT(!ssrf_guard_allowlisted("internal.corp", "corp"));
    CU_ASSERT(!ssrf_guard_allowlisted("xinternal.corp", "internal.corp"));
    CU_ASSERT(!ssrf_guard_allowlisted("", "internal.corp"));
    CU_ASSERT(!ssrf_guard_allowlisted(NULL, "internal.corp"));

    CU_ASSERT_EQUAL(check("internal.corp", "http://internal.corp:8080/mcp", &t, err, sizeof(err)),
                    0);
    CU_ASSERT(t.allowlisted);
    CU_ASSERT_STRING_EQUAL(t.scheme, "http");
    CU_ASSERT_STRING_EQUAL(t.resolve, "internal.corp:8080:10.1.2.3");
    /* only the listed host is let through */
    CU_ASSERT_EQUAL(check("internal.corp", "https://rebind.example.com/", &t, err, sizeof(err)),
                    -EACCES);
}

static void test_ssrf_guard_real_resolver_localhost(void)
{
    struct ssrf_policy p = {.allowlist = NULL};
    struct ssrf_target t;
    char err[512];

    /* the system resolver: "localhost" is refused by name, its allowlisted form resolves */
    CU_ASSERT_EQUAL(ssrf_guard_check(&p, "s", "https://localhost:1/", &t, err, sizeof(err)),
                    -EACCES);
    p.allowlist = "localhost";
    CU_ASSERT_EQUAL(ssrf_guard_check(&p, "s", "http://localhost:1/", &t, err, sizeof(err)), 0);
    CU_ASSERT(strcmp(t.addr, "127.0.0.1") == 0 || strcmp(t.addr, "::1") == 0);
    /* numeric shorthands glibc accepts still land on the address table */
    p.allowlist = NULL;
    CU_ASSERT_EQUAL(ssrf_guard_check(&p, "s", "https://2130706433/", &t, err, sizeof(err)),
                    -EACCES);
    CU_ASSERT_EQUAL(ssrf_guard_check(&p, "s", "https://0x7f.1/", &t, err, sizeof(err)), -EACCES);

    /*
     * A real name that the system resolves inside (this machine's own name maps to a
     * loopback or private address in /etc/hosts on Debian and in containers): refused by
     * address, not by name. Checked against what getaddrinfo itself says.
     */
    {
        char host[256], url[300];
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
        bool inside = false;

        CU_ASSERT_EQUAL_FATAL(gethostname(host, sizeof(host)), 0);
        host[sizeof(host) - 1] = '\0';
        if (getaddrinfo(host, NULL, &hints, &res) == 0) {
            for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
                inside = inside || ssrf_guard_addr_blocked(ai->ai_addr);
            freeaddrinfo(res);
            snprintf(url, sizeof(url), "https://%s/mcp", host);
            if (inside) {
                CU_ASSERT_EQUAL(ssrf_guard_check(&p, "s", url, &t, err, sizeof(err)), -EACCES);
                CU_ASSERT_PTR_NOT_NULL(strstr(err, "resolves to"));
            } else {
                CU_ASSERT_EQUAL(ssrf_guard_check(&p, "s", url, &t, err, sizeof(err)), 0);
            }
        }
    }
}

CU_TestInfo ssrf_guard_tests[] = {
    {"test_ssrf_guard_ipv4_table", test_ssrf_guard_ipv4_table},
    {"test_ssrf_guard_ipv6_table", test_ssrf_guard_ipv6_table},
    {"test_ssrf_guard_refusals_name_the_server", test_ssrf_guard_refusals_name_the_server},
    {"test_ssrf_guard_pins_the_checked_address", test_ssrf_guard_pins_the_checked_address},
    {"test_ssrf_guard_allowlist", test_ssrf_guard_allowlist},
    {"test_ssrf_guard_real_resolver_localhost", test_ssrf_guard_real_resolver_localhost},
    CU_TEST_INFO_NULL,
};
