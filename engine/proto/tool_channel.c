#include "proto/tool_channel.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/jsonx.h"

#define SHORT_MAX 128

static bool charset_ok(const char *s, size_t max, const char *extra)
{
    size_t n;

    if (!s)
        return false;
    n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr(extra, c)))
            return false;
    }
    return true;
}

bool tool_channel_call_id_ok(const char *s)
{
    /* "|": pi joins a Responses call_id and item id ("call_1|fc_1") */
    return charset_ok(s, TOOL_CHANNEL_CALL_ID_MAX, "._:|-");
}

bool tool_channel_tool_name_ok(const char *s)
{
    return charset_ok(s, TOOL_CHANNEL_TOOL_NAME_MAX, "_.-");
}

/* Length of the valid UTF-8 sequence at p (1-4), or 0 when it is invalid or truncated. */
static size_t utf8_seq(const unsigned char *p, size_t avail)
{
    size_t n;
    uint32_t cp;

    if (p[0] >= 0x01 && p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        n = 2;
        cp = p[0] & 0x1f;
    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        n = 3;
        cp = p[0] & 0x0f;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        n = 4;
        cp = p[0] & 0x07;
    } else {
        return 0;
    }
    if (avail < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

int tool_channel_utf8_clean(const char *text, size_t len, struct buf *out)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t i = 0;
    int r = 0;

    while (r == 0 && i < len) {
        size_t start = i, n;

        while (i < len && (n = utf8_seq(p + i, len - i)) > 0)
            i += n;
        if (i > start)
            r = buf_append(out, text + start, i - start);
        if (r == 0 && i < len) {
            r = buf_append(out, "\xef\xbf\xbd", 3);
            i++;
        }
    }
    return r;
}

/* A new JSON string of s, made valid UTF-8. */
static json_object *clean_string(const char *s)
{
    struct buf b;
    json_object *o = NULL;
    size_t n = s ? strlen(s) : 0;

    buf_init(&b, 4 * n + 16);
    if (tool_channel_utf8_clean(s ? s : "", n, &b) == 0)
        o = json_object_new_string_len(buf_str(&b), (int)b.len);
    buf_release(&b);
    return o;
}

static int short_str(json_object *params, const char *key, bool required, const char **ret,
                     char *err, size_t errlen)
{
    json_object *v = jsonx_get(params, key);

    *ret = NULL;
    if (!v) {
        if (required)
            snprintf(err, errlen, "%s: required", key);
        return required ? -EINVAL : 0;
    }
    if (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) > SHORT_MAX) {
        snprintf(err, errlen, "%s: expected a string of at most %d bytes", key, SHORT_MAX);
        return -EINVAL;
    }
    *ret = json_object_get_string(v);
    return 0;
}

static int object_param(json_object *params, const char *key, json_object **ret, char *err,
                        size_t errlen)
{
    json_object *v = jsonx_get(params, key);

    *ret = NULL;
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_object)) {
        snprintf(err, errlen, "%s: expected an object", key);
        return -EINVAL;
    }
    *ret = v;
    return 0;
}

static int tool_params(json_object *params, const char *input_key, struct tool_channel_msg *m,
                       char *err, size_t errlen)
{
    m->tool_call_id = jsonx_str(params, "toolCallId");
    m->tool_name = jsonx_str(params, "toolName");
    if (!tool_channel_call_id_ok(m->tool_call_id)) {
        snprintf(err, errlen, "toolCallId: expected 1-%d bytes of [A-Za-z0-9._:|-]",
                 TOOL_CHANNEL_CALL_ID_MAX);
        return -EINVAL;
    }
    if (!tool_channel_tool_name_ok(m->tool_name)) {
        snprintf(err, errlen, "toolName: expected 1-%d bytes of [A-Za-z0-9_.-]",
                 TOOL_CHANNEL_TOOL_NAME_MAX);
        return -EINVAL;
    }
    return object_param(params, input_key, &m->input, err, errlen);
}

int tool_channel_decode(const struct acp_msg *m, struct tool_channel_msg *ret, char *err,
                        size_t errlen)
{
    struct tool_channel_msg out;
    bool request = m->kind == ACP_REQUEST;
    int r = 0;

    memset(&out, 0, sizeof(out));
    if (m->kind == ACP_RESPONSE) {
        snprintf(err, errlen, "the runner sends no requests to answer");
        return -EBADMSG;
    }
    if (m->params && !json_object_is_type(m->params, json_type_object)) {
        snprintf(err, errlen, "params: expected an object");
        return -EINVAL;
    }
    out.id = request ? m->id : NULL;
    if (request && strcmp(m->method, "hello") == 0) {
        out.kind = TOOL_CHANNEL_HELLO;
        r = short_str(m->params, "client", true, &out.client, err, errlen);
        if (r == 0)
            r = short_str(m->params, "version", false, &out.version, err, errlen);
    } else if (request && strcmp(m->method, "tool/permission") == 0) {
        out.kind = TOOL_CHANNEL_PERMISSION;
        r = tool_params(m->params, "input", &out, err, errlen);
    } else if (request && strcmp(m->method, "tool/call") == 0) {
        out.kind = TOOL_CHANNEL_CALL;
        r = tool_params(m->params, "arguments", &out, err, errlen);
    } else if (!request && strcmp(m->method, "usage") == 0) {
        out.kind = TOOL_CHANNEL_USAGE;
        out.params = m->params;
    } else if (!request && strcmp(m->method, "error") == 0) {
        out.kind = TOOL_CHANNEL_ERROR;
        out.params = m->params;
    } else {
        snprintf(err, errlen, "unknown method \"%.64s\"", m->method);
        return -ENOENT;
    }
    if (r < 0)
        return r;
    *ret = out;
    return 0;
}

