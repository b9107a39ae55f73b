/*
 * agent-runnerd — the master. Started by `spawn-fcgi -n -s SOCK ... --` with the listening
 * FastCGI socket on fd 0. It probes the host's sandboxes and opens the session table (the
 * engine's admin API, admin.h), becomes the child subreaper (so keepers that workers start are
 * adopted here), forks N workers, respawns any that dies, reaps keepers and frees their slots,
 * keeps the spares topped up, and on SIGTERM/SIGINT drains: workers stop accepting and finish
 * their turns up to AGENT_RUNNER_DRAIN_MS, then every environment is destroyed and the master
 * exits with nothing left running.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>

#include "admin.h"
#include "base/log.h"
#include "base/util.h"
#include "config.h"
#include "engine.h"
#include "spares.h"
#include "worker.h"

#define SWEEP_MS 1000
#define RESPAWN_BACKOFF_MS 200

struct worker_proc {
    pid_t pid;
    int64_t started;
    unsigned restarts;
};

#define RECLAIMERS_MAX 32
#define STOP_SWEEP_MS 3000

struct master {
    struct runner_config cfg;
    struct admin *adm;                /* the host's sandboxes and the session table */
    pid_t reclaimers[RECLAIMERS_MAX]; /* children removing dead keepers' environments */
    unsigned nreclaimers;
    struct worker_proc *workers;
    unsigned nworkers;
    int sig_fd;
    bool draining;
    int64_t drain_deadline;
    struct spares spares;          /* pre-started environments (spares.h) */
    struct admin_cluster *cluster; /* several hosts (NULL: one host) */
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
    if (m->cfg.workers > ADMIN_WORKERS_MAX)
        m->cfg.workers = ADMIN_WORKERS_MAX;
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
        admin_cluster_after_fork(m->cluster);
        status = worker_main(&m->cfg, index);
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
    r = admin_env_remove(m->adm, dir);
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
    char dir[ADMIN_DIR_MAX];

    if (admin_keeper_exited(m->adm, pid, dir, sizeof(dir))) {
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
        admin_inflight_release(m->adm, pid);
        if (m->draining)
            continue;
        log_warn("worker %d (pid %d) died (%s %d): respawning", w, (int)pid,
                 WIFSIGNALED(status) ? "signal" : "status",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        admin_worker_restarted(m->adm);
        m->workers[w].restarts++;
        if (util_now_ms() - m->workers[w].started < RESPAWN_BACKOFF_MS)
            usleep(RESPAWN_BACKOFF_MS * 1000);
        if (spawn_worker(m, (unsigned)w) < 0)
            log_error("cannot respawn worker %d: %s", w, strerror(errno));
    }
}

static void reclaimed_one(void *ctx, const char *env_dir, bool keeper)
{
    log_info("reclaimed the slot of a dead %s", keeper ? "keeper" : "worker");
    reclaim_env(ctx, env_dir);
}

/*
 * Reclaim the slots of dead keepers and of workers that died before their keeper started; sweep
 * the turn journals and the kept harness states.
 */
static void sweep(struct master *m)
{
    int n;

    (void)admin_reclaim_dead(m->adm, reclaimed_one, m);
    n = admin_turns_sweep(m->adm); /* expired and abandoned turn journals, the total's cap */
    if (n > 0)
        log_debug("removed %d turn journals", n);
    n = admin_kept_sweep(m->adm);
    if (n > 0)
        log_info("removed %d kept harness states (expired or over the total bound)", n);
}

/*
 * Remove the environments no live slot refers to (left by a crashed predecessor, or all of
 * them at a clean stop): their cgroups, workspace mounts and folders.
 */
static void clean_orphan_envs(struct master *m)
{
    int r = admin_sweep_envs(m->adm);

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

/* Several hosts: register, refresh the sessions' owner keys, reconcile (admin.h). */
static void cluster_tick(struct master *m)
{
    struct admin_cluster_tick t;

    admin_cluster_tick(m->cluster, &t);
    if (!t.ran)
        return;
    if (t.changed && t.up)
        log_info("cluster: Redis reachable: %u members, %u sessions held here (%u re-asserted)",
                 t.members, t.held, t.asserted);
    else if (t.changed)
        log_warn("cluster degraded: %s; serving this host's sessions and new ones here", t.error);
    if (t.conflicts)
        log_info("cluster: %u environments here belong to sessions another member owns now "
                 "(e.g. '%s' owned by '%s'): killed (owner-moved)",
                 t.conflicts, t.conflict_key, t.conflict_owner);
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
        if (m->cluster && admin_cluster_due_ms(m->cluster) < timeout)
            timeout = (int)admin_cluster_due_ms(m->cluster);
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
        cluster_tick(m);
        if (util_now_ms() >= next_sweep) {
            sweep(m);
            admin_inflight_release(m->adm, 0);
            next_sweep = util_now_ms() + SWEEP_MS;
        }
    }
}

static void log_sandbox(const struct engine_config *cfg)
{
    struct engine_sandbox_facts sf;

    if (!engine_sandbox_facts(cfg, &sf))
        return;
    if (sf.shared_uid)
        log_info("sandboxes run as the runner's own user %u (the runner is not root)",
                 (unsigned)sf.runner_uid);
    else
        log_info("sandboxes run as host uid/gid %u + slot (%u slots)", (unsigned)sf.uid_base,
                 (unsigned)sf.uid_count);
    if (sf.missing[0])
        log_warn("sandbox limits this host cannot enforce: %s", sf.missing);
    if (!sf.net_ok)
        log_error("sandboxes cannot start: %s", sf.net_why);
}

