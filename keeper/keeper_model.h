/*
 * keeper_model — what the keeper does with its sandbox's model calls (README "The model
 * gateway"): the local sandbox's model gateway (gateway/model_gateway.h) reports each call it
 * forwarded or refused; the keeper sends it to the attached worker as "#model <json>"
 * (keeper_proto.h), where the turn makes the run's usage of it. A call that ends while no
 * worker is attached (a harness's background call after its turn) is kept (at most
 * KEEPER_MODEL_PENDING_MAX) and sent to the next worker that attaches. "#model-sync" from the
 * worker (its turn's prompt ended) delivers what the gateway queued and answers
 * "#model-synced" behind it: the gateway queues a call's report before the harness has the
 * bytes that end its answer, so every call the turn's answer depended on is ahead of it.
 *
 * Each call is counted in agent_runner_model_calls_total, each refusal in
 * agent_runner_model_refused_total and logged (the sandbox triggers it: at most
 * KEEPER_MODEL_WARNS_PER_S lines a second). Never a credential: the report holds none.
 */
#ifndef AR_KEEPER_MODEL_H
#define AR_KEEPER_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "base/log.h"
#include "gateway/model_gateway.h"

#define KEEPER_MODEL_PENDING_MAX 64
#define KEEPER_MODEL_WARNS_PER_S 5

struct keeper;

struct keeper_model {
    char *pending[KEEPER_MODEL_PENDING_MAX]; /* "#model" payloads for the next worker */
    size_t npending;
    uint64_t lost; /* reports dropped: nobody attached and the list full */
    struct log_budget warns;
};

/* The provider's report callbacks; ctx is the struct keeper. */
void keeper_model_report(void *ctx, const struct model_gateway_report *r);
void keeper_model_egress(void *ctx, bool connection, const char *dest, const char *why);
/* A worker attached: the reports kept for it go first (after "#hello"). */
void keeper_model_attached(struct keeper *k);
/* "#model-sync": deliver what the gateway queued, then "#model-synced". */
void keeper_model_sync(struct keeper *k);
void keeper_model_release(struct keeper_model *m);

#endif
