/*
 * records_outbox — the session queues of platform mode and their delivery threads. Each
 * session (its key: "<projectId>:<sessionId>", or the session id) has one ordered queue in
 * this process, shared by consecutive turns, drained by a background thread that exists while
 * the queue has work: a call is taken from the head, delivered through agenta_api (its
 * attempts and backoff are the call's own), and counted delivered or dropped on the tally of
 * the emitter that queued it. A record that is dropped in durable mode marks the session
 * incomplete (records_incomplete.h); so does one a queue over its caps refuses.
 *
 * The open tool call of an emitter is queued held (hold_until): the thread waits for it until
 * it is released or its time passes, and until it is being sent its body may be replaced (a
 * newer snapshot of the same call). The queue's mutex is never held across I/O or a call into
 * agenta_api. A forked child starts with no queues (their threads stayed in the parent).
 */
#ifndef AR_RECORDS_OUTBOX_H
#define AR_RECORDS_OUTBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agenta/agenta_api.h"
#include "base/buf.h"

#define RECORDS_QUEUE_MAX 4096                   /* calls waiting per session */
#define RECORDS_QUEUE_BYTES (256u * 1024 * 1024) /* their bodies, per session */
#define RECORDS_SESSIONS_MAX 4096                /* session queues per process */

struct records_outbox; /* one session's queue */
struct records_tally;  /* what one emitter queued and what became of it */

/* One call to queue (the body is given apart). */
struct records_call {
    struct agenta_api *api; /* a reference is taken */
    const char *path;       /* POST path */
    unsigned attempts;
    enum agenta_backoff backoff;
    uint64_t backoff_base_ms;
    uint64_t timeout_ms; /* per attempt; 0 = the client's default */
    bool record;         /* a record of the log: dropping it leaves a hole (tally.lost) */
    bool durable;        /* ... which marks the session incomplete */
    int64_t hold_until;  /* > 0: held until then (monotonic ms) or records_outbox_release */
};

/*
 * The queue of session key (made when it has none) and a new tally for one emitter.
 * -ENOBUFS at RECORDS_SESSIONS_MAX queues, -ENOMEM.
 */
int records_outbox_attach(const char *key, struct records_outbox **ret_ob,
                          struct records_tally **ret_tally);
/* The emitter lets go: what it queued keeps being delivered; an idle, unused queue goes. */
void records_outbox_detach(struct records_outbox *ob, struct records_tally *t);

/*
 * Queue c with body (taken: body is released on every return) and make sure a thread drains
 * the queue; *ret_seq (may be NULL) names the call for release/replace. -ENOMEM (nothing
 * counted); -ENOBUFS over the queue's caps or -EAGAIN without a thread: counted as dropped
 * (and the session marked incomplete for a durable call).
 */
int records_outbox_push(struct records_outbox *ob, struct records_tally *t,
                        const struct records_call *c, struct buf *body, uint64_t *ret_seq);
/* The held call seq goes out now (a no-op when it is gone). */
void records_outbox_release(struct records_outbox *ob, uint64_t seq);
/*
 * Replace the body of the held call seq while it still waits, holding it until hold_until:
 * 0 (body taken), -EALREADY when it is gone or being sent, -ENOBUFS over the byte cap.
 */
int records_outbox_replace(struct records_outbox *ob, uint64_t seq, struct buf *body,
                           int64_t hold_until);
/* A record that never made it into the queue: logged, counted lost, durable: marked. */
void records_outbox_drop(struct records_outbox *ob, struct records_tally *t, bool durable,
                         const char *why);

/*
 * Wait until everything on t was delivered or dropped, or until deadline_ms (monotonic).
 * 0; -EIO when a record was dropped; -ETIMEDOUT when some are still queued.
 */
int records_outbox_wait(struct records_tally *t, int64_t deadline_ms);

/*
 * Wait until every session queue of the process is empty and its thread gone (shutdown,
 * tests). 0, or -ETIMEDOUT at deadline_ms (monotonic).
 */
int records_outbox_drain_all(int64_t deadline_ms);

#endif
