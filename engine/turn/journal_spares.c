/*
 * journal_spares — spare journal files and the background helper (journal_spares.h).
 */
#include "turn/journal_spares.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "turn/journal.h"
#include "turn/journal_files.h"

/*
 * A thread's spare: an unnamed journal file (O_TMPFILE) under the root of the thread's last
 * journal, locked (writer) and given its first page after that journal closed (journal_close,
 * once the client has the turn's result), so that the thread's next turn starts its journal
 * with one link instead of a file creation and a page allocation on the turn's way. Nothing
 * else sees it: it has no name until then, and it is gone with its descriptor (the thread's
 * exit, or its process's).
 */
struct spare {
    int fd;
    size_t root_len;
    char root[PATH_MAX];
};

static __thread struct spare spare_tls = {.fd = -1};
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;

static void spare_drop(struct spare *s)
{
    if (s->fd < 0)
        return;
    close(s->fd);
    s->fd = -1;
}

static void spare_at_exit(void *arg)
{
    spare_drop(arg);
}

static void spare_key_make(void)
{
    if (pthread_key_create(&spare_key, spare_at_exit) != 0)
        spare_key = (pthread_key_t)-1;
}

static bool spare_under(const struct spare *s, const char *root, size_t root_len)
{
    return s->fd >= 0 && s->root_len == root_len && memcmp(s->root, root, root_len) == 0;
}

/* The process's umask leaves a file made 0600 at 0600 (read once: it is never changed). */
static bool umask_keeps_owner;
static pthread_once_t umask_once = PTHREAD_ONCE_INIT;

static void umask_read(void)
{
    char line[128];
    FILE *f = fopen("/proc/self/status", "re");
    unsigned long mask;

    if (!f)
        return;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "Umask: %lo", &mask) == 1) {
            umask_keeps_owner = (mask & 0600) == 0;
            break;
        }
    fclose(f);
}

/*
 * A descriptor of root (O_PATH), kept for the process's life, so that a spare is made and
 * linked without walking root's path each time: -1 when it cannot be had (the path is used).
 * A worker has one root; a few are kept (tests use many), none is ever closed (another thread
 * may be using it).
 */
#define ROOTS_KEPT 4

static struct {
    char path[PATH_MAX];
    size_t len;
    int fd;
    dev_t dev;
    ino_t ino;
} roots[ROOTS_KEPT];
static size_t nroots;
static pthread_mutex_t roots_lock = PTHREAD_MUTEX_INITIALIZER;

static int root_fd(const char *root, size_t len)
{
    char path[PATH_MAX];
    int fd = -1;

    if (len >= PATH_MAX)
        return -1;
    memcpy(path, root, len); /* root may go on past len (a file's path) */
    path[len] = '\0';
    pthread_mutex_lock(&roots_lock);
    for (size_t i = 0; i < nroots && fd < 0; i++)
        if (roots[i].len == len && memcmp(roots[i].path, root, len) == 0)
            fd = roots[i].fd;
    if (fd < 0 && nroots < ROOTS_KEPT) {
        struct stat st;

        fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0 && fstat(fd, &st) == 0) {
            memcpy(roots[nroots].path, path, len + 1);
            roots[nroots].len = len;
            roots[nroots].fd = fd;
            roots[nroots].dev = st.st_dev;
            roots[nroots].ino = st.st_ino;
            nroots++;
        } else if (fd >= 0) {
            close(fd);
            fd = -1;
        }
    }
    pthread_mutex_unlock(&roots_lock);
    return fd;
}

/* An unnamed journal file under root, writer-locked, its first page allocated; -errno. */
static int spare_make(const char *root)
{
    int dfd = root_fd(root, strlen(root));
    /* a file system without unnamed files: every journal is made on its turn's way (a root
     * made anew since its descriptor was kept: the path) */
    int fd = dfd >= 0 ? openat(dfd, ".", O_TMPFILE | O_RDWR | O_APPEND | O_CLOEXEC, 0600) : -1;

    if (fd < 0)
        fd = open(root, O_TMPFILE | O_RDWR | O_APPEND | O_CLOEXEC, 0600);

    if (fd < 0)
        return -errno;
    pthread_once(&umask_once, umask_read);
    if (journal_files_lock(fd, JOURNAL_LOCK_WRITER, true) < 0 ||
        (!umask_keeps_owner && fchmod(fd, 0600) < 0)) {
        close(fd);
        return -EIO;
    }
    (void)fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 4096); /* the first page, allocated now */
    return fd;
}

