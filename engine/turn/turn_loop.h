/*
 * turn_loop — the state of one turn's loop, shared by run_turn.c (the loop) and turn_tools.c
 * (the runner's tools inside it; nothing else includes this header): the struct both work on,
 * and the two answers both give the harness (a keeper channel line, a gate's decision).
 */
#ifndef AR_TURN_LOOP_H
#define AR_TURN_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "core/contracts.h"
#include "proto/acp.h"
#include "turn/events.h"
#include "turn/run_limits.h"
#include "turn/turn_channel.h"
#include "turn/turn_env.h"
#include "turn/turn_translate.h"

#define PAUSE_QUIET_MS 150 /* gates that arrive together park together */

enum loop_exit {
    LOOP_RUNNING = 0,
    LOOP_DONE,          /* the prompt's response arrived */
    LOOP_PAUSED,        /* gates wait for the client: the prompt stays in flight */
    LOOP_FAIL,          /* the environment cannot be reused */
    LOOP_FAIL_REUSABLE, /* the harness failed the prompt but is fine */
};

struct turn_loop {
    const struct turn_env *te;
    const struct turn_options *opt;
    struct event_stream *es;
    struct run_result *res;
    struct turn_outcome *out;
    struct run_limits limits;
    struct turn_state st;
    struct approval_gate gates[APPROVAL_GATES_MAX];
    size_t ngates;
    char waiting_for[APPROVAL_GATES_MAX][160]; /* approved calls still running (resume) */
    size_t nwaiting;
    int64_t prompt_id;
    int64_t quiet_until;     /* pause once nothing arrived until then (0 = none) */
    int64_t cancel_deadline; /* cancelling: the harness must have stopped by then */
    uint64_t seen_events;
    uint64_t start_events;
    bool cancelling;
    enum loop_exit exit;
    int rc;           /* LOOP_FAIL / LOOP_FAIL_REUSABLE: why, as an error code */
    const char *code; /* the error event's code when one was named (NULL: the default one) */
    char why[256];
    /* the last model failure the channel reported (pi-acp hides it), and its code */
    char model_error[256];
    const char *model_error_code;
    /* the model gateway's view of the turn (turn_model.h; opt->measured) */
    struct run_usage measured; /* the sum of the calls' usage */
    unsigned measured_calls;
    unsigned unmeasured_calls; /* answered calls whose usage the gateway could not read */
    bool syncing;              /* the prompt answered; waiting for TURN_MODEL_SYNCED */
    bool synced;               /* ... which came (or its deadline passed) */
    int64_t sync_deadline;     /* monotonic ms */
    struct acp_msg held;       /* the prompt's answer, while syncing */
    const char *gateway_code;  /* what went wrong at the gateway last (error code), or NULL */
    char gateway_why[256];
};

/* One keeper channel line to the sandbox (dropped when the turn has no channel). */
void turn_loop_send_tool_line(const struct turn_env *te, const struct buf *line);
/*
 * Answer a gate's request, ACP's or the channel's: allow (with the ACP option), deny (the
 * reject option; by_user: the user's decision, else the plan's) or cancelled.
 */
void turn_loop_answer_gate(const struct turn_env *te, bool channel, const char *id_json,
                           enum turn_channel_answer a, const char *option, const char *tool,
                           bool by_user);

#endif
