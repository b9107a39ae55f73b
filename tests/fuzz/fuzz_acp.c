/*
 * fuzz_acp — the ACP wire layer: line framing (struct acp_lines) and message decoding.
 *
 * Input layout: byte 0 picks the line maximum, byte 1 seeds the chunk sizes, the rest is the
 * byte stream an agent writes on its stdout. The stream goes through a pipe in chunks of 1 to
 * 4096 bytes, each read with acp_lines_fill, and every complete line is taken and decoded.
 * Properties checked:
 *   - framing matches a plain split at '\n' (one trailing '\r' dropped), loses no line, and
 *     answers -E2BIG exactly when the line being framed is longer than the maximum; a feed of
 *     one chunk never fails while no line is over the maximum;
 *   - a decoded message has the fields its kind promises; a refused line leaves the output
 *     untouched and says why;
 *   - re-encoding is lossless: the -32601 answer to a request (acp_encode_error, the answer to
 *     any unknown agent request) and a result echoing its params decode back to a response with
 *     the same id; a notification re-encodes to the same method and params.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "fuzz.h"
#include "proto/acp.h"

#define ERR_SIZE 256
#define CHUNK_MAX 4096

static const size_t line_maxima[] = {1, 8, 64, 512, 4096, 65536, ACP_LINE_MAX_DEFAULT};

/* One encoded line: ends in '\n' and holds no other; decode it back without the '\n'. */
static void decode_encoded(const struct buf *b, struct acp_msg *ret)
{
    char err[ERR_SIZE];
    int r;

    FUZZ_CHECK(b->len > 0 && b->data[b->len - 1] == '\n');
    FUZZ_CHECK(memchr(b->data, '\n', b->len - 1) == NULL);
    r = acp_decode(b->data, b->len - 1, ret, err, sizeof(err));
    if (r < 0)
        fprintf(stderr, "re-encoded line does not decode: %s\n", err);
    FUZZ_CHECK(r == 0);
}

static void roundtrip_request(const struct acp_msg *m)
{
    struct acp_msg back;
    struct buf out;

    buf_init(&out, 256u * 1024 * 1024);
    FUZZ_CHECK(acp_encode_error(&out, m->id, ACP_METHOD_NOT_FOUND, m->method) == 0);
    decode_encoded(&out, &back);
    FUZZ_CHECK(back.kind == ACP_RESPONSE);
    FUZZ_CHECK(back.id && json_object_equal(back.id, m->id));
    FUZZ_CHECK(back.error != NULL && back.result == NULL);
    FUZZ_CHECK(json_object_get_int(jsonx_get(back.error, "code")) == ACP_METHOD_NOT_FOUND);
    FUZZ_CHECK(strcmp(acp_msg_error_message(&back), m->method) == 0);
    acp_msg_release(&back);

    buf_reset(&out);
    FUZZ_CHECK(acp_encode_result(&out, m->id, m->params) == 0);
    decode_encoded(&out, &back);
    FUZZ_CHECK(back.kind == ACP_RESPONSE);
    FUZZ_CHECK(back.id && json_object_equal(back.id, m->id));
    FUZZ_CHECK(back.error == NULL);
    FUZZ_CHECK(json_object_equal(back.result, m->params));
    acp_msg_release(&back);
    buf_release(&out);
}

static void roundtrip_notification(const struct acp_msg *m)
{
    struct acp_msg back;
    struct buf out;

    buf_init(&out, 256u * 1024 * 1024);
    FUZZ_CHECK(acp_encode_notification(&out, m->method, m->params) == 0);
    decode_encoded(&out, &back);
    FUZZ_CHECK(back.kind == ACP_NOTIFICATION);
    FUZZ_CHECK(back.id == NULL);
    FUZZ_CHECK(strcmp(back.method, m->method) == 0);
    if (m->params)
        FUZZ_CHECK(json_object_equal(back.params, m->params));
    acp_msg_release(&back);
    buf_release(&out);
}