static void spare_prepare(const char *root)
{
    struct spare *s = &spare_tls;
    size_t root_len = strlen(root);
    int fd;

    if (spare_under(s, root, root_len))
        return;
    spare_drop(s);
    if (root_len >= sizeof(s->root))
        return;
    fd = spare_make(root);
    if (fd < 0)
        return;
    pthread_once(&spare_once, spare_key_make);
    if (spare_key != (pthread_key_t)-1)
        (void)pthread_setspecific(spare_key, s);
    memcpy(s->root, root, root_len + 1);
    s->root_len = root_len;
    s->fd = fd;
}

/* ---- background mode: the helper ------------------------------------------------------ */

#define HELPER_QUEUE 256
#define HELPER_BEHIND 32   /* queued ends from which the answering threads make their spares */
#define HELPER_BATCH 8     /* ended journals that wake the helper at once */
#define HELPER_LAG_MS 50   /* ... else it comes for them this late at most */
#define HELPER_SPARES 12

struct helper {
    pthread_mutex_t lock; /* never waited for by an answering thread (trylock) */
    pthread_cond_t work;    /* something queued, or the pool ran dry */
    pthread_cond_t drained; /* nothing queued and nothing being ended */
    struct journal *queue[HELPER_QUEUE]; /* a ring, oldest first */
    size_t head;
    size_t queued;  /* also read without the lock (helper_behind: a hint) */
    bool ending;    /* ending one it took off the queue */
    bool making;    /* making a spare */
    bool waiting;   /* it waits for work: a signal wakes it */
    bool hurry;     /* journal_background_drain waits: no lag */
    bool spares_failed; /* none could be made under root: until the next end */
    int spares[HELPER_SPARES];
    size_t nspares;
    char root[PATH_MAX];
};

static struct helper helper = {.lock = PTHREAD_MUTEX_INITIALIZER,
                               .work = PTHREAD_COND_INITIALIZER,
                               .drained = PTHREAD_COND_INITIALIZER};
static atomic_bool helper_on_flag;
static bool helper_started;         /* under helper.lock */
static __thread bool on_helper;     /* this thread is the helper */

static void end_now(struct journal *j)
{
    (void)journal_finish(j);
    journal_close(j);
}

static bool helper_on(void)
{
    return atomic_load(&helper_on_flag);
}

static bool pool_wants(const struct helper *h)
{
    return helper_on() && h->root[0] && !h->spares_failed && h->nspares < HELPER_SPARES &&
           !h->hurry;
}

static bool helper_has_work(const struct helper *h)
{
    return h->queued || pool_wants(h);
}

/* Work that wakes the helper at once: a batch of ended journals, a drain, or an empty pool. */
static bool helper_urgent(const struct helper *h)
{
    return h->queued >= HELPER_BATCH || (h->hurry && h->queued) ||
           (pool_wants(h) && !h->nspares);
}

/* Wait (h->lock held) until there is work to do now: urgent, or waiting HELPER_LAG_MS. */
static void helper_wait(struct helper *h)
{
    int64_t until = 0;

    h->waiting = true;
    while (!helper_urgent(h)) {
        struct timespec ts;

        if (!helper_has_work(h)) {
            until = 0;
            pthread_cond_wait(&h->work, &h->lock);
            continue;
        }
        if (!until)
            until = util_wall_ms() + HELPER_LAG_MS; /* the condition's clock */
        else if (util_wall_ms() >= until)
            break;
        util_deadline_ts(until, &ts);
        pthread_cond_timedwait(&h->work, &h->lock, &ts);
    }
    h->waiting = false;
}

