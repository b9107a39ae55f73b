/*
 * records — the persisting emitter of a session run in platform mode: every live event of the
 * turn also becomes a record of the session's log in Agenta's API (POST
 * /sessions/records/ingest), coalesced the way Agenta's own runner coalesces them, so the
 * session view, the turns and the history rebuilt from the log (reconstruct.h) match what
 * Agenta itself writes.
 *
 * What becomes a record (records_event, called with every event the turn emits, the same
 * json objects events.c writes; borrowed, never changed):
 *   - message_start/delta/end -> one {"type":"message","text"} at the end; thought_* -> one
 *     {"type":"thought","text"}; a delta or end without its start is kept as it is;
 *   - successive tool_call snapshots for one id -> one record, the latest snapshot, with the
 *     index of the first; it goes out when any other event arrives or after tool_ttl_ms
 *     (3000) without a new snapshot;
 *   - data with transient:true and the live-only {"type":"turn"} are never persisted;
 *   - tool_call, tool_result, interaction_request and interaction_response with an id carry
 *     the stable record id of ids.h (ids_record_id) so a retry or a re-sent snapshot upserts
 *     one row;
 *   - everything else is persisted as it is.
 * Each record gets record_index 0, 1, 2... in the order the turn produced it (per turn, as
 * Agenta does; the API orders a session's log by ingest time, then index), source "agent", or
 * "user" for the inbound user message, which the caller persists first (records_persist with
 * records_user_message). Attributes are a deep copy with every value of the run's redaction
 * set replaced (redact.h); the live event is not touched.
 *
 * Delivery is records_outbox.h's: one ordered queue per session in this process, drained by a
 * background thread; records_event only copies, redacts and queues, so a slow or failing API
 * never blocks or fails the turn's event stream. Durable mode (default) tries a record up to
 * ingest_max_retries times with 100 * 2^(n-1) ms between tries (else 3 tries, linear); a
 * record that is still refused is dropped and marks the session's records incomplete
 * (records_incomplete.h), which makes a later rebuild of the history fail instead of
 * answering without context. A queue over its caps drops the same way.
 *
 * Threads: the caller's (records_new, records_event, records_persist, records_send,
 * records_flush, records_free: one thread per struct records) and one delivery thread per
 * busy session queue. No lock of the pool is ever taken.
 */
#ifndef AR_RECORDS_H
#define AR_RECORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "agenta/agenta_api.h"
#include "agenta/redact.h"
#include "core/contracts.h"

#define RECORDS_BODY_MAX (32u * 1024 * 1024) /* one record */
#define RECORDS_OPEN_MAX 16                  /* message/thought blocks open at once */

struct records_params {
    const char *session_key; /* the queue's identity: "<projectId>:<sessionId>" or sessionId */
    const char *session_id;  /* sent as session_id and part of stable ids */
    const char *turn_id;     /* sent as turn_id, part of stable ids; may be NULL */
    const char *span_id;     /* runContext.trace.span_id, may be NULL */
    /* delivery policy; 0 = the agenta_config of the api */
    uint64_t backoff_base_ms; /* 100 */
};

struct records;

/*
 * The emitter of one turn. Takes a reference on api (released by records_free or by the last
 * record still queued); rd is borrowed and must outlive records_free (only the caller's
 * thread uses it). -ENOMEM, -EINVAL without a session key or id.
 */
int records_new(struct agenta_api *api, struct redact *rd, const struct records_params *p,
                struct records **ret_records);

/* The per-event hook (see the top). Never blocks on the API; a record that cannot be queued
 * is dropped and marks the session incomplete. ev is borrowed. */
void records_event(struct records *r, json_object *ev);

/*
 * Persist one out-of-band record (the inbound user message) through the same ordered queue
 * and index counter, after the open tool call if there is one. ev is borrowed.
 */
int records_persist(struct records *r, json_object *ev, const char *source);

/*
 * The inbound user message as Agenta persists it, {"type":"message","text",
 * "attachments":[{attachmentId, filename?, mediaType?, size?}]}, when the request's tail is a
 * fresh user message (role user, no tool_call/tool_result block, some text, attachment or
 * inline image); -ENOENT otherwise. A new reference in *ret_event.
 */
int records_user_message(const struct run_request *req, json_object **ret_event);

/*
 * Queue any other call (an interaction row, a cancel-stale, a turn completion) behind this
 * session's records, fire and forget: it is tried `attempts` times with linear backoff and
 * never marks the session incomplete. body is borrowed (serialised at once).
 */
int records_send(struct records *r, const char *path, json_object *body, unsigned attempts);

/*
 * Send the open tool call and wait until every record this emitter queued has been
 * delivered or dropped, or until deadline_ms (monotonic, util_now_ms()) passes. 0: every record
 * landed (a failed records_send call is only logged); -EIO: at least one record was dropped
 * (in durable mode the session is now incomplete); -ETIMEDOUT: some are still queued (they
 * keep going in the background).
 */
int records_flush(struct records *r, int64_t deadline_ms);

/* Send the open tool call and let go: what is still queued keeps being delivered. NULL is a
 * no-op. */
void records_free(struct records *r);

#endif
