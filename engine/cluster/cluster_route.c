/*
 * cluster_route — where a request runs (cluster_route.h).
 */
#include "cluster/cluster_route.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "session/pool.h"

/* ---- the thread's connection ------------------------------------------------------------- */

static pthread_key_t tl_key;
static pthread_once_t tl_once = PTHREAD_ONCE_INIT;

static void tl_free(void *p)
{
    redis_free(p);
}

static void tl_init(void)
{
    (void)pthread_key_create(&tl_key, tl_free);
}

struct redis *cluster_thread_redis(const struct cluster_config *c)
{
    struct redis *r;
    struct redis_opts o = {.url = &c->url,
                           .ca_file = c->redis_ca_file[0] ? c->redis_ca_file : NULL,
                           .connect_ms = c->redis_connect_ms,
                           .io_ms = c->redis_io_ms};

    pthread_once(&tl_once, tl_init);
    r = pthread_getspecific(tl_key);
    if (r)
        return r;
    r = redis_new(&o);
    if (r && pthread_setspecific(tl_key, r) != 0) {
        redis_free(r);
        r = NULL;
    }
    return r;
}

/* ---- members ----------------------------------------------------------------------------- */

int cluster_members_list(const struct cluster_config *c, struct cluster_member *out, size_t max,
                         char *err, size_t errlen)
{
    struct redis *rd = cluster_thread_redis(c);
    struct redis_cmd cmd = {0};
    redisReply *rep = NULL;
    char key[CLUSTER_KEY_MAX], prefix[CLUSTER_KEY_MAX], why[256];
    size_t n = 0;
    int r;

    if (!rd)
        return -ENOMEM;
    if (cluster_key(c, "members", NULL, key, sizeof(key)) < 0 ||
        cluster_key(c, "member:", NULL, prefix, sizeof(prefix)) < 0)
        return -ENAMETOOLONG;
    redis_cmd_arg(&cmd, "EVAL");
    redis_cmd_arg(&cmd, cluster_script_members);
    redis_cmd_arg(&cmd, "1");
    redis_cmd_arg(&cmd, key);
    redis_cmd_arg(&cmd, prefix);
    r = redis_command(rd, &cmd, &rep, why, sizeof(why));
    if (r < 0) {
        log_debug("cluster: listing members: %s", why);
        if (err)
            util_seterr(err, errlen, "%s", why);
        return r;
    }
    if (rep->type != REDIS_REPLY_ARRAY) {
        if (err)
            util_seterr(err, errlen, "redis: %s",
                        rep->type == REDIS_REPLY_ERROR ? rep->str : "not an array");
        freeReplyObject(rep);
        return -EPROTO;
    }
    for (size_t i = 0; i < rep->elements && n < max; i++) {
        size_t len;
        const char *s = cluster_reply_str(rep->element[i], &len);

        if (s && cluster_member_parse(s, len, &out[n]) == 0)
            n++;
    }
    freeReplyObject(rep);
    return (int)n;
}

/* The live member with the most room (lowest load per capacity) other than this one. */
static bool least_loaded(const struct cluster_config *c, struct cluster_member *ret)
{
    struct cluster_member *m = calloc(CLUSTER_MEMBERS_MAX, sizeof(*m));
    double best = 2.0;
    bool found = false;
    int n;

    if (!m)
        return false;
    n = cluster_members_list(c, m, CLUSTER_MEMBERS_MAX, NULL, 0);
    for (int i = 0; i < n; i++) {
        double used;

        if (strcmp(m[i].name, c->member) == 0 || !cluster_member_has_room(&m[i]))
            continue;
        used = (double)m[i].load / (double)m[i].capacity;
        if (used < best) {
            best = used;
            *ret = m[i];
            found = true;
        }
    }
    free(m);
    return found;
}

/* ---- the decision ------------------------------------------------------------------------ */

