/*
 * admin — the master's and agent-runner-ctl's operations on this host and the session table
 * (admin.h).
 */
#include "admin.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/fstree.h"
#include "base/util.h"
#include "engine_cluster.h"
#include "environment/environment.h"
#include "environment/spare.h"
#include "harness/harness.h"
#include "provider/provider.h"
#include "sandbox/host.h"
#include "sandbox/uid.h"
#include "session/kept.h"
#include "session/pool.h"
#include "telemetry/metrics.h"
#include "turn/journal_sweep.h"

/* a rebuilt table's old keepers were told to stop: their remote sandboxes go first */
#define SANDBOX_SWEEP_GRACE_MS 5000
/* keepers told to stop at shutdown get this long before SIGKILL */
#define DESTROY_WAIT_MS 5000
#define RECENT_VIEWS 64
/* how often (at most) the master looks for kept harness states past their TTL (kept.h) */
#define KEPT_SWEEP_MS 60000

_Static_assert(ADMIN_WORKERS_MAX * 2 == POOL_WORKERS_MAX, "half the in-flight entries");

struct admin {
    struct engine_config *cfg;
    struct sandbox_host host;
    char instance[64];
    uint32_t slots;
    bool keepers_stopped;    /* an old table was rebuilt: its keepers were told to stop */
    int64_t next_kept_sweep; /* monotonic ms */
    struct pool_reclaimed
        *scratch; /* one entry per slot, sized at start: no malloc near the lock */
};

int admin_providers_configure(const char *(*get)(const char *name), char *err, size_t errlen)
{
    return provider_configure_all(get, err, errlen);
}

/*
 * Every sandbox binds the harness folder (and the test agent, agent-runner-mcp) as its own
 * host uid: a folder on the way that is not searchable by others (a checkout under /root,
 * 0700) would fail every sandbox start. Checked once, as that uid, in a child.
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
    if (WIFEXITED(status) && WEXITSTATUS(status) == 1)
        return util_fail(-EACCES, err, errlen,
                         "the sandbox user (uid %u) cannot reach '%s': a folder on its path is "
                         "not searchable by others (e.g. a checkout under /root, mode 0700); "
                         "give it o+x or move the runner's files",
                         (unsigned)ids.uid, path);
    return 0;
}

int admin_open(struct engine_config *cfg, const char *instance, uint32_t slots, struct admin **ret,
               char *err, size_t errlen)
{
    const char *paths[] = {cfg->harness_dir, cfg->scripted_agent, cfg->tools.mcp_bin,
                           cfg->pi_stdio_bin};
    struct admin *a = calloc(1, sizeof(*a));
    int r;

    if (!a)
        return util_fail(-ENOMEM, err, errlen, "out of memory");
    a->cfg = cfg;
    a->slots = slots;
    snprintf(a->instance, sizeof(a->instance), "%s", instance);
    r = sandbox_host_init(&a->host, instance, cfg->state_dir, slots, err, errlen);
    if (r < 0) {
        free(a);
        return r;
    }
    for (size_t i = 0; i < ARRAY_SIZE(paths) && r == 0; i++)
        r = sandbox_can_reach(&a->host, paths[i], err, errlen);
    if (r < 0) {
        sandbox_host_release(&a->host, true); /* no environment exists yet */
        free(a);
        return r;
    }
    cfg->sandbox = &a->host;
    *ret = a;
    return 0;
}

/* The epoch key's file: beside the table, root-only, under the state folder. */
static void epoch_key_path(const struct admin *a, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/epoch.key", a->cfg->state_dir);
}

/* Read the adopted table's credential-epoch key back, or make and store a new one. */
static int epoch_key(struct admin *a, bool create)
{
    uint8_t *key = a->cfg->epoch_key;
    size_t keylen = sizeof(a->cfg->epoch_key), len = 0;
    char path[512], *data = NULL;
    int r;

    epoch_key_path(a, path, sizeof(path));
    if (!create) {
        r = util_read_file(path, 64, &data, &len);
        if (r == 0 && len == keylen)
            memcpy(key, data, len);
        else if (r == 0)
            r = -EINVAL;
        free(data);
        return r;
    }
    r = util_random_bytes(key, keylen);
    if (r == 0)
        r = util_write_file(path, key, keylen, 0600);
    return r;
}

