/*
 * egress_policy — the classification tables and the decision (see egress_policy.h).
 *
 * Addresses are classed by the first row of a table that covers them, so the most specific
 * rows (metadata services) come first. IPv6 rows marked EMBED4 carry an IPv4 address (NAT64,
 * 6to4): the address is classed as that IPv4 address.
 */
#include "egress/egress_policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"

#define EMBED4 0xff /* pseudo-class of an IPv6 row that embeds an IPv4 address */

struct range {
    uint8_t b[16];
    uint8_t prefix;
    uint8_t cls;
    uint8_t embed_at; /* EMBED4 rows: offset of the IPv4 address */
};

static const struct range v4_ranges[] = {
    {{169, 254, 169, 254}, 32, EGRESS_CLASS_METADATA, 0}, /* AWS, GCP, Azure, ... */
    {{169, 254, 170, 2}, 32, EGRESS_CLASS_METADATA, 0},   /* AWS ECS task metadata */
    {{100, 100, 100, 200}, 32, EGRESS_CLASS_METADATA, 0}, /* Alibaba Cloud */
    {{192, 0, 0, 192}, 32, EGRESS_CLASS_METADATA, 0},     /* Oracle Cloud */
    {{0, 0, 0, 0}, 8, EGRESS_CLASS_UNSPECIFIED, 0},
    {{127, 0, 0, 0}, 8, EGRESS_CLASS_LOOPBACK, 0},
    {{169, 254, 0, 0}, 16, EGRESS_CLASS_LINK_LOCAL, 0},
    {{255, 255, 255, 255}, 32, EGRESS_CLASS_MULTICAST, 0},
    {{224, 0, 0, 0}, 4, EGRESS_CLASS_MULTICAST, 0},
    {{240, 0, 0, 0}, 4, EGRESS_CLASS_RESERVED, 0},
    {{10, 0, 0, 0}, 8, EGRESS_CLASS_PRIVATE, 0},
    {{172, 16, 0, 0}, 12, EGRESS_CLASS_PRIVATE, 0},
    {{192, 168, 0, 0}, 16, EGRESS_CLASS_PRIVATE, 0},
    {{100, 64, 0, 0}, 10, EGRESS_CLASS_PRIVATE, 0},  /* carrier-grade NAT */
    {{198, 18, 0, 0}, 15, EGRESS_CLASS_RESERVED, 0}, /* benchmarking */
    {{192, 0, 0, 0}, 24, EGRESS_CLASS_RESERVED, 0},  /* IETF protocol assignments */
    {{192, 0, 2, 0}, 24, EGRESS_CLASS_RESERVED, 0},  /* documentation */
    {{198, 51, 100, 0}, 24, EGRESS_CLASS_RESERVED, 0},
    {{203, 0, 113, 0}, 24, EGRESS_CLASS_RESERVED, 0},
    {{192, 88, 99, 0}, 24, EGRESS_CLASS_RESERVED, 0}, /* 6to4 relay anycast */
};

