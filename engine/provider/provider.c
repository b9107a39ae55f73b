/* provider — the registry of sandbox providers and what they share (provider.h). */
#include "provider.h"

#include <string.h>

#include "../sandbox/config.h"
#include "../util.h"

/* Every provider this runner can use. A remote provider adds its ops here. */
static const struct provider_ops *const registry[] = {&provider_local};

/* Providers of the wire protocol this runner knows of but has not enabled. */
static const char *const known_disabled[] = {"daytona", "e2b"};

bool provider_known(const char *name)
{
    if (provider_get(name))
        return true;
    for (size_t i = 0; name && i < ARRAY_SIZE(known_disabled); i++)
        if (strcmp(known_disabled[i], name) == 0)
            return true;
    return false;
}

const struct provider_ops *provider_get(const char *name)
{
    for (size_t i = 0; name && i < ARRAY_SIZE(registry); i++)
        if (strcmp(registry[i]->name, name) == 0)
            return registry[i];
    return NULL;
}

size_t provider_count(void)
{
    return ARRAY_SIZE(registry);
}

const struct provider_ops *provider_at(size_t i)
{
    return i < ARRAY_SIZE(registry) ? registry[i] : NULL;
}

const char *provider_lease_outcome_name(enum provider_lease_outcome o)
{
    static const char *const names[] = {"created", "resumed", "replacement"};

    return (unsigned)o < ARRAY_SIZE(names) ? names[o] : "unknown";
}

const char *provider_replacement_reason_name(enum provider_replacement_reason r)
{
    static const char *const names[] = {"", "not_found", "expired", "identity_mismatch",
                                        "resume_failed"};

    return (unsigned)r < ARRAY_SIZE(names) ? names[r] : "unknown";
}

json_object *provider_sandbox_description(const struct sandbox_plan *plan, const char *workspace,
                                          const struct sandbox_config *limits)
{
    json_object *sb = json_object_new_object();

    if (!sb)
        return NULL;
    json_object_object_add(sb, "workspace", json_object_new_string(workspace));
    if (limits) {
        json_object *lim = json_object_new_object();

        json_object_object_add(lim, "tmpBytes", json_object_new_int64((int64_t)limits->tmp_max));
        json_object_object_add(lim, "homeBytes", json_object_new_int64((int64_t)limits->home_max));
        json_object_object_add(sb, "limits", lim);
    }
    json_object_object_add(sb, "roBinds", json_object_get(plan->ro_binds));
    json_object_object_add(sb, "files", json_object_get(plan->files));
    json_object_object_add(sb, "env", json_object_get(plan->env));
    json_object_object_add(sb, "argv", json_object_get(plan->argv));
    json_object_object_add(sb, "cwd", json_object_new_string(SANDBOX_WORKSPACE));
    return sb;
}
