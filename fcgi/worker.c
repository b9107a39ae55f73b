#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcgiapp.h>

#include "base/log.h"
#include "base/util.h"
#include "engine.h"
#include "routes.h"

#define THREAD_STACK (2u * 1024 * 1024)
/*
 * A connection nginx keeps open (fastcgi_keep_conn, upstream keepalive) pins its thread while
 * it idles: the thread waits for the next request on it, re-checking every KEPT_WAKE_MS, and
 * gives it up after KEPT_IDLE_MS of quiet or at once when fewer than KEPT_SPARE_ACCEPTORS
 * threads of this process are left to accept new connections (nginx opens a new one when
 * none of its kept ones is idle; a request nginx sends as the thread closes is retried by
 * nginx on a new connection, as for any kept connection the server closed).
 */
#define KEPT_WAKE_MS 250
#define KEPT_IDLE_MS 2000
#define KEPT_SPARE_ACCEPTORS 2

struct worker_thread {
    pthread_t tid;
    struct route_ctx rc;
    bool started;
};

static pthread_mutex_t accept_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool stopping;
static atomic_int acceptors;        /* threads waiting to accept a new connection */
static int stop_pipe[2] = {-1, -1}; /* readable once the worker stops */

/*
 * Waits for the next request on the kept connection of req. False when it is to be closed:
 * nginx closed it, it idled too long, accepting threads ran short, or the worker stops.
 */
static bool kept_wait(FCGX_Request *req)
{
    int waited = 0;

    for (;;) {
        struct pollfd p[2] = {{.fd = req->ipcFd, .events = POLLIN | POLLRDHUP},
                              {.fd = stop_pipe[0], .events = POLLIN}};
        int n;

        if (atomic_load(&stopping) || atomic_load(&acceptors) < KEPT_SPARE_ACCEPTORS)
            return false;
        n = poll(p, 2, KEPT_WAKE_MS);
        if (n < 0 && errno != EINTR)
            return false;
        if (n > 0)
            return p[1].revents == 0 && !(p[0].revents & (POLLRDHUP | POLLHUP | POLLERR));
        waited += n == 0 ? KEPT_WAKE_MS : 0;
        if (waited >= KEPT_IDLE_MS)
            return false;
    }
}

/* The next request of this thread: on its kept connection, else a new one. */
static int next_request(FCGX_Request *req)
{
    int rc, fd = req->ipcFd;

    if (fd >= 0) {
        if (kept_wait(req))
            return FCGX_Accept_r(req);
        FCGX_Free(req, 1);
    }
    atomic_fetch_add(&acceptors, 1);
    pthread_mutex_lock(&accept_lock);
    rc = atomic_load(&stopping) ? -1 : FCGX_Accept_r(req);
    pthread_mutex_unlock(&accept_lock);
    atomic_fetch_sub(&acceptors, 1);
    /* libfcgi accepts without close-on-exec: keepers started meanwhile must not inherit it */
    if (rc >= 0 && req->ipcFd >= 0)
        (void)fcntl(req->ipcFd, F_SETFD, FD_CLOEXEC);
    return rc;
}

static void *thread_main(void *arg)
{
    struct worker_thread *t = arg;
    FCGX_Request req;

    if (FCGX_InitRequest(&req, 0, 0) != 0)
        return NULL;
    while (!atomic_load(&stopping)) {
        if (next_request(&req) < 0)
            break;
        routes_handle(&t->rc, &req);
        FCGX_Finish_r(&req);
    }
    FCGX_Free(&req, 1);
    return NULL;
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
    if (pipe2(stop_pipe, O_CLOEXEC) != 0)
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
    /* threads idling on a kept connection close it */
    (void)!write(stop_pipe[1], "x", 1);
    /*
     * Shutting the listening socket down makes every accept(2) blocked on it return (in every
     * worker: this is a drain of the whole service). No signals into libfcgi's accept loop: a
     * thread it interrupted while it waited for a new connection's first byte would spin.
     * Requests in progress keep their own connections and run to their end.
     */
    shutdown(STDIN_FILENO, SHUT_RDWR);
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
