/*
 * journal_arena — where the journals live: one shared-memory file per root, mapped by every
 * process of the host that writes or reads turns (workers, the master's sweep,
 * agent-runner-ctl). Private to the journal modules (journal.c, journal_sweep.c).
 *
 * Layout (<root>/journal.arena, made by the first process that needs it; its size is fixed
 * then, from total_bytes): a header (its lock, the free lists, the oldest-finished-first list),
 * a hash table of turn names, one entry per journal (its meta and state, its chain of chunks,
 * its writer), and the chunks: 4 KiB each, a header and the bytes of the journal's stream of
 * records ("<seq> <det> <json>\n", one after the other across its chunks). The file is sparse:
 * a page is allocated when first written.
 *
 * The lock (a robust process-shared mutex: a process that dies holding it leaves it to the
 * next) guards the lists, the hash table and every entry's identity and chain; it is taken to
 * make, finish, take over, list and sweep a journal and when a chunk fills (once per 4 KiB of
 * records). A record is appended without it: its writer (one thread, holding the entry) copies
 * it into its last chunk and publishes the new end of the stream (a release store); readers copy
 * what is before the end and check afterwards that the chunks they read were not given to
 * another journal meanwhile (a chunk's generation).
 *
 * A writer is a process (pid and start time): alive while that process is. A journal whose
 * writer died is an orphan: whoever takes it over (journal_take_over) becomes its writer.
 */
#ifndef AR_JOURNAL_ARENA_H
#define AR_JOURNAL_ARENA_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/contracts.h"
#include "turn/journal.h"

#define ARENA_CHUNK 4096u
#define ARENA_CHUNK_HEAD 32u
#define ARENA_CHUNK_DATA (ARENA_CHUNK - ARENA_CHUNK_HEAD)
#define ARENA_NONE 0u /* list links and chunk / entry references are index + 1 */
#define ARENA_NO_LINE UINT32_MAX

enum arena_state { ARENA_FREE = 0, ARENA_RUNNING, ARENA_DONE };

struct arena_chunk {
    _Atomic uint32_t gen; /* bumped when the chunk is freed: a reader's copy is then void */
    uint32_t entry;       /* its journal (+1), ARENA_NONE when free */
    uint32_t next;        /* the journal's next chunk, or the free list's (+1) */
    uint32_t line;        /* where in data the first line that starts here starts */
    uint64_t offset;      /* the stream offset of data[0] */
    uint64_t spare;
    char data[ARENA_CHUNK_DATA];
};

struct arena_entry {
    uint32_t state;
    _Atomic uint32_t gen; /* bumped when the entry is freed or made anew */
    uint32_t hash_next;   /* the bucket's next entry (+1) */
    uint32_t done_prev, done_next; /* its list (+1): the running or the finished ones */
    uint32_t first, last;          /* its chunks (+1) */
    uint32_t nchunks;
    _Atomic int32_t writer; /* pid, 0 when none */
    int32_t pad;
    int64_t writer_start;   /* the writer's start time (clock ticks after boot) */
    _Atomic int64_t changed_ms;
    _Atomic int64_t reader_ms;  /* a follower's last sign of life (wall clock) */
    _Atomic uint32_t readers;   /* followers that opened it and have not closed it */
    _Atomic uint32_t waiters;   /* followers asleep on futex */
    _Atomic uint32_t futex;     /* bumped when the stream grows while someone waits */
    uint32_t pad2;
    _Atomic uint64_t start;     /* the stream offset of its oldest kept record */
    _Atomic uint64_t end;       /* the end of what is written (readers read up to it) */
    _Atomic uint64_t first_seq; /* the oldest kept record's seq (0: none) */
    /* the last record: its end, seq and det, written into the slot not in use and then made
     * the one in use, so that a writer killed at any point leaves a whole one for its taker */
    struct arena_commit {
        _Atomic uint64_t end, seq, det;
    } commit[2];
    _Atomic uint32_t commit_at;
    _Atomic uint32_t epoch; /* bumped by a take-over: the writer before it can write no more */
    uint64_t hash;
    struct journal_meta meta;
};

