/*
 * reconstruct — a session's earlier turns rebuilt from its record log in Agenta's API, as
 * Agenta's runner does before a cold turn (on unless AGENTA_SESSIONS_RECONSTRUCT=false), so a
 * platform that sends only the newest user message keeps its conversation across a cold start.
 *
 * It applies when the request carries a minimal history (exactly one message, a fresh user
 * message: reconstruct_minimal_history) or only an approval answer with no user text
 * (reconstruct_approval_reply_only), and no warm environment holds the conversation. Then:
 *   1. a session whose records were dropped, here or by another worker
 *      (records_incomplete_has, records_incomplete.h), fails: "session <id> lost a durable
 *      record; refusing to rebuild an incomplete conversation" — the client kept no copy,
 *      answering without context would look right and be wrong;
 *   2. POST /sessions/records/query {session_id}; an unreadable log fails the same way;
 *   3. the current turn's records (turn_id) are dropped: the user message of this turn was
 *      persisted before the turn started (records.h) and is the inbound message;
 *   4. the rest is folded in order into ChatMessages exactly as Agenta's reconstructMessages
 *      does: a "user" record starts a user message (its text, and its attachments as
 *      attachment blocks), "agent" records accumulate into one assistant message: message ->
 *      text, tool_call -> tool_call block (toolCallId, toolName, input), tool_result ->
 *      tool_result block (toolCallId, toolName of its call, output ?? data, isError), error ->
 *      "[error: <message>]"; thoughts, usage, done, data and interaction records are no
 *      conversation and are left out. An all-text assistant message becomes a string.
 *      Tool blocks without an id are left out (nothing can bind to them); a string longer
 *      than RECONSTRUCT_STRING_MAX is cut (at a UTF-8 boundary) with a marker: the cold replay
 *      keeps only the last 100 000 characters anyway (transcript.h).
 * reconstruct_splice then makes the request [rebuilt..., inbound...] by parsing it again
 * through request_parse, so everything downstream (transcript_turn_text, the fingerprints,
 * the approval bookkeeping) reads ordinary messages.
 *
 * An approval reply with nothing to rebuild (no other turn, nothing left after folding) fails
 * too: it has no task of its own. A minimal fresh message with an empty log is a first turn:
 * success with no messages.
 */
#ifndef AR_RECONSTRUCT_H
#define AR_RECONSTRUCT_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "agenta/agenta_api.h"
#include "core/contracts.h"
#include "request/request.h"

#define RECONSTRUCT_STRING_MAX (1024u * 1024)

struct reconstruct_history {
    json_object *messages; /* ChatMessage[] in the wire shape (owned); [] when nothing */
    size_t nrecords;       /* rows the log held */
    size_t nprior;         /* of them, rows of earlier turns */
};

void reconstruct_history_init(struct reconstruct_history *h);
void reconstruct_history_release(struct reconstruct_history *h);

/* The request carries exactly one message, a fresh user message with content. */
bool reconstruct_minimal_history(const struct run_request *req);
/* No user text anywhere and the last tool envelope answers an approval ({approved:bool}). */
bool reconstruct_approval_reply_only(const struct run_request *req);

/*
 * Fold query rows (a JSON array, borrowed) into *ret (pure). Rows of current_turn_id (NULL:
 * none) are dropped. -ENOMEM only; rows of the wrong shape are skipped.
 */
int reconstruct_from_records(json_object *records, const char *current_turn_id,
                             struct reconstruct_history *ret);

/*
 * Steps 1-4 against the API. 0 with *ret filled (possibly no messages), or -errno with a
 * message for the user in err: -ENOTRECOVERABLE (records incomplete), the query's error
 * (unreadable log), -ENOENT (an approval reply with nothing to rebuild).
 */
int reconstruct_fetch(struct agenta_api *api, const char *session_key, const char *session_id,
                      const char *turn_id, bool approval_reply_only,
                      struct reconstruct_history *ret, char *err, size_t errlen);

/*
 * Replace *req by the same request whose messages are the rebuilt ones followed by its own,
 * parsed again with lim (the turn id, minted or not, is kept). Messages beyond
 * lim->max_messages are dropped from the front. On failure *req is left as it was and err
 * says why (AR_E_INVALID_REQUEST from the parser, -ENOMEM).
 */
int reconstruct_splice(const struct reconstruct_history *h, const struct request_limits *lim,
                       struct run_request *req, char *err, size_t errlen);

#endif
