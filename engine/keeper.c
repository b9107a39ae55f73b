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
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acp.h"
#include "buf.h"
#include "contracts.h"
#include "jsonx.h"
#include "log.h"
#include "pool.h"
#include "provider/provider.h"
#include "util.h"

#define SPEC_MAX (64u * 1024 * 1024)
#define OUTQ_MAX (256u * 1024 * 1024)
#define OUTQ_HIGH (8u * 1024 * 1024) /* stop reading the harness while the worker lags */
#define HARNESS_LOG_MAX (1024 * 1024)
#define MAX_FILES 64
#define PENDING_MAX 32

struct keeper {
    json_object *spec;
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

    pid_t child;
    int child_in, child_out, child_err;
    struct acp_lines child_lines;
    struct buf child_stdin;
    int log_fd;
    size_t log_bytes;

    struct pool *pool;
    struct pool_handle h;

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
};

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    if (fl != -1)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void emit_ready(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The readiness line goes to the original stdout (a pipe to the starting worker). */
static void emit_ready(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    (void)write_all(STDOUT_FILENO, line, (size_t)n);
}

static int read_spec(json_object **ret)
{
    struct buf b;
    char chunk[65536], err[128];
    int r;

    buf_init(&b, SPEC_MAX);
    for (;;) {
        ssize_t n = read(STDIN_FILENO, chunk, sizeof(chunk));
        if (n == -1 && errno == EINTR)
            continue;
        if (n == -1) {
            r = -errno;
            goto out;
        }
        if (n == 0)
            break;
        r = buf_append(&b, chunk, (size_t)n);
        if (r < 0)
            goto out;
    }
    r = jsonx_parse(buf_str(&b), b.len, 32, ret, err, sizeof(err));
    if (r == 0 && (!*ret || !json_object_is_type(*ret, json_type_object))) {
        json_object_put(*ret);
        r = -EINVAL;
    }
out:
    buf_release(&b);
    return r;
}

static int listen_on(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd;

    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd == -1)
        return -errno;
    (void)unlink(path);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1 || chmod(path, 0600) == -1 ||
        listen(fd, 4) == -1) {
        int r = -errno;
        close(fd);
        return r;
    }
    return fd;
}

static void slot_update(struct keeper *k, void (*fn)(struct keeper *, struct pool_slot *))
{
    struct pool_slot *s;

    if (!k->pool || pool_lock(k->pool) < 0)
        return;
    s = pool_slot_locked(k->pool, k->h);
    if (s)
        fn(k, s);
    pool_unlock(k->pool);
}

static void slot_set_pids(struct keeper *k, struct pool_slot *s)
{
    s->keeper_pid = (int32_t)getpid();
    s->keeper_start = proc_start_time(getpid());
    s->sandbox_pid = (int32_t)k->child;
}

static void slot_mark_broken(struct keeper *k, struct pool_slot *s)
{
    (void)k;
    s->flags |= SLOT_F_HISTORY_BROKEN;
}

/* The attached worker vanished without parking: keep a keyed session warm but broken. */
static void slot_orphaned(struct keeper *k, struct pool_slot *s)
{
    if (s->state == SLOT_BUSY || s->state == SLOT_STARTING) {
        s->flags |= SLOT_F_HISTORY_BROKEN;
        if (s->key[0] && !k->per_turn)
            pool_park_locked(k->pool, k->h, SLOT_IDLE, now_ms() + k->idle_ms);
    }
}

static void slot_release(struct keeper *k, struct pool_slot *s)
{
    (void)s;
    pool_free_locked(k->pool, k->h, k->reason);
}

