#include "worker.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcgiapp.h>

#include "base/log.h"
#include "base/util.h"
#include "engine.h"
#include "routes.h"

#define THREAD_STACK (2u * 1024 * 1024)

struct worker_thread {
    pthread_t tid;
    struct route_ctx rc;
    bool started;
};

static atomic_bool stopping;
/*
 * The worker's connections from nginx, in one epoll set that every idle thread waits on: the
 * listening socket (a new connection) and each connection nginx keeps open between requests
 * (fastcgi_keep_conn), armed one-shot while no thread serves it. A kept connection costs no
 * thread while it is idle, and a turn on it costs no connect, accept and close.
 */
static int epfd = -1;
static int stop_fd = -1; /* an eventfd, readable once the worker stops */
/* the kept connections waiting in the set (idle[fd]), shut down when the worker stops: a
 * request nginx sends into one then fails at once instead of waiting for the worker's exit */
static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *idle;
static size_t idle_max;

#define IDLE_MAX_FDS (1u << 20)

static void idle_mark(int fd, bool on)
{
    if (fd < 0 || (size_t)fd >= idle_max)
        return;
    pthread_mutex_lock(&idle_lock);
    idle[fd] = on;
    pthread_mutex_unlock(&idle_lock);
}

#define DRAIN_MAX (1024u * 1024) /* request body bytes a route left unread, read to keep */
#define FIRST_BYTE_MS 2000       /* a new connection silent this long is dropped */

/*
 * A connection with a request to read (its fd; *kept: one nginx kept open), or -1: the worker
 * stops, or its listening socket is gone (shut down: the drain of the whole service).
 */
