#include "sandbox/egress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "egress/dnsmsg.h"
#include "egress/egress_dns.h"
#include "egress/egress_policy.h"
#include "egress/egress_proxy.h"
#include "egress/sandbox_net.h"
#include "gateway/model_gateway.h"

#define ETC_TEXT_MAX (256u * 1024)

struct sandbox_egress {
    struct egress_policy *policy; /* 44 KB: on the heap; the proxy and DNS borrow it */
    struct sandbox_net net;
    struct egress_proxy *proxy;
    struct egress_dns *dns;
    struct model_gateway *gateway;
    struct buf hosts;
    struct buf resolv;
    sandbox_egress_report_fn report;
    void *ctx;
};

static void on_proxy(void *ctx, const struct egress_proxy_report *r)
{
    struct sandbox_egress *e = ctx;
    char dest[EGRESS_ADDR_TEXT_MAX] = "?";

    if (!e->report || r->event == EGRESS_PROXY_CONNECT_FAILED)
        return; /* allowed, the destination did not answer: the sandbox sees it fail */
    if (r->has_dst)
        egress_addr_port_format(&r->dst, r->port, dest);
    if (r->event == EGRESS_PROXY_DENIED)
        e->report(e->ctx, true, dest, egress_reason_name(r->reason));
    else
        e->report(e->ctx, false, dest, "too many connections");
}

static void on_dns(void *ctx, const struct egress_dns_report *r)
{
    struct sandbox_egress *e = ctx;

    if (e->report)
        e->report(e->ctx, false, r->name ? r->name : "?",
                  r->rcode == DNS_RCODE_REFUSED ? "name refused" : "name lookup failed");
}

void sandbox_egress_free(struct sandbox_egress *e)
{
    if (!e)
        return;
    model_gateway_free(e->gateway); /* its threads stop before the listener closes */
    egress_dns_free(e->dns);
    egress_proxy_free(e->proxy);
    sandbox_net_release(&e->net);
    buf_release(&e->hosts);
    buf_release(&e->resolv);
    free(e->policy);
    free(e);
}

/* The namespace, with the named loopback endpoints' ports handed to the proxy. */
static int make_namespace(struct sandbox_egress *e, char *err, size_t errlen)
{
    uint16_t ports[SANDBOX_NET_LOOPBACK_PORTS_MAX];
    struct sandbox_net_config cfg = {.loopback_ports = ports};
    int r;

    r = egress_policy_loopback_ports(e->policy, ports, SANDBOX_NET_LOOPBACK_PORTS_MAX,
                                     &cfg.nloopback_ports);
    if (r < 0) {
        snprintf(err, errlen, "sandbox network: more than %d named loopback ports",
                 SANDBOX_NET_LOOPBACK_PORTS_MAX);
        return r;
    }
    return sandbox_net_create(&cfg, &e->net, err, errlen);
}

int sandbox_egress_new(json_object *policy, json_object *route, sandbox_egress_report_fn report,
                       model_gateway_report_fn model_report, void *ctx, struct sandbox_egress **ret,
                       char *err, size_t errlen)
{
    struct sandbox_egress *e = calloc(1, sizeof(*e));
    int proxy_fds[2], dns_fds[2];
    int r;

    if (!e)
        return -ENOMEM;
    sandbox_net_init(&e->net);
    buf_init(&e->hosts, ETC_TEXT_MAX);
    buf_init(&e->resolv, ETC_TEXT_MAX);
    e->report = report;
    e->ctx = ctx;
    e->policy = malloc(sizeof(*e->policy));
    if (!e->policy) {
        r = -ENOMEM;
        goto fail;
    }
    r = egress_policy_from_json(policy, e->policy, err, errlen);
    if (r < 0)
        goto fail;
    /* named hosts get their addresses now, so /etc/hosts can carry them */
    (void)egress_dns_resolve_endpoints(e->policy);
    r = make_namespace(e, err, errlen);
    if (r < 0)
        goto fail;
    proxy_fds[0] = e->net.proxy4_fd;
    proxy_fds[1] = e->net.proxy6_fd;
    dns_fds[0] = e->net.dns4_fd;
    dns_fds[1] = e->net.dns6_fd;
    r = egress_proxy_new(e->policy, proxy_fds, 2, NULL, on_proxy, e, &e->proxy);
    if (r == 0)
        r = egress_dns_new(e->policy, dns_fds, 2, on_dns, e, &e->dns);
    if (r < 0) {
        snprintf(err, errlen, "sandbox network: egress proxy: %s", strerror(-r));
        goto fail;
    }
    r = model_gateway_new(e->net.model_fd, model_report, ctx, &e->gateway);
    if (r < 0) {
        snprintf(err, errlen, "sandbox network: model gateway: %s", strerror(-r));
        goto fail;
    }
    if (route) {
        r = model_gateway_set_route(e->gateway, route, err, errlen);
        if (r < 0)
            goto fail;
    }
    r = egress_policy_render_hosts(e->policy, &e->hosts);
    if (r == 0)
        r = buf_append_str(&e->hosts, "");
    if (r == 0)
        r = egress_dns_render_resolv_conf(&e->resolv);
    if (r < 0) {
        snprintf(err, errlen, "sandbox network: /etc files: %s", strerror(-r));
        goto fail;
    }
    *ret = e;
    return 0;
fail:
    sandbox_egress_free(e);
    return r;
}

