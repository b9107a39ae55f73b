#include "transcript.h"

#include <errno.h>
#include <string.h>

#include "jsonx.h"

static const char *tool_name_for(const struct run_request *req, const char *id)
{
    for (size_t i = 0; i < req->nmessages; i++)
        for (size_t j = 0; j < req->messages[i].nblocks; j++) {
            const struct content_block *b = &req->messages[i].blocks[j];
            if (b->type == BLOCK_TOOL_CALL && b->tool_call_id && b->tool_name &&
                strcmp(b->tool_call_id, id) == 0)
                return b->tool_name;
        }
    return NULL;
}

static void render_block(const struct content_block *b, const char *name, struct buf *out)
{
    size_t n;
    const char *json;

    switch (b->type) {
    case BLOCK_TEXT:
        buf_append_str(out, b->text ? b->text : "");
        break;
    case BLOCK_IMAGE:
        buf_append_str(out, "[image]");
        break;
    case BLOCK_RESOURCE:
        buf_printf(out, "[resource: %s]", b->uri ? b->uri : "inline");
        break;
    case BLOCK_ATTACHMENT:
        buf_printf(out, "[attachment: %s]", b->uri ? b->uri : "file");
        break;
    case BLOCK_TOOL_CALL:
        json = jsonx_text(b->input, &n);
        buf_printf(out, "[called %s(", b->tool_name ? b->tool_name : "tool");
        buf_append(out, json, n < TRANSCRIPT_RESULT_MAX ? n : TRANSCRIPT_RESULT_MAX);
        buf_append_str(out, ")]");
        break;
    case BLOCK_TOOL_RESULT:
        if (b->output && json_object_is_type(b->output, json_type_object) &&
            json_object_is_type(jsonx_get(b->output, "approved"), json_type_boolean)) {
            const char *what = name ? name : b->tool_name ? b->tool_name : b->tool_call_id;
            if (json_object_get_boolean(jsonx_get(b->output, "approved")))
                buf_printf(out, "[user APPROVED %s (call %s); the call has NOT run yet]",
                           what ? what : "the tool", b->tool_call_id ? b->tool_call_id : "?");
            else
                buf_printf(out, "[user DENIED %s (call %s); the call was not executed]",
                           what ? what : "the tool", b->tool_call_id ? b->tool_call_id : "?");
            break;
        }
        json = jsonx_text(b->output, &n);
        buf_printf(out, "[%s %s: ", name ? name : b->tool_name ? b->tool_name : "tool",
                   b->is_error ? "error" : "returned");
        buf_append(out, json, n < TRANSCRIPT_RESULT_MAX ? n : TRANSCRIPT_RESULT_MAX);
        if (n > TRANSCRIPT_RESULT_MAX)
            buf_append_str(out, "...");
        buf_append_char(out, ']');
        break;
    default:
        buf_printf(out, "[%s]", b->type_name ? b->type_name : "content");
        break;
    }
}

int transcript_render_message(const struct chat_message *m, struct buf *out)
{
    for (size_t i = 0; i < m->nblocks; i++) {
        if (i)
            buf_append_char(out, ' ');
        render_block(&m->blocks[i], NULL, out);
    }
    return 0;
}

int transcript_turn_text(const struct run_request *req, const char *closing, struct buf *out)
{
    struct buf hist, latest;
    size_t start = 0;
    int r;

    buf_init(&latest, 16u * 1024 * 1024);
    r = run_request_prompt_text(req, &latest);
    if (r < 0 && !closing) {
        buf_release(&latest);
        return r;
    }
    if (req->nmessages <= 1 && !closing) {
        r = buf_append_str(out, buf_str(&latest));
        buf_release(&latest);
        return r;
    }
    buf_init(&hist, 64u * 1024 * 1024);
    /* with a closing frame the tail (answers to approvals) is history too */
    for (size_t i = 0; i + (closing ? 0 : 1) < req->nmessages; i++) {
        const struct chat_message *m = &req->messages[i];

        buf_printf(&hist, "%s: ", m->role ? m->role : "unknown");
        for (size_t j = 0; j < m->nblocks; j++) {
            const struct content_block *b = &m->blocks[j];
            if (j)
                buf_append_char(&hist, ' ');
            render_block(b, b->type == BLOCK_TOOL_RESULT && b->tool_call_id
                                ? tool_name_for(req, b->tool_call_id)
                                : NULL,
                         &hist);
        }
        buf_append_char(&hist, '\n');
    }
    if (hist.len > TRANSCRIPT_HISTORY_MAX) {
        start = hist.len - TRANSCRIPT_HISTORY_MAX;
        /* do not cut a UTF-8 sequence */
        while (start < hist.len && ((unsigned char)hist.data[start] & 0xc0) == 0x80)
            start++;
    }
    r = buf_append_str(out, "Conversation so far:\n");
    if (r == 0 && start)
        r = buf_append_str(out, "[earlier messages omitted]\n");
    if (r == 0)
        r = buf_append(out, hist.data ? hist.data + start : "", hist.len - start);
    if (r == 0)
        r = buf_append_str(out, "\n");
    if (r == 0 && closing)
        r = buf_append_str(out, closing);
    else if (r == 0)
        r = buf_printf(out, "Continue the conversation. The user now says:\n%s", buf_str(&latest));
    buf_release(&hist);
    buf_release(&latest);
    return r == -E2BIG ? -E2BIG : r;
}
