/*
 * scripted — the deterministic ACP agent of tests/fixtures/acp_scripted.c. It exists only
 * when the runner is configured with AGENT_RUNNER_SCRIPTED_AGENT (tests and benchmarks) and
 * runs in the same sandbox as the real harnesses.
 */
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness/harness.h"

static bool scripted_installed(const struct harness_paths *paths)
{
    return paths->scripted_agent && access(paths->scripted_agent, X_OK) == 0;
}

static int scripted_plan(const struct harness_paths *paths, const struct run_request *req,
                         struct sandbox_plan *plan, char *err, size_t errlen)
{
    char dir[PATH_MAX];

    (void)err;
    (void)errlen;
    snprintf(dir, sizeof(dir), "%s", paths->scripted_agent);
    json_object_array_add(plan->argv, json_object_new_string(paths->scripted_agent));
    json_object_array_add(plan->ro_binds, json_object_new_string(dirname(dir)));
    harness_base_env(plan, NULL);
    plan->channel_env = true; /* it speaks the channel like pi's extension */
    harness_connection_env(plan, req);
    if (req->model && req->model[0]) {
        snprintf(plan->model_id, sizeof(plan->model_id), "%s", req->model);
        snprintf(plan->model_name, sizeof(plan->model_name), "%s", req->model);
    } else {
        snprintf(plan->model_name, sizeof(plan->model_name), "scripted-model");
    }
    snprintf(plan->provider, sizeof(plan->provider), "%s",
             req->mc.present ? req->mc.provider : "none");
    return 0;
}

const struct harness_ops harness_scripted = {
    .kind = HARNESS_SCRIPTED,
    .name = "scripted",
    .installed = scripted_installed,
    .plan = scripted_plan,
};
