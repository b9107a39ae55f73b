/*
 * admin: the master's and agent-runner-ctl's operations on a session table (admin.h) that
 * need no host probe: attaching by instance, the ctl's listings and verbs, the spares' upkeep
 * rules, /metrics.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "admin.h"
#include "base/buf.h"
#include "base/jsonx.h"
#include "session/pool.h"
#include "suites.h"

static unsigned seq;

/* A table of nslots for a fresh instance (its name in instance). */
static struct pool *new_table(uint32_t nslots, char *instance, size_t len)
{
    struct pool *p = NULL;
    char name[96];

    snprintf(instance, len, "ar-unit-admin-%d-%u", (int)getpid(), ++seq);
    if (engine_table_name(instance, name, sizeof(name)) < 0 ||
        pool_create(name, nslots, instance, 7, &p) < 0)
        return NULL;
    return p;
}

static void reserve(struct pool *p, const char *key)
{
    struct pool_reservation rv = {.key = key,
                                  .by_pid = getpid(),
                                  .harness = HARNESS_PI,
                                  .idle_ms = 5000,
                                  .provider = "openai",
                                  .model = "m1",
                                  .turn_id = "t1"};
    struct pool_handle h;

    CU_ASSERT_EQUAL(pool_session_reserve(p, &rv, &h), 0);
}

static void test_admin_attach_refuses_long_instance_and_missing_table(void)
{
    char instance[300], name[96];
    struct pool *p = NULL;

    memset(instance, 'x', sizeof(instance) - 1);
    instance[sizeof(instance) - 1] = '\0';
    CU_ASSERT_EQUAL(admin_attach(instance, true, &p, name, sizeof(name)), -ENAMETOOLONG);
    snprintf(instance, sizeof(instance), "ar-unit-admin-none-%d", (int)getpid());
    CU_ASSERT_EQUAL(admin_attach(instance, true, &p, name, sizeof(name)), -ENOENT);
    CU_ASSERT_PTR_NULL(p);
}

static void test_admin_sessions_stats_check_kill(void)
{
    char instance[64], name[96], err[200];
    struct pool *p, *ro = NULL, *rw = NULL;
    json_object *doc, *s;

    p = new_table(4, instance, sizeof(instance));
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    reserve(p, "p:s1");
    CU_ASSERT_EQUAL_FATAL(admin_attach(instance, true, &ro, name, sizeof(name)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(name, instance));
    doc = admin_sessions_json(ro);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    CU_ASSERT_EQUAL(json_object_array_length(jsonx_get(doc, "sessions")), 1);
    s = json_object_array_get_idx(jsonx_get(doc, "sessions"), 0);
    CU_ASSERT_STRING_EQUAL(jsonx_str(s, "key"), "p:s1");
    CU_ASSERT_STRING_EQUAL(jsonx_str(s, "state"), "starting");
    CU_ASSERT_STRING_EQUAL(jsonx_str(s, "harness"), "pi");
    CU_ASSERT_PTR_NULL(jsonx_str(s, "lastTeardown"));
    CU_ASSERT_EQUAL(json_object_array_length(jsonx_get(doc, "recent")), 0);
    json_object_put(doc);
    doc = admin_stats_json(ro);
    CU_ASSERT_STRING_EQUAL(jsonx_str(doc, "instance"), instance);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(doc, "slots")), 4);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(doc, "used")), 1);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(doc, "masterPid")), (int)getpid());
    CU_ASSERT_PTR_NOT_NULL(jsonx_path(doc, "counters.turns_ok"));
    CU_ASSERT_PTR_NOT_NULL(jsonx_path(doc, "counters.runs_in_flight"));
    json_object_put(doc);
    /* read-only: never locked */
    CU_ASSERT_EQUAL(admin_check(ro, err, sizeof(err)), -EPERM);
    admin_detach(ro);
    CU_ASSERT_EQUAL_FATAL(admin_attach(instance, false, &rw, name, sizeof(name)), 0);
    CU_ASSERT_EQUAL(admin_check(rw, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(admin_kill(rw, "p:none"), 0);
    admin_detach(rw);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_admin_spare_next_keeps_the_last_slot(void)
{
    struct engine_config cfg;
    char instance[64];
    unsigned rr = 0;

    memset(&cfg, 0, sizeof(cfg));
    cfg.spares.count[HARNESS_PI] = 2;
    CU_ASSERT_FALSE(admin_spares_wanted(&cfg)); /* no table */
    cfg.pool = new_table(4, instance, sizeof(instance));
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg.pool);
    CU_ASSERT_TRUE(admin_spares_wanted(&cfg));
    CU_ASSERT_EQUAL(admin_spare_next(&cfg, &rr), HARNESS_PI);
    CU_ASSERT_EQUAL(rr, (HARNESS_PI + 1) % HARNESS_COUNT);
    reserve(cfg.pool, "p:a");
    reserve(cfg.pool, "p:b");
    CU_ASSERT_EQUAL(admin_spare_next(&cfg, &rr), HARNESS_PI);
    reserve(cfg.pool, "p:c");
    CU_ASSERT_EQUAL(admin_spare_next(&cfg, &rr), -1); /* one free slot left: a session's */
    CU_ASSERT_EQUAL(admin_spare_shed(&cfg), 0);       /* no ready spare */
    CU_ASSERT_TRUE(admin_spares_disable(&cfg));
    CU_ASSERT_FALSE(admin_spares_wanted(&cfg));
    CU_ASSERT_FALSE(admin_spares_disable(&cfg));
    CU_ASSERT_EQUAL(pool_destroy(cfg.pool), 0);
}

static void test_admin_metrics_render_needs_a_table(void)
{
    struct engine_config cfg;
    char instance[64];
    struct buf out;

    memset(&cfg, 0, sizeof(cfg));
    CU_ASSERT_EQUAL(admin_metrics_render(&cfg, &out), -ENOENT);
    buf_release(&out);
    cfg.pool = new_table(4, instance, sizeof(instance));
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg.pool);
    CU_ASSERT_EQUAL(admin_metrics_render(&cfg, &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&out), "agent_runner_sessions{state=\"idle\"} 0"));
    buf_release(&out);
    CU_ASSERT_EQUAL(pool_destroy(cfg.pool), 0);
}

CU_TestInfo admin_tests[] = {
    {"test_admin_attach_refuses_long_instance_and_missing_table",
     test_admin_attach_refuses_long_instance_and_missing_table},
    {"test_admin_sessions_stats_check_kill", test_admin_sessions_stats_check_kill},
    {"test_admin_spare_next_keeps_the_last_slot", test_admin_spare_next_keeps_the_last_slot},
    {"test_admin_metrics_render_needs_a_table", test_admin_metrics_render_needs_a_table},
    CU_TEST_INFO_NULL,
};
