/*
 * fuzz_ndjson — the NDJSON event records the runner streams to its client.
 *
 * Input layout: byte 0 picks an event builder, the rest is split at NUL bytes into the strings
 * it takes (delta, id, ...; a missing one is ""). Strings json-c's UTF-8 validation refuses are
 * skipped: events only ever carry text that came through a validating parser. Properties:
 *   - events_record_line writes exactly one line: a single '\n', at its end;
 *   - the line parses back (jsonx_parse, strict, UTF-8 validated) to {"kind":"event","event":E}
 *     where E carries every string byte for byte;
 *   - a streaming event_stream hands its sink that same line numbered: events_record_line_seq
 *     of it ({"kind":"event","seq":1,"event":E}), which parses back to the same E;
 *   - a collecting event_stream coalesces message_delta pieces back into the whole text.
 */
#include <string.h>

#include "base/jsonx.h"
#include "fuzz.h"
#include "turn/events.h"

#define NFIELDS 3
#define LINE_MAX_BYTES (256u * 1024 * 1024)

struct capture {
    struct buf line;
    int calls;
};

/*
 * Whether json-c's parser accepts s as the content of a JSON string: s is quoted with only
 * the escapes JSON requires and parsed with UTF-8 validation on.
 */
static bool json_utf8_ok(const char *s)
{
    static const char hex[] = "0123456789abcdef";
    struct buf q;
    json_object *o = NULL;
    char err[128];
    bool ok = false;

    buf_init(&q, 16u * 1024 * 1024);
    if (buf_append_char(&q, '"') < 0)
        goto out;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[6] = {'\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15]};
        int r;

        if (*p < 0x20)
            r = buf_append(&q, esc, sizeof(esc));
        else if (*p == '"' || *p == '\\')
            r = buf_append_char(&q, '\\') < 0 ? -1 : buf_append_char(&q, (char)*p);
        else
            r = buf_append_char(&q, (char)*p);
        if (r < 0)
            goto out;
    }
    if (buf_append_char(&q, '"') < 0)
        goto out;
    if (jsonx_parse(q.data, q.len, 4, &o, err, sizeof(err)) < 0)
        goto out;
    /* the quoting must not change the text, or the oracle itself is broken */
    FUZZ_CHECK(o && json_object_is_type(o, json_type_string));
    FUZZ_CHECK(strcmp(json_object_get_string(o), s) == 0);
    ok = true;
out:
    json_object_put(o);
    buf_release(&q);
    return ok;
}

static bool has_string(json_object *o, const char *key, const char *want)
{
    json_object *v = jsonx_get(o, key);

    return v && json_object_is_type(v, json_type_string) &&
           (size_t)json_object_get_string_len(v) == strlen(want) &&
           memcmp(json_object_get_string(v), want, strlen(want)) == 0;
}

static int capture_line(void *ctx, const char *line, size_t len)
{
    struct capture *c = ctx;

    c->calls++;
    return buf_append(&c->line, line, len);
}

/* The record line of ev; checks it is one line and parses back. Returns the parsed event. */
static json_object *record_and_parse(json_object *ev, struct buf *line)
{
    json_object *rec = NULL, *back;
    char err[128];
    int r;

    FUZZ_CHECK(events_record_line("event", ev, line) == 0);
    FUZZ_CHECK(line->len > 0 && line->data[line->len - 1] == '\n');
    FUZZ_CHECK(memchr(line->data, '\n', line->len - 1) == NULL);
    r = jsonx_parse(line->data, line->len, JSONX_DEFAULT_DEPTH, &rec, err, sizeof(err));
    if (r < 0)
        fprintf(stderr, "record line does not parse: %s\n", err);
    FUZZ_CHECK(r == 0 && rec && json_object_is_type(rec, json_type_object));
    FUZZ_CHECK(json_object_object_length(rec) == 2);
    FUZZ_CHECK(has_string(rec, "kind", "event"));
    back = jsonx_get(rec, "event");
    FUZZ_CHECK(back && json_object_equal(back, ev));
    json_object_get(back);
    json_object_put(rec);
    return back;
}

static json_object *build(uint8_t which, const char *f[NFIELDS])
{
    switch (which % 6) {
    case 0:
        return event_text("message_delta", f[1], f[0]);
    case 1:
        return event_text("thought_delta", f[1], f[0]);
    case 2:
        return event_tool_result(f[1], f[0], which & 0x10, which & 0x20);
    case 3:
        return event_error(f[0], f[1][0] ? f[1] : NULL);
    case 4:
        return event_tool_call(f[1], f[2], NULL);
    default:
        return event_done(f[2], f[1]);
    }
}

