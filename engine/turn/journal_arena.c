/*
 * journal_arena — the shared-memory store of the journals (journal_arena.h).
 */
#include "turn/journal_arena.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

#define ARENA_MAGIC 0x314e5241524e524aull /* "JRNRARN1" */
#define ARENA_VERSION 1
#define ARENA_FILE "journal.arena"
#define ARENAS_KEPT 64 /* roots a process maps (one in a worker; tests use many) */
#define MIN_CHUNKS 16u
#define RESERVE_STEP 64u /* fresh items reserved at once on a turn's way (the prefault's lag) */

/* ---- layout -------------------------------------------------------------------------------- */

static size_t align_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

static uint32_t pow2_at_least(uint32_t v)
{
    uint32_t p = 1;

    while (p < v && p < (1u << 31))
        p <<= 1;
    return p;
}

/* Where the parts of an arena of these counts lie, and its size. */
static size_t layout(uint32_t nentries, uint32_t nchunks, uint32_t nbuckets, size_t *ret_buckets,
                     size_t *ret_entries, size_t *ret_chunks)
{
    size_t off = align_up(sizeof(struct arena_head), 64);

    *ret_buckets = off;
    off = align_up(off + (size_t)nbuckets * sizeof(uint32_t), 64);
    *ret_entries = off;
    off = align_up(off + (size_t)nentries * sizeof(struct arena_entry), ARENA_CHUNK);
    *ret_chunks = off;
    return off + (size_t)nchunks * sizeof(struct arena_chunk);
}

static int init_head(struct arena_head *h, uint32_t nentries, uint32_t nchunks, uint32_t nbuckets)
{
    pthread_mutexattr_t at;
    int r;

    memset(h, 0, sizeof(*h));
    h->version = ARENA_VERSION;
    h->entry_size = (uint32_t)sizeof(struct arena_entry);
    h->chunk_size = (uint32_t)sizeof(struct arena_chunk);
    h->head_size = (uint32_t)sizeof(struct arena_head);
    h->nentries = nentries;
    h->nchunks = nchunks;
    h->nbuckets = nbuckets;
    if ((r = pthread_mutexattr_init(&at)) != 0)
        return -r;
    r = pthread_mutexattr_setpshared(&at, PTHREAD_PROCESS_SHARED);
    if (r == 0)
        r = pthread_mutexattr_setrobust(&at, PTHREAD_MUTEX_ROBUST);
    if (r == 0)
        r = pthread_mutex_init(&h->lock, &at);
    pthread_mutexattr_destroy(&at);
    if (r != 0)
        return -r;
    __atomic_store_n(&h->magic, ARENA_MAGIC, __ATOMIC_RELEASE); /* last: the arena is ready */
    return 0;
}

/* The head of the arena file on fd is whole and of this build's layout. */
static bool head_usable(int fd)
{
    struct arena_head *h = mmap(NULL, sizeof(*h), PROT_READ, MAP_SHARED, fd, 0);
    bool ok;

    if (h == MAP_FAILED)
        return false;
    ok = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == ARENA_MAGIC &&
         h->version == ARENA_VERSION && h->entry_size == sizeof(struct arena_entry) &&
         h->chunk_size == sizeof(struct arena_chunk) && h->head_size == sizeof(struct arena_head);
    munmap(h, sizeof(*h));
    return ok;
}