static const struct range v6_ranges[] = {
    {{0xfd, 0x00, 0x0e, 0xc2, [15] = 0x54, [14] = 0x02}, 128, EGRESS_CLASS_METADATA, 0},
    {{0}, 128, EGRESS_CLASS_UNSPECIFIED, 0},
    {{[15] = 1}, 128, EGRESS_CLASS_LOOPBACK, 0},
    {{0x00, 0x64, 0xff, 0x9b}, 96, EMBED4, 12}, /* NAT64 well-known prefix */
    {{0x20, 0x02}, 16, EMBED4, 2},              /* 6to4 */
    {{0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48, EGRESS_CLASS_PRIVATE, 0}, /* local NAT64 */
    {{0}, 96, EGRESS_CLASS_RESERVED, 0},                                 /* IPv4-compatible */
    {{0x01, 0x00}, 64, EGRESS_CLASS_RESERVED, 0},                        /* discard */
    {{0x20, 0x01, 0x0d, 0xb8}, 32, EGRESS_CLASS_RESERVED, 0},            /* documentation */
    {{0x20, 0x01}, 23, EGRESS_CLASS_RESERVED, 0}, /* IETF protocol assignments, Teredo */
    {{0x3f, 0xff}, 20, EGRESS_CLASS_RESERVED, 0}, /* documentation (RFC 9637) */
    {{0xfc}, 7, EGRESS_CLASS_PRIVATE, 0},         /* unique local */
    {{0xfe, 0x80}, 10, EGRESS_CLASS_LINK_LOCAL, 0},
    {{0xfe, 0xc0}, 10, EGRESS_CLASS_PRIVATE, 0}, /* site-local (deprecated) */
    {{0xff}, 8, EGRESS_CLASS_MULTICAST, 0},
    {{0x20}, 3, EGRESS_CLASS_PUBLIC, 0}, /* global unicast */
    {{0}, 0, EGRESS_CLASS_RESERVED, 0},  /* everything else is not routable */
};

static size_t addr_len(uint8_t family)
{
    return family == AF_INET ? 4 : 16;
}

/* Whether the first prefix bits of a and b are equal. */
static bool prefix_equal(const uint8_t *a, const uint8_t *b, unsigned prefix)
{
    unsigned whole = prefix / 8, rest = prefix % 8;

    if (memcmp(a, b, whole) != 0)
        return false;
    if (rest == 0)
        return true;
    return ((a[whole] ^ b[whole]) & (uint8_t)(0xff00u >> rest)) == 0;
}

const char *egress_mode_name(enum egress_mode mode)
{
    switch (mode) {
    case EGRESS_MODE_ON:
        return "on";
    case EGRESS_MODE_ALLOWLIST:
        return "allowlist";
    case EGRESS_MODE_OFF:
        return "off";
    }
    return "?";
}

int egress_mode_parse(const char *s, enum egress_mode *ret_mode)
{
    static const enum egress_mode modes[] = {EGRESS_MODE_ON, EGRESS_MODE_ALLOWLIST,
                                             EGRESS_MODE_OFF};

    for (size_t i = 0; s && i < ARRAY_SIZE(modes); i++) {
        if (strcmp(s, egress_mode_name(modes[i])) == 0) {
            *ret_mode = modes[i];
            return 0;
        }
    }
    return -EINVAL;
}

const char *egress_reason_name(enum egress_reason reason)
{
    static const char *const names[] = {
        [EGRESS_ALLOW_NAMED] = "named",
        [EGRESS_ALLOW_PUBLIC] = "public",
        [EGRESS_ALLOW_PRIVATE] = "private-egress",
        [EGRESS_ALLOW_LISTED] = "allowlisted",
        [EGRESS_DENY_OFF] = "network-off",
        [EGRESS_DENY_NOT_LISTED] = "not-allowlisted",
        [EGRESS_DENY_PRIVATE] = "private",
        [EGRESS_DENY_RESERVED] = "reserved",
        [EGRESS_DENY_LOOPBACK] = "loopback",
        [EGRESS_DENY_LINK_LOCAL] = "link-local",
        [EGRESS_DENY_METADATA] = "metadata",
        [EGRESS_DENY_HOST] = "runner-host",
        [EGRESS_DENY_UNSPECIFIED] = "unspecified",
        [EGRESS_DENY_MULTICAST] = "multicast",
        [EGRESS_DENY_RUNNER_PORT] = "runner-port",
    };

    if ((size_t)reason < ARRAY_SIZE(names) && names[reason])
        return names[reason];
    return "?";
}

/* ---- addresses ---------------------------------------------------------------------------- */

static void addr_set(struct egress_addr *a, uint8_t family, const uint8_t *bytes)
{
    memset(a, 0, sizeof(*a));
    a->family = family;
    memcpy(a->b, bytes, addr_len(family));
}

/* IPv4-mapped IPv6 (::ffff:a.b.c.d) becomes IPv4. */
static void addr_unmap(struct egress_addr *a)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    uint8_t v4[4];

    if (a->family != AF_INET6 || memcmp(a->b, mapped, sizeof(mapped)) != 0)
        return;
    memcpy(v4, a->b + 12, 4);
    addr_set(a, AF_INET, v4);
}

int egress_addr_parse(const char *s, struct egress_addr *ret_addr)
{
    uint8_t bytes[16];
    struct egress_addr a;

    if (!s)
        return -EINVAL;
    if (inet_pton(AF_INET, s, bytes) == 1) {
        addr_set(&a, AF_INET, bytes);
    } else if (inet_pton(AF_INET6, s, bytes) == 1) {
        addr_set(&a, AF_INET6, bytes);
        addr_unmap(&a);
    } else {
        return -EINVAL;
    }
    *ret_addr = a;
    return 0;
}

