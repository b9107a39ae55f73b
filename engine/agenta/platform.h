/*
 * platform — a session run as a participant of Agenta's platform: the runner takes the turn
 * under Agenta's session lock (the heartbeat), writes the turn's events to the session's log
 * (records), its approvals as interaction rows and the turn to the turns ledger, rebuilds a
 * cold session's conversation from the log, and delivers attachments. It drives the building
 * blocks (agenta_api, redact, heartbeat, records, reconstruct, platform_attach,
 * platform_ledger) from a handful of calls in engine_run and from the turn's event stream, so
 * the turn loop itself knows nothing of it.
 *
 * Only a run with a sessionId, on a runner whose engine_config names Agenta's API
 * (cfg->agenta, AGENTA_API_INTERNAL_URL then AGENTA_API_URL), takes part: for every other run
 * platform_start() hands back no struct, makes no call, and every other function here is a
 * no-op on NULL.
 *
 * A run, in order:
 *   platform_start        before any side effect. Checks the attachments of the new message
 *                         (at most AGENTA_ATTACHMENTS_MAX_PER_TURN, canonical UUID ids), builds
 *                         the run's redaction set (every credential of the request and the run
 *                         credential, telemetry.exporters.otlp.headers.authorization, with which
 *                         every call authenticates) and sends the first heartbeat, awaited.
 *                         admitted:false refuses the run: an `error` event with code
 *                         session_turn_in_use, a failed result, the final beat, nothing else.
 *                         Admitted: the live-only {"type":"turn","turnId"} event goes first,
 *                         then the user's message is persisted (the first record of the turn)
 *                         and its attachments claimed (POST /sessions/attachments/reference).
 *   platform_event        every event of the turn (the stream's observer): a record of the
 *                         session log (records.h, Agenta's coalescing); an interaction row per
 *                         interaction_request (POST /sessions/interactions/); the resolution of
 *                         a row per interaction_response (POST /sessions/interactions/transition).
 *   platform_turn_begins  after the pool lookup, with the gates a parked session waits on:
 *                         POST /sessions/interactions/cancel-stale (those gates, and the ones the
 *                         request answers, are exempt), the rows the request answers without a
 *                         live gate (a cold resume) resolved, and the turns ledger row
 *                         (POST /sessions/turns/, index = the latest row's + 1, harness_kind
 *                         pi_core|pi_agenta|claude|codex|opencode) on a thread of its own
                         (platform_ledger.h).
 *   platform_rebuild      a cold start (no warm environment) of a request that carries only the
 *                         new message (or only approval answers): the earlier turns are rebuilt
 *                         from /sessions/records/query and spliced in front (reconstruct.h), so
 *                         the cold replay has the conversation. A log with a hole, or one that
 *                         cannot be read, fails the turn with a message saying so.
 *   platform_attachments  (platform_attach.h) the new message's `attachment` blocks fetched
 *                         (/sessions/attachments/{id}/content), written to
 *                         <workspace>/attachments/<id>/<file name> (name sanitised, no symlink
 *                         followed, at most AGENTA_ATTACHMENT_MAX bytes), announced with an
 *                         attachment_delivery event and given to the harness: as an image
 *                         block when it takes images and the model declares the modality
 *                         (modelCapabilities.inputModalities), else as a mention of the
 *                         working copy in the prompt text. On a cold replay the attachments of
 *                         earlier messages get their working copies back too.
 *   platform_interrupted  polled by the turn: the platform took the turn back
 *                         (is_current_turn:false on a later beat); the turn is cancelled once.
 *   platform_finish       before the result: every queued record delivered (or dropped) within
 *                         PLATFORM_FLUSH_MS, the ledger row completed when the turn completed,
 *                         the final beat (is_running:false).
 *   platform_free         on every exit.
 *
 * Nothing here holds a lock of the pool or runs under one. Calls on the turn's thread: the
 * first beat (at most AGENTA_HEARTBEAT_TIMEOUT_MS, fail-open), the final beat, the records
 * query of a rebuild and the attachment fetches (their configured timeouts). Every other call
 * (records, interaction rows, cancel-stale, claims) is queued behind the session's records and
 * delivered by the records thread, and the ledger runs on its own thread: a slow or failing API
 * never holds back an event of the turn. No credential appears in a record, a row, an error or
 * a log line: bodies pass through the run's redaction set, errors name calls, not headers.
 */
