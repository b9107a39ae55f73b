/*
 * journal_sweep — listing and sweeping the journals under a root (journal_sweep.h).
 */
#include "turn/journal_sweep.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "turn/journal_files.h"

/* What a listing needs of one journal folder (dirfd): 0, or -errno when it is no journal. */
static int describe(int dirfd, const char *name, struct journal_entry *e)
{
    uint64_t *segs = NULL, det;
    size_t n = 0;
    off_t end;
    struct stat st;
    int lock, r;

    memset(e, 0, sizeof(*e));
    snprintf(e->name, sizeof(e->name), "%s", name);
    r = journal_files_meta_read(dirfd, &e->meta);
    if (r == 0)
        r = journal_files_list_segs(dirfd, &segs, &n);
    if (r < 0)
        return r;
    if (fstatat(dirfd, "meta", &st, AT_SYMLINK_NOFOLLOW) == 0) {
        e->bytes += (uint64_t)st.st_size;
        e->changed_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
    }
    for (size_t i = 0; i < n; i++) {
        int fd = journal_files_open_seg(dirfd, segs[i], O_RDONLY);

        if (fd < 0)
            continue;
        if (fstat(fd, &st) == 0) {
            int64_t ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
            e->bytes += (uint64_t)st.st_size;
            if (ms > e->changed_ms)
                e->changed_ms = ms;
        }
        close(fd);
    }
    for (size_t i = n; i-- > 0 && e->last_seq == 0;) {
        int fd = journal_files_open_seg(dirfd, segs[i], O_RDONLY);

        /* read-only: a torn tail is left for the writer that takes over to cut */
        if (fd >= 0 && journal_files_seg_last(fd, &e->last_seq, &det, &end) < 0)
            e->last_seq = 0;
        if (fd >= 0)
            close(fd);
    }
    free(segs);
    lock = openat(dirfd, "lock", O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    e->writer_alive = lock >= 0 && flock(lock, LOCK_SH | LOCK_NB) < 0;
    if (lock >= 0)
        close(lock);
    return 0;
}

/* Each journal folder under root, described (folders that are no journal are skipped). */
static int each_journal(const char *root, struct journal_entry **ret, size_t *ret_n)
{
    DIR *d = opendir(root);
    struct journal_entry *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;

    *ret = NULL;
    *ret_n = 0;
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    while ((e = readdir(d))) {
        int fd;

        if (strlen(e->d_name) != JOURNAL_NAME_LEN ||
            strspn(e->d_name, "0123456789abcdef") != JOURNAL_NAME_LEN)
            continue;
        if (n == cap) {
            struct journal_entry *nv = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof(*v));
            if (!nv) {
                free(v);
                closedir(d);
                return -ENOMEM;
            }
            v = nv;
        }
        fd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (describe(fd, e->d_name, &v[n]) == 0)
            n++;
        close(fd);
    }
    closedir(d);
    *ret = v;
    *ret_n = n;
    return 0;
}

int journal_sweep_list(const char *root, struct journal_entry **ret, size_t *ret_n)
{
    return each_journal(root, ret, ret_n);
}

/* Remove a journal nobody writes (its writer lock is taken for the removal). */
static bool remove_journal(const char *root, const char *name)
{
    char path[PATH_MAX];
    int dfd, lock;
    bool done = false;

    if (journal_files_open_dir(root, name, false, &dfd) < 0)
        return false;
    lock = openat(dfd, "lock", O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) == 0) {
        journal_files_clear_dir(dfd);
        (void)unlinkat(dfd, "meta.tmp", 0);
        (void)unlinkat(dfd, "readers", 0);
        (void)unlinkat(dfd, "lock", 0);
        snprintf(path, sizeof(path), "%s/%s", root, name);
        done = rmdir(path) == 0;
    }
    if (lock >= 0)
        close(lock);
    close(dfd);
    return done;
}

static int by_finished(const void *a, const void *b)
{
    const struct journal_entry *x = a, *y = b;

    return x->meta.finished_ms < y->meta.finished_ms   ? -1
           : x->meta.finished_ms > y->meta.finished_ms ? 1
                                                       : 0;
}

int journal_sweep_run(const char *root, const struct turn_settings *ts, int64_t now_wall_ms,
                      struct journal_sweep_stats *ret)
{
    struct journal_sweep_stats st = {0};
    struct journal_entry *v = NULL;
    size_t n = 0, kept = 0;
    int r = each_journal(root, &v, &n);

    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        const struct journal_entry *e = &v[i];
        bool done = e->meta.state == JOURNAL_DONE;

        if (done && e->meta.finished_ms + (int64_t)ts->keep_ms <= now_wall_ms) {
            st.expired += remove_journal(root, e->name);
            continue;
        }
        if (!done && !e->writer_alive && e->changed_ms + (int64_t)ts->keep_ms <= now_wall_ms) {
            st.abandoned += remove_journal(root, e->name);
            continue;
        }
        st.bytes += e->bytes;
        if (done)
            v[kept++] = *e;
    }
    qsort(v, kept, sizeof(*v), by_finished);
    for (size_t i = 0; i < kept && st.bytes > ts->total_bytes; i++) {
        if (remove_journal(root, v[i].name)) {
            st.evicted++;
            st.bytes -= v[i].bytes < st.bytes ? v[i].bytes : st.bytes;
        }
    }
    free(v);
    if (ret)
        *ret = st;
    return 0;
}
