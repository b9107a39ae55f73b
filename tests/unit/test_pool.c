/*
 * pool — the shared-memory session table: keys, (index, generation) fencing, the slot state
 * machine, the LRU and parked count, the teardown ring, the robust mutex repair after a holder
 * died (a forked child takes the lock and _exits), the consistency check and attach checks.
 *
 * Every test creates its own segment ("/ar-unit-<pid>-<n>") and unlinks it at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/contracts.h"
#include "session/pool_shm.h" /* the slot layout: this suite checks it directly */
#include "suites.h"

static unsigned pool_seq;

static void segment_name(char *out, size_t size)
{
    snprintf(out, size, "/ar-unit-%d-%u", (int)getpid(), ++pool_seq);
}

static struct pool *new_pool(uint32_t nslots)
{
    struct pool *p = NULL;
    char name[64];

    segment_name(name, sizeof(name));
    if (pool_create(name, nslots, "unit", 42, &p) < 0)
        return NULL;
    return p;
}

static bool consistent(struct pool *p)
{
    char err[200] = "";
    int r = pool_check_locked(p, err, sizeof(err));

    if (r < 0)
        fprintf(stderr, "\n  pool check: %s\n", err);
    return r == 0;
}

/* The most recent teardown remembered for key (the list is newest first); false: none. */
static bool recent_of(struct pool *p, const char *key, struct pool_teardown_view *ret)
{
    struct pool_teardown_view v[POOL_RECENT_MAX];
    size_t n = pool_recent_teardowns(p, v, POOL_RECENT_MAX);

    for (size_t i = 0; i < n; i++) {
        if (strcmp(v[i].key, key) == 0) {
            *ret = v[i];
            return true;
        }
    }
    return false;
}

/* The parked count recomputed from the slots alone. */
static uint32_t recount_parked(struct pool *p)
{
    uint32_t n = 0;

    for (uint32_t i = 0; i < p->hdr->nslots; i++) {
        const struct pool_slot *s = &p->slots[i];
        if (s->key[0] && (s->state == SLOT_IDLE || s->state == SLOT_AWAITING_APPROVAL))
            n++;
    }
    return n;
}

/* The LRU list head to tail into out (at most max entries); returns its length. */
static size_t lru_walk(struct pool *p, int32_t *out, size_t max)
{
    size_t n = 0;

    for (int32_t i = p->hdr->lru_head; i >= 0 && n < max; i = p->slots[i].lru_next)
        out[n++] = i;
    return n;
}

static struct pool_handle reserve_ok(struct pool *p, const char *key)
{
    struct pool_handle h = {.index = UINT32_MAX, .generation = 0};
    int r = pool_reserve_locked(p, key, getpid(), &h);

    CU_ASSERT_EQUAL(r, 0);
    return h;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = ms * 1000000L};

    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/*
 * Fork a child that takes the lock, runs scribble (may be NULL) and _exits without unlocking.
 * Returns the child's exit status (0 = it held the lock when it died) or -errno.
 */
static int die_holding_lock(struct pool *p, void (*scribble)(struct pool *, uint32_t), uint32_t idx)
{
    pid_t pid;
    int status;

    pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        if (pool_lock(p) != 0)
            _exit(2);
        if (scribble)
            scribble(p, idx);
        _exit(0);
    }
    if (waitpid(pid, &status, 0) != pid)
        return -errno;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -ECHILD;
}

/* ---- keys ------------------------------------------------------------------------------ */

