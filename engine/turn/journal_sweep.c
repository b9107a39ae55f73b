/*
 * journal_sweep — listing and sweeping the journals under a root (journal_sweep.h).
 */
#include "turn/journal_sweep.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "turn/journal_files.h"

/* One entry of the root folder, as a stat sees it. */
struct seen {
    char name[JOURNAL_NAME_LEN + 8];
    bool done;
    int64_t finished_ms; /* ctime of a finished one */
    int64_t changed_ms;  /* mtime */
    uint64_t bytes;
};

static int64_t ms_of(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000 + t->tv_nsec / 1000000;
}

static bool journal_file(const char *name)
{
    return strlen(name) == JOURNAL_NAME_LEN + strlen(JOURNAL_SUFFIX) &&
           strspn(name, "0123456789abcdef") == JOURNAL_NAME_LEN &&
           strcmp(name + JOURNAL_NAME_LEN, JOURNAL_SUFFIX) == 0;
}

/* Every journal file under root with its stat: a new array and its length. */
static int stat_all(const char *root, int *ret_dirfd, struct seen **ret, size_t *ret_n)
{
    DIR *d = opendir(root);
    struct seen *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;

    *ret = NULL;
    *ret_n = 0;
    *ret_dirfd = -1;
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        struct stat st;

        if (!journal_file(e->d_name) || len >= sizeof(v->name) ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (n == cap) {
            struct seen *nv = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof(*v));
            if (!nv) {
                free(v);
                closedir(d);
                return -ENOMEM;
            }
            v = nv;
        }
        memcpy(v[n].name, e->d_name, len + 1);
        v[n].done = (st.st_mode & 0777) == JOURNAL_DONE_MODE;
        v[n].finished_ms = ms_of(&st.st_ctim);
        v[n].changed_ms = ms_of(&st.st_mtim);
        v[n].bytes = (uint64_t)st.st_blocks * 512;
        n++;
    }
    *ret_dirfd = dup(dirfd(d));
    closedir(d);
    *ret = v;
    *ret_n = n;
    return 0;
}

int journal_sweep_list(const char *root, bool orphans_only, struct journal_entry **ret,
                       size_t *ret_n)
{
    struct journal_entry *v;
    struct seen *s = NULL;
    size_t n = 0, k = 0;
    int dfd, r = stat_all(root, &dfd, &s, &n);

    *ret = NULL;
    *ret_n = 0;
    if (r < 0)
        return r;
    v = calloc(n ? n : 1, sizeof(*v));
    for (size_t i = 0; v && i < n; i++) {
        uint64_t end, det;
        int fd;

        bool alive;

        if (orphans_only && s[i].done)
            continue;
        fd = openat(dfd, s[i].name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        alive = journal_files_locked(fd, JOURNAL_LOCK_WRITER, false);
        /* a live writer's journal is no orphan: not read at all */
        if (!(orphans_only && alive) &&
            journal_files_scan(fd, &v[k].meta, &end, &v[k].last_seq, &det) == 0) {
            snprintf(v[k].name, sizeof(v[k].name), "%s", s[i].name);
            v[k].bytes = s[i].bytes;
            v[k].changed_ms = s[i].changed_ms;
            v[k].writer_alive = alive;
            k++;
        }
        close(fd);
    }
    if (dfd >= 0)
        close(dfd);
    free(s);
    if (!v)
        return -ENOMEM;
    *ret = v;
    *ret_n = k;
    return 0;
}

/* Remove a journal nobody writes (its writer lock is held for the removal): true when gone. */
static bool remove_journal(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    bool gone = false;

    if (fd < 0)
        return false;
    if (journal_files_lock(fd, JOURNAL_LOCK_WRITER, true) == 0)
        gone = unlinkat(dfd, name, 0) == 0;
    close(fd);
    return gone;
}

static int by_finished(const void *a, const void *b)
{
    const struct seen *x = a, *y = b;

    return (x->finished_ms > y->finished_ms) - (x->finished_ms < y->finished_ms);
}

int journal_sweep_run(const char *root, const struct turn_settings *ts, int64_t now_wall_ms,
                      struct journal_sweep_stats *ret)
{
    struct journal_sweep_stats st = {0};
    struct seen *v = NULL;
    size_t n = 0, kept = 0;
    int dfd, r = stat_all(root, &dfd, &v, &n);

    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        const struct seen *e = &v[i];

        if (e->done && e->finished_ms + (int64_t)ts->keep_ms <= now_wall_ms &&
            remove_journal(dfd, e->name)) {
            st.expired++;
            continue;
        }
        /* no write for the whole window and no writer: its worker died and nobody took it */
        if (!e->done && e->changed_ms + (int64_t)ts->keep_ms <= now_wall_ms &&
            remove_journal(dfd, e->name)) {
            st.abandoned++;
            continue;
        }
        st.bytes += e->bytes;
        st.count++;
        if (e->done)
            v[kept++] = *e;
    }
    qsort(v, kept, sizeof(*v), by_finished);
    for (size_t i = 0; i < kept && st.bytes > ts->total_bytes; i++) {
        if (remove_journal(dfd, v[i].name)) {
            st.evicted++;
            st.count--;
            st.bytes -= v[i].bytes < st.bytes ? v[i].bytes : st.bytes;
        }
    }
    if (dfd >= 0)
        close(dfd);
    free(v);
    if (ret)
        *ret = st;
    return 0;
}
