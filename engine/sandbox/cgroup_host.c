/*
 * sandbox_cgroup, the host side (cgroup_host.h): where the hierarchies are and what they give
 * us (layout, probe), the cgroups of an instance found by id, swept, and removed at a clean
 * stop. cgroup.c holds what is done to one environment's cgroup.
 */
#include "sandbox/cgroup_host.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/mountinfo.h"
#include "base/util.h"
#include "sandbox/cgroup.h"
#include "sandbox/cgroup_io.h"

#define SWEEP_MAX 65536u
#define SUPERVISOR "supervisor"

static const struct {
    unsigned bit;
    const char *name;
} controllers[] = {
    {SANDBOX_CG_PIDS, "pids"},
    {SANDBOX_CG_MEMORY, "memory"},
    {SANDBOX_CG_CPU, "cpu"},
};

/* --- layout ------------------------------------------------------------------------------ */

/* True when the comma-separated list contains name. */
static bool list_has(const char *list, const char *name)
{
    size_t n = strlen(name);

    for (const char *p = list; p && *p;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);

        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p = c ? c + 1 : NULL;
    }
    return false;
}

struct mount_line {
    char root[SANDBOX_CG_PATH_MAX];
    char point[SANDBOX_CG_PATH_MAX];
    char fstype[32];
    char opts[256];
};

static bool parse_mount_line(char *line, struct mount_line *m)
{
    struct mountinfo_line f;

    if (!mountinfo_split(line, &f) || !f.options)
        return false;
    if (strlen(f.root) >= sizeof(m->root) || strlen(f.point) >= sizeof(m->point))
        return false;
    strncpy(m->root, f.root, sizeof(m->root) - 1);
    m->root[sizeof(m->root) - 1] = '\0';
    strncpy(m->point, f.point, sizeof(m->point) - 1);
    m->point[sizeof(m->point) - 1] = '\0';
    mountinfo_unescape(m->root);
    mountinfo_unescape(m->point);
    if (strlen(f.fstype) >= sizeof(m->fstype) || strlen(f.options) >= sizeof(m->opts))
        return false;
    snprintf(m->fstype, sizeof(m->fstype), "%s", f.fstype);
    snprintf(m->opts, sizeof(m->opts), "%s", f.options);
    return true;
}

/*
 * The runner's own cgroup in a hierarchy from /proc/self/cgroup: v2 is the "0::" line, v1 the
 * line whose controller list has ctrl. A trailing "/supervisor" (where a previous probe moved
 * this process) is dropped so that the layout stays where it was.
 */
static bool own_path(const char *self_cgroup, const char *ctrl, char *out, size_t len)
{
    const char *p = self_cgroup;

    while (p && *p) {
        const char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        char line[SANDBOX_CG_PATH_MAX + 64], *c1, *c2;

        if (l < sizeof(line)) {
            memcpy(line, p, l);
            line[l] = '\0';
            c1 = strchr(line, ':');
            c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            if (c2) {
                *c1 = '\0';
                *c2 = '\0';
                /* "<id>:<controllers>:<path>"; v2 is "0::<path>" */
                if (ctrl ? list_has(c1 + 1, ctrl) : (strcmp(line, "0") == 0 && c1[1] == '\0')) {
                    size_t plen = strlen(c2 + 1), slen = strlen("/" SUPERVISOR);

                    if (plen >= len)
                        return false;
                    snprintf(out, len, "%s", c2 + 1);
                    if (plen > slen && strcmp(out + plen - slen, "/" SUPERVISOR) == 0)
                        out[plen - slen] = '\0';
                    return true;
                }
            }
        }
        p = nl ? nl + 1 : NULL;
    }
    return false;
}

/* <point><own relative to root> (the runner's own cgroup folder in this mount). */
static int own_dir(const struct mount_line *m, const char *own, char *out, size_t len)
{
    const char *rel = own;
    size_t rlen = strlen(m->root);

    if (strcmp(m->root, "/") != 0) {
        if (strncmp(own, m->root, rlen) != 0 || (own[rlen] != '/' && own[rlen] != '\0'))
            return -ENOENT; /* our cgroup is not inside this mount */
        rel = own + rlen;
    }
    if (strcmp(rel, "/") == 0)
        rel = "";
    if ((size_t)snprintf(out, len, "%s%s", m->point, rel) >= len)
        return -ENAMETOOLONG;
    return 0;
}

