#include "provider/daytona/daytona_sandbox.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"

#define CREATE_TIMEOUT_MS 60000
#define START_TIMEOUT_MS 120000
#define CREATE_TRIES 2
#define RELEASE_WAIT_MS 10000

static bool identity_ok(const struct daytona_sandbox *sb, const struct daytona_acquire_params *p)
{
    const char *inst = daytona_sandbox_label(sb, DAYTONA_LABEL_INSTANCE);
    const char *pool = daytona_sandbox_label(sb, DAYTONA_LABEL_POOL);

    return inst && pool && p->pool_digest && (p->shared_pool || strcmp(inst, p->instance) == 0) &&
           strcmp(pool, p->pool_digest) == 0;
}

/*
 * Several hosts: a sandbox another member made (and may still hold a keeper for) becomes this
 * instance's: its instance label names us, so the other member's sweep and release leave it
 * alone. Best effort: a sandbox whose label cannot be changed still serves.
 */
static void adopt_labels(struct daytona_client *c, const struct daytona_acquire_params *p,
                         const struct daytona_sandbox *sb)
{
    const char *inst = daytona_sandbox_label(sb, DAYTONA_LABEL_INSTANCE);
    const char *lease = daytona_sandbox_label(sb, DAYTONA_LABEL_LEASE);
    struct daytona_kv labels[3] = {{DAYTONA_LABEL_INSTANCE, p->instance},
                                   {DAYTONA_LABEL_POOL, p->pool_digest},
                                   {DAYTONA_LABEL_LEASE, lease ? lease : "reusable"}};

    if (!p->shared_pool || (inst && strcmp(inst, p->instance) == 0))
        return;
    if (daytona_sandbox_set_labels(c, sb->id, labels, 3) < 0)
        log_debug("daytona: cannot relabel the adopted sandbox \"%s\"", sb->id);
    else
        log_debug("daytona: adopted sandbox \"%s\" of instance \"%s\"", sb->id, inst ? inst : "");
}

static void fail_text(struct daytona_client *c, int r, const char *what, char *err, size_t errlen)
{
    if (r == DAYTONA_E_CAPACITY)
        snprintf(err, errlen, "sandbox_capacity: Daytona is rate limiting %s; retry later", what);
    else
        snprintf(err, errlen, "Daytona %s: %s", what,
                 daytona_client_message(c)[0] ? daytona_client_message(c) : daytona_strerror(r));
}

/*
 * Bring a retained sandbox to the network rule of this run. A mismatch that cannot be fixed
 * is a failed resume (the caller replaces the sandbox): never run with a wider rule.
 */
static int converge_network(struct daytona_client *c, const struct daytona_acquire_params *p,
                            struct daytona_sandbox *sb, char *err, size_t errlen)
{
    struct daytona_create_params cp = {
        .network = p->network,
        .allow = p->allow,
        .nallow = p->nallow,
        .always_allow = p->always_allow,
        .nalways_allow = p->nalways_allow,
        .auto_stop_min = DAYTONA_INTERVAL_UNSET,
        .auto_archive_min = DAYTONA_INTERVAL_UNSET,
        .auto_delete_min = DAYTONA_INTERVAL_UNSET,
    };
    json_object *body = NULL, *settings = NULL;
    struct daytona_sandbox now = {0};
    int r;

    r = daytona_create_body(daytona_client_config(c), &cp, &body, err, errlen);
    if (r < 0)
        return r;
    if (daytona_sandbox_network_matches(sb, body))
        goto out;
    r = daytona_network_settings(body, &settings);
    if (r >= 0)
        r = daytona_sandbox_set_network(c, sb->id, settings, &now);
    if (r >= 0 && !daytona_sandbox_network_matches(&now, body))
        r = -EPROTO;
    if (r < 0) {
        fail_text(c, r, "network settings", err, errlen);
        goto out;
    }
    daytona_sandbox_release(sb);
    *sb = now;
    memset(&now, 0, sizeof(now));
out:
    daytona_sandbox_release(&now);
    json_object_put(body);
    json_object_put(settings);
    return r;
}

/*
 * Try to resume the sandbox named by lookup. 1: *ret_sb is started and usable; 0: replace it
 * (*ret_reason, previous id filled); < 0: a failure to report (capacity).
 */
