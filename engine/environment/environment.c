#include "environment/environment.h"
#include "environment/environment_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "core/policy.h"
#include "egress/egress_policy.h"
#include "proto/keeper_proto.h"
#include "sandbox/host.h"
#include "turn/run_turn.h"

#define DESTROY_WAIT_MS 10000
#define KEEPER_ENV_MAX 32

struct environment *environment_new(const struct engine_config *cfg)
{
    struct environment *env = calloc(1, sizeof(*env));

    if (!env)
        return NULL;
    env->cfg = cfg;
    env->fd = -1;
    env->next_id = 1;
    acp_lines_init(&env->lines, ACP_LINE_MAX_DEFAULT);
    return env;
}

void environment_free(struct environment *env)
{
    if (!env)
        return;
    if (env->fd >= 0)
        close(env->fd);
    acp_lines_release(&env->lines);
    if (env->agent_caps)
        json_object_put(env->agent_caps);
    json_object_put(env->lease_report);
    free(env);
}

/* Read one '\n'-terminated line from fd before deadline (monotonic ms, 0 = none). */
static int read_line_fd(int fd, struct acp_lines *lines, int64_t deadline, char **ret,
                        size_t *ret_len, const struct environment *env)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int timeout = -1, r;
        ssize_t n;

        r = acp_lines_next(lines, ret, ret_len);
        if (r != 0)
            return r;
        if (env && env->before_wait)
            env->before_wait(env->before_wait_ctx);
        if (deadline) {
            int64_t left = deadline - util_now_ms();
            if (left <= 0)
                return -ETIMEDOUT;
            timeout = left > 1000000 ? 1000000 : (int)left;
        }
        r = poll(&p, 1, timeout);
        if (r == -1 && errno == EINTR)
            continue;
        if (r == -1)
            return -errno;
        if (r == 0)
            continue;
        n = acp_lines_fill(lines, fd);
        if (n == -EAGAIN)
            continue;
        if (n < 0)
            return (int)n;
        if (n == 0)
            return -EPIPE;
    }
}

int environment_connect_keeper(struct environment *env, int64_t deadline, char *err, size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct keeper_msg m;
    char *line = NULL;
    size_t len;
    int fd, r;

    memcpy(sa.sun_path, env->paths.socket, strlen(env->paths.socket) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd == -1)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1) {
        r = -errno;
        close(fd);
        snprintf(err, errlen, "cannot reach the keeper: %s", strerror(-r));
        return r;
    }
    env->fd = fd;
    r = read_line_fd(fd, &env->lines, deadline, &line, &len, NULL);
    if (r < 0) {
        snprintf(err, errlen, "the keeper did not answer: %s", strerror(-r));
        return r;
    }
    r = keeper_proto_decode(line, len, &m);
    if (r < 0 || m.kind != KEEPER_MSG_HELLO) {
        snprintf(err, errlen, "the keeper refused the attach (%.40s)", line);
        r = r == 0 && m.kind == KEEPER_MSG_BUSY ? -EBUSY : AR_E_PROTOCOL;
        goto out;
    }
    env->keeper_pid = m.keeper_pid;
    env->sandbox_pid = m.sandbox_pid;
