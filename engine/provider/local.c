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
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "proto/keeper_proto.h"
#include "sandbox/config.h"
#include "sandbox/egress.h"
#include "sandbox/etc.h"
#include "sandbox/host.h"
#include "sandbox/seccomp.h"

#define ARGV_MAX 512
#define MAX_FILES 64

struct vec {
    char **v;
    size_t n;
    int err;
};

static void vec_add(struct vec *a, const char *s)
{
    if (a->err)
        return;
    if (a->n + 2 > ARGV_MAX) {
        a->err = -E2BIG;
        return;
    }
    a->v[a->n] = strdup(s);
    if (!a->v[a->n]) {
        a->err = -ENOMEM;
        return;
    }
    a->n++;
    a->v[a->n] = NULL;
}

static void vec_add3(struct vec *a, const char *x, const char *y, const char *z)
{
    vec_add(a, x);
    vec_add(a, y);
    if (z)
        vec_add(a, z);
}

void provider_argv_free(char **argv)
{
    if (!argv)
        return;
    for (char **p = argv; *p; p++)
        free(*p);
    free(argv);
}

static int vec_init(struct vec *a)
{
    a->v = calloc(ARGV_MAX, sizeof(char *));
    a->n = 0;
    a->err = a->v ? 0 : -ENOMEM;
    return a->err;
}

