/*
 * cluster — settings, key names, the member record and the Lua scripts of the coordination
 * plane (cluster.h).
 */
#include "cluster/cluster.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/jsonx.h"
#include "base/util.h"

#define TTL_DEFAULT_MS 6000
#define TURN_TTL_MS 600000

/* ---- the scripts ------------------------------------------------------------------------- */

/* The owner's member name is the owner value up to its first space. */
const char cluster_script_claim[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if v then\n"
    "  local n = string.match(v, '^(%S+)')\n"
    "  if n == ARGV[2] then\n"
    "    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])\n"
    "    if ARGV[6] ~= '' then redis.call('SET', ARGV[6], ARGV[2], 'PX', ARGV[7]) end\n"
    "    return {ARGV[1]}\n"
    "  end\n"
    "  local m = n and redis.call('GET', ARGV[4] .. n)\n"
    "  if m then return {v, m} end\n"
    "end\n"
    "if ARGV[5] == '1' then\n"
    "  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])\n"
    "  if ARGV[6] ~= '' then redis.call('SET', ARGV[6], ARGV[2], 'PX', ARGV[7]) end\n"
    "  return {ARGV[1]}\n"
    "end\n"
    "return {}\n";

const char cluster_script_turn[] = "local n = redis.call('GET', KEYS[1])\n"
                                   "if not n then return {} end\n"
                                   "local m = redis.call('GET', ARGV[1] .. n)\n"
                                   "if m then return {n, m} end\n"
                                   "return {}\n";

const char cluster_script_members[] =
    "local out = {}\n"
    "for _, n in ipairs(redis.call('SMEMBERS', KEYS[1])) do\n"
    "  local m = redis.call('GET', ARGV[1] .. n)\n"
    "  if m then table.insert(out, m) else redis.call('SREM', KEYS[1], n) end\n"
    "end\n"
    "return out\n";

const char cluster_script_refresh[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if not v then\n"
    "  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])\n"
    "  return ARGV[1]\n"
    "end\n"
    "if string.match(v, '^(%S+)') == ARGV[2] then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end\n"
    "return v\n";

const char cluster_script_release_mine[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if v and string.match(v, '^(%S+)') == ARGV[1] then return redis.call('DEL', KEYS[1]) end\n"
    "return 0\n";

const char cluster_script_release[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                      "  return redis.call('DEL', KEYS[1])\n"
                                      "end\n"
                                      "return 0\n";

/* ---- settings ---------------------------------------------------------------------------- */

static const char *setting(cluster_getenv_fn get, void *ctx, const char *name)
{
    const char *v = get(name, ctx);

    return v && v[0] ? v : NULL;
}

bool cluster_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;

    if (n == 0 || n >= CLUSTER_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("._@/:-", c)))
            return false;
    }
    return true;
}

/* An http(s) URL a member can be reached at: https, or http for a loopback host. */
static bool peer_url_ok(const char *u)
{
    if (!u || strlen(u) >= CLUSTER_URL_MAX || !util_visible(u))
        return false;
    if (strncmp(u, "https://", 8) == 0)
        return u[8] != '\0' && u[8] != '/';
    return strncmp(u, "http://127.", 11) == 0 || strncmp(u, "http://localhost", 16) == 0 ||
           strncmp(u, "http://[::1]", 12) == 0;
}

static int read_number(cluster_getenv_fn get, void *ctx, const char *name, uint64_t min,
                       uint64_t max, uint64_t *v, char *err, size_t errlen)
{
    const char *s = setting(get, ctx, name);

    if (s && util_parse_u64(s, min, max, v) < 0)
        return util_fail(-EINVAL, err, errlen, "%s: expected %llu to %llu", name,
                         (unsigned long long)min, (unsigned long long)max);
    return 0;
}

static int read_path(cluster_getenv_fn get, void *ctx, const char *name, char *out, size_t outlen,
                     char *err, size_t errlen)
{
    const char *s = setting(get, ctx, name);

    if (!s)
        return 0;
    if (s[0] != '/' || strlen(s) >= outlen || util_has_ctl(s))
        return util_fail(-EINVAL, err, errlen, "%s: expected an absolute path", name);
    snprintf(out, outlen, "%s", s);
    return 0;
}

static int read_names(cluster_getenv_fn get, void *ctx, const char *instance,
                      struct cluster_config *c, char *err, size_t errlen)
{
    const char *group = setting(get, ctx, "AGENT_RUNNER_CLUSTER_GROUP");
    const char *member = setting(get, ctx, "AGENT_RUNNER_CLUSTER_MEMBER");
    char host[64] = "";

    if (!group)
        group = instance && instance[0] ? instance : "default";
    if (!cluster_name_ok(group))
        return util_fail(-EINVAL, err, errlen,
                         "AGENT_RUNNER_CLUSTER_GROUP: 1 to 63 of A-Z a-z 0-9 . _ @ / : -");
    snprintf(c->group, sizeof(c->group), "%s", group);
    if (member) {
        snprintf(c->member, sizeof(c->member), "%s", member);
    } else {
        if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
            snprintf(host, sizeof(host), "localhost");
        snprintf(c->member, sizeof(c->member), "%.30s@%.31s",
                 instance && instance[0] ? instance : "default", host);
    }
    if (!cluster_name_ok(c->member) || (member && strcmp(member, c->member) != 0))
        return util_fail(-EINVAL, err, errlen,
                         "AGENT_RUNNER_CLUSTER_MEMBER: 1 to 63 of A-Z a-z 0-9 . _ @ / : -%s",
                         member ? "" : " (set it: the default <instance>@<host> is not one)");
    snprintf(c->prefix, sizeof(c->prefix), "agent-runner:%s:", c->group);
    return 0;
}

static int read_advertise(cluster_getenv_fn get, void *ctx, struct cluster_config *c, char *err,
                          size_t errlen)
{
    const char *adv = setting(get, ctx, "AGENT_RUNNER_ADVERTISE_URL");
    size_t n;

    if (!adv)
        return util_fail(-EINVAL, err, errlen,
                         "AGENT_RUNNER_ADVERTISE_URL: required with AGENT_RUNNER_REDIS_URL (how "
                         "peers reach this host's https front, e.g. https://10.0.0.2:443)");
    if (!peer_url_ok(adv))
        return util_fail(-EINVAL, err, errlen,
                         "AGENT_RUNNER_ADVERTISE_URL: expected an https:// URL (http:// only "
                         "for a loopback host)");
    snprintf(c->advertise, sizeof(c->advertise), "%s", adv);
    n = strlen(c->advertise);
    while (n > 0 && c->advertise[n - 1] == '/')
        c->advertise[--n] = '\0';
    return 0;
}

int cluster_config_load(cluster_getenv_fn get, void *ctx, const char *instance, uint64_t pool_max,
                        struct cluster_config *ret, char *err, size_t errlen)
{
    const char *url = setting(get, ctx, "AGENT_RUNNER_REDIS_URL");
    struct cluster_config c;
    int r;

    if (!url)
        return 1;
    memset(&c, 0, sizeof(c));
    c.ttl_ms = TTL_DEFAULT_MS;
    c.capacity = pool_max ? pool_max : 8;
    c.turn_ttl_ms = TURN_TTL_MS;
    c.redis_connect_ms = 300;
    c.redis_io_ms = 1000;
    r = redis_url_parse(url, &c.url, err, errlen);
    if (r >= 0)
        r = read_names(get, ctx, instance, &c, err, errlen);
    if (r >= 0)
        r = read_advertise(get, ctx, &c, err, errlen);
    if (r >= 0)
        r = read_number(get, ctx, "AGENT_RUNNER_CLUSTER_TTL_MS", 1000, 600000, &c.ttl_ms, err,
                        errlen);
    c.refresh_ms = c.ttl_ms / 3;
    if (r >= 0)
        r = read_number(get, ctx, "AGENT_RUNNER_CLUSTER_REFRESH_MS", 100, c.ttl_ms / 2,
                        &c.refresh_ms, err, errlen);
    if (r >= 0)
        r = read_number(get, ctx, "AGENT_RUNNER_CLUSTER_CAPACITY", 1, 1000000, &c.capacity, err,
                        errlen);
    if (r >= 0)
        r = read_number(get, ctx, "AGENT_RUNNER_CLUSTER_TURN_TTL_MS", 0, 86400000, &c.turn_ttl_ms,
                        err, errlen);
    if (r >= 0)
        r = read_path(get, ctx, "AGENT_RUNNER_REDIS_CA_FILE", c.redis_ca_file,
                      sizeof(c.redis_ca_file), err, errlen);
    if (r >= 0)
        r = read_path(get, ctx, "AGENT_RUNNER_CLUSTER_CA_FILE", c.peer_ca_file,
                      sizeof(c.peer_ca_file), err, errlen);
    if (r >= 0) {
        redis_url_text(&c.url, c.url_text, sizeof(c.url_text));
        *ret = c;
    }
    cluster_config_wipe(&c);
    return r < 0 ? r : 0;
}

void cluster_config_text(const struct cluster_config *c, char *out, size_t outlen)
{
    snprintf(out, outlen,
             "redis %s, group '%s', member '%s' at %s, ttl %llums, refresh %llums, capacity %llu",
             c->url_text, c->group, c->member, c->advertise, (unsigned long long)c->ttl_ms,
             (unsigned long long)c->refresh_ms, (unsigned long long)c->capacity);
}

void cluster_config_wipe(struct cluster_config *c)
{
    redis_url_wipe(&c->url);
}

int cluster_key(const struct cluster_config *c, const char *what, const char *id, char *out,
                size_t outlen)
{
    int n = snprintf(out, outlen, "%s%s%s", c->prefix, what, id ? id : "");

    return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

/* ---- the member record ------------------------------------------------------------------- */

int cluster_member_format(const struct cluster_member *m, char *out, size_t outlen)
{
    int n =
        snprintf(out, outlen,
                 "{\"name\":\"%s\",\"url\":\"%s\",\"capacity\":%llu,\"load\":%llu,"
                 "\"runs\":%llu,\"runsMax\":%llu,\"pid\":%lld}",
                 m->name, m->url, (unsigned long long)m->capacity, (unsigned long long)m->load,
                 (unsigned long long)m->runs, (unsigned long long)m->runs_max, (long long)m->pid);

    /* names and URLs were checked: nothing in them needs JSON escaping (no '"' or '\\') */
    return n < 0 || (size_t)n >= outlen ? -ENOSPC : 0;
}

static int member_number(json_object *o, const char *k, uint64_t *ret)
{
    json_object *v = jsonx_get(o, k);
    int64_t n;

    if (!v || !json_object_is_type(v, json_type_int))
        return -EINVAL;
    n = json_object_get_int64(v);
    if (n < 0)
        return -EINVAL;
    *ret = (uint64_t)n;
    return 0;
}

int cluster_member_parse(const char *text, size_t len, struct cluster_member *ret)
{
    struct cluster_member m;
    json_object *o = NULL;
    const char *name, *url;
    uint64_t pid = 0;
    int r;

    memset(&m, 0, sizeof(m));
    if (!text || len == 0 || len > CLUSTER_RECORD_MAX)
        return -EINVAL;
    r = jsonx_parse(text, len, 4, &o, NULL, 0);
    if (r < 0 || !json_object_is_type(o, json_type_object)) {
        r = -EINVAL;
        goto out;
    }
    name = jsonx_str(o, "name");
    url = jsonx_str(o, "url");
    r = -EINVAL;
    if (!cluster_name_ok(name) || !peer_url_ok(url) || strchr(url, '"') || strchr(url, '\\'))
        goto out;
    snprintf(m.name, sizeof(m.name), "%s", name);
    snprintf(m.url, sizeof(m.url), "%s", url);
    if (member_number(o, "capacity", &m.capacity) < 0 || member_number(o, "load", &m.load) < 0 ||
        member_number(o, "runs", &m.runs) < 0 || member_number(o, "runsMax", &m.runs_max) < 0)
        goto out;
    (void)member_number(o, "pid", &pid);
    m.pid = (int64_t)pid;
    *ret = m;
    r = 0;
out:
    json_object_put(o);
    return r;
}

bool cluster_member_has_room(const struct cluster_member *m)
{
    return m->load < m->capacity && (m->runs_max == 0 || m->runs < m->runs_max);
}

/* ---- owner values ------------------------------------------------------------------------ */

int cluster_owner_name(const char *value, size_t len, char *out, size_t outlen)
{
    const char *sp = memchr(value, ' ', len);
    size_t n = sp ? (size_t)(sp - value) : len;

    if (n == 0 || n >= outlen)
        return -EINVAL;
    memcpy(out, value, n);
    out[n] = '\0';
    return cluster_name_ok(out) ? 0 : -EINVAL;
}

int cluster_owner_value(const struct cluster_config *c, char *out, size_t outlen)
{
    char nonce[17];
    int r = util_random_hex(nonce, 8);

    if (r < 0)
        return r;
    r = snprintf(out, outlen, "%s %s", c->member, nonce);
    return r < 0 || (size_t)r >= outlen ? -ENAMETOOLONG : 0;
}

const char *cluster_reply_str(const redisReply *r, size_t *ret_len)
{
    if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS))
        return NULL;
    if (ret_len)
        *ret_len = r->len;
    return r->str;
}
