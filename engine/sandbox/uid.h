/*
 * sandbox_uid — the host identity of sandboxes.
 *
 * When the runner is root, the environment in session slot i runs as host uid/gid
 * base + i (AGENT_RUNNER_SANDBOX_UID_BASE, default 2,000,000,000): no sandbox process is
 * ever host root, and two live sessions never share a host identity, so the kernel's own
 * permission checks (files, signals, ptrace, /proc) keep them apart and RLIMIT_NPROC counts
 * one sandbox. bubblewrap (not setuid) is started already as that uid, so its user namespace
 * maps the sandbox user (uid 1000 inside) to it. Inside, /proc/self/uid_map reads
 * "1000 0 1": bwrap nests a second user namespace to get uid 1000, and the file is relative
 * to the parent namespace; from the host, /proc/<pid>/uid_map and status show the real uid.
 *
 * Why 2,000,000,000: above the login range (UID_MIN..UID_MAX, 1000..60000), systemd's
 * DynamicUser range (61184..65519), nobody (65534), the subordinate ranges useradd hands out
 * for rootless containers (SUB_UID_MIN..SUB_UID_MAX, 100000..600100000) and systemd-nspawn's
 * container range (524288..1879048191); below 2^31 (software that keeps ids in a signed int
 * breaks above) and below systemd's foreign-UID range (2147352576..). 2e9 + 2^20 slots fits.
 *
 * When the runner is not root it cannot change identity: every sandbox runs as the runner's
 * own user (shared = true) and the sessions are kept apart by namespaces only.
 */
#ifndef AR_SANDBOX_UID_H
#define AR_SANDBOX_UID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sandbox_uid_range {
    uint32_t base;  /* first id (per-environment mode) */
    uint32_t count; /* ids in the range: one per session slot */
    bool shared;    /* runner not root: every sandbox is the runner's own uid/gid */
    uid_t runner_uid;
    gid_t runner_gid;
};

struct sandbox_uid_ids {
    uid_t uid;
    gid_t gid;
    bool shared; /* the runner's own identity: nothing to drop, no per-sandbox NPROC */
};

/* Where the range check looks (tests point these at fixtures; NULL = the real file). */
struct sandbox_uid_files {
    const char *passwd;     /* /etc/passwd */
    const char *group;      /* /etc/group */
    const char *login_defs; /* /etc/login.defs */
    const char *subuid;     /* /etc/subuid */
    const char *subgid;     /* /etc/subgid */
    bool use_nss;           /* also enumerate getpwent()/getgrent() (LDAP, sssd, ...) */
};

/*
 * Check [base, base + count) as a range of host uids and gids. Refused, with a message naming
 * the clash: ids below 1000 or at/above 2^31 - 1, 65534 and the kernel's overflow ids, the
 * login.defs system, login and subordinate ranges (SYS_UID_MIN..SYS_UID_MAX, UID_MIN..UID_MAX,
 * SUB_UID_MIN..SUB_UID_MAX and the GID ones), every /etc/subuid and /etc/subgid range, and
 * every passwd and group entry. -EINVAL when refused, other -errno when a file cannot be read.
 */
int sandbox_uid_check_range(const struct sandbox_uid_files *files, uint32_t base, uint32_t count,
                            char *err, size_t errlen);

/*
 * Set up the range for this runner: as root, check [base, base + count) with the real files
 * and NSS; otherwise the shared mode (no check needed). Uses getpwent()/getgrent(): call it
 * at start-up, before any thread exists (the master, before it forks workers).
 */
int sandbox_uid_range_init(uint32_t base, uint32_t count, struct sandbox_uid_range *ret, char *err,
                           size_t errlen);

/* The identity of the environment in slot. -ERANGE when slot >= count. */
int sandbox_uid_for_slot(const struct sandbox_uid_range *range, uint32_t slot,
                         struct sandbox_uid_ids *ret);

/*
 * In the forked child, just before exec'ing bwrap (async-signal-safe: no malloc, no stdio):
 * RLIMIT_NPROC = nproc (when > 0 and not shared), clear the supplementary groups, setresgid,
 * setresuid, PR_SET_NO_NEW_PRIVS, then verify: real/effective/saved ids are the new ones, no
 * groups, no capabilities left, and setuid(0) fails. Join the sandbox's cgroup *before* this
 * (it needs root). Any failure is -errno (-EPERM for a drop that did not hold): _exit.
 *
 * nproc: with a per-environment uid, RLIMIT_NPROC counts exactly one sandbox. Pass
 * 2 x pids_max when the pids cgroup is enforced (a backstop that never trips first, so the
 * cgroup's pids.events names the limit), pids_max when it is not, 0 for none.
 */
int sandbox_uid_enter(const struct sandbox_uid_ids *ids, uint64_t nproc);

/*
 * Give the workspace folder (and what the runner wrote in it) to the sandbox user, the folder
 * itself mode 0700. Never follows symlinks or crosses mounts (fstree_chown_at). A shared
 * identity is a no-op apart from the mode.
 */
int sandbox_uid_give_workspace(const char *workspace, const struct sandbox_uid_ids *ids);

#endif
