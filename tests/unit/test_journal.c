/*
 * journal — a turn's records in a file: write and read back from a cursor, the per-turn bound
 * (punched out) and the oldest seq it keeps, one writer at a time, the take-over of a dead
 * writer's journal (its torn last line cut off), followers seen by the writer, a thread's spare
 * file (made after a turn, renamed for the next, gone with the thread or its dead process), and
 * the sweep's expiry, abandon and total cap (journal_sweep).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fstree.h"
#include "base/util.h"
#include "suites.h"
#include "turn/journal.h"
#include "turn/journal_files.h"
#include "turn/journal_sweep.h"

static const struct turn_settings SETTINGS = {
    .keep_ms = 600000, .turn_bytes = 1u << 20, .total_bytes = 1u << 30};

static char *tmp_root(void)
{
    char tmpl[] = "/tmp/ar-journal.XXXXXX";
    char *d = mkdtemp(tmpl);
    char *root = NULL;

    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    if (asprintf(&root, "%s/turns", d) < 0)
        root = NULL;
    return root;
}

static void drop_root(char *root)
{
    char *slash = strrchr(root, '/');

    *slash = '\0';
    CU_ASSERT_EQUAL(fstree_remove(root), 0);
    free(root);
}

/* Record seq as an event line ("{"kind":"event","seq":N,...}\n"). */
static void append(struct journal *j, uint64_t seq, uint64_t det, const char *text)
{
    char line[512];
    int n = snprintf(line, sizeof(line),
                     "{\"kind\":\"event\",\"seq\":%llu,\"event\":{\"type\":\"x\",\"t\":\"%s\"}}\n",
                     (unsigned long long)seq, text);

    CU_ASSERT_EQUAL(journal_append(j, seq, det, line, (size_t)n), 0);
    CU_ASSERT_EQUAL(journal_flush(j), 0);
}

static void append_result(struct journal *j, uint64_t seq)
{
    char line[128];
    int n = snprintf(line, sizeof(line), "{\"kind\":\"result\",\"seq\":%llu,\"result\":{}}\n",
                     (unsigned long long)seq);

    CU_ASSERT_EQUAL(journal_append(j, seq, seq, line, (size_t)n), 0);
    CU_ASSERT_EQUAL(journal_flush(j), 0);
}

/* Every record the reader has now: their seqs into seqs[] (at most max), how many. */
static size_t read_all(struct journal_reader *r, uint64_t *seqs, size_t max, bool *ret_result)
{
    struct buf rec;
    uint64_t seq;
    bool result = false;
    size_t n = 0;

    *ret_result = false;
    buf_init(&rec, 1u << 20);
    while (journal_read(r, &rec, &seq, &result) == 1) {
        CU_ASSERT_EQUAL(rec.data[rec.len - 1], '\n');
        CU_ASSERT_EQUAL(rec.data[0], '{'); /* the client's line, without the prefix */
        if (n < max)
            seqs[n] = seq;
        n++;
        *ret_result = *ret_result || result;
    }
    buf_release(&rec);
    return n;
}

static void test_journal_reads_back_after_a_cursor(void)
{
    char *root = tmp_root();
    struct journal *j = NULL;
    struct journal_reader *r = NULL;
    uint64_t seqs[16], oldest = 0, last_seq, last_det;
    bool result;

    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "t-1", "p1", "p1:s1", true, &j), 0);
    for (uint64_t i = 1; i <= 5; i++)
        append(j, i, i, "hello");
    journal_last(j, &last_seq, &last_det);
    CU_ASSERT_EQUAL(last_seq, 5);
    CU_ASSERT_EQUAL(journal_open(root, "t-1", "p1", 2, &r, &oldest), 0);
    CU_ASSERT_EQUAL(read_all(r, seqs, 16, &result), 3);
    CU_ASSERT_EQUAL(seqs[0], 3);
    CU_ASSERT_EQUAL(seqs[2], 5);
    CU_ASSERT_FALSE(result);
    /* a live follower sees what comes next, then the result */
    append(j, 6, 6, "more");
    append_result(j, 7);
    CU_ASSERT_EQUAL(read_all(r, seqs, 16, &result), 2);
    CU_ASSERT_EQUAL(seqs[1], 7);
    CU_ASSERT_TRUE(result);
    CU_ASSERT_TRUE(journal_writer_alive(r));
    CU_ASSERT_TRUE(journal_has_readers(j));
    journal_reader_free(r);
    CU_ASSERT_FALSE(journal_has_readers(j));
    /* the project is part of the name: another one's (or none) is not found */
    CU_ASSERT_EQUAL(journal_open(root, "t-1", "p2", 0, &r, &oldest), -ENOENT);
    CU_ASSERT_EQUAL(journal_open(root, "t-1", NULL, 0, &r, &oldest), -ENOENT);
    CU_ASSERT_EQUAL(journal_open(root, "t-unknown", "p1", 0, &r, &oldest), -ENOENT);
    journal_close(j);
    drop_root(root);
}

