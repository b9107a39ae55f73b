/*
 * daytona_keeper — the keeper half of the `daytona` provider (daytona_provider.h): the one
 * lease of this keeper process (a keeper owns one environment), the harness started in it
 * through the bridge, and its release.
 *
 * Acquire: the lease request of the sandbox description (provider_lease_describe) says who
 * owns the sandbox (the pool key, or this environment), whether the session had one before,
 * and the network rule. The capability snapshot is read now (fail closed: a rule the
 * provider cannot apply refuses the run unless the request allows best effort), the admitted
 * lifecycle becomes the sandbox's backstops (daytona_lease_lifecycle), daytona_acquire resumes
 * the owner's kept sandbox or creates one, and a lease that came back not reusable
 * downgrades the session to per-turn. A new sandbox runs one preflight command through the
 * exec seam (workspace folder, harness folder present), recorded as a sandbox.exec span.
 * Everything the worker's trace needs goes into the lease report (hashed ids only).
 *
 * Start: the description mapped into the sandbox (daytona_plan), the manifest restored from
 * the sandbox's record when the sandbox was kept (so only what changed is uploaded), and the
 * harness started through daytona_bridge.
 *
 * The keeper channel: a sandbox description with "channelRelay" first gets the relay started
 * in the sandbox (a bridge of its own running daytona_plan's relay_command; nothing uploaded)
 * and the harness's bridge waits for its "ready" after the upload, before it starts the
 * harness (before_start), so the socket at the harness's RUNNER_CHANNEL exists before
 * anything could look for it and the relay's start overlaps the upload. The pump
 * (daytona_relay) is the started process's priv: the keeper's poll loop services it through
 * poll_fds/service. Stop ends the harness, then the relay (its session deleted).
 *
 * Release: the disposition for the keeper's teardown reason (provider_disposition), with one
 * exception: a reusable lease whose harness was lost because the sandbox was stopped under it
 * (its server-side auto-stop) is kept as it is — exactly what the idle window would have done.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "proto/keeper_proto.h"
#include "provider/daytona/daytona_bridge.h"
#include "provider/daytona/daytona_exec.h"
#include "provider/daytona/daytona_plan.h"
#include "provider/daytona/daytona_provider.h"
#include "provider/daytona/daytona_relay.h"
#include "provider/daytona/daytona_sandbox.h"

#define ALLOW_MAX 64
#define PREFLIGHT_TIMEOUT_MS 60000
#define OWNER_MAX 320
#define RELAY_READY_MS 30000

_Static_assert(DAYTONA_RELAY_POLLFDS <= PROVIDER_POLLFDS_MAX, "the keeper polls them all");

static struct {
    bool have; /* a lease is held */
    struct daytona_client *c;
    struct daytona_lease lease;
    struct daytona_lifecycle lc;
    struct daytona_plan plan;
    struct daytona_manifest *m;
    struct daytona_bridge *bridge;
    struct daytona_bridge *relay_bridge; /* the keeper channel relay's session */
    struct daytona_relay *relay;         /* its pump */
    int64_t relay_t0;
    json_object *report;
    bool lost; /* the harness was lost (not a clean exit) */
} ks;

static void forget(void)
{
    daytona_relay_free(ks.relay);
    daytona_bridge_free(ks.relay_bridge);
    daytona_bridge_free(ks.bridge);
    daytona_manifest_free(ks.m);
    daytona_plan_release(&ks.plan);
    daytona_lease_release(&ks.lease);
    daytona_client_free(ks.c);
    json_object_put(ks.report);
    memset(&ks, 0, sizeof(ks));
}

static enum network_mode network_of(const char *s)
{
    if (s && strcmp(s, "off") == 0)
        return NETWORK_OFF;
    if (s && strcmp(s, "allowlist") == 0)
        return NETWORK_ALLOWLIST;
    return NETWORK_ON;
}

/* One exec span of the report: the allowlisted attributes and the wall-clock bounds. */
static void report_exec(const char *command, const struct daytona_exec_result *res,
                        int64_t start_ns, int64_t end_ns)
{
    json_object *attrs = NULL, *span, *execs = jsonx_get(ks.report, "execs");

    if (daytona_exec_span_attrs(ks.lease.sb.id, command, res, true, &attrs) < 0)
        return;
    span = json_object_new_object();
    json_object_object_add(span, "name", json_object_new_string("sandbox.exec"));
    json_object_object_add(span, "startNs", json_object_new_int64(start_ns));
    json_object_object_add(span, "endNs", json_object_new_int64(end_ns));
    json_object_object_add(span, "attrs", attrs);
    if (!execs) {
        execs = json_object_new_array();
        json_object_object_add(ks.report, "execs", execs);
    }
    json_object_array_add(execs, span);
}