/* A hash of this kernel boot's id: a table of another boot is never adopted. */
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

/* Adopt the predecessor's table when it fits and its master is gone: 1, 0 when it does not
 * fit (*p kept for the caller to look at), -errno. */
static int adopt(struct admin *a, uint64_t boot_id, struct pool *p, struct admin_table_report *rep)
{
    struct pool_info info;
    char why[160];
    uint32_t reset;

    pool_get_info(p, &info);
    if (info.boot_id != boot_id || info.nslots != a->slots ||
        strcmp(info.instance_id, a->instance) != 0 || util_proc_alive(info.master_pid, 0) ||
        epoch_key(a, false) != 0)
        return 0;
    if (pool_adopt(p, getpid(), &reset, why, sizeof(why)) < 0)
        return 0;
    pool_get_info(p, &info);
    rep->adopted = true;
    rep->used = info.nused;
    rep->reset = reset;
    return 1;
}

/* Adopt or build the table (admin_table_open without the sweep). */
static int adopt_or_create(struct admin *a, struct admin_table_report *rep, char *err,
                           size_t errlen)
{
    const char *name = a->cfg->shm_name;
    uint64_t boot_id = kernel_boot_id();
    struct pool_info info;
    struct pool *p = NULL;
    int r;

    if (pool_attach(name, false, &p) == 0 && adopt(a, boot_id, p, rep) == 1) {
        a->cfg->pool = p;
        return 0;
    }
    if (p) {
        pool_get_info(p, &info);
        if (info.master_pid != (int32_t)getpid() && info.master_pid != 0 &&
            util_proc_alive(info.master_pid, 0)) {
            pool_detach(p);
            return util_fail(-EBUSY, err, errlen, "another master (pid %d) runs instance '%s'",
                             info.master_pid, a->instance);
        }
        /* the keepers a table we are about to rebuild lists: nobody could reach them */
        pool_stop_keepers(p);
        a->keepers_stopped = true;
        rep->stop_keepers = true;
    }
    pool_detach(p);
    r = epoch_key(a, true);
    if (r < 0)
        return util_fail(r, err, errlen, "cannot store the credential epoch key: %s", strerror(-r));
    r = pool_create(name, a->slots, a->instance, boot_id, &p);
    if (r == -ENOSPC || r == -EFBIG)
        return util_fail(r, err, errlen,
                         "cannot create the session table '%s': /dev/shm has no room for its "
                         "%zu bytes (%llu slots): %s",
                         name, pool_segment_size(a->slots), (unsigned long long)a->slots,
                         strerror(-r));
    if (r < 0)
        return util_fail(r, err, errlen, "cannot create the session table '%s': %s", name,
                         strerror(-r));
    a->cfg->pool = p;
    return 0;
}

int admin_table_open(struct admin *a, struct admin_table_report *ret, char *err, size_t errlen)
{
    struct admin_table_report rep = {.adopted = false};
    int r = adopt_or_create(a, &rep, err, errlen);

    if (r < 0)
        return r;
    rep.removed = admin_sweep_envs(a);
    a->scratch = pool_scratch_new(a->cfg->pool);
    if (!a->scratch) {
        admin_table_close(a);
        return util_fail(-ENOMEM, err, errlen, "start-up failed: %s", strerror(ENOMEM));
    }
    *ret = rep;
    return 0;
}

int admin_providers_sweep(struct admin *a)
{
    pid_t pid =
        provider_startup_sweep(a->cfg->pool, a->keepers_stopped ? SANDBOX_SWEEP_GRACE_MS : 0);

    return pid < 0 ? -errno : 0;
}

int admin_keeper_exited(struct admin *a, pid_t pid, char *dir, size_t dirlen)
{
    char found[POOL_DIR_MAX];

    if (!a->cfg->pool || !pool_reclaim_keeper(a->cfg->pool, pid, found) || !found[0])
        return 0;
    snprintf(dir, dirlen, "%s", found);
    return 1;
}

