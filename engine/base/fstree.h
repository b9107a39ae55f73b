/*
 * fstree — walks over folder trees that a sandbox may have shaped: remove them, or give them
 * to a user. Nothing a hostile tree holds can crash the caller, exhaust its stack or its file
 * descriptors, or make it touch anything outside the tree:
 *
 *   - iterative, with a heap stack of one small frame per level: a 30,000-deep (or deeper)
 *     tree costs ~40 bytes per level, never recursion;
 *   - at most FSTREE_OPEN_MAX directory descriptors open at once: deeper levels are closed
 *     and reopened through ".." on the way back up, and every reopened folder is checked to
 *     be the one left (device + inode), so a tree moved under the walk stops it (-ESTALE);
 *   - only *at() calls relative to an open folder and single names (<= NAME_MAX): no path is
 *     ever built, so depth has no PATH_MAX limit;
 *   - symlinks are never followed (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW): a link is removed or
 *     re-owned itself, never its target;
 *   - mount points are never crossed: a folder that is the root of a mount (or on another
 *     device) is left alone and reported as -EBUSY. Unmount first (sandbox_disk does).
 *
 * Both walks are best effort: they go on past an entry they cannot handle and return the
 * first error (-errno) at the end, 0 when the whole tree was handled.
 */
#ifndef AR_FSTREE_H
#define AR_FSTREE_H

#include <sys/types.h>

/* Directory descriptors a walk keeps open at most (plus one transient). */
#define FSTREE_OPEN_MAX 16
/* Deepest tree a walk accepts; deeper levels fail with -ELOOP (the rest is still handled). */
#define FSTREE_DEPTH_MAX (1u << 22)
/* Entries a removal could not remove and remembers so that it does not retry them. */
#define FSTREE_SKIP_MAX 4096

/*
 * Remove path with everything below it, like rm -rf. A missing path is success; a file or
 * symlink is unlinked itself. The named folder itself must not be a mount point (-EBUSY,
 * nothing removed).
 */
int fstree_remove(const char *path);

/*
 * Give `name` and everything below it to uid:gid (lchown semantics: symlinks themselves).
 * Modes are kept. `name` may be a mount point (a tmpfs workspace); the walk does not cross
 * mount points below it.
 */
int fstree_chown_at(int dirfd, const char *name, uid_t uid, gid_t gid);

#endif
