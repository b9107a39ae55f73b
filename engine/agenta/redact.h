/*
 * redact — a run's known-value deny set, as Agenta's runner applies it to everything it
 * persists, logs or exports (its "seedForRun"; golden file
 * tests/fixtures/agenta-golden/redaction.known_value.json).
 *
 * The set holds the credential values of one run: every modelConnection credential and
 * environment value, credential-looking endpoint / MCP headers, every MCP server credential,
 * the toolCallback authorization and the run credential
 * (telemetry.exporters.otlp.headers.authorization), plus any value added later (a refreshed run
 * credential). Each value is registered with its URL-encoded and base64
 * forms; a compound value ("scheme://user:pass@host", "user:pass") also registers its halves
 * of 8+ bytes, matched only on word boundaries, and an "<scheme> <token>" authorization also
 * registers the token (8+ bytes). Values shorter than 4 bytes and common flag words ("true",
 * "off", "1", ...) are never registered: they would poison every text.
 *
 * Every occurrence is replaced, longest value first, by "[ag:redacted:secret:<last 4>]" (the
 * last four characters of the matched form), the placeholder Agenta's API and UI expect.
 * Nothing else is touched: a secret the user typed that is not one of the run's is not ours
 * to hide.
 *
 * Thread-safe: one mutex per set (never a shm lock); the heartbeat thread adds a refreshed
 * credential while the turn thread redacts. A set is bounded (REDACT_VALUES_MAX forms of at
 * most REDACT_VALUE_MAX bytes); adding past the bound fails with -E2BIG, which the caller must
 * treat as fatal for the run (a value it cannot hide must not be persisted).
 */
#ifndef AR_REDACT_H
#define AR_REDACT_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "core/contracts.h"

#define REDACT_VALUES_MAX 512
#define REDACT_VALUE_MAX (64u * 1024)
#define REDACT_MIN_LEN 4
#define REDACT_PART_MIN_LEN 8

struct redact;

/* A new, empty set (NULL on out of memory). */
struct redact *redact_new(void);
/* NULL is a no-op. */
void redact_free(struct redact *rd);

/*
 * Register one credential value and its derived forms (see above). NULL, short and allowlisted
 * values are ignored (0). -E2BIG when the set is full or the value is longer than
 * REDACT_VALUE_MAX, -ENOMEM.
 */
int redact_add(struct redact *rd, const char *value);

/* Register every credential value a parsed request carries (the list at the top). */
int redact_add_request(struct redact *rd, const struct run_request *req);

/*
 * Append s[0..len) to out with every registered form replaced. Returns the number of
 * replacements (>= 0), or -E2BIG when out's cap is hit (out is then left as it was).
 */
int redact_text(struct redact *rd, const char *s, size_t len, struct buf *out);

/*
 * Redact every string value inside o in place (object keys are left alone). Returns the number
 * of replacements, or -ENOMEM / -E2BIG (o may then be partly redacted: the caller must not
 * persist it).
 */
int redact_json(struct redact *rd, json_object *o);

/* The run credential of a request: telemetry.exporters.otlp.headers.authorization (either
 * casing), trimmed into out; "" when absent. -E2BIG when it does not fit. */
int redact_run_credential(const struct run_request *req, char *out, size_t outlen);

#endif
