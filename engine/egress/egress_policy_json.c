/*
 * egress_policy, its outward forms (see egress_policy.h): the loopback ports the sandbox's
 * namespace hands to the proxy, the /etc/hosts lines of named hosts, and the JSON the keeper
 * spec carries (and its strict reading back). egress_policy.c holds the policy and the
 * decision.
 */
#include "egress/egress_policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"

static int cmp_u16(const void *a, const void *b)
{
    return (int)*(const uint16_t *)a - (int)*(const uint16_t *)b;
}

int egress_policy_loopback_ports(const struct egress_policy *p, uint16_t *ports, size_t max,
                                 size_t *ret_n)
{
    static const uint8_t lo4[4] = {127, 0, 0, 1};
    struct egress_addr lo6 = {.family = AF_INET6, .b = {[15] = 1}};
    size_t n = 0;

    for (size_t i = 0; i < p->nnamed; i++) {
        const struct egress_named *nm = &p->named[i];
        bool seen = false;

        if (!(nm->addr.family == AF_INET && memcmp(nm->addr.b, lo4, 4) == 0) &&
            !egress_addr_equal(&nm->addr, &lo6))
            continue;
        for (size_t j = 0; j < n; j++)
            if (ports[j] == nm->port)
                seen = true;
        if (seen)
            continue;
        if (n >= max)
            return -E2BIG;
        ports[n++] = nm->port;
    }
    qsort(ports, n, sizeof(*ports), cmp_u16);
    *ret_n = n;
    return 0;
}

int egress_policy_render_hosts(const struct egress_policy *p, struct buf *out)
{
    for (size_t i = 0; i < p->nnamed; i++) {
        const struct egress_named *nm = &p->named[i];
        const struct egress_endpoint *e = &p->endpoints[nm->endpoint];
        char text[EGRESS_ADDR_TEXT_MAX];
        bool dup = false;
        int r;

        if (e->literal)
            continue;
        /* one line per (address, name), even when several ports name the host */
        for (size_t j = 0; j < i && !dup; j++)
            dup = strcmp(p->endpoints[p->named[j].endpoint].host, e->host) == 0 &&
                  egress_addr_equal(&p->named[j].addr, &nm->addr);
        if (dup)
            continue;
        egress_addr_format(&nm->addr, text);
        r = buf_printf(out, "%s %s\n", text, e->host);
        if (r < 0)
            return r;
    }
    return 0;
}

/* ---- the spec form ------------------------------------------------------------------------ */

json_object *egress_policy_to_json(const struct egress_policy *p)
{
    json_object *o = json_object_new_object(), *list = json_object_new_array();
    json_object *eps = json_object_new_array(), *ports = json_object_new_array();

    json_object_object_add(o, "mode", json_object_new_string(egress_mode_name(p->mode)));
    json_object_object_add(o, "privateEgress", json_object_new_boolean(p->private_egress));
    for (size_t i = 0; i < p->ncidrs; i++) {
        char text[EGRESS_ADDR_TEXT_MAX + 8];
        char addr[EGRESS_ADDR_TEXT_MAX];

        egress_addr_format(&p->cidrs[i].net, addr);
        snprintf(text, sizeof(text), "%s/%u", addr, (unsigned)p->cidrs[i].prefix);
        json_object_array_add(list, json_object_new_string(text));
    }
    json_object_object_add(o, "allowlist", list);
    for (size_t i = 0; i < p->nendpoints; i++) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "host", json_object_new_string(p->endpoints[i].host));
        json_object_object_add(e, "port", json_object_new_int(p->endpoints[i].port));
        json_object_array_add(eps, e);
    }
    json_object_object_add(o, "endpoints", eps);
    for (size_t i = 0; i < p->nrunner_ports; i++)
        json_object_array_add(ports, json_object_new_int(p->runner_ports[i]));
    json_object_object_add(o, "runnerPorts", ports);
    return o;
}

