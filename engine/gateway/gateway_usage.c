/*
 * gateway_usage — usage read from answers as they pass (gateway_usage.h).
 */
#include "gateway/gateway_usage.h"

#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "base/jsonx.h"

/* Path suffixes of the APIs whose usage is read (the base path before them is the route's). */
static const struct {
    const char *suffix;
    enum gateway_api api;
} apis[] = {
    {"/chat/completions", GATEWAY_API_CHAT},
    {"/responses", GATEWAY_API_RESPONSES},
    {"/messages", GATEWAY_API_MESSAGES},
};

enum gateway_api gateway_api_of_path(const char *path, size_t len)
{
    if (memmem(path, len, ":generateContent", 16) ||
        memmem(path, len, ":streamGenerateContent", 22))
        return GATEWAY_API_GEMINI;
    for (size_t i = 0; i < sizeof(apis) / sizeof(apis[0]); i++) {
        size_t n = strlen(apis[i].suffix);

        if (len >= n && memcmp(path + len - n, apis[i].suffix, n) == 0)
            return apis[i].api;
    }
    return GATEWAY_API_OTHER;
}

const char *gateway_api_name(enum gateway_api api)
{
    switch (api) {
    case GATEWAY_API_CHAT:
        return "chat";
    case GATEWAY_API_RESPONSES:
        return "responses";
    case GATEWAY_API_MESSAGES:
        return "messages";
    case GATEWAY_API_GEMINI:
        return "gemini";
    default:
        return "other";
    }
}

void gateway_usage_init(struct gateway_usage *u, enum gateway_api api, bool sse)
{
    memset(u, 0, sizeof(*u));
    u->api = api;
    u->sse = sse;
    buf_init(&u->line, GATEWAY_USAGE_LINE_MAX);
    buf_init(&u->data, GATEWAY_USAGE_LINE_MAX);
}

void gateway_usage_release(struct gateway_usage *u)
{
    buf_release(&u->line);
    buf_release(&u->data);
}

/* A non-negative integer member, or -1 when absent or not an integer. */
static int64_t count(json_object *o, const char *key)
{
    json_object *v = jsonx_get(o, key);
    int64_t n;

    if (!v || !json_object_is_type(v, json_type_int))
        return -1;
    n = json_object_get_int64(v);
    return n < 0 ? -1 : n;
}

static void note_model(struct gateway_usage *u, json_object *o)
{
    const char *m = jsonx_str(o, "model");

    if (m && !u->model[0])
        snprintf(u->model, sizeof(u->model), "%s", m);
}

static void set_total(struct gateway_usage_counts *c, int64_t total)
{
    c->total = total >= 0 ? total : c->input + c->output;
    c->known = true;
}

/* OpenAI's usage objects: Chat Completions' (prompt_/completion_) or Responses' (input_/output_).
 */
static bool openai_usage(struct gateway_usage *u, json_object *usage)
{
    struct gateway_usage_counts *c = &u->counts;
    bool chat = jsonx_get(usage, "prompt_tokens") != NULL;
    json_object *details =
        jsonx_get(usage, chat ? "prompt_tokens_details" : "input_tokens_details");
    int64_t in = count(usage, chat ? "prompt_tokens" : "input_tokens");
    int64_t out = count(usage, chat ? "completion_tokens" : "output_tokens");
    int64_t cached = count(details, "cached_tokens"),
            written = count(details, "cache_write_tokens");

    if (!usage || !json_object_is_type(usage, json_type_object) || (in < 0 && out < 0))
        return false;
    c->input = in > 0 ? in : 0;
    c->output = out > 0 ? out : 0;
    c->cache_write = written > 0 ? written : 0;
    c->cache_read = cached > c->cache_write ? cached - c->cache_write : 0;
    set_total(c, count(usage, "total_tokens"));
    return true;
}

