/*
 * environment_spare — a spare started, and one bound to a session (environment_spare.h).
 */
#include "environment/environment_spare.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "environment/env_start.h"
#include "environment/env_stop.h"
#include "environment/spare.h"
#include "proto/keeper_proto.h"
#include "request/request.h"

#define CLAIM_CONNECT_MS 5000

/*
 * The spare is ready once its harness answers: ACP initialize through the keeper (pi-stdio
 * starts pi-acp only after pi answered its first command; opencode answers once its own start
 * is done, and must not see a session/new before the claim), then "#park" for the spare's TTL
 * (the keeper keeps it with nobody attached, its slot untouched).
 */
static int await_harness(struct environment *env, char *err, size_t errlen)
{
    const struct engine_config *cfg = env->cfg;
    int64_t deadline = util_now_ms() + (int64_t)cfg->harness_init_ms;
    json_object *params = json_object_new_object();
    int64_t id = 0;
    int r;

    if (!params)
        return -ENOMEM;
    json_object_object_add(params, "protocolVersion", json_object_new_int(ACP_PROTOCOL_VERSION));
    json_object_object_add(params, "clientCapabilities", json_object_new_object());
    r = environment_connect_keeper(env, util_now_ms() + CLAIM_CONNECT_MS, err, errlen);
    if (r == 0)
        r = environment_request(env, "initialize", params, &id);
    json_object_put(params);
    while (r == 0) {
        struct acp_msg m;

        r = environment_recv(env, deadline, &m);
        if (r < 0)
            break;
        if (m.kind == ACP_RESPONSE && json_object_get_int64(m.id) == id) {
            r = m.error ? AR_E_HARNESS_ERROR : 0;
            acp_msg_release(&m);
            break;
        }
        acp_msg_release(&m);
    }
    if (r < 0) {
        snprintf(err, errlen, "the spare's harness did not answer initialize: %s",
                 env->fail[0] ? env->fail : ar_strerror(r));
        return r;
    }
    return environment_park(env, cfg->spare_ttl_ms, false);
}

int environment_start_spare(const struct engine_config *cfg, enum harness_kind kind, char *err,
                            size_t errlen)
{
    struct harness_paths paths = {
        .harness_dir = cfg->harness_dir, .pi_stdio = cfg->pi_stdio_bin, .logins = &cfg->logins};
    const struct harness_ops *harness = harness_get(kind);
    struct engine_config scfg = *cfg;
    struct environment *env = NULL;
    struct run_request req;
    struct sandbox_plan plan;
    struct sandbox_env confine;
    struct buf spec;
    bool created = false;
    int r;

    if (!cfg->pool || !harness || !spare_harness_supported(kind)) {
        snprintf(err, errlen, "spares of %s are not supported", harness_kind_name(kind));
        return -ENOTSUP;
    }
    r = spare_placeholder_request(kind, &req, err, errlen);
    if (r < 0)
        return r;
    sandbox_plan_init(&plan);
    plan.form = PLAN_SPARE;
    r = harness->plan(&paths, &req, &plan, err, errlen);
    if (r < 0)
        goto out;
    /* the keeper waits a spare's TTL for its claim (its attach deadline) */
    scfg.keeper_start_ms = cfg->spare_ttl_ms;
    env = environment_new(&scfg);
    if (!env) {
        r = -ENOMEM;
        goto out;
    }
    env->provider = provider_get("local");
    r = pool_spare_reserve(cfg->pool, (uint8_t)kind, util_self_pid(), &env->h);
    if (r < 0) {
        snprintf(err, errlen, r == -ENOSPC ? "no free session slot" : "session table: %s",
                 ar_strerror(r));
        goto out;
    }
    env->has_slot = true;
    r = env_setup_create(cfg->state_dir, &env->paths, err, errlen);
    if (r < 0)
        goto out;
    created = true;
    (void)pool_session_set_env_dir(cfg->pool, env->h, env->paths.dir);
    r = environment_prepare_sandbox(env, &req, &confine, err, errlen);
    if (r < 0)
        goto out;
    /* a spare's start (pi ~0.9 CPU-s, opencode ~6) yields to running turns; its claim restores
     * the share */
    if (cfg->sandbox && sandbox_cgroup_set_cpu_weight(&confine.cg, true) < 0)
        log_debug("cannot lower the CPU weight of a spare");
    buf_init(&spec, KEEPER_SPEC_MAX);
    r = environment_encode_spec(env, &req, &plan, "", cfg->spare_ttl_ms, false, false,
                                cfg->sandbox ? &confine : NULL, &spec, err, errlen);
    env->cfg = cfg; /* the keeper itself gets the runner's own start deadline */
    if (r == 0)
        r = environment_spawn_keeper(env, &spec, err, errlen);
    buf_release(&spec);
    if (r < 0)
        goto out;
    created = false; /* the keeper owns the folder and the slot now */
    env->has_slot = false;
    r = await_harness(env, err, errlen);
    if (r < 0) {
        (void)environment_destroy(env, TEARDOWN_FAILED_TURN); /* the keeper frees the slot */
        goto out;
    }
    r = pool_spare_ready(cfg->pool, env->h);
    if (r < 0) {
        /* its keeper is gone already (or the slot was drained): it cleans up after itself */
        snprintf(err, errlen, "the spare's slot changed: %s", ar_strerror(r));
        (void)environment_destroy_keeper(env->keeper_pid, 0, ENVIRONMENT_STOP_WAIT_MS);
    }
out:
    if (created)
        (void)sandbox_host_reclaim(cfg->sandbox, env->paths.dir);
    if (env) {
        environment_release_slot(env);
        environment_free(env);
    }
    sandbox_plan_release(&plan);
    run_request_release(&req);
    return r;
}

