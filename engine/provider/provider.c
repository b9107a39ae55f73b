/* provider — the registry of sandbox providers and what they share (provider.h). */
#include "provider/provider.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "sandbox/config.h"
#include "session/pool.h"
#include "telemetry/metrics.h"

#define REPORT_FILE "lease.json"
#define REPORT_MAX (256u * 1024)
#define SWEEP_OWNERS_MAX 4096

/* Providers of the wire protocol this runner knows of but cannot use. */
static const char *const known_disabled[] = {"e2b"};

static bool enabled(const struct provider_ops *p)
{
    return !p->enabled || p->enabled();
}

bool provider_known(const char *name)
{
    for (size_t i = 0; name && i < provider_registry_len; i++)
        if (strcmp(provider_registry[i]->name, name) == 0)
            return true;
    for (size_t i = 0; name && i < ARRAY_SIZE(known_disabled); i++)
        if (strcmp(known_disabled[i], name) == 0)
            return true;
    return false;
}

const struct provider_ops *provider_get(const char *name)
{
    for (size_t i = 0; name && i < provider_registry_len; i++)
        if (strcmp(provider_registry[i]->name, name) == 0 && enabled(provider_registry[i]))
            return provider_registry[i];
    return NULL;
}

size_t provider_count(void)
{
    size_t n = 0;

    for (size_t i = 0; i < provider_registry_len; i++)
        n += enabled(provider_registry[i]);
    return n;
}

const struct provider_ops *provider_at(size_t i)
{
    for (size_t k = 0; k < provider_registry_len; k++) {
        if (!enabled(provider_registry[k]))
            continue;
        if (i == 0)
            return provider_registry[k];
        i--;
    }
    return NULL;
}

int provider_configure_all(const char *(*get)(const char *name), char *err, size_t errlen)
{
    for (size_t i = 0; i < provider_registry_len; i++) {
        int r;

        if (!provider_registry[i]->configure)
            continue;
        r = provider_registry[i]->configure(get, err, errlen);
        if (r < 0)
            return r;
    }
    return 0;
}

json_object *provider_enabled_names(void)
{
    json_object *a = json_object_new_array();

    for (size_t i = 0; a && i < provider_count(); i++)
        json_object_array_add(a, json_object_new_string(provider_at(i)->name));
    return a;
}

void provider_caps_of(const struct provider_ops *p, struct provider_caps *ret)
{
    if (p->snapshot)
        p->snapshot(ret);
    else
        *ret = p->caps;
}

enum provider_disposition provider_disposition(bool reusable, enum teardown_reason reason)
{
    if (reason == TEARDOWN_NONE)
        return reusable ? PROVIDER_KEEP_RUNNING : PROVIDER_DESTROY;
    if (!reusable)
        return PROVIDER_DESTROY;
    switch (reason) {
    case TEARDOWN_OWNER_MOVED: /* another member resumed this sandbox: leave it to it */
        return PROVIDER_KEEP_RUNNING;
    case TEARDOWN_IDLE_EXPIRY:
    case TEARDOWN_APPROVAL_EXPIRY:
    case TEARDOWN_CAPACITY_EVICTION:
    case TEARDOWN_SHUTDOWN_IDLE:
    case TEARDOWN_SESSION_INCOMPATIBLE:
    case TEARDOWN_CONTINUITY_INVALID:
        return PROVIDER_STOP_AND_RETAIN;
    default:
        return PROVIDER_DESTROY;
    }
}

/* Drop what a lease owns (its report). */
static void provider_lease_release(struct provider_lease *lease)
{
    if (!lease)
        return;
    json_object_put(lease->report);
    lease->report = NULL;
}

