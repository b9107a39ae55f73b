/*
 * cgroup_host — the host side of sandbox_cgroup (cgroup.h says the layout and the limits):
 * where the cgroup hierarchies are and what they give us (layout, probe), the cgroup of an
 * environment found by its id, the start-up sweep of leftovers, and the removal of the
 * instance's folders at a clean stop. What is done to one environment's cgroup is cgroup.h.
 */
#ifndef AR_SANDBOX_CGROUP_HOST_H
#define AR_SANDBOX_CGROUP_HOST_H

#include <stdbool.h>
#include <stddef.h>

#include "sandbox/cgroup.h"

/*
 * Find the hierarchies (from /proc/self/mountinfo and /proc/self/cgroup), create
 * agent-runner/<instance> in each, enable v2 controllers (moving the caller into
 * <own>/supervisor when v2 requires it), then create a probe cgroup, write every limit and
 * read it back: ret->can says what holds, ret->missing why the rest does not. Fails only when
 * instance is not a plain name; a host without usable cgroups gives can == 0.
 */
int sandbox_cgroup_probe(const char *instance, struct sandbox_cgroup_host *ret, char *err,
                         size_t errlen);

/*
 * The pure part of the probe: hierarchies from the texts of /proc/self/mountinfo and
 * /proc/self/cgroup (v2 controllers are filled in by the probe, from cgroup.controllers).
 */
int sandbox_cgroup_layout(const char *mountinfo, const char *self_cgroup, const char *instance,
                          struct sandbox_cgroup_host *ret, char *err, size_t errlen);

/*
 * The cgroup of environment `id` as sandbox_cgroup_create made it, without creating anything:
 * for a process that did not create it (the master reclaiming a dead keeper's environment)
 * to kill and remove it. -EINVAL when id is not a plain name.
 */
int sandbox_cgroup_for_id(const struct sandbox_cgroup_host *host, const char *id,
                          struct sandbox_cgroup *ret);

/*
 * Start-up sweep: kill and remove every environment cgroup under agent-runner/<instance> for
 * which keep(id, ctx) is false (keep may be NULL: remove all). Returns how many were removed,
 * or the first error.
 */
int sandbox_cgroup_sweep(const struct sandbox_cgroup_host *host,
                         bool (*keep)(const char *id, void *ctx), void *ctx, int timeout_ms);

/*
 * Clean stop: remove agent-runner/<instance> (and agent-runner/ when it is empty) in every
 * hierarchy. Environment cgroups must be gone already (-EBUSY otherwise).
 */
int sandbox_cgroup_host_remove(const struct sandbox_cgroup_host *host);

#endif
