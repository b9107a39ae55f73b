/*
 * engine_cluster — several hosts: the settings, the dispatch of a request to its owner, the
 * facts /health, /readyz and /metrics show, the master's tick and agent-runner-ctl cluster
 * (engine.h, admin.h, engine_cluster.h; the mechanics are in engine/cluster/).
 */
#include "engine_cluster.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "base/log.h"
#include "base/util.h"
#include "cluster/cluster.h"
#include "cluster/cluster_master.h"
#include "cluster/cluster_relay.h"
#include "cluster/cluster_route.h"
#include "session/pool.h"

/* Between two attempts to reach an owner that does not answer. */
#define RETRY_STEP_MS 250

/* ---- settings ---------------------------------------------------------------------------- */

int engine_cluster_config_read(struct engine_config *cfg, engine_getenv_fn get, void *ctx,
                               char *err, size_t errlen)
{
    struct cluster_config *c = calloc(1, sizeof(*c));
    const char *instance = get("AGENT_RUNNER_INSTANCE", ctx);
    int r;

    if (!c)
        return -ENOMEM;
    r = cluster_config_load(get, ctx, instance, cfg->session_pool_max, c, err, errlen);
    if (r != 0) {
        free(c);
        return r < 0 ? r : 0;
    }
    cfg->cluster = c;
    return 0;
}

void engine_cluster_config_release(struct engine_config *cfg)
{
    struct cluster_config *c = (struct cluster_config *)cfg->cluster;

    if (!c)
        return;
    cluster_config_wipe(c);
    free(c);
    cfg->cluster = NULL;
}

void engine_config_cluster_text(const struct engine_config *cfg, char *out, size_t outlen)
{
    if (!cfg->cluster) {
        snprintf(out, outlen, "one host (no AGENT_RUNNER_REDIS_URL)");
        return;
    }
    cluster_config_text(cfg->cluster, out, outlen);
}

const char *engine_cluster_group(const struct engine_config *cfg)
{
    return cfg->cluster ? cfg->cluster->group : NULL;
}

bool engine_cluster_on(const struct engine_config *cfg)
{
    return cfg->cluster != NULL;
}

/* ---- dispatch ---------------------------------------------------------------------------- */

static void count(const struct engine_config *cfg, const struct engine_subject *s,
                  enum pool_counter turn_idx, enum pool_counter control_idx)
{
    if (cfg->pool)
        pool_counter_add(cfg->pool, s->control ? control_idx : turn_idx, 1);
}

static void refused(const struct engine_config *cfg, struct engine_refusal *ret, int status,
                    const char *code, const char *message, enum pool_counter idx)
{
    ret->status = status;
    snprintf(ret->code, sizeof(ret->code), "%s", code);
    snprintf(ret->message, sizeof(ret->message), "%s", message);
    if (cfg->pool)
        pool_counter_add(cfg->pool, idx, 1);
}

enum engine_dispatch engine_cluster_dispatch(const struct engine_config *cfg,
                                             const struct engine_subject *s,
                                             const struct engine_forward_req *fw,
                                             const struct engine_forward_io *io,
                                             struct engine_refusal *ret)
{
    const struct cluster_config *c = cfg->cluster;
    struct cluster_subject cs = {
        .session_key = s->session_key, .turn_id = s->turn_id, .may_claim = s->may_claim};
    struct cluster_request rq = {.method = fw->method,
                                 .path = fw->path,
                                 .body = fw->body,
                                 .body_len = fw->body_len,
                                 .accept = fw->accept,
                                 .request_id = fw->request_id,
                                 .token = fw->token,
                                 .ndjson = fw->ndjson};
    struct cluster_sink sink = {.start = io->start,
                                .write = io->write,
                                .flush = io->flush,
                                .alive = io->alive,
                                .ctx = io->ctx};
    struct cluster_route rt;
    int64_t deadline;
    char err[256];

