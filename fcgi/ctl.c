/*
 * agent-runner-ctl — look at and act on a running agent-runner's session table.
 *
 *   agent-runner-ctl [--instance NAME] sessions [--json]   live sessions and recent teardowns
 *   agent-runner-ctl [--instance NAME] stats [--json]      counters and table occupancy
 *   agent-runner-ctl [--instance NAME] kill <key>          destroy a session's environment
 *   agent-runner-ctl [--instance NAME] check               slot table consistency check
 *   agent-runner-ctl [--instance NAME] turns [--json]      running and journaled turns
 *   agent-runner-ctl cluster [--json]                      the live members (several hosts:
 *                                                          AGENT_RUNNER_REDIS_URL and the rest
 *                                                          from the environment, as the runner)
 *
 * `sessions` and `stats` map the segment read-only and never take its lock (a slot is copied
 * until two reads agree). `kill` and `check` map it read-write and take the lock. `turns` reads
 * the turn journals (AGENT_RUNNER_TURN_JOURNAL_DIR, else the instance's default folder beside
 * its session table) and never writes them.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "base/jsonx.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: agent-runner-ctl [--instance NAME] sessions [--json]\n"
               "       agent-runner-ctl [--instance NAME] stats [--json]\n"
               "       agent-runner-ctl [--instance NAME] kill <projectId:sessionId>\n"
               "       agent-runner-ctl [--instance NAME] check\n"
               "       agent-runner-ctl [--instance NAME] turns [--json]\n"
               "       agent-runner-ctl cluster [--json]   (reads AGENT_RUNNER_REDIS_URL, ...)\n");
}

static int cmd_sessions(const struct pool *p, bool json)
{
    json_object *doc = admin_sessions_json(p), *list, *recent;

    if (!doc) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    list = jsonx_get(doc, "sessions");
    recent = jsonx_get(doc, "recent");
    if (json) {
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
        printf("%-40s %-18s %-9s %-12s %8d %9llds %6d %s\n", key, jsonx_str(o, "state"),
               jsonx_str(o, "harness"), jsonx_str(o, "provider"),
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
    json_object_put(doc);
    return 0;
}

static int cmd_turns(const char *instance, const char *dir, bool json)
{
    char def[256];
    json_object *doc, *list;

    if (!dir || !dir[0]) {
        if (admin_turns_dir(instance, def, sizeof(def)) < 0) {
            fprintf(stderr, "--instance: too long\n");
            return 2;
        }
        dir = def;
    }
    doc = admin_turns_json(dir);
    if (!doc) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    list = jsonx_get(doc, "turns");
    if (json) {
        printf("%s\n", jsonx_text(doc, NULL));
        json_object_put(doc);
        return 0;
    }
    printf("%-38s %-30s %7s %8s %-9s %s\n", "TURN", "SESSION", "SEQ", "AGE", "STATE", "DETACHED");
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        json_object *o = json_object_array_get_idx(list, i);
        const char *key = jsonx_str(o, "sessionKey");

        printf("%-38s %-30s %7lld %7llds %-9s %s\n", jsonx_str(o, "turnId"),
               key && key[0] ? key : "-", (long long)json_object_get_int64(jsonx_get(o, "seq")),
               (long long)(json_object_get_int64(jsonx_get(o, "ageMs")) / 1000),
               jsonx_str(o, "state"),
               json_object_get_boolean(jsonx_get(o, "detached")) ? "yes" : "no");
    }
    json_object_put(doc);
    return 0;
}

static int cmd_stats(const struct pool *p, bool json)
{
    json_object *doc = admin_stats_json(p), *counters = jsonx_get(doc, "counters");

    if (json) {
        printf("%s\n", jsonx_text(doc, NULL));
    } else {
        printf("instance %s, master %d, slots %d used %d parked %d, repairs %d\n",
               jsonx_str(doc, "instance"), json_object_get_int(jsonx_get(doc, "masterPid")),
               json_object_get_int(jsonx_get(doc, "slots")),
               json_object_get_int(jsonx_get(doc, "used")),
               json_object_get_int(jsonx_get(doc, "parked")),
               json_object_get_int(jsonx_get(doc, "repairs")));
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
    int r = admin_kill(p, key);

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
    int r = admin_check(p, err, sizeof(err));

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

static const char *env_get(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

/* The cluster's live members, from Redis (the runner's settings from the environment). */
static int cmd_cluster(bool json)
{
    json_object *doc = NULL, *list;
    char err[512];
    int r = admin_cluster_members(env_get, NULL, &doc, err, sizeof(err));

    if (r == 1) {
        fprintf(stderr, "one host: AGENT_RUNNER_REDIS_URL is not set\n");
        return 1;
    }
    if (r < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (json) {
        printf("%s\n", jsonx_text(doc, NULL));
        json_object_put(doc);
        return 0;
    }
    list = jsonx_get(doc, "members");
    printf("group %s, this member %s\n", jsonx_str(doc, "group"), jsonx_str(doc, "member"));
    printf("%-32s %-36s %8s %8s %8s\n", "MEMBER", "URL", "LOAD", "CAPACITY", "RUNS");
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        json_object *o = json_object_array_get_idx(list, i);

        printf("%-32s %-36s %8lld %8lld %8lld\n", jsonx_str(o, "name"), jsonx_str(o, "url"),
               (long long)json_object_get_int64(jsonx_get(o, "load")),
               (long long)json_object_get_int64(jsonx_get(o, "capacity")),
               (long long)json_object_get_int64(jsonx_get(o, "runs")));
    }
    json_object_put(doc);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"instance", required_argument, NULL, 'i'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *instance = getenv("AGENT_RUNNER_INSTANCE");
    const char *journal_dir = getenv("AGENT_RUNNER_TURN_JOURNAL_DIR");
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
    if (strcmp(cmd, "turns") == 0) /* the journals: files, no session table */
        return cmd_turns(instance, journal_dir, json);
    if (strcmp(cmd, "cluster") == 0) {
        if (instance != getenv("AGENT_RUNNER_INSTANCE"))
            setenv("AGENT_RUNNER_INSTANCE", instance, 1); /* the default member name's part */
        return cmd_cluster(json);
    }
    rw = strcmp(cmd, "kill") == 0 || strcmp(cmd, "check") == 0;
    r = admin_attach(instance, !rw, &p, name, sizeof(name));
    if (r == -ENAMETOOLONG) {
        fprintf(stderr, "--instance: too long\n");
        return 2;
    }
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
    admin_detach(p);
    return r;
}