static void test_pool_reserve_find_free(void)
{
    struct pool *p = new_pool(4);
    struct pool_handle a, b, c;
    int ia;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p1:s1"), -ENOENT);
    a = reserve_ok(p, "p1:s1");
    b = reserve_ok(p, "p1:s2");
    ia = pool_find_locked(p, "p1:s1");
    CU_ASSERT_EQUAL(ia, (int)a.index);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p1:s2"), (int)b.index);
    CU_ASSERT_NOT_EQUAL(a.index, b.index);
    CU_ASSERT_EQUAL(p->slots[a.index].state, SLOT_STARTING);
    CU_ASSERT_STRING_EQUAL(p->slots[a.index].key, "p1:s1");
    CU_ASSERT_EQUAL(p->slots[a.index].reserved_by_pid, (int32_t)getpid());
    CU_ASSERT_PTR_EQUAL(pool_slot_locked(p, a), &p->slots[a.index]);
    CU_ASSERT_EQUAL(p->hdr->nused, 2);
    /* a prefix or a longer key is another key */
    CU_ASSERT_EQUAL(pool_find_locked(p, "p1:s"), -ENOENT);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p1:s11"), -ENOENT);

    CU_ASSERT_EQUAL(pool_free_locked(p, a, TEARDOWN_KILL), 0);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p1:s1"), -ENOENT);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p1:s2"), (int)b.index);
    CU_ASSERT_PTR_NULL(pool_slot_locked(p, a));
    CU_ASSERT_EQUAL(p->slots[a.index].state, SLOT_FREE);
    CU_ASSERT_EQUAL(p->hdr->nused, 1);
    /* the key can be taken again once freed */
    c = reserve_ok(p, "p1:s1");
    CU_ASSERT_EQUAL(pool_find_locked(p, "p1:s1"), (int)c.index);
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_pool_anonymous_keys_never_found(void)
{
    struct pool *p = new_pool(4);
    struct pool_teardown_view t;
    struct pool_handle a, b;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    a = reserve_ok(p, "");
    b = reserve_ok(p, ""); /* anonymous runs never collide */
    CU_ASSERT_NOT_EQUAL(a.index, b.index);
    CU_ASSERT_EQUAL(pool_find_locked(p, ""), -ENOENT);
    CU_ASSERT_PTR_NOT_NULL(pool_slot_locked(p, a));
    CU_ASSERT_PTR_NOT_NULL(pool_slot_locked(p, b));
    /* parked idle, an anonymous slot is on the LRU but not in the parked count */
    CU_ASSERT_EQUAL(pool_park_locked(p, a, SLOT_IDLE, 1000), 0);
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), (int)a.index);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 0);
    CU_ASSERT_EQUAL(pool_find_locked(p, ""), -ENOENT);
    /* and freeing it leaves no teardown behind */
    CU_ASSERT_EQUAL(pool_free_locked(p, a, TEARDOWN_PER_TURN), 0);
    CU_ASSERT_EQUAL(p->hdr->recent_next, 0);
    CU_ASSERT_FALSE(recent_of(p, "", &t));
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_pool_duplicate_key_eexist(void)
{
    struct pool *p = new_pool(4);
    struct pool_handle a, h = {.index = 77, .generation = 77};

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    a = reserve_ok(p, "proj:sess");
    CU_ASSERT_EQUAL(pool_reserve_locked(p, "proj:sess", getpid(), &h), -EEXIST);
    CU_ASSERT_EQUAL(h.index, 77); /* out-parameter untouched on failure */
    CU_ASSERT_EQUAL(p->hdr->nused, 1);
    /* still -EEXIST in every live state, including draining */
    CU_ASSERT_EQUAL(pool_park_locked(p, a, SLOT_IDLE, 0), 0);
    CU_ASSERT_EQUAL(pool_reserve_locked(p, "proj:sess", getpid(), &h), -EEXIST);
    CU_ASSERT_EQUAL(pool_drain_locked(p, a, TEARDOWN_KILL), 0);
    CU_ASSERT_EQUAL(pool_reserve_locked(p, "proj:sess", getpid(), &h), -EEXIST);
    CU_ASSERT_EQUAL(pool_free_locked(p, a, 0), 0);
    CU_ASSERT_EQUAL(pool_reserve_locked(p, "proj:sess", getpid(), &h), 0);
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_pool_full_enospc(void)
{
    struct pool *p = new_pool(3);
    struct pool_handle h[3], x = {.index = 99, .generation = 99};

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    h[0] = reserve_ok(p, "p:a");
    h[1] = reserve_ok(p, "");
    h[2] = reserve_ok(p, "p:c");
    CU_ASSERT_EQUAL(p->hdr->free_head, -1);
    CU_ASSERT_EQUAL(pool_reserve_locked(p, "p:d", getpid(), &x), -ENOSPC);
    CU_ASSERT_EQUAL(pool_reserve_locked(p, "", getpid(), &x), -ENOSPC);
    CU_ASSERT_EQUAL(x.index, 99);
    /* a duplicate is reported as such even when full */
    CU_ASSERT_EQUAL(pool_reserve_locked(p, "p:a", getpid(), &x), -EEXIST);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:d"), -ENOENT);
    CU_ASSERT_EQUAL(p->hdr->nused, 3);
    CU_ASSERT_EQUAL(pool_free_locked(p, h[1], 0), 0);
    x = reserve_ok(p, "p:d");
    CU_ASSERT_EQUAL(x.index, h[1].index);
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_pool_key_too_long(void)
{
    struct pool *p = new_pool(2);
    struct pool_handle h = {.index = 5, .generation = 5};
    char key[POOL_KEY_MAX + 8];

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    memset(key, 'k', sizeof(key));
    key[POOL_KEY_MAX] = '\0'; /* strlen == POOL_KEY_MAX */
    CU_ASSERT_EQUAL(pool_reserve_locked(p, key, getpid(), &h), -ENAMETOOLONG);
    key[POOL_KEY_MAX + 7] = '\0';
    CU_ASSERT_EQUAL(pool_reserve_locked(p, key, getpid(), &h), -ENAMETOOLONG);
    CU_ASSERT_EQUAL(h.index, 5);
    CU_ASSERT_EQUAL(p->hdr->nused, 0);
    /* the longest key that fits */
    key[POOL_KEY_MAX - 1] = '\0';
    h = reserve_ok(p, key);
    CU_ASSERT_EQUAL(pool_find_locked(p, key), (int)h.index);
    CU_ASSERT_EQUAL(strlen(p->slots[h.index].key), (size_t)POOL_KEY_MAX - 1);
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

/* ---- handles and states ---------------------------------------------------------------- */

static void test_pool_generation_fences_stale_handle(void)
{
    struct pool *p = new_pool(4);
    struct pool_handle old, fresh, bogus;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    old = reserve_ok(p, "p:old");
    CU_ASSERT_EQUAL(pool_free_locked(p, old, TEARDOWN_FAILED_TURN), 0);
    fresh = reserve_ok(p, "p:new");
    CU_ASSERT_EQUAL_FATAL(fresh.index, old.index); /* the free list hands the slot back */
    CU_ASSERT_NOT_EQUAL(fresh.generation, old.generation);

    CU_ASSERT_PTR_NULL(pool_slot_locked(p, old));
    CU_ASSERT_EQUAL(pool_park_locked(p, old, SLOT_IDLE, 0), -ESTALE);
    CU_ASSERT_EQUAL(pool_checkout_locked(p, old, false, getpid(), "t"), -ESTALE);
    CU_ASSERT_EQUAL(pool_checkout_locked(p, old, true, getpid(), "t"), -ESTALE);
    CU_ASSERT_EQUAL(pool_drain_locked(p, old, TEARDOWN_KILL), -ESTALE);
    CU_ASSERT_EQUAL(pool_free_locked(p, old, TEARDOWN_KILL), -ESTALE);
    /* the new occupant was not disturbed by any of that */
    CU_ASSERT_PTR_EQUAL(pool_slot_locked(p, fresh), &p->slots[fresh.index]);
    CU_ASSERT_EQUAL(p->slots[fresh.index].state, SLOT_STARTING);
    CU_ASSERT_STRING_EQUAL(p->slots[fresh.index].key, "p:new");
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:new"), (int)fresh.index);
    CU_ASSERT_EQUAL(p->hdr->nused, 1);

    /* a handle to a free slot with its current generation is no better */
    bogus = pool_handle_of(p, (fresh.index + 1) % 4);
    CU_ASSERT_PTR_NULL(pool_slot_locked(p, bogus));
    CU_ASSERT_EQUAL(pool_free_locked(p, bogus, 0), -ESTALE);
    bogus.index = 4; /* out of range */
    CU_ASSERT_PTR_NULL(pool_slot_locked(p, bogus));
    CU_ASSERT_EQUAL(pool_park_locked(p, bogus, SLOT_IDLE, 0), -ESTALE);
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_pool_state_machine(void)
{
    struct pool *p = new_pool(2);
    struct pool_handle h;
    struct pool_slot *s;
    pid_t me = getpid();

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    h = reserve_ok(p, "p:sm");
    s = pool_slot_locked(p, h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->state, SLOT_STARTING);
    /* a starting slot is not checked out: only parked ones are */
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h, false, me, "t0"), -EBUSY);
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h, true, me, "t0"), -EBUSY);

    /* starting -> idle */
    CU_ASSERT_EQUAL(pool_park_locked(p, h, SLOT_IDLE, 12345), 0);
    CU_ASSERT_EQUAL(s->state, SLOT_IDLE);
    CU_ASSERT_EQUAL(s->idle_deadline_ms, 12345);
    CU_ASSERT_EQUAL(s->owner_pid, 0);
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), (int)h.index);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 1);
    /* parking an idle slot again is refused; approval checkout of an idle slot too */
    CU_ASSERT_EQUAL(pool_park_locked(p, h, SLOT_IDLE, 1), -EBUSY);
    CU_ASSERT_EQUAL(pool_park_locked(p, h, SLOT_AWAITING_APPROVAL, 1), -EBUSY);
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h, true, me, "t1"), -EBUSY);
    CU_ASSERT_EQUAL(s->state, SLOT_IDLE);

    /* idle -> busy */
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h, false, me, "turn-1"), 0);
    CU_ASSERT_EQUAL(s->state, SLOT_BUSY);
    CU_ASSERT_EQUAL(s->owner_pid, (int32_t)me);
    CU_ASSERT_STRING_EQUAL(s->owner_turn, "turn-1");
    CU_ASSERT_EQUAL(s->idle_deadline_ms, 0);
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), -ENOENT);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 0);
    /* a busy slot cannot be checked out again, by either path */
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h, false, me, "turn-2"), -EBUSY);
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h, true, me, "turn-2"), -EBUSY);
    CU_ASSERT_STRING_EQUAL(s->owner_turn, "turn-1");
    /* only idle and awaiting_approval are park targets */
    CU_ASSERT_EQUAL(pool_park_locked(p, h, SLOT_BUSY, 0), -EINVAL);
    CU_ASSERT_EQUAL(pool_park_locked(p, h, SLOT_DRAINING, 0), -EINVAL);
    CU_ASSERT_EQUAL(s->state, SLOT_BUSY);

    /* busy -> awaiting_approval */
    CU_ASSERT_EQUAL(pool_park_locked(p, h, SLOT_AWAITING_APPROVAL, 999), 0);
    CU_ASSERT_EQUAL(s->state, SLOT_AWAITING_APPROVAL);
    CU_ASSERT_EQUAL(s->approval_deadline_ms, 999);
    CU_ASSERT_STRING_EQUAL(s->owner_turn, "");
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), -ENOENT); /* never on the LRU */
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 1);
    CU_ASSERT_EQUAL(pool_park_locked(p, h, SLOT_IDLE, 1), -EBUSY);
    /* an awaiting slot is only taken by the approval path */
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h, false, me, "turn-3"), -EBUSY);
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h, true, me, "turn-3"), 0);
    CU_ASSERT_EQUAL(s->state, SLOT_BUSY);
    CU_ASSERT_STRING_EQUAL(s->owner_turn, "turn-3");
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 0);
    CU_ASSERT_TRUE(consistent(p));

    /* busy -> draining: nothing but free from there */
    CU_ASSERT_EQUAL(pool_drain_locked(p, h, TEARDOWN_KILL), 0);
    CU_ASSERT_EQUAL(s->state, SLOT_DRAINING);
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h, false, me, "t"), -EBUSY);
    CU_ASSERT_EQUAL(pool_park_locked(p, h, SLOT_IDLE, 0), -EBUSY);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:sm"), (int)h.index); /* keeps its key until freed */
    CU_ASSERT_EQUAL(pool_free_locked(p, h, 0), 0);
    CU_ASSERT_PTR_NULL(pool_slot_locked(p, h));
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

