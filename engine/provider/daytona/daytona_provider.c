/*
 * daytona_provider — settings, capability snapshot, admission and the restart sweep of the
 * `daytona` provider, and its provider_ops (see daytona_provider.h; the keeper half is
 * daytona_keeper.c).
 */
#include "provider/daytona/daytona_provider.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "core/policy.h"
#include "provider/daytona/daytona_api.h"
#include "provider/daytona/daytona_network.h"
#include "provider/daytona/daytona_sandbox.h"

/* Variables a keeper needs to act as this runner's daytona provider. */
static const char *const keeper_vars[] = {
    "AGENT_RUNNER_DAYTONA_API_URL",
    "AGENT_RUNNER_DAYTONA_API_KEY",
    "AGENT_RUNNER_DAYTONA_ORGANIZATION",
    "AGENT_RUNNER_DAYTONA_TARGET",
    "AGENT_RUNNER_DAYTONA_SNAPSHOT",
    "AGENT_RUNNER_DAYTONA_IMAGE",
    "AGENT_RUNNER_DAYTONA_CA_FILE",
    "AGENT_RUNNER_DAYTONA_REUSE_LEASES",
    "AGENT_RUNNER_DAYTONA_NETWORK_RULES",
    "AGENT_RUNNER_DAYTONA_PER_TURN_AUTO_STOP_MINUTES",
    "AGENT_RUNNER_DAYTONA_AUTO_ARCHIVE_MINUTES",
    "AGENT_RUNNER_DAYTONA_AUTO_DELETE_MINUTES",
    "AGENT_RUNNER_DAYTONA_LIFECYCLE",
    "AGENT_RUNNER_DAYTONA_SESSION_TTL_MS",
    "AGENT_RUNNER_DAYTONA_HARNESS_DIR",
    "AGENT_RUNNER_DAYTONA_RUNNER_ID",
    "AGENT_RUNNER_DAYTONA_POOL_SCOPE",
    "AGENT_RUNNER_INSTANCE",
};

static struct {
    bool configured;
    struct daytona_settings s;
    char *env[DAYTONA_KEEPER_ENV_MAX]; /* "NAME=value" for keepers (one holds the key) */
    size_t nenv;
} dp;

const struct daytona_settings *daytona_provider_settings(void)
{
    return dp.configured ? &dp.s : NULL;
}

static void wipe_env(void)
{
    for (size_t i = 0; i < dp.nenv; i++) {
        explicit_bzero(dp.env[i], strlen(dp.env[i]));
        free(dp.env[i]);
    }
    dp.nenv = 0;
}

void daytona_provider_reset(void)
{
    wipe_env();
    daytona_config_wipe(&dp.s.cfg);
    memset(&dp.s, 0, sizeof(dp.s));
    dp.configured = false;
}

static int load_lifecycle(const char *(*get)(const char *), struct daytona_settings *s, char *err,
                          size_t errlen)
{
    const char *mode = get("AGENT_RUNNER_DAYTONA_LIFECYCLE");
    const char *ttl = get("AGENT_RUNNER_DAYTONA_SESSION_TTL_MS");

    s->mode = LIFECYCLE_UNSET;
    if (mode && mode[0] && strcmp(mode, "warm") == 0) {
        s->mode = LIFECYCLE_WARM;
    } else if (mode && mode[0] && strcmp(mode, "per_turn") == 0) {
        s->mode = LIFECYCLE_PER_TURN;
    } else if (mode && mode[0] && strcmp(mode, "inherit") != 0) {
        snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_LIFECYCLE: expected warm, per_turn or inherit");
        return -EINVAL;
    }
    s->idle_ms = 0;
    if (ttl && ttl[0] && util_parse_u64(ttl, 1, POLICY_IDLE_MAX_MS, &s->idle_ms) < 0) {
        snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_SESSION_TTL_MS: expected 1 to %llu",
                 (unsigned long long)POLICY_IDLE_MAX_MS);
        return -EINVAL;
    }
    return 0;
}