/* One spare for the pool (h->lock held, released while it is made). */
static void helper_make_spare(struct helper *h)
{
    char root[PATH_MAX];
    int fd;

    memcpy(root, h->root, sizeof(root));
    h->making = true;
    pthread_mutex_unlock(&h->lock);
    fd = spare_make(root);
    pthread_mutex_lock(&h->lock);
    h->making = false;
    if (fd >= 0 && helper_on() && h->nspares < HELPER_SPARES && strcmp(root, h->root) == 0)
        h->spares[h->nspares++] = fd;
    else if (fd >= 0)
        close(fd);
    else
        h->spares_failed = true;
}

static void *helper_main(void *arg)
{
    struct sched_param idle = {.sched_priority = 0};
    struct helper *h = arg;
    bool awake = false;

    on_helper = true;
    /* nice 19 where the kernel refuses SCHED_IDLE */
    if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle) != 0)
        (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
    pthread_mutex_lock(&h->lock);
    for (;;) {
        if (!helper_has_work(h)) {
            awake = false;
            h->hurry = false;
            pthread_cond_broadcast(&h->drained);
        }
        if (!awake) {
            helper_wait(h);
            awake = true; /* until all is done */
            continue;
        }
        if (h->queued) {
            struct journal *j = h->queue[h->head];

            h->head = (h->head + 1) % HELPER_QUEUE;
            __atomic_store_n(&h->queued, h->queued - 1, __ATOMIC_RELAXED);
            h->ending = true;
            pthread_mutex_unlock(&h->lock);
            end_now(j);
            pthread_mutex_lock(&h->lock);
            h->ending = false;
            if (!h->queued)
                pthread_cond_broadcast(&h->drained);
            continue;
        }
        helper_make_spare(h);
    }
    return NULL;
}

int journal_background(void)
{
    pthread_attr_t attr;
    pthread_t t;
    int r = 0;

    pthread_mutex_lock(&helper.lock);
    if (!helper_started) {
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        r = -pthread_create(&t, &attr, helper_main, &helper);
        pthread_attr_destroy(&attr);
        helper_started = r == 0;
    }
    atomic_store(&helper_on_flag, helper_started);
    pthread_mutex_unlock(&helper.lock);
    return r;
}

/* Wait (helper.lock held) until cond is false or deadline_ms (monotonic). */
static void helper_await(bool (*cond)(const struct helper *h), int64_t deadline_ms)
{
    struct timespec ts;

    /* the condition's clock is the wall clock */
    util_deadline_ts(util_wall_ms() + (deadline_ms - util_now_ms()), &ts);
    while (helper_started && cond(&helper) && util_now_ms() < deadline_ms)
        if (pthread_cond_timedwait(&helper.drained, &helper.lock, &ts) == ETIMEDOUT)
            break;
}

static bool ends_pending(const struct helper *h)
{
    return h->queued || h->ending;
}

static bool anything_pending(const struct helper *h)
{
    return h->queued || h->ending || h->making;
}

void journal_background_drain(int64_t deadline_ms)
{
    pthread_mutex_lock(&helper.lock);
    helper.hurry = helper.queued > 0; /* the ends now, no spares meanwhile */
    if (helper.waiting)
        pthread_cond_signal(&helper.work);
    helper_await(ends_pending, deadline_ms);
    pthread_mutex_unlock(&helper.lock);
}

void journal_background_off(void)
{
    atomic_store(&helper_on_flag, false);
    pthread_mutex_lock(&helper.lock);
    helper.hurry = helper.queued > 0;
    if (helper.waiting)
        pthread_cond_signal(&helper.work);
    helper_await(anything_pending, util_now_ms() + 60000);
    for (size_t i = 0; i < helper.nspares; i++)
        close(helper.spares[i]);
    helper.nspares = 0;
    pthread_mutex_unlock(&helper.lock);
}

/* The helper has fallen behind (the machine leaves it no time). */
static bool helper_behind(void)
{
    return __atomic_load_n(&helper.queued, __ATOMIC_RELAXED) >= HELPER_BEHIND;
}

