/*
 * journal — a turn's records in the shared-memory arena: write and read back from a cursor,
 * the per-turn bound (oldest chunks dropped) and the oldest seq it keeps, one writer at a time,
 * the take-over of a dead writer's journal (a record in whole or not at all), followers seen
 * by the writer and woken by its records, a full arena making room from the oldest finished
 * journal, and the sweep's expiry, abandon and total cap (journal_sweep).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fstree.h"
#include "base/util.h"
#include "suites.h"
#include "turn/journal.h"
#include "turn/journal_arena.h"
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
}

static void append_result(struct journal *j, uint64_t seq)
{
    char line[128];
    int n = snprintf(line, sizeof(line), "{\"kind\":\"result\",\"seq\":%llu,\"result\":{}}\n",
                     (unsigned long long)seq);

    CU_ASSERT_EQUAL(journal_append(j, seq, seq, line, (size_t)n), 0);
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

    small.turn_bytes = 8192; /* two chunks of 4 KiB */
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
    /* what it holds stays near the bound: a chunk more at most */
    {
        struct journal_entry *v = NULL;
        size_t nv = 0;

        CU_ASSERT_EQUAL(journal_sweep_list(root, false, &v, &nv), 0);
        CU_ASSERT_EQUAL_FATAL(nv, 1);
        CU_ASSERT_TRUE(v[0].bytes <= 8192 + 2 * 4096); /* about turn_bytes */
        CU_ASSERT_EQUAL(v[0].last_seq, 200);
        CU_ASSERT_TRUE(v[0].writer_alive);
        free(v);
    }
    journal_close(j);
    drop_root(root);
}

/* A child writes a turn's first records, then dies its writer (no close). */
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
    CU_ASSERT_EQUAL(read_all(r, seqs, 8, &result), 3);
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
    /* from the start: every record once */
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
    util_sleep_ms(5);
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
    /* (running ones are looked at every 30 s) */
    CU_ASSERT_EQUAL(journal_sweep_run(root, &ts, now + (int64_t)ts.keep_ms + 31000, &st), 0);
    CU_ASSERT_EQUAL(st.abandoned, 1);
    CU_ASSERT_EQUAL(journal_sweep_list(root, false, &v, &n), 0);
    CU_ASSERT_EQUAL(n, 0);
    free(v);
    drop_root(root);
}

static void test_journal_line_prefix(void)
{
    uint64_t seq = 0, det = 0;
    size_t off = 0;

    CU_ASSERT_EQUAL(journal_parse_line("12 7 {\"k\":1}", 12, &seq, &det, &off), 0);
    CU_ASSERT_EQUAL(seq, 12);
    CU_ASSERT_EQUAL(det, 7);
    CU_ASSERT_EQUAL(off, 5);
    CU_ASSERT_EQUAL(journal_parse_line("M {\"pid\":3}", 11, &seq, &det, &off), -EBADMSG);
    CU_ASSERT_EQUAL(journal_parse_line("12 {}", 5, &seq, &det, &off), -EBADMSG);
    CU_ASSERT_EQUAL(journal_parse_line("a 1 {}", 6, &seq, &det, &off), -EBADMSG);
    CU_ASSERT_EQUAL(journal_parse_line("1 1 x", 5, &seq, &det, &off), -EBADMSG);
    CU_ASSERT_EQUAL(journal_parse_line("1 1 ", 4, &seq, &det, &off), -EBADMSG);
    CU_ASSERT_EQUAL(journal_parse_line("99999999999999999999 1 {}", 25, &seq, &det, &off),
                    -EBADMSG);
}

/*
 * An arena of 16 chunks (its least): a record spanning chunks reads back whole; new journals
 * take the room of the oldest finished ones; with only running ones left, a new journal is
 * refused (-ENOSPC) and a record that finds no room is not kept (the journal goes on).
 */
