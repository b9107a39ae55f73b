/*
 * httpc — the engine's one HTTP client (libcurl, synchronous). Every outbound HTTP exchange goes
 * through httpc_perform(): the Agenta API client, the Daytona client, the tool calls and MCP
 * servers (tool_http), and the OTLP trace export. What it guarantees for every request:
 *
 *   - http and https only, redirects never followed (a 3xx is just a status), SIGALRM never
 *     used (CURLOPT_NOSIGNAL), TLS peers and host names verified (against ca_file when given);
 *   - a total deadline per attempt and a connect deadline (never longer than the total one);
 *   - a response body read into a buffer with a hard cap set per request: past it the exchange
 *     fails with -E2BIG, or with truncate_ok stops and flags `truncated`; never a silent cut.
 *     The body may also be streamed to a callback as it arrives (kept too, or only streamed:
 *     discard_body, no copy and no cap: the caller bounds what it keeps); the head may go to a
 *     callback before the body (on_head);
 *   - retries only when the caller asks (struct httpc_retry): which statuses and which
 *     transport failures are retried, the backoff between attempts, and whether the server's
 *     Retry-After (delay-seconds or an HTTP-date) sets the wait;
 *   - optional SSRF pinning for requests made on someone else's behalf: "host:port:address"
 *     handed to CURLOPT_RESOLVE, and the address the connection really reached checked
 *     against pin_addr before a byte is sent (DNS rebinding between the check and the connect
 *     cannot slip through), plus proxies from the environment ignored (no_proxy);
 *   - header lines holding CR or LF refused (no header injection).
 *
 * Errors: libcurl's failures become -errno in exactly one place (httpc_curl_errno): -ETIMEDOUT,
 * -ECONNREFUSED, -EHOSTUNREACH (name resolution), -ECONNRESET (the peer dropped the
 * connection), -EPROTO (TLS), -ENOMEM, -EIO for the rest. Besides: -ECANCELED (the abort
 * callback said stop), -E2BIG (the body cap), -EPERM (a pinned connection reached another
 * address), -EINVAL (a request that cannot be sent). err then holds a short reason made of
 * libcurl's fixed messages or this module's own: never the URL, a header or a body, so no
 * credential can end up in an error message or a log line through it.
 *
 * Connections: a CURL handle keeps its connections alive between requests, so passing the
 * same handle again (one the caller keeps, or httpc_thread_handle()) reuses them. A handle
 * belongs to one thread at a time.
 */
#ifndef AR_HTTPC_H
#define AR_HTTPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "base/buf.h"

#define HTTPC_HEADERS_MAX 128
#define HTTPC_TIMEOUT_DEFAULT_MS 30000u
#define HTTPC_BACKOFF_CAP_MS 3600000u /* the longest wait between two attempts: 1 h */
#define HTTPC_RETRY_AFTER_MAX_S 3600u /* a longer Retry-After counts as none */
#define HTTPC_HEADER_NAME_MAX 128
#define HTTPC_HEADER_VALUE_MAX 8192
#define HTTPC_HEAD_MAX (64u * 1024) /* an answer's header lines, for on_head */

struct httpc_response;

/*
 * Called with each piece of the body as it arrives (after it was appended to the response
 * buffer); res already holds the status and the content type. Return 0 to go on, 1 to stop the
 * transfer now (the response then counts as complete: `stopped` is set), or -errno to fail it.
 */
typedef int (*httpc_data_fn)(void *ctx, const struct httpc_response *res, const char *data,
                             size_t len);
/* Polled while a transfer runs and between attempts: true stops the exchange (-ECANCELED). */
typedef bool (*httpc_abort_fn)(void *ctx);
/*
 * Called once an answer's head is complete, before the first byte of its body (also when it
 * has none): the status and its header lines as received ("Name: value\r\n" each, the status
 * line and 1xx answers left out), at most HTTPC_HEAD_MAX bytes. Return 0 to go on, -errno to
 * fail the exchange with it.
 */
typedef int (*httpc_head_fn)(void *ctx, long status, const char *lines, size_t len);

enum httpc_backoff {
    HTTPC_BACKOFF_LINEAR = 0,  /* base * n after failed attempt n */
    HTTPC_BACKOFF_EXPONENTIAL, /* base * 2^(n-1) after failed attempt n */
};

struct httpc_retry {
    unsigned attempts; /* 0 and 1: a single attempt */
    enum httpc_backoff backoff;
    uint64_t base_ms;
    uint64_t cap_ms;  /* the longest single wait; 0 = HTTPC_BACKOFF_CAP_MS */
    bool retry_after; /* the server's Retry-After (or Retry-After-<scope>) replaces the backoff */
    /* retry transport failures too (never a cancel, the body cap, ENOMEM, EINVAL or EPERM) */
    bool transport;
    bool (*status_retryable)(long status); /* NULL = httpc_status_retryable */
};

