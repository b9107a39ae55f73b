#include "sandbox/host.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fstree.h"
#include "base/util.h"
#include "egress/sandbox_net.h"
#include "sandbox/cgroup_host.h"
#include "sandbox/disk.h"

static void add_missing(struct sandbox_host *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void add_missing(struct sandbox_host *h, const char *fmt, ...)
{
    size_t n = strlen(h->missing);
    va_list ap;

    if (n + 3 >= sizeof(h->missing))
        return;
    if (n > 0) {
        memcpy(h->missing + n, "; ", 3);
        n += 2;
    }
    va_start(ap, fmt);
    vsnprintf(h->missing + n, sizeof(h->missing) - n, fmt, ap);
    va_end(ap);
}

/* mkdir -p path with mode, and the mode set even when it existed (a folder we own). */
static int traversable_dir(const char *path, char *err, size_t errlen)
{
    int r = util_mkdir_p(path, 0711);

    if (r == 0 && chmod(path, 0711) == -1)
        r = -errno;
    if (r < 0)
        snprintf(err, errlen, "cannot prepare the folder '%.200s': %s", path, strerror(-r));
    return r;
}

static int folders(struct sandbox_host *h, const char *state_dir, char *err, size_t errlen)
{
    char envs[PATH_MAX], real[PATH_MAX];
    int r;

    if ((size_t)snprintf(envs, sizeof(envs), "%s/envs", state_dir) >= sizeof(h->envs))
        return -ENAMETOOLONG;
    r = traversable_dir(state_dir, err, errlen);
    if (r == 0)
        r = traversable_dir(envs, err, errlen);
    if (r < 0)
        return r;
    /* mountinfo names the resolved path: the sweep compares against it */
    if (!realpath(envs, real) || strlen(real) >= sizeof(h->envs))
        memcpy(real, envs, strlen(envs) + 1);
    memcpy(h->envs, real, strlen(real) + 1);
    return 0;
}

static void probe_network(struct sandbox_host *h)
{
    char why[256] = "";
    int fd;

    /* as root, or (an ordinary user) through a user namespace of the runner's own */
    fd = sandbox_net_anchor(why, sizeof(why));
    if (fd < 0) {
        snprintf(h->net_why, sizeof(h->net_why), "%s", why[0] ? why : strerror(-fd));
        return;
    }
    h->anchor_fd = fd;
    h->net_ok = true;
}

/* What the configured limits lack here, from the probes' results. */
static void collect_missing(struct sandbox_host *h, const char *disk_why)
{
    const struct sandbox_config *c = &h->cfg;
    unsigned can = h->cg.can;
    size_t before = strlen(h->missing);

    if (c->pids_max && !(can & SANDBOX_CG_PIDS))
        add_missing(h, "pids");
    if (c->memory_max && !(can & SANDBOX_CG_MEMORY))
        add_missing(h, "memory");
    else if (c->memory_max && !(can & SANDBOX_CG_SWAP))
        add_missing(h, "memory without swap");
    if (c->cpu_millis && !(can & SANDBOX_CG_CPU))
        add_missing(h, "cpu");
    if (strlen(h->missing) != before && h->cg.missing[0])
        add_missing(h, "cgroups: %s", h->cg.missing);
    if (c->disk_max && !h->disk_ok)
        add_missing(h, "disk (%s)", disk_why);
}

int sandbox_host_init(struct sandbox_host *h, const char *instance, const char *state_dir,
                      uint32_t slots, char *err, size_t errlen)
{
    char why[512] = "";
    int r;

    memset(h, 0, sizeof(*h));
    h->anchor_fd = -1;
    snprintf(h->instance, sizeof(h->instance), "%s", instance);
    r = sandbox_config_load(&h->cfg, err, errlen);
    if (r < 0)
        return r;
    r = sandbox_uid_range_init(h->cfg.uid_base, slots, &h->uids, why, sizeof(why));
    if (r < 0) {
        snprintf(err, errlen, "AGENT_RUNNER_SANDBOX_UID_BASE=%u for %u session slots: %s",
                 (unsigned)h->cfg.uid_base, (unsigned)slots, why);
        return r;
    }
    r = folders(h, state_dir, err, errlen);
    if (r < 0)
        return r;
    r = sandbox_cgroup_probe(instance, &h->cg, err, errlen);
    if (r < 0)
        return r;
    why[0] = '\0';
    if (h->cfg.disk_max)
        h->disk_ok = sandbox_disk_probe(h->envs, why, sizeof(why)) == 0;
    collect_missing(h, why);
    probe_network(h);
    if (h->cfg.require_limits && h->missing[0]) {
        snprintf(err, errlen, "AGENT_RUNNER_REQUIRE_LIMITS=true but this host cannot enforce: %s",
                 h->missing);
        sandbox_host_release(h, false);
        return -EINVAL;
    }
    return 0;
}

void sandbox_host_release(struct sandbox_host *h, bool clean_stop)
{
    if (h->anchor_fd >= 0)
        close(h->anchor_fd);
    h->anchor_fd = -1;
    if (clean_stop)
        (void)sandbox_cgroup_host_remove(&h->cg);
}

/* The limits sandbox_cgroup_create writes for an environment. */
static void sandbox_host_cgroup_limits(const struct sandbox_host *h,
                                       struct sandbox_cgroup_limits *ret)
{
    ret->pids_max = h->cfg.pids_max;
    ret->memory_max = sandbox_config_memory_ceiling(&h->cfg);
    ret->cpu_millis = h->cfg.cpu_millis;
}

uint64_t sandbox_host_nproc(const struct sandbox_host *h)
{
    if (h->uids.shared || h->cfg.pids_max == 0)
        return 0;
    return (h->cg.can & SANDBOX_CG_PIDS) ? 2 * h->cfg.pids_max : h->cfg.pids_max;
}

int sandbox_host_env_prepare(const struct sandbox_host *h, uint32_t slot, const char *env_dir,
                             struct sandbox_env *ret, char *err, size_t errlen)
{
    struct sandbox_env e;
    char ws[PATH_MAX];
    int r;

    memset(&e, 0, sizeof(e));
    r = sandbox_uid_for_slot(&h->uids, slot, &e.ids);
    if (r < 0) {
        snprintf(err, errlen, "sandbox: slot %u has no host uid in the configured range",
                 (unsigned)slot);
        return r;
    }
    e.nproc = sandbox_host_nproc(h);
    if ((!e.ids.shared && chown(env_dir, e.ids.uid, e.ids.gid) == -1) ||
        chmod(env_dir, 0700) == -1) {
        r = -errno;
        snprintf(err, errlen, "sandbox: cannot give the environment folder to uid %u: %s",
                 (unsigned)e.ids.uid, strerror(-r));
        return r;
    }
    if (h->cfg.disk_max && h->disk_ok) {
        if ((size_t)snprintf(ws, sizeof(ws), "%s/workspace", env_dir) >= sizeof(ws))
            return -ENAMETOOLONG;
        r = sandbox_disk_mount(ws, h->instance, h->cfg.disk_max,
                               sandbox_config_disk_inodes(&h->cfg), e.ids.uid, e.ids.gid, err,
                               errlen);
        if (r < 0)
            return r;
    }
    *ret = e;
    return 0;
}

int sandbox_host_env_seal(const struct sandbox_host *h, const char *env_dir,
                          struct sandbox_env *env, char *err, size_t errlen)
{
    struct sandbox_cgroup_limits lim;
    const char *id = strrchr(env_dir, '/');
    char ws[PATH_MAX];
    int r;

    if ((size_t)snprintf(ws, sizeof(ws), "%s/workspace", env_dir) >= sizeof(ws) || !id)
        return -ENAMETOOLONG;
    r = sandbox_uid_give_workspace(ws, &env->ids);
    if (r < 0) {
        snprintf(err, errlen, "sandbox: cannot give the workspace to uid %u: %s",
                 (unsigned)env->ids.uid, strerror(-r));
        return r;
    }
    memset(&env->cg, 0, sizeof(env->cg));
    if (h->cg.n == 0 || h->cg.can == 0)
        return 0; /* no usable cgroup here (/readyz says so) */
    sandbox_host_cgroup_limits(h, &lim);
    lim.cpu_millis = 0; /* sandbox_host_env_throttle, once the harness has started */
    return sandbox_cgroup_create(&h->cg, id + 1, &lim, &env->cg, err, errlen);
}

int sandbox_host_env_throttle(const struct sandbox_host *h, const char *env_dir, char *err,
                              size_t errlen)
{
    struct sandbox_cgroup_limits lim;
    struct sandbox_cgroup cg;
    const char *id = env_dir ? strrchr(env_dir, '/') : NULL;
    int r;

    if (!h || !(h->cg.can & SANDBOX_CG_CPU) || h->cfg.cpu_millis == 0)
        return 0;
    r = id ? sandbox_cgroup_for_id(&h->cg, id + 1, &cg) : -EINVAL;
    if (r < 0) {
        snprintf(err, errlen, "cgroup: no cgroup for '%s'", env_dir ? env_dir : "");
        return r;
    }
    sandbox_host_cgroup_limits(h, &lim);
    return sandbox_cgroup_apply_limits(&cg, &lim, SANDBOX_CG_CPU, NULL, err, errlen);
}

static void note(int *first, int r)
{
    if (r < 0 && *first == 0)
        *first = r;
}

int sandbox_host_release_env(const struct sandbox_cgroup *cg, const char *env_dir)
{
    char ws[PATH_MAX];
    int first = 0;

    if (cg && cg->n) {
        note(&first, sandbox_cgroup_kill(cg, SANDBOX_HOST_KILL_MS));
        note(&first, sandbox_cgroup_remove(cg));
    }
    if (env_dir && env_dir[0] &&
        (size_t)snprintf(ws, sizeof(ws), "%s/workspace", env_dir) < sizeof(ws))
        note(&first, sandbox_disk_unmount(ws));
    return first;
}

int sandbox_host_remove_env(const struct sandbox_cgroup *cg, const char *env_dir)
{
    int first = sandbox_host_release_env(cg, env_dir);

    if (env_dir && env_dir[0])
        note(&first, fstree_remove(env_dir));
    return first;
}

int sandbox_host_reclaim(const struct sandbox_host *h, const char *env_dir)
{
    struct sandbox_cgroup cg;
    const char *id = strrchr(env_dir, '/');

    if (!h || !id || sandbox_cgroup_for_id(&h->cg, id + 1, &cg) < 0)
        return sandbox_host_remove_env(NULL, env_dir);
    return sandbox_host_remove_env(&cg, env_dir);
}

int sandbox_host_sweep(const struct sandbox_host *h, bool (*keep)(const char *id, void *ctx),
                       void *ctx)
{
    struct dirent *de;
    int n = 0, first = 0, r;
    DIR *d;

    /* processes first (they may hold the mounts), then the mounts, then the folders */
    r = sandbox_cgroup_sweep(&h->cg, keep, ctx, SANDBOX_HOST_KILL_MS);
    note(&first, r < 0 ? r : 0);
    r = sandbox_disk_sweep(h->instance, h->envs, keep, ctx);
    note(&first, r < 0 ? r : 0);
    d = opendir(h->envs);
    if (!d)
        return first ? first : (errno == ENOENT ? 0 : -errno);
    while ((de = readdir(d)) != NULL) {
        char path[PATH_MAX];

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (keep && keep(de->d_name, ctx))
            continue;
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", h->envs, de->d_name) >= sizeof(path))
            continue;
        r = sandbox_host_reclaim(h, path);
        note(&first, r);
        n += r == 0;
    }
    closedir(d);
    return first ? first : n;
}

/* "2G" style text of bytes, for messages. */
static void size_text(uint64_t b, char *out, size_t len)
{
    static const char units[] = "KMGT";
    int u = -1;

    while (b >= 1024 && b % 1024 == 0 && u < 3) {
        b /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(out, len, "%llu bytes", (unsigned long long)b);
    else
        snprintf(out, len, "%llu %ciB", (unsigned long long)b, units[u]);
}

int sandbox_host_trip_message(const struct sandbox_host *h, const char *code, const char **ret_code,
                              char *msg, size_t msglen)
{
    char size[32];

    if (!h || !code)
        return 0;
    if (strcmp(code, sandbox_cgroup_trip_code(SANDBOX_TRIP_MEMORY)) == 0) {
        size_text(h->cfg.memory_max, size, sizeof(size));
        snprintf(msg, msglen,
                 "the sandbox ran out of memory: a process was killed at its memory limit (%s)",
                 size);
        *ret_code = sandbox_cgroup_trip_code(SANDBOX_TRIP_MEMORY);
    } else if (strcmp(code, sandbox_cgroup_trip_code(SANDBOX_TRIP_PIDS)) == 0) {
        snprintf(msg, msglen, "the sandbox reached its limit of %llu processes",
                 (unsigned long long)h->cfg.pids_max);
        *ret_code = sandbox_cgroup_trip_code(SANDBOX_TRIP_PIDS);
    } else if (strcmp(code, "sandbox_disk_limit") == 0) {
        size_text(h->cfg.disk_max, size, sizeof(size));
        snprintf(msg, msglen, "the sandbox's workspace is full (its disk limit is %s)", size);
        *ret_code = "sandbox_disk_limit";
    } else {
        return 0;
    }
    return 1;
}

int sandbox_host_tripped(const struct sandbox_host *h, const char *env_dir, const char **ret_code,
                         char *msg, size_t msglen)
{
    const char *id = strrchr(env_dir, '/');
    enum sandbox_cgroup_trip trip = SANDBOX_TRIP_NONE;
    struct sandbox_cgroup cg;
    char ws[PATH_MAX];

    if (!h || !id)
        return 0;
    if (sandbox_cgroup_for_id(&h->cg, id + 1, &cg) == 0)
        trip = sandbox_cgroup_tripped(&cg);
    if (trip != SANDBOX_TRIP_NONE)
        return sandbox_host_trip_message(h, sandbox_cgroup_trip_code(trip), ret_code, msg, msglen);
    if (!h->cfg.disk_max || !h->disk_ok ||
        (size_t)snprintf(ws, sizeof(ws), "%s/workspace", env_dir) >= sizeof(ws) ||
        sandbox_disk_is_mounted(ws) != 1 || sandbox_disk_full(ws) != 1)
        return 0;
    return sandbox_host_trip_message(h, "sandbox_disk_limit", ret_code, msg, msglen);
}

static void add_u64(json_object *o, const char *key, uint64_t v)
{
    json_object_object_add(o, key, json_object_new_int64((int64_t)v));
}

json_object *sandbox_host_describe(const struct sandbox_host *h)
{
    json_object *o = json_object_new_object(), *id = json_object_new_object();
    json_object *lim = json_object_new_object(), *on = json_object_new_array();
    json_object *net = json_object_new_object();
    const struct sandbox_config *c = &h->cfg;

    json_object_object_add(id, "mode",
                           json_object_new_string(h->uids.shared ? "shared" : "per-environment"));
    add_u64(id, h->uids.shared ? "uid" : "uidBase",
            h->uids.shared ? h->uids.runner_uid : h->uids.base);
    json_object_object_add(o, "identity", id);
    add_u64(lim, "pidsMax", c->pids_max);
    add_u64(lim, "memoryBytes", c->memory_max);
    json_object_object_add(lim, "cpus", json_object_new_double(c->cpu_millis / 1000.0));
    add_u64(lim, "diskBytes", c->disk_max);
    add_u64(lim, "tmpBytes", c->tmp_max);
    add_u64(lim, "homeBytes", c->home_max);
    json_object_object_add(o, "limits", lim);
    if (c->pids_max && (h->cg.can & SANDBOX_CG_PIDS))
        json_object_array_add(on, json_object_new_string("pids"));
    if (c->memory_max && (h->cg.can & SANDBOX_CG_MEMORY))
        json_object_array_add(on, json_object_new_string("memory"));
    if (c->memory_max && (h->cg.can & SANDBOX_CG_SWAP))
        json_object_array_add(on, json_object_new_string("swap"));
    if (c->cpu_millis && (h->cg.can & SANDBOX_CG_CPU))
        json_object_array_add(on, json_object_new_string("cpu"));
    if (c->disk_max && h->disk_ok)
        json_object_array_add(on, json_object_new_string("disk"));
    json_object_array_add(on, json_object_new_string("tmp"));
    json_object_array_add(on, json_object_new_string("home"));
    json_object_object_add(o, "enforced", on);
    json_object_object_add(o, "notEnforced", json_object_new_string(h->missing));
    json_object_object_add(net, "namespace", json_object_new_boolean(h->net_ok));
    json_object_object_add(net, "privateEgress", json_object_new_boolean(c->private_egress));
    if (!h->net_ok)
        json_object_object_add(net, "unavailable", json_object_new_string(h->net_why));
    json_object_object_add(o, "network", net);
    return o;
}
