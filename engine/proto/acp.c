#include "proto/acp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/jsonx.h"

#define ACP_JSON_DEPTH 128

int acp_decode(const char *line, size_t len, struct acp_msg *ret, char *err, size_t errlen)
{
    struct acp_msg m;
    json_object *root = NULL, *v;
    bool has_id;
    const char *ver;
    int r;

    memset(&m, 0, sizeof(m));
    r = jsonx_parse(line, len, ACP_JSON_DEPTH, &root, err, errlen);
    if (r < 0)
        return r;
    if (!root || !json_object_is_type(root, json_type_object)) {
        snprintf(err, errlen, "not a JSON object");
        goto bad;
    }
    ver = jsonx_str(root, "jsonrpc");
    if (!ver || strcmp(ver, "2.0") != 0) {
        snprintf(err, errlen, "missing \"jsonrpc\":\"2.0\"");
        goto bad;
    }
    m.root = root;
    has_id = json_object_object_get_ex(root, "id", &v);
    if (has_id) {
        if (v && !json_object_is_type(v, json_type_int) &&
            !json_object_is_type(v, json_type_string)) {
            snprintf(err, errlen, "id must be a number or a string");
            goto bad;
        }
        m.id = v;
    }
    v = jsonx_get(root, "method");
    if (v) {
        if (!json_object_is_type(v, json_type_string)) {
            snprintf(err, errlen, "method must be a string");
            goto bad;
        }
        m.method = json_object_get_string(v);
        m.params = jsonx_get(root, "params");
        m.kind = has_id && m.id ? ACP_REQUEST : ACP_NOTIFICATION;
    } else if (has_id) {
        m.kind = ACP_RESPONSE;
        m.result = jsonx_get(root, "result");
        m.error = jsonx_get(root, "error");
        if (!json_object_object_get_ex(root, "result", &v) && !m.error) {
            snprintf(err, errlen, "response without result or error");
            goto bad;
        }
    } else {
        snprintf(err, errlen, "neither a request, a notification nor a response");
        goto bad;
    }
    *ret = m;
    return 0;
bad:
    json_object_put(root);
    return -EBADMSG;
}

void acp_msg_release(struct acp_msg *m)
{
    if (m->root)
        json_object_put(m->root);
    memset(m, 0, sizeof(*m));
}

int acp_msg_int_id(const struct acp_msg *m, int64_t *ret)
{
    if (!m->id || !json_object_is_type(m->id, json_type_int))
        return -EINVAL;
    *ret = json_object_get_int64(m->id);
    return 0;
}

const char *acp_msg_error_message(const struct acp_msg *m)
{
    const char *s = jsonx_str(m->error, "message");

    return s ? s : "unknown error";
}

static int encode(struct buf *out, json_object *o)
{
    size_t n;
    const char *s = jsonx_text(o, &n);
    int r = buf_append(out, s, n);

    if (r == 0)
        r = buf_append_char(out, '\n');
    return r;
}

static json_object *envelope(void)
{
    json_object *o = json_object_new_object();

    json_object_object_add(o, "jsonrpc", json_object_new_string("2.0"));
    return o;
}

int acp_encode_request(struct buf *out, int64_t id, const char *method, json_object *params)
{
    json_object *o = envelope();
    int r;

    json_object_object_add(o, "id", json_object_new_int64(id));
    json_object_object_add(o, "method", json_object_new_string(method));
    json_object_object_add(o, "params", params ? json_object_get(params) : json_object_new_object());
    r = encode(out, o);
    json_object_put(o);
    return r;
}

int acp_encode_notification(struct buf *out, const char *method, json_object *params)
{
    json_object *o = envelope();
    int r;

    json_object_object_add(o, "method", json_object_new_string(method));
    json_object_object_add(o, "params", params ? json_object_get(params) : json_object_new_object());
    r = encode(out, o);
    json_object_put(o);
    return r;
}

int acp_encode_result(struct buf *out, json_object *id, json_object *result)
{
    json_object *o = envelope();
    int r;

    json_object_object_add(o, "id", id ? json_object_get(id) : NULL);
    json_object_object_add(o, "result", result ? json_object_get(result) : NULL);
    r = encode(out, o);
    json_object_put(o);
    return r;
}

int acp_encode_error(struct buf *out, json_object *id, int code, const char *message)
{
    json_object *o = envelope(), *e = json_object_new_object();
    int r;

    json_object_object_add(e, "code", json_object_new_int(code));
    json_object_object_add(e, "message", json_object_new_string(message));
    json_object_object_add(o, "id", id ? json_object_get(id) : NULL);
    json_object_object_add(o, "error", e);
    r = encode(out, o);
    json_object_put(o);
    return r;
}

void acp_lines_init(struct acp_lines *l, size_t max_line)
{
    /* room for one maximal line plus the read chunk that completes it */
    buf_init(&l->in, max_line + 65536);
    l->max_line = max_line;
    l->scanned = 0;
}

void acp_lines_release(struct acp_lines *l)
{
    buf_release(&l->in);
    l->scanned = 0;
}

ssize_t acp_lines_fill(struct acp_lines *l, int fd)
{
    char chunk[65536];
    ssize_t n;
    int r;

    if (l->in.len - l->scanned > l->max_line)
        return -E2BIG;
    do {
        n = read(fd, chunk, sizeof(chunk));
    } while (n == -1 && errno == EINTR);
    if (n == -1)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    if (n == 0)
        return 0;
    r = buf_append(&l->in, chunk, (size_t)n);
    if (r < 0)
        return r == -E2BIG ? -E2BIG : r;
    return n;
}

int acp_lines_next(struct acp_lines *l, char **ret_line, size_t *ret_len)
{
    char *nl, *line;
    size_t n;

    if (l->in.len == 0)
        return 0;
    nl = memchr(l->in.data + l->scanned, '\n', l->in.len - l->scanned);
    if (!nl) {
        l->scanned = l->in.len;
        return l->in.len > l->max_line ? -E2BIG : 0;
    }
    n = (size_t)(nl - l->in.data);
    if (n > l->max_line)
        return -E2BIG;
    line = malloc(n + 1);
    if (!line)
        return -ENOMEM;
    memcpy(line, l->in.data, n);
    buf_consume(&l->in, n + 1);
    l->scanned = 0;
    if (n > 0 && line[n - 1] == '\r')
        n--;
    line[n] = '\0';
    *ret_line = line;
    *ret_len = n;
    return 1;
}