struct httpc_request {
    const char *method; /* NULL = GET. GET and HEAD carry no body; POST without one sends "" */
    const char *url;
    const char *const *headers; /* "Name: value" lines, at most HTTPC_HEADERS_MAX, or NULL */
    size_t nheaders;
    const char *body; /* sent as is; NULL = none */
    size_t body_len;
    struct curl_mime *mime;      /* a multipart body instead (made on the handle passed) */
    uint64_t timeout_ms;         /* one attempt, all of it; 0 = HTTPC_TIMEOUT_DEFAULT_MS */
    uint64_t connect_timeout_ms; /* 0 = the total timeout */
    size_t max_body;             /* response body cap in bytes (> 0 unless discard_body) */
    bool truncate_ok;            /* at the cap: stop and flag `truncated` instead of failing */
    bool discard_body;           /* keep nothing: the body goes to on_data only, as it arrives */
    const char *bearer;          /* sent as "Authorization: Bearer <bearer>", or NULL */
    const char *user_agent;      /* or NULL for none */
    const char *ca_file;         /* a PEM bundle to verify https against instead of the system's */
    bool no_proxy;               /* ignore the *_proxy environment variables */
    bool tcp_keepalive;
    const char *pin_resolve;    /* "host:port:address" for CURLOPT_RESOLVE, or NULL */
    const char *pin_addr;       /* the address the connection must reach, or NULL */
    const char *capture_header; /* a response header to keep (case-insensitive), or NULL */
    httpc_abort_fn aborted;     /* or NULL */
    void *abort_ctx;
    httpc_data_fn on_data; /* or NULL */
    void *on_data_ctx;
    httpc_head_fn on_head; /* or NULL; called with on_data_ctx */
    struct httpc_retry retry;
};

struct httpc_response {
    long status;            /* of the last attempt */
    unsigned attempts;      /* attempts made */
    struct buf body;        /* capped at max_body */
    char content_type[128]; /* lower-cased media type without parameters, "" when none/long */
    char captured[1024];    /* value of capture_header ("" when absent or too long) */
    bool truncated;         /* the body passed max_body and was cut there (truncate_ok) */
    bool stopped;           /* on_data asked to stop */
};

/*
 * Perform rq with handle h (reset first, its connections reused), or with a temporary handle
 * when h is NULL. Returns 0 when an HTTP answer was received, whatever its status (with
 * retries: the answer of the last attempt, also when the abort callback fired while waiting
 * for the next one); *ret then holds it and is released with httpc_response_release(). On
 * failure, -errno (see above) with err set and nothing to release.
 */
int httpc_perform(CURL *h, const struct httpc_request *rq, struct httpc_response *ret, char *err,
                  size_t errlen);
void httpc_response_release(struct httpc_response *res);

/* A new handle for a caller that keeps its own (libcurl made ready first): curl_easy_cleanup()
 * it. NULL when none can be made. */
CURL *httpc_handle_new(void);
/* The calling thread's own handle (made on first use, freed when the thread exits), or NULL
 * when none can be made. */
CURL *httpc_thread_handle(void);

/* The libcurl failure as -errno (the one mapping; see above). CURLE_OK is 0. */
int httpc_curl_errno(CURLcode rc);
/*
 * The -errno of an HTTP error status as every client reads it: 400 -EINVAL, 401 and 403
 * -EACCES, 404 -ENOENT, 408 -ETIMEDOUT, -EPROTO for any other. A client gives the statuses its
 * server uses in a meaning of its own (2xx, 409, 429, 5xx, ...) their codes before this one.
 */
int httpc_status_errno(long status);
/* Whether an HTTP status is worth another attempt: 408, 425, 429 and 5xx. */
bool httpc_status_retryable(long status);
/* The wait after failed attempt n (1-based), at most cap_ms (0 = HTTPC_BACKOFF_CAP_MS). */
uint64_t httpc_backoff_ms(enum httpc_backoff b, uint64_t base_ms, unsigned attempt,
                          uint64_t cap_ms);
/*
 * A Retry-After value in milliseconds: delay-seconds, or an HTTP-date minus now_wall_ms (0 when
 * it has passed). -EINVAL when it is neither, -ERANGE beyond HTTPC_RETRY_AFTER_MAX_S.
 */
int64_t httpc_retry_after_ms(const char *value, int64_t now_wall_ms);

/* A header name a caller may send: an RFC 9110 token (tchar), 1-HTTPC_HEADER_NAME_MAX bytes. */
bool httpc_header_name_ok(const char *n);
/* A header value a caller may send: no CR or LF, at most HTTPC_HEADER_VALUE_MAX bytes. NULL is
 * not one. */
bool httpc_header_value_ok(const char *v);

#endif
