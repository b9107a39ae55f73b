/*
 * env_start — the steps that start an environment's keeper, shared by a cold start
 * (environment.c) and a spare (environment_spare.c): the session table reservation, the
 * sandbox's workspace and host confinement, the keeper spec (with the run's egress policy),
 * and the keeper process started and its "#ready" awaited. The caller holds the error
 * boundary: each step undoes nothing of the ones before it.
 */
#ifndef AR_ENV_START_H
#define AR_ENV_START_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "core/contracts.h"
#include "environment/env_link.h"
#include "sandbox/host.h"

/* The run's egress policy as the keeper spec carries it (NULL + err on failure); with
 * model_gateway the model endpoint is not named (the keeper's gateway calls it). */
json_object *environment_egress_json(const struct engine_config *cfg, const struct run_request *req,
                                     bool model_gateway, char *err, size_t errlen);
/*
 * The keeper spec of a new environment into out: where it lives, its slot, the sandbox to
 * start, and (confine given: local sandboxes on a probed host) its confinement and egress
 * policy. AR_E_SANDBOX when the egress policy cannot be built; err says why.
 */
/*
 * The sandbox description of plan (provider_sandbox_description) for env's provider; a local
 * one also carries the seccomp programme (sandbox_seccomp_program, compiled once per
 * process). NULL with err on failure.
 */
struct sandbox_config;
json_object *environment_sandbox_description(const struct environment *env,
                                             const struct sandbox_plan *plan,
                                             const struct sandbox_config *limits, char *err,
                                             size_t errlen);

int environment_encode_spec(const struct environment *env, const struct run_request *req,
                            const struct sandbox_plan *plan, const char *key, uint64_t idle_ms,
                            bool per_turn, bool had_lease, const struct sandbox_env *confine,
                            struct buf *out, char *err, size_t errlen);
/*
 * Start agent-runner-keeper with spec on its stdin and wait (cfg->keeper_start_ms) for its
 * "#ready": env->keeper_pid and sandbox_pid set. AR_E_SANDBOX_CAPACITY when the provider
 * refused for capacity, AR_E_SANDBOX for any other refusal; err says why.
 */
int environment_spawn_keeper(struct environment *env, const struct buf *spec, char *err,
                             size_t errlen);
/* The slot's host uid, capped workspace, the request's workspace files, the cgroup. */
int environment_prepare_sandbox(struct environment *env, const struct run_request *req,
                                struct sandbox_env *confine, char *err, size_t errlen);
/* The session table reservation of a new session's environment (cold start or claimed spare). */
struct pool_reservation environment_reservation(const struct run_request *req,
                                                const struct sandbox_plan *plan, const char *key,
                                                uint64_t idle_ms, bool per_turn);
/* Free a reservation whose keeper never started. */
void environment_release_slot(struct environment *env);

#endif
