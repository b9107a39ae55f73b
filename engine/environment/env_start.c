/*
 * env_start — the steps that start an environment's keeper (env_start.h).
 */
#include "environment/env_start.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "core/policy.h"
#include "egress/egress_policy.h"
#include "proto/keeper_proto.h"
#include "sandbox/seccomp.h"
#include "telemetry/stages.h"

#define KEEPER_ENV_MAX 32

/* What a remote provider needs to lease the environment's sandbox (provider.h). */
static int describe_lease(json_object *sb, const struct run_request *req, const char *key,
                          bool had_lease)
{
    struct provider_lease_request lr = {
        .owner = key,
        .had_lease = had_lease,
        .network = req->network,
        .network_strict = req->network_strict,
        .allow = jsonx_path(req->root, "sandboxPermission.network.allowlist"),
        .endpoint = req->mc.base_url,
    };

    return provider_lease_describe(sb, &lr);
}

/* Where the run's sandbox may connect, as the keeper spec carries it (NULL + err on failure). */
json_object *environment_egress_json(const struct engine_config *cfg, const struct run_request *req,
                                     bool model_gateway, char *err, size_t errlen)
{
    const struct sandbox_host *sh = cfg->sandbox;
    struct egress_policy *pol = malloc(sizeof(*pol));
    json_object *o = NULL;

    if (!pol) {
        snprintf(err, errlen, "cannot build the egress policy: %s", strerror(ENOMEM));
        return NULL;
    }
    if (policy_egress(req, model_gateway, sh->cfg.private_egress, sh->cfg.runner_ports,
                      sh->cfg.nrunner_ports, pol, err, errlen) == 0) {
        o = egress_policy_to_json(pol);
        if (!o)
            snprintf(err, errlen, "cannot build the egress policy: %s", strerror(ENOMEM));
    }
    free(pol);
    return o;
}

json_object *environment_sandbox_description(const struct environment *env,
                                             const struct sandbox_plan *plan,
                                             const struct sandbox_config *limits, char *err,
                                             size_t errlen)
{
    json_object *sb = provider_sandbox_description(plan, env->paths.workspace, limits);
    const char *hex;
    int r;

    if (!sb) {
        snprintf(err, errlen, "cannot describe the sandbox: %s", strerror(ENOMEM));
        return NULL;
    }
    if (env->provider->caps.remote)
        return sb;
    /* compiled once per process, not per sandbox: the keeper loads what it is given */
    r = sandbox_seccomp_program(&hex, err, errlen);
    if (r == 0 && json_object_object_add(sb, "seccomp", json_object_new_string(hex)) < 0) {
        r = -ENOMEM;
        snprintf(err, errlen, "cannot describe the sandbox: %s", strerror(ENOMEM));
    }
    if (r < 0) {
        json_object_put(sb);
        return NULL;
    }
    return sb;
}

/*
 * The keeper spec of a new environment: where it lives, its slot, the sandbox to start, and
 * (local sandboxes on a probed host) its confinement and egress policy.
 */
int environment_encode_spec(const struct environment *env, const struct run_request *req,
                            const struct sandbox_plan *plan, const char *key, uint64_t idle_ms,
                            bool per_turn, bool had_lease, const struct sandbox_env *confine,
                            struct buf *out, char *err, size_t errlen)
{
    const struct engine_config *cfg = env->cfg;
    struct keeper_spec spec = {
        .env_dir = env->paths.dir,
        .socket = env->paths.socket,
        .idle_ms = idle_ms,
        .attach_timeout_ms = cfg->keeper_start_ms,
        .per_turn = per_turn,
        .provider = env->provider->name,
        .bwrap = cfg->bwrap,
        .has_slot = env->has_slot && cfg->shm_name,
        .shm = cfg->shm_name,
        .slot = env->h.index,
        .generation = env->h.generation,
        .session_key = key,
        .harness = harness_kind_name(req->harness),
    };
    /* who speaks the keeper channel in the sandbox: the keeper makes that connection */
    const char *channel = plan->channel_env ? "harness" : plan->session_mcp ? "tools" : NULL;
    int r = -ENOMEM;

