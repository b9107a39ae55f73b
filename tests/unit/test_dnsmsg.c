/*
 * dnsmsg — queries in, answers out; malformed input never answered wrongly.
 */
#include <string.h>

#include "egress/dnsmsg.h"
#include "suites.h"

static struct egress_addr addr(const char *s)
{
    struct egress_addr a = {0};

    egress_addr_parse(s, &a);
    return a;
}

static void test_dnsmsg_round_trip(void)
{
    uint8_t pkt[512], out[DNSMSG_UDP_MAX];
    struct dnsmsg_query q;
    struct egress_addr addrs[3] = {addr("93.184.216.34"), addr("2606:2800::1"), addr("10.0.0.1")},
                       back[4];
    enum dns_rcode rcode;
    uint16_t id = 0;
    int n = dnsmsg_build_query(0x1234, "Api.Example.com", DNS_TYPE_A, pkt, sizeof(pkt));
    size_t len;

    CU_ASSERT_FATAL(n > 0);
    CU_ASSERT_EQUAL(dnsmsg_parse_query(pkt, (size_t)n, &q, &rcode), 0);
    CU_ASSERT_EQUAL(q.id, 0x1234);
    CU_ASSERT_TRUE(q.rd);
    CU_ASSERT_TRUE(q.has_question);
    CU_ASSERT_TRUE(q.name_ok);
    CU_ASSERT_STRING_EQUAL(q.name, "api.example.com");
    CU_ASSERT_EQUAL(q.qtype, DNS_TYPE_A);
    CU_ASSERT_EQUAL(q.qclass, DNS_CLASS_IN);
    len = dnsmsg_build_answer(&q, DNS_RCODE_NOERROR, addrs, 3, 30, out);
    CU_ASSERT_EQUAL(len, (size_t)n + 2 * 16);
    /* the question is echoed byte for byte (the case too) */
    CU_ASSERT_EQUAL(memcmp(out + DNSMSG_HEADER, pkt + DNSMSG_HEADER, (size_t)n - 12), 0);
    CU_ASSERT_EQUAL(dnsmsg_parse_answer(out, len, &id, &rcode, back, 4), 2);
    CU_ASSERT_EQUAL(id, 0x1234);
    CU_ASSERT_EQUAL(rcode, DNS_RCODE_NOERROR);
    CU_ASSERT_TRUE(egress_addr_equal(&back[0], &addrs[0]));
    CU_ASSERT_TRUE(egress_addr_equal(&back[1], &addrs[2]));

    n = dnsmsg_build_query(7, "example.com", DNS_TYPE_AAAA, pkt, sizeof(pkt));
    CU_ASSERT_EQUAL(dnsmsg_parse_query(pkt, (size_t)n, &q, &rcode), 0);
    len = dnsmsg_build_answer(&q, DNS_RCODE_NOERROR, addrs, 3, 30, out);
    CU_ASSERT_EQUAL(dnsmsg_parse_answer(out, len, &id, &rcode, back, 4), 1);
    CU_ASSERT_TRUE(egress_addr_equal(&back[0], &addrs[1]));
    /* errors carry no answers */
    len = dnsmsg_build_answer(&q, DNS_RCODE_REFUSED, addrs, 3, 30, out);
    CU_ASSERT_EQUAL(dnsmsg_parse_answer(out, len, &id, &rcode, back, 4), 0);
    CU_ASSERT_EQUAL(rcode, DNS_RCODE_REFUSED);
    CU_ASSERT_EQUAL(len, (size_t)n);
}

static void test_dnsmsg_answer_cap(void)
{
    uint8_t pkt[512], out[DNSMSG_UDP_MAX];
    struct egress_addr many[40], back[40];
    struct dnsmsg_query q;
    enum dns_rcode rcode;
    uint16_t id;
    char name[300];
    int n;
    size_t len;

    for (size_t i = 0; i < 40; i++) {
        memset(&many[i], 0, sizeof(many[i]));
        many[i].family = 10; /* AF_INET6 */
        many[i].b[0] = 0x20;
        many[i].b[15] = (uint8_t)i;
    }
    /* the longest name: the answers still fit a 512-byte datagram */
    memset(name, 'a', sizeof(name));
    for (size_t i = 63; i < 253; i += 64)
        name[i] = '.';
    name[253] = '\0';
    n = dnsmsg_build_query(1, name, DNS_TYPE_AAAA, pkt, sizeof(pkt));
    CU_ASSERT_FATAL(n > 0);
    CU_ASSERT_EQUAL(dnsmsg_parse_query(pkt, (size_t)n, &q, &rcode), 0);
    len = dnsmsg_build_answer(&q, DNS_RCODE_NOERROR, many, 40, 30, out);
    CU_ASSERT(len <= DNSMSG_UDP_MAX);
    n = dnsmsg_parse_answer(out, len, &id, &rcode, back, 40);
    CU_ASSERT(n >= 1 && n <= DNSMSG_ANSWERS_MAX);
}

