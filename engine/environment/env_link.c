/*
 * env_link — a worker's link to an environment's keeper (env_link.h).
 */
#include "environment/env_link.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "environment/env_stop.h"
#include "proto/keeper_proto.h"
#include "sandbox/host.h"
#include "turn/turn_env.h"

/* what goes to a keeper attached ahead before its hello: well under a socket's buffer */
#define AHEAD_WRITE_MAX (32u * 1024)

struct environment *environment_new(const struct engine_config *cfg)
{
    struct environment *env = calloc(1, sizeof(*env));

    if (!env)
        return NULL;
    env->cfg = cfg;
    env->fd = -1;
    env->next_id = 1;
    acp_lines_init(&env->lines, ACP_LINE_MAX_DEFAULT);
    buf_init(&env->ahead, SIZE_MAX / 2);
    return env;
}

void environment_free(struct environment *env)
{
    if (!env)
        return;
    if (env->fd >= 0)
        close(env->fd);
    acp_lines_release(&env->lines);
    buf_release(&env->ahead);
    if (env->agent_caps)
        json_object_put(env->agent_caps);
    json_object_put(env->lease_report);
    free(env);
}

int env_link_read_line(int fd, struct acp_lines *lines, int64_t deadline, char **ret,
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

/* Connect to the keeper's socket: env->fd. */
static int connect_keeper(struct environment *env, char *err, size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
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
    return 0;
}

int environment_attach_ahead(struct environment *env, int64_t hello_deadline, char *err,
                             size_t errlen)
{
    int r = connect_keeper(env, err, errlen);

    if (r < 0)
        return r;
    env->hello_pending = true;
    env->hello_deadline = hello_deadline;
    return 0;
}

int environment_connect_keeper(struct environment *env, int64_t deadline, char *err, size_t errlen)
{
    struct keeper_msg m;
    char *line = NULL;
    size_t len;
    int r;

    r = connect_keeper(env, err, errlen);
    if (r < 0)
        return r;
    r = env_link_read_line(env->fd, &env->lines, deadline, &line, &len, env);
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

/* The control line held for the next write ("#turn", environment_turn_begin), alone. */
static int flush_ahead(struct environment *env)
{
    int r = 0;

    if (env->ahead.len && env->fd >= 0)
        r = util_write_all(env->fd, env->ahead.data, env->ahead.len);
    buf_reset(&env->ahead);
    return r;
}

static int connection_over(struct environment *env, const struct keeper_msg *km);
static int hello_taken(struct environment *env, const char *line, size_t len);

/*
 * Before a write that may not fit the socket's buffer, the keeper's hello (attached ahead): a
 * keeper that accepts nothing would leave the write blocked with no deadline, where the hello
 * has one. AR_E_KEEPER_LOST when it does not come.
 */
static int hello_before_big_write(struct environment *env, size_t len)
{
    char *line;
    size_t n;
    int r;

    if (!env->hello_pending || len + env->ahead.len <= AHEAD_WRITE_MAX)
        return 0;
    r = env_link_read_line(env->fd, &env->lines, env->hello_deadline, &line, &n, NULL);
    if (r <= 0) {
        log_debug("the keeper did not answer the attach: %s", strerror(r < 0 ? -r : EPIPE));
        env->hello_pending = false;
        return connection_over(env, NULL);
    }
    r = hello_taken(env, line, n);
    free(line);
    return r;
}

int environment_send(struct environment *env, const struct buf *line)
{
    int r;

    if (env->fd < 0 || env->harness_exited)
        return env->keeper_lost ? AR_E_KEEPER_LOST : AR_E_HARNESS_EXITED;
    r = hello_before_big_write(env, line->len);
    if (r < 0)
        return r;
    if (env->keeper_limits[0] && strstr(line->data, "\"session/prompt\""))
        env->keeper_limits[0] = '\0'; /* a new prompt: the last verdict is stale */
    if (env->ahead.len) {
        /* "#turn" and the prompt after it: one write */
        r = buf_append(&env->ahead, line->data, line->len);
        r = r < 0 ? r : util_write_all(env->fd, env->ahead.data, env->ahead.len);
        buf_reset(&env->ahead);
    } else {
        r = util_write_all(env->fd, line->data, line->len);
    }
    return r < 0 ? AR_E_HARNESS_EXITED : 0;
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
    if (env->keeper_limits[0]
            ? sandbox_host_trip_message(env->cfg->sandbox, env->keeper_limits, &code,
                                        env->limit_msg, sizeof(env->limit_msg)) != 1
            : sandbox_host_tripped(env->cfg->sandbox, env->paths.dir, &code, env->limit_msg,
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

/*
 * A model gateway line of the keeper (keeper_proto.h "#model"), as the turn reads it: a
 * notification TURN_MODEL_CALL with the call's report as params, or TURN_MODEL_SYNCED.
 */
static int model_message(const struct keeper_msg *km, struct acp_msg *ret)
{
    struct buf text;
    char err[128];
    int r;

    buf_init(&text, km->payload_len + 128);
    if (km->kind == KEEPER_MSG_MODEL_SYNCED)
        r = buf_append_str(&text, "{\"jsonrpc\":\"2.0\",\"method\":\"" TURN_MODEL_SYNCED "\"}");
    else if (km->payload_len > 0 && km->payload[0] == '{')
        r = buf_printf(&text,
                       "{\"jsonrpc\":\"2.0\",\"method\":\"" TURN_MODEL_CALL "\",\"params\":%.*s}",
                       (int)km->payload_len, km->payload);
    else
        r = -EBADMSG;
    if (r == 0)
        r = acp_decode(text.data, text.len, ret, err, sizeof(err));
    buf_release(&text);
    return r;
}

/* The first line on a link attached ahead: the keeper's "#hello", or the attach failed. */
static int hello_taken(struct environment *env, const char *line, size_t len)
{
    struct keeper_msg m;

    env->hello_pending = false;
    if (keeper_proto_decode(line, len, &m) == 0 && m.kind == KEEPER_MSG_HELLO) {
        env->keeper_pid = m.keeper_pid;
        env->sandbox_pid = m.sandbox_pid;
        return 0;
    }
    log_debug("the keeper refused the attach (%.40s)", line);
    return connection_over(env, NULL);
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
        int64_t until;

        if (env->ahead.len && flush_ahead(env) < 0)
            return AR_E_HARNESS_EXITED;
        until = wait_until(env, deadline_ms);
        if (env->hello_pending && (!until || until > env->hello_deadline))
            until = env->hello_deadline;
        r = env_link_read_line(env->fd, &env->lines, until, &line, &len, env);
        if (env->hello_pending && r > 0) {
            r = hello_taken(env, line, len);
            free(line);
            if (r < 0)
                return r;
            continue;
        }
        if (env->hello_pending && r == -ETIMEDOUT && util_now_ms() >= env->hello_deadline) {
            log_debug("the keeper did not answer the attach");
            return connection_over(env, NULL);
        }
        if (r == -ETIMEDOUT && env->cfg->sandbox && !env->hello_pending &&
            util_now_ms() >= env->next_limit_check) {
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
        if (kr == 0 && (km.kind == KEEPER_MSG_MODEL || km.kind == KEEPER_MSG_MODEL_SYNCED)) {
            r = model_message(&km, ret);
            free(line);
            if (r == 0)
                return TURN_RECV_MODEL;
            env->malformed++;
            continue;
        }
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
            if (km.kind == KEEPER_MSG_LIMITS && km.payload_len < sizeof(env->keeper_limits)) {
                memcpy(env->keeper_limits, km.payload, km.payload_len);
                env->keeper_limits[km.payload_len] = '\0';
            } else {
                log_debug("skipping a keeper '%s' line", keeper_proto_kind_name(km.kind));
            }
            free(line);
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

/* One control line to the keeper. */
static int send_control(struct environment *env, const struct keeper_msg *m)
{
    struct buf line;
    int r;

    buf_init(&line, m->payload_len + 64);
    r = keeper_proto_encode(m, &line);
    if (r == 0)
        r = environment_send(env, &line);
    buf_release(&line);
    return r;
}

int environment_turn_begin(struct environment *env, const char *json, size_t len)
{
    struct keeper_msg m = {.kind = KEEPER_MSG_TURN, .payload = json, .payload_len = len};

    if (env->fd < 0 || env->harness_exited)
        return env->keeper_lost ? AR_E_KEEPER_LOST : AR_E_HARNESS_EXITED;
    /* held for the prompt that follows (environment_send), or sent before any wait */
    buf_reset(&env->ahead);
    return keeper_proto_encode(&m, &env->ahead);
}

int environment_turn_adopt(struct environment *env, const char *turn_id, char **ret, char *err,
                           size_t errlen)
{
    struct keeper_msg m = {
        .kind = KEEPER_MSG_ADOPT, .payload = turn_id, .payload_len = strlen(turn_id)};
    int64_t deadline = util_now_ms() + 5000;
    char *line = NULL;
    size_t len;
    int r;

    r = send_control(env, &m);
    if (r < 0)
        return util_fail(r, err, errlen, "the keeper is gone");
    for (;;) {
        r = env_link_read_line(env->fd, &env->lines, deadline, &line, &len, NULL);
        if (r < 0)
            return util_fail(r, err, errlen, "the keeper did not answer the adoption: %s",
                             strerror(-r));
        if (keeper_proto_decode(line, len, &m) == 0 &&
            (m.kind == KEEPER_MSG_TURN || m.kind == KEEPER_MSG_NOTURN))
            break;
        free(line); /* nothing else comes before the answer; skipped if it does */
    }
    if (m.kind == KEEPER_MSG_NOTURN) {
        free(line);
        return util_fail(-ENOENT, err, errlen, "the keeper holds no such turn");
    }
    memmove(line, m.payload, m.payload_len);
    line[m.payload_len] = '\0';
    *ret = line;
    return 0;
}

int environment_park(struct environment *env, uint64_t window_ms, bool awaiting)
{
    struct buf line;
    int r;

    struct keeper_msg m = {.kind = awaiting ? KEEPER_MSG_AWAIT : KEEPER_MSG_PARK, .ms = window_ms};

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

int environment_destroy(struct environment *env, enum teardown_reason reason)
{
    struct buf line;
    int64_t deadline = util_now_ms() + ENVIRONMENT_STOP_WAIT_MS;
    int r = 0;

    if (env->destroyed)
        return 0;
    env->destroyed = true;
    if (env->has_slot && env->cfg->pool)
        (void)pool_session_drain(env->cfg->pool, env->h, (uint8_t)reason);
    if (env->fd >= 0) {
        struct keeper_msg m = {.kind = KEEPER_MSG_DESTROY};

        (void)flush_ahead(env);
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

static int te_send(void *ctx, const struct buf *line)
{
    return environment_send(ctx, line);
}

/* One line to the sandbox's keeper channel: tagged "@tool" for the keeper. */
static int te_send_tool(void *ctx, const struct buf *line)
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
        r = environment_send(ctx, &tagged);
    buf_release(&tagged);
    return r;
}

/* "#model-sync": the keeper answers TURN_MODEL_SYNCED behind the reports it has. */
static int te_model_sync(void *ctx)
{
    struct keeper_msg m = {.kind = KEEPER_MSG_MODEL_SYNC};
    struct buf line;
    int r;

    buf_init(&line, 32);
    r = keeper_proto_encode(&m, &line);
    if (r == 0)
        r = environment_send(ctx, &line);
    buf_release(&line);
    return r;
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
    ret->model_sync = te_model_sync;
    ret->acp_session = env->acp_session;
    ret->cwd = env->cwd[0] ? env->cwd : NULL;
}
