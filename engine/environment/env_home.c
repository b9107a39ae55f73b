/*
 * env_home — a running local sandbox's home, from the host (env_home.h).
 */
#include "environment/env_home.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

#define SANDBOX_DEPTH 2  /* bubblewrap -> the sandbox's pid 1 -> its command */
#define WALK_DEPTH_MAX 4 /* folders below a kept folder */
#define WALK_ENTRIES_MAX 4096
#define INNER_WAIT_MS 5000 /* a fresh sandbox's command appears within this */
#define INNER_POLL_MS 2

/* The first child of pid (/proc/<pid>/task/<pid>/children), or -ENOENT. */
static pid_t first_child(pid_t pid)
{
    char path[64], *text = NULL;
    uint64_t child;
    pid_t r = -ENOENT;

    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    if (util_read_file(path, 4096, &text, NULL) < 0)
        return -ENOENT;
    text[strcspn(text, " \n")] = '\0';
    if (text[0] && util_parse_u64(text, 1, INT32_MAX, &child) == 0)
        r = (pid_t)child;
    free(text);
    return r;
}

/*
 * The sandbox's command: bubblewrap's grandchild, a process inside the sandbox's mount
 * namespace. Never deeper: a process the command started may be gone (a zombie has no root).
 */
static pid_t inner_pid(pid_t sandbox_pid)
{
    pid_t pid = sandbox_pid;

    for (int depth = 0; depth < SANDBOX_DEPTH; depth++) {
        pid = first_child(pid);
        if (pid < 0)
            return -ENOENT;
    }
    return pid;
}

int env_home_enter(pid_t sandbox_pid, const struct sandbox_uid_ids *ids, struct env_home *ret,
                   char *err, size_t errlen)
{
    int64_t deadline = util_now_ms() + INNER_WAIT_MS;
    pid_t pid = -ENOENT;

    /* a sandbox just started may not have forked its command yet */
    while (sandbox_pid > 0 && (pid = inner_pid(sandbox_pid)) < 0 && util_now_ms() < deadline &&
           kill(sandbox_pid, 0) == 0)
        util_sleep_ms(INNER_POLL_MS);

    if (pid < 0)
        return util_fail(-ESRCH, err, errlen, "no process runs in the sandbox of pid %d",
                         (int)sandbox_pid);
    snprintf(ret->root, sizeof(ret->root), "/proc/%d/root" SANDBOX_HOME, (int)pid);
    ret->old_uid = (uid_t)setfsuid((uid_t)-1);
    ret->old_gid = (gid_t)setfsgid((gid_t)-1);
    setfsgid(ids->gid);
    setfsuid(ids->uid);
    if ((uid_t)setfsuid((uid_t)-1) != ids->uid || (gid_t)setfsgid((gid_t)-1) != ids->gid) {
        env_home_leave(ret);
        return util_fail(-EPERM, err, errlen, "cannot act as the sandbox's uid %u",
                         (unsigned)ids->uid);
    }
    return 0;
}

void env_home_leave(struct env_home *h)
{
    setfsuid(h->old_uid);
    setfsgid(h->old_gid);
}

struct walk {
    const char *suffix;
    uint64_t max_bytes;
    dev_t dev; /* the home's file system */
    unsigned entries;
    struct kept_state *st;
    char *err;
    size_t errlen;
};

static bool has_suffix(const char *name, const char *suffix)
{
    size_t n = strlen(name), k = strlen(suffix);

    return n > k && strcmp(name + n - k, suffix) == 0;
}