static int start_sandbox(struct keeper *k, char *err, size_t errlen)
{
    json_object *sb = jsonx_get(k->spec, "sandbox");
    const char *bwrap = jsonx_str(k->spec, "bwrap");
    int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1};
    char **argv = NULL, **envp = NULL;
    int fds[MAX_FILES];
    size_t nfds = 0;
    pid_t pid;
    int r;

    if (!sb || !bwrap) {
        snprintf(err, errlen, "spec without sandbox");
        return -EINVAL;
    }
    r = local_sandbox_command(bwrap, sb, &argv, &envp, fds, MAX_FILES, &nfds, err, errlen);
    if (r < 0)
        return r;
    if (pipe2(in, O_CLOEXEC) == -1 || pipe2(out, O_CLOEXEC) == -1 ||
        pipe2(errp, O_CLOEXEC) == -1) {
        r = -errno;
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        goto out;
    }
    pid = fork();
    if (pid == -1) {
        r = -errno;
        snprintf(err, errlen, "fork: %s", strerror(errno));
        goto out;
    }
    if (pid == 0) {
        struct rlimit core = {0, 0};
        sigset_t none;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        setpgid(0, 0);
        setrlimit(RLIMIT_CORE, &core);
        if (dup2(in[0], STDIN_FILENO) == -1 || dup2(out[1], STDOUT_FILENO) == -1 ||
            dup2(errp[1], STDERR_FILENO) == -1)
            _exit(126);
        execve(bwrap, argv, envp);
        _exit(127);
    }
    setpgid(pid, pid);
    k->child = pid;
    k->child_in = in[1];
    k->child_out = out[0];
    k->child_err = errp[0];
    in[1] = out[0] = errp[0] = -1;
    set_nonblock(k->child_in);
    set_nonblock(k->child_out);
    set_nonblock(k->child_err);
    r = 0;
out:
    for (size_t i = 0; i < nfds; i++)
        close(fds[i]);
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
    provider_argv_free(argv);
    provider_argv_free(envp);
    return r;
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

static void to_client(struct keeper *k, const char *line, size_t len)
{
    if (k->client_fd >= 0)
        queue(&k->client_out, line, len);
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

    buf_init(&out, 1024 * 1024);
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
        to_client(k, line, len);
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

static bool on_client_line(struct keeper *k, char *line, size_t len)
{
    uint64_t ms;

    if (len > 0 && line[0] == '#') {
        if (strcmp(line, "#destroy") == 0)
            return false;
        /* "#park <ms>": idle; "#await <ms>": a prompt waits on an approval (kept in flight) */
        if ((strncmp(line, "#park ", 6) == 0 && parse_u64(line + 6, 1, 86400000ull, &ms) == 0) ||
            (strncmp(line, "#await ", 7) == 0 && parse_u64(line + 7, 1, 86400000ull, &ms) == 0)) {
            k->idle_ms = (int64_t)ms;
            k->per_turn = false;
            k->parked = true;
            k->awaiting = line[1] == 'a';
            k->prompt_in_flight = false;
            answer_pending(k, k->awaiting);
        }
        return true;
    }
    track_client_request(k, line, len);
    if (k->npending && !strstr(line, "\"method\""))
        forget_pending(k, line, len);
    to_child(k, line, len);
    return true;
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
    slot_update(k, slot_mark_broken);
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
        slot_update(k, slot_orphaned);
    }
    /* a per-turn environment whose worker vanished has nobody to serve: end it now */
    k->deadline = now_ms() + (k->per_turn && !k->parked ? 1 : k->idle_ms);
}

static void accept_client(struct keeper *k)
{
    char hello[96];
    int fd = accept4(k->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

    if (fd == -1)
        return;
    if (k->client_fd >= 0) {
        (void)!write(fd, "#busy\n", 6);
        close(fd);
        return;
    }
    k->client_fd = fd;
    k->parked = false;
    k->awaiting = false;
    k->deadline = 0;
    acp_lines_init(&k->client_in, ACP_LINE_MAX_DEFAULT);
    buf_init(&k->client_out, OUTQ_MAX);
    snprintf(hello, sizeof(hello), "#hello %d %d", (int)getpid(), (int)k->child);
    queue(&k->client_out, hello, strlen(hello));
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
            (void)write_all(k->log_fd, chunk, take);
            k->log_bytes += take;
        }
    }
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
    if (r < 0) {
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
            k->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
    }
}