struct arena_head {
    uint64_t magic;
    uint32_t version;
    uint32_t nentries, nchunks, nbuckets;
    pthread_mutex_t lock;
    uint32_t free_entries, free_chunks; /* recycled ones (+1) */
    uint32_t fresh_entries, fresh_chunks; /* never used yet: from here on */
    uint32_t done_head, done_tail; /* the finished journals, oldest first */
    uint32_t run_head, run_tail;   /* the running ones */
    uint32_t used_chunks;
    uint32_t used_entries;
    /* fresh ones are handed out only below these: their pages are allocated in the file
     * (fallocate), so that a full file system is -ENOSPC and not a SIGBUS */
    uint32_t reserved_entries, reserved_chunks;
    uint32_t entry_size, chunk_size, head_size; /* what the maker's build laid out */
    uint64_t evicted; /* finished journals dropped for room, ever */
};

struct arena {
    int fd; /* the file's, kept for fallocate */
    size_t off_entries, off_chunks;
    struct arena_head *h;
    uint32_t *buckets;
    struct arena_entry *entries;
    struct arena_chunk *chunks;
    size_t size;
    int64_t next_scan_ms; /* this process's next look at every entry (journal_sweep_run) */
    uint32_t mapped_entries, mapped_chunks; /* this process has these in its page tables */
    uint32_t seen_entries, seen_chunks;     /* fresh ones at its last arena_prefault */
};

/*
 * The arena under root, mapped (once per process; kept for its life). With ts, made when
 * missing (total_bytes of chunks); without, -ENOENT when missing. -errno.
 */
int arena_get(const char *root, const struct turn_settings *ts, struct arena **ret);

/*
 * Fault in, in this process, the entries and chunks in use and the next ones to be used: twice
 * what the arena took since the last call (4 MiB at least, 64 MiB at most) beyond what it used
 * so far. A new page of a tmpfs costs a fault, an allocation and a clear, a page another
 * process wrote first a fault: off the turns' way (a worker's background thread, every
 * second), a journal's records are plain copies. Once the arena has been used whole, every
 * page is in every worker's page tables.
 */
void arena_prefault(struct arena *a);

/* Take the arena's lock; when its holder died, arena_repair first. */
void arena_lock(struct arena *a);
void arena_unlock(struct arena *a);

/*
 * The lock's holder died, maybe half-way through a change (journal_sweep.c): the entries and
 * their chains are what counts; a journal whose chain is broken (a chunk out of range, another
 * journal's, or met twice) is dropped; the free lists, the names, the finished list (by finish
 * time) and the counts are made again from the rest. The lock held.
 */
void arena_repair(struct arena *a);
uint64_t arena_name_hash(const char *turn_id, const char *project_id);

/* The entry of (project_id, turn_id) (+1), ARENA_NONE (lock held). */
uint32_t arena_find(struct arena *a, const char *turn_id, const char *project_id);
/*
 * A new entry for (project_id, turn_id) in the hash table, state RUNNING, written by this
 * process (lock held); the oldest finished journal is dropped when there is no room: its
 * index (+1), or ARENA_NONE.
 */
uint32_t arena_entry_new(struct arena *a, const char *turn_id, const char *project_id);
/* Empty an entry of its chunks and readers for a new turn of the same name (lock held). */
void arena_entry_reset(struct arena *a, uint32_t e);
/* Drop an entry: its chunks, its name (lock held). */
void arena_entry_free(struct arena *a, uint32_t e);
/* The result is in: the entry joins the finished list (lock held). */
void arena_entry_done(struct arena *a, uint32_t e, int64_t finished_ms);
/* A chunk for the end of entry e's stream (lock held): its index (+1), ARENA_NONE when full. */
uint32_t arena_chunk_add(struct arena *a, uint32_t e);
/* Drop e's chunks that start at or after stream offset end (lock held): a record that did not
 * fit. */
void arena_chunk_trim(struct arena *a, uint32_t e, uint64_t end);
/* Drop e's oldest chunk (lock held; not its last one). */
void arena_chunk_drop_first(struct arena *a, uint32_t e);

struct arena_entry *arena_entry(struct arena *a, uint32_t e);
struct arena_chunk *arena_chunk(struct arena *a, uint32_t c);

/* This process as a writer: it becomes e's writer. */
void arena_entry_write_by_me(struct arena_entry *en);
/* e's writer lives. */
bool arena_writer_alive(const struct arena_entry *en);
/* The process pid that started at start (arena_entry.writer_start) lives. */
bool arena_pid_alive(int32_t pid, int64_t start);

/* Wake the followers of e asleep in arena_wait. */
void arena_wake(struct arena_entry *en);
/* Sleep at most timeout_ms while e's futex still holds seen. */
void arena_wait(struct arena_entry *en, uint32_t seen, int timeout_ms);

#endif