/* Anthropic's usage: input counts every prompt token, cached ones included. */
static void anthropic_usage(struct gateway_usage *u, json_object *usage)
{
    struct gateway_usage_counts *c = &u->counts;
    int64_t in = count(usage, "input_tokens"), out = count(usage, "output_tokens");
    int64_t rd = count(usage, "cache_read_input_tokens");
    int64_t wr = count(usage, "cache_creation_input_tokens");

    if (!usage || !json_object_is_type(usage, json_type_object))
        return;
    if (in >= 0) {
        c->cache_read = rd > 0 ? rd : 0;
        c->cache_write = wr > 0 ? wr : 0;
        c->input = in + c->cache_read + c->cache_write;
    }
    if (out >= 0)
        c->output = out;
    set_total(c, -1);
}

/* Gemini's usageMetadata (cumulative over a stream: the last one seen counts). */
static void gemini_usage(struct gateway_usage *u, json_object *o)
{
    json_object *m = jsonx_get(o, "usageMetadata");
    struct gateway_usage_counts *c = &u->counts;
    int64_t in = count(m, "promptTokenCount"), out = count(m, "candidatesTokenCount");
    int64_t thoughts = count(m, "thoughtsTokenCount"), cached = count(m, "cachedContentTokenCount");

    note_model(u, o); /* "modelVersion" is Gemini's; "model" when a proxy adds it */
    if (!m || !json_object_is_type(m, json_type_object) || (in < 0 && out < 0))
        return;
    c->input = in > 0 ? in : 0;
    c->output = (out > 0 ? out : 0) + (thoughts > 0 ? thoughts : 0);
    c->cache_read = cached > 0 ? cached : 0;
    c->cache_write = 0;
    set_total(c, count(m, "totalTokenCount"));
}

/* One parsed SSE event (its data as JSON). true when it made the usage final. */
static bool on_event(struct gateway_usage *u, json_object *o)
{
    const char *type = jsonx_str(o, "type");
    json_object *resp;

    switch (u->api) {
    case GATEWAY_API_CHAT:
        note_model(u, o);
        return openai_usage(u, jsonx_get(o, "usage"));
    case GATEWAY_API_RESPONSES:
        resp = jsonx_get(o, "response");
        note_model(u, resp);
        if (!type ||
            (strcmp(type, "response.completed") != 0 && strcmp(type, "response.incomplete") != 0 &&
             strcmp(type, "response.failed") != 0))
            return false;
        openai_usage(u, jsonx_get(resp, "usage"));
        return true;
    case GATEWAY_API_GEMINI:
        gemini_usage(u, o);
        return false; /* cumulative: final when the stream ends */
    case GATEWAY_API_MESSAGES:
        if (!type)
            return false;
        if (strcmp(type, "message_start") == 0) {
            note_model(u, jsonx_get(o, "message"));
            anthropic_usage(u, jsonx_path(o, "message.usage"));
            return false;
        }
        if (strcmp(type, "message_delta") == 0) {
            anthropic_usage(u, jsonx_get(o, "usage"));
            return true;
        }
        return strcmp(type, "message_stop") == 0 || strcmp(type, "error") == 0;
    default:
        return false;
    }
}

/* Whether an event's data can matter: only those are parsed (most chunks are text deltas). */
static bool worth_parsing(const struct gateway_usage *u, const char *data, size_t len)
{
    if (u->api == GATEWAY_API_MESSAGES)
        return memmem(data, len, "\"message_", 9) || memmem(data, len, "\"error\"", 7);
    if (u->api == GATEWAY_API_RESPONSES)
        return memmem(data, len, "\"response.c", 11) || memmem(data, len, "\"response.i", 11) ||
               memmem(data, len, "\"response.f", 11);
    if (u->api == GATEWAY_API_GEMINI)
        return memmem(data, len, "\"usageMetadata\"", 15) != NULL;
    return memmem(data, len, "\"usage\"", 7) != NULL ||
           (!u->model[0] && memmem(data, len, "\"model\"", 7) != NULL);
}

static json_object *parse(const char *text, size_t len)
{
    json_tokener *tok = json_tokener_new_ex(64);
    json_object *o = NULL;

    if (!tok || len > (size_t)INT32_MAX) {
        json_tokener_free(tok);
        return NULL;
    }
    o = json_tokener_parse_ex(tok, text, (int)len);
    if (o && json_tokener_get_parse_end(tok) != len) {
        /* trailing bytes: fine as long as they are blanks */
        for (size_t i = json_tokener_get_parse_end(tok); i < len; i++)
            if (text[i] != ' ' && text[i] != '\n' && text[i] != '\r' && text[i] != '\t') {
                json_object_put(o);
                o = NULL;
                break;
            }
    }
    json_tokener_free(tok);
    return o;
}

