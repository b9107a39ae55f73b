/*
 * sandbox_cgroup, one environment (see cgroup.h): its cgroup created with the limits, entered
 * by the sandbox's child, read back for a tripped limit, killed and removed. The file I/O it
 * shares with the host side is cgroup_io.c; the host side (hierarchies, probe, sweep) is
 * cgroup_host.c.
 */
#include "sandbox/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "sandbox/cgroup_io.h"

_Static_assert(SANDBOX_CG_IO_PATH_MAX >= SANDBOX_CG_PATH_MAX + 64,
               "a cgroup folder and a file name in it fit cgroup_io's path");

static int write_u64(const char *dir, const char *file, uint64_t v)
{
    char s[32];

    snprintf(s, sizeof(s), "%llu", (unsigned long long)v);
    return sandbox_cgroup_write_at(dir, file, s);
}

int sandbox_cgroup_parse_key(const char *text, const char *key, uint64_t *ret)
{
    size_t klen = strlen(key);
    const char *p = text;

    while (p && *p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);

        if (len > klen + 1 && strncmp(p, key, klen) == 0 && p[klen] == ' ') {
            char num[24];
            size_t vlen = len - klen - 1;

            if (vlen == 0 || vlen >= sizeof(num))
                return -EINVAL;
            memcpy(num, p + klen + 1, vlen);
            num[vlen] = '\0';
            return util_parse_u64(num, 0, UINT64_MAX, ret);
        }
        p = nl ? nl + 1 : NULL;
    }
    return -ENOENT;
}

static uint64_t cpu_quota_us(uint32_t millis)
{
    uint64_t q = (uint64_t)millis * SANDBOX_CG_CPU_PERIOD_US / 1000;

    return q < 1000 ? 1000 : q; /* the kernel's minimum quota is 1 ms */
}

void sandbox_cgroup_cpu_max(uint32_t millis, char *buf, size_t len)
{
    if (millis == 0)
        snprintf(buf, len, "max %u", SANDBOX_CG_CPU_PERIOD_US);
    else
        snprintf(buf, len, "%llu %u", (unsigned long long)cpu_quota_us(millis),
                 SANDBOX_CG_CPU_PERIOD_US);
}

/* --- one environment --------------------------------------------------------------------- */

int sandbox_cgroup_apply_limits(const struct sandbox_cgroup *cg,
                                const struct sandbox_cgroup_limits *lim, unsigned want,
                                unsigned *ret_applied, char *err, size_t errlen)
{
    unsigned applied = 0;
    int first = 0;

    for (size_t i = 0; i < cg->n; i++) {
        const char *d = cg->h[i].dir;
        bool v2 = cg->h[i].v2;
        unsigned c = cg->h[i].ctrl & want;
        int r;

        if ((c & SANDBOX_CG_PIDS) && lim->pids_max) {
            r = write_u64(d, "pids.max", lim->pids_max);
            if (r == 0)
                applied |= SANDBOX_CG_PIDS;
            else if (!first) {
                first = r;
                snprintf(err, errlen, "cgroup: pids.max in '%s': %s", d, strerror(-r));
            }
        }
        if ((c & SANDBOX_CG_MEMORY) && lim->memory_max) {
            r = write_u64(d, v2 ? "memory.max" : "memory.limit_in_bytes", lim->memory_max);
            if (r == 0) {
                applied |= SANDBOX_CG_MEMORY;
                if (v2) {
                    if (sandbox_cgroup_write_at(d, "memory.swap.max", "0") == 0)
                        applied |= SANDBOX_CG_SWAP;
                    (void)sandbox_cgroup_write_at(d, "memory.oom.group", "1");
                } else if (write_u64(d, "memory.memsw.limit_in_bytes", lim->memory_max) == 0) {
                    applied |= SANDBOX_CG_SWAP;
                } else {
                    (void)sandbox_cgroup_write_at(d, "memory.swappiness", "0");
                }
                if ((want & SANDBOX_CG_SWAP) && !(applied & SANDBOX_CG_SWAP) && !first &&
                    ret_applied == NULL) {
                    first = -ENOTSUP;
                    snprintf(err, errlen, "cgroup: cannot forbid swap in '%s'", d);
                }
            } else if (!first) {
                first = r;
                snprintf(err, errlen, "cgroup: memory limit in '%s': %s", d, strerror(-r));
            }
        }
        if ((c & SANDBOX_CG_CPU) && lim->cpu_millis) {
            if (v2) {
                char s[48];
                sandbox_cgroup_cpu_max(lim->cpu_millis, s, sizeof(s));
                r = sandbox_cgroup_write_at(d, "cpu.max", s);
            } else {
                r = write_u64(d, "cpu.cfs_period_us", SANDBOX_CG_CPU_PERIOD_US);
                if (r == 0)
                    r = write_u64(d, "cpu.cfs_quota_us", cpu_quota_us(lim->cpu_millis));
            }
            if (r == 0)
                applied |= SANDBOX_CG_CPU;
            else if (!first) {
                first = r;
                snprintf(err, errlen, "cgroup: CPU limit in '%s': %s", d, strerror(-r));
            }
        }
    }
    if (ret_applied)
        *ret_applied = applied;
    return first;
}

