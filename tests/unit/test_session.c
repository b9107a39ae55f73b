/*
 * session: the pool's session API (pool.h) — every step of a slot's life through the public
 * functions only, the way the engine, the keeper, the master and agent-runner-ctl use it.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "session/pool.h"
#include "session/pool_locked.h" /* the raw transitions: this suite checks slots directly */
#include "suites.h"

static unsigned seq;

static struct pool *new_pool(uint32_t nslots)
{
    struct pool *p = NULL;
    char name[64];

    snprintf(name, sizeof(name), "/ar-unit-session-%d-%u", (int)getpid(), ++seq);
    if (pool_create(name, nslots, "unit", 7, &p) < 0)
        return NULL;
    return p;
}

static bool consistent(struct pool *p)
{
    char err[200] = "";
    int r = pool_lock(p);

    if (r < 0)
        return false;
    r = pool_check_locked(p, err, sizeof(err));
    pool_unlock(p);
    if (r < 0)
        fprintf(stderr, "\n  pool check: %s\n", err);
    return r == 0;
}

/* The live slot of h, as the lock-free reader copies it; false when it is gone. */
static bool slot_of(struct pool *p, struct pool_handle h, struct pool_session *ret)
{
    return pool_session_peek(p, h.index, ret) && ret->h.generation == h.generation;
}

static struct pool_handle reserve(struct pool *p, const char *key, bool per_turn)
{
    struct pool_reservation rv = {.key = key,
                                  .by_pid = getpid(),
                                  .harness = 2,
                                  .per_turn = per_turn,
                                  .idle_ms = 5000,
                                  .provider = "openai",
                                  .model = "m1",
                                  .turn_id = "t1"};
    struct pool_handle h = {.index = UINT32_MAX};

    CU_ASSERT_EQUAL(pool_session_reserve(p, &rv, &h), 0);
    return h;
}

static const uint8_t fp_a[IDENTITY_DIGEST_LEN] = {1, 2, 3};

/* A started, busy session of key owned by us. */
static struct pool_handle started(struct pool *p, const char *key)
{
    struct pool_handle h = reserve(p, key, false);

    CU_ASSERT_EQUAL(pool_session_set_env_dir(p, h, "/state/envs/x"), 0);
    CU_ASSERT_EQUAL(pool_session_set_keeper(p, h, getpid(), util_proc_start_time(getpid()), 4242),
                    0);
    CU_ASSERT_EQUAL(pool_session_mark_started(p, h, "acp-1"), 0);
    return h;
}

static int park(struct pool *p, struct pool_handle h, bool awaiting, uint64_t max,
                struct pool_victim *v)
{
    struct approval_gate g = {
        .tool_call_id = "call-1", .token = "tok", .request_id = "7", .decision = -1};
    struct pool_park pk = {.config_fp = fp_a,
                           .history_fp = fp_a,
                           .cred_epoch = fp_a,
                           .acp_session = "acp-1",
                           .caps = 5,
                           .policy_mode = 1,
                           .idle_ms = 5000,
                           .acp_next_id = 11,
                           .prompt_id = 10,
                           .awaiting = awaiting,
                           .gates = &g,
                           .ngates = 1,
                           .deadline_ms = util_now_ms() + 60000};

    return pool_session_park(p, h, getpid(), &pk, max, v);
}