static void test_journal_one_writer_and_a_replaced_finished_one(void)
{
    char *root = tmp_root();
    struct journal *j = NULL, *j2 = NULL;
    struct journal_reader *r = NULL;
    uint64_t seqs[4], oldest;
    bool result;

    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "t-2", NULL, "", false, &j), 0);
    append(j, 1, 1, "first");
    CU_ASSERT_EQUAL(journal_create(root, &SETTINGS, "t-2", NULL, "", false, &j2), -EEXIST);
    append_result(j, 2);
    CU_ASSERT_EQUAL(journal_finish(j), 0);
    CU_ASSERT_EQUAL(journal_meta_of(j)->state, JOURNAL_DONE);
    journal_close(j);
    /* the same turn id again: the finished journal is replaced, its records are gone */
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "t-2", NULL, "", false, &j2), 0);
    append(j2, 1, 1, "second");
    CU_ASSERT_EQUAL_FATAL(journal_open(root, "t-2", NULL, 0, &r, &oldest), 0);
    CU_ASSERT_EQUAL(read_all(r, seqs, 4, &result), 1);
    CU_ASSERT_FALSE(result);
    journal_reader_free(r);
    journal_close(j2);
    drop_root(root);
}

static void test_journal_bound_drops_the_oldest_records(void)
{
    struct turn_settings small = SETTINGS;
    char *root = tmp_root(), pad[200];
    struct journal *j = NULL;
    struct journal_reader *r = NULL;
    uint64_t seqs[400], oldest = 0;
    bool result;
    size_t n;

    small.turn_bytes = 8192; /* two segments of 4 KiB */
    memset(pad, 'x', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &small, "t-3", "p", "", false, &j), 0);
    for (uint64_t i = 1; i <= 200; i++)
        append(j, i, i, pad);
    CU_ASSERT_EQUAL(journal_open(root, "t-3", "p", 0, &r, &oldest), -ERANGE);
    CU_ASSERT_TRUE(oldest > 1 && oldest < 200);
    CU_ASSERT_EQUAL_FATAL(journal_open(root, "t-3", "p", oldest - 1, &r, &oldest), 0);
    n = read_all(r, seqs, 400, &result);
    CU_ASSERT_EQUAL(n, 200 - oldest + 1);
    CU_ASSERT_EQUAL(seqs[0], oldest);
    CU_ASSERT_EQUAL(seqs[n - 1], 200);
    journal_reader_free(r);
    /* what it holds stays near the bound: at most two segments */
    {
        struct journal_entry *v = NULL;
        size_t nv = 0;

        CU_ASSERT_EQUAL(journal_sweep_list(root, false, &v, &nv), 0);
        CU_ASSERT_EQUAL_FATAL(nv, 1);
        CU_ASSERT_TRUE(v[0].bytes <= 5 * 4096); /* about turn_bytes, on disk */
        CU_ASSERT_EQUAL(v[0].last_seq, 200);
        CU_ASSERT_TRUE(v[0].writer_alive);
        free(v);
    }
    journal_close(j);
    drop_root(root);
}

