#include "provider/daytona/daytona_plan.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "core/contracts.h"
#include "harness/harness.h"
#include "provider/daytona/daytona_bridge.h"

#define WALK_DEPTH_MAX 32
#define VALUE_MAX 65536

/* prefix[/...] of value: the length of prefix, or 0 when value is not under it. */
static size_t under(const char *value, const char *prefix)
{
    size_t n = strlen(prefix);

    if (n == 0 || strncmp(value, prefix, n) != 0)
        return 0;
    return value[n] == '\0' || value[n] == '/' ? n : 0;
}

static int put(char *out, size_t len, const char *base, const char *rest)
{
    int n = snprintf(out, len, "%s%s", base, rest);

    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int daytona_plan_map(const char *value, const char *home, json_object *ro_binds,
                     const char *harness_dir, char *out, size_t len)
{
    char ws[DAYTONA_PLAN_PATH_MAX];
    size_t n;

    n = under(value, SANDBOX_HOME);
    if (n)
        return put(out, len, home, value + n);
    n = under(value, SANDBOX_WORKSPACE);
    if (n) {
        if ((size_t)snprintf(ws, sizeof(ws), "%s/workspace", home) >= sizeof(ws))
            return -ENAMETOOLONG;
        return put(out, len, ws, value + n);
    }
    for (size_t i = 0;
         harness_dir && harness_dir[0] && ro_binds && i < json_object_array_length(ro_binds); i++) {
        const char *rb = json_object_get_string(json_object_array_get_idx(ro_binds, i));

        n = rb ? under(value, rb) : 0;
        if (n)
            return put(out, len, harness_dir, value + n);
    }
    return put(out, len, value, "");
}

/* A value that may be a ':'-separated list of paths (PATH): each element mapped. */
static int map_value(const char *value, const char *home, json_object *ro_binds,
                     const char *harness_dir, struct buf *out)
{
    char part[DAYTONA_PLAN_PATH_MAX], mapped[DAYTONA_PLAN_PATH_MAX];
    const char *p = value;
    int r = 0;

    if (value[0] != '/')
        return buf_append_str(out, value);
    while (r >= 0) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);

        if (n < sizeof(part) && p[0] == '/') {
            memcpy(part, p, n);
            part[n] = '\0';
            r = daytona_plan_map(part, home, ro_binds, harness_dir, mapped, sizeof(mapped));
            if (r >= 0)
                r = buf_append_str(out, mapped);
        } else {
            r = buf_append(out, p, n);
        }
        if (r < 0 || !colon)
            break;
        r = buf_append_char(out, ':');
        p = colon + 1;
    }
    return r;
}

static int add_file(json_object *files, const char *path, const char *data, size_t len, int mode)
{
    json_object *f = json_object_new_object();

    if (!f)
        return -ENOMEM;
    json_object_object_add(f, "path", json_object_new_string(path));
    json_object_object_add(f, "content", json_object_new_string_len(data, (int)len));
    json_object_object_add(f, "mode", json_object_new_int(mode));
    json_object_array_add(files, f);
    return 0;
}

struct walk {
    json_object *files;
    const char *remote_root;
    size_t nfiles, bytes;
    char *err;
    size_t errlen;
};

static int walk_file(struct walk *w, int dir, const char *name, const char *rel)
{
    char remote[DAYTONA_PLAN_PATH_MAX * 2], *data = NULL;
    struct stat st;
    size_t got = 0;
    int fd, r = 0;

    fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return errno == ELOOP ? 0 : -errno; /* a symlink: never followed */
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        r = S_ISREG(st.st_mode) ? -errno : 0;
        goto out;
    }
    if (++w->nfiles > DAYTONA_PLAN_FILES_MAX ||
        (size_t)st.st_size > DAYTONA_PLAN_BYTES_MAX - w->bytes) {
        snprintf(w->err, w->errlen, "workspace: more than %d files or %u MiB to upload",
                 DAYTONA_PLAN_FILES_MAX, DAYTONA_PLAN_BYTES_MAX >> 20);
        r = -E2BIG;
        goto out;
    }
    data = malloc((size_t)st.st_size + 1);
    if (!data) {
        r = -ENOMEM;
        goto out;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, data + got, (size_t)st.st_size - got);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    w->bytes += got;
    if ((size_t)snprintf(remote, sizeof(remote), "%s/%s", w->remote_root, rel) >= sizeof(remote)) {
        snprintf(w->err, w->errlen, "workspace: a path is too long");
        r = -ENAMETOOLONG;
        goto out;
    }
    r = add_file(w->files, remote, data, got, (st.st_mode & 0111) ? 0755 : 0644);
out:
    free(data);
    close(fd);
    return r;
}

