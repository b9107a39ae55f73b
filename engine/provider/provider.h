/*
 * provider — sandbox providers behind one seam, struct provider_ops, mirroring harness_ops,
 * and the one registry of them (DESIGN.md §6b). A provider turns a sandbox description into a
 * running, isolated process tree with the harness's stdio on pipes.
 *
 * Two shapes fit the seam:
 *   - local (bubblewrap, provider/local.c): the keeper is the lease. start() runs in the keeper
 *     and returns the sandbox's process and pipes; stop() kills its whole process group.
 *     acquire/resume/release are NULL.
 *   - remote (Daytona, not built yet): acquire() creates a sandbox and returns a lease,
 *     resume() reattaches a kept one, release() stops / keeps / destroys it. Each acquisition
 *     has an outcome: created, resumed, or replacement with a reason (the kept sandbox was
 *     gone, expired, or did not match) — reference/paperclip.md §1.5. start() then runs the
 *     harness in the leased sandbox.
 * The capability snapshot (§1.6) is a frozen struct read by the lifecycle policy and the
 * request checks: a capability the provider lacks is refused before anything starts.
 *
 * Sandbox description (JSON, built by provider_sandbox_description from the harness's plan,
 * carried to the keeper in its spec; all paths absolute):
 *   {"workspace": host dir bound read-write at SANDBOX_WORKSPACE (the only host-writable place),
 *    "roBinds": [host paths bound read-only at the same path],
 *    "files": [{"path": in-sandbox path under SANDBOX_HOME or /etc/passwd|group,
 *               "content": text, "mode": int}],
 *    "env": {"NAME": "value", ...}   (the complete harness environment),
 *    "argv": ["cmd", ...], "cwd": SANDBOX_WORKSPACE,
 *    "limits": {"tmpBytes": int, "homeBytes": int}   (optional; sandbox_config defaults)}
 * Where the sandbox may connect and the host identity, cgroup and disk it gets travel beside
 * it in the keeper spec (keeper_proto.h: egress, confine): the local provider's start() makes
 * the sandbox's network namespace from them and its child enters the cgroup, the namespace
 * and the identity, in that order, before it execs bubblewrap.
 */
#ifndef AR_PROVIDER_H
#define AR_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <json-c/json.h>

#include "../harness/harness.h"

struct keeper_spec;

/* The capability snapshot of a provider: frozen, a missing capability is false. */
struct provider_caps {
    bool remote;           /* the sandbox runs elsewhere (leases over the network) */
    bool reusable_leases;  /* environments may stay warm between turns */
    bool network_off;      /* can remove the network entirely */
    bool network_allowlist;
    bool filesystem_modes;
};

enum provider_lease_outcome {
    PROVIDER_LEASE_CREATED = 0,
    PROVIDER_LEASE_RESUMED,
    PROVIDER_LEASE_REPLACEMENT,
};

enum provider_replacement_reason {
    PROVIDER_REPLACED_NONE = 0,
    PROVIDER_REPLACED_NOT_FOUND,
    PROVIDER_REPLACED_EXPIRED,
    PROVIDER_REPLACED_IDENTITY_MISMATCH,
    PROVIDER_REPLACED_RESUME_FAILED,
};

/* What the runner does with a leased sandbox after a turn. */
enum provider_disposition {
    PROVIDER_KEEP_RUNNING = 0,
    PROVIDER_STOP_AND_RETAIN,
    PROVIDER_DESTROY,
};

#define PROVIDER_LEASE_ID_MAX 128

struct provider_lease {
    char id[PROVIDER_LEASE_ID_MAX];
    char previous_id[PROVIDER_LEASE_ID_MAX]; /* replacement: the lease that was lost */
    enum provider_lease_outcome outcome;
    enum provider_replacement_reason reason; /* replacement only */
};

/*
 * A connection the sandbox's egress policy refused (connection true: counted), or a refused
 * DNS question / an overloaded proxy (false): destination and why, never payload.
 */
typedef void (*provider_egress_fn)(void *ctx, bool connection, const char *dest, const char *why);

/* A started sandbox: the harness's process (group leader) and its stdio pipes (non-blocking). */
struct provider_process {
    pid_t pid;
    int in_fd;
    int out_fd;
    int err_fd;
    void *priv; /* the provider's own state of this sandbox: start() makes it, stop() frees it */
    /* set by the caller before start(): where egress reports go (may be NULL) */
    provider_egress_fn on_egress;
    void *ctx;
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
    int (*resume)(const struct keeper_spec *spec, const char *lease_id,
                  struct provider_lease *ret, char *err, size_t errlen);
    int (*release)(const struct provider_lease *lease, enum provider_disposition disposition,
                   char *err, size_t errlen);
    /* Start the harness of spec->sandbox; ret's pipes belong to the caller until stop(). */
    int (*start)(const struct keeper_spec *spec, struct provider_process *ret, char *err,
                 size_t errlen);
    /* Kill everything start() made and reap the process; closes nothing of ret's fds. */
    void (*stop)(struct provider_process *proc);
    /*
     * Optional, for the keeper's poll loop while the sandbox runs: fds to poll for POLLIN
     * besides the pipes (at most max; returns how many) with *timeout_ms lowered to the
     * provider's next deadline, and service() to call after every poll (never blocks).
     */
    size_t (*poll_fds)(const struct provider_process *proc, int *fds, size_t max, int64_t now,
                       int *timeout_ms);
    void (*service)(struct provider_process *proc, int64_t now);
};

/* The provider registered under name, or NULL (not enabled on this runner). */
const struct provider_ops *provider_get(const char *name);
/* name is a provider of the wire protocol (enabled here or not). */
bool provider_known(const char *name);
/* The registry in order (i < provider_count()). */
size_t provider_count(void);
const struct provider_ops *provider_at(size_t i);

const char *provider_lease_outcome_name(enum provider_lease_outcome o);
const char *provider_replacement_reason_name(enum provider_replacement_reason r);

/*
 * The sandbox description of a harness plan (a new reference), NULL on ENOMEM. limits: the
 * runner's tmp and home sizes (NULL: the provider's defaults).
 */
struct sandbox_config;
json_object *provider_sandbox_description(const struct sandbox_plan *plan, const char *workspace,
                                          const struct sandbox_config *limits);

extern const struct provider_ops provider_local;

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
};
int local_sandbox_command(const char *bwrap, json_object *sandbox,
                          const struct local_command_opts *opts, char ***ret_argv, char ***ret_envp,
                          int *fds, size_t maxfds, size_t *ret_nfds, char *err, size_t errlen);
void provider_argv_free(char **argv);

#endif
