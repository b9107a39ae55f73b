#include "provider/daytona/daytona_network.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/jsonx.h"
#include "base/util.h"

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = src ? strlen(src) : 0;

    if (n >= cap)
        n = cap - 1;
    if (n)
        memcpy(dst, src, n);
    dst[n] = '\0';
}

/*
 * One allow-list entry: an IPv4 address or CIDR (normalised to a.b.c.d/n) or a host name
 * (lower case, optionally "*."). Anything else is not expressible on Daytona.
 */
static int classify_entry(const char *in, char *out, size_t outlen, bool *ret_domain)
{
    char s[300], addr[64];
    const char *slash;
    struct in_addr a;
    bool letter = false;
    size_t n;

    while (*in == ' ' || *in == '\t')
        in++;
    n = strlen(in);
    while (n > 0 && (in[n - 1] == ' ' || in[n - 1] == '\t'))
        n--;
    if (n == 0 || n >= sizeof(s))
        return -EINVAL;
    memcpy(s, in, n);
    s[n] = '\0';
    slash = strchr(s, '/');
    if (slash || strspn(s, "0123456789.") == n) {
        uint64_t prefix = 32;
        size_t alen = slash ? (size_t)(slash - s) : n;

        if (alen == 0 || alen >= sizeof(addr))
            return -EINVAL;
        memcpy(addr, s, alen);
        addr[alen] = '\0';
        if (inet_pton(AF_INET, addr, &a) != 1)
            return -EINVAL;
        if (slash && util_parse_u64(slash + 1, 0, 32, &prefix) < 0)
            return -EINVAL;
        snprintf(out, outlen, "%s/%u", addr, (unsigned)prefix);
        *ret_domain = false;
        return 0;
    }
    if (n > 253)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];

        if (i == 0 && ch == '*' && s[1] == '.')
            continue;
        if (isalpha(ch))
            letter = true;
        else if (!(isdigit(ch) || ch == '-' || ch == '.'))
            return -EINVAL;
        if (ch == '.' && (i + 1 == n || s[i + 1] == '.' || (i > 0 && s[i - 1] == '.' && i != 1)))
            return -EINVAL;
        s[i] = (char)tolower(ch);
    }
    if (!letter || s[0] == '.' || s[0] == '-' || n >= outlen)
        return -EINVAL;
    memcpy(out, s, n + 1);
    *ret_domain = true;
    return 0;
}

struct allow_lists {
    char cidr[DAYTONA_MAX_ALLOW][24];
    size_t ncidr;
    char dom[DAYTONA_MAX_ALLOW][256];
    size_t ndom;
};

static int allow_add(struct allow_lists *l, const char *entry, const char *field, size_t idx,
                     char *err, size_t errlen)
{
    char norm[256];
    bool domain;

    if (classify_entry(entry, norm, sizeof(norm), &domain) < 0) {
        snprintf(err, errlen,
                 "%s[%zu]: \"%.64s\" is not an IPv4 address, IPv4 CIDR or host "
                 "name (all Daytona can enforce)",
                 field, idx, entry);
        return -EINVAL;
    }
    if (domain) {
        for (size_t i = 0; i < l->ndom; i++) {
            if (strcmp(l->dom[i], norm) == 0)
                return 0;
        }
        if (l->ndom == DAYTONA_MAX_ALLOW) {
            snprintf(err, errlen, "%s: Daytona enforces at most %d host names", field,
                     DAYTONA_MAX_ALLOW);
            return -EINVAL;
        }
        copy_str(l->dom[l->ndom++], sizeof(l->dom[0]), norm);
    } else {
        for (size_t i = 0; i < l->ncidr; i++) {
            if (strcmp(l->cidr[i], norm) == 0)
                return 0;
        }
        if (l->ncidr == DAYTONA_MAX_ALLOW) {
            snprintf(err, errlen, "%s: Daytona enforces at most %d IPv4 CIDRs", field,
                     DAYTONA_MAX_ALLOW);
            return -EINVAL;
        }
        copy_str(l->cidr[l->ncidr++], sizeof(l->cidr[0]), norm);
    }
    return 0;
}

