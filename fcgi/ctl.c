/*
 * agent-runner-ctl — look at and act on a running agent-runner's session table.
 *
 *   agent-runner-ctl [--instance NAME] sessions [--json]   live sessions and recent teardowns
 *   agent-runner-ctl [--instance NAME] stats [--json]      counters and table occupancy
 *   agent-runner-ctl [--instance NAME] kill <key>          destroy a session's environment
 *   agent-runner-ctl [--instance NAME] check               slot table consistency check
 *
 * `sessions` and `stats` map the segment read-only and never take its lock (a slot is copied
 * until two reads agree). `kill` and `check` map it read-write and take the lock.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "environment/environment.h"
#include "harness/harness.h"
#include "session/pool.h"
#include "telemetry/metrics.h"

#define POOL_RECENT_VIEWS 64


static void usage(FILE *f)
{
    fprintf(f, "usage: agent-runner-ctl [--instance NAME] sessions [--json]\n"
               "       agent-runner-ctl [--instance NAME] stats [--json]\n"
               "       agent-runner-ctl [--instance NAME] kill <projectId:sessionId>\n"
               "       agent-runner-ctl [--instance NAME] check\n");
}

/* The most recent teardown of key among the n remembered ones, or NULL. */
static const struct pool_teardown_view *recent_for(const struct pool_teardown_view *recent,
                                                   size_t n, const char *key)
{
    for (size_t k = 0; k < n; k++)
        if (strcmp(recent[k].key, key) == 0)
            return &recent[k];
    return NULL;
}

static json_object *session_json(const struct pool_session *s, uint32_t i,
                                 const struct pool_teardown_view *t, int64_t now)
{
    json_object *o = json_object_new_object();
    int64_t left = 0;

    if (s->state == SLOT_IDLE)
        left = s->idle_deadline_ms - now;
    else if (s->state == SLOT_AWAITING_APPROVAL)
        left = s->approval_deadline_ms - now;
    json_object_object_add(o, "key", json_object_new_string(s->key));
    json_object_object_add(o, "state", json_object_new_string(pool_state_name(s->state)));
    json_object_object_add(o, "harness", json_object_new_string(harness_kind_name(s->harness)));
    json_object_object_add(o, "provider", json_object_new_string(s->provider));
    json_object_object_add(o, "model", json_object_new_string(s->model));
    json_object_object_add(o, "keeperPid", json_object_new_int(s->keeper_pid));
    json_object_object_add(o, "sandboxPid", json_object_new_int(s->sandbox_pid));
    json_object_object_add(o, "envDir", json_object_new_string(s->env_dir));
    json_object_object_add(o, "approvals", json_object_new_int((int)s->ngates));
    json_object_object_add(o, "ownerPid", json_object_new_int(s->owner_pid));
    json_object_object_add(o, "idleLeftMs", json_object_new_int64(left > 0 ? left : 0));
    json_object_object_add(o, "turns", json_object_new_int((int)s->turns));
    /* a spare (state "spare", or "starting" while it is being built) holds no session yet */
    json_object_object_add(o, "spare", json_object_new_boolean(s->spare));
    json_object_object_add(o, "fromSpare", json_object_new_boolean(s->from_spare));
    json_object_object_add(o, "slot", json_object_new_int((int)i));
    json_object_object_add(o, "generation", json_object_new_int64(s->h.generation));
    json_object_object_add(o, "lastTeardown",
                           t ? json_object_new_string(teardown_reason_name(
                                   (enum teardown_reason)t->reason))
                             : NULL);
    return o;
}

static int cmd_sessions(const struct pool *p, bool json)
{
    json_object *list = json_object_new_array(), *recent = json_object_new_array();
    struct pool_teardown_view *views = calloc(POOL_RECENT_VIEWS, sizeof(*views));
    struct pool_session *s = calloc(1, sizeof(*s));
    struct pool_info info;
    int64_t now = util_now_ms();
    size_t n;

    if (!views || !s) {
        free(views);
        free(s);
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    pool_get_info(p, &info);
    n = pool_recent_teardowns(p, views, POOL_RECENT_VIEWS);
    for (uint32_t i = 0; i < info.nslots; i++) {
        if (!pool_session_peek(p, i, s))
            continue;
        json_object_array_add(list, session_json(s, i, s->key[0] ? recent_for(views, n, s->key)
                                                               : NULL,
                                                 now));
    }
    for (size_t k = 0; k < n; k++) {
        const struct pool_teardown_view *t = &views[k];
        json_object *o = json_object_new_object();

        json_object_object_add(o, "key", json_object_new_string(t->key));
        json_object_object_add(o, "reason", json_object_new_string(teardown_reason_name(
                                                (enum teardown_reason)t->reason)));
        json_object_object_add(o, "harness",
                               json_object_new_string(harness_kind_name(t->harness)));
        json_object_object_add(o, "agoMs", json_object_new_int64(now - t->at_ms));
        json_object_object_add(o, "turns", json_object_new_int((int)t->turns));
        json_object_array_add(recent, o);
    }
    free(views);
    free(s);
    if (json) {
        json_object *doc = json_object_new_object();
        json_object_object_add(doc, "sessions", list);
        json_object_object_add(doc, "recent", recent);
        printf("%s\n", jsonx_text(doc, NULL));
        json_object_put(doc);
        return 0;
    }
    printf("%-40s %-18s %-9s %-12s %8s %10s %6s %s\n", "KEY", "STATE", "HARNESS", "PROVIDER",
           "KEEPER", "IDLE_LEFT", "TURNS", "LAST_TEARDOWN");
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        json_object *o = json_object_array_get_idx(list, i);
        const char *last = jsonx_str(o, "lastTeardown");
        const char *key = jsonx_str(o, "key");

        if (json_object_get_boolean(jsonx_get(o, "spare")))
            key = "(spare)";
        printf("%-40s %-18s %-9s %-12s %8d %9llds %6d %s\n", key,
               jsonx_str(o, "state"), jsonx_str(o, "harness"), jsonx_str(o, "provider"),
               json_object_get_int(jsonx_get(o, "keeperPid")),
               (long long)(json_object_get_int64(jsonx_get(o, "idleLeftMs")) / 1000),
               json_object_get_int(jsonx_get(o, "turns")), last ? last : "-");
    }
    if (json_object_array_length(recent)) {
        printf("\nrecent teardowns:\n");
        for (size_t i = 0; i < json_object_array_length(recent); i++) {
            json_object *o = json_object_array_get_idx(recent, i);
            printf("  %-40s %-22s %lldms ago\n", jsonx_str(o, "key"), jsonx_str(o, "reason"),
                   (long long)json_object_get_int64(jsonx_get(o, "agoMs")));
        }
    }
    json_object_put(list);
    json_object_put(recent);
    return 0;
}

