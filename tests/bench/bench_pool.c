/*
 * bench_pool — the shared-memory session table (engine/session/pool.h) under a single process, for
 * `make bench` (tests/bench/run.py).
 *
 * Creates a private segment of --slots slots (default 10,000), fills --fill of them (default
 * 80 %) with parked (idle) sessions keyed like the engine's "<projectId>:<sessionId>", then
 * times, each through pool_lock()/pool_unlock() exactly as the engine takes them:
 *
 *   lookup        lock, pool_find_locked() on a present key, unlock
 *   lookup_miss   the same with an absent key
 *   reserve_free  lock, pool_reserve_locked(new key), unlock; lock, pool_free_locked(), unlock
 *   park_checkout lock, pool_checkout_locked(idle slot), unlock; lock, pool_park_locked(), unlock
 *   lock_unlock   lock, unlock (the floor)
 *
 * ns/op comes from a tight loop timed as a whole; the lock hold times (from pool_lock()
 * returning to pool_unlock() being called) from a second loop that reads CLOCK_MONOTONIC
 * inside each critical section; clock_read_ns is the cost of one such read (the floor of a
 * hold time). Keys are visited in a random order. Output: one JSON object on stdout.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "session/pool.h"
#include "session/pool_locked.h" /* the raw transitions it measures */
#include "session/pool_shm.h"    /* the slot layout: its size is reported */

#define KEY_LEN 48

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13; /* xorshift64 */
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static int64_t ns_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

static double pct(int64_t *v, size_t n, double p)
{
    size_t rank = (size_t)((double)n * p / 100.0 + 0.999999999);

    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return (double)v[rank - 1];
}

static void fail(const char *what, int r)
{
    fprintf(stderr, "bench_pool: %s: %s\n", what, strerror(r < 0 ? -r : r));
    exit(1);
}

static void lock(struct pool *p)
{
    int r = pool_lock(p);

    if (r < 0)
        fail("pool_lock", r);
}

struct result {
    const char *name;
    double ns_per_op;
    int64_t *hold; /* hold times of every critical section */
    size_t nhold;
};

static void print_result(struct result *r, bool comma)
{
    qsort(r->hold, r->nhold, sizeof(*r->hold), cmp_i64);
    printf("\"%s\":{\"ns_per_op\":%.1f,\"hold_n\":%zu,\"hold_p50_ns\":%.0f,\"hold_p99_ns\":%.0f,"
           "\"hold_max_ns\":%.0f}%s",
           r->name, r->ns_per_op, r->nhold, pct(r->hold, r->nhold, 50),
           pct(r->hold, r->nhold, 99), pct(r->hold, r->nhold, 100), comma ? "," : "");
}

static unsigned parse_arg(const char *name, const char *v, uint64_t min, uint64_t max)
{
    uint64_t n;

    if (util_parse_u64(v, min, max, &n) < 0) {
        fprintf(stderr, "bench_pool: %s must be in [%llu, %llu]\n", name,
                (unsigned long long)min, (unsigned long long)max);
        exit(2);
    }
    return (unsigned)n;
}

