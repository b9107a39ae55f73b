/*
 * records_incomplete — the "records incomplete" marks: a session one of whose records was
 * dropped (refused after its retries, or over a queue's caps) has a hole in its log, and a
 * later rebuild of its history must fail instead of answering without that context. A mark
 * is kept in this process (at most RECORDS_INCOMPLETE_MAX, the oldest forgotten first) and,
 * once records_incomplete_dir() named a folder, as a file there (<dir>/<sha256 of the key>,
 * holding the key), so every worker of the runner sees it, and a restarted runner too: the
 * hole in the session's log is permanent, and so is the refusal to rebuild its conversation.
 * Any thread.
 */
#ifndef AR_RECORDS_INCOMPLETE_H
#define AR_RECORDS_INCOMPLETE_H

#include <stdbool.h>

#define RECORDS_INCOMPLETE_MAX 4096 /* sessions remembered as incomplete in memory */

/*
 * The folder the marks are shared in; NULL or "" goes back to marks of this process only.
 * -EINVAL for a path that is not absolute or too long. Call it before any emitter exists.
 */
int records_incomplete_dir(const char *dir);
/* Whether a record of this session was ever dropped (here, or by a process sharing the folder). */
bool records_incomplete_has(const char *session_key);
/* Mark the session (its key: "<projectId>:<sessionId>", or the session id) incomplete. */
void records_incomplete_note(const char *session_key);

#endif
