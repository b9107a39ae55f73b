/*
 * pool_spare — the spare slots of the session table (pool.h): an anonymous slot the
 * master's spare maker reserves (SLOT_STARTING + SLOT_F_SPARE), marks ready once its keeper
 * runs (SLOT_SPARE), and that a new session claims under the lock (SLOT_SPARE ->
 * SLOT_STARTING with the session's key), so a spare never serves two sessions. A spare is
 * never recycled: after its claim it is that session's environment, torn down with it.
 * A shell (harness POOL_SHELL) is the same kind of slot whose keeper has not started a
 * sandbox yet: any harness's cold start claims it (pool_shell_claim).
 */
#include "session/pool_shm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"

int pool_spare_reserve(struct pool *p, uint8_t harness, pid_t by_pid, struct pool_handle *ret)
{
    struct pool_handle h;
    int r = pool_lock(p);

    if (r < 0)
        return r;
    r = pool_reserve_locked(p, "", by_pid, &h);
    if (r == 0) {
        struct pool_slot *s = pool_slot_locked(p, h);

        s->harness = harness;
        s->flags = SLOT_F_SPARE;
        *ret = h;
    }
    pool_unlock(p);
    return r;
}

int pool_spare_ready(struct pool *p, struct pool_handle h)
{
    struct pool_slot *s;
    int r = pool_lock(p);

    if (r < 0)
        return r;
    s = pool_slot_locked(p, h);
    if (!s)
        r = -ESTALE;
    else if (s->state != SLOT_STARTING || !(s->flags & SLOT_F_SPARE) || s->keeper_pid <= 0)
        r = -EINVAL;
    else {
        pool_set_state(p, s, SLOT_SPARE);
        s->owner_pid = 0; /* nobody runs a turn on it; its keeper keeps it */
        s->last_used_ms = util_now_ms();
        r = 0;
    }
    pool_unlock(p);
    return r;
}

void pool_spare_count(const struct pool *p, uint8_t harness, uint32_t *ret_ready,
                      uint32_t *ret_building)
{
    uint32_t ready = 0, building = 0;

    for (uint32_t i = 0; i < p->hdr->nslots; i++) {
        const struct pool_slot *s = &p->slots[i];
        uint32_t st = __atomic_load_n(&s->state, __ATOMIC_RELAXED);
        uint32_t fl = __atomic_load_n(&s->flags, __ATOMIC_RELAXED);

        if (!(fl & SLOT_F_SPARE) || __atomic_load_n(&s->harness, __ATOMIC_RELAXED) != harness)
            continue;
        if (st == SLOT_SPARE)
            ready++;
        else if (st == SLOT_STARTING)
            building++;
    }
    *ret_ready = ready;
    *ret_building = building;
}

/* The ready spare of harness made longest ago (it has had the most time to settle), or -1. */
static int32_t oldest_spare_locked(struct pool *p, int harness)
{
    int32_t best = -1;

    for (uint32_t i = 0; i < p->hdr->nslots; i++) {
        const struct pool_slot *s = &p->slots[i];

        if (s->state != SLOT_SPARE || (harness >= 0 && s->harness != (uint8_t)harness))
            continue;
        if (best < 0 || s->created_ms < p->slots[best].created_ms)
            best = (int32_t)i;
    }
    return best;
}

/* Claim the oldest ready spare slot of kind for rv (a shell becomes rv's harness's slot). */
static int claim(struct pool *p, const struct pool_reservation *rv, uint8_t kind,
                 struct pool_session *ret)
{
    size_t klen = strlen(rv->key);
    struct pool_slot *s;
    int32_t i;
    int r;

    if (klen >= POOL_KEY_MAX)
        return -ENAMETOOLONG;
    r = pool_lock(p);
    if (r < 0)
        return r;
    if (klen && pool_find_locked(p, rv->key) >= 0) {
        r = -EEXIST;
        goto out;
    }
    i = oldest_spare_locked(p, kind);
    if (i < 0) {
        r = -ENOENT;
        goto out;
    }
    s = &p->slots[i];
    /* the same slot, generation and keeper: it now belongs to the session */
    pool_set_state(p, s, SLOT_STARTING);
    s->flags = SLOT_F_FROM_SPARE | (rv->per_turn ? SLOT_F_PER_TURN : 0);
    s->harness = rv->harness;
    memcpy(s->key, rv->key, klen + 1);
    s->key_hash = pool_key_hash(rv->key);
    s->hash_next = -1;
    if (klen) {
        uint32_t b = s->key_hash & (p->hdr->nbuckets - 1);
        s->hash_next = p->buckets[b];
        p->buckets[b] = i;
    }
    s->reserved_by_pid = s->owner_pid = (int32_t)rv->by_pid;
    s->idle_ms = rv->idle_ms;
    s->last_used_ms = util_now_ms();
    snprintf(s->provider, sizeof(s->provider), "%s", rv->provider ? rv->provider : "");
    snprintf(s->model, sizeof(s->model), "%s", rv->model ? rv->model : "");
    snprintf(s->owner_turn, sizeof(s->owner_turn), "%s", rv->turn_id ? rv->turn_id : "");
    pool_copy_session(s, (uint32_t)i, ret);
    r = 0;
out:
    pool_unlock(p);
    return r;
}

int pool_spare_claim(struct pool *p, const struct pool_reservation *rv, struct pool_session *ret)
{
    return claim(p, rv, rv->harness, ret);
}

int pool_shell_claim(struct pool *p, const struct pool_reservation *rv, struct pool_session *ret)
{
    return claim(p, rv, POOL_SHELL, ret);
}

int pool_spare_evict(struct pool *p, struct pool_victim *victim)
{
    int32_t i;
    int r = pool_lock(p);

    if (r < 0)
        return r;
    memset(victim, 0, sizeof(*victim));
    i = oldest_spare_locked(p, -1);
    if (i >= 0) {
        struct pool_slot *s = &p->slots[i];

        victim->any = true;
        victim->h = pool_handle_of(p, (uint32_t)i);
        victim->keeper_pid = s->keeper_pid;
        victim->keeper_start = s->keeper_start;
        victim->reason = TEARDOWN_CAPACITY_EVICTION;
        pool_drain_locked(p, victim->h, TEARDOWN_CAPACITY_EVICTION);
    }
    pool_unlock(p);
    return i >= 0 ? 1 : 0;
}
