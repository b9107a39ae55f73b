/*
 * nl — netlink requests in a fixed buffer (see nl.h).
 */
#include "egress/nl.h"

#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NL_RECV_MAX 32768
/* the kernel's alignment macros compute in int; the same sizes as size_t */
#define ALIGN4(n) (((size_t)(n) + 3u) & ~(size_t)3u)
#define ATTR_HDR ALIGN4(sizeof(struct nlattr))
#define MSG_HDR ALIGN4(sizeof(struct nlmsghdr))

#define SEQ_BLOCK 4096u /* sequence numbers per request: more than NL_MSG_MAX can hold */

void nl_msg_init(struct nl_msg *m)
{
    static uint32_t next; /* shared by every thread: taken atomically */

    m->len = 0;
    m->err = 0;
    m->first = __atomic_fetch_add(&next, SEQ_BLOCK, __ATOMIC_RELAXED);
    m->seq = m->first;
    m->nacks = 0;
}

/* Reserve len bytes (aligned to 4) and zero them; NULL after an overflow. */
static void *reserve(struct nl_msg *m, size_t len)
{
    size_t aligned = ALIGN4(len);
    void *p;

    if (m->err || aligned > NL_MSG_MAX - m->len) {
        m->err = -E2BIG;
        return NULL;
    }
    p = m->buf + m->len;
    memset(p, 0, aligned);
    m->len += aligned;
    return p;
}

size_t nl_msg_begin(struct nl_msg *m, uint16_t type, uint16_t flags, const void *hdr, size_t hdrlen)
{
    size_t off = m->len;
    struct nlmsghdr *h = reserve(m, MSG_HDR);
    void *p;

    if (!h)
        return off;
    h->nlmsg_type = type;
    h->nlmsg_flags = (uint16_t)(flags | NLM_F_REQUEST);
    h->nlmsg_seq = ++m->seq;
    if (flags & NLM_F_ACK)
        m->nacks++;
    p = reserve(m, hdrlen);
    if (p && hdrlen)
        memcpy(p, hdr, hdrlen);
    return off;
}

void nl_msg_end(struct nl_msg *m, size_t off)
{
    if (m->err)
        return;
    ((struct nlmsghdr *)(void *)(m->buf + off))->nlmsg_len = (uint32_t)(m->len - off);
}

void nl_attr(struct nl_msg *m, uint16_t type, const void *data, size_t len)
{
    struct nlattr *a;

    if (len > 0xffff - ATTR_HDR) {
        m->err = -E2BIG;
        return;
    }
    a = reserve(m, ATTR_HDR + len);
    if (!a)
        return;
    a->nla_type = type;
    a->nla_len = (uint16_t)(ATTR_HDR + len);
    if (len)
        memcpy((uint8_t *)a + ATTR_HDR, data, len);
}

void nl_attr_str(struct nl_msg *m, uint16_t type, const char *s)
{
    nl_attr(m, type, s, strlen(s) + 1);
}

void nl_attr_u8(struct nl_msg *m, uint16_t type, uint8_t v)
{
    nl_attr(m, type, &v, sizeof(v));
}

static void nl_attr_u32(struct nl_msg *m, uint16_t type, uint32_t v)
{
    nl_attr(m, type, &v, sizeof(v));
}

void nl_attr_be32(struct nl_msg *m, uint16_t type, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};

    nl_attr(m, type, b, sizeof(b));
}

size_t nl_nest_begin(struct nl_msg *m, uint16_t type)
{
    size_t off = m->len;
    struct nlattr *a = reserve(m, ATTR_HDR);

    if (a)
        a->nla_type = (uint16_t)(type | NLA_F_NESTED);
    return off;
}

void nl_nest_end(struct nl_msg *m, size_t off)
{
    size_t len = m->len - off;

    if (m->err)
        return;
    if (len > 0xffff) {
        m->err = -E2BIG;
        return;
    }
    ((struct nlattr *)(void *)(m->buf + off))->nla_len = (uint16_t)len;
}

int nl_open(int protocol)
{
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol);

    if (fd == -1)
        return -errno;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1) {
        int r = -errno;
        close(fd);
        return r;
    }
    return fd;
}

static int send_all(int fd, const struct nl_msg *m)
{
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    ssize_t n;

    do {
        n = sendto(fd, m->buf, m->len, 0, (struct sockaddr *)&kernel, sizeof(kernel));
    } while (n == -1 && errno == EINTR);
    if (n == -1)
        return -errno;
    return (size_t)n == m->len ? 0 : -EIO;
}