/* The session's files into the claimed spare: the workspace's on the host, the home's inside. */
static int write_session_files(struct environment *env, const struct run_request *req,
                               const struct sandbox_plan *plan, pid_t sandbox_pid, char *err,
                               size_t errlen)
{
    const struct sandbox_host *sh = env->cfg->sandbox;
    struct sandbox_uid_ids ids = {.uid = geteuid(), .gid = getegid(), .shared = true};
    int r;

    if (sh && sandbox_uid_for_slot(&sh->uids, env->h.index, &ids) < 0) {
        snprintf(err, errlen, "spare: slot %u has no host uid", (unsigned)env->h.index);
        return -ERANGE;
    }
    /* nothing of the agent has run in there yet: these writes cannot be redirected */
    r = env_setup_workspace(&env->paths, req, err, errlen);
    if (r == 0 && sh && !ids.shared) {
        r = sandbox_uid_give_workspace(env->paths.workspace, &ids);
        if (r < 0)
            snprintf(err, errlen, "spare: cannot give the workspace to uid %u: %s",
                     (unsigned)ids.uid, strerror(-r));
    }
    if (r == 0)
        r = spare_write_home_files(sandbox_pid, ids.uid, ids.gid, plan->files, err, errlen);
    return r;
}

/*
 * "#claim {idleMs, perTurn, sessionKey, egress, modelGateway?}" to the attached keeper; a
 * shell's claim also carries {sandbox, harness} (sandbox: owned from here, NULL for a spare).
 */
static int send_claim(struct environment *env, const struct run_request *req,
                      const struct sandbox_plan *plan, const char *key, uint64_t idle_ms,
                      bool per_turn, json_object *sandbox, char *err, size_t errlen)
{
    json_object *o = json_object_new_object(), *egress = NULL;
    struct keeper_msg m = {.kind = KEEPER_MSG_CLAIM};
    struct buf line;
    const char *text;
    int r;

    if (!o)
        return -ENOMEM;
    json_object_object_add(o, "idleMs", json_object_new_int64((int64_t)idle_ms));
    json_object_object_add(o, "perTurn", json_object_new_boolean(per_turn));
    json_object_object_add(o, "sessionKey", json_object_new_string(key));
    if (env->cfg->sandbox) {
        egress = environment_egress_json(env->cfg, req, plan->gateway, err, errlen);
        if (!egress) {
            json_object_put(sandbox);
            json_object_put(o);
            return AR_E_SANDBOX;
        }
        json_object_object_add(o, "egress", egress);
        if (plan->gateway && plan->gateway_route)
            json_object_object_add(o, "modelGateway", json_object_get(plan->gateway_route));
    }
    if (sandbox) { /* a shell's: the sandbox it starts now, owned by o from here */
        json_object_object_add(o, "sandbox", sandbox);
        json_object_object_add(o, "harness",
                               json_object_new_string(harness_kind_name(req->harness)));
    }
    text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    m.payload = text;
    m.payload_len = strlen(text);
    buf_init(&line, KEEPER_SPEC_MAX);
    r = keeper_proto_encode(&m, &line);
    if (r == 0)
        r = environment_send(env, &line);
    if (r < 0)
        snprintf(err, errlen, "spare: cannot send the claim: %s", ar_strerror(r));
    buf_release(&line);
    json_object_put(o);
    return r;
}