int sandbox_cgroup_set_cpu_weight(const struct sandbox_cgroup *cg, bool low)
{
    int first = 0;

    for (size_t i = 0; i < cg->n; i++) {
        int r;

        if (!(cg->h[i].ctrl & SANDBOX_CG_CPU))
            continue;
        if (cg->h[i].v2)
            r = sandbox_cgroup_write_at(cg->h[i].dir, "cpu.weight", low ? "10" : "100");
        else
            r = sandbox_cgroup_write_at(cg->h[i].dir, "cpu.shares", low ? "102" : "1024");
        if (r < 0 && !first)
            first = r;
    }
    return first;
}

int sandbox_cgroup_create(const struct sandbox_cgroup_host *host, const char *id,
                          const struct sandbox_cgroup_limits *lim, struct sandbox_cgroup *ret,
                          char *err, size_t errlen)
{
    struct sandbox_cgroup cg;
    int r = 0;

    if (!sandbox_cgroup_plain_name(id)) {
        snprintf(err, errlen, "cgroup: '%.64s' is not a plain name", id ? id : "");
        return -EINVAL;
    }
    memset(&cg, 0, sizeof(cg));
    for (size_t i = 0; i < host->n; i++) {
        const struct sandbox_cgroup_hier *h = &host->h[i];

        if (!h->v2 && !(h->ctrl & host->can))
            continue; /* a v1 hierarchy gives nothing we enforce */
        char dir[SANDBOX_CG_PATH_MAX];

        snprintf(dir, sizeof(dir), "%s/%s", h->dir, id);
        cg.h[cg.n].v2 = h->v2;
        cg.h[cg.n].ctrl = h->ctrl & host->can;
        snprintf(cg.h[cg.n].dir, sizeof(cg.h[cg.n].dir), "%s", dir);
        snprintf(cg.h[cg.n].procs, sizeof(cg.h[cg.n].procs), "%s/cgroup.procs", dir);
        if (mkdir(cg.h[cg.n].dir, 0755) == -1) {
            r = -errno;
            snprintf(err, errlen, "cgroup: cannot create '%s': %s", cg.h[cg.n].dir, strerror(-r));
            break;
        }
        cg.n++;
    }
    if (r == 0 && lim)
        r = sandbox_cgroup_apply_limits(&cg, lim, host->can, NULL, err, errlen);
    if (r < 0) {
        (void)sandbox_cgroup_remove(&cg);
        return r;
    }
    *ret = cg;
    return 0;
}

int sandbox_cgroup_enter(const struct sandbox_cgroup *cg)
{
    for (size_t i = 0; i < cg->n; i++) {
        int fd = open(cg->h[i].procs, O_WRONLY | O_CLOEXEC);
        ssize_t n;

        if (fd == -1)
            return -errno;
        n = write(fd, "0", 1);
        if (n != 1) {
            int r = n < 0 ? -errno : -EIO;
            close(fd);
            return r;
        }
        close(fd);
    }
    return 0;
}

