/*
 * policy — small pure rules, no I/O.
 *
 * Lifecycle (Paperclip's warm rule): whether an environment stays warm after a turn and for
 * how long. First match wins:
 *   1. the policy admitted with the session's first turn, while that session lives;
 *   2. per-turn for managed (runtime-provided / subscription) credentials unless the harness
 *      supports a managed warm session (codex);
 *   3. the runner's configured mode for the provider (warm | per_turn | inherit);
 *   4. the request's lifecycle.mode;
 *   5. default: local is warm; a remote provider is warm only for a measured harness (codex,
 *      opencode, claude) on a provider with reusable leases; else per-turn.
 * Idle window: the provider's configured window, then the request's idleTimeoutMs, then the
 * provider default (local 60 s, remote 300 s), clamped to (0, 24 h]. An explicit warm choice
 * (steps 3-4) on a provider without reusable leases is an error
 * (runner_warm_environment_requires_reusable_lease); the default never is: it falls back to
 * per-turn.
 */
#ifndef AR_POLICY_H
#define AR_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "core/contracts.h"

#define POLICY_IDLE_MAX_MS (24ull * 3600 * 1000)

enum lifecycle_source {
    LIFECYCLE_FROM_ADMITTED = 1,
    LIFECYCLE_FROM_MANAGED_CREDENTIALS,
    LIFECYCLE_FROM_RUNNER,
    LIFECYCLE_FROM_REQUEST,
    LIFECYCLE_FROM_DEFAULT,
};

struct lifecycle_input {
    /* 1: a live session's admitted policy */
    enum lifecycle_mode admitted_mode; /* UNSET when the session is new */
    uint64_t admitted_idle_ms;
    /* 2 */
    enum credential_mode credential_mode;
    enum harness_kind harness;
    /* the provider */
    bool provider_remote;
    bool provider_reusable_leases;
    /* 3: runner config for this provider (UNSET = inherit), 0 = no configured window */
    enum lifecycle_mode runner_mode;
    uint64_t runner_idle_ms;
    /* 4 */
    enum lifecycle_mode request_mode;
    uint64_t request_idle_ms;
};

struct lifecycle_policy {
    enum lifecycle_mode mode; /* WARM or PER_TURN */
    uint64_t idle_ms;
    enum lifecycle_source source;
};

/* 0, or AR_E_INVALID_REQUEST with err = runner_warm_environment_requires_reusable_lease. */
int policy_lifecycle(const struct lifecycle_input *in, struct lifecycle_policy *ret, char *err,
                     size_t errlen);

/*
 * Permission plan, decided as Agenta's runner decides it. The request's `permissions` object:
 * default allow | ask | deny | allow_reads (the default when absent; a malformed plan means
 * ask), rules [{pattern, permission}] with patterns `Tool` (exact, case-insensitive) and
 * `Tool(prefix:*)` (the tool's first string argument starts with prefix).
 *
 * effective = spec permission > server permission > the strongest matching rule
 * (deny > ask > allow) > the default (allow_reads: a read-only hint allows, anything else asks).
 * decide: allow and deny are final; ask takes a decision stored in the transcript for the same
 * tool and arguments, else it is pending (the turn pauses for approval).
 */
/* enum permission is a run type: core/contracts.h */
enum verdict { VERDICT_ALLOW = 0, VERDICT_DENY, VERDICT_PENDING };

struct permission_gate {
    const char *tool_name;       /* may be NULL */
    json_object *args;           /* borrowed, may be NULL */
    int read_only_hint;          /* -1 unknown, 0 no, 1 yes */
    enum permission spec;        /* the tool spec's own permission */
    enum permission server;      /* the MCP server's permission */
};

enum permission policy_permission_effective(json_object *plan, const struct permission_gate *g);
/* stored: PERMISSION_UNSET, PERMISSION_ALLOW or PERMISSION_DENY from the transcript */
enum verdict policy_permission_decide(enum permission effective, enum permission stored);
enum permission policy_permission_parse(const char *s);
const char *policy_permission_name(enum permission p);

/*
 * Egress (README "Network"): where a run's sandbox may connect. The request's
 * sandboxPermission.network mode (on | allowlist | off) and allowlist, plus the endpoints the
 * run itself needs, named in every mode: the model endpoint (modelConnection.endpoint.baseUrl,
 * else the public API of a known provider: api.openai.com, api.anthropic.com, ...). The
 * runner's own ports are never reachable on a local address. private_egress opens private
 * ranges under `on`. ret is 44 KB: the caller allocates it. AR_E_INVALID_REQUEST naming the
 * field (a malformed allowlist entry, an endpoint that cannot be named). With model_gateway the
 * harness reaches its model through the sandbox's model gateway (README "The model gateway"):
 * the model endpoint is not named for the sandbox at all.
 */
struct egress_policy;
int policy_egress(const struct run_request *req, bool model_gateway, bool private_egress,
                  const uint16_t *runner_ports, size_t nrunner_ports, struct egress_policy *ret,
                  char *err, size_t errlen);
/* The public API base URL of a model provider without an endpoint of its own, or NULL. */
const char *policy_provider_default_url(const char *provider);

#endif
