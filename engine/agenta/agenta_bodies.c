#include "agenta/agenta_bodies.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/jsonx.h"
#include "base/util.h"

#define ANSWER_DEPTH 64

static void add_str(json_object *o, const char *key, const char *v)
{
    if (v)
        json_object_object_add(o, key, json_object_new_string(v));
}

/* {id?, slug?, version?} of a reference object; NULL when it has none of them. */
static json_object *reference_of(json_object *ref)
{
    static const char *const keys[] = {"id", "slug", "version"};
    json_object *o;

    if (!ref || !json_object_is_type(ref, json_type_object))
        return NULL;
    o = json_object_new_object();
    if (!o)
        return NULL;
    for (size_t i = 0; i < 3; i++) {
        json_object *v = jsonx_get(ref, keys[i]);

        /* a version may arrive as a number; the API's Reference holds strings */
        if (v && json_object_is_type(v, json_type_string))
            add_str(o, keys[i], json_object_get_string(v));
        else if (v && json_object_is_type(v, json_type_int))
            add_str(o, keys[i], json_object_get_string(v));
    }
    if (json_object_object_length(o) == 0) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

static const struct {
    const char *from;
    const char *key;
} workflow_refs[] = {
    {"artifact", "workflow"}, {"variant", "workflow_variant"}, {"revision", "workflow_revision"}};

/* runContext.workflow as Agenta's invoke references: {"workflow":{id,slug,version},
 * "workflow_variant":{..},"workflow_revision":{..}}; NULL when there is none. */
static json_object *workflow_references(json_object *run_context)
{
    json_object *wf = jsonx_get(run_context, "workflow"), *out = NULL;

    for (size_t i = 0; i < 3; i++) {
        json_object *ref = reference_of(jsonx_get(wf, workflow_refs[i].from));

        if (!ref)
            continue;
        if (!out)
            out = json_object_new_object();
        json_object_object_add(out, workflow_refs[i].key, ref);
    }
    return out;
}

json_object *agenta_workflow_reference_list(json_object *run_context)
{
    json_object *wf = jsonx_get(run_context, "workflow"), *out = NULL;

    for (size_t i = 0; i < 3; i++) {
        json_object *ref = reference_of(jsonx_get(wf, workflow_refs[i].from));

        if (!ref)
            continue;
        add_str(ref, "key", workflow_refs[i].key);
        if (!out)
            out = json_object_new_array();
        json_object_array_add(out, ref);
    }
    return out;
}

json_object *agenta_beat_body(const struct agenta_beat *b)
{
    json_object *o = json_object_new_object();

    if (!o)
        return NULL;
    add_str(o, "session_id", b->session_id);
    add_str(o, "replica_id", b->replica_id);
    add_str(o, "turn_id", b->turn_id);
    json_object_object_add(o, "is_running", json_object_new_boolean(b->is_running));
    if (b->name && b->name[0])
        add_str(o, "name", b->name);
    if (b->references && json_object_is_type(b->references, json_type_array) &&
        json_object_array_length(b->references) > 0)
        json_object_object_add(o, "references", json_object_get(b->references));
    return o;
}

static void copy_str(json_object *o, const char *key, char *out, size_t outlen)
{
    const char *v = jsonx_str(o, key);

    out[0] = '\0';
    if (v && strlen(v) < outlen && util_visible(v))
        memcpy(out, v, strlen(v) + 1);
}

int agenta_beat_reply_parse(const char *body, size_t len, struct agenta_beat_reply *ret)
{
    struct agenta_beat_reply rep;
    json_object *o = NULL, *v;
    char perr[64];

    if (jsonx_parse_once(body, len, ANSWER_DEPTH, &o, perr, sizeof(perr)) < 0 || !o ||
        !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return -EBADMSG;
    }
    memset(&rep, 0, sizeof(rep));
    v = jsonx_get(o, "is_current_turn");
    rep.is_current_turn =
        !(v && json_object_is_type(v, json_type_boolean) && !json_object_get_boolean(v));
    v = jsonx_get(o, "admitted");
    if (v && json_object_is_type(v, json_type_boolean))
        rep.admitted = json_object_get_boolean(v);
    else
        rep.admitted = rep.is_current_turn;
    copy_str(jsonx_get(o, "stream"), "id", rep.stream_id, sizeof(rep.stream_id));
    copy_str(o, "replica_id", rep.replica_id, sizeof(rep.replica_id));
    json_object_put(o);
    *ret = rep;
    return 0;
}

json_object *agenta_record_body(const struct agenta_record *rec)
{
    json_object *o = json_object_new_object();

    if (!o)
        return NULL;
    add_str(o, "session_id", rec->session_id);
    add_str(o, "record_id", rec->record_id);
    json_object_object_add(o, "record_index", json_object_new_int64((int64_t)rec->record_index));
    add_str(o, "timestamp", rec->timestamp);
    add_str(o, "record_source", rec->source);
    add_str(o, "record_type", jsonx_str(rec->attributes, "type"));
    json_object_object_add(o, "attributes", json_object_get(rec->attributes));
    add_str(o, "turn_id", rec->turn_id && rec->turn_id[0] ? rec->turn_id : NULL);
    add_str(o, "span_id", rec->span_id && rec->span_id[0] ? rec->span_id : NULL);
    return o;
}

json_object *agenta_interaction_body(const struct agenta_interaction *it)
{
    json_object *o = json_object_new_object(), *data = json_object_new_object();
    json_object *req = json_object_new_object(), *flags = json_object_new_object(), *refs;

    if (!o || !data || !req || !flags) {
        json_object_put(o);
        json_object_put(data);
        json_object_put(req);
        json_object_put(flags);
        return NULL;
    }
    add_str(o, "session_id", it->session_id);
    add_str(o, "turn_id", it->turn_id);
    add_str(o, "token", it->token);
    add_str(o, "kind", it->kind);
    add_str(req, "tool", it->tool ? it->tool : "");
    json_object_object_add(req, "args", it->args ? json_object_get(it->args) : NULL);
    add_str(req, "tool_call_id", it->tool_call_id);
    json_object_object_add(data, "request", req);
    refs = workflow_references(it->run_context);
    if (refs)
        json_object_object_add(data, "references", refs);
    if (it->parameters && json_object_is_type(it->parameters, json_type_object) &&
        json_object_object_length(it->parameters) > 0)
        json_object_object_add(data, "parameters", json_object_get(it->parameters));
    json_object_object_add(o, "data", data);
    json_object_object_add(flags, "delivered_in_band", json_object_new_boolean(1));
    json_object_object_add(o, "flags", flags);
    return o;
}

json_object *agenta_transition_body(const char *session_id, const char *token, const char *verdict,
                                    const char *tool_call_id)
{
    json_object *o = json_object_new_object();

    if (!o)
        return NULL;
    add_str(o, "session_id", session_id);
    add_str(o, "token", token);
    add_str(o, "status", "resolved");
    if (verdict) {
        json_object *res = json_object_new_object();

        add_str(res, "verdict", verdict);
        add_str(res, "tool_call_id", tool_call_id ? tool_call_id : "");
        json_object_object_add(o, "resolution", res);
    }
    return o;
}

json_object *agenta_cancel_stale_body(const char *session_id, const char *turn_id,
                                      const char *const *tokens, size_t ntokens)
{
    json_object *o = json_object_new_object();

    if (!o)
        return NULL;
    add_str(o, "session_id", session_id);
    add_str(o, "turn_id", turn_id);
    if (ntokens > 0) {
        json_object *arr = json_object_new_array();

        for (size_t i = 0; i < ntokens; i++)
            json_object_array_add(arr, json_object_new_string(tokens[i]));
        json_object_object_add(o, "tokens", arr);
    }
    return o;
}

json_object *agenta_turn_body(const struct agenta_turn *t)
{
    json_object *o = json_object_new_object();

    if (!o)
        return NULL;
    add_str(o, "session_id", t->session_id);
    add_str(o, "stream_id", t->stream_id);
    add_str(o, "turn_id", t->turn_id);
    json_object_object_add(o, "turn_index", json_object_new_int64((int64_t)t->turn_index));
    add_str(o, "harness_kind", t->harness_kind);
    add_str(o, "agent_session_id", t->agent_session_id);
    add_str(o, "sandbox_id", t->sandbox_id);
    if (t->references && json_object_is_type(t->references, json_type_array) &&
        json_object_array_length(t->references) > 0)
        json_object_object_add(o, "references", json_object_get(t->references));
    add_str(o, "trace_id", t->trace_id);
    add_str(o, "span_id", t->span_id);
    add_str(o, "start_time", t->start_time);
    return o;
}

json_object *agenta_turn_complete_body(const char *session_id, uint64_t turn_index,
                                       const char *agent_session_id, const char *end_time)
{
    json_object *o = json_object_new_object();

    if (!o)
        return NULL;
    add_str(o, "session_id", session_id);
    json_object_object_add(o, "turn_index", json_object_new_int64((int64_t)turn_index));
    add_str(o, "agent_session_id", agent_session_id);
    add_str(o, "end_time", end_time);
    return o;
}

json_object *agenta_turn_query_body(const char *session_id, const char *harness_kind)
{
    json_object *o = json_object_new_object(), *q = json_object_new_object();
    json_object *w = json_object_new_object();

    if (!o || !q || !w) {
        json_object_put(o);
        json_object_put(q);
        json_object_put(w);
        return NULL;
    }
    add_str(q, "session_id", session_id);
    add_str(q, "harness_kind", harness_kind);
    json_object_object_add(o, "query", q);
    json_object_object_add(w, "limit", json_object_new_int(1));
    add_str(w, "order", "descending");
    json_object_object_add(o, "windowing", w);
    return o;
}

int agenta_turn_query_parse(json_object *answer, struct agenta_turn_row *ret)
{
    json_object *turns = jsonx_get(answer, "turns"), *row, *v;
    struct agenta_turn_row t;

    if (!answer || !json_object_is_type(answer, json_type_object))
        return -EBADMSG;
    memset(&t, 0, sizeof(t));
    t.turn_index = -1;
    if (turns && json_object_is_type(turns, json_type_array) &&
        json_object_array_length(turns) > 0) {
        row = json_object_array_get_idx(turns, 0);
        if (!row || !json_object_is_type(row, json_type_object))
            return -EBADMSG;
        t.found = true;
        copy_str(row, "turn_id", t.turn_id, sizeof(t.turn_id));
        copy_str(row, "harness_kind", t.harness_kind, sizeof(t.harness_kind));
        copy_str(row, "agent_session_id", t.agent_session_id, sizeof(t.agent_session_id));
        copy_str(row, "sandbox_id", t.sandbox_id, sizeof(t.sandbox_id));
        v = jsonx_get(row, "turn_index");
        if (v && json_object_is_type(v, json_type_int) && json_object_get_int64(v) >= 0)
            t.turn_index = json_object_get_int64(v);
        t.ended = jsonx_str(row, "end_time") && jsonx_str(row, "end_time")[0];
    }
    *ret = t;
    return 0;
}

json_object *agenta_attachments_reference_body(const char *session_id, const char *const *ids,
                                               size_t nids)
{
    json_object *o = json_object_new_object(), *arr = json_object_new_array();

    if (!o || !arr) {
        json_object_put(o);
        json_object_put(arr);
        return NULL;
    }
    add_str(o, "session_id", session_id);
    for (size_t i = 0; i < nids; i++)
        json_object_array_add(arr, json_object_new_string(ids[i]));
    json_object_object_add(o, "attachment_ids", arr);
    return o;
}

void agenta_iso_time(int64_t wall, char out[32])
{
    time_t secs = (time_t)(wall / 1000);
    struct tm tm;
    char date[24];

    gmtime_r(&secs, &tm);
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 32, "%s.%03dZ", date, (int)(wall % 1000));
}
