/*
 * gateway_http — the HTTP/1.1 the model gateway (model_gateway.h) reads from its sandbox: a
 * request head (request line and header fields, RFC 9112) and a chunked request body. Pure, no
 * allocation: a parsed head points into the bytes it was parsed from. The input is hostile (it
 * comes from the sandbox) and is fuzzed (tests/fuzz/fuzz_gateway_http.c).
 *
 * Strict where laxness would let two readers disagree about where a request ends (request
 * smuggling): a request with both Content-Length and Transfer-Encoding, a Transfer-Encoding
 * other than exactly "chunked", two Content-Lengths, obsolete line folding, a field name that is
 * not a token, a value with a control byte, bare CR, or a request line that is not
 * "METHOD SP request-target SP HTTP/1.x" are refused with the reason in err.
 */
#ifndef AR_GATEWAY_HTTP_H
#define AR_GATEWAY_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GATEWAY_HTTP_HEAD_MAX (64u * 1024) /* request line and fields, the blank line included */
#define GATEWAY_HTTP_FIELDS_MAX 96
#define GATEWAY_HTTP_METHOD_MAX 16

struct gateway_http_field {
    const char *name; /* not NUL-terminated */
    size_t name_len;
    const char *value; /* trimmed of surrounding blanks, not NUL-terminated */
    size_t value_len;
};

struct gateway_http_request {
    char method[GATEWAY_HTTP_METHOD_MAX + 1];
    const char *target; /* the request-target as sent, not NUL-terminated */
    size_t target_len;
    int minor; /* HTTP/1.<minor>: 0 or 1 */
    struct gateway_http_field fields[GATEWAY_HTTP_FIELDS_MAX];
    size_t nfields;
    bool chunked;    /* Transfer-Encoding: chunked */
    bool has_length; /* Content-Length given */
    uint64_t length; /* its value */
    bool keep_alive; /* the connection stays open after the answer */
    bool expect_100; /* Expect: 100-continue */
};

/*
 * Where the head in data[0..len) ends: the length up to and including its blank line, 0 when
 * it is not complete yet, -E2BIG when no head ends within GATEWAY_HTTP_HEAD_MAX bytes.
 */
ssize_t gateway_http_head_end(const char *data, size_t len);

/*
 * Parse a complete head (as gateway_http_head_end measured it). 0 with *ret filled, or
 * -EBADMSG (malformed: answer 400), -ENOSYS (a Transfer-Encoding other than chunked: 501),
 * -E2BIG (more than GATEWAY_HTTP_FIELDS_MAX fields: 431), with err saying what is wrong.
 */
int gateway_http_parse(const char *head, size_t len, struct gateway_http_request *ret, char *err,
                       size_t errlen);

/* The first field named name (case-insensitive), or NULL. */
const struct gateway_http_field *gateway_http_field(const struct gateway_http_request *r,
                                                    const char *name);
/* Whether a field's value equals text / holds the comma-separated token tok (case-insensitive). */
bool gateway_http_value_is(const struct gateway_http_field *f, const char *text);
bool gateway_http_value_has(const struct gateway_http_field *f, const char *tok);

/* A chunked body being decoded (RFC 9112 7.1): chunk extensions ignored, trailers skipped. */
struct gateway_chunked {
    int state;
    uint64_t left; /* bytes of the current chunk still to come */
    size_t line;   /* bytes of the current size / trailer line seen (bounded) */
    bool digits;   /* the size line had a digit */
    bool done;     /* the last chunk and the trailers were read */
};

void gateway_chunked_init(struct gateway_chunked *c);
/*
 * Decode in[0..len): the body bytes found are written to out (at most out_room; *ret_out says
 * how many), the framing is dropped. Returns the number of input bytes consumed: it stops
 * early at the end of the body (c->done) or when out is full (call again with room), or
 * -EBADMSG for a malformed stream.
 */
ssize_t gateway_chunked_decode(struct gateway_chunked *c, const char *in, size_t len, char *out,
                               size_t out_room, size_t *ret_out);

#endif