/* A child writes a turn's first records and a torn line, then dies holding the lock. */
static void die_mid_record(const char *root)
{
    pid_t pid = fork();

    CU_ASSERT_TRUE_FATAL(pid >= 0);
    if (pid == 0) {
        struct journal *j = NULL;

        if (journal_create(root, &SETTINGS, "t-4", "p", "p:s", false, &j) < 0)
            _exit(1);
        for (uint64_t i = 1; i <= 3; i++) {
            char line[64];
            int n = snprintf(line, sizeof(line), "{\"kind\":\"event\",\"seq\":%llu}\n",
                             (unsigned long long)i);
            journal_append(j, i, i, line, (size_t)n);
        }
        journal_append(j, 4, 4, "{\"kind\":\"event\",\"se", 19); /* no newline: torn */
        journal_flush(j);
        _exit(0);
    }
    {
        int status;
        CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
        CU_ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
}

static void test_journal_take_over_of_a_dead_writer(void)
{
    char *root = tmp_root();
    struct journal_reader *r = NULL, *r2 = NULL;
    struct journal *j = NULL;
    uint64_t seqs[8], oldest, seq, det;
    bool result;

    die_mid_record(root);
    CU_ASSERT_EQUAL_FATAL(journal_open(root, "t-4", "p", 0, &r, &oldest), 0);
    CU_ASSERT_EQUAL(read_all(r, seqs, 8, &result), 3); /* the torn line waits */
    CU_ASSERT_FALSE(journal_writer_alive(r));
    CU_ASSERT_EQUAL_FATAL(journal_take_over(r, &SETTINGS, &j), 0);
    CU_ASSERT_TRUE(journal_writer_alive(r));
    journal_last(j, &seq, &det);
    CU_ASSERT_EQUAL(seq, 3);
    CU_ASSERT_EQUAL(det, 3);
    CU_ASSERT_TRUE(journal_meta_of(j)->pid != util_self_pid()); /* the dead writer's */
    /* a second taker finds it taken */
    CU_ASSERT_EQUAL_FATAL(journal_open(root, "t-4", "p", 0, &r2, &oldest), 0);
    {
        struct journal *j2 = NULL;
        CU_ASSERT_EQUAL(journal_take_over(r2, &SETTINGS, &j2), -EBUSY);
    }
    append(j, 4, 4, "after");
    append_result(j, 5);
    CU_ASSERT_EQUAL(read_all(r, seqs, 8, &result), 2);
    CU_ASSERT_EQUAL(seqs[0], 4);
    CU_ASSERT_TRUE(result);
    /* from the start: whole records only, the torn one gone */
    CU_ASSERT_EQUAL(read_all(r2, seqs, 8, &result), 5);
    CU_ASSERT_EQUAL(seqs[3], 4);
    CU_ASSERT_EQUAL(journal_note_writer(j), 0);
    CU_ASSERT_EQUAL(journal_meta_of(j)->pid, util_self_pid());
    CU_ASSERT_EQUAL(journal_finish(j), 0);
    journal_reader_free(r);
    journal_reader_free(r2);
    journal_close(j);
    drop_root(root);
}

static void test_journal_sweep_expiry_abandon_and_total(void)
{
    struct turn_settings ts = SETTINGS;
    struct journal_sweep_stats st;
    struct journal_entry *v = NULL;
    char *root = tmp_root(), pad[300];
    struct journal *a = NULL, *b = NULL, *c = NULL;
    int64_t now = util_wall_ms();
    size_t n = 0;

    memset(pad, 'y', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &ts, "old", NULL, "", false, &a), 0);
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &ts, "new", NULL, "", false, &b), 0);
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &ts, "running", NULL, "", false, &c), 0);
    for (uint64_t i = 1; i <= 20; i++) {
        append(a, i, i, pad);
        append(b, i, i, pad);
        append(c, i, i, pad);
    }
    journal_finish(a);
    journal_close(a);
    util_sleep_ms(30); /* file times may be as coarse as a kernel tick */
    journal_finish(b);
    journal_close(b);
    /* nothing is due yet */
    CU_ASSERT_EQUAL(journal_sweep_run(root, &ts, now, &st), 0);
    CU_ASSERT_EQUAL(st.expired + st.abandoned + st.evicted, 0);
    /* over the total: the oldest finished one goes first, a running one never */
    ts.total_bytes = st.bytes - 1;
    CU_ASSERT_EQUAL(journal_sweep_run(root, &ts, now, &st), 0);
    CU_ASSERT_EQUAL(st.evicted, 1);
    CU_ASSERT_EQUAL(journal_sweep_list(root, false, &v, &n), 0);
    CU_ASSERT_EQUAL(n, 2);
    for (size_t i = 0; i < n; i++)
        CU_ASSERT_STRING_NOT_EQUAL(v[i].meta.turn_id, "old");
    free(v);
    /* past the keep window: the finished one expires; the running one stays (its writer lives) */
    ts.total_bytes = SETTINGS.total_bytes;
    CU_ASSERT_EQUAL(journal_sweep_run(root, &ts, now + (int64_t)ts.keep_ms + 1000, &st), 0);
    CU_ASSERT_EQUAL(st.expired, 1);
    CU_ASSERT_EQUAL(st.abandoned, 0);
    /* a writer gone and silent for the window: abandoned */
    journal_close(c);
    CU_ASSERT_EQUAL(journal_sweep_run(root, &ts, now + (int64_t)ts.keep_ms + 1000, &st), 0);
    CU_ASSERT_EQUAL(st.abandoned, 1);
    CU_ASSERT_EQUAL(journal_sweep_list(root, false, &v, &n), 0);
    CU_ASSERT_EQUAL(n, 0);
    free(v);
    drop_root(root);
}

