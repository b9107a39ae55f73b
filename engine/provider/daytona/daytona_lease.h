/*
 * daytona_lease — the decisions of a reusable-lease provider, with no I/O: Paperclip's
 * capability snapshot, lifecycle and lease resume rules (README "Daytona").
 *
 * Capability snapshot (fail closed). What the provider can do is read once per acquisition
 * into a struct daytona_caps, copied by value and never changed afterwards. A run that needs a
 * capability the snapshot lacks is refused with a named error (`sandbox_capability_missing:
 * ...`), except where the request itself allows best effort; a lease the provider downgraded
 * (not reusable) runs per-turn and never fails the run.
 *
 * Lifecycle (Paperclip's remote warm default: a codex follow-up on Daytona took 30.4 s with a
 * new sandbox per turn, 7.6 s warm). The rules live in engine/core/policy.c (policy_lifecycle:
 * admitted > managed credentials > runner > request > default, where the default keeps a remote
 * run warm only for a measured harness — codex, opencode, claude — on a provider with reusable
 * leases, and an explicit warm choice on a provider without them is
 * runner_warm_environment_requires_reusable_lease). daytona_lease_lifecycle() feeds them the
 * snapshot, never duplicates them, and turns the result into the sandbox's server-side
 * backstops: a warm sandbox's auto-stop is its idle window (300 s remote default -> 5 min), so
 * a runner that dies still gets its sandbox stopped; auto-delete removes it later; a per-turn
 * sandbox is ephemeral (deleted when it stops) with a 15 min auto-stop.
 *
 * Resume. From what a GET of the lease's sandbox showed, daytona_lease_decide() says what to
 * do next: started -> reuse; stopped/archived/paused -> start; error + recoverable -> recover;
 * transitional -> wait (poll, bounded by the caller's deadline); 404 -> replacement
 * (not_found); destroyed, or an error whose container is gone -> replacement (expired);
 * labels of another owner -> replacement (identity_mismatch, never deleted: not ours);
 * anything that keeps failing -> replacement (resume_failed). Transient lookup failures are
 * retried a bounded number of times. The acquisition outcome is created / resumed /
 * replacement + reason (Paperclip's SandboxLeaseAcquisition).
 */
#ifndef AR_DAYTONA_LEASE_H
#define AR_DAYTONA_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/contracts.h"
#include "core/policy.h"
#include "provider/daytona/daytona_api.h"

#define DAYTONA_RESUME_ATTEMPTS 2    /* start/recover calls per acquisition */
#define DAYTONA_LOOKUP_RETRIES 3     /* transient GET failures per acquisition */
#define DAYTONA_RESUME_WAIT_MS 10000 /* transitional states: Agenta's reconnect deadline */

/* Labels every sandbox of ours carries (never a session id or a credential). */
#define DAYTONA_LABEL_INSTANCE "agent-runner-instance"
#define DAYTONA_LABEL_POOL "agent-runner-pool"   /* keyed digest of the pool key */
#define DAYTONA_LABEL_LEASE "agent-runner-lease" /* "reusable" | "per_turn" */

struct daytona_lease_config {
    bool reuse_leases;          /* AGENT_RUNNER_DAYTONA_REUSE_LEASES (true) */
    bool network_rules;         /* AGENT_RUNNER_DAYTONA_NETWORK_RULES (true); false for an
                                   organization whose egress tier forbids per-sandbox rules */
    int per_turn_auto_stop_min; /* AGENT_RUNNER_DAYTONA_PER_TURN_AUTO_STOP_MINUTES (15) */
    int auto_archive_min;       /* AGENT_RUNNER_DAYTONA_AUTO_ARCHIVE_MINUTES (0 = maximum) */
    int auto_delete_min;        /* AGENT_RUNNER_DAYTONA_AUTO_DELETE_MINUTES (1440): a stopped
                                   warm sandbox is deleted this long after it stopped */
};

/* Defaults, then the variables named above through get (getenv in production). */
int daytona_lease_config_load(const char *(*get)(const char *name),
                              struct daytona_lease_config *ret, char *err, size_t errlen);

struct daytona_caps {
    bool reusable_leases;   /* stop/start keeps the sandbox for a later turn */
    bool network_off;       /* networkBlockAll */
    bool network_allowlist; /* networkAllowList / domainAllowList */
    bool auto_stop;         /* server-side idle stop (the backstop) */
    bool process_sessions;  /* toolbox sessions with followed logs: how ACP is carried */
    unsigned allowlist_max; /* entries per list */
};

/* The snapshot this configuration gives. */
void daytona_lease_caps(const struct daytona_lease_config *lc, struct daytona_caps *ret);

struct daytona_needs {
    enum network_mode network;
    bool network_strict; /* sandboxPermission.enforcement: strict (default) or best_effort */
    size_t nallow;       /* entries of the allowlist */
};