json_object *provider_sandbox_description(const struct sandbox_plan *plan, const char *workspace,
                                          const struct sandbox_config *limits)
{
    json_object *sb = json_object_new_object();

    if (!sb)
        return NULL;
    json_object_object_add(sb, "workspace", json_object_new_string(workspace));
    if (limits) {
        json_object *lim = json_object_new_object();

        json_object_object_add(lim, "tmpBytes", json_object_new_int64((int64_t)limits->tmp_max));
        json_object_object_add(lim, "homeBytes", json_object_new_int64((int64_t)limits->home_max));
        json_object_object_add(sb, "limits", lim);
    }
    json_object_object_add(sb, "roBinds", json_object_get(plan->ro_binds));
    json_object_object_add(sb, "files", json_object_get(plan->files));
    json_object_object_add(sb, "env", json_object_get(plan->env));
    json_object_object_add(sb, "argv", json_object_get(plan->argv));
    json_object_object_add(sb, "cwd", json_object_new_string(SANDBOX_WORKSPACE));
    return sb;
}

int provider_lease_begin(const struct provider_ops *p, const struct keeper_spec *spec,
                         struct pool *pool, struct provider_lease *ret, char *err, size_t errlen)
{
    struct provider_lease l;
    int r;

    memset(&l, 0, sizeof(l));
    r = p->acquire(spec, &l, err, errlen);
    if (r < 0)
        return r;
    if (l.outcome == PROVIDER_LEASE_REPLACEMENT)
        log_info("sandbox lease: replacement (%s) in %ld ms",
                 provider_replacement_reason_name(l.reason), l.acquire_ms);
    else
        log_info("sandbox lease: %s in %ld ms", provider_lease_outcome_name(l.outcome),
                 l.acquire_ms);
    if (pool)
        metrics_lease(pool_metrics(pool), (unsigned)l.outcome, (unsigned)l.reason, l.acquire_ms);
    *ret = l;
    return 0;
}

void provider_lease_end(const struct provider_ops *p, struct provider_lease *lease,
                        enum teardown_reason why, struct pool *pool)
{
    enum provider_disposition d = provider_disposition(lease->reusable, why);
    char err[256] = "";
    int r;

    if (d == PROVIDER_KEEP_RUNNING && why != TEARDOWN_OWNER_MOVED)
        d = PROVIDER_STOP_AND_RETAIN;
    r = p->release(lease, d, err, sizeof(err));
    if (r < 0)
        log_warn("sandbox release (%s) failed: %s", provider_disposition_name(d), err);
    else
        log_info("sandbox released: %s (%s)", provider_disposition_name(d),
                 teardown_reason_name(why));
    if (r >= 0 && pool)
        metrics_release(pool_metrics(pool), (unsigned)d);
    provider_lease_release(lease);
}

int provider_lease_describe(json_object *sandbox, const struct provider_lease_request *lr)
{
    static const char *const modes[] = {"on", "off", "allowlist"};
    json_object *l = json_object_new_object();

    if (!l)
        return -ENOMEM;
    json_object_object_add(l, "owner", json_object_new_string(lr->owner ? lr->owner : ""));
    json_object_object_add(l, "hadLease", json_object_new_boolean(lr->had_lease));
    json_object_object_add(l, "network", json_object_new_string(modes[(unsigned)lr->network % 3u]));
    json_object_object_add(l, "networkStrict", json_object_new_boolean(lr->network_strict));
    if (lr->allow)
        json_object_object_add(l, "allow", json_object_get(lr->allow));
    if (lr->endpoint)
        json_object_object_add(l, "endpoint", json_object_new_string(lr->endpoint));
    json_object_object_add(sandbox, "lease", l);
    return 0;
}

