/*
 * local_command — the bubblewrap command of a local sandbox (provider.h:
 * local_sandbox_command): the layout local.c describes, its files from memfds and open host
 * files, the seccomp programme the worker compiled. local.c starts it.
 */
#include "provider/provider.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "sandbox/config.h"
#include "sandbox/etc.h"
#include "sandbox/seccomp.h"

#define ARGV_MAX 512

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

/* A file of /etc written into the root tmpfs from fd, read-only (the root is remounted
 * read-only last): no mount of its own, unlike --ro-bind-data (a bind and a remount). */
static void add_etc_file(struct vec *a, int fd, const char *path)
{
    char fdstr[16];

    snprintf(fdstr, sizeof(fdstr), "%d", fd);
    vec_add3(a, "--perms", "0444", NULL);
    vec_add3(a, "--file", fdstr, path);
}

/*
 * A public host file, opened for bwrap to copy: never through a symlink, and only if what was
 * opened is still a world-readable regular file (-ENOENT: skip it, as if it were absent).
 */
static int open_public_file(const char *src)
{
    struct stat st;
    int fd = open(src, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);

    if (fd == -1)
        return -ENOENT;
    if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode) || !(st.st_mode & S_IROTH)) {
        close(fd);
        return -ENOENT;
    }
    return fd;
}

/*
 * The synthesized /etc: data entries become memfds and host files open descriptors, each
 * copied into the root tmpfs (--file, read-only), host folders read-only binds, links
 * symlinks. Paths the plan's files provide (passwd, group) are left to them.
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
        int fd;

        if (plan_has_file(files, e->path))
            continue;
        if (e->kind == SANDBOX_ETC_BIND) {
            vec_add3(a, "--ro-bind", e->src, e->path);
            continue;
        }
        if (e->kind == SANDBOX_ETC_SYMLINK) {
            vec_add3(a, "--symlink", e->target, e->path);
            continue;
        }
        if (*nfds >= maxfds) {
            snprintf(err, errlen, "sandbox: too many files");
            r = -E2BIG;
            goto out;
        }
        if (e->kind == SANDBOX_ETC_COPY) {
            fd = open_public_file(e->src);
            if (fd < 0)
                continue;
        } else {
            fd = memfd_with("sandbox-etc", e->data, e->len);
        }
        if (fd < 0) {
            r = fd;
            snprintf(err, errlen, "sandbox: memfd: %s", strerror(-r));
            goto out;
        }
        fds[(*nfds)++] = fd;
        add_etc_file(a, fd, e->path);
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

/*
 * The seccomp filter as a memfd bwrap inherits (close-on-exec cleared): the programme the
 * worker compiled once (description "seccomp"). None: no sandbox (fails closed).
 */
static int add_seccomp(struct vec *a, json_object *sb, int *fds, size_t maxfds, size_t *nfds,
                       char *err, size_t errlen)
{
    const char *hex = jsonx_str(sb, "seccomp");
    char fdstr[16];
    int fd, r;

    if (!hex) {
        snprintf(err, errlen, "sandbox: the description has no seccomp programme");
        return -EINVAL;
    }
    if (*nfds >= maxfds) {
        snprintf(err, errlen, "sandbox: too many files");
        return -E2BIG;
    }
    r = sandbox_seccomp_memfd_of(hex, &fd, err, errlen);
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
            add_etc_file(a, fd, path);
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
    r = add_seccomp(&a, sb, fds, maxfds, &nfds, err, errlen);
    if (r < 0)
        goto fail;
    vec_add3(&a, "--remount-ro", "/dev", NULL);
    /* last: the root tmpfs (and the /etc in it) becomes read-only */
    vec_add3(&a, "--remount-ro", "/", NULL);
    vec_add3(&a, "--chdir", cwd ? cwd : SANDBOX_WORKSPACE, NULL);
    vec_add(&a, "--");
    arr = jsonx_get(sb, "argv");
    if (!arr || !json_object_is_type(arr, json_type_array) || json_object_array_length(arr) == 0) {
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
