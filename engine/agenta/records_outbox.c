/*
 * records_outbox — the session queues of platform mode and their delivery threads
 * (records_outbox.h).
 */
#include "agenta/records_outbox.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agenta/records_incomplete.h"
#include "base/log.h"
#include "base/util.h"
#include "core/contracts.h"

/* What a records emitter and the items it queued share: how many are done. */
struct records_tally {
    unsigned refs;
    uint64_t queued;
    uint64_t delivered;
    uint64_t dropped;
    uint64_t lost; /* of the dropped, records (not other calls) */
};

struct item {
    struct item *next;
    uint64_t seq;
    struct agenta_api *api;      /* a reference */
    struct records_tally *tally; /* a reference */
    char *path;
    char *body;
    size_t body_len;
    unsigned attempts;
    enum agenta_backoff backoff;
    uint64_t backoff_base_ms;
    bool record;  /* a record: dropping it leaves a hole in the log */
    bool durable; /* ... which marks the session incomplete */
    bool held;    /* an open tool call: waits for release or hold_until */
    bool sending; /* the delivery thread has it */
    int64_t hold_until;
    uint64_t timeout_ms; /* per attempt; 0 = the client's default */
};

struct records_outbox {
    struct records_outbox *next;
    char *key;
    pthread_cond_t wake; /* the delivery thread waits here */
    struct item *head, *tail;
    size_t nitems;
    size_t bytes;
    unsigned users; /* records emitters attached */
    bool thread_running;
};

/* Everything below is guarded by reg_lock. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_cond_t reg_done; /* an item finished or a thread left */
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static struct records_outbox *outboxes;

static size_t noutboxes;

static uint64_t next_seq = 1;

static pid_t reg_pid;

/* ---- the session queues ----------------------------------------------------------------- */

static void reg_init(void)
{
    pthread_condattr_t attr;

    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&reg_done, &attr);
    pthread_condattr_destroy(&attr);
}

static void tally_unref_locked(struct records_tally *t)
{
    if (t && --t->refs == 0)
        free(t);
}

static void item_free(struct item *it)
{
    if (!it)
        return;
    agenta_api_free(it->api);
    free(it->path);
    free(it->body);
    free(it);
}

static void outbox_free_locked(struct records_outbox *ob)
{
    struct records_outbox **pp;

    for (pp = &outboxes; *pp; pp = &(*pp)->next) {
        if (*pp == ob) {
            *pp = ob->next;
            noutboxes--;
            break;
        }
    }
    pthread_cond_destroy(&ob->wake);
    free(ob->key);
    free(ob);
}

static void outbox_maybe_free_locked(struct records_outbox *ob)
{
    if (ob->users == 0 && !ob->thread_running && !ob->head)
        outbox_free_locked(ob);
}

static struct records_outbox *outbox_get_locked(const char *key)
{
    pthread_condattr_t attr;
    struct records_outbox *ob;

    if (reg_pid != getpid()) {
        /* a forked child inherits the queues but not their threads: start over */
        outboxes = NULL;
        noutboxes = 0;
        reg_pid = getpid();
    }
    for (ob = outboxes; ob; ob = ob->next)
        if (strcmp(ob->key, key) == 0)
            return ob;
    if (noutboxes >= RECORDS_SESSIONS_MAX)
        return NULL;
    ob = calloc(1, sizeof(*ob));
    if (!ob)
        return NULL;
    ob->key = strdup(key);
    if (!ob->key) {
        free(ob);
        return NULL;
    }
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&ob->wake, &attr);
    pthread_condattr_destroy(&attr);
    ob->next = outboxes;
    outboxes = ob;
    noutboxes++;
    return ob;
}

/* Deliver one item (no lock held): true when it reached the API. */
static bool deliver(struct item *it, const char *key)
{
    struct agenta_call call = {
        .method = AGENTA_POST,
        .path = it->path,
        .body = it->body,
        .body_len = it->body_len,
        .timeout_ms = it->timeout_ms,
        .attempts = it->attempts,
        .backoff = it->backoff,
        .backoff_base_ms = it->backoff_base_ms,
    };
    struct agenta_response res;
    char err[256];
    int r;

    r = agenta_api_call(it->api, &call, &res, err, sizeof(err));
    if (r > 0) {
        bool ok = res.status >= 200 && res.status <= 299;

        if (!ok)
            snprintf(err, sizeof(err), "HTTP %ld", res.status);
        agenta_response_release(&res);
        if (ok)
            return true;
    }
    log_debug("records: dropped a call to \"%s\" of session \"%s\" after %u attempts: %s", it->path,
              key, it->attempts, err);
    return false;
}

