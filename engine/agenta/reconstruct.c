#include "agenta/reconstruct.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agenta/records.h"
#include "agenta/records_incomplete.h"
#include "base/jsonx.h"
#include "base/util.h"

/* A value nested deeper than this is replayed as its JSON text: the request parser caps
 * depth at JSONX_DEFAULT_DEPTH, and a message adds four levels around a block's value. */
#define VALUE_DEPTH_MAX (JSONX_DEFAULT_DEPTH - 8)
#define CUT_MARKER " [... cut: the rest is in the session log]"

void reconstruct_history_init(struct reconstruct_history *h)
{
    memset(h, 0, sizeof(*h));
}

void reconstruct_history_release(struct reconstruct_history *h)
{
    json_object_put(h->messages);
    memset(h, 0, sizeof(*h));
}

/* ---- the shape of a request ------------------------------------------------------------- */

bool reconstruct_minimal_history(const struct run_request *req)
{
    json_object *ev = NULL;
    bool fresh;

    if (req->nmessages != 1)
        return false;
    fresh = records_user_message(req, &ev) == 0;
    json_object_put(ev);
    return fresh;
}

static bool is_approval(const struct content_block *b)
{
    json_object *approved = jsonx_get(b->output, "approved");

    return b->type == BLOCK_TOOL_RESULT && b->output &&
           json_object_is_type(b->output, json_type_object) && approved &&
           json_object_is_type(approved, json_type_boolean);
}

bool reconstruct_approval_reply_only(const struct run_request *req)
{
    /* any user text is a prompt: this is no bare approval reply */
    for (size_t i = 0; i < req->nmessages; i++) {
        const struct chat_message *m = &req->messages[i];

        if (!m->role || strcmp(m->role, "user") != 0)
            continue;
        for (size_t j = 0; j < m->nblocks; j++)
            if (m->blocks[j].type == BLOCK_TEXT && m->blocks[j].text && m->blocks[j].text[0])
                return false;
    }
    /* the newest tool envelope must answer a gate */
    for (size_t i = req->nmessages; i-- > 0;) {
        const struct chat_message *m = &req->messages[i];
        bool envelope = false;

        for (size_t j = 0; j < m->nblocks; j++) {
            const struct content_block *b = &m->blocks[j];

            if (b->type != BLOCK_TOOL_CALL && b->type != BLOCK_TOOL_RESULT)
                continue;
            envelope = true;
            if (is_approval(b))
                return true;
        }
        if (envelope)
            return false;
    }
    return false;
}

/* ---- the fold --------------------------------------------------------------------------- */

static int depth_of(json_object *o, int limit)
{
    int deepest = 0;

    if (limit <= 0)
        return 1;
    if (json_object_is_type(o, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(o) && deepest < limit; i++) {
            int d = depth_of(json_object_array_get_idx(o, i), limit - 1);
            if (d > deepest)
                deepest = d;
        }
        return deepest + 1;
    }
    if (json_object_is_type(o, json_type_object)) {
        json_object_object_foreach(o, k, v)
        {
            int d;

            (void)k;
            if (deepest >= limit)
                break;
            d = depth_of(v, limit - 1);
            if (d > deepest)
                deepest = d;
        }
        return deepest + 1;
    }
    return 1;
}

/*
 * A string fit for the request parser: NUL bytes dropped (the parser refuses them), cut at a
 * UTF-8 boundary with a marker beyond RECONSTRUCT_STRING_MAX.
 */
static json_object *string_capped(const char *s, size_t n)
{
    size_t keep = RECONSTRUCT_STRING_MAX - sizeof(CUT_MARKER), i = 0;
    json_object *o = NULL;
    struct buf b;

    if (n <= RECONSTRUCT_STRING_MAX && !memchr(s, '\0', n))
        return json_object_new_string_len(s, (int)n);
    buf_init(&b, RECONSTRUCT_STRING_MAX + 1);
    while (i < n && b.len < keep) {
        const char *nul = memchr(s + i, '\0', n - i);
        size_t run = (nul ? (size_t)(nul - s) : n) - i;

        if (run > keep - b.len)
            run = keep - b.len;
        if (buf_append(&b, s + i, run) < 0)
            goto out;
        i += run;
        while (i < n && s[i] == '\0')
            i++;
    }
    if (i < n) {
        /* cut; a sequence the cut falls into goes whole (the text is valid UTF-8) */
        if (((unsigned char)s[i] & 0xc0) == 0x80) {
            while (b.len > 0 && ((unsigned char)b.data[b.len - 1] & 0xc0) == 0x80)
                b.len--;
            if (b.len > 0)
                b.len--;
        }
        b.data[b.len] = '\0';
        if (buf_append_str(&b, CUT_MARKER) < 0)
            goto out;
    }
    o = json_object_new_string_len(buf_str(&b), (int)b.len);
out:
    buf_release(&b);
    return o;
}

