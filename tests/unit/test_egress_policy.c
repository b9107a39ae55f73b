/*
 * egress_policy — address classes, the CIDR parser and the per-mode decision, table-driven.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "egress/egress_policy.h"
#include "suites.h"

static struct egress_addr A(const char *s) {
    struct egress_addr a = {0};

    if (egress_addr_parse(s, &a) < 0)
        fprintf(stderr, "test: bad address literal %s\n", s);
    return a;
}

static void
test_egress_policy_classes(void)
{
    static const struct {
        const char *addr;
        enum egress_class cls;
    } cases[] = {
        {"8.8.8.8", EGRESS_CLASS_PUBLIC},
        {"1.1.1.1", EGRESS_CLASS_PUBLIC},
        {"172.32.0.1", EGRESS_CLASS_PUBLIC},
        {"100.128.0.1", EGRESS_CLASS_PUBLIC},
        {"0.0.0.0", EGRESS_CLASS_UNSPECIFIED},
        {"0.1.2.3", EGRESS_CLASS_UNSPECIFIED},
        {"127.0.0.1", EGRESS_CLASS_LOOPBACK},
        {"127.255.0.9", EGRESS_CLASS_LOOPBACK},
        {"169.254.169.254", EGRESS_CLASS_METADATA},
        {"169.254.170.2", EGRESS_CLASS_METADATA},
        {"100.100.100.200", EGRESS_CLASS_METADATA},
        {"192.0.0.192", EGRESS_CLASS_METADATA},
        {"169.254.1.1", EGRESS_CLASS_LINK_LOCAL},
        {"10.1.2.3", EGRESS_CLASS_PRIVATE},
        {"172.16.0.1", EGRESS_CLASS_PRIVATE},
        {"172.31.255.255", EGRESS_CLASS_PRIVATE},
        {"192.168.1.1", EGRESS_CLASS_PRIVATE},
        {"100.64.0.1", EGRESS_CLASS_PRIVATE},
        {"100.127.255.255", EGRESS_CLASS_PRIVATE},
        {"198.18.0.1", EGRESS_CLASS_RESERVED},
        {"192.0.2.7", EGRESS_CLASS_RESERVED},
        {"203.0.113.9", EGRESS_CLASS_RESERVED},
        {"240.0.0.1", EGRESS_CLASS_RESERVED},
        {"224.0.0.1", EGRESS_CLASS_MULTICAST},
        {"239.255.255.250", EGRESS_CLASS_MULTICAST},
        {"255.255.255.255", EGRESS_CLASS_MULTICAST},
        {"2606:4700::1111", EGRESS_CLASS_PUBLIC},
        {"::", EGRESS_CLASS_UNSPECIFIED},
        {"::1", EGRESS_CLASS_LOOPBACK},
        {"::ffff:127.0.0.1", EGRESS_CLASS_LOOPBACK}, /* mapped: judged as IPv4 */
        {"::ffff:169.254.169.254", EGRESS_CLASS_METADATA},
        {"::ffff:8.8.8.8", EGRESS_CLASS_PUBLIC},
        {"::127.0.0.1", EGRESS_CLASS_RESERVED},        /* IPv4-compatible, deprecated */
        {"64:ff9b::a9fe:a9fe", EGRESS_CLASS_METADATA}, /* NAT64 of 169.254.169.254 */
        {"64:ff9b::7f00:1", EGRESS_CLASS_LOOPBACK},
        {"64:ff9b::808:808", EGRESS_CLASS_PUBLIC},
        {"64:ff9b:1::1", EGRESS_CLASS_PRIVATE},
        {"2002:a00:1::1", EGRESS_CLASS_PRIVATE}, /* 6to4 of 10.0.0.1 */
        {"2002:808:808::1", EGRESS_CLASS_PUBLIC},
        {"fd00:ec2::254", EGRESS_CLASS_METADATA},
        {"fd12:3456::1", EGRESS_CLASS_PRIVATE},
        {"fc00::1", EGRESS_CLASS_PRIVATE},
        {"fe80::1", EGRESS_CLASS_LINK_LOCAL},
        {"febf::1", EGRESS_CLASS_LINK_LOCAL},
        {"fec0::1", EGRESS_CLASS_PRIVATE},
        {"ff02::1", EGRESS_CLASS_MULTICAST},
        {"2001:db8::1", EGRESS_CLASS_RESERVED},
        {"2001::1", EGRESS_CLASS_RESERVED}, /* Teredo */
        {"3fff::1", EGRESS_CLASS_RESERVED},
        {"100::1", EGRESS_CLASS_RESERVED},
        {"4000::1", EGRESS_CLASS_RESERVED}, /* outside global unicast */
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct egress_addr a = A(cases[i].addr);
        enum egress_class got = egress_addr_class(&a, false);

        if (got != cases[i].cls)
            fprintf(stderr, "class of %s: got %d want %d\n", cases[i].addr, (int)got,
                    (int)cases[i].cls);
        CU_ASSERT_EQUAL(got, cases[i].cls);
    }
    /* a host address: public, private and reserved ones become "runner-host"; others keep */
    {
        struct egress_addr pub = A("8.8.4.4"), priv = A("10.0.0.5"), lo = A("127.0.0.1");
        struct egress_addr ll = A("169.254.169.254");

        CU_ASSERT_EQUAL(egress_addr_class(&pub, true), EGRESS_CLASS_HOST);
        CU_ASSERT_EQUAL(egress_addr_class(&priv, true), EGRESS_CLASS_HOST);
        CU_ASSERT_EQUAL(egress_addr_class(&lo, true), EGRESS_CLASS_LOOPBACK);
        CU_ASSERT_EQUAL(egress_addr_class(&ll, true), EGRESS_CLASS_METADATA);
    }
}