static void *delivery_thread(void *arg)
{
    struct records_outbox *ob = arg;
    struct timespec ts;

    pthread_mutex_lock(&reg_lock);
    for (;;) {
        struct item *it = ob->head;
        int64_t now = util_now_ms();
        bool ok;

        if (!it)
            break; /* the next record starts a new thread */
        if (it->held && now < it->hold_until) {
            util_deadline_ts(it->hold_until, &ts);
            pthread_cond_timedwait(&ob->wake, &reg_lock, &ts);
            continue;
        }
        it->held = false; /* released, or its time passed: this snapshot is final */
        it->sending = true;
        pthread_mutex_unlock(&reg_lock);
        ok = deliver(it, ob->key);
        if (!ok && it->durable)
            records_incomplete_note(ob->key);
        pthread_mutex_lock(&reg_lock);
        ob->head = it->next;
        if (!ob->head)
            ob->tail = NULL;
        ob->nitems--;
        ob->bytes -= it->body_len;
        if (ok) {
            it->tally->delivered++;
        } else {
            it->tally->dropped++;
            it->tally->lost += it->record;
        }
        tally_unref_locked(it->tally);
        it->tally = NULL;
        pthread_cond_broadcast(&reg_done);
        pthread_mutex_unlock(&reg_lock);
        item_free(it);
        pthread_mutex_lock(&reg_lock);
    }
    ob->thread_running = false;
    pthread_cond_broadcast(&reg_done);
    outbox_maybe_free_locked(ob);
    pthread_mutex_unlock(&reg_lock);
    return NULL;
}

/* Queue it (taking ownership) and make sure a thread drains the queue. */
static int enqueue(struct records_outbox *ob, struct records_tally *t, struct item *it,
                   uint64_t *ret_seq)
{
    int ret = 0;

    pthread_mutex_lock(&reg_lock);
    if (ob->nitems >= RECORDS_QUEUE_MAX || ob->bytes + it->body_len > RECORDS_QUEUE_BYTES) {
        ret = -ENOBUFS;
        goto out;
    }
    if (!ob->thread_running) {
        pthread_attr_t attr;
        pthread_t tid;

        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        ob->thread_running = pthread_create(&tid, &attr, delivery_thread, ob) == 0;
        pthread_attr_destroy(&attr);
        if (!ob->thread_running) {
            ret = -EAGAIN;
            goto out;
        }
    }
    it->seq = next_seq++;
    if (ret_seq)
        *ret_seq = it->seq;
    it->tally = t;
    t->refs++;
    t->queued++;
    if (ob->tail)
        ob->tail->next = it;
    else
        ob->head = it;
    ob->tail = it;
    ob->nitems++;
    ob->bytes += it->body_len;
    pthread_cond_signal(&ob->wake);
    it = NULL;
out:
    if (ret < 0) {
        /* counted as dropped: for a record, the log now has a hole */
        t->queued++;
        t->dropped++;
        t->lost += it->record;
        pthread_cond_broadcast(&reg_done);
    }
    pthread_mutex_unlock(&reg_lock);
    if (ret < 0) {
        log_debug("records: session \"%s\" queue refused a call to \"%s\": %s", ob->key, it->path,
                  ar_strerror(ret));
        if (it->durable)
            records_incomplete_note(ob->key);
        item_free(it);
    }
    return ret;
}

static struct item *item_new(const struct records_call *c, struct buf *body)
{
    struct item *it = calloc(1, sizeof(*it));

    if (!it)
        return NULL;
    it->path = strdup(c->path);
    if (!it->path || buf_steal(body, &it->body) < 0) {
        free(it->path);
        free(it);
        return NULL;
    }
    it->body_len = strlen(it->body);
    it->api = agenta_api_ref(c->api);
    it->backoff_base_ms = c->backoff_base_ms;
    it->attempts = c->attempts;
    it->backoff = c->backoff;
    it->timeout_ms = c->timeout_ms;
    it->record = c->record;
    it->durable = c->durable;
    if (c->hold_until > 0) {
        it->held = true;
        it->hold_until = c->hold_until;
    }
    return it;
}

