/*
 * engine — the entry point of a turn: validate what can be validated before a response
 * starts (engine_prepare), then run it (engine_run): acquire an environment, open the ACP
 * session, run the prompt, then tear the environment down or keep it, and always end the
 * stream with `done` (when the turn started) and a filled result.
 */
#ifndef AR_ENGINE_H
#define AR_ENGINE_H

#include <stdbool.h>
#include <stddef.h>

#include "contracts.h"
#include "events.h"
#include "harness/harness.h"

struct engine_turn {
    const struct engine_config *cfg;
    struct run_request *req; /* borrowed */
    const struct harness_ops *harness;
    struct sandbox_plan plan;
    json_object *prompt; /* ACP content blocks */
};

/*
 * Everything that can be refused before the response starts: an uninstalled harness
 * (AR_E_UNAVAILABLE), a request the harness cannot run, no user message
 * (AR_E_INVALID_REQUEST). err names the problem. On success release with engine_turn_release.
 */
int engine_prepare(const struct engine_config *cfg, struct run_request *req,
                   struct engine_turn *ret, char *err, size_t errlen);
void engine_turn_release(struct engine_turn *t);

/* Run the prepared turn; events go to es, the outcome to res (initialised by the caller). */
void engine_run(struct engine_turn *t, struct event_stream *es, struct run_result *res);

/* Harness names (as /health lists them) that are installed under cfg. */
json_object *engine_installed_harnesses(const struct engine_config *cfg);

#endif
