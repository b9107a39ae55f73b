/* agenta_config: platform mode's settings read through a lookup table. */
#include <errno.h>
#include <string.h>

#include "agenta/agenta_config.h"
#include "suites.h"
#include "suites_platform.h"

struct env_table {
    const char *const *kv; /* name, value, name, value, ..., NULL */
};

static const char *table_lookup(const char *name, void *ctx)
{
    const struct env_table *t = ctx;

    for (size_t i = 0; t->kv[i]; i += 2)
        if (strcmp(t->kv[i], name) == 0)
            return t->kv[i + 1];
    return NULL;
}

int test_agenta_config(const char *url, struct agenta_config *ret)
{
    const char *kv[] = {"AGENTA_API_INTERNAL_URL", url, "AGENTA_RUNNER_REPLICA_ID", "replica-1",
                        NULL};
    struct env_table t = {kv};
    char err[256];

    return agenta_config_load(ret, table_lookup, &t, err, sizeof(err));
}

static void test_agenta_config_is_off_without_a_url(void)
{
    const char *kv[] = {"AGENTA_API_URL", "", NULL};
    struct env_table t = {kv};
    struct agenta_config cfg;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(agenta_config_load(&cfg, table_lookup, &t, err, sizeof(err)), 0);
    CU_ASSERT_FALSE(cfg.enabled);
    CU_ASSERT_TRUE(cfg.reconstruct);
    CU_ASSERT_TRUE(cfg.records_durable);
    CU_ASSERT_EQUAL(cfg.ingest_max_retries, 6);
    CU_ASSERT_EQUAL(cfg.record_tool_ttl_ms, 3000);
    CU_ASSERT_EQUAL(cfg.records_query_timeout_ms, 5000);
    CU_ASSERT_EQUAL(cfg.heartbeat_interval_ms, 30000);
    CU_ASSERT_EQUAL(cfg.refresh_every, 10);
    /* one id for the whole runner, stable across its workers and restarts */
    CU_ASSERT_EQUAL(strncmp(cfg.replica_id, "agent-runner@", 13), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(cfg.replica_id, "/default"));
}

static void test_agenta_config_internal_url_wins_and_is_trimmed(void)
{
    const char *kv[] = {"AGENTA_API_URL",
                        "https://public.example/api",
                        "AGENTA_API_INTERNAL_URL",
                        "http://api:8000//",
                        "AGENTA_RECORDS_DURABLE",
                        " False ",
                        "AGENTA_SESSIONS_RECONSTRUCT",
                        "0", /* only "false" turns it off */
                        "AGENTA_RECORDS_INGEST_MAX_RETRIES",
                        "12",
                        NULL};
    struct env_table t = {kv};
    struct agenta_config cfg;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(agenta_config_load(&cfg, table_lookup, &t, err, sizeof(err)), 0);
    CU_ASSERT_TRUE(cfg.enabled);
    CU_ASSERT_STRING_EQUAL(cfg.base_url, "http://api:8000");
    CU_ASSERT_FALSE(cfg.records_durable);
    CU_ASSERT_TRUE(cfg.reconstruct);
    CU_ASSERT_EQUAL(cfg.ingest_max_retries, 12);

    kv[2] = "AGENTA_UNUSED";
    CU_ASSERT_EQUAL_FATAL(agenta_config_load(&cfg, table_lookup, &t, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(cfg.base_url, "https://public.example/api");
}

static void test_agenta_config_heartbeat_interval_and_refresh(void)
{
    const char *kv[] = {"AGENTA_API_URL",
                        "http://api",
                        "AGENT_RUNNER_AGENTA_HEARTBEAT_MS",
                        "250",
                        "AGENT_RUNNER_AGENTA_REFRESH_EVERY",
                        "3",
                        NULL};
    const char *too_fast[] = {"AGENT_RUNNER_AGENTA_HEARTBEAT_MS", "10", NULL};
    const char *no_refresh[] = {"AGENT_RUNNER_AGENTA_REFRESH_EVERY", "0", NULL};
    struct env_table t = {kv};
    struct agenta_config cfg;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(agenta_config_load(&cfg, table_lookup, &t, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(cfg.heartbeat_interval_ms, 250);
    CU_ASSERT_EQUAL(cfg.refresh_every, 3);
    t.kv = too_fast;
    CU_ASSERT_EQUAL(agenta_config_load(&cfg, table_lookup, &t, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENT_RUNNER_AGENTA_HEARTBEAT_MS"));
    t.kv = no_refresh;
    CU_ASSERT_EQUAL(agenta_config_load(&cfg, table_lookup, &t, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENT_RUNNER_AGENTA_REFRESH_EVERY"));
}

static void test_agenta_config_refuses_bad_values_by_name(void)
{
    const char *bad_url[] = {"AGENTA_API_INTERNAL_URL", "ftp://api", NULL};
    const char *bad_retries[] = {"AGENTA_API_URL", "http://api",
                                 "AGENTA_RECORDS_INGEST_MAX_RETRIES", "13", NULL};
    const char *bad_ttl[] = {"AGENTA_RECORD_TOOL_TTL_MS", "soon", NULL};
    struct env_table t = {bad_url};
    struct agenta_config cfg;
    char err[256];

    CU_ASSERT_EQUAL(agenta_config_load(&cfg, table_lookup, &t, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENTA_API_INTERNAL_URL"));
    t.kv = bad_retries;
    CU_ASSERT_EQUAL(agenta_config_load(&cfg, table_lookup, &t, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENTA_RECORDS_INGEST_MAX_RETRIES"));
    t.kv = bad_ttl;
    CU_ASSERT_EQUAL(agenta_config_load(&cfg, table_lookup, &t, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENTA_RECORD_TOOL_TTL_MS"));
}

CU_TestInfo agenta_config_tests[] = {
    {"is_off_without_a_url", test_agenta_config_is_off_without_a_url},
    {"internal_url_wins_and_is_trimmed", test_agenta_config_internal_url_wins_and_is_trimmed},
    {"refuses_bad_values_by_name", test_agenta_config_refuses_bad_values_by_name},
    {"heartbeat_interval_and_refresh", test_agenta_config_heartbeat_interval_and_refresh},
    CU_TEST_INFO_NULL,
};
