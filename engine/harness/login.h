/*
 * login — the operator's harness logins: what `credentialMode:"runtime_provided"` (a
 * "subscription" run) authenticates with, and what GET /subscription-status reports
 * (as Agenta's `subscription-status.ts` does; README "Subscription logins").
 *
 * The operator points one setting per harness at a folder the harness itself logged in to:
 * AGENT_RUNNER_CODEX_HOME (codex: auth.json), AGENT_RUNNER_CLAUDE_CONFIG_DIR (claude:
 * .credentials.json), AGENT_RUNNER_PI_AGENT_DIR (pi: auth.json). Nothing else of those folders
 * is ever read. The harness files (harness/) decide what of the login a sandbox gets; this
 * module only reads and judges a login file, and answers the status route.
 *
 * Redaction is the contract: a state word and provider family names leave this module, never a
 * path, a file's content, an account or a raw system error. Nothing here logs.
 */
#ifndef AR_LOGIN_H
#define AR_LOGIN_H

#include <stdint.h>

#include <json-c/json.h>

#include "core/contracts.h" /* struct login_dirs */

#define LOGIN_FILE_MAX (256u * 1024u) /* a login file larger than this is unusable */
#define LOGIN_STATUS_VERSION 1

enum login_state {
    LOGIN_READY = 0,      /* configured, the file exists and is a non-empty JSON object */
    LOGIN_NOT_CONFIGURED, /* no folder configured for this harness */
    LOGIN_MISSING,        /* configured, but the folder or its login file is not there */
    LOGIN_UNUSABLE,       /* empty, unreadable, too large, not a regular file, not an object */
    LOGIN_UNSUPPORTED,    /* this runner cannot use a login for this harness */
};

/* "ready", "not_configured", "login_missing", "login_unusable", "unsupported". */
const char *login_state_name(enum login_state s);

/*
 * Read the login file `name` of folder dir (symlinks the operator made are followed; a FIFO or
 * device never blocks). LOGIN_READY: *ret_doc is a new reference to the parsed object. Any
 * other state leaves *ret_doc alone. The raw text is wiped before it is freed.
 */
enum login_state login_read(const char *dir, const char *name, json_object **ret_doc);

/*
 * The GET /subscription-status body (a new reference, NULL only on out of memory):
 * {"version":1,"harnesses":{"codex":{"state","provider":"openai"},"claude":{...,"provider":
 * "anthropic"},"pi_core":{"state","providers"?:[families]},"pi_agenta":{...},"opencode":
 * {"state":"unsupported"}}}. The pi families are those of its subscription (OAuth) logins:
 * anthropic, openai; omitted when there are none.
 */
json_object *login_status(const struct login_dirs *dirs);

/* Register every string of doc (any depth) of 8 bytes or more as a secret of this thread's
 * log lines. */
void login_redact(json_object *doc);

/*
 * Bind a credential epoch to the login a sandbox got: epoch = HMAC-SHA256(key, epoch ||
 * digest). A warm environment whose login changed no longer matches. -EIO on a crypto failure.
 */
int login_epoch_mix(const uint8_t key[32], uint8_t epoch[32], const uint8_t digest[32]);

#endif
