#include "turn/transcript.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include "base/jsonx.h"
#include "session/identity.h"

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
        buf_printf(out, "[attachment: %s]", b->filename ? b->filename : b->uri ? b->uri : "file");
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

int transcript_turn_text(const struct run_request *req, const char *closing, struct buf *out)
{
    struct buf hist, latest;
    size_t start = 0;
    int r;

    buf_init(&latest, REPLAY_LATEST_MAX);
    r = run_request_prompt_text(req, &latest);
    /* a new message of attachments or images only (platform mode) has no text of its own */
    if (r == -ENOENT && identity_tail_is_fresh_user(req))
        r = 0;
    if (r < 0 && !closing) {
        buf_release(&latest);
        return r;
    }
    if (req->nmessages <= 1 && !closing) {
        r = buf_append_str(out, buf_str(&latest));
        buf_release(&latest);
        return r;
    }
    buf_init(&hist, REPLAY_TEXT_MAX);
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

/* ---- prompts and the approvals a request answers -------------------------------------- */

static json_object *text_block(const char *text)
{
    json_object *b = json_object_new_object();

    json_object_object_add(b, "type", json_object_new_string("text"));
    json_object_object_add(b, "text", json_object_new_string(text));
    return b;
}

json_object *transcript_prompt(const struct run_request *req, bool replay, bool images)
{
    const struct chat_message *m = &req->messages[req->nmessages - 1];
    json_object *blocks = json_object_new_array(), *media = json_object_new_array();
    struct buf text;

    buf_init(&text, PROMPT_TEXT_MAX);
    if (replay)
        transcript_turn_text(req, NULL, &text);
    else
        run_request_prompt_text(req, &text);
    for (size_t i = 0; i < m->nblocks; i++) {
        const struct content_block *b = &m->blocks[i];
        json_object *img;

        if (b->type != BLOCK_IMAGE)
            continue;
        if (!images || !b->data) {
            buf_append_str(&text, "\n[image omitted: the harness does not take images]");
            continue;
        }
        img = json_object_new_object();
        json_object_object_add(img, "type", json_object_new_string("image"));
        json_object_object_add(img, "data", json_object_new_string(b->data));
        json_object_object_add(img, "mimeType",
                               json_object_new_string(b->mime_type ? b->mime_type
                                                                   : "image/png"));
        json_object_array_add(media, img);
    }
    json_object_array_add(blocks, text_block(buf_str(&text)));
    for (size_t i = 0; i < json_object_array_length(media); i++)
        json_object_array_add(blocks, json_object_get(json_object_array_get_idx(media, i)));
    json_object_put(media);
    buf_release(&text);
    return blocks;
}

json_object *transcript_approval_prompt(const struct run_request *req)
{
    static const char closing[] =
        "The user has now answered the pending tool calls above. Run the APPROVED calls "
        "again with the same arguments (they have NOT run yet); do not run the DENIED ones; "
        "the results the user's client returned for its tools are above (use them, do not "
        "call those tools again); then continue the task without restarting it.";
    struct buf text;
    json_object *blocks = json_object_new_array();

    buf_init(&text, PROMPT_TEXT_MAX);
    transcript_turn_text(req, closing, &text);
    json_object_array_add(blocks, text_block(buf_str(&text)));
    buf_release(&text);
    return blocks;
}

/* {"approved": bool, "interactionToken"?} of a tool_result block, or NULL */
static json_object *approval_output(const struct content_block *b)
{
    json_object *approved;

    if (b->type != BLOCK_TOOL_RESULT || !b->output ||
        !json_object_is_type(b->output, json_type_object))
        return NULL;
    approved = jsonx_get(b->output, "approved");
    return approved && json_object_is_type(approved, json_type_boolean) ? b->output : NULL;
}

/*
 * Whether an approval answer b (its output out) answers gate g: by its interactionToken when
 * it has one (the interaction_request's id: Agenta's answer), else by the toolCallId naming
 * the gated call or the interaction. 1 yes, 0 no, -1 an older answer to the same call (its
 * token is another interaction's).
 */
static int answers_gate(const struct content_block *b, json_object *out,
                        const struct approval_gate *g)
{
    const char *token = jsonx_str(out, "interactionToken");
    bool same_call = b->tool_call_id && strcmp(b->tool_call_id, g->tool_call_id) == 0;

    if (token && token[0])
        return strcmp(token, g->token) == 0 ? 1 : same_call ? -1 : 0;
    return same_call || (b->tool_call_id && strcmp(b->tool_call_id, g->token) == 0);
}

/* A tool_result that carries a tool's output (a client tool's result), not an approval. */
static bool output_result(const struct content_block *b)
{
    return b->type == BLOCK_TOOL_RESULT && b->output && !approval_output(b);
}

/* A client tool's gate: answered by a tool_result naming its call (or its token). */
static int client_gate_decision(const struct run_request *req, const struct approval_gate *g)
{
    for (size_t i = req->nmessages; i-- > 0;) {
        const struct chat_message *m = &req->messages[i];
        for (size_t j = m->nblocks; j-- > 0;) {
            const struct content_block *b = &m->blocks[j];
            json_object *out = approval_output(b);

            if (b->type != BLOCK_TOOL_RESULT || !b->tool_call_id ||
                (strcmp(b->tool_call_id, g->tool_call_id) != 0 &&
                 strcmp(b->tool_call_id, g->token) != 0))
                continue;
            if (out) /* the browser refused to run it */
                return json_object_get_boolean(jsonx_get(out, "approved")) ? -1 : 0;
            return b->output ? 1 : -1;
        }
    }
    return -1;
}

static int approval_gate_decision(const struct run_request *req, const struct approval_gate *g)
{
    /* the latest answer wins, in a user or an assistant message alike */
    for (size_t i = req->nmessages; i-- > 0;) {
        const struct chat_message *m = &req->messages[i];
        for (size_t j = m->nblocks; j-- > 0;) {
            const struct content_block *b = &m->blocks[j];
            json_object *out = approval_output(b);
            int a = out ? answers_gate(b, out, g) : 0;

            if (a < 0)
                return -1; /* an answer to another (older) interaction */
            if (a > 0)
                return json_object_get_boolean(jsonx_get(out, "approved")) ? 1 : 0;
        }
    }
    return -1;
}

int transcript_gate_decision(const struct run_request *req, const struct approval_gate *g)
{
    return g->kind == GATE_CLIENT ? client_gate_decision(req, g) : approval_gate_decision(req, g);
}

json_object *transcript_client_output(const struct run_request *req, const char *call_id,
                                      const char *tool, json_object *args, bool *ret_is_error)
{
    const struct content_block *found = NULL;
    struct buf want, have;

    /* by the call's id: the browser answered this very call */
    for (size_t i = req->nmessages; !found && i-- > 0;)
        for (size_t j = req->messages[i].nblocks; !found && j-- > 0;) {
            const struct content_block *b = &req->messages[i].blocks[j];
            if (output_result(b) && b->tool_call_id && call_id &&
                strcmp(b->tool_call_id, call_id) == 0)
                found = b;
        }
    /* else by tool and canonical arguments: the same call, made again after a cold replay */
    buf_init(&want, CANONICAL_ARGS_MAX);
    buf_init(&have, CANONICAL_ARGS_MAX);
    identity_canonical(args, &want);
    for (size_t i = 0; !found && tool && i < req->nmessages; i++)
        for (size_t j = 0; !found && j < req->messages[i].nblocks; j++) {
            const struct content_block *c = &req->messages[i].blocks[j];

            if (c->type != BLOCK_TOOL_CALL || !c->tool_name || !c->tool_call_id ||
                strcmp(c->tool_name, tool) != 0)
                continue;
            buf_reset(&have);
            identity_canonical(c->input, &have);
            if (strcmp(buf_str(&have), buf_str(&want)) != 0)
                continue;
            for (size_t k = i; !found && k < req->nmessages; k++)
                for (size_t l = 0; !found && l < req->messages[k].nblocks; l++) {
                    const struct content_block *b = &req->messages[k].blocks[l];
                    if (output_result(b) && b->tool_call_id &&
                        strcmp(b->tool_call_id, c->tool_call_id) == 0)
                        found = b;
                }
        }
    buf_release(&want);
    buf_release(&have);
    if (!found)
        return NULL;
    *ret_is_error = found->is_error;
    return json_object_get(found->output);
}

bool transcript_tail_has_tokens(const struct run_request *req)
{
    const struct chat_message *m;

    if (req->nmessages == 0)
        return false;
    m = &req->messages[req->nmessages - 1];
    for (size_t i = 0; i < m->nblocks; i++) {
        json_object *out = approval_output(&m->blocks[i]);
        const char *token = out ? jsonx_str(out, "interactionToken") : NULL;

        if (token && token[0])
            return true;
    }
    return false;
}

bool transcript_answers_only(const struct run_request *req)
{
    const struct chat_message *m;
    bool any = false;

    if (req->nmessages == 0)
        return false;
    m = &req->messages[req->nmessages - 1];
    for (size_t i = 0; i < m->nblocks; i++) {
        if (approval_output(&m->blocks[i]) || output_result(&m->blocks[i]))
            any = true;
        else if (m->blocks[i].type == BLOCK_TEXT && m->blocks[i].text && m->blocks[i].text[0])
            return false;
    }
    return any;
}

enum permission transcript_stored_decision(const struct run_request *req, const char *tool,
                                           json_object *args)
{
    struct buf want, have;
    enum permission found = PERMISSION_UNSET;

    if (!tool)
        return PERMISSION_UNSET;
    buf_init(&want, CANONICAL_ARGS_MAX);
    buf_init(&have, CANONICAL_ARGS_MAX);
    identity_canonical(args, &want);
    for (size_t i = 0; i < req->nmessages && found == PERMISSION_UNSET; i++) {
        const struct chat_message *m = &req->messages[i];
        for (size_t j = 0; j < m->nblocks; j++) {
            const struct content_block *b = &m->blocks[j];

            if (b->type != BLOCK_TOOL_CALL || !b->tool_name || !b->tool_call_id ||
                strcasecmp(b->tool_name, tool) != 0)
                continue;
            buf_reset(&have);
            identity_canonical(b->input, &have);
            if (strcmp(buf_str(&have), buf_str(&want)) != 0)
                continue;
            for (size_t k = i; k < req->nmessages; k++)
                for (size_t l = 0; l < req->messages[k].nblocks; l++) {
                    const struct content_block *rb = &req->messages[k].blocks[l];
                    json_object *out = approval_output(rb);
                    if (out && rb->tool_call_id && strcmp(rb->tool_call_id, b->tool_call_id) == 0)
                        found = json_object_get_boolean(jsonx_get(out, "approved"))
                                    ? PERMISSION_ALLOW
                                    : PERMISSION_DENY;
                }
        }
    }
    buf_release(&want);
    buf_release(&have);
    return found;
}

