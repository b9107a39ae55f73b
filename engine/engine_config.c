/*
 * engine_config — the engine's settings that need its own parsers (engine.h): the tools' test
 * resolver, the spares per harness, platform mode; and their texts for the start-up log.
 */
#include "engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agenta/agenta_api.h"
#include "base/util.h"
#include "engine_cluster.h"
#include "environment/spare.h"
#include "session/pool.h"
#include "tools/tool_runner.h"
#include "turn/run_limits.h"

struct lookup {
    engine_getenv_fn get;
    void *ctx;
};

/* The value of name: leading blanks skipped; NULL when unset, empty or blank. */
static const char *setting(const struct lookup *l, const char *name)
{
    const char *v = l->get(name, l->ctx);

    while (v && (*v == ' ' || *v == '\t'))
        v++;
    return v && *v ? v : NULL;
}

static const char *lookup_fn(const char *name, void *ctx)
{
    const struct lookup *l = ctx;

    return l->get(name, l->ctx);
}

/* AGENT_RUNNER_TOOLS_TEST_RESOLVE (tests only): host names resolved to given addresses. */
static int read_test_resolve(struct engine_config *cfg, const struct lookup *l, char *err,
                             size_t errlen)
{
    const char *v = setting(l, "AGENT_RUNNER_TOOLS_TEST_RESOLVE");
    struct tool_runner_resolve *res;
    char why[256];

    if (!v)
        return 0;
    res = calloc(1, sizeof(*res));
    if (!res)
        return -ENOMEM;
    if (tool_runner_resolve_parse(v, res, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "AGENT_RUNNER_TOOLS_TEST_RESOLVE: %s", why);
        free(res);
        return -EINVAL;
    }
    cfg->tools.test_resolve = res;
    return 0;
}

/* Platform mode: on when Agenta's API is named; a bad AGENTA_* value stops the start. */
static int read_agenta(struct engine_config *cfg, struct lookup *l, char *err, size_t errlen)
{
    struct agenta_config *a = calloc(1, sizeof(*a));
    int r;

    if (!a)
        return -ENOMEM;
    r = agenta_config_load(a, lookup_fn, l, err, errlen);
    if (r < 0 || !a->enabled) {
        free(a);
        return r;
    }
    cfg->agenta = a;
    return 0;
}

/* One model's prices: input and output required, the cache prices optional, all >= 0. */
static bool price_ok(json_object *p)
{
    static const char *const keys[] = {"input", "output", "cacheRead", "cacheWrite"};

    if (!p || !json_object_is_type(p, json_type_object))
        return false;
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
        json_object *v = json_object_object_get(p, keys[i]);

        if (!v && i < 2)
            return false;
        if (v && ((!json_object_is_type(v, json_type_double) &&
                   !json_object_is_type(v, json_type_int)) ||
                  json_object_get_double(v) < 0))
            return false;
    }
    return true;
}

/*
 * The model gateway's settings the front's table does not parse: AGENT_RUNNER_MODEL_GATEWAY_
 * CA_FILE (an absolute path) and AGENT_RUNNER_MODEL_PRICES (an absolute path to a JSON object
 * {"<model>": {"input": USD per million, "output": ..., "cacheRead"?, "cacheWrite"?}}).
 */