/* Open (or with ts make) the arena file of root, its size known and its head ready: its fd. */
static int open_file(const char *root, const struct turn_settings *ts, size_t *ret_size)
{
    char path[PATH_MAX];
    struct stat st;
    int fd, r = 0;

    if (snprintf(path, sizeof(path), "%s/%s", root, ARENA_FILE) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    if (ts && (r = util_mkdir_p(root, 0700)) < 0)
        return r;
    fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (ts ? O_CREAT : 0), 0600);
    if (fd < 0)
        return -errno;
    if (flock(fd, LOCK_EX) < 0 || fstat(fd, &st) < 0) {
        r = -errno;
        goto fail;
    }
    if (st.st_size >= (off_t)sizeof(struct arena_head) && ts && !head_usable(fd)) {
        /* its maker died before its head was written, or another build made it: a new file
         * (processes that mapped the old one keep it) */
        if (unlink(path) < 0) {
            r = -errno;
            goto fail;
        }
        close(fd);
        return open_file(root, ts, ret_size);
    }
    if (st.st_size < (off_t)sizeof(struct arena_head)) {
        /* new: made here, if we may */
        uint32_t nchunks, nentries, nbuckets;
        size_t b, e, c, size;
        struct arena_head *h;
        struct statvfs vfs;

        if (!ts) {
            r = -ENOENT;
            goto fail;
        }
        nchunks = (uint32_t)(ts->total_bytes / ARENA_CHUNK);
        /* at most half of what the file system has room for */
        if (fstatvfs(fd, &vfs) == 0 && vfs.f_bavail) {
            uint64_t room = (uint64_t)vfs.f_bavail * vfs.f_frsize / 2;
            uint64_t per = ARENA_CHUNK + sizeof(struct arena_entry) + sizeof(uint32_t) * 2;

            if ((uint64_t)nchunks * per > room) {
                log_warn("turn journals: %s has room for %llu KiB of them, not %llu", root,
                         (unsigned long long)(room / per * ARENA_CHUNK >> 10),
                         (unsigned long long)(ts->total_bytes >> 10));
                nchunks = (uint32_t)(room / per);
            }
        }
        if (nchunks < MIN_CHUNKS)
            nchunks = MIN_CHUNKS;
        nentries = nchunks; /* a journal has a chunk at least */
        nbuckets = pow2_at_least(nentries);
        size = layout(nentries, nchunks, nbuckets, &b, &e, &c);
        if (ftruncate(fd, 0) < 0 || ftruncate(fd, (off_t)size) < 0) {
            r = -errno;
            goto fail;
        }
        /* the head and the names: their pages now (the rest as it is used: arena_reserve) */
        if (fallocate(fd, 0, 0, (off_t)e) < 0 && errno != EOPNOTSUPP) {
            r = -errno;
            (void)ftruncate(fd, 0);
            goto fail;
        }
        h = mmap(NULL, sizeof(*h), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (h == MAP_FAILED) {
            r = -errno;
            goto fail;
        }
        r = init_head(h, nentries, nchunks, nbuckets);
        munmap(h, sizeof(*h));
        if (r < 0)
            goto fail;
        st.st_size = (off_t)size;
    }
    (void)flock(fd, LOCK_UN);
    *ret_size = (size_t)st.st_size;
    return fd;
fail:
    close(fd);
    return r;
}

static struct {
    char root[PATH_MAX];
    struct arena a;
} arenas[ARENAS_KEPT];
static size_t narenas;
static pthread_mutex_t arenas_lock = PTHREAD_MUTEX_INITIALIZER;

static int map_arena(const char *root, const struct turn_settings *ts, struct arena *a)
{
    size_t size = 0, b, e, c;
    struct arena_head *h;
    int fd = open_file(root, ts, &size);

    if (fd < 0)
        return fd;
    h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        close(fd);
        return -errno;
    }
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != ARENA_MAGIC ||
        h->version != ARENA_VERSION || h->entry_size != sizeof(struct arena_entry) ||
        h->chunk_size != sizeof(struct arena_chunk) || h->head_size != sizeof(struct arena_head) ||
        !h->nchunks || !h->nentries ||
        (h->nbuckets & (h->nbuckets - 1)) != 0 ||
        layout(h->nentries, h->nchunks, h->nbuckets, &b, &e, &c) > size) {
        munmap(h, size);
        close(fd);
        return -EBADMSG;
    }
    a->fd = fd;
    a->off_entries = e;
    a->off_chunks = c;
    a->h = h;
    a->buckets = (uint32_t *)((char *)h + b);
    a->entries = (struct arena_entry *)((char *)h + e);
    a->chunks = (struct arena_chunk *)((char *)h + c);
    a->size = size;
    return 0;
}

