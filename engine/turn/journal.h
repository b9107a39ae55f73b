/*
 * journal — the records of a streamed turn kept outside the worker process that streams them,
 * so that any worker of the host can answer GET /turns/{id}/events and carry a turn on when
 * its worker died (engine_turns.c). In shared memory, not in a file per turn: a record is a
 * copy into memory that outlives the process that wrote it, a turn's journal costs no file,
 * no name in a directory and no system call, and any number of followers read it without
 * asking the writer for anything.
 *
 * Where: one arena per root (<root>/journal.arena on a tmpfs, root being <state>/turns: see
 * journal_arena.h), mapped by the workers, the master (its sweep) and agent-runner-ctl. A
 * journal is an entry of the arena found by its name (project and turn id: a turn is found
 * only with the project it ran in) and a chain of 4 KiB chunks holding its records, each the
 * NDJSON line the client got with its seq and det before it ("<seq> <det> <record>"; det: the
 * count of the turn's own events so far, keepalives excluded — what a replay of the harness's
 * lines reproduces). Its meta (struct journal_meta) is in the entry.
 *
 * The writer is a process: the entry names it (pid and start time), and a journal whose
 * writer's process is gone is an orphan, taken over by whoever comes for it next
 * (journal_take_over). A record is in the journal, for every reader, when journal_append
 * returns; followers sleep on the entry (a futex) and are woken by the next record.
 *
 * The bound: once a turn's records hold more than turn_bytes, its oldest chunks are dropped (the
 * records that start in them; a record is never cut), so a cursor older than what is kept gets
 * -ERANGE and the oldest seq kept. All journals together are bounded by the arena's size
 * (total_bytes, fixed when it is made): a new journal or chunk that finds no room drops the
 * oldest finished journal; the master's sweep drops expired and abandoned ones
 * (journal_sweep.h).
 */
#ifndef AR_JOURNAL_H
#define AR_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"
#include "core/contracts.h"

#define JOURNAL_NAME_LEN 32 /* room for a journal's name in hex (journal_entry) */
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
 * Start the journal of a turn under root (the arena made when missing), this process its
 * writer. A finished or abandoned journal of the same name is replaced; -EEXIST when a live
 * writer holds it (the turn id is in use); -ENOSPC when the arena has no room (running
 * journals fill it). -ENAMETOOLONG, -errno.
 */
int journal_create(const char *root, const struct turn_settings *ts, const char *turn_id,
                   const char *project_id, const char *session_key, bool detached,
                   struct journal **ret);
/* journal_create for a prompt that goes to the harness of slot (index, generation): named in
 * its meta from the start (journal_set_slot). */
int journal_create_at_slot(const char *root, const struct turn_settings *ts, const char *turn_id,
                           const char *project_id, const char *session_key, bool detached,
                           uint32_t index, uint32_t generation, struct journal **ret);
/*
 * Keep one record (len bytes, '\n' included) numbered seq, with det of the turn's own events
 * so far: followers have it when this returns. -errno (the record is lost for reattach; the
 * caller goes on streaming): -ENOSPC (no room), -ESTALE (the journal was swept or taken over).
 */
int journal_append(struct journal *j, uint64_t seq, uint64_t det, const char *line, size_t len);
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
/* Free; a journal left unfinished has no writer from now (an orphan). NULL is a no-op. */
void journal_close(struct journal *j);

/*
 * Map root's journals (made when missing) and fault in the memory the next journals of this
 * process will use, so that writing them costs no page fault on a turn's way: a worker's
 * background thread calls it every second. -errno.
 */
int journal_prefault(const char *root, const struct turn_settings *ts);

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
/* The journal is finished and this reader has read all of it (or the journal is gone). */
bool journal_reader_done(struct journal_reader *r);
/* The journal has a writer, and its process lives. */
bool journal_writer_alive(struct journal_reader *r);
/*
 * Become the writer of a journal whose writer died: -EBUSY when a live writer holds it,
 * -EALREADY when it is finished, -ENOENT when it is gone. The new writer appends after the
 * dead one's last whole record (what it was copying when it died is dropped); the reader goes
 * on where it was (it still reads the records it had not read).
 */
int journal_take_over(struct journal_reader *r, const struct turn_settings *ts,
                      struct journal **ret);
void journal_reader_free(struct journal_reader *r);

/* One record's line ("<seq> <det> <json>", without '\n'): 0 and where the json starts,
 * -EBADMSG. */
int journal_parse_line(const char *line, size_t len, uint64_t *ret_seq, uint64_t *ret_det,
                       size_t *ret_off);

#endif
