/*
 * journal_files — the on-disk form of a turn's journal, private to the journal modules
 * (journal.c, journal_sweep.c; nothing else includes this header): one file per turn, its
 * lines, its locks, its marks (journal.h describes the layout). No state is kept here.
 *
 * Locks are open-file-description locks (F_OFD_*) on the journal file itself: byte 0 is the
 * writer's (exclusive), byte 1 the followers' (shared). They belong to an open file, not to a
 * process or a thread, and the kernel drops them when the last descriptor of that open file is
 * closed — when its process dies.
 */
#ifndef AR_JOURNAL_FILES_H
#define AR_JOURNAL_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "base/buf.h"
#include "turn/journal.h"

#define JOURNAL_SUFFIX ".turn"
#define JOURNAL_FILE_MAX (JOURNAL_NAME_LEN + sizeof(JOURNAL_SUFFIX))
#define JOURNAL_DONE_MODE 0700 /* the file's mode once its result is in (0600 before) */
#define JOURNAL_LOCK_WRITER 0  /* the lock bytes */
#define JOURNAL_LOCK_READERS 1

/* The file name of (project_id, turn_id): "<32 hex>.turn". */
int journal_files_name(const char *turn_id, const char *project_id, char out[JOURNAL_FILE_MAX]);
/*
 * One line of a journal (without its '\n'): 1 for a record "<seq> <det> <json>" (*ret_off:
 * where the json starts), 2 for a meta line "M <json>" (*ret_off likewise), -EBADMSG.
 */
int journal_files_parse_line(const char *line, size_t len, uint64_t *ret_seq, uint64_t *ret_det,
                             size_t *ret_off);
/* Fold a meta line's JSON into *m (the header sets everything, later lines what they name). */
int journal_files_meta_apply(const char *json, size_t len, struct journal_meta *m);
/* The header line of a new journal ("M {...}\n") into out. */
int journal_files_header(const struct journal_meta *m, struct buf *out);
/*
 * Read the journal on fd from offset 0 into *m (header and every meta line), and where its
 * records end: *ret_end (after the last whole line; a torn line may follow), the last record's
 * seq and det. -EBADMSG when the header is not one.
 */
int journal_files_scan(int fd, struct journal_meta *m, uint64_t *ret_end, uint64_t *ret_seq,
                       uint64_t *ret_det);
/* Take (F_OFD_SETLK) lock byte `which`, exclusive or shared, without waiting: 0, -EAGAIN. */
int journal_files_lock(int fd, int which, bool exclusive);
void journal_files_unlock(int fd, int which);
/* Whether someone else holds lock byte `which` (a probe that takes nothing). */
bool journal_files_locked(int fd, int which, bool exclusive);

#endif