static int resume(struct daytona_client *c, const struct daytona_acquire_params *p,
                  const char *lookup, struct daytona_sandbox *ret_sb,
                  enum daytona_lease_reason *ret_reason, char previous[DAYTONA_ID_MAX], char *err,
                  size_t errlen)
{
    const struct daytona_config *cfg = daytona_client_config(c);
    long wait_ms = p->resume_wait_ms > 0 ? p->resume_wait_ms : DAYTONA_RESUME_WAIT_MS;
    long start_ms = p->start_timeout_ms > 0 ? p->start_timeout_ms : START_TIMEOUT_MS;
    struct daytona_observation o = {0};
    struct daytona_sandbox sb = {0};
    int64_t waiting_since = 0;
    bool fresh = false; /* sb already holds the answer of a start/recover: no GET needed */
    int r;

    for (;;) {
        struct daytona_resume_decision d;

        if (!fresh) {
            daytona_sandbox_release(&sb);
            r = daytona_sandbox_get(c, lookup, &sb);
        } else {
            r = 0;
        }
        fresh = false;
        o.lookup = r < 0 ? r : 0;
        if (r == 0) {
            snprintf(previous, DAYTONA_ID_MAX, "%s", sb.id);
            o.state = sb.state;
            o.recoverable = sb.recoverable;
            o.error_reason = sb.error_reason;
            o.identity_ok = identity_ok(&sb, p);
        }
        if (o.lookup == 0 && daytona_state_transitional(sb.state)) {
            if (!waiting_since)
                waiting_since = util_now_ms();
            o.deadline_passed = util_now_ms() - waiting_since >= wait_ms;
        } else {
            waiting_since = 0;
        }
        daytona_lease_decide(&o, &d);
        log_debug("daytona resume \"%s\": %s, %s", lookup,
                  o.lookup == 0 ? daytona_state_name(sb.state) : daytona_strerror(o.lookup),
                  daytona_resume_action_name(d.action));
        switch (d.action) {
        case DAYTONA_RESUME_REUSE:
            r = converge_network(c, p, &sb, err, errlen);
            if (r < 0) {
                (void)daytona_sandbox_delete(c, sb.id);
                *ret_reason = DAYTONA_REASON_RESUME_FAILED;
                r = 0;
                goto out;
            }
            adopt_labels(c, p, &sb);
            *ret_sb = sb;
            memset(&sb, 0, sizeof(sb));
            r = 1;
            goto out;
        case DAYTONA_RESUME_START:
        case DAYTONA_RESUME_RECOVER: {
            struct daytona_sandbox now = {0};
            char id[DAYTONA_ID_MAX];

            o.attempts++;
            snprintf(id, sizeof(id), "%s", sb.id);
            /* a start holds its answer until the sandbox runs: use that answer directly */
            r = d.action == DAYTONA_RESUME_START ? daytona_sandbox_start(c, id, &now)
                                                 : daytona_sandbox_recover(c, id);
            if (r == DAYTONA_E_CAPACITY) {
                daytona_sandbox_release(&now);
                fail_text(c, r, "start", err, errlen);
                goto out;
            }
            if ((r == 0 && now.state != DAYTONA_STATE_STARTED) || r == -EBUSY) {
                daytona_sandbox_release(&now);
                r = daytona_sandbox_wait(c, id, DAYTONA_BIT(DAYTONA_STATE_STARTED), start_ms, &now);
            }
            if (r == 0) {
                daytona_sandbox_release(&sb);
                sb = now;
                fresh = true;
            } else {
                daytona_sandbox_release(&now);
            }
            continue; /* the next observation decides */
        }
        case DAYTONA_RESUME_WAIT:
            util_sleep_ms(cfg->poll_step_ms);
            continue;
        case DAYTONA_RESUME_RETRY:
            if (o.lookup == DAYTONA_E_CAPACITY) {
                fail_text(c, o.lookup, "lookup", err, errlen);
                r = o.lookup;
                goto out;
            }
            util_sleep_ms(cfg->poll_step_ms << o.retries);
            o.retries++;
            continue;
        case DAYTONA_RESUME_REPLACE:
            if (d.delete_old && o.lookup == 0)
                (void)daytona_sandbox_delete(c, sb.id);
            *ret_reason = d.reason;
            r = 0;
            goto out;
        }
    }
out:
    daytona_sandbox_release(&sb);
    return r;
}

