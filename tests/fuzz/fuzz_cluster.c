/*
 * fuzz_cluster — what one member reads that another wrote in Redis (engine/cluster/cluster.h):
 * member records and owner values.
 *
 * Input layout: byte 0 picks the parser (even: a member record, odd: an owner value), the rest
 * is the text. Properties:
 *   - a record either fails with -EINVAL or yields a member whose name is a member name and
 *     whose URL is http(s) without blanks; formatted again, it parses back to the same member;
 *   - an owner value either fails with -EINVAL or yields a member name that is a prefix of the
 *     value, followed by nothing or a space.
 */
#include <errno.h>
#include <string.h>

#include "cluster/cluster.h"
#include "fuzz.h"

static void record(const char *text, size_t len)
{
    struct cluster_member m, again;
    char out[CLUSTER_RECORD_MAX];
    int r = cluster_member_parse(text, len, &m);

    FUZZ_CHECK(r == 0 || r == -EINVAL);
    if (r < 0)
        return;
    FUZZ_CHECK(cluster_name_ok(m.name));
    FUZZ_CHECK(strncmp(m.url, "http", 4) == 0 && !strpbrk(m.url, " \t\r\n\"\\"));
    FUZZ_CHECK(cluster_member_format(&m, out, sizeof(out)) == 0);
    FUZZ_CHECK(cluster_member_parse(out, strlen(out), &again) == 0);
    FUZZ_CHECK(strcmp(m.name, again.name) == 0 && strcmp(m.url, again.url) == 0);
    FUZZ_CHECK(m.capacity == again.capacity && m.load == again.load && m.runs == again.runs &&
               m.runs_max == again.runs_max && m.pid == again.pid);
}

static void owner(const char *text, size_t len)
{
    char name[CLUSTER_NAME_MAX];
    int r = cluster_owner_name(text, len, name, sizeof(name));
    size_t n;

    FUZZ_CHECK(r == 0 || r == -EINVAL);
    if (r < 0)
        return;
    n = strlen(name);
    FUZZ_CHECK(cluster_name_ok(name) && n <= len && memcmp(name, text, n) == 0);
    FUZZ_CHECK(n == len || text[n] == ' ');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if ((data[0] & 1) == 0)
        record((const char *)data + 1, size - 1);
    else
        owner((const char *)data + 1, size - 1);
    return 0;
}
