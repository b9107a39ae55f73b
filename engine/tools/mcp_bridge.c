#include "tools/mcp_bridge.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "proto/acp.h"
#include "proto/tool_channel.h"
#include "proto/tool_result.h"

#define TOOLS_DEPTH 128
#define LINE_DEPTH 128
#define DESCRIPTION_MAX (64 * 1024)
#define VERSION_MAX 32

json_object *mcp_bridge_empty_schema(void)
{
    json_object *o = json_object_new_object();

    if (!o)
        return NULL;
    json_object_object_add(o, "type", json_object_new_string("object"));
    json_object_object_add(o, "properties", json_object_new_object());
    json_object_object_add(o, "additionalProperties", json_object_new_boolean(1));
    return o;
}

/* One entry of the tools file, reduced to {name, description, inputSchema}. */
static int public_spec(json_object *in, size_t i, json_object *seen, json_object **ret, char *err,
                       size_t errlen)
{
    const char *name = jsonx_str(in, "name");
    json_object *d = jsonx_get(in, "description"), *schema = jsonx_get(in, "inputSchema");
    json_object *o;

    if (!in || !json_object_is_type(in, json_type_object) || !tool_channel_tool_name_ok(name)) {
        snprintf(err, errlen,
                 "tools[%zu]: expected {name, description, inputSchema} with a "
                 "valid name",
                 i);
        return -EINVAL;
    }
    if (jsonx_get(seen, name)) {
        snprintf(err, errlen, "tools[%zu]: duplicate name \"%s\"", i, name);
        return -EINVAL;
    }
    if (d && (!json_object_is_type(d, json_type_string) ||
              json_object_get_string_len(d) > DESCRIPTION_MAX)) {
        snprintf(err, errlen, "tools[%zu] \"%s\": description must be a string", i, name);
        return -EINVAL;
    }
    if (schema && !json_object_is_type(schema, json_type_object)) {
        snprintf(err, errlen, "tools[%zu] \"%s\": inputSchema must be an object", i, name);
        return -EINVAL;
    }
    o = json_object_new_object();
    if (!o)
        return -ENOMEM;
    json_object_object_add(o, "name", json_object_new_string(name));
    json_object_object_add(o, "description", d ? json_object_get(d) : json_object_new_string(name));
    json_object_object_add(o, "inputSchema",
                           schema ? json_object_get(schema) : mcp_bridge_empty_schema());
    json_object_object_add(seen, name, json_object_new_boolean(1));
    *ret = o;
    return 0;
}

int mcp_bridge_init(struct mcp_bridge *b, const char *tools_json, size_t len, char *err,
                    size_t errlen)
{
    json_object *doc = NULL, *tools = NULL, *seen = NULL;
    int r;

    memset(b, 0, sizeof(*b));
    buf_init(&b->to_harness, MCP_BRIDGE_OUT_MAX);
    buf_init(&b->to_runner, MCP_BRIDGE_OUT_MAX);
    b->next_id = 1;
    snprintf(b->channel_error, sizeof(b->channel_error), "not connected");
    if (util_random_hex(b->id_salt, 8) < 0)
        snprintf(b->id_salt, sizeof(b->id_salt), "%08x", (unsigned)util_self_pid());
    if (len > MCP_BRIDGE_TOOLS_FILE_MAX) {
        snprintf(err, errlen, "the tools file is larger than %u bytes", MCP_BRIDGE_TOOLS_FILE_MAX);
        return -EINVAL;
    }
    r = jsonx_parse(tools_json, len, TOOLS_DEPTH, &doc, err, errlen);
    if (r < 0)
        return -EINVAL;
    if (!doc || !json_object_is_type(doc, json_type_array) ||
        json_object_array_length(doc) > MCP_BRIDGE_TOOLS_MAX) {
        snprintf(err, errlen, "the tools file must hold a list of at most %d tools",
                 MCP_BRIDGE_TOOLS_MAX);
        r = -EINVAL;
        goto out;
    }
    tools = json_object_new_array();
    seen = json_object_new_object();
    if (!tools || !seen) {
        r = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < json_object_array_length(doc); i++) {
        json_object *o;

        r = public_spec(json_object_array_get_idx(doc, i), i, seen, &o, err, errlen);
        if (r < 0)
            goto out;
        json_object_array_add(tools, o);
    }
    b->tools = tools;
    tools = NULL;
    r = 0;
out:
    json_object_put(doc);
    json_object_put(tools);
    json_object_put(seen);
    return r;
}

