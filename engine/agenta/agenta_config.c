#include "agenta/agenta_config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/util.h"

#define DEFAULT_CALL_TIMEOUT_MS 10000
#define DEFAULT_QUERY_TIMEOUT_MS 5000
#define DEFAULT_ATTACHMENT_TIMEOUT_MS 15000
#define DEFAULT_TOOL_TTL_MS 3000
#define DEFAULT_INGEST_RETRIES 6
#define DEFAULT_HEARTBEAT_MS 30000 /* Agenta's HEARTBEAT_INTERVAL_SECONDS */
#define DEFAULT_REFRESH_EVERY 10
#define INGEST_RETRIES_CAP 12

static const char *lookup_value(const char *(*lookup)(const char *, void *), void *ctx,
                                const char *name)
{
    const char *v = lookup ? lookup(name, ctx) : NULL;

    return v && v[0] ? v : NULL;
}

static int load_u64(const char *(*lookup)(const char *, void *), void *ctx, const char *name,
                    uint64_t def, uint64_t min, uint64_t max, uint64_t *ret, char *err,
                    size_t errlen)
{
    const char *v = lookup_value(lookup, ctx, name);
    uint64_t n;

    if (!v) {
        *ret = def;
        return 0;
    }
    if (util_parse_u64(v, min, max, &n) < 0) {
        util_seterr(err, errlen, "%s: expected a whole number in [%" PRIu64 ", %" PRIu64 "]", name,
                    min, max);
        return -EINVAL;
    }
    *ret = n;
    return 0;
}

/* Agenta's flags: only the literal "false" (any case, trimmed) turns them off. */
static bool flag_on(const char *(*lookup)(const char *, void *), void *ctx, const char *name)
{
    const char *v = lookup_value(lookup, ctx, name);
    size_t n;

    if (!v)
        return true;
    while (isspace((unsigned char)*v))
        v++;
    n = strlen(v);
    while (n > 0 && isspace((unsigned char)v[n - 1]))
        n--;
    return !(n == 5 && strncasecmp(v, "false", 5) == 0);
}

int agenta_config_load(struct agenta_config *cfg,
                       const char *(*lookup)(const char *name, void *ctx), void *ctx, char *err,
                       size_t errlen)
{
    const char *base = lookup_value(lookup, ctx, "AGENTA_API_INTERNAL_URL"), *name;
    const char *replica = lookup_value(lookup, ctx, "AGENTA_RUNNER_REPLICA_ID");
    struct agenta_config c;
    uint64_t n;
    size_t len;
    int r;

    memset(&c, 0, sizeof(c));
    name = "AGENTA_API_INTERNAL_URL";
    if (!base) {
        base = lookup_value(lookup, ctx, "AGENTA_API_URL");
        name = "AGENTA_API_URL";
    }
    if (base) {
        len = strlen(base);
        while (len > 0 && base[len - 1] == '/')
            len--;
        if (len >= sizeof(c.base_url) || !util_visible(base) ||
            (strncmp(base, "http://", 7) != 0 && strncmp(base, "https://", 8) != 0) ||
            len <= (base[4] == 's' ? 8u : 7u)) {
            util_seterr(err, errlen, "%s: expected an http:// or https:// URL of at most %zu bytes",
                        name, sizeof(c.base_url) - 1);
            return -EINVAL;
        }
        memcpy(c.base_url, base, len);
        c.base_url[len] = '\0';
        c.enabled = true;
    }
    if (replica) {
        if (strlen(replica) >= sizeof(c.replica_id) || !util_visible(replica)) {
            util_seterr(err, errlen,
                        "AGENTA_RUNNER_REPLICA_ID: expected at most %zu printable bytes",
                        sizeof(c.replica_id) - 1);
            return -EINVAL;
        }
        snprintf(c.replica_id, sizeof(c.replica_id), "%s", replica);
    } else {
        /*
         * One id for the whole runner (master and every worker) that survives a restart: the
         * API routes a session's control signals to its owner replica and keeps the owner key
         * for two minutes, so a random id per process would refuse the session's next turn on
         * another worker, or after a restart.
         */
        const char *inst = lookup_value(lookup, ctx, "AGENT_RUNNER_INSTANCE");
        char host[256];

        if (gethostname(host, sizeof(host)) < 0)
            snprintf(host, sizeof(host), "localhost");
        host[sizeof(host) - 1] = '\0';
        r = snprintf(c.replica_id, sizeof(c.replica_id), "agent-runner@%s/%s", host,
                     inst ? inst : "default");
        if (r < 0 || (size_t)r >= sizeof(c.replica_id) || !util_visible(c.replica_id)) {
            util_seterr(err, errlen,
                        "AGENTA_RUNNER_REPLICA_ID: the host name and instance make no "
                        "usable replica id; set one");
            return -EINVAL;
        }
    }
    c.reconstruct = flag_on(lookup, ctx, "AGENTA_SESSIONS_RECONSTRUCT");
    c.records_durable = flag_on(lookup, ctx, "AGENTA_RECORDS_DURABLE");
    r = load_u64(lookup, ctx, "AGENTA_RECORDS_INGEST_MAX_RETRIES", DEFAULT_INGEST_RETRIES, 1,
                 INGEST_RETRIES_CAP, &n, err, errlen);
    if (r < 0)
        return r;
    c.ingest_max_retries = (unsigned)n;
    r = load_u64(lookup, ctx, "AGENTA_RECORD_TOOL_TTL_MS", DEFAULT_TOOL_TTL_MS, 1, 3600000,
                 &c.record_tool_ttl_ms, err, errlen);
    if (r == 0)
        r = load_u64(lookup, ctx, "AGENTA_SESSIONS_RECORDS_QUERY_TIMEOUT_MS",
                     DEFAULT_QUERY_TIMEOUT_MS, 1, 600000, &c.records_query_timeout_ms, err, errlen);
    if (r == 0)
        r = load_u64(lookup, ctx, "AGENTA_ATTACHMENTS_FETCH_TIMEOUT_MS",
                     DEFAULT_ATTACHMENT_TIMEOUT_MS, 1, 600000, &c.attachments_timeout_ms, err,
                     errlen);
    if (r == 0)
        r = load_u64(lookup, ctx, "AGENTA_ATTACHMENTS_MAX_PER_TURN", 100, 1, 10000, &n, err,
                     errlen);
    if (r < 0)
        return r;
    c.attachments_max_per_turn = (unsigned)n;
    r = load_u64(lookup, ctx, "AGENT_RUNNER_AGENTA_TIMEOUT_MS", DEFAULT_CALL_TIMEOUT_MS, 100,
                 600000, &c.call_timeout_ms, err, errlen);
    if (r < 0)
        return r;
    r = load_u64(lookup, ctx, "AGENT_RUNNER_AGENTA_HEARTBEAT_MS", DEFAULT_HEARTBEAT_MS, 50, 600000,
                 &c.heartbeat_interval_ms, err, errlen);
    if (r == 0)
        r = load_u64(lookup, ctx, "AGENT_RUNNER_AGENTA_REFRESH_EVERY", DEFAULT_REFRESH_EVERY, 1,
                     1000, &n, err, errlen);
    if (r < 0)
        return r;
    c.refresh_every = (unsigned)n;
    *cfg = c;
    return 0;
}