/* A new sandbox: make the workspace and check the harness folders are in its image. */
static int preflight(char *err, size_t errlen)
{
    struct daytona_exec_opts o = {.timeout_ms = PREFLIGHT_TIMEOUT_MS, .max_output = 4096};
    struct daytona_exec_result res;
    struct buf cmd;
    int64_t t0 = util_wall_ns();
    int r;

    memset(&res, 0, sizeof(res));
    buf_init(&cmd, 64 * 1024);
    r = daytona_plan_preflight(&ks.plan, &cmd);
    if (r >= 0)
        r = daytona_exec(ks.c, ks.lease.sb.toolbox, buf_str(&cmd), &o, &res, err, errlen);
    report_exec(buf_str(&cmd), r < 0 ? NULL : &res, t0, util_wall_ns());
    if (r < 0)
        goto out;
    if (!res.exited || res.timed_out) {
        snprintf(err, errlen, "sandbox: the preflight command did not finish");
        r = -ETIMEDOUT;
    } else if (res.exit_code == 3) {
        snprintf(err, errlen, "sandbox: cannot create the workspace '%s' in the sandbox",
                 ks.plan.workspace);
        r = -EACCES;
    } else if (res.exit_code >= 4) {
        size_t i = (size_t)(res.exit_code - 4);
        const char *dir = json_object_get_string(json_object_array_get_idx(ks.plan.folders, i));

        snprintf(err, errlen,
                 "sandbox_unavailable: the sandbox image has no '%s' (the harness folder: "
                 "build the image with it or set AGENT_RUNNER_DAYTONA_HARNESS_DIR)",
                 dir ? dir : "?");
        r = AR_E_UNAVAILABLE;
    } else if (res.exit_code != 0) {
        snprintf(err, errlen, "sandbox: the preflight command failed (exit %d)", res.exit_code);
        r = -EIO;
    }
out:
    daytona_exec_result_release(&res);
    buf_release(&cmd);
    return r;
}

static void fill_lease(struct provider_lease *ret)
{
    static const enum provider_lease_outcome outcomes[] = {
        [DAYTONA_LEASE_CREATED] = PROVIDER_LEASE_CREATED,
        [DAYTONA_LEASE_RESUMED] = PROVIDER_LEASE_RESUMED,
        [DAYTONA_LEASE_REPLACEMENT] = PROVIDER_LEASE_REPLACEMENT,
    };
    char hid[13] = "";

    memset(ret, 0, sizeof(*ret));
    snprintf(ret->id, sizeof(ret->id), "%s", ks.lease.sb.id);
    snprintf(ret->previous_id, sizeof(ret->previous_id), "%s", ks.lease.previous_id);
    ret->outcome = outcomes[ks.lease.outcome];
    ret->reason = (enum provider_replacement_reason)ks.lease.reason;
    ret->reusable = ks.lease.reusable && ks.lc.reusable;
    ret->acquire_ms = ks.lease.acquire_ms;
    (void)daytona_hash_id(ks.lease.sb.id, hid);
    json_object_object_add(ks.report, "provider", json_object_new_string("daytona"));
    json_object_object_add(ks.report, "outcome",
                           json_object_new_string(provider_lease_outcome_name(ret->outcome)));
    if (ret->outcome == PROVIDER_LEASE_REPLACEMENT)
        json_object_object_add(
            ks.report, "reason",
            json_object_new_string(provider_replacement_reason_name(ret->reason)));
    json_object_object_add(ks.report, "sandbox", json_object_new_string(hid));
    json_object_object_add(ks.report, "acquireMs", json_object_new_int64(ret->acquire_ms));
    json_object_object_add(ks.report, "reusable", json_object_new_boolean(ret->reusable));
    json_object_object_add(ks.report, "downgraded", json_object_new_boolean(ks.lc.downgraded));
    json_object_object_add(ks.report, "workspace", json_object_new_string(ks.plan.workspace));
    ret->report = json_object_get(ks.report);
}

