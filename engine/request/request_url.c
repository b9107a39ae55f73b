/*
 * request_url — URLs a request names, split and judged by shape (request_url.h).
 */
#include "request/request_url.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"

bool request_host_is_loopback(const char *host)
{
    if (strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0 || strcmp(host, "[::1]") == 0)
        return true;
    /* 127.0.0.0/8 */
    if (strncmp(host, "127.", 4) == 0) {
        int dots = 0;
        for (const char *p = host; *p; p++) {
            if (*p == '.')
                dots++;
            else if (!isdigit((unsigned char)*p))
                return false;
        }
        return dots == 3;
    }
    return false;
}

int request_parse_url(const char *url, char *scheme, size_t schemelen, char *host, size_t hostlen,
                      unsigned *ret_port)
{
    const char *p, *hend, *aend;
    unsigned port;
    size_t n;

    if (strncmp(url, "https://", 8) == 0) {
        snprintf(scheme, schemelen, "https");
        p = url + 8;
        port = 443;
    } else if (strncmp(url, "http://", 7) == 0) {
        snprintf(scheme, schemelen, "http");
        p = url + 7;
        port = 80;
    } else {
        return -EINVAL;
    }
    aend = p + strcspn(p, "/?#");
    if (aend == p || memchr(p, '@', (size_t)(aend - p)))
        return -EINVAL; /* no host, or userinfo (credentials in URLs are refused) */
    if (*p == '[') {
        hend = memchr(p, ']', (size_t)(aend - p));
        if (!hend)
            return -EINVAL;
        hend++;
    } else {
        hend = memchr(p, ':', (size_t)(aend - p));
        if (!hend)
            hend = aend;
    }
    n = (size_t)(hend - p);
    if (n == 0 || n >= hostlen)
        return -EINVAL;
    memcpy(host, p, n);
    host[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (host[i] <= ' ' || host[i] == '\\' || host[i] == '%')
            return -EINVAL;
    if (hend < aend && *hend == ':') {
        char digits[8];
        uint64_t v;
        size_t dn = (size_t)(aend - hend - 1);

        if (dn == 0 || dn >= sizeof(digits))
            return -EINVAL;
        memcpy(digits, hend + 1, dn);
        digits[dn] = '\0';
        if (util_parse_u64(digits, 1, 65535, &v) < 0)
            return -EINVAL;
        port = (unsigned)v;
    } else if (hend != aend) {
        return -EINVAL;
    }
    *ret_port = port;
    return 0;
}
