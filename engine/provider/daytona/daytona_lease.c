#include "provider/daytona/daytona_lease.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "base/util.h"
#include "provider/provider.h"

/* ---- configuration and capabilities --------------------------------------------------- */

static int opt_bool(const char *(*get)(const char *), const char *name, bool *v, char *err,
                    size_t errlen)
{
    const char *s = get(name);

    if (!s || !s[0])
        return 0;
    if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0) {
        *v = true;
    } else if (strcmp(s, "false") == 0 || strcmp(s, "0") == 0) {
        *v = false;
    } else {
        snprintf(err, errlen, "%s: expected true or false", name);
        return -EINVAL;
    }
    return 0;
}

static int opt_minutes(const char *(*get)(const char *), const char *name, int *v, char *err,
                       size_t errlen)
{
    const char *s = get(name);
    uint64_t m;

    if (!s || !s[0])
        return 0;
    if (util_parse_u64(s, 0, 43200, &m) < 0) {
        snprintf(err, errlen, "%s: expected minutes, 0 to 43200", name);
        return -EINVAL;
    }
    *v = (int)m;
    return 0;
}

int daytona_lease_config_load(const char *(*get)(const char *name),
                              struct daytona_lease_config *ret, char *err, size_t errlen)
{
    struct daytona_lease_config c = {
        .reuse_leases = true,
        .network_rules = true,
        .per_turn_auto_stop_min = 15,
        .auto_archive_min = 0,
        .auto_delete_min = 1440,
    };
    int r;

    r = opt_bool(get, "AGENT_RUNNER_DAYTONA_REUSE_LEASES", &c.reuse_leases, err, errlen);
    if (r >= 0)
        r = opt_bool(get, "AGENT_RUNNER_DAYTONA_NETWORK_RULES", &c.network_rules, err, errlen);
    if (r >= 0)
        r = opt_minutes(get, "AGENT_RUNNER_DAYTONA_PER_TURN_AUTO_STOP_MINUTES",
                        &c.per_turn_auto_stop_min, err, errlen);
    if (r >= 0)
        r = opt_minutes(get, "AGENT_RUNNER_DAYTONA_AUTO_ARCHIVE_MINUTES", &c.auto_archive_min, err,
                        errlen);
    if (r >= 0)
        r = opt_minutes(get, "AGENT_RUNNER_DAYTONA_AUTO_DELETE_MINUTES", &c.auto_delete_min, err,
                        errlen);
    if (r < 0)
        return r;
    if (c.per_turn_auto_stop_min == 0) {
        /* 0 would mean "never stop": a crashed runner would leak a billing sandbox */
        snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_PER_TURN_AUTO_STOP_MINUTES: must be > 0");
        return -EINVAL;
    }
    *ret = c;
    return 0;
}

void daytona_lease_caps(const struct daytona_lease_config *lc, struct daytona_caps *ret)
{
    struct daytona_caps c = {
        .reusable_leases = lc->reuse_leases,
        .network_off = lc->network_rules,
        .network_allowlist = lc->network_rules,
        .auto_stop = true,
        .process_sessions = true,
        .allowlist_max = lc->network_rules ? DAYTONA_MAX_ALLOW : 0,
    };

    *ret = c;
}

int daytona_lease_check(const struct daytona_caps *caps, const struct daytona_needs *n, char *err,
                        size_t errlen)
{
    const char *missing = NULL;

    if (!caps->process_sessions) {
        snprintf(err, errlen,
                 "sandbox_capability_missing: process sessions (the harness "
                 "cannot be reached)");
        return AR_E_UNAVAILABLE;
    }
    if (!caps->auto_stop) {
        snprintf(err, errlen,
                 "sandbox_capability_missing: auto-stop (a crashed runner would "
                 "leak the sandbox)");
        return AR_E_UNAVAILABLE;
    }
    if (n->network == NETWORK_OFF && !caps->network_off)
        missing = "network off";
    else if (n->network == NETWORK_ALLOWLIST && !caps->network_allowlist)
        missing = "network allowlist";
    else if (n->network == NETWORK_ALLOWLIST && n->nallow > 2 * (size_t)caps->allowlist_max)
        missing = "an allowlist that long";
    if (!missing)
        return 0;
    if (!n->network_strict)
        return 1;
    snprintf(err, errlen,
             "sandbox_capability_missing: %s (sandboxPermission.network; the "
             "daytona provider of this runner cannot enforce it)",
             missing);
    return AR_E_UNAVAILABLE;
}