int sandbox_cgroup_layout(const char *mountinfo, const char *self_cgroup, const char *instance,
                          struct sandbox_cgroup_host *ret, char *err, size_t errlen)
{
    struct sandbox_cgroup_host host;
    char *text, *save = NULL;
    bool have_v2 = false;
    int r = 0;

    if (!sandbox_cgroup_plain_name(instance)) {
        snprintf(err, errlen, "cgroup: the instance name '%.64s' is not a plain name",
                 instance ? instance : "");
        return -EINVAL;
    }
    memset(&host, 0, sizeof(host));
    text = strdup(mountinfo);
    if (!text)
        return -ENOMEM;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        struct sandbox_cgroup_hier *h;
        struct mount_line m;
        char own[SANDBOX_CG_PATH_MAX], dir[SANDBOX_CG_PATH_MAX];
        unsigned ctrl = 0;
        const char *first = NULL;
        bool v2;

        if (!parse_mount_line(line, &m))
            continue;
        v2 = strcmp(m.fstype, "cgroup2") == 0;
        if (!v2 && strcmp(m.fstype, "cgroup") != 0)
            continue;
        if (v2) {
            if (have_v2)
                continue;
        } else {
            for (size_t i = 0; i < ARRAY_SIZE(controllers); i++) {
                bool taken = false;
                if (!list_has(m.opts, controllers[i].name))
                    continue;
                for (size_t k = 0; k < host.n; k++)
                    taken |= (host.h[k].ctrl & controllers[i].bit) != 0;
                if (taken)
                    continue; /* the same hierarchy mounted twice */
                ctrl |= controllers[i].bit;
                if (!first)
                    first = controllers[i].name;
            }
            if (!ctrl)
                continue;
        }
        if (!own_path(self_cgroup, v2 ? NULL : first, own, sizeof(own)))
            continue;
        if (own_dir(&m, own, dir, sizeof(dir)) < 0)
            continue;
        if (host.n >= SANDBOX_CG_HIER_MAX)
            break;
        h = &host.h[host.n];
        h->v2 = v2;
        h->ctrl = ctrl;
        if ((size_t)snprintf(h->dir, sizeof(h->dir), "%s/agent-runner/%s", dir, instance) >=
            sizeof(h->dir) - 80) {
            snprintf(err, errlen, "cgroup: the path '%.200s' is too long", dir);
            r = -ENAMETOOLONG;
            break;
        }
        host.n++;
        have_v2 |= v2;
    }
    free(text);
    if (r < 0)
        return r;
    *ret = host;
    return 0;
}

/* --- probe ------------------------------------------------------------------------------- */