int main(int argc, char **argv)
{
    unsigned nslots = 10000, fill = 8000, iters = 1000000, hold_iters = 200000;
    struct result lookup = {.name = "lookup"}, miss = {.name = "lookup_miss"},
                  resfree = {.name = "reserve_free"}, parkco = {.name = "park_checkout"},
                  floor_ = {.name = "lock_unlock"};
    struct pool_handle *handles;
    struct pool *p;
    char name[64], (*keys)[KEY_LEN], (*fresh)[KEY_LEN];
    unsigned nfresh;
    int64_t t0, t1, clock_ns;
    int r;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--slots") == 0)
            nslots = parse_arg("--slots", argv[i + 1], 16, 1u << 20);
        else if (strcmp(argv[i], "--fill") == 0)
            fill = parse_arg("--fill", argv[i + 1], 1, 1u << 20);
        else if (strcmp(argv[i], "--iters") == 0)
            iters = parse_arg("--iters", argv[i + 1], 1000, 1000000000);
        else {
            fprintf(stderr, "usage: bench_pool [--slots N] [--fill N] [--iters N]\n");
            return 2;
        }
    }
    if (fill >= nslots)
        fill = nslots - 1;
    nfresh = nslots - fill < 4096 ? nslots - fill : 4096;
    if (hold_iters > iters)
        hold_iters = iters;
    snprintf(name, sizeof(name), "/agent-runner.bench-pool-%ld", (long)getpid());
    r = pool_create(name, nslots, "bench", 1, &p);
    if (r < 0)
        fail("pool_create", r);

    keys = calloc(fill, sizeof(*keys));
    fresh = calloc(nfresh, sizeof(*fresh));
    handles = calloc(fill, sizeof(*handles));
    lookup.hold = calloc(hold_iters, sizeof(int64_t));
    miss.hold = calloc(hold_iters, sizeof(int64_t));
    resfree.hold = calloc(2 * (size_t)hold_iters, sizeof(int64_t));
    parkco.hold = calloc(2 * (size_t)hold_iters, sizeof(int64_t));
    floor_.hold = calloc(hold_iters, sizeof(int64_t));
    if (!keys || !fresh || !handles || !lookup.hold || !miss.hold || !resfree.hold ||
        !parkco.hold || !floor_.hold)
        fail("calloc", -ENOMEM);
    for (unsigned i = 0; i < fill; i++) {
        snprintf(keys[i], KEY_LEN, "proj-%06x:sess-%08x-%04u", i * 2654435761u % 0xffffffu,
                 i * 40503u, i % 10000);
        lock(p);
        r = pool_reserve_locked(p, keys[i], getpid(), &handles[i]);
        if (r == 0)
            r = pool_park_locked(p, handles[i], SLOT_IDLE, util_now_ms() + 60000);
        pool_unlock(p);
        if (r < 0)
            fail("fill", r);
    }
    for (unsigned i = 0; i < nfresh; i++)
        snprintf(fresh[i], KEY_LEN, "proj-new:sess-%08x", i);

    /* clock_read_ns: one CLOCK_MONOTONIC read, as done inside each timed critical section */
    t0 = ns_now();
    for (unsigned i = 0; i < iters; i++)
        (void)ns_now();
    clock_ns = (ns_now() - t0) / (int64_t)iters;

    /* lock_unlock */
    t0 = ns_now();
    for (unsigned i = 0; i < iters; i++) {
        lock(p);
        pool_unlock(p);
    }
    floor_.ns_per_op = (double)(ns_now() - t0) / iters;
    for (unsigned i = 0; i < hold_iters; i++) {
        lock(p);
        t0 = ns_now();
        t1 = ns_now();
        pool_unlock(p);
        floor_.hold[floor_.nhold++] = t1 - t0;
    }

    /* lookup (hit) */
    t0 = ns_now();
    for (unsigned i = 0; i < iters; i++) {
        lock(p);
        r = pool_find_locked(p, keys[rnd(fill)]);
        pool_unlock(p);
        if (r < 0)
            fail("lookup", r);
    }
    lookup.ns_per_op = (double)(ns_now() - t0) / iters;
    for (unsigned i = 0; i < hold_iters; i++) {
        const char *k = keys[rnd(fill)];
        lock(p);
        t0 = ns_now();
        r = pool_find_locked(p, k);
        t1 = ns_now();
        pool_unlock(p);
        if (r < 0)
            fail("lookup", r);
        lookup.hold[lookup.nhold++] = t1 - t0;
    }

    /* lookup (miss) */
    t0 = ns_now();
    for (unsigned i = 0; i < iters; i++) {
        lock(p);
        r = pool_find_locked(p, fresh[rnd(nfresh)]);
        pool_unlock(p);
        if (r != -ENOENT)
            fail("lookup miss", -EEXIST);
    }
    miss.ns_per_op = (double)(ns_now() - t0) / iters;
    for (unsigned i = 0; i < hold_iters; i++) {
        const char *k = fresh[rnd(nfresh)];
        lock(p);
        t0 = ns_now();
        r = pool_find_locked(p, k);
        t1 = ns_now();
        pool_unlock(p);
        miss.hold[miss.nhold++] = t1 - t0;
    }

    /* reserve + free: two critical sections, as environment_acquire and the keeper take them */
    t0 = ns_now();
    for (unsigned i = 0; i < iters; i++) {
        struct pool_handle h;
        lock(p);
        r = pool_reserve_locked(p, fresh[i % nfresh], 4242, &h);
        pool_unlock(p);
        if (r < 0)
            fail("reserve", r);
        lock(p);
        r = pool_free_locked(p, h, 1);
        pool_unlock(p);
        if (r < 0)
            fail("free", r);
    }
    resfree.ns_per_op = (double)(ns_now() - t0) / iters;
    for (unsigned i = 0; i < hold_iters; i++) {
        struct pool_handle h;
        lock(p);
        t0 = ns_now();
        r = pool_reserve_locked(p, fresh[i % nfresh], 4242, &h);
        t1 = ns_now();
        pool_unlock(p);
        if (r < 0)
            fail("reserve", r);
        resfree.hold[resfree.nhold++] = t1 - t0;
        lock(p);
        t0 = ns_now();
        r = pool_free_locked(p, h, 1);
        t1 = ns_now();
        pool_unlock(p);
        if (r < 0)
            fail("free", r);
        resfree.hold[resfree.nhold++] = t1 - t0;
    }

    /* park + checkout of random idle slots, as a warm turn takes and gives back its slot */
    t0 = ns_now();
    for (unsigned i = 0; i < iters; i++) {
        struct pool_handle h = handles[rnd(fill)];
        lock(p);
        r = pool_checkout_locked(p, h, false, 4242, "turn-0123456789abcdef");
        pool_unlock(p);
        if (r < 0)
            fail("checkout", r);
        lock(p);
        r = pool_park_locked(p, h, SLOT_IDLE, 1000000);
        pool_unlock(p);
        if (r < 0)
            fail("park", r);
    }
    parkco.ns_per_op = (double)(ns_now() - t0) / iters;
    for (unsigned i = 0; i < hold_iters; i++) {
        struct pool_handle h = handles[rnd(fill)];
        lock(p);
        t0 = ns_now();
        r = pool_checkout_locked(p, h, false, 4242, "turn-0123456789abcdef");
        t1 = ns_now();
        pool_unlock(p);
        if (r < 0)
            fail("checkout", r);
        parkco.hold[parkco.nhold++] = t1 - t0;
        lock(p);
        t0 = ns_now();
        r = pool_park_locked(p, h, SLOT_IDLE, 1000000);
        t1 = ns_now();
        pool_unlock(p);
        if (r < 0)
            fail("park", r);
        parkco.hold[parkco.nhold++] = t1 - t0;
    }

    {
        char err[256];
        lock(p);
        r = pool_check_locked(p, err, sizeof(err));
        pool_unlock(p);
        if (r < 0) {
            fprintf(stderr, "bench_pool: table inconsistent after the run: %s\n", err);
            return 1;
        }
    }
    printf("{\"slots\":%u,\"filled\":%u,\"segment_bytes\":%zu,\"slot_bytes\":%zu,\"iters\":%u,"
           "\"clock_read_ns\":%lld,",
           nslots, fill, pool_segment_size(nslots), sizeof(struct pool_slot), iters,
           (long long)clock_ns);
    print_result(&floor_, true);
    print_result(&lookup, true);
    print_result(&miss, true);
    print_result(&resfree, true);
    print_result(&parkco, false);
    printf("}\n");
    pool_destroy(p);
    free(keys);
    free(fresh);
    free(handles);
    free(lookup.hold);
    free(miss.hold);
    free(resfree.hold);
    free(parkco.hold);
    free(floor_.hold);
    return 0;
}