/* One regular file (opened without following a link, never blocking on a FIFO) into st. */
static int take_file(struct walk *w, int dfd, const char *name, const char *rel)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    uint8_t *data = NULL;
    size_t len = 0;
    struct stat st;
    int r = 0;

    if (fd == -1)
        return 0; /* gone, or not ours to read: not kept */
    if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode) || st.st_dev != w->dev)
        goto out;
    if (w->st->bytes + (uint64_t)st.st_size > w->max_bytes) {
        r = util_fail(-EFBIG, w->err, w->errlen, "over %llu bytes",
                      (unsigned long long)w->max_bytes);
        goto out;
    }
    data = malloc((size_t)st.st_size + 1);
    if (!data) {
        r = -ENOMEM;
        goto out;
    }
    while (len < (size_t)st.st_size) {
        ssize_t got = read(fd, data + len, (size_t)st.st_size - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    r = kept_state_adopt(w->st, rel, data, len);
    if (r == 0)
        data = NULL; /* the state's now */
    if (r == -E2BIG)
        util_seterr(w->err, w->errlen, "more than %d files", KEPT_FILES_MAX);
    else if (r == -EINVAL)
        r = 0; /* a name a kept state cannot hold: not kept */
out:
    free(data);
    close(fd);
    return r;
}

static int walk_dir(struct walk *w, int dfd, const char *rel, int depth)
{
    DIR *d = fdopendir(dfd);
    struct dirent *de;
    int r = 0;

    if (!d) {
        close(dfd);
        return 0;
    }
    while (r == 0 && (de = readdir(d)) && w->entries++ < WALK_ENTRIES_MAX) {
        char path[KEPT_PATH_MAX];
        struct stat st;
        int sub;

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", rel, de->d_name) >= sizeof(path) ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == -1 || st.st_dev != w->dev)
            continue;
        if (S_ISREG(st.st_mode) && has_suffix(de->d_name, w->suffix)) {
            r = take_file(w, dirfd(d), de->d_name, path);
        } else if (S_ISDIR(st.st_mode) && depth < WALK_DEPTH_MAX) {
            sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                r = walk_dir(w, sub, path, depth + 1);
        }
    }
    closedir(d);
    return r;
}

/* Open rel (a relative folder path) below dfd one part at a time, never following a link. */
static int open_beneath(int dfd, const char *rel)
{
    char part[KEPT_PATH_MAX];
    const char *p = rel;
    int cur = dup(dfd);

    while (cur >= 0 && *p) {
        size_t n = strcspn(p, "/");
        int next;

        if (n == 0 || n >= sizeof(part)) {
            close(cur);
            return -EINVAL;
        }
        memcpy(part, p, n);
        part[n] = '\0';
        next = openat(cur, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close(cur);
        cur = next;
        p += n;
        if (*p == '/')
            p++;
    }
    return cur >= 0 ? cur : -errno;
}

int env_home_collect(const struct env_home *h, const char *const *dirs, const char *suffix,
                     uint64_t max_bytes, struct kept_state *st, char *err, size_t errlen)
{
    struct walk w = {
        .suffix = suffix, .max_bytes = max_bytes, .st = st, .err = err, .errlen = errlen};
    struct stat hs;
    int home, r = 0;

    home = open(h->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (home == -1)
        return util_fail(-errno, err, errlen, "cannot open the sandbox's home: %s",
                         strerror(errno));
    if (fstat(home, &hs) == -1) {
        r = util_fail(-errno, err, errlen, "cannot stat the sandbox's home");
        goto out;
    }
    w.dev = hs.st_dev;
    for (size_t i = 0; r == 0 && dirs[i]; i++) {
        struct stat ds;
        int d = open_beneath(home, dirs[i]);

        if (d < 0)
            continue; /* not there (yet): nothing to keep */
        if (fstat(d, &ds) == -1 || ds.st_dev != w.dev) {
            close(d);
            continue;
        }
        r = walk_dir(&w, d, dirs[i], 0);
    }
out:
    close(home);
    return r;
}

int env_home_restore(const struct env_home *h, const struct kept_state *st, char *err,
                     size_t errlen)
{
    for (size_t i = 0; i < st->nfiles; i++) {
        int r = util_write_file_beneath(h->root, st->files[i].path, st->files[i].data,
                                        st->files[i].size, 0600);

        if (r < 0)
            return util_fail(r, err, errlen, "cannot write %.200s: %s", st->files[i].path,
                             strerror(-r));
    }
    return 0;
}
