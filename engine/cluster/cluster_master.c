/*
 * cluster_master — the master's tick: the member record, the owner keys of the sessions held
 * here, reconciliation after a Redis outage (cluster_master.h).
 */
#include "cluster/cluster_master.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "session/pool.h"

/* What a slot's key held when it was last refreshed here. */
struct held {
    uint32_t generation; /* 0: nothing held for this slot index */
    char key[POOL_KEY_MAX];
    char value[CLUSTER_VALUE_MAX];
};

struct cluster_master {
    const struct cluster_config *c;
    struct pool *p;
    struct redis *rd;
    uint64_t runs_max;
    uint32_t nslots;
    struct held *held;           /* by slot index */
    struct pool_key_entry *live; /* this tick's keyed slots */
    struct redis_cmd *cmds;      /* this tick's commands */
    redisReply **rep;
    int64_t next_ms;
    int state; /* 0 unknown, 1 up, 2 down */
    char ttl[24];
    char member_key[CLUSTER_KEY_MAX], members_key[CLUSTER_KEY_MAX], prefix[CLUSTER_KEY_MAX];
    char record[CLUSTER_RECORD_MAX];
};

/* Per tick: member SET, SADD, members list, then one refresh per live key and one release per
 * ended key (at most nslots each). */
#define FIXED_CMDS 3

struct cluster_master *cluster_master_new(const struct cluster_config *c, struct pool *p,
                                          uint64_t runs_max)
{
    struct cluster_master *m = calloc(1, sizeof(*m));
    struct redis_opts o = {.url = &c->url,
                           .ca_file = c->redis_ca_file[0] ? c->redis_ca_file : NULL,
                           .connect_ms = c->redis_connect_ms,
                           .io_ms = c->redis_io_ms};
    struct pool_info info;
    size_t ncmds;

    if (!m)
        return NULL;
    pool_get_info(p, &info);
    m->c = c;
    m->p = p;
    m->runs_max = runs_max;
    m->nslots = info.nslots;
    ncmds = FIXED_CMDS + 2 * (size_t)info.nslots;
    m->rd = redis_new(&o);
    m->held = calloc(info.nslots, sizeof(*m->held));
    m->live = calloc(info.nslots, sizeof(*m->live));
    m->cmds = calloc(ncmds, sizeof(*m->cmds));
    m->rep = calloc(ncmds, sizeof(*m->rep));
    if (!m->rd || !m->held || !m->live || !m->cmds || !m->rep ||
        cluster_key(c, "member:", c->member, m->member_key, sizeof(m->member_key)) < 0 ||
        cluster_key(c, "members", NULL, m->members_key, sizeof(m->members_key)) < 0 ||
        cluster_key(c, "member:", NULL, m->prefix, sizeof(m->prefix)) < 0) {
        cluster_master_free(m);
        return NULL;
    }
    snprintf(m->ttl, sizeof(m->ttl), "%llu", (unsigned long long)c->ttl_ms);
    return m;
}

void cluster_master_free(struct cluster_master *m)
{
    if (!m)
        return;
    redis_free(m->rd);
    free(m->held);
    free(m->live);
    free(m->cmds);
    free(m->rep);
    free(m);
}

void cluster_master_after_fork(struct cluster_master *m)
{
    redis_close(m->rd);
}

int64_t cluster_master_due_ms(const struct cluster_master *m)
{
    int64_t left = m->next_ms - util_now_ms();

    return left > 0 ? left : 0;
}

/* The owner-key name of a pool key into out (CLUSTER_KEY_MAX). */
static int owner_key(const struct cluster_master *m, const char *key, char *out)
{
    return cluster_key(m->c, "owner:", key, out, CLUSTER_KEY_MAX);
}

static void cmd_eval(struct redis_cmd *cmd, const char *script, const char *key)
{
    memset(cmd, 0, sizeof(*cmd));
    redis_cmd_arg(cmd, "EVAL");
    redis_cmd_arg(cmd, script);
    redis_cmd_arg(cmd, "1");
    redis_cmd_arg(cmd, key);
}