int sandbox_egress_set_policy(struct sandbox_egress *e, json_object *policy, char *err,
                              size_t errlen)
{
    uint16_t old_ports[SANDBOX_NET_LOOPBACK_PORTS_MAX], ports[SANDBOX_NET_LOOPBACK_PORTS_MAX];
    size_t nold = 0, n = 0;
    struct egress_policy *p = malloc(sizeof(*p));
    int r;

    if (!p)
        return -ENOMEM;
    r = egress_policy_from_json(policy, p, err, errlen);
    if (r < 0)
        goto out;
    (void)egress_dns_resolve_endpoints(p);
    if (egress_policy_loopback_ports(e->policy, old_ports, SANDBOX_NET_LOOPBACK_PORTS_MAX, &nold) <
            0 ||
        egress_policy_loopback_ports(p, ports, SANDBOX_NET_LOOPBACK_PORTS_MAX, &n) < 0) {
        snprintf(err, errlen, "sandbox network: more than %d named loopback ports",
                 SANDBOX_NET_LOOPBACK_PORTS_MAX);
        r = -E2BIG;
        goto out;
    }
    if (n != nold || memcmp(ports, old_ports, n * sizeof(ports[0])) != 0) {
        r = sandbox_net_set_loopback_ports(&e->net, ports, n, err, errlen);
        if (r < 0)
            goto out;
    }
    /* the proxy and the name server borrow e->policy: they decide by the new one from now */
    memcpy(e->policy, p, sizeof(*p));
    /* the /etc/hosts a sandbox started from now on gets (a shell's: env_shell.h) */
    buf_reset(&e->hosts);
    r = egress_policy_render_hosts(e->policy, &e->hosts);
    if (r == 0)
        r = buf_append_str(&e->hosts, "");
    if (r < 0)
        snprintf(err, errlen, "sandbox network: /etc/hosts: %s", strerror(-r));
out:
    free(p);
    return r;
}

int sandbox_egress_set_route(struct sandbox_egress *e, json_object *route, char *err, size_t errlen)
{
    return model_gateway_set_route(e->gateway, route, err, errlen);
}

int sandbox_egress_enter(const struct sandbox_egress *e)
{
    return sandbox_net_enter(&e->net);
}

const char *sandbox_egress_hosts(const struct sandbox_egress *e)
{
    return e->hosts.data ? e->hosts.data : "";
}

const char *sandbox_egress_resolv_conf(const struct sandbox_egress *e)
{
    return e->resolv.data ? e->resolv.data : "";
}

size_t sandbox_egress_fds(const struct sandbox_egress *e, int *fds, size_t max)
{
    size_t n = 0;

    if (n < max && e->proxy)
        fds[n++] = egress_proxy_fd(e->proxy);
    if (n < max && e->dns)
        fds[n++] = egress_dns_fd(e->dns);
    if (e->gateway)
        n += model_gateway_fds(e->gateway, fds + n, max - n);
    return n;
}

int sandbox_egress_timeout_ms(const struct sandbox_egress *e, int64_t now)
{
    return e->proxy ? egress_proxy_timeout_ms(e->proxy, now) : -1;
}

void sandbox_egress_handle(struct sandbox_egress *e, int64_t now)
{
    if (e->proxy)
        egress_proxy_handle(e->proxy, now);
    if (e->dns)
        egress_dns_handle(e->dns, now);
    if (e->gateway)
        model_gateway_handle(e->gateway);
}
