#include "keeper.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/fstree.h"
#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "core/contracts.h"
#include "egress_report.h"
#include "keeper_channel.h"
#include "keeper_claim.h"
#include "proto/acp.h"
#include "proto/keeper_proto.h"
#include "provider/provider.h"
#include "sandbox/egress.h"
#include "session/pool.h"

#define PENDING_MAX 32

struct keeper {
    struct keeper_spec spec;
    const struct provider_ops *provider;
    struct provider_process proc;
    struct provider_lease lease; /* remote providers: the sandbox this keeper leased */
    bool leased;
    const char *env_dir;
    const char *socket_path;
    int64_t idle_ms;
    int64_t deadline; /* monotonic ms; 0 = none */
    bool per_turn;

    int listen_fd;
    int client_fd;
    int sig_fd;
    struct acp_lines client_in;
    struct buf client_out;

    pid_t child; /* proc.pid, kept after the provider stopped it */
    int child_in, child_out, child_err;
    struct acp_lines child_lines;
    struct buf child_stdin;
    int log_fd;
    size_t log_bytes;

    struct pool *pool;
    struct pool_handle h;
    struct egress_report egress;
    char fail[160]; /* why the keeper ends the environment itself ("#fail"), or "" */

    bool prompt_in_flight;
    char prompt_id[64];
    char acp_session[128];
    bool parked;
    bool awaiting; /* parked on a permission gate: expiry is approval-expiry */
    uint64_t dropped;
    int exit_status;
    bool child_exited;
    uint8_t reason; /* why the keeper ends (0: the reason its slot was drained with) */
    /* harness requests relayed to the attached worker and not answered yet */
    char *pending[PENDING_MAX];
    size_t npending;
    struct keeper_channel channel; /* the sandbox's tool channel, relayed as "@tool" lines */
};

static void emit_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void emit_error(const char *fmt, ...)
{
    char text[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    (void)keeper_proto_start_error(STDOUT_FILENO, text); /* the start pipe */
}

/*
 * A remote provider keeps its sandbox alive while a turn is in flight (a worker attached, or
 * a prompt waiting on an approval) and lets its idle backstop run otherwise.
 */
static void sandbox_busy(struct keeper *k, bool busy)
{
    if (k->provider && k->provider->busy && k->proc.exit_fd >= 0)
        k->provider->busy(&k->proc, busy);
}

/* A control line to the attached worker. */
static void control_to_client(struct keeper *k, const struct keeper_msg *m)
{
    if (k->client_fd >= 0 && keeper_proto_encode(m, &k->client_out) < 0)
        log_warn("dropping a '%s' line: queue full", keeper_proto_kind_name(m->kind));
}

/* The keeper's slot steps (no-ops without a session table). */
static void slot_set_pids(struct keeper *k)
{
    if (k->pool)
        (void)pool_session_set_keeper(k->pool, k->h, getpid(), util_proc_start_time(getpid()),
                                      k->child);
}

static void slot_mark_broken(struct keeper *k)
{
    if (k->pool)
        (void)pool_session_mark_broken(k->pool, k->h);
}

/* The attached worker vanished without parking: keep a keyed session warm but broken. */
static void slot_orphaned(struct keeper *k)
{
    if (k->pool)
        (void)pool_session_orphaned(k->pool, k->h, !k->per_turn, util_now_ms() + k->idle_ms);
}

static void slot_release(struct keeper *k)
{
    if (k->pool)
        (void)pool_session_free(k->pool, k->h, k->reason);
}

static void queue(struct buf *q, const char *data, size_t len)
{
    if (buf_append(q, data, len) < 0 || buf_append_char(q, '\n') < 0)
        log_warn("dropping a %zu-byte line: queue full", len);
}

static void flush_fd(int fd, struct buf *q, bool *broken)
{
    while (q->len > 0 && fd >= 0) {
        ssize_t n = write(fd, q->data, q->len);
        if (n == -1) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                *broken = true;
            return;
        }
        buf_consume(q, (size_t)n);
    }
}

