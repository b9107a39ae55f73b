/*
 * engine_config: the engine's settings read through a getenv-like accessor (engine.h): the
 * defaults, each variable's error message, what is allocated and released, and the texts of
 * the start-up log.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "engine.h"
#include "suites.h"

/* A NULL-terminated list of "NAME=value" as the environment. */
static const char *table_get(const char *name, void *ctx)
{
    const char *const *vars = ctx;
    size_t n = strlen(name);

    for (size_t i = 0; vars[i]; i++)
        if (strncmp(vars[i], name, n) == 0 && vars[i][n] == '=')
            return vars[i] + n + 1;
    return NULL;
}

static int read_with(const char *const *vars, struct engine_config *cfg, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof(*cfg));
    err[0] = '\0';
    return engine_config_read(cfg, table_get, (void *)vars, err, errlen);
}

static void test_engine_config_defaults(void)
{
    const char *vars[] = {NULL};
    char err[256], text[ENGINE_CONFIG_TEXT_MAX];
    struct engine_config cfg;

    CU_ASSERT_EQUAL_FATAL(read_with(vars, &cfg, err, sizeof(err)), 0);
    CU_ASSERT_PTR_NULL(cfg.agenta);
    CU_ASSERT_PTR_NULL(cfg.tools.test_resolve);
    engine_config_spares_text(&cfg, text, sizeof(text));
    CU_ASSERT_STRING_EQUAL(text, "pi=2,claude=0,codex=0,opencode=0");
    engine_config_platform_text(&cfg, text, sizeof(text));
    CU_ASSERT_STRING_EQUAL(text,
                           "platform mode off (no AGENTA_API_INTERNAL_URL or AGENTA_API_URL)");
    engine_config_release(&cfg);
}

static void test_engine_config_spares_blank_is_default(void)
{
    const char *blank[] = {"AGENT_RUNNER_SPARES= \t", NULL};
    const char *none[] = {"AGENT_RUNNER_SPARES=  pi=0", NULL};
    char err[256], text[ENGINE_CONFIG_TEXT_MAX];
    struct engine_config cfg;

    CU_ASSERT_EQUAL_FATAL(read_with(blank, &cfg, err, sizeof(err)), 0);
    engine_config_spares_text(&cfg, text, sizeof(text));
    CU_ASSERT_STRING_EQUAL(text, "pi=2,claude=0,codex=0,opencode=0");
    engine_config_release(&cfg);
    CU_ASSERT_EQUAL_FATAL(read_with(none, &cfg, err, sizeof(err)), 0);
    engine_config_spares_text(&cfg, text, sizeof(text));
    CU_ASSERT_STRING_EQUAL(text, "pi=0,claude=0,codex=0,opencode=0");
    engine_config_release(&cfg);
}