/* The number a one-line file dir/file holds into *ret; *ret unchanged when there is none. */
static void read_number(const char *dir, const char *file, uint64_t *ret)
{
    char *text = NULL;

    if (sandbox_cgroup_read_at(dir, file, &text) == 0) {
        text[strcspn(text, "\n")] = '\0';
        (void)util_parse_u64(text, 0, UINT64_MAX, ret);
        free(text);
    }
}

int sandbox_cgroup_stats(const struct sandbox_cgroup *cg, struct sandbox_cgroup_stats *ret)
{
    struct sandbox_cgroup_stats st;

    memset(&st, 0, sizeof(st));
    for (size_t i = 0; i < cg->n; i++) {
        const char *d = cg->h[i].dir;
        char *text = NULL;

        if (cg->h[i].ctrl & SANDBOX_CG_MEMORY) {
            if (cg->h[i].v2) {
                if (sandbox_cgroup_read_at(d, "memory.events", &text) == 0) {
                    st.have_memory = true;
                    (void)sandbox_cgroup_parse_key(text, "oom_kill", &st.oom_kills);
                    (void)sandbox_cgroup_parse_key(text, "max", &st.memory_max);
                    free(text);
                }
            } else {
                if (sandbox_cgroup_read_at(d, "memory.oom_control", &text) == 0) {
                    st.have_memory = true;
                    (void)sandbox_cgroup_parse_key(text, "oom_kill", &st.oom_kills);
                    free(text);
                }
                read_number(d, "memory.failcnt", &st.memory_max);
            }
        }
        text = NULL;
        if (cg->h[i].ctrl & SANDBOX_CG_PIDS) {
            if (sandbox_cgroup_read_at(d, "pids.events", &text) == 0) {
                st.have_pids = true;
                (void)sandbox_cgroup_parse_key(text, "max", &st.pids_max);
                free(text);
            }
            read_number(d, "pids.current", &st.pids_current);
        }
    }
    *ret = st;
    return 0;
}

/* The counter `key` of dir/file, 0 when absent. */
static uint64_t counter(const char *dir, const char *file, const char *key)
{
    char *text = NULL;
    uint64_t v = 0;

    if (sandbox_cgroup_read_at(dir, file, &text) == 0) {
        (void)sandbox_cgroup_parse_key(text, key, &v);
        free(text);
    }
    return v;
}

enum sandbox_cgroup_trip sandbox_cgroup_tripped(const struct sandbox_cgroup *cg)
{
    /* two reads per turn at most: only the counters that name a trip */
    for (size_t i = 0; i < cg->n; i++)
        if ((cg->h[i].ctrl & SANDBOX_CG_MEMORY) &&
            counter(cg->h[i].dir, cg->h[i].v2 ? "memory.events" : "memory.oom_control",
                    "oom_kill") > 0)
            return SANDBOX_TRIP_MEMORY;
    for (size_t i = 0; i < cg->n; i++)
        if ((cg->h[i].ctrl & SANDBOX_CG_PIDS) && counter(cg->h[i].dir, "pids.events", "max") > 0)
            return SANDBOX_TRIP_PIDS;
    return SANDBOX_TRIP_NONE;
}

const char *sandbox_cgroup_trip_code(enum sandbox_cgroup_trip trip)
{
    switch (trip) {
    case SANDBOX_TRIP_MEMORY:
        return "sandbox_memory_limit";
    case SANDBOX_TRIP_PIDS:
        return "sandbox_pids_limit";
    default:
        return NULL;
    }
}

/* --- kill, remove, sweep ----------------------------------------------------------------- */

/* True when nothing is left in any directory of cg. */
static bool empty(const struct sandbox_cgroup *cg)
{
    for (size_t i = 0; i < cg->n; i++) {
        char *text = NULL;
        uint64_t populated = 1;
        int r;

        if (cg->h[i].v2 && sandbox_cgroup_read_at(cg->h[i].dir, "cgroup.events", &text) == 0) {
            r = sandbox_cgroup_parse_key(text, "populated", &populated);
            free(text);
            if (r == 0 && populated)
                return false;
            if (r == 0)
                continue;
        }
        text = NULL;
        r = sandbox_cgroup_read_at(cg->h[i].dir, "cgroup.procs", &text);
        if (r == -ENOENT)
            continue;
        if (r < 0 || text[0] != '\0') {
            free(text);
            return false;
        }
        free(text);
    }
    return true;
}

