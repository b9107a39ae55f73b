/*
 * daytona_exec — the exec seam, as Paperclip's: run one command in a Daytona sandbox, hand
 * its output to the caller in order while it runs, and describe the run as a `sandbox.exec`
 * span.
 *
 * A command runs in a session of its own (so a timeout can kill exactly its process group by
 * deleting the session, and it never queues behind the harness), wrapped in `( ... )` so a
 * top-level `exit` cannot end the session shell. Output is the followed log, demultiplexed in
 * order (daytona_demux, reconnects deduplicated by byte offset). When the command is over, the
 * final stdout/stderr are read once more (non-follow logs) and, per stream, the undelivered
 * suffix is delivered: the part of the final text after what was streamed, or the whole final
 * text when it does not start with what was streamed (repeat rather than lose or corrupt).
 *
 * Span: attributes come from a closed allowlist (daytona_exec_attr_allowed); the command is
 * reduced to its program when that is one of a fixed list of verbs, else "other"; sandbox ids
 * are SHA-256 hashed to 12 hex digits; a number that is not finite is left out, never 0/NaN.
 */
#ifndef AR_DAYTONA_EXEC_H
#define AR_DAYTONA_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "provider/daytona/daytona_api.h"
#include "provider/daytona/daytona_demux.h"
#include "provider/daytona/daytona_toolbox.h"

#define DAYTONA_EXEC_OUTPUT_MAX (1u << 20) /* kept per stream for the result */

/* Receives output in order; a negative return is remembered and returned by daytona_exec()
 * (the command still runs to its end, as in Paperclip: a failed sink does not kill it). */
typedef int (*daytona_exec_fn)(void *ctx, enum daytona_stream s, const uint8_t *data, size_t len);

struct daytona_exec_opts {
    long timeout_ms;           /* 0 = none; when it runs out the session is deleted (timed_out) */
    size_t max_output;         /* per stream in the result; 0 = DAYTONA_EXEC_OUTPUT_MAX */
    daytona_exec_fn on_output; /* may be NULL */
    void *ctx;
};

struct daytona_exec_result {
    int exit_code; /* valid when exited */
    bool exited;
    bool timed_out;
    bool truncated; /* a stream passed max_output in the result (streaming was complete) */
    struct buf out; /* final stdout */
    struct buf err; /* final stderr */
    double wall_ms;
    unsigned reconnects;
};

/*
 * Run command. 0 when the command ran (whatever its exit code) or timed out; < 0 when the
 * sandbox could not run it (err says why) or when on_output failed (its code).
 * daytona_exec_result_release() frees the buffers (always, also after a failure).
 */
int daytona_exec(struct daytona_client *c, const char *tb, const char *command,
                 const struct daytona_exec_opts *o, struct daytona_exec_result *ret, char *err,
                 size_t errlen);
void daytona_exec_result_release(struct daytona_exec_result *r);

/* The program of command when it is on the verb list, else "other". Never NULL. */
const char *daytona_exec_command_label(const char *command);
bool daytona_exec_attr_allowed(const char *key);

/*
 * The span attributes of one exec: res NULL when the provider failed (outcome failed).
 * Returns a new object with only allowlisted keys.
 */
int daytona_exec_span_attrs(const char *sandbox_id, const char *command,
                            const struct daytona_exec_result *res, bool critical_path,
                            json_object **ret);

/* 12 hex digits of SHA-256 of id (ids on spans are never raw). */
int daytona_hash_id(const char *id, char ret[13]);

#endif