static int load_identity(const char *(*get)(const char *), struct daytona_settings *s, char *err,
                         size_t errlen)
{
    const char *id = get("AGENT_RUNNER_DAYTONA_RUNNER_ID");
    const char *inst = get("AGENT_RUNNER_INSTANCE");
    const char *hdir = get("AGENT_RUNNER_DAYTONA_HARNESS_DIR");
    const char *scope = get("AGENT_RUNNER_DAYTONA_POOL_SCOPE");
    char host[64] = "";

    if (id && id[0]) {
        if (strlen(id) >= sizeof(s->runner_id) || !daytona_text_ok(id)) {
            snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_RUNNER_ID: 1 to %zu printable characters",
                     sizeof(s->runner_id) - 1);
            return -EINVAL;
        }
        snprintf(s->runner_id, sizeof(s->runner_id), "%s", id);
    } else {
        if (gethostname(host, sizeof(host) - 1) < 0)
            snprintf(host, sizeof(host), "localhost");
        host[sizeof(host) - 1] = '\0';
        snprintf(s->runner_id, sizeof(s->runner_id), "%.30s@%.31s",
                 inst && inst[0] ? inst : "default", host);
    }
    if (scope && scope[0] && (strlen(scope) >= sizeof(s->pool_scope) || !daytona_text_ok(scope))) {
        snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_POOL_SCOPE: 1 to %zu printable characters",
                 sizeof(s->pool_scope) - 1);
        return -EINVAL;
    }
    snprintf(s->pool_scope, sizeof(s->pool_scope), "%s", scope && scope[0] ? scope : s->runner_id);
    s->shared_scope = strcmp(s->pool_scope, s->runner_id) != 0;
    if (hdir && hdir[0] &&
        (hdir[0] != '/' || strlen(hdir) >= sizeof(s->harness_dir) || !daytona_text_ok(hdir))) {
        snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_HARNESS_DIR: expected an absolute path");
        return -EINVAL;
    }
    snprintf(s->harness_dir, sizeof(s->harness_dir), "%s", hdir ? hdir : "");
    return 0;
}

int daytona_provider_configure(const char *(*get)(const char *name), char *err, size_t errlen)
{
    struct daytona_settings *s = calloc(1, sizeof(*s));
    const char *url = get("AGENT_RUNNER_DAYTONA_API_URL");
    const char *key = get("AGENT_RUNNER_DAYTONA_API_KEY");
    int r;

    if (!s)
        return -ENOMEM;
    daytona_provider_reset();
    if ((!url || !url[0]) && (!key || !key[0])) {
        r = 0; /* not configured: disabled */
        goto out;
    }
    r = daytona_config_load(get, &s->cfg, err, errlen);
    if (r == -ENOENT)
        r = -EINVAL; /* half configured is a mistake, not "disabled" */
    if (r >= 0)
        r = daytona_lease_config_load(get, &s->lc, err, errlen);
    if (r >= 0)
        r = load_lifecycle(get, s, err, errlen);
    if (r >= 0)
        r = load_identity(get, s, err, errlen);
    if (r < 0)
        goto out;
    for (size_t i = 0; i < ARRAY_SIZE(keeper_vars) && dp.nenv < DAYTONA_KEEPER_ENV_MAX; i++) {
        const char *v = get(keeper_vars[i]);

        if (!v || !v[0])
            continue;
        if (asprintf(&dp.env[dp.nenv], "%s=%s", keeper_vars[i], v) < 0) {
            r = -ENOMEM;
            goto out;
        }
        dp.nenv++;
    }
    dp.s = *s;
    dp.configured = true;
out:
    if (r < 0)
        wipe_env();
    daytona_config_wipe(&s->cfg);
    free(s);
    return r;
}

static int dp_configure(const char *(*get)(const char *name), char *err, size_t errlen)
{
    return daytona_provider_configure(get, err, errlen);
}