/* env takes the claimed slot ps (a spare's or a shell's): its keeper, folder and socket. */
static void claimed_slot(struct environment *env, const struct pool_session *ps)
{
    const char *id = strrchr(ps->env_dir, '/');

    env->provider = provider_get("local");
    env->h = ps->h;
    env->has_slot = true;
    env->keeper_pid = ps->keeper_pid;
    env->sandbox_pid = ps->sandbox_pid;
    snprintf(env->paths.id, sizeof(env->paths.id), "%s", id ? id + 1 : "");
    snprintf(env->paths.dir, sizeof(env->paths.dir), "%s", ps->env_dir);
    snprintf(env->paths.workspace, sizeof(env->paths.workspace), "%s/workspace", ps->env_dir);
    snprintf(env->paths.socket, sizeof(env->paths.socket), "%s/keeper.sock", ps->env_dir);
}

/* A claim that failed before the keeper was attached: stop the keeper, free what it held. */
static void abandon(struct environment *env, const struct pool_session *ps)
{
    const struct engine_config *cfg = env->cfg;

    if (util_proc_alive(ps->keeper_pid, ps->keeper_start)) {
        /* it frees its slot and folder at its teardown */
        (void)pool_session_drain(cfg->pool, env->h, TEARDOWN_FAILED_TURN);
        (void)environment_destroy_keeper(ps->keeper_pid, ps->keeper_start,
                                         ENVIRONMENT_STOP_WAIT_MS);
        return;
    }
    /* a dead keeper: whoever frees its slot first (here or the master) removes its folder */
    if (pool_session_free(cfg->pool, env->h, TEARDOWN_FAILED_TURN) == 0)
        (void)sandbox_host_reclaim(cfg->sandbox, ps->env_dir);
}

int environment_claim_spare(const struct engine_config *cfg, const struct run_request *req,
                            const struct sandbox_plan *plan, const char *key, uint64_t idle_ms,
                            bool per_turn, struct environment **ret, char *err, size_t errlen)
{
    struct pool_reservation rv = environment_reservation(req, plan, key, idle_ms, per_turn);
    struct environment *env = NULL;
    struct pool_session *ps = NULL;
    bool attached = false;
    int r;

    if (!cfg->pool)
        return -ENOENT;
    ps = malloc(sizeof(*ps));
    env = environment_new(cfg);
    if (!ps || !env) {
        r = -ENOMEM;
        snprintf(err, errlen, "spare: %s", strerror(ENOMEM));
        goto out;
    }
    r = pool_spare_claim(cfg->pool, &rv, ps);
    if (r < 0) {
        if (r != -ENOENT)
            snprintf(err, errlen, "spare: session table: %s", ar_strerror(r));
        goto out;
    }
    claimed_slot(env, ps);
    env->from_spare = true;
    if (!util_proc_alive(ps->keeper_pid, ps->keeper_start)) {
        snprintf(err, errlen, "spare: its keeper %d is gone", (int)ps->keeper_pid);
        r = -ESRCH;
        goto fail;
    }
    r = write_session_files(env, req, plan, ps->sandbox_pid, err, errlen);
    if (r < 0)
        goto fail;
    log_debug("spare of keeper %d claimed: the session's files are in place", (int)ps->keeper_pid);
    r = environment_connect_keeper(env, util_now_ms() + CLAIM_CONNECT_MS, err, errlen);
    if (r < 0)
        goto fail;
    attached = true;
    r = send_claim(env, req, plan, key, idle_ms, per_turn, NULL, err, errlen);
    if (r < 0)
        goto fail;
    log_debug("spare of keeper %d bound to the session", (int)ps->keeper_pid);
    *ret = env;
    env = NULL;
    r = 0;
    goto out;
fail:
    /* the claim happened: whatever failed, the caller must not take it for "no spare" */
    if (r == -ENOENT || r == -EEXIST)
        r = AR_E_SANDBOX;
    if (attached)
        (void)environment_destroy(env, TEARDOWN_FAILED_TURN);
    else
        abandon(env, ps);
    env->has_slot = false;
out:
    environment_free(env);
    free(ps);
    return r;
}