struct lease_request {
    char owner[OWNER_MAX];
    bool keyed, had_lease;
    enum network_mode network;
    const char *allow[ALLOW_MAX];
    size_t nallow;
    char host[256];
    const char *always[1];
    size_t nalways;
};

static int read_request(const struct keeper_spec *spec, struct lease_request *lr, char *err,
                        size_t errlen)
{
    json_object *l = jsonx_get(spec->sandbox, "lease"), *allow;
    const char *owner = jsonx_str(l, "owner"), *endpoint = jsonx_str(l, "endpoint");

    memset(lr, 0, sizeof(*lr));
    if (!l) {
        snprintf(err, errlen, "sandbox: the description has no lease request");
        return -EINVAL;
    }
    lr->keyed = owner && owner[0];
    if (provider_lease_owner(owner, spec->env_dir, lr->owner, sizeof(lr->owner)) < 0) {
        snprintf(err, errlen, "sandbox: no owner for the lease");
        return -EINVAL;
    }
    lr->had_lease = json_object_get_boolean(jsonx_get(l, "hadLease"));
    lr->network = network_of(jsonx_str(l, "network"));
    allow = jsonx_get(l, "allow");
    for (size_t i = 0; allow && json_object_is_type(allow, json_type_array) &&
                       i < json_object_array_length(allow);
         i++) {
        if (lr->nallow == ALLOW_MAX) {
            snprintf(err, errlen, "sandboxPermission.network.allowlist: too many entries");
            return -E2BIG;
        }
        lr->allow[lr->nallow] = json_object_get_string(json_object_array_get_idx(allow, i));
        if (!lr->allow[lr->nallow])
            lr->allow[lr->nallow] = "";
        lr->nallow++;
    }
    if (endpoint && daytona_provider_endpoint_host(endpoint, lr->host, sizeof(lr->host)) == 0)
        lr->always[lr->nalways++] = lr->host;
    return 0;
}

/* The snapshot now (fail closed), then the lifecycle as the sandbox's backstops. */
static int decide(const struct daytona_settings *s, const struct keeper_spec *spec,
                  struct lease_request *lr, char *err, size_t errlen)
{
    struct daytona_needs needs = {
        .network = lr->network, .network_strict = true, .nallow = lr->nallow};
    struct lifecycle_input li;
    struct daytona_caps dc;
    json_object *strict = jsonx_get(jsonx_get(spec->sandbox, "lease"), "networkStrict");
    int r;

    if (strict && json_object_is_type(strict, json_type_boolean))
        needs.network_strict = json_object_get_boolean(strict);
    daytona_lease_caps(&s->lc, &dc);
    r = daytona_lease_check(&dc, &needs, err, errlen);
    if (r < 0)
        return r;
    if (r == 1) {
        log_warn("sandboxPermission.network \"%s\" cannot be enforced here: best effort, the "
                 "sandbox runs without a network rule",
                 lr->network == NETWORK_OFF ? "off" : "allowlist");
        json_object_object_add(ks.report, "networkRelaxed", json_object_new_boolean(1));
        lr->network = NETWORK_ON;
        lr->nallow = 0;
    }
    memset(&li, 0, sizeof(li));
    li.admitted_mode = spec->per_turn || !lr->keyed ? LIFECYCLE_PER_TURN : LIFECYCLE_WARM;
    li.admitted_idle_ms = spec->idle_ms;
    return daytona_lease_lifecycle(&dc, &s->lc, &li, &ks.lc, err, errlen);
}

/* After the lease: the sandbox's home, the plan, the preflight of a new sandbox. */
static int prepare(const struct daytona_settings *s, const struct keeper_spec *spec, char *err,
                   size_t errlen)
{
    char home[DAYTONA_PLAN_PATH_MAX];
    int r;

    r = daytona_toolbox_home(ks.c, ks.lease.sb.toolbox, home, sizeof(home));
    if (r < 0) {
        snprintf(err, errlen, "sandbox: cannot ask the sandbox for its home: %s",
                 daytona_client_message(ks.c)[0] ? daytona_client_message(ks.c)
                                                 : daytona_strerror(r));
        return r;
    }
    r = daytona_plan_build(spec->sandbox, home, s->harness_dir, &ks.plan, err, errlen);
    if (r < 0)
        return r;
    if (ks.lease.outcome != DAYTONA_LEASE_RESUMED)
        r = preflight(err, errlen);
    return r;
}