static json_object *str_of(json_object *v)
{
    return string_capped(json_object_get_string(v), (size_t)json_object_get_string_len(v));
}

/* A block's value (input/output) fit to be parsed again: capped strings, bounded depth. */
static json_object *value_of(json_object *v)
{
    json_object *copy = NULL;
    const char *text;
    size_t n;

    if (!v)
        return NULL;
    if (json_object_is_type(v, json_type_string))
        return str_of(v);
    if (depth_of(v, VALUE_DEPTH_MAX + 1) > VALUE_DEPTH_MAX) {
        text = jsonx_text(v, &n);
        return string_capped(text, n);
    }
    text = jsonx_text(v, &n);
    if (n > RECONSTRUCT_STRING_MAX)
        return string_capped(text, n);
    if (json_object_deep_copy(v, &copy, NULL) != 0)
        return NULL;
    return copy;
}

static json_object *text_block(const char *text, size_t n)
{
    json_object *b = json_object_new_object();

    if (!b)
        return NULL;
    json_object_object_add(b, "type", json_object_new_string("text"));
    json_object_object_add(b, "text", string_capped(text, n));
    return b;
}

static void add_copy(json_object *to, const char *key, json_object *from, const char *from_key)
{
    json_object *v = jsonx_get(from, from_key);

    if (v && json_object_is_type(v, json_type_string))
        json_object_object_add(to, key, str_of(v));
}

/* A string member and its length (JSON strings may hold NUL bytes): "" when absent. */
static const char *str_len(json_object *o, const char *key, size_t *ret_len)
{
    json_object *v = jsonx_get(o, key);

    if (!v || !json_object_is_type(v, json_type_string)) {
        *ret_len = 0;
        return NULL;
    }
    *ret_len = (size_t)json_object_get_string_len(v);
    return json_object_get_string(v);
}

/* The user message of a "user" record: its text, and its attachments as blocks. */
static json_object *user_message(json_object *ev)
{
    json_object *m = json_object_new_object(), *atts = jsonx_get(ev, "attachments"), *content;
    const char *type = jsonx_str(ev, "type"), *text = NULL;
    size_t natts = 0, tlen = 0;

    if (!m)
        return NULL;
    if (type && strcmp(type, "message") == 0)
        text = str_len(ev, "text", &tlen);
    if (!text)
        text = "";
    if (atts && json_object_is_type(atts, json_type_array))
        natts = json_object_array_length(atts);
    json_object_object_add(m, "role", json_object_new_string("user"));
    if (natts == 0) {
        json_object_object_add(m, "content", string_capped(text, tlen));
        return m;
    }
    content = json_object_new_array();
    json_object_object_add(m, "content", content);
    if (tlen)
        json_object_array_add(content, text_block(text, tlen));
    for (size_t i = 0; i < natts; i++) {
        json_object *a = json_object_array_get_idx(atts, i), *b, *size;

        if (!jsonx_str(a, "attachmentId"))
            continue;
        b = json_object_new_object();
        if (!b)
            break;
        json_object_object_add(b, "type", json_object_new_string("attachment"));
        add_copy(b, "attachmentId", a, "attachmentId");
        add_copy(b, "filename", a, "filename");
        add_copy(b, "mimeType", a, "mediaType");
        size = jsonx_get(a, "size");
        if (size && (json_object_is_type(size, json_type_int) ||
                     json_object_is_type(size, json_type_double)))
            json_object_object_add(b, "size", json_object_get(size));
        json_object_array_add(content, b);
    }
    return m;
}

