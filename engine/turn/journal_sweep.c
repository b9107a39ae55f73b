/*
 * journal_sweep — list and sweep the journals of a root (journal_sweep.h), and repair their
 * arena after a process died holding its lock (journal_arena.h).
 */
#include "turn/journal_sweep.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "turn/journal_arena.h"

/* One entry as a list shows it (lock held); its writer is looked at later. */
static void entry_of(struct arena *a, uint32_t e, struct journal_entry *out, int32_t *ret_pid)
{
    struct arena_entry *en = arena_entry(a, e);

    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%016llx", (unsigned long long)en->hash);
    out->meta = en->meta;
    out->meta.state = en->state == ARENA_DONE ? JOURNAL_DONE : JOURNAL_RUNNING;
    out->last_seq = atomic_load(&en->commit[atomic_load(&en->commit_at) & 1u].seq);
    out->bytes = (uint64_t)en->nchunks * ARENA_CHUNK;
    out->changed_ms = atomic_load(&en->changed_ms);
    *ret_pid = atomic_load(&en->writer);
}

int journal_sweep_list(const char *root, bool orphans_only, struct journal_entry **ret,
                       size_t *ret_n)
{
    struct journal_entry *v;
    struct writer {
        int32_t pid;
        int64_t start;
    } *writers; /* who writes each, looked at after the lock */
    struct arena *a;
    size_t n = 0, k = 0, kept = 0;
    uint32_t fresh;
    int r = arena_get(root, NULL, &a);

    *ret = NULL;
    *ret_n = 0;
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return r;
    arena_lock(a);
    fresh = a->h->fresh_entries;
    /* the orphan scan walks the running ones only; a listing every one */
    for (uint32_t e = orphans_only ? a->h->run_head : 1, hops = 0;
         e != ARENA_NONE && (orphans_only ? hops < a->h->nentries : e <= fresh); hops++)
    {
        n += arena_entry(a, e)->state != ARENA_FREE;
        e = orphans_only ? arena_entry(a, e)->done_next : e + 1;
    }
    v = calloc(n ? n : 1, sizeof(*v));
    writers = calloc(n ? n : 1, sizeof(*writers));
    for (uint32_t e = orphans_only ? a->h->run_head : 1, next = ARENA_NONE;
         v && writers && e != ARENA_NONE && e <= fresh && k < n; e = next) {
        struct arena_entry *en = arena_entry(a, e);
        int32_t pid;

        next = orphans_only ? en->done_next : e + 1;
        if (en->state == ARENA_FREE || (orphans_only && en->state == ARENA_DONE))
            continue;
        entry_of(a, e, &v[k], &pid);
        if (en->state == ARENA_RUNNING)
            writers[k] = (struct writer){.pid = pid, .start = en->writer_start};
        k++;
    }
    arena_unlock(a);
    if (!v || !writers) {
        free(v);
        free(writers);
        return -ENOMEM;
    }
    /* the writers: a look in /proc each, without holding the arena */
    for (size_t i = 0; i < k; i++) {
        v[i].writer_alive = v[i].meta.state == JOURNAL_RUNNING &&
                            arena_pid_alive(writers[i].pid, writers[i].start);
        if (!(orphans_only && v[i].writer_alive))
            v[kept++] = v[i];
    }
    free(writers);
    *ret = v;
    *ret_n = kept;
    return 0;
}

#define SCAN_MS 30000 /* running journals are looked at this often for abandoned ones */

int journal_sweep_run(const char *root, const struct turn_settings *ts, int64_t now_wall_ms,
                      struct journal_sweep_stats *ret)
{
    struct journal_sweep_stats st = {0};
    struct arena *a;
    int r = arena_get(root, NULL, &a);

    if (ret)
        memset(ret, 0, sizeof(*ret));
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return r;
    arena_lock(a);
    /* the finished ones in the order they finished: the expired ones are at the head */
    while (a->h->done_head != ARENA_NONE &&
           arena_entry(a, a->h->done_head)->meta.finished_ms + (int64_t)ts->keep_ms <=
               now_wall_ms) {
        arena_entry_free(a, a->h->done_head);
        st.expired++;
    }
    /* no write for the whole window and no writer: its worker died and nobody took it (a
     * look at every entry, now and then) */
    if (now_wall_ms >= a->next_scan_ms) {
        a->next_scan_ms = now_wall_ms + SCAN_MS;
        for (uint32_t e = a->h->run_head, next, hops = 0;
             e != ARENA_NONE && hops < a->h->nentries; e = next, hops++) {
            struct arena_entry *en = arena_entry(a, e);

            next = en->done_next;
            if (en->state == ARENA_RUNNING &&
                atomic_load(&en->changed_ms) + (int64_t)ts->keep_ms <= now_wall_ms &&
                !arena_writer_alive(en)) {
                arena_entry_free(a, e);
                st.abandoned++;
            }
        }
    }
    /* the oldest finished ones go while all of them hold more than total_bytes (an arena
     * made larger than a later setting) */
    while ((uint64_t)a->h->used_chunks * ARENA_CHUNK > ts->total_bytes &&
           a->h->done_head != ARENA_NONE) {
        arena_entry_free(a, a->h->done_head);
        st.evicted++;
    }
    st.count = a->h->used_entries;
    st.bytes = (uint64_t)a->h->used_chunks * ARENA_CHUNK;
    arena_unlock(a);
    if (ret)
        *ret = st;
    return 0;
}

