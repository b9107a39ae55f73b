#include "agenta/records.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"

#define TEXT_MAX RUN_OUTPUT_MAX
#define LEGACY_ATTEMPTS 3

/* What a records emitter and the items it queued share: how many are done. */
struct tally {
    unsigned refs;
    uint64_t queued;
    uint64_t delivered;
    uint64_t dropped;
    uint64_t lost; /* of the dropped, records (not other calls) */
};

struct item {
    struct item *next;
    uint64_t seq;
    struct agenta_api *api; /* a reference */
    struct tally *tally;    /* a reference */
    char *path;
    char *body;
    size_t body_len;
    unsigned attempts;
    enum agenta_backoff backoff;
    uint64_t backoff_base_ms;
    bool record;      /* a record: dropping it leaves a hole in the log */
    bool durable;     /* ... which marks the session incomplete */
    bool held;        /* an open tool call: waits for release or hold_until */
    bool sending;     /* the delivery thread has it */
    int64_t hold_until;
    uint64_t timeout_ms; /* per attempt; 0 = the client's default */
};

struct outbox {
    struct outbox *next;
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
static pthread_cond_t reg_done;  /* an item finished or a thread left */
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static struct outbox *outboxes;
static size_t noutboxes;
static uint64_t next_seq = 1;
static pid_t reg_pid;

static pthread_mutex_t incomplete_lock = PTHREAD_MUTEX_INITIALIZER;
static char *incomplete[RECORDS_INCOMPLETE_MAX];
static size_t nincomplete, incomplete_next;

struct open_block {
    bool used;
    bool thought;
    bool overflow;
    char *id;
    struct buf text;
};

struct records {
    struct agenta_api *api;
    struct redact *rd;
    struct outbox *ob;
    struct tally *tally;
    char *session_key;
    char *session_id;
    char *turn_id;
    char *span_id;
    uint64_t next_index;
    unsigned attempts;
    enum agenta_backoff backoff;
    uint64_t backoff_base_ms;
    bool durable;
    uint64_t tool_ttl_ms;
    /* the open tool call */
    char *open_tool_id;
    uint64_t open_tool_seq;
    uint64_t open_tool_index;
    struct open_block open[RECORDS_OPEN_MAX];
};

/* ---- uuid5 ------------------------------------------------------------------------------ */

int records_uuid5(const uint8_t ns[16], const char *name, size_t len, char out[37])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    char hex[33];
    int ok;

    if (!ctx)
        return -ENOMEM;
    ok = EVP_DigestInit_ex(ctx, EVP_sha1(), NULL) && EVP_DigestUpdate(ctx, ns, 16) &&
         EVP_DigestUpdate(ctx, name, len) && EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    if (!ok || mdlen < 16)
        return -EIO;
    md[6] = (unsigned char)((md[6] & 0x0f) | 0x50);
    md[8] = (unsigned char)((md[8] & 0x3f) | 0x80);
    util_hex_encode(md, 16, hex);
    snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
    return 0;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int records_uuid_parse(const char *text, uint8_t out[16])
{
    uint8_t u[16];
    size_t n = 0;

    for (const char *p = text; *p; p++) {
        int hi, lo;

        if (*p == '-' && (p - text == 8 || p - text == 13 || p - text == 18 || p - text == 23))
            continue;
        hi = hex_digit(p[0]);
        lo = p[1] ? hex_digit(p[1]) : -1;
        if (hi < 0 || lo < 0 || n >= 16)
            return -EINVAL;
        u[n++] = (uint8_t)(hi * 16 + lo);
        p++;
    }
    if (n != 16 || strlen(text) != 36)
        return -EINVAL;
    memcpy(out, u, 16);
    return 0;
}

/* uuid5("records", uuid5("agenta", NAMESPACE_DNS)), computed once. */
static uint8_t record_ns[16];
static int record_ns_status = -EAGAIN;
static pthread_once_t record_ns_once = PTHREAD_ONCE_INIT;

static void record_ns_make(void)
{
    uint8_t dns[16], agenta[16];
    char text[37];
    int r;

    r = records_uuid_parse("6ba7b810-9dad-11d1-80b4-00c04fd430c8", dns);
    if (r == 0)
        r = records_uuid5(dns, "agenta", 6, text);
    if (r == 0)
        r = records_uuid_parse(text, agenta);
    if (r == 0)
        r = records_uuid5(agenta, "records", 7, text);
    if (r == 0)
        r = records_uuid_parse(text, record_ns);
    record_ns_status = r;
}

int records_stable_id(const char *session_id, const char *tool_call_id, const char *record_type,
                      const char *turn_id, char out[37])
{
    struct buf name;
    int r;

    pthread_once(&record_ns_once, record_ns_make);
    if (record_ns_status < 0)
        return record_ns_status;
    buf_init(&name, 64u * 1024);
    r = buf_printf(&name, "%s:%s:%s:%s", session_id ? session_id : "",
                   tool_call_id ? tool_call_id : "", record_type ? record_type : "",
                   turn_id ? turn_id : "");
    if (r == 0)
        r = records_uuid5(record_ns, buf_str(&name), name.len, out);
    buf_release(&name);
    return r;
}

/* ---- the incomplete set ----------------------------------------------------------------- */

/* The folder every process of the runner shares for the marks ("" = this process only). */
static char incomplete_dir[512];

/* <incomplete_dir>/<sha256 of the key in hex>: a key may hold any byte, a file name may not. */
static int mark_path(const char *session_key, char *out, size_t outlen)
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    char hex[65], dir[sizeof(incomplete_dir)];
    int n;

