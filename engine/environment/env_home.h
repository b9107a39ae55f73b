/*
 * env_home — a running local sandbox's private home (SANDBOX_HOME, a tmpfs inside it), reached
 * from the host: through /proc/<pid>/root of a process inside the sandbox (bubblewrap's
 * grandchild below the keeper's sandbox_pid: bubblewrap forks the sandbox's pid 1, which forks
 * the command), as the sandbox's own host uid/gid (setfsuid/setfsgid, which glibc does not
 * broadcast: the calling thread only), never following a symlink, never leaving the home's
 * file system. So nothing is read or written there that the sandbox's own user could not, and
 * nothing of the host.
 *
 * Users: a spare's claim writes the session's files into it (spare.h), and a session's kept
 * harness state (session/kept.h) is read from it after a turn and written into the next
 * sandbox before session/load (engine_keep.c).
 */
#ifndef AR_ENV_HOME_H
#define AR_ENV_HOME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/uid.h"
#include "session/kept.h"

struct env_home {
    char root[96]; /* /proc/<pid>/root/home/agent */
    uid_t old_uid;
    gid_t old_gid;
};

/*
 * Find the sandbox's inner process (waiting a few seconds for a sandbox that is still
 * starting) and take its identity for this thread's file access. -ESRCH when no process runs
 * in the sandbox, -EPERM when the identity cannot be taken (the
 * old one is back then); err says which. Leave with env_home_leave.
 */
int env_home_enter(pid_t sandbox_pid, const struct sandbox_uid_ids *ids, struct env_home *ret,
                   char *err, size_t errlen);
void env_home_leave(struct env_home *h);

/*
 * Read the files of the home folders dirs (NULL-terminated, relative, at most 4 levels down)
 * whose names end in suffix into st, their paths relative to the home. Symlinks, special files
 * and other file systems are skipped; at most 4096 entries are looked at. -E2BIG past
 * KEPT_FILES_MAX files, -EFBIG past max_bytes; a missing folder is no error.
 */
int env_home_collect(const struct env_home *h, const char *const *dirs, const char *suffix,
                     uint64_t max_bytes, struct kept_state *st, char *err, size_t errlen);

/* Write st's files into the home (0600; missing folders 0755). err names the file at fault. */
int env_home_restore(const struct env_home *h, const struct kept_state *st, char *err,
                     size_t errlen);

#endif