static bool is_symlink(const char *path)
{
    struct stat st;

    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

/* The merged-/usr top-level directories: a symlink on the host becomes a symlink inside. */
static void add_system_dirs(struct vec *a)
{
    static const char *const tops[] = {"/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32"};

    vec_add3(a, "--ro-bind", "/usr", "/usr");
    for (size_t i = 0; i < ARRAY_SIZE(tops); i++) {
        char target[256];
        ssize_t n;

        if (is_symlink(tops[i])) {
            n = readlink(tops[i], target, sizeof(target) - 1);
            if (n <= 0)
                continue;
            target[n] = '\0';
            vec_add3(a, "--symlink", target, tops[i]);
        } else if (access(tops[i], F_OK) == 0) {
            vec_add3(a, "--ro-bind", tops[i], tops[i]);
        }
    }
}

static int memfd_with(const char *name, const char *content, size_t len);

static bool plan_has_file(json_object *files, const char *path)
{
    for (size_t i = 0; files && i < json_object_array_length(files); i++) {
        const char *p = jsonx_str(json_object_array_get_idx(files, i), "path");
        if (p && strcmp(p, path) == 0)
            return true;
    }
    return false;
}

/*
 * The synthesized /etc: data entries become memfds (--ro-bind-data), host files read-only
 * binds, links symlinks. Paths the plan's files provide (passwd, group) are left to them.
 */
static int add_etc(struct vec *a, json_object *files, const struct local_command_opts *o, int *fds,
                   size_t maxfds, size_t *nfds, char *err, size_t errlen)
{
    struct sandbox_etc_opts opts = {.host_root = "/",
                                    .hostname = "sandbox",
                                    .hosts_extra = o->hosts_extra,
                                    .resolv_conf = o->resolv_conf};
    struct sandbox_etc etc;
    int r;

    r = sandbox_etc_build(&opts, &etc);
    if (r < 0) {
        snprintf(err, errlen, "sandbox: cannot build /etc: %s", strerror(-r));
        return r;
    }
    vec_add3(a, "--dir", "/etc", NULL);
    for (size_t i = 0; i < etc.n; i++) {
        const struct sandbox_etc_entry *e = &etc.v[i];
        char fdstr[16];
        int fd;

        if (plan_has_file(files, e->path))
            continue;
        switch (e->kind) {
        case SANDBOX_ETC_BIND:
            vec_add3(a, "--ro-bind", e->src, e->path);
            break;
        case SANDBOX_ETC_SYMLINK:
            vec_add3(a, "--symlink", e->target, e->path);
            break;
        case SANDBOX_ETC_DATA:
            if (*nfds >= maxfds) {
                snprintf(err, errlen, "sandbox: too many files");
                r = -E2BIG;
                goto out;
            }
            fd = memfd_with("sandbox-etc", e->data, e->len);
            if (fd < 0) {
                r = fd;
                snprintf(err, errlen, "sandbox: memfd: %s", strerror(-r));
                goto out;
            }
            fds[(*nfds)++] = fd;
            snprintf(fdstr, sizeof(fdstr), "%d", fd);
            vec_add3(a, "--ro-bind-data", fdstr, e->path);
            break;
        }
    }
    r = 0;
out:
    sandbox_etc_release(&etc);
    return r;
}

/* --size BYTES --tmpfs DEST */
static void add_sized_tmpfs(struct vec *a, uint64_t bytes, const char *dest)
{
    char size[32];

    snprintf(size, sizeof(size), "%llu", (unsigned long long)bytes);
    vec_add3(a, "--size", size, NULL);
    vec_add3(a, "--tmpfs", dest, NULL);
}

/* The seccomp filter as a memfd bwrap inherits (close-on-exec cleared). */
static int add_seccomp(struct vec *a, int *fds, size_t maxfds, size_t *nfds, char *err,
                       size_t errlen)
{
    char fdstr[16];
    int fd, r;

    if (*nfds >= maxfds) {
        snprintf(err, errlen, "sandbox: too many files");
        return -E2BIG;
    }
    r = sandbox_seccomp_memfd(&fd, err, errlen);
    if (r < 0)
        return r;
    if (fcntl(fd, F_SETFD, 0) == -1) {
        r = -errno;
        close(fd);
        snprintf(err, errlen, "sandbox: seccomp fd: %s", strerror(-r));
        return r;
    }
    fds[(*nfds)++] = fd;
    snprintf(fdstr, sizeof(fdstr), "%d", fd);
    vec_add3(a, "--seccomp", fdstr, NULL);
    return 0;
}

/* limits.<name> of the description, or def when absent. */
static uint64_t limit_bytes(json_object *sb, const char *name, uint64_t def)
{
    json_object *lim = jsonx_get(sb, "limits"), *v = lim ? jsonx_get(lim, name) : NULL;
    int64_t n;

    if (!v || !json_object_is_type(v, json_type_int))
        return def;
    n = json_object_get_int64(v);
    return n > 0 ? (uint64_t)n : def;
}

static bool allowed_file_path(const char *p)
{
    size_t n = strlen(SANDBOX_HOME);

    if (strcmp(p, "/etc/passwd") == 0 || strcmp(p, "/etc/group") == 0)
        return true;
    return strncmp(p, SANDBOX_HOME "/", n + 1) == 0 && !strstr(p, "/../") && !strstr(p, "/./");
}

static int memfd_with(const char *name, const char *content, size_t len)
{
    int fd = memfd_create(name, 0); /* no MFD_CLOEXEC: bwrap must inherit it */
    int r;

    if (fd == -1)
        return -errno;
    r = util_write_all(fd, content, len);
    if (r == 0 && lseek(fd, 0, SEEK_SET) == -1)
        r = -errno;
    if (r < 0) {
        close(fd);
        return r;
    }
    return fd;
}

static int add_parent_dirs(struct vec *a, const char *path, struct vec *made)
{
    char dir[512];
    char *slash;

    snprintf(dir, sizeof(dir), "%s", path);
    slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    if (strcmp(dir, SANDBOX_HOME) == 0 || strcmp(dir, "/etc") == 0)
        return 0;
    for (size_t i = 0; i < made->n; i++)
        if (strcmp(made->v[i], dir) == 0)
            return 0;
    vec_add(made, dir);
    vec_add3(a, "--dir", dir, NULL);
    return 0;
}

/* The sandbox's files, each from a memfd: fds[*nfds..] receive them. */
static int add_files(struct vec *a, struct vec *made, json_object *arr, int *fds, size_t maxfds,
                     size_t *nfds, char *err, size_t errlen)
{
    for (size_t i = 0; arr && i < json_object_array_length(arr); i++) {
        json_object *f = json_object_array_get_idx(arr, i);
        const char *path = jsonx_str(f, "path");
        json_object *content = jsonx_get(f, "content"), *mode = jsonx_get(f, "mode");
        char fdstr[16], modestr[16];
        int fd;

        if (!path || !content || !allowed_file_path(path)) {
            snprintf(err, errlen, "sandbox: files[%zu] has a path outside %s", i, SANDBOX_HOME);
            return -EINVAL;
        }
        if (*nfds >= maxfds) {
            snprintf(err, errlen, "sandbox: too many files");
            return -E2BIG;
        }
        fd = memfd_with("sandbox-file", json_object_get_string(content),
                        (size_t)json_object_get_string_len(content));
        if (fd < 0) {
            snprintf(err, errlen, "sandbox: memfd: %s", strerror(-fd));
            return fd;
        }
        fds[(*nfds)++] = fd;
        snprintf(fdstr, sizeof(fdstr), "%d", fd);
        if (strncmp(path, "/etc/", 5) == 0) {
            vec_add3(a, "--ro-bind-data", fdstr, path);
            continue;
        }
        add_parent_dirs(a, path, made);
        snprintf(modestr, sizeof(modestr), "%04o",
                 mode ? (unsigned)json_object_get_int(mode) & 07777u : 0600u);
        vec_add3(a, "--perms", modestr, NULL);
        vec_add3(a, "--file", fdstr, path);
    }
    return 0;
}

/* The sandbox's environment: "KEY=value" for every string member of env (others skipped). */
static int add_env(struct vec *e, json_object *env)
{
    if (!env || !json_object_is_type(env, json_type_object))
        return 0;
    json_object_object_foreach(env, key, val)
    {
        char *kv;
        if (!val || !json_object_is_type(val, json_type_string))
            continue;
        if (asprintf(&kv, "%s=%s", key, json_object_get_string(val)) < 0)
            return -ENOMEM;
        vec_add(e, kv);
        free(kv);
    }
    return 0;
}

int local_sandbox_command(const char *bwrap, json_object *sb, const struct local_command_opts *opts,
                          char ***ret_argv, char ***ret_envp, int *fds, size_t maxfds,
                          size_t *ret_nfds, char *err, size_t errlen)
{
    static const struct local_command_opts none = {.share_net = false, .channel_fd = -1};
    struct vec a = {0}, e = {0}, made = {0};
    struct sandbox_config defaults;
    char *chan = NULL;
    json_object *arr;
    const char *workspace, *cwd;
    size_t nfds = 0;
    int r;

    if (vec_init(&a) < 0 || vec_init(&e) < 0 || vec_init(&made) < 0) {
        r = -ENOMEM;
        goto fail;
    }
    if (!opts)
        opts = &none;
    workspace = jsonx_str(sb, "workspace");
    cwd = jsonx_str(sb, "cwd");
    if (!workspace || workspace[0] != '/') {
        snprintf(err, errlen, "sandbox: workspace must be an absolute path");
        r = -EINVAL;
        goto fail;
    }
    sandbox_config_default(&defaults);
    vec_add(&a, bwrap);
    vec_add(&a, "--unshare-all");
    /* the keeper's child already stands in the sandbox's own namespace: stay there */
    if (opts->share_net)
        vec_add(&a, "--share-net");
    vec_add(&a, "--unshare-user");
    vec_add(&a, "--disable-userns");
    vec_add3(&a, "--uid", "1000", NULL);
    vec_add3(&a, "--gid", "1000", NULL);
    vec_add3(&a, "--hostname", "sandbox", NULL);
    vec_add(&a, "--die-with-parent");
    vec_add(&a, "--new-session");
    vec_add3(&a, "--cap-drop", "ALL", NULL);
    add_system_dirs(&a);
    r = add_etc(&a, jsonx_get(sb, "files"), opts, fds, maxfds, &nfds, err, errlen);
    if (r < 0)
        goto fail;
    vec_add3(&a, "--proc", "/proc", NULL);
    /* bwrap leaves /proc/sys writable (its cover check looks at the folder's mode only) */
    vec_add3(&a, "--ro-bind", "/proc/sys", "/proc/sys");
    vec_add3(&a, "--dev", "/dev", NULL);
    /* bwrap's /dev is a tmpfs of the sandbox user with no size: a capped /dev/shm in it, and
     * /dev itself read-only below (the device nodes are mounts of their own and stay usable) */
    add_sized_tmpfs(&a, SANDBOX_SHM_BYTES, "/dev/shm");
    add_sized_tmpfs(&a, limit_bytes(sb, "tmpBytes", defaults.tmp_max), "/tmp");
    add_sized_tmpfs(&a, limit_bytes(sb, "homeBytes", defaults.home_max), SANDBOX_HOME);
    arr = jsonx_get(sb, "roBinds");
    for (size_t i = 0; arr && i < json_object_array_length(arr); i++) {
        const char *p = json_object_get_string(json_object_array_get_idx(arr, i));
        if (!p || p[0] != '/') {
            snprintf(err, errlen, "sandbox: roBinds[%zu] must be an absolute path", i);
            r = -EINVAL;
            goto fail;
        }
        vec_add(&a, "--ro-bind");
        vec_add3(&a, p, p, NULL);
    }
    vec_add3(&a, "--bind", workspace, SANDBOX_WORKSPACE);
    /* no keeper channel socket is bound in: the harness inherits its connection (local_start) */

    r = add_files(&a, &made, jsonx_get(sb, "files"), fds, maxfds, &nfds, err, errlen);
    if (r < 0)
        goto fail;
    r = add_seccomp(&a, fds, maxfds, &nfds, err, errlen);
    if (r < 0)
        goto fail;
    vec_add3(&a, "--remount-ro", "/dev", NULL);
    /* last: the root tmpfs (and the /etc in it) becomes read-only */
    vec_add3(&a, "--remount-ro", "/", NULL);
    vec_add3(&a, "--chdir", cwd ? cwd : SANDBOX_WORKSPACE, NULL);
    vec_add(&a, "--");
    arr = jsonx_get(sb, "argv");
    if (!arr || !json_object_is_type(arr, json_type_array) ||
        json_object_array_length(arr) == 0) {
        snprintf(err, errlen, "sandbox: argv is empty");
        r = -EINVAL;
        goto fail;
    }
    for (size_t i = 0; i < json_object_array_length(arr); i++)
        vec_add(&a, json_object_get_string(json_object_array_get_idx(arr, i)));

    r = add_env(&e, jsonx_get(sb, "env"));
    if (r < 0)
        goto fail;
    /* the keeper channel keeps its number inside: the harness side finds it here */
    if (opts->channel_fd > STDERR_FILENO &&
        asprintf(&chan, "RUNNER_CHANNEL_FD=%d", opts->channel_fd) < 0) {
        r = -ENOMEM;
        goto fail;
    }
    if (chan)
        vec_add(&e, chan);
    free(chan);
    if (a.err || e.err) {
        r = a.err ? a.err : e.err;
        snprintf(err, errlen, "sandbox: %s", strerror(-r));
        goto fail;
    }
    provider_argv_free(made.v);
    *ret_argv = a.v;
    *ret_envp = e.v;
    *ret_nfds = nfds;
    return 0;
fail:
    for (size_t i = 0; i < nfds; i++)
        close(fds[i]);
    provider_argv_free(a.v);
    provider_argv_free(e.v);
    provider_argv_free(made.v);
    return r;
}

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
    r = box_new(spec, ret, &box, err, errlen);
    if (r < 0)
        return r;
    if (ret->channel_fd > STDERR_FILENO && jsonx_str(spec->sandbox, "channel"))
        opts.channel_fd = ret->channel_fd;
    if (box->egress) {
        opts.share_net = true;
        opts.hosts_extra = sandbox_egress_hosts(box->egress);
        opts.resolv_conf = sandbox_egress_resolv_conf(box->egress);
    }
    r = local_sandbox_command(spec->bwrap, spec->sandbox, &opts, &argv, &envp, fds, MAX_FILES,
                              &nfds, err, errlen);
    if (r < 0)
        goto out;
    if ((r = stdio_pair(in)) < 0 || (r = stdio_pair(out)) < 0 || (r = stdio_pair(errp)) < 0 || (r = pipe2(status, O_CLOEXEC) == -1 ? -errno : 0) < 0) {
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

    (void)p;
    (void)n;
    if (box && box->egress)
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
    .poll_fds = local_poll_fds,
    .service = local_service,
    .claim = local_claim,
};