int arena_get(const char *root, const struct turn_settings *ts, struct arena **ret)
{
    int r = 0;

    if (strlen(root) >= PATH_MAX)
        return -ENAMETOOLONG;
    pthread_mutex_lock(&arenas_lock);
    for (size_t i = 0; i < narenas; i++)
        if (strcmp(arenas[i].root, root) == 0) {
            *ret = &arenas[i].a;
            goto out;
        }
    if (narenas == ARENAS_KEPT) {
        r = -EMFILE;
        goto out;
    }
    r = map_arena(root, ts, &arenas[narenas].a);
    if (r == 0) {
        snprintf(arenas[narenas].root, sizeof(arenas[narenas].root), "%s", root);
        *ret = &arenas[narenas].a;
        narenas++;
    }
out:
    pthread_mutex_unlock(&arenas_lock);
    return r;
}

#define AHEAD_MIN 1024u   /* chunks (4 MiB) or entries */
#define AHEAD_MAX 16384u  /* chunks (64 MiB) or entries */

/* madvise(MADV_POPULATE_WRITE) of [from, to) in units of size at base (page-aligned ends);
 * where the kernel has none (before 5.14), a read of every page. */
static void populate(void *base, size_t size, uint32_t from, uint32_t to)
{
    uintptr_t a = ((uintptr_t)base + (size_t)from * size) & ~(uintptr_t)(ARENA_CHUNK - 1);
    uintptr_t b = (uintptr_t)base + (size_t)to * size;

    if (b <= a)
        return;
#ifdef MADV_POPULATE_WRITE
    if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) == 0 || errno != EINVAL)
        return;
#endif
    for (uintptr_t p = a; p < b; p += ARENA_CHUNK) /* (the pages are allocated: no SIGBUS) */
        (void)*(volatile const char *)p;
}

/*
 * Allocate the pages of items [from, to) of the region at off (items of size bytes): true when
 * they are there (a file system without fallocate: taken as there).
 */
static bool reserve_pages(struct arena *a, size_t off, size_t size, uint32_t from, uint32_t to)
{
    size_t lo = (off + (size_t)from * size) & ~(size_t)(ARENA_CHUNK - 1);
    size_t hi = off + (size_t)to * size;

    if (hi <= lo)
        return true;
    return fallocate(a->fd, 0, (off_t)lo, (off_t)(hi - lo)) == 0 || errno == EOPNOTSUPP;
}

/* The entries or the chunks: where they lie in the file, and their counts in the head (and
 * in this process: arena_prefault). */
struct region {
    size_t off, size;
    void *base;
    uint32_t max;
    uint32_t *fresh, *reserved, *seen, *mapped;
};

static struct region region_of(struct arena *a, bool chunks)
{
    struct arena_head *h = a->h;

    return chunks ? (struct region){a->off_chunks, sizeof(struct arena_chunk), a->chunks,
                                    h->nchunks, &h->fresh_chunks, &h->reserved_chunks,
                                    &a->seen_chunks, &a->mapped_chunks}
                  : (struct region){a->off_entries, sizeof(struct arena_entry), a->entries,
                                    h->nentries, &h->fresh_entries, &h->reserved_entries,
                                    &a->seen_entries, &a->mapped_entries};
}

/* Fresh items of g up to n have their pages: the lock held, the pages allocated before (or
 * now, with allocate: false when there is no room). */
static bool reserve(struct arena *a, const struct region *g, uint32_t n, bool allocate)
{
    if (allocate && *g->fresh < *g->reserved)
        return true; /* one is there already */
    if (n > g->max)
        n = g->max;
    if (n <= *g->reserved)
        return true;
    if (allocate && !reserve_pages(a, g->off, g->size, *g->reserved, n))
        return false;
    *g->reserved = n;
    return true;
}