static int read_gateway(struct engine_config *cfg, const struct lookup *l, char *err, size_t errlen)
{
    const char *ca = setting(l, "AGENT_RUNNER_MODEL_GATEWAY_CA_FILE");
    const char *prices = setting(l, "AGENT_RUNNER_MODEL_PRICES");
    json_object *doc;
    char *text = NULL;
    size_t len;
    int r;

    if (!cfg->gateway.max_request_bytes)
        cfg->gateway.max_request_bytes = 32u * 1024 * 1024;
    if (ca && ca[0] != '/')
        return util_fail(-EINVAL, err, errlen,
                         "AGENT_RUNNER_MODEL_GATEWAY_CA_FILE must be an absolute path");
    cfg->gateway.ca_file = ca;
    if (!prices)
        return 0;
    if (prices[0] != '/')
        return util_fail(-EINVAL, err, errlen,
                         "AGENT_RUNNER_MODEL_PRICES must be an absolute path");
    r = util_read_file(prices, 1024 * 1024, &text, &len);
    if (r < 0)
        return util_fail(-EINVAL, err, errlen, "AGENT_RUNNER_MODEL_PRICES: cannot read it: %s",
                         strerror(-r));
    doc = json_tokener_parse(text);
    free(text);
    if (!doc || !json_object_is_type(doc, json_type_object)) {
        json_object_put(doc);
        return util_fail(-EINVAL, err, errlen, "AGENT_RUNNER_MODEL_PRICES: not a JSON object");
    }
    json_object_object_foreach(doc, model, price)
    {
        if (!price_ok(price)) {
            snprintf(err, errlen,
                     "AGENT_RUNNER_MODEL_PRICES: \"%.100s\" needs input and output prices "
                     "(USD per million tokens, >= 0; cacheRead and cacheWrite optional)",
                     model);
            json_object_put(doc);
            return -EINVAL;
        }
    }
    cfg->gateway.prices = doc;
    return 0;
}

/* One number setting: its default when unset; -EINVAL naming it when out of [min, max]. */
static int read_u64(const struct lookup *l, const char *name, uint64_t def, uint64_t min,
                    uint64_t max, uint64_t *ret, char *err, size_t errlen)
{
    const char *v = setting(l, name);

    *ret = def;
    if (v && util_parse_u64(v, min, max, ret) < 0)
        return util_fail(-EINVAL, err, errlen, "%s: expected a whole number from %llu to %llu",
                         name, (unsigned long long)min, (unsigned long long)max);
    return 0;
}

/* Where the journals live: AGENT_RUNNER_TURN_JOURNAL_DIR, else beside the session table. */
static int read_turns_dir(struct turn_settings *ts, const struct lookup *l, char *err,
                          size_t errlen)
{
    const char *dir = setting(l, "AGENT_RUNNER_TURN_JOURNAL_DIR");
    const char *instance = setting(l, "AGENT_RUNNER_INSTANCE");

    if (dir && (dir[0] != '/' || strlen(dir) >= sizeof(ts->dir) - 64))
        return util_fail(-EINVAL, err, errlen,
                         "AGENT_RUNNER_TURN_JOURNAL_DIR: an absolute path of at most %zu bytes",
                         sizeof(ts->dir) - 64);
    if (dir) {
        snprintf(ts->dir, sizeof(ts->dir), "%s", dir);
        return 0;
    }
    return engine_turns_dir(instance ? instance : "default", ts->dir, sizeof(ts->dir)) < 0
               ? util_fail(-EINVAL, err, errlen, "AGENT_RUNNER_INSTANCE: too long")
               : 0;
}

/* Streamed turns that outlive their connection (struct turn_settings). */
static int read_turns(struct turn_settings *ts, const struct lookup *l, char *err, size_t errlen)
{
    static const uint64_t day = 86400000ull, gib = 1ull << 30;
    int r = read_turns_dir(ts, l, err, errlen);

    if (r < 0)
        return r;
    if ((r = read_u64(l, "AGENT_RUNNER_TURN_JOURNAL_MS", 600000, 0, day, &ts->keep_ms, err,
                      errlen)) < 0 ||
        (r = read_u64(l, "AGENT_RUNNER_TURN_JOURNAL_BYTES", 8u << 20, 8192, 4 * gib,
                      &ts->turn_bytes, err, errlen)) < 0 ||
        (r = read_u64(l, "AGENT_RUNNER_TURN_JOURNAL_TOTAL_BYTES", 256u << 20, 8192, 64 * gib,
                      &ts->total_bytes, err, errlen)) < 0 ||
        (r = read_u64(l, "AGENT_RUNNER_STREAM_KEEPALIVE_MS", 15000, 0, day, &ts->keepalive_ms, err,
                      errlen)) < 0 ||
        (r = read_u64(l, "AGENT_RUNNER_REATTACH_GRACE_MS", 0, 0, day, &ts->grace_ms, err, errlen)) <
            0 ||
        (r = read_u64(l, "AGENT_RUNNER_TURN_ADOPT_MS", 30000, 1000, 600000, &ts->adopt_ms, err,
                      errlen)) < 0)
        return r;
    if (ts->keepalive_ms && ts->keepalive_ms < 100)
        return util_fail(-EINVAL, err, errlen,
                         "AGENT_RUNNER_STREAM_KEEPALIVE_MS: 0 (off) or at least 100");
    return 0;
}

