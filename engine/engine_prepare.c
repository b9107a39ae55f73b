/*
 * engine_prepare — a turn prepared (engine.h): what can be refused before a response starts,
 * and the turn's identity (pool key, fingerprints, credential epoch), lifecycle and plan.
 */
#include "engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/util.h"
#include "core/policy.h"
#include "engine_tools.h"
#include "engine_turn.h"
#include "environment/environment.h"
#include "environment/spare.h"
#include "harness/harness.h"
#include "harness/login.h"
#include "provider/provider.h"
#include "request/request.h"
#include "session/identity.h"
#include "session/pool.h"
#include "tools/tool_runner.h"
#include "turn/transcript.h"

static int refuse_unusable(const struct run_request *req, const struct provider_ops *provider,
                           const struct provider_caps *caps, char *err, size_t errlen)
{
    if (req->network == NETWORK_ALLOWLIST && !caps->network_allowlist) {
        snprintf(err, errlen,
                 "sandboxPermission.network.mode: \"allowlist\" cannot be enforced "
                 "by the %s sandbox",
                 provider->name);
        return AR_E_INVALID_REQUEST;
    }
    if (req->network == NETWORK_ALLOWLIST && req->network_allow_names &&
        !caps->network_allowlist_names) {
        json_object *e =
            json_object_array_get_idx(req->network_allowlist, req->network_allow_name_at);

        snprintf(err, errlen,
                 "sandboxPermission.network.allowlist[%zu]: \"%s\" is a host name; the %s "
                 "sandbox enforces CIDR ranges and addresses only",
                 req->network_allow_name_at, e ? json_object_get_string(e) : "", provider->name);
        return AR_E_INVALID_REQUEST;
    }
    if (req->network == NETWORK_OFF && !caps->network_off) {
        snprintf(err, errlen,
                 "sandboxPermission.network.mode: \"off\" cannot be enforced by "
                 "the %s sandbox",
                 provider->name);
        return AR_E_INVALID_REQUEST;
    }
    if (req->network == NETWORK_OFF && req->harness != HARNESS_SCRIPTED &&
        !caps->network_keeps_endpoints) {
        snprintf(err, errlen,
                 "sandboxPermission.network.mode: \"off\" leaves harness %s no "
                 "route to its model endpoint",
                 harness_kind_name(req->harness));
        return AR_E_INVALID_REQUEST;
    }
    /* what the run needs against the provider's snapshot: refused before anything starts */
    return provider->admit ? provider->admit(req, caps, err, errlen) : 0;
}

/* The turn's lifecycle policy: the request's wishes, the runner's and the provider's rules. */
static int turn_lifecycle(const struct engine_config *cfg, const struct run_request *req,
                          const struct provider_ops *provider, const struct provider_caps *caps,
                          struct lifecycle_policy *ret, char *err, size_t errlen)
{
    struct lifecycle_input li;

    memset(&li, 0, sizeof(li));
    li.credential_mode = req->mc.credential_mode;
    li.harness = req->harness;
    li.provider_remote = caps->remote;
    li.provider_reusable_leases = caps->reusable_leases;
    li.runner_mode = cfg->local_mode;
    li.runner_idle_ms = cfg->local_idle_ms;
    if (provider->runner_lifecycle) /* a provider with settings of its own overrides ours */
        provider->runner_lifecycle(&li.runner_mode, &li.runner_idle_ms);
    li.request_mode = req->lifecycle_mode;
    li.request_idle_ms = req->lifecycle_idle_ms;
    return policy_lifecycle(&li, ret, err, errlen);
}

/* The turn's identity: config and prior-history fingerprints, credential epoch. */
static int turn_identity(struct engine_turn *t, char *err, size_t errlen)
{
    const struct run_request *req = t->req;
    int r = identity_config_fp(req, t->config_fp);

    if (r == 0)
        r = identity_history_fp(req->messages, req->nmessages - 1, NULL, 0, t->prior_fp);
    if (r == 0)
        r = identity_credential_epoch(req, t->cfg->epoch_key, t->epoch);
    if (r < 0)
        snprintf(err, errlen, "cannot fingerprint the request: %s", ar_strerror(r));
    return r;
}

/*
 * Whether the run's model calls go through the sandbox's model gateway (README "The model
 * gateway"): the runner has it on, the sandbox is a local one with a network namespace of its
 * own (a probed host: the keeper makes it and the gateway's listener in it), and the run's
 * credentials are ones the gateway can add (harness_gateway_refusal).
 */
static bool turn_gateway(const struct engine_config *cfg, const struct run_request *req,
                         const struct provider_ops *provider)
{
    return cfg->gateway.enabled && cfg->sandbox && !provider->acquire &&
           !harness_gateway_refusal(req);
}

