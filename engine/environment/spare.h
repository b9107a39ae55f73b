/*
 * spare — pre-started environments a new session claims; this module is what a spare is:
 * the AGENT_RUNNER_SPARES settings, the rule of who may take one, the placeholder request a
 * spare starts on, and the home files a claim writes into its running sandbox. The pieces
 * elsewhere: a spare started and claimed as an environment is environment_spare.h, a spare
 * evicted for a session env_stop.h, its slot (SLOT_SPARE) session/pool_spare.c, and the
 * master's maker that keeps the count up fcgi/spares.c.
 *
 * The master keeps AGENT_RUNNER_SPARES environments per harness pre-started (fcgi/spares.c):
 * each one a keeper whose sandbox runs the harness on a placeholder configuration, in a slot
 * of its own (SLOT_SPARE, pool_spare_*), under the identity, cgroup and network namespace any
 * environment of that slot gets. A new session whose run is eligible (spare_ineligible)
 * claims one (environment_claim_spare): its configuration is written into the running
 * sandbox, the keeper is bound to the session ("#claim"), and the turn goes on from
 * initialize / session/new exactly like a cold one. Whatever goes wrong on the way falls back
 * to a cold start inside the same turn.
 *
 * pi: the sandbox command is `agent-runner-pi-stdio start spare` (tools/pi_stdio.c), which
 * starts pi on socket pairs with the placeholder configuration and execs pi-acp once pi
 * answered; pi-acp's "pi" at session/new is the same program attaching to that pi: it sends pi
 * `new_session` (pi re-reads models.json, settings.json, SYSTEM.md, AGENTS.md, skills and
 * reloads our extension) and then relays. The key never travels in an environment: models.json
 * says `"apiKey": "!cat <key file>"`, read at every model request (PI_KEY_FILE), and the
 * extension's gating comes from runner-session.json (RUNNER_SESSION_FILE), both written at
 * claim.
 *
 * opencode (opt-in: its idle spare is ~330 MiB): `opencode acp` started with no configuration
 * at all (no provider, no key, no OPENCODE_CONFIG_CONTENT), ready once it answered initialize;
 * it never opens a session before the claim. The claim writes the session's opencode.json
 * (global, in the private home) and its key file ("apiKey": "{file:...}"), and AGENTS.md into
 * the workspace; opencode reads them when session/new creates the workspace's instance.
 */
#ifndef AR_SPARE_H
#define AR_SPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <json-c/json.h>

#include "core/contracts.h"

#define SPARE_PER_HARNESS_MAX 64
#define SPARE_SETTINGS_DEFAULT "pi=2"
#define SPARE_SETTINGS_TEXT_MAX 256
#define SPARE_TTL_DEFAULT_MS 1800000ull /* an unclaimed spare is replaced after 30 min */
/* The placeholder's endpoint: the discard port on loopback, never named in any egress policy */
#define SPARE_PLACEHOLDER_URL "http://127.0.0.1:9/v1"
#define SPARE_PLACEHOLDER_KEY "spare-placeholder"
#define SPARE_PLACEHOLDER_MODEL "spare-placeholder"

/*
 * AGENT_RUNNER_SPARES: "" or "<harness>=<n>[,<harness>=<n>...]" with harness one of pi,
 * claude, codex, opencode and n in [0, SPARE_PER_HARNESS_MAX]; harnesses not named keep their
 * default (pi: 2, the others 0: opencode spares are opt-in). A harness that cannot have
 * spares (spare_harness_supported) accepts only 0. -EINVAL with err naming the entry at fault;
 * *ret is written only on success.
 */
int spare_settings_parse(const char *text, struct spare_settings *ret, char *err, size_t errlen);
/* The effective settings as "pi=2,claude=0,codex=0,opencode=0" (config_log). */
void spare_settings_format(const struct spare_settings *s, char *out, size_t outlen);
/* Harnesses a spare can be made for (pi, opencode). */
bool spare_harness_supported(enum harness_kind kind);
/* Any spare configured at all. */
bool spare_settings_any(const struct spare_settings *s);

/*
 * The eligibility rule (README "Spares"): NULL when a new session of req may take a spare of
 * cfg, else why not. Eligible: spares of the run's harness are configured, the sandbox is
 * local, the network is not "off", modelConnection.environment is empty, the credentials are
 * exactly one API key (credentialMode not runtime_provided), and no customTools/mcpServers.
 */
const char *spare_ineligible(const struct spare_settings *s, const struct run_request *req);

/*
 * The placeholder run request a spare of kind is planned from (placeholder model, key and
 * unreachable endpoint; no session, no files). The caller releases it.
 */
int spare_placeholder_request(enum harness_kind kind, struct run_request *ret, char *err,
                              size_t errlen);

/*
 * Write plan files under SANDBOX_HOME (the session's agent folder: models.json, the key file,
 * settings.json, SYSTEM.md, ...) into the running sandbox whose processes descend from
 * sandbox_pid (bubblewrap): through /proc/<pid>/root of a process inside, as the sandbox's
 * own host uid/gid (the sandbox's user namespace maps only that one), never following a
 * symlink. Files outside SANDBOX_HOME (/etc/passwd, /etc/group) are the same for every
 * environment and skipped. err names the file at fault.
 */
int spare_write_home_files(pid_t sandbox_pid, uid_t uid, gid_t gid, json_object *files, char *err,
                           size_t errlen);

#endif
