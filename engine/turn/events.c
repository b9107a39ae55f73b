#include "turn/events.h"

#include <errno.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "telemetry/stages.h"
#include "turn/journal.h"

#define COALESCE_MAX RUN_OUTPUT_MAX

void event_stream_init(struct event_stream *es, const struct event_sink *sink)
{
    memset(es, 0, sizeof(*es));
    if (sink && sink->write_line) {
        es->sink = *sink;
        es->streaming = true;
    } else {
        es->collected = json_object_new_array();
    }
    buf_init(&es->pending, COALESCE_MAX);
}

void event_stream_release(struct event_stream *es)
{
    journal_close(es->journal);
    if (es->collected)
        json_object_put(es->collected);
    buf_release(&es->pending);
    memset(es, 0, sizeof(*es));
}

int events_record_line(const char *kind, json_object *payload, struct buf *out)
{
    const char *text;
    size_t n;
    int r;

    text = jsonx_text(payload, &n);
    r = buf_printf(out, "{\"kind\":\"%s\",\"%s\":", kind, kind);
    if (r < 0)
        return r;
    r = buf_append(out, text, n);
    if (r < 0)
        return r;
    return buf_append_str(out, "}\n");
}

int events_record_line_seq(const char *kind, json_object *payload, uint64_t seq,
                           const char *turn_id, struct buf *out)
{
    const char *text;
    size_t n;
    int r;

    r = buf_printf(out, "{\"kind\":\"%s\",\"seq\":%llu,", kind, (unsigned long long)seq);
    if (r == 0 && turn_id) {
        json_object *id = json_object_new_string(turn_id);

        text = jsonx_text(id, &n);
        r = buf_append_str(out, "\"turnId\":");
        if (r == 0)
            r = buf_append(out, text, n);
        if (r == 0)
            r = buf_append_char(out, ',');
        json_object_put(id);
    }
    if (r == 0)
        r = buf_printf(out, "\"%s\":", kind);
    if (r < 0)
        return r;
    text = jsonx_text(payload, &n);
    r = buf_append(out, text, n);
    if (r < 0)
        return r;
    return buf_append_str(out, "}\n");
}

static void close_open_block(struct event_stream *es)
{
    json_object *ev;

    if (es->open_kind == 0)
        return;
    ev = event_new(es->open_kind == 1 ? "message" : "thought");
    if (ev) {
        json_object_object_add(ev, "text",
                               json_object_new_string_len(buf_str(&es->pending),
                                                          (int)es->pending.len));
        json_object_array_add(es->collected, ev);
    }
    buf_reset(&es->pending);
    es->open_kind = 0;
}

static int collect(struct event_stream *es, json_object *ev)
{
    const char *type = jsonx_str(ev, "type");
    int kind = 0;

    if (!type)
        type = "";
    if (strncmp(type, "message_", 8) == 0)
        kind = 1;
    else if (strncmp(type, "thought_", 8) == 0)
        kind = 2;
    if (kind == 0) {
        close_open_block(es);
        json_object_array_add(es->collected, ev);
        return 0;
    }
    if (es->open_kind != kind)
        close_open_block(es);
    es->open_kind = kind;
    if (strcmp(type + 8, "delta") == 0) {
        const char *d = jsonx_str(ev, "delta");
        if (d && buf_append_str(&es->pending, d) < 0) {
            json_object_put(ev);
            return -E2BIG;
        }
    } else if (strcmp(type + 8, "end") == 0) {
        close_open_block(es);
    }
    json_object_put(ev);
    return 0;
}

/*
 * Number, journal and write one record (streaming): in the journal before the client has it,
 * so a worker that adopts the turn numbers what it rebuilds after it.
 */
static int deliver(struct event_stream *es, const char *kind, json_object *ev)
{
    uint64_t seq = ++es->seq;
    struct buf line;
    int r;

    buf_init(&line, strcmp(kind, "result") == 0 ? RESULT_LINE_MAX + 256 : EVENT_LINE_MAX);
    r = events_record_line_seq(kind, ev, seq, seq == 1 ? es->turn_id : NULL, &line);
    if (es->journal_opener)
        event_stream_journal_open(es);
    if (r == 0 && es->journal) {
        int jr = journal_append(es->journal, seq, es->det, line.data, line.len);
        if (jr < 0)
            log_debug("turn journal: record %llu not kept: %s", (unsigned long long)seq,
                      strerror(-jr));
    }
    es->last_write_ms = util_now_ms();
    if (r == 0 && seq <= es->sink_after)
        ; /* the client has it */
    else if (r == 0 && !es->client_gone &&
             es->sink.write_line(es->sink.ctx, line.data, line.len) < 0)
        es->client_gone = true;
    else if (r == 0 && !es->client_gone)
        es->unflushed = es->sink.flush != NULL;
    if (es->client_gone && !es->client_gone_ms)
        es->client_gone_ms = es->last_write_ms;
    buf_release(&line);
    return r;
}

int event_emit(struct event_stream *es, json_object *ev)
{
    int r = 0;

    if (!ev)
        return -ENOMEM;
    if (es->observe)
        es->observe(es->observe_ctx, ev);
    es->last_event_ms = util_now_ms();
    if (es->nevents++ == 0)
        es->first_event_ms = es->last_event_ms;
    if (!es->first_output_ms) {
        const char *type = jsonx_str(ev, "type");
        if (type && strcmp(type, "data") != 0)
            es->first_output_ms = es->last_event_ms;
    }
    if (stages_turn_on()) {
        const char *type = jsonx_str(ev, "type");
        if (type && strcmp(type, "message_delta") == 0)
            stages_mark(STAGES_W_DELTA);
    }
    if (!es->streaming)
        return collect(es, ev);
    if (++es->det <= es->skip_det) {
        json_object_put(ev); /* rebuilt by an adoption: the dead worker delivered it */
        return 0;
    }
    r = deliver(es, "event", ev);
    json_object_put(ev);
    return r == -ENOMEM ? r : 0;
}

