/*
 * journal — the records of a streamed turn kept outside the worker process that streams them,
 * so that any worker of the host can answer GET /turns/{id}/events and carry a turn on when
 * its worker died (engine_turns.c). A file, not the session table: a record is one write(2) to
 * a file in the page cache, which outlives the process that wrote it, and any number of
 * followers read it without asking the writer for anything.
 *
 * Layout: one file per turn, <root>/<name>.turn (root is <state_dir>/turns, 0700), name = 32
 * hex digits of sha256(projectId "\n" turnId): a turn is found only with the project it ran
 * in, and a turn id is never a file name. Its lines:
 *   M <json>               meta: the first line {turnId, projectId, sessionKey, pid,
 *                          createdMs, detached}; later ones add {slot: {index, generation}}
 *                          (the prompt went to the harness of that slot), {pid} (a worker
 *                          took the turn over), {finishedMs} (the result is in)
 *   <seq> <det> <record>   a record: the NDJSON line the client got, its seq, and det, the
 *                          count of the turn's own events so far (keepalives excluded: what a
 *                          replay of the harness's lines reproduces)
 * Open-file-description locks on the file (journal_files.h): the writer holds byte 0 while the
 * turn runs — the kernel drops it when the writer's process dies, which is how the others see
 * the death, and whoever takes it next is the one writer (journal_take_over); each follower
 * holds byte 1 shared, so the writer sees whether anyone follows (journal_has_readers). A
 * finished journal is marked with mode 0700 (its ctime: when it finished), so the sweep tells
 * done from running with one stat.
 *
 * The bound: once the newest turn_bytes / 2 of records are in, everything older (after the
 * header) is punched out of the file (fallocate PUNCH_HOLE; a hole reads as NUL bytes and ends
 * at a line start), so a turn keeps between turn_bytes / 2 and turn_bytes, oldest records first
 * out; a cursor older than what is kept gets -ERANGE and the oldest seq kept. All journals
 * together are bounded by the master's sweep (journal_sweep.h).
 *
 * Spares: the file of a new journal is not made on the turn's way but linked from a spare made
 * ahead, an unnamed file (O_TMPFILE) under the same root, locked, its first page allocated (a
 * name in use takes the old path). Unnamed, a spare is seen by no sweep or listing, and it is
 * gone with its descriptor. Who makes them, and who ends a journal after its response in a
 * worker process (the background mode below): journal_spares.h.
 *
 * One writer per journal (one thread); readers in any process. Records are written in batches,
 * one write on O_APPEND each; a follower that meets a line without its '\n' waits for the rest,
 * and a writer that takes over a dead one's journal first cuts such a torn last line off.
 */
#ifndef AR_JOURNAL_H
#define AR_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"
#include "core/contracts.h"

#define JOURNAL_NAME_LEN 32 /* hex digits of a turn's file name */
#define JOURNAL_ID_MAX 129  /* turnId / projectId, NUL included */
#define JOURNAL_KEY_MAX 272 /* the session key, NUL included */

enum journal_state { JOURNAL_RUNNING = 0, JOURNAL_DONE };

struct journal_meta {
    char turn_id[JOURNAL_ID_MAX];
    char project_id[JOURNAL_ID_MAX];
    char session_key[JOURNAL_KEY_MAX];
    int32_t pid;        /* the writer (after a take-over and before journal_note_writer: the
                           dead one) */
    int64_t created_ms; /* wall clock */
    int64_t finished_ms;
    bool detached;
    enum journal_state state;
    bool has_slot; /* the prompt went to the harness of this session table slot */
    uint32_t slot_index;
    uint32_t slot_generation;
};

/* ---- the writer ------------------------------------------------------------------------ */

struct journal;

/*
 * Start the journal of a turn under root (made when missing) and take its writer lock. A
 * finished or abandoned journal of the same name is replaced; -EEXIST when a live writer holds
 * it (the turn id is in use). -ENAMETOOLONG, -errno.
 */
int journal_create(const char *root, const struct turn_settings *ts, const char *turn_id,
                   const char *project_id, const char *session_key, bool detached,
                   struct journal **ret);
/* journal_create for a prompt that goes to the harness of slot (index, generation): the
 * header and the slot line (journal_set_slot) in one write. */
int journal_create_at_slot(const char *root, const struct turn_settings *ts, const char *turn_id,
                           const char *project_id, const char *session_key, bool detached,
                           uint32_t index, uint32_t generation, struct journal **ret);
/*
 * journal_create_at_slot without the file: the header and slot line are queued in memory, and
 * the file is made at journal_link, or at the first write (journal_flush, _finish, _close,
 * _end_later). A warm turn's journal is prepared before its prompt goes out and linked after:
 * the file is made while the keeper and the harness work, not before. A worker that dies in
 * between leaves no file; the keeper, which holds the turn, makes it from what "#turn" told it
 * (journal_recreate). Until it is linked a journal has no readers.
 */
int journal_prepare_at_slot(const char *root, const struct turn_settings *ts, const char *turn_id,
                            const char *project_id, const char *session_key, bool detached,
                            uint32_t index, uint32_t generation, struct journal **ret);