    pthread_mutex_lock(&incomplete_lock);
    memcpy(dir, incomplete_dir, sizeof(dir));
    pthread_mutex_unlock(&incomplete_lock);
    if (!dir[0])
        return -ENOENT;
    if (EVP_Digest(session_key, strlen(session_key), md, &mdlen, EVP_sha256(), NULL) != 1 ||
        mdlen != sizeof(md))
        return -EIO;
    for (size_t i = 0; i < sizeof(md); i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    n = snprintf(out, outlen, "%s/%s", dir, hex);
    return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

int records_incomplete_dir(const char *dir)
{
    if (!dir || !dir[0]) {
        pthread_mutex_lock(&incomplete_lock);
        incomplete_dir[0] = '\0';
        pthread_mutex_unlock(&incomplete_lock);
        return 0;
    }
    if (dir[0] != '/' || strlen(dir) >= sizeof(incomplete_dir) - 80)
        return -EINVAL;
    pthread_mutex_lock(&incomplete_lock);
    snprintf(incomplete_dir, sizeof(incomplete_dir), "%s", dir);
    pthread_mutex_unlock(&incomplete_lock);
    return 0;
}

static bool remembered(const char *session_key)
{
    bool found = false;

    pthread_mutex_lock(&incomplete_lock);
    for (size_t i = 0; i < nincomplete && !found; i++)
        found = strcmp(incomplete[i], session_key) == 0;
    pthread_mutex_unlock(&incomplete_lock);
    return found;
}

bool records_session_incomplete(const char *session_key)
{
    char path[640];

    if (!session_key)
        return false;
    if (remembered(session_key))
        return true;
    /* another worker (or a runner before a restart) may have lost one of its records */
    return mark_path(session_key, path, sizeof(path)) == 0 && access(path, F_OK) == 0;
}

/* The mark as a file every worker sees; it holds the key, for whoever looks at the folder. */
static void mark_file(const char *session_key)
{
    char path[640], *slash;
    int fd, r;

    if (mark_path(session_key, path, sizeof(path)) < 0)
        return;
    slash = strrchr(path, '/');
    *slash = '\0';
    r = util_mkdir_p(path, 0700);
    *slash = '/';
    if (r < 0) {
        log_debug("records: cannot create the folder of \"%s\": %s", path, ar_strerror(r));
        return;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd == -1) {
        log_debug("records: cannot mark session \"%s\" incomplete in \"%s\": %s", session_key,
                  path, strerror(errno));
        return;
    }
    (void)util_write_all(fd, session_key, strlen(session_key));
    close(fd);
}

void records_note_incomplete(const char *session_key)
{
    char *copy, *old = NULL;

    if (!session_key || remembered(session_key))
        return;
    mark_file(session_key);
    copy = strdup(session_key);
    if (!copy)
        return;
    pthread_mutex_lock(&incomplete_lock);
    if (nincomplete < RECORDS_INCOMPLETE_MAX) {
        incomplete[nincomplete++] = copy;
    } else {
        /* full: forget the oldest mark in memory (the file, if any, stays) */
        old = incomplete[incomplete_next];
        incomplete[incomplete_next] = copy;
        incomplete_next = (incomplete_next + 1) % RECORDS_INCOMPLETE_MAX;
    }
    pthread_mutex_unlock(&incomplete_lock);
    free(old);
}

/* ---- the session queues ----------------------------------------------------------------- */

static void reg_init(void)
{
    pthread_condattr_t attr;

    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&reg_done, &attr);
    pthread_condattr_destroy(&attr);
}

static void deadline_ts(int64_t deadline_ms, struct timespec *ts)
{
    ts->tv_sec = deadline_ms / 1000;
    ts->tv_nsec = (deadline_ms % 1000) * 1000000;
}

static void tally_unref_locked(struct tally *t)
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

static void outbox_free_locked(struct outbox *ob)
{
    struct outbox **pp;

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

static void outbox_maybe_free_locked(struct outbox *ob)
{
    if (ob->users == 0 && !ob->thread_running && !ob->head)
        outbox_free_locked(ob);
}

static struct outbox *outbox_get_locked(const char *key)
{
    pthread_condattr_t attr;
    struct outbox *ob;

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
    log_debug("records: dropped a call to \"%s\" of session \"%s\" after %u attempts: %s",
              it->path, key, it->attempts, err);
    return false;
}

static void *delivery_thread(void *arg)
{
    struct outbox *ob = arg;
    struct timespec ts;

    pthread_mutex_lock(&reg_lock);
    for (;;) {
        struct item *it = ob->head;
        int64_t now = util_now_ms();
        bool ok;

        if (!it)
            break; /* the next record starts a new thread */
        if (it->held && now < it->hold_until) {
            deadline_ts(it->hold_until, &ts);
            pthread_cond_timedwait(&ob->wake, &reg_lock, &ts);
            continue;
        }
        it->held = false; /* released, or its time passed: this snapshot is final */
        it->sending = true;
        pthread_mutex_unlock(&reg_lock);
        ok = deliver(it, ob->key);
        if (!ok && it->durable)
            records_note_incomplete(ob->key);
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
static int enqueue(struct records *r, struct item *it, uint64_t *ret_seq)
{
    struct outbox *ob = r->ob;
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
    it->tally = r->tally;
    r->tally->refs++;
    r->tally->queued++;
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
        r->tally->queued++;
        r->tally->dropped++;
        r->tally->lost += it->record;
        pthread_cond_broadcast(&reg_done);
    }
    pthread_mutex_unlock(&reg_lock);
    if (ret < 0) {
        log_debug("records: session \"%s\" queue refused a call to \"%s\": %s", r->session_key,
                  it->path, ar_strerror(ret));
        if (it->durable)
            records_note_incomplete(r->session_key);
        item_free(it);
    }
    return ret;
}

static struct item *item_new(struct records *r, const char *path, struct buf *body)
{
    struct item *it = calloc(1, sizeof(*it));

    if (!it)
        return NULL;
    it->path = strdup(path);
    if (!it->path || buf_steal(body, &it->body) < 0) {
        free(it->path);
        free(it);
        return NULL;
    }
    it->body_len = strlen(it->body);
    it->api = agenta_api_ref(r->api);
    it->backoff_base_ms = r->backoff_base_ms;
    return it;
}

/* Drop a record that never made it into the queue. */
static void drop_record(struct records *r, const char *why)
{
    log_debug("records: session \"%s\" dropped a record: %s", r->session_key, why);
    if (r->durable)
        records_note_incomplete(r->session_key);
    pthread_mutex_lock(&reg_lock);
    r->tally->queued++;
    r->tally->dropped++;
    r->tally->lost++;
    pthread_cond_broadcast(&reg_done);
    pthread_mutex_unlock(&reg_lock);
}

/*
 * The ingest body of one record: attributes are a redacted deep copy of ev. On success the
 * body is in *ret (a buf with RECORDS_BODY_MAX as cap).
 */
static int record_body(struct records *r, json_object *ev, uint64_t index, const char *source,
                       const char *record_id, struct buf *ret)
{
    struct agenta_record rec = {.session_id = r->session_id,
                                .record_id = record_id,
                                .record_index = index,
                                .source = source,
                                .turn_id = r->turn_id,
                                .span_id = r->span_id};
    json_object *copy = NULL, *body;
    char stamp[32];
    const char *text;
    size_t n;
    int rc;

    if (json_object_deep_copy(ev, &copy, NULL) != 0 || !copy)
        return -ENOMEM;
    rc = redact_json(r->rd, copy);
    if (rc < 0) {
        json_object_put(copy);
        return rc;
    }
    agenta_iso_time(util_wall_ms(), stamp);
    rec.timestamp = stamp;
    rec.attributes = copy;
    body = agenta_record_body(&rec);
    json_object_put(copy);
    if (!body)
        return -ENOMEM;
    text = jsonx_text(body, &n);
    buf_init(ret, RECORDS_BODY_MAX);
    rc = buf_append(ret, text, n);
    json_object_put(body);
    if (rc < 0)
        buf_release(ret);
    return rc;
}

static void policy(struct records *r, struct item *it)
{
    it->record = true;
    it->durable = r->durable;
    it->timeout_ms = agenta_api_config(r->api)->records_query_timeout_ms;
    it->attempts = r->attempts;
    it->backoff = r->backoff;
}

/* Persist ev with the given index; held: as the open tool call. Returns the item's seq. */
static int persist_at(struct records *r, json_object *ev, uint64_t index, const char *source,
                      const char *record_id, bool held, uint64_t *ret_seq)
{
    struct buf body;
    struct item *it;
    int rc;

    rc = record_body(r, ev, index, source, record_id, &body);
    if (rc < 0) {
        drop_record(r, rc == -E2BIG ? "larger than the record cap" : ar_strerror(rc));
        return rc;
    }
    it = item_new(r, AGENTA_PATH_RECORDS_INGEST, &body);
    buf_release(&body);
    if (!it) {
        drop_record(r, "out of memory");
        return -ENOMEM;
    }
    policy(r, it);
    if (held) {
        it->held = true;
        it->hold_until = util_now_ms() + (int64_t)r->tool_ttl_ms;
    }
    return enqueue(r, it, ret_seq);
}

/* Release the open tool call: its snapshot goes out now. */
static void release_open_tool(struct records *r)
{
    if (!r->open_tool_id)
        return;
    pthread_mutex_lock(&reg_lock);
    for (struct item *it = r->ob->head; it; it = it->next) {
        if (it->seq == r->open_tool_seq) {
            it->hold_until = 0;
            pthread_cond_signal(&r->ob->wake);
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    free(r->open_tool_id);
    r->open_tool_id = NULL;
}

/* Replace the open tool call's snapshot while it still waits: 0, or -EALREADY when it is gone
 * or being sent (the caller then opens a new one). */
static int update_open_tool(struct records *r, json_object *ev)
{
    char record_id[37];
    struct buf body;
    int rc;

    rc = records_stable_id(r->session_id, r->open_tool_id, "tool_call", r->turn_id, record_id);
    if (rc == 0)
        rc = record_body(r, ev, r->open_tool_index, "agent", record_id, &body);
    if (rc < 0)
        return rc;
    rc = -EALREADY;
    pthread_mutex_lock(&reg_lock);
    for (struct item *it = r->ob->head; it; it = it->next) {
        if (it->seq != r->open_tool_seq)
            continue;
        if (it->sending || !it->held)
            break;
        if (r->ob->bytes - it->body_len + body.len > RECORDS_QUEUE_BYTES) {
            rc = -ENOBUFS;
            break;
        }
        r->ob->bytes = r->ob->bytes - it->body_len + body.len;
        free(it->body);
        it->body = body.data;
        it->body_len = body.len;
        body.data = NULL;
        it->hold_until = util_now_ms() + (int64_t)r->tool_ttl_ms;
        pthread_cond_signal(&r->ob->wake);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&reg_lock);
    buf_release(&body);
    return rc;
}

static void tool_call(struct records *r, json_object *ev, const char *id)
{
    char record_id[37];
    uint64_t seq = 0;

    if (r->open_tool_id && strcmp(r->open_tool_id, id) == 0) {
        int rc = update_open_tool(r, ev);

        if (rc == 0)
            return;
        if (rc != -EALREADY) {
            drop_record(r, ar_strerror(rc));
            return;
        }
    }
    release_open_tool(r);
    if (records_stable_id(r->session_id, id, "tool_call", r->turn_id, record_id) < 0) {
        drop_record(r, "no stable id");
        return;
    }
    r->open_tool_id = strdup(id);
    if (!r->open_tool_id) {
        drop_record(r, "out of memory");
        return;
    }
    r->open_tool_index = r->next_index++;
    if (persist_at(r, ev, r->open_tool_index, "agent", record_id, true, &seq) < 0) {
        free(r->open_tool_id);
        r->open_tool_id = NULL;
        return;
    }
    r->open_tool_seq = seq;
}

static struct open_block *find_block(struct records *r, bool thought, const char *id)
{
    for (size_t i = 0; i < RECORDS_OPEN_MAX; i++) {
        struct open_block *b = &r->open[i];

        if (b->used && b->thought == thought && strcmp(b->id, id) == 0)
            return b;
    }
    return NULL;
}

static void block_close(struct open_block *b)
{
    free(b->id);
    buf_release(&b->text);
    memset(b, 0, sizeof(*b));
}

static bool block_start(struct records *r, bool thought, const char *id)
{
    struct open_block *b = find_block(r, thought, id);

    if (b) {
        /* a second start for the same id starts over, as Agenta's map.set does */
        buf_reset(&b->text);
        b->overflow = false;
        return true;
    }
    for (size_t i = 0; i < RECORDS_OPEN_MAX; i++) {
        b = &r->open[i];
        if (b->used)
            continue;
        b->id = strdup(id);
        if (!b->id)
            return false;
        b->used = true;
        b->thought = thought;
        buf_init(&b->text, TEXT_MAX);
        return true;
    }
    return false;
}

static void block_end(struct records *r, struct open_block *b)
{
    json_object *ev = json_object_new_object();

    if (b->overflow || !ev) {
        drop_record(r, b->overflow ? "text larger than the record cap" : "out of memory");
        json_object_put(ev);
        block_close(b);
        return;
    }
    json_object_object_add(ev, "type", json_object_new_string(b->thought ? "thought" : "message"));
    json_object_object_add(ev, "text",
                           json_object_new_string_len(buf_str(&b->text), (int)b->text.len));
    block_close(b);
    persist_at(r, ev, r->next_index++, "agent", NULL, false, NULL);
    json_object_put(ev);
}

void records_event(struct records *r, json_object *ev)
{
    const char *type = jsonx_str(ev, "type"), *id = jsonx_str(ev, "id");
    json_object *transient;
    char record_id[37];

    if (!r || !type)
        return;
    if (strcmp(type, "turn") == 0)
        return; /* transport correlation, not conversation */
    transient = jsonx_get(ev, "transient");
    if (strcmp(type, "data") == 0 && transient &&
        json_object_is_type(transient, json_type_boolean) && json_object_get_boolean(transient))
        return;
    if (strcmp(type, "tool_call") == 0 && id) {
        tool_call(r, ev, id);
        return;
    }
    /* any other event is a different step: the open tool call lands before it */
    release_open_tool(r);
    if (id && (strncmp(type, "message_", 8) == 0 || strncmp(type, "thought_", 8) == 0)) {
        bool thought = type[0] == 't';
        const char *what = type + 8;
        struct open_block *b = find_block(r, thought, id);

        if (strcmp(what, "start") == 0 && block_start(r, thought, id))
            return;
        if (strcmp(what, "delta") == 0 && b) {
            const char *d = jsonx_str(ev, "delta");

            if (d && !b->overflow && buf_append_str(&b->text, d) < 0)
                b->overflow = true;
            return;
        }
        if (strcmp(what, "end") == 0 && b) {
            block_end(r, b);
            return;
        }
    }
    if (id && (strcmp(type, "tool_result") == 0 || strcmp(type, "interaction_request") == 0 ||
               strcmp(type, "interaction_response") == 0)) {
        if (records_stable_id(r->session_id, id, type, r->turn_id, record_id) < 0) {
            drop_record(r, "no stable id");
            return;
        }
        persist_at(r, ev, r->next_index++, "agent", record_id, false, NULL);
        return;
    }
    persist_at(r, ev, r->next_index++, "agent", NULL, false, NULL);
}

int records_persist(struct records *r, json_object *ev, const char *source)
{
    if (!ev || !jsonx_str(ev, "type"))
        return -EINVAL;
    release_open_tool(r);
    return persist_at(r, ev, r->next_index++, source ? source : "agent", NULL, false, NULL);
}

int records_send(struct records *r, const char *path, json_object *body, unsigned attempts)
{
    struct buf text;
    struct item *it;
    const char *s;
    size_t n;
    int rc;

    if (!body || !path || path[0] != '/')
        return -EINVAL;
    release_open_tool(r);
    s = jsonx_text(body, &n);
    buf_init(&text, RECORDS_BODY_MAX);
    rc = buf_append(&text, s, n);
    if (rc < 0)
        return rc;
    it = item_new(r, path, &text);
    buf_release(&text);
    if (!it)
        return -ENOMEM;
    it->attempts = attempts ? attempts : 1;
    it->backoff = AGENTA_BACKOFF_LINEAR;
    return enqueue(r, it, NULL);
}

static bool is_inline_image(json_object *b)
{
    const char *uri = jsonx_str(b, "uri");

    return (jsonx_str(b, "data") && jsonx_str(b, "data")[0]) ||
           (uri && strncmp(uri, "data:", 5) == 0);
}

int records_user_message(const struct run_request *req, json_object **ret_event)
{
    json_object *msgs = jsonx_get(req->root, "messages"), *tail, *content, *ev, *atts;
    bool has_inline = false, any_text = false;
    struct buf text;
    size_t n;
    int r = 0;

    if (!msgs || !json_object_is_type(msgs, json_type_array) ||
        (n = json_object_array_length(msgs)) == 0)
        return -ENOENT;
    tail = json_object_array_get_idx(msgs, n - 1);
    if (!jsonx_str(tail, "role") || strcmp(jsonx_str(tail, "role"), "user") != 0)
        return -ENOENT;
    content = jsonx_get(tail, "content");
    atts = json_object_new_array();
    buf_init(&text, TEXT_MAX);
    if (!atts)
        return -ENOMEM;
    if (content && json_object_is_type(content, json_type_string)) {
        r = buf_append(&text, json_object_get_string(content),
                       (size_t)json_object_get_string_len(content));
    } else if (content && json_object_is_type(content, json_type_array)) {
        for (size_t i = 0; r == 0 && i < json_object_array_length(content); i++) {
            json_object *b = json_object_array_get_idx(content, i), *a, *size;
            const char *t = jsonx_str(b, "type");

            if (!t)
                continue;
            if (strcmp(t, "tool_call") == 0 || strcmp(t, "tool_result") == 0) {
                r = -ENOENT; /* an approval or client-tool envelope, not a fresh message */
            } else if (strcmp(t, "text") == 0 && jsonx_str(b, "text")) {
                r = buf_append_str(&text, jsonx_str(b, "text"));
            } else if (strcmp(t, "image") == 0) {
                has_inline = has_inline || is_inline_image(b);
            } else if (strcmp(t, "attachment") == 0 && jsonx_str(b, "attachmentId")) {
                a = json_object_new_object();
                if (!a) {
                    r = -ENOMEM;
                    break;
                }
                json_object_object_add(a, "attachmentId",
                                       json_object_new_string(jsonx_str(b, "attachmentId")));
                if (jsonx_str(b, "filename"))
                    json_object_object_add(a, "filename",
                                           json_object_new_string(jsonx_str(b, "filename")));
                if (jsonx_str(b, "mimeType"))
                    json_object_object_add(a, "mediaType",
                                           json_object_new_string(jsonx_str(b, "mimeType")));
                size = jsonx_get(b, "size");
                if (size && (json_object_is_type(size, json_type_int) ||
                             json_object_is_type(size, json_type_double)))
                    json_object_object_add(a, "size", json_object_get(size));
                json_object_array_add(atts, a);
            }
        }
    }
    for (size_t i = 0; i < text.len && !any_text; i++)
        any_text = !strchr(" \t\n\r\f\v", text.data[i]);
    if (r == 0 && !any_text && json_object_array_length(atts) == 0 && !has_inline)
        r = -ENOENT;
    if (r < 0) {
        json_object_put(atts);
        buf_release(&text);
        return r;
    }
    ev = json_object_new_object();
    if (!ev) {
        json_object_put(atts);
        buf_release(&text);
        return -ENOMEM;
    }
    json_object_object_add(ev, "type", json_object_new_string("message"));
    json_object_object_add(ev, "text", json_object_new_string_len(buf_str(&text), (int)text.len));
    json_object_object_add(ev, "attachments", atts);
    buf_release(&text);
    *ret_event = ev;
    return 0;
}

int records_new(struct agenta_api *api, struct redact *rd, const struct records_params *p,
                struct records **ret_records)
{
    const struct agenta_config *cfg = agenta_api_config(api);
    struct records *r;
    int rc = -ENOMEM;

    if (!p->session_key || !p->session_key[0] || !p->session_id || !p->session_id[0] || !rd)
        return -EINVAL;
    pthread_once(&reg_once, reg_init);
    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->rd = rd;
    r->session_key = strdup(p->session_key);
    r->session_id = strdup(p->session_id);
    r->turn_id = util_xstrdup(p->turn_id);
    r->span_id = util_xstrdup(p->span_id);
    r->tally = calloc(1, sizeof(*r->tally));
    if (!r->session_key || !r->session_id || (p->turn_id && !r->turn_id) ||
        (p->span_id && !r->span_id) || !r->tally)
        goto fail;
    r->tally->refs = 1;
    r->durable = cfg->records_durable;
    r->attempts = r->durable ? cfg->ingest_max_retries : LEGACY_ATTEMPTS;
    r->backoff = r->durable ? AGENTA_BACKOFF_EXPONENTIAL : AGENTA_BACKOFF_LINEAR;
    r->backoff_base_ms = p->backoff_base_ms ? p->backoff_base_ms : AGENTA_RETRY_BASE_MS;
    r->tool_ttl_ms = cfg->record_tool_ttl_ms ? cfg->record_tool_ttl_ms : 3000;
    pthread_mutex_lock(&reg_lock);
    r->ob = outbox_get_locked(r->session_key);
    if (r->ob)
        r->ob->users++;
    pthread_mutex_unlock(&reg_lock);
    if (!r->ob) {
        rc = -ENOBUFS;
        goto fail;
    }
    r->api = agenta_api_ref(api);
    *ret_records = r;
    return 0;
fail:
    free(r->tally);
    free(r->session_key);
    free(r->session_id);
    free(r->turn_id);
    free(r->span_id);
    free(r);
    return rc;
}

int records_flush(struct records *r, int64_t deadline_ms)
{
    struct timespec ts;
    int rc = 0;

    release_open_tool(r);
    pthread_mutex_lock(&reg_lock);
    while (r->tally->delivered + r->tally->dropped < r->tally->queued) {
        if (util_now_ms() >= deadline_ms) {
            rc = -ETIMEDOUT;
            break;
        }
        deadline_ts(deadline_ms, &ts);
        pthread_cond_timedwait(&reg_done, &reg_lock, &ts);
    }
    if (rc == 0 && r->tally->lost)
        rc = -EIO;
    pthread_mutex_unlock(&reg_lock);
    return rc;
}

void records_counts(struct records *r, uint64_t *ret_queued, uint64_t *ret_delivered,
                    uint64_t *ret_dropped)
{
    pthread_mutex_lock(&reg_lock);
    *ret_queued = r->tally->queued;
    *ret_delivered = r->tally->delivered;
    *ret_dropped = r->tally->dropped;
    pthread_mutex_unlock(&reg_lock);
}

void records_free(struct records *r)
{
    if (!r)
        return;
    release_open_tool(r);
    for (size_t i = 0; i < RECORDS_OPEN_MAX; i++)
        if (r->open[i].used)
            block_close(&r->open[i]);
    pthread_mutex_lock(&reg_lock);
    r->ob->users--;
    outbox_maybe_free_locked(r->ob);
    tally_unref_locked(r->tally);
    pthread_mutex_unlock(&reg_lock);
    agenta_api_free(r->api);
    free(r->session_key);
    free(r->session_id);
    free(r->turn_id);
    free(r->span_id);
    free(r);
}

int records_drain_all(int64_t deadline_ms)
{
    struct timespec ts;
    int rc = 0;

    pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_lock);
    for (;;) {
        bool busy = false;

        for (struct outbox *ob = outboxes; ob && !busy; ob = ob->next)
            busy = ob->head || ob->thread_running;
        if (!busy)
            break;
        if (util_now_ms() >= deadline_ms) {
            rc = -ETIMEDOUT;
            break;
        }
        deadline_ts(deadline_ms, &ts);
        pthread_cond_timedwait(&reg_done, &reg_lock, &ts);
    }
    pthread_mutex_unlock(&reg_lock);
    return rc;
}