/* How far ahead of fresh (seen at the last call: *seen) to fault in. */
static uint32_t ahead(uint32_t fresh, uint32_t *seen)
{
    uint32_t took = fresh > *seen ? fresh - *seen : 0, v = took > AHEAD_MAX / 2 ? AHEAD_MAX : 2 * took;

    *seen = fresh;
    return v < AHEAD_MIN ? AHEAD_MIN : v;
}

/* arena_prefault for the entries or the chunks. */
static void prefault(struct arena *a, const struct region *g)
{
    uint32_t fresh = __atomic_load_n(g->fresh, __ATOMIC_RELAXED);
    uint32_t n = fresh + ahead(fresh, g->seen);
    bool ok;

    if (n > g->max)
        n = g->max;
    /* their pages first, without the lock (allocating megabytes takes a while; two processes
     * allocating the same pages is harmless), then the watermark under it */
    ok = reserve_pages(a, g->off, g->size, __atomic_load_n(g->reserved, __ATOMIC_RELAXED), n);
    arena_lock(a);
    if (ok)
        (void)reserve(a, g, n, false);
    n = *g->reserved;
    arena_unlock(a);
    if (n > *g->mapped) {
        populate(g->base, g->size, *g->mapped, n);
        *g->mapped = n;
    }
}

void arena_prefault(struct arena *a)
{
    struct region entries = region_of(a, false), chunks = region_of(a, true);

    if (!a->mapped_entries) /* the first time: the names too */
        populate(a->buckets, sizeof(uint32_t), 0, a->h->nbuckets);
    prefault(a, &entries);
    prefault(a, &chunks);
}

void arena_lock(struct arena *a)
{
    if (pthread_mutex_lock(&a->h->lock) == EOWNERDEAD) {
        /* its holder died, maybe half-way through a change: the lists are rebuilt */
        arena_repair(a);
        (void)pthread_mutex_consistent(&a->h->lock);
    }
}

void arena_unlock(struct arena *a)
{
    pthread_mutex_unlock(&a->h->lock);
}

struct arena_entry *arena_entry(struct arena *a, uint32_t e)
{
    return &a->entries[e - 1];
}

struct arena_chunk *arena_chunk(struct arena *a, uint32_t c)
{
    return &a->chunks[c - 1];
}

/* ---- names --------------------------------------------------------------------------------- */