static int encode_result(struct buf *out, json_object *id, json_object *result)
{
    int r;

    if (!result)
        return -ENOMEM;
    r = acp_encode_result(out, id, result);
    json_object_put(result);
    return r;
}

int tool_channel_encode_hello_result(struct buf *out, json_object *id)
{
    json_object *res = json_object_new_object();

    if (res)
        json_object_object_add(res, "protocol", json_object_new_int(TOOL_CHANNEL_PROTOCOL));
    return encode_result(out, id, res);
}

int tool_channel_encode_permission_result(struct buf *out, json_object *id,
                                          enum tool_channel_outcome outcome, const char *message)
{
    static const char *const names[] = {"allow", "deny", "cancelled"};
    json_object *res = json_object_new_object();

    if ((unsigned)outcome > TOOL_CHANNEL_CANCELLED) {
        json_object_put(res);
        return -EINVAL;
    }
    if (res) {
        json_object_object_add(res, "outcome", json_object_new_string(names[outcome]));
        if (outcome == TOOL_CHANNEL_DENY)
            json_object_object_add(res, "message",
                                   clean_string(message ? message : "Denied by policy."));
    }
    return encode_result(out, id, res);
}

json_object *tool_channel_call_result_new(const char *text, bool is_error)
{
    json_object *res = json_object_new_object(), *content = json_object_new_array();
    json_object *item = json_object_new_object(), *str = clean_string(text);

    if (!res || !content || !item || !str) {
        json_object_put(res);
        json_object_put(content);
        json_object_put(item);
        json_object_put(str);
        return NULL;
    }
    json_object_object_add(item, "type", json_object_new_string("text"));
    json_object_object_add(item, "text", str);
    json_object_array_add(content, item);
    json_object_object_add(res, "content", content);
    json_object_object_add(res, "isError", json_object_new_boolean(is_error));
    return res;
}

int tool_channel_encode_call_result(struct buf *out, json_object *id, const char *text,
                                    bool is_error)
{
    json_object *res = tool_channel_call_result_new(text, is_error);

    if (!res)
        return -ENOMEM;
    return encode_result(out, id, res);
}

int tool_channel_encode_hello(struct buf *out, int64_t id, const char *client, const char *version)
{
    json_object *p = json_object_new_object();
    int r;

    if (!p)
        return -ENOMEM;
    json_object_object_add(p, "client", json_object_new_string(client));
    if (version)
        json_object_object_add(p, "version", json_object_new_string(version));
    r = acp_encode_request(out, id, "hello", p);
    json_object_put(p);
    return r;
}

int tool_channel_encode_call(struct buf *out, int64_t id, const char *tool_call_id,
                             const char *tool_name, json_object *arguments)
{
    json_object *p = json_object_new_object();
    int r;

    if (!p)
        return -ENOMEM;
    json_object_object_add(p, "toolCallId", json_object_new_string(tool_call_id));
    json_object_object_add(p, "toolName", json_object_new_string(tool_name));
    json_object_object_add(p, "arguments",
                           arguments ? json_object_get(arguments) : json_object_new_object());
    r = acp_encode_request(out, id, "tool/call", p);
    json_object_put(p);
    return r;
}

int tool_channel_decode_call_result(const struct acp_msg *m, struct tool_result *ret)
{
    json_object *content, *is_error;
    struct buf text;
    int r = 0;

    if (m->kind != ACP_RESPONSE)
        return -EBADMSG;
    if (m->error) {
        char msg[1024];

        snprintf(msg, sizeof(msg), "agent-runner: %.900s", acp_msg_error_message(m));
        return tool_result_set(ret, true, msg);
    }
    content = jsonx_get(m->result, "content");
    is_error = jsonx_get(m->result, "isError");
    if (!content || !json_object_is_type(content, json_type_array) ||
        (is_error && !json_object_is_type(is_error, json_type_boolean)))
        return -EBADMSG;
    buf_init(&text, TOOL_CHANNEL_LINE_MAX);
    for (size_t i = 0; r == 0 && i < json_object_array_length(content); i++) {
        const char *t = jsonx_str(json_object_array_get_idx(content, i), "text");

        if (!t)
            continue;
        if (text.len)
            r = buf_append_char(&text, '\n');
        if (r == 0)
            r = buf_append_str(&text, t);
    }
    if (r == 0)
        r = tool_result_set(ret, is_error && json_object_get_boolean(is_error), buf_str(&text));
    buf_release(&text);
    return r;
}

int tool_channel_decode_hello_result(const struct acp_msg *m, char *err, size_t errlen)
{
    json_object *p;

    if (m->kind != ACP_RESPONSE)
        return -EBADMSG;
    if (m->error) {
        snprintf(err, errlen, "hello refused: %.200s", acp_msg_error_message(m));
        return -EPROTO;
    }
    p = jsonx_get(m->result, "protocol");
    if (!p || !json_object_is_type(p, json_type_int) ||
        json_object_get_int64(p) != TOOL_CHANNEL_PROTOCOL) {
        snprintf(err, errlen, "the runner speaks another channel protocol");
        return -EPROTO;
    }
    return 0;
}
