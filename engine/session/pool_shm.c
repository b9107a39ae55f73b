/*
 * pool_shm — the session table's segment (private to the pool module, see pool_shm.h):
 * create / attach / map, the robust lock and its repair, the consistency check, the
 * derived-list rebuild, the in-flight table and the counters.
 */
#include "session/pool_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

#define LOCK_TIMEOUT_S 10

static uint32_t nbuckets_for(uint32_t nslots)
{
    uint32_t n = 16;

    while (n < nslots * 2u)
        n <<= 1;
    return n;
}

size_t pool_segment_size(uint32_t nslots)
{
    size_t sz = sizeof(struct pool_header) + (size_t)nslots * sizeof(struct pool_slot) +
                (size_t)nbuckets_for(nslots) * sizeof(int32_t);
    long page = sysconf(_SC_PAGESIZE);

    return (sz + (size_t)page - 1) & ~((size_t)page - 1);
}

uint32_t pool_key_hash(const char *key)
{
    uint32_t h = 2166136261u; /* FNV-1a */

    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        h ^= *p;
        h *= 16777619u;
    }
    return h;
}

static void map_views(struct pool *p, void *base)
{
    p->hdr = base;
    p->slots = (struct pool_slot *)((char *)base + sizeof(struct pool_header));
    p->buckets = (int32_t *)(p->slots + p->hdr->nslots);
}

/* A slot that holds a key and is parked (idle or awaiting approval): the derived count. */
static bool pool_slot_parked(const struct pool_slot *s)
{
    return s->key[0] && (s->state == SLOT_IDLE || s->state == SLOT_AWAITING_APPROVAL);
}

void pool_set_state(struct pool *p, struct pool_slot *s, uint32_t state)
{
    if (pool_slot_parked(s))
        p->hdr->nparked--;
    s->state = state;
    if (pool_slot_parked(s))
        p->hdr->nparked++;
}

/* Rebuild the derived lists and counts (key index, free list, LRU, nused, nparked). */
static void pool_rebuild_derived_locked(struct pool *p)
{
    struct pool_header *h = p->hdr;

    for (uint32_t b = 0; b < h->nbuckets; b++)
        p->buckets[b] = -1;
    h->free_head = -1;
    h->lru_head = h->lru_tail = -1;
    h->nused = 0;
    h->nparked = 0;
    /* walk backwards so the free list hands out low indexes first */
    for (uint32_t i = h->nslots; i-- > 0;) {
        struct pool_slot *s = &p->slots[i];

        s->hash_next = -1;
        s->lru_prev = s->lru_next = -1;
        s->free_next = -1;
        if (s->state == SLOT_FREE) {
            s->free_next = h->free_head;
            h->free_head = (int32_t)i;
            continue;
        }
        h->nused++;
        if (pool_slot_parked(s))
            h->nparked++;
        if (s->key[0]) {
            uint32_t b = s->key_hash & (h->nbuckets - 1);
            s->hash_next = p->buckets[b];
            p->buckets[b] = (int32_t)i;
        }
    }
    /* idle slots into the LRU list, oldest first (insertion sort by last use: repair only) */
    for (uint32_t i = 0; i < h->nslots; i++) {
        struct pool_slot *s = &p->slots[i];
        int32_t at;

        if (s->state != SLOT_IDLE)
            continue;
        at = h->lru_head;
        while (at >= 0 && p->slots[at].last_used_ms <= s->last_used_ms)
            at = p->slots[at].lru_next;
        if (at < 0) {
            s->lru_prev = h->lru_tail;
            if (h->lru_tail >= 0)
                p->slots[h->lru_tail].lru_next = (int32_t)i;
            else
                h->lru_head = (int32_t)i;
            h->lru_tail = (int32_t)i;
        } else {
            s->lru_next = at;
            s->lru_prev = p->slots[at].lru_prev;
            if (s->lru_prev >= 0)
                p->slots[s->lru_prev].lru_next = (int32_t)i;
            else
                h->lru_head = (int32_t)i;
            p->slots[at].lru_prev = (int32_t)i;
        }
    }
}

void pool_slot_reset(struct pool_slot *s)
{
    uint32_t gen = s->generation + 1;

    memset(s, 0, sizeof(*s));
    s->generation = gen;
    s->state = SLOT_FREE;
}

static bool terminated(const char *s, size_t n)
{
    return memchr(s, '\0', n) != NULL;
}