static void test_egress_policy_cidr_parse(void)
{
    static const struct {
        const char *in;
        const char *net; /* NULL: must fail */
        unsigned prefix;
        const char *err; /* a piece of the message */
    } cases[] = {
        {"10.0.0.0/8", "10.0.0.0", 8, NULL},
        {"10.1.2.3", "10.1.2.3", 32, NULL},
        {"0.0.0.0/0", "0.0.0.0", 0, NULL},
        {"127.0.0.2/32", "127.0.0.2", 32, NULL},
        {"2001:db8::/32", "2001:db8::", 32, NULL},
        {"::/0", "::", 0, NULL},
        {"fe80::1", "fe80::1", 128, NULL},
        {"", NULL, 0, "empty"},
        {"10.0.0.1/8", NULL, 0, "host bits set (the range is 10.0.0.0/8)"},
        {"2001:db8::1/32", NULL, 0, "host bits set (the range is 2001:db8::/32)"},
        {"10.0.0.0/33", NULL, 0, "prefix length must be 0-32"},
        {"::/129", NULL, 0, "prefix length must be 0-128"},
        {"10.0.0.0/", NULL, 0, "prefix length"},
        {"10.0.0.0/08", NULL, 0, "prefix length"},
        {"10.0.0.0/+8", NULL, 0, "prefix length"},
        {"10.0.0.0/8/8", NULL, 0, "prefix length"},
        {"10.0.0.0/ 8", NULL, 0, "prefix length"},
        {"10.0.0.300/8", NULL, 0, "\"10.0.0.300\" is not an IPv4 or IPv6 address"},
        {"010.0.0.0/8", NULL, 0, "not an IPv4 or IPv6 address"},
        {"10.0.0/8", NULL, 0, "not an IPv4 or IPv6 address"},
        {" 10.0.0.0/8", NULL, 0, "not an IPv4 or IPv6 address"},
        {"example.com", NULL, 0, "not an IPv4 or IPv6 address"},
        {"fe80::1%eth0", NULL, 0, "zone ids"},
        {"::ffff:10.0.0.0/104", NULL, 0, "IPv4-mapped"},
        {"1111111111111111111111111111111111111111111111111111111111111111/8", NULL, 0,
         "longer than"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct egress_cidr c;
        char err[160] = "", text[EGRESS_ADDR_TEXT_MAX];
        int r = egress_cidr_parse(cases[i].in, &c, err, sizeof(err));

        if (cases[i].net) {
            CU_ASSERT_EQUAL(r, 0);
            if (r == 0) {
                egress_addr_format(&c.net, text);
                CU_ASSERT_STRING_EQUAL(text, cases[i].net);
                CU_ASSERT_EQUAL(c.prefix, cases[i].prefix);
            }
        } else {
            CU_ASSERT_EQUAL(r, -EINVAL);
            if (!strstr(err, cases[i].err))
                fprintf(stderr, "cidr \"%s\": message \"%s\" lacks \"%s\"\n", cases[i].in, err,
                        cases[i].err);
            CU_ASSERT_PTR_NOT_NULL(strstr(err, cases[i].err));
        }
    }
}

static void test_egress_policy_host_names(void)
{
    char out[EGRESS_HOST_MAX + 1], long_label[80], long_name[300];

    CU_ASSERT_EQUAL(egress_host_normalize("API.Example.COM.", out), 0);
    CU_ASSERT_STRING_EQUAL(out, "api.example.com");
    CU_ASSERT_EQUAL(egress_host_normalize("my_host-1.internal", out), 0);
    CU_ASSERT_EQUAL(egress_host_normalize("localhost", out), 0);
    CU_ASSERT_EQUAL(egress_host_normalize("", out), -EINVAL);
    CU_ASSERT_EQUAL(egress_host_normalize(".", out), -EINVAL);
    CU_ASSERT_EQUAL(egress_host_normalize("a..b", out), -EINVAL);
    CU_ASSERT_EQUAL(egress_host_normalize(".a", out), -EINVAL);
    CU_ASSERT_EQUAL(egress_host_normalize("a b", out), -EINVAL);
    CU_ASSERT_EQUAL(egress_host_normalize("a/b", out), -EINVAL);
    /* numeric last labels are IPv4 addresses to inet_aton-style resolvers */
    CU_ASSERT_EQUAL(egress_host_normalize("2130706433", out), -EINVAL);
    CU_ASSERT_EQUAL(egress_host_normalize("127.1", out), -EINVAL);
    CU_ASSERT_EQUAL(egress_host_normalize("0x7f.1", out), -EINVAL);
    CU_ASSERT_EQUAL(egress_host_normalize("foo.0x7f", out), -EINVAL);
    CU_ASSERT_EQUAL(egress_host_normalize("1.2.3.example", out), 0);
    memset(long_label, 'a', 64);
    long_label[64] = '\0';
    CU_ASSERT_EQUAL(egress_host_normalize(long_label, out), -EINVAL);
    long_label[63] = '\0';
    CU_ASSERT_EQUAL(egress_host_normalize(long_label, out), 0);
    for (size_t i = 0; i < 254; i++)
        long_name[i] = (i % 10 == 9) ? '.' : 'a';
    long_name[254] = '\0';
    CU_ASSERT_EQUAL(egress_host_normalize(long_name, out), -EINVAL);
}

struct decision_case {
    const char *addr;
    uint16_t port;
    bool host_local;
    enum egress_reason want;
};

static void run_cases(const struct egress_policy *p, const char *label,
                      const struct decision_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct egress_addr a = A(cases[i].addr);
        enum egress_reason got = EGRESS_DENY_OFF;
        bool allow = egress_policy_check(p, &a, cases[i].port, cases[i].host_local, &got);

        if (got != cases[i].want)
            fprintf(stderr, "%s: %s port %u%s: got %s want %s\n", label, cases[i].addr,
                    (unsigned)cases[i].port, cases[i].host_local ? " (host)" : "",
                    egress_reason_name(got), egress_reason_name(cases[i].want));
        CU_ASSERT_EQUAL(got, cases[i].want);
        CU_ASSERT_EQUAL(allow, egress_reason_allows(cases[i].want));
    }
}

