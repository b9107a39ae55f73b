/*
 * daytona_provider — the `daytona` provider_ops (provider.h; README "Daytona") over the Daytona
 * building blocks (daytona_client/api/toolbox/sandbox/lease/bridge/manifest/exec). Two halves:
 *
 *   daytona_provider.c  settings, capability snapshot, admission, restart sweep: what the
 *                       master and the workers do (no sandbox of their own);
 *   daytona_keeper.c    the one lease of a keeper: acquire (resume or create), start the
 *                       harness through the bridge, busy marks, stop, release.
 *
 * Settings (read once per process through provider_configure_all; the keeper gets the same
 * variables forwarded in its environment, provider_ops.keeper_env):
 *   AGENT_RUNNER_DAYTONA_API_URL, _API_KEY, _ORGANIZATION, _TARGET, _SNAPSHOT | _IMAGE,
 *   _CA_FILE (daytona_client.h); _REUSE_LEASES, _NETWORK_RULES,
 *   _PER_TURN_AUTO_STOP_MINUTES, _AUTO_ARCHIVE_MINUTES, _AUTO_DELETE_MINUTES (daytona_lease.h);
 *   AGENT_RUNNER_DAYTONA_LIFECYCLE     warm | per_turn | inherit (default): the runner's mode
 *                                      for this provider (rule 3 of core/policy.h)
 *   AGENT_RUNNER_DAYTONA_SESSION_TTL_MS  the provider's idle window (default: the request's,
 *                                      else 300 s)
 *   AGENT_RUNNER_DAYTONA_HARNESS_DIR   where the image has the harness folder (default: the
 *                                      same path as AGENT_RUNNER_HARNESS_DIR)
 *   AGENT_RUNNER_DAYTONA_RUNNER_ID     the instance label of this runner's sandboxes (default
 *                                      "<AGENT_RUNNER_INSTANCE>@<host name>"): the restart
 *                                      sweep only ever touches sandboxes with its own label
 * Neither URL nor key set: the provider is disabled (not in /health, requests for it are
 * refused). One of them, or a bad value: the runner refuses to start, naming the variable.
 */
#ifndef AR_DAYTONA_PROVIDER_H
#define AR_DAYTONA_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/contracts.h"
#include "provider/daytona/daytona_client.h"
#include "provider/daytona/daytona_lease.h"
#include "provider/provider.h"

#define DAYTONA_RUNNER_ID_MAX 64
#define DAYTONA_KEEPER_ENV_MAX 24
#define DAYTONA_SWEEP_MAX 1000 /* sandboxes one start-up sweep looks at */

struct daytona_settings {
    struct daytona_config cfg;
    struct daytona_lease_config lc;
    char runner_id[DAYTONA_RUNNER_ID_MAX];
    /* whose sessions' sandboxes this runner finds by name: the runner id, or (several hosts)
     * AGENT_RUNNER_DAYTONA_POOL_SCOPE, the same on every member */
    char pool_scope[DAYTONA_RUNNER_ID_MAX];
    bool shared_scope; /* pool_scope is not the runner id */
    char harness_dir[512];
    enum lifecycle_mode mode;
    uint64_t idle_ms;
};

/* This process's settings, NULL when the provider is not configured. */
const struct daytona_settings *daytona_provider_settings(void);

/* provider_ops.configure, exposed for tests: load from get (replaces earlier settings). */
int daytona_provider_configure(const char *(*get)(const char *name), char *err, size_t errlen);
/* Forget the settings (tests; the key is wiped). */
void daytona_provider_reset(void);

/*
 * The host of a model endpoint URL, for the network rule (always reachable): into ret.
 * -EINVAL for a URL without a host Daytona can name (IPv6 literal, no host).
 */
int daytona_provider_endpoint_host(const char *url, char *ret, size_t len);

/* ---- keeper side (daytona_keeper.c) ------------------------------------------------------ */

int daytona_keeper_acquire(const struct keeper_spec *spec, struct provider_lease *ret, char *err,
                           size_t errlen);
int daytona_keeper_resume(const struct keeper_spec *spec, const char *lease_id,
                          struct provider_lease *ret, char *err, size_t errlen);
int daytona_keeper_release(const struct provider_lease *lease,
                           enum provider_disposition disposition, char *err, size_t errlen);
int daytona_keeper_start(const struct keeper_spec *spec, struct provider_process *ret, char *err,
                         size_t errlen);
void daytona_keeper_stop(struct provider_process *proc);
int daytona_keeper_exit_status(struct provider_process *proc);
void daytona_keeper_busy(struct provider_process *proc, bool busy);
/* The keeper channel relay's pump (daytona_relay.h) in the keeper's poll loop. */
size_t daytona_keeper_poll_fds(struct provider_process *proc, struct pollfd *p, size_t max,
                               int64_t now, int *timeout_ms);
void daytona_keeper_service(struct provider_process *proc, const struct pollfd *p, size_t n,
                            int64_t now);

#endif
