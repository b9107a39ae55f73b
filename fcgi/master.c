/*
 * agent-runnerd — the master (DESIGN.md §1). Started by `spawn-fcgi -n -s SOCK ... --` with the
 * listening FastCGI socket on fd 0. It creates the session table, becomes the child subreaper
 * (so keepers that workers start are adopted here), forks N workers, respawns any that dies,
 * reaps keepers and frees their slots, and on SIGTERM/SIGINT drains: workers stop accepting and
 * finish their turns up to AGENT_RUNNER_DRAIN_MS, then every environment is destroyed and the
 * master exits with nothing left running.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grp.h>

#include <curl/curl.h>

#include "base/log.h"
#include "base/util.h"
#include "config.h"
#include "environment/environment.h"
#include "provider/provider.h"
#include "sandbox/host.h"
#include "session/pool.h"
#include "spares.h"
#include "worker.h"

#define SWEEP_MS 1000
#define RESPAWN_BACKOFF_MS 200
/* a rebuilt table's old keepers were told to stop: their remote sandboxes go first */
#define SANDBOX_SWEEP_GRACE_MS 5000

struct worker_proc {
    pid_t pid;
    int64_t started;
    unsigned restarts;
};

#define RECLAIMERS_MAX 32
#define STOP_SWEEP_MS 3000

struct master {
    struct runner_config cfg;
    struct sandbox_host host;
    pid_t reclaimers[RECLAIMERS_MAX]; /* children removing dead keepers' environments */
    unsigned nreclaimers;
    struct pool *pool;
    struct worker_proc *workers;
    unsigned nworkers;
    int sig_fd;
    bool draining;
    int64_t drain_deadline;
    /* scratch for the sweep, sized at start-up: no malloc near the lock */
    struct pool_reclaimed *scratch;
    bool keepers_stopped; /* an old table was rebuilt: its keepers were told to stop */
    struct spares spares;  /* pre-started environments (spares.h) */
};

static void usage(void)
{
    fprintf(stderr, "usage: agent-runnerd [--workers N] [--threads T]\n"
                    "  run under: spawn-fcgi -n -s SOCK -M 0660 -U <nginx user> -- "
                    "agent-runnerd --workers N\n"
                    "  settings come from AGENT_RUNNER_* environment variables (README)\n");
}

