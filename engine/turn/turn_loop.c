/*
 * turn_loop — the answers the turn's loop and its runner tools give the harness (turn_loop.h).
 */
#include "turn/turn_loop.h"

#include <string.h>

#include "base/jsonx.h"

void turn_loop_send_tool_line(const struct turn_env *te, const struct buf *line)
{
    if (line->len > 0 && te->send_tool)
        (void)te->send_tool(te->ctx, line);
}

/* Answer a permission request (id given as JSON text): option, or "cancelled" when NULL. */
static void reply_permission(const struct turn_env *te, const char *id_json, const char *option)
{
    json_object *id = NULL, *res = json_object_new_object(), *outcome = json_object_new_object();
    char err[64];
    struct buf out;

    if (jsonx_parse(id_json, strlen(id_json), 4, &id, err, sizeof(err)) < 0)
        id = NULL;
    if (option && option[0]) {
        json_object_object_add(outcome, "outcome", json_object_new_string("selected"));
        json_object_object_add(outcome, "optionId", json_object_new_string(option));
    } else {
        json_object_object_add(outcome, "outcome", json_object_new_string("cancelled"));
    }
    json_object_object_add(res, "outcome", outcome);
    buf_init(&out, 4096);
    if (acp_encode_result(&out, id, res) == 0)
        (void)te->send(te->ctx, &out);
    buf_release(&out);
    json_object_put(res);
    json_object_put(id);
}

void turn_loop_answer_gate(const struct turn_env *te, bool channel, const char *id_json,
                           enum turn_channel_answer a, const char *option, const char *tool,
                           bool by_user)
{
    struct buf out;

    if (!channel) {
        reply_permission(te, id_json, a == TURN_CHANNEL_CANCELLED ? NULL : option);
        return;
    }
    buf_init(&out, 64 * 1024);
    if (turn_channel_answer(&out, id_json, a, tool, by_user) == 0)
        turn_loop_send_tool_line(te, &out);
    buf_release(&out);
}