static void test_engine_config_bad_values_name_the_variable(void)
{
    const char *spares[] = {"AGENT_RUNNER_SPARES=pi=lots", NULL};
    const char *resolve[] = {"AGENT_RUNNER_TOOLS_TEST_RESOLVE=no-address", NULL};
    const char *agenta[] = {"AGENTA_API_INTERNAL_URL=http://api.test",
                            "AGENTA_RECORDS_INGEST_MAX_RETRIES=99", NULL};
    char err[256];
    struct engine_config cfg;

    CU_ASSERT_EQUAL(read_with(spares, &cfg, err, sizeof(err)), -EINVAL);
    CU_ASSERT_NOT_EQUAL(err[0], '\0');
    engine_config_release(&cfg);
    CU_ASSERT_EQUAL(read_with(resolve, &cfg, err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(strncmp(err, "AGENT_RUNNER_TOOLS_TEST_RESOLVE: ", 33), 0);
    CU_ASSERT_PTR_NULL(cfg.tools.test_resolve);
    engine_config_release(&cfg);
    CU_ASSERT_EQUAL(read_with(agenta, &cfg, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENTA_RECORDS_INGEST_MAX_RETRIES"));
    CU_ASSERT_PTR_NULL(cfg.agenta);
    engine_config_release(&cfg);
}

static void test_engine_config_owns_what_it_reads(void)
{
    const char *vars[] = {"AGENT_RUNNER_TOOLS_TEST_RESOLVE=mcp.test=127.0.0.1",
                          "AGENTA_API_INTERNAL_URL=https://user:secret@api.test/api", NULL};
    char err[256], text[ENGINE_CONFIG_TEXT_MAX];
    struct engine_config cfg;

    CU_ASSERT_EQUAL_FATAL(read_with(vars, &cfg, err, sizeof(err)), 0);
    CU_ASSERT_PTR_NOT_NULL(cfg.tools.test_resolve);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg.agenta);
    engine_config_platform_text(&cfg, text, sizeof(text));
    CU_ASSERT_EQUAL(strncmp(text, "platform mode on: api 'https://***@api.test/api'", 48), 0);
    CU_ASSERT_PTR_NULL(strstr(text, "secret"));
    engine_config_release(&cfg);
    CU_ASSERT_PTR_NULL(cfg.tools.test_resolve);
    CU_ASSERT_PTR_NULL(cfg.agenta);
    engine_config_release(&cfg); /* twice: nothing left */
}

static void test_engine_config_normalises_limits(void)
{
    const char *vars[] = {NULL};
    struct engine_config cfg;
    char err[256];

    memset(&cfg, 0, sizeof(cfg));
    cfg.limits.total_ms = 1000;
    cfg.limits.idle_ms = 5000;
    CU_ASSERT_EQUAL_FATAL(engine_config_read(&cfg, table_get, (void *)vars, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(cfg.limits.total_ms, 1000);
    CU_ASSERT(cfg.limits.idle_ms < cfg.limits.total_ms);
    engine_config_release(&cfg);
}

static void test_engine_config_table_name(void)
{
    char name[96];

    CU_ASSERT_EQUAL(engine_table_name("default", name, sizeof(name)), 0);
    CU_ASSERT_STRING_EQUAL(name, "/agent-runner.default");
    CU_ASSERT_EQUAL(engine_table_name("a-long-instance", name, 16), -ENAMETOOLONG);
}

/* The turn settings: their defaults, the journal folder beside the table, refusals by name. */
static void test_engine_config_turn_settings(void)
{
    const char *none[] = {"AGENT_RUNNER_INSTANCE=it-x", NULL};
    const char *set[] = {"AGENT_RUNNER_TURN_JOURNAL_MS=0", "AGENT_RUNNER_TURN_JOURNAL_DIR=/run/j",
                         "AGENT_RUNNER_STREAM_KEEPALIVE_MS=0", "AGENT_RUNNER_REATTACH_GRACE_MS=5",
                         NULL};
    const char *const bad[][2] = {
        {"AGENT_RUNNER_TURN_JOURNAL_DIR=relative", "AGENT_RUNNER_TURN_JOURNAL_DIR"},
        {"AGENT_RUNNER_TURN_JOURNAL_BYTES=100", "AGENT_RUNNER_TURN_JOURNAL_BYTES"},
        {"AGENT_RUNNER_STREAM_KEEPALIVE_MS=50", "AGENT_RUNNER_STREAM_KEEPALIVE_MS"},
        {"AGENT_RUNNER_TURN_ADOPT_MS=x", "AGENT_RUNNER_TURN_ADOPT_MS"},
    };
    char err[256];
    struct engine_config cfg;

    CU_ASSERT_EQUAL_FATAL(read_with(none, &cfg, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(cfg.turns.dir, "/dev/shm/agent-runner.it-x.turns");
    CU_ASSERT_EQUAL(cfg.turns.keep_ms, 600000);
    CU_ASSERT_EQUAL(cfg.turns.turn_bytes, 8u << 20);
    CU_ASSERT_EQUAL(cfg.turns.total_bytes, 256u << 20);
    CU_ASSERT_EQUAL(cfg.turns.keepalive_ms, 15000);
    CU_ASSERT_EQUAL(cfg.turns.grace_ms, 0);
    CU_ASSERT_EQUAL(cfg.turns.adopt_ms, 30000);
    engine_config_release(&cfg);
    CU_ASSERT_EQUAL_FATAL(read_with(set, &cfg, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(cfg.turns.dir, "/run/j");
    CU_ASSERT_EQUAL(cfg.turns.keep_ms, 0);
    CU_ASSERT_EQUAL(cfg.turns.keepalive_ms, 0);
    CU_ASSERT_EQUAL(cfg.turns.grace_ms, 5);
    engine_config_release(&cfg);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *vars[] = {bad[i][0], NULL};

        CU_ASSERT_EQUAL(read_with(vars, &cfg, err, sizeof(err)), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, bad[i][1]));
        engine_config_release(&cfg);
    }
}

CU_TestInfo engine_config_tests[] = {
    {"test_engine_config_defaults", test_engine_config_defaults},
    {"test_engine_config_spares_blank_is_default", test_engine_config_spares_blank_is_default},
    {"test_engine_config_bad_values_name_the_variable",
     test_engine_config_bad_values_name_the_variable},
    {"test_engine_config_owns_what_it_reads", test_engine_config_owns_what_it_reads},
    {"test_engine_config_normalises_limits", test_engine_config_normalises_limits},
    {"test_engine_config_table_name", test_engine_config_table_name},
    {"test_engine_config_turn_settings", test_engine_config_turn_settings},
    CU_TEST_INFO_NULL,
};