static void note_missing(struct sandbox_cgroup_host *host, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void note_missing(struct sandbox_cgroup_host *host, const char *fmt, ...)
{
    size_t len = strlen(host->missing);
    char part[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(part, sizeof(part), fmt, ap);
    va_end(ap);
    snprintf(host->missing + len, sizeof(host->missing) - len, "%s%s", len ? "; " : "", part);
}

/* mkdir -p for a cgroup folder: 0755, existing is fine. */
static int mkdir_cg(const char *path)
{
    int r = util_mkdir_p(path, 0755);

    return r == -EEXIST ? 0 : r;
}

/* Parent folder of path into out ("" when none). */
static void parent_of(const char *path, char *out, size_t len)
{
    const char *slash = strrchr(path, '/');

    snprintf(out, len, "%.*s", slash ? (int)(slash - path) : 0, path);
}

/*
 * v2: enable our controllers from the runner's own cgroup down to <instance>. Moves the
 * caller into <own>/supervisor when the own cgroup holds processes (EBUSY).
 */
static unsigned enable_v2(struct sandbox_cgroup_hier *h, unsigned want, char *why, size_t whylen)
{
    char agent[SANDBOX_CG_PATH_MAX], own[SANDBOX_CG_PATH_MAX];
    const char *levels[3];
    unsigned got = want;

    parent_of(h->dir, agent, sizeof(agent));
    parent_of(agent, own, sizeof(own));
    levels[0] = own;
    levels[1] = agent;
    levels[2] = h->dir;
    for (size_t l = 0; l < 3 && got; l++) {
        for (size_t i = 0; i < ARRAY_SIZE(controllers); i++) {
            char op[16];
            int r;

            if (!(got & controllers[i].bit))
                continue;
            snprintf(op, sizeof(op), "+%s", controllers[i].name);
            r = sandbox_cgroup_write_at(levels[l], "cgroup.subtree_control", op);
            if (r == -EBUSY && l == 0) {
                /* "no internal processes": move ourselves out of the delegated root */
                char sup[SANDBOX_CG_PATH_MAX + 16], pid[16];

                snprintf(sup, sizeof(sup), "%s/" SUPERVISOR, own);
                snprintf(pid, sizeof(pid), "%d", (int)getpid());
                if (mkdir_cg(sup) == 0 && sandbox_cgroup_write_at(sup, "cgroup.procs", pid) == 0)
                    r = sandbox_cgroup_write_at(levels[l], "cgroup.subtree_control", op);
                if (r == -EBUSY)
                    snprintf(why, whylen,
                             "'%.200s' holds other processes (is the unit "
                             "Delegate=yes?)",
                             own);
            }
            if (r < 0) {
                got &= ~controllers[i].bit;
                if (!why[0])
                    snprintf(why, whylen, "cannot enable %s in '%s': %s", controllers[i].name,
                             levels[l], strerror(-r));
            }
        }
    }
    return got;
}

/* Controllers listed in dir/cgroup.controllers. */
static unsigned v2_available(const char *dir)
{
    char *text = NULL, *save = NULL;
    unsigned got = 0;

    if (sandbox_cgroup_read_at(dir, "cgroup.controllers", &text) < 0)
        return 0;
    for (char *t = strtok_r(text, " \n", &save); t; t = strtok_r(NULL, " \n", &save))
        for (size_t i = 0; i < ARRAY_SIZE(controllers); i++)
            if (strcmp(t, controllers[i].name) == 0)
                got |= controllers[i].bit;
    free(text);
    return got;
}

int sandbox_cgroup_for_id(const struct sandbox_cgroup_host *host, const char *id,
                          struct sandbox_cgroup *cg)
{
    if (!sandbox_cgroup_plain_name(id))
        return -EINVAL;
    memset(cg, 0, sizeof(*cg));
    for (size_t i = 0; i < host->n; i++) {
        char dir[SANDBOX_CG_PATH_MAX];

        snprintf(dir, sizeof(dir), "%s/%s", host->h[i].dir, id);
        cg->h[cg->n].v2 = host->h[i].v2;
        cg->h[cg->n].ctrl = host->h[i].ctrl;
        snprintf(cg->h[cg->n].dir, sizeof(cg->h[cg->n].dir), "%s", dir);
        snprintf(cg->h[cg->n].procs, sizeof(cg->h[cg->n].procs), "%s/cgroup.procs", dir);
        cg->n++;
    }
    return 0;
}

int sandbox_cgroup_probe(const char *instance, struct sandbox_cgroup_host *ret, char *err,
                         size_t errlen)
{
    struct sandbox_cgroup_host host;
    struct sandbox_cgroup_limits lim = {64, 256u << 20, 500};
    struct sandbox_cgroup cg;
    char *mountinfo = NULL, *self = NULL, id[32], why[256];
    unsigned have = 0, applied = 0;
    int r;

    r = util_read_file("/proc/self/mountinfo", SANDBOX_CG_TEXT_MAX, &mountinfo, NULL);
    if (r == 0)
        r = util_read_file("/proc/self/cgroup", SANDBOX_CG_TEXT_MAX, &self, NULL);
    if (r < 0) {
        free(mountinfo);
        snprintf(err, errlen, "cgroup: cannot read /proc/self: %s", strerror(-r));
        return r;
    }
    r = sandbox_cgroup_layout(mountinfo, self, instance, &host, err, errlen);
    free(mountinfo);
    free(self);
    if (r < 0)
        return r;
    for (size_t i = 0; i < host.n; i++) {
        struct sandbox_cgroup_hier *h = &host.h[i];

        why[0] = '\0';
        r = mkdir_cg(h->dir);
        if (r < 0) {
            note_missing(&host, "cannot create '%.200s': %s", h->dir, strerror(-r));
            h->ctrl = 0;
            continue;
        }
        if (h->v2) {
            char agent[SANDBOX_CG_PATH_MAX], own[SANDBOX_CG_PATH_MAX];
            unsigned v1 = 0;

            for (size_t k = 0; k < host.n; k++)
                if (!host.h[k].v2)
                    v1 |= host.h[k].ctrl;
            parent_of(h->dir, agent, sizeof(agent));
            parent_of(agent, own, sizeof(own));
            h->ctrl = v2_available(own) & ~v1;
            if (h->ctrl) {
                h->ctrl = enable_v2(h, h->ctrl, why, sizeof(why));
                if (why[0])
                    note_missing(&host, "cgroup v2: %s", why);
            }
        }
        have |= h->ctrl;
    }
    /* write every limit into a probe cgroup and see what holds */
    snprintf(id, sizeof(id), "probe-%d", (int)getpid());
    host.can = have | SANDBOX_CG_SWAP | SANDBOX_CG_KILL;
    r = sandbox_cgroup_create(&host, id, NULL, &cg, err, errlen);
    if (r == -EEXIST) { /* a probe of an earlier process with our pid */
        (void)sandbox_cgroup_for_id(&host, id, &cg);
        (void)sandbox_cgroup_kill(&cg, 1000);
        (void)sandbox_cgroup_remove(&cg);
        r = sandbox_cgroup_create(&host, id, NULL, &cg, err, errlen);
    }
    if (r == 0) {
        why[0] = '\0';
        (void)sandbox_cgroup_apply_limits(&cg, &lim, have | SANDBOX_CG_SWAP, &applied, why,
                                          sizeof(why));
        for (size_t i = 0; i < cg.n; i++) {
            char path[SANDBOX_CG_PATH_MAX + 16];
            snprintf(path, sizeof(path), "%s/cgroup.kill", cg.h[i].dir);
            if (cg.h[i].v2 && access(path, W_OK) == 0)
                applied |= SANDBOX_CG_KILL;
        }
        (void)sandbox_cgroup_kill(&cg, 1000);
        (void)sandbox_cgroup_remove(&cg);
    } else {
        note_missing(&host, "cannot create a cgroup: %s", err);
        err[0] = '\0';
    }
    host.can = applied;
    for (size_t i = 0; i < ARRAY_SIZE(controllers); i++)
        if (!(applied & controllers[i].bit))
            note_missing(&host, "%s limit not enforced%s", controllers[i].name,
                         (have & controllers[i].bit) ? " (the limit could not be written)"
                                                     : " (no such controller for us)");
    if ((applied & SANDBOX_CG_MEMORY) && !(applied & SANDBOX_CG_SWAP))
        note_missing(&host, "swap not forbidden (no swap accounting)");
    *ret = host;
    return 0;
}

struct names {
    char **v;
    size_t n, cap;
};

static int names_add(struct names *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], name) == 0)
            return 0;
    if (s->n >= SWEEP_MAX)
        return -E2BIG;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        char **v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n] = strdup(name);
    if (!s->v[s->n])
        return -ENOMEM;
    s->n++;
    return 0;
}