static void to_child(struct keeper *k, const char *line, size_t len)
{
    if (k->child_in >= 0)
        queue(&k->child_stdin, line, len);
}

static void encode_to_child(struct keeper *k, struct buf *line)
{
    if (line->len > 0 && line->data[line->len - 1] == '\n')
        line->len--;
    to_child(k, line->data, line->len);
    buf_release(line);
}

/* Answer the harness while no worker is attached (DESIGN.md §1: the keeper is dumb). */
static void answer_alone(struct keeper *k, struct acp_msg *m)
{
    struct buf out;

    buf_init(&out, KEEPER_REPLY_MAX);
    if (m->kind == ACP_REQUEST && strcmp(m->method, "session/request_permission") == 0) {
        json_object *res = json_object_new_object(), *outcome = json_object_new_object();
        json_object *opts = jsonx_get(m->params, "options");
        const char *reject = NULL;

        for (size_t i = 0; opts && i < json_object_array_length(opts); i++) {
            json_object *o = json_object_array_get_idx(opts, i);
            const char *kind = jsonx_str(o, "kind");
            if (kind && strncmp(kind, "reject", 6) == 0) {
                reject = jsonx_str(o, "optionId");
                break;
            }
        }
        if (reject) {
            json_object_object_add(outcome, "outcome", json_object_new_string("selected"));
            json_object_object_add(outcome, "optionId", json_object_new_string(reject));
        } else {
            json_object_object_add(outcome, "outcome", json_object_new_string("cancelled"));
        }
        json_object_object_add(res, "outcome", outcome);
        acp_encode_result(&out, m->id, res);
        json_object_put(res);
        log_info("rejected a permission request between turns");
    } else if (m->kind == ACP_REQUEST) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Method not found: %.120s", m->method);
        acp_encode_error(&out, m->id, ACP_METHOD_NOT_FOUND, msg);
    } else {
        if (m->kind == ACP_RESPONSE && k->prompt_in_flight) {
            char id[64];
            snprintf(id, sizeof(id), "%s", jsonx_text(m->id, NULL));
            if (strcmp(id, k->prompt_id) == 0)
                k->prompt_in_flight = false;
        }
        k->dropped++;
        log_debug("dropped a harness message between turns");
        buf_release(&out);
        return;
    }
    encode_to_child(k, &out);
}

/* A harness line for the worker: only an ACP line (one that cannot pose as a control line). */
static void relay_to_client(struct keeper *k, const char *line, size_t len)
{
    struct keeper_msg m = {.kind = KEEPER_MSG_ACP, .payload = line, .payload_len = len};
    int r = keeper_proto_encode(&m, &k->client_out);

    if (r == -E2BIG)
        log_warn("dropping a %zu-byte line: queue full", len);
    if (r < 0)
        k->dropped++;
}

static void on_child_line(struct keeper *k, char *line, size_t len)
{
    struct acp_msg m;
    char err[128];

    if (k->client_fd >= 0) {
        if (strstr(line, "\"method\"") && strstr(line, "\"id\"") &&
            acp_decode(line, len, &m, err, sizeof(err)) == 0) {
            if (m.kind == ACP_REQUEST && k->npending < PENDING_MAX)
                k->pending[k->npending++] = strdup(line);
            acp_msg_release(&m);
        }
        if (k->prompt_in_flight && len > 0 && line[0] == '{' && strstr(line, k->prompt_id)) {
            if (acp_decode(line, len, &m, err, sizeof(err)) == 0) {
                if (m.kind == ACP_RESPONSE &&
                    strcmp(jsonx_text(m.id, NULL), k->prompt_id) == 0)
                    k->prompt_in_flight = false;
                acp_msg_release(&m);
            }
        }
        relay_to_client(k, line, len);
        return;
    }
    if (acp_decode(line, len, &m, err, sizeof(err)) < 0) {
        k->dropped++;
        return;
    }
    answer_alone(k, &m);
    acp_msg_release(&m);
}

