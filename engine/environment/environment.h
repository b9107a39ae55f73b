/*
 * environment — a live sandbox + harness, reached through its keeper. This header is the
 * environment layer's whole interface: the link to a live environment (env_link.h), the
 * spares (environment_spare.h), the teardown of environments nobody is attached to
 * (env_stop.h), and here the two ways to get one for a turn.
 *
 * environment_acquire() starts a new one: it reserves a slot in the session table, creates the
 * environment folder, runs env_setup, starts the keeper (which starts the sandbox), and
 * attaches to it. All of that is one error boundary: any failure rolls back everything done so
 * far (keeper, sandbox, folder, slot) before it returns.
 *
 * environment_reconnect() attaches to the keeper of a live slot the caller checked out.
 */
#ifndef AR_ENVIRONMENT_H
#define AR_ENVIRONMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/contracts.h"
#include "environment/env_link.h"
#include "environment/env_stop.h"
#include "environment/environment_spare.h"
#include "session/pool.h"

/*
 * Start a new environment for req with the harness plan. key is the pool key ("" for a
 * per-turn run). idle_ms is the keeper's idle window. had_lease: the session had a live
 * environment this turn could not use (a remote provider then reports a missing sandbox as a
 * replacement). On failure err names the problem and nothing is left behind;
 * AR_E_SANDBOX_CAPACITY when the sandbox provider refused for capacity.
 */
int environment_acquire(const struct engine_config *cfg, const struct run_request *req,
                        const struct sandbox_plan *plan, const char *key, uint64_t idle_ms,
                        bool per_turn, bool had_lease, struct environment **ret, char *err,
                        size_t errlen);

/*
 * Attach to the keeper of the checked-out slot h (state busy, owned by the caller). ahead:
 * without waiting for the keeper's hello (environment_attach_ahead: a warm turn's prompt goes
 * out at once, and a keeper that refuses shows as a lost keeper before any harness line);
 * else the hello is read here.
 */
int environment_reconnect(const struct engine_config *cfg, struct pool_handle h, bool ahead,
                          struct environment **ret, char *err, size_t errlen);

#endif
