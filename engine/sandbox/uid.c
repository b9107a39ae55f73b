#include "sandbox/uid.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/fstree.h"
#include "base/util.h"

#define FILE_MAX (16u * 1024 * 1024)
#define ID_FLOOR 1000u      /* everything below is system territory */
#define ID_CEIL 0x7fffffffu /* 2^31 - 1 and above are refused */
#define NSS_ENTRIES_MAX 10000000u

struct span {
    uint64_t lo, hi; /* inclusive */
};

static bool overlaps(struct span a, struct span b)
{
    return a.lo <= b.hi && b.lo <= a.hi;
}

#define RANGE_FMT "the sandbox ids %llu..%llu (AGENT_RUNNER_SANDBOX_UID_BASE + slots)"
#define RANGE_ARGS(r) (unsigned long long)(r).lo, (unsigned long long)(r).hi

/* The whole file, or NULL when it does not exist; err names the file it cannot read. */
static int read_text(const char *path, char **ret, char *err, size_t errlen)
{
    int r = util_read_file(path, FILE_MAX, ret, NULL);

    if (r == -ENOENT) {
        *ret = NULL;
        return 0;
    }
    if (r < 0)
        return util_fail(r, err, errlen, "cannot read '%s': %s", path, strerror(-r));
    return r;
}

/* Next line of *cursor (modified in place), NULL at the end. */
static char *next_line(char **cursor)
{
    char *line = *cursor, *nl;

    if (!line || !*line)
        return NULL;
    nl = strchr(line, '\n');
    if (nl) {
        *nl = '\0';
        *cursor = nl + 1;
    } else {
        *cursor = line + strlen(line);
    }
    return line;
}

/* Split line at ':' into at most max fields; returns the number found. */
static size_t split_colon(char *line, char **fields, size_t max)
{
    size_t n = 0;

    while (n < max) {
        char *c = strchr(line, ':');
        fields[n++] = line;
        if (!c)
            break;
        *c = '\0';
        line = c + 1;
    }
    return n;
}

static bool num(const char *s, uint64_t *ret)
{
    return util_parse_u64(s, 0, UINT64_MAX, ret) == 0;
}

/* passwd (id field 2) or group (id field 2): any entry inside the range. */
static int check_db(const char *path, const char *what, struct span range, char *err, size_t errlen)
{
    char *text = NULL, *cursor, *line;
    int r = read_text(path, &text, err, errlen);

    if (r < 0)
        return r;
    cursor = text;
    while ((line = next_line(&cursor))) {
        char *f[4];
        uint64_t id;

        if (line[0] == '#' || split_colon(line, f, 4) < 3 || !num(f[2], &id))
            continue;
        if (id >= range.lo && id <= range.hi) {
            snprintf(err, errlen, RANGE_FMT " include %s '%.64s' (id %llu) of %s",
                     RANGE_ARGS(range), what, f[0], (unsigned long long)id, path);
            free(text);
            return -EINVAL;
        }
    }
    free(text);
    return 0;
}

/* subuid / subgid: name:start:count ranges. */
static int check_sub(const char *path, struct span range, char *err, size_t errlen)
{
    char *text = NULL, *cursor, *line;
    int r = read_text(path, &text, err, errlen);

    if (r < 0)
        return r;
    cursor = text;
    while ((line = next_line(&cursor))) {
        char *f[3];
        uint64_t start, count;

        if (line[0] == '#' || split_colon(line, f, 3) != 3 || !num(f[1], &start) ||
            !num(f[2], &count) || count == 0)
            continue;
        if (overlaps(range, (struct span){start, start + count - 1})) {
            snprintf(err, errlen,
                     RANGE_FMT " overlap the subordinate range %llu..%llu of "
                               "'%.64s' in %s",
                     RANGE_ARGS(range), (unsigned long long)start,
                     (unsigned long long)(start + count - 1), f[0], path);
            free(text);
            return -EINVAL;
        }
    }
    free(text);
    return 0;
}

struct defs {
    uint64_t v[12];
};

static const char *const def_names[12] = {
    "SYS_UID_MIN", "SYS_UID_MAX", "UID_MIN", "UID_MAX", "SUB_UID_MIN", "SUB_UID_MAX",
    "SYS_GID_MIN", "SYS_GID_MAX", "GID_MIN", "GID_MAX", "SUB_GID_MIN", "SUB_GID_MAX",
};