static void check_line(const char *line, size_t len)
{
    struct acp_msg m, untouched;
    char err[ERR_SIZE];
    int64_t id;
    int r;

    memset(&m, 0x5a, sizeof(m));
    memset(&untouched, 0x5a, sizeof(untouched));
    memset(err, 'x', sizeof(err));
    r = acp_decode(line, len, &m, err, sizeof(err));
    if (r < 0) {
        FUZZ_CHECK(r == -EBADMSG || r == -ENOMEM);
        FUZZ_CHECK(memchr(err, '\0', sizeof(err)) && err[0]);
        FUZZ_CHECK(memcmp(&m, &untouched, sizeof(m)) == 0);
        return;
    }
    FUZZ_CHECK(m.root && json_object_is_type(m.root, json_type_object));
    if (m.id)
        FUZZ_CHECK(json_object_is_type(m.id, json_type_int) ||
                   json_object_is_type(m.id, json_type_string));
    if (acp_msg_int_id(&m, &id) == 0)
        FUZZ_CHECK(m.id && json_object_is_type(m.id, json_type_int));
    FUZZ_CHECK(acp_msg_error_message(&m) != NULL);
    switch (m.kind) {
    case ACP_REQUEST:
        FUZZ_CHECK(m.method && m.id);
        FUZZ_CHECK(!m.result && !m.error);
        roundtrip_request(&m);
        break;
    case ACP_NOTIFICATION:
        FUZZ_CHECK(m.method && !m.id);
        roundtrip_notification(&m);
        break;
    case ACP_RESPONSE:
        FUZZ_CHECK(!m.method && !m.params);
        FUZZ_CHECK(m.result || m.error || json_object_object_get_ex(m.root, "result", NULL));
        break;
    default:
        fuzz_fail(__FILE__, __LINE__, "a known message kind");
    }
    acp_msg_release(&m);
    FUZZ_CHECK(m.root == NULL);
}

/* xorshift32: chunk sizes from the seed byte, so one input always splits the same way */
static uint32_t next_rand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *stream;
    size_t len, fed = 0, pos = 0, max_line;
    struct acp_lines l;
    uint32_t seed;
    bool stop = false;
    int fds[2];

    if (size < 2)
        return 0;
    max_line = line_maxima[data[0] % (sizeof(line_maxima) / sizeof(line_maxima[0]))];
    seed = 0x9e3779b9u ^ data[1];
    stream = (const char *)data + 2;
    len = size - 2;

    FUZZ_CHECK(pipe2(fds, O_CLOEXEC) == 0);
    acp_lines_init(&l, max_line);
    while (!stop && fed < len) {
        /* sizes 1..CHUNK_MAX, small ones far more often (shift by 0..12 bits) */
        uint32_t rnd = next_rand(&seed);
        size_t chunk = 1 + (rnd >> 12) % ((size_t)1 << (rnd % 13));

        if (chunk > CHUNK_MAX)
            chunk = CHUNK_MAX;
        if (chunk > len - fed)
            chunk = len - fed;
        /* through a pipe, as the runner reads an agent (a chunk fits any pipe's buffer) */
        FUZZ_CHECK(write(fds[1], stream + fed, chunk) == (ssize_t)chunk);
        FUZZ_CHECK(acp_lines_fill(&l, fds[0]) == (ssize_t)chunk);
        fed += chunk;
        for (;;) {
            const char *nl = memchr(stream + pos, '\n', fed - pos);
            size_t raw = nl ? (size_t)(nl - (stream + pos)) : fed - pos;
            char *line = NULL;
            size_t n = 0;
            int r = acp_lines_next(&l, &line, &n);

            if (r == -E2BIG) {
                FUZZ_CHECK(raw > max_line);
                stop = true;
                break;
            }
            if (r == 0) {
                FUZZ_CHECK(!nl && raw <= max_line);
                break;
            }
            FUZZ_CHECK(r == 1 && nl && raw <= max_line);
            if (raw > 0 && stream[pos + raw - 1] == '\r')
                raw--;
            FUZZ_CHECK(n == raw && memcmp(line, stream + pos, n) == 0 && line[n] == '\0');
            pos = (size_t)(nl - stream) + 1;
            check_line(line, n);
            free(line);
        }
    }
    acp_lines_release(&l);
    close(fds[0]);
    close(fds[1]);
    return 0;
}