int event_stream_result(struct event_stream *es, json_object *payload)
{
    int r;

    if (!es->streaming || !payload)
        return payload ? 0 : -ENOMEM;
    r = deliver(es, "result", payload);
    es->result_written = r == 0;
    event_stream_flush(es);
    if (r == 0 && es->journal) {
        (void)journal_finish(es->journal);
        journal_close(es->journal); /* the turn is over */
        es->journal = NULL;
    }
    return r == -ENOMEM ? r : 0;
}

void event_stream_journal_open(struct event_stream *es)
{
    int (*opener)(void *ctx, struct journal **ret) = es->journal_opener;

    es->journal_opener = NULL;
    if (!opener || es->journal)
        return;
    (void)opener(es->journal_opener_ctx, &es->journal);
}

int64_t event_stream_keepalive_at(const struct event_stream *es)
{
    if (!es->streaming || !es->keepalive_ms || (es->client_gone && !es->journal))
        return 0;
    return (es->last_write_ms ? es->last_write_ms : util_now_ms()) + (int64_t)es->keepalive_ms;
}

void event_stream_keepalive(struct event_stream *es)
{
    json_object *ev = event_data_phase("working");

    if (!ev || !es->streaming) {
        json_object_put(ev);
        return;
    }
    (void)deliver(es, "event", ev);
    json_object_put(ev);
    event_stream_flush(es);
}

/* The client's copy (the journal has every record as it is made: deliver). */
void event_stream_flush(struct event_stream *es)
{
    if (es->unflushed && !es->client_gone) {
        es->unflushed = false;
        if (es->sink.flush(es->sink.ctx) < 0) {
            es->client_gone = true;
            es->client_gone_ms = util_now_ms();
        }
    }
}

bool event_stream_client_alive(struct event_stream *es)
{
    if (es->client_gone)
        return false;
    if (es->streaming && es->sink.client_alive && !es->sink.client_alive(es->sink.ctx)) {
        es->client_gone = true;
        es->client_gone_ms = util_now_ms();
    }
    return !es->client_gone;
}

json_object *event_stream_take(struct event_stream *es)
{
    json_object *arr;

    if (!es->collected)
        return json_object_new_array();
    close_open_block(es);
    arr = es->collected;
    es->collected = json_object_new_array();
    return arr;
}

json_object *event_new(const char *type)
{
    json_object *ev = json_object_new_object();

    if (ev)
        json_object_object_add(ev, "type", json_object_new_string(type));
    return ev;
}

json_object *event_data_phase(const char *phase)
{
    json_object *ev = event_new("data"), *data = json_object_new_object();

    json_object_object_add(data, "phase", json_object_new_string(phase));
    json_object_object_add(ev, "name", json_object_new_string("agent-status"));
    json_object_object_add(ev, "data", data);
    json_object_object_add(ev, "transient", json_object_new_boolean(1));
    return ev;
}

json_object *event_environment_ready(bool spare)
{
    json_object *ev = event_data_phase("environment_ready");

    json_object_object_add(json_object_object_get(ev, "data"), "spare",
                           json_object_new_boolean(spare));
    return ev;
}

json_object *event_environment_ready_cold(bool spare, const char *resume, const char *note)
{
    json_object *ev = event_environment_ready(spare), *data = json_object_object_get(ev, "data");

    json_object_object_add(data, "resume", json_object_new_string(resume));
    if (note && note[0])
        json_object_object_add(data, "resumeNote", json_object_new_string(note));
    return ev;
}

json_object *event_block(const char *type, const char *id)
{
    json_object *ev = event_new(type);

    json_object_object_add(ev, "id", json_object_new_string(id));
    return ev;
}

json_object *event_text(const char *type, const char *id, const char *delta)
{
    json_object *ev = event_block(type, id);

    json_object_object_add(ev, "delta", json_object_new_string(delta));
    return ev;
}

json_object *event_tool_call(const char *id, const char *name, json_object *input)
{
    json_object *ev = event_new("tool_call");

    if (id)
        json_object_object_add(ev, "id", json_object_new_string(id));
    if (name)
        json_object_object_add(ev, "name", json_object_new_string(name));
    json_object_object_add(ev, "input", input ? json_object_get(input) : json_object_new_object());
    return ev;
}

json_object *event_tool_result(const char *id, const char *output, bool is_error, bool denied)
{
    json_object *ev = event_new("tool_result");

    if (id)
        json_object_object_add(ev, "id", json_object_new_string(id));
    json_object_object_add(ev, "output", json_object_new_string(output ? output : ""));
    json_object_object_add(ev, "isError", json_object_new_boolean(is_error));
    if (denied)
        json_object_object_add(ev, "denied", json_object_new_boolean(1));
    return ev;
}

json_object *event_usage(const struct run_usage *u)
{
    json_object *ev = event_new("usage");

    run_usage_fill(ev, u);
    return ev;
}

json_object *event_error(const char *message, const char *code)
{
    json_object *ev = event_new("error");

    json_object_object_add(ev, "message", json_object_new_string(message));
    if (code)
        json_object_object_add(ev, "code", json_object_new_string(code));
    return ev;
}

json_object *event_done(const char *stop_reason, const char *trace_id)
{
    json_object *ev = event_new("done");

    if (stop_reason)
        json_object_object_add(ev, "stopReason", json_object_new_string(stop_reason));
    if (trace_id)
        json_object_object_add(ev, "traceId", json_object_new_string(trace_id));
    return ev;
}
