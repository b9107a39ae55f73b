/*
 * journal — a streamed turn's records in a file that outlives its worker (journal.h).
 */
#include "turn/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/util.h"
#include "turn/journal_files.h"
#include "turn/journal_spares.h"

#define HALF_MIN_BYTES 2048u
#define PENDING_MAX (RESULT_LINE_MAX + 4096) /* queued lines (a result record fits) */
#define PENDING_FLUSH (256u * 1024)          /* written at once from this size on */
#define READ_CHUNK 65536
#define LINE_MAX_BYTES (EVENT_LINE_MAX + 64)
#define RESULT_PREFIX "{\"kind\":\"result\""

struct journal {
    int fd;
    struct buf pending;  /* lines not written yet (journal_flush) */
    uint64_t size;       /* where the next line goes (written lines only) */
    uint64_t header_end; /* the header line is never dropped */
    uint64_t mark;       /* where the newest half of the bound starts (a line start) */
    uint64_t punch_to;   /* everything before it (after the header) goes at the next write */
    uint64_t punched;
    uint64_t half; /* turn_bytes / 2 */
    uint64_t last_seq;
    uint64_t last_det;
    bool punch_failed;
    bool spare_after;  /* made by journal_create: a spare follows its close */
    bool finish_queued; /* the finishedMs line is queued or written (finish_line) */
    bool link_failed;   /* a prepared journal whose file could not be made */
    struct journal_meta meta;
    char root[PATH_MAX];
    char path[PATH_MAX]; /* its file's */
};

struct journal_reader {
    int fd;
    int inotify_fd;
    char path[PATH_MAX];
    uint64_t header_end;
    uint64_t pos; /* the next byte to read */
    uint64_t after;
    struct buf pending; /* read, not yet a whole line */
};

/* The path of the journal of (project_id, turn_id) under root. */
static int journal_path(const char *root, const char *turn_id, const char *project_id,
                        char path[PATH_MAX])
{
    char name[JOURNAL_FILE_MAX];
    int r;

    if (strlen(turn_id) >= JOURNAL_ID_MAX || (project_id && strlen(project_id) >= JOURNAL_ID_MAX))
        return -ENAMETOOLONG;
    r = journal_files_name(turn_id, project_id, name);
    if (r < 0)
        return r;
    if (snprintf(path, PATH_MAX, "%s/%s", root, name) >= PATH_MAX)
        return -ENAMETOOLONG;
    return 0;
}

static int open_path(const char *root, const char *turn_id, const char *project_id, int flags,
                     char path[PATH_MAX])
{
    int r = journal_path(root, turn_id, project_id, path);

    if (r < 0)
        return r;
    r = open(path, flags | O_CLOEXEC | O_NOFOLLOW, 0600);
    return r < 0 ? -errno : r;
}

/* ---- the writer ------------------------------------------------------------------------ */

static struct journal *journal_alloc(const struct turn_settings *ts)
{
    struct journal *j = calloc(1, sizeof(*j));

    if (!j)
        return NULL;
    j->fd = -1;
    j->half = ts->turn_bytes / 2 > HALF_MIN_BYTES ? ts->turn_bytes / 2 : HALF_MIN_BYTES;
    buf_init(&j->pending, PENDING_MAX);
    return j;
}

/* fd still names path (a sweep did not remove the file between the open and the lock). */
static bool still_linked(int fd, const char *path)
{
    struct stat a, b;

    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino &&
           a.st_dev == b.st_dev && a.st_nlink > 0;
}

/* Open (made when missing) and lock the journal file of a turn: its fd, -EEXIST, -errno. */
static int open_locked(const char *root, const char *turn_id, const char *project_id,
                       struct stat *ret_st)
{
    char path[PATH_MAX];
    int fd = -EAGAIN, r;