static void named(struct egress_policy *p)
{
    CU_ASSERT_EQUAL(egress_policy_add_url(p, "http://127.0.0.1:18080/v1", NULL, 0), 0);
    CU_ASSERT_EQUAL(egress_policy_add_endpoint(p, "[::1]", 18080, NULL, 0), 0);
    CU_ASSERT_EQUAL(egress_policy_add_endpoint(p, "10.9.9.9", 443, NULL, 0), 0);
    CU_ASSERT_EQUAL(egress_policy_add_endpoint(p, "169.254.169.254", 80, NULL, 0), 0);
    CU_ASSERT_EQUAL(egress_policy_add_runner_port(p, 8443), 0);
    CU_ASSERT_EQUAL(egress_policy_add_runner_port(p, 18080), 0); /* named wins */
}

static const struct decision_case always[] = {
    /* named endpoints: exactly their (address, port) */
    {"127.0.0.1", 18080, false, EGRESS_ALLOW_NAMED},
    {"::ffff:127.0.0.1", 18080, false, EGRESS_ALLOW_NAMED},
    {"::1", 18080, false, EGRESS_ALLOW_NAMED},
    {"10.9.9.9", 443, false, EGRESS_ALLOW_NAMED},
    {"169.254.169.254", 80, false, EGRESS_ALLOW_NAMED},
    {"10.9.9.9", 443, true, EGRESS_ALLOW_NAMED},
    /* never, whatever the mode */
    {"127.0.0.1", 8443, false, EGRESS_DENY_RUNNER_PORT},
    {"127.0.0.2", 8443, false, EGRESS_DENY_RUNNER_PORT},
    {"8.8.4.4", 8443, true, EGRESS_DENY_RUNNER_PORT},
    {"0.0.0.0", 18080, false, EGRESS_DENY_UNSPECIFIED},
    {"::", 80, false, EGRESS_DENY_UNSPECIFIED},
    {"224.0.0.251", 5353, false, EGRESS_DENY_MULTICAST},
    {"255.255.255.255", 80, false, EGRESS_DENY_MULTICAST},
};