/* ---- LRU and parked count -------------------------------------------------------------- */

static void test_pool_lru_order(void)
{
    struct pool *p = new_pool(6);
    struct pool_handle h[3];
    const char *keys[3] = {"p:first", "p:second", "p:third"};
    int32_t order[8];

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), -ENOENT);
    for (int i = 0; i < 3; i++)
        h[i] = reserve_ok(p, keys[i]);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(pool_park_locked(p, h[i], SLOT_IDLE, 0), 0);
        sleep_ms(3); /* increasing last use times */
    }
    CU_ASSERT_TRUE(p->slots[h[0].index].last_used_ms < p->slots[h[1].index].last_used_ms);
    CU_ASSERT_TRUE(p->slots[h[1].index].last_used_ms < p->slots[h[2].index].last_used_ms);
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), (int)h[0].index);
    CU_ASSERT_EQUAL(lru_walk(p, order, 8), 3);
    CU_ASSERT_EQUAL(order[0], (int32_t)h[0].index);
    CU_ASSERT_EQUAL(order[1], (int32_t)h[1].index);
    CU_ASSERT_EQUAL(order[2], (int32_t)h[2].index);

    /* the oldest checked out leaves the LRU: the next oldest is now the victim */
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h[0], false, getpid(), "t"), 0);
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), (int)h[1].index);
    CU_ASSERT_EQUAL(lru_walk(p, order, 8), 2);
    CU_ASSERT_EQUAL(order[0], (int32_t)h[1].index);
    CU_ASSERT_EQUAL(order[1], (int32_t)h[2].index);
    CU_ASSERT_TRUE(consistent(p));

    /* re-parked, it goes to the tail (most recently used) */
    sleep_ms(3);
    CU_ASSERT_EQUAL(pool_park_locked(p, h[0], SLOT_IDLE, 0), 0);
    CU_ASSERT_EQUAL(lru_walk(p, order, 8), 3);
    CU_ASSERT_EQUAL(order[0], (int32_t)h[1].index);
    CU_ASSERT_EQUAL(order[1], (int32_t)h[2].index);
    CU_ASSERT_EQUAL(order[2], (int32_t)h[0].index);
    CU_ASSERT_EQUAL(p->hdr->lru_tail, (int32_t)h[0].index);
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), (int)h[1].index);

    /* a middle entry removed by a checkout keeps the list linked */
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h[2], false, getpid(), "t"), 0);
    CU_ASSERT_EQUAL(lru_walk(p, order, 8), 2);
    CU_ASSERT_EQUAL(order[0], (int32_t)h[1].index);
    CU_ASSERT_EQUAL(order[1], (int32_t)h[0].index);
    sleep_ms(3);
    CU_ASSERT_EQUAL(pool_park_locked(p, h[2], SLOT_IDLE, 0), 0);
    CU_ASSERT_TRUE(consistent(p));

    /* the rebuild after a repair restores the same order from the last use times */
    CU_ASSERT_EQUAL(pool_repair_locked(p), 0);
    CU_ASSERT_EQUAL(lru_walk(p, order, 8), 3);
    CU_ASSERT_EQUAL(order[0], (int32_t)h[1].index);
    CU_ASSERT_EQUAL(order[1], (int32_t)h[0].index);
    CU_ASSERT_EQUAL(order[2], (int32_t)h[2].index);
    CU_ASSERT_TRUE(consistent(p));

    /* freeing and draining idle slots take them off the list */
    CU_ASSERT_EQUAL(pool_free_locked(p, h[1], TEARDOWN_IDLE_EXPIRY), 0);
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), (int)h[0].index);
    CU_ASSERT_EQUAL(pool_drain_locked(p, h[0], TEARDOWN_CAPACITY_EVICTION), 0);
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), (int)h[2].index);
    CU_ASSERT_EQUAL(lru_walk(p, order, 8), 1);
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