static void test_journal_full_arena_makes_room_from_the_oldest_finished(void)
{
    struct turn_settings tiny = SETTINGS;
    char *root = tmp_root(), id[16], *big;
    struct journal *j[16] = {NULL}, *x = NULL;
    struct journal_reader *r = NULL;
    struct buf rec;
    uint64_t oldest, seq;
    bool result;
    size_t blen = 10000;

    tiny.total_bytes = 16 * 4096;
    big = malloc(blen + 64);
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    blen = (size_t)snprintf(big, blen + 64, "{\"kind\":\"event\",\"t\":\"%0*d\"}\n", 9950, 7);
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &tiny, "big", "p", "", false, &j[0]), 0);
    CU_ASSERT_EQUAL(journal_append(j[0], 1, 1, big, blen), 0); /* three chunks */
    CU_ASSERT_EQUAL_FATAL(journal_open(root, "big", "p", 0, &r, &oldest), 0);
    buf_init(&rec, 1u << 20);
    CU_ASSERT_EQUAL(journal_read(r, &rec, &seq, &result), 1);
    CU_ASSERT_EQUAL(rec.len, blen);
    CU_ASSERT_EQUAL(memcmp(rec.data, big, blen), 0);
    journal_reader_free(r);
    append_result(j[0], 2);
    CU_ASSERT_EQUAL(journal_finish(j[0]), 0);
    journal_close(j[0]);
    /* 13 more running journals of a chunk each fill it; the next one's chunk is the room of
     * "big" (the only finished one) */
    for (int i = 1; i <= 13; i++) {
        snprintf(id, sizeof(id), "run-%d", i);
        CU_ASSERT_EQUAL_FATAL(journal_create(root, &tiny, id, "p", "", false, &j[i]), 0);
        append(j[i], 1, 1, "x");
    }
    CU_ASSERT_EQUAL_FATAL(journal_open(root, "big", "p", 0, &r, &oldest), 0);
    journal_reader_free(r);
    for (int i = 14; i <= 15; i++) {
        snprintf(id, sizeof(id), "run-%d", i);
        CU_ASSERT_EQUAL_FATAL(journal_create(root, &tiny, id, "p", "", false, &j[i]), 0);
        append(j[i], 1, 1, "x");
        if (i == 14)
            CU_ASSERT_EQUAL(journal_open(root, "big", "p", 0, &r, &oldest), -ENOENT);
    }
    /* 15 running journals hold 15 chunks; a 16th takes the last; then nothing is left */
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &tiny, "last", "p", "", false, &x), 0);
    append(x, 1, 1, "x");
    CU_ASSERT_EQUAL(journal_append(x, 2, 2, big, blen), -ENOSPC);
    append_result(x, 2); /* the journal goes on after a record it could not keep */
    CU_ASSERT_EQUAL(journal_finish(x), 0);
    journal_close(x);
    /* a finished one is room again for a new journal; running ones never are */
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &tiny, "after", "p", "", false, &x), 0);
    CU_ASSERT_EQUAL(journal_open(root, "last", "p", 0, &r, &oldest), -ENOENT);
    CU_ASSERT_EQUAL(journal_append(x, 1, 1, big, blen), -ENOSPC);
    journal_close(x);
    for (int i = 1; i <= 15; i++)
        journal_close(j[i]);
    buf_release(&rec);
    free(big);
    drop_root(root);
}

static void *late_writer(void *arg)
{
    util_sleep_ms(100);
    append_result(arg, 2);
    return NULL;
}