static void track_client_request(struct keeper *k, const char *line, size_t len)
{
    struct acp_msg m;
    char err[128];
    const char *sid;

    if (!strstr(line, "\"session/prompt\""))
        return;
    if (acp_decode(line, len, &m, err, sizeof(err)) < 0)
        return;
    if (m.kind == ACP_REQUEST && strcmp(m.method, "session/prompt") == 0) {
        k->prompt_in_flight = true;
        snprintf(k->prompt_id, sizeof(k->prompt_id), "%s", jsonx_text(m.id, NULL));
        sid = jsonx_str(m.params, "sessionId");
        snprintf(k->acp_session, sizeof(k->acp_session), "%s", sid ? sid : "");
    }
    acp_msg_release(&m);
}

/* The worker answered a relayed request: it is no longer pending. */
static void forget_pending(struct keeper *k, const char *line, size_t len)
{
    struct acp_msg m, p;
    char err[128];

    if (acp_decode(line, len, &m, err, sizeof(err)) < 0)
        return;
    for (size_t i = 0; m.kind == ACP_RESPONSE && i < k->npending; i++) {
        if (acp_decode(k->pending[i], strlen(k->pending[i]), &p, err, sizeof(err)) < 0)
            continue;
        if (strcmp(jsonx_text(p.id, NULL), jsonx_text(m.id, NULL)) == 0) {
            free(k->pending[i]);
            k->pending[i] = k->pending[--k->npending];
            acp_msg_release(&p);
            break;
        }
        acp_msg_release(&p);
    }
    acp_msg_release(&m);
}

/*
 * The worker detached with requests of the harness unanswered: answer them as between turns
 * (a parked approval is the exception: its requests stay open on purpose, see "#await").
 */
static void answer_pending(struct keeper *k, bool keep)
{
    for (size_t i = 0; i < k->npending; i++) {
        struct acp_msg m;
        char err[128];

        if (!keep && acp_decode(k->pending[i], strlen(k->pending[i]), &m, err, sizeof(err)) == 0) {
            answer_alone(k, &m);
            acp_msg_release(&m);
        }
        free(k->pending[i]);
    }
    k->npending = 0;
}

/* "#claim": a spare is bound to its session (keeper_claim.c); a refused claim ends it. */
static bool claim(struct keeper *k, const struct keeper_msg *m)
{
    struct keeper_claim c;
    char err[sizeof(k->fail) - 16];

    if (keeper_claim_apply(&k->spec, k->provider, &k->proc, m->payload, m->payload_len, &c, err,
                           sizeof(err)) < 0) {
        snprintf(k->fail, sizeof(k->fail), "spare claim: %s", err);
        log_warn("%s: tearing down", k->fail);
        return false;
    }
    k->idle_ms = (int64_t)c.idle_ms;
    k->per_turn = c.per_turn;
    return true;
}

static bool on_client_line(struct keeper *k, char *line, size_t len)
{
    struct keeper_msg m;

    if (keeper_proto_decode(line, len, &m) < 0) {
        log_debug("dropping a malformed worker line");
        return true;
    }
    switch (m.kind) {
    case KEEPER_MSG_DESTROY:
        return false;
    case KEEPER_MSG_PARK:
    case KEEPER_MSG_AWAIT:
        /* idle, or a prompt that waits on an approval (kept in flight) */
        k->idle_ms = (int64_t)m.ms;
        k->per_turn = false;
        k->parked = true;
        k->awaiting = m.kind == KEEPER_MSG_AWAIT;
        k->prompt_in_flight = false;
        answer_pending(k, k->awaiting);
        if (!k->awaiting)
            keeper_channel_detached(&k->channel);
        sandbox_busy(k, k->awaiting);
        return true;
    case KEEPER_MSG_TOOL:
        keeper_channel_from_worker(&k->channel, m.payload, m.payload_len);
        return true;
    case KEEPER_MSG_ACP:
        track_client_request(k, line, len);
        if (k->npending && !strstr(line, "\"method\""))
            forget_pending(k, line, len);
        to_child(k, line, len);
        return true;
    case KEEPER_MSG_CLAIM:
        return claim(k, &m);
    default:
        log_debug("ignoring a worker '%s' line", keeper_proto_kind_name(m.kind));
        return true;
    }
}