static int cmd_stats(const struct pool *p, bool json)
{
    static const char *const outcomes[METRIC_OUTCOMES] = {
        "turns_ok", "turns_error", "turns_paused", "turns_cancelled", "turns_limit"};
    const struct {
        const char *name;
        uint64_t value;
    } totals[] = {
        {"admission_rejected", pool_counter_get(p, PC_ADMISSION_REJECTED)},
        {"worker_restarts", pool_counter_get(p, PC_WORKER_RESTARTS)},
        {"keeper_spawns", metrics_keeper_spawns_total(pool_metrics_const(p))},
        {"warm_hits", pool_counter_get(p, PC_WARM_HITS)},
        {"egress_denied", pool_counter_get(p, PC_EGRESS_DENIED)},
        {"cold_starts", metrics_cold_starts_total(pool_metrics_const(p))},
        {"runs_in_flight", pool_inflight_total(p)},
    };
    json_object *doc = json_object_new_object(), *counters = json_object_new_object();
    struct pool_info info;

    for (size_t i = 0; i < ARRAY_SIZE(totals); i++)
        json_object_object_add(counters, totals[i].name,
                               json_object_new_int64((int64_t)totals[i].value));
    for (unsigned o = 0; o < METRIC_OUTCOMES; o++)
        json_object_object_add(counters, outcomes[o],
                               json_object_new_int64(
                                   (int64_t)metrics_turns_total(pool_metrics_const(p), o)));
    pool_get_info(p, &info);
    json_object_object_add(doc, "instance", json_object_new_string(info.instance_id));
    json_object_object_add(doc, "masterPid", json_object_new_int(info.master_pid));
    json_object_object_add(doc, "slots", json_object_new_int((int)info.nslots));
    json_object_object_add(doc, "used", json_object_new_int((int)info.nused));
    json_object_object_add(doc, "parked", json_object_new_int((int)info.nparked));
    json_object_object_add(doc, "repairs", json_object_new_int((int)info.repairs));
    json_object_object_add(doc, "counters", counters);
    if (json) {
        printf("%s\n", jsonx_text(doc, NULL));
    } else {
        printf("instance %s, master %d, slots %u used %u parked %u, repairs %u\n",
               info.instance_id, info.master_pid, info.nslots, info.nused,
               info.nparked, info.repairs);
        json_object_object_foreach(counters, k, v)
        {
            printf("  %-20s %lld\n", k, (long long)json_object_get_int64(v));
        }
    }
    json_object_put(doc);
    return 0;
}

static int cmd_kill(struct pool *p, const char *key)
{
    int r = environment_kill(p, key, TEARDOWN_KILL);

    if (r < 0) {
        fprintf(stderr, "kill '%s': %s\n", key, ar_strerror(r));
        return 1;
    }
    printf("%s\n", r > 0 ? "killed" : "no such session");
    return 0;
}

static int cmd_check(struct pool *p)
{
    char err[256];
    int r = pool_check(p, err, sizeof(err));

    if (r == -EUCLEAN) {
        printf("inconsistent: %s\n", err);
        return 1;
    }
    if (r < 0) {
        fprintf(stderr, "cannot lock the session table: %s\n", ar_strerror(r));
        return 1;
    }
    printf("consistent\n");
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"instance", required_argument, NULL, 'i'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *instance = getenv("AGENT_RUNNER_INSTANCE");
    bool json = false, rw;
    struct pool *p = NULL;
    char name[96];
    const char *cmd;
    int c, r;

    while ((c = getopt_long(argc, argv, "i:jh", opts, NULL)) != -1) {
        switch (c) {
        case 'i':
            instance = optarg;
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    cmd = argv[optind];
    if (!instance || !instance[0])
        instance = "default";
    if (pool_shm_name(instance, name, sizeof(name)) < 0) {
        fprintf(stderr, "--instance: too long\n");
        return 2;
    }
    rw = strcmp(cmd, "kill") == 0 || strcmp(cmd, "check") == 0;
    r = pool_attach(name, !rw, &p);
    if (r < 0) {
        fprintf(stderr, "cannot attach '%s': %s\n", name,
                r == -EPROTO ? "not an agent-runner session table of this version"
                             : ar_strerror(r));
        return 1;
    }
    if (strcmp(cmd, "sessions") == 0)
        r = cmd_sessions(p, json);
    else if (strcmp(cmd, "stats") == 0)
        r = cmd_stats(p, json);
    else if (strcmp(cmd, "kill") == 0 && optind + 1 < argc)
        r = cmd_kill(p, argv[optind + 1]);
    else if (strcmp(cmd, "check") == 0)
        r = cmd_check(p);
    else {
        usage(stderr);
        r = 2;
    }
    pool_detach(p);
    return r;
}