static int parse_args(struct master *m, int argc, char **argv)
{
    static const struct option opts[] = {{"workers", required_argument, NULL, 'w'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c;

    while ((c = getopt_long(argc, argv, "w:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'w':
            if (util_parse_u64(optarg, 1, 64, &m->cfg.workers) < 0) {
                fprintf(stderr, "--workers: expected 1..64\n");
                return -EINVAL;
            }
            break;
        case 't':
            if (util_parse_u64(optarg, 1, 4096, &m->cfg.threads) < 0) {
                fprintf(stderr, "--threads: expected 1..4096\n");
                return -EINVAL;
            }
            break;
        case 'h':
            usage();
            exit(0);
        default:
            usage();
            return -EINVAL;
        }
    }
    /* room for a crashed master's draining workers beside ours in the in-flight table */
    if (m->cfg.workers > POOL_WORKERS_MAX / 2)
        m->cfg.workers = POOL_WORKERS_MAX / 2;
    return 0;
}

/*
 * Every sandbox binds the harness folder (and the test agent, agent-runner-mcp) as its own
 * host uid: a folder on the way that is not searchable by others (a checkout under /root, 0700)
 * would fail every sandbox start. Checked once, as that uid, in a child; -EACCES with err
 * naming the path and the fix.
 */
static int sandbox_can_reach(const struct sandbox_host *h, const char *path, char *err,
                             size_t errlen)
{
    struct sandbox_uid_ids ids;
    int status = 0;
    pid_t pid;

    if (!path || !path[0] || h->uids.shared || sandbox_uid_for_slot(&h->uids, 0, &ids) < 0)
        return 0;
    pid = fork();
    if (pid == -1)
        return 0; /* not knowable now: the sandbox start will say */
    if (pid == 0) {
        if (setgroups(0, NULL) == -1 || setresgid(ids.gid, ids.gid, ids.gid) == -1 ||
            setresuid(ids.uid, ids.uid, ids.uid) == -1)
            _exit(2);
        _exit(access(path, R_OK) == 0 ? 0 : 1);
    }
    while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 1) {
        snprintf(err, errlen,
                 "the sandbox user (uid %u) cannot reach '%s': a folder on its path is not "
                 "searchable by others (e.g. a checkout under /root, mode 0700); give it o+x "
                 "or move the runner's files",
                 (unsigned)ids.uid, path);
        return -EACCES;
    }
    return 0;
}

static bool fd0_is_socket(void)
{
    int type;
    socklen_t len = sizeof(type);

    return getsockopt(STDIN_FILENO, SOL_SOCKET, SO_TYPE, &type, &len) == 0;
}

static pid_t spawn_worker(struct master *m, unsigned index)
{
    pid_t pid = fork();

    if (pid == 0) {
        sigset_t none;
        int status;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        close(m->sig_fd);
        status = worker_main(&m->cfg, m->pool, index);
        _exit(status);
    }
    if (pid > 0) {
        m->workers[index].pid = pid;
        m->workers[index].started = util_now_ms();

    }
    return pid;
}

static int worker_index_of(struct master *m, pid_t pid)
{
    for (unsigned i = 0; i < m->nworkers; i++)
        if (m->workers[i].pid == pid)
            return (int)i;
    return -1;
}

/*
 * Remove what a dead keeper's environment left: its cgroup, workspace mount and folder. In a
 * child process: a tree the sandbox built (30,000 levels on a slow disk) may take a minute to
 * remove, and the master must keep reaping, respawning and answering signals meanwhile. The
 * master waits for these children only when it stops.
 */
static void reclaim_env(struct master *m, const char *dir)
{
    pid_t pid = m->nreclaimers < RECLAIMERS_MAX ? fork() : -1;
    int r;

    if (pid > 0) {
        m->reclaimers[m->nreclaimers++] = pid;
        return;
    }
    if (pid == 0) {
        sigset_t none;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        close(m->sig_fd);
        util_redirect_null(STDIN_FILENO); /* not the FastCGI socket */
    }
    r = sandbox_host_reclaim(&m->host, dir);
    if (r < 0)
        log_warn("cannot remove all of the environment '%s': %s", dir, strerror(-r));
    if (pid == 0)
        _exit(r < 0 ? 1 : 0);
}

/* One of the reclaiming children ended: 1 (forgotten), 0 when pid is not one. */
static int reclaimer_done(struct master *m, pid_t pid)
{
    for (unsigned i = 0; i < m->nreclaimers; i++) {
        if (m->reclaimers[i] == pid) {
            m->reclaimers[i] = m->reclaimers[--m->nreclaimers];
            return 1;
        }
    }
    return 0;
}

/* At stop: give the removals up to wait_ms; whatever is left the next start sweeps. */
static void wait_reclaimers(struct master *m, int64_t wait_ms)
{
    int64_t deadline = util_now_ms() + wait_ms;

    while (m->nreclaimers > 0 && util_now_ms() < deadline) {
        pid_t pid = waitpid(-1, NULL, WNOHANG);

        if (pid > 0)
            (void)reclaimer_done(m, pid);
        else if (pid == 0)
            usleep(10000);
        else if (errno != EINTR)
            break;
    }
    if (m->nreclaimers)
        log_warn("%u environment removals still running at exit", m->nreclaimers);
    m->nreclaimers = 0;
}

/* Free the slot of a keeper that exited and remove what it left behind. */
static void keeper_gone(struct master *m, pid_t pid)
{
    char dir[POOL_DIR_MAX];

    if (pool_reclaim_keeper(m->pool, pid, dir) && dir[0]) {
        log_info("keeper %d exited without freeing its slot: reclaimed", (int)pid);
        reclaim_env(m, dir);
    }
}

static void reap(struct master *m)
{
    int status;
    pid_t pid;

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        int w = worker_index_of(m, pid);

        if (w < 0 && (reclaimer_done(m, pid) || spares_reaped(&m->spares, pid, status)))
            continue;
        if (w < 0) {
            keeper_gone(m, pid);
            continue;
        }
        m->workers[w].pid = 0;
        /* what the dead worker had admitted is not in flight any more */
        pool_inflight_release(m->pool, pid);
        if (m->draining)
            continue;
        log_warn("worker %d (pid %d) died (%s %d): respawning", w, (int)pid,
                 WIFSIGNALED(status) ? "signal" : "status",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        pool_counter_add(m->pool, PC_WORKER_RESTARTS, 1);
        m->workers[w].restarts++;
        if (util_now_ms() - m->workers[w].started < RESPAWN_BACKOFF_MS)
            usleep(RESPAWN_BACKOFF_MS * 1000);
        if (spawn_worker(m, (unsigned)w) < 0)
            log_error("cannot respawn worker %d: %s", w, strerror(errno));
    }
}

/* Reclaim the slots of dead keepers and of workers that died before their keeper started. */
static void sweep(struct master *m)
{
    uint32_t n = pool_reclaim_dead(m->pool, m->scratch);

    for (uint32_t i = 0; i < n; i++) {
        if (!m->scratch[i].env_dir[0])
            continue;
        log_info("reclaimed the slot of a dead %s", m->scratch[i].keeper_pid ? "keeper" : "worker");
        reclaim_env(m, m->scratch[i].env_dir);
    }
}

static bool env_in_use(const char *id, void *ctx)
{
    struct master *m = ctx;
    char path[512];

    if (!m->pool)
        return false;
    snprintf(path, sizeof(path), "%s/envs/%s", m->cfg.state_dir, id);
    return pool_dir_in_use(m->pool, path);
}

/*
 * Remove the environments no live slot refers to (left by a crashed predecessor, or all of
 * them at a clean stop): their cgroups, workspace mounts and folders.
 */
static void clean_orphan_envs(struct master *m)
{
    int r = sandbox_host_sweep(&m->host, env_in_use, m);

    if (r > 0)
        log_info("removed %d environments left behind", r);
    else if (r < 0)
        log_warn("start-up sweep: %s", strerror(-r));
}

/* At a clean stop: remove every environment left, in a child, for a bounded time. */
static void final_sweep(struct master *m)
{
    pid_t pid = m->nreclaimers < RECLAIMERS_MAX ? fork() : -1;

    if (pid == 0) {
        clean_orphan_envs(m);
        _exit(0);
    }
    if (pid < 0)
        clean_orphan_envs(m);
    else
        m->reclaimers[m->nreclaimers++] = pid;
    wait_reclaimers(m, STOP_SWEEP_MS);
}

/*
 * The credential-epoch key belongs to a session table: made with it, kept beside it in a
 * root-only file under the state folder (never in shm), read back by a master that adopts it.
 */
static int epoch_key(struct master *m, bool create)
{
    char path[512], *data = NULL;
    size_t len = 0;
    int r;

    snprintf(path, sizeof(path), "%s/epoch.key", m->cfg.state_dir);
    if (!create) {
        r = util_read_file(path, 64, &data, &len);
        if (r == 0 && len == sizeof(m->cfg.engine.epoch_key))
            memcpy(m->cfg.engine.epoch_key, data, len);
        else if (r == 0)
            r = -EINVAL;
        free(data);
        return r;
    }
    r = util_random_bytes(m->cfg.engine.epoch_key, sizeof(m->cfg.engine.epoch_key));
    if (r == 0)
        r = util_write_file(path, m->cfg.engine.epoch_key, sizeof(m->cfg.engine.epoch_key), 0600);
    return r;
}

/*
 * A master that restarts after a crash adopts the session table its predecessor left, when it
 * is of this layout, this instance, this kernel boot and this size: warm environments (their
 * keepers survived) stay warm. Anything else is rebuilt, never trusted.
 */
static int adopt_or_create(struct master *m, uint64_t boot_id)
{
    struct pool_info info;
    struct pool *p = NULL;
    uint32_t reset;
    int r;

    r = pool_attach(m->cfg.shm_name, false, &p);
    if (r == 0)
        pool_get_info(p, &info);
    if (r == 0 && info.boot_id == boot_id && info.nslots == m->cfg.slots &&
        strcmp(info.instance_id, m->cfg.instance) == 0 && !util_proc_alive(info.master_pid, 0) &&
        epoch_key(m, false) == 0) {
        char err[160];

        r = pool_adopt(p, getpid(), &reset, err, sizeof(err));
        if (r >= 0) {
            pool_get_info(p, &info);
            log_info("adopted the session table of a previous master (%u used, %u reset)",
                     info.nused, reset);
            m->pool = p;
            return 0;
        }
    }
    if (p) {
        pool_get_info(p, &info);
        if (info.master_pid != (int32_t)getpid() && info.master_pid != 0 &&
            util_proc_alive(info.master_pid, 0)) {
            log_error("another master (pid %d) runs instance '%s'", info.master_pid,
                      m->cfg.instance);
            pool_detach(p);
            return -EBUSY;
        }
        /* the keepers a table we are about to rebuild lists: nobody could reach them */
        pool_stop_keepers(p);
        m->keepers_stopped = true;
    }
    pool_detach(p);
    r = epoch_key(m, true);
    if (r < 0) {
        log_error("cannot store the credential epoch key: %s", strerror(-r));
        return r;
    }
    return pool_create(m->cfg.shm_name, (uint32_t)m->cfg.slots, m->cfg.instance, boot_id,
                       &m->pool);
}

/* Destroy every environment: signal each keeper and wait for all of them. */
static void destroy_all(struct master *m)
{
    uint32_t n = pool_shutdown_begin(m->pool, m->scratch);
    int64_t deadline;

    for (uint32_t i = 0; i < n; i++)
        if (util_proc_alive(m->scratch[i].keeper_pid, m->scratch[i].keeper_start))
            kill(m->scratch[i].keeper_pid, SIGTERM);
    deadline = util_now_ms() + 5000;
    for (;;) {
        bool any = false;
        for (uint32_t i = 0; i < n; i++)
            if (util_proc_alive(m->scratch[i].keeper_pid, m->scratch[i].keeper_start))
                any = true;
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        if (!any)
            break;
        if (util_now_ms() > deadline) {
            for (uint32_t i = 0; i < n; i++)
                if (util_proc_alive(m->scratch[i].keeper_pid, m->scratch[i].keeper_start))
                    kill(m->scratch[i].keeper_pid, SIGKILL);
            break;
        }
        usleep(10000);
    }
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    log_info("destroyed %u environments", n);
}

static void start_drain(struct master *m)
{
    if (m->draining)
        return;
    m->draining = true;
    m->drain_deadline = util_now_ms() + (int64_t)m->cfg.drain_ms;
    log_info("draining: no new requests, %llums for turns in progress",
             (unsigned long long)m->cfg.drain_ms);
    /* one shutdown wakes every blocked accept(2) in every worker */
    shutdown(STDIN_FILENO, SHUT_RDWR);
    for (unsigned i = 0; i < m->nworkers; i++)
        if (m->workers[i].pid > 0)
            kill(m->workers[i].pid, SIGTERM);
}

static bool workers_alive(struct master *m)
{
    for (unsigned i = 0; i < m->nworkers; i++)
        if (m->workers[i].pid > 0)
            return true;
    return false;
}

static int setup_signals(struct master *m)
{
    static const int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP};

    signal(SIGPIPE, SIG_IGN);
    m->sig_fd = util_signalfd_for(sigs, ARRAY_SIZE(sigs));
    return m->sig_fd < 0 ? m->sig_fd : 0;
}

static void loop(struct master *m)
{
    int64_t next_sweep = util_now_ms() + SWEEP_MS;

    for (;;) {
        struct pollfd p = {.fd = m->sig_fd, .events = POLLIN};
        int64_t now = util_now_ms();
        int timeout = (int)(next_sweep - now);
        struct signalfd_siginfo si;

        if (m->draining) {
            if (!workers_alive(m))
                return;
            if (now >= m->drain_deadline) {
                log_warn("drain deadline passed: stopping the remaining workers");
                for (unsigned i = 0; i < m->nworkers; i++)
                    if (m->workers[i].pid > 0)
                        kill(m->workers[i].pid, SIGKILL);
            }
            timeout = 100;
        }
        if (spares_timeout_ms(&m->spares) >= 0 && spares_timeout_ms(&m->spares) < timeout)
            timeout = spares_timeout_ms(&m->spares);
        if (timeout < 0)
            timeout = 0;
        if (poll(&p, 1, timeout) == -1 && errno != EINTR)
            return;
        while (read(m->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
            if (si.ssi_signo == SIGCHLD)
                continue;
            if (si.ssi_signo == SIGHUP)
                log_info("SIGHUP ignored: restart the service to change settings");
            else
                start_drain(m);
        }
        reap(m);
        spares_tick(&m->spares, m->draining);
        if (util_now_ms() >= next_sweep) {
            sweep(m);
            pool_inflight_release(m->pool, 0);
            next_sweep = util_now_ms() + SWEEP_MS;
        }
    }
}

static void log_sandbox(const struct sandbox_host *h)
{
    if (h->uids.shared)
        log_info("sandboxes run as the runner's own user %u (the runner is not root)",
                 (unsigned)h->uids.runner_uid);
    else
        log_info("sandboxes run as host uid/gid %u + slot (%u slots)", (unsigned)h->uids.base,
                 (unsigned)h->uids.count);
    if (h->missing[0])
        log_warn("sandbox limits this host cannot enforce: %s", h->missing);
    if (!h->net_ok)
        log_error("sandboxes cannot start: %s", h->net_why);
}

static uint64_t kernel_boot_id(void)
{
    char *text = NULL;
    uint64_t h = 1469598103934665603ull;

    if (util_read_file("/proc/sys/kernel/random/boot_id", 128, &text, NULL) == 0) {
        for (char *p = text; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ull;
        free(text);
    }
    return h;
}

static const char *env_get(const char *name)
{
    return getenv(name);
}

int main(int argc, char **argv)
{
    struct master m;
    char err[512];
    int r;

    memset(&m, 0, sizeof(m));
    log_setup("master", LOG_LEVEL_INFO);
    r = config_load(&m.cfg, err, sizeof(err));
    if (r < 0) {
        log_error("refusing to start: %s", err);
        return 1;
    }
    if (parse_args(&m, argc, argv) < 0)
        return 2;
    /* sandbox providers with settings of their own (Daytona); workers inherit them */
    r = provider_configure_all(env_get, err, sizeof(err));
    if (r < 0) {
        log_error("refusing to start: %s", err);
        return 1;
    }
    config_admission(&m.cfg);
    if (!fd0_is_socket()) {
        log_error("refusing to start: fd 0 is not the FastCGI socket (run under spawn-fcgi)");
        return 1;
    }
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) == -1) {
        log_error("cannot become child subreaper: %s", strerror(errno));
        return 1;
    }
    /* before any thread or worker: the uid range check enumerates users (getpwent) */
    r = sandbox_host_init(&m.host, m.cfg.instance, m.cfg.state_dir, (uint32_t)m.cfg.slots, err,
                          sizeof(err));
    if (r < 0) {
        log_error("refusing to start: %s", err);
        return 1;
    }
    m.cfg.engine.sandbox = &m.host;
    {
        const char *paths[] = {m.cfg.engine.harness_dir, m.cfg.engine.scripted_agent,
                               m.cfg.engine.tools.mcp_bin, m.cfg.engine.pi_stdio_bin};

        for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
            if (sandbox_can_reach(&m.host, paths[i], err, sizeof(err)) < 0) {
                log_error("refusing to start: %s", err);
                sandbox_host_release(&m.host, true); /* no environment exists yet */
                return 1;
            }
        }
    }
    r = adopt_or_create(&m, kernel_boot_id());
    if (r == 0)
        clean_orphan_envs(&m);
    if (r == -ENOSPC || r == -EFBIG) {
        log_error("cannot create the session table '%s': /dev/shm has no room for its %zu "
                  "bytes (%llu slots): %s",
                  m.cfg.shm_name, pool_segment_size((uint32_t)m.cfg.slots),
                  (unsigned long long)m.cfg.slots, strerror(-r));
        sandbox_host_release(&m.host, false);
        return 1;
    }
    if (r < 0) {
        log_error("cannot create the session table '%s': %s", m.cfg.shm_name, strerror(-r));
        sandbox_host_release(&m.host, false);
        return 1;
    }
    m.cfg.engine.pool = m.pool;
    m.scratch = pool_scratch_new(m.pool);
    m.nworkers = (unsigned)m.cfg.workers;
    m.workers = calloc(m.nworkers, sizeof(*m.workers));
    if (!m.scratch || !m.workers || setup_signals(&m) < 0) {
        log_error("start-up failed: %s", strerror(errno));
        pool_destroy(m.pool);
        return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    config_log(&m.cfg);
    log_sandbox(&m.host);
    for (unsigned i = 0; i < m.nworkers; i++) {
        if (spawn_worker(&m, i) < 0) {
            log_error("cannot fork worker %u: %s", i, strerror(errno));
            start_drain(&m);
            break;
        }
    }
    log_info("master %d ready: %u workers x %llu threads", (int)getpid(), m.nworkers,
             (unsigned long long)m.cfg.threads);
    /* remote sandboxes of an earlier run: adopt the live ones, delete orphans (a child) */
    if (provider_startup_sweep(m.pool, m.keepers_stopped ? SANDBOX_SWEEP_GRACE_MS : 0) < 0)
        log_warn("cannot start the sandbox sweep: %s", strerror(errno));
    if (geteuid() != 0) {
        bool any = false;

        for (unsigned k = 0; k < HARNESS_COUNT; k++)
            any = any || m.cfg.engine.spares.count[k] > 0;
        if (any)
            log_info("spares: off (a runner that is not root cannot move a spare's network "
                     "namespace to its session at claim; new sessions start cold)");
        memset(m.cfg.engine.spares.count, 0, sizeof(m.cfg.engine.spares.count));
    }
    spares_init(&m.spares, &m.cfg.engine, m.sig_fd);
    loop(&m);
    /* every spare's keeper is in the table before destroy_all looks */
    spares_stop(&m.spares);
    destroy_all(&m);
    sweep(&m);
    pool_destroy(m.pool);
    m.pool = NULL;
    final_sweep(&m);
    sandbox_host_release(&m.host, true);
    {
        char key[512];
        snprintf(key, sizeof(key), "%s/epoch.key", m.cfg.state_dir);
        (void)unlink(key);
    }
    curl_global_cleanup();
    free(m.scratch);
    free(m.workers);
    config_release(&m.cfg);
    log_info("stopped");
    return 0;
}
