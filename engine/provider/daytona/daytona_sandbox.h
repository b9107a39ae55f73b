/*
 * daytona_sandbox — the lease driver: acquire (resume the session's sandbox or create one),
 * release (keep, stop and retain, or delete) and the restart sweep, on daytona_api with the
 * decisions of daytona_lease. This is what a `daytona` provider_ops calls for acquire /
 * resume / release / start / stop.
 *
 * Naming. A reusable lease's sandbox is named "ar-<pool digest>" (the keyed digest of the
 * pool key, daytona_lease_pool_digest), so a later turn of the session finds it with one GET
 * by name even after its keeper is gone; a per-turn sandbox is "ar-t-<random>". Labels:
 * agent-runner-instance, agent-runner-pool, agent-runner-lease (daytona_lease.h). A name
 * already taken (a create that raced, an old sandbox that could not be deleted) falls back to
 * "ar-<digest>-<random>".
 *
 * Acquire never leaves a half-made sandbox behind: a create that fails after the record exists
 * (start failed, timed out, lost answer) deletes it by name before returning the error.
 * 429s surface as DAYTONA_E_CAPACITY with err starting "sandbox_capacity:".
 */
#ifndef AR_DAYTONA_SANDBOX_H
#define AR_DAYTONA_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>

#include "provider/daytona/daytona_api.h"
#include "provider/daytona/daytona_lease.h"

struct daytona_acquire_params {
    const char *instance;    /* AGENT_RUNNER_INSTANCE: label */
    const char *pool_digest; /* reusable leases: daytona_lease_pool_digest(); NULL = per-turn */
    const char *lease_id;    /* the sandbox id the session used last, when known; else the
                                reusable name is looked up */
    bool had_lease;          /* the session had a sandbox before: a miss is a replacement */
    const struct daytona_lifecycle *lifecycle;
    const struct daytona_kv *env; /* non-secret environment for the create (may be NULL) */
    size_t nenv;
    enum network_mode network;
    const char *const *allow;
    size_t nallow;
    const char *const *always_allow;
    size_t nalways_allow;
    long create_timeout_ms; /* 0 = 60 s */
    long start_timeout_ms;  /* a start from stopped/archived; 0 = 120 s */
    long resume_wait_ms;    /* transitional states; 0 = DAYTONA_RESUME_WAIT_MS */
    /* several hosts: the digest is keyed with the cluster's scope, so a sandbox another member
     * made (its instance label) is ours to resume; resuming it relabels it to this instance */
    bool shared_pool;
};

struct daytona_lease {
    struct daytona_sandbox sb; /* owned: daytona_lease_release() */
    enum daytona_lease_outcome outcome;
    enum daytona_lease_reason reason; /* replacement only */
    char previous_id[DAYTONA_ID_MAX]; /* replacement: the sandbox it replaced ("" if unknown) */
    bool reusable;
    long acquire_ms; /* wall time of the acquisition */
};

/*
 * Resume or create. On success *ret is the started sandbox and how it was obtained; on failure
 * err says why (a DAYTONA_E_CAPACITY error starts with "sandbox_capacity:").
 */
int daytona_acquire(struct daytona_client *c, const struct daytona_acquire_params *p,
                    struct daytona_lease *ret, char *err, size_t errlen);
void daytona_lease_release(struct daytona_lease *l);

/*
 * Apply a disposition. STOP_AND_RETAIN: stop a started sandbox (waiting out a transition
 * first); stopped, archived or gone is already fine; a sandbox in error, or one that cannot be
 * stopped, is deleted instead (never left billing). DESTROY: delete (404 = done), retrying
 * through a transition in progress. KEEP_RUNNING: nothing.
 */
int daytona_release(struct daytona_client *c, const char *id, enum daytona_disposition d, char *err,
                    size_t errlen);

enum daytona_sweep_action { DAYTONA_SWEEP_KEEP = 1, DAYTONA_SWEEP_STOP, DAYTONA_SWEEP_DELETE };

/* Return the action for one of our sandboxes (the session table decides who is live). */
typedef enum daytona_sweep_action (*daytona_sweep_fn)(void *ctx, const struct daytona_sandbox *sb);

/*
 * The default: a sandbox with a live owner is kept (adopted); a stopped or archived reusable
 * lease is kept (a later turn resumes it; auto-delete is its backstop); anything else —
 * started without an owner, per-turn, errored — is deleted.
 */
enum daytona_sweep_action daytona_sweep_default(const struct daytona_sandbox *sb, bool live_owner);

struct daytona_sweep_stats {
    unsigned seen, kept, stopped, deleted, failed;
};

/*
 * Restart recovery: list the sandboxes labelled with this instance (at most max) and apply
 * fn's action to each. Bounded: one list walk, one call per sandbox.
 */
int daytona_sweep(struct daytona_client *c, const char *instance, size_t max, daytona_sweep_fn fn,
                  void *ctx, struct daytona_sweep_stats *ret);

#endif
