/*
 * request — parse and validate an AgentRunRequest (the JSON body of POST /run: the model and
 * its connection, the messages, harness files, skills, the run's tools, permissions, sandbox
 * permission, lifecycle, telemetry and run context) into a struct run_request. A request this
 * parser accepts never fails later on a parse: the tool sections, too, are checked here in full.
 *
 * Every refusal returns AR_E_INVALID_REQUEST and writes a short message into err that names the
 * offending field ("messages[1].content: expected a string or an array") and never contains a
 * credential value. Unknown fields are ignored (forward compatibility); retired fields are
 * refused.
 */
#ifndef AR_REQUEST_H
#define AR_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "core/contracts.h"
#include "request/request_url.h"

#define REQUEST_ELEMENTS_MAX 250000u

struct request_limits {
    size_t max_messages;        /* default 10000 */
    size_t max_string;          /* any single string, default 4 MiB */
    size_t max_elements;        /* JSON values in the body (jsonx_check_budget), default 250000 */
    bool allow_scripted;        /* the runner was configured with the scripted test agent */
};

void request_limits_default(struct request_limits *lim);

/*
 * Parse body[0..len) into *ret (zeroed first, released by the caller with
 * run_request_release() on success; nothing to release on failure).
 * An empty body is the empty object. -EBADMSG for invalid JSON, AR_E_INVALID_REQUEST for a
 * well-formed document that breaks the contract; err receives the message either way.
 */
int request_parse(const char *body, size_t len, const struct request_limits *lim,
                  struct run_request *ret, char *err, size_t errlen);

/* Parse {"sessionId","projectId","targetTurnId"?,"environmentOnly"?} of /kill and /cancel. */
struct session_ref {
    char session_id[129];
    char project_id[129];
    char target_turn_id[129];
    bool environment_only; /* /kill: end the environment, keep the harness's kept state */
};
int request_parse_session_ref(const char *body, size_t len, struct session_ref *ret, char *err,
                              size_t errlen);

#endif