/* This process's descriptors of unnamed files under root — its spares, and a journal made
 * from one (its descriptor keeps the unnamed path): how many, and the inode of the last. */
static int spares_in_all(const char *root, ino_t *ret_ino, ino_t *all, int max);

static int spares_in(const char *root, ino_t *ret_ino)
{
    return spares_in_all(root, ret_ino, NULL, 0);
}

/* The unnamed files under root this process holds open (their inodes in all[], up to max). */
static int spares_in_all(const char *root, ino_t *ret_ino, ino_t *all, int max)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    size_t rl = strlen(root);
    int n = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    while ((e = readdir(d))) {
        char link[300], target[4096];
        struct stat st;
        ssize_t k;

        snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
        k = readlink(link, target, sizeof(target) - 1);
        if (k <= 0)
            continue;
        target[k] = '\0';
        if (strncmp(target, root, rl) != 0 || target[rl] != '/' || !strstr(target, "(deleted)"))
            continue;
        if (stat(link, &st) == 0) {
            if (ret_ino)
                *ret_ino = st.st_ino;
            if (n < max)
                all[n] = st.st_ino;
        }
        n++;
    }
    closedir(d);
    return n;
}

/* The names under root. */
static int names_in(const char *root)
{
    DIR *d = opendir(root);
    struct dirent *e;
    int n = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* The stat of the journal file of (p, turn_id) under root. */
static struct stat journal_stat(const char *root, const char *turn_id)
{
    char name[JOURNAL_FILE_MAX], path[4096];
    struct stat st = {0};

    CU_ASSERT_EQUAL(journal_files_name(turn_id, "p", name), 0);
    snprintf(path, sizeof(path), "%s/%s", root, name);
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    return st;
}

static void *spare_thread(void *arg)
{
    const char *root = arg;
    struct journal *j = NULL;
    struct journal_reader *r = NULL;
    uint64_t seqs[4], oldest;
    ino_t spare = 0;
    bool result;

    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "s-1", "p", "p:s", false, &j), 0);
    CU_ASSERT_EQUAL(spares_in(root, NULL), 0); /* the thread's first turn makes its file */
    append_result(j, 1);
    CU_ASSERT_EQUAL(journal_finish(j), 0);
    journal_close(j);
    /* after the turn: one spare, unnamed: the folder holds the journal only */
    CU_ASSERT_EQUAL(spares_in(root, &spare), 1);
    CU_ASSERT_EQUAL(names_in(root), 1);
    /* the next turn's journal is that file, linked; it reads and follows as any other */
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "s-2", "p", "p:s", false, &j), 0);
    CU_ASSERT_EQUAL(journal_stat(root, "s-2").st_ino, spare);
    CU_ASSERT_EQUAL(names_in(root), 2);
    append(j, 1, 1, "on the spare");
    CU_ASSERT_EQUAL_FATAL(journal_open(root, "s-2", "p", 0, &r, &oldest), 0);
    CU_ASSERT_EQUAL(read_all(r, seqs, 4, &result), 1);
    CU_ASSERT_TRUE(journal_writer_alive(r));
    journal_reader_free(r);
    /* a second writer of the same turn is refused, whatever the spare */
    {
        struct journal *j2 = NULL;

        CU_ASSERT_EQUAL(journal_create(root, &SETTINGS, "s-2", "p", "p:s", false, &j2), -EEXIST);
    }
    journal_close(j);
    CU_ASSERT_EQUAL(spares_in(root, NULL), 1);
    /* the name taken by a finished turn: that one is replaced, the spare stays for later */
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "s-1", "p", "p:s", false, &j), 0);
    CU_ASSERT_EQUAL(spares_in(root, NULL), 1);
    journal_close(j);
    CU_ASSERT_EQUAL(names_in(root), 2);
    return NULL;
}

