/*
 * journal_sweep — what the master, the workers' orphan scan and agent-runner-ctl do with all
 * the journals under a root (journal.h): list them, and the master's sweep once a second that
 * drops expired and abandoned ones and keeps their total under its cap. Both walk the arena's
 * entries under its lock (journal_arena.h); a running journal's writer is looked at in /proc.
 */
#ifndef AR_JOURNAL_SWEEP_H
#define AR_JOURNAL_SWEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/contracts.h"
#include "turn/journal.h"

/* One journal as agent-runner-ctl lists it. */
struct journal_entry {
    char name[JOURNAL_NAME_LEN + 8]; /* the hash of its name, in hex */
    struct journal_meta meta;
    uint64_t last_seq;
    uint64_t bytes; /* the chunks it holds */
    bool writer_alive;
    int64_t changed_ms; /* wall clock of the last write */
};

/*
 * The journals under root, each read whole (meta and last seq): a new array (free it) and its
 * length; with orphans_only, only the unfinished ones no writer holds (the orphan scan). An
 * empty list when root has no journals.
 */
int journal_sweep_list(const char *root, bool orphans_only, struct journal_entry **ret,
                       size_t *ret_n);

/* What a sweep removed. */
struct journal_sweep_stats {
    uint32_t expired;   /* finished longer than keep_ms ago */
    uint32_t abandoned; /* no writer and no write for keep_ms */
    uint32_t evicted;   /* finished ones removed, oldest first, to fit total_bytes */
    uint64_t bytes;     /* what is left (chunks) */
    uint32_t count;     /* how many are left */
};

/*
 * The master's sweep (once a second): drop expired journals (and, every 30 s, abandoned ones:
 * running, no writer, no record for keep_ms), then the oldest
 * finished ones while all of them together hold more than total_bytes. A running turn's
 * journal is never dropped for space (its own bound limits it); a new journal or chunk that
 * finds the arena full drops the oldest finished one itself.
 */
int journal_sweep_run(const char *root, const struct turn_settings *ts, int64_t now_wall_ms,
                      struct journal_sweep_stats *ret);

#endif
