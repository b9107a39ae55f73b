#include "pool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

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

static bool parked(const struct pool_slot *s)
{
    return s->key[0] && (s->state == SLOT_IDLE || s->state == SLOT_AWAITING_APPROVAL);
}

/* Every state change goes through here so the derived parked count stays exact. */
static void set_state(struct pool *p, struct pool_slot *s, uint32_t state)
{
    if (parked(s))
        p->hdr->nparked--;
    s->state = state;
    if (parked(s))
        p->hdr->nparked++;
}

static void rebuild_derived_locked(struct pool *p)
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
        if (parked(s))
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

static void slot_reset(struct pool_slot *s)
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

uint32_t pool_repair_locked(struct pool *p)
{
    uint32_t reset = 0;

    for (uint32_t i = 0; i < p->hdr->nslots; i++) {
        struct pool_slot *s = &p->slots[i];
        bool ok = s->state < SLOT_STATE_COUNT && terminated(s->key, sizeof(s->key)) &&
                  terminated(s->env_dir, sizeof(s->env_dir)) &&
                  terminated(s->owner_turn, sizeof(s->owner_turn)) &&
                  terminated(s->provider, sizeof(s->provider)) &&
                  terminated(s->acp_session, sizeof(s->acp_session)) &&
                  terminated(s->model, sizeof(s->model)) &&
                  s->napprovals <= POOL_APPROVALS_MAX &&
                  (!s->key[0] || s->key_hash == pool_key_hash(s->key));

        if (ok && s->state == SLOT_FREE)
            continue;
        if (!ok) {
            /* garbage cannot be trusted, not even its pids: an orphaned keeper still ends
             * itself at its idle deadline */
            slot_reset(s);
            reset++;
        }
    }
    rebuild_derived_locked(p);
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
        if (parked(s))
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
    rebuild_derived_locked(p);
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
        p->hdr->lock_holder_pid = (int32_t)self_pid();
        return 0;
    }
    if (r == EOWNERDEAD) {
        pool_repair_locked(p);
        r = pthread_mutex_consistent(&p->hdr->lock);
        if (r != 0) {
            pthread_mutex_unlock(&p->hdr->lock);
            return -ENOTRECOVERABLE;
        }
        p->hdr->lock_holder_pid = (int32_t)self_pid();
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

struct pool_handle pool_handle_of(struct pool *p, uint32_t index)
{
    struct pool_handle h = {.index = index, .generation = p->slots[index].generation};

    return h;
}

struct pool_slot *pool_slot_locked(struct pool *p, struct pool_handle h)
{
    struct pool_slot *s;

    if (h.index >= p->hdr->nslots)
        return NULL;
    s = &p->slots[h.index];
    if (s->generation != h.generation || s->state == SLOT_FREE)
        return NULL;
    return s;
}

int pool_find_locked(struct pool *p, const char *key)
{
    uint32_t hash = pool_key_hash(key);
    int32_t i = p->buckets[hash & (p->hdr->nbuckets - 1)];

    if (!key[0])
        return -ENOENT;
    for (; i >= 0; i = p->slots[i].hash_next) {
        struct pool_slot *s = &p->slots[i];
        if (s->key_hash == hash && s->state != SLOT_FREE && strcmp(s->key, key) == 0)
            return i;
    }
    return -ENOENT;
}

static void lru_remove(struct pool *p, int32_t i)
{
    struct pool_slot *s = &p->slots[i];

    if (s->lru_prev >= 0)
        p->slots[s->lru_prev].lru_next = s->lru_next;
    else if (p->hdr->lru_head == i)
        p->hdr->lru_head = s->lru_next;
    else
        return; /* not on the list */
    if (s->lru_next >= 0)
        p->slots[s->lru_next].lru_prev = s->lru_prev;
    else
        p->hdr->lru_tail = s->lru_prev;
    s->lru_prev = s->lru_next = -1;
}

static void lru_push_tail(struct pool *p, int32_t i)
{
    struct pool_slot *s = &p->slots[i];

    s->lru_next = -1;
    s->lru_prev = p->hdr->lru_tail;
    if (p->hdr->lru_tail >= 0)
        p->slots[p->hdr->lru_tail].lru_next = i;
    else
        p->hdr->lru_head = i;
    p->hdr->lru_tail = i;
}

static void hash_remove(struct pool *p, int32_t i)
{
    struct pool_slot *s = &p->slots[i];
    int32_t *at;

    if (!s->key[0])
        return;
    at = &p->buckets[s->key_hash & (p->hdr->nbuckets - 1)];
    while (*at >= 0 && *at != i)
        at = &p->slots[*at].hash_next;
    if (*at == i)
        *at = s->hash_next;
    s->hash_next = -1;
}

int pool_reserve_locked(struct pool *p, const char *key, pid_t by_pid, struct pool_handle *ret)
{
    struct pool_slot *s;
    int32_t i;
    size_t klen = strlen(key);

    if (klen >= POOL_KEY_MAX)
        return -ENAMETOOLONG;
    if (klen && pool_find_locked(p, key) >= 0)
        return -EEXIST;
    i = p->hdr->free_head;
    if (i < 0)
        return -ENOSPC;
    s = &p->slots[i];
    p->hdr->free_head = s->free_next;
    {
        uint32_t gen = s->generation + 1;
        memset(s, 0, sizeof(*s));
        s->generation = gen;
    }
    s->hash_next = s->free_next = s->lru_prev = s->lru_next = -1;
    s->state = SLOT_STARTING;
    memcpy(s->key, key, klen + 1);
    s->key_hash = pool_key_hash(key);
    s->reserved_by_pid = (int32_t)by_pid;
    s->owner_pid = (int32_t)by_pid;
    s->created_ms = s->last_used_ms = now_ms();
    if (klen) {
        uint32_t b = s->key_hash & (p->hdr->nbuckets - 1);
        s->hash_next = p->buckets[b];
        p->buckets[b] = i;
    }
    p->hdr->nused++;
    ret->index = (uint32_t)i;
    ret->generation = s->generation;
    return 0;
}

int pool_checkout_locked(struct pool *p, struct pool_handle h, bool approval, pid_t owner,
                         const char *turn_id)
{
    struct pool_slot *s = pool_slot_locked(p, h);

    if (!s)
        return -ESTALE;
    if (s->state != (approval ? SLOT_AWAITING_APPROVAL : SLOT_IDLE))
        return -EBUSY;
    if (s->state == SLOT_IDLE)
        lru_remove(p, (int32_t)h.index);
    set_state(p, s, SLOT_BUSY);
    s->owner_pid = (int32_t)owner;
    snprintf(s->owner_turn, sizeof(s->owner_turn), "%s", turn_id ? turn_id : "");
    s->last_used_ms = now_ms();
    s->idle_deadline_ms = 0;
    return 0;
}

int pool_park_locked(struct pool *p, struct pool_handle h, enum slot_state state,
                     int64_t deadline_ms)
{
    struct pool_slot *s = pool_slot_locked(p, h);

    if (!s)
        return -ESTALE;
    if (state != SLOT_IDLE && state != SLOT_AWAITING_APPROVAL)
        return -EINVAL;
    if (s->state != SLOT_BUSY && s->state != SLOT_STARTING)
        return -EBUSY;
    set_state(p, s, state);
    s->owner_pid = 0;
    s->owner_turn[0] = '\0';
    s->last_used_ms = now_ms();
    if (state == SLOT_IDLE) {
        s->idle_deadline_ms = deadline_ms;
        lru_push_tail(p, (int32_t)h.index);
    } else {
        s->approval_deadline_ms = deadline_ms;
    }
    return 0;
}

int pool_drain_locked(struct pool *p, struct pool_handle h, uint8_t reason)
{
    struct pool_slot *s = pool_slot_locked(p, h);

    if (!s)
        return -ESTALE;
    if (s->state == SLOT_IDLE)
        lru_remove(p, (int32_t)h.index);
    set_state(p, s, SLOT_DRAINING);
    s->last_teardown = reason;
    return 0;
}

int pool_free_locked(struct pool *p, struct pool_handle h, uint8_t reason)
{
    struct pool_slot *s = pool_slot_locked(p, h);
    int32_t i = (int32_t)h.index;

    if (!s)
        return -ESTALE;
    metrics_teardown(p, reason ? reason : s->last_teardown);
    if (s->key[0]) {
        struct pool_teardown *t = &p->hdr->recent[p->hdr->recent_next % POOL_RECENT_MAX];

        memcpy(t->key, s->key, sizeof(t->key));
        t->reason = reason ? reason : s->last_teardown;
        t->harness = s->harness;
        t->turns = s->turns;
        t->at_ms = now_ms();
        p->hdr->recent_next++;
    }
    if (s->state == SLOT_IDLE)
        lru_remove(p, i);
    hash_remove(p, i);
    set_state(p, s, SLOT_FREE);
    slot_reset(s);
    s->hash_next = s->lru_prev = s->lru_next = -1;
    s->free_next = p->hdr->free_head;
    p->hdr->free_head = i;
    p->hdr->nused--;
    return 0;
}

uint32_t pool_parked_count_locked(struct pool *p)
{
    return p->hdr->nparked;
}

const struct pool_teardown *pool_recent_teardown_locked(struct pool *p, const char *key)
{
    uint32_t n = p->hdr->recent_next < POOL_RECENT_MAX ? p->hdr->recent_next : POOL_RECENT_MAX;

    for (uint32_t k = 1; k <= n; k++) {
        const struct pool_teardown *t = &p->hdr->recent[(p->hdr->recent_next - k) %
                                                        POOL_RECENT_MAX];
        if (strcmp(t->key, key) == 0)
            return t;
    }
    return NULL;
}

int pool_lru_idle_locked(struct pool *p)
{
    return p->hdr->lru_head >= 0 ? p->hdr->lru_head : -ENOENT;
}

void pool_counter_add(struct pool *p, unsigned idx, uint64_t n)
{
    if (idx < POOL_COUNTERS_MAX)
        __atomic_add_fetch(&p->hdr->counters[idx], n, __ATOMIC_RELAXED);
}

uint64_t pool_counter_get(const struct pool *p, unsigned idx)
{
    if (idx >= POOL_COUNTERS_MAX)
        return 0;
    return __atomic_load_n(&p->hdr->counters[idx], __ATOMIC_RELAXED);
}

const char *pool_state_name(uint32_t state)
{
    static const char *const names[SLOT_STATE_COUNT] = {
        "free", "starting", "idle", "busy", "awaiting_approval", "draining"};

    return state < SLOT_STATE_COUNT ? names[state] : "invalid";
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

void pool_inflight_add(struct pool *p, int idx, int delta)
{
    if (idx < 0 || idx >= POOL_WORKERS_MAX)
        return;
    if (delta >= 0)
        __atomic_add_fetch(&p->hdr->inflight[idx].runs, (uint64_t)delta, __ATOMIC_RELAXED);
    else
        __atomic_sub_fetch(&p->hdr->inflight[idx].runs, (uint64_t)-delta, __ATOMIC_RELAXED);
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
        if (!pid && proc_alive(owner, __atomic_load_n(&e->start, __ATOMIC_ACQUIRE)))
            continue;
        __atomic_store_n(&e->runs, 0, __ATOMIC_RELAXED);
        __atomic_compare_exchange_n(&e->pid, &owner, 0, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED);
    }
}