#define PARKED_EXACT(p)                                                                            \
    do {                                                                                           \
        CU_ASSERT_EQUAL(pool_parked_count_locked(p), recount_parked(p));                           \
        CU_ASSERT_TRUE(consistent(p));                                                             \
    } while (0)

static void test_pool_capacity_only_busy(void)
{
    struct pool *p = new_pool(4);
    struct pool_handle h[4], x;
    pid_t me = getpid();

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    h[0] = reserve_ok(p, "p:0");
    h[1] = reserve_ok(p, "p:1");
    h[2] = reserve_ok(p, "p:2");
    h[3] = reserve_ok(p, "p:3");
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 0);
    PARKED_EXACT(p);

    /* park: two idle, two awaiting approval */
    CU_ASSERT_EQUAL(pool_park_locked(p, h[0], SLOT_IDLE, 0), 0);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 1);
    CU_ASSERT_EQUAL(pool_park_locked(p, h[1], SLOT_IDLE, 0), 0);
    CU_ASSERT_EQUAL(pool_park_locked(p, h[2], SLOT_AWAITING_APPROVAL, 0), 0);
    CU_ASSERT_EQUAL(pool_park_locked(p, h[3], SLOT_AWAITING_APPROVAL, 0), 0);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 4);
    PARKED_EXACT(p);
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), (int)h[0].index);
    CU_ASSERT_EQUAL(pool_reserve_locked(p, "p:4", me, &x), -ENOSPC);

    /* every seat busy or awaiting approval: no LRU victim */
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h[0], false, me, "a"), 0);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 3);
    PARKED_EXACT(p);
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h[1], false, me, "b"), 0);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 2);
    PARKED_EXACT(p);
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), -ENOENT);

    /* all busy */
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h[2], true, me, "c"), 0);
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h[3], true, me, "d"), 0);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 0);
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), -ENOENT);
    PARKED_EXACT(p);

    /* drain from awaiting and from idle, free from draining and from awaiting */
    CU_ASSERT_EQUAL(pool_park_locked(p, h[2], SLOT_AWAITING_APPROVAL, 0), 0);
    CU_ASSERT_EQUAL(pool_park_locked(p, h[1], SLOT_IDLE, 0), 0);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 2);
    PARKED_EXACT(p);
    CU_ASSERT_EQUAL(pool_drain_locked(p, h[2], TEARDOWN_APPROVAL_EXPIRY), 0);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 1);
    PARKED_EXACT(p);
    CU_ASSERT_EQUAL(pool_drain_locked(p, h[1], TEARDOWN_IDLE_EXPIRY), 0);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 0);
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), -ENOENT);
    PARKED_EXACT(p);
    CU_ASSERT_EQUAL(pool_drain_locked(p, h[1], TEARDOWN_IDLE_EXPIRY), 0); /* twice: no-op */
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 0);
    CU_ASSERT_EQUAL(pool_free_locked(p, h[2], 0), 0);
    CU_ASSERT_EQUAL(pool_free_locked(p, h[1], 0), 0);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 0);
    PARKED_EXACT(p);
    CU_ASSERT_EQUAL(pool_park_locked(p, h[3], SLOT_AWAITING_APPROVAL, 0), 0);
    CU_ASSERT_EQUAL(pool_park_locked(p, h[0], SLOT_IDLE, 0), 0);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 2);
    CU_ASSERT_EQUAL(pool_free_locked(p, h[3], TEARDOWN_KILL), 0);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 1);
    CU_ASSERT_EQUAL(pool_free_locked(p, h[0], TEARDOWN_KILL), 0);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 0);
    CU_ASSERT_EQUAL(p->hdr->nused, 0);
    PARKED_EXACT(p);
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

/* ---- the teardown ring ----------------------------------------------------------------- */

