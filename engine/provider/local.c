/*
 * local — bubblewrap sandboxes on the runner host.
 *
 * Layout inside the sandbox (the minimal host view): a fresh root tmpfs, read-only once set
 * up, with /usr bound read-only plus the loader paths (the merged-/usr symlinks), a
 * synthesized /etc (sandbox_etc: never the host's), private /proc with /proc/sys read-only,
 * private /dev, size-capped tmpfs /tmp and HOME=/home/agent (config files are copied in from
 * memfds, so credentials never touch the host disk), the workspace bound read-write at
 * /workspace (the only host-writable place), and the harness install folder read-only at its
 * host path. New user (uid 1000; nested user namespaces disabled), pid, ipc, uts, cgroup
 * namespaces; the network namespace the keeper made for it (sandbox_egress: every way out
 * leads to the keeper's proxy and name server), or an empty one when the spec names no egress
 * policy; all capabilities dropped; the sandbox_seccomp filter; --die-with-parent ties it to
 * the keeper. The child that execs bwrap first joins the environment's cgroup and network
 * namespace, then drops to the environment's own host uid/gid (sandbox_uid), so the user
 * namespace maps the sandbox user to that uid, never to host root.
 */
#include "provider/provider.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "proto/keeper_proto.h"
#include "sandbox/config.h"
#include "sandbox/egress.h"
#include "sandbox/host.h"
#include "telemetry/stages.h"

#define MAX_FILES 64

/* What local keeps of one started sandbox (provider_process.priv). */
struct local_box {
    struct sandbox_egress *egress; /* NULL: the sandbox has no network at all */
    struct sandbox_cgroup cg;      /* cg.n == 0: none */
};

static void box_free(struct local_box *b)
{
    if (!b)
        return;
    sandbox_egress_free(b->egress);
    free(b);
}

static void on_egress(void *ctx, bool connection, const char *dest, const char *why)
{
    struct provider_process *proc = ctx;

    if (proc->on_egress)
        proc->on_egress(proc->ctx, connection, dest, why);
}

static void on_model(void *ctx, const struct model_gateway_report *r)
{
    struct provider_process *proc = ctx;

    if (proc->on_model)
        proc->on_model(proc->ctx, r);
}

/* A failed step of the child, written to the keeper through the close-on-exec status pipe. */
struct child_status {
    int step;
    int err;
};

static const char *const child_steps[] = {"stdio", "cgroup", "network namespace", "identity",
                                          "exec"};

static void child_fail(int fd, int step, int r)
{
    struct child_status st = {step, r < 0 ? -r : r};

    (void)!write(fd, &st, sizeof(st));
    _exit(126);
}

/*
 * In the forked child, before bwrap (async-signal-safe only): its own process group (stop()
 * kills the group), no core files, the stdio pipes; then, while still root, the sandbox's
 * cgroup and network namespace; then the drop to the sandbox's own host uid/gid (groups
 * cleared, RLIMIT_NPROC, no_new_privs, checked). bwrap loads the seccomp filter last.
 */
static void child_confine(const struct keeper_spec *spec, const struct local_box *box,
                          const int stdio[3], int status_fd, int chan)
{
    struct rlimit core = {0, 0};
    sigset_t none;
    int r;

    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    setpgid(0, 0);
    setrlimit(RLIMIT_CORE, &core);
    if (dup2(stdio[0], STDIN_FILENO) == -1 || dup2(stdio[1], STDOUT_FILENO) == -1 ||
        dup2(stdio[2], STDERR_FILENO) == -1)
        child_fail(status_fd, 0, -errno);
    /* the keeper channel, the one descriptor bubblewrap passes on unasked */
    if (chan > STDERR_FILENO && fcntl(chan, F_SETFD, 0) == -1)
        child_fail(status_fd, 0, -errno);
    if (box->cg.n) {
        r = sandbox_cgroup_enter(&box->cg);
        if (r < 0)
            child_fail(status_fd, 1, r);
    }
    if (box->egress) {
        r = sandbox_egress_enter(box->egress);
        if (r < 0)
            child_fail(status_fd, 2, r);
    }
    if (spec->confined) {
        r = sandbox_uid_enter(&spec->confine.ids, spec->confine.nproc);
        if (r < 0)
            child_fail(status_fd, 3, r);
    }
}

static void close_pair(int p[2])
{
    for (int i = 0; i < 2; i++)
        if (p[i] >= 0)
            close(p[i]);
}

