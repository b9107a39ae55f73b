#include "worker.h"

#include <errno.h>
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

struct worker_thread {
    pthread_t tid;
    struct route_ctx rc;
    bool started;
};

static pthread_mutex_t accept_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool stopping;

static void *thread_main(void *arg)
{
    struct worker_thread *t = arg;
    FCGX_Request req;

    if (FCGX_InitRequest(&req, 0, 0) != 0)
        return NULL;
    while (!atomic_load(&stopping)) {
        int rc;

        pthread_mutex_lock(&accept_lock);
        rc = atomic_load(&stopping) ? -1 : FCGX_Accept_r(&req);
        pthread_mutex_unlock(&accept_lock);
        if (rc < 0)
            break;
        routes_handle(&t->rc, &req);
        FCGX_Finish_r(&req);
        engine_request_done();
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