static void refuse(struct cluster_route *rt, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void refuse(struct cluster_route *rt, int status, const char *code, const char *fmt, ...)
{
    va_list ap;

    rt->kind = CLUSTER_ROUTE_REFUSE;
    rt->status = status;
    snprintf(rt->code, sizeof(rt->code), "%s", code);
    va_start(ap, fmt);
    vsnprintf(rt->message, sizeof(rt->message), fmt, ap);
    va_end(ap);
}

/* Run the claim (or, for a turn, the turn) script: its reply, or NULL with -errno in *rc. */
static redisReply *ask(const struct cluster_config *c, const struct cluster_subject *s,
                       bool may_claim, int *rc)
{
    struct redis *rd = cluster_thread_redis(c);
    struct redis_cmd cmd = {0};
    redisReply *rep = NULL;
    char key[CLUSTER_KEY_MAX], prefix[CLUSTER_KEY_MAX], turn[CLUSTER_KEY_MAX] = "";
    char value[CLUSTER_VALUE_MAX], ttl[24], turn_ttl[24], err[256];

    *rc = -ENOMEM;
    if (!rd)
        return NULL;
    *rc = -ENAMETOOLONG;
    if (cluster_key(c, s->session_key ? "owner:" : "turn:",
                    s->session_key ? s->session_key : s->turn_id, key, sizeof(key)) < 0 ||
        cluster_key(c, "member:", NULL, prefix, sizeof(prefix)) < 0 ||
        (s->session_key && s->turn_id && s->turn_id[0] && c->turn_ttl_ms &&
         cluster_key(c, "turn:", s->turn_id, turn, sizeof(turn)) < 0))
        return NULL;
    if (cluster_owner_value(c, value, sizeof(value)) < 0)
        return NULL;
    snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)c->ttl_ms);
    snprintf(turn_ttl, sizeof(turn_ttl), "%llu", (unsigned long long)c->turn_ttl_ms);
    redis_cmd_arg(&cmd, "EVAL");
    redis_cmd_arg(&cmd, s->session_key ? cluster_script_claim : cluster_script_turn);
    redis_cmd_arg(&cmd, "1");
    redis_cmd_arg(&cmd, key);
    if (s->session_key) {
        redis_cmd_arg(&cmd, value);
        redis_cmd_arg(&cmd, c->member);
        redis_cmd_arg(&cmd, ttl);
        redis_cmd_arg(&cmd, prefix);
        redis_cmd_arg(&cmd, may_claim ? "1" : "0");
        redis_cmd_arg(&cmd, turn);
        redis_cmd_arg(&cmd, turn_ttl);
    } else {
        redis_cmd_arg(&cmd, prefix);
    }
    *rc = redis_command(rd, &cmd, &rep, err, sizeof(err));
    if (*rc < 0) {
        log_debug("cluster: asking for '%s': %s", key, err);
        return NULL;
    }
    if (rep->type != REDIS_REPLY_ARRAY) {
        log_debug("cluster: asking for '%s': %s", key,
                  rep->type == REDIS_REPLY_ERROR ? rep->str : "not an array");
        freeReplyObject(rep);
        *rc = -EPROTO;
        return NULL;
    }
    *rc = 0;
    return rep;
}

/*
 * The reply names another live member (two elements): *peer filled, true. One element (this
 * member holds it) or none: false.
 */
static bool owner_elsewhere(const redisReply *rep, struct cluster_member *peer)
{
    size_t len;
    const char *rec;

    if (rep->elements < 2)
        return false;
    rec = cluster_reply_str(rep->element[1], &len);
    return rec && cluster_member_parse(rec, len, peer) == 0;
}

static bool at_capacity(const struct cluster_config *c, struct pool *p)
{
    return p && pool_counter_get(p, PC_CLUSTER_LOAD) >= c->capacity;
}

int cluster_route(const struct cluster_config *c, struct pool *p, const struct cluster_subject *s,
                  const char *forwarded_by, struct cluster_route *ret)
{
    bool may_claim = s->session_key && s->may_claim, spill = false;
    redisReply *rep = NULL;
    struct cluster_member peer;
    int rc = 0;

    memset(ret, 0, sizeof(*ret));
    ret->received = forwarded_by != NULL;
    if (!s->session_key && !(s->turn_id && s->turn_id[0] && !s->may_claim))
        return 0; /* nothing to route: a run without a session runs where it lands */
    if (p && pool_counter_get(p, PC_CLUSTER_STATE) == 2) {
        ret->degraded = true; /* the master cannot reach Redis: serve here */
        return 0;
    }
    /* a new session while full goes to a member with room: ask before claiming */
    spill = may_claim && !forwarded_by && at_capacity(c, p);
    rep = ask(c, s, may_claim && !spill, &rc);
    if (!rep)
        goto failed;
    if (!owner_elsewhere(rep, &peer) && rep->elements == 0 && spill) {
        freeReplyObject(rep);
        if (least_loaded(c, &peer)) {
            ret->kind = CLUSTER_ROUTE_FORWARD;
            ret->peer = peer;
            return 0;
        }
        rep = ask(c, s, true, &rc); /* nobody has room: claim it here after all */
        if (!rep)
            goto failed;
    }
    /* a turn's record names its member, this one too: the turn is here */
    if (owner_elsewhere(rep, &peer) && !(!s->session_key && strcmp(peer.name, c->member) == 0)) {
        if (forwarded_by || strcmp(peer.name, c->member) == 0)
            refuse(ret, 409, "cluster_loop",
                   "session owned by '%s': '%s' forwarded this request to '%s', and a "
                   "forwarded request is not forwarded again",
                   peer.name, forwarded_by ? forwarded_by : c->member, c->member);
        else {
            ret->kind = CLUSTER_ROUTE_FORWARD;
            ret->peer = peer;
        }
    }
    freeReplyObject(rep);
    return 0;
failed:
    ret->kind = CLUSTER_ROUTE_LOCAL;
    ret->degraded = true;
    if (p)
        pool_counter_add(p, PC_CLUSTER_REDIS_ERRORS, 1);
    return rc < 0 ? -EIO : 0;
}
