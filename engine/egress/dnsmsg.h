/*
 * dnsmsg — the DNS wire format, just enough for the sandbox's resolver (egress_dns): parse a
 * standard query with one question, build its answer (A / AAAA records or an error code).
 * Pure, no allocation; the input is hostile (it comes from the sandbox) and is fuzzed
 * (tests/fuzz/fuzz_dnsmsg.c).
 *
 * Accepted queries: a header with QR=0, OPCODE=0 (QUERY), QDCOUNT=1, ANCOUNT=NSCOUNT=0, then
 * one question whose name is plain labels (no compression pointers) of at most 255 wire bytes.
 * Anything after the question (an EDNS0 OPT record, ...) is ignored. The question is kept byte
 * for byte so the answer echoes it exactly (resolvers that randomise the case compare it).
 */
#ifndef AR_DNSMSG_H
#define AR_DNSMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egress/egress_policy.h"

#define DNSMSG_HEADER 12
#define DNSMSG_NAME_WIRE_MAX 255
#define DNSMSG_QUESTION_MAX (DNSMSG_NAME_WIRE_MAX + 4)
#define DNSMSG_UDP_MAX 512 /* the answers built here always fit a classic UDP datagram */
#define DNSMSG_ANSWERS_MAX 16

#define DNS_TYPE_A 1
#define DNS_TYPE_AAAA 28
#define DNS_CLASS_IN 1

enum dns_rcode {
    DNS_RCODE_NOERROR = 0,
    DNS_RCODE_FORMERR = 1,
    DNS_RCODE_SERVFAIL = 2,
    DNS_RCODE_NXDOMAIN = 3,
    DNS_RCODE_NOTIMP = 4,
    DNS_RCODE_REFUSED = 5,
};

struct dnsmsg_query {
    uint16_t id;
    bool rd;           /* recursion desired: echoed */
    bool has_question; /* false: only the header could be read (answer FORMERR/NOTIMP) */
    uint16_t qtype, qclass;
    /* the name in presentation form: labels joined by '.', no trailing dot, "" for the root;
     * bytes other than letters, digits, '-' and '_' make name_ok false */
    char name[DNSMSG_NAME_WIRE_MAX + 1];
    bool name_ok;
    uint8_t question[DNSMSG_QUESTION_MAX]; /* the question section as received */
    size_t question_len;
};

/*
 * Parse a query. Returns:
 *   0                a well-formed query (has_question, name, qtype, qclass set);
 *   -EBADMSG         a query header (id readable) with a malformed or unsupported body:
 *                    answer it with ret_rcode (FORMERR or NOTIMP) and no question;
 *   -EINVAL          not a query at all (too short, or a response): drop it.
 */
int dnsmsg_parse_query(const uint8_t *pkt, size_t len, struct dnsmsg_query *ret_query,
                       enum dns_rcode *ret_rcode);

/*
 * The answer to q: rcode, and for NOERROR the addresses among addrs whose family matches
 * q->qtype (A: IPv4, AAAA: IPv6; at most DNSMSG_ANSWERS_MAX), each with ttl seconds. Writes at
 * most DNSMSG_UDP_MAX bytes to out (which must hold that many). Returns the length.
 */
size_t dnsmsg_build_answer(const struct dnsmsg_query *q, enum dns_rcode rcode,
                           const struct egress_addr *addrs, size_t naddrs, uint32_t ttl,
                           uint8_t out[DNSMSG_UDP_MAX]);

/*
 * For tests (the client side: the runner only answers): build a query for name (presentation form)
 * and qtype. Returns the length, or -EINVAL when the name is not encodable.
 */
int dnsmsg_build_query(uint16_t id, const char *name, uint16_t qtype, uint8_t *out, size_t outmax);
/*
 * For tests (the client side, and the fuzz target's round trip): read the answer records of a
 * response of ours (or anyone's, without compression beyond pointers to the question). Returns the
 * number of A/AAAA addresses written to addrs (at most max), or -EINVAL; ret_rcode and ret_id are
 * set.
 */
int dnsmsg_parse_answer(const uint8_t *pkt, size_t len, uint16_t *ret_id, enum dns_rcode *ret_rcode,
                        struct egress_addr *addrs, size_t max);

#endif