    for (int tries = 0; tries < 3 && fd == -EAGAIN; tries++) {
        fd = open_path(root, turn_id, project_id, O_RDWR | O_CREAT | O_APPEND, path);
        if (fd == -ENOENT && (r = util_mkdir_p(root, 0700)) < 0)
            return r;
        if (fd == -ENOENT) {
            fd = -EAGAIN;
            continue;
        }
        if (fd < 0)
            return fd;
        if (journal_files_lock(fd, JOURNAL_LOCK_WRITER, true) < 0) {
            close(fd);
            return -EEXIST; /* a live writer has this turn */
        }
        if (fstat(fd, ret_st) < 0) {
            r = -errno;
            close(fd);
            return r;
        }
        /* a file that was there: make sure a sweep did not remove it before the lock */
        if (ret_st->st_size > 0 && !still_linked(fd, path)) {
            close(fd);
            fd = -EAGAIN;
        }
    }
    return fd;
}

static int slot_line(struct journal *j, uint32_t index, uint32_t generation)
{
    j->meta.has_slot = true;
    j->meta.slot_index = index;
    j->meta.slot_generation = generation;
    return buf_printf(&j->pending, "M {\"slot\":{\"index\":%u,\"generation\":%u}}\n",
                      (unsigned)index, (unsigned)generation);
}

/* The journal's file, made (a spare linked at its name, or opened): what is queued (the header
 * first) goes into it. */
static int link_file(struct journal *j)
{
    struct stat st = {.st_size = 0, .st_mode = 0600};
    int r;

    /* the thread's spare, renamed (none, or the name is taken: the file made or found here) */
    r = journal_spare_take(j->root, j->path);
    if (r < 0)
        r = open_locked(j->root, j->meta.turn_id,
                        j->meta.project_id[0] ? j->meta.project_id : NULL, &st);
    if (r < 0)
        return r;
    j->fd = r;
    j->spare_after = true;
    /* an earlier turn of the same id (finished, or abandoned by a dead writer) is replaced */
    if ((st.st_size > 0 && ftruncate(j->fd, 0) < 0) ||
        ((st.st_mode & 0777) != 0600 && fchmod(j->fd, 0600) < 0))
        return -errno;
    return journal_flush(j);
}

/* The journal in memory: its header (and slot) line queued, no file yet (link_file). */
static int prepare(const char *root, const struct turn_settings *ts, const char *turn_id,
                   const char *project_id, const char *session_key, bool detached,
                   const uint32_t *slot, struct journal **ret)
{
    struct journal *j = journal_alloc(ts);
    int r;

    if (!j)
        return -ENOMEM;
    if (strlen(turn_id) >= JOURNAL_ID_MAX || (project_id && strlen(project_id) >= JOURNAL_ID_MAX) ||
        snprintf(j->root, sizeof(j->root), "%s", root) >= (int)sizeof(j->root)) {
        r = -ENAMETOOLONG;
        goto fail;
    }
    r = journal_path(root, turn_id, project_id, j->path);
    if (r < 0)
        goto fail;
    snprintf(j->meta.turn_id, sizeof(j->meta.turn_id), "%s", turn_id);
    snprintf(j->meta.project_id, sizeof(j->meta.project_id), "%s", project_id ? project_id : "");
    snprintf(j->meta.session_key, sizeof(j->meta.session_key), "%s",
             session_key ? session_key : "");
    j->meta.pid = util_self_pid();
    j->meta.created_ms = util_wall_ms();
    j->meta.detached = detached;
    r = journal_files_header(&j->meta, &j->pending);
    if (r == 0 && slot)
        r = slot_line(j, slot[0], slot[1]);
    if (r < 0)
        goto fail;
    j->header_end = j->pending.len; /* the header (and slot) line, never dropped by the bound */
    j->mark = j->header_end;
    *ret = j;
    return 0;
fail:
    buf_reset(&j->pending); /* nothing of it is written */
    j->link_failed = true;
    journal_close(j);
    return r;
}