/* The blank line that ends an SSE event. */
static bool dispatch(struct gateway_usage *u)
{
    const char *d = u->data.data;
    size_t n = u->data.len;
    json_object *o;
    bool fin = false;

    if (!d || n == 0 || u->overflow)
        goto out;
    if (u->api == GATEWAY_API_CHAT && n == 6 && memcmp(d, "[DONE]", 6) == 0) {
        fin = true;
        goto out;
    }
    if (!worth_parsing(u, d, n))
        goto out;
    o = parse(d, n);
    if (o && json_object_is_type(o, json_type_object))
        fin = on_event(u, o);
    json_object_put(o);
out:
    buf_reset(&u->data);
    u->event[0] = '\0';
    u->overflow = false;
    return fin;
}

/* One SSE line (without its line end). true when it ended an event that made usage final. */
static bool sse_line(struct gateway_usage *u, const char *p, size_t n)
{
    if (n == 0)
        return dispatch(u);
    if (n >= 5 && memcmp(p, "data:", 5) == 0) {
        p += 5;
        n -= 5;
        if (n > 0 && *p == ' ') {
            p++;
            n--;
        }
        if ((u->data.len > 0 && buf_append_char(&u->data, '\n') < 0) ||
            buf_append(&u->data, p, n) < 0)
            u->overflow = true;
    } else if (n >= 6 && memcmp(p, "event:", 6) == 0) {
        size_t k = n - 6;
        const char *v = p + 6;
        if (k > 0 && *v == ' ') {
            v++;
            k--;
        }
        snprintf(u->event, sizeof(u->event), "%.*s", (int)(k < 63 ? k : 63), v);
    }
    return false;
}

bool gateway_usage_feed(struct gateway_usage *u, const char *data, size_t len)
{
    bool fin = false;

    if (!u->sse) {
        if (!u->overflow && buf_append(&u->line, data, len) < 0)
            u->overflow = true;
        return false;
    }
    while (len > 0) {
        const char *nl = memchr(data, '\n', len);
        size_t take = nl ? (size_t)(nl - data) : len;

        if (!u->line_long && buf_append(&u->line, data, take) < 0)
            u->line_long = true;
        data += take;
        len -= take;
        if (!nl)
            break;
        data++;
        len--;
        if (u->line_long) {
            u->overflow = true; /* the event this line belongs to is lost */
        } else {
            size_t n = u->line.len;
            if (n > 0 && u->line.data[n - 1] == '\r')
                n--;
            if (sse_line(u, u->line.data ? u->line.data : "", n) && !u->final) {
                u->final = true;
                fin = true;
            }
        }
        u->line_long = false;
        buf_reset(&u->line);
    }
    return fin;
}

void gateway_usage_finish(struct gateway_usage *u)
{
    json_object *o;

    if (u->sse) {
        if (u->data.len > 0)
            (void)dispatch(u);
        u->final = true;
        return;
    }
    if (!u->overflow && u->line.len > 0 && u->api != GATEWAY_API_OTHER) {
        o = parse(u->line.data, u->line.len);
        if (o && u->api == GATEWAY_API_GEMINI && json_object_is_type(o, json_type_array) &&
            json_object_array_length(o) > 0)
            gemini_usage(u, json_object_array_get_idx(o, json_object_array_length(o) - 1));
        else if (o && json_object_is_type(o, json_type_object) && u->api == GATEWAY_API_GEMINI)
            gemini_usage(u, o);
        else if (o && json_object_is_type(o, json_type_object)) {
            note_model(u, o);
            if (u->api == GATEWAY_API_MESSAGES)
                anthropic_usage(u, jsonx_get(o, "usage"));
            else
                openai_usage(u, jsonx_get(o, "usage"));
        }
        json_object_put(o);
    }
    u->final = true;
}