static int create(struct daytona_client *c, const struct daytona_acquire_params *p, bool reusable,
                  const char *name_hint, struct daytona_sandbox *ret, char *err, size_t errlen)
{
    const struct daytona_lifecycle *lc = p->lifecycle;
    struct daytona_kv labels[3];
    struct daytona_create_params cp = {
        .env = p->env,
        .nenv = p->nenv,
        .auto_stop_min = lc->auto_stop_min,
        .auto_archive_min = lc->auto_archive_min,
        .auto_delete_min = lc->auto_delete_min,
        .network = p->network,
        .allow = p->allow,
        .nallow = p->nallow,
        .always_allow = p->always_allow,
        .nalways_allow = p->nalways_allow,
    };
    long timeout = p->create_timeout_ms > 0 ? p->create_timeout_ms : CREATE_TIMEOUT_MS;
    char name[DAYTONA_ID_MAX], rnd[17];
    size_t nl = 0;
    int r = 0;

    labels[nl++] = (struct daytona_kv){DAYTONA_LABEL_INSTANCE, p->instance};
    if (p->pool_digest)
        labels[nl++] = (struct daytona_kv){DAYTONA_LABEL_POOL, p->pool_digest};
    labels[nl++] = (struct daytona_kv){DAYTONA_LABEL_LEASE, reusable ? "reusable" : "per_turn"};
    cp.labels = labels;
    cp.nlabels = nl;
    for (int attempt = 0; attempt < CREATE_TRIES; attempt++) {
        struct daytona_sandbox sb = {0};

        r = util_random_hex(rnd, 8);
        if (r < 0)
            return r;
        if (reusable && attempt == 0 && name_hint)
            snprintf(name, sizeof(name), "%s", name_hint);
        else if (reusable)
            snprintf(name, sizeof(name), "ar-%.32s-%.8s", p->pool_digest, rnd);
        else
            snprintf(name, sizeof(name), "ar-t-%s", rnd);
        cp.name = name;
        r = daytona_sandbox_create(c, &cp, timeout, ret, err, errlen);
        if (r == 0)
            return 0;
        if (r == -EBUSY)
            continue; /* the name is taken: a fresh one */
        if (r == DAYTONA_E_CAPACITY) {
            fail_text(c, r, "create", err, errlen);
            return r;
        }
        if (r != DAYTONA_E_UNCERTAIN)
            return r;
        /* the record may exist: adopt it if it starts, else make sure it is gone */
        if (daytona_sandbox_get(c, name, &sb) == 0) {
            struct daytona_sandbox up = {0};

            r = daytona_sandbox_wait(c, sb.id, DAYTONA_BIT(DAYTONA_STATE_STARTED), timeout, &up);
            if (r == 0 && daytona_sandbox_label(&up, DAYTONA_LABEL_INSTANCE) &&
                strcmp(daytona_sandbox_label(&up, DAYTONA_LABEL_INSTANCE), p->instance) == 0) {
                daytona_sandbox_release(&sb);
                *ret = up;
                return 0;
            }
            daytona_sandbox_release(&up);
            (void)daytona_sandbox_delete(c, sb.id);
            daytona_sandbox_release(&sb);
        }
        r = DAYTONA_E_UNCERTAIN;
    }
    return r;
}

int daytona_acquire(struct daytona_client *c, const struct daytona_acquire_params *p,
                    struct daytona_lease *ret, char *err, size_t errlen)
{
    int64_t t0 = util_now_ms();
    struct daytona_lease l;
    char name[DAYTONA_ID_MAX] = "";
    const char *lookup = NULL;
    bool reusable;
    int r;

    memset(&l, 0, sizeof(l));
    if (!p->instance || !p->instance[0] || !p->lifecycle) {
        snprintf(err, errlen, "daytona acquire: no instance or lifecycle");
        return -EINVAL;
    }
    reusable = p->lifecycle->reusable && p->pool_digest && p->pool_digest[0];
    if (reusable) {
        snprintf(name, sizeof(name), "ar-%.32s", p->pool_digest);
        lookup = p->lease_id && p->lease_id[0] ? p->lease_id : name;
    }
    l.outcome = DAYTONA_LEASE_CREATED;
    if (lookup) {
        enum daytona_lease_reason why = DAYTONA_REASON_NONE;

        r = resume(c, p, lookup, &l.sb, &why, l.previous_id, err, errlen);
        if (r < 0)
            goto out;
        if (r == 1) {
            l.outcome = DAYTONA_LEASE_RESUMED;
            goto done;
        }
        if (p->had_lease || why != DAYTONA_REASON_NOT_FOUND) {
            l.outcome = DAYTONA_LEASE_REPLACEMENT;
            l.reason = why;
        }
    }
    r = create(c, p, reusable, reusable ? name : NULL, &l.sb, err, errlen);
    if (r < 0)
        goto out;
done:
    l.reusable = reusable;
    l.acquire_ms = (long)(util_now_ms() - t0);
    *ret = l;
    memset(&l, 0, sizeof(l));
    r = 0;
out:
    daytona_sandbox_release(&l.sb);
    return r;
}

void daytona_lease_release(struct daytona_lease *l)
{
    if (l)
        daytona_sandbox_release(&l->sb);
}

static int delete_through(struct daytona_client *c, const char *id)
{
    int64_t deadline = util_now_ms() + RELEASE_WAIT_MS;
    int r;

    for (;;) {
        r = daytona_sandbox_delete(c, id);
        if (r != -EBUSY || util_now_ms() >= deadline)
            return r;
        util_sleep_ms(daytona_client_config(c)->poll_step_ms);
    }
}

