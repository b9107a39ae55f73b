/*
 * sandbox_host — what local sandboxes get on this host, learned once by the master before it
 * forks (README "The sandbox"), and the host-side steps on an environment that need it.
 *
 * sandbox_host_init() reads the settings (sandbox_config), checks the uid range (refusing an
 * overlap with a system or login user), makes the state and envs folders traversable for the
 * sandbox users (0711: bubblewrap, started as the sandbox's own uid, must reach its
 * workspace), probes the cgroup hierarchies, the workspace disk cap and network namespaces,
 * and keeps an idle namespace (sandbox_net_anchor) so netfilter stays switched on. What the
 * configured limits lack on this host is collected in `missing` (/readyz shows it); with
 * AGENT_RUNNER_REQUIRE_LIMITS=true a missing limit refuses the start. Workers inherit the
 * struct (fork) and read it; nothing changes it afterwards.
 *
 * An environment's host resources, all named after its folder's id (<state>/envs/<id>):
 *   - the folder itself, owned by the sandbox user (0700), holding the keeper's socket and
 *     harness.log, and the workspace (a capped tmpfs mounted by the worker, sandbox_disk);
 *   - its cgroup (created by the worker, entered by the keeper's child, sandbox_cgroup);
 *   - its network namespace (the keeper's: gone with the keeper's fds).
 * sandbox_host_remove_env() removes the first two in the only safe order (kill the cgroup,
 * unmount the workspace, remove the folder without following links or crossing mounts):
 * the keeper at teardown, the master for a keeper that died, the master's start-up sweep for
 * a crashed predecessor's leftovers, and a worker whose environment never started.
 */
#ifndef AR_SANDBOX_HOST_H
#define AR_SANDBOX_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "sandbox/cgroup.h"
#include "sandbox/config.h"
#include "sandbox/uid.h"

#define SANDBOX_HOST_MISSING_MAX 1024
#define SANDBOX_HOST_KILL_MS 2000

struct sandbox_host {
    struct sandbox_config cfg;
    struct sandbox_uid_range uids;
    struct sandbox_cgroup_host cg;
    bool disk_ok;  /* the workspace cap can be mounted */
    bool net_ok;   /* network namespaces can be made */
    int anchor_fd; /* sandbox_net_anchor(), held while the master runs; -1 */
    char instance[64];
    char envs[256];                         /* <state>/envs, resolved */
    char net_why[256];                      /* why net_ok is false */
    char missing[SANDBOX_HOST_MISSING_MAX]; /* configured limits this host lacks; "" none */
};

/*
 * Master, before any thread or worker exists. -EINVAL with err naming the setting or the
 * clash (uid range, AGENT_RUNNER_REQUIRE_LIMITS); other -errno when the folders cannot be
 * made. A host without cgroups, tmpfs mounts or network namespaces is not an error: the
 * struct says what is missing.
 */
int sandbox_host_init(struct sandbox_host *h, const char *instance, const char *state_dir,
                      uint32_t slots, char *err, size_t errlen);
/* Let the anchor go; clean_stop: also remove the instance's cgroup folders (all envs gone). */
void sandbox_host_release(struct sandbox_host *h, bool clean_stop);

/* One environment's confinement: prepared by the worker, carried to its keeper (spec). */
struct sandbox_env {
    struct sandbox_uid_ids ids;
    uint64_t nproc;           /* RLIMIT_NPROC of the sandbox user (0: none) */
    struct sandbox_cgroup cg; /* cg.n == 0: no cgroup on this host */
};

/*
 * Before the workspace files are written: the identity of session slot `slot`, the env
 * folder given to it (0700), and the workspace's capped tmpfs when the host can mount one.
 * On failure err says why; sandbox_host_reclaim() undoes what was done.
 */
int sandbox_host_env_prepare(const struct sandbox_host *h, uint32_t slot, const char *env_dir,
                             struct sandbox_env *ret, char *err, size_t errlen);
/* After them: the workspace (and its files) given to the sandbox user, the cgroup created. */
int sandbox_host_env_seal(const struct sandbox_host *h, const char *env_dir,
                          struct sandbox_env *env, char *err, size_t errlen);

/*
 * The CPU quota of an environment, written once its harness has started (engine_start: after
 * session/new, before the first prompt). A harness's own start — its Node processes loading
 * their modules — runs without the quota: no agent code and no model output exist before the
 * first prompt, and the quota only spreads that fixed CPU cost over time (1 CPU made a cold pi
 * start ~0.7 s slower on 2 cores). pids, memory and disk hold from the first instant. 0 when
 * the host enforces no CPU limit.
 */
int sandbox_host_env_throttle(const struct sandbox_host *h, const char *env_dir, char *err,
                              size_t errlen);
/* RLIMIT_NPROC of a sandbox user (sandbox_uid_enter): 2 x pids when the pids cgroup holds. */
uint64_t sandbox_host_nproc(const struct sandbox_host *h);

/*
 * Remove an environment's host resources: kill + remove cg (NULL: none), unmount
 * <env_dir>/workspace, remove <env_dir> (fstree). Never follows a symlink the sandbox made;
 * returns the first error and goes on past it.
 */
int sandbox_host_remove_env(const struct sandbox_cgroup *cg, const char *env_dir);
/*
 * The quick first half of that: the cgroup killed and removed, the workspace unmounted. What
 * is left is a folder no process of the sandbox can reach; fstree_remove() it (it may take a
 * while when the workspace was a plain folder holding a deep tree).
 */
int sandbox_host_release_env(const struct sandbox_cgroup *cg, const char *env_dir);
/* The same for an environment known only by its folder (the cgroup is found by its id). */
int sandbox_host_reclaim(const struct sandbox_host *h, const char *env_dir);

/*
 * Start-up sweep: every workspace mount, cgroup and folder under envs/ whose id keep() does
 * not claim (keep NULL: all) is removed. Returns how many folders went, or the first error.
 */
int sandbox_host_sweep(const struct sandbox_host *h, bool (*keep)(const char *id, void *ctx),
                       void *ctx);

/*
 * Which limit the environment of env_dir hit, if any: 1 with *ret_code
 * ("sandbox_memory_limit", "sandbox_pids_limit", "sandbox_disk_limit") and a message naming
 * the limit; 0 when none tripped. A memory trip (an OOM kill) wins over pids, pids over disk.
 */
int sandbox_host_tripped(const struct sandbox_host *h, const char *env_dir, const char **ret_code,
                         char *msg, size_t msglen);
/*
 * The code and message of a limit named by its code (what sandbox_host_tripped() gives for
 * it; the keeper's tripwire verdict, sandbox/tripwire.h): 1, or 0 for "none" or an unknown code.
 */
int sandbox_host_trip_message(const struct sandbox_host *h, const char *code, const char **ret_code,
                              char *msg, size_t msglen);

/* /health: {"identity", "limits", "enforced", "notEnforced", "network"} (a new reference). */
json_object *sandbox_host_describe(const struct sandbox_host *h);

#endif
