/*
 * keeper_relay — the lines between the harness, the attached worker and the sandbox's tool
 * channel. Harness lines go to the attached worker (only ACP objects: the harness cannot pose
 * as the keeper); worker lines go to the harness, or are control lines ("#park", "#await",
 * "#destroy", "#claim", "@tool") handled here. While no worker is attached the keeper answers
 * the harness itself: permission requests are rejected, other requests get -32601,
 * notifications are dropped and counted. A worker that vanishes mid-prompt leaves its turn held
 * for a worker that adopts it (keeper_turn.h); one whose turn cannot be held, or is not adopted
 * in time, gets its prompt cancelled (session/cancel) and the slot's history marked broken.
 */
#ifndef AR_KEEPER_RELAY_H
#define AR_KEEPER_RELAY_H

#include <stdbool.h>

#include "keeper_state.h"

/* A worker connects: the first one is attached and greeted ("#hello"), a second gets "#busy". */
void keeper_relay_accept(struct keeper *k);
/*
 * A line for the worker ("=" ACP, "#model"): queued to the attached worker; a turn in flight
 * keeps it (keeper_turn.h); a held turn only keeps it; with neither it is dropped.
 */
void keeper_relay_to_worker(struct keeper *k, const struct keeper_msg *m);
/*
 * Read what fd has and handle each complete line: from_child, the harness's stdout, else the
 * attached worker's socket. *stop when the keeper must end (a "#destroy", a refused claim, an
 * overlong harness line: k->fail says why). A closed fd is closed here (the worker's: detached).
 */
void keeper_relay_read(struct keeper *k, int *fd, struct acp_lines *lines, bool from_child,
                       bool *stop);
/*
 * The attached worker went away: a turn in flight is held for an adopter (keeper_turn.h);
 * otherwise detach it (see the top) and start the idle window.
 */
void keeper_relay_client_gone(struct keeper *k);
/* A held turn nobody adopted in time: cancelled as for a worker that vanished (see the top). */
void keeper_relay_abandon(struct keeper *k);
/* The harness's stderr into harness.log (capped at HARNESS_LOG_MAX). */
void keeper_relay_drain_stderr(struct keeper *k);

#endif
