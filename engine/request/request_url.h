/*
 * request_url — the shape of a URL a request names (a model endpoint, the tool callback, an MCP
 * server, the OTLP exporter): http or https, a host, an optional port, no userinfo. Pure; the
 * addresses a host resolves to are the SSRF guard's (tools/ssrf_guard.h) and the egress
 * policy's to judge.
 */
#ifndef AR_REQUEST_URL_H
#define AR_REQUEST_URL_H

#include <stdbool.h>
#include <stddef.h>

/* True when host (of a URL's authority) is a loopback name or address. */
bool request_host_is_loopback(const char *host);

/*
 * Split an http(s) URL into scheme ("http"/"https"), host and port (default by scheme).
 * -EINVAL on anything else (no host, userinfo, a bad port, a blank or '%' or '\\' in the
 * host). host receives at most hostlen-1 bytes.
 */
int request_parse_url(const char *url, char *scheme, size_t schemelen, char *host, size_t hostlen,
                      unsigned *ret_port);

#endif
