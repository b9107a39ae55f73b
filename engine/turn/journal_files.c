/*
 * journal_files — a journal's files (journal_files.h).
 */
#include "turn/journal_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/util.h"

#define META_MAX (16u * 1024)

/* ---- names, meta --------------------------------------------------------------------- */

void journal_files_copy_str(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src ? src : "");
}

int journal_files_meta_write(int dirfd, const struct journal_meta *m)
{
    json_object *o = json_object_new_object(), *slot;
    const char *text;
    size_t n;
    int fd, r;

    json_object_object_add(o, "turnId", json_object_new_string(m->turn_id));
    json_object_object_add(o, "projectId", json_object_new_string(m->project_id));
    json_object_object_add(o, "sessionKey", json_object_new_string(m->session_key));
    json_object_object_add(o, "pid", json_object_new_int(m->pid));
    json_object_object_add(o, "createdMs", json_object_new_int64(m->created_ms));
    json_object_object_add(o, "finishedMs", json_object_new_int64(m->finished_ms));
    json_object_object_add(o, "detached", json_object_new_boolean(m->detached));
    json_object_object_add(o, "state",
                           json_object_new_string(m->state == JOURNAL_DONE ? "done" : "running"));
    json_object_object_add(o, "firstSeg", json_object_new_int64((int64_t)m->first_seg));
    if (m->has_slot) {
        slot = json_object_new_object();
        json_object_object_add(slot, "index", json_object_new_int64(m->slot_index));
        json_object_object_add(slot, "generation", json_object_new_int64(m->slot_generation));
        json_object_object_add(o, "slot", slot);
    }
    text = jsonx_text(o, &n);
    fd = openat(dirfd, "meta.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    r = fd < 0 ? -errno : util_write_all(fd, text, n);
    if (fd >= 0 && close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && renameat(dirfd, "meta.tmp", dirfd, "meta") < 0)
        r = -errno;
    json_object_put(o);
    return r;
}

static int64_t num_of(json_object *o, const char *key)
{
    json_object *v = jsonx_get(o, key);

    return v ? json_object_get_int64(v) : 0;
}

int journal_files_meta_read(int dirfd, struct journal_meta *ret)
{
    char text[META_MAX + 1];
    json_object *o = NULL, *slot;
    char err[64];
    ssize_t n;
    int fd, r;

    fd = openat(dirfd, "meta", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    n = read(fd, text, META_MAX);
    close(fd);
    if (n <= 0)
        return n < 0 ? -errno : -ENODATA;
    r = jsonx_parse(text, (size_t)n, 4, &o, err, sizeof(err));
    if (r < 0)
        return -EBADMSG;
    memset(ret, 0, sizeof(*ret));
    journal_files_copy_str(ret->turn_id, sizeof(ret->turn_id), jsonx_str(o, "turnId"));
    journal_files_copy_str(ret->project_id, sizeof(ret->project_id), jsonx_str(o, "projectId"));
    journal_files_copy_str(ret->session_key, sizeof(ret->session_key), jsonx_str(o, "sessionKey"));
    ret->pid = (int32_t)num_of(o, "pid");
    ret->created_ms = num_of(o, "createdMs");
    ret->finished_ms = num_of(o, "finishedMs");
    ret->detached = json_object_get_boolean(jsonx_get(o, "detached"));
    ret->state = strcmp(jsonx_str(o, "state") ? jsonx_str(o, "state") : "", "done") == 0
                     ? JOURNAL_DONE
                     : JOURNAL_RUNNING;
    ret->first_seg = (uint64_t)num_of(o, "firstSeg");
    slot = jsonx_get(o, "slot");
    if (slot) {
        ret->has_slot = true;
        ret->slot_index = (uint32_t)num_of(slot, "index");
        ret->slot_generation = (uint32_t)num_of(slot, "generation");
    }
    json_object_put(o);
    return 0;
}

int journal_files_parse_line(const char *line, size_t len, uint64_t *ret_seq, uint64_t *ret_det)
{
    uint64_t v[2] = {0, 0};
    size_t i = 0;

    for (int k = 0; k < 2; k++) {
        size_t start = i;

        while (i < len && line[i] >= '0' && line[i] <= '9' && i - start < 19)
            v[k] = v[k] * 10 + (uint64_t)(line[i++] - '0');
        if (i == start || i >= len || line[i] != ' ')
            return -EBADMSG;
        i++;
    }
    if (i >= len || line[i] != '{')
        return -EBADMSG;
    *ret_seq = v[0];
    *ret_det = v[1];
    return (int)i;
}

int journal_files_open_seg(int dirfd, uint64_t n, int flags)
{
    char name[40];

    snprintf(name, sizeof(name), JOURNAL_SEG_PREFIX "%llu", (unsigned long long)n);
    return openat(dirfd, name, flags | O_NOFOLLOW | O_CLOEXEC, 0600);
}

void journal_files_unlink_seg(int dirfd, uint64_t n)
{
    char name[40];

    snprintf(name, sizeof(name), JOURNAL_SEG_PREFIX "%llu", (unsigned long long)n);
    (void)unlinkat(dirfd, name, 0);
}

/* The segment numbers in the folder, ascending: a new array (may be empty) and its length. */
int journal_files_list_segs(int dirfd, uint64_t **ret, size_t *ret_n)
{
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    uint64_t *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;

    if (!d) {
        if (fd >= 0)
            close(fd);
        return -errno;
    }
    rewinddir(d);
    while ((e = readdir(d))) {
        uint64_t k;

        if (strncmp(e->d_name, JOURNAL_SEG_PREFIX, strlen(JOURNAL_SEG_PREFIX)) != 0 ||
            util_parse_u64(e->d_name + strlen(JOURNAL_SEG_PREFIX), 0, UINT32_MAX, &k) < 0)
            continue;
        if (n == cap) {
            uint64_t *nv = realloc(v, (cap = cap ? 2 * cap : 8) * sizeof(*v));
            if (!nv) {
                free(v);
                closedir(d);
                return -ENOMEM;
            }
            v = nv;
        }
        v[n++] = k;
    }
    closedir(d);
    for (size_t i = 1; i < n; i++) /* few segments: insertion sort */
        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            uint64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    *ret = v;
    *ret_n = n;
    return 0;
}

/* The seq of a segment's first record: 1 with *ret_seq, 0 when it has none yet. */
int journal_files_first_seq(int dirfd, uint64_t n, uint64_t *ret_seq)
{
    char head[64];
    uint64_t det;
    ssize_t got;
    int fd = journal_files_open_seg(dirfd, n, O_RDONLY);

    if (fd < 0)
        return -errno;
    got = read(fd, head, sizeof(head));
    close(fd);
    if (got <= 0)
        return 0;
    return journal_files_parse_line(head, (size_t)got, ret_seq, &det) < 0 ? 0 : 1;
}

/*
 * Where the last whole line of the segment open on fd lies: [*ret_start, *ret_end) (both 0 when
 * it holds none); whatever follows *ret_end is a torn line.
 */
static int find_tail(int fd, off_t *ret_start, off_t *ret_end)
{
    struct stat st;
    char chunk[4096];
    off_t pos, line_end = -1, line_start = 0;
    bool found = false;

    if (fstat(fd, &st) < 0)
        return -errno;
    for (pos = st.st_size; pos > 0 && !found;) {
        size_t take = pos > (off_t)sizeof(chunk) ? sizeof(chunk) : (size_t)pos;
        ssize_t got = pread(fd, chunk, take, pos - (off_t)take);

        if (got != (ssize_t)take)
            return -EIO;
        for (size_t i = take; i-- > 0;) {
            if (chunk[i] != '\n')
                continue;
            if (line_end < 0) {
                line_end = pos - (off_t)take + (off_t)i + 1;
            } else {
                line_start = pos - (off_t)take + (off_t)i + 1;
                found = true;
                break;
            }
        }
        pos -= (off_t)take;
    }
    *ret_start = line_end < 0 ? 0 : line_start;
    *ret_end = line_end < 0 ? 0 : line_end;
    return 0;
}

/* The seq/det of the segment's last whole record: 1, 0 when it holds none. */
int journal_files_seg_last(int fd, uint64_t *ret_seq, uint64_t *ret_det, off_t *ret_end)
{
    off_t start, end;
    char head[64];
    ssize_t got;
    int r = find_tail(fd, &start, &end);

    if (r < 0)
        return r;
    *ret_end = end;
    if (end == 0)
        return 0;
    got = pread(fd, head, sizeof(head), start);
    if (got <= 0 || journal_files_parse_line(head, (size_t)got, ret_seq, ret_det) < 0)
        return -EBADMSG;
    return 1;
}

/*
 * Cut a torn last line off the segment open on fd (read-write) and find its last record: 1
 * with seq/det, 0 when it holds none; *ret_size is its length after the cut.
 */
int journal_files_seg_tail(int fd, uint64_t *ret_seq, uint64_t *ret_det, uint64_t *ret_size)
{
    struct stat st;
    off_t end;
    int r = journal_files_seg_last(fd, ret_seq, ret_det, &end);

    if (r < 0)
        return r;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (end < st.st_size && ftruncate(fd, end) < 0)
        return -errno;
    *ret_size = (uint64_t)end;
    return r;
}

int journal_files_open_dir(const char *root, const char *name, bool create, int *ret_fd)
{
    char path[PATH_MAX];
    int fd;

    if (snprintf(path, sizeof(path), "%s/%s", root, name) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    if (create && mkdir(path, 0700) < 0 && errno != EEXIST)
        return -errno;
    fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    *ret_fd = fd;
    return 0;
}

/* Remove what an earlier turn of the same name left (its writer lock is ours). */
void journal_files_clear_dir(int dirfd)
{
    uint64_t *segs = NULL;
    size_t n = 0;

    if (journal_files_list_segs(dirfd, &segs, &n) == 0)
        for (size_t i = 0; i < n; i++)
            journal_files_unlink_seg(dirfd, segs[i]);
    free(segs);
    (void)unlinkat(dirfd, "meta", 0);
}
