/*
 * journal — a streamed turn's records in files that outlive its worker (journal.h).
 */
#include "turn/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "base/util.h"
#include "turn/journal_files.h"

#define SEG_MIN_BYTES 4096u
#define READ_CHUNK 65536
#define LINE_MAX_BYTES (EVENT_LINE_MAX + 64)
#define RESULT_PREFIX "{\"kind\":\"result\""

struct journal {
    int dirfd;
    int lock_fd;
    int readers_fd;
    int seg_fd;
    uint64_t seg;
    uint64_t seg_bytes;
    uint64_t seg_max;
    uint64_t last_seq;
    uint64_t last_det;
    struct journal_meta meta;
};

struct journal_reader {
    int dirfd;
    int lock_fd;
    int readers_fd;
    int seg_fd;
    int inotify_fd;
    uint64_t seg;
    uint64_t after;
    struct buf pending;
};

/* ---- the writer ------------------------------------------------------------------------ */

int journal_name(const char *turn_id, const char *project_id, char out[JOURNAL_NAME_LEN + 1])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    struct buf b;
    int r;

    buf_init(&b, 2 * JOURNAL_ID_MAX + 2);
    r = buf_printf(&b, "%s\n%s", project_id ? project_id : "", turn_id);
    if (r == 0 && EVP_Digest(b.data, b.len, md, &n, EVP_sha256(), NULL) != 1)
        r = -EIO;
    buf_release(&b);
    if (r < 0)
        return r;
    util_hex_encode(md, JOURNAL_NAME_LEN / 2, out);
    out[JOURNAL_NAME_LEN] = '\0';
    return 0;
}

static struct journal *journal_alloc(const struct turn_settings *ts)
{
    struct journal *j = calloc(1, sizeof(*j));

    if (!j)
        return NULL;
    j->dirfd = j->lock_fd = j->readers_fd = j->seg_fd = -1;
    j->seg_max = ts->turn_bytes / 2 > SEG_MIN_BYTES ? ts->turn_bytes / 2 : SEG_MIN_BYTES;
    return j;
}

int journal_create(const char *root, const struct turn_settings *ts, const char *turn_id,
                   const char *project_id, const char *session_key, bool detached,
                   struct journal **ret)
{
    char name[JOURNAL_NAME_LEN + 1];
    struct journal *j;
    int r;