uint64_t arena_name_hash(const char *turn_id, const char *project_id)
{
    uint64_t h = 1469598103934665603ull;

    for (const unsigned char *p = (const unsigned char *)project_id; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    h = (h ^ '\n') * 1099511628211ull;
    for (const unsigned char *p = (const unsigned char *)turn_id; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return h;
}

uint32_t arena_find(struct arena *a, const char *turn_id, const char *project_id)
{
    uint64_t h = arena_name_hash(turn_id, project_id);
    uint32_t e = a->buckets[h & (a->h->nbuckets - 1)];

    for (uint32_t hops = 0; e != ARENA_NONE && hops < a->h->nentries; hops++) {
        struct arena_entry *en = arena_entry(a, e);

        if (en->state != ARENA_FREE && en->hash == h && strcmp(en->meta.turn_id, turn_id) == 0 &&
            strcmp(en->meta.project_id, project_id) == 0)
            return e;
        e = en->hash_next;
    }
    return ARENA_NONE;
}

static void unhash(struct arena *a, uint32_t e)
{
    struct arena_entry *en = arena_entry(a, e);
    uint32_t *link = &a->buckets[en->hash & (a->h->nbuckets - 1)];

    for (uint32_t hops = 0; *link != ARENA_NONE && hops < a->h->nentries; hops++) {
        if (*link == e) {
            *link = en->hash_next;
            break;
        }
        link = &arena_entry(a, *link)->hash_next;
    }
    en->hash_next = ARENA_NONE;
}

/* ---- the finished list ---------------------------------------------------------------------- */

/* e out of its list (the running or the finished ones, by its state). */
static void done_unlink(struct arena *a, uint32_t e)
{
    struct arena_entry *en = arena_entry(a, e);
    uint32_t *head = en->state == ARENA_DONE ? &a->h->done_head : &a->h->run_head;
    uint32_t *tail = en->state == ARENA_DONE ? &a->h->done_tail : &a->h->run_tail;

    if (en->done_prev)
        arena_entry(a, en->done_prev)->done_next = en->done_next;
    else if (*head == e)
        *head = en->done_next;
    if (en->done_next)
        arena_entry(a, en->done_next)->done_prev = en->done_prev;
    else if (*tail == e)
        *tail = en->done_prev;
    en->done_prev = en->done_next = ARENA_NONE;
}

/* e at the end of the list of its state. */
static void list_append(struct arena *a, uint32_t e)
{
    struct arena_entry *en = arena_entry(a, e);
    uint32_t *head = en->state == ARENA_DONE ? &a->h->done_head : &a->h->run_head;
    uint32_t *tail = en->state == ARENA_DONE ? &a->h->done_tail : &a->h->run_tail;

    en->done_prev = *tail;
    en->done_next = ARENA_NONE;
    if (*tail)
        arena_entry(a, *tail)->done_next = e;
    else
        *head = e;
    *tail = e;
}

void arena_entry_done(struct arena *a, uint32_t e, int64_t finished_ms)
{
    struct arena_entry *en = arena_entry(a, e);

    done_unlink(a, e);
    en->state = ARENA_DONE;
    en->meta.state = JOURNAL_DONE;
    en->meta.finished_ms = finished_ms;
    list_append(a, e);
}

/* ---- chunks -------------------------------------------------------------------------------- */

static void chunk_free(struct arena *a, uint32_t c)
{
    struct arena_chunk *ch = arena_chunk(a, c);

    atomic_fetch_add_explicit(&ch->gen, 1, memory_order_release); /* readers' copies are void */
    ch->entry = ARENA_NONE;
    ch->next = a->h->free_chunks;
    a->h->free_chunks = c;
    a->h->used_chunks--;
}

static void chunks_free(struct arena *a, struct arena_entry *en)
{
    uint32_t c = en->first;

    for (uint32_t n = 0; c != ARENA_NONE && n < a->h->nchunks; n++) {
        uint32_t next = arena_chunk(a, c)->next;

        chunk_free(a, c);
        c = next;
    }
    en->first = en->last = ARENA_NONE;
    en->nchunks = 0;
}

/* Drop the oldest finished journal (not keep) for room: true when one went. */
static bool evict_one(struct arena *a, uint32_t keep)
{
    uint32_t e = a->h->done_head;

    if (e == keep && e != ARENA_NONE)
        e = arena_entry(a, e)->done_next;
    if (e == ARENA_NONE)
        return false;
    arena_entry_free(a, e);
    a->h->evicted++;
    return true;
}

uint32_t arena_chunk_add(struct arena *a, uint32_t e)
{
    struct arena_entry *en = arena_entry(a, e);
    struct region g = region_of(a, true);
    struct arena_chunk *ch;
    uint32_t c = ARENA_NONE;

    while (c == ARENA_NONE) {
        if (a->h->free_chunks != ARENA_NONE) {
            c = a->h->free_chunks;
            a->h->free_chunks = arena_chunk(a, c)->next;
        } else if (a->h->fresh_chunks < a->h->nchunks &&
                   reserve(a, &g, a->h->fresh_chunks + RESERVE_STEP, true)) {
            c = ++a->h->fresh_chunks;
        } else if (!evict_one(a, e)) {
            return ARENA_NONE;
        }
    }
    ch = arena_chunk(a, c);
    ch->entry = e;
    ch->next = ARENA_NONE;
    ch->line = ARENA_NO_LINE;
    ch->offset = en->last ? arena_chunk(a, en->last)->offset + ARENA_CHUNK_DATA
                          : atomic_load_explicit(&en->end, memory_order_relaxed);
    if (en->last)
        arena_chunk(a, en->last)->next = c;
    else
        en->first = c;
    en->last = c;
    en->nchunks++;
    a->h->used_chunks++;
    return c;
}

void arena_chunk_trim(struct arena *a, uint32_t e, uint64_t end)
{
    struct arena_entry *en = arena_entry(a, e);
    uint32_t c = en->first, keep = ARENA_NONE;

    for (uint32_t n = 0; c != ARENA_NONE && n < a->h->nchunks; n++) {
        struct arena_chunk *ch = arena_chunk(a, c);

        if (ch->offset >= end && ch->offset > 0)
            break;
        keep = c;
        c = ch->next;
    }
    for (uint32_t n = 0; c != ARENA_NONE && n < a->h->nchunks; n++) {
        uint32_t next = arena_chunk(a, c)->next;

        chunk_free(a, c);
        en->nchunks--;
        c = next;
    }
    if (keep != ARENA_NONE)
        arena_chunk(a, keep)->next = ARENA_NONE;
    else
        en->first = ARENA_NONE;
    en->last = keep;
}

void arena_chunk_drop_first(struct arena *a, uint32_t e)
{
    struct arena_entry *en = arena_entry(a, e);
    uint32_t c = en->first;

    if (c == ARENA_NONE || c == en->last)
        return;
    en->first = arena_chunk(a, c)->next;
    en->nchunks--;
    chunk_free(a, c);
}

/* ---- entries ------------------------------------------------------------------------------- */

static void entry_clear(struct arena_entry *en)
{
    atomic_fetch_add_explicit(&en->gen, 1, memory_order_release);
    atomic_store(&en->start, 0);
    atomic_store(&en->end, 0);
    atomic_store(&en->first_seq, 0);
    memset((void *)en->commit, 0, sizeof(en->commit));
    atomic_store(&en->commit_at, 0);
    atomic_fetch_add(&en->epoch, 1);
    atomic_store(&en->readers, 0);
    atomic_store(&en->waiters, 0);
    atomic_store(&en->reader_ms, 0);
    atomic_store(&en->writer, 0);
    en->writer_start = 0;
    memset(&en->meta, 0, sizeof(en->meta));
}

void arena_entry_free(struct arena *a, uint32_t e)
{
    struct arena_entry *en = arena_entry(a, e);

    if (en->state == ARENA_FREE)
        return;
    done_unlink(a, e);
    unhash(a, e);
    chunks_free(a, en);
    entry_clear(en);
    arena_wake(en); /* followers find it gone */
    en->state = ARENA_FREE;
    en->hash_next = a->h->free_entries; /* the free list's link */
    a->h->free_entries = e;
    a->h->used_entries--;
}

void arena_entry_reset(struct arena *a, uint32_t e)
{
    struct arena_entry *en = arena_entry(a, e);
    char turn_id[JOURNAL_ID_MAX], project_id[JOURNAL_ID_MAX];

    done_unlink(a, e);
    chunks_free(a, en);
    memcpy(turn_id, en->meta.turn_id, sizeof(turn_id));
    memcpy(project_id, en->meta.project_id, sizeof(project_id));
    entry_clear(en);
    arena_wake(en); /* followers of the turn it held find it replaced */
    memcpy(en->meta.turn_id, turn_id, sizeof(turn_id));
    memcpy(en->meta.project_id, project_id, sizeof(project_id));
    en->state = ARENA_RUNNING;
    list_append(a, e);
    arena_entry_write_by_me(en);
}

uint32_t arena_entry_new(struct arena *a, const char *turn_id, const char *project_id)
{
    struct region g = region_of(a, false);
    struct arena_entry *en;
    uint32_t e = ARENA_NONE, *bucket;

    while (e == ARENA_NONE) {
        if (a->h->free_entries != ARENA_NONE) {
            e = a->h->free_entries;
            a->h->free_entries = arena_entry(a, e)->hash_next;
        } else if (a->h->fresh_entries < a->h->nentries &&
                   reserve(a, &g, a->h->fresh_entries + RESERVE_STEP, true)) {
            e = ++a->h->fresh_entries;
        } else if (!evict_one(a, ARENA_NONE)) {
            return ARENA_NONE;
        }
    }
    en = arena_entry(a, e);
    entry_clear(en);
    en->first = en->last = ARENA_NONE;
    en->nchunks = 0;
    en->done_prev = en->done_next = ARENA_NONE;
    snprintf(en->meta.turn_id, sizeof(en->meta.turn_id), "%s", turn_id);
    snprintf(en->meta.project_id, sizeof(en->meta.project_id), "%s", project_id);
    en->hash = arena_name_hash(turn_id, project_id);
    bucket = &a->buckets[en->hash & (a->h->nbuckets - 1)];
    en->hash_next = *bucket;
    *bucket = e;
    en->state = ARENA_RUNNING;
    list_append(a, e);
    a->h->used_entries++;
    arena_entry_write_by_me(en);
    return e;
}

/* ---- writers ------------------------------------------------------------------------------- */

/* The start time of process pid (field 22 of /proc/<pid>/stat), 0 when it is gone (a zombie
 * too: it will never write again), -1 when /proc cannot tell (then it is taken as alive). */
static int64_t start_of(int32_t pid)
{
    char path[64], text[1024], *p;
    ssize_t n;
    int fd;
    unsigned long long start = 0;
    char state = 0;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ESRCH ? 0 : -1;
    n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n < 0)
        return errno == ESRCH ? 0 : -1;
    if (n == 0)
        return 0;
    text[n] = '\0';
    p = strrchr(text, ')');
    /* after the name: state, then 18 fields to the start time */
    if (!p || sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
                            "%*s %*s %llu",
                     &state, &start) != 2)
        return -1;
    return state == 'Z' || state == 'X' ? 0 : (int64_t)start;
}

