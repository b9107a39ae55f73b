#include "sandbox/etc.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

#define ENTRIES_MAX 64
#define RESOLV_MAX (64u * 1024)

static const char passwd_text[] = "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                                  "agent:x:1000:1000:agent:/home/agent:/bin/bash\n"
                                  "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
static const char group_text[] = "root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n";
static const char nsswitch_text[] = "passwd: files\n"
                                    "group: files\n"
                                    "shadow: files\n"
                                    "hosts: files dns\n"
                                    "networks: files\n"
                                    "protocols: files\n"
                                    "services: files\n"
                                    "ethers: files\n"
                                    "rpc: files\n"
                                    "netgroup: files\n";

/* Host files bound read-only when present and world-readable. */
static const char *const host_binds[] = {
    "/etc/ld.so.cache",     "/etc/alternatives",  "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf", "/etc/pki/tls/certs", "/etc/pki/ca-trust/extracted",
    "/etc/protocols",       "/etc/services",      "/etc/shells",
    "/etc/mime.types",      "/etc/timezone",      "/etc/debian_version",
};

/* Host symlinks replicated as they are (only their target text crosses). */
static const char *const host_links[] = {"/etc/localtime", "/etc/os-release"};

static struct sandbox_etc_entry *add(struct sandbox_etc *etc, enum sandbox_etc_kind kind,
                                     const char *path)
{
    struct sandbox_etc_entry *e;

    if (etc->n >= ENTRIES_MAX)
        return NULL;
    e = &etc->v[etc->n];
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    e->path = strdup(path);
    if (!e->path)
        return NULL;
    etc->n++;
    return e;
}

static int add_data(struct sandbox_etc *etc, const char *path, const char *data, size_t len)
{
    struct sandbox_etc_entry *e = add(etc, SANDBOX_ETC_DATA, path);

    if (!e)
        return -ENOMEM;
    e->data = malloc(len + 1);
    if (!e->data)
        return -ENOMEM;
    memcpy(e->data, data, len);
    e->data[len] = '\0';
    e->len = len;
    return 0;
}

static int add_symlink(struct sandbox_etc *etc, const char *path, const char *target)
{
    struct sandbox_etc_entry *e = add(etc, SANDBOX_ETC_SYMLINK, path);

    if (!e)
        return -ENOMEM;
    e->target = strdup(target);
    return e->target ? 0 : -ENOMEM;
}

/* A public host folder is bound, a public host file copied (a mount each costs bubblewrap a
 * bind and a remount; a copy is a write into the root tmpfs). */
static int add_bind(struct sandbox_etc *etc, const char *path, const char *src,
                    const struct stat *st)
{
    struct sandbox_etc_entry *e =
        add(etc, S_ISDIR(st->st_mode) ? SANDBOX_ETC_BIND : SANDBOX_ETC_COPY, path);

    if (!e)
        return -ENOMEM;
    e->src = strdup(src);
    return e->src ? 0 : -ENOMEM;
}

static void host_path(const struct sandbox_etc_opts *o, const char *path, char *out, size_t len)
{
    const char *root = o->host_root && strcmp(o->host_root, "/") != 0 ? o->host_root : "";

    snprintf(out, len, "%s%s", root, path);
}

/* World-readable (and, for a folder, world-searchable) regular file or folder. */
static bool public(const struct stat *st)
{
    if (S_ISREG(st->st_mode))
        return (st->st_mode & S_IROTH) != 0;
    if (S_ISDIR(st->st_mode))
        return (st->st_mode & (S_IROTH | S_IXOTH)) == (S_IROTH | S_IXOTH);
    return false;
}

/*
 * Every folder between /etc and path is world-searchable: what anybody may reach, as the
 * sandbox's own uid could when its entries were bound (a copy is read by the keeper, root).
 */
static bool parents_searchable(const struct sandbox_etc_opts *o, const char *path)
{
    char dir[PATH_MAX], host[PATH_MAX];
    struct stat st;
    char *slash;

    snprintf(dir, sizeof(dir), "%s", path);
    while ((slash = strrchr(dir, '/')) && slash > dir + strlen("/etc")) {
        *slash = '\0';
        host_path(o, dir, host, sizeof(host));
        if (lstat(host, &st) != 0 || !S_ISDIR(st.st_mode) || !(st.st_mode & S_IXOTH))
            return false;
    }
    return true;
}

