#include "proto/tool_result.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int tool_result_set(struct tool_result *r, bool is_error, const char *text)
{
    char *copy = strdup(text ? text : "");

    if (!copy)
        return -ENOMEM;
    free(r->text);
    r->text = copy;
    r->is_error = is_error;
    return 0;
}

void tool_result_release(struct tool_result *r)
{
    if (!r)
        return;
    free(r->text);
    memset(r, 0, sizeof(*r));
}