/* Every string of s is NUL-terminated within its field. */
static bool pool_slot_terminated(const struct pool_slot *s)
{
    return terminated(s->key, sizeof(s->key)) && terminated(s->env_dir, sizeof(s->env_dir)) &&
           terminated(s->owner_turn, sizeof(s->owner_turn)) &&
           terminated(s->provider, sizeof(s->provider)) &&
           terminated(s->acp_session, sizeof(s->acp_session)) &&
           terminated(s->model, sizeof(s->model));
}

uint32_t pool_repair_locked(struct pool *p)
{
    uint32_t reset = 0;

    for (uint32_t i = 0; i < p->hdr->nslots; i++) {
        struct pool_slot *s = &p->slots[i];
        bool ok = s->state < SLOT_STATE_COUNT && pool_slot_terminated(s) &&
                  s->napprovals <= POOL_APPROVALS_MAX &&
                  (!s->key[0] || s->key_hash == pool_key_hash(s->key));

        if (ok && s->state == SLOT_FREE)
            continue;
        if (!ok) {
            /* garbage cannot be trusted, not even its pids: an orphaned keeper still ends
             * itself at its idle deadline */
            pool_slot_reset(s);
            reset++;
        }
    }
    pool_rebuild_derived_locked(p);
    p->hdr->repairs++;
    return reset;
}

int pool_check_locked(struct pool *p, char *err, size_t errlen)
{
    struct pool_header *h = p->hdr;
    uint32_t nfree = 0, nlru = 0, nused = 0, nidle = 0, nparked = 0;
    int32_t prev = -1;

    for (int32_t i = h->free_head; i >= 0; i = p->slots[i].free_next) {
        if ((uint32_t)i >= h->nslots || p->slots[i].state != SLOT_FREE || ++nfree > h->nslots) {
            snprintf(err, errlen, "free list broken at slot %d", i);
            return -EUCLEAN;
        }
    }
    for (int32_t i = h->lru_head; i >= 0; i = p->slots[i].lru_next) {
        if ((uint32_t)i >= h->nslots || p->slots[i].state != SLOT_IDLE ||
            p->slots[i].lru_prev != prev || ++nlru > h->nslots) {
            snprintf(err, errlen, "lru list broken at slot %d", i);
            return -EUCLEAN;
        }
        prev = i;
    }
    if (prev != h->lru_tail) {
        snprintf(err, errlen, "lru tail %d, walked to %d", h->lru_tail, prev);
        return -EUCLEAN;
    }
    for (uint32_t i = 0; i < h->nslots; i++) {
        struct pool_slot *s = &p->slots[i];

        if (s->state >= SLOT_STATE_COUNT) {
            snprintf(err, errlen, "slot %u has state %u", i, s->state);
            return -EUCLEAN;
        }
        if (s->state == SLOT_FREE)
            continue;
        nused++;
        if (s->state == SLOT_IDLE)
            nidle++;
        if (pool_slot_parked(s))
            nparked++;
        if (s->key[0]) {
            int found = pool_find_locked(p, s->key);
            if (found != (int)i) {
                snprintf(err, errlen, "slot %u key not indexed (found %d)", i, found);
                return -EUCLEAN;
            }
        }
    }
    if (nused != h->nused || nused + nfree != h->nslots || nidle != nlru ||
        nparked != h->nparked) {
        snprintf(err, errlen, "counts: used %u/%u free %u idle %u lru %u parked %u/%u", nused,
                 h->nused, nfree, nidle, nlru, nparked, h->nparked);
        return -EUCLEAN;
    }
    return 0;
}

static int init_mutex(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    int r;

    r = pthread_mutexattr_init(&a);
    if (r)
        return -r;
    r = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    if (!r)
        r = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (!r)
        r = pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    if (!r)
        r = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return -r;
}

int pool_create(const char *name, uint32_t nslots, const char *instance_id, uint64_t boot_id,
                struct pool **ret)
{
    struct pool *p;
    size_t size;
    void *base;
    int fd, r;