static bool dp_enabled(void)
{
    return dp.configured;
}

/* The provider snapshot of a lease configuration. */
static void daytona_provider_caps(const struct daytona_lease_config *lc, struct provider_caps *ret)
{
    struct daytona_caps dc;

    daytona_lease_caps(lc, &dc);
    *ret = (struct provider_caps){.remote = true,
                                  .reusable_leases = dc.reusable_leases,
                                  .network_off = dc.network_off,
                                  .network_allowlist = dc.network_allowlist,
                                  .network_allowlist_names = dc.network_allowlist,
                                  .filesystem_modes = false,
                                  .network_keeps_endpoints = dc.network_off};
}

static void dp_snapshot(struct provider_caps *ret)
{
    struct daytona_lease_config none = {0};

    daytona_provider_caps(dp.configured ? &dp.s.lc : &none, ret);
}

static void dp_runner_lifecycle(enum lifecycle_mode *ret_mode, uint64_t *ret_idle_ms)
{
    *ret_mode = dp.configured ? dp.s.mode : LIFECYCLE_UNSET;
    *ret_idle_ms = dp.configured ? dp.s.idle_ms : 0;
}

int daytona_provider_endpoint_host(const char *url, char *ret, size_t len)
{
    CURLU *u = curl_url();
    char *host = NULL;
    int r = -EINVAL;

    if (!u)
        return -ENOMEM;
    if (url && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK && host && host[0] &&
        host[0] != '[' && strlen(host) < len) {
        snprintf(ret, len, "%s", host);
        r = 0;
    }
    curl_free(host);
    curl_url_cleanup(u);
    return r;
}

/*
 * Fail-closed admission: what the run needs from the network rule against the snapshot, and
 * the rule itself must be expressible on Daytona (never silently widened).
 */
static int dp_admit(const struct run_request *req, const struct provider_caps *caps, char *err,
                    size_t errlen)
{
    json_object *allow = jsonx_path(req->root, "sandboxPermission.network.allowlist");
    struct daytona_needs needs = {.network = req->network, .network_strict = req->network_strict};
    struct daytona_caps dc;
    const char *list[64];
    const char *always[1];
    char host[256];
    size_t n = 0, nalways = 0;
    json_object *body;
    int r;

    (void)caps;
    if (!dp.configured) {
        snprintf(err, errlen, "sandbox: provider \"daytona\" is not enabled");
        return AR_E_INVALID_REQUEST;
    }
    if (allow && json_object_is_type(allow, json_type_array))
        n = json_object_array_length(allow);
    needs.nallow = n;
    daytona_lease_caps(&dp.s.lc, &dc);
    r = daytona_lease_check(&dc, &needs, err, errlen);
    if (r < 0 || r == 1 || req->network == NETWORK_ON)
        return r < 0 ? r : 0; /* 1: best effort, the keeper relaxes the rule and says so */
    if (n > ARRAY_SIZE(list)) {
        snprintf(err, errlen,
                 "sandboxPermission.network.allowlist: Daytona enforces at most %d "
                 "entries per list",
                 DAYTONA_MAX_ALLOW);
        return AR_E_INVALID_REQUEST;
    }
    for (size_t i = 0; i < n; i++) {
        list[i] = json_object_get_string(json_object_array_get_idx(allow, i));
        if (!list[i])
            list[i] = "";
    }
    if (req->mc.base_url) {
        if (daytona_provider_endpoint_host(req->mc.base_url, host, sizeof(host)) < 0) {
            snprintf(err, errlen,
                     "modelConnection.endpoint.baseUrl: its host cannot be allowed "
                     "through a Daytona network rule");
            return AR_E_INVALID_REQUEST;
        }
        always[nalways++] = host;
    }
    body = json_object_new_object();
    if (!body)
        return -ENOMEM;
    r = daytona_network_fields(req->network, list, n, always, nalways, body, err, errlen);
    json_object_put(body);
    if (r < 0) {
        char why[256];

        snprintf(why, sizeof(why), "%s", err);
        snprintf(err, errlen, "sandboxPermission.network: %s", why);
        return AR_E_INVALID_REQUEST;
    }
    return 0;
}

