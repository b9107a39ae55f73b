/*
 * provider — sandbox providers behind one seam, struct provider_ops, mirroring harness_ops,
 * and the one registry of them. A provider turns a sandbox description into a running,
 * isolated process tree with the harness's stdio on pipes.
 *
 * Two shapes fit the seam:
 *   - local (bubblewrap, provider/local.c): the keeper is the lease. start() runs in the keeper
 *     and returns the sandbox's process and pipes; stop() kills its whole process group.
 *     acquire/resume/release are NULL.
 *   - remote (Daytona, provider/daytona/daytona_provider.c): acquire() resumes the
 *     environment's kept sandbox or creates one and returns a lease, resume() reattaches a
 *     named one, release() keeps / stops / destroys it. Each acquisition has an outcome:
 *     created, resumed, or replacement with a reason (the kept sandbox was gone, expired, or
 *     did not match), as Paperclip reports a lease acquisition. start() then runs the harness
 *     in the leased sandbox (a keeper owns one environment, so the provider keeps the state
 *     of its one lease per process). Its process has no local pid: the harness's stdio
 *     arrives on pipes fed by the provider's threads and its exit is announced on exit_fd
 *     (no SIGCHLD).
 * The capability snapshot is a frozen struct read by the lifecycle policy and the request
 * checks; it fails closed: a capability the provider lacks is refused before anything starts.
 *
 * Where each verb runs: configure() in every process that uses the registry (the master before
 * it forks workers, the keeper at start); snapshot/admit/runner_lifecycle in the worker (before
 * anything starts); acquire/start/busy/exit_status/stop/release in the keeper; sweep in a child
 * of the master at start-up (provider_startup_sweep).
 *
 * Sandbox description (JSON, built by provider_sandbox_description from the harness's plan,
 * carried to the keeper in its spec; all paths absolute):
 *   {"workspace": host dir bound read-write at SANDBOX_WORKSPACE (the only host-writable place),
 *    "roBinds": [host paths bound read-only at the same path],
 *    "files": [{"path": in-sandbox path under SANDBOX_HOME or /etc/passwd|group,
 *               "content": text, "mode": int}],
 *    "env": {"NAME": "value", ...}   (the complete harness environment),
 *    "argv": ["cmd", ...], "cwd": SANDBOX_WORKSPACE,
 *    "seccomp": the local provider's system-call filter, classic BPF in hex, compiled once by
 *               the worker (sandbox_seccomp_program); a local description without it is
 *               refused (environment_sandbox_description adds it),
 *    "channel": "harness" | "tools": the harness side speaks the keeper channel (its own
 *               process, or agent-runner-mcp); the keeper makes the connection and start()
 *               hands it in (provider_process.channel_fd); absent: no channel (optional),
 *    "channelRelay": the harness folder of a remote sandbox, whose relay carries the channel
 *               (optional),
 *    "limits": {"tmpBytes": int, "homeBytes": int}   (optional; sandbox_config defaults),
 *    "lease": {...}   (remote providers only: provider_lease_describe)}
 * A remote provider maps SANDBOX_HOME and SANDBOX_WORKSPACE to folders of its own sandbox,
 * uploads the files and the workspace's contents, and expects roBinds to exist there (its
 * image provides them).
 * Where the sandbox may connect and the host identity, cgroup and disk it gets travel beside
 * it in the keeper spec (keeper_proto.h: egress, confine): the local provider's start() makes
 * the sandbox's network namespace from them and its child enters the cgroup, the namespace
 * and the identity, in that order, before it execs bubblewrap.
 */
#ifndef AR_PROVIDER_H
#define AR_PROVIDER_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <json-c/json.h>

#include "core/contracts.h"
#include "gateway/model_gateway.h"
#include "harness/harness.h"

struct keeper_spec;
struct pool;

/* The capability snapshot of a provider: frozen, a missing capability is false. */
struct provider_caps {
    bool remote;          /* the sandbox runs elsewhere (leases over the network) */
    bool reusable_leases; /* environments may stay warm between turns */
    bool network_off;     /* can remove the network entirely */
    bool network_allowlist;
    bool network_allowlist_names; /* allowlist entries may be host names (else addresses only) */
    bool filesystem_modes;
    bool network_keeps_endpoints; /* under "off"/"allowlist" the run's model endpoint stays
                                     reachable (a real harness can run with the network off) */
};