int provider_lease_owner(const char *pool_key, const char *env_dir, char *ret, size_t len)
{
    const char *base;
    int n;

    if (pool_key && pool_key[0]) {
        n = snprintf(ret, len, "%s", pool_key);
    } else {
        base = env_dir ? strrchr(env_dir, '/') : NULL;
        base = base ? base + 1 : env_dir;
        if (!base || !base[0])
            return -EINVAL;
        n = snprintf(ret, len, "env:%s", base);
    }
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int provider_report_write(const char *env_dir, json_object *report)
{
    char path[512];
    const char *text;

    if (!report)
        return 0;
    if ((size_t)snprintf(path, sizeof(path), "%s/" REPORT_FILE, env_dir) >= sizeof(path))
        return -ENAMETOOLONG;
    text = jsonx_text(report, NULL);
    if (!text || strlen(text) > REPORT_MAX)
        return -E2BIG;
    return util_write_file(path, text, strlen(text), 0600);
}

int provider_report_read(const char *env_dir, json_object **ret)
{
    char path[512], *data = NULL;
    size_t len = 0;
    json_object *doc;
    int r;

    *ret = NULL;
    if ((size_t)snprintf(path, sizeof(path), "%s/" REPORT_FILE, env_dir) >= sizeof(path))
        return -ENAMETOOLONG;
    r = util_read_file(path, REPORT_MAX, &data, &len);
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return r;
    doc = json_tokener_parse(data);
    free(data);
    if (!doc || !json_object_is_type(doc, json_type_object)) {
        json_object_put(doc);
        return -EBADMSG;
    }
    *ret = doc;
    return 0;
}

/* ---- the start-up sweep (a child of the master) ------------------------------------------ */

static void sweep_child(struct pool *p)
{
    struct pool_info info;
    char **owners;
    size_t n = 0;
    int devnull;

    /* the FastCGI socket and the master's signals are not ours */
    devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull >= 0) {
        dup2(devnull, STDIN_FILENO);
        close(devnull);
    }
    pool_get_info(p, &info);
    owners = calloc(info.nslots < SWEEP_OWNERS_MAX ? info.nslots + 1 : SWEEP_OWNERS_MAX,
                    sizeof(*owners));
    if (!owners)
        _exit(1);
    for (uint32_t i = 0; i < info.nslots && n < SWEEP_OWNERS_MAX; i++) {
        struct pool_session *s = malloc(sizeof(*s));
        char owner[POOL_KEY_MAX + 8];

        if (!s)
            break;
        if (pool_session_peek(p, i, s) &&
            provider_lease_owner(s->key, s->env_dir, owner, sizeof(owner)) == 0)
            owners[n++] = strdup(owner);
        free(s);
    }
    for (size_t i = 0; i < provider_count(); i++) {
        const struct provider_ops *pr = provider_at(i);
        struct provider_sweep_owners live = {(const char *const *)owners, n};
        struct provider_sweep_stats st = {0};
        char err[256] = "";
        int r;

        if (!pr->sweep)
            continue;
        r = pr->sweep(&live, &st, err, sizeof(err));
        metrics_sweep(pool_metrics(p), SWEEP_ADOPTED, st.adopted);
        metrics_sweep(pool_metrics(p), SWEEP_KEPT, st.kept);
        metrics_sweep(pool_metrics(p), SWEEP_DELETED, st.deleted);
        metrics_sweep(pool_metrics(p), SWEEP_FAILED, st.failed);
        if (r < 0)
            log_warn("start-up sweep of '%s' failed: %s", pr->name, err);
        else
            log_info("start-up sweep of '%s': %u seen, %u adopted, %u kept, %u deleted, "
                     "%u failed",
                     pr->name, st.seen, st.adopted, st.kept, st.deleted, st.failed);
    }
    for (size_t i = 0; i < n; i++)
        free(owners[i]);
    free(owners);
}

pid_t provider_startup_sweep(struct pool *p, int64_t grace_ms)
{
    bool any = false;
    pid_t pid;

    for (size_t i = 0; i < provider_count(); i++)
        any = any || provider_at(i)->sweep;
    if (!any || !p)
        return 0;
    pid = fork();
    if (pid == -1)
        return -errno;
    if (pid == 0) {
        sigset_t none;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGTERM, SIG_DFL);
        util_sleep_ms(grace_ms);
        sweep_child(p);
        _exit(0);
    }
    return pid;
}