static void test_journal_spare_file_per_thread(void)
{
    struct journal_sweep_stats st;
    struct journal_entry *v = NULL;
    char *root = tmp_root();
    pthread_t t;
    size_t n = 0;

    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, spare_thread, root), 0);
    CU_ASSERT_EQUAL(pthread_join(t, NULL), 0);
    /* the thread is gone, and its spare with it; the sweep and the listing see the journals */
    CU_ASSERT_EQUAL(spares_in(root, NULL), 0);
    CU_ASSERT_EQUAL(journal_sweep_list(root, false, &v, &n), 0);
    CU_ASSERT_EQUAL(n, 2);
    free(v);
    CU_ASSERT_EQUAL(journal_sweep_run(root, &SETTINGS, util_wall_ms(), &st), 0);
    CU_ASSERT_EQUAL(st.count, 2);
    drop_root(root);
}

static mode_t journal_mode(const char *root, const char *turn_id)
{
    return journal_stat(root, turn_id).st_mode & 0777;
}

static void *end_later_thread(void *arg)
{
    const char *root = arg;
    struct journal *j = NULL;

    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "e-2", "p", "p:s", false, &j), 0);
    append_result(j, 1);
    journal_end_later(j);
    return NULL; /* the thread's exit ends it */
}

/* A journal ended later: its records are in the file at once, its end comes with
 * journal_end_deferred, the next journal_end_later, or the thread's exit. */