    if (strlen(turn_id) >= JOURNAL_ID_MAX || (project_id && strlen(project_id) >= JOURNAL_ID_MAX))
        return -ENAMETOOLONG;
    r = util_mkdir_p(root, 0700);
    if (r < 0)
        return r;
    r = journal_name(turn_id, project_id, name);
    if (r < 0)
        return r;
    j = journal_alloc(ts);
    if (!j)
        return -ENOMEM;
    r = journal_files_open_dir(root, name, true, &j->dirfd);
    if (r < 0)
        goto fail;
    j->lock_fd = openat(j->dirfd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (j->lock_fd < 0 || flock(j->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        r = j->lock_fd >= 0 && errno == EWOULDBLOCK ? -EEXIST : -errno;
        goto fail;
    }
    journal_files_clear_dir(j->dirfd);
    journal_files_copy_str(j->meta.turn_id, sizeof(j->meta.turn_id), turn_id);
    journal_files_copy_str(j->meta.project_id, sizeof(j->meta.project_id), project_id);
    journal_files_copy_str(j->meta.session_key, sizeof(j->meta.session_key), session_key);
    j->meta.pid = util_self_pid();
    j->meta.created_ms = util_wall_ms();
    j->meta.detached = detached;
    j->readers_fd = openat(j->dirfd, "readers", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    j->seg_fd = journal_files_open_seg(j->dirfd, 0, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND);
    if (j->readers_fd < 0 || j->seg_fd < 0) {
        r = -errno;
        goto fail;
    }
    r = journal_files_meta_write(j->dirfd, &j->meta);
    if (r < 0)
        goto fail;
    *ret = j;
    return 0;
fail:
    journal_close(j);
    return r;
}

/* The current segment is full: the next one starts, the one before the current goes. */
static int rotate(struct journal *j)
{
    int fd = journal_files_open_seg(j->dirfd, j->seg + 1, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND);

    if (fd < 0)
        return -errno;
    close(j->seg_fd);
    j->seg_fd = fd;
    if (j->seg > 0)
        journal_files_unlink_seg(j->dirfd, j->seg - 1);
    j->meta.first_seg = j->seg;
    j->seg++;
    j->seg_bytes = 0;
    return journal_files_meta_write(j->dirfd, &j->meta);
}

int journal_append(struct journal *j, uint64_t seq, uint64_t det, const char *line, size_t len)
{
    char prefix[48];
    struct iovec iov[2];
    ssize_t n;
    int plen;

    if (j->seg_bytes >= j->seg_max) {
        int r = rotate(j);
        if (r < 0)
            return r;
    }
    plen = snprintf(prefix, sizeof(prefix), "%llu %llu ", (unsigned long long)seq,
                    (unsigned long long)det);
    iov[0] = (struct iovec){.iov_base = prefix, .iov_len = (size_t)plen};
    iov[1] = (struct iovec){.iov_base = (void *)line, .iov_len = len};
    n = writev(j->seg_fd, iov, 2);
    if (n < 0)
        return -errno;
    if ((size_t)n != (size_t)plen + len)
        return -EIO; /* a torn line: the next writer cuts it off */
    j->seg_bytes += (uint64_t)n;
    j->last_seq = seq;
    j->last_det = det;
    return 0;
}

int journal_set_slot(struct journal *j, uint32_t index, uint32_t generation)
{
    j->meta.has_slot = true;
    j->meta.slot_index = index;
    j->meta.slot_generation = generation;
    j->meta.pid = util_self_pid();
    return journal_files_meta_write(j->dirfd, &j->meta);
}

int journal_finish(struct journal *j)
{
    j->meta.pid = util_self_pid();
    j->meta.state = JOURNAL_DONE;
    j->meta.finished_ms = util_wall_ms();
    return journal_files_meta_write(j->dirfd, &j->meta);
}

bool journal_has_readers(struct journal *j)
{
    if (flock(j->readers_fd, LOCK_EX | LOCK_NB) == 0) {
        (void)flock(j->readers_fd, LOCK_UN);
        return false;
    }
    return errno == EWOULDBLOCK;
}

void journal_last(const struct journal *j, uint64_t *ret_seq, uint64_t *ret_det)
{
    *ret_seq = j->last_seq;
    *ret_det = j->last_det;
}

const struct journal_meta *journal_meta_of(const struct journal *j)
{
    return &j->meta;
}

void journal_close(struct journal *j)
{
    if (!j)
        return;
    if (j->seg_fd >= 0)
        close(j->seg_fd);
    if (j->readers_fd >= 0)
        close(j->readers_fd);
    if (j->lock_fd >= 0)
        close(j->lock_fd); /* the writer lock goes with it */
    if (j->dirfd >= 0)
        close(j->dirfd);
    free(j);
}

/* ---- readers ----------------------------------------------------------------------------- */

void journal_reader_free(struct journal_reader *r)
{
    if (!r)
        return;
    if (r->seg_fd >= 0)
        close(r->seg_fd);
    if (r->inotify_fd >= 0)
        close(r->inotify_fd);
    if (r->readers_fd >= 0)
        close(r->readers_fd);
    if (r->lock_fd >= 0)
        close(r->lock_fd);
    if (r->dirfd >= 0)
        close(r->dirfd);
    buf_release(&r->pending);
    free(r);
}

/* Which segment holds the record after `after`: -ERANGE (*ret_oldest) when none still does. */
static int pick_seg(int dirfd, uint64_t after, uint64_t *ret_seg, uint64_t *ret_oldest)
{
    uint64_t *segs = NULL, first;
    size_t n = 0;
    bool oldest_known = false;
    int r = journal_files_list_segs(dirfd, &segs, &n);

    if (r < 0)
        return r;
    if (n == 0) {
        free(segs);
        return -ENOENT;
    }
    *ret_seg = segs[0];
    for (size_t i = 0; i < n; i++) {
        r = journal_files_first_seq(dirfd, segs[i], &first);
        if (r < 0)
            continue; /* removed meanwhile: a later one holds newer records */
        if (r == 0)
            break; /* an empty newest segment: the records before it are in the one before */
        if (!oldest_known) {
            oldest_known = true;
            if (first > after + 1) {
                *ret_oldest = first;
                free(segs);
                return -ERANGE;
            }
        }
        if (first > after + 1)
            break;
        *ret_seg = segs[i];
    }
    free(segs);
    return 0;
}

int journal_open(const char *root, const char *turn_id, const char *project_id, uint64_t after,
                 struct journal_reader **ret, uint64_t *ret_oldest)
{
    char name[JOURNAL_NAME_LEN + 1];
    struct journal_meta meta;
    struct journal_reader *rd;
    int r;

    if (strlen(turn_id) >= JOURNAL_ID_MAX || (project_id && strlen(project_id) >= JOURNAL_ID_MAX))
        return -ENOENT;
    r = journal_name(turn_id, project_id, name);
    if (r < 0)
        return r;
    rd = calloc(1, sizeof(*rd));
    if (!rd)
        return -ENOMEM;
    rd->dirfd = rd->lock_fd = rd->readers_fd = rd->seg_fd = rd->inotify_fd = -1;
    buf_init(&rd->pending, LINE_MAX_BYTES);
    rd->after = after;
    r = journal_files_open_dir(root, name, false, &rd->dirfd);
    if (r == 0)
        r = journal_files_meta_read(rd->dirfd, &meta);
    if (r == 0 && (strcmp(meta.turn_id, turn_id) != 0 ||
                   strcmp(meta.project_id, project_id ? project_id : "") != 0))
        r = -ENOENT;
    if (r < 0) {
        r = r == -ERANGE ? r : -ENOENT;
        goto fail;
    }
    /* follow first (the writer then sees a reader), then look: nothing slips between */
    rd->readers_fd = openat(rd->dirfd, "readers", O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    rd->lock_fd = openat(rd->dirfd, "lock", O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (rd->readers_fd < 0 || rd->lock_fd < 0 || flock(rd->readers_fd, LOCK_SH) < 0) {
        r = -ENOENT;
        goto fail;
    }
    rd->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (rd->inotify_fd >= 0) {
        char path[PATH_MAX];

        snprintf(path, sizeof(path), "%s/%s", root, name);
        (void)inotify_add_watch(rd->inotify_fd, path,
                                IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE);
    }
    r = pick_seg(rd->dirfd, after, &rd->seg, ret_oldest);
    if (r < 0)
        goto fail;
    rd->seg_fd = journal_files_open_seg(rd->dirfd, rd->seg, O_RDONLY);
    if (rd->seg_fd < 0) {
        r = -ENOENT;
        goto fail;
    }
    *ret = rd;
    return 0;
fail:
    journal_reader_free(rd);
    return r;
}

/* The next segment, once the current one is read to its end: 1 moved, 0 none yet, -ERANGE. */
static int next_seg(struct journal_reader *r)
{
    struct journal_meta meta;
    int fd = journal_files_open_seg(r->dirfd, r->seg + 1, O_RDONLY);

    if (fd < 0) {
        if (journal_files_meta_read(r->dirfd, &meta) == 0 && meta.first_seg > r->seg + 1)
            return -ERANGE;
        return 0;
    }
    close(r->seg_fd);
    r->seg_fd = fd;
    r->seg++;
    buf_reset(&r->pending); /* a torn line of a segment that was given up */
    return 1;
}

/* A whole line in pending: 1 (taken out into out when it is new), 0 none. */
static int take_line(struct journal_reader *r, struct buf *out, uint64_t *ret_seq, bool *ret_result,
                     bool *ret_new)
{
    char *nl = memchr(r->pending.data, '\n', r->pending.len);
    size_t len;
    uint64_t seq, det;
    int off;

    *ret_new = false;
    if (!r->pending.len || !nl)
        return 0;
    len = (size_t)(nl - r->pending.data) + 1;
    off = journal_files_parse_line(r->pending.data, len, &seq, &det);
    if (off >= 0 && seq > r->after) {
        buf_reset(out);
        if (buf_append(out, r->pending.data + off, len - (size_t)off) == 0) {
            *ret_seq = seq;
            *ret_result = strncmp(out->data, RESULT_PREFIX, strlen(RESULT_PREFIX)) == 0;
            r->after = seq;
            *ret_new = true;
        }
    }
    buf_consume(&r->pending, len);
    return 1;
}

int journal_read(struct journal_reader *r, struct buf *out, uint64_t *ret_seq, bool *ret_result)
{
    char chunk[READ_CHUNK];

    for (;;) {
        bool fresh;
        ssize_t n;
        int k;

        while (take_line(r, out, ret_seq, ret_result, &fresh) == 1)
            if (fresh)
                return 1;
        n = read(r->seg_fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n > 0) {
            if (buf_append(&r->pending, chunk, (size_t)n) < 0)
                return -E2BIG;
            continue;
        }
        k = next_seg(r);
        if (k <= 0)
            return k;
    }
}

void journal_wait(struct journal_reader *r, int timeout_ms)
{
    struct pollfd p = {.fd = r->inotify_fd, .events = POLLIN};
    char drain[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

    if (r->inotify_fd < 0) {
        util_sleep_ms(timeout_ms < 20 ? timeout_ms : 20);
        return;
    }
    if (poll(&p, 1, timeout_ms) == 1)
        while (read(r->inotify_fd, drain, sizeof(drain)) > 0)
            ;
}

int journal_reader_meta(struct journal_reader *r, struct journal_meta *ret)
{
    return journal_files_meta_read(r->dirfd, ret);
}

bool journal_writer_alive(struct journal_reader *r)
{
    if (flock(r->lock_fd, LOCK_SH | LOCK_NB) == 0) {
        (void)flock(r->lock_fd, LOCK_UN);
        return false;
    }
    return true;
}

/* The last record of the journal, in the last segment or (just rotated) the one before. */
static int last_record(struct journal *j, int fd_last, uint64_t *ret_size)
{
    uint64_t size;
    int k = journal_files_seg_tail(fd_last, &j->last_seq, &j->last_det, ret_size);

    if (k != 0 || j->seg == 0)
        return k < 0 ? k : 0;
    {
        int fd = journal_files_open_seg(j->dirfd, j->seg - 1, O_RDWR);

        if (fd < 0)
            return 0;
        k = journal_files_seg_tail(fd, &j->last_seq, &j->last_det, &size);
        close(fd);
    }
    return k < 0 ? k : 0;
}

int journal_take_over(struct journal_reader *r, const struct turn_settings *ts,
                      struct journal **ret)
{
    struct journal *j;
    uint64_t *segs = NULL, size = 0;
    size_t n = 0;
    int fd, k;

    if (flock(r->lock_fd, LOCK_EX | LOCK_NB) < 0)
        return errno == EWOULDBLOCK ? -EBUSY : -errno;
    j = journal_alloc(ts);
    fd = openat(r->dirfd, "lock", O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (!j || fd < 0) {
        (void)flock(r->lock_fd, LOCK_UN);
        k = -ENOMEM;
        goto fail;
    }
    /* the lock moves to the writer; the reader probes with a descriptor of its own */
    j->lock_fd = r->lock_fd;
    r->lock_fd = fd;
    fd = -1;
    j->dirfd = dup(r->dirfd);
    j->readers_fd = openat(r->dirfd, "readers", O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    k = journal_files_meta_read(r->dirfd, &j->meta);
    if (k == 0)
        k = journal_files_list_segs(r->dirfd, &segs, &n);
    if (k < 0 || n == 0 || j->dirfd < 0 || j->readers_fd < 0) {
        k = k < 0 ? k : -ENOENT;
        goto fail;
    }
    j->seg = segs[n - 1];
    free(segs);
    j->seg_fd = journal_files_open_seg(r->dirfd, j->seg, O_RDWR | O_APPEND);
    if (j->seg_fd < 0) {
        k = -errno;
        goto fail;
    }
    k = last_record(j, j->seg_fd, &size);
    if (k < 0)
        goto fail;
    j->seg_bytes = size; /* meta.pid stays the dead writer's until this one writes the meta */
    /* the reader goes on after the last whole record */
    if (r->seg != j->seg) {
        close(r->seg_fd);
        r->seg_fd = journal_files_open_seg(r->dirfd, j->seg, O_RDONLY);
        r->seg = j->seg;
    }
    if (r->seg_fd >= 0)
        (void)lseek(r->seg_fd, (off_t)size, SEEK_SET);
    buf_reset(&r->pending);
    if (r->after < j->last_seq)
        r->after = j->last_seq;
    *ret = j;
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    journal_close(j); /* drops the lock it took */
    return k;
}