void mcp_bridge_release(struct mcp_bridge *b)
{
    for (size_t i = 0; i < b->npending; i++)
        json_object_put(b->pending[i].mcp_id);
    b->npending = 0;
    json_object_put(b->tools);
    b->tools = NULL;
    buf_release(&b->to_harness);
    buf_release(&b->to_runner);
}

/* ---- answers to the harness ------------------------------------------------------------- */

static int answer(struct mcp_bridge *b, json_object *id, json_object *result /* taken */)
{
    int r;

    if (!result)
        return -ENOMEM;
    r = acp_encode_result(&b->to_harness, id, result);
    json_object_put(result);
    return r;
}

static int answer_error(struct mcp_bridge *b, json_object *id, int code, const char *message)
{
    return acp_encode_error(&b->to_harness, id, code, message);
}

/* A tools/call result: one text item (made valid UTF-8) and isError. */
static int answer_tool(struct mcp_bridge *b, json_object *id, const char *text, bool is_error)
{
    return answer(b, id, tool_channel_call_result_new(text, is_error));
}

/* ---- the channel ------------------------------------------------------------------------ */

int mcp_bridge_channel_up(struct mcp_bridge *b)
{
    int r;

    b->channel_up = true;
    b->channel_error[0] = '\0';
    b->hello_id = b->next_id++;
    r = tool_channel_encode_hello(&b->to_runner, b->hello_id, TOOL_CHANNEL_CLIENT_MCP,
                                  MCP_BRIDGE_VERSION);
    return r;
}

int mcp_bridge_channel_down(struct mcp_bridge *b, const char *why)
{
    int r = 0;

    b->channel_up = false;
    b->hello_id = 0;
    snprintf(b->channel_error, sizeof(b->channel_error), "%s", why ? why : "closed");
    buf_reset(&b->to_runner);
    for (size_t i = 0; i < b->npending; i++) {
        char text[512];

        snprintf(text, sizeof(text),
                 "The agent-runner channel closed before the tool finished (%s): the outcome "
                 "of the call is unknown.",
                 b->channel_error);
        if (r == 0)
            r = answer_tool(b, b->pending[i].mcp_id, text, true);
        json_object_put(b->pending[i].mcp_id);
    }
    b->npending = 0;
    return r;
}

/* ---- requests from the harness ---------------------------------------------------------- */

static int on_initialize(struct mcp_bridge *b, json_object *id, json_object *params)
{
    json_object *res = json_object_new_object(), *caps, *tools, *info;
    json_object *asked = jsonx_get(params, "protocolVersion");
    const char *version = MCP_BRIDGE_PROTOCOL;

    if (!res)
        return -ENOMEM;
    if (asked && json_object_is_type(asked, json_type_string) &&
        json_object_get_string_len(asked) > 0 && json_object_get_string_len(asked) <= VERSION_MAX)
        version = json_object_get_string(asked);
    caps = json_object_new_object();
    tools = json_object_new_object();
    info = json_object_new_object();
    json_object_object_add(tools, "listChanged", json_object_new_boolean(0));
    json_object_object_add(caps, "tools", tools);
    json_object_object_add(info, "name", json_object_new_string(MCP_BRIDGE_NAME));
    json_object_object_add(info, "version", json_object_new_string(MCP_BRIDGE_VERSION));
    json_object_object_add(res, "protocolVersion", json_object_new_string(version));
    json_object_object_add(res, "capabilities", caps);
    json_object_object_add(res, "serverInfo", info);
    return answer(b, id, res);
}