/* This process's start time (read until /proc answers; a fork reads its own). */
static _Atomic int64_t my_start;
static _Atomic int32_t my_start_pid;

static int64_t self_start(void)
{
    int32_t pid = util_self_pid();

    if (atomic_load(&my_start_pid) != pid || atomic_load(&my_start) <= 0) {
        atomic_store(&my_start, start_of(pid));
        atomic_store(&my_start_pid, pid);
    }
    return atomic_load(&my_start);
}

void arena_entry_write_by_me(struct arena_entry *en)
{
    en->writer_start = self_start();
    atomic_store(&en->writer, util_self_pid());
}

bool arena_writer_alive(const struct arena_entry *en)
{
    return arena_pid_alive(atomic_load((_Atomic int32_t *)&en->writer), en->writer_start);
}

bool arena_pid_alive(int32_t pid, int64_t start)
{
    int64_t now;

    if (pid <= 0)
        return false;
    if (pid == util_self_pid())
        return start == self_start() || self_start() < 0;
    now = start_of(pid);
    /* a process that cannot be read is taken as alive: two writers would be worse than a
     * turn adopted late */
    return now < 0 || start <= 0 || now == start;
}

/* ---- followers ----------------------------------------------------------------------------- */

void arena_wake(struct arena_entry *en)
{
    if (!atomic_load(&en->waiters))
        return;
    atomic_fetch_add(&en->futex, 1);
    (void)syscall(SYS_futex, &en->futex, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void arena_wait(struct arena_entry *en, uint32_t seen, int timeout_ms)
{
    struct timespec ts = {.tv_sec = timeout_ms / 1000, .tv_nsec = (timeout_ms % 1000) * 1000000L};

    (void)syscall(SYS_futex, &en->futex, FUTEX_WAIT, seen, &ts, NULL, 0);
}