/* Make a prepared journal's file now and write what is queued. 0 (also when it has one),
 * -errno (then its records go nowhere). */
int journal_link(struct journal *j);
bool journal_linked(const struct journal *j);
/* A prepared journal not linked yet: its file's path and what it queued (the header and slot
 * lines, the records so far), what journal_recreate needs. -EALREADY once it has its file. */
int journal_unlinked_head(const struct journal *j, const char **ret_path, const char **ret_head,
                          size_t *ret_len);
/*
 * The keeper's part (journal_recreate.c: libc only, for the keeper), when the worker of a warm
 * turn died before its prepared journal had a file: unless the file at path starts with head
 * (the worker made it), make it (head alone, no writer), so that a reattach or the
 * orphan scan finds the turn and adopts it from the keeper. 1 made, 0 it was there, -EEXIST a
 * live writer holds that name, -errno.
 */
int journal_recreate(const char *path, const char *head, size_t len);
/*
 * Keep one record (len bytes, '\n' included) numbered seq, with det of the turn's own events
 * so far: queued, and written by journal_flush (or at once past 256 KiB queued). -errno (the
 * record is lost for reattach; the caller goes on streaming).
 */
int journal_append(struct journal *j, uint64_t seq, uint64_t det, const char *line, size_t len);
/*
 * Write what is queued, in one write (the event stream does it when someone reads the journal
 * now, and at the result; see event_stream_flush); the bound drops the oldest records once it
 * is reached. -errno.
 */
int journal_flush(struct journal *j);
/* Bytes queued and not written yet. */
size_t journal_queued(const struct journal *j);
/* The prompt went to the harness of slot (index, generation): a dead writer's turn can be
 * adopted from there. */
int journal_set_slot(struct journal *j, uint32_t index, uint32_t generation);
/* This process writes the journal now (after journal_take_over, once it owns the turn). */
int journal_note_writer(struct journal *j);
/* The result record is in: the journal is kept for keep_ms from now. */
int journal_finish(struct journal *j);
/* Someone follows the turn (GET /turns/{id}/events). */
bool journal_has_readers(struct journal *j);
/* The last record's seq and det (0, 0 before the first). */
void journal_last(const struct journal *j, uint64_t *ret_seq, uint64_t *ret_det);
const struct journal_meta *journal_meta_of(const struct journal *j);
/* Drop the writer lock and free. NULL is a no-op. */
void journal_close(struct journal *j);
/*
 * journal_finish and journal_close, later: when this thread calls journal_end_deferred (its
 * request is answered), ends another journal the same way, or exits. What is queued and the
 * finishedMs line are written now, in one write (the result record is in the file before the
 * caller's client has all of it); the finished mode and the close come later.
 */
void journal_end_later(struct journal *j);
/* Finish and close this thread's journal left by journal_end_later, if any (in background
 * mode: queued for the helper). */
void journal_end_deferred(void);
/*
 * Background mode for a worker process: a helper thread of the lowest priority ends the
 * journals journal_end_deferred hands it (finished mark, close) and keeps a small pool of
 * spares for every thread, off the turns' way; one that falls behind is passed by (the
 * answering thread ends its journal and makes its own spare). 0, or -errno (no helper: all
 * stays on the answering thread).
 */
int journal_background(void);
/* Wait until deadline_ms (monotonic) for the helper to have ended what it was handed. */
void journal_background_drain(int64_t deadline_ms);
/* Back to ending journals on the answering thread (the helper's work drained, its spares
 * closed; the thread stays, idle). For tests. */
void journal_background_off(void);

/* ---- readers ----------------------------------------------------------------------------- */

struct journal_reader;

/*
 * Open the journal of (project_id, turn_id) for the records with seq > after, as a follower.
 * -ENOENT when there is none (unknown, expired, another project's); -ERANGE when the oldest
 * record still kept is newer than after + 1 (*ret_oldest: its seq).
 */
int journal_open(const char *root, const char *turn_id, const char *project_id, uint64_t after,
                 struct journal_reader **ret, uint64_t *ret_oldest);
/*
 * The next record into out (the client's line, '\n' included; out is reset first): 1, with
 * its seq and whether it is the result record; 0 when there is none yet; -ERANGE when the
 * reader fell so far behind that the records it needs were dropped; -errno.
 */
int journal_read(struct journal_reader *r, struct buf *out, uint64_t *ret_seq, bool *ret_result);
/* Wait at most timeout_ms for the journal to change. */
void journal_wait(struct journal_reader *r, int timeout_ms);
/* A writer holds the journal (its process lives). */
bool journal_writer_alive(struct journal_reader *r);
/*
 * Become the writer of a journal whose writer died: -EBUSY when a writer holds it. A torn
 * last line is cut off; the new writer appends after the last whole record, and the reader
 * goes on from there (read what it had not read first).
 */
int journal_take_over(struct journal_reader *r, const struct turn_settings *ts,
                      struct journal **ret);
void journal_reader_free(struct journal_reader *r);

#endif
