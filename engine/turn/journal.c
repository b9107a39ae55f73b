/*
 * journal — a streamed turn's records in shared memory that outlives its worker (journal.h),
 * on the arena of journal_arena.h.
 */
#include "turn/journal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "turn/journal_arena.h"

#define READ_CHUNK 65536
#define LINE_MAX_BYTES (EVENT_LINE_MAX + 64)
#define RESULT_PREFIX "{\"kind\":\"result\""
#define READER_FRESH_MS 5000 /* a follower that gave no sign of life this long is gone */

struct journal {
    struct arena *a;
    uint32_t e;
    uint32_t gen;
    uint32_t epoch; /* the entry's when this one became its writer */
    uint64_t turn_bytes;
    uint64_t last_seq, last_det;
    struct journal_meta meta;
};

struct journal_reader {
    struct arena *a;
    uint32_t e;
    uint32_t gen;
    uint64_t pos; /* the next stream byte to copy */
    uint64_t after;
    struct buf pending; /* copied, not yet a whole line */
};

int journal_parse_line(const char *line, size_t len, uint64_t *ret_seq, uint64_t *ret_det,
                       size_t *ret_off)
{
    uint64_t v[2] = {0, 0};
    size_t i = 0;

    for (int k = 0; k < 2; k++) {
        size_t start = i;

        while (i < len && line[i] >= '0' && line[i] <= '9' && i - start < 19)
            v[k] = v[k] * 10 + (uint64_t)(line[i++] - '0');
        if (i == start || i >= len || line[i] != ' ')
            return -EBADMSG;
        i++;
    }
    if (i >= len || line[i] != '{')
        return -EBADMSG;
    *ret_seq = v[0];
    *ret_det = v[1];
    *ret_off = i;
    return 0;
}

static bool ids_fit(const char *turn_id, const char *project_id)
{
    return strlen(turn_id) < JOURNAL_ID_MAX && strlen(project_id) < JOURNAL_ID_MAX;
}

/* ---- the writer ------------------------------------------------------------------------ */

static int create(const char *root, const struct turn_settings *ts, const char *turn_id,
                  const char *project_id, const char *session_key, bool detached,
                  const uint32_t *slot, struct journal **ret)
{
    struct journal *j;
    struct arena_entry *en;
    struct arena *a;
    uint32_t e;
    int r;

    project_id = project_id ? project_id : "";
    if (!ids_fit(turn_id, project_id) || (session_key && strlen(session_key) >= JOURNAL_KEY_MAX))
        return -ENAMETOOLONG;
    if ((r = arena_get(root, ts, &a)) < 0)
        return r;
    j = calloc(1, sizeof(*j));
    if (!j)
        return -ENOMEM;
    arena_lock(a);
    e = arena_find(a, turn_id, project_id);
    if (e != ARENA_NONE) {
        en = arena_entry(a, e);
        if (en->state == ARENA_RUNNING && arena_writer_alive(en)) {
            arena_unlock(a);
            free(j);
            return -EEXIST; /* a live writer has this turn */
        }
        arena_entry_reset(a, e); /* an earlier turn of the same id, finished or abandoned */
    } else if ((e = arena_entry_new(a, turn_id, project_id)) == ARENA_NONE) {
        arena_unlock(a);
        free(j);
        return -ENOSPC;
    }
    en = arena_entry(a, e);
    snprintf(en->meta.session_key, sizeof(en->meta.session_key), "%s",
             session_key ? session_key : "");
    en->meta.pid = util_self_pid();
    en->meta.created_ms = util_wall_ms();
    en->meta.detached = detached;
    en->meta.state = JOURNAL_RUNNING;
    if (slot) {
        en->meta.has_slot = true;
        en->meta.slot_index = slot[0];
        en->meta.slot_generation = slot[1];
    }
    atomic_store(&en->changed_ms, en->meta.created_ms);
    j->a = a;
    j->e = e;
    j->gen = atomic_load(&en->gen);
    j->epoch = atomic_load(&en->epoch);
    j->meta = en->meta;
    arena_unlock(a);
    j->turn_bytes = ts->turn_bytes;
    *ret = j;
    return 0;
}

int journal_create(const char *root, const struct turn_settings *ts, const char *turn_id,
                   const char *project_id, const char *session_key, bool detached,
                   struct journal **ret)
{
    return create(root, ts, turn_id, project_id, session_key, detached, NULL, ret);
}

