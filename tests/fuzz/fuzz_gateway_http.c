/*
 * fuzz_gateway_http — the HTTP a sandbox sends its model gateway (gateway/gateway_http.h).
 *
 * Input layout: byte 0 picks the parser: even, a request head (the rest of the input as
 * received); odd, a chunked body, fed to the decoder in pieces of (byte 1 % 16) + 1 bytes with
 * an output room of (byte 2 % 64) + 1 bytes per call. Properties:
 *   - gateway_http_head_end says 0, -E2BIG or a length within the input and the head cap;
 *   - gateway_http_parse returns 0, -EBADMSG, -ENOSYS or -E2BIG; a parsed head's method is a
 *     short token, its target and every field lie inside the input, no field name is empty,
 *     and never both a Content-Length and chunked;
 *   - the chunked decoder never consumes more than it was given nor writes past its room, and
 *     decoding in pieces gives the same verdict as decoding at once, and for a well-formed
 *     body the same bytes.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "gateway/gateway_http.h"

static void head(const char *d, size_t n)
{
    struct gateway_http_request r;
    char err[160];
    ssize_t end = gateway_http_head_end(d, n);
    int rc;

    FUZZ_CHECK(end == 0 || end == -E2BIG ||
               (end > 0 && (size_t)end <= n && (size_t)end <= GATEWAY_HTTP_HEAD_MAX));
    if (end <= 0)
        return;
    rc = gateway_http_parse(d, (size_t)end, &r, err, sizeof(err));
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == -ENOSYS || rc == -E2BIG);
    if (rc != 0)
        return;
    FUZZ_CHECK(strlen(r.method) > 0 && strlen(r.method) <= GATEWAY_HTTP_METHOD_MAX);
    FUZZ_CHECK(r.target >= d && r.target + r.target_len <= d + end);
    FUZZ_CHECK(!(r.chunked && r.has_length));
    for (size_t i = 0; i < r.nfields; i++) {
        FUZZ_CHECK(r.fields[i].name_len > 0);
        FUZZ_CHECK(r.fields[i].name >= d && r.fields[i].name + r.fields[i].name_len <= d + end);
        FUZZ_CHECK(r.fields[i].value >= d && r.fields[i].value + r.fields[i].value_len <= d + end);
    }
}

/* Decode all of d in pieces of step bytes with room bytes of output per call. */
static int chunked(const char *d, size_t n, size_t step, size_t room, char *out, size_t outmax,
                   size_t *ret_len, bool *ret_done)
{
    struct gateway_chunked c;
    size_t pos = 0, o = 0;

    gateway_chunked_init(&c);
    while (pos < n && !c.done) {
        size_t take = n - pos < step ? n - pos : step, got = 0, r0 = room;
        ssize_t used;

        if (r0 > outmax - o)
            r0 = outmax - o;
        used = gateway_chunked_decode(&c, d + pos, take, out + o, r0, &got);
        if (used < 0) {
            FUZZ_CHECK(used == -EBADMSG);
            *ret_len = o;
            *ret_done = false;
            return -EBADMSG;
        }
        FUZZ_CHECK((size_t)used <= take && got <= r0);
        o += got;
        pos += (size_t)used;
        if (used == 0 && got == 0 && o == outmax)
            break;
    }
    *ret_len = o;
    *ret_done = c.done;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char a[1 << 16], b[1 << 16];
    size_t la, lb;
    bool da, db;
    int ra, rb;

    if (size < 3)
        return 0;
    if ((data[0] & 1) == 0) {
        head((const char *)data + 1, size - 1);
        return 0;
    }
    ra = chunked((const char *)data + 3, size - 3, size, sizeof(a), a, sizeof(a), &la, &da);
    rb = chunked((const char *)data + 3, size - 3, (size_t)(data[1] % 16) + 1,
                 (size_t)(data[2] % 64) + 1, b, sizeof(b), &lb, &db);
    FUZZ_CHECK(ra == rb);
    if (ra == 0)
        FUZZ_CHECK(la == lb && da == db && memcmp(a, b, la) == 0);
    return 0;
}