static void cancel_in_flight(struct keeper *k)
{
    json_object *params;
    struct buf out;

    if (!k->prompt_in_flight)
        return;
    params = json_object_new_object();
    json_object_object_add(params, "sessionId", json_object_new_string(k->acp_session));
    buf_init(&out, 4096);
    acp_encode_notification(&out, "session/cancel", params);
    json_object_put(params);
    encode_to_child(k, &out);
    log_info("worker vanished mid-turn: cancelled the prompt of session '%s'", k->acp_session);
    slot_mark_broken(k);
}

static void client_gone(struct keeper *k)
{
    if (k->client_fd < 0)
        return;
    close(k->client_fd);
    k->client_fd = -1;
    acp_lines_release(&k->client_in);
    buf_release(&k->client_out);
    answer_pending(k, false);
    if (!k->parked) {
        cancel_in_flight(k);
        slot_orphaned(k);
        keeper_channel_detached(&k->channel);
        sandbox_busy(k, false);
    }
    /* a per-turn environment whose worker vanished has nobody to serve: end it now */
    k->deadline = util_now_ms() + (k->per_turn && !k->parked ? 1 : k->idle_ms);
}

static void accept_client(struct keeper *k)
{
    struct keeper_msg hello = {.kind = KEEPER_MSG_HELLO, .keeper_pid = (int32_t)getpid(),
                               .sandbox_pid = (int32_t)k->child};
    int fd = accept4(k->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

    if (fd == -1)
        return;
    if (k->client_fd >= 0) {
        struct keeper_msg busy = {.kind = KEEPER_MSG_BUSY};

        (void)keeper_proto_write(fd, &busy);
        close(fd);
        return;
    }
    k->client_fd = fd;
    k->parked = false;
    k->awaiting = false;
    k->deadline = 0;
    sandbox_busy(k, true);
    acp_lines_init(&k->client_in, ACP_LINE_MAX_DEFAULT);
    buf_init(&k->client_out, KEEPER_QUEUE_MAX);
    control_to_client(k, &hello);
    /* anything the harness said while nobody listened is gone; a new turn starts clean */
}

static void drain_stderr(struct keeper *k)
{
    char chunk[16384];

    for (;;) {
        ssize_t n = read(k->child_err, chunk, sizeof(chunk));
        if (n == -1 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0) {
                close(k->child_err);
                k->child_err = -1;
            }
            return;
        }
        if (k->log_fd >= 0 && k->log_bytes < HARNESS_LOG_MAX) {
            size_t take = (size_t)n;
            if (take > HARNESS_LOG_MAX - k->log_bytes)
                take = HARNESS_LOG_MAX - k->log_bytes;
            (void)util_write_all(k->log_fd, chunk, take);
            k->log_bytes += take;
        }
    }
}

/* A harness line longer than the relay takes: the environment ends, the worker is told why. */
static void harness_line_too_long(struct keeper *k, bool *stop)
{
    snprintf(k->fail, sizeof(k->fail), "harness output line over %u bytes", ACP_LINE_MAX_DEFAULT);
    log_warn("%s: tearing down", k->fail);
    *stop = true;
}