int daytona_release(struct daytona_client *c, const char *id, enum daytona_disposition d, char *err,
                    size_t errlen)
{
    struct daytona_sandbox sb = {0};
    uint32_t settled = DAYTONA_BIT(DAYTONA_STATE_STARTED) | DAYTONA_BIT(DAYTONA_STATE_STOPPED) |
                       DAYTONA_BIT(DAYTONA_STATE_ARCHIVED) | DAYTONA_BIT(DAYTONA_STATE_ERROR) |
                       DAYTONA_BIT(DAYTONA_STATE_BUILD_FAILED) |
                       DAYTONA_BIT(DAYTONA_STATE_DESTROYED) | DAYTONA_BIT(DAYTONA_STATE_PAUSED);
    int r = 0;

    switch (d) {
    case DAYTONA_KEEP_RUNNING:
        return 0;
    case DAYTONA_DESTROY:
        r = delete_through(c, id);
        if (r < 0)
            fail_text(c, r, "delete", err, errlen);
        return r;
    case DAYTONA_STOP_AND_RETAIN:
        break;
    }
    r = daytona_sandbox_wait(c, id, settled, RELEASE_WAIT_MS, &sb);
    if (r == -ENOENT) {
        r = 0;
        goto out;
    }
    if (r == 0 && sb.state == DAYTONA_STATE_STARTED) {
        r = daytona_sandbox_stop(c, id, false);
        if (r == -EINVAL) /* "not in a stoppable state": it stopped meanwhile */
            r = 0;
    } else if (r == 0 &&
               (sb.state == DAYTONA_STATE_STOPPED || sb.state == DAYTONA_STATE_ARCHIVED)) {
        r = 0;
    } else if (r != DAYTONA_E_CAPACITY) {
        r = -EIO; /* errored, stuck or unknown: do not leave it billing */
    }
    if (r < 0 && r != DAYTONA_E_CAPACITY) {
        r = delete_through(c, id);
        if (r < 0)
            fail_text(c, r, "delete after a failed stop", err, errlen);
    } else if (r < 0) {
        fail_text(c, r, "stop", err, errlen);
    }
out:
    daytona_sandbox_release(&sb);
    return r;
}

enum daytona_sweep_action daytona_sweep_default(const struct daytona_sandbox *sb, bool live_owner)
{
    const char *lease = daytona_sandbox_label(sb, DAYTONA_LABEL_LEASE);

    if (live_owner)
        return DAYTONA_SWEEP_KEEP;
    if (lease && strcmp(lease, "reusable") == 0 &&
        (sb->state == DAYTONA_STATE_STOPPED || sb->state == DAYTONA_STATE_ARCHIVED ||
         sb->state == DAYTONA_STATE_STOPPING || sb->state == DAYTONA_STATE_ARCHIVING))
        return DAYTONA_SWEEP_KEEP;
    return DAYTONA_SWEEP_DELETE;
}

struct sweep_ctx {
    struct daytona_client *c;
    daytona_sweep_fn fn;
    void *ctx;
    struct daytona_sweep_stats st;
};

static int sweep_one(void *ctx, const struct daytona_sandbox *sb)
{
    struct sweep_ctx *s = ctx;
    char err[256];
    int r = 0;

    s->st.seen++;
    switch (s->fn(s->ctx, sb)) {
    case DAYTONA_SWEEP_KEEP:
        s->st.kept++;
        return 0;
    case DAYTONA_SWEEP_STOP:
        r = daytona_release(s->c, sb->id, DAYTONA_STOP_AND_RETAIN, err, sizeof(err));
        if (r >= 0)
            s->st.stopped++;
        break;
    case DAYTONA_SWEEP_DELETE:
        r = daytona_release(s->c, sb->id, DAYTONA_DESTROY, err, sizeof(err));
        if (r >= 0)
            s->st.deleted++;
        break;
    }
    if (r < 0) {
        s->st.failed++;
        log_debug("daytona sweep of \"%s\" failed: %s", sb->id, daytona_strerror(r));
    }
    return r == DAYTONA_E_CAPACITY ? r : 0;
}

int daytona_sweep(struct daytona_client *c, const char *instance, size_t max, daytona_sweep_fn fn,
                  void *ctx, struct daytona_sweep_stats *ret)
{
    struct daytona_kv label = {DAYTONA_LABEL_INSTANCE, instance};
    struct sweep_ctx s = {.c = c, .fn = fn, .ctx = ctx};
    int r;

    if (!instance || !instance[0] || !fn)
        return -EINVAL;
    r = daytona_sandbox_list(c, &label, 1, max, sweep_one, &s);
    if (ret)
        *ret = s.st;
    return r < 0 ? r : 0;
}