/* ---- lifecycle ------------------------------------------------------------------------ */

int daytona_lease_idle_minutes(uint64_t idle_ms)
{
    uint64_t m = (idle_ms + 59999) / 60000;

    if (m == 0)
        m = 1;
    if (m > 24 * 60)
        m = 24 * 60;
    return (int)m;
}

int daytona_lease_lifecycle(const struct daytona_caps *caps, const struct daytona_lease_config *lc,
                            const struct lifecycle_input *in, struct daytona_lifecycle *ret,
                            char *err, size_t errlen)
{
    struct lifecycle_input li = *in;
    struct daytona_lifecycle out;
    int r;

    memset(&out, 0, sizeof(out));
    li.provider_remote = true;
    li.provider_reusable_leases = caps->reusable_leases;
    r = policy_lifecycle(&li, &out.policy, err, errlen);
    if (r < 0)
        return r;
    /* an admitted warm session whose provider no longer leases: per-turn, never a failure */
    if (out.policy.mode == LIFECYCLE_WARM && !caps->reusable_leases) {
        out.policy.mode = LIFECYCLE_PER_TURN;
        out.downgraded = true;
    }
    if (out.policy.mode == LIFECYCLE_WARM) {
        out.reusable = true;
        out.auto_stop_min = daytona_lease_idle_minutes(out.policy.idle_ms);
        out.auto_archive_min = lc->auto_archive_min;
        out.auto_delete_min = lc->auto_delete_min;
    } else {
        out.reusable = false;
        out.auto_stop_min = lc->per_turn_auto_stop_min;
        out.auto_archive_min = DAYTONA_INTERVAL_UNSET; /* an ephemeral sandbox never archives */
        out.auto_delete_min = 0;                       /* ephemeral: a stop deletes it */
    }
    *ret = out;
    return 0;
}

bool daytona_lease_downgrade(struct daytona_lifecycle *lc, const struct daytona_sandbox *sb)
{
    const char *lease = daytona_sandbox_label(sb, DAYTONA_LABEL_LEASE);

    if (lc->policy.mode != LIFECYCLE_WARM)
        return false;
    if (sb->auto_delete_min != 0 && !(lease && strcmp(lease, "per_turn") == 0))
        return false;
    lc->policy.mode = LIFECYCLE_PER_TURN;
    lc->reusable = false;
    lc->downgraded = true;
    return true;
}

/* ---- resume --------------------------------------------------------------------------- */

/* The error text of a sandbox whose container is gone (Paperclip expires such a lease). */
static bool daytona_lease_container_gone(const char *error_reason)
{
    return error_reason && (strncmp(error_reason, "not found:", 10) == 0 ||
                            strstr(error_reason, "No such container"));
}

static void replace(struct daytona_resume_decision *d, enum daytona_lease_reason why,
                    bool delete_old)
{
    d->action = DAYTONA_RESUME_REPLACE;
    d->reason = why;
    d->delete_old = delete_old;
}