static int create(const char *root, const struct turn_settings *ts, const char *turn_id,
                  const char *project_id, const char *session_key, bool detached,
                  const uint32_t *slot, struct journal **ret)
{
    int r = prepare(root, ts, turn_id, project_id, session_key, detached, slot, ret);

    if (r == 0 && (r = link_file(*ret)) < 0) {
        (*ret)->link_failed = true;
        buf_reset(&(*ret)->pending);
        journal_close(*ret);
        *ret = NULL;
    }
    return r;
}

int journal_create(const char *root, const struct turn_settings *ts, const char *turn_id,
                   const char *project_id, const char *session_key, bool detached,
                   struct journal **ret)
{
    return create(root, ts, turn_id, project_id, session_key, detached, NULL, ret);
}

int journal_create_at_slot(const char *root, const struct turn_settings *ts, const char *turn_id,
                           const char *project_id, const char *session_key, bool detached,
                           uint32_t index, uint32_t generation, struct journal **ret)
{
    uint32_t slot[2] = {index, generation};

    return create(root, ts, turn_id, project_id, session_key, detached, slot, ret);
}

int journal_prepare_at_slot(const char *root, const struct turn_settings *ts, const char *turn_id,
                            const char *project_id, const char *session_key, bool detached,
                            uint32_t index, uint32_t generation, struct journal **ret)
{
    uint32_t slot[2] = {index, generation};

    return prepare(root, ts, turn_id, project_id, session_key, detached, slot, ret);
}

int journal_link(struct journal *j)
{
    return j->fd >= 0 ? 0 : link_file(j);
}

bool journal_linked(const struct journal *j)
{
    return j->fd >= 0;
}

int journal_unlinked_head(const struct journal *j, const char **ret_path, const char **ret_head,
                          size_t *ret_len)
{
    if (j->fd >= 0 || j->link_failed || j->pending.len < j->header_end)
        return -EALREADY;
    *ret_path = j->path;
    *ret_head = j->pending.data; /* the header, the slot line and the records queued so far */
    *ret_len = j->pending.len;
    return 0;
}

/*
 * The bound: once the newest half holds `half` bytes (a line start being the next record's
 * offset), everything before the half before it (after the header) is to go; it is punched
 * out of the file once written (bound_punch).
 */
static void bound_mark(struct journal *j)
{
    uint64_t at = j->size + j->pending.len; /* where the next line starts */

    if (at - j->mark < j->half)
        return;
    j->punch_to = j->mark;
    j->mark = at;
}

static void bound_punch(struct journal *j)
{
    if (j->punch_to <= j->header_end || j->punch_to <= j->punched || j->punch_failed)
        return;
    if (fallocate(j->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)j->header_end,
                  (off_t)(j->punch_to - j->header_end)) < 0)
        j->punch_failed = true; /* a file system without holes: the turn's journal grows */
    else
        j->punched = j->punch_to;
}

/* "<seq> <det> ", without printf (a record's every line has it). */
static int record_prefix(struct buf *b, uint64_t seq, uint64_t det)
{
    char text[48], *p = text + sizeof(text);
    uint64_t v[2] = {det, seq};

    for (int i = 0; i < 2; i++) {
        *--p = ' ';
        do {
            *--p = (char)('0' + v[i] % 10);
            v[i] /= 10;
        } while (v[i]);
    }
    return buf_append(b, p, (size_t)(text + sizeof(text) - p));
}

int journal_append(struct journal *j, uint64_t seq, uint64_t det, const char *line, size_t len)
{
    int r;

    bound_mark(j);
    r = record_prefix(&j->pending, seq, det);

    if (r == 0)
        r = buf_append(&j->pending, line, len);
    if (r < 0) {
        (void)journal_flush(j); /* what fits goes; this record is lost for reattach */
        return r;
    }
    j->last_seq = seq;
    j->last_det = det;
    return j->pending.len >= PENDING_FLUSH ? journal_flush(j) : 0;
}

