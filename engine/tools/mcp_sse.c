/*
 * mcp_sse — Server-Sent Events, parsed as they arrive (mcp_sse.h).
 */
#include "tools/mcp_sse.h"

#include <stdio.h>
#include <string.h>

void mcp_sse_init(struct mcp_sse *s, size_t max,
                  int (*on_event)(void *ctx, const char *event, const char *data, size_t len),
                  void *ctx)
{
    memset(s, 0, sizeof(*s));
    buf_init(&s->line, max);
    buf_init(&s->data, max);
    s->on_event = on_event;
    s->ctx = ctx;
}

void mcp_sse_release(struct mcp_sse *s)
{
    buf_release(&s->line);
    buf_release(&s->data);
}

static int sse_line(struct mcp_sse *s)
{
    const char *line = buf_str(&s->line), *colon, *value;
    size_t flen;
    int r = 0;

    if (s->line.len == 0) {
        if (s->has_data) {
            size_t n = s->data.len;

            if (n > 0 && s->data.data[n - 1] == '\n')
                n--;
            r = s->on_event(s->ctx, s->event[0] ? s->event : "message", buf_str(&s->data), n);
        }
        buf_reset(&s->data);
        s->has_data = false;
        s->event[0] = '\0';
        return r;
    }
    if (line[0] == ':')
        return 0;
    colon = memchr(line, ':', s->line.len);
    flen = colon ? (size_t)(colon - line) : s->line.len;
    value = colon ? colon + 1 : line + s->line.len;
    if (*value == ' ')
        value++;
    if (flen == 4 && strncmp(line, "data", 4) == 0) {
        size_t vlen = s->line.len - (size_t)(value - line);

        r = buf_append(&s->data, value, vlen);
        if (r == 0)
            r = buf_append_char(&s->data, '\n');
        s->has_data = true;
    } else if (flen == 5 && strncmp(line, "event", 5) == 0) {
        snprintf(s->event, sizeof(s->event), "%s", value);
    }
    return r;
}

int mcp_sse_feed(struct mcp_sse *s, const char *data, size_t len)
{
    size_t i = 0;
    int r;

    while (i < len) {
        size_t n = 0;

        if (s->after_cr && data[i] == '\n') {
            s->after_cr = false;
            i++;
            continue;
        }
        s->after_cr = false;
        while (i + n < len && data[i + n] != '\r' && data[i + n] != '\n')
            n++;
        r = buf_append(&s->line, data + i, n);
        if (r < 0)
            return r;
        i += n;
        if (i == len)
            break;
        s->after_cr = data[i] == '\r';
        i++;
        r = sse_line(s);
        buf_reset(&s->line);
        if (r != 0)
            return r;
    }
    return 0;
}