static int walk_dir(struct walk *w, int fd, const char *rel, int depth)
{
    struct dirent *de;
    DIR *d;
    int r = 0;

    if (depth > WALK_DEPTH_MAX) {
        snprintf(w->err, w->errlen, "workspace: folders nested deeper than %d", WALK_DEPTH_MAX);
        close(fd);
        return -E2BIG;
    }
    d = fdopendir(fd);
    if (!d) {
        r = -errno;
        close(fd);
        return r;
    }
    while (r >= 0 && (de = readdir(d)) != NULL) {
        char sub[DAYTONA_PLAN_PATH_MAX];
        struct stat st;

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if ((size_t)snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) >=
            sizeof(sub)) {
            snprintf(w->err, w->errlen, "workspace: a path is too long");
            r = -ENAMETOOLONG;
            break;
        }
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            int sfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sfd >= 0)
                r = walk_dir(w, sfd, sub, depth + 1);
        } else if (S_ISREG(st.st_mode)) {
            r = walk_file(w, dirfd(d), de->d_name, sub);
        }
    }
    closedir(d);
    return r;
}

/* The description's workspace folder as files under <home>/workspace. */
static int add_workspace(struct daytona_plan *p, const char *host_ws, char *err, size_t errlen)
{
    struct walk w = {.files = p->files, .remote_root = p->workspace, .err = err, .errlen = errlen};
    int fd, r;

    if (!host_ws)
        return 0;
    fd = open(host_ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "workspace: cannot open the environment's folder: %s",
                 strerror(errno));
        return -errno;
    }
    r = walk_dir(&w, fd, "", 0);
    if (r < 0 && !err[0])
        snprintf(err, errlen, "workspace: %s", strerror(-r));
    p->workspace_files = w.nfiles;
    return r;
}

static int map_files(struct daytona_plan *p, json_object *files, json_object *ro_binds,
                     const char *harness_dir, char *err, size_t errlen)
{
    for (size_t i = 0; files && i < json_object_array_length(files); i++) {
        json_object *f = json_object_array_get_idx(files, i), *content = jsonx_get(f, "content");
        json_object *mode = jsonx_get(f, "mode");
        const char *path = jsonx_str(f, "path");
        char mapped[DAYTONA_PLAN_PATH_MAX];
        int r;

        if (!path || path[0] != '/' || !content ||
            !json_object_is_type(content, json_type_string)) {
            snprintf(err, errlen, "sandbox: files[%zu] needs an absolute path and content", i);
            return -EINVAL;
        }
        if (strncmp(path, "/etc/", 5) == 0)
            continue; /* the image has its own users */
        r = daytona_plan_map(path, p->home, ro_binds, harness_dir, mapped, sizeof(mapped));
        if (r < 0) {
            snprintf(err, errlen, "sandbox: files[%zu]: path too long", i);
            return r;
        }
        r = add_file(p->files, mapped, json_object_get_string(content),
                     (size_t)json_object_get_string_len(content),
                     mode && json_object_is_type(mode, json_type_int) ? json_object_get_int(mode)
                                                                      : 0600);
        if (r < 0)
            return r;
    }
    return 0;
}

static int map_env_argv(struct daytona_plan *p, json_object *env, json_object *argv,
                        json_object *ro_binds, const char *harness_dir, char *err, size_t errlen)
{
    struct buf v;
    int r = 0;

    buf_init(&v, VALUE_MAX);
    if (env && json_object_is_type(env, json_type_object)) {
        json_object_object_foreach(env, name, val)
        {
            if (!val || !json_object_is_type(val, json_type_string))
                continue;
            buf_reset(&v);
            r = map_value(json_object_get_string(val), p->home, ro_binds, harness_dir, &v);
            if (r < 0) {
                snprintf(err, errlen, "sandbox: env %.64s: too long", name);
                goto out;
            }
            json_object_object_add(p->env, name, json_object_new_string(buf_str(&v)));
        }
    }
    for (size_t i = 0; argv && i < json_object_array_length(argv); i++) {
        const char *a = json_object_get_string(json_object_array_get_idx(argv, i));
        char mapped[DAYTONA_PLAN_PATH_MAX];

        r = daytona_plan_map(a ? a : "", p->home, ro_binds, harness_dir, mapped, sizeof(mapped));
        if (r < 0) {
            snprintf(err, errlen, "sandbox: argv[%zu]: too long", i);
            goto out;
        }
        json_object_array_add(p->argv, json_object_new_string(mapped));
    }
    if (json_object_array_length(p->argv) == 0) {
        snprintf(err, errlen, "sandbox: argv is empty");
        r = -EINVAL;
    }
out:
    buf_release(&v);
    return r;
}

