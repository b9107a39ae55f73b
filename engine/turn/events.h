/*
 * events — build AgentEvents (the `event` objects a run's response carries: message_*,
 * thought_*, tool_call, tool_result, interaction_*, usage, error, ...) and deliver them.
 *
 * A struct event_stream has two modes:
 *   - streaming: each event is written at once as one NDJSON record
 *     {"kind":"event","seq":N,"event":{...}}\n through the sink, which must flush it to the
 *     client; records are numbered 1, 2, 3, ... within the turn (the result record too), the
 *     first names the turn ("turnId"), and each is also kept in the turn's journal when the
 *     stream has one (turn/journal.h), also after the client went away;
 *   - collecting (one-shot JSON path): events are kept, with message_* and thought_* deltas
 *     coalesced into single {"type":"message","text":...} / {"type":"thought",...} events.
 * The stream also records when the last event left (run limits use it) and whether the sink
 * failed (the client is gone).
 */
#ifndef AR_EVENTS_H
#define AR_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "core/contracts.h"

struct event_sink {
    /*
     * Write len bytes (one complete NDJSON line, '\n' included); <0 = client gone. Without a
     * flush callback every line must be flushed here; with one, lines may be buffered until
     * flush() is called, which the engine does before every wait (so nothing that exists is
     * ever held back while the turn waits for more).
     */
    int (*write_line)(void *ctx, const char *line, size_t len);
    int (*flush)(void *ctx); /* may be NULL */
    /* false once the client is known to be gone, without writing (may be NULL) */
    bool (*client_alive)(void *ctx);
    void *ctx;
};

struct journal;

struct event_stream {
    struct event_sink sink;
    bool streaming;
    bool client_gone;
    int64_t client_gone_ms; /* monotonic, when client_gone was first seen */
    /*
     * Numbered records (streaming): seq is the last number given; det counts the turn's own
     * events (a keepalive is not one: it depends on the clock, not on what the harness said).
     * A turn adopted from a dead worker replays the harness's lines through the translator,
     * which rebuilds the events the dead worker already delivered: those with det <= skip_det
     * are dropped, the next one gets the number after the journal's last.
     */
    uint64_t seq;
    uint64_t det;
    uint64_t skip_det;
    /* records with seq <= sink_after are journaled, not written: the client has them (an
     * adoption rebuilds what the journal missed) */
    uint64_t sink_after;
    const char *turn_id;        /* named in the first record (borrowed; NULL: not named) */
    struct journal *journal;    /* owned (journal_close at release); NULL: not journaled */
    /*
     * A journal to open at its first need (event_stream_journal_open): the first record, or
     * before a warm turn's prompt (engine_turns_journal_now). Cleared once called.
     */
    int (*journal_opener)(void *ctx, struct journal **ret);
    void *journal_opener_ctx;
    bool result_written;        /* event_stream_result wrote the result record */
    int64_t last_write_ms;      /* monotonic: the last record (keepalives count) */
    uint64_t keepalive_ms;      /* 0: no keepalives */
    bool unflushed;             /* lines written to the sink since its last flush */
    uint64_t nevents;
    int64_t first_event_ms; /* monotonic, 0 until the first event */
    int64_t last_event_ms;
    int64_t first_output_ms; /* the first event that is not a `data` status event */
    /* sees every event before it is delivered (tracing); may be NULL */
    void (*observe)(void *ctx, json_object *ev);
    void *observe_ctx;
    /* collecting mode */
    json_object *collected;
    int open_kind; /* 0 none, 1 message, 2 thought */
    struct buf pending;
};

/* sink may be NULL: collecting mode. */
void event_stream_init(struct event_stream *es, const struct event_sink *sink);
void event_stream_release(struct event_stream *es);

/* Deliver one event; takes ownership of ev. Returns <0 only for -ENOMEM; a failed sink sets
 * client_gone and the event is dropped (the turn decides what a gone client means). */
int event_emit(struct event_stream *es, json_object *ev);

/*
 * Streaming: the result record {"kind":"result","seq":N,"result":...}, journaled (the journal
 * is then finished: kept for its keep window) and written through the sink, flushed. payload
 * is borrowed. -ENOMEM, or 0 (a gone client does not fail it).
 */
int event_stream_result(struct event_stream *es, json_object *payload);

/*
 * Keepalives: when the stream wrote nothing for keepalive_ms, the monotonic time the next one
 * is due (0: never); event_stream_keepalive writes one — a transient `data` agent-status event
 * with phase `working`, journaled and numbered like any record but not one of the turn's own
 * events (no observer sees it, run limits do not count it).
 */
int64_t event_stream_keepalive_at(const struct event_stream *es);
void event_stream_keepalive(struct event_stream *es);
/* Open the journal the stream is to have (journal_opener), if it is not open yet; a journal
 * that cannot be opened leaves the turn unjournaled (logged). */
void event_stream_journal_open(struct event_stream *es);

/* Push out what the sink buffered (no-op when nothing is pending or the sink has no flush). */
void event_stream_flush(struct event_stream *es);

/* false when the client went away (a failed write, or the sink's probe says so). */
bool event_stream_client_alive(struct event_stream *es);

/* Move the coalesced events out (a new array, never NULL) for the one-shot result. */
json_object *event_stream_take(struct event_stream *es);

/* Serialise {"kind":kind,"<kind>":payload}\n into out. payload is borrowed. */
int events_record_line(const char *kind, json_object *payload, struct buf *out);
/* The same numbered: {"kind":kind,"seq":seq[,"turnId":turn_id],"<kind>":payload}\n. */
int events_record_line_seq(const char *kind, json_object *payload, uint64_t seq,
                           const char *turn_id, struct buf *out);

/* Builders: each returns a new reference (NULL only on out of memory). */
json_object *event_new(const char *type);
json_object *event_data_phase(const char *phase);
/* The environment_ready phase, saying whether the environment was a claimed spare (spare.h). */
json_object *event_environment_ready(bool spare);
/*
 * The environment_ready phase of a cold start: spare as above, resume how the conversation
 * reached the harness ("new", "replay", "load"), note why a kept harness state was not loaded
 * (NULL or "": none).
 */
json_object *event_environment_ready_cold(bool spare, const char *resume, const char *note);
json_object *event_text(const char *type, const char *id, const char *delta);
json_object *event_block(const char *type, const char *id); /* *_start / *_end */
json_object *event_tool_call(const char *id, const char *name, json_object *input);
json_object *event_tool_result(const char *id, const char *output, bool is_error, bool denied);
json_object *event_usage(const struct run_usage *u);
json_object *event_error(const char *message, const char *code);
json_object *event_done(const char *stop_reason, const char *trace_id);

#endif
