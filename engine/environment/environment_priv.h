/*
 * environment_priv — the steps of environment.c that environment_spare.c reuses to start a
 * spare and to bind one to a session (environment.h says what each public call does). Only
 * the environment module includes this file.
 */
#ifndef AR_ENVIRONMENT_PRIV_H
#define AR_ENVIRONMENT_PRIV_H

#include "environment/environment.h"
#include "sandbox/host.h"

struct environment *environment_new(const struct engine_config *cfg);
/* Attach to the keeper at env->paths.socket and read its "#hello" (before deadline). */
int environment_connect_keeper(struct environment *env, int64_t deadline, char *err, size_t errlen);
/* The run's egress policy as the keeper spec carries it (NULL + err on failure). */
json_object *environment_egress_json(const struct engine_config *cfg, const struct run_request *req,
                                     char *err, size_t errlen);
int environment_encode_spec(const struct environment *env, const struct run_request *req,
                            const struct sandbox_plan *plan, const char *key, uint64_t idle_ms,
                            bool per_turn, bool had_lease, const struct sandbox_env *confine,
                            struct buf *out, char *err, size_t errlen);
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

/*
 * The table is full: stop the oldest ready spare and wait until its slot is free. 1 when one
 * was stopped, 0 when there was none.
 */
int environment_evict_spare(const struct engine_config *cfg);

#endif
