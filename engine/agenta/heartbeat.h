/*
 * heartbeat — the session watchdog of a session run in platform mode, as Agenta's runner keeps
 * it (README "Platform mode (Agenta)"): the alive lock in Agenta's API, the admission answer,
 * the stream id, the interrupt signal and the credential refresh.
 *
 *   heartbeat_start   sends the first beat and waits for it (POST /sessions/streams/heartbeat
 *                     {session_id, replica_id, turn_id, is_running:true, name?, references?}).
 *                     Its answer admits the turn or not (`admitted`, else `is_current_turn`;
 *                     a beat that fails is fail-open: admitted, no stream id) and gives the
 *                     stream id. An admitted turn gets a timer thread that beats every
 *                     heartbeat_interval_ms (30 s) and refreshes the run credential every
 *                     refresh_every-th beat (10: GET /access/permissions/check; the new one
 *                     goes into the client and the run's redaction set). A later answer with
 *                     is_current_turn:false (a Stop, a steer, a kill from the platform) calls
 *                     on_interrupted once.
 *   heartbeat_release stops the timer (an in-flight beat is aborted) and sends the final beat
 *                     with is_running:false, for a refused turn too; call it on every exit.
 *
 * A refused turn (admitted false) must stop before any side effect (no record, no
 * interaction sweep, no environment) with error code HEARTBEAT_REFUSED_CODE and message
 * HEARTBEAT_REFUSED_MESSAGE, as Agenta's runner does.
 *
 * Threads: the caller's, and one timer thread per admitted run. on_interrupted runs on the
 * timer thread with no lock held; it must only signal the turn (set a flag, write an eventfd).
 */
#ifndef AR_HEARTBEAT_H
#define AR_HEARTBEAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "agenta/agenta_api.h"
#include "agenta/redact.h"
#include "core/contracts.h"

#define HEARTBEAT_REFUSED_CODE "session_turn_in_use"
#define HEARTBEAT_REFUSED_MESSAGE                                                               \
    "This session is already running a turn. Your message was not sent. Wait for the reply, " \
    "or stop the turn, then send again."
#define HEARTBEAT_NAME_MAX_CODEPOINTS 60
#define HEARTBEAT_NAME_MAX (HEARTBEAT_NAME_MAX_CODEPOINTS * 4 + 1)

struct heartbeat_params {
    const char *session_id;
    const char *turn_id;
    const char *name;          /* heartbeat_session_name(), may be NULL */
    json_object *references;   /* agenta_workflow_reference_list(), borrowed, may be NULL */
    struct redact *rd;         /* refreshed credentials join it; outlives heartbeat_release */
    void (*on_interrupted)(void *ctx); /* may be NULL */
    void *ctx;
    uint64_t interval_ms;      /* 0 = the api's heartbeat_interval_ms */
};

struct heartbeat_first {
    bool answered;                 /* the API answered the first beat */
    bool admitted;                 /* false: refuse the turn (HEARTBEAT_REFUSED_*) */
    char stream_id[AGENTA_ID_MAX]; /* "" when the API gave none */
};

struct heartbeat;

/*
 * Send the first beat (waits for it, at most AGENTA_HEARTBEAT_TIMEOUT_MS) and, when admitted,
 * start the timer. Fails only for -EINVAL (no session or turn id), -ENOMEM or a thread that
 * cannot start; an API that fails or is slow admits the turn (fail-open). Takes a reference on
 * api.
 */
int heartbeat_start(struct agenta_api *api, const struct heartbeat_params *p,
                    struct heartbeat **ret_hb, struct heartbeat_first *ret_first);

/* The latest stream id a beat returned ("" when none). */
void heartbeat_stream_id(struct heartbeat *hb, char *out, size_t outlen);

/* Stop the timer, send the final beat (is_running:false), free. NULL is a no-op. */
void heartbeat_release(struct heartbeat *hb);

/*
 * The name a run proposes for its session: the first user message with text (its text blocks
 * joined), trimmed of white space, cut to 60 code points. -ENOENT when no user message has
 * text. out must hold HEARTBEAT_NAME_MAX bytes.
 */
int heartbeat_session_name(const struct run_request *req, char *out, size_t outlen);

#endif