uint32_t admin_reclaim_dead(struct admin *a,
                            void (*each)(void *ctx, const char *env_dir, bool keeper), void *ctx)
{
    uint32_t n;

    if (!a->cfg->pool || !a->scratch)
        return 0;
    n = pool_reclaim_dead(a->cfg->pool, a->scratch);
    for (uint32_t i = 0; i < n; i++)
        if (a->scratch[i].env_dir[0])
            each(ctx, a->scratch[i].env_dir, a->scratch[i].keeper_pid != 0);
    return n;
}

int admin_env_remove(const struct admin *a, const char *env_dir)
{
    return sandbox_host_reclaim(&a->host, env_dir);
}

static bool env_in_use(const char *id, void *ctx)
{
    const struct admin *a = ctx;
    char path[512];

    if (!a->cfg->pool)
        return false;
    snprintf(path, sizeof(path), "%s/envs/%s", a->cfg->state_dir, id);
    return pool_dir_in_use(a->cfg->pool, path);
}

int admin_sweep_envs(const struct admin *a)
{
    return sandbox_host_sweep(&a->host, env_in_use, (void *)a);
}

int admin_turns_sweep(const struct admin *a)
{
    struct journal_sweep_stats st;
    int r;

    if (!a->cfg->turns.dir[0])
        return 0;
    r = journal_sweep_run(a->cfg->turns.dir, &a->cfg->turns, util_wall_ms(), &st);
    if (r < 0)
        return r;
    return (int)(st.expired + st.abandoned + st.evicted);
}

int admin_turns_dir(const char *instance, char *out, size_t outlen)
{
    return engine_turns_dir(instance, out, outlen);
}

static int newest_first(const void *a, const void *b)
{
    const struct journal_entry *x = a, *y = b;

    return (x->meta.created_ms < y->meta.created_ms) - (x->meta.created_ms > y->meta.created_ms);
}

json_object *admin_turns_json(const char *dir)
{
    json_object *doc = json_object_new_object(), *list = json_object_new_array();
    struct journal_entry *v = NULL;
    int64_t now = util_wall_ms();
    size_t n = 0;

    if (!doc || !list) {
        json_object_put(doc);
        json_object_put(list);
        return NULL;
    }
    json_object_object_add(doc, "turns", list);
    if (journal_sweep_list(dir, false, &v, &n) < 0)
        return doc;
    qsort(v, n, sizeof(*v), newest_first);
    for (size_t i = 0; i < n; i++) {
        const struct journal_entry *e = &v[i];
        json_object *o = json_object_new_object();
        const char *state = e->meta.state == JOURNAL_DONE ? "done"
                            : e->writer_alive             ? "running"
                                                          : "orphaned";

        json_object_object_add(o, "turnId", json_object_new_string(e->meta.turn_id));
        json_object_object_add(o, "projectId", json_object_new_string(e->meta.project_id));
        json_object_object_add(o, "sessionKey", json_object_new_string(e->meta.session_key));
        json_object_object_add(o, "seq", json_object_new_int64((int64_t)e->last_seq));
        json_object_object_add(o, "ageMs", json_object_new_int64(now - e->meta.created_ms));
        json_object_object_add(o, "state", json_object_new_string(state));
        json_object_object_add(o, "detached", json_object_new_boolean(e->meta.detached));
        json_object_object_add(o, "pid", json_object_new_int(e->meta.pid));
        json_object_object_add(o, "bytes", json_object_new_int64((int64_t)e->bytes));
        json_object_array_add(list, o);
    }
    free(v);
    return doc;
}

int admin_kept_sweep(struct admin *a)
{
    const struct engine_config *cfg = a->cfg;
    int64_t now = util_now_ms(), every;

    if (now < a->next_kept_sweep || !cfg->state_dir)
        return 0;
    /* a short TTL is kept to within about half of it */
    every = KEPT_SWEEP_MS;
    if ((int64_t)(cfg->kept.ttl_ms / 2) < every)
        every = cfg->kept.ttl_ms / 2 > 1000 ? (int64_t)(cfg->kept.ttl_ms / 2) : 1000;
    a->next_kept_sweep = now + every;
    return kept_sweep(cfg->state_dir, &cfg->kept, util_wall_ms());
}

