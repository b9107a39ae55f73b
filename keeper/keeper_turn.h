/*
 * keeper_turn — a turn that outlives its worker, the keeper's side (engine_turns.c is the
 * worker's). A worker announces its turn with "#turn <json>" just before it sends the prompt;
 * from then on the keeper keeps every line it relays to that worker (the harness's ACP lines
 * and the tool channel's "@tool" lines, in the order the worker got them), up to
 * KEEPER_TURN_LOG_MAX bytes.
 *
 * If the worker's connection goes away before the turn ended ("#park", "#await", "#destroy"),
 * the keeper holds the turn instead of cancelling it: the harness goes on, its output is kept,
 * its requests (permission, tool channel) wait unanswered, the slot stays busy, and a worker
 * that attaches and says "#adopt <turnId>" within the hold window gets "#turn <json>" back and
 * then every kept line, and the relay goes on with it. The adopting worker replays those
 * lines through the (pure) translator to rebuild the turn's state and answers only what the
 * dead worker left unanswered: an answer to a request that is no longer open is dropped here.
 *
 * A turn cannot be held (the old behaviour: the prompt is cancelled, the session marked
 * broken) when its kept lines outgrew KEEPER_TURN_LOG_MAX, or when a runner tool call was
 * already answered by the dead worker (a replay would run that tool a second time). A held
 * turn nobody adopts within its window ("adoptMs" of the JSON) is abandoned the same way.
 */
#ifndef AR_KEEPER_TURN_H
#define AR_KEEPER_TURN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define KEEPER_TURN_LOG_MAX (16u * 1024 * 1024)
#define KEEPER_TURN_ID_MAX 130

struct keeper_turn {
    bool active;  /* announced and not ended */
    bool held;    /* its worker went away: held for an adopter */
    bool adopted; /* the attached worker adopted it: answers to closed requests are dropped */
    bool overflow;
    char id[KEEPER_TURN_ID_MAX];
    int64_t adopt_ms;
    uint64_t calls_base; /* the channel's answered tool calls when it began */
    char *payload;       /* the "#turn" JSON (owned) */
    size_t payload_len;
    struct buf log; /* the lines relayed since */
};

struct keeper;

/* "#turn <json>": a turn begins (the previous one, if any, is forgotten). */
void keeper_turn_begin(struct keeper *k, const char *json, size_t len);
/* One line relayed (or held) for the worker: kept while a turn is active. */
void keeper_turn_keep(struct keeper *k, const char *line, size_t len);
/* The channel's hook (struct keeper_channel_worker.keep): ctx is the keeper. */
void keeper_turn_keep_tool(void *ctx, const char *line, size_t len);
/* The turn ended on its worker ("#park", "#await", "#destroy", teardown). */
void keeper_turn_end(struct keeper *k);
/* The worker went away mid-turn: true when the turn is now held (else the caller cancels). */
bool keeper_turn_hold(struct keeper *k);
/* "#adopt <id>": answer "#turn" + the kept lines, or "#noturn". */
void keeper_turn_adopt(struct keeper *k, const char *id, size_t len);

#endif