static void read_lines(struct keeper *k, int *fd, struct acp_lines *lines, bool from_child,
                       bool *stop)
{
    ssize_t n = acp_lines_fill(lines, *fd);
    char *line;
    size_t len;
    int r;

    if (n == -EAGAIN)
        return;
    if (n == -E2BIG && from_child) {
        harness_line_too_long(k, stop);
        return;
    }
    if (n <= 0) {
        if (from_child) {
            close(*fd);
            *fd = -1;
        } else {
            client_gone(k);
        }
        return;
    }
    while ((r = acp_lines_next(lines, &line, &len)) == 1) {
        if (from_child) {
            on_child_line(k, line, len);
        } else if (!on_client_line(k, line, len)) {
            *stop = true;
            free(line);
            return;
        }
        free(line);
    }
    if (r == -E2BIG && from_child)
        harness_line_too_long(k, stop);
    else if (r < 0) {
        log_warn("dropping a connection: %s", strerror(-r));
        if (from_child)
            *stop = true;
        else
            client_gone(k);
    }
}

static void reap_child(struct keeper *k)
{
    int status;
    pid_t pid;

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid == k->child) {
            k->child_exited = true;
            k->proc.pid = 0; /* reaped: its pid may be reused, never signal it again */
            k->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
    }
}

/* A leased sandbox goes as the reason this keeper ends says (else its slot's drain reason). */
static void release_lease(struct keeper *k)
{
    enum teardown_reason why = (enum teardown_reason)k->reason;
    int r;

    if (!k->leased)
        return;
    if (why == TEARDOWN_NONE && k->pool) {
        r = pool_session_teardown_reason(k->pool, k->h);
        why = r > 0 ? (enum teardown_reason)r : TEARDOWN_NONE;
    }
    if (why == TEARDOWN_NONE)
        why = k->per_turn || !k->parked ? TEARDOWN_PER_TURN : TEARDOWN_SHUTDOWN_IDLE;
    provider_lease_end(k->provider, &k->lease, why, k->pool);
    k->leased = false;
}

/* A remote harness's exit is announced on exit_fd (there is no child to reap). */
static void remote_exited(struct keeper *k)
{
    int status = k->provider->exit_status ? k->provider->exit_status(&k->proc) : 255;

    if (status == -EAGAIN)
        return;
    k->exit_status = status;
    k->child_exited = true;
}

/* The harness closed its output: wait a moment for its exit, then end it (it may hide). */
static void await_child(struct keeper *k)
{
    for (int i = 0; i < 100 && !k->child_exited; i++, usleep(5000))
        reap_child(k);
    if (!k->child_exited) {
        k->provider->stop(&k->proc);
        k->child_exited = true;
        k->exit_status = 128 + SIGKILL;
    }
}

/* Cgroup and mount first (quick); the folder after the worker was let go (deep trees). */
static void remove_env(struct keeper *k, bool folder)
{
    const struct sandbox_cgroup *cg = k->spec.confined ? &k->spec.confine.cg : NULL;

    if ((folder ? fstree_remove(k->env_dir) : sandbox_host_release_env(cg, k->env_dir)) < 0)
        log_warn("cannot remove all of the environment '%s'", k->env_dir);
}

static void teardown(struct keeper *k)
{
    if (k->provider && (k->proc.exit_fd >= 0 || k->proc.pid > 0 || k->proc.priv))
        k->provider->stop(&k->proc); /* the process tree, the cgroup's rest, the network */
    release_lease(k);
    if (k->client_fd >= 0 && (k->child_exited || k->fail[0])) {
        struct keeper_msg m = {.kind = k->fail[0] ? KEEPER_MSG_FAIL : KEEPER_MSG_EXIT,
                               .status = k->exit_status,
                               .payload = k->fail,
                               .payload_len = strlen(k->fail)};

        control_to_client(k, &m);
        {
            bool broken = false; /* the last lines, blocking */
            fcntl(k->client_fd, F_SETFL, fcntl(k->client_fd, F_GETFL) & ~O_NONBLOCK);
            flush_fd(k->client_fd, &k->client_out, &broken);
        }
    }
    if (k->log_fd >= 0)
        close(k->log_fd);
    keeper_channel_close(&k->channel);
    if (k->listen_fd >= 0)
        close(k->listen_fd);
    (void)unlink(k->socket_path);
    remove_env(k, false);
    slot_release(k);
    /* the worker waits for this close as the sign that the sandbox is gone */
    if (k->client_fd >= 0)
        close(k->client_fd);
    remove_env(k, true);
    acp_lines_release(&k->client_in);
    buf_release(&k->client_out);
}