/* The sandbox plan of the turn's harness, its model route and the run's tools in it. */
static int turn_plan(struct engine_turn *t, const struct harness_paths *paths,
                     const struct provider_ops *provider, char *err, size_t errlen)
{
    const struct engine_config *cfg = t->cfg;
    const struct run_request *req = t->req;
    int r;

    sandbox_plan_init(&t->plan);
    t->plan.gateway = turn_gateway(cfg, req, provider);
    /* the spare eligibility rule (spare.h): such a run's plan keeps the key out of the env */
    t->spare_ok = cfg->pool && !spare_ineligible(&cfg->spares, req);
    if (t->spare_ok)
        t->plan.form = PLAN_SESSION;
    r = t->harness->plan(paths, req, &t->plan, err, errlen);
    if (r == 0 && t->plan.gateway)
        r = harness_gateway_route(&t->plan, req, &cfg->gateway, err, errlen);
    if (r == 0 && tool_runner_any(t->tools))
        harness_add_runner_tools(&t->plan, req->harness, cfg->tools.mcp_bin,
                                 TOOL_RUNNER_TOOLS_FILE);
    /* a warm environment is bound to the operator login it was given (runtime_provided) */
    if (r == 0 && t->plan.has_login &&
        login_epoch_mix(cfg->epoch_key, t->epoch, t->plan.login_digest) < 0) {
        snprintf(err, errlen, "cannot fingerprint the request: %s", ar_strerror(-EIO));
        r = -EIO;
    }
    return r;
}

/* A request with nothing to send: no prompt text, no approval answers, no attachments. */
static bool nothing_to_send(const struct engine_config *cfg, const struct run_request *req)
{
    struct buf probe;
    int r;

    buf_init(&probe, PROMPT_TEXT_MAX);
    r = run_request_prompt_text(req, &probe);
    buf_release(&probe);
    if (r < 0 && transcript_answers_only(req))
        r = 0; /* an answer to pending approvals needs no new text */
    if (r < 0 && cfg->agenta && identity_tail_is_fresh_user(req))
        r = 0; /* platform mode: attachments (or images) alone are a message */
    return r < 0;
}

int engine_prepare(const struct engine_config *cfg, struct run_request *req,
                   struct engine_turn **ret, char *err, size_t errlen)
{
    struct harness_paths paths = {.harness_dir = cfg->harness_dir,
                                  .scripted_agent = cfg->scripted_agent,
                                  .pi_stdio = cfg->pi_stdio_bin,
                                  .logins = &cfg->logins};
    const struct provider_ops *provider = provider_get(req->sandbox);
    struct engine_turn *t = calloc(1, sizeof(*t));
    struct provider_caps caps;
    int r;

    if (!t)
        return util_fail(-ENOMEM, err, errlen, "out of memory");
    t->cfg = cfg;
    t->req = req;
    t->harness = harness_get(req->harness);
    if (!t->harness || !harness_is_installed(t->harness, &paths)) {
        snprintf(err, errlen, "harness: \"%s\" is not installed on this runner", req->harness_name);
        r = AR_E_UNAVAILABLE;
        goto out;
    }
    if (!provider) {
        snprintf(err, errlen, "sandbox: provider \"%s\" is not enabled", req->sandbox);
        r = AR_E_INVALID_REQUEST;
        goto out;
    }
    provider_caps_of(provider, &caps);
    r = refuse_unusable(req, provider, &caps, err, errlen);
    if (r == 0)
        r = engine_tools_usable(req, caps.remote, provider->name, err, errlen);
    if (r == 0 && nothing_to_send(cfg, req)) {
        snprintf(err, errlen, "No user message to send (prompt/messages empty).");
        r = AR_E_INVALID_REQUEST;
    }
    if (r == 0)
        r = turn_lifecycle(cfg, req, provider, &caps, &t->policy, err, errlen);
    if (r < 0)
        goto out;
    if (identity_pool_key(req, t->key, sizeof(t->key)) < 0)
        t->key[0] = '\0';
    /* the run's tools (the request parser checked them: only memory can fail here) */
    r = tool_runner_new(&cfg->tools, req, &t->tools, err, errlen);
    if (r < 0)
        goto out;
    r = turn_identity(t, err, errlen);
    if (r < 0)
        goto out;
    t->client_gone_cancels = req->session_id == NULL;
    r = turn_plan(t, &paths, provider, err, errlen);
out:
    if (r < 0) {
        engine_turn_free(t);
        return r;
    }
    *ret = t;
    return 0;
}

void engine_turn_free(struct engine_turn *t)
{
    if (!t)
        return;
    if (t->teardown) {
        (void)environment_destroy(t->teardown, t->teardown_reason);
        environment_free(t->teardown);
    }
    tool_runner_free(t->tools);
    if (t->plan.argv)
        sandbox_plan_release(&t->plan);
    free(t);
}

_Static_assert(ENGINE_KEY_MAX == POOL_KEY_MAX, "a session key is the session table's key");

int engine_session_key(const char *project_id, const char *session_id, char *out, size_t outlen)
{
    return identity_session_key(project_id, session_id, out, outlen);
}

const char *engine_harness_name(enum harness_kind kind)
{
    return harness_kind_name(kind);
}