/*
 * Fail-closed check of what a run needs against the snapshot. 0 when it can run as asked;
 * 1 when it can run only relaxed (best_effort and a network rule the provider cannot apply:
 * the sandbox gets no network rule and the caller must say so); AR_E_UNAVAILABLE with
 * err = "sandbox_capability_missing: <what>" otherwise.
 */
int daytona_lease_check(const struct daytona_caps *caps, const struct daytona_needs *n, char *err,
                        size_t errlen);

struct daytona_lifecycle {
    struct lifecycle_policy policy;
    bool downgraded;   /* an admitted warm session on a provider that no longer leases */
    bool reusable;     /* the sandbox is created to be stopped and resumed */
    int auto_stop_min; /* create parameters (the server-side backstop) */
    int auto_archive_min;
    int auto_delete_min;
};

/*
 * policy_lifecycle() with the provider fields taken from caps (remote, reusable leases), then
 * the backstop intervals. Errors are policy_lifecycle's (an explicit warm without reusable
 * leases).
 */
int daytona_lease_lifecycle(const struct daytona_caps *caps, const struct daytona_lease_config *lc,
                            const struct lifecycle_input *in, struct daytona_lifecycle *ret,
                            char *err, size_t errlen);

/* Minutes of auto-stop for an idle window: rounded up, at least 1. */
int daytona_lease_idle_minutes(uint64_t idle_ms);

/*
 * A lease that turned out not reusable (the sandbox is ephemeral: autoDeleteInterval 0, or
 * its lease label says per_turn) turns a warm policy into per-turn: returns true and sets
 * lc->downgraded. Never an error.
 */
bool daytona_lease_downgrade(struct daytona_lifecycle *lc, const struct daytona_sandbox *sb);

enum daytona_resume_action {
    DAYTONA_RESUME_REUSE = 1, /* started: use it */
    DAYTONA_RESUME_START,     /* POST start, then wait for started */
    DAYTONA_RESUME_RECOVER,   /* POST recover, then wait */
    DAYTONA_RESUME_WAIT,      /* transitional: look again after the poll step */
    DAYTONA_RESUME_RETRY,     /* the lookup failed transiently: look again */
    DAYTONA_RESUME_REPLACE,   /* create a new sandbox */
};

enum daytona_lease_reason {
    DAYTONA_REASON_NONE = 0,
    DAYTONA_REASON_NOT_FOUND,
    DAYTONA_REASON_EXPIRED,
    DAYTONA_REASON_IDENTITY_MISMATCH,
    DAYTONA_REASON_RESUME_FAILED,
};

enum daytona_lease_outcome {
    DAYTONA_LEASE_CREATED = 1,
    DAYTONA_LEASE_RESUMED,
    DAYTONA_LEASE_REPLACEMENT,
};

struct daytona_observation {
    int lookup;               /* 0: found; -ENOENT: 404; another negative: the GET failed */
    enum daytona_state state; /* when found */
    bool recoverable;
    const char *error_reason; /* may be NULL */
    bool identity_ok;         /* its labels name our instance and this pool key */
    unsigned attempts;        /* start/recover calls made so far in this acquisition */
    unsigned retries;         /* failed lookups so far in this acquisition */
    bool deadline_passed;     /* the wait for a transitional state ran out */
};

struct daytona_resume_decision {
    enum daytona_resume_action action;
    enum daytona_lease_reason reason; /* REPLACE only */
    bool delete_old;                  /* REPLACE: delete the old sandbox first (best effort) */
};

void daytona_lease_decide(const struct daytona_observation *o, struct daytona_resume_decision *ret);

/* For tests: the names tests/fixtures/daytona_driver.c prints (the runner itself reports the
 * provider-wide names of contracts.h). */
const char *daytona_lease_outcome_name(enum daytona_lease_outcome o);
const char *daytona_lease_reason_name(enum daytona_lease_reason r);
const char *daytona_resume_action_name(enum daytona_resume_action a);

/* What release does with the sandbox; which one a teardown gets is provider_disposition's rule
 * (provider/provider.h), the same for every remote provider. */
enum daytona_disposition {
    DAYTONA_KEEP_RUNNING = 1, /* the session stays warm: the keeper keeps the harness */
    DAYTONA_STOP_AND_RETAIN,  /* stop the sandbox; a later turn resumes it */
    DAYTONA_DESTROY,          /* delete it */
};

/*
 * The pool label value: 32 hex digits of HMAC-SHA256(secret, length-prefixed instance and
 * pool key). Keyed, so the label reveals nothing about the session; stable across restarts
 * for the same secret (the provider API key is a good one: it never leaves the runner).
 */
int daytona_lease_pool_digest(const char *secret, const char *instance, const char *pool_key,
                              char ret[33]);

#endif
