/*
 * egress_policy — where a sandbox may connect: a pure decision over (address, port), no I/O.
 *
 * The runner decides a sandbox's egress per run (README "Network"). The sandbox lives in
 * its own network namespace; every TCP connection it opens to anything but its own loopback
 * reaches the keeper's transparent proxy (egress_proxy), which asks egress_policy_check()
 * with the connection's original destination. Modes (sandboxPermission.network.mode):
 *
 *   on         the public internet, plus the run's named endpoints; private ranges only with
 *              private_egress (AGENT_RUNNER_SANDBOX_PRIVATE_EGRESS=true);
 *   allowlist  the listed CIDR ranges (Agenta's shape: "10.0.0.0/8", "2001:db8::/32", a bare
 *              address is a single host; an empty list blocks all), plus the named endpoints;
 *   off        only the named endpoints.
 *
 * Named endpoints are the places the run itself needs (the model endpoint, later the MCP
 * servers the runner names): host + port; a literal address is matched at once, a host name
 * once its addresses are added (egress_policy_add_named_addr, see egress_dns). A named
 * (address, port) is always allowed, whatever its class: the trusted backend named it.
 *
 * Never reachable unless named explicitly:
 *   - loopback (127/8, ::1) and link-local (169.254/16, fe80::/10): an allowlist entry must lie
 *     inside that range ("127.0.0.2/32" opens 127.0.0.2; "0.0.0.0/0" does not);
 *   - cloud metadata services (169.254.169.254, 169.254.170.2, 100.100.100.200, 192.0.0.192,
 *     fd00:ec2::254) and addresses of the runner host itself (the caller says which: an address
 *     the host's routing table delivers locally): only an entry naming exactly that address;
 *   - the runner's own ports (runner_ports) on loopback and host addresses: never, except as a
 *     named endpoint;
 *   - unspecified (0.0.0.0/8, ::), multicast and broadcast: never, except as a named endpoint.
 * Private (RFC 1918, 100.64/10, fc00::/7, ...) and reserved ranges (documentation,
 * benchmarking, 240/4, non-global IPv6) under allowlist need an entry inside such a range
 * (or, for private ranges, private_egress and any covering entry).
 *
 * IPv4-mapped IPv6 (::ffff:a.b.c.d) is judged as the IPv4 address; NAT64 (64:ff9b::/96) and
 * 6to4 (2002::/16) addresses are classed by the IPv4 address they embed, so they cannot reach
 * what the IPv4 address could not.
 *
 * The policy is a fixed-size value (no allocation; copy it freely). Every add function fails
 * with -E2BIG when its table is full and -EINVAL on bad input, writing a message naming the
 * problem into err (may be NULL).
 */
#ifndef AR_EGRESS_POLICY_H
#define AR_EGRESS_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <json-c/json.h>

#include "base/buf.h"

#define EGRESS_ALLOWLIST_MAX 256
#define EGRESS_ENDPOINTS_MAX 32
#define EGRESS_NAMED_ADDRS_MAX 128
#define EGRESS_RUNNER_PORTS_MAX 16
#define EGRESS_HOST_MAX 253     /* a DNS name without the trailing dot */
#define EGRESS_CIDR_TEXT_MAX 64 /* longer allowlist entries are malformed */
/* "[ffff:...:255.255.255.255]:65535" plus NUL */
#define EGRESS_ADDR_TEXT_MAX 56

enum egress_mode { EGRESS_MODE_ON = 0, EGRESS_MODE_ALLOWLIST, EGRESS_MODE_OFF };

/* An IP address: family AF_INET (b[0..3]) or AF_INET6 (b[0..15]); never IPv4-mapped IPv6. */
struct egress_addr {
    uint8_t family;
    uint8_t b[16];
};

struct egress_cidr {
    struct egress_addr net; /* host bits zero */
    uint8_t prefix;         /* 0..32 or 0..128 */
};

