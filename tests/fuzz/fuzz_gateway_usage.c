/*
 * fuzz_gateway_usage — the model answers the model gateway reads usage from
 * (gateway/gateway_usage.h).
 *
 * Input layout: byte 0 % 5 is the API (gateway_api), byte 1 & 1 says an event stream (else one
 * JSON body), byte 2 % 32 + 1 the size of the pieces the answer arrives in; the rest is the
 * answer's body. Properties:
 *   - reading never crashes or reads past its input (the sanitizers check), counts are never
 *     negative, and the model name is a NUL-terminated string within its buffer;
 *   - the answer read in pieces gives exactly the counts, model and finality it gives read at
 *     once, and "final" is said at most once.
 */
#include <string.h>

#include "fuzz.h"
#include "gateway/gateway_usage.h"

static void read_answer(struct gateway_usage *u, enum gateway_api api, bool sse, const char *d,
                        size_t n, size_t step, int *ret_finals)
{
    int finals = 0;

    gateway_usage_init(u, api, sse);
    for (size_t i = 0; i < n; i += step)
        finals += gateway_usage_feed(u, d + i, n - i < step ? n - i : step);
    gateway_usage_finish(u);
    *ret_finals = finals;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gateway_usage a, b;
    enum gateway_api api;
    int fa, fb;
    bool sse;

    if (size < 3)
        return 0;
    api = (enum gateway_api)(data[0] % 5);
    sse = data[1] & 1;
    read_answer(&a, api, sse, (const char *)data + 3, size - 3, size, &fa);
    read_answer(&b, api, sse, (const char *)data + 3, size - 3, (size_t)(data[2] % 32) + 1, &fb);
    FUZZ_CHECK(fa <= 1 && fb <= 1 && fa == fb);
    FUZZ_CHECK(a.final && b.final);
    FUZZ_CHECK(a.counts.input >= 0 && a.counts.output >= 0 && a.counts.total >= 0 &&
               a.counts.cache_read >= 0 && a.counts.cache_write >= 0);
    FUZZ_CHECK(memchr(a.model, '\0', sizeof(a.model)) != NULL);
    FUZZ_CHECK(memcmp(&a.counts, &b.counts, sizeof(a.counts)) == 0);
    FUZZ_CHECK(strcmp(a.model, b.model) == 0);
    gateway_usage_release(&a);
    gateway_usage_release(&b);
    return 0;
}