int engine_config_read(struct engine_config *cfg, engine_getenv_fn get, void *ctx, char *err,
                       size_t errlen)
{
    struct lookup l = {.get = get, .ctx = ctx};
    const char *spares;
    int r;

    r = read_test_resolve(cfg, &l, err, errlen);
    if (r < 0)
        return r;
    r = read_turns(&cfg->turns, &l, err, errlen);
    if (r < 0)
        return r;
    spares = setting(&l, "AGENT_RUNNER_SPARES");
    if (spare_settings_parse(spares ? spares : SPARE_SETTINGS_DEFAULT, &cfg->spares, err, errlen) <
        0)
        return -EINVAL;
    r = read_agenta(cfg, &l, err, errlen);
    if (r == 0)
        r = read_gateway(cfg, &l, err, errlen);
    if (r < 0)
        return r;
    r = engine_cluster_config_read(cfg, get, ctx, err, errlen);
    if (r < 0)
        return r;
    run_limits_config_normalize(&cfg->limits);
    return 0;
}

void engine_config_release(struct engine_config *cfg)
{
    free((void *)cfg->tools.test_resolve);
    cfg->tools.test_resolve = NULL;
    free((void *)cfg->agenta);
    cfg->agenta = NULL;
    json_object_put(cfg->gateway.prices);
    cfg->gateway.prices = NULL;
    engine_cluster_config_release(cfg);
}

void engine_config_spares_text(const struct engine_config *cfg, char *out, size_t outlen)
{
    spare_settings_format(&cfg->spares, out, outlen);
}

/* The API's URL without a user:password part, for the log. */
static void url_for_log(const char *url, char *out, size_t outlen)
{
    const char *host = strstr(url, "://"), *at, *slash;

    host = host ? host + 3 : url;
    slash = strchr(host, '/');
    at = memchr(host, '@', slash ? (size_t)(slash - host) : strlen(host));
    if (at)
        snprintf(out, outlen, "%.*s***@%s", (int)(host - url), url, at + 1);
    else
        snprintf(out, outlen, "%s", url);
}

void engine_config_platform_text(const struct engine_config *cfg, char *out, size_t outlen)
{
    const struct agenta_config *a = cfg->agenta;
    char api[AGENTA_URL_MAX + 8];

    if (!a) {
        snprintf(out, outlen, "platform mode off (no AGENTA_API_INTERNAL_URL or AGENTA_API_URL)");
        return;
    }
    url_for_log(a->base_url, api, sizeof(api));
    snprintf(out, outlen,
             "platform mode on: api '%s', replica '%s', reconstruct %s, durable records %s "
             "(%u tries), heartbeat every %llums",
             api, a->replica_id, a->reconstruct ? "on" : "off", a->records_durable ? "on" : "off",
             a->ingest_max_retries, (unsigned long long)a->heartbeat_interval_ms);
}

int engine_table_name(const char *instance, char *out, size_t outlen)
{
    return pool_shm_name(instance, out, outlen);
}

int engine_turns_dir(const char *instance, char *out, size_t outlen)
{
    char table[128];

    if (pool_shm_name(instance, table, sizeof(table)) < 0 ||
        snprintf(out, outlen, "/dev/shm%s.turns", table) >= (int)outlen)
        return -ENAMETOOLONG;
    return 0;
}