/* ---- the arena's repair (journal_arena.h) ---------------------------------------------------------------------------------- */

static int by_finish(const void *x, const void *y)
{
    const struct arena_entry *const *p = x, *const *q = y;

    return ((*p)->meta.finished_ms > (*q)->meta.finished_ms) -
           ((*p)->meta.finished_ms < (*q)->meta.finished_ms);
}

/* (journal_arena.h) */
void arena_repair(struct arena *a)
{
    struct arena_head *h = a->h;
    uint32_t nc = h->fresh_chunks < h->nchunks ? h->fresh_chunks : h->nchunks;
    uint32_t ne = h->fresh_entries < h->nentries ? h->fresh_entries : h->nentries;
    uint8_t *seen = calloc((size_t)nc / 8 + 1, 1);
    struct arena_entry **done = calloc((size_t)ne + 1, sizeof(*done));
    uint32_t ndone = 0;

    log_warn("turn journals: a process died holding the arena's lock: repairing it");
    if (!seen || !done) {
        free(seen);
        free(done);
        return;
    }
    memset(a->buckets, 0, (size_t)h->nbuckets * sizeof(uint32_t));
    h->free_entries = h->free_chunks = ARENA_NONE;
    h->done_head = h->done_tail = ARENA_NONE;
    h->run_head = h->run_tail = ARENA_NONE;
    h->used_chunks = h->used_entries = 0;
    for (uint32_t e = ne; e >= 1; e--) {
        struct arena_entry *en = arena_entry(a, e);
        uint32_t c = en->first, last = ARENA_NONE, n = 0;
        bool ok = en->state == ARENA_RUNNING || en->state == ARENA_DONE;

        while (ok && c != ARENA_NONE) {
            if (c > nc || (seen[(c - 1) / 8] & (1u << ((c - 1) % 8))) ||
                arena_chunk(a, c)->entry != e) {
                ok = false;
                break;
            }
            seen[(c - 1) / 8] |= (uint8_t)(1u << ((c - 1) % 8));
            last = c;
            n++;
            c = arena_chunk(a, c)->next;
        }
        if (!ok) {
            /* its chunks marked so far go back with the others */
            for (uint32_t k = 0, d = en->first; k < n; k++, d = arena_chunk(a, d)->next)
                seen[(d - 1) / 8] &= (uint8_t) ~(1u << ((d - 1) % 8));
            atomic_fetch_add(&en->gen, 1);
            en->state = ARENA_FREE;
            en->first = en->last = ARENA_NONE;
            en->nchunks = 0;
            en->hash_next = h->free_entries;
            h->free_entries = e;
            continue;
        }
        en->first = n ? en->first : ARENA_NONE;
        en->last = last;
        en->nchunks = n;
        en->done_prev = en->done_next = ARENA_NONE;
        en->hash = arena_name_hash(en->meta.turn_id, en->meta.project_id);
        en->hash_next = a->buckets[en->hash & (h->nbuckets - 1)];
        a->buckets[en->hash & (h->nbuckets - 1)] = e;
        h->used_entries++;
        h->used_chunks += n;
        if (en->state == ARENA_DONE) {
            done[ndone++] = en;
        } else {
            en->done_prev = h->run_tail;
            if (h->run_tail)
                arena_entry(a, h->run_tail)->done_next = e;
            else
                h->run_head = e;
            h->run_tail = e;
        }
    }
    for (uint32_t c = nc; c >= 1; c--) {
        struct arena_chunk *ch = arena_chunk(a, c);

        if (seen[(c - 1) / 8] & (1u << ((c - 1) % 8)))
            continue;
        atomic_fetch_add(&ch->gen, 1);
        ch->entry = ARENA_NONE;
        ch->next = h->free_chunks;
        h->free_chunks = c;
    }
    qsort(done, ndone, sizeof(*done), by_finish);
    for (uint32_t i = 0; i < ndone; i++) {
        uint32_t e = (uint32_t)(done[i] - a->entries) + 1;

        done[i]->done_prev = h->done_tail;
        if (h->done_tail)
            arena_entry(a, h->done_tail)->done_next = e;
        else
            h->done_head = e;
        h->done_tail = e;
    }
    free(seen);
    free(done);
}