/* A follower asleep in journal_wait is woken by the next record, long before its timeout. */
static void test_journal_follower_is_woken_by_a_record(void)
{
    char *root = tmp_root();
    struct journal *j = NULL;
    struct journal_reader *r = NULL;
    uint64_t seqs[4], oldest;
    int64_t t0;
    pthread_t th;
    bool result = false;

    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "w", "", "", false, &j), 0);
    append(j, 1, 1, "one");
    CU_ASSERT_EQUAL_FATAL(journal_open(root, "w", NULL, 0, &r, &oldest), 0);
    CU_ASSERT_EQUAL(read_all(r, seqs, 4, &result), 1);
    CU_ASSERT_TRUE(journal_has_readers(j));
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, late_writer, j), 0);
    t0 = util_now_ms();
    while (!result && util_now_ms() - t0 < 20000) {
        journal_wait(r, 10000);
        (void)read_all(r, seqs, 4, &result);
    }
    CU_ASSERT_TRUE(result);
    CU_ASSERT_TRUE(util_now_ms() - t0 < 9000); /* woken, not timed out */
    pthread_join(th, NULL);
    journal_reader_free(r);
    CU_ASSERT_FALSE(journal_has_readers(j));
    journal_close(j);
    drop_root(root);
}

/*
 * A process that dies holding the arena's lock half-way through a change (here: a broken
 * chain and a finished list pointing at a free entry): the next one to take the lock repairs
 * the arena; the broken journal is dropped, the others read as before, new ones are made.
 */
static void test_journal_arena_repaired_after_a_holder_died(void)
{
    char *root = tmp_root();
    struct journal *a = NULL, *b = NULL, *c = NULL;
    struct journal_reader *r = NULL;
    struct journal_entry *v = NULL;
    struct arena *ar = NULL;
    uint64_t seqs[8], oldest;
    bool result;
    size_t n = 0;
    pid_t pid;
    int status;

    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "good", "p", "", false, &a), 0);
    append(a, 1, 1, "kept");
    append_result(a, 2);
    CU_ASSERT_EQUAL(journal_finish(a), 0);
    journal_close(a);
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "broken", "p", "", false, &b), 0);
    append(b, 1, 1, "lost");
    journal_close(b);
    CU_ASSERT_EQUAL_FATAL(arena_get(root, NULL, &ar), 0);
    pid = fork();
    CU_ASSERT_TRUE_FATAL(pid >= 0);
    if (pid == 0) {
        uint32_t e = arena_find(ar, "broken", "p");

        arena_lock(ar);
        /* half-way: the broken journal's chain points at the good one's chunk, and the
         * finished list at a free entry */
        arena_entry(ar, e)->first = arena_entry(ar, arena_find(ar, "good", "p"))->first;
        ar->h->done_head = ar->h->nentries;
        _exit(0); /* the lock held */
    }
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    /* the next lock repairs */
    CU_ASSERT_EQUAL_FATAL(journal_create(root, &SETTINGS, "new", "p", "", false, &c), 0);
    append(c, 1, 1, "after");
    CU_ASSERT_EQUAL(journal_open(root, "broken", "p", 0, &r, &oldest), -ENOENT);
    CU_ASSERT_EQUAL_FATAL(journal_open(root, "good", "p", 0, &r, &oldest), 0);
    CU_ASSERT_EQUAL(read_all(r, seqs, 8, &result), 2);
    CU_ASSERT_TRUE(result);
    journal_reader_free(r);
    CU_ASSERT_EQUAL(journal_sweep_list(root, false, &v, &n), 0);
    CU_ASSERT_EQUAL(n, 2);
    free(v);
    CU_ASSERT_EQUAL(ar->h->done_head, arena_find(ar, "good", "p"));
    journal_close(c);
    drop_root(root);
}

/*
 * The arena on a small tmpfs that something else then fills: it is made to fit (half the room
 * it found), and what it cannot have is -ENOSPC, never a SIGBUS (its pages are allocated
 * before they are handed out). In a child of its own mount namespace (root only: elsewhere the
 * test says so and checks nothing else).
 */