/* ---- shells: pre-made sandboxes with no harness yet ------------------------------------- */

/* A shell's keeper spec: its slot, identity, cgroup and a placeholder egress; no sandbox. */
static int shell_spec(const struct environment *env, const struct sandbox_env *confine,
                      json_object *egress, struct buf *out)
{
    const struct engine_config *cfg = env->cfg;
    struct keeper_spec spec = {
        .env_dir = env->paths.dir,
        .socket = env->paths.socket,
        .idle_ms = cfg->spare_ttl_ms,
        .attach_timeout_ms = cfg->spare_ttl_ms, /* unclaimed: replaced after the spare TTL */
        .provider = "local",
        .bwrap = cfg->bwrap,
        .has_slot = cfg->shm_name != NULL,
        .shm = cfg->shm_name,
        .slot = env->h.index,
        .generation = env->h.generation,
        .session_key = "",
        .harness = "shell",
        .shell = true,
        .confined = true,
        .confine = *confine,
        .egress = egress,
    };

    return keeper_spec_encode(&spec, out);
}

int environment_start_shell(const struct engine_config *cfg, char *err, size_t errlen)
{
    const struct sandbox_host *sh = cfg->sandbox;
    struct environment *env = NULL;
    struct sandbox_env confine;
    struct run_request req;
    json_object *egress = NULL;
    struct buf spec;
    bool created = false;
    int r;

    if (!cfg->pool || !sh) {
        snprintf(err, errlen, "shells need the session table and a confined host");
        return -ENOTSUP;
    }
    /* the placeholder's egress: an unreachable endpoint; the claim brings the run's policy */
    r = spare_placeholder_request(HARNESS_PI, &req, err, errlen);
    if (r < 0)
        return r;
    env = environment_new(cfg);
    if (!env) {
        r = -ENOMEM;
        goto out;
    }
    env->provider = provider_get("local");
    r = pool_spare_reserve(cfg->pool, (uint8_t)POOL_SHELL, util_self_pid(), &env->h);
    if (r < 0) {
        snprintf(err, errlen, r == -ENOSPC ? "no free session slot" : "session table: %s",
                 ar_strerror(r));
        goto out;
    }
    env->has_slot = true;
    r = env_setup_create(cfg->state_dir, &env->paths, err, errlen);
    if (r < 0)
        goto out;
    created = true;
    (void)pool_session_set_env_dir(cfg->pool, env->h, env->paths.dir);
    /* the slot's identity, capped workspace and cgroup: what any environment of it gets */
    r = sandbox_host_env_prepare(sh, env->h.index, env->paths.dir, &confine, err, errlen);
    if (r == 0)
        r = sandbox_host_env_seal(sh, env->paths.dir, &confine, err, errlen);
    if (r == 0) {
        egress = environment_egress_json(cfg, &req, false, err, errlen);
        r = egress ? 0 : AR_E_SANDBOX;
    }
    if (r < 0)
        goto out;
    buf_init(&spec, KEEPER_SPEC_MAX);
    r = shell_spec(env, &confine, egress, &spec);
    if (r == 0)
        r = environment_spawn_keeper(env, &spec, err, errlen);
    else
        snprintf(err, errlen, "cannot build the shell's spec: %s", ar_strerror(r));
    buf_release(&spec);
    if (r < 0)
        goto out;
    created = false; /* the keeper owns the folder and the slot now */
    env->has_slot = false;
    r = pool_spare_ready(cfg->pool, env->h);
    if (r < 0) {
        snprintf(err, errlen, "the shell's slot changed: %s", ar_strerror(r));
        (void)environment_destroy_keeper(env->keeper_pid, 0, ENVIRONMENT_STOP_WAIT_MS);
    }
out:
    if (created)
        (void)sandbox_host_reclaim(sh, env->paths.dir);
    if (env) {
        environment_release_slot(env);
        environment_free(env);
    }
    json_object_put(egress);
    run_request_release(&req);
    return r;
}

