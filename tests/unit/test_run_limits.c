/*
 * run_limits — the turn's deadlines as pure bookkeeping over caller-supplied times.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../fcgi/config.h"
#include "base/log.h"
#include "core/contracts.h"
#include "suites.h"
#include "turn/run_limits.h"

#define T0 1000000 /* an arbitrary monotonic start time */

/* The operator's defaults (fcgi/config.c, AGENT_RUNNER_RUN_*_MS unset). */
static const struct run_limits_config DEFAULTS = {
    .total_ms = 11ull * 3600 * 1000,
    .idle_ms = 30ull * 60 * 1000,
    .first_event_ms = 2ull * 60 * 1000,
    .tool_call_ms = 30ull * 60 * 1000,
};

/* The runner's configuration gives the defaults above, already consistent (normalised). */
static void test_run_limits_defaults(void)
{
    static const char *const vars[] = {"AGENT_RUNNER_RUN_TOTAL_MS", "AGENT_RUNNER_RUN_IDLE_MS",
                                       "AGENT_RUNNER_RUN_FIRST_EVENT_MS",
                                       "AGENT_RUNNER_RUN_TOOL_CALL_MS"};
    struct runner_config cfg;
    int saved_level = log_max_level;
    char err[256];

    setenv("AGENT_RUNNER_TOKEN", "unit-token", 1);
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    CU_ASSERT_EQUAL_FATAL(config_load(&cfg, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(cfg.engine.limits.total_ms, DEFAULTS.total_ms);
    CU_ASSERT_EQUAL(cfg.engine.limits.idle_ms, DEFAULTS.idle_ms);
    CU_ASSERT_EQUAL(cfg.engine.limits.first_event_ms, DEFAULTS.first_event_ms);
    CU_ASSERT_EQUAL(cfg.engine.limits.tool_call_ms, DEFAULTS.tool_call_ms);
    config_release(&cfg);
    unsetenv("AGENT_RUNNER_TOKEN");
    log_max_level = saved_level;
}

static void test_run_limits_normalize_idle_below_total(void)
{
    struct run_limits_config cfg = {.total_ms = 1000, .idle_ms = 1000};

    run_limits_config_normalize(&cfg);
    CU_ASSERT_EQUAL(cfg.idle_ms, 500);
    CU_ASSERT_EQUAL(cfg.total_ms, 1000);

    cfg = (struct run_limits_config){.total_ms = 1000, .idle_ms = 5000};
    run_limits_config_normalize(&cfg);
    CU_ASSERT_EQUAL(cfg.idle_ms, 500);

    cfg = (struct run_limits_config){.total_ms = 1000, .idle_ms = 999};
    run_limits_config_normalize(&cfg);
    CU_ASSERT_EQUAL(cfg.idle_ms, 999);

    /* no total limit: nothing to compare with */
    cfg = (struct run_limits_config){.total_ms = 0, .idle_ms = 5000};
    run_limits_config_normalize(&cfg);
    CU_ASSERT_EQUAL(cfg.idle_ms, 5000);
}

static void test_run_limits_first_event_deadline(void)
{
    struct run_limits_config cfg;
    struct run_limits l;
    char msg[256] = "";

    cfg = DEFAULTS;
    run_limits_start(&l, &cfg, T0);
    CU_ASSERT_FALSE(l.first_event_seen);
    CU_ASSERT_EQUAL(run_limits_deadline(&l), T0 + 120000);
    /* harness chatter before the first event does not arm the idle limit */
    run_limits_progress(&l, T0 + 60000);
    CU_ASSERT_EQUAL(run_limits_deadline(&l), T0 + 120000);
    CU_ASSERT_EQUAL(run_limits_check(&l, T0 + 119999, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(run_limits_check(&l, T0 + 120000, msg, sizeof(msg)), AR_E_TIMEOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "first"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "120000ms"));
}

static void test_run_limits_idle_deadline_after_first_event(void)
{
    struct run_limits_config cfg;
    struct run_limits l;
    char msg[256] = "";

    cfg = DEFAULTS;
    run_limits_start(&l, &cfg, T0);
    run_limits_event(&l, T0 + 5000);
    CU_ASSERT_TRUE(l.first_event_seen);
    /* the first-event limit is gone; idle counts from the last progress */
    CU_ASSERT_EQUAL(run_limits_deadline(&l), T0 + 5000 + 1800000);
    CU_ASSERT_EQUAL(run_limits_check(&l, T0 + 200000, msg, sizeof(msg)), 0);
    run_limits_progress(&l, T0 + 10000);
    CU_ASSERT_EQUAL(run_limits_deadline(&l), T0 + 10000 + 1800000);
    CU_ASSERT_EQUAL(run_limits_check(&l, T0 + 10000 + 1799999, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(run_limits_check(&l, T0 + 10000 + 1800000, msg, sizeof(msg)), AR_E_TIMEOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "idle"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "1800000ms"));
}

static void test_run_limits_total_deadline(void)
{
    struct run_limits_config cfg = {.total_ms = 10000, .idle_ms = 4000, .first_event_ms = 0};
    struct run_limits l;
    char msg[256] = "";

    run_limits_start(&l, &cfg, T0);
    CU_ASSERT_EQUAL(run_limits_deadline(&l), T0 + 10000); /* no first-event limit */
    for (int64_t t = T0 + 3000; t < T0 + 10000; t += 3000)
        run_limits_event(&l, t); /* steady progress keeps idle away */
    CU_ASSERT_EQUAL(run_limits_deadline(&l), T0 + 10000);
    CU_ASSERT_EQUAL(run_limits_check(&l, T0 + 9999, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(run_limits_check(&l, T0 + 10000, msg, sizeof(msg)), AR_E_TIMEOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "total"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "10000ms"));
}

static void test_run_limits_tool_call_deadline(void)
{
    struct run_limits_config cfg = {.total_ms = 0, .idle_ms = 100000, .tool_call_ms = 3000};
    struct run_limits l;
    char msg[256] = "";

    run_limits_start(&l, &cfg, T0);
    run_limits_event(&l, T0);
    run_limits_tool_start(&l, "toolu_01", T0 + 2000);
    run_limits_tool_start(&l, "toolu_01", T0 + 2500); /* a repeat does not restart it */
    run_limits_tool_start(&l, "toolu_02", T0 + 4000);
    CU_ASSERT_EQUAL(l.ntools, 2);
    CU_ASSERT_EQUAL(run_limits_deadline(&l), T0 + 5000);
    run_limits_progress(&l, T0 + 4500); /* progress does not extend a tool call */
    CU_ASSERT_EQUAL(run_limits_check(&l, T0 + 4999, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(run_limits_check(&l, T0 + 5000, msg, sizeof(msg)), AR_E_TIMEOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "tool call toolu_01"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "3000ms"));

    run_limits_tool_end(&l, "toolu_01");
    run_limits_tool_end(&l, "unknown"); /* harmless */
    CU_ASSERT_EQUAL(l.ntools, 1);
    CU_ASSERT_EQUAL(run_limits_deadline(&l), T0 + 7000);
    CU_ASSERT_EQUAL(run_limits_check(&l, T0 + 5000, msg, sizeof(msg)), 0);
    run_limits_tool_end(&l, "toolu_02");
    CU_ASSERT_EQUAL(run_limits_deadline(&l), T0 + 4500 + 100000); /* idle only */
}

static void test_run_limits_tool_table_is_bounded(void)
{
    struct run_limits_config cfg = {.tool_call_ms = 1000};
    struct run_limits l;
    char id[32];

    run_limits_start(&l, &cfg, T0);
    for (int i = 0; i < RUN_LIMITS_TOOLS_MAX + 10; i++) {
        snprintf(id, sizeof(id), "t%d", i);
        run_limits_tool_start(&l, id, T0 + i);
    }
    CU_ASSERT_EQUAL(l.ntools, RUN_LIMITS_TOOLS_MAX);
    CU_ASSERT_EQUAL(run_limits_deadline(&l), T0 + 1000);
}

static void test_run_limits_pause_freezes_everything(void)
{
    struct run_limits_config cfg;
    struct run_limits l;
    char msg[256] = "unchanged";

    cfg = DEFAULTS;
    cfg.total_ms = 10000;
    cfg.idle_ms = 2000;
    run_limits_config_normalize(&cfg);
    run_limits_start(&l, &cfg, T0);
    run_limits_event(&l, T0 + 100);
    run_limits_tool_start(&l, "t1", T0 + 200);
    CU_ASSERT_NOT_EQUAL(run_limits_deadline(&l), 0);
    run_limits_pause(&l);
    CU_ASSERT_TRUE(l.paused);
    CU_ASSERT_EQUAL(run_limits_deadline(&l), 0);
    /* far past every limit: total, idle and tool call */
    CU_ASSERT_EQUAL(run_limits_check(&l, T0 + 100000000, msg, sizeof(msg)), 0);
    CU_ASSERT_STRING_EQUAL(msg, "unchanged");
}

static void test_run_limits_all_disabled(void)
{
    struct run_limits_config cfg = {0};
    struct run_limits l;
    char msg[64];

    run_limits_start(&l, &cfg, T0);
    run_limits_tool_start(&l, "t1", T0);
    CU_ASSERT_EQUAL(run_limits_deadline(&l), 0);
    CU_ASSERT_EQUAL(run_limits_check(&l, INT64_MAX / 2, msg, sizeof(msg)), 0);
}

CU_TestInfo run_limits_tests[] = {
    {"test_run_limits_defaults", test_run_limits_defaults},
    {"test_run_limits_normalize_idle_below_total", test_run_limits_normalize_idle_below_total},
    {"test_run_limits_first_event_deadline", test_run_limits_first_event_deadline},
    {"test_run_limits_idle_deadline_after_first_event",
     test_run_limits_idle_deadline_after_first_event},
    {"test_run_limits_total_deadline", test_run_limits_total_deadline},
    {"test_run_limits_tool_call_deadline", test_run_limits_tool_call_deadline},
    {"test_run_limits_tool_table_is_bounded", test_run_limits_tool_table_is_bounded},
    {"test_run_limits_pause_freezes_everything", test_run_limits_pause_freezes_everything},
    {"test_run_limits_all_disabled", test_run_limits_all_disabled},
    CU_TEST_INFO_NULL,
};