static int add_resolv(const struct sandbox_etc_opts *o, struct sandbox_etc *etc)
{
    char path[PATH_MAX];
    struct stat st;
    char *text = NULL;
    size_t len = 0;
    int r;

    host_path(o, "/etc/resolv.conf", path, sizeof(path));
    /* resolv.conf is often a symlink into /run: follow it, but only to a public file */
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && public(&st)) {
        r = util_read_file(path, RESOLV_MAX, &text, &len);
        if (r < 0 && r != -ENOENT && r != -EFBIG)
            return r;
    }
    r = add_data(etc, "/etc/resolv.conf", text ? text : "", text ? len : 0);
    free(text);
    return r;
}

static int add_hosts(struct sandbox_etc *etc, const char *hostname, const char *extra)
{
    char *text = NULL;
    int n, r;

    n = asprintf(&text,
                 "127.0.0.1\tlocalhost\n127.0.1.1\t%.64s\n::1\tlocalhost ip6-localhost "
                 "ip6-loopback\n%s",
                 hostname, extra ? extra : "");
    if (n < 0)
        return -ENOMEM;
    r = add_data(etc, "/etc/hosts", text, (size_t)n);
    free(text);
    return r;
}

int sandbox_etc_build(const struct sandbox_etc_opts *opts, struct sandbox_etc *ret)
{
    const char *hostname = opts->hostname ? opts->hostname : "sandbox";
    struct sandbox_etc etc = {0};
    char buf[512], path[PATH_MAX];
    int r, n;

    etc.v = calloc(ENTRIES_MAX, sizeof(*etc.v));
    if (!etc.v)
        return -ENOMEM;
    r = add_data(&etc, "/etc/passwd", passwd_text, sizeof(passwd_text) - 1);
    if (r == 0)
        r = add_data(&etc, "/etc/group", group_text, sizeof(group_text) - 1);
    if (r == 0)
        r = add_data(&etc, "/etc/nsswitch.conf", nsswitch_text, sizeof(nsswitch_text) - 1);
    if (r == 0)
        r = add_hosts(&etc, hostname, opts->hosts_extra);
    if (r == 0) {
        n = snprintf(buf, sizeof(buf), "%.64s\n", hostname);
        r = add_data(&etc, "/etc/hostname", buf, (size_t)n);
    }
    if (r == 0 && opts->resolv_conf)
        r = add_data(&etc, "/etc/resolv.conf", opts->resolv_conf, strlen(opts->resolv_conf));
    else if (r == 0)
        r = add_resolv(opts, &etc);
    if (r == 0)
        r = add_symlink(&etc, "/etc/mtab", "../proc/self/mounts");
    for (size_t i = 0; r == 0 && i < ARRAY_SIZE(host_links); i++) {
        char target[PATH_MAX];
        ssize_t len;

        host_path(opts, host_links[i], path, sizeof(path));
        len = readlink(path, target, sizeof(target) - 1);
        if (len > 0) {
            target[len] = '\0';
            r = add_symlink(&etc, host_links[i], target);
        } else {
            struct stat st;
            /* a plain file (localtime copied by hand): bind it if it is public */
            if (lstat(path, &st) == 0 && public(&st))
                r = add_bind(&etc, host_links[i], path, &st);
        }
    }
    for (size_t i = 0; r == 0 && i < ARRAY_SIZE(host_binds); i++) {
        struct stat st;

        host_path(opts, host_binds[i], path, sizeof(path));
        if (lstat(path, &st) == 0 && public(&st) && parents_searchable(opts, host_binds[i]))
            r = add_bind(&etc, host_binds[i], path, &st);
    }
    if (r < 0) {
        sandbox_etc_release(&etc);
        return r;
    }
    *ret = etc;
    return 0;
}

void sandbox_etc_release(struct sandbox_etc *etc)
{
    if (!etc->v)
        return;
    for (size_t i = 0; i < etc->n; i++) {
        free(etc->v[i].path);
        free(etc->v[i].src);
        free(etc->v[i].target);
        free(etc->v[i].data);
    }
    free(etc->v);
    etc->v = NULL;
    etc->n = 0;
}

const struct sandbox_etc_entry *sandbox_etc_find(const struct sandbox_etc *etc, const char *path)
{
    for (size_t i = 0; i < etc->n; i++)
        if (strcmp(etc->v[i].path, path) == 0)
            return &etc->v[i];
    return NULL;
}