int egress_addr_from_sockaddr(const struct sockaddr *sa, socklen_t len,
                              struct egress_addr *ret_addr, uint16_t *ret_port)
{
    struct egress_addr a;
    uint16_t port;

    if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        addr_set(&a, AF_INET, (const uint8_t *)&in->sin_addr);
        port = ntohs(in->sin_port);
    } else if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        addr_set(&a, AF_INET6, in6->sin6_addr.s6_addr);
        addr_unmap(&a);
        port = ntohs(in6->sin6_port);
    } else {
        return -EAFNOSUPPORT;
    }
    *ret_addr = a;
    if (ret_port)
        *ret_port = port;
    return 0;
}

socklen_t egress_addr_to_sockaddr(const struct egress_addr *a, uint16_t port,
                                  struct sockaddr_storage *ret_sa)
{
    memset(ret_sa, 0, sizeof(*ret_sa));
    if (a->family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)ret_sa;
        in->sin_family = AF_INET;
        in->sin_port = htons(port);
        memcpy(&in->sin_addr, a->b, 4);
        return sizeof(*in);
    }
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ret_sa;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    memcpy(in6->sin6_addr.s6_addr, a->b, 16);
    return sizeof(*in6);
}

void egress_addr_format(const struct egress_addr *a, char out[EGRESS_ADDR_TEXT_MAX])
{
    if (!inet_ntop(a->family == AF_INET ? AF_INET : AF_INET6, a->b, out, EGRESS_ADDR_TEXT_MAX))
        snprintf(out, EGRESS_ADDR_TEXT_MAX, "?");
}

void egress_addr_port_format(const struct egress_addr *a, uint16_t port,
                             char out[EGRESS_ADDR_TEXT_MAX])
{
    char text[INET6_ADDRSTRLEN];

    if (!inet_ntop(a->family == AF_INET ? AF_INET : AF_INET6, a->b, text, sizeof(text)))
        snprintf(text, sizeof(text), "?");
    if (a->family == AF_INET)
        snprintf(out, EGRESS_ADDR_TEXT_MAX, "%s:%u", text, (unsigned)port);
    else
        snprintf(out, EGRESS_ADDR_TEXT_MAX, "[%s]:%u", text, (unsigned)port);
}

bool egress_addr_equal(const struct egress_addr *a, const struct egress_addr *b)
{
    return a->family == b->family && memcmp(a->b, b->b, addr_len(a->family)) == 0;
}

bool egress_cidr_contains(const struct egress_cidr *c, const struct egress_addr *a)
{
    return c->net.family == a->family && prefix_equal(c->net.b, a->b, c->prefix);
}

/* The table row that classes a (NULL: public IPv4). */
static const struct range *find_range(uint8_t family, const uint8_t *b)
{
    const struct range *t = family == AF_INET ? v4_ranges : v6_ranges;
    size_t n = family == AF_INET ? ARRAY_SIZE(v4_ranges) : ARRAY_SIZE(v6_ranges);

    for (size_t i = 0; i < n; i++)
        if (prefix_equal(t[i].b, b, t[i].prefix))
            return &t[i];
    return NULL;
}

static enum egress_class class_of(uint8_t family, const uint8_t *b)
{
    const struct range *r = find_range(family, b);

    if (!r)
        return EGRESS_CLASS_PUBLIC;
    if (r->cls == EMBED4)
        return class_of(AF_INET, b + r->embed_at);
    return (enum egress_class)r->cls;
}

enum egress_class egress_addr_class(const struct egress_addr *a, bool host_local)
{
    enum egress_class c = class_of(a->family, a->b);

    if (host_local &&
        (c == EGRESS_CLASS_PUBLIC || c == EGRESS_CLASS_PRIVATE || c == EGRESS_CLASS_RESERVED))
        return EGRESS_CLASS_HOST;
    return c;
}

/*
 * Whether the whole range c lies inside one table range of class cls: an allowlist entry
 * that names that kind of place explicitly.
 */