    if (confine) {
        spec.confined = true;
        spec.confine = *confine;
        spec.egress = environment_egress_json(cfg, req, plan->gateway, err, errlen);
        if (!spec.egress)
            return AR_E_SANDBOX;
        spec.gateway = plan->gateway ? plan->gateway_route : NULL;
    }
    spec.sandbox = environment_sandbox_description(
        env, plan, cfg->sandbox ? &cfg->sandbox->cfg : NULL, err, errlen);
    if (!spec.sandbox) {
        json_object_put(spec.egress);
        return AR_E_SANDBOX;
    }
    if (channel)
        json_object_object_add(spec.sandbox, "channel", json_object_new_string(channel));
    /* a remote sandbox cannot inherit the connection: a relay in it carries the channel */
    if (channel && env->provider->caps.remote && cfg->harness_dir)
        json_object_object_add(spec.sandbox, "channelRelay",
                               json_object_new_string(cfg->harness_dir));
    r = env->provider->acquire ? describe_lease(spec.sandbox, req, key, had_lease) : 0;
    if (r >= 0)
        r = keeper_spec_encode(&spec, out);
    if (r < 0)
        snprintf(err, errlen, "cannot build the keeper spec: %s", ar_strerror(r));
    json_object_put(spec.sandbox);
    json_object_put(spec.egress);
    return r;
}