static void teardown(struct keeper *k)
{
    if (k->child > 0 && !k->child_exited) {
        kill(-k->child, SIGKILL);
        kill(k->child, SIGKILL);
        while (waitpid(k->child, NULL, 0) == -1 && errno == EINTR)
            ;
    }
    if (k->client_fd >= 0 && k->child_exited) {
        char line[64];
        snprintf(line, sizeof(line), "#exit %d", k->exit_status);
        queue(&k->client_out, line, strlen(line));
        set_nonblock(k->client_fd);
        {
            bool broken = false;
            int fl = fcntl(k->client_fd, F_GETFL);
            fcntl(k->client_fd, F_SETFL, fl & ~O_NONBLOCK);
            flush_fd(k->client_fd, &k->client_out, &broken);
        }
    }
    if (k->log_fd >= 0)
        close(k->log_fd);
    if (k->listen_fd >= 0)
        close(k->listen_fd);
    (void)unlink(k->socket_path);
    (void)rm_rf(k->env_dir);
    slot_update(k, slot_release);
    /* the worker waits for this close as the sign that teardown is complete */
    if (k->client_fd >= 0)
        close(k->client_fd);
}

static int loop(struct keeper *k)
{
    bool stop = false;

    while (!stop) {
        struct pollfd p[6];
        int np = 0, ilisten = -1, iclient = -1, iout = -1, ierr = -1, iin = -1, isig;
        int timeout = -1;

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
        if (k->child_out >= 0 && k->client_out.len < OUTQ_HIGH) {
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
        if (k->deadline) {
            int64_t left = k->deadline - now_ms();
            if (left <= 0) {
                log_info("idle deadline passed: tearing down");
                k->reason = k->awaiting ? TEARDOWN_APPROVAL_EXPIRY : TEARDOWN_IDLE_EXPIRY;
                break;
            }
            timeout = left > 60000 ? 60000 : (int)left;
        }
        if (poll(p, (nfds_t)np, timeout) == -1) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
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
        if (iout >= 0 && (p[iout].revents & (POLLIN | POLLHUP | POLLERR)))
            read_lines(k, &k->child_out, &k->child_lines, true, &stop);
        if (ierr >= 0 && (p[ierr].revents & (POLLIN | POLLHUP | POLLERR)))
            drain_stderr(k);
        if (k->client_fd >= 0 && k->client_out.len) {
            bool broken = false;
            flush_fd(k->client_fd, &k->client_out, &broken);
            if (broken)
                client_gone(k);
        }
        if (k->child_exited || (k->child_out < 0 && k->child_err < 0)) {
            if (!k->child_exited) {
                while (waitpid(k->child, &k->exit_status, 0) == -1 && errno == EINTR)
                    ;
                k->exit_status = WIFEXITED(k->exit_status) ? WEXITSTATUS(k->exit_status) : 128;
                k->child_exited = true;
            }
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
    return signalfd_for(sigs, ARRAY_SIZE(sigs));
}

static int attach_slot(struct keeper *k)
{
    const char *shm = jsonx_str(k->spec, "shm");
    json_object *slot = jsonx_get(k->spec, "slot"), *gen = jsonx_get(k->spec, "generation");
    int r;

    if (!shm || !slot || !gen)
        return 0;
    r = pool_attach(shm, false, &k->pool);
    if (r < 0)
        return r;
    k->h.index = (uint32_t)json_object_get_int64(slot);
    k->h.generation = (uint32_t)json_object_get_int64(gen);
    if (k->h.index >= k->pool->hdr->nslots)
        return -EINVAL;
    slot_update(k, slot_set_pids);
    return 0;
}

int keeper_main(int argc, char **argv)
{
    struct keeper k;
    char err[512], logpath[512];
    int64_t attach_ms;
    pid_t pid;
    int r, devnull;

    (void)argc;
    (void)argv;
    /*
     * Whatever else the starting worker had open (FastCGI connections of concurrent requests:
     * libfcgi does not mark them close-on-exec) must not live on here or in the sandbox.
     */
    close_range(3, ~0U, 0);
    memset(&k, 0, sizeof(k));
    k.listen_fd = k.client_fd = k.sig_fd = k.child_in = k.child_out = k.child_err = -1;
    k.log_fd = -1;
    log_setup("keeper", LOG_LEVEL_INFO);
    if (getenv("AGENT_RUNNER_LOG_LEVEL")) {
        enum log_level lvl;
        if (log_level_parse(getenv("AGENT_RUNNER_LOG_LEVEL"), &lvl) == 0)
            log_max_level = (int)lvl;
    }

    r = read_spec(&k.spec);
    if (r < 0) {
        emit_ready("error cannot read the keeper spec: %s", strerror(-r));
        return 1;
    }
    k.env_dir = jsonx_str(k.spec, "envDir");
    k.socket_path = jsonx_str(k.spec, "socket");
    k.idle_ms = json_object_get_int64(jsonx_get(k.spec, "idleMs"));
    attach_ms = json_object_get_int64(jsonx_get(k.spec, "attachTimeoutMs"));
    k.per_turn = json_object_get_boolean(jsonx_get(k.spec, "perTurn"));
    if (!k.env_dir || !k.socket_path || k.idle_ms <= 0) {
        emit_ready("error the keeper spec lacks envDir, socket or idleMs");
        return 1;
    }
    if (attach_ms <= 0)
        attach_ms = 30000;
    r = listen_on(k.socket_path);
    if (r < 0) {
        emit_ready("error cannot listen on '%s': %s", k.socket_path, strerror(-r));
        (void)rm_rf(k.env_dir);
        return 1;
    }
    k.listen_fd = r;

    /* detach from the starting worker: the master (child subreaper) adopts us */
    pid = fork();
    if (pid == -1) {
        emit_ready("error fork: %s", strerror(errno));
        (void)rm_rf(k.env_dir);
        return 1;
    }
    if (pid > 0)
        _exit(0);
    setsid();
    devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull >= 0) {
        dup2(devnull, STDIN_FILENO);
        close(devnull);
    }

    r = setup_signals();
    if (r < 0) {
        emit_ready("error signals: %s", strerror(-r));
        (void)rm_rf(k.env_dir);
        return 1;
    }
    k.sig_fd = r;
    r = attach_slot(&k);
    if (r < 0) {
        emit_ready("error cannot attach the session table: %s", strerror(-r));
        teardown(&k);
        return 1;
    }
    snprintf(logpath, sizeof(logpath), "%s/harness.log", k.env_dir);
    k.log_fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    acp_lines_init(&k.child_lines, ACP_LINE_MAX_DEFAULT);
    buf_init(&k.child_stdin, OUTQ_MAX);
    r = start_sandbox(&k, err, sizeof(err));
    if (r < 0) {
        emit_ready("error %s", err);
        teardown(&k);
        return 1;
    }
    slot_update(&k, slot_set_pids);
    emit_ready("ready %d %d", (int)getpid(), (int)k.child);
    devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devnull >= 0) {
        dup2(devnull, STDOUT_FILENO);
        close(devnull);
    }
    k.deadline = now_ms() + attach_ms;
    r = loop(&k);
    if (k.per_turn || !k.parked)
        log_debug("tearing down a per-turn environment");
    teardown(&k);
    acp_lines_release(&k.child_lines);
    buf_release(&k.child_stdin);
    pool_detach(k.pool);
    json_object_put(k.spec);
    return r < 0 ? 1 : 0;
}