size_t journal_queued(const struct journal *j)
{
    return j->pending.len;
}

int journal_flush(struct journal *j)
{
    size_t n = j->pending.len;
    int r;

    if (n == 0)
        return 0;
    if (j->fd < 0 && !j->link_failed) {
        r = link_file(j); /* prepared, and its file is wanted now */
        if (r < 0)
            j->link_failed = true; /* not tried again: the records go nowhere */
        return r;
    }
    if (j->fd < 0) {
        buf_reset(&j->pending);
        return -EBADF;
    }
    /* one write on O_APPEND: whole lines, or a torn last one the next writer cuts off */
    r = util_write_all(j->fd, j->pending.data, n);
    buf_reset(&j->pending);
    if (r < 0)
        return r;
    j->size += n;
    bound_punch(j);
    return 0;
}

int journal_set_slot(struct journal *j, uint32_t index, uint32_t generation)
{
    int r;

    if (j->meta.has_slot && j->meta.slot_index == index && j->meta.slot_generation == generation)
        return 0; /* named since journal_create_at_slot */
    r = slot_line(j, index, generation);
    /* written at once: a worker that adopts the turn looks for it there */
    return r == 0 ? journal_flush(j) : r;
}

int journal_note_writer(struct journal *j)
{
    int r;

    j->meta.pid = util_self_pid();
    r = buf_printf(&j->pending, "M {\"pid\":%d}\n", (int)j->meta.pid);
    return r == 0 ? journal_flush(j) : r; /* a second death is looked for under this pid */
}

/* The result is in: the finishedMs line, queued (once). */
static int finish_line(struct journal *j)
{
    if (j->finish_queued)
        return 0;
    j->finish_queued = true;
    j->meta.state = JOURNAL_DONE;
    j->meta.finished_ms = util_wall_ms();
    return buf_printf(&j->pending, "M {\"finishedMs\":%lld}\n", (long long)j->meta.finished_ms);
}

int journal_finish(struct journal *j)
{
    int r = finish_line(j);

    if (r == 0)
        r = journal_flush(j);
    /* the mark a sweep reads with one stat: done, finished at its ctime */
    if (j->fd >= 0 && fchmod(j->fd, JOURNAL_DONE_MODE) < 0 && r == 0)
        r = -errno;
    return r;
}

bool journal_has_readers(struct journal *j)
{
    if (j->fd < 0)
        return false; /* no file, nobody can follow it yet */
    return journal_files_locked(j->fd, JOURNAL_LOCK_READERS, true);
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
    if (j->fd < 0 && j->pending.len)
        (void)journal_flush(j); /* a prepared journal gets its file now */
    if (j->fd >= 0) {
        (void)journal_flush(j);
        close(j->fd); /* the writer lock goes with it */
    }
    /* the client has the result by now (event_stream_result): the next turn's file, made
     * (in background mode by the helper) */
    if (j->spare_after)
        journal_spare_closed(j->root);
    buf_release(&j->pending);
    free(j);
}

/* A journal whose end waits for its thread's request to be answered (journal_end_later). */
static __thread struct journal *deferred_tls;
static pthread_key_t deferred_key;
static pthread_once_t deferred_once = PTHREAD_ONCE_INIT;

static void deferred_at_exit(void *arg)
{
    (void)arg;
    journal_end_deferred();
}

static void deferred_key_make(void)
{
    if (pthread_key_create(&deferred_key, deferred_at_exit) != 0)
        deferred_key = (pthread_key_t)-1;
}

void journal_end_deferred(void)
{
    struct journal *j = deferred_tls;

    if (!j)
        return;
    deferred_tls = NULL;
    if (!journal_spare_end_later(j)) {
        (void)journal_finish(j);
        journal_close(j);
    }
}

