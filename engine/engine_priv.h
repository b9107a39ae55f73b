/*
 * engine_priv — what engine.c and engine_start.c share (engine.h is the public face).
 */
#ifndef AR_ENGINE_PRIV_H
#define AR_ENGINE_PRIV_H

#include "engine.h"
#include "environment/environment.h"
#include "turn/events.h"

/* Events reach the client before every wait for the harness. */
void engine_stream_before_waits(struct environment *env, struct event_stream *es);

/*
 * A new environment for the turn, open (initialize + session/new): a claimed spare when the
 * run may take one and one is ready, else a cold start; a spare that fails its claim or its
 * session/new is destroyed and the turn starts cold instead. On failure err and *ret_code
 * are the error event's, *ret_limit says a sandbox limit tripped, and nothing is left.
 */
int engine_start_environment(struct engine_turn *t, struct event_stream *es,
                             enum teardown_reason why, struct environment **ret, bool *ret_limit,
                             char *err, size_t errlen, const char **ret_code);

#endif
