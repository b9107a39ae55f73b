/*
 * turn_model — a turn's model calls as the sandbox's model gateway saw them (README "The model
 * gateway"), for a measured turn (turn_options.measured).
 *
 * The keeper sends each call the gateway forwarded or refused ("#model", keeper_proto.h); the
 * environment hands it to the loop as a TURN_RECV_MODEL message (method TURN_MODEL_CALL). A
 * call with usage makes one `usage` event (input: every prompt token, cached ones included;
 * output; total; cost from the operator's price table, left out when the model has no price)
 * and adds to the turn's; a refused call makes an `error` event naming it (code
 * "model_refused"); a failed call (the provider's 401/403, 429, 5xx, or no answer at all)
 * names the error code the turn fails with if it fails: provider_auth_error,
 * provider_rate_limited, provider_error, model_unavailable.
 *
 * When the prompt's answer arrives the loop holds it (turn_model_hold), asks the keeper to sync
 * (turn_env.model_sync) and finishes the turn only when TURN_MODEL_SYNCED came (or
 * TURN_MODEL_SYNC_MS passed: a keeper that does not answer): every call the answer depended on
 * is reported by then. The result's usage is then the measured sum (turn_model_finish); what the
 * harness itself reported (pi's extension and the scripted agent over the keeper channel,
 * claude's and codex's ACP usage) makes no event and counts for nothing but the cross-check
 * (unless the gateway read no usage at all: see turn_model_finish):
 * a channel report whose output or total differs from the measured one sets
 * turn_outcome.usage_mismatch (the engine logs and counts it).
 */
#ifndef AR_TURN_MODEL_H
#define AR_TURN_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include "core/contracts.h"
#include "proto/acp.h"

#define TURN_MODEL_SYNC_MS 2000

struct turn_loop;

/*
 * The cost in USD of a call of model (prices: {"<model>": {input, output, cacheRead?,
 * cacheWrite?} per million tokens}): input counts every prompt token, cache_read and
 * cache_write those of them read from / written to the cache (priced at cacheRead / cacheWrite,
 * else at input). false when prices has no entry for model.
 */
bool turn_model_cost(json_object *prices, const char *model, int64_t input, int64_t output,
                     int64_t cache_read, int64_t cache_write, double *ret);
/* A call report's usage (cost included, or cost_unknown). false when it carries none. */
bool turn_model_usage(json_object *report, json_object *prices, struct run_usage *ret);
/* The error code a failed or refused call report names, NULL for a call that went fine. */
const char *turn_model_error_code(json_object *report);

/* A TURN_RECV_MODEL message. true: it was the sync's answer and a held prompt answer is due. */
bool turn_model_on_message(struct turn_loop *L, const struct acp_msg *m);
/* The prompt's answer m: held (true; moved into L->held) until the gateway's reports are in. */
bool turn_model_hold(struct turn_loop *L, struct acp_msg *m, int64_t now);
/* The sync's deadline passed: the held answer is due (true), nothing was held (false). */
bool turn_model_expired(struct turn_loop *L, int64_t now);
/*
 * The measured usage into the result, and the cross-check against the harness's report. When
 * the gateway could read no call's usage (only APIs it does not know), the harness's report
 * (prompt_result's usage, the channel's) is the result's, in one usage event.
 */
void turn_model_finish(struct turn_loop *L, json_object *prompt_result);

#endif
