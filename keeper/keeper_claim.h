/*
 * keeper_claim — a spare keeper bound to its session (spare.h, keeper_proto.h "#claim").
 *
 * The claiming worker sends "#claim {idleMs, perTurn, sessionKey, egress?, modelGateway?}"
 * right after it attached (the session's files are already in the sandbox). The keeper checks
 * it (a keeper that has no spare's placeholder spec is refused), hands the session's egress
 * policy and model gateway route to the provider (provider_ops.claim: the running sandbox's
 * network now allows what the session's policy allows, nothing of the placeholder's, and its
 * model gateway forwards to the session's endpoint with its key), and takes the session's idle
 * window, per-turn flag and key (for its log lines). A shell (keeper_spec.shell, env_shell.h) is
 * claimed the same way and its claim also names {sandbox, harness}: the sandbox description
 * the keeper then starts (keeper_start_sandbox). On failure err names the problem and the
 * keeper ends the environment ("#fail"): the worker starts its session cold.
 */
#ifndef AR_KEEPER_CLAIM_H
#define AR_KEEPER_CLAIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/keeper_proto.h"
#include "provider/provider.h"

struct keeper_claim {
    uint64_t idle_ms;
    bool per_turn;
    json_object *sandbox; /* a shell's claim: the sandbox description (a reference, the caller
                           * puts it), else NULL */
    char harness[32];     /* a shell's claim: the harness's name (log lines) */
};

int keeper_claim_apply(const struct keeper_spec *spec, const struct provider_ops *provider,
                       struct provider_process *proc, const char *payload, size_t len,
                       struct keeper_claim *ret, char *err, size_t errlen);

#endif
