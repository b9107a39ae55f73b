/*
 * fstree — iterative, bounded walks over untrusted folder trees (see fstree.h).
 *
 * The walk keeps a heap stack of frames, one per level from the named folder down to the
 * folder being read. Only the deepest FSTREE_OPEN_MAX frames hold an open DIR stream; when
 * the walk climbs back to a frame whose stream was closed, it reopens it as ".." of the
 * child it leaves and checks device + inode against what it recorded on the way down.
 *
 * A removal rereads a reopened folder from its start: what it already handled is gone, and
 * what it could not remove is in the skip list. A chown seeks back to where it left (d_off
 * cookies are stable across opens on ext4, xfs, btrfs and tmpfs since Linux 6.6; the trees it
 * re-owns are the runner's own, freshly written ones).
 */
#include "base/fstree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct frame {
    char *name; /* entry name in the parent frame (the caller's name for frame 0) */
    dev_t dev;
    ino_t ino;
    DIR *dir; /* NULL while closed */
    long pos; /* telldir() before the last descent (chown) */
};

struct walk;

struct visit {
    int (*leaf)(struct walk *w, int dirfd, const char *name);
    int (*enter)(struct walk *w, int fd);
    int (*leave)(struct walk *w, int parentfd, const char *name);
    bool restart;
    bool root_may_be_mount; /* the named folder itself may be a mount point */
};

struct walk {
    const struct visit *ops;
    int top_dirfd;
    uid_t uid;
    gid_t gid;
    struct frame *v;
    size_t n, cap;
    size_t lo; /* shallowest frame whose stream is open */
    size_t nopen;
    ino_t *skip;
    dev_t *skip_dev;
    size_t nskip;
    int err;
};

static void note(struct walk *w, int r)
{
    if (r < 0 && w->err == 0)
        w->err = r;
}

/* 1 when fd is the root of a mount (or, on kernels that do not say, on another device). */
static int is_mount_root(int fd, dev_t parent_dev, struct stat *ret_st)
{
    struct statx sx;

    if (fstat(fd, ret_st) == -1)
        return -errno;
    if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_INO, &sx) == 0 &&
        (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT))
        return (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT) ? 1 : 0;
    return ret_st->st_dev != parent_dev ? 1 : 0;
}

static bool skipped(const struct walk *w, dev_t dev, ino_t ino)
{
    for (size_t i = 0; i < w->nskip; i++)
        if (w->skip[i] == ino && w->skip_dev[i] == dev)
            return true;
    return false;
}

static void skip_add(struct walk *w, dev_t dev, ino_t ino)
{
    if (w->nskip >= FSTREE_SKIP_MAX)
        return; /* a removal that keeps failing this often stops rereading: see next_entry */
    w->skip[w->nskip] = ino;
    w->skip_dev[w->nskip] = dev;
    w->nskip++;
}

static int frame_fd(const struct frame *f)
{
    return dirfd(f->dir);
}

static int push(struct walk *w, int fd, const char *name, const struct stat *st)
{
    struct frame *f;
    DIR *d;

    if (w->n >= FSTREE_DEPTH_MAX) {
        close(fd);
        return -ELOOP;
    }
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        struct frame *v = realloc(w->v, cap * sizeof(*v));

        if (!v) {
            close(fd);
            return -ENOMEM;
        }
        w->v = v;
        w->cap = cap;
    }
    d = fdopendir(fd);
    if (!d) {
        int r = -errno;
        close(fd);
        return r;
    }
    f = &w->v[w->n];
    f->name = strdup(name);
    if (!f->name) {
        closedir(d);
        return -ENOMEM;
    }
    f->dev = st->st_dev;
    f->ino = st->st_ino;
    f->dir = d;
    f->pos = 0;
    w->n++;
    w->nopen++;
    /* keep only the deepest FSTREE_OPEN_MAX streams open */
    while (w->nopen > FSTREE_OPEN_MAX && w->lo < w->n - 1) {
        struct frame *old = &w->v[w->lo];

        if (old->dir) {
            closedir(old->dir);
            old->dir = NULL;
            w->nopen--;
        }
        w->lo++;
    }
    return 0;
}

