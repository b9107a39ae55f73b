/*
 * nl — a minimal netlink client: build requests in a fixed buffer, send them, collect the
 * acknowledgements. Enough for rtnetlink (link up, routes, route lookups) and nf_tables
 * batches without libmnl/libnftnl: sandbox_net uses it to set up a sandbox's network
 * namespace in well under a millisecond, egress_proxy to ask which addresses are local.
 *
 * Building never fails midway: an overflow of NL_MSG_MAX is remembered in m->err and reported
 * by nl_transact (-E2BIG); nothing is sent then. Every message gets its own sequence number,
 * unique in the process (a late reply to an earlier request on the same socket is never taken
 * for this one's); those sent with NLM_F_ACK are waited for, and the first error the kernel
 * reports is returned as -errno.
 */
#ifndef AR_NL_H
#define AR_NL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NL_MSG_MAX 16384

struct nl_msg {
    size_t len;
    int err;
    uint32_t first; /* sequence numbers of this request are (first, seq] */
    uint32_t seq;   /* the last sequence number used */
    unsigned nacks; /* messages sent with NLM_F_ACK */
    uint8_t buf[NL_MSG_MAX] __attribute__((aligned(8)));
};

void nl_msg_init(struct nl_msg *m);
/*
 * Start a message of type with flags (NLM_F_REQUEST is added) followed by the fixed header
 * hdr (ifinfomsg, rtmsg, nfgenmsg, ...). Returns its offset for nl_msg_end.
 */
size_t nl_msg_begin(struct nl_msg *m, uint16_t type, uint16_t flags, const void *hdr,
                    size_t hdrlen);
void nl_msg_end(struct nl_msg *m, size_t off);

void nl_attr(struct nl_msg *m, uint16_t type, const void *data, size_t len);
void nl_attr_str(struct nl_msg *m, uint16_t type, const char *s); /* with its NUL */
void nl_attr_u8(struct nl_msg *m, uint16_t type, uint8_t v);
void nl_attr_be32(struct nl_msg *m, uint16_t type, uint32_t v); /* network order */
/* A nested attribute (NLA_F_NESTED): returns its offset for nl_nest_end. */
size_t nl_nest_begin(struct nl_msg *m, uint16_t type);
void nl_nest_end(struct nl_msg *m, size_t off);

/* A close-on-exec netlink socket of the given protocol (NETLINK_ROUTE, NETLINK_NETFILTER). */
int nl_open(int protocol);
/*
 * Send everything built in m and wait for the acknowledgement of every message that asked
 * for one. Returns 0 or the first error (-errno; -E2BIG when m overflowed); err names the
 * message that failed (its 1-based position) when errlen > 0.
 */
int nl_transact(int fd, struct nl_msg *m, char *err, size_t errlen);

/* rtnetlink: set interface ifindex up. */
int nl_link_up(int fd, int ifindex);
/*
 * rtnetlink: add a default route of family (AF_INET, AF_INET6) through interface ifindex,
 * with preferred source address prefsrc (4 or 16 bytes; NULL: the kernel's choice). A route
 * through `lo` needs 127.0.0.1 as its IPv4 source: the kernel would pick none (scope host).
 */
int nl_route_default_dev(int fd, int family, int ifindex, const uint8_t *prefsrc);
/*
 * rtnetlink: the route type (RTN_LOCAL, RTN_UNICAST, RTN_UNREACHABLE, ...) the kernel would
 * use for destination addr (4 or 16 bytes by family). RTN_LOCAL means "delivered to this
 * host". -ENETUNREACH and friends are returned as the errors they are.
 */
int nl_route_type(int fd, int family, const uint8_t *addr, unsigned *ret_type);

#endif