/* Whether key is among this tick's live slots. */
static bool live_has(const struct cluster_master *m, int nlive, const char *key)
{
    for (int i = 0; i < nlive; i++)
        if (strcmp(m->live[i].key, key) == 0)
            return true;
    return false;
}

/* The session is owned by another member: kill what is left of it here (never waits). */
static void kill_stale(struct cluster_master *m, const char *key, const char *owner,
                       struct cluster_tick_report *rep)
{
    struct pool_victim v;

    if (pool_session_kill(m->p, key, TEARDOWN_OWNER_MOVED, &v) != 1)
        return;
    if (v.keeper_pid > 0 && util_proc_alive(v.keeper_pid, v.keeper_start))
        kill(v.keeper_pid, SIGTERM); /* it tears down and frees its slot; the master reaps it */
    pool_counter_add(m->p, PC_CLUSTER_CONFLICTS, 1);
    if (rep->conflicts++ == 0) {
        snprintf(rep->conflict_key, sizeof(rep->conflict_key), "%s", key);
        snprintf(rep->conflict_owner, sizeof(rep->conflict_owner), "%s", owner);
    }
}

/* Queue this tick's commands: record, members, refreshes, releases. *ret_n commands. */
static int queue(struct cluster_master *m, int nlive, char (*keys)[CLUSTER_KEY_MAX],
                 char (*values)[CLUSTER_VALUE_MAX], size_t *ret_n)
{
    struct cluster_member me;
    size_t n = 0;

    memset(&me, 0, sizeof(me));
    snprintf(me.name, sizeof(me.name), "%s", m->c->member);
    snprintf(me.url, sizeof(me.url), "%s", m->c->advertise);
    me.capacity = m->c->capacity;
    me.load = (uint64_t)nlive;
    me.runs = pool_inflight_total(m->p);
    me.runs_max = m->runs_max;
    me.pid = getpid();
    if (cluster_member_format(&me, m->record, sizeof(m->record)) < 0)
        return -ENOSPC;
    memset(&m->cmds[n], 0, sizeof(m->cmds[n]));
    redis_cmd_arg(&m->cmds[n], "SET");
    redis_cmd_arg(&m->cmds[n], m->member_key);
    redis_cmd_arg(&m->cmds[n], m->record);
    redis_cmd_arg(&m->cmds[n], "PX");
    redis_cmd_arg(&m->cmds[n++], m->ttl);
    memset(&m->cmds[n], 0, sizeof(m->cmds[n]));
    redis_cmd_arg(&m->cmds[n], "SADD");
    redis_cmd_arg(&m->cmds[n], m->members_key);
    redis_cmd_arg(&m->cmds[n++], m->c->member);
    cmd_eval(&m->cmds[n], cluster_script_members, m->members_key);
    redis_cmd_arg(&m->cmds[n++], m->prefix);
    for (int i = 0; i < nlive; i++) {
        if (owner_key(m, m->live[i].key, keys[n]) < 0 ||
            cluster_owner_value(m->c, values[n], CLUSTER_VALUE_MAX) < 0)
            return -ENAMETOOLONG;
        cmd_eval(&m->cmds[n], cluster_script_refresh, keys[n]);
        redis_cmd_arg(&m->cmds[n], values[n]);
        redis_cmd_arg(&m->cmds[n], m->c->member);
        redis_cmd_arg(&m->cmds[n++], m->ttl);
    }
    for (uint32_t i = 0; i < m->nslots; i++) {
        const struct held *h = &m->held[i];
        bool still = false;

        if (!h->generation)
            continue;
        for (int j = 0; j < nlive && !still; j++)
            still = m->live[j].h.index == i && m->live[j].h.generation == h->generation;
        if (still || live_has(m, nlive, h->key))
            continue;
        if (owner_key(m, h->key, keys[n]) < 0)
            return -ENAMETOOLONG;
        cmd_eval(&m->cmds[n], cluster_script_release, keys[n]);
        redis_cmd_arg(&m->cmds[n++], h->value);
    }
    *ret_n = n;
    return 0;
}

