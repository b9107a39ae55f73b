/*
 * fake_http — the unit tests' HTTP/1.1 server (no libcurl): it listens on 127.0.0.1 on a free
 * port, serves every connection on its own thread (keep-alive included, as curl reuses
 * connections), records every request (method, target, raw headers, body) and answers what
 * the test's handler says (200 "{}" without one). A response may also close its connection, or
 * hang: write nothing and hold the connection until the client gives up (timeout and cancel
 * tests). fake_http_stop() closes everything and joins every thread it started. http_stub.h
 * is a one-connection-style API over it for the tool modules' tests.
 */
#ifndef AR_TEST_FAKE_HTTP_H
#define AR_TEST_FAKE_HTTP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#define FAKE_HTTP_REQUESTS_MAX 4096
#define FAKE_HTTP_CONNS_MAX 64

struct fake_request {
    char method[16];
    char path[2048];          /* with its query */
    char authorization[1024]; /* "" when absent */
    char *body;               /* NUL-terminated */
    size_t body_len;
    char *headers; /* raw "Name: value\r\n" lines */
};

struct fake_response {
    int status;               /* 200 by default */
    char content_type[128];   /* "application/json" by default, "" for none */
    char extra_headers[2048]; /* raw "Name: value\r\n" lines */
    char *body;               /* malloc'ed by the handler, or NULL for "{}" */
    size_t body_len;
    bool close; /* close the connection after this response */
    bool hang;  /* no response: hold the connection until it closes */
};

struct fake_http;

/*
 * The handler runs on the connection's thread for each request (n = its 0-based number) and
 * may block (to hold the client); it fills resp. Unset fields keep their defaults.
 */
typedef void (*fake_http_handler)(void *ctx, size_t n, const struct fake_request *req,
                                  struct fake_response *resp);

/* Start a server; NULL on failure. */
struct fake_http *fake_http_start(fake_http_handler handler, void *ctx);
/* "http://127.0.0.1:<port>" */
const char *fake_http_url(struct fake_http *f);
int fake_http_port(struct fake_http *f);
/* Stop, join every thread, free. NULL is a no-op. */
void fake_http_stop(struct fake_http *f);

/* Requests recorded so far (thread-safe). */
size_t fake_http_count(struct fake_http *f);
/* Requests recorded to a path (its part before '?'), thread-safe. */
size_t fake_http_count_path(struct fake_http *f, const char *path);
/* A copy of request i (body and headers malloc'ed: fake_request_release). -1 when none. */
int fake_http_get(struct fake_http *f, size_t i, struct fake_request *ret);
void fake_request_release(struct fake_request *r);
/* The value of r's header `name` (case-insensitive) copied into out; false when absent or
 * longer than outlen - 1. */
bool fake_request_header(const struct fake_request *r, const char *name, char *out, size_t outlen);
/* The body of the i-th request to path parsed as JSON (a new reference), NULL when none. */
json_object *fake_http_json(struct fake_http *f, const char *path, size_t i);
/* Wait until at least n requests to path were recorded or timeout_ms passes; the count. */
size_t fake_http_wait(struct fake_http *f, const char *path, size_t n, int timeout_ms);
/* Whether any recorded request (method, path, headers, body) contains s. */
bool fake_http_saw(struct fake_http *f, const char *s);

#endif
