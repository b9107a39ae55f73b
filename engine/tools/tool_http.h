/*
 * tool_http — one bounded HTTP exchange for the runner-executed tools (callback and direct
 * calls, the MCP client), over base/httpc. Nothing here knows about tools; it only makes sure
 * that every request the runner sends on a tool's behalf is bounded and cannot be bent:
 *
 *   - http and https only, redirects never followed (a 3xx is just a status), proxies from the
 *     environment never used (a proxy would bypass the SSRF pin);
 *   - a total deadline (timeout_ms) and a connect deadline; an optional cancel flag polled
 *     while the transfer runs (POST /cancel ends a tool call within ~100 ms);
 *   - the response body is read into a buffer with a hard maximum: past it the transfer is
 *     either an error (-E2BIG) or, with truncate_ok, stopped and flagged `truncated`;
 *   - an optional pin: "host:port:address" handed to CURLOPT_RESOLVE, and the address the
 *     connection really reached is checked against it before a byte is sent, so DNS rebinding
 *     between the SSRF check (tools/ssrf_guard.h) and the connect cannot slip through;
 *   - only GET, POST, PUT and DELETE; header values are refused when they hold CR, LF or NUL
 *     (no header injection); no retries.
 *
 * Errors: the function returns 0 when an HTTP response was received (whatever its status),
 * -ECANCELED when the cancel flag was raised, -ETIMEDOUT on the deadline, -E2BIG when the body
 * passed max_body without truncate_ok, -EPERM when a pinned connection reached another
 * address, -EINVAL for a bad request, on_data's own -errno, or another transport failure as
 * base/httpc.h maps it (-ECONNREFUSED, -EHOSTUNREACH, -ECONNRESET, -EPROTO, -EIO, ...). err
 * then holds a short reason from libcurl's fixed messages (never the URL, never a header value).
 *
 * Threads: a CURL handle belongs to one thread at a time. Passing the same handle again keeps
 * its connections alive (a warm callback costs no TLS handshake); NULL uses a fresh one.
 */
#ifndef AR_TOOL_HTTP_H
#define AR_TOOL_HTTP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "base/httpc.h"

#define TOOL_HTTP_HEADERS_MAX 64
#define TOOL_HTTP_CONNECT_MS_MAX 10000u

struct tool_http_request {
    const char *method; /* GET, POST, PUT, DELETE */
    const char *url;
    const char *body; /* sent as is (POST/PUT); NULL = no body */
    size_t body_len;
    const char *const *headers; /* "Name: value" lines, at most TOOL_HTTP_HEADERS_MAX, or NULL */
    size_t nheaders;
    uint64_t timeout_ms;        /* total; 0 = HTTPC_TIMEOUT_DEFAULT_MS */
    size_t max_body;            /* response body cap in bytes (> 0) */
    bool truncate_ok;           /* at the cap: stop and flag `truncated` instead of failing */
    const char *pin_resolve;    /* "host:port:address" for CURLOPT_RESOLVE, or NULL */
    const char *pin_addr;       /* the address the connection must reach, or NULL */
    const char *capture_header; /* a response header to keep (case-insensitive), or NULL */
    const char *ca_file;        /* CA bundle to verify https against instead of the system's */
    const atomic_int *cancel;   /* non-zero = stop, or NULL */
    httpc_data_fn on_data;      /* each piece of the body as it arrives (base/httpc.h), or NULL */
    void *on_data_ctx;
};

/*
 * Perform rq with handle h (NULL = a temporary handle). On 0, *ret holds the response (one
 * attempt: a tool call is never retried) and the caller releases it with
 * httpc_response_release(); on failure nothing needs releasing.
 */
int tool_http_perform(CURL *h, const struct tool_http_request *rq, struct httpc_response *ret,
                      char *err, size_t errlen);

#endif