static void test_journal_end_later(void)
{
    char *root = tmp_root();
    struct journal *j = NULL, *k = NULL;
    struct journal_reader *r = NULL;
    uint64_t seqs[4], oldest;
    bool result = false;
    pthread_t t;

    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "e-1", "p", "p:s", false, &j), 0);
    append(j, 1, 1, "a");
    {
        const char *line = "{\"kind\":\"result\",\"seq\":2}\n";

        CU_ASSERT_EQUAL(journal_append(j, 2, 2, line, strlen(line)), 0);
        CU_ASSERT_TRUE(journal_queued(j) > 0);
    }
    journal_end_later(j); /* queued, not flushed: end_later writes it */
    CU_ASSERT_EQUAL_FATAL(journal_open(root, "e-1", "p", 0, &r, &oldest), 0);
    CU_ASSERT_EQUAL(read_all(r, seqs, 4, &result), 2);
    CU_ASSERT_TRUE(result);
    CU_ASSERT_TRUE(journal_writer_alive(r)); /* not ended yet */
    CU_ASSERT_EQUAL(journal_mode(root, "e-1"), 0600);
    journal_end_deferred();
    CU_ASSERT_FALSE(journal_writer_alive(r));
    CU_ASSERT_EQUAL(journal_mode(root, "e-1"), JOURNAL_DONE_MODE);
    journal_reader_free(r);
    journal_end_deferred(); /* nothing left: a no-op */
    /* a second one ends the first */
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "e-3", "p", "p:s", false, &j), 0);
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "e-4", "p", "p:s", false, &k), 0);
    journal_end_later(j);
    journal_end_later(k);
    CU_ASSERT_EQUAL(journal_mode(root, "e-3"), JOURNAL_DONE_MODE);
    CU_ASSERT_EQUAL(journal_mode(root, "e-4"), 0600);
    journal_end_deferred();
    CU_ASSERT_EQUAL(journal_mode(root, "e-4"), JOURNAL_DONE_MODE);
    /* a thread that exits ends its own */
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, end_later_thread, root), 0);
    CU_ASSERT_EQUAL(pthread_join(t, NULL), 0);
    CU_ASSERT_EQUAL(journal_mode(root, "e-2"), JOURNAL_DONE_MODE);
    drop_root(root);
}

/* Wait up to 10 s for the journal of turn_id to be marked finished. */
static bool done_soon(const char *root, const char *turn_id)
{
    for (int i = 0; i < 1000; i++) {
        if (journal_mode(root, turn_id) == JOURNAL_DONE_MODE)
            return true;
        usleep(10000);
    }
    return false;
}

/* Background mode (a worker's): the helper thread ends what journal_end_deferred hands it
 * and keeps spares that any thread's next journal is linked from. */
static void test_journal_background_helper(void)
{
    char *root = tmp_root();
    struct journal *j = NULL;
    struct journal_reader *r = NULL;
    uint64_t seqs[4], oldest;
    bool result = false;
    ino_t spare = 0, pool[64];
    int n = 0;

    CU_ASSERT_EQUAL_FATAL(journal_background(), 0);
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "b-1", "p", "p:s", false, &j), 0);
    append_result(j, 1);
    journal_end_later(j);
    journal_end_deferred(); /* handed to the helper: the writer may still hold it here */
    CU_ASSERT_TRUE(done_soon(root, "b-1"));
    CU_ASSERT_EQUAL_FATAL(journal_open(root, "b-1", "p", 0, &r, &oldest), 0);
    CU_ASSERT_EQUAL(read_all(r, seqs, 4, &result), 1);
    CU_ASSERT_TRUE(result);
    for (int i = 0; i < 1000 && journal_writer_alive(r); i++)
        usleep(10000);
    CU_ASSERT_FALSE(journal_writer_alive(r)); /* closed by the helper */
    journal_reader_free(r);
    /* the pool: spares of this process, unnamed, made by the helper until it is full (the
     * count stays the same for 300 ms) */
    for (int i = 0, same = 0, last = -1; i < 1000 && same < 30; i++) {
        n = spares_in_all(root, &spare, pool, 64);
        same = n > 0 && n == last ? same + 1 : 0;
        last = n;
        usleep(10000);
    }
    CU_ASSERT_TRUE(n >= 1 && n <= 64);
    CU_ASSERT_EQUAL(names_in(root), 1);
    /* the next journal is one of them, linked */
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "b-2", "p", "p:s", false, &j), 0);
    {
        ino_t ino = journal_stat(root, "b-2").st_ino;
        bool pooled = false;

        for (int i = 0; i < n && i < 64; i++)
            pooled |= pool[i] == ino;
        CU_ASSERT_TRUE(pooled);
    }
    CU_ASSERT_EQUAL(names_in(root), 2);
    /* several ended at once, drained by a deadline */
    append_result(j, 1);
    journal_end_later(j);
    journal_end_deferred();
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "b-3", "p", "p:s", false, &j), 0);
    append_result(j, 1);
    journal_end_later(j);
    journal_end_deferred();
    journal_background_drain(util_now_ms() + 10000);
    CU_ASSERT_EQUAL(journal_mode(root, "b-2"), JOURNAL_DONE_MODE);
    CU_ASSERT_EQUAL(journal_mode(root, "b-3"), JOURNAL_DONE_MODE);
    /* off again: the pool's spares are closed, ends are the caller's */
    journal_background_off();
    CU_ASSERT_EQUAL(spares_in(root, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "b-4", "p", "p:s", false, &j), 0);
    append_result(j, 1);
    journal_end_later(j);
    journal_end_deferred();
    CU_ASSERT_EQUAL(journal_mode(root, "b-4"), JOURNAL_DONE_MODE);
    drop_root(root);
}