/* The shell's answer to its claim: "#hello" once its sandbox runs, else why not. */
static int await_shell_start(struct environment *env, char *err, size_t errlen)
{
    struct keeper_msg m;
    char *line = NULL;
    size_t len;
    int r;

    r = env_link_read_line(env->fd, &env->lines, util_now_ms() + (int64_t)env->cfg->keeper_start_ms,
                           &line, &len, NULL);
    if (r < 0) {
        snprintf(err, errlen, "shell: the keeper did not start the sandbox: %s", strerror(-r));
        return r;
    }
    r = keeper_proto_decode(line, len, &m);
    if (r < 0 || m.kind != KEEPER_MSG_HELLO || m.sandbox_pid <= 0) {
        snprintf(err, errlen, "shell: the sandbox did not start: %.200s", line);
        r = AR_E_SANDBOX;
    } else {
        env->sandbox_pid = m.sandbox_pid;
    }
    free(line);
    return r;
}

int environment_claim_shell(const struct engine_config *cfg, const struct run_request *req,
                            const struct sandbox_plan *plan, const char *key, uint64_t idle_ms,
                            bool per_turn, struct environment **ret, char *err, size_t errlen)
{
    struct pool_reservation rv = environment_reservation(req, plan, key, idle_ms, per_turn);
    struct sandbox_uid_ids ids = {.shared = true};
    struct environment *env = NULL;
    struct pool_session *ps = NULL;
    json_object *sandbox;
    bool attached = false;
    int r;

    if (!cfg->pool || !cfg->sandbox)
        return -ENOENT;
    ps = malloc(sizeof(*ps));
    env = environment_new(cfg);
    if (!ps || !env) {
        r = -ENOMEM;
        snprintf(err, errlen, "shell: %s", strerror(ENOMEM));
        goto out;
    }
    r = pool_shell_claim(cfg->pool, &rv, ps);
    if (r < 0) {
        if (r != -ENOENT)
            snprintf(err, errlen, "shell: session table: %s", ar_strerror(r));
        goto out;
    }
    claimed_slot(env, ps);
    env->sandbox_pid = 0; /* a shell's sandbox starts at its claim */
    env->from_shell = true;
    if (!util_proc_alive(ps->keeper_pid, ps->keeper_start)) {
        snprintf(err, errlen, "shell: its keeper %d is gone", (int)ps->keeper_pid);
        r = -ESRCH;
        goto fail;
    }
    /* the request's files, then the workspace given to the slot's uid, as a cold start does */
    r = env_setup_workspace(&env->paths, req, err, errlen);
    if (r == 0 && sandbox_uid_for_slot(&cfg->sandbox->uids, env->h.index, &ids) < 0) {
        snprintf(err, errlen, "shell: slot %u has no host uid", (unsigned)env->h.index);
        r = -ERANGE;
    }
    if (r == 0 && !ids.shared && (r = sandbox_uid_give_workspace(env->paths.workspace, &ids)) < 0)
        snprintf(err, errlen, "shell: cannot give the workspace to uid %u: %s", (unsigned)ids.uid,
                 strerror(-r));
    if (r < 0)
        goto fail;
    r = environment_connect_keeper(env, util_now_ms() + CLAIM_CONNECT_MS, err, errlen);
    if (r < 0)
        goto fail;
    attached = true;
    sandbox = environment_sandbox_description(env, plan, &cfg->sandbox->cfg, err, errlen);
    if (!sandbox) {
        r = AR_E_SANDBOX;
        goto fail;
    }
    if (plan->channel_env || plan->session_mcp)
        json_object_object_add(sandbox, "channel",
                               json_object_new_string(plan->channel_env ? "harness" : "tools"));
    r = send_claim(env, req, plan, key, idle_ms, per_turn, sandbox, err, errlen);
    if (r == 0)
        r = await_shell_start(env, err, errlen);
    if (r < 0)
        goto fail;
    log_debug("shell of keeper %d claimed: its sandbox %d runs", (int)ps->keeper_pid,
              (int)env->sandbox_pid);
    *ret = env;
    env = NULL;
    r = 0;
    goto out;
fail:
    if (r == -ENOENT || r == -EEXIST)
        r = AR_E_SANDBOX;
    if (attached)
        (void)environment_destroy(env, TEARDOWN_FAILED_TURN);
    else
        abandon(env, ps);
    env->has_slot = false;
out:
    environment_free(env);
    free(ps);
    return r;
}