/* The provider's own fds (the local sandbox's egress proxy and name server, a remote
 * sandbox's keeper channel relay). */
static int provider_fds(struct keeper *k, struct pollfd *p, int *timeout)
{
    size_t n;

    if (!k->provider || !k->provider->poll_fds || !k->proc.priv)
        return 0;
    n = k->provider->poll_fds(&k->proc, p, PROVIDER_POLLFDS_MAX, util_now_ms(), timeout);
    return (int)(n < PROVIDER_POLLFDS_MAX ? n : PROVIDER_POLLFDS_MAX);
}

static int loop(struct keeper *k)
{
    bool stop = false;

    while (!stop) {
        struct pollfd p[7 + KEEPER_CHANNEL_POLLFDS + PROVIDER_POLLFDS_MAX];
        int np = 0, ilisten = -1, iclient = -1, iout = -1, ierr = -1, iin = -1, iexit = -1, isig;
        int ich, iprov, nprov;
        int timeout = -1;
        size_t nch;

        isig = np;
        p[np++] = (struct pollfd){.fd = k->sig_fd, .events = POLLIN};
        if (k->client_fd < 0) {
            ilisten = np;
            p[np++] = (struct pollfd){.fd = k->listen_fd, .events = POLLIN};
        } else {
            iclient = np;
            p[np++] = (struct pollfd){
                .fd = k->client_fd,
                .events = (short)(POLLIN | (k->client_out.len ? POLLOUT : 0))};
        }
        ich = np;
        nch = keeper_channel_pollfds(&k->channel, p + np, KEEPER_CHANNEL_POLLFDS,
                                     k->client_fd < 0 || k->client_out.len < KEEPER_QUEUE_HIGH);
        np += (int)nch;
        if (k->child_out >= 0 && k->client_out.len < KEEPER_QUEUE_HIGH) {
            iout = np;
            p[np++] = (struct pollfd){.fd = k->child_out, .events = POLLIN};
        }
        if (k->child_err >= 0) {
            ierr = np;
            p[np++] = (struct pollfd){.fd = k->child_err, .events = POLLIN};
        }
        if (k->child_in >= 0 && k->child_stdin.len) {
            iin = np;
            p[np++] = (struct pollfd){.fd = k->child_in, .events = POLLOUT};
        }
        if (k->proc.exit_fd >= 0 && !k->child_exited) {
            iexit = np;
            p[np++] = (struct pollfd){.fd = k->proc.exit_fd, .events = POLLIN};
        }
        if (k->deadline) {
            int64_t left = k->deadline - util_now_ms();
            if (left <= 0) {
                log_info("idle deadline passed: tearing down");
                k->reason = k->awaiting ? TEARDOWN_APPROVAL_EXPIRY : TEARDOWN_IDLE_EXPIRY;
                break;
            }
            timeout = left > 60000 ? 60000 : (int)left;
        }
        iprov = np;
        nprov = provider_fds(k, p + np, &timeout);
        np += nprov;
        if (poll(p, (nfds_t)np, timeout) == -1) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (k->provider && k->provider->service && k->proc.priv)
            k->provider->service(&k->proc, p + iprov, (size_t)nprov, util_now_ms());
        if (p[isig].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(k->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                if (si.ssi_signo == SIGCHLD)
                    reap_child(k);
                else
                    stop = true;
            }
            if (stop)
                break;
        }
        if (ilisten >= 0 && (p[ilisten].revents & POLLIN))
            accept_client(k);
        if (iclient >= 0 && k->client_fd >= 0) {
            if (p[iclient].revents & POLLOUT) {
                bool broken = false;
                flush_fd(k->client_fd, &k->client_out, &broken);
                if (broken)
                    client_gone(k);
            }
            if (k->client_fd >= 0 && (p[iclient].revents & (POLLIN | POLLHUP | POLLERR)))
                read_lines(k, &k->client_fd, &k->client_in, false, &stop);
        }
        if (iin >= 0 && (p[iin].revents & (POLLOUT | POLLERR | POLLHUP))) {
            bool broken = false;
            flush_fd(k->child_in, &k->child_stdin, &broken);
            if (broken) {
                close(k->child_in);
                k->child_in = -1;
            }
        }
        /* the channel before the harness's stdout: pi's usage and error notifications are
         * in the socket before pi-acp ends the prompt, and must reach the worker first */
        keeper_channel_handle(&k->channel, p + ich, nch);
        if (iout >= 0 && (p[iout].revents & (POLLIN | POLLHUP | POLLERR)))
            read_lines(k, &k->child_out, &k->child_lines, true, &stop);
        if (ierr >= 0 && (p[ierr].revents & (POLLIN | POLLHUP | POLLERR)))
            drain_stderr(k);
        if (iexit >= 0 && (p[iexit].revents & POLLIN))
            remote_exited(k);
        if (k->client_fd >= 0 && k->client_out.len) {
            bool broken = false;
            flush_fd(k->client_fd, &k->client_out, &broken);
            if (broken)
                client_gone(k);
        }
        if (k->child_exited || (k->child_out < 0 && k->child_err < 0 && k->proc.exit_fd < 0)) {
            await_child(k);
            log_info("harness exited with status %d", k->exit_status);
            k->reason = TEARDOWN_HARNESS_EXITED;
            break;
        }
    }
    return 0;
}