/*
 * One stdio channel of the harness, like a pipe: [0] the reading end, [1] the writing end. A
 * socket pair, not a pipe: a process in the sandbox (the agent's own code runs
 * as the harness's uid) can open a pipe through /proc/<harness pid>/fd/0 and write forged client
 * messages (a permission answer) into the harness's stdin; a socket cannot be opened that way
 * (ENXIO), and an unnamed one cannot be connected to.
 */
static int stdio_pair(int p[2])
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) == -1)
        return -errno;
    /* the reverse direction is closed: a write against it fails (EPIPE) */
    if (shutdown(p[0], SHUT_WR) == -1 || shutdown(p[1], SHUT_RD) == -1) {
        int r = -errno;

        close_pair(p);
        p[0] = p[1] = -1;
        return r;
    }
    return 0;
}

/* The child's verdict: 0 once bwrap is exec'ed (the status pipe closed empty), or its error. */
static int child_verdict(int fd, char *err, size_t errlen)
{
    struct child_status st;
    ssize_t n;

    do {
        n = read(fd, &st, sizeof(st));
    } while (n == -1 && errno == EINTR);
    if (n != (ssize_t)sizeof(st))
        return 0;
    snprintf(err, errlen, "sandbox: cannot enter its %s: %s",
             child_steps[(unsigned)st.step < ARRAY_SIZE(child_steps) ? st.step : 4],
             strerror(st.err));
    return st.err ? -st.err : -EIO;
}

/* The network (when the spec names an egress policy) and the cgroup, before the fork. */
static int box_new(const struct keeper_spec *spec, struct provider_process *proc,
                   struct local_box **ret, char *err, size_t errlen)
{
    struct local_box *b = calloc(1, sizeof(*b));
    int r = 0;

    if (!b)
        return -ENOMEM;
    if (spec->confined)
        b->cg = spec->confine.cg;
    if (spec->egress)
        r = sandbox_egress_new(spec->egress, spec->gateway, on_egress, on_model, proc, &b->egress,
                               err, errlen);
    if (r < 0) {
        box_free(b);
        return r;
    }
    *ret = b;
    return 0;
}

static int local_start(const struct keeper_spec *spec, struct provider_process *ret, char *err,
                       size_t errlen)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1}, status[2] = {-1, -1};
    struct local_command_opts opts = {.share_net = false, .channel_fd = -1};
    char **argv = NULL, **envp = NULL;
    struct local_box *box = NULL;
    int fds[MAX_FILES];
    size_t nfds = 0;
    pid_t pid;
    int r;

    if (!spec->sandbox || !spec->bwrap) {
        snprintf(err, errlen, "spec without sandbox");
        return -EINVAL;
    }
    if (spec->egress)
        stages_keeper_mark(STAGES_K_NET0);
    if (ret->priv) { /* a shell's, made ahead (local_prepare) */
        box = ret->priv;
        ret->priv = NULL;
        if (spec->confined)
            box->cg = spec->confine.cg;
    } else {
        r = box_new(spec, ret, &box, err, errlen);
        if (r < 0)
            return r;
    }
    if (spec->egress)
        stages_keeper_mark(STAGES_K_NET1);
    if (ret->channel_fd > STDERR_FILENO && jsonx_str(spec->sandbox, "channel"))
        opts.channel_fd = ret->channel_fd;
    if (box->egress) {
        opts.share_net = true;
        opts.hosts_extra = sandbox_egress_hosts(box->egress);
        opts.resolv_conf = sandbox_egress_resolv_conf(box->egress);
    }
    stages_keeper_mark(STAGES_K_ETC0);
    r = local_sandbox_command(spec->bwrap, spec->sandbox, &opts, &argv, &envp, fds, MAX_FILES,
                              &nfds, err, errlen);
    if (r < 0)
        goto out;
    stages_keeper_mark(STAGES_K_ETC1);
    if ((r = stdio_pair(in)) < 0 || (r = stdio_pair(out)) < 0 || (r = stdio_pair(errp)) < 0 ||
        (r = pipe2(status, O_CLOEXEC) == -1 ? -errno : 0) < 0) {
        snprintf(err, errlen, "stdio: %s", strerror(-r));
        goto out;
    }
    pid = fork();
    if (pid == -1) {
        r = -errno;
        snprintf(err, errlen, "fork: %s", strerror(errno));
        goto out;
    }
    if (pid == 0) {
        const int stdio[3] = {in[0], out[1], errp[1]};

        child_confine(spec, box, stdio, status[1], opts.channel_fd);
        execve(spec->bwrap, argv, envp);
        child_fail(status[1], 4, -errno);
    }
    setpgid(pid, pid);
    close(status[1]);
    status[1] = -1;
    r = child_verdict(status[0], err, errlen);
    if (r < 0) {
        while (waitpid(pid, NULL, 0) == -1 && errno == EINTR)
            ;
        goto out;
    }
    stages_keeper_mark(STAGES_K_EXEC);
    ret->pid = pid;
    ret->in_fd = in[1];
    ret->out_fd = out[0];
    ret->err_fd = errp[0];
    ret->priv = box;
    box = NULL;
    in[1] = out[0] = errp[0] = -1;
    util_set_nonblock(ret->in_fd);
    util_set_nonblock(ret->out_fd);
    util_set_nonblock(ret->err_fd);
