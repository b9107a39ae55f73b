/*
 * fuzz_dnsmsg — the DNS queries a sandbox sends the keeper's name server (egress_dns).
 *
 * Input layout: the whole input is one datagram as received. Properties:
 *   - dnsmsg_parse_query never reads past the input (the sanitizers check) and returns 0,
 *     -EBADMSG or -EINVAL only;
 *   - a parsed query has a name of at most 253 presentation bytes, lower case when name_ok,
 *     and a question section that is a prefix-free copy of the input's;
 *   - its answer (built with addresses taken from the input's bytes) fits DNSMSG_UDP_MAX,
 *     parses back with the same id, echoes the question byte for byte, and carries only
 *     addresses of the asked family, each one of those given;
 *   - an -EBADMSG query is answered with the header only, carrying its id and rcode.
 */
#include <errno.h>
#include <string.h>

#include "egress/dnsmsg.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dnsmsg_query q;
    struct egress_addr given[6], back[DNSMSG_ANSWERS_MAX + 1];
    uint8_t out[DNSMSG_UDP_MAX];
    enum dns_rcode rcode = DNS_RCODE_NOERROR, got_rcode;
    uint16_t id;
    size_t len;
    int r, n;

    r = dnsmsg_parse_query(data, size, &q, &rcode);
    FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -EINVAL);
    if (r == -EINVAL)
        return 0;
    if (r == -EBADMSG) {
        FUZZ_CHECK(!q.has_question);
        FUZZ_CHECK(rcode == DNS_RCODE_FORMERR || rcode == DNS_RCODE_NOTIMP);
        len = dnsmsg_build_answer(&q, rcode, NULL, 0, 30, out);
        FUZZ_CHECK(len == DNSMSG_HEADER);
        FUZZ_CHECK(dnsmsg_parse_answer(out, len, &id, &got_rcode, back, 1) == 0);
        FUZZ_CHECK(id == q.id && got_rcode == rcode);
        return 0;
    }
    FUZZ_CHECK(q.has_question);
    FUZZ_CHECK(strlen(q.name) <= 253);
    FUZZ_CHECK(q.question_len >= 5 && q.question_len <= DNSMSG_QUESTION_MAX);
    FUZZ_CHECK(DNSMSG_HEADER + q.question_len <= size);
    FUZZ_CHECK(memcmp(q.question, data + DNSMSG_HEADER, q.question_len) == 0);
    if (q.name_ok)
        for (const char *p = q.name; *p; p++)
            FUZZ_CHECK(!(*p >= 'A' && *p <= 'Z'));

    /* addresses from the input itself: both families, so the filter by type is exercised */
    for (size_t i = 0; i < 6; i++) {
        memset(&given[i], 0, sizeof(given[i]));
        given[i].family = (i & 1) ? 10 : 2; /* AF_INET6 : AF_INET */
        for (size_t k = 0; k < 16; k++)
            given[i].b[k] = data[(i * 16 + k) % size];
        if (given[i].family == 2)
            memset(given[i].b + 4, 0, 12);
    }
    len = dnsmsg_build_answer(&q, DNS_RCODE_NOERROR, given, 6, 30, out);
    FUZZ_CHECK(len <= DNSMSG_UDP_MAX);
    FUZZ_CHECK(len >= DNSMSG_HEADER + q.question_len);
    FUZZ_CHECK(memcmp(out + DNSMSG_HEADER, q.question, q.question_len) == 0);
    n = dnsmsg_parse_answer(out, len, &id, &got_rcode, back, DNSMSG_ANSWERS_MAX + 1);
    FUZZ_CHECK(n >= 0 && id == q.id && got_rcode == DNS_RCODE_NOERROR);
    if (q.qclass != DNS_CLASS_IN || (q.qtype != DNS_TYPE_A && q.qtype != DNS_TYPE_AAAA)) {
        FUZZ_CHECK(n == 0);
        return 0;
    }
    FUZZ_CHECK(n == 3);
    for (int i = 0; i < n; i++) {
        bool found = false;

        FUZZ_CHECK(back[i].family == (q.qtype == DNS_TYPE_A ? 2 : 10));
        for (size_t k = 0; k < 6 && !found; k++)
            found = egress_addr_equal(&back[i], &given[k]);
        FUZZ_CHECK(found);
    }
    return 0;
}
