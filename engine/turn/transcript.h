/*
 * transcript — the cold replay text (the text Agenta's own runner replays). When a turn starts
 * without a live session but the request carries earlier messages, the harness gets the
 * conversation so far as text, capped from the front, and a closing line with the new user
 * message:
 *
 *   Conversation so far:
 *   user: ...
 *   assistant: ... [called bash({"command":"ls"})] [bash returned: "a b"]
 *
 *   Continue the conversation. The user now says:
 *   <latest user text>
 *
 * It also reads the approvals a request answers (tool_result blocks whose output is
 * {"approved": bool, "interactionToken"?}) and builds a turn's ACP prompt.
 */
#ifndef AR_TRANSCRIPT_H
#define AR_TRANSCRIPT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "core/contracts.h"
#include "core/policy.h"

#define TRANSCRIPT_HISTORY_MAX 100000
#define TRANSCRIPT_RESULT_MAX 4000

/*
 * The text of a cold turn: the latest user text alone when there is no earlier message,
 * else the replay. closing replaces the default closing line (NULL = default); with a closing
 * every message, the tail included, is replayed (the tail answers approvals, it is no prompt).
 * Approval answers render as "[user APPROVED x (call id); the call has NOT run yet]" and
 * "[user DENIED x (call id); the call was not executed]".
 */
int transcript_turn_text(const struct run_request *req, const char *closing, struct buf *out);

/*
 * The ACP prompt of a turn (a new JSON array of content blocks): the tail user message's
 * text, or with replay the cold replay text, plus its inline images when the harness takes
 * images (else each is named in the text).
 */
json_object *transcript_prompt(const struct run_request *req, bool replay, bool images);
/* The prompt of a cold turn whose request answers approvals a lost session was waiting on. */
json_object *transcript_approval_prompt(const struct run_request *req);

/* The tail message only answers approvals or client tools (tool_result blocks, no new
 * user text). */
bool transcript_answers_only(const struct run_request *req);
/*
 * The request's decision on gate g: -1 none (or an answer to another interaction), 0, 1. An
 * answer is a tool_result block, in a user or an assistant message, whose output is
 * {"approved": bool, "interactionToken"?}: with a token it answers the gate whose token
 * (the interaction_request's id) it names; without one, the gate whose call (or token) its
 * toolCallId names. The latest answer wins.
 */
int transcript_gate_decision(const struct run_request *req, const struct approval_gate *g);
/*
 * A client tool gate (kind GATE_CLIENT) is answered by a tool_result naming its call (or its
 * token) whose output is the browser's result: 1; {"approved": false}: 0 (the browser would
 * not run it).
 */
/*
 * The browser's result for a client tool call: the latest tool_result naming call_id, else
 * one answering an earlier tool_call of the same tool with the same canonical arguments (a
 * cold replay calls again). A new reference and *ret_is_error, or NULL.
 */
json_object *transcript_client_output(const struct run_request *req, const char *call_id,
                                      const char *tool, json_object *args, bool *ret_is_error);
/* The last message carries approval answers naming an interactionToken. */
bool transcript_tail_has_tokens(const struct run_request *req);
/*
 * A decision stored in the transcript: a tool_call with the same tool (case-insensitive) and
 * canonical arguments whose approval was answered; PERMISSION_UNSET when none was.
 */
enum permission transcript_stored_decision(const struct run_request *req, const char *tool,
                                           json_object *args);

#endif
