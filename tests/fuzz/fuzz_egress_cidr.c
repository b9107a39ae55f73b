/*
 * fuzz_egress_cidr — the allowlist entries of sandboxPermission.network.allowlist and the
 * endpoint URLs the runner names (egress_policy).
 *
 * Input layout: byte 0 picks the parser (even: CIDR, odd: URL), the rest (up to a NUL) is the
 * text. Properties:
 *   - a CIDR either fails with a message or yields a range with no host bits set, whose
 *     canonical text parses back to the same range, and which contains its own network
 *     address (and, as an allowlist entry, is judged without crashing for a few addresses);
 *   - a URL either fails with a message or adds exactly one endpoint (or none for a
 *     duplicate), with a port in 1-65535 and a host that is a valid name or an address.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "egress/egress_policy.h"
#include "fuzz.h"

static struct egress_policy pol; /* 40 KB: not on the stack */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[512], err[200] = "";
    size_t n;

    if (size < 1)
        return 0;
    n = size - 1 < sizeof(text) - 1 ? size - 1 : sizeof(text) - 1;
    memcpy(text, data + 1, n);
    text[n] = '\0';
    if ((data[0] & 1) == 0) {
        struct egress_cidr c, again;
        char canon[EGRESS_ADDR_TEXT_MAX + 8], addr[EGRESS_ADDR_TEXT_MAX];
        unsigned bits;
        int r = egress_cidr_parse(text, &c, err, sizeof(err));

        FUZZ_CHECK(r == 0 || r == -EINVAL);
        if (r < 0) {
            FUZZ_CHECK(err[0] != '\0');
            return 0;
        }
        bits = c.net.family == 2 ? 32 : 128;
        FUZZ_CHECK(c.net.family == 2 || c.net.family == 10);
        FUZZ_CHECK(c.prefix <= bits);
        for (unsigned i = c.prefix; i < bits; i++)
            FUZZ_CHECK((c.net.b[i / 8] & (0x80u >> (i % 8))) == 0);
        FUZZ_CHECK(egress_cidr_contains(&c, &c.net));
        egress_addr_format(&c.net, addr);
        snprintf(canon, sizeof(canon), "%s/%u", addr, (unsigned)c.prefix);
        FUZZ_CHECK(egress_cidr_parse(canon, &again, NULL, 0) == 0);
        FUZZ_CHECK(again.prefix == c.prefix && egress_addr_equal(&again.net, &c.net));
        egress_policy_init(&pol, EGRESS_MODE_ALLOWLIST, data[0] & 2);
        FUZZ_CHECK(egress_policy_add_cidr(&pol, text, NULL, 0) == 0);
        FUZZ_CHECK(egress_policy_check(&pol, &c.net, 443, false, NULL) ||
                   egress_addr_class(&c.net, false) != EGRESS_CLASS_PUBLIC);
        (void)egress_policy_check(&pol, &c.net, 443, true, NULL);
        (void)egress_policy_addr_possible(&pol, &c.net, false);
    } else {
        size_t before;
        int r;

        egress_policy_init(&pol, EGRESS_MODE_OFF, false);
        FUZZ_CHECK(egress_policy_add_url(&pol, "https://dup.example/", NULL, 0) == 0);
        before = pol.nendpoints;
        r = egress_policy_add_url(&pol, text, err, sizeof(err));
        FUZZ_CHECK(r == 0 || r == -EINVAL);
        if (r < 0) {
            FUZZ_CHECK(err[0] != '\0' && pol.nendpoints == before);
            return 0;
        }
        FUZZ_CHECK(pol.nendpoints == before || pol.nendpoints == before + 1);
        for (size_t i = 0; i < pol.nendpoints; i++) {
            const struct egress_endpoint *e = &pol.endpoints[i];
            struct egress_addr a;
            char norm[EGRESS_HOST_MAX + 1];

            FUZZ_CHECK(e->port >= 1);
            if (e->literal)
                FUZZ_CHECK(egress_addr_parse(e->host, &a) == 0);
            else
                FUZZ_CHECK(egress_host_normalize(e->host, norm) == 0 && strcmp(norm, e->host) == 0);
        }
    }
    return 0;
}