static void test_pool_recent_teardown_ring(void)
{
    struct pool *p = new_pool(4);
    struct pool_teardown_view t;
    struct pool_handle h;
    char key[32];

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    CU_ASSERT_FALSE(recent_of(p, "p:a", &t));

    /* the reason given to free */
    h = reserve_ok(p, "p:a");
    p->slots[h.index].turns = 3;
    p->slots[h.index].harness = HARNESS_CODEX;
    CU_ASSERT_EQUAL(pool_free_locked(p, h, TEARDOWN_KILL), 0);
    CU_ASSERT_TRUE_FATAL(recent_of(p, "p:a", &t));
    CU_ASSERT_EQUAL(t.reason, TEARDOWN_KILL);
    CU_ASSERT_EQUAL(t.turns, 3);
    CU_ASSERT_EQUAL(t.harness, HARNESS_CODEX);
    CU_ASSERT_TRUE(t.at_ms > 0);

    /* reason 0: the one recorded by drain */
    h = reserve_ok(p, "p:b");
    CU_ASSERT_EQUAL(pool_park_locked(p, h, SLOT_IDLE, 0), 0);
    CU_ASSERT_EQUAL(pool_drain_locked(p, h, TEARDOWN_IDLE_EXPIRY), 0);
    CU_ASSERT_EQUAL(pool_free_locked(p, h, 0), 0);
    CU_ASSERT_TRUE_FATAL(recent_of(p, "p:b", &t));
    CU_ASSERT_EQUAL(t.reason, TEARDOWN_IDLE_EXPIRY);

    /* a non-zero reason at free wins over the drain's */
    h = reserve_ok(p, "p:c");
    CU_ASSERT_EQUAL(pool_drain_locked(p, h, TEARDOWN_CAPACITY_EVICTION), 0);
    CU_ASSERT_EQUAL(pool_free_locked(p, h, TEARDOWN_HARNESS_EXITED), 0);
    CU_ASSERT_TRUE_FATAL(recent_of(p, "p:c", &t));
    CU_ASSERT_EQUAL(t.reason, TEARDOWN_HARNESS_EXITED);

    /* the most recent teardown of a key is the one remembered */
    h = reserve_ok(p, "p:a");
    CU_ASSERT_EQUAL(pool_free_locked(p, h, TEARDOWN_SUPERSEDED), 0);
    CU_ASSERT_TRUE_FATAL(recent_of(p, "p:a", &t));
    CU_ASSERT_EQUAL(t.reason, TEARDOWN_SUPERSEDED);
    CU_ASSERT_EQUAL(t.turns, 0);
    CU_ASSERT_FALSE(recent_of(p, "p:zzz", &t));
    CU_ASSERT_EQUAL(p->hdr->recent_next, 4);

    /* the ring holds POOL_RECENT_MAX entries: the oldest are forgotten */
    for (unsigned i = 0; i < POOL_RECENT_MAX + 6; i++) {
        snprintf(key, sizeof(key), "p:ring-%u", i);
        h = reserve_ok(p, key);
        CU_ASSERT_EQUAL(pool_free_locked(p, h, TEARDOWN_PER_TURN), 0);
    }
    CU_ASSERT_FALSE(recent_of(p, "p:a", &t));
    CU_ASSERT_FALSE(recent_of(p, "p:ring-5", &t));
    CU_ASSERT_TRUE(recent_of(p, "p:ring-6", &t));
    snprintf(key, sizeof(key), "p:ring-%u", POOL_RECENT_MAX + 5);
    CU_ASSERT_TRUE_FATAL(recent_of(p, key, &t));
    CU_ASSERT_EQUAL(t.reason, TEARDOWN_PER_TURN);
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

/* ---- robust mutex ---------------------------------------------------------------------- */

static void scribble_state(struct pool *p, uint32_t idx)
{
    p->slots[idx].state = 99;
}

static void scribble_key_hash(struct pool *p, uint32_t idx)
{
    p->slots[idx].key_hash ^= 0x5a5a5a5au;
}

/* A reserve cut short: off the free list and keyed, but neither hashed nor counted. */
static void scribble_half_reserve(struct pool *p, uint32_t idx)
{
    struct pool_slot *s = &p->slots[idx];

    p->hdr->free_head = s->free_next;
    s->generation++;
    s->state = SLOT_STARTING;
    memcpy(s->key, "p:half", sizeof("p:half"));
}

static void scribble_unterminated_key(struct pool *p, uint32_t idx)
{
    memset(p->slots[idx].key, 'x', sizeof(p->slots[idx].key));
}

/* A pool with slots in every live state: 0 idle, 1 awaiting, 2 busy, 3 anonymous busy. */
static void populate(struct pool *p, struct pool_handle h[4])
{
    h[0] = reserve_ok(p, "p:idle");
    h[1] = reserve_ok(p, "p:await");
    h[2] = reserve_ok(p, "p:busy");
    h[3] = reserve_ok(p, "");
    CU_ASSERT_EQUAL(pool_park_locked(p, h[0], SLOT_IDLE, 0), 0);
    CU_ASSERT_EQUAL(pool_park_locked(p, h[1], SLOT_AWAITING_APPROVAL, 0), 0);
    CU_ASSERT_EQUAL(pool_park_locked(p, h[2], SLOT_IDLE, 0), 0);
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h[2], false, getpid(), "t"), 0);
}