int journal_create_at_slot(const char *root, const struct turn_settings *ts, const char *turn_id,
                           const char *project_id, const char *session_key, bool detached,
                           uint32_t index, uint32_t generation, struct journal **ret)
{
    uint32_t slot[2] = {index, generation};

    return create(root, ts, turn_id, project_id, session_key, detached, slot, ret);
}

/* The entry is still this journal's (not swept, evicted or made anew by someone else, and
 * no one took it over meanwhile). */
static struct arena_entry *mine(struct journal *j)
{
    struct arena_entry *en = arena_entry(j->a, j->e);

    return atomic_load(&en->gen) == j->gen && atomic_load(&en->epoch) == j->epoch ? en : NULL;
}

/* Copy n bytes to the end of the stream, a chunk added under the lock when the last is full;
 * *line_at: where the line starts (noted in its chunk). -ENOSPC when the arena is full. */
static int put(struct journal *j, struct arena_entry *en, uint64_t *end, const char *p, size_t n,
               bool line_start)
{
    while (n) {
        struct arena_chunk *ch = en->last ? arena_chunk(j->a, en->last) : NULL;
        size_t at, take;

        if (ch && *end < ch->offset)
            return -EIO; /* a chain past the end (a take-over trims it): never write before */
        if (!ch || *end >= ch->offset + ARENA_CHUNK_DATA) {
            uint32_t c;

            arena_lock(j->a);
            c = mine(j) ? arena_chunk_add(j->a, j->e) : ARENA_NONE;
            arena_unlock(j->a);
            if (c == ARENA_NONE)
                return -ENOSPC;
            ch = arena_chunk(j->a, c);
        }
        at = (size_t)(*end - ch->offset);
        if (line_start && ch->line == ARENA_NO_LINE)
            ch->line = (uint32_t)at;
        line_start = false;
        take = ARENA_CHUNK_DATA - at < n ? ARENA_CHUNK_DATA - at : n;
        memcpy(ch->data + at, p, take);
        p += take;
        n -= take;
        *end += take;
    }
    return 0;
}

/* The seq of the record that starts at stream offset off, in chunk c. */
static uint64_t seq_at(struct journal *j, uint32_t c, uint64_t off)
{
    char digits[24];
    size_t n = 0;
    uint64_t seq = 0;

    while (c != ARENA_NONE && n < sizeof(digits)) {
        struct arena_chunk *ch = arena_chunk(j->a, c);

        while (off < ch->offset + ARENA_CHUNK_DATA && n < sizeof(digits)) {
            char d = ch->data[off - ch->offset];
            if (d < '0' || d > '9')
                return seq;
            seq = seq * 10 + (uint64_t)(d - '0');
            off++;
            n++;
        }
        c = ch->next;
    }
    return seq;
}

/*
 * The bound: once the stream holds more than turn_bytes, its oldest chunks go, the new start
 * being the first record that starts in a later chunk; the last chunk always stays.
 */
static void bound(struct journal *j, struct arena_entry *en, uint64_t end)
{
    arena_lock(j->a);
    while (atomic_load(&en->gen) == j->gen && en->nchunks > 1 &&
           end - atomic_load(&en->start) > j->turn_bytes) {
        uint32_t c = arena_chunk(j->a, en->first)->next;
        uint64_t line = 0;

        /* the first line start after the oldest chunk (a record may span several chunks) */
        for (uint32_t hops = 0; c != ARENA_NONE && arena_chunk(j->a, c)->line == ARENA_NO_LINE;
             hops++)
            c = hops < j->a->h->nchunks ? arena_chunk(j->a, c)->next : ARENA_NONE;
        if (c == ARENA_NONE)
            break;
        line = arena_chunk(j->a, c)->offset + arena_chunk(j->a, c)->line;
        atomic_store(&en->first_seq, seq_at(j, c, line));
        atomic_store(&en->start, line);
        for (uint32_t hops = 0; en->first != c && hops < j->a->h->nchunks; hops++)
            arena_chunk_drop_first(j->a, j->e);
    }
    arena_unlock(j->a);
}