    memset(ret, 0, sizeof(*ret));
    if (!c)
        return ENGINE_DISPATCH_LOCAL;
    /* a dead owner's key lives at most a TTL past its last refresh: then it is claimed here */
    deadline = util_now_ms() + (int64_t)(c->ttl_ms + c->refresh_ms);
    for (;;) {
        (void)cluster_route(c, cfg->pool, &cs, fw->forwarded_by, &rt);
        if (rt.kind == CLUSTER_ROUTE_REFUSE) {
            refused(cfg, ret, rt.status, rt.code, rt.message, PC_CLUSTER_REFUSED_LOOP);
            return ENGINE_DISPATCH_REFUSED;
        }
        if (rt.kind == CLUSTER_ROUTE_LOCAL) {
            if (rt.received)
                count(cfg, s, PC_CLUSTER_TURNS_RECEIVED, PC_CLUSTER_CONTROL_RECEIVED);
            else
                count(cfg, s, PC_CLUSTER_TURNS_LOCAL, PC_CLUSTER_CONTROL_LOCAL);
            return ENGINE_DISPATCH_LOCAL;
        }
        if (cluster_forward(c, &rt.peer, &rq, &sink, err, sizeof(err)) == 0) {
            count(cfg, s, PC_CLUSTER_TURNS_FORWARDED, PC_CLUSTER_CONTROL_FORWARDED);
            return ENGINE_DISPATCH_DONE;
        }
        log_debug("cluster: owner '%s' of '%s' did not answer: %s", rt.peer.name,
                  s->session_key ? s->session_key : s->turn_id, err);
        if (util_now_ms() >= deadline || (io->alive && !io->alive(io->ctx))) {
            char msg[512];

            snprintf(msg, sizeof(msg),
                     "the session's owner '%s' does not answer (%s); retry once its claim "
                     "expires (%llu ms)",
                     rt.peer.name, err, (unsigned long long)c->ttl_ms);
            refused(cfg, ret, 503, "runner_error", msg, PC_CLUSTER_REFUSED_UNREACHABLE);
            return ENGINE_DISPATCH_REFUSED;
        }
        util_sleep_ms(RETRY_STEP_MS);
    }
}

/* ---- what the routes show ------------------------------------------------------------------ */

const char *engine_cluster_state(const struct engine_config *cfg)
{
    if (!cfg->cluster)
        return NULL;
    return cfg->pool && pool_counter_get(cfg->pool, PC_CLUSTER_STATE) == 1 ? "ok" : "degraded";
}

static json_object *member_json(const struct cluster_member *m, const char *self)
{
    json_object *o = json_object_new_object();

    json_object_object_add(o, "name", json_object_new_string(m->name));
    json_object_object_add(o, "url", json_object_new_string(m->url));
    json_object_object_add(o, "capacity", json_object_new_int64((int64_t)m->capacity));
    json_object_object_add(o, "load", json_object_new_int64((int64_t)m->load));
    json_object_object_add(o, "runs", json_object_new_int64((int64_t)m->runs));
    json_object_object_add(o, "runsMax", json_object_new_int64((int64_t)m->runs_max));
    json_object_object_add(o, "self", json_object_new_boolean(strcmp(m->name, self) == 0));
    return o;
}

/* {"member","group","state","members":[...]} with the members this thread could list. */
static json_object *describe(const struct cluster_config *c, const char *state, int *ret_n,
                             char *err, size_t errlen)
{
    struct cluster_member *m = calloc(CLUSTER_MEMBERS_MAX, sizeof(*m));
    json_object *o = json_object_new_object(), *list = json_object_new_array();
    int n = m ? cluster_members_list(c, m, CLUSTER_MEMBERS_MAX, err, errlen) : -ENOMEM;

    json_object_object_add(o, "member", json_object_new_string(c->member));
    json_object_object_add(o, "group", json_object_new_string(c->group));
    json_object_object_add(o, "state", json_object_new_string(n < 0 ? "degraded" : state));
    for (int i = 0; i < n; i++)
        json_object_array_add(list, member_json(&m[i], c->member));
    json_object_object_add(o, "members", list);
    free(m);
    *ret_n = n;
    return o;
}

json_object *engine_cluster_describe(const struct engine_config *cfg)
{
    int n;

    if (!cfg->cluster)
        return NULL;
    return describe(cfg->cluster, engine_cluster_state(cfg), &n, NULL, 0);
}