static int acquire(const struct keeper_spec *spec, const char *lease_id, struct provider_lease *ret,
                   char *err, size_t errlen)
{
    const struct daytona_settings *s = daytona_provider_settings();
    struct daytona_acquire_params p;
    struct lease_request lr;
    char digest[33];
    int r;

    if (!s) {
        snprintf(err, errlen, "sandbox: provider \"daytona\" is not configured in the keeper");
        return -ENOTSUP;
    }
    if (ks.have) {
        snprintf(err, errlen, "sandbox: this keeper already holds a lease");
        return -EALREADY;
    }
    forget();
    ks.report = json_object_new_object();
    if (!ks.report)
        return -ENOMEM;
    r = read_request(spec, &lr, err, errlen);
    if (r >= 0)
        r = decide(s, spec, &lr, err, errlen);
    if (r >= 0)
        r = daytona_lease_pool_digest(s->cfg.api_key, s->pool_scope, lr.owner, digest);
    if (r >= 0)
        r = daytona_client_new(&s->cfg, &ks.c);
    if (r < 0) {
        if (!err[0])
            snprintf(err, errlen, "sandbox: %s", daytona_strerror(r));
        goto fail;
    }
    p = (struct daytona_acquire_params){.instance = s->runner_id,
                                        .pool_digest = digest,
                                        .shared_pool = s->shared_scope,
                                        .lease_id = lease_id,
                                        .had_lease = lr.had_lease || lease_id,
                                        .lifecycle = &ks.lc,
                                        .network = lr.network,
                                        .allow = lr.allow,
                                        .nallow = lr.nallow,
                                        .always_allow = lr.always,
                                        .nalways_allow = lr.nalways};
    r = daytona_acquire(ks.c, &p, &ks.lease, err, errlen);
    if (r < 0)
        goto fail;
    ks.have = true;
    if (daytona_lease_downgrade(&ks.lc, &ks.lease.sb))
        log_debug("daytona: the lease came back not reusable: the session runs per-turn");
    r = prepare(s, spec, err, errlen);
    if (r < 0) {
        char rerr[256];

        /* nothing usable came of it: a new sandbox goes, a kept one is kept */
        (void)daytona_release(ks.c, ks.lease.sb.id,
                              ks.lease.outcome == DAYTONA_LEASE_RESUMED && ks.lease.reusable
                                  ? DAYTONA_STOP_AND_RETAIN
                                  : DAYTONA_DESTROY,
                              rerr, sizeof(rerr));
        goto fail;
    }
    fill_lease(ret);
    return 0;
fail:
    forget();
    return r;
}

int daytona_keeper_acquire(const struct keeper_spec *spec, struct provider_lease *ret, char *err,
                           size_t errlen)
{
    return acquire(spec, NULL, ret, err, errlen);
}

int daytona_keeper_resume(const struct keeper_spec *spec, const char *lease_id,
                          struct provider_lease *ret, char *err, size_t errlen)
{
    if (!lease_id || !daytona_id_ok(lease_id)) {
        snprintf(err, errlen, "sandbox: not a lease id");
        return -EINVAL;
    }
    return acquire(spec, lease_id, ret, err, errlen);
}

static void stop_relay(void)
{
    daytona_relay_free(ks.relay);
    ks.relay = NULL;
    if (ks.relay_bridge) {
        daytona_bridge_stop(ks.relay_bridge, true);
        daytona_bridge_free(ks.relay_bridge);
        ks.relay_bridge = NULL;
    }
}

/*
 * The keeper channel relay in the sandbox, its pump connected to the keeper's own channel
 * socket. It starts while the harness's files upload; relay_ready() waits for it.
 */
static int start_relay(const struct daytona_settings *s, const struct keeper_spec *spec,
                       char *err, size_t errlen)
{
    struct daytona_harness h = {.command = ks.plan.relay_command,
                                .activity_ms = DAYTONA_BRIDGE_ACTIVITY_MS};
    struct daytona_bridge_fds fds;
    char sock[512], why[256] = "";
    int r;

    if ((size_t)snprintf(sock, sizeof(sock), "%s/" KEEPER_CHANNEL_DIR "/" KEEPER_CHANNEL_SOCKET,
                         spec->env_dir) >= sizeof(sock))
        return -ENAMETOOLONG;
    ks.relay_t0 = util_now_ms();
    r = daytona_bridge_start(&s->cfg, &ks.lease.sb, &h, ks.m, &ks.relay_bridge, &fds, why,
                             sizeof(why));
    if (r < 0) {
        snprintf(err, errlen, "sandbox: cannot start the keeper channel relay: %s", why);
        return r;
    }
    r = daytona_relay_new(fds.stdin_fd, fds.stdout_fd, fds.stderr_fd, sock, &ks.relay);
    if (r < 0)
        stop_relay();
    return r;
}