static int on_tools_list(struct mcp_bridge *b, json_object *id)
{
    json_object *res = json_object_new_object();

    if (res)
        json_object_object_add(res, "tools", json_object_get(b->tools));
    return answer(b, id, res);
}

static bool known_tool(const struct mcp_bridge *b, const char *name)
{
    for (size_t i = 0; i < json_object_array_length(b->tools); i++)
        if (strcmp(jsonx_str(json_object_array_get_idx(b->tools, i), "name"), name) == 0)
            return true;
    return false;
}

/* The harness's own id for this call when it sent a usable one, else a generated one. */
static void call_id(struct mcp_bridge *b, json_object *params, char *out, size_t outlen)
{
    static const char *const keys[] = {"claudecode/toolUseId", "toolCallId", "tool_call_id"};
    json_object *meta = jsonx_get(params, "_meta");

    for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
        const char *v = jsonx_str(meta, keys[i]);

        if (tool_channel_call_id_ok(v) && strlen(v) < outlen) {
            snprintf(out, outlen, "%s", v);
            return;
        }
    }
    snprintf(out, outlen, "agenta-tools-%" PRIu64 "-%s", ++b->calls, b->id_salt);
}

static int on_tools_call(struct mcp_bridge *b, json_object *id, json_object *params)
{
    const char *name = jsonx_str(params, "name");
    json_object *args = jsonx_get(params, "arguments");
    char msg[512], tcid[TOOL_CHANNEL_CALL_ID_MAX + 1];
    int64_t cid;
    int r;

    if (!name || !known_tool(b, name)) {
        snprintf(msg, sizeof(msg), "unknown tool: %.128s", name ? name : "");
        return answer_error(b, id, ACP_INVALID_PARAMS, msg);
    }
    if (args && !json_object_is_type(args, json_type_object))
        return answer_error(b, id, ACP_INVALID_PARAMS, "arguments must be an object");
    if (b->npending == MCP_BRIDGE_PENDING_MAX) {
        snprintf(msg, sizeof(msg), "Too many tool calls in flight (%d): '%s' was not run.",
                 MCP_BRIDGE_PENDING_MAX, name);
        return answer_tool(b, id, msg, true);
    }
    if (!b->channel_up) {
        char why[256] = "";

        if (b->reconnect && b->reconnect(b->reconnect_ctx, why, sizeof(why)) == 0) {
            r = mcp_bridge_channel_up(b);
            if (r < 0)
                return r;
        } else {
            if (why[0])
                snprintf(b->channel_error, sizeof(b->channel_error), "%s", why);
            snprintf(msg, sizeof(msg),
                     "The agent-runner channel is unavailable (%s): '%s' was not run.",
                     b->channel_error, name);
            return answer_tool(b, id, msg, true);
        }
    }
    call_id(b, params, tcid, sizeof(tcid));
    cid = b->next_id++;
    r = tool_channel_encode_call(&b->to_runner, cid, tcid, name, args);
    if (r < 0)
        return r;
    b->pending[b->npending].mcp_id = json_object_get(id);
    b->pending[b->npending].channel_id = cid;
    b->npending++;
    return 0;
}

static void drop_pending(struct mcp_bridge *b, size_t i)
{
    json_object_put(b->pending[i].mcp_id);
    b->pending[i] = b->pending[--b->npending];
}

static void on_cancelled(struct mcp_bridge *b, json_object *params)
{
    json_object *rid = jsonx_get(params, "requestId");

    for (size_t i = 0; rid && i < b->npending; i++) {
        if (json_object_equal(b->pending[i].mcp_id, rid)) {
            drop_pending(b, i);
            return;
        }
    }
}

