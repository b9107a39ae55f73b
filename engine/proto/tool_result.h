/*
 * tool_result — what a runner-executed tool call produced: the text the model reads and
 * whether the call failed. Shared by the executors (tool_callback, mcp_client) and both ends of
 * the keeper channel (tool_channel), so it depends on nothing but libc.
 */
#ifndef AR_TOOL_RESULT_H
#define AR_TOOL_RESULT_H

#include <stdbool.h>

struct tool_result {
    char *text;       /* malloc'ed, NUL-terminated, never NULL once set */
    bool is_error;
    long http_status; /* the last HTTP status seen (0 when none), for logs and spans */
};

/* Set r to a copy of text (NULL = ""); -ENOMEM leaves r untouched. */
int tool_result_set(struct tool_result *r, bool is_error, const char *text);
/* Free the text and zero r; NULL is a no-op. */
void tool_result_release(struct tool_result *r);

#endif