static json_object *join_list(char (*items)[24], size_t n, char (*ditems)[256], size_t dn)
{
    struct buf b;
    json_object *o;

    buf_init(&b, 8192);
    for (size_t i = 0; i < n; i++)
        (void)buf_printf(&b, "%s%s", i ? "," : "", items[i]);
    for (size_t i = 0; i < dn; i++)
        (void)buf_printf(&b, "%s%s", i ? "," : "", ditems[i]);
    o = json_object_new_string(buf_str(&b));
    buf_release(&b);
    return o;
}

int daytona_network_fields(enum network_mode mode, const char *const *allow, size_t nallow,
                           const char *const *always_allow, size_t nalways, json_object *body,
                           char *err, size_t errlen)
{
    struct allow_lists *l;
    bool block_all = false;
    int r = 0;

    if (mode == NETWORK_ON)
        return 0;
    l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    if (mode == NETWORK_ALLOWLIST) {
        for (size_t i = 0; i < nallow; i++) {
            r = allow_add(l, allow[i], "sandboxPermission.network.allowlist", i, err, errlen);
            if (r < 0)
                goto out;
        }
    }
    /* the run's own endpoints are always reachable */
    for (size_t i = 0; i < nalways; i++) {
        r = allow_add(l, always_allow[i], "run endpoints", i, err, errlen);
        if (r < 0)
            goto out;
    }
    block_all = l->ncidr == 0 && l->ndom == 0;
    json_object_object_add(body, "networkBlockAll", json_object_new_boolean(block_all));
    if (l->ncidr)
        json_object_object_add(body, "networkAllowList", join_list(l->cidr, l->ncidr, NULL, 0));
    if (l->ndom)
        json_object_object_add(body, "domainAllowList", join_list(NULL, 0, l->dom, l->ndom));
out:
    free(l);
    return r;
}

/* Does the comma list a hold the same entries as b (order, spaces and case ignored)? */
static bool same_list(const char *a, const char *b)
{
    const char *lists[2] = {a ? a : "", b ? b : ""};

    for (int k = 0; k < 2; k++) {
        const char *p = lists[k], *other = lists[1 - k];

        while (*p) {
            const char *e;
            size_t n;
            bool found = false;

            while (*p == ' ' || *p == ',')
                p++;
            e = p + strcspn(p, ",");
            n = (size_t)(e - p);
            while (n > 0 && p[n - 1] == ' ')
                n--;
            if (n > 0) {
                const char *q = other;

                while (*q && !found) {
                    const char *qe;
                    size_t m;

                    while (*q == ' ' || *q == ',')
                        q++;
                    qe = q + strcspn(q, ",");
                    m = (size_t)(qe - q);
                    while (m > 0 && q[m - 1] == ' ')
                        m--;
                    found = m == n && strncasecmp(p, q, n) == 0;
                    q = qe;
                }
                if (!found)
                    return false;
            }
            p = e;
        }
    }
    return true;
}

bool daytona_network_matches(bool block_all, const char *allow_list, const char *domain_list,
                             json_object *body)
{
    bool block = json_object_get_boolean(jsonx_get(body, "networkBlockAll"));

    if (block != block_all)
        return false;
    if (block)
        return true;
    return same_list(jsonx_str(body, "networkAllowList"), allow_list) &&
           same_list(jsonx_str(body, "domainAllowList"), domain_list);
}

int daytona_network_settings(json_object *body, json_object **ret)
{
    json_object *o = json_object_new_object();
    const char *allow = jsonx_str(body, "networkAllowList");
    const char *dom = jsonx_str(body, "domainAllowList");

    if (!o)
        return -ENOMEM;
    /* block-all clears the CIDR list by itself; the domain list is cleared explicitly */
    if (json_object_get_boolean(jsonx_get(body, "networkBlockAll"))) {
        json_object_object_add(o, "networkBlockAll", json_object_new_boolean(1));
    } else {
        json_object_object_add(o, "networkBlockAll", json_object_new_boolean(0));
        json_object_object_add(o, "networkAllowList", json_object_new_string(allow ? allow : ""));
    }
    json_object_object_add(o, "domainAllowList", json_object_new_string(dom ? dom : ""));
    *ret = o;
    return 0;
}
