/*
 * engine_worker — what a worker process and its routes ask the engine besides turns
 * (engine.h): start and stop of the process, its in-flight entry and admission, and the facts
 * /health, /readyz and /subscription-status answer with.
 */
#include "engine.h"
#include "engine_turns.h"

#include <errno.h>
#include <string.h>

#include "agenta/platform.h"
#include "base/util.h"
#include "harness/harness.h"
#include "harness/login.h"
#include "provider/provider.h"
#include "sandbox/host.h"
#include "session/pool.h"

int engine_worker_start(const struct engine_config *cfg)
{
    int r = platform_worker_start(cfg);

    if (r == 0)
        r = engine_turns_start(cfg);
    return r;
}

int engine_worker_stop(int64_t deadline_ms)
{
    return platform_worker_stop(deadline_ms);
}

void engine_note_connection(const struct engine_config *cfg, bool kept)
{
    if (cfg->pool)
        pool_counter_add(cfg->pool, kept ? PC_FCGI_KEPT_REQUESTS : PC_FCGI_CONNECTIONS, 1);
}

int engine_inflight_claim(const struct engine_config *cfg, pid_t pid)
{
    if (!cfg->pool)
        return -ENOSPC;
    return pool_inflight_claim(cfg->pool, pid, util_proc_start_time(pid));
}

bool engine_admit(const struct engine_config *cfg, int inflight_slot, uint64_t max_runs,
                  uint64_t worker_max)
{
    uint64_t mine = pool_inflight_add(cfg->pool, inflight_slot, 1);

    if (mine > worker_max || pool_inflight_total(cfg->pool) > max_runs) {
        pool_inflight_add(cfg->pool, inflight_slot, -1);
        pool_counter_add(cfg->pool, PC_ADMISSION_REJECTED, 1);
        return false;
    }
    return true;
}

void engine_admit_release(const struct engine_config *cfg, int inflight_slot)
{
    pool_inflight_add(cfg->pool, inflight_slot, -1);
}

uint64_t engine_runs_in_flight(const struct engine_config *cfg)
{
    return cfg->pool ? pool_inflight_total(cfg->pool) : 0;
}

pid_t engine_master_pid(const struct engine_config *cfg)
{
    struct pool_info info;

    if (!cfg->pool)
        return -1;
    pool_get_info(cfg->pool, &info);
    return info.valid ? (pid_t)info.master_pid : -1;
}

json_object *engine_installed_harnesses(const struct engine_config *cfg)
{
    struct harness_paths paths = {.harness_dir = cfg->harness_dir,
                                  .scripted_agent = cfg->scripted_agent};

    return harness_installed_names(&paths);
}

json_object *engine_model_gateway_describe(const struct engine_config *cfg)
{
    bool active = cfg->gateway.enabled && cfg->sandbox && cfg->sandbox->net_ok;
    json_object *o = json_object_new_object(), *per = json_object_new_object();
    enum harness_kind kind;
    const char *name;

    json_object_object_add(o, "enabled", json_object_new_boolean(cfg->gateway.enabled));
    json_object_object_add(o, "active", json_object_new_boolean(active));
    for (size_t i = 0; (name = harness_wire_name(i, &kind)); i++)
        if (kind != HARNESS_SCRIPTED || cfg->scripted_agent)
            json_object_object_add(per, name, harness_gateway_health(kind, active));
    json_object_object_add(o, "harnesses", per);
    return o;
}

json_object *engine_sandbox_names(void)
{
    return provider_enabled_names();
}

json_object *engine_sandbox_describe(const struct engine_config *cfg)
{
    return cfg->sandbox ? sandbox_host_describe(cfg->sandbox) : NULL;
}

bool engine_sandbox_facts(const struct engine_config *cfg, struct engine_sandbox_facts *ret)
{
    const struct sandbox_host *h = cfg->sandbox;

    if (!h)
        return false;
    memset(ret, 0, sizeof(*ret));
    ret->shared_uid = h->uids.shared;
    ret->runner_uid = (uint32_t)h->uids.runner_uid;
    ret->uid_base = (uint32_t)h->uids.base;
    ret->uid_count = (uint32_t)h->uids.count;
    ret->net_ok = h->net_ok;
    ret->net_why = h->net_why;
    ret->missing = h->missing;
    return true;
}

json_object *engine_subscription_status(const struct engine_config *cfg)
{
    return login_status(&cfg->logins);
}