/* The id of a message acp_decode refused, when it has a usable one. */
static json_object *salvage_id(json_object *doc)
{
    json_object *id = jsonx_get(doc, "id");

    if (id && (json_object_is_type(id, json_type_int) || json_object_is_type(id, json_type_string)))
        return id;
    return NULL;
}

int mcp_bridge_on_harness_line(struct mcp_bridge *b, const char *line, size_t len)
{
    struct acp_msg m;
    char err[256];
    int r;

    if (len == 0)
        return 0;
    r = acp_decode(line, len, &m, err, sizeof(err));
    if (r == -ENOMEM)
        return r;
    if (r < 0) {
        json_object *doc = NULL;

        if (jsonx_parse(line, len, LINE_DEPTH, &doc, err, sizeof(err)) < 0)
            return answer_error(b, NULL, ACP_PARSE_ERROR, "parse error");
        if (json_object_is_type(doc, json_type_array))
            r = answer_error(b, NULL, ACP_INVALID_REQUEST, "batches are not supported");
        else
            r = answer_error(b, salvage_id(doc), ACP_INVALID_REQUEST, "invalid request");
        json_object_put(doc);
        return r;
    }
    switch (m.kind) {
    case ACP_REQUEST:
        if (m.params && !json_object_is_type(m.params, json_type_object))
            r = answer_error(b, m.id, ACP_INVALID_PARAMS, "params must be an object");
        else if (strcmp(m.method, "initialize") == 0)
            r = on_initialize(b, m.id, m.params);
        else if (strcmp(m.method, "tools/list") == 0)
            r = on_tools_list(b, m.id);
        else if (strcmp(m.method, "tools/call") == 0)
            r = on_tools_call(b, m.id, m.params);
        else if (strcmp(m.method, "ping") == 0)
            r = answer(b, m.id, json_object_new_object());
        else
            r = answer_error(b, m.id, ACP_METHOD_NOT_FOUND, "method not found");
        break;
    case ACP_NOTIFICATION:
        if (strcmp(m.method, "notifications/cancelled") == 0)
            on_cancelled(b, m.params);
        r = 0;
        break;
    default:
        r = 0; /* a response: we never ask the harness anything */
        break;
    }
    acp_msg_release(&m);
    return r;
}

int mcp_bridge_line_too_long(struct mcp_bridge *b)
{
    return answer_error(b, NULL, ACP_PARSE_ERROR, "message too large");
}

/* ---- answers from the runner ------------------------------------------------------------ */

int mcp_bridge_on_runner_line(struct mcp_bridge *b, const char *line, size_t len)
{
    struct tool_result res = {0};
    struct acp_msg m;
    char err[256];
    int64_t id;
    int r;

    if (len == 0)
        return 0;
    r = acp_decode(line, len, &m, err, sizeof(err));
    if (r == -ENOMEM)
        return r;
    if (r < 0)
        return 0; /* junk from the runner side: nothing to answer */
    if (m.kind == ACP_REQUEST) {
        r = acp_encode_error(&b->to_runner, m.id, ACP_METHOD_NOT_FOUND, "method not found");
        goto out;
    }
    r = 0;
    if (m.kind != ACP_RESPONSE || acp_msg_int_id(&m, &id) < 0)
        goto out;
    if (b->hello_id && id == b->hello_id) {
        b->hello_id = 0;
        if (tool_channel_decode_hello_result(&m, err, sizeof(err)) < 0)
            r = mcp_bridge_channel_down(b, err);
        goto out;
    }
    for (size_t i = 0; i < b->npending; i++) {
        if (b->pending[i].channel_id != id)
            continue;
        r = tool_channel_decode_call_result(&m, &res);
        if (r == -EBADMSG)
            r = tool_result_set(&res, true,
                                "agent-runner answered the tool call with a "
                                "malformed result");
        if (r == 0)
            r = answer_tool(b, b->pending[i].mcp_id, res.text, res.is_error);
        drop_pending(b, i);
        break;
    }
out:
    tool_result_release(&res);
    acp_msg_release(&m);
    return r;
}