/* A pooled spare under root (-ENOENT: none, or the helper holds the lock just now). */
static int helper_spare(const char *root)
{
    int fd = -ENOENT;

    if (pthread_mutex_trylock(&helper.lock) != 0)
        return -ENOENT; /* never wait behind a thread of idle priority */
    if (strcmp(helper.root, root) != 0 && strlen(root) < sizeof(helper.root)) {
        for (size_t i = 0; i < helper.nspares; i++)
            close(helper.spares[i]); /* made under another root */
        helper.nspares = 0;
        helper.spares_failed = false;
        snprintf(helper.root, sizeof(helper.root), "%s", root);
    }
    if (helper.nspares && strcmp(helper.root, root) == 0)
        fd = helper.spares[--helper.nspares];
    /* a pool with spares left is refilled with the next batch of ends */
    if (helper.waiting && helper_urgent(&helper))
        pthread_cond_signal(&helper.work);
    pthread_mutex_unlock(&helper.lock);
    return fd;
}

bool journal_spare_end_later(struct journal *j)
{
    bool queued = false;

    if (!helper_on() || on_helper || pthread_mutex_trylock(&helper.lock) != 0)
        return false; /* the caller ends it: never wait behind a thread of idle priority */
    if (helper.queued < HELPER_QUEUE) {
        helper.queue[(helper.head + helper.queued) % HELPER_QUEUE] = j;
        __atomic_store_n(&helper.queued, helper.queued + 1, __ATOMIC_RELAXED);
        helper.spares_failed = false; /* try again */
        if (helper.waiting && (helper.queued == 1 || helper_urgent(&helper)))
            pthread_cond_signal(&helper.work); /* the first starts its lag, a batch is now */
        queued = true;
    }
    pthread_mutex_unlock(&helper.lock);
    return queued;
}

void journal_spare_closed(const char *root)
{
    /* the helper refills the pool itself; an answering thread makes its own spare without
     * background mode, or when the helper has fallen behind */
    if (on_helper || (helper_on() && !helper_behind()))
        return;
    spare_prepare(root);
}

/* The unnamed file fd linked at path: 0 or -errno (-EEXIST: path exists). */
/* linkat(AT_EMPTY_PATH) works here (CAP_DAC_READ_SEARCH); else a link through /proc. */
static atomic_bool empty_path_refused;

static int spare_link(int fd, const char *path)
{
    const char *slash = strrchr(path, '/');
    char proc[64];

    bool tried = false;

    /* the spare at root's descriptor and the file's name: no path walk but the name's */
    if (slash && slash > path && !atomic_load_explicit(&empty_path_refused, memory_order_relaxed)) {
        int dfd = root_fd(path, (size_t)(slash - path));

        if (dfd >= 0 && linkat(fd, "", dfd, slash + 1, AT_EMPTY_PATH) == 0)
            return 0;
        if (dfd >= 0 && errno == EEXIST)
            return -EEXIST;
        tried = dfd >= 0;
    }
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) < 0)
        return -errno;
    if (tried) /* without CAP_DAC_READ_SEARCH (ENOENT), or a root made anew: the path from now */
        atomic_store_explicit(&empty_path_refused, true, memory_order_relaxed);
    return 0;
}

/*
 * The thread's spare linked at path: its fd (locked, empty, 0600); -EEXIST when path exists
 * (the spare stays), another -errno when there is no spare for root (or it cannot be linked).
 * In background mode a pooled one first.
 */
int journal_spare_take(const char *root, const char *path)
{
    struct spare *s = &spare_tls;
    int fd, r;

    if (helper_on() && (fd = helper_spare(root)) >= 0) {
        r = spare_link(fd, path);
        if (r < 0)
            close(fd);
        return r < 0 ? r : fd;
    }
    if (!spare_under(s, root, strlen(root)))
        return -ENOENT;
    r = spare_link(s->fd, path);
    if (r < 0) {
        if (r != -EEXIST)
            spare_drop(s);
        return r;
    }
    fd = s->fd;
    s->fd = -1;
    return fd;
}