    if (nslots == 0 || nslots > (1u << 20))
        return -EINVAL;
    p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    snprintf(p->name, sizeof(p->name), "%s", name);
    size = pool_segment_size(nslots);
    (void)shm_unlink(name); /* an old segment is never trusted: rebuild */
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd == -1) {
        r = -errno;
        free(p);
        return r;
    }
    if (ftruncate(fd, (off_t)size) == -1) {
        r = -errno;
        goto fail;
    }
    /*
     * Reserve every page now: on a full /dev/shm a sparse segment would fault (SIGBUS) the
     * first time a slot is touched, far from here. ENOSPC is the caller's clear error.
     */
    r = -posix_fallocate(fd, 0, (off_t)size);
    if (r < 0)
        goto fail;
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        r = -errno;
        goto fail;
    }
    close(fd);
    memset(base, 0, sizeof(struct pool_header));
    p->map_size = size;
    ((struct pool_header *)base)->nslots = nslots;
    map_views(p, base);
    p->hdr->layout_version = POOL_LAYOUT_VERSION;
    p->hdr->size = size;
    p->hdr->nbuckets = nbuckets_for(nslots);
    p->hdr->master_pid = (int32_t)getpid();
    p->hdr->boot_id = boot_id;
    snprintf(p->hdr->instance_id, sizeof(p->hdr->instance_id), "%s", instance_id);
    r = init_mutex(&p->hdr->lock);
    if (r < 0) {
        munmap(base, size);
        shm_unlink(name);
        free(p);
        return r;
    }
    for (uint32_t i = 0; i < nslots; i++) {
        memset(&p->slots[i], 0, sizeof(p->slots[i]));
        p->slots[i].generation = 1;
    }
    pool_rebuild_derived_locked(p);
    /* the magic goes last: a half-initialised segment never validates */
    __atomic_store_n(&p->hdr->magic, POOL_MAGIC, __ATOMIC_RELEASE);
    *ret = p;
    return 0;
fail:
    close(fd);
    shm_unlink(name);
    free(p);
    return r;
}