void daytona_lease_decide(const struct daytona_observation *o, struct daytona_resume_decision *ret)
{
    struct daytona_resume_decision d = {0};

    if (o->lookup == -ENOENT) {
        replace(&d, DAYTONA_REASON_NOT_FOUND, false);
    } else if (o->lookup < 0) {
        if (o->retries < DAYTONA_LOOKUP_RETRIES)
            d.action = DAYTONA_RESUME_RETRY;
        else
            replace(&d, DAYTONA_REASON_RESUME_FAILED, false); /* unreachable: backstops reap */
    } else if (!o->identity_ok) {
        replace(&d, DAYTONA_REASON_IDENTITY_MISMATCH, false); /* not ours: never delete */
    } else {
        switch (o->state) {
        case DAYTONA_STATE_STARTED:
            d.action = DAYTONA_RESUME_REUSE;
            break;
        case DAYTONA_STATE_STOPPED:
        case DAYTONA_STATE_ARCHIVED:
        case DAYTONA_STATE_PAUSED:
            if (o->attempts < DAYTONA_RESUME_ATTEMPTS)
                d.action = DAYTONA_RESUME_START;
            else
                replace(&d, DAYTONA_REASON_RESUME_FAILED, true);
            break;
        case DAYTONA_STATE_ERROR:
        case DAYTONA_STATE_BUILD_FAILED:
            if (daytona_lease_container_gone(o->error_reason))
                replace(&d, DAYTONA_REASON_EXPIRED, true);
            else if (o->recoverable && o->state == DAYTONA_STATE_ERROR &&
                     o->attempts < DAYTONA_RESUME_ATTEMPTS)
                d.action = DAYTONA_RESUME_RECOVER;
            else
                replace(&d, DAYTONA_REASON_RESUME_FAILED, true);
            break;
        case DAYTONA_STATE_DESTROYED:
        case DAYTONA_STATE_DESTROYING:
            replace(&d, DAYTONA_REASON_EXPIRED, false);
            break;
        default:
            if (daytona_state_transitional(o->state) && !o->deadline_passed)
                d.action = DAYTONA_RESUME_WAIT;
            else
                replace(&d, DAYTONA_REASON_RESUME_FAILED, true);
            break;
        }
    }
    *ret = d;
}

const char *daytona_lease_outcome_name(enum daytona_lease_outcome o)
{
    switch (o) {
    case DAYTONA_LEASE_CREATED:
        return "created";
    case DAYTONA_LEASE_RESUMED:
        return "resumed";
    case DAYTONA_LEASE_REPLACEMENT:
        return "replacement";
    }
    return "unknown";
}

const char *daytona_lease_reason_name(enum daytona_lease_reason r)
{
    switch (r) {
    case DAYTONA_REASON_NONE:
        return "";
    case DAYTONA_REASON_NOT_FOUND:
        return "not_found";
    case DAYTONA_REASON_EXPIRED:
        return "expired";
    case DAYTONA_REASON_IDENTITY_MISMATCH:
        return "identity_mismatch";
    case DAYTONA_REASON_RESUME_FAILED:
        return "resume_failed";
    }
    return "unknown";
}

const char *daytona_resume_action_name(enum daytona_resume_action a)
{
    switch (a) {
    case DAYTONA_RESUME_REUSE:
        return "reuse";
    case DAYTONA_RESUME_START:
        return "start";
    case DAYTONA_RESUME_RECOVER:
        return "recover";
    case DAYTONA_RESUME_WAIT:
        return "wait";
    case DAYTONA_RESUME_RETRY:
        return "retry";
    case DAYTONA_RESUME_REPLACE:
        return "replace";
    }
    return "unknown";
}

/* ---- the pool label ------------------------------------------------------------------- */

int daytona_lease_pool_digest(const char *secret, const char *instance, const char *pool_key,
                              char ret[33])
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mlen = 0;
    struct buf msg;
    int r;

    if (!secret || !secret[0] || !instance || !pool_key)
        return -EINVAL;
    buf_init(&msg, 8192);
    /* length-prefixed, so no two (instance, pool key) pairs give the same message */
    r = buf_printf(&msg, "agent-runner pool v1\n%zu:%s%zu:%s", strlen(instance), instance,
                   strlen(pool_key), pool_key);
    if (r >= 0 && !HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)msg.data,
                        msg.len, mac, &mlen))
        r = -EIO;
    buf_release(&msg);
    if (r < 0)
        return r;
    util_hex_encode(mac, 16, ret);
    return 0;
}