void admin_inflight_release(struct admin *a, pid_t pid)
{
    if (a->cfg->pool)
        pool_inflight_release(a->cfg->pool, pid);
}

void admin_worker_restarted(struct admin *a)
{
    if (a->cfg->pool)
        pool_counter_add(a->cfg->pool, PC_WORKER_RESTARTS, 1);
}

/* Whether any of the n keepers listed is still alive; the dead children are reaped. */
static bool keepers_alive(const struct pool_reclaimed *k, uint32_t n, int sig)
{
    bool any = false;

    for (uint32_t i = 0; i < n; i++) {
        if (!util_proc_alive(k[i].keeper_pid, k[i].keeper_start))
            continue;
        any = true;
        if (sig)
            kill(k[i].keeper_pid, sig);
    }
    return any;
}

uint32_t admin_destroy_all(struct admin *a)
{
    uint32_t n;
    int64_t deadline;

    if (!a->cfg->pool || !a->scratch)
        return 0;
    n = pool_shutdown_begin(a->cfg->pool, a->scratch);
    (void)keepers_alive(a->scratch, n, SIGTERM);
    deadline = util_now_ms() + DESTROY_WAIT_MS;
    for (;;) {
        bool any = keepers_alive(a->scratch, n, 0);

        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        if (!any)
            break;
        if (util_now_ms() > deadline) {
            (void)keepers_alive(a->scratch, n, SIGKILL);
            break;
        }
        usleep(10000);
    }
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    return n;
}

void admin_table_close(struct admin *a)
{
    char path[512];

    if (!a->cfg->pool)
        return;
    pool_destroy(a->cfg->pool);
    a->cfg->pool = NULL;
    epoch_key_path(a, path, sizeof(path));
    (void)unlink(path);
    /* the turn journals go with the table (a crashed master's stay for its successor) */
    if (a->cfg->turns.dir[0])
        (void)fstree_remove(a->cfg->turns.dir);
}

void admin_close(struct admin *a, bool clean_stop)
{
    if (!a)
        return;
    if (a->cfg->pool) {
        pool_detach(a->cfg->pool);
        a->cfg->pool = NULL;
    }
    sandbox_host_release(&a->host, clean_stop);
    a->cfg->sandbox = NULL;
    free(a->scratch);
    free(a);
}

/* ---- spares ---------------------------------------------------------------------------- */

bool admin_spares_wanted(const struct engine_config *cfg)
{
    return cfg->pool && spare_settings_any(&cfg->spares);
}

bool admin_spares_disable(struct engine_config *cfg)
{
    bool any = spare_settings_any(&cfg->spares);

    memset(cfg->spares.count, 0, sizeof(cfg->spares.count));
    any = any || cfg->shells;
    cfg->shells = 0;
    return any;
}

int admin_spare_next(const struct engine_config *cfg, unsigned *rr)
{
    struct pool_info info;

    pool_get_info(cfg->pool, &info);
    if (info.nused + 1 >= info.nslots)
        return -1; /* the last free slot is a session's */
    for (unsigned n = 0; n < HARNESS_COUNT; n++) {
        unsigned k = (*rr + n) % HARNESS_COUNT;
        uint32_t ready, building;

        if (!cfg->spares.count[k])
            continue;
        pool_spare_count(cfg->pool, (uint8_t)k, &ready, &building);
        if (ready + building < cfg->spares.count[k]) {
            *rr = (k + 1) % HARNESS_COUNT;
            return (int)k;
        }
    }
    return -1;
}

pid_t admin_spare_shed(const struct engine_config *cfg)
{
    struct pool_victim v;

    if (pool_spare_evict(cfg->pool, &v) != 1 || v.keeper_pid <= 0)
        return 0;
    if (util_proc_alive(v.keeper_pid, v.keeper_start))
        kill(v.keeper_pid, SIGTERM); /* it frees its slot; the master notes its exit */
    return (pid_t)v.keeper_pid;
}

bool admin_shells_wanted(const struct engine_config *cfg)
{
    return cfg->pool && cfg->sandbox && cfg->shells > 0;
}