out:
    for (size_t i = 0; i < nfds; i++)
        close(fds[i]);
    close_pair(in);
    close_pair(out);
    close_pair(errp);
    close_pair(status);
    provider_argv_free(argv);
    provider_argv_free(envp);
    box_free(box);
    return r;
}

static int local_prepare(const struct keeper_spec *spec, struct provider_process *ret, char *err,
                         size_t errlen)
{
    struct local_box *box = NULL;
    int r;

    if (ret->priv) {
        snprintf(err, errlen, "the shell is prepared already");
        return -EALREADY;
    }
    r = box_new(spec, ret, &box, err, errlen);
    if (r < 0)
        return r;
    ret->priv = box;
    return 0;
}

static void local_stop(struct provider_process *proc)
{
    struct local_box *box = proc->priv;

    if (proc->pid > 0) {
        kill(-proc->pid, SIGKILL);
        kill(proc->pid, SIGKILL);
    }
    /* whatever left the process group (a session of its own) is still in the cgroup */
    if (box && box->cg.n)
        (void)sandbox_cgroup_kill(&box->cg, SANDBOX_HOST_KILL_MS);
    if (proc->pid > 0) {
        while (waitpid(proc->pid, NULL, 0) == -1 && errno == EINTR)
            ;
        proc->pid = 0;
    }
    box_free(box);
    proc->priv = NULL;
}

_Static_assert(SANDBOX_EGRESS_FDS <= PROVIDER_POLLFDS_MAX, "the keeper polls them all");

static size_t local_poll_fds(struct provider_process *proc, struct pollfd *p, size_t max,
                             int64_t now, int *timeout_ms)
{
    const struct local_box *box = proc->priv;
    int fds[SANDBOX_EGRESS_FDS];
    size_t n;
    int t;

    if (!box || !box->egress)
        return 0;
    t = sandbox_egress_timeout_ms(box->egress, now);
    if (t >= 0 && (*timeout_ms < 0 || t < *timeout_ms))
        *timeout_ms = t;
    n = sandbox_egress_fds(box->egress, fds, max < SANDBOX_EGRESS_FDS ? max : SANDBOX_EGRESS_FDS);
    for (size_t i = 0; i < n; i++)
        p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    return n;
}

static void local_service(struct provider_process *proc, const struct pollfd *p, size_t n,
                          int64_t now)
{
    struct local_box *box = proc->priv;
    bool ready = false;

    if (!box || !box->egress)
        return;
    for (size_t i = 0; i < n; i++)
        ready |= p[i].revents != 0;
    /* nothing to read and no timer due: the proxy's and the name server's epoll sets are not
     * asked (two epoll_wait calls on every wake-up of the keeper otherwise) */
    if (ready || sandbox_egress_timeout_ms(box->egress, now) == 0)
        sandbox_egress_handle(box->egress, now);
}

static int local_claim(struct provider_process *proc, json_object *egress, json_object *route,
                       char *err, size_t errlen)
{
    int r;

    struct local_box *box = proc->priv;

    if (!box || !box->egress) {
        snprintf(err, errlen, "the sandbox has no network to rebind");
        return -ENOTSUP;
    }
    /* the spare waited at a low CPU weight: the session's turn gets the usual share */
    if (box->cg.n && sandbox_cgroup_set_cpu_weight(&box->cg, false) < 0)
        snprintf(err, errlen, "cannot restore the sandbox's CPU weight");
    r = sandbox_egress_set_policy(box->egress, egress, err, errlen);
    if (r == 0 && route)
        r = sandbox_egress_set_route(box->egress, route, err, errlen);
    return r;
}

const struct provider_ops provider_local = {
    .name = "local",
    .caps = {.remote = false,
             .reusable_leases = true,
             .network_off = true,
             .network_allowlist = true,
             .network_keeps_endpoints = true, /* the keeper's egress proxy lets them through */
             .filesystem_modes = false},
    .start = local_start,
    .stop = local_stop,
    .prepare = local_prepare,
    .poll_fds = local_poll_fds,
    .service = local_service,
    .claim = local_claim,
};