/* Still a member of the cgroup at dir (by /proc/<pid>/cgroup)? */
static bool member(pid_t pid, const char *dir)
{
    char path[64], *text = NULL, *save = NULL;
    bool yes = false;

    snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    if (util_read_file(path, SANDBOX_CG_TEXT_MAX, &text, NULL) < 0)
        return false;
    for (char *line = strtok_r(text, "\n", &save); line && !yes;
         line = strtok_r(NULL, "\n", &save)) {
        char *c = strchr(line, ':');
        char *p = c ? strchr(c + 1, ':') : NULL;
        size_t plen, dlen = strlen(dir);

        if (!p)
            continue;
        p++;
        plen = strlen(p);
        /* dir is <mount><path>: the cgroup path must be its tail, on a '/' boundary */
        if (plen > 1 && plen <= dlen && strcmp(dir + dlen - plen, p) == 0)
            yes = true;
    }
    free(text);
    return yes;
}

static int kill_listed(const char *dir)
{
    char *text = NULL, *save = NULL;
    int r, n = 0;

    r = sandbox_cgroup_read_at(dir, "cgroup.procs", &text);
    if (r < 0)
        return r == -ENOENT ? 0 : r;
    for (char *t = strtok_r(text, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
        uint64_t v;
        int pfd;

        if (util_parse_u64(t, 1, 0x7fffffff, &v) < 0 || (pid_t)v == getpid())
            continue;
        /* pin the process, then check it is still ours: a reused pid is never signalled */
        pfd = (int)syscall(SYS_pidfd_open, (pid_t)v, 0);
        if (pfd >= 0) {
            if (member((pid_t)v, dir))
                (void)syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
            close(pfd);
        } else if (errno == ENOSYS && member((pid_t)v, dir)) {
            (void)kill((pid_t)v, SIGKILL);
        }
        n++;
    }
    free(text);
    return n;
}

int sandbox_cgroup_kill(const struct sandbox_cgroup *cg, int timeout_ms)
{
    int64_t deadline = util_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    int wait = 1;

    /* no new task can appear while we kill the ones there are */
    for (size_t i = 0; i < cg->n; i++)
        if (cg->h[i].ctrl & SANDBOX_CG_PIDS)
            (void)sandbox_cgroup_write_at(cg->h[i].dir, "pids.max", "0");
    for (int round = 0;; round++) {
        bool group_killed = false;

        /*
         * cgroup.kill takes the whole v2 group at once; the v1 directories (and a process
         * caught between joining them and the v2 one) are killed by the listed pids. Every
         * round does both until nothing is left.
         */
        for (size_t i = 0; i < cg->n; i++)
            if (cg->h[i].v2 && sandbox_cgroup_write_at(cg->h[i].dir, "cgroup.kill", "1") == 0)
                group_killed = true;
        if (!group_killed || round > 0)
            for (size_t i = 0; i < cg->n; i++)
                (void)kill_listed(cg->h[i].dir);
        if (empty(cg))
            return 0;
        if (util_now_ms() >= deadline)
            return -ETIMEDOUT;
        util_sleep_ms(wait);
        if (wait < 50)
            wait *= 2;
    }
}

int sandbox_cgroup_remove(const struct sandbox_cgroup *cg)
{
    int first = 0;

    for (size_t i = 0; i < cg->n; i++) {
        int r = 0;

        for (int attempt = 0; attempt < 50; attempt++) {
            r = rmdir(cg->h[i].dir) == 0 || errno == ENOENT ? 0 : -errno;
            if (r != -EBUSY)
                break;
            util_sleep_ms(2); /* tasks that are exiting still hold it for a moment */
        }
        if (r < 0 && !first)
            first = r;
    }
    return first;
}