/* Several hosts: the scope every member finds a session's kept Daytona sandbox in. */
static char daytona_scope[96];

static const char *env_get(const char *name)
{
    /* the providers read their settings (and keepers get them) through here */
    if (daytona_scope[0] && strcmp(name, "AGENT_RUNNER_DAYTONA_POOL_SCOPE") == 0 && !getenv(name))
        return daytona_scope;
    return getenv(name);
}

/* Settings, arguments, the socket on fd 0, the subreaper: 0, or the exit status. */
static int prepare(struct master *m, int argc, char **argv)
{
    char err[512];
    int r;

    r = config_load(&m->cfg, err, sizeof(err));
    if (r < 0) {
        log_error("refusing to start: %s", err);
        return 1;
    }
    if (parse_args(m, argc, argv) < 0)
        return 2;
    if (engine_cluster_group(&m->cfg.engine))
        snprintf(daytona_scope, sizeof(daytona_scope), "cluster:%s",
                 engine_cluster_group(&m->cfg.engine));
    /* sandbox providers with settings of their own (Daytona); workers inherit them */
    r = admin_providers_configure(env_get, err, sizeof(err));
    if (r < 0) {
        log_error("refusing to start: %s", err);
        return 1;
    }
    config_admission(&m->cfg);
    if (!fd0_is_socket()) {
        log_error("refusing to start: fd 0 is not the FastCGI socket (run under spawn-fcgi)");
        return 1;
    }
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) == -1) {
        log_error("cannot become child subreaper: %s", strerror(errno));
        return 1;
    }
    return 0;
}

/* The host's sandboxes and the session table (adopted or new): 0, or the exit status. */
static int open_host(struct master *m)
{
    struct admin_table_report rep;
    char err[512];
    int r;

    /* before any thread or worker: the uid range check enumerates users (getpwent) */
    r = admin_open(&m->cfg.engine, m->cfg.instance, (uint32_t)m->cfg.slots, &m->adm, err,
                   sizeof(err));
    if (r < 0) {
        log_error("refusing to start: %s", err);
        return 1;
    }
    r = admin_table_open(m->adm, &rep, err, sizeof(err));
    if (r < 0) {
        log_error("%s", err);
        admin_close(m->adm, false);
        return 1;
    }
    if (rep.adopted)
        log_info("adopted the session table of a previous master (%u used, %u reset)", rep.used,
                 rep.reset);
    if (rep.removed > 0)
        log_info("removed %d environments left behind", rep.removed);
    else if (rep.removed < 0)
        log_warn("start-up sweep: %s", strerror(-rep.removed));
    return 0;
}

/* The workers, the remote sandboxes' sweep, the spares: the master is serving. */
static void start_serving(struct master *m)
{
    int r;

    /* several hosts: registered, and the adopted table's sessions reconciled, before serving */
    r = admin_cluster_new(&m->cfg.engine, m->cfg.runs_max, &m->cluster);
    if (r < 0)
        log_error("cluster: cannot start: %s", strerror(-r));
    if (m->cluster)
        cluster_tick(m);
    for (unsigned i = 0; i < m->nworkers; i++) {
        if (spawn_worker(m, i) < 0) {
            log_error("cannot fork worker %u: %s", i, strerror(errno));
            start_drain(m);
            break;
        }
    }
    log_info("master %d ready: %u workers x %llu threads", (int)getpid(), m->nworkers,
             (unsigned long long)m->cfg.threads);
    /* remote sandboxes of an earlier run: adopt the live ones, delete orphans (a child) */
    r = admin_providers_sweep(m->adm);
    if (r < 0)
        log_warn("cannot start the sandbox sweep: %s", strerror(-r));
    if (geteuid() != 0 && admin_spares_disable(&m->cfg.engine))
        log_info("spares: off (a runner that is not root cannot move a spare's network "
                 "namespace to its session at claim; new sessions start cold)");
    spares_init(&m->spares, &m->cfg.engine, m->sig_fd);
}

/* Every environment destroyed, the table and what is left on disk removed. */
static void stop(struct master *m)
{
    /* every spare's keeper is in the table before admin_destroy_all looks */
    spares_stop(&m->spares);
    log_info("destroyed %u environments", admin_destroy_all(m->adm));
    /* several hosts: the sessions' owner keys and this member's record go */
    admin_cluster_free(m->cluster, true);
    m->cluster = NULL;
    sweep(m);
    admin_table_close(m->adm);
    final_sweep(m);
    admin_close(m->adm, true);
    m->adm = NULL;
}

int main(int argc, char **argv)
{
    struct master m;
    int r;

    memset(&m, 0, sizeof(m));
    log_setup("master", LOG_LEVEL_INFO);
    r = prepare(&m, argc, argv);
    if (r == 0)
        r = open_host(&m);
    if (r != 0)
        return r;
    m.nworkers = (unsigned)m.cfg.workers;
    m.workers = calloc(m.nworkers, sizeof(*m.workers));
    if (!m.workers || setup_signals(&m) < 0) {
        log_error("start-up failed: %s", strerror(errno));
        admin_table_close(m.adm);
        admin_close(m.adm, false);
        return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    config_log(&m.cfg);
    log_sandbox(&m.cfg.engine);
    start_serving(&m);
    loop(&m);
    stop(&m);
    curl_global_cleanup();
    free(m.workers);
    config_release(&m.cfg);
    log_info("stopped");
    return 0;
}