/* Before the harness starts: the relay listens on its RUNNER_CHANNEL, or nothing starts. */
static int relay_ready(void *ctx, char *err, size_t errlen)
{
    char why[512] = "";
    int r;

    (void)ctx;
    if (!ks.relay)
        return 0;
    r = daytona_relay_wait_ready(ks.relay, RELAY_READY_MS, why, sizeof(why));
    if (r < 0) {
        snprintf(err, errlen, "sandbox_unavailable: %s", why[0] ? why : strerror(-r));
        return r == -ETIMEDOUT || r == -EPIPE || r == -EPROTO ? AR_E_UNAVAILABLE : r;
    }
    json_object_object_add(ks.report, "channelRelayMs",
                           json_object_new_int64(util_now_ms() - ks.relay_t0));
    log_debug("daytona: the keeper channel relay is ready after %lld ms",
              (long long)(util_now_ms() - ks.relay_t0));
    return 0;
}

int daytona_keeper_start(const struct keeper_spec *spec, struct provider_process *ret, char *err,
                         size_t errlen)
{
    const struct daytona_settings *s = daytona_provider_settings();
    struct daytona_harness h;
    struct daytona_bridge_fds fds;
    struct daytona_bridge_stats st;
    char record[DAYTONA_PLAN_PATH_MAX + 32];
    long half = (long)ks.lc.auto_stop_min * 30000L;
    json_object *up;
    int r;

    if (!s || !ks.have) {
        snprintf(err, errlen, "sandbox: no lease to start the harness in");
        return -EINVAL;
    }
    r = daytona_manifest_new(&ks.m);
    if (r < 0)
        return r;
    snprintf(record, sizeof(record), "%s/manifest.json", ks.plan.state_dir);
    r = daytona_manifest_set_record(ks.m, record);
    /* a kept sandbox still holds what earlier keepers uploaded: start from its record */
    if (r >= 0 && ks.lease.outcome == DAYTONA_LEASE_RESUMED)
        r = daytona_manifest_restore(ks.m, ks.c, ks.lease.sb.toolbox);
    if (r < 0) {
        snprintf(err, errlen, "sandbox: cannot read what the sandbox holds: %s",
                 daytona_strerror(r));
        return r;
    }
    h = (struct daytona_harness){.files = ks.plan.files,
                                 .env = ks.plan.env,
                                 .argv = ks.plan.argv,
                                 .cwd = ks.plan.workspace,
                                 .state_dir = ks.plan.state_dir,
                                 .activity_ms = half > 0 && half < DAYTONA_BRIDGE_ACTIVITY_MS
                                                    ? half
                                                    : DAYTONA_BRIDGE_ACTIVITY_MS,
                                 .before_start = relay_ready};
    if (ks.plan.relay_command) {
        r = start_relay(s, spec, err, errlen);
        if (r < 0)
            return r;
    }
    r = daytona_bridge_start(&s->cfg, &ks.lease.sb, &h, ks.m, &ks.bridge, &fds, err, errlen);
    if (r < 0) {
        stop_relay();
        return r;
    }
    util_set_nonblock(fds.stdin_fd);
    util_set_nonblock(fds.stdout_fd);
    util_set_nonblock(fds.stderr_fd);
    *ret = (struct provider_process){.pid = 0,
                                     .in_fd = fds.stdin_fd,
                                     .out_fd = fds.stdout_fd,
                                     .err_fd = fds.stderr_fd,
                                     .exit_fd = fds.exit_fd,
                                     .priv = ks.relay};
    daytona_bridge_stats(ks.bridge, &st);
    up = json_object_new_object();
    json_object_object_add(up, "files", json_object_new_int((int)st.sync.files));
    json_object_object_add(up, "uploaded", json_object_new_int((int)st.sync.uploaded));
    json_object_object_add(up, "bytes", json_object_new_int64((int64_t)st.sync.bytes));
    json_object_object_add(up, "ms", json_object_new_int64(st.sync.ms));
    json_object_object_add(ks.report, "upload", up);
    json_object_object_add(ks.report, "startMs", json_object_new_int64(st.start_ms));
    json_object_object_add(ks.report, "workspaceFiles",
                           json_object_new_int((int)ks.plan.workspace_files));
    return 0;
}