enum egress_class {
    EGRESS_CLASS_PUBLIC = 0,
    EGRESS_CLASS_PRIVATE,
    EGRESS_CLASS_RESERVED,
    EGRESS_CLASS_LOOPBACK,
    EGRESS_CLASS_LINK_LOCAL,
    EGRESS_CLASS_METADATA,
    EGRESS_CLASS_HOST, /* an address of the runner host (only when the caller says so) */
    EGRESS_CLASS_UNSPECIFIED,
    EGRESS_CLASS_MULTICAST, /* multicast and limited broadcast */
};

/* Why a destination was allowed or denied; egress_reason_name() gives a stable log word. */
enum egress_reason {
    EGRESS_ALLOW_NAMED = 0,  /* a named endpoint */
    EGRESS_ALLOW_PUBLIC,     /* on: public internet */
    EGRESS_ALLOW_PRIVATE,    /* on + private_egress: a private range */
    EGRESS_ALLOW_LISTED,     /* allowlist: an entry covers it */
    EGRESS_DENY_OFF,         /* off: not a named endpoint */
    EGRESS_DENY_NOT_LISTED,  /* allowlist: no entry covers it */
    EGRESS_DENY_PRIVATE,     /* a private range, not permitted */
    EGRESS_DENY_RESERVED,    /* a reserved range, not listed explicitly */
    EGRESS_DENY_LOOPBACK,    /* host loopback, not listed explicitly */
    EGRESS_DENY_LINK_LOCAL,  /* link-local, not listed explicitly */
    EGRESS_DENY_METADATA,    /* a cloud metadata address, not listed exactly */
    EGRESS_DENY_HOST,        /* an address of the runner host, not listed exactly */
    EGRESS_DENY_UNSPECIFIED, /* 0.0.0.0/8 or :: */
    EGRESS_DENY_MULTICAST,   /* multicast or broadcast */
    EGRESS_DENY_RUNNER_PORT, /* one of the runner's own ports on a local address */
};

struct egress_endpoint {
    char host[EGRESS_HOST_MAX + 1]; /* lower-case name, or a literal address (no brackets) */
    uint16_t port;
    bool literal; /* host is an address; its named address was added with the endpoint */
};

struct egress_named {
    struct egress_addr addr;
    uint16_t port;
    uint8_t endpoint; /* index into endpoints */
};

struct egress_policy {
    enum egress_mode mode;
    bool private_egress;
    size_t ncidrs;
    struct egress_cidr cidrs[EGRESS_ALLOWLIST_MAX];
    size_t nendpoints;
    struct egress_endpoint endpoints[EGRESS_ENDPOINTS_MAX];
    size_t nnamed;
    struct egress_named named[EGRESS_NAMED_ADDRS_MAX];
    size_t nrunner_ports;
    uint16_t runner_ports[EGRESS_RUNNER_PORTS_MAX];
};

/* "on", "allowlist", "off" -> mode; -EINVAL otherwise. */
int egress_mode_parse(const char *s, enum egress_mode *ret_mode);
const char *egress_mode_name(enum egress_mode mode);
const char *egress_reason_name(enum egress_reason reason);
static inline bool egress_reason_allows(enum egress_reason r)
{
    return r <= EGRESS_ALLOW_LISTED;
}

/*
 * Parse one allowlist entry: "a.b.c.d/n", "x:y::z/n", or a bare address (a single host).
 * Strict: no spaces, no leading zeros, no zone ids, no host bits set beyond the prefix.
 * On error err says exactly what is wrong with the entry (the caller adds where it was).
 */
int egress_cidr_parse(const char *s, struct egress_cidr *ret_cidr, char *err, size_t errlen);
/*
 * Check and normalise a DNS host name into out (lower case, no trailing dot): labels of
 * letters, digits, '-' and '_', 1-63 bytes, 253 in all. A name whose last label is numeric
 * ("10.1", "2130706433", "0x7f.1") is refused: resolvers read those as IPv4 addresses.
 */
int egress_host_normalize(const char *in, char out[EGRESS_HOST_MAX + 1]);
/* A literal IPv4 or IPv6 address (IPv4-mapped IPv6 becomes IPv4); -EINVAL otherwise. */
int egress_addr_parse(const char *s, struct egress_addr *ret_addr);
/* From a sockaddr_in / sockaddr_in6 (IPv4-mapped becomes IPv4); -EAFNOSUPPORT otherwise. */
int egress_addr_from_sockaddr(const struct sockaddr *sa, socklen_t len,
                              struct egress_addr *ret_addr, uint16_t *ret_port);
