/*
 * log — one JSON line per event on stderr (journald keeps stderr of the master and workers).
 *
 *   {"ts":"2026-11-29T10:00:00.123Z","level":"info","pid":42,"component":"worker",
 *    "msg":"turn finished","requestId":"...","sessionKey":"...","turnId":"...","harness":"pi"}
 *
 * The level is checked before any argument is evaluated. Messages are lower case, without a
 * final period, with the subject in quotes. The per-thread context (request id, session key,
 * turn id, harness) is attached to every line the thread writes until it is cleared.
 * Values that must never be logged (credentials) are registered per thread with
 * log_redact_add(); every line is scrubbed of them before it is written.
 */
#ifndef AR_LOG_H
#define AR_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum log_level { LOG_LEVEL_ERROR = 0, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

extern int log_max_level;

void log_setup(const char *component, enum log_level level);
/* Parse "error", "warn", "info", "debug"; -EINVAL otherwise. */
int log_level_parse(const char *s, enum log_level *ret);
/* log_max_level from the variable name when it is set to a valid level (else unchanged). */
void log_level_from_env(const char *name);

void log_ctx_set(const char *request_id, const char *session_key, const char *turn_id,
                 const char *harness);
void log_ctx_clear(void);
/*
 * Remember a secret for this thread's lines (copied; values shorter than 4 bytes ignored; at
 * most 1024 per thread). A secret that cannot be remembered (the cap, no memory) is never
 * dropped silently: every later line of the thread (and log_redact_copy) is withheld, its
 * message replaced by a fixed notice, until log_redact_clear().
 */
void log_redact_add(const char *secret);
void log_redact_clear(void);
/* A malloc'ed copy of s, at most max bytes, with this thread's secrets replaced. */
char *log_redact_copy(const char *s, size_t max);
/*
 * Whether data holds one of this thread's secrets (true too when a secret could not be
 * registered: then nothing can be vouched for). For stores that must never hold a credential.
 */
bool log_redact_found(const void *data, size_t len);

/*
 * A budget of log lines for what a hostile party can provoke (a sandbox looping on refused
 * connects): at most per_s lines a second. The lines over it are only counted; the first call
 * of a later second hands their number back, for one line saying how many were not logged.
 * Zero-initialise it; one thread at a time.
 */
struct log_budget {
    int64_t window_ms; /* start of the current one-second window (util_now_ms) */
    unsigned logged;   /* lines in the window */
    uint64_t dropped;  /* lines counted but not logged in the window */
};

/*
 * Whether one more line may be logged now. *ret_dropped is the number of lines the window
 * that just ended did not log (0 unless this call began a new window after such lines).
 */
bool log_budget_take(struct log_budget *b, unsigned per_s, uint64_t *ret_dropped);

void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_at(lvl, ...)                                                                        \
    do {                                                                                        \
        if ((int)(lvl) <= log_max_level)                                                        \
            log_write((lvl), __VA_ARGS__);                                                      \
    } while (0)
#define log_error(...) log_at(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_at(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_at(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_at(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