#ifndef AR_PLATFORM_H
#define AR_PLATFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "core/contracts.h"
#include "request/request.h"
#include "turn/events.h"

#define PLATFORM_FLUSH_MS 5000 /* how long the result waits for the turn's records */
#define PLATFORM_TOKENS_MAX 32 /* interaction tokens a run keeps track of */
#define PLATFORM_INCOMPLETE_DIR "platform/incomplete" /* under the state dir */

struct platform;

/*
 * Once per worker process, before its first run: the "records incomplete" marks go to
 * <state_dir>/PLATFORM_INCOMPLETE_DIR, which every worker shares. No-op without cfg->agenta.
 */
int platform_worker_start(const struct engine_config *cfg);
/* At worker shutdown: wait (until deadline_ms, monotonic) for queued records and ledger
 * threads. 0, or -ETIMEDOUT. */
int platform_worker_stop(int64_t deadline_ms);

/*
 * See the top. key is the pool key ("" without one), trace_id the run's 32 hex digits. 0 with
 * *ret (NULL when the run does not take part); <0 when the run must stop here: the error event
 * has been emitted and res failed (-EBUSY: not admitted; AR_E_INVALID_REQUEST: bad attachments;
 * -E2BIG: a credential the redaction set cannot hold; -ENOMEM).
 */
int platform_start(const struct engine_config *cfg, const struct run_request *req,
                   const char *key, const char *trace_id, struct event_stream *es,
                   struct run_result *res, struct platform **ret);

/* The observer: ev is borrowed, never changed. */
void platform_event(struct platform *p, json_object *ev);

/*
 * The gates a parked session waits on (parked: NULL/0 for a fresh or cold turn), and whether
 * they are resumed live (their answers then come as interaction_response events).
 */
void platform_turn_begins(struct platform *p, const struct run_request *req,
                          const struct approval_gate *parked, size_t nparked, bool live_resume);

/*
 * A cold turn without its history: rebuild it (see the top). 0 when there is nothing to do or
 * *req now carries the rebuilt messages; <0 with a message for the user in err.
 */
int platform_rebuild(struct platform *p, struct run_request *req, const struct request_limits *lim,
                     char *err, size_t errlen);

/*
 * Deliver the new message's attachments into workspace (the host path of the sandbox's
 * /workspace) and prompt (the turn's ACP content blocks, changed in place). restore_history:
 * a fresh workspace, give earlier attachments their working copies back. A failed attachment is
 * announced (outcome "failed") and mentioned as no longer available; the turn goes on.
 */
void platform_attachments(struct platform *p, const struct run_request *req, const char *workspace,
                          const struct harness_caps *caps, bool restore_history,
                          json_object *prompt, struct event_stream *es);

/* The harness's ACP session the turn ran in (the ledger row's agent_session_id). */
void platform_agent_session(struct platform *p, const char *acp_session);

/* The platform took the turn back (is_current_turn:false). */
bool platform_interrupted(struct platform *p);

/* Before the result (see the top). agent_session_id: the harness's ACP session, or NULL for
 * the one platform_agent_session() noted. */
void platform_finish(struct platform *p, const struct run_result *res,
                     const char *agent_session_id);

/* NULL is a no-op. Finishes first when platform_finish was not called (a failed run). */
void platform_free(struct platform *p);

/* ---- pure helpers (unit-tested) ------------------------------------------------------------ */

/* Agenta's harness_kind of a request (pi_core, pi_agenta, claude, codex, opencode); NULL for
 * a harness Agenta has no kind for (the test agent). */
const char *platform_harness_kind(const struct run_request *req);
#endif
