/*
 * dnsmsg — DNS queries in, answers out (see dnsmsg.h). Every read is bounds-checked against
 * the packet length before it happens.
 */
#include "egress/dnsmsg.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#define FLAG_QR 0x8000u
#define FLAG_OPCODE 0x7800u
#define FLAG_AA 0x0400u
#define FLAG_TC 0x0200u
#define FLAG_RD 0x0100u
#define FLAG_RA 0x0080u

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static bool name_byte_ok(uint8_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

int dnsmsg_parse_query(const uint8_t *pkt, size_t len, struct dnsmsg_query *ret_query,
                       enum dns_rcode *ret_rcode)
{
    struct dnsmsg_query q;
    uint16_t flags;
    size_t at = DNSMSG_HEADER, out = 0;

    if (!pkt || len < DNSMSG_HEADER)
        return -EINVAL;
    flags = get16(pkt + 2);
    if (flags & FLAG_QR)
        return -EINVAL; /* a response: never answer those (no loops) */
    memset(&q, 0, sizeof(q));
    q.id = get16(pkt);
    q.rd = (flags & FLAG_RD) != 0;
    *ret_query = q;
    if (flags & FLAG_OPCODE) {
        *ret_rcode = DNS_RCODE_NOTIMP;
        return -EBADMSG;
    }
    *ret_rcode = DNS_RCODE_FORMERR;
    if (get16(pkt + 4) != 1 || get16(pkt + 6) != 0 || get16(pkt + 8) != 0)
        return -EBADMSG;
    q.name_ok = true;
    for (;;) {
        uint8_t l;

        if (at >= len)
            return -EBADMSG;
        l = pkt[at];
        if (l == 0) {
            at++;
            break;
        }
        if (l > 63) /* compression pointers and extended label types */
            return -EBADMSG;
        if (at + 1 + l > len || at + 1 + l - DNSMSG_HEADER >= DNSMSG_NAME_WIRE_MAX)
            return -EBADMSG;
        if (out > 0)
            q.name[out++] = '.';
        for (size_t i = 0; i < l; i++) {
            uint8_t c = pkt[at + 1 + i];

            if (!name_byte_ok(c)) {
                q.name_ok = false;
                c = '?';
            }
            q.name[out++] = (char)((c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c);
        }
        at += 1u + l;
    }
    q.name[out] = '\0';
    if (at + 4 > len)
        return -EBADMSG;
    q.qtype = get16(pkt + at);
    q.qclass = get16(pkt + at + 2);
    at += 4;
    q.question_len = at - DNSMSG_HEADER;
    memcpy(q.question, pkt + DNSMSG_HEADER, q.question_len);
    q.has_question = true;
    *ret_query = q;
    *ret_rcode = DNS_RCODE_NOERROR;
    return 0;
}

size_t dnsmsg_build_answer(const struct dnsmsg_query *q, enum dns_rcode rcode,
                           const struct egress_addr *addrs, size_t naddrs, uint32_t ttl,
                           uint8_t out[DNSMSG_UDP_MAX])
{
    uint16_t flags = (uint16_t)(FLAG_QR | FLAG_RA | ((unsigned)rcode & 0xfu));
    size_t at = DNSMSG_HEADER;
    uint16_t nans = 0;
    uint8_t family = 0;
    size_t alen = 0;

    if (q->rd)
        flags |= FLAG_RD;
    memset(out, 0, DNSMSG_HEADER);
    put16(out, q->id);
    put16(out + 2, flags);
    if (q->has_question && q->question_len <= DNSMSG_QUESTION_MAX) {
        put16(out + 4, 1);
        memcpy(out + at, q->question, q->question_len);
        at += q->question_len;
    }
    if (rcode != DNS_RCODE_NOERROR || !q->has_question || q->qclass != DNS_CLASS_IN)
        return at;
    if (q->qtype == DNS_TYPE_A) {
        family = AF_INET;
        alen = 4;
    } else if (q->qtype == DNS_TYPE_AAAA) {
        family = AF_INET6;
        alen = 16;
    }
    for (size_t i = 0; family && i < naddrs && nans < DNSMSG_ANSWERS_MAX; i++) {
        if (addrs[i].family != family)
            continue;
        if (at + 12 + alen > DNSMSG_UDP_MAX)
            break; /* cannot happen with the caps above; never write past out */
        put16(out + at, 0xc000 | DNSMSG_HEADER); /* the name: a pointer to the question's */
        put16(out + at + 2, q->qtype);
        put16(out + at + 4, DNS_CLASS_IN);
        put32(out + at + 6, ttl);
        put16(out + at + 10, (uint16_t)alen);
        memcpy(out + at + 12, addrs[i].b, alen);
        at += 12 + alen;
        nans++;
    }
    put16(out + 6, nans);
    return at;
}

int dnsmsg_build_query(uint16_t id, const char *name, uint16_t qtype, uint8_t *out, size_t outmax)
{
    size_t at = DNSMSG_HEADER, nlen = strlen(name);
    const char *p = name;

    if (outmax < DNSMSG_HEADER + nlen + 2 + 4 || nlen + 2 > DNSMSG_NAME_WIRE_MAX)
        return -EINVAL;
    memset(out, 0, DNSMSG_HEADER);
    put16(out, id);
    put16(out + 2, FLAG_RD);
    put16(out + 4, 1);
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t l = dot ? (size_t)(dot - p) : strlen(p);

        if (l == 0 || l > 63)
            return -EINVAL;
        out[at++] = (uint8_t)l;
        memcpy(out + at, p, l);
        at += l;
        p += l;
        if (*p == '.')
            p++;
    }
    out[at++] = 0;
    put16(out + at, qtype);
    put16(out + at + 2, DNS_CLASS_IN);
    return (int)(at + 4);
}

/* Skip a (possibly compressed) name at *at; false when it runs off the packet. */
static bool skip_name(const uint8_t *pkt, size_t len, size_t *at)
{
    for (size_t steps = 0; steps < 128; steps++) {
        uint8_t l;

        if (*at >= len)
            return false;
        l = pkt[*at];
        if (l == 0) {
            (*at)++;
            return true;
        }
        if ((l & 0xc0) == 0xc0) {
            if (*at + 2 > len)
                return false;
            *at += 2;
            return true;
        }
        if (l > 63)
            return false;
        *at += 1u + l;
    }
    return false;
}

int dnsmsg_parse_answer(const uint8_t *pkt, size_t len, uint16_t *ret_id, enum dns_rcode *ret_rcode,
                        struct egress_addr *addrs, size_t max)
{
    size_t at = DNSMSG_HEADER, n = 0;
    unsigned qd, an;

    if (len < DNSMSG_HEADER || !(get16(pkt + 2) & FLAG_QR))
        return -EINVAL;
    *ret_id = get16(pkt);
    *ret_rcode = (enum dns_rcode)(get16(pkt + 2) & 0xf);
    qd = get16(pkt + 4);
    an = get16(pkt + 6);
    for (unsigned i = 0; i < qd; i++) {
        if (!skip_name(pkt, len, &at) || at + 4 > len)
            return -EINVAL;
        at += 4;
    }
    for (unsigned i = 0; i < an; i++) {
        uint16_t type, rdlen;

        if (!skip_name(pkt, len, &at) || at + 10 > len)
            return -EINVAL;
        type = get16(pkt + at);
        rdlen = get16(pkt + at + 8);
        at += 10;
        if (at + rdlen > len)
            return -EINVAL;
        if (n < max &&
            ((type == DNS_TYPE_A && rdlen == 4) || (type == DNS_TYPE_AAAA && rdlen == 16))) {
            memset(&addrs[n], 0, sizeof(addrs[n]));
            addrs[n].family = type == DNS_TYPE_A ? AF_INET : AF_INET6;
            memcpy(addrs[n].b, pkt + at, rdlen);
            n++;
        }
        at += rdlen;
    }
    return (int)n;
}