#define PROVIDER_LEASE_ID_MAX 128

struct provider_lease {
    char id[PROVIDER_LEASE_ID_MAX];
    char previous_id[PROVIDER_LEASE_ID_MAX]; /* replacement: the lease that was lost */
    enum provider_lease_outcome outcome;
    enum provider_replacement_reason reason; /* replacement only */
    bool reusable;       /* the lease may outlive its keeper (stopped, resumed later) */
    long acquire_ms;     /* wall time of the acquisition */
    json_object *report; /* owned, may be NULL: what the acquisition and start did, for the
                            worker's trace (provider_report_write; no id, no credential) */
};

/*
 * A connection the sandbox's egress policy refused (connection true: counted), or a refused
 * DNS question / an overloaded proxy (false): destination and why, never payload.
 */
typedef void (*provider_egress_fn)(void *ctx, bool connection, const char *dest, const char *why);

/*
 * A started sandbox: the harness's process (group leader) and its stdio pipes (non-blocking).
 * A remote harness has pid 0 and exit_fd >= 0 (readable once exit_status() knows); a local
 * one has exit_fd -1 and is reaped on SIGCHLD.
 */
struct provider_process {
    pid_t pid;
    int in_fd;
    int out_fd;
    int err_fd;
    int exit_fd;
    void *priv; /* the provider's own state of this sandbox: start() makes it, stop() frees it */
    /* set by the caller before start(): where egress reports go (may be NULL) */
    provider_egress_fn on_egress;
    /* ... and the model gateway's (a local sandbox's model calls; may be NULL) */
    model_gateway_report_fn on_model;
    void *ctx;
    /* set by the caller before start(): the sandbox's end of the keeper channel (-1: none),
     * a socket the local provider passes into the sandbox as an inherited descriptor named
     * by RUNNER_CHANNEL_FD (keeper/keeper_channel.h); start() never closes it */
    int channel_fd;
};

/* The owners a start-up sweep must never touch: every live slot of the session table. */
struct provider_sweep_owners {
    const char *const *owners; /* provider_lease_owner() of each live slot */
    size_t n;
};

struct provider_sweep_stats {
    unsigned seen, adopted, kept, deleted, failed;
};

struct provider_ops {
    const char *name;
    struct provider_caps caps;
    /*
     * Remote providers (NULL for local). acquire: a new sandbox for the environment's spec;
     * resume: reattach lease_id (outcome resumed, or replacement with a reason and a new id);
     * release: apply the disposition. -errno / AR_E_* with err naming the problem.
     */
    int (*acquire)(const struct keeper_spec *spec, struct provider_lease *ret, char *err,
                   size_t errlen);
    int (*resume)(const struct keeper_spec *spec, const char *lease_id, struct provider_lease *ret,
                  char *err, size_t errlen);
    int (*release)(const struct provider_lease *lease, enum provider_disposition disposition,
                   char *err, size_t errlen);
    /* Start the harness of spec->sandbox; ret's pipes belong to the caller until stop(). */
    int (*start)(const struct keeper_spec *spec, struct provider_process *ret, char *err,
                 size_t errlen);
    /* Kill everything start() made and reap the process; closes nothing of ret's fds. */
    void (*stop)(struct provider_process *proc);
    /*
     * A shell (keeper_spec.shell): make ahead what start() makes before the sandbox (the local
     * provider's network namespace, egress proxy and name server) into ret->priv; a later
     * start() on the same ret uses it. NULL: the provider has no shells.
     */
    int (*prepare)(const struct keeper_spec *spec, struct provider_process *ret, char *err,
                   size_t errlen);

