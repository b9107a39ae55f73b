/*
 * platform_ledger — the turns ledger of platform mode: one row per turn in Agenta's API
 * (POST /sessions/turns/), index = the session's latest row's + 1 (an approval resume whose
 * latest row is still open reuses it), harness_kind pi_core|pi_agenta|claude|codex|opencode,
 * completed (with the harness's ACP session) when the turn completed. Each run's ledger works
 * on a detached thread of its own, so a slow or failing API never holds the turn back; a
 * ledger that cannot read the latest row writes none (a wrong index would complete another
 * turn's row).
 */
#ifndef AR_PLATFORM_LEDGER_H
#define AR_PLATFORM_LEDGER_H

#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include "agenta/agenta_api.h"

struct platform_ledger;

struct platform_ledger_params {
    struct agenta_api *api; /* a reference is taken */
    const char *session_id;
    const char *turn_id;   /* sent only when it is a canonical UUID */
    const char *stream_id; /* the heartbeat's stream; NULL or "": no row at all */
    const char *harness_kind;
    const char *trace_id;     /* 32 hex digits, else no trace id is sent */
    const char *span_id;      /* 16 hex digits or "" */
    json_object *run_context; /* borrowed: its workflow references are copied */
    bool resume;              /* an approval resume: the latest open row is this turn's */
};

/*
 * Start the ledger of one run: its thread writes the row at once and completes it once
 * platform_ledger_finish() said the turn completed. NULL when there is none to write (no
 * stream, out of memory, no thread). The caller holds one reference.
 */
struct platform_ledger *platform_ledger_start(const struct platform_ledger_params *lp);
/* The turn ended (completed or not); agent_session_id may be NULL. NULL l is a no-op. */
void platform_ledger_finish(struct platform_ledger *l, bool completed,
                            const char *agent_session_id);
/* Drop the caller's reference (the thread holds its own). */
void platform_ledger_unref(struct platform_ledger *l);
/* Wait until every ledger thread of the process is gone. 0, or -ETIMEDOUT at deadline_ms
 * (monotonic). */
int platform_ledger_wait_all(int64_t deadline_ms);

#endif
