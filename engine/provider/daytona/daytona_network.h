/*
 * daytona_network — sandboxPermission.network as Daytona's network fields (as Agenta's runner
 * maps them; the server's validation is in tests/fixtures/fake_daytona.md), and convergence of
 * a retained sandbox to the rule of the run that resumes it. Pure: no I/O.
 *
 * Mapping: on -> no field; off -> networkBlockAll:true, or, when the run's own endpoints
 * (always_allow: the model endpoint, ...) are given, only those; allowlist -> networkAllowList
 * (IPv4 CIDRs; a bare address is /32) and domainAllowList (host names, optionally "*."), each
 * at most DAYTONA_MAX_ALLOW entries, plus always_allow; an empty result blocks all. An entry
 * Daytona cannot express (IPv6, a URL, a port) or a list over the limit is -EINVAL with err
 * naming it: a rule is never silently widened.
 */
#ifndef AR_DAYTONA_NETWORK_H
#define AR_DAYTONA_NETWORK_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "core/contracts.h"

#define DAYTONA_MAX_ALLOW 10 /* entries per allow list (networkAllowList, domainAllowList) */

/* Add the network fields of the rule to a create body (an object). */
int daytona_network_fields(enum network_mode mode, const char *const *allow, size_t nallow,
                           const char *const *always_allow, size_t nalways, json_object *body,
                           char *err, size_t errlen);

/*
 * Does a sandbox with these live fields follow the rule of body (a body made by
 * daytona_network_fields)? List order, spaces and case are ignored.
 */
bool daytona_network_matches(bool block_all, const char *allow_list, const char *domain_list,
                             json_object *body);
/* The POST .../network-settings body that turns any sandbox into the rule of body. */
int daytona_network_settings(json_object *body, json_object **ret);

#endif
