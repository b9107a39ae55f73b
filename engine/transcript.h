/*
 * transcript — the cold replay text (reference/agenta-runner.md §3.19). When a turn starts
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
 */
#ifndef AR_TRANSCRIPT_H
#define AR_TRANSCRIPT_H

#include <stddef.h>

#include "buf.h"
#include "contracts.h"

#define TRANSCRIPT_HISTORY_MAX 100000
#define TRANSCRIPT_RESULT_MAX 4000

/* Render one message's content ("[image]", tool calls, results) into out. */
int transcript_render_message(const struct chat_message *m, struct buf *out);

/*
 * The text of a cold turn: the latest user text alone when there is no earlier message,
 * else the replay. closing replaces the default closing line (NULL = default); with a closing
 * every message, the tail included, is replayed (the tail answers approvals, it is no prompt).
 * Approval answers render as "[user APPROVED x (call id); the call has NOT run yet]" and
 * "[user DENIED x (call id); the call was not executed]".
 */
int transcript_turn_text(const struct run_request *req, const char *closing, struct buf *out);

#endif