int journal_append(struct journal *j, uint64_t seq, uint64_t det, const char *line, size_t len)
{
    struct arena_entry *en = mine(j);
    char text[48], *p = text + sizeof(text);
    uint64_t v[2] = {det, seq}, end;
    int r;

    if (!en)
        return -ESTALE; /* swept or taken over meanwhile */
    /* "<seq> <det> " without printf */
    for (int i = 0; i < 2; i++) {
        *--p = ' ';
        do {
            *--p = (char)('0' + v[i] % 10);
            v[i] /= 10;
        } while (v[i]);
    }
    end = atomic_load_explicit(&en->end, memory_order_relaxed);
    r = put(j, en, &end, p, (size_t)(text + sizeof(text) - p), true);
    if (r == 0)
        r = put(j, en, &end, line, len, false);
    if (r < 0) {
        /* what was copied is past the end, and the next record goes over it; chunks added
         * for it go back */
        arena_lock(j->a);
        if (atomic_load(&en->gen) == j->gen)
            arena_chunk_trim(j->a, j->e, atomic_load(&en->end));
        arena_unlock(j->a);
        return r;
    }
    if (!atomic_load_explicit(&en->first_seq, memory_order_relaxed))
        atomic_store(&en->first_seq, seq);
    {
        /* the commit a taker reads: the slot not in use, then made the one in use */
        uint32_t k = atomic_load_explicit(&en->commit_at, memory_order_relaxed) ^ 1u;

        atomic_store_explicit(&en->commit[k].end, end, memory_order_relaxed);
        atomic_store_explicit(&en->commit[k].seq, seq, memory_order_relaxed);
        atomic_store_explicit(&en->commit[k].det, det, memory_order_relaxed);
        atomic_store_explicit(&en->commit_at, k, memory_order_release);
    }
    atomic_store(&en->changed_ms, util_wall_ms());
    atomic_store(&en->end, end); /* the record is there for readers (seq_cst: see arena_wake) */
    j->last_seq = seq;
    j->last_det = det;
    arena_wake(en);
    if (end - atomic_load_explicit(&en->start, memory_order_relaxed) > j->turn_bytes)
        bound(j, en, end);
    return 0;
}

int journal_set_slot(struct journal *j, uint32_t index, uint32_t generation)
{
    struct arena_entry *en;

    arena_lock(j->a);
    en = mine(j);
    if (en) {
        en->meta.has_slot = true;
        en->meta.slot_index = index;
        en->meta.slot_generation = generation;
        j->meta = en->meta;
    }
    arena_unlock(j->a);
    return en ? 0 : -ESTALE;
}

int journal_note_writer(struct journal *j)
{
    struct arena_entry *en;

    arena_lock(j->a);
    en = mine(j);
    if (en) {
        arena_entry_write_by_me(en);
        en->meta.pid = util_self_pid(); /* a second death is looked for under this pid */
        j->meta = en->meta;
    }
    arena_unlock(j->a);
    return en ? 0 : -ESTALE;
}

int journal_finish(struct journal *j)
{
    struct arena_entry *en;

    arena_lock(j->a);
    en = mine(j);
    if (en) {
        arena_entry_done(j->a, j->e, util_wall_ms());
        j->meta = en->meta;
    }
    arena_unlock(j->a);
    if (en)
        arena_wake(en);
    return en ? 0 : -ESTALE;
}

bool journal_has_readers(struct journal *j)
{
    struct arena_entry *en = mine(j);

    return en && atomic_load(&en->readers) > 0 &&
           util_wall_ms() - atomic_load(&en->reader_ms) < READER_FRESH_MS;
}

void journal_last(const struct journal *j, uint64_t *ret_seq, uint64_t *ret_det)
{
    *ret_seq = j->last_seq;
    *ret_det = j->last_det;
}

const struct journal_meta *journal_meta_of(const struct journal *j)
{
    return &j->meta;
}

void journal_close(struct journal *j)
{
    struct arena_entry *en;

    if (!j)
        return;
    arena_lock(j->a);
    en = mine(j);
    /* a turn left unfinished has no writer now: whoever comes for it takes it over */
    if (en && en->state == ARENA_RUNNING && atomic_load(&en->writer) == util_self_pid())
        atomic_store(&en->writer, 0);
    arena_unlock(j->a);
    if (en)
        arena_wake(en);
    free(j);
}

int journal_prefault(const char *root, const struct turn_settings *ts)
{
    struct arena *a;
    int r = arena_get(root, ts, &a);

    if (r == 0)
        arena_prefault(a);
    return r;
}

/* ---- readers ----------------------------------------------------------------------------- */

static void reader_alive(struct arena_entry *en)
{
    atomic_store(&en->reader_ms, util_wall_ms());
}

void journal_reader_free(struct journal_reader *r)
{
    if (!r)
        return;
    if (r->a) {
        struct arena_entry *en = arena_entry(r->a, r->e);
        uint32_t n = atomic_load(&en->readers);

        while (atomic_load(&en->gen) == r->gen && n > 0 &&
               !atomic_compare_exchange_weak(&en->readers, &n, n - 1))
            ;
    }
    buf_release(&r->pending);
    free(r);
}