    /* ---- optional verbs (NULL: the provider needs none) -------------------------------- */
    /*
     * Read the provider's settings through get (getenv in production) once per process. 0 with
     * the provider left disabled when it is not configured; -EINVAL with err naming the
     * setting when it is configured wrongly (the runner refuses to start).
     */
    int (*configure)(const char *(*get)(const char *name), char *err, size_t errlen);
    /* Configured on this runner (NULL: always). A disabled provider is not provider_get()'s. */
    bool (*enabled)(void);
    /* The capability snapshot, read once per acquisition (NULL: caps). */
    void (*snapshot)(struct provider_caps *ret);
    /* The runner's configured lifecycle for this provider (warm, per_turn or inherit): the third
     * rule of the lifecycle policy (core/policy.h). */
    void (*runner_lifecycle)(enum lifecycle_mode *ret_mode, uint64_t *ret_idle_ms);
    /*
     * Fail-closed admission of a run against a snapshot: 0, or AR_E_INVALID_REQUEST /
     * AR_E_UNAVAILABLE with err naming what the run needs and the provider lacks.
     */
    int (*admit)(const struct run_request *req, const struct provider_caps *caps, char *err,
                 size_t errlen);
    /* "NAME=value" strings the keeper's environment needs (borrowed), at most max; count. */
    size_t (*keeper_env)(const char **out, size_t max);
    /* The exit status (0-255) of a process with exit_fd, -EAGAIN while it runs. */
    int (*exit_status)(struct provider_process *proc);
    /* A turn is in flight (a worker is attached, or a prompt waits on an approval). */
    void (*busy)(struct provider_process *proc, bool busy);
    /*
     * Restart recovery: find this runner's sandboxes, keep (adopt) the ones a live owner
     * holds, apply the provider's rule to the rest (bounded). -errno with err.
     */
    int (*sweep)(const struct provider_sweep_owners *live, struct provider_sweep_stats *ret,
                 char *err, size_t errlen);
    /*
     * For the keeper's poll loop while the sandbox runs (proc->priv set): fds to poll besides
     * the pipes, each with the events it waits for, in p[0..max) (at most
     * PROVIDER_POLLFDS_MAX; returns how many) with *timeout_ms lowered to the provider's next
     * deadline, and service() to call after every poll with those n entries and what poll
     * reported on them (never blocks). The local sandbox's egress proxy and name server, the
     * Daytona sandbox's keeper channel relay.
     */
    size_t (*poll_fds)(struct provider_process *proc, struct pollfd *p, size_t max, int64_t now,
                       int *timeout_ms);
    void (*service)(struct provider_process *proc, const struct pollfd *p, size_t n, int64_t now);
    /*
     * A spare's claim (spare.h): from now on the running sandbox may reach what the session's
     * egress policy allows (egress_policy_to_json) instead of the placeholder's, and its model
     * gateway routes by the session's route (gateway_route_encode; NULL: none). -errno with
     * err; NULL: the provider cannot, the spare is not claimable.
     */
    int (*claim)(struct provider_process *proc, json_object *egress, json_object *route, char *err,
                 size_t errlen);
};

#define PROVIDER_POLLFDS_MAX 24

/* The provider registered under name, or NULL (not enabled on this runner). */
const struct provider_ops *provider_get(const char *name);
/* name is a provider of the wire protocol (enabled here or not). */
bool provider_known(const char *name);
/* The enabled providers in registry order (i < provider_count()); local is first. */
size_t provider_count(void);
const struct provider_ops *provider_at(size_t i);
/* configure() every provider of the registry; the first failure is returned (err names it). */
int provider_configure_all(const char *(*get)(const char *name), char *err, size_t errlen);
/* The enabled providers' names (/health), a new array. */
json_object *provider_enabled_names(void);
/* The capability snapshot of p (its snapshot() or its static caps). */
void provider_caps_of(const struct provider_ops *p, struct provider_caps *ret);

/*
 * What the runner does with a lease when its keeper ends for teardown_reason
 * (TEARDOWN_NONE: the session parks): a per-turn lease is destroyed; a reusable one keeps
 * running while its session is warm, is stopped and kept when the session is still worth
 * resuming (idle or approval expiry, capacity eviction, shutdown while idle, session or
 * continuity mismatch) and destroyed otherwise (kill, failed or aborted turn, shutdown in
 * flight, harness exit, superseded, runtime mismatch). owner-moved (several hosts: another
 * member resumed the sandbox) leaves it running, untouched, for its new owner.
 */
enum provider_disposition provider_disposition(bool reusable, enum teardown_reason reason);

/* ---- remote leases: what the worker tells the keeper, what the keeper tells back ------- */

