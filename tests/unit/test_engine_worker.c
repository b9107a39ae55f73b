/*
 * engine_worker: what a worker asks the engine besides turns (engine.h): the master's pid,
 * the in-flight entry and admission, the facts without a host probe.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "session/pool.h"
#include "suites.h"

static struct pool *new_table(void)
{
    static unsigned seq;
    struct pool *p = NULL;
    char name[96];

    snprintf(name, sizeof(name), "/ar-unit-engine-worker-%d-%u", (int)getpid(), ++seq);
    return pool_create(name, 4, "unit", 7, &p) < 0 ? NULL : p;
}

static void test_engine_worker_master_pid(void)
{
    struct engine_config cfg;

    memset(&cfg, 0, sizeof(cfg));
    CU_ASSERT_EQUAL(engine_master_pid(&cfg), -1);
    cfg.pool = new_table();
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg.pool);
    CU_ASSERT_EQUAL(engine_master_pid(&cfg), getpid());
    CU_ASSERT_EQUAL(pool_destroy(cfg.pool), 0);
}

static void test_engine_worker_admission_counts_and_rejects(void)
{
    struct engine_config cfg;
    int slot;

    memset(&cfg, 0, sizeof(cfg));
    CU_ASSERT_EQUAL(engine_runs_in_flight(&cfg), 0);
    cfg.pool = new_table();
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg.pool);
    slot = engine_inflight_claim(&cfg, getpid());
    CU_ASSERT_FATAL(slot >= 0);
    CU_ASSERT_TRUE(engine_admit(&cfg, slot, 2, 1));
    CU_ASSERT_FALSE(engine_admit(&cfg, slot, 2, 1)); /* over this worker's share */
    CU_ASSERT_EQUAL(engine_runs_in_flight(&cfg), 1);
    CU_ASSERT_TRUE(engine_admit(&cfg, slot, 2, 2));
    CU_ASSERT_FALSE(engine_admit(&cfg, slot, 2, 3)); /* over the runner's total */
    engine_admit_release(&cfg, slot);
    engine_admit_release(&cfg, slot);
    CU_ASSERT_EQUAL(engine_runs_in_flight(&cfg), 0);
    CU_ASSERT_EQUAL(pool_destroy(cfg.pool), 0);
}

static void test_engine_worker_facts_without_a_probe(void)
{
    struct engine_sandbox_facts sf;
    struct engine_config cfg;
    json_object *names;

    memset(&cfg, 0, sizeof(cfg));
    CU_ASSERT_FALSE(engine_sandbox_facts(&cfg, &sf));
    CU_ASSERT_PTR_NULL(engine_sandbox_describe(&cfg));
    names = engine_sandbox_names();
    CU_ASSERT_PTR_NOT_NULL_FATAL(names);
    CU_ASSERT_STRING_EQUAL(json_object_get_string(json_object_array_get_idx(names, 0)), "local");
    json_object_put(names);
    CU_ASSERT_STRING_EQUAL(engine_harness_name(HARNESS_PI), "pi");
}

CU_TestInfo engine_worker_tests[] = {
    {"test_engine_worker_master_pid", test_engine_worker_master_pid},
    {"test_engine_worker_admission_counts_and_rejects",
     test_engine_worker_admission_counts_and_rejects},
    {"test_engine_worker_facts_without_a_probe", test_engine_worker_facts_without_a_probe},
    CU_TEST_INFO_NULL,
};