static void test_journal_line_prefix(void)
{
    uint64_t seq = 0, det = 0;
    size_t off = 0;

    CU_ASSERT_EQUAL(journal_files_parse_line("12 7 {\"k\":1}", 12, &seq, &det, &off), 1);
    CU_ASSERT_EQUAL(seq, 12);
    CU_ASSERT_EQUAL(det, 7);
    CU_ASSERT_EQUAL(off, 5);
    CU_ASSERT_EQUAL(journal_files_parse_line("M {\"pid\":3}", 11, &seq, &det, &off), 2);
    CU_ASSERT_EQUAL(off, 2);
    CU_ASSERT_EQUAL(journal_files_parse_line("12 {}", 5, &seq, &det, &off), -EBADMSG);
    CU_ASSERT_EQUAL(journal_files_parse_line("a 1 {}", 6, &seq, &det, &off), -EBADMSG);
    CU_ASSERT_EQUAL(journal_files_parse_line("1 1 x", 5, &seq, &det, &off), -EBADMSG);
    CU_ASSERT_EQUAL(journal_files_parse_line("1 1 ", 4, &seq, &det, &off), -EBADMSG);
    CU_ASSERT_EQUAL(journal_files_parse_line("M x", 3, &seq, &det, &off), -EBADMSG);
    CU_ASSERT_EQUAL(journal_files_parse_line("99999999999999999999 1 {}", 25, &seq, &det, &off),
                    -EBADMSG);
}


/*
 * A prepared journal has no file until it is linked (or first written); what it queued is
 * what the keeper gets, and journal_recreate makes the file from it when the worker died
 * first: the same file, no writer, taken over and read like any other.
 */