void journal_end_later(struct journal *j)
{
    if (!j)
        return;
    journal_end_deferred();
    /* the records, the result's included, and the finished line are in the file now, in one
     * write; the mark a sweep reads (journal_finish's mode) follows the response */
    (void)finish_line(j);
    (void)journal_flush(j);
    pthread_once(&deferred_once, deferred_key_make);
    if (deferred_key == (pthread_key_t)-1 || pthread_setspecific(deferred_key, j) != 0) {
        (void)journal_finish(j);
        journal_close(j);
        return;
    }
    deferred_tls = j;
}

/* ---- readers ----------------------------------------------------------------------------- */

void journal_reader_free(struct journal_reader *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    if (r->inotify_fd >= 0)
        close(r->inotify_fd);
    buf_release(&r->pending);
    free(r);
}

/*
 * The first record of the file at or after pos, pos being a line start (holes skipped: a hole
 * ends at a line start): 1 with its offset and seq, 0 when there is none yet.
 */
static int first_record(int fd, uint64_t pos, uint64_t *ret_off, uint64_t *ret_seq)
{
    char buf[4096];
    bool in_meta = false; /* inside an "M" line, looking for its end */

    for (;;) {
        ssize_t n = pread(fd, buf, sizeof(buf), (off_t)pos);
        uint64_t seq, det;
        size_t off, i = 0;
        char *nl;

        if (n <= 0)
            return n < 0 ? -errno : 0;
        if (!in_meta) {
            while (i < (size_t)n && buf[i] == '\0')
                i++;
            if (i == (size_t)n) {
                off_t data = lseek(fd, (off_t)(pos + (uint64_t)n), SEEK_DATA);
                if (data < 0)
                    return 0;
                pos = (uint64_t)data;
                continue;
            }
            if (buf[i] != 'M') {
                if (journal_files_parse_line(buf + i, (size_t)n - i, &seq, &det, &off) != 1)
                    return 0; /* not a whole prefix yet */
                *ret_off = pos + i;
                *ret_seq = seq;
                return 1;
            }
        }
        nl = memchr(buf + i, '\n', (size_t)n - i);
        in_meta = !nl;
        pos += nl ? (uint64_t)(nl - buf) + 1 : (uint64_t)n;
    }
}

static int open_reader(const char *path, int fd, const char *turn_id, const char *project_id,
                       struct journal_reader **ret)
{
    struct journal_reader *r = calloc(1, sizeof(*r));
    struct journal_meta m = {0};
    char head[JOURNAL_ID_MAX * 3 + JOURNAL_KEY_MAX + 256];
    ssize_t n = pread(fd, head, sizeof(head) - 1, 0);
    char *nl = n > 0 ? memchr(head, '\n', (size_t)n) : NULL;
    uint64_t seq, det;
    size_t off;

    if (!r) {
        close(fd);
        return -ENOMEM;
    }
    r->fd = fd;
    r->inotify_fd = -1;
    snprintf(r->path, sizeof(r->path), "%s", path);
    buf_init(&r->pending, LINE_MAX_BYTES);
    if (!nl || journal_files_parse_line(head, (size_t)(nl - head), &seq, &det, &off) != 2 ||
        journal_files_meta_apply(head + off, (size_t)(nl - head) - off, &m) < 0 ||
        strcmp(m.turn_id, turn_id) != 0 || strcmp(m.project_id, project_id ? project_id : "")) {
        journal_reader_free(r);
        return -ENOENT; /* not this turn's (a name collision is refused like an unknown one) */
    }
    r->pos = r->header_end = (uint64_t)(nl - head) + 1;
    r->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (r->inotify_fd >= 0)
        (void)inotify_add_watch(r->inotify_fd, path, IN_MODIFY | IN_ATTRIB);
    *ret = r;
    return 0;
}

int journal_open(const char *root, const char *turn_id, const char *project_id, uint64_t after,
                 struct journal_reader **ret, uint64_t *ret_oldest)
{
    char path[PATH_MAX];
    struct journal_reader *r = NULL;
    uint64_t first_off, first_seq;
    int fd, k;

