/*
 * engine_turns — streamed turns that outlive their client and their worker: the engine's side
 * of the journal (turn/journal.h), reattach (engine.h's engine_follow_*), and the adoption of
 * a turn whose worker died (keeper/keeper_turn.h is the keeper's side).
 *
 * How a dead worker's turn goes on. Just before a turn sends its prompt, its worker gives the
 * keeper "#turn" with what another worker needs to carry the turn on: the request as it came,
 * the prompt's id, how many of the turn's own events were out by then (det), its lifecycle
 * policy, capabilities and trace id; and the journal records the slot. When the worker dies,
 * the keeper holds the turn (the harness goes on, its lines are kept). The next worker to
 * serve the turn — a GET /turns/{id}/events that finds the journal's writer gone, or the
 * orphan scan a worker runs at start and every few seconds — takes the journal's writer lock,
 * becomes the slot's owner, attaches to the keeper and says "#adopt". It parses the request
 * again, runs the turn loop from the kept lines on (no prompt sent), and the event stream drops
 * the events whose det the journal already has, numbering the rest after the journal's last
 * record: the same harness process, the same answer, no record twice, none lost.
 *
 * A turn that cannot go on (its worker died before the prompt, or the keeper could not hold
 * it) is closed in its journal: an `error` event (code `turn_not_started` when nothing ran
 * yet: sending it again is safe; else `turn_lost`), `done`, a result with ok:false.
 */
#ifndef AR_ENGINE_TURNS_H
#define AR_ENGINE_TURNS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/contracts.h"
#include "core/policy.h"
#include "engine_turn.h"
#include "environment/environment.h"
#include "turn/events.h"

/* What a worker adopting a turn takes from its "#turn" JSON (besides the request). */
struct engine_adopted {
    int64_t prompt_id;
    int64_t next_id;
    uint64_t det;
    struct lifecycle_policy policy;
    uint32_t caps;
    char trace_id[40];
};

/*
 * A streamed turn is to have a journal (no-op when journaling is off): made at its first need
 * (event_stream_journal_open: the first record, the slot, a wait the turn does anyway), or not
 * at all when it cannot be made (logged).
 */
void engine_turns_journal_open(const struct engine_turn *t, struct event_stream *es);
/*
 * A warm turn whose prompt goes to the harness of slot (index, generation): its journal made
 * now, naming the slot from the start, before the keeper is reached. Then the keeper's
 * socket gets the attach and the prompt back to back (environment_attach_ahead), and the
 * slot is in the journal before the prompt is anywhere a dying worker could leave it.
 */
void engine_turns_journal_now(struct engine_turn *t, struct event_stream *es, uint32_t index,
                              uint32_t generation);
/*
 * The turn's prompt goes next (resume: a parked approval's answers): the journal records the
 * slot, and the keeper is told (so it can hold the turn for an adopter) unless the turn cannot
 * be carried on by another worker — an approval resume, platform mode. No-op without a
 * journal or a slot.
 */
void engine_turns_register(const struct engine_turn *t, struct environment *env,
                           struct event_stream *es, const struct run_result *res,
                           const struct lifecycle_policy *policy, bool resume);
/*
 * engine.c: run an adopted turn on env (consumed: parked or destroyed), its events into es
 * (whose seq, det and skip_det the caller set), done included.
 */
void engine_run_adopted(struct engine_turn *t, struct environment *env,
                        const struct engine_adopted *ad, struct event_stream *es,
                        struct run_result *res);
/* The worker's scan for orphaned turns (a thread; no-op when journaling is off). -errno. */
int engine_turns_start(const struct engine_config *cfg);
/* Someone still takes this turn's output: its client, a follower, a gone client's grace. */
bool engine_turns_audience(const struct engine_turn *t, struct event_stream *es);

#endif