static void test_journal_prepared_then_linked_or_recreated(void)
{
    char *root = tmp_root();
    struct journal *j = NULL, *w = NULL;
    struct journal_reader *r = NULL;
    const char *path, *head;
    char *copy, *copy_path;
    uint64_t seqs[8], oldest = 0, seq, det;
    size_t len;
    bool result;

    CU_ASSERT_EQUAL_FATAL(util_mkdir_p(root, 0700), 0);
    CU_ASSERT_EQUAL_FATAL(journal_prepare_at_slot(root, &SETTINGS, "t-p", "p1", "p1:s1", false, 4,
                                                  9, &j),
                          0);
    CU_ASSERT_FALSE(journal_linked(j));
    CU_ASSERT_FALSE(journal_has_readers(j));
    CU_ASSERT_EQUAL(journal_append(j, 1, 1, "{\"kind\":\"event\",\"seq\":1}\n", 25), 0);
    CU_ASSERT_EQUAL(journal_open(root, "t-p", "p1", 0, &r, &oldest), -ENOENT); /* no file */
    CU_ASSERT_EQUAL_FATAL(journal_unlinked_head(j, &path, &head, &len), 0);
    CU_ASSERT_EQUAL(head[0], 'M');
    CU_ASSERT_EQUAL(head[len - 1], '\n');
    CU_ASSERT_PTR_NOT_NULL(memmem(head, len, "\"slot\":{\"index\":4,\"generation\":9}", 33));
    CU_ASSERT_PTR_NOT_NULL(memmem(head, len, "\n1 1 {\"kind\"", 12)); /* the queued record */
    copy = strndup(head, len);
    copy_path = strdup(path);
    /* the worker dies here: the keeper makes the file, once */
    CU_ASSERT_EQUAL(journal_recreate(copy_path, copy, len), 1);
    CU_ASSERT_EQUAL(journal_recreate(copy_path, copy, len), 0);
    CU_ASSERT_EQUAL_FATAL(journal_open(root, "t-p", "p1", 0, &r, &oldest), 0);
    CU_ASSERT_FALSE(journal_writer_alive(r));
    CU_ASSERT_EQUAL(read_all(r, seqs, 8, &result), 1);
    CU_ASSERT_EQUAL_FATAL(journal_take_over(r, &SETTINGS, &w), 0);
    CU_ASSERT_TRUE(journal_meta_of(w)->has_slot);
    CU_ASSERT_EQUAL(journal_meta_of(w)->slot_index, 4);
    CU_ASSERT_EQUAL(journal_meta_of(w)->slot_generation, 9);
    journal_last(w, &seq, &det);
    CU_ASSERT_EQUAL(seq, 1);
    append_result(w, 2);
    CU_ASSERT_EQUAL(read_all(r, seqs, 8, &result), 1);
    CU_ASSERT_TRUE(result);
    journal_close(w);
    journal_reader_free(r);
    r = NULL;
    /* what a keeper makes for a journal whose writer lives is refused; one whose file the
     * worker made (the same head) is left as it is */
    journal_close(j); /* never linked: its file is made at its close, replacing the above */
    CU_ASSERT_EQUAL(journal_recreate(copy_path, copy, len), 0);
    CU_ASSERT_EQUAL_FATAL(journal_prepare_at_slot(root, &SETTINGS, "t-q", "p1", "p1:s1", false, 1,
                                                  1, &j),
                          0);
    CU_ASSERT_EQUAL(journal_link(j), 0);
    CU_ASSERT_TRUE(journal_linked(j));
    CU_ASSERT_EQUAL(journal_unlinked_head(j, &path, &head, &len), -EALREADY);
    CU_ASSERT_EQUAL_FATAL(journal_open(root, "t-q", "p1", 0, &r, &oldest), 0);
    CU_ASSERT_TRUE(journal_writer_alive(r));
    journal_reader_free(r);
    free(copy);
    free(copy_path);
    CU_ASSERT_EQUAL_FATAL(journal_prepare_at_slot(root, &SETTINGS, "t-r", "p1", "p1:s1", false, 1,
                                                  1, &w),
                          0);
    CU_ASSERT_EQUAL_FATAL(journal_unlinked_head(w, &path, &head, &len), 0);
    copy = strndup(head, len);
    copy_path = strdup(path);
    CU_ASSERT_EQUAL(journal_link(w), 0);
    /* a live writer holds t-r, with another head: the keeper does not touch it */
    copy[len - 2] = copy[len - 2] == '}' ? ' ' : '}';
    CU_ASSERT_EQUAL(journal_recreate(copy_path, copy, len), -EEXIST);
    free(copy);
    free(copy_path);
    journal_close(w);
    journal_close(j);
    drop_root(root);
}

CU_TestInfo journal_tests[] = {
    {"test_journal_reads_back_after_a_cursor", test_journal_reads_back_after_a_cursor},
    {"test_journal_one_writer_and_a_replaced_finished_one",
     test_journal_one_writer_and_a_replaced_finished_one},
    {"test_journal_bound_drops_the_oldest_records", test_journal_bound_drops_the_oldest_records},
    {"test_journal_take_over_of_a_dead_writer", test_journal_take_over_of_a_dead_writer},
    {"test_journal_sweep_expiry_abandon_and_total", test_journal_sweep_expiry_abandon_and_total},
    {"test_journal_spare_file_per_thread", test_journal_spare_file_per_thread},
    {"test_journal_end_later", test_journal_end_later},
    {"test_journal_line_prefix", test_journal_line_prefix},
    {"test_journal_background_helper", test_journal_background_helper},
    {"test_journal_prepared_then_linked_or_recreated",
     test_journal_prepared_then_linked_or_recreated},
    CU_TEST_INFO_NULL,
};