/*
 * Read replies until every acknowledgement arrived. For a lookup (want_reply), the first
 * non-error message of the sequence is copied to reply. Returns the first error.
 */
static int collect(int fd, struct nl_msg *m, void *reply, size_t replymax, char *err, size_t errlen)
{
    uint8_t buf[NL_RECV_MAX] __attribute__((aligned(8)));
    unsigned acked = 0;
    bool got_reply = reply == NULL;
    int first = 0;

    while (acked < m->nacks || !got_reply) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        size_t left;

        if (n == -1 && errno == EINTR)
            continue;
        if (n == -1)
            return first ? first : -errno;
        left = (size_t)n;
        for (struct nlmsghdr *h = (struct nlmsghdr *)(void *)buf; NLMSG_OK(h, left);
             h = NLMSG_NEXT(h, left)) {
            if (h->nlmsg_seq - m->first - 1 >= m->seq - m->first)
                continue; /* not ours (wrap-around safe: outside (first, seq]) */
            if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);

                if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
                    return -EPROTO;
                acked++;
                if (e->error != 0 && first == 0) {
                    first = e->error;
                    if (err && errlen)
                        snprintf(err, errlen, "netlink message %u: %s", h->nlmsg_seq - m->first,
                                 strerror(-e->error));
                    if (!got_reply)
                        return first; /* a failed lookup sends no answer */
                }
                continue;
            }
            if (!got_reply && h->nlmsg_type != NLMSG_DONE) {
                size_t len = h->nlmsg_len < replymax ? h->nlmsg_len : replymax;

                memcpy(reply, h, len);
                got_reply = true;
            }
        }
    }
    return first;
}

int nl_transact(int fd, struct nl_msg *m, char *err, size_t errlen)
{
    int r;

    if (m->err)
        return m->err;
    r = send_all(fd, m);
    if (r < 0)
        return r;
    return collect(fd, m, NULL, 0, err, errlen);
}

int nl_link_up(int fd, int ifindex)
{
    struct ifinfomsg ifi = {
        .ifi_family = AF_UNSPEC,
        .ifi_index = ifindex,
        .ifi_flags = IFF_UP,
        .ifi_change = IFF_UP,
    };
    struct nl_msg m;
    size_t off;

    nl_msg_init(&m);
    off = nl_msg_begin(&m, RTM_NEWLINK, NLM_F_ACK, &ifi, sizeof(ifi));
    nl_msg_end(&m, off);
    return nl_transact(fd, &m, NULL, 0);
}

int nl_route_default_dev(int fd, int family, int ifindex, const uint8_t *prefsrc)
{
    struct rtmsg rt = {
        .rtm_family = (unsigned char)family,
        .rtm_table = RT_TABLE_MAIN,
        .rtm_protocol = RTPROT_BOOT,
        .rtm_scope = family == AF_INET ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE,
        .rtm_type = RTN_UNICAST,
    };
    struct nl_msg m;
    size_t off;

    nl_msg_init(&m);
    off = nl_msg_begin(&m, RTM_NEWROUTE, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, &rt, sizeof(rt));
    nl_attr_u32(&m, RTA_OIF, (uint32_t)ifindex);
    if (prefsrc)
        nl_attr(&m, RTA_PREFSRC, prefsrc, family == AF_INET ? 4 : 16);
    nl_msg_end(&m, off);
    return nl_transact(fd, &m, NULL, 0);
}

int nl_route_type(int fd, int family, const uint8_t *addr, unsigned *ret_type)
{
    struct rtmsg rt = {
        .rtm_family = (unsigned char)family,
        .rtm_dst_len = family == AF_INET ? 32 : 128,
    };
    struct {
        struct nlmsghdr h;
        struct rtmsg rt;
        uint8_t attrs[512];
    } reply;
    struct nl_msg m;
    size_t off;
    int r;

    memset(&reply, 0, sizeof(reply));
    nl_msg_init(&m);
    off = nl_msg_begin(&m, RTM_GETROUTE, 0, &rt, sizeof(rt));
    nl_attr(&m, RTA_DST, addr, family == AF_INET ? 4 : 16);
    nl_msg_end(&m, off);
    if (m.err)
        return m.err;
    r = send_all(fd, &m);
    if (r < 0)
        return r;
    r = collect(fd, &m, &reply, sizeof(reply), NULL, 0);
    if (r < 0)
        return r;
    if (reply.h.nlmsg_type != RTM_NEWROUTE || reply.h.nlmsg_len < NLMSG_LENGTH(sizeof(rt)))
        return -EPROTO;
    *ret_type = reply.rt.rtm_type;
    return 0;
}
