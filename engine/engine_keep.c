/*
 * engine_keep — a session's kept harness state, the engine's side (engine_keep.h).
 */
#include "engine_keep.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "environment/env_home.h"
#include "sandbox/host.h"

const char *engine_keep_resume_name(enum keep_resume r)
{
    switch (r) {
    case KEEP_LOAD:
        return "load";
    case KEEP_REPLAY:
        return "replay";
    case KEEP_NEW:
        break;
    }
    return "new";
}

void engine_keep_fall_back(struct engine_keep *k, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    util_vseterr(k->note, sizeof(k->note), fmt, ap);
    va_end(ap);
    k->resume = KEEP_REPLAY;
    kept_state_release(&k->st);
    log_debug("kept harness state not loaded: %s", k->note);
}

/*
 * The turn keeps and loads harness state at all: a session, the store on, a harness that can
 * load. A remote sandbox's disk keeps the harness's files itself: only what names them is kept
 * here (no files), and only for a sandbox that is kept between turns.
 */
static bool keeps(const struct engine_turn *t, const struct provider_ops *provider)
{
    return t->key[0] && t->cfg->kept.max_bytes > 0 && t->cfg->state_dir && t->harness->keep &&
           provider;
}

/* Whether the request's conversation is the one the state holds (see engine_keep_plan). */
static bool same_conversation(const struct engine_turn *t, const struct kept_state *st,
                              bool rebuilt)
{
    const struct run_request *req = t->req;
    uint8_t user[IDENTITY_DIGEST_LEN];

    if (memcmp(st->history_fp, t->prior_fp, sizeof(t->prior_fp)) == 0)
        return true;
    /* platform records carry tool-call ids of their own: the user side must match */
    if (rebuilt)
        return identity_user_fp(req->messages, req->nmessages - 1, user) == 0 &&
               memcmp(st->user_fp, user, sizeof(user)) == 0;
    /* the request carries only the new message: the runner holds the conversation, as a warm
     * follow-up of the same request would be served by the live harness */
    return identity_minimal_history(req);
}

void engine_keep_plan(const struct engine_turn *t, bool rebuilt, struct engine_keep *ret)
{
    const struct engine_config *cfg = t->cfg;
    const struct run_request *req = t->req;
    char why[200];
    int r;

    memset(ret, 0, sizeof(*ret));
    kept_state_init(&ret->st);
    ret->resume = req->nmessages > 1 ? KEEP_REPLAY : KEEP_NEW;
    if (!keeps(t, provider_get(req->sandbox)) || !identity_tail_is_fresh_user(req))
        return;
    r = kept_load(cfg->state_dir, &cfg->kept, t->key, &ret->st, why, sizeof(why));
    if (r == -ENOENT)
        return;
    if (r < 0) {
        engine_keep_fall_back(ret, "the kept harness state is unusable (%s)", why);
        if (r == -EBADMSG)
            (void)kept_remove(cfg->state_dir, t->key);
    } else if (ret->st.harness != req->harness) {
        engine_keep_fall_back(ret, "the kept harness state is %s's",
                              harness_kind_name(ret->st.harness));
    } else if (memcmp(ret->st.config_fp, t->config_fp, sizeof(t->config_fp)) != 0) {
        engine_keep_fall_back(ret, "the session's configuration changed since it was kept");
    } else if (!same_conversation(t, &ret->st, rebuilt)) {
        engine_keep_fall_back(ret, "the conversation differs from the kept one");
    } else {
        ret->resume = KEEP_LOAD;
    }
    /* a minimal request found nothing to load: it has no earlier conversation to replay */
    if (ret->resume == KEEP_REPLAY && req->nmessages <= 1)
        ret->resume = KEEP_NEW;
}

/* The host identity env's sandbox runs as (as environment_spare.c's claim computes it). */
static int sandbox_ids(const struct environment *env, struct sandbox_uid_ids *ret)
{
    const struct sandbox_host *sh = env->cfg->sandbox;

    *ret = (struct sandbox_uid_ids){.uid = geteuid(), .gid = getegid(), .shared = true};
    return sh ? sandbox_uid_for_slot(&sh->uids, env->h.index, ret) : 0;
}

