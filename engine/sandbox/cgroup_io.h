/*
 * cgroup_io — what the two halves of sandbox_cgroup share (cgroup.c: one environment;
 * cgroup_host.c: the host's hierarchies, probe and sweep). Private to them.
 */
#ifndef AR_SANDBOX_CGROUP_IO_H
#define AR_SANDBOX_CGROUP_IO_H

#include <stdbool.h>
#include <stddef.h>

#include "sandbox/cgroup.h"

#define SANDBOX_CG_TEXT_MAX (1u << 20) /* a cgroup or /proc file read whole */

/* A plain name: [A-Za-z0-9._-], 1..64 characters, not "." or "..". */
bool sandbox_cgroup_plain_name(const char *s);
void sandbox_cgroup_sleep_ms(int ms);
/* Write s to dir/file (async-signal-safe). -errno. */
int sandbox_cgroup_write_at(const char *dir, const char *file, const char *s);
/* Read dir/file whole (util_read_file). */
int sandbox_cgroup_read_at(const char *dir, const char *file, char **ret);
/*
 * Write the limits of lim that `want` asks for into every directory of cg; ret_applied (may
 * be NULL) receives what held. The first failure is returned (with err) unless ret_applied
 * is given (the probe wants to know everything).
 */
int sandbox_cgroup_apply_limits(const struct sandbox_cgroup *cg,
                                const struct sandbox_cgroup_limits *lim, unsigned want,
                                unsigned *ret_applied, char *err, size_t errlen);

#endif
