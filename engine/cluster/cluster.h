/*
 * cluster — several hosts as one service, coordinated through Redis (README "Several hosts"):
 * the settings, the key names, the member record and the scripts every member runs.
 *
 * Keys (all under "agent-runner:<group>:", so several deployments can share one Redis):
 *   member:<name>   this member's record (JSON: name, url, capacity, load, runs, runsMax, pid),
 *                   PX ttl, refreshed by its master every refresh interval
 *   members         a set of member names (stale names are pruned by whoever lists them)
 *   owner:<key>     the owner of a session (pool key "<projectId>:<sessionId>"): "<member>
 *                   <nonce>", written with SET NX semantics by the claim script, PX ttl,
 *                   refreshed by the owner's master while the environment lives, deleted when
 *                   it ends (only when it still holds the value the master last saw: a newer
 *                   claim's nonce differs, so a release never removes a claim made after it)
 *   turn:<turnId>   the member that ran a turn (for routes addressed by turn id), PX turn ttl
 *
 * The owner key is the cross-host fence: a turn runs only on the owner; a member whose key
 * expired (its master died, or it lost Redis) loses its sessions to the next claim, and its
 * master kills what it still holds of them when it sees the key held by another member.
 *
 * Thread use: the settings are read-only after cluster_config_load. Everything else here is
 * pure (no I/O): the callers in cluster_route.c and cluster_master.c do the Redis calls.
 */
#ifndef AR_CLUSTER_H
#define AR_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "cluster/redis.h"

#define CLUSTER_NAME_MAX 64
#define CLUSTER_URL_MAX 512
#define CLUSTER_PATH_MAX 512
#define CLUSTER_KEY_MAX 512
#define CLUSTER_VALUE_MAX (CLUSTER_NAME_MAX + 24)
#define CLUSTER_RECORD_MAX 2048
#define CLUSTER_MEMBERS_MAX 256
/* The header a forwarded request carries: the forwarding member's name. */
#define CLUSTER_FORWARDED_HEADER "X-Agent-Runner-Forwarded"

struct cluster_config {
    struct redis_url url;                 /* AGENT_RUNNER_REDIS_URL */
    char url_text[CLUSTER_URL_MAX];       /* for logs: no password */
    char redis_ca_file[CLUSTER_PATH_MAX]; /* AGENT_RUNNER_REDIS_CA_FILE ("" system's) */
    char peer_ca_file[CLUSTER_PATH_MAX];  /* AGENT_RUNNER_CLUSTER_CA_FILE ("" system's) */
    char advertise[CLUSTER_URL_MAX];      /* AGENT_RUNNER_ADVERTISE_URL, no trailing '/' */
    char group[CLUSTER_NAME_MAX];         /* AGENT_RUNNER_CLUSTER_GROUP (the instance) */
    char member[CLUSTER_NAME_MAX];        /* AGENT_RUNNER_CLUSTER_MEMBER (<instance>@<host>) */
    char prefix[CLUSTER_NAME_MAX + 24];   /* "agent-runner:<group>:" */
    uint64_t ttl_ms;                      /* AGENT_RUNNER_CLUSTER_TTL_MS (6000) */
    uint64_t refresh_ms;                  /* AGENT_RUNNER_CLUSTER_REFRESH_MS (ttl / 3) */
    uint64_t capacity;                    /* AGENT_RUNNER_CLUSTER_CAPACITY (session pool max) */
    uint64_t turn_ttl_ms; /* AGENT_RUNNER_CLUSTER_TURN_TTL_MS: turn:<id> kept (10 min; 0: none) */
    uint64_t redis_connect_ms; /* one connect (+TLS, AUTH, SELECT): 300 */
    uint64_t redis_io_ms;      /* one exchange: 1000 */
};

/* A getenv(3)-like accessor (engine.h's engine_getenv_fn). */
typedef const char *(*cluster_getenv_fn)(const char *name, void *ctx);

/*
 * Read the settings through get. 0 with *ret filled when AGENT_RUNNER_REDIS_URL is set, 1 when
 * it is not (the cluster is off; nothing else is read), -EINVAL with err naming the variable.
 * instance is AGENT_RUNNER_INSTANCE; pool_max the session pool size (the default capacity).
 */
int cluster_config_load(cluster_getenv_fn get, void *ctx, const char *instance, uint64_t pool_max,
                        struct cluster_config *ret, char *err, size_t errlen);
/* The settings for the start-up log (never the password). */
void cluster_config_text(const struct cluster_config *c, char *out, size_t outlen);
/* Wipe the password. */
void cluster_config_wipe(struct cluster_config *c);

/* A member name: 1..63 of [A-Za-z0-9._@/:-] (it stands in keys and the owner value). */
bool cluster_name_ok(const char *s);

/* "<prefix><what><id>" into out; -ENAMETOOLONG. */
int cluster_key(const struct cluster_config *c, const char *what, const char *id, char *out,
                size_t outlen);

/* A member's record as it is stored. */
struct cluster_member {
    char name[CLUSTER_NAME_MAX];
    char url[CLUSTER_URL_MAX];
    uint64_t capacity; /* sessions it takes before new ones go elsewhere */
    uint64_t load;     /* sessions it holds */
    uint64_t runs;     /* runs in flight */
    uint64_t runs_max;
    int64_t pid;
};

/* The record as JSON into out (outlen >= CLUSTER_RECORD_MAX); -ENOSPC. */
int cluster_member_format(const struct cluster_member *m, char *out, size_t outlen);
/*
 * Parse a record another member wrote (untrusted: fuzzed). -EINVAL when it is not one: the
 * name must be a member name and the url an http(s) URL without spaces or controls.
 */
int cluster_member_parse(const char *text, size_t len, struct cluster_member *ret);
/* Whether m has room for a new session. */
bool cluster_member_has_room(const struct cluster_member *m);

/* The member name of an owner value "<member> <nonce>" into out; -EINVAL when malformed. */
int cluster_owner_name(const char *value, size_t len, char *out, size_t outlen);
/* A fresh owner value for this member: "<member> <16 hex>". */
int cluster_owner_value(const struct cluster_config *c, char *out, size_t outlen);

/*
 * The scripts (EVAL, one round trip each; see cluster.c for their text):
 *   claim    KEYS owner  ARGV value, member, ttl, member-prefix, may-claim, turn-key, turn-ttl
 *            -> {value} when this member holds it now (claimed, taken over or re-stamped),
 *               {value, record} when a live member holds it, {} when nobody does and
 *               may-claim is "0". An owner whose member record is gone is taken over.
 *   turn     KEYS turn   ARGV member-prefix -> {member, record} or {}
 *   members  KEYS members ARGV member-prefix -> the live records (stale names removed)
 *   refresh  KEYS owner  ARGV value, member, ttl -> the value now held (re-asserted when it
 *            was gone; extended when it is this member's; another member's left alone)
 *   release  KEYS owner  ARGV value -> 1 when deleted (it still held value), else 0
 *   release-mine KEYS owner ARGV member -> 1 when deleted (it named member), else 0
 */
extern const char cluster_script_claim[];
extern const char cluster_script_turn[];
extern const char cluster_script_members[];
extern const char cluster_script_refresh[];
extern const char cluster_script_release[];
extern const char cluster_script_release_mine[];

/* A reply's string (status or string), NULL for any other type. */
const char *cluster_reply_str(const redisReply *r, size_t *ret_len);

#endif
