/*
 * environment_spare — the spare's life as an environment: one started and made ready for a
 * claim, and one claimed by a new session's turn. What a spare is (the settings, who may take
 * one, the placeholder it starts on, the files a claim writes) is spare.h; the slots are
 * session/pool.h's pool_spare_*; the master's maker that keeps the count is fcgi/spares.c;
 * a spare evicted to make room for a session is env_stop.h's.
 */
#ifndef AR_ENVIRONMENT_SPARE_H
#define AR_ENVIRONMENT_SPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/contracts.h"
#include "environment/env_link.h"

/*
 * environment_start_spare: the master's spare maker
 * starts one spare of kind in a slot of its own (SLOT_SPARE once its keeper runs; the keeper
 * ends it, slot and all, after cfg->spare_ttl_ms unclaimed). Returns once the keeper is ready;
 * on failure nothing is left.
 *
 * environment_claim_spare: a new session's turn takes a ready spare instead of acquiring: the
 * slot (pool_spare_claim), the request's workspace files and the plan's home files written
 * into the running sandbox as its own uid, the keeper bound to the session ("#claim": idle
 * window, per-turn, the run's egress policy). The caller goes on with initialize / session/new
 * as after environment_acquire. -ENOENT when no spare is ready (nothing done); any other
 * failure has destroyed the spare (its slot is free again) and err says why: start cold.
 */
int environment_start_spare(const struct engine_config *cfg, enum harness_kind kind, char *err,
                            size_t errlen);
int environment_claim_spare(const struct engine_config *cfg, const struct run_request *req,
                            const struct sandbox_plan *plan, const char *key, uint64_t idle_ms,
                            bool per_turn, struct environment **ret, char *err, size_t errlen);

/*
 * Shells (AGENT_RUNNER_SHELLS): pre-made sandbox shells, the spares idea for every harness
 * without a harness's memory. environment_start_shell: the master's maker makes one: a slot of
 * its own (pool_spare_reserve with POOL_SHELL, SLOT_SPARE once its keeper runs), the slot's
 * host uid, capped workspace and cgroup, and a keeper (keeper_spec.shell) that made the
 * sandbox's network namespace, nf_tables rules, egress proxy and name server on a placeholder
 * policy, and waits (at most cfg->spare_ttl_ms) without a sandbox. Returns once the keeper is
 * ready; on failure nothing is left.
 *
 * environment_claim_shell: a cold start of any harness on the local provider takes a ready
 * shell instead of starting a keeper: the slot (pool_shell_claim: a shell never serves two
 * sessions, and it holds nothing of anyone), the request's workspace files written and given
 * to the slot's uid, then "#claim" with the run's egress policy and sandbox description; the
 * keeper applies the policy and starts the sandbox, and answers "#hello" with its pid. The
 * caller goes on exactly as after environment_acquire. -ENOENT when no shell is ready
 * (nothing done); any other failure destroyed the shell (err says why): start cold.
 */
int environment_start_shell(const struct engine_config *cfg, char *err, size_t errlen);
int environment_claim_shell(const struct engine_config *cfg, const struct run_request *req,
                            const struct sandbox_plan *plan, const char *key, uint64_t idle_ms,
                            bool per_turn, struct environment **ret, char *err, size_t errlen);

#endif