static int next_connection(bool *kept)
{
    for (;;) {
        struct epoll_event ev;
        int n, fd;

        if (atomic_load(&stopping))
            return -1;
        n = epoll_wait(epfd, &ev, 1, -1);
        if (n < 0 && errno != EINTR) {
            log_error("epoll_wait: %s", strerror(errno));
            return -1;
        }
        if (n <= 0)
            continue;
        if (ev.data.fd == stop_fd)
            return -1;
        if (ev.data.fd != STDIN_FILENO) {
            /* a kept connection: nginx's next request, or its end */
            *kept = true;
            idle_mark(ev.data.fd, false);
            if (!(ev.events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
                return ev.data.fd;
            close(ev.data.fd);
            continue;
        }
        *kept = false;
        if (ev.events & (EPOLLHUP | EPOLLERR)) {
            /* shut down (the service drains; a unix socket then reads EAGAIN, not EINVAL):
             * out of the set, or every idle thread would spin on it. The threads stay for
             * the kept connections until this worker is told to stop. */
            (void)epoll_ctl(epfd, EPOLL_CTL_DEL, STDIN_FILENO, NULL);
            continue;
        }
        fd = accept4(STDIN_FILENO, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            return fd;
        switch (errno) {
        case EAGAIN:
        case EINTR:
        case ECONNABORTED:
        case EPROTO:
            continue; /* another thread or worker took it */
        case EMFILE:
        case ENFILE:
        case ENOBUFS:
        case ENOMEM:
            log_warn("cannot accept a connection: %s", strerror(errno));
            usleep(10000);
            continue;
        default:
            return -1;
        }
    }
}

/*
 * The request is answered: nginx asked to keep its connection (FCGI_KEEP_CONN); keep it when
 * the route read its input to the end (what is left would be taken for the next request's
 * first record) and the worker is not stopping. Decided before the end record goes out:
 * FCGX_Finish_r closes a connection not kept right after it.
 */
static void keep_or_close(FCGX_Request *req)
{
    char junk[4096];
    size_t left = 0;
    int n = 0;

    if (!req->keepConnection || req->ipcFd < 0)
        return;
    while (left < DRAIN_MAX && (n = FCGX_GetStr(junk, sizeof(junk), req->in)) > 0)
        left += (size_t)n;
    if (n > 0 || FCGX_GetError(req->in) != 0 || atomic_load(&stopping))
        req->keepConnection = 0;
}

/* A new connection has a byte to read within FIRST_BYTE_MS (nginx writes its request at once). */
static bool first_byte_soon(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r;

    while ((r = poll(&p, 1, FIRST_BYTE_MS)) < 0 && errno == EINTR)
        ;
    return r == 1 && (p.revents & POLLIN);
}

/* A kept connection waits in the epoll set for its next request. */
static void rearm(int fd)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data.fd = fd};
    bool stop;

    /* marked before the set can hand it to another thread; once the stop's scan ran (it sets
     * stopping first), not kept at all */
    pthread_mutex_lock(&idle_lock);
    stop = atomic_load(&stopping);
    if (!stop && fd >= 0 && (size_t)fd < idle_max)
        idle[fd] = 1;
    pthread_mutex_unlock(&idle_lock);
    if (stop) {
        close(fd);
        return;
    }
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
        return;
    if (errno == ENOENT && epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0)
        return;
    log_warn("cannot keep a connection: %s", strerror(errno));
    idle_mark(fd, false);
    close(fd);
}

static void *thread_main(void *arg)
{
    struct worker_thread *t = arg;
    FCGX_Request req;
    bool kept = false;
    int fd;

    /* no listening socket for libfcgi: next_connection accepts */
    if (FCGX_InitRequest(&req, -1, 0) != 0)
        return NULL;
    while ((fd = next_connection(&kept)) >= 0) {
        if (!kept && !first_byte_soon(fd)) {
            close(fd); /* libfcgi's rule for a new connection: its first byte within 2 s */
            continue;
        }
        engine_note_connection(&t->rc.cfg->engine, kept);
        req.ipcFd = fd;
        req.keepConnection = 1; /* FCGX_Accept_r's own finish of the last request keeps fd */
        if (FCGX_Accept_r(&req) < 0)
            continue; /* nothing to read on it after all (libfcgi closed it) */
        routes_handle(&t->rc, &req);
        keep_or_close(&req);
        FCGX_Finish_r(&req);
        if (req.ipcFd >= 0) {
            fd = req.ipcFd;
            req.ipcFd = -1;
            rearm(fd);
        }
    }
    return NULL;
}

static int epoll_setup(void)
{
    /* not EPOLLEXCLUSIVE: that wakes the first worker's set as long as it has an idle thread,
     * and one worker would take every new connection (and refuse runs at its own cap while
     * the other idles); a new connection wakes one thread per worker, and one of them wins */
    struct epoll_event lev = {.events = EPOLLIN, .data.fd = STDIN_FILENO};
    struct epoll_event sev = {.events = EPOLLIN, .data.fd = -1};
    int fl = fcntl(STDIN_FILENO, F_GETFL);
    struct rlimit nofile;

    idle_max = getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < IDLE_MAX_FDS
                   ? (size_t)nofile.rlim_cur
                   : IDLE_MAX_FDS;
    idle = calloc(idle_max, 1);
    if (!idle)
        return -1;
    epfd = epoll_create1(EPOLL_CLOEXEC);
    stop_fd = eventfd(0, EFD_CLOEXEC);
    sev.data.fd = stop_fd;
    /* non-blocking: a connection another thread or worker took is EAGAIN, not a hang */
    if (epfd < 0 || stop_fd < 0 || fl < 0 || fcntl(STDIN_FILENO, F_SETFL, fl | O_NONBLOCK) < 0 ||
        epoll_ctl(epfd, EPOLL_CTL_ADD, STDIN_FILENO, &lev) < 0 ||
        epoll_ctl(epfd, EPOLL_CTL_ADD, stop_fd, &sev) < 0) {
        log_error("cannot set up the worker's connections: %s", strerror(errno));
        return -1;
    }
    return 0;
}

int worker_main(const struct runner_config *cfg, unsigned index)
{
    struct worker_thread *threads;
    pthread_attr_t attr;
    sigset_t set;
    unsigned n = (unsigned)cfg->threads, started = 0;
    int sig, inflight;

    prctl(PR_SET_NAME, "ar-worker");
    /* a worker must never outlive its master */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != engine_master_pid(&cfg->engine))
        return 1;
    log_setup("worker", (enum log_level)log_max_level);

    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    if (FCGX_Init() != 0)
        return 1;
    if (engine_worker_start(&cfg->engine) < 0) {
        log_error("worker %u: AGENT_RUNNER_STATE_DIR is too long for platform mode", index);
        return 1;
    }
    inflight = engine_inflight_claim(&cfg->engine, getpid());
    if (inflight < 0) {
        log_error("worker %u: no free in-flight entry", index);
        return 1;
    }
    if (epoll_setup() < 0)
        return 1;
    threads = calloc(n, sizeof(*threads));
    if (!threads)
        return 1;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, THREAD_STACK);
    for (unsigned i = 0; i < n; i++) {
        threads[i].rc.cfg = cfg;
        threads[i].rc.worker_index = index;
        threads[i].rc.inflight_slot = inflight;
        if (pthread_create(&threads[i].tid, &attr, thread_main, &threads[i]) != 0) {
            log_error("cannot start worker thread %u of %u", i, n);
            break;
        }
        threads[i].started = true;
        started++;
    }
    pthread_attr_destroy(&attr);
    if (started == 0)
        return 1;
    log_info("worker %u accepting with %u threads", index, started);

    sigwait(&set, &sig);
    log_info("worker %u stopping: finishing requests in progress", index);
    atomic_store(&stopping, true);
    /*
     * Shutting the listening socket down ends accepting in every worker (its accept4 fails:
     * this is a drain of the whole service); the eventfd wakes this worker's idle threads.
     * Requests in progress keep their own connections and run to their end; a kept connection
     * is closed after its request (keep_or_close) or, idle, when the worker exits.
     */
    shutdown(STDIN_FILENO, SHUT_RDWR);
    (void)eventfd_write(stop_fd, 1); /* threads waiting for a connection leave */
    pthread_mutex_lock(&idle_lock);
    for (size_t fd = 0; fd < idle_max; fd++)
        if (idle[fd])
            shutdown((int)fd, SHUT_RDWR);
    pthread_mutex_unlock(&idle_lock);
    for (unsigned i = 0; i < n; i++)
        if (threads[i].started)
            pthread_join(threads[i].tid, NULL);
    close(STDIN_FILENO);
    /* platform mode: the session log and the turns ledger get what is still queued */
    if (engine_worker_stop(util_now_ms() + (int64_t)cfg->drain_ms) < 0)
        log_warn("worker %u: platform calls still queued at exit", index);
    free(threads);
    log_info("worker %u stopped", index);
    return 0;
}