out:
    free(line);
    return r;
}

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
                                char *err, size_t errlen)
{
    const struct sandbox_host *sh = cfg->sandbox;
    struct egress_policy *pol = malloc(sizeof(*pol));
    json_object *o = NULL;

    if (!pol) {
        snprintf(err, errlen, "cannot build the egress policy: %s", strerror(ENOMEM));
        return NULL;
    }
    if (policy_egress(req, sh->cfg.private_egress, sh->cfg.runner_ports, sh->cfg.nrunner_ports, pol,
                      err, errlen) == 0) {
        o = egress_policy_to_json(pol);
        if (!o)
            snprintf(err, errlen, "cannot build the egress policy: %s", strerror(ENOMEM));
    }
    free(pol);
    return o;
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
        .channel_token = plan->channel_token,
    };
    char channel[sizeof(env->paths.dir) + 16];
    int r = -ENOMEM;

    if (confine) {
        spec.confined = true;
        spec.confine = *confine;
        spec.egress = environment_egress_json(cfg, req, err, errlen);
        if (!spec.egress)
            return AR_E_SANDBOX;
    }
    spec.sandbox = provider_sandbox_description(plan, env->paths.workspace,
                                                cfg->sandbox ? &cfg->sandbox->cfg : NULL);
    if (spec.sandbox) {
        snprintf(channel, sizeof(channel), "%s/%s", env->paths.dir, KEEPER_CHANNEL_DIR);
        json_object_object_add(spec.sandbox, "channel", json_object_new_string(channel));
        /* a remote sandbox cannot bind the socket in: a relay in it carries the channel */
        if (env->provider->caps.remote && cfg->harness_dir)
            json_object_object_add(spec.sandbox, "channelRelay",
                                   json_object_new_string(cfg->harness_dir));
        r = env->provider->acquire ? describe_lease(spec.sandbox, req, key, had_lease) : 0;
        if (r >= 0)
            r = keeper_spec_encode(&spec, out);
    }
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
    r = -posix_spawn(&pid, cfg->keeper_bin, &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(spec_pipe[0]);
    close(ready_pipe[1]);
    spec_pipe[0] = ready_pipe[1] = -1;
    if (r < 0) {
        snprintf(err, errlen, "cannot start the keeper '%s': %s", cfg->keeper_bin, strerror(-r));
        goto out;
    }
    r = util_write_all(spec_pipe[1], spec->data, spec->len);
    close(spec_pipe[1]);
    spec_pipe[1] = -1;
    if (r < 0) {
        snprintf(err, errlen, "cannot hand the spec to the keeper: %s", strerror(-r));
        goto out;
    }
    r = read_line_fd(ready_pipe[0], &rl, deadline, &line, &len, NULL);
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

int environment_acquire(const struct engine_config *cfg, const struct run_request *req,
                        const struct sandbox_plan *plan, const char *key, uint64_t idle_ms,
                        bool per_turn, bool had_lease, struct environment **ret, char *err,
                        size_t errlen)
{
    struct environment *env;
    struct sandbox_env confine;
    struct buf spec;
    bool created = false, started = false;
    int r;

    env = environment_new(cfg);
    if (!env)
        return -ENOMEM;
    env->provider = provider_get(req->sandbox);
    if (!env->provider) {
        snprintf(err, errlen, "sandbox: provider \"%s\" is not enabled", req->sandbox);
        environment_free(env);
        return AR_E_INVALID_REQUEST;
    }
    if (cfg->pool) {
        struct pool_reservation rv = environment_reservation(req, plan, key, idle_ms, per_turn);

        r = pool_session_reserve(cfg->pool, &rv, &env->h);
        if (r == -ENOSPC && environment_evict_spare(cfg) > 0) /* sessions before spares */
            r = pool_session_reserve(cfg->pool, &rv, &env->h);
        if (r < 0) {
            snprintf(err, errlen, r == -ENOSPC ? "no free session slot" : "session table: %s",
                     ar_strerror(r));
            environment_free(env);
            return r == -ENOSPC ? AR_E_CAPACITY : r;
        }
        env->has_slot = true;
    }
    r = env_setup_create(cfg->state_dir, &env->paths, err, errlen);
    if (r < 0)
        goto fail;
    created = true;
    if (env->has_slot)
        (void)pool_session_set_env_dir(cfg->pool, env->h, env->paths.dir);
    r = environment_prepare_sandbox(env, req, &confine, err, errlen);
    if (r < 0)
        goto fail;
    buf_init(&spec, KEEPER_SPEC_MAX);
    /* host confinement and egress are the local sandbox's; a remote one has its own */
    r = environment_encode_spec(env, req, plan, key, idle_ms, per_turn, had_lease,
                    cfg->sandbox && !env->provider->acquire ? &confine : NULL, &spec, err, errlen);
    if (r == 0)
        r = environment_spawn_keeper(env, &spec, err, errlen);
    buf_release(&spec);
    if (r < 0)
        goto fail;
    started = true;
    if (env->provider->acquire) {
        /* what the keeper's lease was (outcome, spans, where the harness works) */
        r = provider_report_read(env->paths.dir, &env->lease_report);
        if (r < 0)
            log_debug("unreadable lease report: %s", ar_strerror(r));
        if (jsonx_str(env->lease_report, "workspace"))
            snprintf(env->cwd, sizeof(env->cwd), "%s",
                     jsonx_str(env->lease_report, "workspace"));
    }
    r = environment_connect_keeper(env, util_now_ms() + (int64_t)cfg->keeper_start_ms, err, errlen);
    if (r < 0)
        goto fail;
    *ret = env;
    return 0;
fail:
    /* one error boundary: undo everything this call did */
    if (started) {
        if (environment_destroy(env, TEARDOWN_FAILED_TURN) < 0)
            log_debug("keeper %d did not finish its teardown", (int)env->keeper_pid);
    } else if (created) {
        /* the cgroup, the workspace mount and the folder, whatever exists of them */
        (void)sandbox_host_reclaim(cfg->sandbox, env->paths.dir);
    }
    environment_release_slot(env);
    environment_free(env);
    return r;
}

int environment_reconnect(const struct engine_config *cfg, struct pool_handle h,
                          struct environment **ret, char *err, size_t errlen)
{
    struct environment *env;
    struct pool_session *ps;
    int r;

    if (!cfg->pool)
        return -ENOENT;
    env = environment_new(cfg);
    ps = malloc(sizeof(*ps));
    if (!env || !ps) {
        free(ps);
        environment_free(env);
        return -ENOMEM;
    }
    r = pool_session_get_owned(cfg->pool, h, util_self_pid(), ps);
    if (r < 0) {
        free(ps);
        environment_free(env);
        snprintf(err, errlen, "the session slot changed hands");
        return -ESTALE;
    }
    memcpy(env->paths.dir, ps->env_dir, sizeof(ps->env_dir));
    memcpy(env->acp_session, ps->acp_session, sizeof(env->acp_session));
    /* env->provider stays NULL: a live keeper already runs its sandbox (the slot's provider
     * field is the model's provider family, for logs) */
    free(ps);
    snprintf(env->paths.workspace, sizeof(env->paths.workspace), "%s/workspace",
             env->paths.dir);
    snprintf(env->paths.socket, sizeof(env->paths.socket), "%s/keeper.sock", env->paths.dir);
    env->h = h;
    env->has_slot = true;
    env->warm = true;
    r = environment_connect_keeper(env, util_now_ms() + 5000, err, errlen);
    if (r < 0) {
        env->has_slot = false;
        environment_free(env);
        return r;
    }
    *ret = env;
    return 0;
}

int environment_send(struct environment *env, const struct buf *line)
{
    if (env->fd < 0 || env->harness_exited)
        return env->keeper_lost ? AR_E_KEEPER_LOST : AR_E_HARNESS_EXITED;
    if (util_write_all(env->fd, line->data, line->len) < 0)
        return AR_E_HARNESS_EXITED;
    return 0;
}

int environment_send_tool(struct environment *env, const struct buf *line)
{
    struct keeper_msg m = {
        .kind = KEEPER_MSG_TOOL, .payload = line->data, .payload_len = line->len};
    struct buf tagged;
    int r;

    if (m.payload_len > 0 && line->data[m.payload_len - 1] == '\n')
        m.payload_len--;
    buf_init(&tagged, line->len + 16);
    r = keeper_proto_encode(&m, &tagged);
    if (r == 0)
        r = environment_send(env, &tagged);
    buf_release(&tagged);
    return r;
}

int environment_request(struct environment *env, const char *method, json_object *params,
                        int64_t *ret_id)
{
    struct buf line;
    int64_t id = env->next_id++;
    int r;

    buf_init(&line, ACP_LINE_MAX_DEFAULT);
    r = acp_encode_request(&line, id, method, params);
    if (r == 0)
        r = environment_send(env, &line);
    buf_release(&line);
    if (r == 0 && ret_id)
        *ret_id = id;
    return r;
}

int environment_check_limits(struct environment *env)
{
    const char *code = NULL;

    if (env->limit)
        return 1;
    if (!env->cfg->sandbox || !env->paths.dir[0])
        return 0;
    if (sandbox_host_tripped(env->cfg->sandbox, env->paths.dir, &code, env->limit_msg,
                             sizeof(env->limit_msg)) != 1)
        return 0;
    env->limit = code;
    log_info("sandbox limit: %s", env->limit_msg);
    return 1;
}

/* The next wait ends at the deadline or the next limit check, whichever comes first. */
static int64_t wait_until(struct environment *env, int64_t deadline_ms)
{
    int64_t now = util_now_ms();

    if (!env->cfg->sandbox)
        return deadline_ms;
    if (!env->next_limit_check)
        env->next_limit_check = now + ENVIRONMENT_LIMIT_POLL_MS;
    return deadline_ms && deadline_ms < env->next_limit_check ? deadline_ms : env->next_limit_check;
}

/* The connection to the keeper ended: the harness exited, the keeper failed it, or died. */
static int connection_over(struct environment *env, const struct keeper_msg *km)
{
    env->harness_exited = true;
    if (km && km->kind == KEEPER_MSG_EXIT) {
        env->harness_status = km->status;
    } else if (km && km->kind == KEEPER_MSG_FAIL) {
        snprintf(
            env->fail, sizeof(env->fail), "%.*s",
            (int)(km->payload_len < sizeof(env->fail) ? km->payload_len : sizeof(env->fail) - 1),
            km->payload);
    } else if (!env->fail[0]) {
        env->keeper_lost = true;
        return AR_E_KEEPER_LOST;
    }
    return AR_E_HARNESS_EXITED;
}

int environment_recv(struct environment *env, int64_t deadline_ms, struct acp_msg *ret)
{
    char err[160];

    for (;;) {
        struct keeper_msg km;
        char *line;
        size_t len;
        int r, kr;

        if (env->fd < 0 || env->harness_exited)
            return env->keeper_lost ? AR_E_KEEPER_LOST : AR_E_HARNESS_EXITED;
        r = read_line_fd(env->fd, &env->lines, wait_until(env, deadline_ms), &line, &len, env);
        if (r == -ETIMEDOUT && env->cfg->sandbox && util_now_ms() >= env->next_limit_check) {
            env->next_limit_check = util_now_ms() + ENVIRONMENT_LIMIT_POLL_MS;
            if (environment_check_limits(env))
                return AR_E_SANDBOX_LIMIT;
            if (!deadline_ms || util_now_ms() < deadline_ms)
                continue;
        }
        if (r == -ETIMEDOUT)
            return r;
        if (r == -E2BIG)
            return AR_E_PROTOCOL;
        if (r < 0)
            return connection_over(env, NULL);
        kr = keeper_proto_decode(line, len, &km);
        if (kr == 0 && km.kind == KEEPER_MSG_TOOL) {
            /* the sandbox's keeper channel, relayed by the keeper */
            r = acp_decode(km.payload, km.payload_len, ret, err, sizeof(err));
            free(line);
            if (r == 0)
                return TURN_RECV_TOOL;
            env->malformed++;
            log_debug("skipping a malformed channel line: %s", err);
            continue;
        }
        if (kr == 0 && km.kind != KEEPER_MSG_ACP) {
            if (km.kind == KEEPER_MSG_EXIT || km.kind == KEEPER_MSG_FAIL) {
                r = connection_over(env, &km);
                free(line);
                return r;
            }
            free(line);
            log_debug("skipping a keeper '%s' line", keeper_proto_kind_name(km.kind));
            continue;
        }
        r = acp_decode(line, len, ret, err, sizeof(err));
        free(line);
        if (r == 0)
            return 0;
        env->malformed++;
        log_debug("skipping a malformed harness line: %s", err);
    }
}

int environment_park(struct environment *env, uint64_t window_ms, bool awaiting)
{
    struct buf line;
    int r;

    struct keeper_msg m = {.kind = awaiting ? KEEPER_MSG_AWAIT : KEEPER_MSG_PARK,
                           .ms = window_ms};

    buf_init(&line, 64);
    r = keeper_proto_encode(&m, &line);
    if (r == 0)
        r = environment_send(env, &line);
    buf_release(&line);
    close(env->fd);
    env->fd = -1;
    env->has_slot = false;
    return r;
}

int environment_destroy_keeper(pid_t keeper_pid, uint64_t keeper_start, int64_t wait_ms)
{
    int64_t deadline = util_now_ms() + wait_ms;

    if (!util_proc_alive(keeper_pid, keeper_start))
        return 0;
    kill(keeper_pid, SIGTERM);
    while (util_now_ms() < deadline) {
        if (!util_proc_alive(keeper_pid, keeper_start))
            return 0;
        usleep(2000);
    }
    if (util_proc_alive(keeper_pid, keeper_start))
        kill(keeper_pid, SIGKILL);
    return -ETIMEDOUT;
}

int environment_destroy(struct environment *env, enum teardown_reason reason)
{
    struct buf line;
    int64_t deadline = util_now_ms() + DESTROY_WAIT_MS;
    int r = 0;

    if (env->destroyed)
        return 0;
    env->destroyed = true;
    if (env->has_slot && env->cfg->pool)
        (void)pool_session_drain(env->cfg->pool, env->h, (uint8_t)reason);
    if (env->fd >= 0) {
        struct keeper_msg m = {.kind = KEEPER_MSG_DESTROY};

        buf_init(&line, 16);
        if (keeper_proto_encode(&m, &line) == 0)
            (void)util_write_all(env->fd, line.data, line.len);
        buf_release(&line);
        /* the keeper closes the socket as the last step of its teardown */
        for (;;) {
            char chunk[4096];
            struct pollfd p = {.fd = env->fd, .events = POLLIN};
            int64_t left = deadline - util_now_ms();
            ssize_t n;

            if (left <= 0) {
                r = -ETIMEDOUT;
                break;
            }
            if (poll(&p, 1, (int)left) <= 0)
                continue;
            n = read(env->fd, chunk, sizeof(chunk));
            if (n == 0 || (n == -1 && errno != EINTR && errno != EAGAIN))
                break;
        }
        close(env->fd);
        env->fd = -1;
    }
    if (r < 0 && env->keeper_pid > 0)
        r = environment_destroy_keeper(env->keeper_pid, 0, 1000);
    env->has_slot = false;
    log_debug("environment '%s' destroyed (%s)", env->paths.id, teardown_reason_name(reason));
    return r;
}

/* Wait until key is gone from the table (its keeper finished tearing down). */
static bool wait_key_gone(struct pool *p, const char *key, int64_t wait_ms)
{
    int64_t deadline = util_now_ms() + wait_ms;

    for (;;) {
        int r = pool_session_present(p, key);

        if (r < 0)
            return false;
        if (r == 0)
            return true;
        if (util_now_ms() > deadline)
            return false;
        usleep(2000);
    }
}

int environment_evict(struct pool *p, const struct pool_victim *v)
{
    int r = 0;

    if (!v->any)
        return 0;
    log_debug("evicting session '%s' (%s)", v->key, teardown_reason_name(v->reason));
    if (v->keeper_pid > 0)
        (void)environment_destroy_keeper(v->keeper_pid, v->keeper_start, DESTROY_WAIT_MS);
    if (v->key[0] && !wait_key_gone(p, v->key, DESTROY_WAIT_MS)) {
        log_debug("session '%s' is still being torn down", v->key);
        r = -ETIMEDOUT;
    }
    return r;
}

int environment_kill(struct pool *p, const char *key, enum teardown_reason reason)
{
    struct pool_victim v;
    int r;

    if (!p)
        return 0;
    r = pool_session_kill(p, key, reason, &v);
    if (r <= 0)
        return r;
    (void)environment_evict(p, &v);
    return 1;
}

static int te_send(void *ctx, const struct buf *line)
{
    return environment_send(ctx, line);
}

static int te_send_tool(void *ctx, const struct buf *line)
{
    return environment_send_tool(ctx, line);
}

static int te_recv(void *ctx, int64_t deadline_ms, struct acp_msg *ret)
{
    return environment_recv(ctx, deadline_ms, ret);
}

static int64_t te_next_id(void *ctx)
{
    struct environment *env = ctx;

    return env->next_id++;
}

/* What the environment knows better than "the harness exited": a limit, the keeper's word. */
static bool te_failure(void *ctx, char *msg, size_t msglen, const char **ret_code)
{
    struct environment *env = ctx;

    if (environment_check_limits(env)) {
        snprintf(msg, msglen, "%s", env->limit_msg);
        *ret_code = env->limit;
        return true;
    }
    if (env->fail[0]) {
        snprintf(msg, msglen, "%s", env->fail);
        *ret_code = "runner_error";
        return true;
    }
    if (env->keeper_lost) {
        snprintf(msg, msglen,
                 "the environment's keeper process died during the turn: its "
                 "sandbox and the harness in it are gone");
        *ret_code = "runner_error";
        return true;
    }
    return false;
}

static bool te_exited(void *ctx, int *ret_status)
{
    struct environment *env = ctx;

    *ret_status = env->harness_status;
    return env->harness_exited;
}

void environment_turn_env(struct environment *env, struct turn_env *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->ctx = env;
    ret->send = te_send;
    ret->send_tool = te_send_tool;
    ret->recv = te_recv;
    ret->next_id = te_next_id;
    ret->exited = te_exited;
    ret->failure = te_failure;
    ret->acp_session = env->acp_session;
    ret->cwd = env->cwd[0] ? env->cwd : NULL;
}