static void test_egress_policy_mode_on(void)
{
    struct egress_policy p;
    static const struct decision_case cases[] = {
        {"8.8.8.8", 443, false, EGRESS_ALLOW_PUBLIC},
        {"2606:4700::1111", 443, false, EGRESS_ALLOW_PUBLIC},
        {"::ffff:8.8.8.8", 443, false, EGRESS_ALLOW_PUBLIC},
        {"64:ff9b::808:808", 443, false, EGRESS_ALLOW_PUBLIC},
        {"127.0.0.1", 18081, false, EGRESS_DENY_LOOPBACK},
        {"127.0.0.2", 18081, false, EGRESS_DENY_LOOPBACK},
        {"127.0.0.2", 18080, false, EGRESS_DENY_RUNNER_PORT},
        {"::1", 22, false, EGRESS_DENY_LOOPBACK},
        {"169.254.169.254", 443, false, EGRESS_DENY_METADATA},
        {"64:ff9b::a9fe:a9fe", 80, false, EGRESS_DENY_METADATA},
        {"::ffff:169.254.169.254", 81, false, EGRESS_DENY_METADATA},
        {"fd00:ec2::254", 80, false, EGRESS_DENY_METADATA},
        {"100.100.100.200", 80, false, EGRESS_DENY_METADATA},
        {"169.254.1.1", 80, false, EGRESS_DENY_LINK_LOCAL},
        {"fe80::1", 80, false, EGRESS_DENY_LINK_LOCAL},
        {"10.0.0.1", 80, false, EGRESS_DENY_PRIVATE},
        {"10.9.9.9", 80, false, EGRESS_DENY_PRIVATE}, /* the named host, another port */
        {"192.168.0.1", 80, false, EGRESS_DENY_PRIVATE},
        {"172.20.0.1", 80, false, EGRESS_DENY_PRIVATE},
        {"100.64.1.1", 80, false, EGRESS_DENY_PRIVATE},
        {"fd12::1", 80, false, EGRESS_DENY_PRIVATE},
        {"2002:a00:1::1", 80, false, EGRESS_DENY_PRIVATE},
        {"192.0.2.1", 80, false, EGRESS_DENY_RESERVED},
        {"2001:db8::1", 80, false, EGRESS_DENY_RESERVED},
        {"8.8.4.4", 80, true, EGRESS_DENY_HOST}, /* the runner's own public address */
        {"10.0.0.5", 80, true, EGRESS_DENY_HOST},
    };

    egress_policy_init(&p, EGRESS_MODE_ON, false);
    named(&p);
    run_cases(&p, "on", always, sizeof(always) / sizeof(always[0]));
    run_cases(&p, "on", cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_egress_policy_mode_on_private(void)
{
    struct egress_policy p;
    static const struct decision_case cases[] = {
        {"10.0.0.1", 80, false, EGRESS_ALLOW_PRIVATE},
        {"172.31.0.1", 80, false, EGRESS_ALLOW_PRIVATE},
        {"100.64.1.1", 80, false, EGRESS_ALLOW_PRIVATE},
        {"fd12::1", 80, false, EGRESS_ALLOW_PRIVATE},
        {"8.8.8.8", 443, false, EGRESS_ALLOW_PUBLIC},
        /* private egress never opens these */
        {"10.0.0.5", 80, true, EGRESS_DENY_HOST},
        {"127.0.0.2", 80, false, EGRESS_DENY_LOOPBACK},
        {"169.254.169.254", 8080, false, EGRESS_DENY_METADATA},
        {"100.100.100.200", 80, false, EGRESS_DENY_METADATA},
        {"fd00:ec2::254", 80, false, EGRESS_DENY_METADATA},
        {"169.254.1.1", 80, false, EGRESS_DENY_LINK_LOCAL},
        {"192.0.2.1", 80, false, EGRESS_DENY_RESERVED},
    };

    egress_policy_init(&p, EGRESS_MODE_ON, true);
    named(&p);
    run_cases(&p, "on+private", always, sizeof(always) / sizeof(always[0]));
    run_cases(&p, "on+private", cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_egress_policy_mode_off(void)
{
    struct egress_policy p;
    static const struct decision_case cases[] = {
        {"8.8.8.8", 443, false, EGRESS_DENY_OFF},
        {"10.0.0.1", 80, false, EGRESS_DENY_OFF},
        {"127.0.0.2", 80, false, EGRESS_DENY_OFF},
        {"169.254.169.254", 443, false, EGRESS_DENY_OFF},
        {"2606:4700::1111", 443, false, EGRESS_DENY_OFF},
    };

    egress_policy_init(&p, EGRESS_MODE_OFF, true);
    named(&p);
    run_cases(&p, "off", always, sizeof(always) / sizeof(always[0]));
    run_cases(&p, "off", cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_egress_policy_mode_allowlist(void)
{
    struct egress_policy p;
    static const char *const entries[] = {
        "203.0.113.0/24", "8.8.8.0/24", "127.0.0.2",     "10.1.0.0/16", "169.254.0.0/16",
        "2001:4860::/32", "0.0.0.0/1",  "fd00:ec2::254", "8.8.4.4/32",  "64:ff9b::7f00:3/128",
    };
    static const struct decision_case cases[] = {
        {"8.8.8.8", 443, false, EGRESS_ALLOW_LISTED},
        {"200.1.1.1", 443, false, EGRESS_DENY_NOT_LISTED},
        {"8.8.9.8", 443, false, EGRESS_ALLOW_LISTED}, /* 0.0.0.0/1 */
        {"2001:4860::8888", 443, false, EGRESS_ALLOW_LISTED},
        {"2606:4700::1111", 443, false, EGRESS_DENY_NOT_LISTED},
        {"203.0.113.7", 80, false, EGRESS_ALLOW_LISTED}, /* a reserved range, listed inside */
        {"127.0.0.2", 8080, false, EGRESS_ALLOW_LISTED},
        {"::ffff:127.0.0.2", 8080, false, EGRESS_ALLOW_LISTED},
        {"127.0.0.3", 8080, false, EGRESS_DENY_LOOPBACK}, /* 0.0.0.0/1 is not explicit */
        {"64:ff9b::7f00:3", 80, false, EGRESS_ALLOW_LISTED},
        {"64:ff9b::7f00:4", 80, false, EGRESS_DENY_NOT_LISTED},
        {"127.0.0.2", 8443, false, EGRESS_DENY_RUNNER_PORT},
        {"10.1.2.3", 80, false, EGRESS_ALLOW_LISTED},
        {"10.2.0.1", 80, false, EGRESS_DENY_PRIVATE},    /* only 0.0.0.0/1 covers it */
        {"169.254.1.1", 80, false, EGRESS_ALLOW_LISTED}, /* link-local, listed inside */
        {"169.254.169.254", 80, false, EGRESS_ALLOW_NAMED},
        {"169.254.169.254", 443, false, EGRESS_DENY_METADATA}, /* needs the exact address */
        {"fd00:ec2::254", 80, false, EGRESS_ALLOW_LISTED},
        {"8.8.4.4", 80, true, EGRESS_ALLOW_LISTED}, /* a host address listed exactly */
        {"8.8.8.9", 80, true, EGRESS_DENY_HOST},    /* a host address in a listed range */
        {"100.100.100.200", 80, false, EGRESS_DENY_METADATA},
        {"0.0.0.1", 80, false, EGRESS_DENY_UNSPECIFIED},
        {"192.168.0.1", 80, false, EGRESS_DENY_NOT_LISTED},
    };

    egress_policy_init(&p, EGRESS_MODE_ALLOWLIST, false);
    named(&p);
    for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++)
        CU_ASSERT_EQUAL(egress_policy_add_cidr(&p, entries[i], NULL, 0), 0);
    CU_ASSERT_EQUAL(egress_policy_add_cidr(&p, "8.8.8.0/24", NULL, 0), 0); /* a duplicate */
    CU_ASSERT_EQUAL(p.ncidrs, sizeof(entries) / sizeof(entries[0]));
    run_cases(&p, "allowlist", always, sizeof(always) / sizeof(always[0]));
    run_cases(&p, "allowlist", cases, sizeof(cases) / sizeof(cases[0]));

    /* private egress lets any covering entry open a private range */
    p.private_egress = true;
    {
        static const struct decision_case priv[] = {
            {"10.2.0.1", 80, false, EGRESS_ALLOW_LISTED},
            {"127.0.0.3", 80, false, EGRESS_DENY_LOOPBACK},
        };
        run_cases(&p, "allowlist+private", priv, sizeof(priv) / sizeof(priv[0]));
    }

    /* an empty list blocks everything but the named endpoints */
    egress_policy_init(&p, EGRESS_MODE_ALLOWLIST, true);
    named(&p);
    {
        static const struct decision_case none[] = {
            {"8.8.8.8", 443, false, EGRESS_DENY_NOT_LISTED},
            {"127.0.0.1", 18080, false, EGRESS_ALLOW_NAMED},
        };
        run_cases(&p, "allowlist-empty", none, sizeof(none) / sizeof(none[0]));
    }

    /* a full list reports it */
    egress_policy_init(&p, EGRESS_MODE_ALLOWLIST, false);
    for (unsigned i = 0; i < EGRESS_ALLOWLIST_MAX; i++) {
        char entry[32];
        snprintf(entry, sizeof(entry), "11.%u.%u.0/24", i / 256, i % 256);
        CU_ASSERT_EQUAL_FATAL(egress_policy_add_cidr(&p, entry, NULL, 0), 0);
    }
    {
        char err[128] = "";
        CU_ASSERT_EQUAL(egress_policy_add_cidr(&p, "12.0.0.0/8", err, sizeof(err)), -E2BIG);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "more than"));
    }
}

static void test_egress_policy_open_all(void)
{
    /* "everything" in an allowlist still keeps the sensitive classes closed */
    struct egress_policy p;
    static const struct decision_case cases[] = {
        {"8.8.8.8", 443, false, EGRESS_ALLOW_LISTED},
        {"2606:4700::1111", 443, false, EGRESS_ALLOW_LISTED},
        {"10.0.0.1", 80, false, EGRESS_DENY_PRIVATE},
        {"127.0.0.2", 80, false, EGRESS_DENY_LOOPBACK},
        {"::1", 80, false, EGRESS_DENY_LOOPBACK},
        {"169.254.169.254", 80, false, EGRESS_DENY_METADATA},
        {"fe80::1", 80, false, EGRESS_DENY_LINK_LOCAL},
        {"2001:db8::1", 80, false, EGRESS_DENY_RESERVED},
        {"8.8.4.4", 80, true, EGRESS_DENY_HOST},
        {"0.0.0.0", 80, false, EGRESS_DENY_UNSPECIFIED},
    };

    egress_policy_init(&p, EGRESS_MODE_ALLOWLIST, false);
    CU_ASSERT_EQUAL(egress_policy_add_cidr(&p, "0.0.0.0/0", NULL, 0), 0);
    CU_ASSERT_EQUAL(egress_policy_add_cidr(&p, "::/0", NULL, 0), 0);
    run_cases(&p, "allowlist-all", cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_egress_policy_endpoints(void)
{
    struct egress_policy p;
    struct egress_addr a;
    char err[160] = "";
    uint16_t ports[8];
    size_t n = 99;
    struct buf hosts;

    egress_policy_init(&p, EGRESS_MODE_OFF, false);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "https://API.example.com/v1", err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(p.endpoints[0].host, "api.example.com");
    CU_ASSERT_EQUAL(p.endpoints[0].port, 443);
    CU_ASSERT_FALSE(p.endpoints[0].literal);
    CU_ASSERT_EQUAL(p.nnamed, 0);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "http://user:pw@localhost:18080", err, sizeof(err)),
                    0);
    CU_ASSERT_STRING_EQUAL(p.endpoints[1].host, "localhost");
    CU_ASSERT_EQUAL(p.endpoints[1].port, 18080);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "HTTP://[::1]:9000/x?y#z", err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(p.endpoints[2].host, "::1");
    CU_ASSERT_TRUE(p.endpoints[2].literal);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "ws://127.0.0.1", err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(p.endpoints[3].port, 80);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "https://api.example.com/other", err, sizeof(err)),
                    0);
    CU_ASSERT_EQUAL(p.nendpoints, 4); /* a duplicate is kept once */
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "ftp://x", err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "http://", err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "http://h:0/", err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "http://h:65536/", err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "http://h:8x/", err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "http://[::1/", err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "http://[::1]x/", err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "http://[10.0.0.1]/", err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "http://0x7f.1/", err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a host name or IP address"));
    CU_ASSERT_EQUAL(egress_policy_add_endpoint(&p, "h", 0, err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(p.nendpoints, 4);

    /* a host name is allowed once its addresses are known */
    a = A("93.184.216.34");
    CU_ASSERT_FALSE(egress_policy_check(&p, &a, 443, false, NULL));
    CU_ASSERT_EQUAL(egress_policy_find_endpoint(&p, "API.EXAMPLE.COM."), 0);
    CU_ASSERT_EQUAL(egress_policy_find_endpoint(&p, "example.com"), -ENOENT);
    CU_ASSERT_EQUAL(egress_policy_find_endpoint(&p, "::1"), -ENOENT); /* literals are not names */
    CU_ASSERT_EQUAL(egress_policy_add_named_addr(&p, 0, &a), 0);
    CU_ASSERT_EQUAL(egress_policy_add_named_addr(&p, 0, &a), 0);
    CU_ASSERT_EQUAL(egress_policy_add_named_addr(&p, 99, &a), -EINVAL);
    CU_ASSERT_TRUE(egress_policy_check(&p, &a, 443, false, NULL));
    CU_ASSERT_FALSE(egress_policy_check(&p, &a, 80, false, NULL));
    CU_ASSERT_TRUE(egress_policy_addr_possible(&p, &a, false));
    a = A("127.0.0.1");
    CU_ASSERT_EQUAL(egress_policy_add_named_addr(&p, 1, &a), 0);
    a = A("::ffff:127.0.0.1"); /* the same address, mapped */
    CU_ASSERT_EQUAL(egress_policy_add_named_addr(&p, 1, &a), 0);
    a = A("::1");
    CU_ASSERT_EQUAL(egress_policy_add_named_addr(&p, 1, &a), 0);

    /* the sandbox-local ports the proxy must take over: named 127.0.0.1 and ::1 ports */
    CU_ASSERT_EQUAL(egress_policy_loopback_ports(&p, ports, 8, &n), 0);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_EQUAL(ports[0], 80);
    CU_ASSERT_EQUAL(ports[1], 9000);
    CU_ASSERT_EQUAL(ports[2], 18080);
    CU_ASSERT_EQUAL(egress_policy_loopback_ports(&p, ports, 2, &n), -E2BIG);

    buf_init(&hosts, 4096);
    CU_ASSERT_EQUAL(egress_policy_render_hosts(&p, &hosts), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&hosts), "93.184.216.34 api.example.com\n"
                                            "127.0.0.1 localhost\n"
                                            "::1 localhost\n");
    buf_release(&hosts);

    /* the possible-address filter (for DNS answers) */
    egress_policy_init(&p, EGRESS_MODE_ON, false);
    a = A("10.0.0.1");
    CU_ASSERT_FALSE(egress_policy_addr_possible(&p, &a, false));
    a = A("8.8.8.8");
    CU_ASSERT_TRUE(egress_policy_addr_possible(&p, &a, false));
    CU_ASSERT_FALSE(egress_policy_addr_possible(&p, &a, true));
}

static void test_egress_policy_json(void)
{
    struct egress_policy p, q;
    json_object *o, *bad;
    char err[200] = "";
    struct egress_addr a = A("127.0.0.1");

    egress_policy_init(&p, EGRESS_MODE_ALLOWLIST, true);
    CU_ASSERT_EQUAL(egress_policy_add_cidr(&p, "10.0.0.0/8", NULL, 0), 0);
    CU_ASSERT_EQUAL(egress_policy_add_cidr(&p, "2001:db8::/32", NULL, 0), 0);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "http://127.0.0.1:18080/v1", NULL, 0), 0);
    CU_ASSERT_EQUAL(egress_policy_add_url(&p, "https://api.example.com", NULL, 0), 0);
    CU_ASSERT_EQUAL(egress_policy_add_runner_port(&p, 8443), 0);
    o = egress_policy_to_json(&p);
    CU_ASSERT_STRING_EQUAL(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
                           "{\"mode\":\"allowlist\",\"privateEgress\":true,"
                           "\"allowlist\":[\"10.0.0.0\\/8\",\"2001:db8::\\/32\"],"
                           "\"endpoints\":[{\"host\":\"127.0.0.1\",\"port\":18080},"
                           "{\"host\":\"api.example.com\",\"port\":443}],\"runnerPorts\":[8443]}");
    CU_ASSERT_EQUAL(egress_policy_from_json(o, &q, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(q.mode, EGRESS_MODE_ALLOWLIST);
    CU_ASSERT_TRUE(q.private_egress);
    CU_ASSERT_EQUAL(q.ncidrs, 2);
    CU_ASSERT_EQUAL(q.nendpoints, 2);
    CU_ASSERT_EQUAL(q.nnamed, 1);
    CU_ASSERT_EQUAL(q.nrunner_ports, 1);
    CU_ASSERT_TRUE(egress_policy_check(&q, &a, 18080, false, NULL));
    json_object_put(o);

    /* errors name the field */
    bad = test_json("{\"mode\":\"allowlist\",\"allowlist\":[\"10.0.0.0/8\",\"10.0.0.1/8\"]}");
    CU_ASSERT_EQUAL(egress_policy_from_json(bad, &q, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "egress.allowlist[1]: \"10.0.0.1/8\": host bits set"));
    json_object_put(bad);
    bad = test_json("{\"mode\":\"sometimes\"}");
    CU_ASSERT_EQUAL(egress_policy_from_json(bad, &q, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "egress.mode"));
    json_object_put(bad);
    bad = test_json("{\"endpoints\":[{\"host\":\"h.example\",\"port\":70000}]}");
    CU_ASSERT_EQUAL(egress_policy_from_json(bad, &q, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "egress.endpoints[0]"));
    json_object_put(bad);
    bad = test_json("{\"allowlist\":\"10.0.0.0/8\"}");
    CU_ASSERT_EQUAL(egress_policy_from_json(bad, &q, err, sizeof(err)), -EINVAL);
    json_object_put(bad);
    bad = test_json("{\"runnerPorts\":[0]}");
    CU_ASSERT_EQUAL(egress_policy_from_json(bad, &q, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "egress.runnerPorts[0]"));
    json_object_put(bad);
    CU_ASSERT_EQUAL(egress_policy_from_json(NULL, &q, err, sizeof(err)), -EINVAL);
}

static void test_egress_policy_sockaddr(void)
{
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(443)};
    struct sockaddr_storage ss;
    struct egress_addr a, b;
    char text[EGRESS_ADDR_TEXT_MAX];
    uint16_t port = 0;
    socklen_t len;

    inet_pton(AF_INET6, "::ffff:10.1.2.3", &in6.sin6_addr);
    CU_ASSERT_EQUAL(egress_addr_from_sockaddr((struct sockaddr *)&in6, sizeof(in6), &a, &port), 0);
    CU_ASSERT_EQUAL(a.family, AF_INET);
    CU_ASSERT_EQUAL(port, 443);
    egress_addr_port_format(&a, port, text);
    CU_ASSERT_STRING_EQUAL(text, "10.1.2.3:443");
    len = egress_addr_to_sockaddr(&a, 8080, &ss);
    CU_ASSERT_EQUAL(len, sizeof(struct sockaddr_in));
    CU_ASSERT_EQUAL(egress_addr_from_sockaddr((struct sockaddr *)&ss, len, &b, &port), 0);
    CU_ASSERT_TRUE(egress_addr_equal(&a, &b));
    CU_ASSERT_EQUAL(port, 8080);
    a = A("2001:db8::1");
    egress_addr_port_format(&a, 80, text);
    CU_ASSERT_STRING_EQUAL(text, "[2001:db8::1]:80");
    CU_ASSERT_EQUAL(egress_addr_from_sockaddr((struct sockaddr *)&in6, 4, &a, NULL), -EAFNOSUPPORT);
    CU_ASSERT_EQUAL(egress_addr_parse("1.2.3", &a), -EINVAL);
}

CU_TestInfo egress_policy_tests[] = {
    {"classes", test_egress_policy_classes},
    {"cidr_parse", test_egress_policy_cidr_parse},
    {"host_names", test_egress_policy_host_names},
    {"mode_on", test_egress_policy_mode_on},
    {"mode_on_private", test_egress_policy_mode_on_private},
    {"mode_off", test_egress_policy_mode_off},
    {"mode_allowlist", test_egress_policy_mode_allowlist},
    {"open_all", test_egress_policy_open_all},
    {"endpoints", test_egress_policy_endpoints},
    {"json", test_egress_policy_json},
    {"sockaddr", test_egress_policy_sockaddr},
    CU_TEST_INFO_NULL,
};
