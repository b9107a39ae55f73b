/*
 * fuzz_mcp_bridge — the JSON-RPC input of agent-runner-mcp (engine/tools/mcp_bridge.c): what the
 * harness writes on the server's stdin and what the runner answers on the channel.
 *
 * Input layout: lines split at '\n'. If the first line starts with 'T', the rest of it is the
 * tools file (else a fixed list of three tools is used; a refused tools file ends the run).
 * Every other line starts with an opcode byte:
 *   H<line>  a line from the harness          R<line>  a line from the runner
 *   D        the channel goes down            U        the channel comes up (when down)
 *   F        flip whether a reconnect works   L        a harness line over the size cap
 *   A        the runner answers every pending call (alternating isError)
 *   anything else: the whole line comes from the harness.
 * Properties checked after every step:
 *   - every queued line, both ways, is one '\n'-terminated JSON-RPC 2.0 message;
 *   - to the harness only responses go (exactly one of result/error); to the runner only
 *     hello / tool/call requests (with a listed toolName and a valid toolCallId) or -32601
 *     errors;
 *   - a harness request is answered exactly once right away, except a tools/call that was
 *     forwarded instead (one tool/call out, one more pending); notifications and junk get no
 *     forwarded call; at most MCP_BRIDGE_PENDING_MAX calls are pending;
 *   - when the channel goes down, every pending call is answered and none stays pending.
 */
#include <errno.h>
#include <string.h>

#include "base/jsonx.h"
#include "fuzz.h"
#include "proto/acp.h"
#include "proto/tool_channel.h"
#include "tools/mcp_bridge.h"

#define DEFAULT_TOOLS                                                                          \
    "[{\"name\":\"get_user\",\"description\":\"Get a user\",\"inputSchema\":{\"type\":"          \
    "\"object\"}},{\"name\":\"github__search\"},{\"name\":\"pick\"}]"

static int reconnect_ok;

static int fake_reconnect(void *ctx, char *err, size_t errlen)
{
    (void)ctx;
    if (!reconnect_ok) {
        snprintf(err, errlen, "refused");
        return -ECONNREFUSED;
    }
    return 0;
}

static bool listed(const struct mcp_bridge *b, const char *name)
{
    for (size_t i = 0; name && i < json_object_array_length(b->tools); i++)
        if (strcmp(jsonx_str(json_object_array_get_idx(b->tools, i), "name"), name) == 0)
            return true;
    return false;
}

struct seen {
    size_t harness;   /* responses queued for the harness */
    size_t calls;     /* tool/call requests queued for the runner */
    json_object *ids; /* ids of the harness responses (array) */
};

/* Check and consume every queued line; count what went where. */
static void drain(struct mcp_bridge *b, struct seen *s)
{
    for (int side = 0; side < 2; side++) {
        struct buf *q = side == 0 ? &b->to_harness : &b->to_runner;
        const char *p = q->data ? q->data : "", *end = p + q->len;

        FUZZ_CHECK(q->len == 0 || end[-1] == '\n');
        while (p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            struct acp_msg m;
            char err[256];

            FUZZ_CHECK(nl != NULL);
            FUZZ_CHECK(acp_decode(p, (size_t)(nl - p), &m, err, sizeof(err)) == 0);
            if (side == 0) {
                FUZZ_CHECK(m.kind == ACP_RESPONSE);
                FUZZ_CHECK((m.error != NULL) != json_object_object_get_ex(m.root, "result", NULL));
                s->harness++;
                json_object_array_add(s->ids, m.id ? json_object_get(m.id) : NULL);
            } else if (m.kind == ACP_REQUEST) {
                FUZZ_CHECK(strcmp(m.method, "hello") == 0 || strcmp(m.method, "tool/call") == 0);
                if (strcmp(m.method, "tool/call") == 0) {
                    FUZZ_CHECK(listed(b, jsonx_str(m.params, "toolName")));
                    FUZZ_CHECK(tool_channel_call_id_ok(jsonx_str(m.params, "toolCallId")));
                    FUZZ_CHECK(json_object_is_type(jsonx_get(m.params, "arguments"),
                                                   json_type_object));
                    s->calls++;
                }
            } else {
                FUZZ_CHECK(m.kind == ACP_RESPONSE &&
                           json_object_get_int(jsonx_get(m.error, "code")) == -32601);
            }
            acp_msg_release(&m);
            p = nl + 1;
        }
        buf_reset(q);
    }
    FUZZ_CHECK(b->npending <= MCP_BRIDGE_PENDING_MAX);
}

static void seen_reset(struct seen *s)
{
    json_object_put(s->ids);
    memset(s, 0, sizeof(*s));
    s->ids = json_object_new_array();
}