int daytona_keeper_exit_status(struct provider_process *proc)
{
    (void)proc;
    return ks.bridge ? daytona_bridge_exit_status(ks.bridge) : DAYTONA_BRIDGE_LOST;
}

void daytona_keeper_busy(struct provider_process *proc, bool busy)
{
    (void)proc;
    if (ks.bridge)
        daytona_bridge_set_busy(ks.bridge, busy);
}

void daytona_keeper_stop(struct provider_process *proc)
{
    if (ks.bridge) {
        ks.lost = daytona_bridge_exit_status(ks.bridge) == DAYTONA_BRIDGE_LOST;
        daytona_bridge_stop(ks.bridge, true);
        daytona_bridge_free(ks.bridge);
        ks.bridge = NULL;
    }
    stop_relay();
    proc->pid = 0;
    proc->priv = NULL;
}

size_t daytona_keeper_poll_fds(struct provider_process *proc, struct pollfd *p, size_t max,
                               int64_t now, int *timeout_ms)
{
    (void)now;
    (void)timeout_ms;
    return proc->priv && proc->priv == ks.relay ? daytona_relay_pollfds(ks.relay, p, max) : 0;
}

void daytona_keeper_service(struct provider_process *proc, const struct pollfd *p, size_t n,
                            int64_t now)
{
    (void)now;
    if (proc->priv && proc->priv == ks.relay)
        daytona_relay_handle(ks.relay, p, n);
}

/* The harness was lost and the sandbox is stopped (or stopping): its auto-stop fired. */
static bool stopped_under_us(void)
{
    struct daytona_sandbox sb = {0};
    bool stopped;

    if (!ks.lost || daytona_sandbox_get(ks.c, ks.lease.sb.id, &sb) < 0)
        return false;
    stopped = sb.state == DAYTONA_STATE_STOPPED || sb.state == DAYTONA_STATE_STOPPING ||
              sb.state == DAYTONA_STATE_ARCHIVED || sb.state == DAYTONA_STATE_ARCHIVING;
    daytona_sandbox_release(&sb);
    return stopped;
}

/* Several hosts: another member resumed the sandbox (and relabelled it): not ours to stop. */
static bool adopted_elsewhere(void)
{
    const struct daytona_settings *s = daytona_provider_settings();
    struct daytona_sandbox sb = {0};
    const char *inst;
    bool other;

    if (!s || !s->shared_scope || daytona_sandbox_get(ks.c, ks.lease.sb.id, &sb) < 0)
        return false;
    inst = daytona_sandbox_label(&sb, DAYTONA_LABEL_INSTANCE);
    other = inst && strcmp(inst, s->runner_id) != 0;
    daytona_sandbox_release(&sb);
    return other;
}

int daytona_keeper_release(const struct provider_lease *lease,
                           enum provider_disposition disposition, char *err, size_t errlen)
{
    static const enum daytona_disposition map[] = {
        [PROVIDER_KEEP_RUNNING] = DAYTONA_KEEP_RUNNING,
        [PROVIDER_STOP_AND_RETAIN] = DAYTONA_STOP_AND_RETAIN,
        [PROVIDER_DESTROY] = DAYTONA_DESTROY,
    };
    int r = 0;

    if (!ks.have || !lease || strcmp(lease->id, ks.lease.sb.id) != 0) {
        snprintf(err, errlen, "sandbox: not this keeper's lease");
        return -ENOENT;
    }
    if (ks.bridge) {
        struct provider_process none = {.exit_fd = -1};

        daytona_keeper_stop(&none);
    }
    if (disposition == PROVIDER_DESTROY && lease->reusable && stopped_under_us()) {
        log_debug("daytona: the sandbox was stopped under its harness (auto-stop): kept");
        goto out;
    }
    if (disposition != PROVIDER_KEEP_RUNNING && lease->reusable && adopted_elsewhere()) {
        log_debug("daytona: another member resumed the sandbox: left to it");
        goto out;
    }
    if ((unsigned)disposition < ARRAY_SIZE(map))
        r = daytona_release(ks.c, ks.lease.sb.id, map[disposition], err, errlen);
out:
    forget();
    return r;
}
