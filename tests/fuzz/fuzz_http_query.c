/*
 * fuzz_http_query — http_query_get, the parser of the query string a client sends to
 * GET /turns/{id}/events (after, projectId): nginx passes it through as it came.
 *
 * Input layout: byte 0 picks the output size (1..64, or 4096 when 0); then the parameter name,
 * a NUL, and the rest is the QUERY_STRING (cut at a NUL: libfcgi parameters are C strings).
 * Properties, against an oracle written here from the contract in fcgi/http.h:
 *   - the answer is 1 (present), 0 (absent), -E2BIG or -EINVAL, as the oracle says;
 *   - when present, out is the oracle's decoding, NUL-terminated inside outlen, with no NUL
 *     inside it (a %00 is refused, never cut at);
 *   - nothing is read or written outside the input and out (the sanitizers' part).
 */
#include <errno.h>
#include <string.h>

#include "../../fcgi/http.h"
#include "fuzz.h"

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The first "name[=value]" component of query whose name is name, decoded into out. */
static int oracle(const char *query, const char *name, char *out, size_t outlen)
{
    const char *p = query;

    if (!name[0])
        return 0;
    for (;;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        size_t klen = eq ? (size_t)(eq - p) : len;

        if (klen == strlen(name) && strncmp(p, name, klen) == 0) {
            const char *v = eq ? eq + 1 : p + len, *end = p + len;
            size_t o = 0;

            while (v < end) {
                int c = (unsigned char)*v;
                if (c == '+') {
                    c = ' ';
                    v++;
                } else if (c == '%') {
                    if (end - v < 3 || hexval(v[1]) < 0 || hexval(v[2]) < 0)
                        return -EINVAL;
                    c = hexval(v[1]) * 16 + hexval(v[2]);
                    if (c == 0)
                        return -EINVAL;
                    v += 3;
                } else {
                    v++;
                }
                if (o + 1 >= outlen)
                    return -E2BIG;
                out[o++] = (char)c;
            }
            out[o] = '\0';
            return 1;
        }
        if (!amp)
            return 0;
        p = amp + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy, *name, *query, got[4097], want[4097];
    size_t outlen;
    int r, w;

    if (size < 2)
        return 0;
    outlen = data[0] % 65 ? (size_t)(data[0] % 65) : 4096;
    copy = malloc(size);
    if (!copy)
        return 0;
    memcpy(copy, data + 1, size - 1);
    copy[size - 1] = '\0';
    name = copy;
    query = memchr(copy, '\0', size - 1);
    query = query && query < copy + size - 1 ? query + 1 : copy + size - 1;
    memset(got, 0x55, sizeof(got));
    r = http_query_get(query, name, got, outlen);
    w = oracle(query, name, want, outlen);
    FUZZ_CHECK(r == w);
    if (r == 1) {
        FUZZ_CHECK(memchr(got, '\0', outlen) != NULL);
        FUZZ_CHECK(strcmp(got, want) == 0);
        FUZZ_CHECK(strlen(got) < outlen);
    }
    FUZZ_CHECK(http_query_get(NULL, name, got, outlen) == 0);
    free(copy);
    return 0;
}
