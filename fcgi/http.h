/*
 * http — request and response I/O on one FastCGI request: parameters copied out of libfcgi's
 * storage (its strings die at the next accept), the body read with a cap checked from
 * CONTENT_LENGTH before any byte is read, JSON answers and the NDJSON stream.
 */
#ifndef AR_HTTP_H
#define AR_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <fcgiapp.h>
#include <json-c/json.h>

#include "base/buf.h"

struct http_req {
    FCGX_Request *fr;
    char method[16];
    char path[256];
    char request_id[40];
    bool has_length;
    uint64_t content_length;
    bool bad_length; /* CONTENT_LENGTH was not a number */
    bool headers_sent;
    bool client_gone;
};

/* Copy what the handlers need out of the request's parameters. */
void http_req_init(struct http_req *h, FCGX_Request *fr);
/*
 * The pure part of http_req_init (h->fr is left NULL): fill *h, zeroed first, from the
 * parameters REQUEST_METHOD, DOCUMENT_URI, REQUEST_URI, CONTENT_LENGTH and HTTP_X_REQUEST_ID,
 * each NULL when absent. Strings are truncated to their fields; the path is DOCUMENT_URI, else
 * REQUEST_URI, cut at '?'. A request id that is empty or does not fit is replaced by a random
 * one. A non-empty CONTENT_LENGTH sets has_length; one that is not a decimal below UINT64_MAX
 * is stored as UINT64_MAX, which http_read_body refuses. Cannot fail.
 */
void http_parse_params(struct http_req *h, const char *method, const char *document_uri,
                       const char *request_uri, const char *content_length, const char *request_id);
/* A parameter (e.g. "HTTP_ACCEPT") or NULL; valid until the request finishes. */
const char *http_param(const struct http_req *h, const char *name);

/*
 * Read the body into out. -EFBIG when CONTENT_LENGTH exceeds max (nothing read),
 * -EBADMSG when the body is shorter than announced, -EINVAL for a malformed length.
 */
int http_read_body(struct http_req *h, uint64_t max, struct buf *out);

void http_json(struct http_req *h, int status, json_object *body);
/* {"ok":false,"error":msg} */
void http_error(struct http_req *h, int status, const char *msg);
/*
 * 200 + NDJSON headers (Content-Type, Cache-Control, X-Accel-Buffering), and
 * X-Agent-Runner-Turn: turn_id when the stream is a turn's (turn_id not NULL).
 */
void http_stream_start(struct http_req *h, const char *turn_id);
/*
 * The value of the query parameter name in query (a QUERY_STRING: "a=1&b=x%20y"), percent- and
 * '+'-decoded into out: 1 when present, 0 when not, -E2BIG when it does not fit outlen (NUL
 * included), -EINVAL when it is not well encoded (a bad %XX, or a NUL once decoded). The first
 * of repeated names wins; an empty name is never present. Pure (the fuzz target fuzz_http_query
 * drives it).
 */
int http_query_get(const char *query, const char *name, char *out, size_t outlen);
/* A relayed answer's headers: its status and content type (NDJSON: unbuffered, and
 * X-Agent-Runner-Turn: turn_id when not NULL), flushed. */
void http_start(struct http_req *h, int status, const char *content_type, const char *turn_id);
/* Event sink probe: false once nginx closed the connection (the client went away). */
bool http_client_alive(void *ctx);
/* Event sink callbacks: buffer one line; push the buffered lines out. -1 once the client is
 * gone. */
int http_stream_write(void *ctx, const char *line, size_t len);
int http_stream_flush(void *ctx);

#endif