static bool cidr_inside_class(const struct egress_cidr *c, enum egress_class cls)
{
    const struct range *t = c->net.family == AF_INET ? v4_ranges : v6_ranges;
    size_t n = c->net.family == AF_INET ? ARRAY_SIZE(v4_ranges) : ARRAY_SIZE(v6_ranges);

    for (size_t i = 0; i < n; i++) {
        /* the catch-all row does not make an entry "explicit" */
        if (t[i].prefix == 0 || c->prefix < t[i].prefix ||
            !prefix_equal(t[i].b, c->net.b, t[i].prefix))
            continue;
        if (t[i].cls == EMBED4) {
            unsigned at_bits = t[i].embed_at * 8u;
            struct egress_cidr v4 = {.prefix = 0};

            /* the entry must fix the embedding prefix; then judge the IPv4 part it fixes */
            if (c->prefix < at_bits)
                return false;
            addr_set(&v4.net, AF_INET, c->net.b + t[i].embed_at);
            v4.prefix = (uint8_t)(c->prefix - at_bits > 32 ? 32 : c->prefix - at_bits);
            return cidr_inside_class(&v4, cls);
        }
        /* rows go from specific to general: the first one holding the entry is its class */
        return t[i].cls == cls;
    }
    return cls == EGRESS_CLASS_PUBLIC;
}

/* ---- parsing ------------------------------------------------------------------------------ */