static void test_session_lifecycle_reserve_start_park(void)
{
    struct pool *p = new_pool(4);
    struct pool_session s;
    struct pool_victim v;
    struct pool_handle h;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    h = reserve(p, "p:s", false);
    CU_ASSERT_TRUE(slot_of(p, h, &s));
    CU_ASSERT_EQUAL(s.state, SLOT_STARTING);
    CU_ASSERT_STRING_EQUAL(s.key, "p:s");
    CU_ASSERT_STRING_EQUAL(s.provider, "openai");
    CU_ASSERT_STRING_EQUAL(s.model, "m1");
    CU_ASSERT_STRING_EQUAL(s.owner_turn, "t1");
    CU_ASSERT_EQUAL(s.idle_ms, 5000);
    CU_ASSERT_FALSE(s.per_turn);
    /* a second reservation of the key is refused */
    {
        struct pool_reservation rv = {.key = "p:s", .by_pid = getpid()};
        struct pool_handle x;
        CU_ASSERT_EQUAL(pool_session_reserve(p, &rv, &x), -EEXIST);
    }
    CU_ASSERT_EQUAL(pool_session_set_env_dir(p, h, "/state/envs/x"), 0);
    CU_ASSERT_EQUAL(pool_session_set_keeper(p, h, 100, 200, 300), 0);
    /* a started keeper frees its own slot: release_unstarted leaves it */
    CU_ASSERT_EQUAL(pool_session_release_unstarted(p, h, TEARDOWN_FAILED_TURN), 0);
    CU_ASSERT_EQUAL(pool_session_present(p, "p:s"), 1);
    CU_ASSERT_EQUAL(pool_session_mark_started(p, h, "acp-1"), 0);
    CU_ASSERT_EQUAL(pool_session_get_owned(p, h, getpid(), &s), 0);
    CU_ASSERT_EQUAL(s.state, SLOT_BUSY);
    CU_ASSERT_STRING_EQUAL(s.acp_session, "acp-1");
    CU_ASSERT_STRING_EQUAL(s.env_dir, "/state/envs/x");
    CU_ASSERT_EQUAL(s.keeper_pid, 100);
    CU_ASSERT_EQUAL(s.keeper_start, 200);
    CU_ASSERT_EQUAL(s.sandbox_pid, 300);
    CU_ASSERT_EQUAL(pool_session_get_owned(p, h, getpid() + 1, &s), -ESTALE);
    CU_ASSERT_TRUE(consistent(p));
    CU_ASSERT_EQUAL(park(p, h, false, 8, &v), 0);
    CU_ASSERT_FALSE(v.any);
    CU_ASSERT_TRUE(slot_of(p, h, &s));
    CU_ASSERT_EQUAL(pool_lock(p), 0);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 1);
    pool_unlock(p);
    CU_ASSERT_EQUAL(s.state, SLOT_IDLE);
    CU_ASSERT_EQUAL(s.turns, 1);
    CU_ASSERT_EQUAL(s.acp_next_id, 11);
    CU_ASSERT_EQUAL(s.caps, 5);
    CU_ASSERT_EQUAL(s.ngates, 0); /* idle keeps no gates */
    CU_ASSERT_EQUAL(memcmp(s.config_fp, fp_a, sizeof(fp_a)), 0);
    /* parking again is not ours any more */
    CU_ASSERT_EQUAL(park(p, h, false, 8, &v), -ESTALE);
    CU_ASSERT_TRUE(consistent(p));
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_session_release_unstarted_frees(void)
{
    struct pool *p = new_pool(2);
    struct pool_handle h;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    h = reserve(p, "p:gone", false);
    CU_ASSERT_EQUAL(pool_session_release_unstarted(p, h, TEARDOWN_FAILED_TURN), 0);
    CU_ASSERT_EQUAL(pool_session_present(p, "p:gone"), 0);
    CU_ASSERT_EQUAL(pool_session_set_env_dir(p, h, "/x"), -ESTALE);
    CU_ASSERT_EQUAL(pool_session_mark_started(p, h, "a"), -ESTALE);
    CU_ASSERT_TRUE(consistent(p));
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static enum teardown_reason judge_ok(void *ctx, const struct pool_session *s)
{
    (void)s;
    return *(enum teardown_reason *)ctx;
}

static enum teardown_reason judge_parked(void *ctx, struct pool_session *s)
{
    for (size_t i = 0; i < s->ngates; i++)
        s->gates[i].decision = 1;
    return *(enum teardown_reason *)ctx;
}

static void test_session_lookup_warm_resume_evict(void)
{
    struct pool *p = new_pool(4);
    enum teardown_reason verdict = TEARDOWN_NONE;
    struct pool_judge judge = {.idle = judge_ok, .parked = judge_parked, .ctx = &verdict};
    struct pool_lookup lk;
    struct pool_victim v;
    struct pool_handle h;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(pool_session_lookup(p, "p:none", &judge, getpid(), "t", &lk), 0);
    CU_ASSERT_EQUAL(lk.outcome, POOL_LOOKUP_MISS);
    h = started(p, "p:w");
    /* busy: a newer request supersedes it */
    CU_ASSERT_EQUAL(pool_session_lookup(p, "p:w", &judge, getpid(), "t2", &lk), 0);
    CU_ASSERT_EQUAL(lk.outcome, POOL_LOOKUP_EVICT);
    CU_ASSERT_EQUAL(lk.reason, TEARDOWN_SUPERSEDED);
    CU_ASSERT_EQUAL(lk.s.keeper_pid, (int32_t)getpid());
    /* draining: stays evicted with its first reason */
    CU_ASSERT_EQUAL(pool_session_lookup(p, "p:w", &judge, getpid(), "t3", &lk), 0);
    CU_ASSERT_EQUAL(lk.outcome, POOL_LOOKUP_EVICT);
    CU_ASSERT_EQUAL(lk.reason, TEARDOWN_SUPERSEDED);
    CU_ASSERT_EQUAL(pool_session_free(p, h, 0), 0);

    h = started(p, "p:w");
    CU_ASSERT_EQUAL(park(p, h, false, 8, &v), 0);
    CU_ASSERT_EQUAL(pool_session_lookup(p, "p:w", &judge, getpid(), "t4", &lk), 0);
    CU_ASSERT_EQUAL(lk.outcome, POOL_LOOKUP_WARM);
    CU_ASSERT_EQUAL(lk.s.acp_next_id, 11);
    CU_ASSERT_EQUAL(park(p, h, true, 8, &v), 0); /* paused on a gate */
    CU_ASSERT_EQUAL(pool_session_lookup(p, "p:w", &judge, getpid(), "t5", &lk), 0);
    CU_ASSERT_EQUAL(lk.outcome, POOL_LOOKUP_RESUME);
    CU_ASSERT_EQUAL(lk.s.ngates, 1);
    CU_ASSERT_STRING_EQUAL(lk.s.gates[0].tool_call_id, "call-1");
    CU_ASSERT_EQUAL(lk.s.gates[0].decision, 1);
    CU_ASSERT_EQUAL(lk.s.prompt_id, 10);
    /* a mismatch drains it with the judge's reason */
    CU_ASSERT_EQUAL(park(p, h, false, 8, &v), 0);
    verdict = TEARDOWN_RUNTIME_INCOMPATIBLE;
    CU_ASSERT_EQUAL(pool_session_lookup(p, "p:w", &judge, getpid(), "t6", &lk), 0);
    CU_ASSERT_EQUAL(lk.outcome, POOL_LOOKUP_EVICT);
    CU_ASSERT_EQUAL(lk.reason, TEARDOWN_RUNTIME_INCOMPATIBLE);
    CU_ASSERT_TRUE(consistent(p));
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_session_capacity_evicts_lru_idle(void)
{
    struct pool *p = new_pool(4);
    struct pool_handle a, b, c;
    struct pool_victim v;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    a = started(p, "p:a");
    b = started(p, "p:b");
    c = started(p, "p:c");
    CU_ASSERT_EQUAL(park(p, a, false, 2, &v), 0);
    CU_ASSERT_EQUAL(park(p, b, true, 2, &v), 0);
    CU_ASSERT_FALSE(v.any);
    /* full: the idle one goes, the one awaiting approval never does */
    CU_ASSERT_EQUAL(park(p, c, false, 2, &v), 0);
    CU_ASSERT_TRUE(v.any);
    CU_ASSERT_STRING_EQUAL(v.key, "p:a");
    CU_ASSERT_EQUAL(v.reason, TEARDOWN_CAPACITY_EVICTION);
    CU_ASSERT_EQUAL(v.h.index, a.index);
    CU_ASSERT_EQUAL(pool_session_free(p, v.h, 0), 0);
    /* now b awaits approval and c is idle; a new one at max 1... */
    a = started(p, "p:a");
    CU_ASSERT_EQUAL(park(p, a, false, 2, &v), 0);
    CU_ASSERT_STRING_EQUAL(v.key, "p:c");
    CU_ASSERT_EQUAL(pool_session_free(p, v.h, 0), 0);
    /* ...and with no idle one to evict there is no room */
    c = started(p, "p:c");
    CU_ASSERT_EQUAL(park(p, c, false, 1, &v), 0); /* a was idle: evicted */
    CU_ASSERT_STRING_EQUAL(v.key, "p:a");
    CU_ASSERT_EQUAL(pool_session_free(p, v.h, 0), 0);
    a = started(p, "p:a");
    CU_ASSERT_EQUAL(pool_session_drain(p, c, TEARDOWN_KILL), 0);
    CU_ASSERT_EQUAL(park(p, a, false, 1, &v), -ENOSPC);
    CU_ASSERT_FALSE(v.any);
    CU_ASSERT_TRUE(consistent(p));
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_session_cancel_flags_and_parked(void)
{
    struct pool *p = new_pool(4);
    struct pool_session s;
    struct pool_victim v;
    struct pool_handle h;
    bool parked = true;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(pool_session_request_cancel(p, "p:x", NULL, &parked), -ENOENT);
    h = started(p, "p:x");
    CU_ASSERT_FALSE(pool_session_cancel_requested(p, h));
    /* another turn's cancel is a no-op */
    CU_ASSERT_EQUAL(pool_session_request_cancel(p, "p:x", "other-turn", &parked), 0);
    CU_ASSERT_FALSE(parked);
    CU_ASSERT_FALSE(pool_session_cancel_requested(p, h));
    CU_ASSERT_EQUAL(pool_session_request_cancel(p, "p:x", "t1", &parked), 0);
    CU_ASSERT_TRUE(pool_session_cancel_requested(p, h));
    /* parking clears the flag */
    CU_ASSERT_EQUAL(park(p, h, true, 8, &v), 0);
    CU_ASSERT_FALSE(pool_session_cancel_requested(p, h));
    CU_ASSERT_EQUAL(pool_session_request_cancel(p, "p:x", NULL, &parked), 0);
    CU_ASSERT_TRUE(parked);
    CU_ASSERT_EQUAL(pool_session_checkout_parked(p, "p:x", getpid(), &s), 0);
    CU_ASSERT_EQUAL(s.ngates, 1);
    CU_ASSERT_EQUAL(s.gates[0].decision, -1);
    CU_ASSERT_EQUAL(pool_session_checkout_parked(p, "p:x", getpid(), &s), -EBUSY);
    CU_ASSERT_EQUAL(pool_session_park_cancelled(p, h, 99, util_now_ms() + 1000), 0);
    CU_ASSERT_TRUE(slot_of(p, h, &s));
    CU_ASSERT_EQUAL(s.state, SLOT_IDLE);
    CU_ASSERT_EQUAL(s.ngates, 0);
    CU_ASSERT_EQUAL(s.acp_next_id, 99);
    CU_ASSERT_EQUAL(pool_session_park_cancelled(p, h, 1, 1), -ESTALE); /* not busy */
    CU_ASSERT_EQUAL(pool_session_checkout_parked(p, "p:none", getpid(), &s), -ENOENT);
    CU_ASSERT_TRUE(consistent(p));
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_session_kill_orphan_broken(void)
{
    struct pool *p = new_pool(4);
    struct pool_teardown_view views[4];
    struct pool_session s;
    struct pool_victim v;
    struct pool_handle h;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(pool_session_kill(p, "p:k", TEARDOWN_KILL, &v), 0);
    h = started(p, "p:k");
    /* the worker vanished: broken and parked idle */
    CU_ASSERT_EQUAL(pool_session_orphaned(p, h, true, util_now_ms() + 1000), 0);
    CU_ASSERT_TRUE(slot_of(p, h, &s));
    CU_ASSERT_EQUAL(s.state, SLOT_IDLE);
    CU_ASSERT_TRUE(s.history_broken);
    CU_ASSERT_EQUAL(pool_session_kill(p, "p:k", TEARDOWN_KILL, &v), 1);
    CU_ASSERT_TRUE(v.any);
    CU_ASSERT_EQUAL(v.keeper_pid, (int32_t)getpid());
    CU_ASSERT_STRING_EQUAL(v.key, "p:k");
    /* killing a draining one keeps its first reason */
    CU_ASSERT_EQUAL(pool_session_kill(p, "p:k", TEARDOWN_IDLE_EXPIRY, &v), 1);
    CU_ASSERT_EQUAL(pool_session_free(p, h, 0), 0);
    CU_ASSERT_EQUAL(pool_recent_teardowns(p, views, 4), 1);
    CU_ASSERT_STRING_EQUAL(views[0].key, "p:k");
    CU_ASSERT_EQUAL(views[0].reason, TEARDOWN_KILL);
    CU_ASSERT_EQUAL(views[0].turns, 0);
    /* a per-turn orphan is only marked broken (its keeper ends it) */
    h = started(p, "");
    CU_ASSERT_EQUAL(pool_session_orphaned(p, h, true, util_now_ms() + 1000), 0);
    CU_ASSERT_TRUE(slot_of(p, h, &s));
    CU_ASSERT_EQUAL(s.state, SLOT_BUSY);
    CU_ASSERT_TRUE(s.history_broken);
    CU_ASSERT_TRUE(consistent(p));
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

/* A child that exits at once: a pid that is certainly dead afterwards. */
static pid_t dead_pid(void)
{
    pid_t pid = fork();

    if (pid == 0)
        _exit(0);
    waitpid(pid, NULL, 0);
    return pid;
}

static void test_session_master_reclaims_and_shuts_down(void)
{
    struct pool *p = new_pool(4);
    struct pool_reclaimed *scratch;
    struct pool_session s;
    struct pool_handle live, dead;
    char dir[POOL_DIR_MAX];
    pid_t gone = dead_pid();
    uint32_t n;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    scratch = pool_scratch_new(p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(scratch);
    live = started(p, "p:live");
    dead = reserve(p, "p:dead", false);
    CU_ASSERT_EQUAL(pool_session_set_env_dir(p, dead, "/state/envs/dead"), 0);
    CU_ASSERT_EQUAL(pool_session_set_keeper(p, dead, gone, 0, 0), 0);
    CU_ASSERT_TRUE(pool_dir_in_use(p, "/state/envs/dead"));
    n = pool_reclaim_dead(p, scratch);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_STRING_EQUAL(scratch[0].env_dir, "/state/envs/dead");
    CU_ASSERT_EQUAL(scratch[0].keeper_pid, (int32_t)gone);
    CU_ASSERT_EQUAL(pool_session_present(p, "p:dead"), 0);
    CU_ASSERT_FALSE(pool_dir_in_use(p, "/state/envs/dead"));
    CU_ASSERT_EQUAL(pool_session_present(p, "p:live"), 1);
    /* a keeper the master reaped frees its slot */
    dead = reserve(p, "p:dead2", false);
    CU_ASSERT_EQUAL(pool_session_set_env_dir(p, dead, "/state/envs/d2"), 0);
    CU_ASSERT_EQUAL(pool_session_set_keeper(p, dead, gone, 0, 0), 0);
    CU_ASSERT_EQUAL(pool_reclaim_keeper(p, gone, dir), 1);
    CU_ASSERT_STRING_EQUAL(dir, "/state/envs/d2");
    CU_ASSERT_EQUAL(pool_reclaim_keeper(p, gone, dir), 0);
    /* shutdown lists the keepers and notes why */
    n = pool_shutdown_begin(p, scratch);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(scratch[0].keeper_pid, (int32_t)getpid());
    CU_ASSERT_TRUE(pool_session_peek(p, live.index, &s));
    CU_ASSERT_EQUAL(s.last_teardown, TEARDOWN_SHUTDOWN_IN_FLIGHT);
    CU_ASSERT_STRING_EQUAL(s.key, "p:live");
    CU_ASSERT_FALSE(pool_session_peek(p, dead.index, &s));
    CU_ASSERT_TRUE(consistent(p));
    free(scratch);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_session_info_names_and_metrics(void)
{
    struct pool *p = new_pool(3);
    struct pool_info info;
    struct buf text;
    char name[32];

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    pool_get_info(p, &info);
    CU_ASSERT_TRUE(info.valid);
    CU_ASSERT_EQUAL(info.nslots, 3);
    CU_ASSERT_EQUAL(info.boot_id, 7);
    CU_ASSERT_STRING_EQUAL(info.instance_id, "unit");
    CU_ASSERT_EQUAL(info.master_pid, (int32_t)getpid());
    pool_set_master(p, 1);
    pool_get_info(p, &info);
    CU_ASSERT_EQUAL(info.master_pid, 1);
    CU_ASSERT_EQUAL(pool_shm_name("default", name, sizeof(name)), 0);
    CU_ASSERT_STRING_EQUAL(name, "/agent-runner.default");
    CU_ASSERT_EQUAL(pool_shm_name("a-very-long-instance-name", name, 16), -ENAMETOOLONG);
    (void)started(p, "p:m");
    pool_metrics_turn(p, 1, "openai", 0);
    buf_init(&text, 1 << 20);
    CU_ASSERT_EQUAL(pool_metrics_render(p, &text), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&text), "agent_runner_sessions{state=\"busy\"} 1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&text),
                                  "agent_runner_turns_total{harness=\"claude\",provider=\"openai\","
                                  "outcome=\"ok\"} 1"));
    buf_release(&text);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

CU_TestInfo session_tests[] = {
    {"test_session_lifecycle_reserve_start_park", test_session_lifecycle_reserve_start_park},
    {"test_session_release_unstarted_frees", test_session_release_unstarted_frees},
    {"test_session_lookup_warm_resume_evict", test_session_lookup_warm_resume_evict},
    {"test_session_capacity_evicts_lru_idle", test_session_capacity_evicts_lru_idle},
    {"test_session_cancel_flags_and_parked", test_session_cancel_flags_and_parked},
    {"test_session_kill_orphan_broken", test_session_kill_orphan_broken},
    {"test_session_master_reclaims_and_shuts_down", test_session_master_reclaims_and_shuts_down},
    {"test_session_info_names_and_metrics", test_session_info_names_and_metrics},
    CU_TEST_INFO_NULL,
};