/* Reopen frame i (closed) as ".." of frame i + 1 (open), checking it is the same folder. */
static int reopen_parent(struct walk *w, size_t i)
{
    struct frame *p = &w->v[i], *c = &w->v[i + 1];
    struct stat st;
    DIR *d;
    int fd;

    fd = openat(frame_fd(c), "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd == -1)
        return -errno;
    if (fstat(fd, &st) == -1 || st.st_dev != p->dev || st.st_ino != p->ino) {
        close(fd);
        return -ESTALE; /* the tree was moved under the walk: stop */
    }
    d = fdopendir(fd);
    if (!d) {
        int r = -errno;
        close(fd);
        return r;
    }
    if (!w->ops->restart)
        seekdir(d, p->pos);
    p->dir = d;
    w->nopen++;
    w->lo = i;
    return 0;
}

/* Leave the deepest frame: reopen its parent if needed, close it, run ops->leave. */
static int pop(struct walk *w)
{
    struct frame *f = &w->v[w->n - 1];
    int r = 0, parentfd;

    if (w->n >= 2 && !w->v[w->n - 2].dir) {
        r = reopen_parent(w, w->n - 2);
        if (r < 0)
            return r; /* fatal: the caller unwinds everything */
    }
    closedir(f->dir);
    f->dir = NULL;
    w->nopen--;
    parentfd = w->n >= 2 ? frame_fd(&w->v[w->n - 2]) : w->top_dirfd;
    if (w->ops->leave) {
        r = w->ops->leave(w, parentfd, f->name);
        if (r < 0) {
            note(w, r);
            if (w->n >= 2)
                skip_add(w, w->v[w->n - 2].dev, f->ino);
        }
    }
    free(f->name);
    w->n--;
    if (w->lo >= w->n && w->n > 0)
        w->lo = w->n - 1;
    return 0;
}

/* Open child `name` of frame f as a folder: 1 pushed, 0 not a folder, < 0 error. */
static int descend(struct walk *w, struct frame *f, const char *name)
{
    struct stat st;
    int fd, r;

    fd = openat(frame_fd(f), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd == -1)
        return errno == ENOTDIR || errno == ELOOP ? 0 : -errno;
    r = is_mount_root(fd, f->dev, &st);
    if (r != 0) {
        close(fd);
        return r > 0 ? -EBUSY : r;
    }
    if (w->ops->enter) {
        r = w->ops->enter(w, fd);
        if (r < 0)
            note(w, r);
    }
    if (!w->ops->restart)
        f->pos = telldir(f->dir);
    r = push(w, fd, name, &st);
    return r < 0 ? r : 1;
}

static int handle_entry(struct walk *w, struct frame *f, const struct dirent *de)
{
    int r;

    if (de->d_type == DT_DIR || de->d_type == DT_UNKNOWN) {
        r = descend(w, f, de->d_name);
        if (r != 0)
            return r;
    }
    r = w->ops->leaf(w, frame_fd(f), de->d_name);
    if (r == -EISDIR) /* it became a folder since readdir */
        r = descend(w, f, de->d_name);
    return r < 0 ? r : 0;
}

static int run(struct walk *w, int dirfd, const char *name)
{
    struct stat st, parent;
    int fd, r;

    w->top_dirfd = dirfd;
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd == -1) {
        if (errno == ENOTDIR || errno == ELOOP)
            return w->ops->leaf(w, dirfd, name);
        return -errno;
    }
    /* the named folder itself must not be a mount point */
    if (fstatat(fd, "..", &parent, AT_SYMLINK_NOFOLLOW) == -1) {
        r = -errno;
        close(fd);
        return r;
    }
    r = is_mount_root(fd, parent.st_dev, &st);
    if (r < 0 || (r > 0 && !w->ops->root_may_be_mount)) {
        close(fd);
        return r > 0 ? -EBUSY : r;
    }
    if (w->ops->enter)
        note(w, w->ops->enter(w, fd));
    r = push(w, fd, name, &st);
    if (r < 0)
        return r;
    while (w->n > 0) {
        struct frame *f = &w->v[w->n - 1];
        struct dirent *de;

        errno = 0;
        de = readdir(f->dir);
        if (!de) {
            note(w, -errno);
            r = pop(w);
            if (r < 0) {
                note(w, r);
                break;
            }
            continue;
        }
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (w->nskip && skipped(w, f->dev, de->d_ino))
            continue;
        r = handle_entry(w, f, de);
        if (r == -ENOENT)
            continue;
        if (r < 0) {
            /* nothing was pushed, but a failed push may have moved the stack */
            f = &w->v[w->n - 1];
            note(w, r);
            skip_add(w, f->dev, de->d_ino);
            if (w->nskip >= FSTREE_SKIP_MAX)
                break; /* too much fails here: give up instead of rereading forever */
        }
    }
    return 0;
}

static void walk_release(struct walk *w)
{
    for (size_t i = 0; i < w->n; i++) {
        if (w->v[i].dir)
            closedir(w->v[i].dir);
        free(w->v[i].name);
    }
    free(w->v);
    free(w->skip);
    free(w->skip_dev);
}

static int walk(const struct visit *ops, int dirfd, const char *name, uid_t uid, gid_t gid)
{
    struct walk w;
    int r;

    if (!name || !name[0])
        return -EINVAL;
    memset(&w, 0, sizeof(w));
    w.ops = ops;
    w.uid = uid;
    w.gid = gid;
    w.skip = calloc(FSTREE_SKIP_MAX, sizeof(*w.skip));
    w.skip_dev = calloc(FSTREE_SKIP_MAX, sizeof(*w.skip_dev));
    if (!w.skip || !w.skip_dev) {
        r = -ENOMEM;
        goto out;
    }
    r = run(&w, dirfd, name);
    if (r == 0)
        r = w.err;
out:
    walk_release(&w);
    return r;
}

static int remove_leaf(struct walk *w, int dirfd, const char *name)
{
    (void)w;
    if (unlinkat(dirfd, name, 0) == -1 && errno != ENOENT)
        return -errno;
    return 0;
}

static int remove_dir(struct walk *w, int parentfd, const char *name)
{
    (void)w;
    if (unlinkat(parentfd, name, AT_REMOVEDIR) == -1 && errno != ENOENT)
        return -errno;
    return 0;
}

static const struct visit remove_ops = {
    .leaf = remove_leaf,
    .leave = remove_dir,
    .restart = true,
};

int fstree_remove(const char *path)
{
    int r = walk(&remove_ops, AT_FDCWD, path, 0, 0);

    return r == -ENOENT ? 0 : r;
}

static int chown_leaf(struct walk *w, int dirfd, const char *name)
{
    if (fchownat(dirfd, name, w->uid, w->gid, AT_SYMLINK_NOFOLLOW) == -1)
        return -errno;
    return 0;
}

static int chown_enter(struct walk *w, int fd)
{
    if (fchown(fd, w->uid, w->gid) == -1)
        return -errno;
    return 0;
}

static const struct visit chown_ops = {
    .leaf = chown_leaf,
    .enter = chown_enter,
    .restart = false,
    .root_may_be_mount = true,
};

int fstree_chown_at(int dirfd, const char *name, uid_t uid, gid_t gid)
{
    return walk(&chown_ops, dirfd, name, uid, gid);
}
