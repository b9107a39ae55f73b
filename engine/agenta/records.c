/*
 * records — the persisting emitter of a session run in platform mode (records.h): events
 * coalesced into records, their bodies, the inbound user message.
 */
#include "agenta/records.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agenta/ids.h"
#include "agenta/records_outbox.h"
#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"

#define TEXT_MAX RUN_OUTPUT_MAX
#define LEGACY_ATTEMPTS 3

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
    struct records_outbox *ob;
    struct records_tally *tally;
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

/* Drop a record that never made it into the queue. */
static void drop_record(struct records *r, const char *why)
{
    records_outbox_drop(r->ob, r->tally, r->durable, why);
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

/* The call of one record: durable or legacy delivery (records_new), held or not. */
static void record_call(struct records *r, bool held, struct records_call *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->api = r->api;
    ret->path = AGENTA_PATH_RECORDS_INGEST;
    ret->record = true;
    ret->durable = r->durable;
    ret->timeout_ms = agenta_api_config(r->api)->records_query_timeout_ms;
    ret->attempts = r->attempts;
    ret->backoff = r->backoff;
    ret->backoff_base_ms = r->backoff_base_ms;
    ret->hold_until = held ? util_now_ms() + (int64_t)r->tool_ttl_ms : 0;
}

/* Persist ev with the given index; held: as the open tool call. Returns the item's seq. */
static int persist_at(struct records *r, json_object *ev, uint64_t index, const char *source,
                      const char *record_id, bool held, uint64_t *ret_seq)
{
    struct records_call call;
    struct buf body;
    int rc;

    rc = record_body(r, ev, index, source, record_id, &body);
    if (rc < 0) {
        drop_record(r, rc == -E2BIG ? "larger than the record cap" : ar_strerror(rc));
        return rc;
    }
    record_call(r, held, &call);
    rc = records_outbox_push(r->ob, r->tally, &call, &body, ret_seq);
    if (rc == -ENOMEM)
        drop_record(r, "out of memory");
    return rc;
}

/* Release the open tool call: its snapshot goes out now. */
static void release_open_tool(struct records *r)
{
    if (!r->open_tool_id)
        return;
    records_outbox_release(r->ob, r->open_tool_seq);
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

    rc = ids_record_id(r->session_id, r->open_tool_id, "tool_call", r->turn_id, record_id);
    if (rc == 0)
        rc = record_body(r, ev, r->open_tool_index, "agent", record_id, &body);
    if (rc < 0)
        return rc;
    rc = records_outbox_replace(r->ob, r->open_tool_seq, &body,
                                util_now_ms() + (int64_t)r->tool_ttl_ms);
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
    if (ids_record_id(r->session_id, id, "tool_call", r->turn_id, record_id) < 0) {
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
        if (ids_record_id(r->session_id, id, type, r->turn_id, record_id) < 0) {
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
    struct records_call call = {.api = r->api,
                                .path = path,
                                .attempts = attempts ? attempts : 1,
                                .backoff = AGENTA_BACKOFF_LINEAR,
                                .backoff_base_ms = r->backoff_base_ms};
    struct buf text;
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
    return records_outbox_push(r->ob, r->tally, &call, &text, NULL);
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
    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->rd = rd;
    r->session_key = strdup(p->session_key);
    r->session_id = strdup(p->session_id);
    r->turn_id = util_xstrdup(p->turn_id);
    r->span_id = util_xstrdup(p->span_id);
    if (!r->session_key || !r->session_id || (p->turn_id && !r->turn_id) ||
        (p->span_id && !r->span_id))
        goto fail;
    r->durable = cfg->records_durable;
    r->attempts = r->durable ? cfg->ingest_max_retries : LEGACY_ATTEMPTS;
    r->backoff = r->durable ? AGENTA_BACKOFF_EXPONENTIAL : AGENTA_BACKOFF_LINEAR;
    r->backoff_base_ms = p->backoff_base_ms ? p->backoff_base_ms : AGENTA_RETRY_BASE_MS;
    r->tool_ttl_ms = cfg->record_tool_ttl_ms ? cfg->record_tool_ttl_ms : 3000;
    rc = records_outbox_attach(r->session_key, &r->ob, &r->tally);
    if (rc < 0)
        goto fail;
    r->api = agenta_api_ref(api);
    *ret_records = r;
    return 0;
fail:
    free(r->session_key);
    free(r->session_id);
    free(r->turn_id);
    free(r->span_id);
    free(r);
    return rc;
}

int records_flush(struct records *r, int64_t deadline_ms)
{
    release_open_tool(r);
    return records_outbox_wait(r->tally, deadline_ms);
}

void records_free(struct records *r)
{
    if (!r)
        return;
    release_open_tool(r);
    for (size_t i = 0; i < RECORDS_OPEN_MAX; i++)
        if (r->open[i].used)
            block_close(&r->open[i]);
    records_outbox_detach(r->ob, r->tally);
    agenta_api_free(r->api);
    free(r->session_key);
    free(r->session_id);
    free(r->turn_id);
    free(r->span_id);
    free(r);
}