static int port_of(json_object *v, uint16_t *ret)
{
    int64_t n;

    if (!v || !json_object_is_type(v, json_type_int))
        return -EINVAL;
    n = json_object_get_int64(v);
    if (n < 1 || n > 65535)
        return -EINVAL;
    *ret = (uint16_t)n;
    return 0;
}

static json_object *get_array(json_object *o, const char *key, bool *bad)
{
    json_object *v = jsonx_get(o, key);

    if (!v)
        return NULL;
    if (!json_object_is_type(v, json_type_array)) {
        *bad = true;
        return NULL;
    }
    return v;
}

int egress_policy_from_json(json_object *o, struct egress_policy *ret_policy, char *err,
                            size_t errlen)
{
    struct egress_policy *p;
    json_object *v = NULL, *list, *eps, *ports;
    enum egress_mode mode = EGRESS_MODE_ON;
    bool bad = false, priv = false;
    char msg[160];
    int r = -EINVAL;

    if (!o || !json_object_is_type(o, json_type_object)) {
        util_seterr(err, errlen, "egress: expected an object");
        return -EINVAL;
    }
    p = malloc(sizeof(*p));
    if (!p)
        return -ENOMEM;
    if (json_object_object_get_ex(o, "mode", &v) &&
        (!json_object_is_type(v, json_type_string) ||
         egress_mode_parse(json_object_get_string(v), &mode) < 0)) {
        util_seterr(err, errlen, "egress.mode: expected on, allowlist or off");
        goto out;
    }
    if (json_object_object_get_ex(o, "privateEgress", &v)) {
        if (!json_object_is_type(v, json_type_boolean)) {
            util_seterr(err, errlen, "egress.privateEgress: expected a boolean");
            goto out;
        }
        priv = json_object_get_boolean(v);
    }
    egress_policy_init(p, mode, priv);
    list = get_array(o, "allowlist", &bad);
    eps = get_array(o, "endpoints", &bad);
    ports = get_array(o, "runnerPorts", &bad);
    if (bad) {
        util_seterr(err, errlen, "egress: allowlist, endpoints and runnerPorts must be arrays");
        goto out;
    }
    for (size_t i = 0; list && i < json_object_array_length(list); i++) {
        json_object *e = json_object_array_get_idx(list, i);

        if (!json_object_is_type(e, json_type_string)) {
            util_seterr(err, errlen, "egress.allowlist[%zu]: expected a string", i);
            goto out;
        }
        r = egress_policy_add_cidr(p, json_object_get_string(e), msg, sizeof(msg));
        if (r < 0) {
            util_seterr(err, errlen, "egress.allowlist[%zu]: %s", i, msg);
            goto out;
        }
    }
    for (size_t i = 0; eps && i < json_object_array_length(eps); i++) {
        json_object *e = json_object_array_get_idx(eps, i), *h = NULL;
        uint16_t port;

        r = -EINVAL;
        if (!json_object_object_get_ex(e, "host", &h) ||
            !json_object_is_type(h, json_type_string) ||
            !json_object_object_get_ex(e, "port", &v) || port_of(v, &port) < 0) {
            util_seterr(err, errlen,
                        "egress.endpoints[%zu]: expected {\"host\":s,\"port\":1-65535}", i);
            goto out;
        }
        r = egress_policy_add_endpoint(p, json_object_get_string(h), port, msg, sizeof(msg));
        if (r < 0) {
            util_seterr(err, errlen, "egress.endpoints[%zu]: %s", i, msg);
            goto out;
        }
    }
    for (size_t i = 0; ports && i < json_object_array_length(ports); i++) {
        uint16_t port;

        r = port_of(json_object_array_get_idx(ports, i), &port);
        if (r == 0)
            r = egress_policy_add_runner_port(p, port);
        if (r < 0) {
            util_seterr(err, errlen, "egress.runnerPorts[%zu]: expected a port (at most %d)", i,
                        EGRESS_RUNNER_PORTS_MAX);
            goto out;
        }
    }
    *ret_policy = *p;
    r = 0;
out:
    free(p);
    return r;
}
