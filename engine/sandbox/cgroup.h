/*
 * sandbox_cgroup — kernel-enforced limits per environment: one cgroup per sandbox with a
 * pids, memory (no swap) and CPU limit, read back to name the limit that tripped, killed as a
 * whole and removed at teardown; plus a start-up sweep for what a crashed predecessor left.
 *
 * Layout: in every cgroup hierarchy that gives us a controller, under the runner's own
 * cgroup there (so the runner's own limits and accounting still cover its sandboxes):
 *
 *     <mount><own cgroup>/agent-runner/<instance>/<env id>
 *
 *   cgroup v2 (pure hosts; `Delegate=yes` hands the service cgroup to us): the controllers
 *   are enabled in cgroup.subtree_control down to <instance>. v2's "no internal processes"
 *   rule means the service cgroup itself cannot hold processes once it delegates controllers:
 *   sandbox_cgroup_probe() then moves the calling process (the master, before it forks) into
 *   the leaf <own>/supervisor, where workers and keepers are born too.
 *   cgroup v1 (hybrid hosts such as the CI machines): the separate pids, memory and cpu
 *   hierarchies, each with its own tree of the same shape. A v2 mount without controllers
 *   (the hybrid "unified" one) is still used: its cgroup.kill and cgroup.events give a
 *   race-free kill and an exact "is anything left" for the v1 limits.
 *
 * Limits written at creation: pids.max; memory.max + memory.swap.max = 0 + memory.oom.group
 * (v2) or memory.limit_in_bytes + memory.memsw.limit_in_bytes (v1: the same value, so no
 * swap); cpu.max (v2) or cpu.cfs_quota_us / cpu.cfs_period_us (v1), period 100 ms.
 *
 * This header is one environment's cgroup (cgroup.c) and the types both sides use; finding
 * the hierarchies, the probe, the sweep and the clean stop are the host side (cgroup_host.h).
 * Nothing here runs under a shm lock; sandbox_cgroup_enter() is async-signal-safe.
 */
#ifndef AR_SANDBOX_CGROUP_H
#define AR_SANDBOX_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a host can enforce (sandbox_cgroup_host.can) and what a hierarchy carries. */
#define SANDBOX_CG_PIDS 0x1u
#define SANDBOX_CG_MEMORY 0x2u
#define SANDBOX_CG_SWAP 0x4u /* swap forbidden together with the memory limit */
#define SANDBOX_CG_CPU 0x8u
#define SANDBOX_CG_KILL 0x10u /* cgroup.kill: the whole group dies at once (v2, Linux 5.14) */

#define SANDBOX_CG_PATH_MAX 512
#define SANDBOX_CG_HIER_MAX 4
#define SANDBOX_CG_CPU_PERIOD_US 100000u

struct sandbox_cgroup_hier {
    bool v2;
    unsigned ctrl;                 /* SANDBOX_CG_PIDS/MEMORY/CPU this hierarchy carries */
    char dir[SANDBOX_CG_PATH_MAX]; /* <mount><own>/agent-runner/<instance> */
};

struct sandbox_cgroup_host {
    size_t n;
    struct sandbox_cgroup_hier h[SANDBOX_CG_HIER_MAX];
    unsigned can;      /* limits this host enforces (checked by writing them) */
    char missing[384]; /* why the others are not, for logs and /readyz ("" when none) */
};

struct sandbox_cgroup_limits {
    uint64_t pids_max;   /* 0: none */
    uint64_t memory_max; /* bytes; 0: none */
    uint32_t cpu_millis; /* thousandths of a CPU; 0: none */
};

/* One environment's cgroup (a directory per hierarchy). Plain data: copy it freely. */
struct sandbox_cgroup {
    size_t n;
    struct {
        bool v2;
        unsigned ctrl;
        char dir[SANDBOX_CG_PATH_MAX];
        char procs[SANDBOX_CG_PATH_MAX + 16]; /* <dir>/cgroup.procs, for the child */
    } h[SANDBOX_CG_HIER_MAX];
};