int engine_keep_restore(const struct engine_turn *t, const struct environment *env,
                        const struct engine_keep *k, char *err, size_t errlen)
{
    const char *outcome = jsonx_str(env->lease_report, "outcome");
    struct sandbox_uid_ids ids;
    struct env_home home;
    int r;

    (void)t;
    /* a remote sandbox kept its disk, the harness's files on it, only when it was resumed */
    if (env->provider && env->provider->caps.remote)
        return outcome && strcmp(outcome, "resumed") == 0
                   ? 0
                   : util_fail(-ENOENT, err, errlen,
                               "the sandbox was not resumed (%s): its disk with the harness's "
                               "session is gone",
                               outcome ? outcome : "no lease");
    if (sandbox_ids(env, &ids) < 0)
        return util_fail(-ERANGE, err, errlen, "slot %u has no host uid", (unsigned)env->h.index);
    r = env_home_enter(env->sandbox_pid, &ids, &home, err, errlen);
    if (r < 0)
        return r;
    r = env_home_restore(&home, &k->st, err, errlen);
    env_home_leave(&home);
    return r;
}

/* The harness's session files read out of env's sandbox into st (their identity set). */
static int capture(const struct engine_turn *t, const struct environment *env,
                   struct kept_state *st, char *err, size_t errlen)
{
    struct sandbox_uid_ids ids;
    struct env_home home;
    int r;

    if (sandbox_ids(env, &ids) < 0)
        return util_fail(-ERANGE, err, errlen, "slot %u has no host uid", (unsigned)env->h.index);
    if (t->harness->keep->settle_ms)
        util_sleep_ms(t->harness->keep->settle_ms);
    r = env_home_enter(env->sandbox_pid, &ids, &home, err, errlen);
    if (r < 0)
        return r;
    r = env_home_collect(&home, t->harness->keep->dirs, t->harness->keep->suffix,
                         t->cfg->kept.max_bytes, st, err, errlen);
    env_home_leave(&home);
    if (r < 0)
        return r;
    if (st->nfiles == 0)
        return util_fail(-ENOENT, err, errlen, "the harness wrote no session file");
    /* never a credential: a key the agent echoed into its conversation keeps it all out */
    for (size_t i = 0; i < st->nfiles; i++)
        if (log_redact_found(st->files[i].data, st->files[i].size))
            return util_fail(-EACCES, err, errlen, "%.200s holds a credential of the run",
                             st->files[i].path);
    return 0;
}

void engine_keep_save(const struct engine_turn *t, const struct environment *env,
                      const uint8_t next_fp[IDENTITY_DIGEST_LEN])
{
    const struct engine_config *cfg = t->cfg;
    const struct provider_ops *provider = provider_get(t->req->sandbox);
    bool remote = provider && provider->caps.remote;
    struct kept_state st;
    char err[320] = "cannot fingerprint the conversation";
    int r;

    /* the request's provider: a reconnected environment does not name its own (the config
     * fingerprint it matched covers the sandbox) */
    if (!keeps(t, provider) || !env->acp_session[0] || (!remote && env->sandbox_pid <= 0))
        return;
    /* a remote sandbox run per-turn is deleted after it: nothing would find its files */
    if (remote && t->policy.mode != LIFECYCLE_WARM && !env->warm)
        return;
    kept_state_init(&st);
    st.harness = t->req->harness;
    snprintf(st.acp_session, sizeof(st.acp_session), "%s", env->acp_session);
    memcpy(st.config_fp, t->config_fp, sizeof(st.config_fp));
    memcpy(st.history_fp, next_fp, sizeof(st.history_fp));
    st.saved_ms = util_wall_ms();
    r = identity_user_fp(t->req->messages, t->req->nmessages, st.user_fp);
    if (r == 0 && !remote)
        r = capture(t, env, &st, err, sizeof(err));
    if (r == 0)
        r = kept_save(cfg->state_dir, &cfg->kept, t->key, &st, err, sizeof(err));
    if (r < 0) {
        /* the older state no longer matches the conversation: it goes */
        (void)kept_remove(cfg->state_dir, t->key);
        log_debug("harness state of '%s' not kept: %s", t->key, err);
    } else {
        log_debug("harness state of '%s' kept: %zu files, %zu bytes", t->key, st.nfiles, st.bytes);
    }
    kept_state_release(&st);
}

void engine_keep_release(struct engine_keep *k)
{
    kept_state_release(&k->st);
}