int journal_open(const char *root, const char *turn_id, const char *project_id, uint64_t after,
                 struct journal_reader **ret, uint64_t *ret_oldest)
{
    struct journal_reader *r;
    struct arena_entry *en;
    struct arena *a;
    uint64_t first;
    uint32_t e;

    project_id = project_id ? project_id : "";
    if (!ids_fit(turn_id, project_id) || arena_get(root, NULL, &a) < 0)
        return -ENOENT;
    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    buf_init(&r->pending, LINE_MAX_BYTES);
    arena_lock(a);
    e = arena_find(a, turn_id, project_id);
    if (e == ARENA_NONE) {
        arena_unlock(a);
        journal_reader_free(r);
        return -ENOENT; /* unknown, expired, or another project's */
    }
    en = arena_entry(a, e);
    first = atomic_load(&en->first_seq);
    if (first > after + 1) {
        arena_unlock(a);
        *ret_oldest = first;
        journal_reader_free(r);
        return -ERANGE;
    }
    /* follow first (the writer then sees a reader), then read: nothing slips between */
    r->a = a;
    r->e = e;
    r->gen = atomic_load(&en->gen);
    atomic_fetch_add(&en->readers, 1);
    reader_alive(en);
    r->pos = atomic_load(&en->start);
    r->after = after;
    arena_unlock(a);
    *ret = r;
    return 0;
}

/*
 * Copy stream bytes [r->pos, end) (at most READ_CHUNK) into r->pending, following the chunk
 * chain without the lock; a chunk freed meanwhile voids the copy. 1 copied, 0 nothing new,
 * -ERANGE the reader fell behind the bound, -ENOENT the journal is gone.
 */
static int copy_more(struct journal_reader *r)
{
    struct arena_entry *en = arena_entry(r->a, r->e);
    uint64_t end = atomic_load(&en->end), start = atomic_load(&en->start), want;
    uint32_t c = en->first;
    size_t copied = 0;

    if (atomic_load(&en->gen) != r->gen)
        return -ENOENT;
    if (r->pos < start)
        return -ERANGE;
    if (r->pos >= end)
        return 0;
    want = end - r->pos < READ_CHUNK ? end - r->pos : READ_CHUNK;
    for (uint32_t hops = 0; c != ARENA_NONE && want && hops <= r->a->h->nchunks; hops++) {
        /* (copied counts what this call took: none, and the caller waits) */
        struct arena_chunk *ch = arena_chunk(r->a, c);
        uint32_t g = atomic_load_explicit(&ch->gen, memory_order_acquire), next = ch->next;
        uint64_t off = ch->offset;
        bool owned = ch->entry == r->e;
        size_t at, take;

        if (!owned || r->pos < off) {
            if (atomic_load(&en->gen) != r->gen)
                return -ENOENT;
            return atomic_load(&en->start) > r->pos ? -ERANGE : 0; /* moved: again later */
        }
        if (r->pos >= off + ARENA_CHUNK_DATA) {
            c = next;
            continue;
        }
        at = (size_t)(r->pos - off);
        take = ARENA_CHUNK_DATA - at < want ? ARENA_CHUNK_DATA - at : (size_t)want;
        if (buf_append(&r->pending, ch->data + at, take) < 0)
            return -E2BIG;
        atomic_thread_fence(memory_order_acquire);
        /* freed under us (the bound passed this reader by), or the entry, and the chunk with
         * it, went to another turn meanwhile */
        if (atomic_load_explicit(&ch->gen, memory_order_relaxed) != g ||
            atomic_load(&en->gen) != r->gen) {
            r->pending.len -= take;
            return atomic_load(&en->gen) != r->gen ? -ENOENT : -ERANGE;
        }
        r->pos += take;
        want -= take;
        copied += take;
        c = next;
    }
    return copied > 0;
}