/* A master adopting a table: garbage slots reset, the table checked, itself recorded. */
static void test_pool_adopt_repairs_and_records_master(void)
{
    struct pool *p = new_pool(4);
    struct pool_handle h[4];
    struct pool_info info;
    uint32_t reset = 99;
    char err[200] = "";

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    populate(p, h);
    pool_unlock(p);
    scribble_state(p, h[1].index);
    CU_ASSERT_EQUAL(pool_check(p, err, sizeof(err)), -EUCLEAN);
    CU_ASSERT_NOT_EQUAL(err[0], '\0');
    CU_ASSERT_EQUAL(pool_adopt(p, 4242, &reset, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(reset, 1);
    pool_get_info(p, &info);
    CU_ASSERT_EQUAL(info.master_pid, 4242);
    CU_ASSERT_EQUAL(info.nused, 3);
    CU_ASSERT_EQUAL(pool_check(p, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(pool_adopt(p, 4243, &reset, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(reset, 0);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_pool_robust_repairs_invalid_state(void)
{
#ifdef __SANITIZE_THREAD__
    /* ThreadSanitizer models threads, not a lock owner dying in another process */
    CU_PASS("skipped under ThreadSanitizer");
    return;
#endif
    struct pool *p = new_pool(8);
    struct pool_handle h[4];
    uint32_t repairs, gen;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    populate(p, h);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 2);
    pool_unlock(p);
    repairs = p->hdr->repairs;
    gen = p->slots[h[1].index].generation;

    CU_ASSERT_EQUAL_FATAL(die_holding_lock(p, scribble_state, h[1].index), 0);
    CU_ASSERT_EQUAL(p->slots[h[1].index].state, 99); /* the child's half-done change */
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 1);
    CU_ASSERT_EQUAL(p->hdr->repairs, repairs + 1);
    CU_ASSERT_EQUAL(p->hdr->lock_holder_pid, (int32_t)getpid());
    /* the broken slot is free, with a new generation that fences old handles */
    CU_ASSERT_EQUAL(p->slots[h[1].index].state, SLOT_FREE);
    CU_ASSERT_EQUAL(p->slots[h[1].index].generation, gen + 1);
    CU_ASSERT_STRING_EQUAL(p->slots[h[1].index].key, "");
    CU_ASSERT_PTR_NULL(pool_slot_locked(p, h[1]));
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:await"), -ENOENT);
    /* the others are untouched */
    CU_ASSERT_PTR_NOT_NULL(pool_slot_locked(p, h[0]));
    CU_ASSERT_PTR_NOT_NULL(pool_slot_locked(p, h[2]));
    CU_ASSERT_PTR_NOT_NULL(pool_slot_locked(p, h[3]));
    CU_ASSERT_EQUAL(p->slots[h[0].index].state, SLOT_IDLE);
    CU_ASSERT_EQUAL(p->slots[h[2].index].state, SLOT_BUSY);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:idle"), (int)h[0].index);
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), (int)h[0].index);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 1);
    CU_ASSERT_EQUAL(p->hdr->nused, 3);
    CU_ASSERT_TRUE(consistent(p));
    /* and the freed slot is usable again */
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:await"), -ENOENT);
    reserve_ok(p, "p:await");
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);

    /* the mutex was made consistent: the next lock is a plain one */
    CU_ASSERT_EQUAL(pool_lock(p), 0);
    CU_ASSERT_EQUAL(p->hdr->repairs, repairs + 1);
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_pool_robust_repairs_broken_key_hash(void)
{
#ifdef __SANITIZE_THREAD__
    /* ThreadSanitizer models threads, not a lock owner dying in another process */
    CU_PASS("skipped under ThreadSanitizer");
    return;
#endif
    struct pool *p = new_pool(8);
    struct pool_handle h[4];
    uint32_t repairs, gen;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    populate(p, h);
    pool_unlock(p);
    repairs = p->hdr->repairs;
    gen = p->slots[h[0].index].generation;

    /* the idle slot, which sits on the LRU and in the hash index */
    CU_ASSERT_EQUAL_FATAL(die_holding_lock(p, scribble_key_hash, h[0].index), 0);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 1);
    CU_ASSERT_EQUAL(p->hdr->repairs, repairs + 1);
    CU_ASSERT_EQUAL(p->slots[h[0].index].state, SLOT_FREE);
    CU_ASSERT_EQUAL(p->slots[h[0].index].generation, gen + 1);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:idle"), -ENOENT);
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), -ENOENT);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:await"), (int)h[1].index);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:busy"), (int)h[2].index);
    CU_ASSERT_EQUAL(pool_parked_count_locked(p), 1);
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_pool_robust_repairs_half_reserve(void)
{
#ifdef __SANITIZE_THREAD__
    /* ThreadSanitizer models threads, not a lock owner dying in another process */
    CU_PASS("skipped under ThreadSanitizer");
    return;
#endif
    struct pool *p = new_pool(6);
    struct pool_handle h[4];
    char err[200];
    uint32_t victim, gen;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    populate(p, h);
    CU_ASSERT_FATAL(p->hdr->free_head >= 0);
    victim = (uint32_t)p->hdr->free_head;
    gen = p->slots[victim].generation;
    pool_unlock(p);

    CU_ASSERT_EQUAL_FATAL(die_holding_lock(p, scribble_half_reserve, victim), 0);
    /* what a survivor would see without the repair (read-only peek: the lock's owner is dead,
     * nobody else runs) */
    CU_ASSERT_EQUAL(pool_check_locked(p, err, sizeof(err)), -EUCLEAN);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 1);
    CU_ASSERT_EQUAL(p->slots[victim].state, SLOT_FREE);
    CU_ASSERT_TRUE(p->slots[victim].generation > gen);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:half"), -ENOENT);
    CU_ASSERT_EQUAL(p->hdr->nused, 4);
    CU_ASSERT_TRUE(consistent(p));
    /* both free slots can be reserved again */
    reserve_ok(p, "p:x");
    reserve_ok(p, "p:y");
    CU_ASSERT_EQUAL(p->hdr->free_head, -1);
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_pool_robust_repairs_unterminated_key(void)
{
#ifdef __SANITIZE_THREAD__
    /* ThreadSanitizer models threads, not a lock owner dying in another process */
    CU_PASS("skipped under ThreadSanitizer");
    return;
#endif
    struct pool *p = new_pool(8);
    struct pool_handle h[4];
    uint32_t gen;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    populate(p, h);
    pool_unlock(p);
    gen = p->slots[h[2].index].generation;
    CU_ASSERT_EQUAL_FATAL(die_holding_lock(p, scribble_unterminated_key, h[2].index), 0);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 1);
    CU_ASSERT_EQUAL(p->slots[h[2].index].state, SLOT_FREE);
    CU_ASSERT_EQUAL(p->slots[h[2].index].generation, gen + 1);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:busy"), -ENOENT);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:idle"), (int)h[0].index);
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_pool_robust_clean_death_keeps_slots(void)
{
#ifdef __SANITIZE_THREAD__
    /* ThreadSanitizer models threads, not a lock owner dying in another process */
    CU_PASS("skipped under ThreadSanitizer");
    return;
#endif
    struct pool *p = new_pool(8);
    struct pool_handle h[4];
    struct pool_slot *before;
    uint32_t nslots, repairs, nparked, nused;
    int32_t lru;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    populate(p, h);
    /* a slot used and freed again: its generation moved on and must stay */
    CU_ASSERT_EQUAL(pool_free_locked(p, reserve_ok(p, "p:gone"), TEARDOWN_PER_TURN), 0);
    pool_unlock(p);
    nslots = p->hdr->nslots;
    before = malloc(nslots * sizeof(*before));
    CU_ASSERT_PTR_NOT_NULL_FATAL(before);
    memcpy(before, p->slots, nslots * sizeof(*before));
    repairs = p->hdr->repairs;
    nparked = p->hdr->nparked;
    nused = p->hdr->nused;
    lru = p->hdr->lru_head;

    CU_ASSERT_EQUAL_FATAL(die_holding_lock(p, NULL, 0), 0);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 1);
    CU_ASSERT_EQUAL(p->hdr->repairs, repairs + 1);
    for (uint32_t i = 0; i < nslots; i++) {
        const struct pool_slot *a = &before[i], *b = &p->slots[i];

        CU_ASSERT_EQUAL(a->state, b->state);
        CU_ASSERT_EQUAL(a->generation, b->generation);
        CU_ASSERT_STRING_EQUAL(a->key, b->key);
        CU_ASSERT_EQUAL(a->key_hash, b->key_hash);
        CU_ASSERT_EQUAL(a->owner_pid, b->owner_pid);
        CU_ASSERT_EQUAL(a->last_used_ms, b->last_used_ms);
        CU_ASSERT_STRING_EQUAL(a->owner_turn, b->owner_turn);
    }
    for (int i = 0; i < 4; i++)
        CU_ASSERT_PTR_NOT_NULL(pool_slot_locked(p, h[i]));
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:idle"), (int)h[0].index);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:await"), (int)h[1].index);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:busy"), (int)h[2].index);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:gone"), -ENOENT);
    CU_ASSERT_EQUAL(p->hdr->nparked, nparked);
    CU_ASSERT_EQUAL(p->hdr->nused, nused);
    CU_ASSERT_EQUAL(p->hdr->lru_head, lru);
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    free(before);

    /* the mutex is consistent again: the next lock is a plain one */
    CU_ASSERT_EQUAL(pool_lock(p), 0);
    pool_unlock(p);
    CU_ASSERT_EQUAL(p->hdr->repairs, repairs + 1);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

/* ---- consistency check ----------------------------------------------------------------- */