int engine_cluster_metrics(const struct engine_config *cfg, struct buf *out)
{
    static const struct {
        const char *name, *label;
        enum pool_counter idx;
    } rows[] = {
        {"agent_runner_cluster_turns_total", "path=\"local\"", PC_CLUSTER_TURNS_LOCAL},
        {"agent_runner_cluster_turns_total", "path=\"forwarded\"", PC_CLUSTER_TURNS_FORWARDED},
        {"agent_runner_cluster_turns_total", "path=\"received\"", PC_CLUSTER_TURNS_RECEIVED},
        {"agent_runner_cluster_control_total", "path=\"local\"", PC_CLUSTER_CONTROL_LOCAL},
        {"agent_runner_cluster_control_total", "path=\"forwarded\"", PC_CLUSTER_CONTROL_FORWARDED},
        {"agent_runner_cluster_control_total", "path=\"received\"", PC_CLUSTER_CONTROL_RECEIVED},
        {"agent_runner_cluster_refused_total", "reason=\"loop\"", PC_CLUSTER_REFUSED_LOOP},
        {"agent_runner_cluster_refused_total", "reason=\"unreachable\"",
         PC_CLUSTER_REFUSED_UNREACHABLE},
        {"agent_runner_cluster_conflicts_total", NULL, PC_CLUSTER_CONFLICTS},
        {"agent_runner_cluster_redis_errors_total", NULL, PC_CLUSTER_REDIS_ERRORS},
        {"agent_runner_cluster_members", NULL, PC_CLUSTER_MEMBERS},
        {"agent_runner_cluster_sessions_held", NULL, PC_CLUSTER_LOAD},
    };
    const char *last = "";
    int r = 0;

    if (!cfg->cluster || !cfg->pool)
        return 0;
    for (size_t i = 0; i < ARRAY_SIZE(rows) && r >= 0; i++) {
        bool gauge = !strstr(rows[i].name, "_total");

        if (strcmp(last, rows[i].name) != 0)
            r = buf_printf(out, "# TYPE %s %s\n", rows[i].name, gauge ? "gauge" : "counter");
        last = rows[i].name;
        if (r >= 0)
            r = buf_printf(out, "%s%s%s%s %llu\n", rows[i].name, rows[i].label ? "{" : "",
                           rows[i].label ? rows[i].label : "", rows[i].label ? "}" : "",
                           (unsigned long long)pool_counter_get(cfg->pool, rows[i].idx));
    }
    if (r >= 0)
        r = buf_printf(out, "# TYPE agent_runner_cluster_up gauge\nagent_runner_cluster_up %d\n",
                       pool_counter_get(cfg->pool, PC_CLUSTER_STATE) == 1);
    return r < 0 ? r : 0;
}

/* ---- the master ---------------------------------------------------------------------------- */

struct admin_cluster {
    struct cluster_master *m;
};

int admin_cluster_new(const struct engine_config *cfg, uint64_t runs_max,
                      struct admin_cluster **ret)
{
    struct admin_cluster *ac;

    *ret = NULL;
    if (!cfg->cluster || !cfg->pool)
        return 1;
    ac = calloc(1, sizeof(*ac));
    if (!ac)
        return -ENOMEM;
    ac->m = cluster_master_new(cfg->cluster, cfg->pool, runs_max);
    if (!ac->m) {
        free(ac);
        return -ENOMEM;
    }
    *ret = ac;
    return 0;
}

void admin_cluster_tick(struct admin_cluster *ac, struct admin_cluster_tick *rep)
{
    struct cluster_tick_report t;

    memset(rep, 0, sizeof(*rep));
    if (!ac)
        return;
    cluster_master_tick(ac->m, &t);
    rep->ran = t.ran;
    rep->up = t.up;
    rep->changed = t.changed;
    snprintf(rep->error, sizeof(rep->error), "%s", t.error);
    rep->held = t.held;
    rep->members = t.members;
    rep->asserted = t.asserted;
    rep->released = t.released;
    rep->conflicts = t.conflicts;
    snprintf(rep->conflict_key, sizeof(rep->conflict_key), "%s", t.conflict_key);
    snprintf(rep->conflict_owner, sizeof(rep->conflict_owner), "%s", t.conflict_owner);
}

int64_t admin_cluster_due_ms(const struct admin_cluster *ac)
{
    return ac ? cluster_master_due_ms(ac->m) : -1;
}

void admin_cluster_after_fork(struct admin_cluster *ac)
{
    if (ac)
        cluster_master_after_fork(ac->m);
}

void admin_cluster_free(struct admin_cluster *ac, bool leave)
{
    if (!ac)
        return;
    if (leave)
        cluster_master_stop(ac->m);
    cluster_master_free(ac->m);
    free(ac);
}

int admin_cluster_members(engine_getenv_fn get, void *ctx, json_object **ret, char *err,
                          size_t errlen)
{
    struct cluster_config c;
    const char *instance = get("AGENT_RUNNER_INSTANCE", ctx);
    char why[256] = "";
    json_object *o;
    int r, n;

    r = cluster_config_load(get, ctx, instance, 8, &c, err, errlen);
    if (r != 0)
        return r;
    o = describe(&c, "ok", &n, why, sizeof(why));
    cluster_config_wipe(&c);
    if (n < 0) {
        json_object_put(o);
        return util_fail(n, err, errlen, "cannot list the members: Redis at %s: %s", c.url_text,
                         why[0] ? why : strerror(-n));
    }
    *ret = o;
    return 0;
}