int admin_shell_missing(const struct engine_config *cfg)
{
    struct pool_info info;
    uint32_t ready, building;
    int64_t want, room;

    if (!admin_shells_wanted(cfg))
        return 0;
    pool_get_info(cfg->pool, &info);
    pool_spare_count(cfg->pool, (uint8_t)POOL_SHELL, &ready, &building);
    want = (int64_t)cfg->shells - (int64_t)(ready + building);
    room = (int64_t)info.nslots - (int64_t)info.nused - 1; /* the last free slot is a session's */
    return (int)(want < room ? want : room);
}

int admin_shell_make(const struct engine_config *cfg, char *err, size_t errlen)
{
    return environment_start_shell(cfg, err, errlen);
}

int admin_spare_make(const struct engine_config *cfg, enum harness_kind kind, char *err,
                     size_t errlen)
{
    return environment_start_spare(cfg, kind, err, errlen);
}

/* ---- agent-runner-ctl ------------------------------------------------------------------ */

int admin_attach(const char *instance, bool readonly, struct pool **ret, char *name, size_t namelen)
{
    int r = pool_shm_name(instance, name, namelen);

    return r < 0 ? r : pool_attach(name, readonly, ret);
}

void admin_detach(struct pool *p)
{
    pool_detach(p);
}

/* The most recent teardown of key among the n remembered ones, or NULL. */
static const struct pool_teardown_view *recent_for(const struct pool_teardown_view *recent,
                                                   size_t n, const char *key)
{
    for (size_t k = 0; key[0] && k < n; k++)
        if (strcmp(recent[k].key, key) == 0)
            return &recent[k];
    return NULL;
}

static void add_str(json_object *o, const char *k, const char *v)
{
    json_object_object_add(o, k, json_object_new_string(v));
}

static void add_int(json_object *o, const char *k, int64_t v)
{
    json_object_object_add(o, k, json_object_new_int64(v));
}

static json_object *session_json(const struct pool_session *s, uint32_t i,
                                 const struct pool_teardown_view *t, int64_t now)
{
    json_object *o = json_object_new_object();
    int64_t left = 0;

    if (s->state == SLOT_IDLE)
        left = s->idle_deadline_ms - now;
    else if (s->state == SLOT_AWAITING_APPROVAL)
        left = s->approval_deadline_ms - now;
    add_str(o, "key", s->key);
    add_str(o, "state", pool_state_name(s->state));
    add_str(o, "harness", harness_kind_name(s->harness));
    add_str(o, "provider", s->provider);
    add_str(o, "model", s->model);
    json_object_object_add(o, "keeperPid", json_object_new_int(s->keeper_pid));
    json_object_object_add(o, "sandboxPid", json_object_new_int(s->sandbox_pid));
    add_str(o, "envDir", s->env_dir);
    json_object_object_add(o, "approvals", json_object_new_int((int)s->ngates));
    json_object_object_add(o, "ownerPid", json_object_new_int(s->owner_pid));
    add_int(o, "idleLeftMs", left > 0 ? left : 0);
    json_object_object_add(o, "turns", json_object_new_int((int)s->turns));
    /* a spare (state "spare", or "starting" while it is being built) holds no session yet */
    json_object_object_add(o, "spare", json_object_new_boolean(s->spare));
    json_object_object_add(o, "fromSpare", json_object_new_boolean(s->from_spare));
    json_object_object_add(o, "slot", json_object_new_int((int)i));
    add_int(o, "generation", s->h.generation);
    json_object_object_add(
        o, "lastTeardown",
        t ? json_object_new_string(teardown_reason_name((enum teardown_reason)t->reason)) : NULL);
    return o;
}

static json_object *teardown_json(const struct pool_teardown_view *t, int64_t now)
{
    json_object *o = json_object_new_object();

    add_str(o, "key", t->key);
    add_str(o, "reason", teardown_reason_name((enum teardown_reason)t->reason));
    add_str(o, "harness", harness_kind_name(t->harness));
    add_int(o, "agoMs", now - t->at_ms);
    json_object_object_add(o, "turns", json_object_new_int((int)t->turns));
    return o;
}