static void test_pool_check_detects_free_list(void)
{
    struct pool *p = new_pool(6);
    struct pool_handle a, b;
    char err[200] = "";
    int32_t head;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    a = reserve_ok(p, "p:a");
    b = reserve_ok(p, "p:b");
    CU_ASSERT_EQUAL(pool_check_locked(p, err, sizeof(err)), 0);
    head = p->hdr->free_head;
    CU_ASSERT_FATAL(head >= 0);

    /* a cycle */
    p->slots[head].free_next = head;
    CU_ASSERT_EQUAL(pool_check_locked(p, err, sizeof(err)), -EUCLEAN);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "free list"));
    CU_ASSERT_EQUAL(pool_repair_locked(p), 0); /* the slots were fine: nothing reset */
    CU_ASSERT_TRUE(consistent(p));

    /* a used slot on the free list */
    p->hdr->free_head = (int32_t)a.index;
    err[0] = '\0';
    CU_ASSERT_EQUAL(pool_check_locked(p, err, sizeof(err)), -EUCLEAN);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "free list"));
    CU_ASSERT_EQUAL(pool_repair_locked(p), 0);
    CU_ASSERT_TRUE(consistent(p));

    /* a truncated free list: the counts no longer add up */
    p->hdr->free_head = -1;
    err[0] = '\0';
    CU_ASSERT_EQUAL(pool_check_locked(p, err, sizeof(err)), -EUCLEAN);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "counts"));
    CU_ASSERT_EQUAL(pool_repair_locked(p), 0);
    CU_ASSERT_TRUE(consistent(p));

    /* an index past the end */
    p->hdr->free_head = 6;
    CU_ASSERT_EQUAL(pool_check_locked(p, err, sizeof(err)), -EUCLEAN);
    CU_ASSERT_EQUAL(pool_repair_locked(p), 0);
    CU_ASSERT_TRUE(consistent(p));

    /* the live slots survived every repair */
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:a"), (int)a.index);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:b"), (int)b.index);
    CU_ASSERT_PTR_NOT_NULL(pool_slot_locked(p, a));
    CU_ASSERT_EQUAL(p->hdr->nused, 2);
    reserve_ok(p, "p:c");
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_pool_check_detects_lru_list(void)
{
    struct pool *p = new_pool(6);
    struct pool_handle h[3];
    int32_t order[8];
    char err[200] = "";

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    for (int i = 0; i < 3; i++) {
        char key[16];
        snprintf(key, sizeof(key), "p:%d", i);
        h[i] = reserve_ok(p, key);
        CU_ASSERT_EQUAL(pool_park_locked(p, h[i], SLOT_IDLE, 0), 0);
        sleep_ms(2);
    }
    CU_ASSERT_TRUE(consistent(p));

    /* the list cut after its head: the tail no longer matches */
    p->slots[h[0].index].lru_next = -1;
    CU_ASSERT_EQUAL(pool_check_locked(p, err, sizeof(err)), -EUCLEAN);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "lru"));
    CU_ASSERT_EQUAL(pool_repair_locked(p), 0);
    CU_ASSERT_TRUE(consistent(p));
    CU_ASSERT_EQUAL(lru_walk(p, order, 8), 3);
    CU_ASSERT_EQUAL(order[0], (int32_t)h[0].index);
    CU_ASSERT_EQUAL(order[2], (int32_t)h[2].index);

    /* a wrong back link */
    p->slots[h[2].index].lru_prev = (int32_t)h[0].index;
    err[0] = '\0';
    CU_ASSERT_EQUAL(pool_check_locked(p, err, sizeof(err)), -EUCLEAN);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "lru"));
    CU_ASSERT_EQUAL(pool_repair_locked(p), 0);
    CU_ASSERT_TRUE(consistent(p));

    /* a busy slot on the list */
    CU_ASSERT_EQUAL(pool_checkout_locked(p, h[1], false, getpid(), "t"), 0);
    p->hdr->lru_head = (int32_t)h[1].index;
    p->slots[h[1].index].lru_next = (int32_t)h[0].index;
    p->slots[h[0].index].lru_prev = (int32_t)h[1].index;
    CU_ASSERT_EQUAL(pool_check_locked(p, err, sizeof(err)), -EUCLEAN);
    CU_ASSERT_EQUAL(pool_repair_locked(p), 0);
    CU_ASSERT_TRUE(consistent(p));
    CU_ASSERT_EQUAL(pool_lru_idle_locked(p), (int)h[0].index);
    CU_ASSERT_EQUAL(lru_walk(p, order, 8), 2);

    /* a lost hash index: keys not found until the repair rebuilds it */
    for (uint32_t b = 0; b < p->hdr->nbuckets; b++)
        p->buckets[b] = -1;
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:1"), -ENOENT);
    err[0] = '\0';
    CU_ASSERT_EQUAL(pool_check_locked(p, err, sizeof(err)), -EUCLEAN);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not indexed"));
    CU_ASSERT_EQUAL(pool_repair_locked(p), 0);
    CU_ASSERT_EQUAL(pool_find_locked(p, "p:1"), (int)h[1].index);
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

/* ---- attach ---------------------------------------------------------------------------- */