/* The "lease" member of a remote sandbox description. */
struct provider_lease_request {
    const char *owner; /* the pool key ("" for a run without one: the environment owns it) */
    bool had_lease;    /* the session had a live environment before: a miss is a replacement */
    enum network_mode network;
    bool network_strict;  /* sandboxPermission.enforcement is strict (the default) */
    json_object *allow;   /* sandboxPermission.network.allowlist (borrowed) or NULL */
    const char *endpoint; /* the model endpoint's base URL: reachable under any rule (or NULL) */
};

/*
 * The keeper's two lease steps around its sandbox (remote providers): begin = acquire, logged
 * (outcome, replacement reason, time; never the id) and counted in pool's metrics (may be
 * NULL); end = release with provider_disposition(reusable, why) — a lease nobody holds any
 * more is never left running: keep becomes stop-and-retain, its idle backstop — logged and
 * counted, then the lease's memory dropped.
 */
int provider_lease_begin(const struct provider_ops *p, const struct keeper_spec *spec,
                         struct pool *pool, struct provider_lease *ret, char *err, size_t errlen);
void provider_lease_end(const struct provider_ops *p, struct provider_lease *lease,
                        enum teardown_reason why, struct pool *pool);

/* Add the "lease" member to a sandbox description; -ENOMEM. */
int provider_lease_describe(json_object *sandbox, const struct provider_lease_request *lr);
/*
 * The owner a lease is labelled with: the pool key, or "env:<environment id>" for a run
 * without one (the environment folder's name), so a restart sweep can tell every live owner,
 * also one whose acquisition is still in flight. Written to ret (at most len); -ENAMETOOLONG.
 */
int provider_lease_owner(const char *pool_key, const char *env_dir, char *ret, size_t len);

/* The keeper writes the lease report into its environment folder before it says "ready";
 * the worker reads it back (*ret NULL when there is none). */
int provider_report_write(const char *env_dir, json_object *report);
int provider_report_read(const char *env_dir, json_object **ret);

/*
 * Master start-up: run every enabled provider's sweep in a child process (so the master is
 * ready at once) with the owners of the live slots of p, after grace_ms (keepers of a table
 * that was rebuilt are still releasing their sandboxes). Returns the child's pid (the master
 * reaps it like any child), 0 when no provider sweeps, -errno.
 */
pid_t provider_startup_sweep(struct pool *p, int64_t grace_ms);

/*
 * The sandbox description of a harness plan (a new reference), NULL on ENOMEM. limits: the
 * runner's tmp and home sizes (NULL: the provider's defaults).
 */
struct sandbox_config;
json_object *provider_sandbox_description(const struct sandbox_plan *plan, const char *workspace,
                                          const struct sandbox_config *limits);

extern const struct provider_ops provider_local;
extern const struct provider_ops provider_daytona;

/*
 * The providers this program can use, local first: provider_registry.c has every one (the
 * master, its workers, the remote keeper agent-runner-keeper-remote); the local keeper
 * (agent-runner-keeper) links keeper/keeper_local.c ahead of the engine instead, whose
 * registry is local alone, so nothing of a remote provider (libcurl, OpenSSL, their dozens
 * of libraries) is loaded by a keeper of a local sandbox (README "How it is built").
 */
extern const struct provider_ops *const provider_registry[];
extern const size_t provider_registry_len;

/*
 * local, exposed for its tests: the bubblewrap command for a sandbox description. opts may
 * be NULL: no network at all (an empty namespace of its own), the host's resolv.conf.
 * Files are materialised from memfds created here; their fds (close-on-exec cleared) are
 * returned in fds[0..*ret_nfds) and must stay open until bwrap has started, then be closed.
 * argv receives a NULL-terminated malloc'ed vector of malloc'ed strings (free with
 * provider_argv_free), envp likewise ("NAME=value").
 */
struct local_command_opts {
    bool share_net;          /* stay in the caller's network namespace (the sandbox's own) */
    const char *hosts_extra; /* /etc/hosts lines for the named hosts */
    const char *resolv_conf; /* /etc/resolv.conf: the keeper's name server */
    int channel_fd;          /* > 2: the keeper channel the sandbox inherits (RUNNER_CHANNEL_FD) */
};
int local_sandbox_command(const char *bwrap, json_object *sandbox,
                          const struct local_command_opts *opts, char ***ret_argv, char ***ret_envp,
                          int *fds, size_t maxfds, size_t *ret_nfds, char *err, size_t errlen);
void provider_argv_free(char **argv);

#endif