static int setup_signals(void)
{
    static const int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP};

    signal(SIGPIPE, SIG_IGN);
    return util_signalfd_for(sigs, ARRAY_SIZE(sigs));
}

static int attach_slot(struct keeper *k)
{
    struct pool_info info;
    int r;

    if (!k->spec.has_slot)
        return 0;
    r = pool_attach(k->spec.shm, false, &k->pool);
    if (r < 0)
        return r;
    k->h.index = k->spec.slot;
    k->h.generation = k->spec.generation;
    pool_get_info(k->pool, &info);
    if (k->h.index >= info.nslots)
        return -EINVAL;
    slot_set_pids(k);
    return 0;
}

/* The sandbox, through the spec's provider. */
static int start_sandbox(struct keeper *k, char *err, size_t errlen)
{
    int r;

    k->provider = provider_get(k->spec.provider);
    if (!k->provider || !k->provider->start) {
        snprintf(err, errlen, "sandbox provider '%s' cannot start sandboxes here",
                 k->spec.provider);
        return -ENOTSUP;
    }
    k->proc.exit_fd = -1;
    if (k->provider->acquire) {
        r = provider_lease_begin(k->provider, &k->spec, k->pool, &k->lease, err, errlen);
        if (r < 0)
            return r;
        k->leased = true;
    }
    r = k->provider->start(&k->spec, &k->proc, err, errlen);
    if (r < 0)
        return r;
    if (!k->provider->exit_status)
        k->proc.exit_fd = -1; /* a local child: its exit comes as SIGCHLD */
    if (k->leased) {
        r = provider_report_write(k->spec.env_dir, k->lease.report);
        if (r < 0)
            log_debug("cannot write the lease report: %s", strerror(-r));
    }
    k->child = k->proc.pid;
    k->child_in = k->proc.in_fd;
    k->child_out = k->proc.out_fd;
    k->child_err = k->proc.err_fd;
    return 0;
}

static const char *env_get(const char *name)
{
    return getenv(name);
}

