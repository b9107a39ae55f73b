/*
 * http_stub — the tool modules' view of the unit tests' HTTP server (fake_http.h): a handler
 * that sees the request's raw header block and answers with raw header lines, every reply
 * sent with "Connection: close" (and no default Content-Type or body), and the first
 * HTTP_STUB_KEEP requests kept whole (method, target, headers, body) so a test can assert
 * exactly what the client sent. A reply with `hang` set is never written: the connection stays
 * open until the client gives up or the stub stops (for timeout and cancel tests).
 */
#ifndef AR_TEST_HTTP_STUB_H
#define AR_TEST_HTTP_STUB_H

#include <stdbool.h>
#include <stddef.h>

#define HTTP_STUB_KEEP 32

struct http_stub_request {
    char method[16];
    char target[2048];
    char *headers; /* the raw header block, "Name: value\r\n" lines */
    char *body;
    size_t body_len;
};

struct http_stub_reply {
    int status;
    char headers[1024]; /* extra header lines, each ending in "\r\n" */
    char *body;         /* malloc'ed by the handler (or NULL); freed by the stub */
    size_t body_len;
    bool hang;
};

typedef void (*http_stub_handler)(void *ctx, const struct http_stub_request *rq,
                                  struct http_stub_reply *reply);

struct http_stub;

struct http_stub *http_stub_start(http_stub_handler fn, void *ctx);
void http_stub_stop(struct http_stub *s);
int http_stub_port(const struct http_stub *s);
/* "http://127.0.0.1:<port>" + path into out. */
void http_stub_url(const struct http_stub *s, const char *path, char *out, size_t outlen);
size_t http_stub_count(const struct http_stub *s);
/* The i-th request received (kept until stop), NULL when out of range. */
const struct http_stub_request *http_stub_get(const struct http_stub *s, size_t i);
/* A header of rq by name (case-insensitive) copied into out; false when absent. */
bool http_stub_header(const struct http_stub_request *rq, const char *name, char *out,
                      size_t outlen);

#endif