/* shadow-utils' defaults when login.defs does not say */
static const uint64_t def_values[12] = {
    101, 999, 1000, 60000, 100000, 600100000, 101, 999, 1000, 60000, 100000, 600100000,
};

static int check_login_defs(const char *path, struct span range, char *err, size_t errlen)
{
    char *text = NULL, *cursor, *line;
    struct defs d;
    int r = read_text(path, &text, err, errlen);

    if (r < 0)
        return r;
    memcpy(d.v, def_values, sizeof(d.v));
    cursor = text;
    while ((line = next_line(&cursor))) {
        char key[32], value[32];
        uint64_t v;

        if (sscanf(line, " %31s %31s", key, value) != 2 || key[0] == '#' || !num(value, &v))
            continue;
        for (size_t i = 0; i < ARRAY_SIZE(def_names); i++)
            if (strcmp(key, def_names[i]) == 0)
                d.v[i] = v;
    }
    free(text);
    for (size_t i = 0; i < ARRAY_SIZE(def_names); i += 2) {
        if (d.v[i] > d.v[i + 1])
            continue;
        if (overlaps(range, (struct span){d.v[i], d.v[i + 1]})) {
            snprintf(err, errlen, RANGE_FMT " overlap %s..%s (%llu..%llu) of %s", RANGE_ARGS(range),
                     def_names[i], def_names[i + 1], (unsigned long long)d.v[i],
                     (unsigned long long)d.v[i + 1], path);
            return -EINVAL;
        }
    }
    return 0;
}

static int check_overflow_ids(struct span range, char *err, size_t errlen)
{
    static const char *const files[] = {"/proc/sys/kernel/overflowuid",
                                        "/proc/sys/kernel/overflowgid", "/proc/sys/fs/overflowuid",
                                        "/proc/sys/fs/overflowgid"};

    for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
        char *text = NULL;
        uint64_t id;

        if (util_read_file(files[i], 64, &text, NULL) < 0)
            continue;
        text[strcspn(text, "\n")] = '\0';
        if (num(text, &id) && id >= range.lo && id <= range.hi) {
            snprintf(err, errlen, RANGE_FMT " include the kernel's overflow id %llu (%s)",
                     RANGE_ARGS(range), (unsigned long long)id, files[i]);
            free(text);
            return -EINVAL;
        }
        free(text);
    }
    return 0;
}

static int check_nss(struct span range, char *err, size_t errlen)
{
    struct passwd *pw;
    struct group *gr;
    unsigned n = 0;
    int r = 0;

    setpwent();
    while (r == 0 && n++ < NSS_ENTRIES_MAX && (pw = getpwent())) {
        if ((uint64_t)pw->pw_uid >= range.lo && (uint64_t)pw->pw_uid <= range.hi) {
            snprintf(err, errlen, RANGE_FMT " include user '%.64s' (uid %llu, name service)",
                     RANGE_ARGS(range), pw->pw_name, (unsigned long long)pw->pw_uid);
            r = -EINVAL;
        }
    }
    endpwent();
    n = 0;
    setgrent();
    while (r == 0 && n++ < NSS_ENTRIES_MAX && (gr = getgrent())) {
        if ((uint64_t)gr->gr_gid >= range.lo && (uint64_t)gr->gr_gid <= range.hi) {
            snprintf(err, errlen, RANGE_FMT " include group '%.64s' (gid %llu, name service)",
                     RANGE_ARGS(range), gr->gr_name, (unsigned long long)gr->gr_gid);
            r = -EINVAL;
        }
    }
    endgrent();
    return r;
}

