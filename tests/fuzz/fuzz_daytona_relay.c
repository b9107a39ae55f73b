/*
 * fuzz_daytona_relay — the frames a (hostile) sandbox's keeper channel relay prints, as the
 * keeper parses them (engine/provider/daytona/daytona_relay.c): daytona_relay_frame_parse on every
 * line of the input, base64 decoding of each data payload, and the keeper's own encoding.
 * Properties:
 *   - a parsed frame has an id in 1..DAYTONA_RELAY_ID_MAX (0 only for ready), a data payload
 *     inside the line whose length is a multiple of 4, and nothing for the other kinds;
 *   - a payload that decodes gives at most 3/4 of its length, and re-encoding the decoded bytes
 *     gives a payload of the same length;
 *   - whatever bytes a line holds, framing them as data gives one '\n'-free line that parses
 *     back to the same id and decodes back to exactly those bytes;
 *   - decode(encode(x)) == x for the whole input.
 */
#include <string.h>

#include "base/buf.h"
#include "fuzz.h"
#include "provider/daytona/daytona_relay.h"

#define MAX (1u << 20)

static void one_line(const char *line, size_t len, uint32_t n)
{
    struct daytona_relay_frame f;
    struct buf dec, enc;

    buf_init(&dec, MAX);
    buf_init(&enc, 4 * MAX);
    if (daytona_relay_frame_parse(line, len, &f) == 0) {
        FUZZ_CHECK(f.kind <= DAYTONA_RELAY_CLOSE);
        FUZZ_CHECK(f.kind == DAYTONA_RELAY_READY ? f.id == 0
                                                  : f.id >= 1 && f.id <= DAYTONA_RELAY_ID_MAX);
        if (f.kind == DAYTONA_RELAY_DATA) {
            FUZZ_CHECK(f.payload >= line && f.payload + f.payload_len == line + len);
            FUZZ_CHECK(f.payload_len % 4 == 0);
            if (daytona_relay_b64_decode(f.payload, f.payload_len, &dec) == 0) {
                FUZZ_CHECK(dec.len <= f.payload_len / 4 * 3);
                FUZZ_CHECK(daytona_relay_b64_encode(dec.data ? dec.data : "", dec.len, &enc) == 0);
                FUZZ_CHECK(enc.len == f.payload_len);
            }
        } else {
            FUZZ_CHECK(f.payload == NULL && f.payload_len == 0);
        }
    }
    /* the keeper's own frame of these bytes */
    buf_reset(&enc);
    buf_reset(&dec);
    FUZZ_CHECK(daytona_relay_frame_data(n, line, len, &enc) == 0);
    FUZZ_CHECK(enc.len > 0 && enc.data[enc.len - 1] == '\n');
    FUZZ_CHECK(memchr(enc.data, '\n', enc.len - 1) == NULL);
    FUZZ_CHECK(daytona_relay_frame_parse(enc.data, enc.len - 1, &f) == 0);
    FUZZ_CHECK(f.kind == DAYTONA_RELAY_DATA && f.id == n);
    FUZZ_CHECK(daytona_relay_b64_decode(f.payload, f.payload_len, &dec) == 0);
    FUZZ_CHECK(dec.len == len && (len == 0 || memcmp(dec.data, line, len) == 0));
    buf_release(&dec);
    buf_release(&enc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    struct buf enc, dec;
    uint32_t n = 1;

    if (size > MAX / 2)
        return 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);

        one_line(p, len, n);
        n = n % DAYTONA_RELAY_ID_MAX + 1;
        p += len + (nl ? 1 : 0);
    }
    buf_init(&enc, 4 * MAX);
    buf_init(&dec, MAX);
    FUZZ_CHECK(daytona_relay_b64_encode(data, size, &enc) == 0);
    FUZZ_CHECK(daytona_relay_b64_decode(enc.data ? enc.data : "", enc.len, &dec) == 0);
    FUZZ_CHECK(dec.len == size && (size == 0 || memcmp(dec.data, data, size) == 0));
    buf_release(&enc);
    buf_release(&dec);
    return 0;
}