int egress_host_normalize(const char *in, char out[EGRESS_HOST_MAX + 1])
{
    size_t len, label = 0;
    const char *last;
    bool numeric = true;

    if (!in)
        return -EINVAL;
    len = strlen(in);
    if (len > 0 && in[len - 1] == '.')
        len--;
    if (len == 0 || len > EGRESS_HOST_MAX)
        return -EINVAL;
    for (size_t i = 0; i < len; i++) {
        char c = in[i];

        if (c == '.') {
            if (label == 0)
                return -EINVAL;
            label = 0;
            out[i] = c;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return -EINVAL;
        if (++label > 63)
            return -EINVAL;
        out[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    if (label == 0)
        return -EINVAL;
    out[len] = '\0';
    /* a numeric last label ("1", "0x7f") makes the whole name an IPv4 address to a resolver */
    last = strrchr(out, '.');
    last = last ? last + 1 : out;
    if (last[0] == '0' && last[1] == 'x')
        return -EINVAL;
    for (const char *p = last; *p; p++)
        if (*p < '0' || *p > '9')
            numeric = false;
    return numeric ? -EINVAL : 0;
}

int egress_cidr_parse(const char *s, struct egress_cidr *ret_cidr, char *err, size_t errlen)
{
    char text[EGRESS_CIDR_TEXT_MAX + 1];
    struct egress_cidr c = {.prefix = 0};
    const char *slash;
    size_t len, alen, bits;
    uint64_t prefix;

    if (!s || !s[0]) {
        util_seterr(err, errlen, "empty entry");
        return -EINVAL;
    }
    len = strlen(s);
    if (len > EGRESS_CIDR_TEXT_MAX) {
        util_seterr(err, errlen, "longer than %d characters", EGRESS_CIDR_TEXT_MAX);
        return -EINVAL;
    }
    slash = strchr(s, '/');
    alen = slash ? (size_t)(slash - s) : len;
    memcpy(text, s, alen);
    text[alen] = '\0';
    if (strchr(text, '%')) {
        util_seterr(err, errlen, "\"%s\": zone ids are not allowed", s);
        return -EINVAL;
    }
    if (egress_addr_parse(text, &c.net) < 0) {
        util_seterr(err, errlen, "\"%s\": \"%s\" is not an IPv4 or IPv6 address", s, text);
        return -EINVAL;
    }
    if (c.net.family == AF_INET && strchr(text, ':')) {
        util_seterr(err, errlen, "\"%s\": write IPv4-mapped ranges as IPv4", s);
        return -EINVAL;
    }
    bits = c.net.family == AF_INET ? 32 : 128;
    prefix = bits;
    if (slash) {
        const char *p = slash + 1;

        if (!*p || (p[0] == '0' && p[1]) || util_parse_u64(p, 0, bits, &prefix) < 0) {
            util_seterr(err, errlen, "\"%s\": prefix length must be 0-%zu", s, bits);
            return -EINVAL;
        }
    }
    c.prefix = (uint8_t)prefix;
    for (size_t i = 0; i < addr_len(c.net.family) * 8; i++) {
        bool set = c.net.b[i / 8] & (0x80u >> (i % 8));

        if (i >= prefix && set) {
            struct egress_cidr net = c;
            char shown[EGRESS_ADDR_TEXT_MAX];

            for (size_t j = prefix; j < bits; j++)
                net.net.b[j / 8] &= (uint8_t) ~(0x80u >> (j % 8));
            egress_addr_format(&net.net, shown);
            util_seterr(err, errlen, "\"%s\": host bits set (the range is %s/%u)", s, shown,
                        (unsigned)prefix);
            return -EINVAL;
        }
    }
    *ret_cidr = c;
    return 0;
}

/* ---- building ----------------------------------------------------------------------------- */

void egress_policy_init(struct egress_policy *p, enum egress_mode mode, bool private_egress)
{
    memset(p, 0, sizeof(*p));
    p->mode = mode;
    p->private_egress = private_egress;
}

int egress_policy_add_cidr(struct egress_policy *p, const char *entry, char *err, size_t errlen)
{
    struct egress_cidr c;
    int r;

    r = egress_cidr_parse(entry, &c, err, errlen);
    if (r < 0)
        return r;
    for (size_t i = 0; i < p->ncidrs; i++)
        if (p->cidrs[i].prefix == c.prefix && egress_addr_equal(&p->cidrs[i].net, &c.net))
            return 0;
    if (p->ncidrs >= EGRESS_ALLOWLIST_MAX) {
        util_seterr(err, errlen, "more than %d entries", EGRESS_ALLOWLIST_MAX);
        return -E2BIG;
    }
    p->cidrs[p->ncidrs++] = c;
    return 0;
}

int egress_policy_add_named_addr(struct egress_policy *p, size_t i, const struct egress_addr *a)
{
    struct egress_addr n = *a;

    if (i >= p->nendpoints)
        return -EINVAL;
    addr_unmap(&n);
    for (size_t j = 0; j < p->nnamed; j++)
        if (p->named[j].port == p->endpoints[i].port && egress_addr_equal(&p->named[j].addr, &n))
            return 0;
    if (p->nnamed >= EGRESS_NAMED_ADDRS_MAX)
        return -E2BIG;
    p->named[p->nnamed].addr = n;
    p->named[p->nnamed].port = p->endpoints[i].port;
    p->named[p->nnamed].endpoint = (uint8_t)i;
    p->nnamed++;
    return 0;
}

int egress_policy_add_endpoint(struct egress_policy *p, const char *host, uint16_t port, char *err,
                               size_t errlen)
{
    char name[EGRESS_HOST_MAX + 1], lit[EGRESS_ADDR_TEXT_MAX];
    struct egress_endpoint *e;
    struct egress_addr a;
    bool literal = false;
    size_t len;

    if (!host || !host[0]) {
        util_seterr(err, errlen, "empty host");
        return -EINVAL;
    }
    if (port == 0) {
        util_seterr(err, errlen, "\"%s\": port 0", host);
        return -EINVAL;
    }
    len = strlen(host);
    if (host[0] == '[') {
        if (len < 3 || host[len - 1] != ']' || len - 2 >= sizeof(lit)) {
            util_seterr(err, errlen, "\"%s\": not an IPv6 address in brackets", host);
            return -EINVAL;
        }
        memcpy(lit, host + 1, len - 2);
        lit[len - 2] = '\0';
        if (egress_addr_parse(lit, &a) < 0 || !strchr(lit, ':')) {
            util_seterr(err, errlen, "\"%s\": not an IPv6 address in brackets", host);
            return -EINVAL;
        }
        literal = true;
    } else if (egress_addr_parse(host, &a) == 0) {
        literal = true;
    } else if (egress_host_normalize(host, name) < 0) {
        util_seterr(err, errlen, "\"%.64s\": not a host name or IP address", host);
        return -EINVAL;
    }
    if (literal)
        egress_addr_format(&a, name);
    for (size_t i = 0; i < p->nendpoints; i++)
        if (p->endpoints[i].port == port && strcmp(p->endpoints[i].host, name) == 0)
            return 0;
    if (p->nendpoints >= EGRESS_ENDPOINTS_MAX) {
        util_seterr(err, errlen, "more than %d named endpoints", EGRESS_ENDPOINTS_MAX);
        return -E2BIG;
    }
    e = &p->endpoints[p->nendpoints];
    memcpy(e->host, name, strlen(name) + 1);
    e->port = port;
    e->literal = literal;
    p->nendpoints++;
    if (literal) {
        int r = egress_policy_add_named_addr(p, p->nendpoints - 1, &a);
        if (r < 0) {
            p->nendpoints--;
            util_seterr(err, errlen, "more than %d named addresses", EGRESS_NAMED_ADDRS_MAX);
            return r;
        }
    }
    return 0;
}

int egress_policy_add_url(struct egress_policy *p, const char *url, char *err, size_t errlen)
{
    static const struct {
        const char *scheme;
        uint16_t port;
    } schemes[] = {{"http://", 80}, {"https://", 443}, {"ws://", 80}, {"wss://", 443}};
    char host[EGRESS_HOST_MAX + 3];
    const char *auth = NULL, *end, *at, *hend, *colon = NULL;
    uint16_t port = 0;
    size_t hlen;

    for (size_t i = 0; url && i < ARRAY_SIZE(schemes); i++) {
        size_t n = strlen(schemes[i].scheme);
        if (strncasecmp(url, schemes[i].scheme, n) == 0) {
            auth = url + n;
            port = schemes[i].port;
            break;
        }
    }
    if (!auth) {
        util_seterr(err, errlen, "not an http(s) URL");
        return -EINVAL;
    }
    end = auth + strcspn(auth, "/?#");
    at = NULL;
    for (const char *q = auth; q < end; q++)
        if (*q == '@')
            at = q;
    if (at)
        auth = at + 1;
    if (*auth == '[') {
        hend = memchr(auth, ']', (size_t)(end - auth));
        if (!hend) {
            util_seterr(err, errlen, "unterminated IPv6 address in the URL");
            return -EINVAL;
        }
        hend++;
        if (hend < end && *hend != ':') {
            util_seterr(err, errlen, "junk after the IPv6 address in the URL");
            return -EINVAL;
        }
        colon = hend < end ? hend : NULL;
    } else {
        colon = memchr(auth, ':', (size_t)(end - auth));
        hend = colon ? colon : end;
    }
    hlen = (size_t)(hend - auth);
    if (hlen == 0 || hlen >= sizeof(host)) {
        util_seterr(err, errlen, hlen ? "the URL's host is too long" : "the URL has no host");
        return -EINVAL;
    }
    memcpy(host, auth, hlen);
    host[hlen] = '\0';
    if (colon) {
        char digits[8];
        size_t dlen = (size_t)(end - colon - 1);
        uint64_t v;

        if (dlen == 0 || dlen >= sizeof(digits)) {
            util_seterr(err, errlen, "bad port in the URL");
            return -EINVAL;
        }
        memcpy(digits, colon + 1, dlen);
        digits[dlen] = '\0';
        if (util_parse_u64(digits, 1, 65535, &v) < 0) {
            util_seterr(err, errlen, "bad port in the URL");
            return -EINVAL;
        }
        port = (uint16_t)v;
    }
    return egress_policy_add_endpoint(p, host, port, err, errlen);
}

int egress_policy_add_runner_port(struct egress_policy *p, uint16_t port)
{
    for (size_t i = 0; i < p->nrunner_ports; i++)
        if (p->runner_ports[i] == port)
            return 0;
    if (port == 0)
        return -EINVAL;
    if (p->nrunner_ports >= EGRESS_RUNNER_PORTS_MAX)
        return -E2BIG;
    p->runner_ports[p->nrunner_ports++] = port;
    return 0;
}

/* ---- the decision ------------------------------------------------------------------------- */

static enum egress_reason deny_for(enum egress_class cls)
{
    switch (cls) {
    case EGRESS_CLASS_PRIVATE:
        return EGRESS_DENY_PRIVATE;
    case EGRESS_CLASS_RESERVED:
        return EGRESS_DENY_RESERVED;
    case EGRESS_CLASS_LOOPBACK:
        return EGRESS_DENY_LOOPBACK;
    case EGRESS_CLASS_LINK_LOCAL:
        return EGRESS_DENY_LINK_LOCAL;
    case EGRESS_CLASS_METADATA:
        return EGRESS_DENY_METADATA;
    case EGRESS_CLASS_HOST:
        return EGRESS_DENY_HOST;
    case EGRESS_CLASS_UNSPECIFIED:
        return EGRESS_DENY_UNSPECIFIED;
    case EGRESS_CLASS_MULTICAST:
        return EGRESS_DENY_MULTICAST;
    case EGRESS_CLASS_PUBLIC:
        break;
    }
    return EGRESS_DENY_NOT_LISTED;
}

/* Whether allowlist entry c, which covers an address of class cls, opens it. */
static bool entry_opens(const struct egress_policy *p, const struct egress_cidr *c,
                        enum egress_class cls)
{
    switch (cls) {
    case EGRESS_CLASS_PUBLIC:
        return true;
    case EGRESS_CLASS_PRIVATE:
        return p->private_egress || cidr_inside_class(c, EGRESS_CLASS_PRIVATE);
    case EGRESS_CLASS_RESERVED:
    case EGRESS_CLASS_LOOPBACK:
    case EGRESS_CLASS_LINK_LOCAL:
        return cidr_inside_class(c, cls);
    case EGRESS_CLASS_METADATA:
    case EGRESS_CLASS_HOST:
        return c->prefix == addr_len(c->net.family) * 8;
    case EGRESS_CLASS_UNSPECIFIED:
    case EGRESS_CLASS_MULTICAST:
        break;
    }
    return false;
}

static enum egress_reason decide(const struct egress_policy *p, const struct egress_addr *a,
                                 int port, bool host_local)
{
    enum egress_class cls;
    bool covered = false;

    for (size_t i = 0; i < p->nnamed; i++)
        if ((port < 0 || p->named[i].port == port) && egress_addr_equal(&p->named[i].addr, a))
            return EGRESS_ALLOW_NAMED;
    cls = egress_addr_class(a, host_local);
    if (cls == EGRESS_CLASS_UNSPECIFIED || cls == EGRESS_CLASS_MULTICAST)
        return deny_for(cls);
    if (port >= 0 && (cls == EGRESS_CLASS_LOOPBACK || cls == EGRESS_CLASS_HOST)) {
        for (size_t i = 0; i < p->nrunner_ports; i++)
            if (p->runner_ports[i] == port)
                return EGRESS_DENY_RUNNER_PORT;
    }
    switch (p->mode) {
    case EGRESS_MODE_OFF:
        return EGRESS_DENY_OFF;
    case EGRESS_MODE_ON:
        if (cls == EGRESS_CLASS_PUBLIC)
            return EGRESS_ALLOW_PUBLIC;
        if (cls == EGRESS_CLASS_PRIVATE && p->private_egress)
            return EGRESS_ALLOW_PRIVATE;
        return deny_for(cls);
    case EGRESS_MODE_ALLOWLIST:
        for (size_t i = 0; i < p->ncidrs; i++) {
            if (!egress_cidr_contains(&p->cidrs[i], a))
                continue;
            covered = true;
            if (entry_opens(p, &p->cidrs[i], cls))
                return EGRESS_ALLOW_LISTED;
        }
        return covered ? deny_for(cls) : EGRESS_DENY_NOT_LISTED;
    }
    return EGRESS_DENY_OFF;
}

bool egress_policy_check(const struct egress_policy *p, const struct egress_addr *a, uint16_t port,
                         bool host_local, enum egress_reason *ret_reason)
{
    struct egress_addr n = *a;
    enum egress_reason r;

    addr_unmap(&n);
    r = decide(p, &n, port, host_local);
    if (ret_reason)
        *ret_reason = r;
    return egress_reason_allows(r);
}

bool egress_policy_addr_possible(const struct egress_policy *p, const struct egress_addr *a,
                                 bool host_local)
{
    struct egress_addr n = *a;

    addr_unmap(&n);
    return egress_reason_allows(decide(p, &n, -1, host_local));
}

int egress_policy_find_endpoint(const struct egress_policy *p, const char *host)
{
    char name[EGRESS_HOST_MAX + 1];

    if (egress_host_normalize(host, name) < 0)
        return -ENOENT;
    for (size_t i = 0; i < p->nendpoints; i++)
        if (!p->endpoints[i].literal && strcmp(p->endpoints[i].host, name) == 0)
            return (int)i;
    return -ENOENT;
}
