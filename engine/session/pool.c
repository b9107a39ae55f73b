/*
 * pool — the session module (pool.h): every change of a slot happens here, under the lock.
 * The segment, the lock and the repair live in pool_shm.c; the layout in pool_shm.h.
 */
#include "session/pool_shm.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "telemetry/metrics.h"

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
    s->created_ms = s->last_used_ms = util_now_ms();
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
    pool_set_state(p, s, SLOT_BUSY);
    s->owner_pid = (int32_t)owner;
    snprintf(s->owner_turn, sizeof(s->owner_turn), "%s", turn_id ? turn_id : "");
    s->last_used_ms = util_now_ms();
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
    pool_set_state(p, s, state);
    s->owner_pid = 0;
    s->owner_turn[0] = '\0';
    s->last_used_ms = util_now_ms();
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
    pool_set_state(p, s, SLOT_DRAINING);
    s->last_teardown = reason;
    return 0;
}

int pool_free_locked(struct pool *p, struct pool_handle h, uint8_t reason)
{
    struct pool_slot *s = pool_slot_locked(p, h);
    int32_t i = (int32_t)h.index;

    if (!s)
        return -ESTALE;
    metrics_teardown(&p->hdr->metrics, reason ? reason : s->last_teardown);
    if (s->key[0]) {
        struct pool_teardown *t = &p->hdr->recent[p->hdr->recent_next % POOL_RECENT_MAX];

        memcpy(t->key, s->key, sizeof(t->key));
        t->reason = reason ? reason : s->last_teardown;
        t->harness = s->harness;
        t->turns = s->turns;
        t->at_ms = util_now_ms();
        p->hdr->recent_next++;
    }
    if (s->state == SLOT_IDLE)
        lru_remove(p, i);
    hash_remove(p, i);
    pool_set_state(p, s, SLOT_FREE);
    pool_slot_reset(s);
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

int pool_lru_idle_locked(struct pool *p)
{
    return p->hdr->lru_head >= 0 ? p->hdr->lru_head : -ENOENT;
}

const char *pool_state_name(uint32_t state)
{
    static const char *const names[SLOT_STATE_COUNT] = {
        "free", "starting", "idle", "busy", "awaiting_approval", "draining", "spare"};

    return state < SLOT_STATE_COUNT ? names[state] : "invalid";
}


/* ---- snapshots --------------------------------------------------------------------------- */

void pool_copy_session(const struct pool_slot *s, uint32_t index, struct pool_session *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->h.index = index;
    ret->h.generation = s->generation;
    ret->state = s->state;
    ret->per_turn = s->flags & SLOT_F_PER_TURN;
    ret->history_broken = s->flags & SLOT_F_HISTORY_BROKEN;
    ret->cancel = s->flags & SLOT_F_CANCEL;
    ret->spare = s->flags & SLOT_F_SPARE;
    ret->from_spare = s->flags & SLOT_F_FROM_SPARE;
    ret->turns = s->turns;
    ret->harness = s->harness;
    ret->policy_mode = s->policy_mode;
    ret->idle_ms = s->idle_ms;
    ret->caps = s->caps;
    ret->last_teardown = s->last_teardown;
    ret->keeper_pid = s->keeper_pid;
    ret->keeper_start = s->keeper_start;
    ret->sandbox_pid = s->sandbox_pid;
    ret->owner_pid = s->owner_pid;
    ret->prompt_id = s->prompt_id;
    ret->acp_next_id = s->acp_next_id;
    ret->created_ms = s->created_ms;
    ret->last_used_ms = s->last_used_ms;
    ret->idle_deadline_ms = s->idle_deadline_ms;
    ret->approval_deadline_ms = s->approval_deadline_ms;
    memcpy(ret->key, s->key, sizeof(ret->key));
    memcpy(ret->owner_turn, s->owner_turn, sizeof(ret->owner_turn));
    memcpy(ret->provider, s->provider, sizeof(ret->provider));
    memcpy(ret->model, s->model, sizeof(ret->model));
    memcpy(ret->env_dir, s->env_dir, sizeof(ret->env_dir));
    memcpy(ret->acp_session, s->acp_session, sizeof(ret->acp_session));
    memcpy(ret->config_fp, s->config_fp, sizeof(ret->config_fp));
    memcpy(ret->history_fp, s->history_fp, sizeof(ret->history_fp));
    memcpy(ret->cred_epoch, s->cred_epoch, sizeof(ret->cred_epoch));
    ret->ngates = s->napprovals <= POOL_APPROVALS_MAX ? s->napprovals : 0;
    memcpy(ret->gates, s->approvals, ret->ngates * sizeof(ret->gates[0]));
}

/* Lock, find the slot of h, run fn on it, unlock: the self-locking half of a _locked step. */
#define WITH_SLOT(p, h, s, body)                                                                \
    do {                                                                                        \
        struct pool_slot *s;                                                                    \
        int lr_ = pool_lock(p);                                                                 \
        if (lr_ < 0)                                                                            \
            return lr_;                                                                         \
        s = pool_slot_locked(p, h);                                                             \
        if (!s) {                                                                               \
            pool_unlock(p);                                                                     \
            return -ESTALE;                                                                     \
        }                                                                                       \
        body;                                                                                   \
        pool_unlock(p);                                                                         \
    } while (0)

/* ---- sessions ------------------------------------------------------------------------------ */

int pool_session_reserve(struct pool *p, const struct pool_reservation *rv,
                         struct pool_handle *ret)
{
    struct pool_handle h;
    int r = pool_lock(p);

    if (r < 0)
        return r;
    r = pool_reserve_locked(p, rv->key, rv->by_pid, &h);
    if (r == 0) {
        struct pool_slot *s = pool_slot_locked(p, h);

        s->harness = rv->harness;
        s->flags = rv->per_turn ? SLOT_F_PER_TURN : 0;
        s->idle_ms = rv->idle_ms;
        snprintf(s->provider, sizeof(s->provider), "%s", rv->provider ? rv->provider : "");
        snprintf(s->model, sizeof(s->model), "%s", rv->model ? rv->model : "");
        snprintf(s->owner_turn, sizeof(s->owner_turn), "%s", rv->turn_id ? rv->turn_id : "");
        *ret = h;
    }
    pool_unlock(p);
    return r;
}

int pool_session_set_env_dir(struct pool *p, struct pool_handle h, const char *env_dir)
{
    WITH_SLOT(p, h, s, snprintf(s->env_dir, sizeof(s->env_dir), "%s", env_dir));
    return 0;
}

int pool_session_set_keeper(struct pool *p, struct pool_handle h, pid_t keeper_pid,
                            uint64_t keeper_start, pid_t sandbox_pid)
{
    WITH_SLOT(p, h, s, {
        s->keeper_pid = (int32_t)keeper_pid;
        s->keeper_start = keeper_start;
        s->sandbox_pid = (int32_t)sandbox_pid;
    });
    return 0;
}

int pool_session_mark_started(struct pool *p, struct pool_handle h, const char *acp_session)
{
    WITH_SLOT(p, h, s, {
        snprintf(s->acp_session, sizeof(s->acp_session), "%s", acp_session);
        if (s->state == SLOT_STARTING)
            pool_set_state(p, s, SLOT_BUSY);
    });
    return 0;
}

int pool_session_release_unstarted(struct pool *p, struct pool_handle h, uint8_t reason)
{
    WITH_SLOT(p, h, s, {
        if (s->keeper_pid == 0)
            pool_free_locked(p, h, reason);
    });
    return 0;
}

int pool_session_get_owned(struct pool *p, struct pool_handle h, pid_t owner,
                           struct pool_session *ret)
{
    int r = 0;

    WITH_SLOT(p, h, s, {
        if (s->state != SLOT_BUSY || s->owner_pid != (int32_t)owner)
            r = -ESTALE;
        else
            pool_copy_session(s, h.index, ret);
    });
    return r;
}

int pool_session_adopt(struct pool *p, struct pool_handle h, const char *turn_id, pid_t dead,
                       pid_t owner)
{
    int r = 0;

    WITH_SLOT(p, h, s, {
        if (s->state != SLOT_BUSY || s->owner_pid != (int32_t)dead ||
            strncmp(s->owner_turn, turn_id, sizeof(s->owner_turn) - 1) != 0)
            r = -ESTALE;
        else
            s->owner_pid = (int32_t)owner;
    });
    return r;
}

int pool_session_drain(struct pool *p, struct pool_handle h, uint8_t reason)
{
    WITH_SLOT(p, h, s, { (void)s; pool_drain_locked(p, h, reason); });
    return 0;
}

int pool_session_free(struct pool *p, struct pool_handle h, uint8_t reason)
{
    WITH_SLOT(p, h, s, { (void)s; pool_free_locked(p, h, reason); });
    return 0;
}

int pool_session_teardown_reason(struct pool *p, struct pool_handle h)
{
    int reason = 0;

    WITH_SLOT(p, h, s, reason = s->last_teardown);
    return reason;
}

int pool_session_mark_broken(struct pool *p, struct pool_handle h)
{
    WITH_SLOT(p, h, s, s->flags |= SLOT_F_HISTORY_BROKEN);
    return 0;
}

int pool_session_orphaned(struct pool *p, struct pool_handle h, bool keep_warm,
                          int64_t deadline_ms)
{
    WITH_SLOT(p, h, s, {
        if (s->state == SLOT_BUSY || s->state == SLOT_STARTING) {
            s->flags |= SLOT_F_HISTORY_BROKEN;
            if (s->key[0] && keep_warm)
                pool_park_locked(p, h, SLOT_IDLE, deadline_ms);
        }
    });
    return 0;
}

static void lookup_locked(struct pool *p, int i, const struct pool_judge *judge, pid_t owner,
                          const char *turn_id, struct pool_lookup *lk)
{
    struct pool_slot *s = &p->slots[i];
    struct pool_handle h = pool_handle_of(p, (uint32_t)i);

    pool_copy_session(s, (uint32_t)i, &lk->s);
    switch (s->state) {
    case SLOT_IDLE:
        lk->reason = judge->idle(judge->ctx, &lk->s);
        if (lk->reason == TEARDOWN_NONE &&
            pool_checkout_locked(p, h, false, owner, turn_id) == 0) {
            lk->outcome = POOL_LOOKUP_WARM;
            return;
        }
        break;
    case SLOT_AWAITING_APPROVAL:
        lk->reason = judge->parked(judge->ctx, &lk->s);
        if (lk->reason == POOL_JUDGE_KEEP) {
            lk->outcome = POOL_LOOKUP_REFUSE;
            lk->reason = TEARDOWN_NONE;
            return;
        }
        if (lk->reason == TEARDOWN_NONE &&
            pool_checkout_locked(p, h, true, owner, turn_id) == 0) {
            lk->outcome = POOL_LOOKUP_RESUME;
            return;
        }
        break;
    case SLOT_DRAINING:
        lk->outcome = POOL_LOOKUP_EVICT;
        lk->reason = (enum teardown_reason)s->last_teardown;
        return;
    default: /* starting or busy: a newer request for the session supersedes it */
        if (judge->refuse_busy) {
            lk->outcome = POOL_LOOKUP_BUSY;
            return;
        }
        lk->reason = TEARDOWN_SUPERSEDED;
        break;
    }
    pool_drain_locked(p, h, (uint8_t)lk->reason);
    lk->outcome = POOL_LOOKUP_EVICT;
}

int pool_session_lookup(struct pool *p, const char *key, const struct pool_judge *judge,
                        pid_t owner, const char *turn_id, struct pool_lookup *ret)
{
    int i, r;

    memset(ret, 0, sizeof(*ret));
    r = pool_lock(p);
    if (r < 0)
        return r;
    i = pool_find_locked(p, key);
    if (i >= 0)
        lookup_locked(p, i, judge, owner, turn_id, ret);
    pool_unlock(p);
    return 0;
}

static void victim_of(struct pool *p, int32_t i, enum teardown_reason reason,
                      struct pool_victim *v)
{
    const struct pool_slot *s = &p->slots[i];

    v->any = true;
    v->h = pool_handle_of(p, (uint32_t)i);
    memcpy(v->key, s->key, sizeof(v->key));
    v->keeper_pid = s->keeper_pid;
    v->keeper_start = s->keeper_start;
    v->reason = reason;
}

static void store_park_locked(struct pool_slot *s, const struct pool_park *pk)
{
    memcpy(s->config_fp, pk->config_fp, sizeof(s->config_fp));
    memcpy(s->history_fp, pk->history_fp, sizeof(s->history_fp));
    memcpy(s->cred_epoch, pk->cred_epoch, sizeof(s->cred_epoch));
    snprintf(s->acp_session, sizeof(s->acp_session), "%s", pk->acp_session);
    s->caps = pk->caps;
    s->policy_mode = pk->policy_mode;
    s->idle_ms = pk->idle_ms;
    s->flags &= ~(uint32_t)(SLOT_F_HISTORY_BROKEN | SLOT_F_PER_TURN | SLOT_F_CANCEL);
    s->acp_next_id = pk->acp_next_id;
    s->prompt_id = pk->prompt_id;
    s->napprovals = 0;
    if (pk->awaiting) {
        size_t n = pk->ngates <= POOL_APPROVALS_MAX ? pk->ngates : POOL_APPROVALS_MAX;
        memcpy(s->approvals, pk->gates, n * sizeof(s->approvals[0]));
        s->napprovals = (uint8_t)n;
    }
    s->turns++;
}

int pool_session_park(struct pool *p, struct pool_handle h, pid_t owner,
                      const struct pool_park *pk, uint64_t parked_max,
                      struct pool_victim *victim)
{
    int r = 0;

    memset(victim, 0, sizeof(*victim));
    WITH_SLOT(p, h, s, {
        if (s->state != SLOT_BUSY || s->owner_pid != (int32_t)owner) {
            r = -ESTALE;
        } else if (pool_parked_count_locked(p) >= parked_max) {
            int lru = pool_lru_idle_locked(p);
            if (lru < 0) {
                r = -ENOSPC; /* every seat is busy or awaiting approval */
            } else {
                victim_of(p, lru, TEARDOWN_CAPACITY_EVICTION, victim);
                pool_drain_locked(p, victim->h, TEARDOWN_CAPACITY_EVICTION);
            }
        }
        if (r == 0) {
            store_park_locked(s, pk);
            pool_park_locked(p, h, pk->awaiting ? SLOT_AWAITING_APPROVAL : SLOT_IDLE,
                             pk->deadline_ms);
        }
    });
    return r;
}

int pool_session_checkout_parked(struct pool *p, const char *key, pid_t owner,
                                 struct pool_session *ret)
{
    int i, r = pool_lock(p);

    if (r < 0)
        return r;
    i = pool_find_locked(p, key);
    if (i < 0) {
        r = -ENOENT;
    } else if (p->slots[i].state != SLOT_AWAITING_APPROVAL) {
        r = -EBUSY;
    } else {
        pool_copy_session(&p->slots[i], (uint32_t)i, ret);
        for (size_t g = 0; g < ret->ngates; g++)
            ret->gates[g].decision = -1;
        r = pool_checkout_locked(p, ret->h, true, owner, "cancel");
    }
    pool_unlock(p);
    return r;
}

int pool_session_park_cancelled(struct pool *p, struct pool_handle h, int64_t acp_next_id,
                                int64_t deadline_ms)
{
    int r = 0;

    WITH_SLOT(p, h, s, {
        if (s->state != SLOT_BUSY) {
            r = -ESTALE;
        } else {
            s->napprovals = 0;
            s->acp_next_id = acp_next_id;
            s->flags &= ~(uint32_t)SLOT_F_CANCEL;
            pool_park_locked(p, h, SLOT_IDLE, deadline_ms);
        }
    });
    return r;
}

int pool_session_request_cancel(struct pool *p, const char *key, const char *target_turn,
                                bool *ret_parked)
{
    struct pool_slot *s;
    int i, r = pool_lock(p);

    if (r < 0)
        return r;
    i = pool_find_locked(p, key);
    if (i < 0) {
        pool_unlock(p);
        return i;
    }
    s = &p->slots[i];
    *ret_parked = s->state == SLOT_AWAITING_APPROVAL;
    /* a targetTurnId that is not the running turn: that turn is over already */
    if ((s->state == SLOT_BUSY || s->state == SLOT_STARTING) &&
        !(target_turn && target_turn[0] && strcmp(s->owner_turn, target_turn) != 0))
        __atomic_or_fetch(&s->flags, SLOT_F_CANCEL, __ATOMIC_RELEASE);
    pool_unlock(p);
    return 0;
}

bool pool_session_cancel_requested(const struct pool *p, struct pool_handle h)
{
    const struct pool_slot *s;
    uint32_t flags;

    if (!p || h.index >= p->hdr->nslots)
        return false;
    s = &p->slots[h.index];
    flags = __atomic_load_n(&s->flags, __ATOMIC_ACQUIRE);
    return __atomic_load_n(&s->generation, __ATOMIC_ACQUIRE) == h.generation &&
           (flags & SLOT_F_CANCEL);
}

int pool_session_kill(struct pool *p, const char *key, enum teardown_reason reason,
                      struct pool_victim *ret)
{
    int i, r = pool_lock(p);

    memset(ret, 0, sizeof(*ret));
    if (r < 0)
        return r;
    i = pool_find_locked(p, key);
    if (i >= 0) {
        victim_of(p, i, reason, ret);
        if (p->slots[i].state != SLOT_DRAINING)
            pool_drain_locked(p, ret->h, (uint8_t)reason);
    }
    pool_unlock(p);
    return i >= 0 ? 1 : 0;
}

int pool_session_present(struct pool *p, const char *key)
{
    int i, r = pool_lock(p);

    if (r < 0)
        return r;
    i = pool_find_locked(p, key);
    pool_unlock(p);
    return i >= 0;
}

int pool_session_keys(struct pool *p, struct pool_key_entry *out, size_t max)
{
    size_t n = 0;
    int r = pool_lock(p);

    if (r < 0)
        return r;
    for (uint32_t i = 0; i < p->hdr->nslots && n < max; i++) {
        const struct pool_slot *s = &p->slots[i];

        if (s->state == SLOT_FREE || s->state == SLOT_SPARE || !s->key[0] ||
            (s->flags & SLOT_F_SPARE))
            continue;
        out[n].h = pool_handle_of(p, i);
        out[n].state = s->state;
        memcpy(out[n].key, s->key, sizeof(out[n].key));
        n++;
    }
    pool_unlock(p);
    return (int)n;
}

/* ---- the master ---------------------------------------------------------------------------- */

int pool_reclaim_keeper(struct pool *p, pid_t keeper_pid, char env_dir[POOL_DIR_MAX])
{
    int found = 0;

    env_dir[0] = '\0';
    if (pool_lock(p) < 0)
        return 0;
    for (uint32_t i = 0; i < p->hdr->nslots; i++) {
        struct pool_slot *s = &p->slots[i];
        if (s->state == SLOT_FREE || s->keeper_pid != (int32_t)keeper_pid)
            continue;
        memcpy(env_dir, s->env_dir, POOL_DIR_MAX);
        /* a teardown already under way keeps its reason; otherwise the keeper was killed */
        pool_free_locked(p, pool_handle_of(p, i), s->last_teardown ? 0 : TEARDOWN_KEEPER_DIED);
        found = 1;
        break;
    }
    pool_unlock(p);
    return found;
}

uint32_t pool_reclaim_dead(struct pool *p, struct pool_reclaimed *scratch)
{
    uint32_t n = 0, kept = 0;

    if (pool_lock(p) < 0)
        return 0;
    for (uint32_t i = 0; i < p->hdr->nslots; i++) {
        struct pool_slot *s = &p->slots[i];
        struct pool_reclaimed *e;

        if (s->state == SLOT_FREE)
            continue;
        e = &scratch[n++];
        e->h = pool_handle_of(p, i);
        e->keeper_pid = s->keeper_pid;
        e->keeper_start = s->keeper_start;
        e->owner_pid = s->owner_pid;
        memcpy(e->env_dir, s->env_dir, sizeof(e->env_dir));
    }
    pool_unlock(p);
    /* the liveness checks read /proc: never under the lock */
    for (uint32_t i = 0; i < n; i++) {
        struct pool_reclaimed *e = &scratch[i];
        bool dead;

        if (e->keeper_pid > 0)
            dead = !util_proc_alive(e->keeper_pid, e->keeper_start);
        else
            dead = e->owner_pid > 0 && !util_proc_alive(e->owner_pid, 0);
        if (dead)
            scratch[kept++] = *e;
    }
    n = 0;
    if (pool_lock(p) < 0)
        return 0;
    for (uint32_t i = 0; i < kept; i++) {
        struct pool_slot *s = pool_slot_locked(p, scratch[i].h);

        if (!s || s->keeper_pid != scratch[i].keeper_pid)
            continue;
        pool_free_locked(p, scratch[i].h,
                         s->last_teardown    ? 0
                         : s->keeper_pid > 0 ? TEARDOWN_KEEPER_DIED
                                             : TEARDOWN_FAILED_TURN);
        scratch[n++] = scratch[i];
    }
    pool_unlock(p);
    return n;
}

uint32_t pool_shutdown_begin(struct pool *p, struct pool_reclaimed *scratch)
{
    uint32_t n = 0;

    if (pool_lock(p) < 0)
        return 0;
    for (uint32_t i = 0; i < p->hdr->nslots; i++) {
        struct pool_slot *s = &p->slots[i];
        if (s->state == SLOT_FREE || s->keeper_pid <= 0)
            continue;
        memset(&scratch[n], 0, sizeof(scratch[n]));
        scratch[n].h = pool_handle_of(p, i);
        scratch[n].keeper_pid = s->keeper_pid;
        scratch[n].keeper_start = s->keeper_start;
        n++;
        s->last_teardown = (uint8_t)(s->state == SLOT_IDLE ? TEARDOWN_SHUTDOWN_IDLE
                                                           : TEARDOWN_SHUTDOWN_IN_FLIGHT);
    }
    pool_unlock(p);
    return n;
}

void pool_metrics_turn(struct pool *p, unsigned harness, const char *provider, unsigned outcome)
{
    struct pool_metrics *m;
    unsigned idx;

    if (!p)
        return;
    m = &p->hdr->metrics;
    idx = metrics_provider_find(m, provider);
    if (idx == METRIC_PROVIDERS && pool_lock(p) >= 0) {
        idx = metrics_provider_register_locked(m, provider);
        pool_unlock(p);
    }
    metrics_turn(m, harness, idx, (enum metric_outcome)outcome);
}