/* An agent record's block, or NULL when it is no conversation. call_names: id -> name. */
static json_object *agent_block(json_object *ev, json_object *call_names)
{
    const char *type = jsonx_str(ev, "type"), *id = jsonx_str(ev, "id"), *s;
    json_object *b, *v;
    size_t n;

    if (strcmp(type, "message") == 0) {
        s = str_len(ev, "text", &n);
        return s && n ? text_block(s, n) : NULL;
    }
    if (strcmp(type, "error") == 0) {
        struct buf t;

        s = str_len(ev, "message", &n);
        buf_init(&t, RECONSTRUCT_STRING_MAX * 2);
        if (buf_append_str(&t, "[error: ") < 0 || buf_append(&t, s ? s : "", n) < 0 ||
            buf_append_char(&t, ']') < 0) {
            buf_release(&t);
            return NULL;
        }
        b = text_block(t.data, t.len);
        buf_release(&t);
        return b;
    }
    if ((strcmp(type, "tool_call") != 0 && strcmp(type, "tool_result") != 0) || !id)
        return NULL;
    b = json_object_new_object();
    if (!b)
        return NULL;
    json_object_object_add(b, "type", json_object_new_string(type));
    add_copy(b, "toolCallId", ev, "id");
    if (type[5] == 'c') {
        s = jsonx_str(ev, "name");
        if (s) {
            add_copy(b, "toolName", ev, "name");
            json_object_object_add(call_names, id, json_object_new_string(s));
        }
        v = value_of(jsonx_get(ev, "input"));
        if (v)
            json_object_object_add(b, "input", v);
        return b;
    }
    s = jsonx_str(call_names, id);
    if (s)
        json_object_object_add(b, "toolName", json_object_new_string(s));
    v = jsonx_get(ev, "output");
    v = value_of(v ? v : jsonx_get(ev, "data"));
    if (v)
        json_object_object_add(b, "output", v);
    v = jsonx_get(ev, "isError");
    if (v && json_object_is_type(v, json_type_boolean))
        json_object_object_add(b, "isError", json_object_get(v));
    return b;
}

/* The assistant message of blocks (taken); an all-text one becomes a string. */
static json_object *assistant_message(json_object *blocks)
{
    json_object *m = json_object_new_object();
    bool all_text = true;
    struct buf text;

    if (!m) {
        json_object_put(blocks);
        return NULL;
    }
    json_object_object_add(m, "role", json_object_new_string("assistant"));
    for (size_t i = 0; i < json_object_array_length(blocks) && all_text; i++)
        all_text = strcmp(jsonx_str(json_object_array_get_idx(blocks, i), "type"), "text") == 0;
    if (!all_text) {
        json_object_object_add(m, "content", blocks);
        return m;
    }
    buf_init(&text, RUN_OUTPUT_MAX);
    for (size_t i = 0; i < json_object_array_length(blocks); i++)
        if (buf_append_str(&text, jsonx_str(json_object_array_get_idx(blocks, i), "text")) < 0)
            break;
    json_object_object_add(m, "content", string_capped(buf_str(&text), text.len));
    buf_release(&text);
    json_object_put(blocks);
    return m;
}

int reconstruct_from_records(json_object *records, const char *current_turn_id,
                             struct reconstruct_history *ret)
{
    json_object *out = json_object_new_array(), *names = json_object_new_object();
    json_object *assistant = NULL;
    size_t nrecords = 0, nprior = 0;

    if (!out || !names) {
        json_object_put(out);
        json_object_put(names);
        return -ENOMEM;
    }
    if (records && json_object_is_type(records, json_type_array))
        nrecords = json_object_array_length(records);
    for (size_t i = 0; i < nrecords; i++) {
        json_object *row = json_object_array_get_idx(records, i), *ev, *b;
        const char *turn = jsonx_str(row, "turn_id"), *source = jsonx_str(row, "record_source");

        if (current_turn_id && current_turn_id[0] && turn && strcmp(turn, current_turn_id) == 0)
            continue;
        nprior++;
        ev = jsonx_get(row, "attributes");
        if (!ev || !json_object_is_type(ev, json_type_object) || !jsonx_str(ev, "type"))
            continue;
        if (source && strcmp(source, "user") == 0) {
            if (assistant && json_object_array_length(assistant) > 0)
                json_object_array_add(out, assistant_message(assistant));
            else
                json_object_put(assistant);
            assistant = NULL;
            json_object_array_add(out, user_message(ev));
            continue;
        }
        b = agent_block(ev, names);
        if (!b)
            continue;
        if (!assistant)
            assistant = json_object_new_array();
        json_object_array_add(assistant, b);
    }
    if (assistant && json_object_array_length(assistant) > 0)
        json_object_array_add(out, assistant_message(assistant));
    else
        json_object_put(assistant);
    json_object_put(names);
    /* a NULL in the array is an allocation that failed on the way */
    for (size_t i = 0; i < json_object_array_length(out); i++) {
        if (!json_object_array_get_idx(out, i)) {
            json_object_put(out);
            return -ENOMEM;
        }
    }
    reconstruct_history_init(ret);
    ret->messages = out;
    ret->nrecords = nrecords;
    ret->nprior = nprior;
    return 0;
}