int pool_attach(const char *name, bool readonly, struct pool **ret)
{
    struct pool_header probe;
    struct pool *p;
    struct stat st;
    void *base;
    int fd, r;

    fd = shm_open(name, (readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC, 0);
    if (fd == -1)
        return -errno;
    if (fstat(fd, &st) == -1 || (size_t)st.st_size < sizeof(probe)) {
        close(fd);
        return -EPROTO;
    }
    if (pread(fd, &probe, sizeof(probe), 0) != (ssize_t)sizeof(probe) ||
        probe.magic != POOL_MAGIC || probe.layout_version != POOL_LAYOUT_VERSION ||
        probe.size != (uint64_t)st.st_size || probe.nslots == 0 ||
        probe.size != pool_segment_size(probe.nslots) ||
        probe.nbuckets != nbuckets_for(probe.nslots)) {
        close(fd);
        return -EPROTO;
    }
    p = calloc(1, sizeof(*p));
    if (!p) {
        close(fd);
        return -ENOMEM;
    }
    base = mmap(NULL, (size_t)st.st_size, readonly ? PROT_READ : PROT_READ | PROT_WRITE,
                MAP_SHARED, fd, 0);
    r = -errno;
    close(fd);
    if (base == MAP_FAILED) {
        free(p);
        return r;
    }
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->map_size = (size_t)st.st_size;
    p->readonly = readonly;
    map_views(p, base);
    *ret = p;
    return 0;
}

void pool_detach(struct pool *p)
{
    if (!p)
        return;
    if (p->hdr)
        munmap(p->hdr, p->map_size);
    free(p);
}

int pool_destroy(struct pool *p)
{
    int r = 0;

    if (!p)
        return 0;
    if (shm_unlink(p->name) == -1)
        r = -errno;
    pool_detach(p);
    return r;
}

int pool_lock(struct pool *p)
{
    struct timespec ts;
    int r;

    if (p->readonly)
        return -EPERM;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += LOCK_TIMEOUT_S;
    r = pthread_mutex_timedlock(&p->hdr->lock, &ts);
    if (r == 0) {
        p->hdr->lock_holder_pid = (int32_t)util_self_pid();
        return 0;
    }
    if (r == EOWNERDEAD) {
        pool_repair_locked(p);
        r = pthread_mutex_consistent(&p->hdr->lock);
        if (r != 0) {
            pthread_mutex_unlock(&p->hdr->lock);
            return -ENOTRECOVERABLE;
        }
        p->hdr->lock_holder_pid = (int32_t)util_self_pid();
        return 1;
    }
    /* ETIMEDOUT is a bug report (a holder that does I/O under the lock), not a retry */
    return -r;
}

void pool_unlock(struct pool *p)
{
    p->hdr->lock_holder_pid = 0;
    pthread_mutex_unlock(&p->hdr->lock);
}

void pool_counter_add(struct pool *p, unsigned idx, uint64_t n)
{
    if (idx < POOL_COUNTERS_MAX)
        __atomic_add_fetch(&p->hdr->counters[idx], n, __ATOMIC_RELAXED);
}

void pool_counter_set(struct pool *p, unsigned idx, uint64_t v)
{
    if (idx < POOL_COUNTERS_MAX)
        __atomic_store_n(&p->hdr->counters[idx], v, __ATOMIC_RELAXED);
}

uint64_t pool_counter_get(const struct pool *p, unsigned idx)
{
    if (idx >= POOL_COUNTERS_MAX)
        return 0;
    return __atomic_load_n(&p->hdr->counters[idx], __ATOMIC_RELAXED);
}

int pool_inflight_claim(struct pool *p, pid_t pid, uint64_t start)
{
    for (int i = 0; i < POOL_WORKERS_MAX; i++) {
        struct pool_inflight *e = &p->hdr->inflight[i];
        int32_t expected = 0;

        if (__atomic_compare_exchange_n(&e->pid, &expected, (int32_t)pid, false,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            __atomic_store_n(&e->runs, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&e->start, start, __ATOMIC_RELEASE);
            return i;
        }
    }
    return -ENOSPC;
}

uint64_t pool_inflight_add(struct pool *p, int idx, int delta)
{
    if (idx < 0 || idx >= POOL_WORKERS_MAX)
        return 0;
    if (delta >= 0)
        return __atomic_add_fetch(&p->hdr->inflight[idx].runs, (uint64_t)delta, __ATOMIC_RELAXED);
    return __atomic_sub_fetch(&p->hdr->inflight[idx].runs, (uint64_t)-delta, __ATOMIC_RELAXED);
}

uint64_t pool_inflight_total(const struct pool *p)
{
    uint64_t n = 0;

    for (int i = 0; i < POOL_WORKERS_MAX; i++)
        if (__atomic_load_n(&p->hdr->inflight[i].pid, __ATOMIC_ACQUIRE))
            n += __atomic_load_n(&p->hdr->inflight[i].runs, __ATOMIC_RELAXED);
    return n;
}

void pool_inflight_release(struct pool *p, pid_t pid)
{
    for (int i = 0; i < POOL_WORKERS_MAX; i++) {
        struct pool_inflight *e = &p->hdr->inflight[i];
        int32_t owner = __atomic_load_n(&e->pid, __ATOMIC_ACQUIRE);

        if (!owner || (pid && owner != pid))
            continue;
        if (!pid && util_proc_alive(owner, __atomic_load_n(&e->start, __ATOMIC_ACQUIRE)))
            continue;
        __atomic_store_n(&e->runs, 0, __ATOMIC_RELAXED);
        __atomic_compare_exchange_n(&e->pid, &owner, 0, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED);
    }
}

int pool_shm_name(const char *instance, char *out, size_t outlen)
{
    int n = snprintf(out, outlen, "/agent-runner.%s", instance);

    return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

void pool_get_info(const struct pool *p, struct pool_info *ret)
{
    const struct pool_header *h = p->hdr;

    memset(ret, 0, sizeof(*ret));
    ret->valid = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == POOL_MAGIC;
    ret->nslots = h->nslots;
    ret->nused = h->nused;
    ret->nparked = h->nparked;
    ret->repairs = h->repairs;
    ret->master_pid = h->master_pid;
    ret->boot_id = h->boot_id;
    memcpy(ret->instance_id, h->instance_id, sizeof(ret->instance_id));
    ret->instance_id[sizeof(ret->instance_id) - 1] = '\0';
}

void pool_set_master(struct pool *p, pid_t pid)
{
    p->hdr->master_pid = (int32_t)pid;
}

int pool_adopt(struct pool *p, pid_t pid, uint32_t *ret_reset, char *err, size_t errlen)
{
    uint32_t reset;
    int r = pool_lock(p);

    if (r < 0)
        return r;
    reset = pool_repair_locked(p);
    r = pool_check_locked(p, err, errlen);
    pool_set_master(p, pid);
    pool_unlock(p);
    if (r == 0)
        *ret_reset = reset;
    return r;
}

int pool_check(struct pool *p, char *err, size_t errlen)
{
    int r = pool_lock(p);

    if (r < 0)
        return r;
    r = pool_check_locked(p, err, errlen);
    pool_unlock(p);
    return r;
}

struct pool_reclaimed *pool_scratch_new(const struct pool *p)
{
    return calloc(p->hdr->nslots, sizeof(struct pool_reclaimed));
}

void pool_stop_keepers(const struct pool *p)
{
    for (uint32_t i = 0; i < p->hdr->nslots; i++) {
        const struct pool_slot *s = &p->slots[i];
        if (s->state != SLOT_FREE && s->keeper_pid > 0 &&
            util_proc_alive(s->keeper_pid, s->keeper_start))
            kill(s->keeper_pid, SIGTERM);
    }
}

bool pool_dir_in_use(const struct pool *p, const char *path)
{
    for (uint32_t i = 0; p && i < p->hdr->nslots; i++)
        if (p->slots[i].state != SLOT_FREE && strcmp(p->slots[i].env_dir, path) == 0)
            return true;
    return false;
}

bool pool_session_peek(const struct pool *p, uint32_t i, struct pool_session *ret)
{
    struct pool_slot copy;

    if (i >= p->hdr->nslots)
        return false;
    for (int attempt = 0; attempt < 8; attempt++) {
        uint32_t gen = __atomic_load_n(&p->slots[i].generation, __ATOMIC_ACQUIRE);
        memcpy(&copy, &p->slots[i], sizeof(copy));
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (gen == __atomic_load_n(&p->slots[i].generation, __ATOMIC_ACQUIRE) &&
            copy.generation == gen && copy.state < SLOT_STATE_COUNT &&
            memchr(copy.key, '\0', sizeof(copy.key))) {
            if (copy.state == SLOT_FREE || !pool_slot_terminated(&copy))
                return false;
            pool_copy_session(&copy, i, ret);
            return true;
        }
    }
    return false;
}

size_t pool_recent_teardowns(const struct pool *p, struct pool_teardown_view *out, size_t max)
{
    uint32_t next = p->hdr->recent_next;
    uint32_t n = next < POOL_RECENT_MAX ? next : POOL_RECENT_MAX;
    size_t k;

    for (k = 0; k < n && k < max; k++) {
        const struct pool_teardown *t = &p->hdr->recent[(next - 1 - k) % POOL_RECENT_MAX];

        snprintf(out[k].key, sizeof(out[k].key), "%.*s", (int)sizeof(t->key) - 1, t->key);
        out[k].reason = t->reason;
        out[k].harness = t->harness;
        out[k].at_ms = t->at_ms;
        out[k].turns = t->turns;
    }
    return k;
}

struct pool_metrics *pool_metrics(struct pool *p)
{
    return p ? &p->hdr->metrics : NULL;
}

const struct pool_metrics *pool_metrics_const(const struct pool *p)
{
    return &p->hdr->metrics;
}

int pool_metrics_render(const struct pool *p, struct buf *out)
{
    struct metrics_gauges g;

    memset(&g, 0, sizeof(g));
    g.warm_hits = pool_counter_get(p, PC_WARM_HITS);
    g.egress_denied = pool_counter_get(p, PC_EGRESS_DENIED);
    g.model_calls = pool_counter_get(p, PC_MODEL_CALLS);
    g.model_refused = pool_counter_get(p, PC_MODEL_REFUSED);
    g.usage_mismatch = pool_counter_get(p, PC_USAGE_MISMATCH);
    g.inflight = pool_inflight_total(p);
    g.admission_rejected = pool_counter_get(p, PC_ADMISSION_REJECTED);
    g.worker_restarts = pool_counter_get(p, PC_WORKER_RESTARTS);
    g.repairs = p->hdr->repairs;
    for (uint32_t st = 1; st < SLOT_STATE_COUNT; st++)
        g.state_name[g.nstates++] = pool_state_name(st);
    for (uint32_t i = 0; i < p->hdr->nslots; i++) {
        uint32_t st = __atomic_load_n(&p->slots[i].state, __ATOMIC_RELAXED);
        if (st > SLOT_FREE && st < SLOT_STATE_COUNT)
            g.state_count[st - 1]++;
    }
    return metrics_render(&p->hdr->metrics, &g, out);
}
