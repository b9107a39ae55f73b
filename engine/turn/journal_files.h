/*
 * journal_files — the on-disk form of a turn's journal, private to the journal modules
 * (journal.c, journal_sweep.c; nothing else includes this header): the folder and its meta
 * file, the segments and their record lines (journal.h describes the layout). Every function
 * works on an open folder descriptor; none keeps state.
 */
#ifndef AR_JOURNAL_FILES_H
#define AR_JOURNAL_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "turn/journal.h"

#define JOURNAL_SEG_PREFIX "seg-"

/* snprintf of src (NULL: "") into dst. */
void journal_files_copy_str(char *dst, size_t size, const char *src);
/* Parse a record line's "<seq> <det> " prefix: the record's offset in line, or -EBADMSG. */
int journal_files_parse_line(const char *line, size_t len, uint64_t *ret_seq, uint64_t *ret_det);
/* Write the meta file whole (temp + rename). -errno. */
int journal_files_meta_write(int dirfd, const struct journal_meta *m);
/* Read it: -ENOENT, -EBADMSG, -errno. */
int journal_files_meta_read(int dirfd, struct journal_meta *ret);
/* Open segment n with flags (O_CLOEXEC | O_NOFOLLOW added): the fd or -1 with errno. */
int journal_files_open_seg(int dirfd, uint64_t n, int flags);
void journal_files_unlink_seg(int dirfd, uint64_t n);
/* The segment numbers, ascending: a new array (may be empty) and its length. */
int journal_files_list_segs(int dirfd, uint64_t **ret, size_t *ret_n);
/* The seq of segment n's first record: 1, 0 when it has none yet, -errno. */
int journal_files_first_seq(int dirfd, uint64_t n, uint64_t *ret_seq);
/* The seq/det of the last whole record of the segment open on fd: 1, 0 none; *ret_end is
 * where that record ends (a torn line may follow). */
int journal_files_seg_last(int fd, uint64_t *ret_seq, uint64_t *ret_det, off_t *ret_end);
/* The same, and the torn line after it cut off (fd read-write); *ret_size the new length. */
int journal_files_seg_tail(int fd, uint64_t *ret_seq, uint64_t *ret_det, uint64_t *ret_size);
/* Open root/name as a folder (made 0700 first when create): *ret_fd. -errno. */
int journal_files_open_dir(const char *root, const char *name, bool create, int *ret_fd);
/* Remove the segments and the meta file of a folder whose writer lock the caller holds. */
void journal_files_clear_dir(int dirfd);

#endif