int reconstruct_fetch(struct agenta_api *api, const char *session_key, const char *session_id,
                      const char *turn_id, bool approval_reply_only,
                      struct reconstruct_history *ret, char *err, size_t errlen)
{
    struct reconstruct_history h;
    json_object *records = NULL;
    char qerr[256];
    int r;

    if (records_incomplete_has(session_key)) {
        util_seterr(err, errlen,
                    "session %s lost a durable record; refusing to rebuild an incomplete "
                    "conversation",
                    session_id);
        return -ENOTRECOVERABLE;
    }
    r = agenta_api_records_query(api, session_id, &records, qerr, sizeof(qerr));
    if (r < 0) {
        util_seterr(err, errlen,
                    "session %s record log is unreadable; cannot rebuild the conversation (%s)",
                    session_id, qerr);
        return r;
    }
    r = reconstruct_from_records(records, turn_id, &h);
    json_object_put(records);
    if (r < 0) {
        util_seterr(err, errlen, "session %s: out of memory rebuilding the conversation",
                    session_id);
        return r;
    }
    if (approval_reply_only && (h.nprior == 0 || json_object_array_length(h.messages) == 0)) {
        if (h.nprior == 0)
            util_seterr(err, errlen,
                        "session %s: cannot resume an approval reply with no conversation to "
                        "rebuild (the log holds no turn other than %s)",
                        session_id, turn_id && turn_id[0] ? turn_id : "the current one");
        else
            util_seterr(err, errlen,
                        "session %s: cannot resume an approval reply with no conversation to "
                        "rebuild (%zu prior record(s) rebuilt into no messages)",
                        session_id, h.nprior);
        reconstruct_history_release(&h);
        return -ENOENT;
    }
    *ret = h;
    return 0;
}

int reconstruct_splice(const struct reconstruct_history *h, const struct request_limits *lim,
                       struct run_request *req, char *err, size_t errlen)
{
    json_object *root = NULL, *msgs, *inbound = jsonx_get(req->root, "messages");
    size_t nrebuilt = h->messages ? json_object_array_length(h->messages) : 0, ninbound = 0;
    size_t skip = 0;
    struct run_request fresh;
    const char *text;
    size_t n;
    int r;

    if (nrebuilt == 0)
        return 0;
    if (inbound && json_object_is_type(inbound, json_type_array))
        ninbound = json_object_array_length(inbound);
    if (nrebuilt + ninbound > lim->max_messages)
        skip = nrebuilt + ninbound - lim->max_messages > nrebuilt
                   ? nrebuilt
                   : nrebuilt + ninbound - lim->max_messages;
    /* a shallow copy of the root: the members are shared, only "messages" and "turnId" differ */
    root = json_object_new_object();
    msgs = json_object_new_array();
    if (!root || !msgs) {
        json_object_put(root);
        json_object_put(msgs);
        util_seterr(err, errlen, "out of memory");
        return -ENOMEM;
    }
    json_object_object_foreach(req->root, k, v)
    {
        if (strcmp(k, "messages") != 0 && strcmp(k, "turnId") != 0)
            json_object_object_add(root, k, json_object_get(v));
    }
    for (size_t i = skip; i < nrebuilt; i++)
        json_object_array_add(msgs, json_object_get(json_object_array_get_idx(h->messages, i)));
    for (size_t i = 0; i < ninbound; i++)
        json_object_array_add(msgs, json_object_get(json_object_array_get_idx(inbound, i)));
    json_object_object_add(root, "messages", msgs);
    if (req->turn_id)
        json_object_object_add(root, "turnId", json_object_new_string(req->turn_id));
    text = jsonx_text(root, &n);
    r = request_parse(text, n, lim, &fresh, err, errlen);
    json_object_put(root);
    if (r < 0)
        return r;
    run_request_release(req);
    *req = fresh;
    if (req->turn_id == fresh.turn_id_buf)
        req->turn_id = req->turn_id_buf;
    return 0;
}