static void harness_line(struct mcp_bridge *b, const char *line, size_t len, struct seen *s)
{
    size_t before = b->npending;
    struct acp_msg m;
    char err[256];
    bool decoded, request = false, is_call = false;

    decoded = acp_decode(line, len, &m, err, sizeof(err)) == 0;
    if (decoded) {
        request = m.kind == ACP_REQUEST;
        is_call = request && strcmp(m.method, "tools/call") == 0;
    }
    FUZZ_CHECK(mcp_bridge_on_harness_line(b, line, len) == 0);
    drain(b, s);
    if (request && s->calls == 1) {
        /* forwarded: nothing back yet, one more pending */
        FUZZ_CHECK(is_call);
        FUZZ_CHECK(b->npending == before + 1);
        FUZZ_CHECK(s->harness == 0);
    } else if (request) {
        /* answered right away, exactly once, with the request's id */
        FUZZ_CHECK(s->calls == 0);
        FUZZ_CHECK(s->harness == 1);
        FUZZ_CHECK(json_object_equal(json_object_array_get_idx(s->ids, 0), m.id));
        FUZZ_CHECK(b->npending == before);
    } else {
        /* a notification, a response or junk: no call goes out, at most one error back */
        FUZZ_CHECK(s->calls == 0);
        FUZZ_CHECK(s->harness <= 1);
        FUZZ_CHECK(b->npending <= before);
    }
    if (decoded)
        acp_msg_release(&m);
}

static void answer_all(struct mcp_bridge *b, struct seen *s)
{
    size_t n = b->npending;
    int64_t ids[MCP_BRIDGE_PENDING_MAX];
    char line[256];

    for (size_t i = 0; i < n; i++)
        ids[i] = b->pending[i].channel_id;
    for (size_t i = 0; i < n; i++) {
        snprintf(line, sizeof(line),
                 "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"content\":[{\"type\":\"text\","
                 "\"text\":\"r%zu\"}],\"isError\":%s}}",
                 (long long)ids[i], i, i % 2 ? "true" : "false");
        FUZZ_CHECK(mcp_bridge_on_runner_line(b, line, strlen(line)) == 0);
    }
    drain(b, s);
    FUZZ_CHECK(b->npending == 0);
    FUZZ_CHECK(s->harness == n);
}

static void channel_down(struct mcp_bridge *b, struct seen *s)
{
    size_t n = b->npending;

    FUZZ_CHECK(mcp_bridge_channel_down(b, "fuzz") == 0);
    drain(b, s);
    FUZZ_CHECK(b->npending == 0);
    FUZZ_CHECK(s->harness == n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    struct mcp_bridge b;
    struct seen s = {0};
    char err[256];
    int r;

    reconnect_ok = 1;
    if (size > 0 && p[0] == 'T') {
        const char *nl = memchr(p, '\n', size);
        size_t n = nl ? (size_t)(nl - p) : size;

        r = mcp_bridge_init(&b, p + 1, n - 1, err, sizeof(err));
        p += nl ? n + 1 : n;
    } else {
        r = mcp_bridge_init(&b, DEFAULT_TOOLS, strlen(DEFAULT_TOOLS), err, sizeof(err));
    }
    if (r < 0) {
        FUZZ_CHECK(r == -EINVAL && err[0]);
        mcp_bridge_release(&b);
        return 0;
    }
    b.reconnect = fake_reconnect;
    seen_reset(&s);
    FUZZ_CHECK(mcp_bridge_channel_up(&b) == 0);
    drain(&b, &s);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

        seen_reset(&s);
        switch (n ? p[0] : 0) {
        case 'H':
            harness_line(&b, p + 1, n - 1, &s);
            break;
        case 'R':
            FUZZ_CHECK(mcp_bridge_on_runner_line(&b, p + 1, n - 1) == 0);
            drain(&b, &s);
            FUZZ_CHECK(s.calls == 0);
            break;
        case 'D':
            channel_down(&b, &s);
            break;
        case 'U':
            if (!b.channel_up)
                FUZZ_CHECK(mcp_bridge_channel_up(&b) == 0);
            drain(&b, &s);
            break;
        case 'F':
            reconnect_ok = !reconnect_ok;
            break;
        case 'L':
            FUZZ_CHECK(mcp_bridge_line_too_long(&b) == 0);
            drain(&b, &s);
            FUZZ_CHECK(s.harness == 1);
            break;
        case 'A':
            answer_all(&b, &s);
            break;
        default:
            harness_line(&b, p, n, &s);
            break;
        }
        p += nl ? n + 1 : n;
    }
    seen_reset(&s);
    channel_down(&b, &s);
    json_object_put(s.ids);
    mcp_bridge_release(&b);
    return 0;
}
