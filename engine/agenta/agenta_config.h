/*
 * agenta_config — the settings of platform mode, read from the environment (fcgi reads them
 * with getenv at start; tests pass a table). Platform mode is on when AGENTA_API_INTERNAL_URL
 * (then AGENTA_API_URL) is set, exactly as in Agenta's runner; without it the Agenta API is
 * never called. Each field names its variable, default and bounds below.
 */
#ifndef AR_AGENTA_CONFIG_H
#define AR_AGENTA_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AGENTA_URL_MAX 2048
#define AGENTA_ID_MAX 256

struct agenta_config {
    bool enabled;                  /* an API base URL is configured */
    char base_url[AGENTA_URL_MAX]; /* without trailing slashes */
    /* AGENTA_RUNNER_REPLICA_ID, else "agent-runner@<host name>/<AGENT_RUNNER_INSTANCE>":
     * stable across the workers of one runner and its restarts */
    char replica_id[AGENTA_ID_MAX];
    bool reconstruct;                  /* AGENTA_SESSIONS_RECONSTRUCT != "false" */
    bool records_durable;              /* AGENTA_RECORDS_DURABLE != "false" */
    unsigned ingest_max_retries;       /* AGENTA_RECORDS_INGEST_MAX_RETRIES, 6, [1, 12] */
    uint64_t record_tool_ttl_ms;       /* AGENTA_RECORD_TOOL_TTL_MS, 3000 */
    uint64_t records_query_timeout_ms; /* AGENTA_SESSIONS_RECORDS_QUERY_TIMEOUT_MS, 5000 */
    uint64_t attachments_timeout_ms;   /* AGENTA_ATTACHMENTS_FETCH_TIMEOUT_MS, 15000 */
    unsigned attachments_max_per_turn; /* AGENTA_ATTACHMENTS_MAX_PER_TURN, 100 */
    uint64_t call_timeout_ms;          /* AGENT_RUNNER_AGENTA_TIMEOUT_MS, 10000: other calls */
    /* AGENT_RUNNER_AGENTA_HEARTBEAT_MS, 30000 (Agenta's HEARTBEAT_INTERVAL_SECONDS), [50, 600000]
     */
    uint64_t heartbeat_interval_ms;
    unsigned refresh_every; /* AGENT_RUNNER_AGENTA_REFRESH_EVERY, 10, [1, 1000] */
};

/*
 * Fill cfg from variables read through lookup (getenv in the runner, a table in tests; NULL
 * and "" both mean unset). A value that is set but invalid is an error naming the variable:
 * -EINVAL with the message in err. Without an API URL, cfg->enabled is false and the rest
 * holds the defaults.
 */
int agenta_config_load(struct agenta_config *cfg,
                       const char *(*lookup)(const char *name, void *ctx), void *ctx, char *err,
                       size_t errlen);

#endif