/* A whole line in pending: 1 (taken out into out when it is a new record), 0 none. */
static int take_line(struct journal_reader *r, struct buf *out, uint64_t *ret_seq, bool *ret_result,
                     bool *ret_new)
{
    char *nl = r->pending.len ? memchr(r->pending.data, '\n', r->pending.len) : NULL;
    uint64_t seq, det;
    size_t len, off;

    *ret_new = false;
    if (!nl)
        return 0;
    len = (size_t)(nl - r->pending.data) + 1;
    if (journal_parse_line(r->pending.data, len - 1, &seq, &det, &off) == 0 && seq > r->after) {
        buf_reset(out);
        if (buf_append(out, r->pending.data + off, len - off) == 0) {
            *ret_seq = seq;
            *ret_result = strncmp(out->data, RESULT_PREFIX, strlen(RESULT_PREFIX)) == 0;
            r->after = seq;
            *ret_new = true;
        }
    }
    buf_consume(&r->pending, len);
    return 1;
}

int journal_read(struct journal_reader *r, struct buf *out, uint64_t *ret_seq, bool *ret_result)
{
    reader_alive(arena_entry(r->a, r->e));
    for (;;) {
        bool fresh;
        int k;

        while (take_line(r, out, ret_seq, ret_result, &fresh) == 1)
            if (fresh)
                return 1;
        k = copy_more(r);
        if (k <= 0)
            return k == -ENOENT ? -ERANGE : k;
    }
}

void journal_wait(struct journal_reader *r, int timeout_ms)
{
    struct arena_entry *en = arena_entry(r->a, r->e);
    uint32_t seen, n;

    atomic_fetch_add(&en->waiters, 1);
    seen = atomic_load(&en->futex);
    if (atomic_load(&en->end) <= r->pos && atomic_load(&en->gen) == r->gen &&
        (en->state == ARENA_RUNNING && arena_writer_alive(en)))
        arena_wait(en, seen, timeout_ms);
    else /* done, orphaned, or a chain that moved under a copy: the caller looks again soon */
        util_sleep_ms(timeout_ms < 5 ? timeout_ms : 5);
    n = atomic_load(&en->waiters); /* (an entry made anew meanwhile starts at 0) */
    while (n > 0 && !atomic_compare_exchange_weak(&en->waiters, &n, n - 1))
        ;
    reader_alive(en);
}

bool journal_reader_done(struct journal_reader *r)
{
    struct arena_entry *en = arena_entry(r->a, r->e);

    return atomic_load(&en->gen) != r->gen ||
           (en->state == ARENA_DONE && atomic_load(&en->end) <= r->pos && !r->pending.len);
}

bool journal_writer_alive(struct journal_reader *r)
{
    struct arena_entry *en = arena_entry(r->a, r->e);

    return atomic_load(&en->gen) == r->gen && arena_writer_alive(en);
}

int journal_take_over(struct journal_reader *r, const struct turn_settings *ts,
                      struct journal **ret)
{
    struct journal *j = calloc(1, sizeof(*j));
    struct arena_entry *en = arena_entry(r->a, r->e);

    if (!j)
        return -ENOMEM;
    arena_lock(r->a);
    if (atomic_load(&en->gen) != r->gen || en->state == ARENA_FREE) {
        arena_unlock(r->a);
        free(j);
        return -ENOENT;
    }
    if (en->state == ARENA_DONE) {
        arena_unlock(r->a);
        free(j);
        return -EALREADY; /* its result is in: nothing to carry on */
    }
    if (arena_writer_alive(en)) {
        arena_unlock(r->a);
        free(j);
        return -EBUSY;
    }
    {
        /* the dead writer's last whole record (its commit): what it copied past it, and the
         * chunks it took for that, go */
        struct arena_commit *c = &en->commit[atomic_load(&en->commit_at) & 1u];
        uint64_t end = atomic_load(&c->end);

        j->last_seq = atomic_load(&c->seq);
        j->last_det = atomic_load(&c->det);
        arena_chunk_trim(r->a, r->e, end);
        if (en->last != ARENA_NONE) {
            struct arena_chunk *ch = arena_chunk(r->a, en->last);

            if (ch->line != ARENA_NO_LINE && ch->offset + ch->line >= end)
                ch->line = ARENA_NO_LINE;
        }
        atomic_store(&en->end, end);
    }
    atomic_fetch_add(&en->epoch, 1); /* a writer taken for dead that lives writes no more */
    arena_entry_write_by_me(en);
    j->a = r->a;
    j->e = r->e;
    j->gen = r->gen;
    j->epoch = atomic_load(&en->epoch);
    j->turn_bytes = ts->turn_bytes;
    j->meta = en->meta;
    /* the reader goes on where it was: everything before the end is whole records */
    if (r->pos > atomic_load(&en->end)) {
        buf_reset(&r->pending);
        r->pos = atomic_load(&en->end);
    }
    arena_unlock(r->a);
    *ret = j;
    return 0;
}