static void check_fields(uint8_t which, json_object *back, const char *f[NFIELDS])
{
    switch (which % 6) {
    case 0:
    case 1:
        FUZZ_CHECK(has_string(back, "delta", f[0]) && has_string(back, "id", f[1]));
        break;
    case 2:
        FUZZ_CHECK(has_string(back, "output", f[0]) && has_string(back, "id", f[1]));
        break;
    case 3:
        FUZZ_CHECK(has_string(back, "message", f[0]));
        break;
    case 4:
        FUZZ_CHECK(has_string(back, "id", f[1]) && has_string(back, "name", f[2]));
        break;
    default:
        FUZZ_CHECK(has_string(back, "stopReason", f[2]) && has_string(back, "traceId", f[1]));
        break;
    }
}

/* Emit the delta in pieces (split where the input says) and expect one coalesced message. */
static void check_coalescing(const char *delta, uint8_t cuts)
{
    struct event_stream es;
    json_object *arr, *msg;
    size_t n = strlen(delta), at = 0;

    event_stream_init(&es, NULL);
    FUZZ_CHECK(event_emit(&es, event_block("message_start", "m")) == 0);
    while (at < n) {
        size_t piece = 1 + (cuts & 7) * 3u;
        char *part;

        cuts = (uint8_t)((cuts >> 3) | (cuts << 5));
        if (piece > n - at)
            piece = n - at;
        part = strndup(delta + at, piece);
        FUZZ_CHECK(part != NULL);
        FUZZ_CHECK(event_emit(&es, event_text("message_delta", "m", part)) == 0);
        free(part);
        at += piece;
    }
    FUZZ_CHECK(event_emit(&es, event_block("message_end", "m")) == 0);
    FUZZ_CHECK(es.nevents > 0 && !es.client_gone);
    arr = event_stream_take(&es);
    FUZZ_CHECK(arr && json_object_array_length(arr) == 1);
    msg = json_object_array_get_idx(arr, 0);
    FUZZ_CHECK(has_string(msg, "type", "message") && has_string(msg, "text", delta));
    json_object_put(arr);
    event_stream_release(&es);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *f[NFIELDS] = {"", "", ""};
    struct event_sink sink = {.write_line = capture_line};
    struct event_stream es;
    struct capture cap;
    json_object *ev, *back;
    struct buf line;
    char *copy;
    size_t nf = 0;

    if (size < 1)
        return 0;
    copy = malloc(size);
    FUZZ_CHECK(copy != NULL);
    memcpy(copy, data + 1, size - 1);
    copy[size - 1] = '\0';
    /* split at NUL bytes: the fields end where the input has a NUL, the last at the end */
    for (char *p = copy; nf < NFIELDS && p <= copy + size - 1; p += strlen(p) + 1)
        f[nf++] = p;
    for (size_t i = 0; i < NFIELDS; i++) {
        if (!json_utf8_ok(f[i]))
            goto out;
    }

    ev = build(data[0], f);
    FUZZ_CHECK(ev != NULL);
    buf_init(&line, LINE_MAX_BYTES);
    back = record_and_parse(ev, &line);
    check_fields(data[0], back, f);
    json_object_put(back);

    /* the streaming path writes the same record, numbered, through the sink */
    buf_reset(&line);
    FUZZ_CHECK(events_record_line_seq("event", ev, 1, NULL, &line) == 0);
    {
        json_object *rec = NULL;
        char err[128];

        FUZZ_CHECK(jsonx_parse(line.data, line.len, JSONX_DEFAULT_DEPTH, &rec, err, sizeof(err)) ==
                   0);
        FUZZ_CHECK(json_object_get_int64(jsonx_get(rec, "seq")) == 1);
        FUZZ_CHECK(json_object_equal(jsonx_get(rec, "event"), ev));
        json_object_put(rec);
    }
    buf_init(&cap.line, LINE_MAX_BYTES);
    cap.calls = 0;
    sink.ctx = &cap;
    event_stream_init(&es, &sink);
    FUZZ_CHECK(event_emit(&es, ev) == 0);
    FUZZ_CHECK(cap.calls == 1 && !es.client_gone);
    FUZZ_CHECK(cap.line.len == line.len && memcmp(cap.line.data, line.data, line.len) == 0);
    event_stream_release(&es);
    buf_release(&cap.line);
    buf_release(&line);

    check_coalescing(f[0], data[0]);
out:
    free(copy);
    return 0;
}
