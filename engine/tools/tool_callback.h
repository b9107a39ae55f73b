/*
 * tool_callback — execute a callback tool or a direct call on the runner, as Agenta's own
 * runner does (its tools/callback.ts and tools/direct.ts).
 *
 * Callback tools (callRef): POST toolCallback.endpoint with
 *     {"data":{"id":<toolCallId>,"type":"function","function":{"name":<callRef>,
 *                                                           "arguments":<object>}}}
 * and the headers content-type: application/json, authorization: <toolCallback.authorization>
 * (when given), x-agenta-run-kind: <runContext.run.kind> (when given). The arguments are the
 * model's, minus the spec's ephemeralArgs, with contextBindings applied (tool_args.h). The
 * reply {"call":{"data":{"content"}, "status":{"code","message"}}}: status.code
 * STATUS_CODE_ERROR is a tool error carrying the message and content; a string content is the
 * result; other content is its JSON; a body that is not JSON is the result as is. Non-2xx: a
 * tool error naming only the status.
 *
 * Direct calls (call): the request tool_direct.h builds, with the same headers; the reply body
 * is the result; non-2xx is a tool error naming only the status.
 *
 * Both: timeout spec.timeoutMs + 10 s, else 30 s; the raw body read stops at 4,000,000 bytes;
 * the result text is capped at result_max (100,000) bytes, cut at a UTF-8 boundary, with
 * Agenta's " [... N bytes omitted]" marker and its "Narrow your query ..." note; no redirects
 * are followed. A missing required argument (inputSchema.required) is a tool error before any
 * request. Every failure is a tool result with is_error set, never a failed turn; the
 * authorization is added to the thread's log redaction set and never appears in a result or a
 * log line.
 */
#ifndef AR_TOOL_CALLBACK_H
#define AR_TOOL_CALLBACK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include "base/buf.h"
#include "tools/tool_spec.h"

#define TOOL_RESULT_MAX_DEFAULT 100000u
#define TOOL_RAW_READ_MAX 4000000u
#define TOOL_TIMEOUT_DEFAULT_MS 30000u
#define TOOL_TIMEOUT_GRACE_MS 10000u

/* Agenta's note after a capped result. */
extern const char tool_callback_steering[];

struct tool_call_ctx {
    const char *endpoint;        /* the tool set's callback endpoint */
    const char *authorization;   /* this turn's toolCallback.authorization, or NULL */
    json_object *run_context;    /* the request's runContext (borrowed), or NULL */
    const char *session_id;      /* the live session id, or NULL */
    size_t result_max;           /* 0 = TOOL_RESULT_MAX_DEFAULT */
    uint64_t default_timeout_ms; /* 0 = TOOL_TIMEOUT_DEFAULT_MS */
    const atomic_int *cancel;    /* non-zero aborts the call, or NULL */
    CURL *curl;                  /* a handle kept by the calling thread, or NULL */
};

/*
 * Run one call of spec (exec CALLBACK or DIRECT) with the model's args (borrowed, may be
 * NULL). 0 and a result (is_error for every tool failure), -ECANCELED when ctx->cancel was
 * raised (no result), -EINVAL for a spec of another kind, -ENOMEM.
 */
int tool_callback_run(const struct tool_call_ctx *ctx, const struct tool_spec *spec,
                      const char *tool_call_id, json_object *args, struct tool_result *ret);

/*
 * Append text[0..len) to out, capped at max bytes in total: a longer text keeps the longest
 * prefix (never a split UTF-8 sequence) that leaves room for " [... N bytes omitted]" and,
 * when note is not NULL, "\n\n" + note.
 */
int tool_callback_cap(const char *text, size_t len, size_t max, const char *note,
                      struct buf *out);

#endif