struct sandbox_cgroup_stats {
    uint64_t oom_kills;    /* memory.events oom_kill (v2) or memory.oom_control oom_kill */
    uint64_t memory_max;   /* memory.events max (v2) or memory.failcnt (v1): limit hits */
    uint64_t pids_max;     /* pids.events max: forks refused by the limit */
    uint64_t pids_current; /* tasks now */
    bool have_memory, have_pids;
};

enum sandbox_cgroup_trip {
    SANDBOX_TRIP_NONE = 0,
    SANDBOX_TRIP_MEMORY, /* an OOM kill in the sandbox: sandbox_memory_limit */
    SANDBOX_TRIP_PIDS,   /* a fork refused by pids.max: sandbox_pids_limit */
};

/*
 * Create the cgroup of environment `id` (a plain name, e.g. the env folder's id) with the
 * limits the host can enforce. -EEXIST when it already exists (a leftover: sweep first).
 * On failure nothing is left.
 */
int sandbox_cgroup_create(const struct sandbox_cgroup_host *host, const char *id,
                          const struct sandbox_cgroup_limits *lim, struct sandbox_cgroup *ret,
                          char *err, size_t errlen);

/*
 * In the forked child, before dropping privileges: move the calling process into every
 * directory of cg. Async-signal-safe (open/write/close on precomputed paths). -errno.
 */
int sandbox_cgroup_enter(const struct sandbox_cgroup *cg);
/*
 * The environment's share of contended CPU: low (a spare being built or waiting: cpu.weight 10
 * on v2, cpu.shares 102 on v1) or the default (100 / 1024). The quota stays as created.
 * 0, or the first error (a hierarchy without the cpu controller is skipped).
 */
int sandbox_cgroup_set_cpu_weight(const struct sandbox_cgroup *cg, bool low);

/* For tests (they see the limits bite through it): read the counters (missing files leave their
 * fields 0 and have_* false). */
int sandbox_cgroup_stats(const struct sandbox_cgroup *cg, struct sandbox_cgroup_stats *ret);

/* Which limit tripped, from the counters: an OOM kill wins over refused forks. */
enum sandbox_cgroup_trip sandbox_cgroup_tripped(const struct sandbox_cgroup *cg);

/* "sandbox_memory_limit", "sandbox_pids_limit" or NULL for SANDBOX_TRIP_NONE. */
const char *sandbox_cgroup_trip_code(enum sandbox_cgroup_trip trip);

/*
 * SIGKILL every process in the cgroup and wait (up to timeout_ms) until it is empty:
 * cgroup.kill where there is one; otherwise pids.max = 0 (no new task can appear) and a kill
 * loop over cgroup.procs, each pid checked through a pidfd to still be in the cgroup when
 * signalled. -ETIMEDOUT when something is left.
 */
int sandbox_cgroup_kill(const struct sandbox_cgroup *cg, int timeout_ms);

/* Remove the directories (after a kill). Missing ones are fine. First error is returned. */
int sandbox_cgroup_remove(const struct sandbox_cgroup *cg);

/*
 * Write the limits of lim that `want` asks for (SANDBOX_CG_*) into every directory of cg;
 * ret_applied (may be NULL) receives what held. The first failure is returned (with err)
 * unless ret_applied is given (the probe wants to know everything).
 */
int sandbox_cgroup_apply_limits(const struct sandbox_cgroup *cg,
                                const struct sandbox_cgroup_limits *lim, unsigned want,
                                unsigned *ret_applied, char *err, size_t errlen);

/* "memory.events" style "key value" lines: the value of key. -ENOENT when absent. */
int sandbox_cgroup_parse_key(const char *text, const char *key, uint64_t *ret);

/* cpu.max for millis thousandths of a CPU ("max 100000" for 0). */
void sandbox_cgroup_cpu_max(uint32_t millis, char *buf, size_t len);

#endif
