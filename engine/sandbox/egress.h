/*
 * sandbox_egress — one sandbox's network, as its keeper runs it (README "Network"):
 * the run's egress policy (egress_policy, from the keeper spec), the sandbox's own network
 * namespace (sandbox_net: only loopback, every way out redirected to the keeper), the
 * transparent TCP proxy that decides each connection (egress_proxy), the name server that
 * answers by the policy (egress_dns) and the model gateway, the sandbox's model endpoint
 * (model_gateway, routed by the run's gateway route or refusing every call without one), plus
 * the /etc/hosts lines and resolv.conf the sandbox sees.
 *
 * The keeper makes it before it forks the sandbox's child (sandbox_egress_new: resolves the
 * named hosts, creates the namespace from the keeper's own namespace, listens); the child
 * enters the namespace (sandbox_egress_enter) before it drops its privileges; the keeper's
 * poll loop drives the proxy and the name server (fds / timeout / handle, never blocking).
 * The name server starts its resolver threads with the first query, after the fork.
 *
 * Every connection the policy refuses is reported with its destination and why (never a
 * byte of what the sandbox sent); refused DNS questions are reported with the name.
 */
#ifndef AR_SANDBOX_EGRESS_H
#define AR_SANDBOX_EGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "gateway/model_gateway.h"

#define SANDBOX_EGRESS_FDS (2 + MODEL_GATEWAY_FDS)

struct sandbox_egress;

/*
 * connection: a TCP connection was refused (dest "1.2.3.4:443", why "loopback"); otherwise a
 * DNS question was refused or failed (dest the name) or the proxy was overloaded.
 */
typedef void (*sandbox_egress_report_fn)(void *ctx, bool connection, const char *dest,
                                         const char *why);

/*
 * policy: egress_policy_to_json() of the run; route: its model gateway's route
 * (gateway_route_encode, NULL: none yet). The model gateway's reports go to model_report (may
 * be NULL), with ctx. -ENOTRECOVERABLE when the calling thread could not return to its own
 * namespace (the process must exit); other -errno fails closed: no sandbox without its
 * network. err names the step.
 */
int sandbox_egress_new(json_object *policy, json_object *route, sandbox_egress_report_fn report,
                       model_gateway_report_fn model_report, void *ctx, struct sandbox_egress **ret,
                       char *err, size_t errlen);
/* A spare's claim: the model gateway routes by route from its next call on (NULL: refuses). */
int sandbox_egress_set_route(struct sandbox_egress *e, json_object *route, char *err,
                             size_t errlen);
void sandbox_egress_free(struct sandbox_egress *e);

/*
 * A spare's claim: decide by policy (egress_policy_to_json) from now on, the loopback ports it
 * names redirected to the proxy (sandbox_net_set_loopback_ports). Connections already open
 * stay as they are (a spare's placeholder opened none). -errno with err; e unchanged then.
 */
int sandbox_egress_set_policy(struct sandbox_egress *e, json_object *policy, char *err,
                              size_t errlen);

/* In the forked child, before dropping privileges: join the namespace (async-signal-safe). */
int sandbox_egress_enter(const struct sandbox_egress *e);

/* Lines for the sandbox's /etc/hosts (the named hosts) and its resolv.conf. */
const char *sandbox_egress_hosts(const struct sandbox_egress *e);
const char *sandbox_egress_resolv_conf(const struct sandbox_egress *e);

/* The poll loop: fds to watch for POLLIN, the longest sleep (-1: any), the work when woken. */
size_t sandbox_egress_fds(const struct sandbox_egress *e, int *fds, size_t max);
int sandbox_egress_timeout_ms(const struct sandbox_egress *e, int64_t now);
void sandbox_egress_handle(struct sandbox_egress *e, int64_t now);

#endif