int environment_spawn_keeper(struct environment *env, const struct buf *spec, char *err,
                             size_t errlen)
{
    const struct engine_config *cfg = env->cfg;
    int spec_pipe[2] = {-1, -1}, ready_pipe[2] = {-1, -1};
    const char *bin;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    char level[64], *argv[2], *envp[3 + KEEPER_ENV_MAX];
    const char *penv[KEEPER_ENV_MAX];
    size_t npenv = 0;
    struct acp_lines rl;
    struct keeper_msg m;
    char *line = NULL;
    size_t len;
    pid_t pid = -1;
    int r;
    int64_t deadline = util_now_ms() + (int64_t)cfg->keeper_start_ms;

    acp_lines_init(&rl, 4096);
    if (pipe2(spec_pipe, O_CLOEXEC) == -1 || pipe2(ready_pipe, O_CLOEXEC) == -1) {
        r = -errno;
        snprintf(err, errlen, "pipe: %s", strerror(-r));
        goto out;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, spec_pipe[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, ready_pipe[1], STDOUT_FILENO);
    posix_spawnattr_init(&attr);
    {
        sigset_t none, def;
        sigemptyset(&none);
        sigemptyset(&def);
        sigaddset(&def, SIGPIPE);
        sigaddset(&def, SIGTERM);
        sigaddset(&def, SIGINT);
        sigaddset(&def, SIGCHLD);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setsigdefault(&attr, &def);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    }
    snprintf(level, sizeof(level), "AGENT_RUNNER_LOG_LEVEL=%s",
             cfg->log_level ? cfg->log_level : "info");
    argv[0] = (char *)"agent-runner-keeper";
    argv[1] = NULL;
    envp[0] = (char *)"PATH=/usr/bin:/bin";
    envp[1] = level;
    /* a remote provider's settings (its API key among them) reach its keepers only */
    if (env->provider->keeper_env)
        npenv = env->provider->keeper_env(penv, KEEPER_ENV_MAX);
    for (size_t i = 0; i < npenv; i++)
        envp[2 + i] = (char *)penv[i];
    envp[2 + npenv] = NULL;
    /* the local keeper has no remote provider in it (keeper/keeper_local.c) */
    bin = env->provider->caps.remote && cfg->keeper_remote_bin ? cfg->keeper_remote_bin
                                                               : cfg->keeper_bin;
    r = -posix_spawn(&pid, bin, &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(spec_pipe[0]);
    close(ready_pipe[1]);
    spec_pipe[0] = ready_pipe[1] = -1;
    if (r < 0) {
        snprintf(err, errlen, "cannot start the keeper '%s': %s", bin, strerror(-r));
        goto out;
    }
    r = util_write_all(spec_pipe[1], spec->data, spec->len);
    close(spec_pipe[1]);
    spec_pipe[1] = -1;
    if (r < 0) {
        snprintf(err, errlen, "cannot hand the spec to the keeper: %s", strerror(-r));
        goto out;
    }
    r = env_link_read_line(ready_pipe[0], &rl, deadline, &line, &len, NULL);
    if (r < 0) {
        snprintf(err, errlen, "the keeper did not start: %s", strerror(-r));
        goto out;
    }
    r = keeper_proto_decode(line, len, &m);
    if (r == 0 && m.kind == KEEPER_MSG_ERROR) {
        snprintf(err, errlen, "sandbox failed to start: %.*s",
                 (int)(m.payload_len > 300 ? 300 : m.payload_len), m.payload);
        /* a message that starts with the wire code keeps it (the provider's 429s) */
        r = m.payload_len > 17 && strncmp(m.payload, "sandbox_capacity:", 17) == 0
                ? AR_E_SANDBOX_CAPACITY
                : AR_E_SANDBOX;
        goto out;
    }
    if (r < 0 || m.kind != KEEPER_MSG_READY) {
        snprintf(err, errlen, "sandbox failed to start: %.300s", line);
        r = AR_E_SANDBOX;
        goto out;
    }
    env->keeper_pid = m.keeper_pid;
    env->sandbox_pid = m.sandbox_pid;
    stages_keeper_parse(m.payload, m.payload_len);
    r = 0;
out:
    if (pid > 0)
        while (waitpid(pid, NULL, 0) == -1 && errno == EINTR)
            ;
    free(line);
    acp_lines_release(&rl);
    for (int i = 0; i < 2; i++) {
        if (spec_pipe[i] >= 0)
            close(spec_pipe[i]);
        if (ready_pipe[i] >= 0)
            close(ready_pipe[i]);
    }
    return r;
}

/*
 * The workspace and its host confinement: the folder given to the slot's own host uid, the
 * capped workspace tmpfs, the request's files, then the workspace given to that uid and the
 * cgroup made. Without a probed host (unit tests) only the files.
 */
int environment_prepare_sandbox(struct environment *env, const struct run_request *req,
                                struct sandbox_env *confine, char *err, size_t errlen)
{
    const struct sandbox_host *sh = env->cfg->sandbox;
    int r;

    memset(confine, 0, sizeof(*confine));
    if (sh) {
        r = sandbox_host_env_prepare(sh, env->has_slot ? env->h.index : 0, env->paths.dir, confine,
                                     err, errlen);
        if (r < 0)
            return AR_E_SANDBOX;
    }
    r = env_setup_workspace(&env->paths, req, err, errlen);
    if (r < 0 || !sh)
        return r;
    return sandbox_host_env_seal(sh, env->paths.dir, confine, err, errlen) < 0 ? AR_E_SANDBOX : 0;
}

struct pool_reservation environment_reservation(const struct run_request *req,
                                                const struct sandbox_plan *plan, const char *key,
                                                uint64_t idle_ms, bool per_turn)
{
    return (struct pool_reservation){.key = key,
                                     .by_pid = util_self_pid(),
                                     .harness = (uint8_t)req->harness,
                                     .per_turn = per_turn,
                                     .idle_ms = (uint32_t)idle_ms,
                                     .provider = plan->provider,
                                     .model = plan->model_name,
                                     .turn_id = req->turn_id};
}

void environment_release_slot(struct environment *env)
{
    /* the keeper frees its own slot; free it here only if nobody started */
    if (env->has_slot && env->cfg->pool)
        (void)pool_session_release_unstarted(env->cfg->pool, env->h, TEARDOWN_FAILED_TURN);
    env->has_slot = false;
}