int records_outbox_attach(const char *key, struct records_outbox **ret_ob,
                          struct records_tally **ret_tally)
{
    struct records_tally *t = calloc(1, sizeof(*t));
    struct records_outbox *ob;

    if (!t)
        return -ENOMEM;
    t->refs = 1;
    pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_lock);
    ob = outbox_get_locked(key);
    if (ob)
        ob->users++;
    pthread_mutex_unlock(&reg_lock);
    if (!ob) {
        free(t);
        return -ENOBUFS;
    }
    *ret_ob = ob;
    *ret_tally = t;
    return 0;
}

void records_outbox_detach(struct records_outbox *ob, struct records_tally *t)
{
    pthread_mutex_lock(&reg_lock);
    ob->users--;
    outbox_maybe_free_locked(ob);
    tally_unref_locked(t);
    pthread_mutex_unlock(&reg_lock);
}

int records_outbox_push(struct records_outbox *ob, struct records_tally *t,
                        const struct records_call *c, struct buf *body, uint64_t *ret_seq)
{
    struct item *it = item_new(c, body);

    buf_release(body);
    if (!it)
        return -ENOMEM;
    return enqueue(ob, t, it, ret_seq);
}

void records_outbox_release(struct records_outbox *ob, uint64_t seq)
{
    pthread_mutex_lock(&reg_lock);
    for (struct item *it = ob->head; it; it = it->next) {
        if (it->seq == seq) {
            it->hold_until = 0;
            pthread_cond_signal(&ob->wake);
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
}

int records_outbox_replace(struct records_outbox *ob, uint64_t seq, struct buf *body,
                           int64_t hold_until)
{
    int rc = -EALREADY;

    pthread_mutex_lock(&reg_lock);
    for (struct item *it = ob->head; it; it = it->next) {
        if (it->seq != seq)
            continue;
        if (it->sending || !it->held)
            break;
        if (ob->bytes - it->body_len + body->len > RECORDS_QUEUE_BYTES) {
            rc = -ENOBUFS;
            break;
        }
        ob->bytes = ob->bytes - it->body_len + body->len;
        free(it->body);
        it->body = body->data;
        it->body_len = body->len;
        body->data = NULL;
        it->hold_until = hold_until;
        pthread_cond_signal(&ob->wake);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&reg_lock);
    return rc;
}

void records_outbox_drop(struct records_outbox *ob, struct records_tally *t, bool durable,
                         const char *why)
{
    log_debug("records: session \"%s\" dropped a record: %s", ob->key, why);
    if (durable)
        records_incomplete_note(ob->key);
    pthread_mutex_lock(&reg_lock);
    t->queued++;
    t->dropped++;
    t->lost++;
    pthread_cond_broadcast(&reg_done);
    pthread_mutex_unlock(&reg_lock);
}

int records_outbox_wait(struct records_tally *t, int64_t deadline_ms)
{
    struct timespec ts;
    int rc = 0;

    pthread_mutex_lock(&reg_lock);
    while (t->delivered + t->dropped < t->queued) {
        if (util_now_ms() >= deadline_ms) {
            rc = -ETIMEDOUT;
            break;
        }
        util_deadline_ts(deadline_ms, &ts);
        pthread_cond_timedwait(&reg_done, &reg_lock, &ts);
    }
    if (rc == 0 && t->lost)
        rc = -EIO;
    pthread_mutex_unlock(&reg_lock);
    return rc;
}

int records_outbox_drain_all(int64_t deadline_ms)
{
    struct timespec ts;
    int rc = 0;

    pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_lock);
    for (;;) {
        bool busy = false;

        for (struct records_outbox *ob = outboxes; ob && !busy; ob = ob->next)
            busy = ob->head || ob->thread_running;
        if (!busy)
            break;
        if (util_now_ms() >= deadline_ms) {
            rc = -ETIMEDOUT;
            break;
        }
        util_deadline_ts(deadline_ms, &ts);
        pthread_cond_timedwait(&reg_done, &reg_lock, &ts);
    }
    pthread_mutex_unlock(&reg_lock);
    return rc;
}