/* The keeper channel's relay: RUNNER_CHANNEL moved into our folder, the command to start it. */
static int plan_relay(struct daytona_plan *p, const char *host_dir, const char *harness_dir,
                      char *err, size_t errlen)
{
    const char *base = harness_dir && harness_dir[0] ? harness_dir : host_dir;
    char path[DAYTONA_PLAN_PATH_MAX * 2];
    struct buf cmd;
    int n, r;

    if (!host_dir || host_dir[0] != '/' || strlen(base) >= DAYTONA_PLAN_PATH_MAX) {
        snprintf(err, errlen, "sandbox: channelRelay is not an absolute path");
        return -EINVAL;
    }
    n = snprintf(p->channel_sock, sizeof(p->channel_sock), "%s/channel/channel.sock",
                 p->state_dir);
    if (n < 0 || (size_t)n >= sizeof(p->channel_sock)) {
        snprintf(err, errlen,
                 "sandbox: the sandbox user's home is too long for the channel socket path");
        return -ENAMETOOLONG;
    }
    json_object_object_add(p->env, "RUNNER_CHANNEL", json_object_new_string(p->channel_sock));
    /* no exec: the command runs in the session's shell, which must outlive it */
    buf_init(&cmd, 16384);
    r = buf_append_str(&cmd, "env -i PATH=/usr/bin:/bin LANG=C.UTF-8 HOME=");
    if (r >= 0)
        r = daytona_shell_quote(p->home, &cmd);
    snprintf(path, sizeof(path), "%s/" HARNESS_NODE, base);
    if (r >= 0)
        r = buf_append_char(&cmd, ' ');
    if (r >= 0)
        r = daytona_shell_quote(path, &cmd);
    snprintf(path, sizeof(path), "%s/" DAYTONA_PLAN_RELAY, base);
    if (r >= 0)
        r = buf_append_char(&cmd, ' ');
    if (r >= 0)
        r = daytona_shell_quote(path, &cmd);
    if (r >= 0)
        r = buf_append_char(&cmd, ' ');
    if (r >= 0)
        r = daytona_shell_quote(p->channel_sock, &cmd);
    if (r >= 0)
        r = buf_steal(&cmd, &p->relay_command);
    buf_release(&cmd);
    return r;
}

int daytona_plan_build(json_object *sandbox, const char *home, const char *harness_dir,
                       struct daytona_plan *ret, char *err, size_t errlen)
{
    json_object *ro_binds = jsonx_get(sandbox, "roBinds");
    struct daytona_plan p;
    int r;

    memset(&p, 0, sizeof(p));
    err[0] = '\0';
    if (!home || home[0] != '/' || strlen(home) > DAYTONA_PLAN_PATH_MAX - 64) {
        snprintf(err, errlen, "sandbox: the sandbox user's home is not an absolute path");
        return -EINVAL;
    }
    snprintf(p.home, sizeof(p.home), "%s", home);
    snprintf(p.workspace, sizeof(p.workspace), "%s/workspace", home);
    snprintf(p.state_dir, sizeof(p.state_dir), "%s/" DAYTONA_PLAN_STATE, home);
    p.files = json_object_new_array();
    p.env = json_object_new_object();
    p.argv = json_object_new_array();
    p.folders = json_object_new_array();
    if (!p.files || !p.env || !p.argv || !p.folders) {
        r = -ENOMEM;
        goto fail;
    }
    r = map_files(&p, jsonx_get(sandbox, "files"), ro_binds, harness_dir, err, errlen);
    if (r >= 0)
        r = map_env_argv(&p, jsonx_get(sandbox, "env"), jsonx_get(sandbox, "argv"), ro_binds,
                         harness_dir, err, errlen);
    for (size_t i = 0; r >= 0 && ro_binds && i < json_object_array_length(ro_binds); i++) {
        const char *rb = json_object_get_string(json_object_array_get_idx(ro_binds, i));
        char mapped[DAYTONA_PLAN_PATH_MAX];

        if (!rb || rb[0] != '/')
            continue;
        r = daytona_plan_map(rb, p.home, ro_binds, harness_dir, mapped, sizeof(mapped));
        if (r >= 0)
            json_object_array_add(p.folders, json_object_new_string(mapped));
    }
    if (r >= 0 && jsonx_get(sandbox, "channelRelay"))
        r = plan_relay(&p, jsonx_str(sandbox, "channelRelay"), harness_dir, err, errlen);
    if (r >= 0)
        r = add_workspace(&p, jsonx_str(sandbox, "workspace"), err, errlen);
    if (r < 0)
        goto fail;
    *ret = p;
    return 0;
fail:
    if (!err[0])
        snprintf(err, errlen, "sandbox: %s", strerror(-r));
    daytona_plan_release(&p);
    return r;
}

void daytona_plan_release(struct daytona_plan *p)
{
    if (!p)
        return;
    json_object_put(p->files);
    json_object_put(p->env);
    json_object_put(p->argv);
    json_object_put(p->folders);
    p->files = p->env = p->argv = p->folders = NULL;
    free(p->relay_command);
    p->relay_command = NULL;
}

int daytona_plan_preflight(const struct daytona_plan *p, struct buf *out)
{
    int r = buf_append_str(out, "mkdir -p -- ");

    if (r >= 0)
        r = daytona_shell_quote(p->workspace, out);
    if (r >= 0)
        r = buf_append_str(out, " || exit 3");
    for (size_t i = 0; r >= 0 && p->folders && i < json_object_array_length(p->folders); i++) {
        r = buf_append_str(out, "; test -d ");
        if (r >= 0)
            r = daytona_shell_quote(
                json_object_get_string(json_object_array_get_idx(p->folders, i)), out);
        if (r >= 0)
            r = buf_printf(out, " || exit %zu", 4 + i);
    }
    return r;
}
