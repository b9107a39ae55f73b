/*
 * engine_start — a new session's environment for a turn: a claimed spare (spare.h) or a cold
 * start, then the harness session opened on it (initialize + session/new).
 */
#ifndef AR_ENGINE_START_H
#define AR_ENGINE_START_H

#include <stdbool.h>
#include <stddef.h>

#include "core/contracts.h"
#include "engine_turn.h"
#include "environment/environment.h"
#include "turn/events.h"

/* Events reach the client before every wait for the harness (env's before_wait hook). */
void engine_stream_before_waits(struct environment *env, struct event_stream *es);

/*
 * A new environment for the turn, open (initialize + session/new): a claimed spare when the
 * run may take one and one is ready, else a cold start; a spare that fails its claim or its
 * session/new is destroyed and the turn starts cold instead. On failure err and *ret_code
 * are the error event's, *ret_limit says a sandbox limit tripped, and nothing is left. A
 * provider that downgraded the lease turns t's policy per-turn.
 */
int engine_start_environment(struct engine_turn *t, struct event_stream *es,
                             enum teardown_reason why, struct environment **ret, bool *ret_limit,
                             char *err, size_t errlen, const char **ret_code);

#endif
