#include "sandbox/disk.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "base/mountinfo.h"
#include "base/util.h"

#define MOUNTINFO_MAX (16u * 1024 * 1024)
#define FULL_BYTES (64u * 1024)
#define STACK_MAX 16 /* mounts stacked on one folder we peel off at most */

static int source_name(const char *instance, char *out, size_t len)
{
    if (!instance || !instance[0] || strchr(instance, ',') || strchr(instance, ' ') ||
        strchr(instance, '/'))
        return -EINVAL;
    if ((size_t)snprintf(out, len, "agent-runner.%s", instance) >= len)
        return -ENAMETOOLONG;
    return 0;
}

int sandbox_disk_mount(const char *dir, const char *instance, uint64_t bytes, uint64_t inodes,
                       uid_t uid, gid_t gid, char *err, size_t errlen)
{
    char source[96], opts[160];
    int r;

    r = source_name(instance, source, sizeof(source));
    if (r < 0) {
        snprintf(err, errlen, "disk: the instance name '%.64s' is not usable", instance);
        return r;
    }
    if (bytes == 0 || inodes == 0) {
        snprintf(err, errlen, "disk: a zero size or inode cap");
        return -EINVAL;
    }
    snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=%llu,mode=0700,uid=%u,gid=%u",
             (unsigned long long)bytes, (unsigned long long)inodes, (unsigned)uid, (unsigned)gid);
    if (mount(source, dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) == -1) {
        r = -errno;
        snprintf(err, errlen, "disk: cannot mount the workspace tmpfs on '%.200s': %s", dir,
                 strerror(-r));
        return r;
    }
    /* what the agent mounts inside (it cannot) or what happens to it never propagates */
    if (mount(NULL, dir, NULL, MS_PRIVATE, NULL) == -1) {
        r = -errno;
        (void)umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW);
        snprintf(err, errlen, "disk: cannot make '%.200s' private: %s", dir, strerror(-r));
        return r;
    }
    return 0;
}

int sandbox_disk_is_mounted(const char *dir)
{
    struct statx sx;

    if (statx(AT_FDCWD, dir, AT_SYMLINK_NOFOLLOW, STATX_INO, &sx) == -1)
        return -errno;
    if (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT)
        return (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT) ? 1 : 0;
    {
        /* kernels before 5.8: compare with the parent's device */
        char parent[PATH_MAX];
        struct stat a, b;

        if ((size_t)snprintf(parent, sizeof(parent), "%s/..", dir) >= sizeof(parent))
            return -ENAMETOOLONG;
        if (lstat(dir, &a) == -1 || stat(parent, &b) == -1)
            return -errno;
        return a.st_dev != b.st_dev ? 1 : 0;
    }
}

int sandbox_disk_unmount(const char *dir)
{
    for (int i = 0; i < STACK_MAX; i++) {
        int m = sandbox_disk_is_mounted(dir);

        if (m == -ENOENT || m == 0)
            return 0;
        if (m < 0)
            return m;
        if (umount2(dir, UMOUNT_NOFOLLOW) == -1) {
            if (errno != EBUSY)
                return -errno;
            /* something still holds it (a process not reaped yet): detach it now, the
             * kernel frees it with the last reference */
            if (umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW) == -1)
                return -errno;
        }
    }
    return -EBUSY;
}

static void usage_of(const struct statfs *sp, struct sandbox_disk_usage *ret)
{
    struct statfs st = *sp;

    ret->size = (uint64_t)st.f_blocks * (uint64_t)st.f_bsize;
    ret->avail = (uint64_t)st.f_bavail * (uint64_t)st.f_bsize;
    ret->used = ret->size - (uint64_t)st.f_bfree * (uint64_t)st.f_bsize;
    ret->inodes = (uint64_t)st.f_files;
    ret->inodes_free = (uint64_t)st.f_ffree;
}

int sandbox_disk_usage(const char *dir, struct sandbox_disk_usage *ret)
{
    struct statfs st;

    if (statfs(dir, &st) == -1)
        return -errno;
    usage_of(&st, ret);
    return 0;
}

static int full(const struct sandbox_disk_usage *u)
{
    if (u->inodes > 0 && u->inodes_free == 0)
        return 1;
    return u->avail < FULL_BYTES || u->avail * 100 < u->size ? 1 : 0;
}

int sandbox_disk_full(const char *dir)
{
    struct sandbox_disk_usage u = {0};
    int r = sandbox_disk_usage(dir, &u);

    return r < 0 ? r : full(&u);
}

int sandbox_disk_full_fd(int fd)
{
    struct sandbox_disk_usage u = {0};
    struct statfs st;

    if (fstatfs(fd, &st) == -1)
        return -errno;
    usage_of(&st, &u);
    return full(&u);
}

/* The <id> of <envs_dir>/<id>/workspace, or NULL. */
static const char *env_id_of(const char *point, const char *envs_dir, char *id, size_t len)
{
    size_t n = strlen(envs_dir);
    const char *rest, *slash;

    if (strncmp(point, envs_dir, n) != 0 || point[n] != '/')
        return NULL;
    rest = point + n + 1;
    slash = strchr(rest, '/');
    if (!slash || slash == rest || strcmp(slash, "/workspace") != 0 ||
        (size_t)(slash - rest) >= len)
        return NULL;
    memcpy(id, rest, (size_t)(slash - rest));
    id[slash - rest] = '\0';
    return id;
}

int sandbox_disk_sweep(const char *instance, const char *envs_dir,
                       bool (*keep)(const char *id, void *ctx), void *ctx)
{
    char source[96], *text = NULL, *save = NULL;
    int r, n = 0, first = 0;

    r = source_name(instance, source, sizeof(source));
    if (r < 0)
        return r;
    r = util_read_file("/proc/self/mountinfo", MOUNTINFO_MAX, &text, NULL);
    if (r < 0)
        return r;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        struct mountinfo_line f;
        char id[128];

        if (!mountinfo_split(line, &f) || !f.source || strcmp(f.fstype, "tmpfs") != 0 ||
            strcmp(f.source, source) != 0)
            continue;
        mountinfo_unescape(f.point);
        if (!env_id_of(f.point, envs_dir, id, sizeof(id)))
            continue;
        if (keep && keep(id, ctx))
            continue;
        r = sandbox_disk_unmount(f.point);
        if (r == 0)
            n++;
        else if (!first)
            first = r;
    }
    free(text);
    return first ? first : n;
}

int sandbox_disk_probe(const char *dir, char *err, size_t errlen)
{
    char scratch[PATH_MAX];
    int r;

    if ((size_t)snprintf(scratch, sizeof(scratch), "%s/.disk-probe-%d", dir, (int)getpid()) >=
        sizeof(scratch))
        return -ENAMETOOLONG;
    if (mkdir(scratch, 0700) == -1 && errno != EEXIST) {
        r = -errno;
        snprintf(err, errlen, "disk: cannot create '%.200s': %s", scratch, strerror(-r));
        return r;
    }
    r = sandbox_disk_mount(scratch, "probe", 1u << 20, 64, getuid(), getgid(), err, errlen);
    if (r == 0)
        r = sandbox_disk_unmount(scratch);
    (void)rmdir(scratch);
    return r;
}