static size_t dp_keeper_env(const char **out, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < dp.nenv && n < max; i++)
        out[n++] = dp.env[i];
    return n;
}

/* ---- the restart sweep --------------------------------------------------------------------- */

struct sweep_ctx {
    char (*digests)[33];
    size_t n;
    unsigned adopted;
};

static enum daytona_sweep_action sweep_one(void *ctx, const struct daytona_sandbox *sb)
{
    struct sweep_ctx *s = ctx;
    const char *pool = daytona_sandbox_label(sb, DAYTONA_LABEL_POOL);
    enum daytona_sweep_action a;
    bool live = false;

    for (size_t i = 0; pool && i < s->n && !live; i++)
        live = strcmp(s->digests[i], pool) == 0;
    a = daytona_sweep_default(sb, live);
    if (live) {
        s->adopted++;
        log_info("daytona sweep: adopted sandbox '%s' (%s): its session is live", sb->name,
                 daytona_state_name(sb->state));
    } else if (a == DAYTONA_SWEEP_DELETE) {
        log_info("daytona sweep: deleting orphan sandbox '%s' (%s)", sb->name,
                 daytona_state_name(sb->state));
    } else {
        log_info("daytona sweep: kept stopped sandbox '%s' for a later turn (auto-delete is its "
                 "backstop)",
                 sb->name);
    }
    return a;
}

static int dp_sweep(const struct provider_sweep_owners *live, struct provider_sweep_stats *ret,
                    char *err, size_t errlen)
{
    struct sweep_ctx ctx = {0};
    struct daytona_sweep_stats st = {0};
    struct daytona_client *c = NULL;
    int r;

    if (!dp.configured)
        return 0;
    ctx.digests = calloc(live->n + 1, sizeof(*ctx.digests));
    if (!ctx.digests)
        return -ENOMEM;
    for (size_t i = 0; i < live->n; i++) {
        if (daytona_lease_pool_digest(dp.s.cfg.api_key, dp.s.pool_scope, live->owners[i],
                                      ctx.digests[ctx.n]) == 0)
            ctx.n++;
    }
    r = daytona_client_new(&dp.s.cfg, &c);
    if (r >= 0)
        r = daytona_sweep(c, dp.s.runner_id, DAYTONA_SWEEP_MAX, sweep_one, &ctx, &st);
    if (r < 0)
        snprintf(err, errlen, "%s",
                 c && daytona_client_message(c)[0] ? daytona_client_message(c)
                                                   : daytona_strerror(r));
    ret->seen = st.seen;
    ret->adopted = ctx.adopted;
    ret->kept = st.kept - (st.kept >= ctx.adopted ? ctx.adopted : st.kept);
    ret->deleted = st.deleted;
    ret->failed = st.failed;
    daytona_client_free(c);
    free(ctx.digests);
    return r;
}

const struct provider_ops provider_daytona = {
    .name = "daytona",
    .caps = {.remote = true},
    .acquire = daytona_keeper_acquire,
    .resume = daytona_keeper_resume,
    .release = daytona_keeper_release,
    .start = daytona_keeper_start,
    .stop = daytona_keeper_stop,
    .configure = dp_configure,
    .enabled = dp_enabled,
    .snapshot = dp_snapshot,
    .runner_lifecycle = dp_runner_lifecycle,
    .admit = dp_admit,
    .keeper_env = dp_keeper_env,
    .exit_status = daytona_keeper_exit_status,
    .busy = daytona_keeper_busy,
    .sweep = dp_sweep,
    .poll_fds = daytona_keeper_poll_fds,
    .service = daytona_keeper_service,
};