int sandbox_cgroup_sweep(const struct sandbox_cgroup_host *host,
                         bool (*keep)(const char *id, void *ctx), void *ctx, int timeout_ms)
{
    struct names names = {0};
    int removed = 0, first = 0;

    for (size_t i = 0; i < host->n; i++) {
        DIR *d = opendir(host->h[i].dir);
        struct dirent *de;

        if (!d)
            continue;
        while ((de = readdir(d))) {
            if (de->d_type != DT_DIR || !sandbox_cgroup_plain_name(de->d_name))
                continue;
            if (keep && keep(de->d_name, ctx))
                continue;
            if (names_add(&names, de->d_name) < 0 && !first)
                first = -ENOMEM;
        }
        closedir(d);
    }
    for (size_t k = 0; k < names.n; k++) {
        struct sandbox_cgroup cg;

        (void)sandbox_cgroup_for_id(host, names.v[k], &cg);
        if (sandbox_cgroup_kill(&cg, timeout_ms) < 0 && !first)
            first = -ETIMEDOUT;
        if (sandbox_cgroup_remove(&cg) == 0)
            removed++;
        else if (!first)
            first = -EBUSY;
        free(names.v[k]);
    }
    free(names.v);
    return first ? first : removed;
}

int sandbox_cgroup_host_remove(const struct sandbox_cgroup_host *host)
{
    int first = 0;

    for (size_t i = 0; i < host->n; i++) {
        char agent[SANDBOX_CG_PATH_MAX];

        if (rmdir(host->h[i].dir) == -1 && errno != ENOENT && !first)
            first = -errno;
        parent_of(host->h[i].dir, agent, sizeof(agent));
        (void)rmdir(agent); /* other instances may still use it */
    }
    return first;
}