int sandbox_uid_check_range(const struct sandbox_uid_files *files, uint32_t base, uint32_t count,
                            char *err, size_t errlen)
{
    struct span range = {base, (uint64_t)base + count - 1};
    int r;

    if (count == 0) {
        snprintf(err, errlen, "the sandbox id range is empty");
        return -EINVAL;
    }
    if (range.lo < ID_FLOOR || range.hi >= ID_CEIL) {
        snprintf(err, errlen, RANGE_FMT " must lie within %u..%u", RANGE_ARGS(range), ID_FLOOR,
                 ID_CEIL - 1);
        return -EINVAL;
    }
    if (65534 >= range.lo && 65534 <= range.hi) {
        snprintf(err, errlen, RANGE_FMT " include 65534 (nobody/nogroup)", RANGE_ARGS(range));
        return -EINVAL;
    }
    r = check_overflow_ids(range, err, errlen);
    if (r == 0)
        r = check_login_defs(files->login_defs ? files->login_defs : "/etc/login.defs", range, err,
                             errlen);
    if (r == 0)
        r = check_sub(files->subuid ? files->subuid : "/etc/subuid", range, err, errlen);
    if (r == 0)
        r = check_sub(files->subgid ? files->subgid : "/etc/subgid", range, err, errlen);
    if (r == 0)
        r = check_db(files->passwd ? files->passwd : "/etc/passwd", "user", range, err, errlen);
    if (r == 0)
        r = check_db(files->group ? files->group : "/etc/group", "group", range, err, errlen);
    if (r == 0 && files->use_nss)
        r = check_nss(range, err, errlen);
    return r;
}

int sandbox_uid_range_init(uint32_t base, uint32_t count, struct sandbox_uid_range *ret, char *err,
                           size_t errlen)
{
    struct sandbox_uid_range rg = {
        .base = base,
        .count = count,
        .runner_uid = geteuid(),
        .runner_gid = getegid(),
    };
    struct sandbox_uid_files files = {.use_nss = true};
    int r;

    if (rg.runner_uid != 0) {
        rg.shared = true;
    } else {
        r = sandbox_uid_check_range(&files, base, count, err, errlen);
        if (r < 0)
            return r;
    }
    *ret = rg;
    return 0;
}

int sandbox_uid_for_slot(const struct sandbox_uid_range *range, uint32_t slot,
                         struct sandbox_uid_ids *ret)
{
    if (range->shared) {
        *ret = (struct sandbox_uid_ids){range->runner_uid, range->runner_gid, true};
        return 0;
    }
    if (slot >= range->count)
        return -ERANGE;
    *ret = (struct sandbox_uid_ids){range->base + slot, range->base + slot, false};
    return 0;
}

/* capget(2) without libcap: both capability words of the calling thread. */
static int caps_empty(void)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];

    memset(data, 0, sizeof(data));
    if (syscall(SYS_capget, &hdr, data) == -1)
        return -errno;
    for (int i = 0; i < 2; i++)
        if (data[i].effective || data[i].permitted)
            return -EPERM;
    return 0;
}

int sandbox_uid_enter(const struct sandbox_uid_ids *ids, uint64_t nproc)
{
    uid_t ru, eu, su;
    gid_t rg, eg, sg;

    if (!ids->shared) {
        if (ids->uid == 0 || ids->gid == 0)
            return -EINVAL;
        if (nproc > 0) {
            struct rlimit lim = {(rlim_t)nproc, (rlim_t)nproc};
            if (setrlimit(RLIMIT_NPROC, &lim) == -1)
                return -errno;
        }
        if (setgroups(0, NULL) == -1)
            return -errno;
        if (setresgid(ids->gid, ids->gid, ids->gid) == -1)
            return -errno;
        if (setresuid(ids->uid, ids->uid, ids->uid) == -1)
            return -errno;
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1)
        return -errno;
    if (ids->shared)
        return 0;
    /* verify the drop held */
    if (getresuid(&ru, &eu, &su) == -1 || getresgid(&rg, &eg, &sg) == -1)
        return -errno;
    if (ru != ids->uid || eu != ids->uid || su != ids->uid || rg != ids->gid || eg != ids->gid ||
        sg != ids->gid)
        return -EPERM;
    if (getgroups(0, NULL) != 0)
        return -EPERM;
    if (caps_empty() < 0)
        return -EPERM;
    if (setuid(0) == 0 || setgid(0) == 0)
        return -EPERM;
    return 0;
}

int sandbox_uid_give_workspace(const char *workspace, const struct sandbox_uid_ids *ids)
{
    int fd, r = 0;

    if (!ids->shared)
        r = fstree_chown_at(AT_FDCWD, workspace, ids->uid, ids->gid);
    if (r < 0)
        return r;
    fd = open(workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd == -1)
        return -errno;
    if (fchmod(fd, 0700) == -1)
        r = -errno;
    close(fd);
    return r;
}