static void test_dnsmsg_malformed(void)
{
    uint8_t pkt[600];
    struct dnsmsg_query q;
    enum dns_rcode rcode;
    int n = dnsmsg_build_query(0xbeef, "a.example", DNS_TYPE_A, pkt, sizeof(pkt));

    CU_ASSERT_FATAL(n > 0);
    /* too short, or a response: dropped */
    CU_ASSERT_EQUAL(dnsmsg_parse_query(pkt, 11, &q, &rcode), -EINVAL);
    pkt[2] |= 0x80;
    CU_ASSERT_EQUAL(dnsmsg_parse_query(pkt, (size_t)n, &q, &rcode), -EINVAL);
    pkt[2] &= 0x7f;
    /* another opcode: NOTIMP, with the id */
    pkt[2] |= 0x10;
    CU_ASSERT_EQUAL(dnsmsg_parse_query(pkt, (size_t)n, &q, &rcode), -EBADMSG);
    CU_ASSERT_EQUAL(rcode, DNS_RCODE_NOTIMP);
    CU_ASSERT_EQUAL(q.id, 0xbeef);
    CU_ASSERT_FALSE(q.has_question);
    pkt[2] &= (uint8_t)~0x10;
    /* two questions, an answer section, truncated name, truncated type: FORMERR */
    pkt[5] = 2;
    CU_ASSERT_EQUAL(dnsmsg_parse_query(pkt, (size_t)n, &q, &rcode), -EBADMSG);
    CU_ASSERT_EQUAL(rcode, DNS_RCODE_FORMERR);
    pkt[5] = 1;
    pkt[7] = 1;
    CU_ASSERT_EQUAL(dnsmsg_parse_query(pkt, (size_t)n, &q, &rcode), -EBADMSG);
    pkt[7] = 0;
    CU_ASSERT_EQUAL(dnsmsg_parse_query(pkt, 14, &q, &rcode), -EBADMSG);
    CU_ASSERT_EQUAL(dnsmsg_parse_query(pkt, (size_t)n - 1, &q, &rcode), -EBADMSG);
    CU_ASSERT_EQUAL(dnsmsg_parse_query(pkt, (size_t)n, &q, &rcode), 0);
    /* a compression pointer in the question */
    pkt[12] = 0xc0;
    CU_ASSERT_EQUAL(dnsmsg_parse_query(pkt, (size_t)n, &q, &rcode), -EBADMSG);
    pkt[12] = 1;
    /* odd bytes in a label: parsed, but not a usable name */
    pkt[13] = ' ';
    CU_ASSERT_EQUAL(dnsmsg_parse_query(pkt, (size_t)n, &q, &rcode), 0);
    CU_ASSERT_FALSE(q.name_ok);
    /* a name longer than 255 wire bytes */
    memset(pkt + 12, 0, sizeof(pkt) - 12);
    for (size_t at = 12; at < 12 + 5 * 60; at += 60) {
        pkt[at] = 59;
        memset(pkt + at + 1, 'a', 59);
    }
    CU_ASSERT_EQUAL(dnsmsg_parse_query(pkt, sizeof(pkt), &q, &rcode), -EBADMSG);
    /* the FORMERR answer has the header only */
    {
        uint8_t out[DNSMSG_UDP_MAX];
        CU_ASSERT_EQUAL(dnsmsg_build_answer(&q, rcode, NULL, 0, 0, out), DNSMSG_HEADER);
        CU_ASSERT_EQUAL(out[0], 0xbe);
        CU_ASSERT_EQUAL(out[3] & 0xf, DNS_RCODE_FORMERR);
    }
    CU_ASSERT_EQUAL(dnsmsg_build_query(1, "a..b", DNS_TYPE_A, pkt, sizeof(pkt)), -EINVAL);
}

CU_TestInfo dnsmsg_tests[] = {
    {"round_trip", test_dnsmsg_round_trip},
    {"answer_cap", test_dnsmsg_answer_cap},
    {"malformed", test_dnsmsg_malformed},
    CU_TEST_INFO_NULL,
};
