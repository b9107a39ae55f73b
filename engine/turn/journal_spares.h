/*
 * journal_spares — the files a journal is made from, and what follows a turn's response
 * (private to journal.c; the background mode's switches are in journal.h).
 *
 * A spare is an unnamed journal file (O_TMPFILE) under the journal folder, writer-locked, its
 * first page allocated, made off a turn's way so that the turn's journal starts with one link
 * at its name instead of a file creation and a page allocation. Nothing lists or sweeps an
 * unnamed file; it is gone with its descriptor.
 *
 * Without background mode each thread keeps one, made after its journal closed (its turn's
 * response is out). In background mode (journal_background, a worker process) a helper thread
 * that runs only when a core is otherwise idle keeps a pool for every thread and also writes
 * the finished mark and close of answered turns' journals, in batches (a wake is a context
 * switch); one that falls behind is passed by.
 */
#ifndef AR_JOURNAL_SPARES_H
#define AR_JOURNAL_SPARES_H

#include <stdbool.h>

struct journal;

/*
 * A spare linked at path: its fd (locked, empty, 0600); -EEXIST when path exists (a pooled
 * spare is closed, a thread's stays), another -errno when there is none for root.
 */
int journal_spare_take(const char *root, const char *path);
/* A journal made by journal_create closed: the next one's spare (the thread's, or the pool's). */
void journal_spare_closed(const char *root);
/* Background mode: the helper ends j (journal_finish, journal_close) soon; false: do it now. */
bool journal_spare_end_later(struct journal *j);

#endif