static void test_pool_attach_checks_header(void)
{
    struct pool *p = new_pool(4), *q = NULL;
    uint64_t magic;
    uint32_t version, nslots;
    char other[64];
    int fd;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(pool_attach(p->name, false, &q), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(q);
    CU_ASSERT_EQUAL(q->hdr->nslots, 4);
    CU_ASSERT_STRING_EQUAL(q->hdr->instance_id, "unit");
    CU_ASSERT_EQUAL(q->hdr->boot_id, 42);
    /* both mappings see the same table */
    CU_ASSERT_EQUAL_FATAL(pool_lock(q), 0);
    reserve_ok(q, "p:shared");
    pool_unlock(q);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    CU_ASSERT_TRUE(pool_find_locked(p, "p:shared") >= 0);
    pool_unlock(p);
    pool_detach(q);
    q = NULL;

    magic = p->hdr->magic;
    p->hdr->magic = magic ^ 1;
    CU_ASSERT_EQUAL(pool_attach(p->name, false, &q), -EPROTO);
    CU_ASSERT_EQUAL(pool_attach(p->name, true, &q), -EPROTO);
    p->hdr->magic = magic;

    version = p->hdr->layout_version;
    p->hdr->layout_version = version + 1;
    CU_ASSERT_EQUAL(pool_attach(p->name, false, &q), -EPROTO);
    p->hdr->layout_version = version;

    nslots = p->hdr->nslots; /* a header that disagrees with the segment's size */
    p->hdr->nslots = nslots * 100;
    CU_ASSERT_EQUAL(pool_attach(p->name, false, &q), -EPROTO);
    p->hdr->nslots = nslots;
    CU_ASSERT_PTR_NULL(q);

    /* a segment too small to hold a header */
    segment_name(other, sizeof(other));
    fd = shm_open(other, O_RDWR | O_CREAT | O_EXCL, 0600);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(ftruncate(fd, 64), 0);
    close(fd);
    CU_ASSERT_EQUAL(pool_attach(other, false, &q), -EPROTO);
    shm_unlink(other);
    /* and none at all */
    CU_ASSERT_EQUAL(pool_attach(other, false, &q), -ENOENT);
    CU_ASSERT_PTR_NULL(q);

    /* restored, it attaches again */
    CU_ASSERT_EQUAL(pool_attach(p->name, false, &q), 0);
    pool_detach(q);
    pool_detach(NULL);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

static void test_pool_attach_readonly_cannot_lock(void)
{
    struct pool *p = new_pool(4), *ro = NULL;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(pool_attach(p->name, true, &ro), 0);
    CU_ASSERT_TRUE(ro->readonly);
    CU_ASSERT_EQUAL(pool_lock(ro), -EPERM);
    /* it still reads the table, e.g. the counters */
    pool_counter_add(p, PC_WARM_HITS, 5);
    CU_ASSERT_EQUAL(pool_counter_get(ro, PC_WARM_HITS), 5);
    CU_ASSERT_EQUAL(pool_counter_get(ro, POOL_COUNTERS_MAX), 0);
    CU_ASSERT_EQUAL(ro->hdr->nslots, 4);
    /* the read-only attach did not take the lock: the writer still gets it plainly */
    CU_ASSERT_EQUAL(pool_lock(p), 0);
    pool_unlock(p);
    pool_detach(ro);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

/* ---- scale ----------------------------------------------------------------------------- */

#define SCALE_SLOTS 10000u

static void test_pool_scale_10000(void)
{
    struct pool *p = new_pool(SCALE_SLOTS);
    struct pool_handle *h, x;
    char key[64];
    uint32_t found = 0, freed = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    h = calloc(SCALE_SLOTS, sizeof(*h));
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    CU_ASSERT_EQUAL_FATAL(pool_lock(p), 0);
    for (uint32_t i = 0; i < SCALE_SLOTS; i++) {
        snprintf(key, sizeof(key), "project-%u:session-%u", i % 97, i);
        if (pool_reserve_locked(p, key, getpid(), &h[i]) != 0)
            break;
    }
    CU_ASSERT_EQUAL(p->hdr->nused, SCALE_SLOTS);
    CU_ASSERT_EQUAL(pool_reserve_locked(p, "one:more", getpid(), &x), -ENOSPC);
    for (uint32_t i = 0; i < SCALE_SLOTS; i++) {
        snprintf(key, sizeof(key), "project-%u:session-%u", i % 97, i);
        if (pool_find_locked(p, key) == (int)h[i].index)
            found++;
    }
    CU_ASSERT_EQUAL(found, SCALE_SLOTS);
    CU_ASSERT_TRUE(consistent(p));
    for (uint32_t i = 0; i < SCALE_SLOTS; i++)
        if (pool_free_locked(p, h[i], TEARDOWN_SHUTDOWN_IDLE) == 0)
            freed++;
    CU_ASSERT_EQUAL(freed, SCALE_SLOTS);
    CU_ASSERT_EQUAL(p->hdr->nused, 0);
    found = 0;
    for (uint32_t i = 0; i < SCALE_SLOTS; i++) {
        snprintf(key, sizeof(key), "project-%u:session-%u", i % 97, i);
        if (pool_find_locked(p, key) != -ENOENT)
            found++;
    }
    CU_ASSERT_EQUAL(found, 0);
    CU_ASSERT_TRUE(consistent(p));
    pool_unlock(p);
    free(h);
    CU_ASSERT_EQUAL(pool_destroy(p), 0);
}

/*
 * A full /dev/shm: the segment is reserved at creation, so creating it fails with ENOSPC
 * instead of a SIGBUS at the first touch of a slot. In a child with a private mount namespace
 * and a 64 KiB tmpfs over /dev/shm (root only).
 */
static void test_pool_create_on_a_full_dev_shm_fails_cleanly(void)
{
    int status;
    pid_t pid;

    if (geteuid() != 0) {
        printf("\n    skipped: needs root for a private /dev/shm\n");
        return;
    }
    pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        struct pool *p = NULL;
        int r;

        if (unshare(CLONE_NEWNS) == -1 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
            mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=64k"))
            _exit(3);
        r = pool_create("/ar-unit-full", 1024, "full", 1, &p);
        _exit(r == -ENOSPC ? 0 : r == 0 ? 1 : 2);
    }
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT_TRUE(WIFEXITED(status)); /* not killed by SIGBUS */
    CU_ASSERT_EQUAL(WEXITSTATUS(status), 0);
}

CU_TestInfo pool_tests[] = {
    {"test_pool_create_on_a_full_dev_shm_fails_cleanly",
     test_pool_create_on_a_full_dev_shm_fails_cleanly},
    {"test_pool_reserve_find_free", test_pool_reserve_find_free},
    {"test_pool_anonymous_keys_never_found", test_pool_anonymous_keys_never_found},
    {"test_pool_duplicate_key_eexist", test_pool_duplicate_key_eexist},
    {"test_pool_full_enospc", test_pool_full_enospc},
    {"test_pool_key_too_long", test_pool_key_too_long},
    {"test_pool_generation_fences_stale_handle", test_pool_generation_fences_stale_handle},
    {"test_pool_state_machine", test_pool_state_machine},
    {"test_pool_lru_order", test_pool_lru_order},
    {"test_pool_capacity_only_busy", test_pool_capacity_only_busy},
    {"test_pool_recent_teardown_ring", test_pool_recent_teardown_ring},
    {"test_pool_robust_repairs_invalid_state", test_pool_robust_repairs_invalid_state},
    {"test_pool_robust_repairs_broken_key_hash", test_pool_robust_repairs_broken_key_hash},
    {"test_pool_robust_repairs_half_reserve", test_pool_robust_repairs_half_reserve},
    {"test_pool_robust_repairs_unterminated_key", test_pool_robust_repairs_unterminated_key},
    {"test_pool_robust_clean_death_keeps_slots", test_pool_robust_clean_death_keeps_slots},
    {"test_pool_adopt_repairs_and_records_master", test_pool_adopt_repairs_and_records_master},
    {"test_pool_check_detects_free_list", test_pool_check_detects_free_list},
    {"test_pool_check_detects_lru_list", test_pool_check_detects_lru_list},
    {"test_pool_attach_checks_header", test_pool_attach_checks_header},
    {"test_pool_attach_readonly_cannot_lock", test_pool_attach_readonly_cannot_lock},
    {"test_pool_scale_10000", test_pool_scale_10000},
    CU_TEST_INFO_NULL,
};
