/*
 * journal_sweep — what the master, the workers' orphan scan and agent-runner-ctl do with all
 * the journals under a root (journal.h): list them, and the master's sweep once a second that
 * removes expired and abandoned ones and keeps their total under its cap. The sweep reads one
 * stat per journal (mode: done or not; ctime: when it finished; mtime: its last write; blocks:
 * its size on disk) and opens only those it removes.
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
    char name[JOURNAL_NAME_LEN + 8];
    struct journal_meta meta;
    uint64_t last_seq;
    uint64_t bytes; /* on disk (holes excluded) */
    bool writer_alive;
    int64_t changed_ms; /* wall clock of the last write */
};

/*
 * The journals under root, each read whole (meta and last seq): a new array (free it) and its
 * length; with orphans_only, only the unfinished ones no writer holds (the orphan scan: the
 * others cost one stat, or a stat and a lock probe). An empty list when root does not exist.
 */
int journal_sweep_list(const char *root, bool orphans_only, struct journal_entry **ret,
                       size_t *ret_n);

/* What a sweep removed. */
struct journal_sweep_stats {
    uint32_t expired;   /* finished longer than keep_ms ago */
    uint32_t abandoned; /* no writer and no write for keep_ms */
    uint32_t evicted;   /* finished ones removed, oldest first, to fit total_bytes */
    uint64_t bytes;     /* what is left, on disk */
    uint32_t count;     /* how many are left */
};

/*
 * The master's sweep (once a second): remove expired and abandoned journals, then the oldest
 * finished ones while all of them together hold more than total_bytes on disk. A running
 * turn's journal is never removed for space (its own bound limits it).
 */
int journal_sweep_run(const char *root, const struct turn_settings *ts, int64_t now_wall_ms,
                      struct journal_sweep_stats *ret);

#endif