/* Read the answers: the members count, each refresh (held, re-asserted or conflicting). */
static void settle(struct cluster_master *m, int nlive, size_t n, char (*values)[CLUSTER_VALUE_MAX],
                   struct cluster_tick_report *rep)
{
    size_t at = FIXED_CMDS;

    if (m->rep[2] && m->rep[2]->type == REDIS_REPLY_ARRAY)
        rep->members = (uint32_t)m->rep[2]->elements;
    for (int i = 0; i < nlive; i++, at++) {
        const struct pool_key_entry *e = &m->live[i];
        struct held *h = &m->held[e->h.index];
        size_t len = 0;
        const char *now = cluster_reply_str(m->rep[at], &len);
        char owner[CLUSTER_NAME_MAX];

        if (!now || len >= CLUSTER_VALUE_MAX ||
            cluster_owner_name(now, len, owner, sizeof(owner)) < 0)
            continue;
        if (strcmp(owner, m->c->member) != 0) {
            kill_stale(m, e->key, owner, rep);
            h->generation = 0;
            continue;
        }
        if (len == strlen(values[at]) && memcmp(now, values[at], len) == 0)
            rep->asserted++;
        h->generation = e->h.generation;
        snprintf(h->key, sizeof(h->key), "%s", e->key);
        memcpy(h->value, now, len);
        h->value[len] = '\0';
    }
    /* the rest were releases: forget those slots whatever the answer */
    for (; at < n; at++)
        rep->released +=
            m->rep[at] && m->rep[at]->type == REDIS_REPLY_INTEGER && m->rep[at]->integer == 1;
    for (uint32_t i = 0; i < m->nslots; i++) {
        bool live = false;

        for (int j = 0; j < nlive && !live; j++)
            live = m->live[j].h.index == i;
        if (!live)
            m->held[i].generation = 0;
    }
}

static void set_state(struct cluster_master *m, bool up, struct cluster_tick_report *rep)
{
    int state = up ? 1 : 2;

    rep->up = up;
    rep->changed = m->state != state;
    m->state = state;
    pool_counter_set(m->p, PC_CLUSTER_STATE, (uint64_t)state);
    if (up)
        pool_counter_set(m->p, PC_CLUSTER_MEMBERS, rep->members);
}

void cluster_master_tick(struct cluster_master *m, struct cluster_tick_report *rep)
{
    char(*keys)[CLUSTER_KEY_MAX] = NULL;
    char(*values)[CLUSTER_VALUE_MAX] = NULL;
    size_t ncmds = FIXED_CMDS + 2 * (size_t)m->nslots, n = 0;
    int nlive, r;

    memset(rep, 0, sizeof(*rep));
    if (util_now_ms() < m->next_ms)
        return;
    rep->ran = true;
    m->next_ms = util_now_ms() + (int64_t)m->c->refresh_ms;
    nlive = pool_session_keys(m->p, m->live, m->nslots);
    if (nlive < 0)
        nlive = 0;
    /* a draining environment is ending: its key is released, never refreshed */
    for (int i = 0; i < nlive;) {
        if (m->live[i].state == SLOT_DRAINING)
            m->live[i] = m->live[--nlive];
        else
            i++;
    }
    rep->held = (uint32_t)nlive;
    pool_counter_set(m->p, PC_CLUSTER_LOAD, (uint64_t)nlive);
    keys = calloc(ncmds, sizeof(*keys));
    values = calloc(ncmds, sizeof(*values));
    r = keys && values ? queue(m, nlive, keys, values, &n) : -ENOMEM;
    if (r == 0)
        r = redis_pipeline(m->rd, m->cmds, n, m->rep, rep->error, sizeof(rep->error));
    else
        snprintf(rep->error, sizeof(rep->error), "cluster tick: %s", strerror(-r));
    if (r == 0) {
        settle(m, nlive, n, values, rep);
        for (size_t i = 0; i < n; i++)
            freeReplyObject(m->rep[i]);
    }
    set_state(m, r == 0, rep);
    free(keys);
    free(values);
}