int keeper_main(int argc, char **argv)
{
    struct keeper k;
    char err[512], logpath[512];
    int64_t attach_ms;
    pid_t pid;
    int r;

    (void)argc;
    (void)argv;
    /*
     * Whatever else the starting worker had open (FastCGI connections of concurrent requests:
     * libfcgi does not mark them close-on-exec) must not live on here or in the sandbox.
     */
    close_range(3, ~0U, 0);
    memset(&k, 0, sizeof(k));
    keeper_channel_init(&k.channel);
    k.listen_fd = k.client_fd = k.sig_fd = k.child_in = k.child_out = k.child_err = -1;
    k.proc.exit_fd = -1;
    k.log_fd = -1;
    log_setup("keeper", LOG_LEVEL_INFO);
    log_level_from_env("AGENT_RUNNER_LOG_LEVEL");

    r = keeper_spec_read(STDIN_FILENO, &k.spec, err, sizeof(err));
    if (r < 0) {
        emit_error("%s", err);
        return 1;
    }
    /* remote providers read their settings from the environment the worker handed over */
    r = provider_configure_all(env_get, err, sizeof(err));
    if (r < 0) {
        emit_error("%s", err);
        return 1;
    }
    log_ctx_set(NULL, k.spec.session_key, NULL, k.spec.harness);
    k.env_dir = k.spec.env_dir;
    log_redact_add(k.spec.channel_token);
    k.socket_path = k.spec.socket;
    k.idle_ms = (int64_t)k.spec.idle_ms;
    attach_ms = (int64_t)k.spec.attach_timeout_ms;
    k.per_turn = k.spec.per_turn;
    r = util_unix_listen(k.socket_path, 0600, 4);
    if (r < 0) {
        emit_error("cannot listen on '%s': %s", k.socket_path, strerror(-r));
        teardown(&k);
        return 1;
    }
    k.listen_fd = r;

    /* detach from the starting worker: the master (child subreaper) adopts us */
    pid = fork();
    if (pid == -1) {
        emit_error("fork: %s", strerror(errno));
        teardown(&k);
        return 1;
    }
    if (pid > 0)
        _exit(0);
    setsid();
    util_redirect_null(STDIN_FILENO);

    r = setup_signals();
    if (r < 0) {
        emit_error("signals: %s", strerror(-r));
        teardown(&k);
        return 1;
    }
    k.sig_fd = r;
    r = attach_slot(&k);
    if (r < 0) {
        emit_error("cannot attach the session table: %s", strerror(-r));
        teardown(&k);
        return 1;
    }
    snprintf(logpath, sizeof(logpath), "%s/harness.log", k.env_dir);
    k.log_fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    acp_lines_init(&k.child_lines, ACP_LINE_MAX_DEFAULT);
    buf_init(&k.child_stdin, KEEPER_QUEUE_MAX);
    egress_report_init(&k.egress, k.pool);
    k.proc.on_egress = egress_report_event;
    k.proc.ctx = &k.egress;
    r = keeper_channel_open(&k.channel, k.env_dir, k.spec.channel_token,
                            &(struct keeper_channel_worker){&k.client_fd, &k.parked, &k.client_out},
                            err, sizeof(err));
    if (r == 0)
        r = start_sandbox(&k, err, sizeof(err));
    if (r < 0) {
        /* nothing is left once the worker reads the error (it removes nothing itself) */
        teardown(&k);
        emit_error("%s", err);
        acp_lines_release(&k.child_lines);
        buf_release(&k.child_stdin);
        pool_detach(k.pool);
        keeper_spec_release(&k.spec);
        return 1;
    }
    slot_set_pids(&k);
    (void)keeper_proto_start_ready(STDOUT_FILENO, getpid(), k.child);
    util_redirect_null(STDOUT_FILENO);
    k.deadline = util_now_ms() + attach_ms;
    r = loop(&k);
    teardown(&k);
    acp_lines_release(&k.child_lines);
    buf_release(&k.child_stdin);
    pool_detach(k.pool);
    keeper_spec_release(&k.spec);
    return r < 0 ? 1 : 0;
}
