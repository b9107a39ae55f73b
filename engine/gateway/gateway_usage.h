/*
 * gateway_usage — the provider's own usage read from a model answer as it passes through the
 * model gateway (model_gateway.h), without holding the answer back. Pure; the input comes from
 * the model provider (outside the sandbox) but is still treated as hostile: every line and body
 * kept is capped, and it is fuzzed (tests/fuzz/fuzz_gateway_usage.c).
 *
 * Which API an answer belongs to comes from the request path (gateway_api_of_path). Where the
 * numbers are:
 *   - OpenAI Chat Completions: `usage` {prompt_tokens, completion_tokens, total_tokens,
 *     prompt_tokens_details.cached_tokens} of the JSON body, or of the stream's chunk that
 *     carries it (the last one before [DONE] with stream_options.include_usage);
 *   - OpenAI Responses: `response.usage` {input_tokens, output_tokens, total_tokens,
 *     input_tokens_details.cached_tokens} of the response.completed / .incomplete / .failed
 *     event, or `usage` of the JSON body;
 *   - Anthropic Messages: message_start's message.usage {input_tokens,
 *     cache_read_input_tokens, cache_creation_input_tokens} and message_delta's usage
 *     {output_tokens (cumulative), input counts when it repeats them}; `usage` of the JSON body;
 *   - Google Gemini (generateContent): `usageMetadata` {promptTokenCount, candidatesTokenCount,
 *     thoughtsTokenCount, totalTokenCount, cachedContentTokenCount} of the body (an object, or
 *     the last element of a streamed array) or of each SSE event (cumulative: the last one
 *     counts; final only when the stream ends).
 * input counts every prompt token (cached ones included), cache_read / cache_write say how many
 * of them were read from / written to the provider's cache, total = input + output unless the
 * provider said otherwise.
 *
 * A stream's usage is "final" at the event that carries the last numbers (the usage chunk, the
 * completed response, message_delta): gateway_usage_feed says so for the piece that holds it,
 * so the gateway can report the call before the harness has the bytes that end it.
 */
#ifndef AR_GATEWAY_USAGE_H
#define AR_GATEWAY_USAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define GATEWAY_USAGE_LINE_MAX (8u * 1024 * 1024) /* an SSE event's data, or a JSON body */
#define GATEWAY_USAGE_MODEL_MAX 128

enum gateway_api {
    GATEWAY_API_OTHER = 0, /* forwarded, no usage read */
    GATEWAY_API_CHAT,      /* .../chat/completions */
    GATEWAY_API_RESPONSES, /* .../responses */
    GATEWAY_API_MESSAGES,  /* .../messages (not .../messages/count_tokens) */
    GATEWAY_API_GEMINI,    /* .../models/<m>:generateContent, :streamGenerateContent */
};

struct gateway_usage_counts {
    int64_t input;
    int64_t output;
    int64_t total;
    int64_t cache_read;
    int64_t cache_write;
    bool known; /* the answer said something about usage */
};

struct gateway_usage {
    enum gateway_api api;
    bool sse;        /* text/event-stream; else one JSON body */
    struct buf line; /* the current SSE line (capped), or the JSON body (capped) */
    bool line_long;  /* the current SSE line passed the cap (skipped to its end) */
    bool overflow;   /* the current event / the body passed the cap: its usage is lost */
    struct buf data; /* the current SSE event's data lines, joined */
    char event[64];  /* the current SSE event's name */
    struct gateway_usage_counts counts;
    bool final;                          /* the last numbers were seen */
    char model[GATEWAY_USAGE_MODEL_MAX]; /* the model the answer names ("" when none) */
};

/* The API a request path (without the query) is for. */
enum gateway_api gateway_api_of_path(const char *path, size_t len);
const char *gateway_api_name(enum gateway_api api);

void gateway_usage_init(struct gateway_usage *u, enum gateway_api api, bool sse);
void gateway_usage_release(struct gateway_usage *u);
/*
 * Read the next len bytes of the answer's body. true when they hold the event that made the
 * usage final (a stream's usage chunk, response.completed, message_delta); false otherwise.
 */
bool gateway_usage_feed(struct gateway_usage *u, const char *data, size_t len);
/* The body ended: a JSON body is read now; whatever was seen is final. */
void gateway_usage_finish(struct gateway_usage *u);

#endif