/*
 * At a clean stop: every owner key still naming this member (sessions whose environment ended
 * before a tick saw them, claims of turns that never started), found with SCAN (never KEYS:
 * the Redis may be shared), released with the release-mine script. Bounded: 64 batches.
 */
static void release_all_mine(struct cluster_master *m)
{
    char cursor[32] = "0", pattern[CLUSTER_KEY_MAX], err[256];
    struct redis_cmd cmd;
    redisReply *rep = NULL;

    if (cluster_key(m->c, "owner:", "*", pattern, sizeof(pattern)) < 0)
        return;
    for (int batch = 0; batch < 64; batch++) {
        redisReply *keys;
        size_t n = 0;

        memset(&cmd, 0, sizeof(cmd));
        redis_cmd_arg(&cmd, "SCAN");
        redis_cmd_arg(&cmd, cursor);
        redis_cmd_arg(&cmd, "MATCH");
        redis_cmd_arg(&cmd, pattern);
        redis_cmd_arg(&cmd, "COUNT");
        redis_cmd_arg(&cmd, "500");
        if (redis_command(m->rd, &cmd, &rep, err, sizeof(err)) < 0)
            return;
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
            !cluster_reply_str(rep->element[0], NULL) ||
            rep->element[1]->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(rep);
            return;
        }
        snprintf(cursor, sizeof(cursor), "%s", cluster_reply_str(rep->element[0], NULL));
        keys = rep->element[1];
        for (size_t i = 0; i < keys->elements && n < m->nslots; i++) {
            const char *k = cluster_reply_str(keys->element[i], NULL);

            if (!k)
                continue;
            cmd_eval(&m->cmds[n], cluster_script_release_mine, k);
            redis_cmd_arg(&m->cmds[n++], m->c->member);
        }
        if (n && redis_pipeline(m->rd, m->cmds, n, m->rep, err, sizeof(err)) == 0)
            for (size_t i = 0; i < n; i++)
                freeReplyObject(m->rep[i]);
        freeReplyObject(rep);
        if (strcmp(cursor, "0") == 0)
            return;
    }
}

void cluster_master_stop(struct cluster_master *m)
{
    size_t n = 0;
    char(*keys)[CLUSTER_KEY_MAX] = calloc(m->nslots + 2u, sizeof(*keys));
    char err[256];

    if (!keys || m->state != 1) {
        free(keys);
        return;
    }
    for (uint32_t i = 0; i < m->nslots; i++) {
        if (!m->held[i].generation || owner_key(m, m->held[i].key, keys[n]) < 0)
            continue;
        cmd_eval(&m->cmds[n], cluster_script_release, keys[n]);
        redis_cmd_arg(&m->cmds[n], m->held[i].value);
        n++;
    }
    memset(&m->cmds[n], 0, sizeof(m->cmds[n]));
    redis_cmd_arg(&m->cmds[n], "DEL");
    redis_cmd_arg(&m->cmds[n++], m->member_key);
    memset(&m->cmds[n], 0, sizeof(m->cmds[n]));
    redis_cmd_arg(&m->cmds[n], "SREM");
    redis_cmd_arg(&m->cmds[n], m->members_key);
    redis_cmd_arg(&m->cmds[n++], m->c->member);
    if (redis_pipeline(m->rd, m->cmds, n, m->rep, err, sizeof(err)) == 0) {
        for (size_t i = 0; i < n; i++)
            freeReplyObject(m->rep[i]);
        release_all_mine(m);
    } else {
        log_debug("cluster: leaving: %s", err);
    }
    free(keys);
}
