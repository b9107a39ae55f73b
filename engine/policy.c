#include "policy.h"

#include <stdio.h>

static uint64_t clamp_idle(uint64_t ms)
{
    if (ms == 0)
        return 1;
    return ms > POLICY_IDLE_MAX_MS ? POLICY_IDLE_MAX_MS : ms;
}

static uint64_t idle_window(const struct lifecycle_input *in)
{
    if (in->runner_idle_ms)
        return clamp_idle(in->runner_idle_ms);
    if (in->request_idle_ms)
        return clamp_idle(in->request_idle_ms);
    return in->provider_remote ? 300000 : 60000;
}

int policy_lifecycle(const struct lifecycle_input *in, struct lifecycle_policy *ret, char *err,
                     size_t errlen)
{
    struct lifecycle_policy p = {.idle_ms = idle_window(in)};
    bool explicit_choice = false;

    if (in->admitted_mode != LIFECYCLE_UNSET) {
        p.mode = in->admitted_mode;
        p.idle_ms = clamp_idle(in->admitted_idle_ms ? in->admitted_idle_ms : p.idle_ms);
        p.source = LIFECYCLE_FROM_ADMITTED;
        *ret = p;
        return 0;
    }
    if (in->credential_mode == CREDENTIAL_MODE_RUNTIME && in->harness != HARNESS_CODEX) {
        p.mode = LIFECYCLE_PER_TURN;
        p.source = LIFECYCLE_FROM_MANAGED_CREDENTIALS;
    } else if (in->runner_mode != LIFECYCLE_UNSET) {
        p.mode = in->runner_mode;
        p.source = LIFECYCLE_FROM_RUNNER;
        explicit_choice = true;
    } else if (in->request_mode != LIFECYCLE_UNSET) {
        p.mode = in->request_mode;
        p.source = LIFECYCLE_FROM_REQUEST;
        explicit_choice = true;
    } else {
        bool measured = in->harness == HARNESS_CODEX || in->harness == HARNESS_OPENCODE ||
                        in->harness == HARNESS_CLAUDE;
        p.source = LIFECYCLE_FROM_DEFAULT;
        if (!in->provider_remote)
            p.mode = LIFECYCLE_WARM;
        else
            p.mode = measured && in->provider_reusable_leases ? LIFECYCLE_WARM
                                                               : LIFECYCLE_PER_TURN;
    }
    if (p.mode == LIFECYCLE_WARM && !in->provider_reusable_leases) {
        if (explicit_choice) {
            snprintf(err, errlen, "runner_warm_environment_requires_reusable_lease: the sandbox "
                                  "provider cannot keep environments between turns");
            return AR_E_INVALID_REQUEST;
        }
        p.mode = LIFECYCLE_PER_TURN;
    }
    *ret = p;
    return 0;
}

const char *policy_lifecycle_source_name(enum lifecycle_source s)
{
    switch (s) {
    case LIFECYCLE_FROM_ADMITTED:
        return "admitted";
    case LIFECYCLE_FROM_MANAGED_CREDENTIALS:
        return "managed-credentials";
    case LIFECYCLE_FROM_RUNNER:
        return "runner";
    case LIFECYCLE_FROM_REQUEST:
        return "request";
    case LIFECYCLE_FROM_DEFAULT:
        return "default";
    }
    return "unknown";
}
