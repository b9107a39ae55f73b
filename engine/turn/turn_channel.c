#include "turn/turn_channel.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/jsonx.h"
#include "harness/harness.h"

void turn_channel_gate(const struct tool_channel_msg *m, struct permission_gate *pg,
                       json_object **ret_params)
{
    json_object *params = json_object_new_object(), *tc, *opts, *o;
    const char *kind = "other";
    bool ro = false;

    memset(pg, 0, sizeof(*pg));
    pg->tool_name = m->tool_name;
    pg->args = m->input;
    pg->spec = PERMISSION_UNSET;
    pg->server = PERMISSION_UNSET;
    /* pi's built-ins say whether they only read; another extension's tool: unknown */
    pg->read_only_hint = harness_pi_builtin(m->tool_name, &ro, &kind) ? ro : -1;
    *ret_params = params;
    if (!params)
        return;
    tc = json_object_new_object();
    json_object_object_add(tc, "toolCallId", json_object_new_string(m->tool_call_id));
    json_object_object_add(tc, "title", json_object_new_string(m->tool_name));
    json_object_object_add(tc, "kind", json_object_new_string(kind));
    json_object_object_add(tc, "rawInput",
                           m->input ? json_object_get(m->input) : json_object_new_object());
    json_object_object_add(params, "toolCall", tc);
    opts = json_object_new_array();
    o = json_object_new_object();
    json_object_object_add(o, "optionId", json_object_new_string("once"));
    json_object_object_add(o, "name", json_object_new_string("Allow once"));
    json_object_object_add(o, "kind", json_object_new_string("allow_once"));
    json_object_array_add(opts, o);
    o = json_object_new_object();
    json_object_object_add(o, "optionId", json_object_new_string("reject"));
    json_object_object_add(o, "name", json_object_new_string("Reject"));
    json_object_object_add(o, "kind", json_object_new_string("reject_once"));
    json_object_array_add(opts, o);
    json_object_object_add(params, "options", opts);
}

int turn_channel_answer(struct buf *out, const char *id_json, enum turn_channel_answer a,
                        const char *tool_name, bool by_user)
{
    static const enum tool_channel_outcome outcomes[] = {TOOL_CHANNEL_ALLOW, TOOL_CHANNEL_DENY,
                                                         TOOL_CHANNEL_CANCELLED};
    json_object *id = NULL;
    char err[64], message[256];
    int r;

    if ((unsigned)a > TURN_CHANNEL_CANCELLED ||
        jsonx_parse(id_json, strlen(id_json), 4, &id, err, sizeof(err)) < 0)
        return -EINVAL;
    snprintf(message, sizeof(message),
             by_user ? "Permission denied: the user did not approve this %.100s call."
                     : "Permission denied: the runner's permission plan does not allow this "
                       "%.100s call.",
             tool_name && tool_name[0] ? tool_name : "tool");
    r = tool_channel_encode_permission_result(out, id, outcomes[a], message);
    json_object_put(id);
    return r;
}

static double number_of(json_object *params, const char *key)
{
    json_object *v = jsonx_get(params, key);
    double d;

    if (!v || !(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
        return 0;
    d = json_object_get_double(v);
    return d > 0 && d < 1e15 ? d : 0; /* negative, NaN or absurd: 0 */
}

void turn_channel_usage(json_object *params, struct run_usage *ret)
{
    int64_t cache =
        (int64_t)number_of(params, "cacheRead") + (int64_t)number_of(params, "cacheWrite");

    memset(ret, 0, sizeof(*ret));
    ret->input = (int64_t)number_of(params, "input");
    ret->output = (int64_t)number_of(params, "output");
    ret->total = (int64_t)number_of(params, "total");
    if (!ret->total)
        ret->total = ret->input + ret->output + cache;
    ret->cost = number_of(params, "cost");
    ret->present = true;
}

void turn_channel_error(json_object *params, char *msg, size_t msglen, const char **ret_code)
{
    const char *m = jsonx_str(params, "message");

    /* the harness's word, said as the harness's: never one of the runner's own codes */
    snprintf(msg, msglen, "%s%s", TURN_CHANNEL_ERROR_LABEL, m && m[0] ? m : "a model call failed");
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    *ret_code = TURN_CHANNEL_ERROR_CODE;
}

int turn_channel_outside(const struct acp_msg *m, struct buf *out, bool *ret_gating)
{
    struct tool_channel_msg tm;
    json_object *gating;
    char err[256];
    int r = tool_channel_decode(m, &tm, err, sizeof(err));

    if (r < 0) {
        if (m->kind == ACP_REQUEST)
            (void)acp_encode_error(out, m->id,
                                   r == -ENOENT ? ACP_METHOD_NOT_FOUND : ACP_INVALID_PARAMS, err);
        return 0;
    }
    switch (tm.kind) {
    case TOOL_CHANNEL_HELLO:
        gating = jsonx_get(m->params, "gating");
        *ret_gating = gating && json_object_is_type(gating, json_type_boolean) &&
                      json_object_get_boolean(gating);
        (void)tool_channel_encode_hello_result(out, m->id);
        return 1;
    case TOOL_CHANNEL_PERMISSION:
        (void)tool_channel_encode_permission_result(out, m->id, TOOL_CHANNEL_CANCELLED, NULL);
        return 0;
    case TOOL_CHANNEL_CALL:
        (void)tool_channel_encode_call_result(out, m->id,
                                              "agent-runner: no turn is running to take this "
                                              "tool call",
                                              true);
        return 0;
    default:
        return 0;
    }
}
