/*
 * cgroup_io — the file I/O the environment side (cgroup.c) and the host side (cgroup_host.c)
 * of sandbox_cgroup share: a file of a cgroup folder written or read whole, the plain-name
 * check every id passes. It knows nothing of cgroups.
 */
#ifndef AR_SANDBOX_CGROUP_IO_H
#define AR_SANDBOX_CGROUP_IO_H

#include <stdbool.h>

#define SANDBOX_CG_TEXT_MAX (1u << 20)    /* a cgroup or /proc file read whole */
#define SANDBOX_CG_IO_PATH_MAX (512 + 64) /* a cgroup folder (SANDBOX_CG_PATH_MAX) + a file */

/* A plain name: [A-Za-z0-9._-], 1..64 characters, not "." or ".." (util_plain_name). */
bool sandbox_cgroup_plain_name(const char *s);
/* Write s to dir/file (async-signal-safe). -errno; -ENAMETOOLONG, -EIO on a short write. */
int sandbox_cgroup_write_at(const char *dir, const char *file, const char *s);
/* Read dir/file whole (util_read_file, at most SANDBOX_CG_TEXT_MAX). -errno. */
int sandbox_cgroup_read_at(const char *dir, const char *file, char **ret);

#endif
