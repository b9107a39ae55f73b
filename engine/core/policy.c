#include "core/policy.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/jsonx.h"
#include "egress/egress_policy.h"

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

enum permission policy_permission_parse(const char *s)
{
    if (!s)
        return PERMISSION_UNSET;
    if (strcmp(s, "allow") == 0)
        return PERMISSION_ALLOW;
    if (strcmp(s, "ask") == 0)
        return PERMISSION_ASK;
    if (strcmp(s, "deny") == 0)
        return PERMISSION_DENY;
    return PERMISSION_UNSET;
}

const char *policy_permission_name(enum permission p)
{
    switch (p) {
    case PERMISSION_ALLOW:
        return "allow";
    case PERMISSION_ASK:
        return "ask";
    case PERMISSION_DENY:
        return "deny";
    default:
        return "unset";
    }
}

/* The first string argument of a tool call, in the order the harness sent them. */
static const char *first_string_arg(json_object *args)
{
    if (!args || !json_object_is_type(args, json_type_object))
        return NULL;
    json_object_object_foreach(args, key, val)
    {
        (void)key;
        return val && json_object_is_type(val, json_type_string) ? json_object_get_string(val)
                                                                 : NULL;
    }
    return NULL;
}

static bool rule_matches(const char *pattern, const struct permission_gate *g)
{
    const char *open = strchr(pattern, '(');
    size_t nlen = open ? (size_t)(open - pattern) : strlen(pattern);
    const char *arg, *prefix_end;
    size_t plen;

    if (!g->tool_name || strlen(g->tool_name) != nlen ||
        strncasecmp(pattern, g->tool_name, nlen) != 0)
        return false;
    if (!open)
        return true;
    /* Tool(prefix:*) */
    prefix_end = strstr(open, ":*)");
    if (!prefix_end || prefix_end[3] != '\0')
        return false;
    plen = (size_t)(prefix_end - open - 1);
    arg = first_string_arg(g->args);
    return arg && strncmp(arg, open + 1, plen) == 0;
}

enum permission policy_permission_effective(json_object *plan, const struct permission_gate *g)
{
    enum permission best = PERMISSION_UNSET;
    json_object *rules;
    const char *def;

    if (g->spec != PERMISSION_UNSET)
        return g->spec;
    if (g->server != PERMISSION_UNSET)
        return g->server;
    rules = jsonx_get(plan, "rules");
    for (size_t i = 0; rules && json_object_is_type(rules, json_type_array) &&
                       i < json_object_array_length(rules);
         i++) {
        json_object *r = json_object_array_get_idx(rules, i);
        const char *pattern = jsonx_str(r, "pattern");
        enum permission p = policy_permission_parse(jsonx_str(r, "permission"));

        if (!pattern || p == PERMISSION_UNSET || !rule_matches(pattern, g))
            continue;
        if ((int)p > (int)best) /* deny > ask > allow */
            best = p;
    }
    if (best != PERMISSION_UNSET)
        return best;
    if (plan && !json_object_is_type(plan, json_type_object))
        return PERMISSION_ASK; /* malformed plan */
    def = jsonx_str(plan, "default");
    if (!def || strcmp(def, "allow_reads") == 0)
        return g->read_only_hint == 1 ? PERMISSION_ALLOW : PERMISSION_ASK;
    best = policy_permission_parse(def);
    return best == PERMISSION_UNSET ? PERMISSION_ASK : best;
}

enum verdict policy_permission_decide(enum permission effective, enum permission stored)
{
    switch (effective) {
    case PERMISSION_ALLOW:
        return VERDICT_ALLOW;
    case PERMISSION_DENY:
        return VERDICT_DENY;
    default:
        if (stored == PERMISSION_ALLOW)
            return VERDICT_ALLOW;
        if (stored == PERMISSION_DENY)
            return VERDICT_DENY;
        return VERDICT_PENDING;
    }
}

/* ---- egress ------------------------------------------------------------------------------ */

const char *policy_provider_default_url(const char *provider)
{
    static const struct {
        const char *name;
        const char *url;
    } known[] = {
        {"openai", "https://api.openai.com/v1"},
        {"anthropic", "https://api.anthropic.com"},
        {"google", "https://generativelanguage.googleapis.com"},
        {"gemini", "https://generativelanguage.googleapis.com"},
        {"mistral", "https://api.mistral.ai/v1"},
        {"groq", "https://api.groq.com/openai/v1"},
        {"xai", "https://api.x.ai/v1"},
        {"deepseek", "https://api.deepseek.com"},
        {"openrouter", "https://openrouter.ai/api/v1"},
        {"cerebras", "https://api.cerebras.ai/v1"},
        {"together", "https://api.together.xyz/v1"},
        {"fireworks", "https://api.fireworks.ai/inference/v1"},
    };

    for (size_t i = 0; provider && i < sizeof(known) / sizeof(known[0]); i++)
        if (strcasecmp(provider, known[i].name) == 0)
            return known[i].url;
    return NULL;
}

int policy_egress(const struct run_request *req, bool model_gateway, bool private_egress,
                  const uint16_t *runner_ports, size_t nrunner_ports, struct egress_policy *ret,
                  char *err, size_t errlen)
{
    enum egress_mode mode = req->network == NETWORK_OFF         ? EGRESS_MODE_OFF
                            : req->network == NETWORK_ALLOWLIST ? EGRESS_MODE_ALLOWLIST
                                                                : EGRESS_MODE_ON;
    json_object *list = req->network_allowlist;
    const char *url = req->mc.base_url;
    char why[192];

    egress_policy_init(ret, mode, private_egress);
    for (size_t i = 0; mode == EGRESS_MODE_ALLOWLIST && list && i < json_object_array_length(list);
         i++) {
        why[0] = '\0';
        if (egress_policy_add_cidr(ret, json_object_get_string(json_object_array_get_idx(list, i)),
                                   why, sizeof(why)) < 0) {
            snprintf(err, errlen, "sandboxPermission.network.allowlist[%zu]: %s", i, why);
            return AR_E_INVALID_REQUEST;
        }
    }
    if (!url && req->mc.present)
        url = policy_provider_default_url(req->mc.provider);
    if (model_gateway)
        url = NULL; /* the keeper's gateway calls it; the sandbox never does */
    why[0] = '\0';
    if (url && egress_policy_add_url(ret, url, why, sizeof(why)) < 0) {
        snprintf(err, errlen,
                 "modelConnection.endpoint.baseUrl: cannot be named for the sandbox "
                 "network: %s",
                 why);
        return AR_E_INVALID_REQUEST;
    }
    for (size_t i = 0; i < nrunner_ports; i++)
        if (egress_policy_add_runner_port(ret, runner_ports[i]) < 0)
            break; /* the table holds EGRESS_RUNNER_PORTS_MAX: the config allows no more */
    return 0;
}