    fd = open_path(root, turn_id, project_id, O_RDWR, path);
    if (fd < 0)
        return -ENOENT;
    k = open_reader(path, fd, turn_id, project_id, &r);
    if (k < 0)
        return k;
    /* follow first (the writer then sees a reader), then look: nothing slips between */
    if (journal_files_lock(r->fd, JOURNAL_LOCK_READERS, false) < 0) {
        journal_reader_free(r);
        return -ENOENT;
    }
    k = first_record(r->fd, r->pos, &first_off, &first_seq);
    if (k == 1 && first_seq > after + 1) {
        *ret_oldest = first_seq;
        journal_reader_free(r);
        return -ERANGE;
    }
    if (k == 1)
        r->pos = first_off;
    r->after = after;
    *ret = r;
    return 0;
}

/* A whole line in pending: 1 (taken out into out when it is a new record), 0 none. */
static int take_line(struct journal_reader *r, struct buf *out, uint64_t *ret_seq, bool *ret_result,
                     bool *ret_new)
{
    char *nl = r->pending.len ? memchr(r->pending.data, '\n', r->pending.len) : NULL;
    uint64_t seq, det;
    size_t len, off;

    *ret_new = false;
    if (!nl)
        return 0;
    len = (size_t)(nl - r->pending.data) + 1;
    if (journal_files_parse_line(r->pending.data, len - 1, &seq, &det, &off) == 1 &&
        seq > r->after) {
        buf_reset(out);
        if (buf_append(out, r->pending.data + off, len - off) == 0) {
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

        while (take_line(r, out, ret_seq, ret_result, &fresh) == 1)
            if (fresh)
                return 1;
        n = pread(r->fd, chunk, sizeof(chunk), (off_t)r->pos);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : 0;
        /* the bound punched out what this reader had still to read: it fell behind */
        if (memchr(chunk, '\0', (size_t)n))
            return -ERANGE;
        if (buf_append(&r->pending, chunk, (size_t)n) < 0)
            return -E2BIG;
        r->pos += (uint64_t)n;
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

bool journal_writer_alive(struct journal_reader *r)
{
    return journal_files_locked(r->fd, JOURNAL_LOCK_WRITER, false);
}

/* A descriptor of its own (O_APPEND) on the reader's file, to write it. */
static int reopen_for_writing(const struct journal_reader *r)
{
    struct stat a, b;
    int fd = open(r->path, O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW);

    if (fd < 0)
        return -errno;
    if (fstat(fd, &a) < 0 || fstat(r->fd, &b) < 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
        close(fd);
        return -ENOENT; /* replaced or removed meanwhile */
    }
    return fd;
}

int journal_take_over(struct journal_reader *r, const struct turn_settings *ts,
                      struct journal **ret)
{
    struct journal *j = journal_alloc(ts);
    uint64_t end, first_off, first_seq;
    int k;

    if (!j)
        return -ENOMEM;
    j->fd = reopen_for_writing(r);
    k = j->fd < 0 ? j->fd : journal_files_lock(j->fd, JOURNAL_LOCK_WRITER, true);
    if (k == -EAGAIN)
        k = -EBUSY;
    if (k == 0)
        k = journal_files_scan(j->fd, &j->meta, &end, &j->last_seq, &j->last_det);
    if (k == 0 && ftruncate(j->fd, (off_t)end) < 0) /* a torn last line is cut off */
        k = -errno;
    if (k < 0) {
        journal_close(j);
        return k;
    }
    j->size = end;
    j->header_end = j->mark = r->header_end;
    if (first_record(j->fd, r->header_end, &first_off, &first_seq) == 1)
        j->mark = first_off; /* the oldest kept record: the bound drops what precedes it */
    /* the reader goes on after the last whole record */
    buf_reset(&r->pending);
    r->pos = end;
    if (r->after < j->last_seq)
        r->after = j->last_seq;
    *ret = j;
    return 0;
}