/* To a sockaddr_in / sockaddr_in6; returns its length. */
socklen_t egress_addr_to_sockaddr(const struct egress_addr *a, uint16_t port,
                                  struct sockaddr_storage *ret_sa);
/* "1.2.3.4", "2001:db8::1"; with a port "1.2.3.4:80", "[2001:db8::1]:80". Never fails. */
void egress_addr_format(const struct egress_addr *a, char out[EGRESS_ADDR_TEXT_MAX]);
void egress_addr_port_format(const struct egress_addr *a, uint16_t port,
                             char out[EGRESS_ADDR_TEXT_MAX]);
bool egress_addr_equal(const struct egress_addr *a, const struct egress_addr *b);
bool egress_cidr_contains(const struct egress_cidr *c, const struct egress_addr *a);
/* The class of an address; host_local says the runner host delivers it locally. */
enum egress_class egress_addr_class(const struct egress_addr *a, bool host_local);

/* An empty policy (no entries, no endpoints). */
void egress_policy_init(struct egress_policy *p, enum egress_mode mode, bool private_egress);
int egress_policy_add_cidr(struct egress_policy *p, const char *entry, char *err, size_t errlen);
/*
 * Name an endpoint: host is a DNS name (letters, digits, '-', '_', dots; case-insensitive), a
 * literal address, or "[v6]". A duplicate is accepted once.
 */
int egress_policy_add_endpoint(struct egress_policy *p, const char *host, uint16_t port, char *err,
                               size_t errlen);
/*
 * Name the endpoint of a URL ("https://api.example.com/v1", "http://127.0.0.1:18080/v1"):
 * scheme http/https/ws/wss (default port 80/443), userinfo ignored.
 */
int egress_policy_add_url(struct egress_policy *p, const char *url, char *err, size_t errlen);
/* Record a resolved address of endpoint index i (duplicates are accepted once). */
int egress_policy_add_named_addr(struct egress_policy *p, size_t i, const struct egress_addr *a);
int egress_policy_add_runner_port(struct egress_policy *p, uint16_t port);

/*
 * The decision. host_local: the runner host's routing table delivers the address locally
 * (the proxy asks the kernel; a pure caller passes false). *ret_reason says why (may be NULL).
 */
bool egress_policy_check(const struct egress_policy *p, const struct egress_addr *a, uint16_t port,
                         bool host_local, enum egress_reason *ret_reason);
/* Whether some port of a might be allowed (to filter DNS answers): named or check() with any port.
 */
bool egress_policy_addr_possible(const struct egress_policy *p, const struct egress_addr *a,
                                 bool host_local);
/* The endpoint index whose name is host (case-insensitive, a trailing dot ignored), or -ENOENT. */
int egress_policy_find_endpoint(const struct egress_policy *p, const char *host);

/*
 * Ports the sandbox's own 127.0.0.1 / ::1 must hand to the proxy: the ports of named
 * addresses 127.0.0.1 and ::1 (other loopback addresses always go to the proxy). Sorted,
 * without duplicates; -E2BIG when more than max.
 */
int egress_policy_loopback_ports(const struct egress_policy *p, uint16_t *ports, size_t max,
                                 size_t *ret_n);

/*
 * /etc/hosts lines for the named endpoints that are host names with known addresses:
 * "<address> <name>\n" per address, appended to out.
 */
int egress_policy_render_hosts(const struct egress_policy *p, struct buf *out);

/*
 * The policy as carried in the keeper's spec, and back:
 *   {"mode":"on"|"allowlist"|"off", "privateEgress":bool, "allowlist":["cidr",...],
 *    "endpoints":[{"host":"h","port":n},...], "runnerPorts":[n,...]}
 * Resolved addresses of host names are not carried (the keeper resolves them).
 */
json_object *egress_policy_to_json(const struct egress_policy *p);
int egress_policy_from_json(json_object *o, struct egress_policy *ret_policy, char *err,
                            size_t errlen);

#endif