json_object *admin_sessions_json(const struct pool *p)
{
    struct pool_teardown_view *views = calloc(RECENT_VIEWS, sizeof(*views));
    struct pool_session *s = calloc(1, sizeof(*s));
    json_object *doc = NULL, *list, *recent;
    struct pool_info info;
    int64_t now = util_now_ms();
    size_t n;

    if (!views || !s)
        goto out;
    doc = json_object_new_object();
    list = json_object_new_array();
    recent = json_object_new_array();
    pool_get_info(p, &info);
    n = pool_recent_teardowns(p, views, RECENT_VIEWS);
    for (uint32_t i = 0; i < info.nslots; i++)
        if (pool_session_peek(p, i, s))
            json_object_array_add(list, session_json(s, i, recent_for(views, n, s->key), now));
    for (size_t k = 0; k < n; k++)
        json_object_array_add(recent, teardown_json(&views[k], now));
    json_object_object_add(doc, "sessions", list);
    json_object_object_add(doc, "recent", recent);
out:
    free(views);
    free(s);
    return doc;
}

json_object *admin_stats_json(const struct pool *p)
{
    static const char *const outcomes[METRIC_OUTCOMES] = {"turns_ok", "turns_error", "turns_paused",
                                                          "turns_cancelled", "turns_limit"};
    const struct pool_metrics *m = pool_metrics_const(p);
    const struct {
        const char *name;
        uint64_t value;
    } totals[] = {
        {"admission_rejected", pool_counter_get(p, PC_ADMISSION_REJECTED)},
        {"worker_restarts", pool_counter_get(p, PC_WORKER_RESTARTS)},
        {"keeper_spawns", metrics_keeper_spawns_total(m)},
        {"warm_hits", pool_counter_get(p, PC_WARM_HITS)},
        {"egress_denied", pool_counter_get(p, PC_EGRESS_DENIED)},
        {"model_calls", pool_counter_get(p, PC_MODEL_CALLS)},
        {"model_refused", pool_counter_get(p, PC_MODEL_REFUSED)},
        {"usage_mismatch", pool_counter_get(p, PC_USAGE_MISMATCH)},
        {"cold_starts", metrics_cold_starts_total(m)},
        {"runs_in_flight", pool_inflight_total(p)},
        {"fcgi_connections", pool_counter_get(p, PC_FCGI_CONNECTIONS)},
        {"fcgi_kept_requests", pool_counter_get(p, PC_FCGI_KEPT_REQUESTS)},
    };
    json_object *doc = json_object_new_object(), *counters = json_object_new_object();
    struct pool_info info;

    for (size_t i = 0; i < ARRAY_SIZE(totals); i++)
        add_int(counters, totals[i].name, (int64_t)totals[i].value);
    for (unsigned o = 0; o < METRIC_OUTCOMES; o++)
        add_int(counters, outcomes[o], (int64_t)metrics_turns_total(m, o));
    pool_get_info(p, &info);
    add_str(doc, "instance", info.instance_id);
    json_object_object_add(doc, "masterPid", json_object_new_int(info.master_pid));
    json_object_object_add(doc, "slots", json_object_new_int((int)info.nslots));
    json_object_object_add(doc, "used", json_object_new_int((int)info.nused));
    json_object_object_add(doc, "parked", json_object_new_int((int)info.nparked));
    json_object_object_add(doc, "repairs", json_object_new_int((int)info.repairs));
    json_object_object_add(doc, "counters", counters);
    return doc;
}

int admin_kill(struct pool *p, const char *key)
{
    return environment_kill(p, key, TEARDOWN_KILL);
}

int admin_check(struct pool *p, char *err, size_t errlen)
{
    return pool_check(p, err, errlen);
}

/* ---- /metrics -------------------------------------------------------------------------- */

int admin_metrics_render(const struct engine_config *cfg, struct buf *out)
{
    int r;

    buf_init(out, METRICS_TEXT_MAX);
    if (!cfg->pool)
        return -ENOENT;
    r = pool_metrics_render(cfg->pool, out);
    return r < 0 ? r : engine_cluster_metrics(cfg, out);
}