static void test_journal_arena_on_a_full_tmpfs_is_enospc_not_sigbus(void)
{
    char dir[] = "/tmp/ar-journal-tmpfs.XXXXXX"; /* (a mkdtemp template) */
    pid_t pid;
    int status;

    if (geteuid() != 0) {
        fprintf(stderr, "(not root: no tmpfs of its own to fill) ");
        CU_PASS("skipped: needs root");
        return;
    }
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    pid = fork();
    CU_ASSERT_TRUE_FATAL(pid >= 0);
    if (pid == 0) {
        struct turn_settings ts = SETTINGS;
        char root[64], filler[64], line[2048];
        struct journal *j = NULL;
        struct journal_reader *r = NULL;
        uint64_t oldest, seq = 0;
        int fd, k = 0, n;

        if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
            mount("tmpfs", dir, "tmpfs", 0, "size=2m") < 0)
            _exit(2);
        snprintf(root, sizeof(root), "%s/turns", dir);
        ts.total_bytes = 64u << 20; /* far more than the tmpfs holds */
        if (journal_create(root, &ts, "t", "p", "", false, &j) < 0)
            _exit(3);
        n = snprintf(line, sizeof(line), "{\"kind\":\"event\",\"t\":\"%01500d\"}\n", 1);
        if (journal_append(j, ++seq, 1, line, (size_t)n) < 0) /* its first pages */
            _exit(6);
        /* something else takes the rest of the file system */
        snprintf(filler, sizeof(filler), "%s/filler", dir);
        fd = open(filler, O_WRONLY | O_CREAT, 0600);
        memset(line, 'f', sizeof(line));
        while (fd >= 0 && write(fd, line, sizeof(line)) > 0)
            ;
        n = snprintf(line, sizeof(line), "{\"kind\":\"event\",\"t\":\"%01500d\"}\n", 1);
        /* records until there is no room: ENOSPC, not a signal (the pages it had are used) */
        while (k == 0 && seq < 100000) {
            seq++;
            k = journal_append(j, seq, seq, line, (size_t)n);
        }
        if (k != -ENOSPC || seq < 10)
            _exit(4);
        if (journal_open(root, "t", "p", 0, &r, &oldest) < 0)
            _exit(5);
        journal_reader_free(r);
        journal_close(j);
        _exit(0);
    }
    CU_ASSERT_EQUAL_FATAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT_EQUAL(rmdir(dir), 0); /* the tmpfs went with the child's namespace */
    CU_ASSERT_FALSE(WIFSIGNALED(status)); /* no SIGBUS */
    CU_ASSERT_TRUE(WIFEXITED(status));
    CU_ASSERT_EQUAL(WEXITSTATUS(status), 0);
    if (WIFEXITED(status) && WEXITSTATUS(status))
        fprintf(stderr, "(the child's step %d failed) ", WEXITSTATUS(status));
}

CU_TestInfo journal_tests[] = {
    {"test_journal_reads_back_after_a_cursor", test_journal_reads_back_after_a_cursor},
    {"test_journal_one_writer_and_a_replaced_finished_one",
     test_journal_one_writer_and_a_replaced_finished_one},
    {"test_journal_bound_drops_the_oldest_records", test_journal_bound_drops_the_oldest_records},
    {"test_journal_take_over_of_a_dead_writer", test_journal_take_over_of_a_dead_writer},
    {"test_journal_sweep_expiry_abandon_and_total", test_journal_sweep_expiry_abandon_and_total},
    {"test_journal_line_prefix", test_journal_line_prefix},
    {"test_journal_full_arena_makes_room_from_the_oldest_finished",
     test_journal_full_arena_makes_room_from_the_oldest_finished},
    {"test_journal_follower_is_woken_by_a_record", test_journal_follower_is_woken_by_a_record},
    {"test_journal_arena_repaired_after_a_holder_died",
     test_journal_arena_repaired_after_a_holder_died},
    {"test_journal_arena_on_a_full_tmpfs_is_enospc_not_sigbus",
     test_journal_arena_on_a_full_tmpfs_is_enospc_not_sigbus},
    CU_TEST_INFO_NULL,
};
