/*
 * tool_callback — one call of a callback or direct tool on the runner: the /tools/call body
 * and reply, the result text capped, the HTTP exchange (tool_callback.h).
 */
#include "tools/tool_callback.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/httpc.h"
#include "base/jsonx.h"
#include "base/log.h"
#include "tools/tool_args.h"
#include "tools/tool_direct.h"
#include "tools/tool_http.h"

#define HEADER_MAX (16 * 1024)
#define BODY_MAX (16u * 1024 * 1024)
#define REPLY_DEPTH 128

const char tool_callback_steering[] =
    "This result was too large to return in full. Narrow your query (add filters, a smaller "
    "date range, or specific fields), request a summary, or paginate and fetch fewer items per "
    "call, then try again.";

/* ---- capping ---------------------------------------------------------------------------- */

/* How many bytes at the end of text[0..end) are an incomplete UTF-8 sequence. */
static size_t trailing_incomplete(const char *text, size_t end)
{
    size_t max_back = end < 3 ? end : 3;

    for (size_t back = 1; back <= max_back; back++) {
        unsigned char b = (unsigned char)text[end - back];
        size_t seq;

        if ((b & 0xc0) == 0x80)
            continue;
        seq = (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3 : (b & 0xf8) == 0xf0 ? 4 : 1;
        return seq > back ? back : 0;
    }
    return 0;
}

static int suffix(struct buf *out, size_t omitted, const char *note)
{
    int r = buf_printf(out, " [... %zu bytes omitted]", omitted);

    if (r == 0 && note)
        r = buf_printf(out, "\n\n%s", note);
    return r;
}

int tool_callback_cap(const char *text, size_t len, size_t max, const char *note,
                      struct buf *out)
{
    struct buf probe;
    size_t reserved, budget, keep;
    int r;

    if (len <= max)
        return buf_append(out, text, len);
    /* the omitted count is at most len: reserve room for a marker that long */
    buf_init(&probe, 1024 + (note ? strlen(note) : 0));
    r = suffix(&probe, len, note);
    reserved = probe.len;
    buf_release(&probe);
    if (r < 0)
        return r;
    budget = max > reserved ? max - reserved : 0;
    keep = budget - trailing_incomplete(text, budget);
    r = buf_append(out, text, keep);
    if (r == 0)
        r = suffix(out, len - keep, note);
    return r;
}

/* ---- callback tools --------------------------------------------------------------------- */

/* The /tools/call body as compact JSON appended to out. */
static int callback_body(const char *call_ref, const char *tool_call_id, json_object *args,
                         struct buf *out)
{
    json_object *doc = json_object_new_object(), *data = json_object_new_object();
    json_object *fn = json_object_new_object();
    const char *text;
    size_t len;
    int r;

    if (!doc || !data || !fn) {
        json_object_put(doc);
        json_object_put(data);
        json_object_put(fn);
        return -ENOMEM;
    }
    json_object_object_add(fn, "name", json_object_new_string(call_ref));
    json_object_object_add(fn, "arguments", args ? json_object_get(args)
                                                 : json_object_new_object());
    json_object_object_add(data, "id", json_object_new_string(tool_call_id ? tool_call_id : ""));
    json_object_object_add(data, "type", json_object_new_string("function"));
    json_object_object_add(data, "function", fn);
    json_object_object_add(doc, "data", data);
    text = jsonx_text(doc, &len);
    r = buf_append(out, text, len);
    json_object_put(doc);
    return r;
}

/* A result holding text[0..len) capped at max (NUL bytes become spaces). */
static int capped_result(struct tool_result *ret, bool is_error, const char *text, size_t len,
                         size_t max)
{
    struct buf b;
    int r;

    buf_init(&b, max + 4096);
    r = tool_callback_cap(text, len, max, tool_callback_steering, &b);
    for (size_t i = 0; r == 0 && i < b.len; i++)
        if (b.data[i] == '\0')
            b.data[i] = ' ';
    if (r == 0)
        r = tool_result_set(ret, is_error, buf_str(&b));
    buf_release(&b);
    return r;
}

/* Turn a /tools/call reply into a result (tool_callback.h). */
static int parse_reply(const char *call_ref, long status, const char *body, size_t len,
                       size_t result_max, struct tool_result *ret)
{
    json_object *doc = NULL, *content, *st;
    const char *code, *message, *detail = "";
    size_t detail_len = 0;
    char err[128], reason[1024];
    struct buf b;
    int r;

    ret->http_status = status;
    if (status < 200 || status > 299) {
        snprintf(reason, sizeof(reason), "tool call %s failed: HTTP %ld", call_ref, status);
        return tool_result_set(ret, true, reason);
    }
    if (jsonx_parse(body, len, REPLY_DEPTH, &doc, err, sizeof(err)) < 0)
        return capped_result(ret, false, body, len, result_max);
    content = jsonx_path(doc, "call.data.content");
    st = jsonx_path(doc, "call.status");
    if (content && json_object_is_type(content, json_type_string)) {
        detail = json_object_get_string(content);
        detail_len = (size_t)json_object_get_string_len(content);
    } else if (content) {
        detail = jsonx_text(content, &detail_len);
    }
    code = jsonx_str(st, "code");
    if (code && strcmp(code, "STATUS_CODE_ERROR") == 0) {
        message = jsonx_str(st, "message");
        if (message && *message)
            snprintf(reason, sizeof(reason), "tool call %s failed: %.512s", call_ref, message);
        else
            snprintf(reason, sizeof(reason), "tool call %s failed", call_ref);
        buf_init(&b, BODY_MAX);
        r = buf_append_str(&b, reason);
        if (r == 0 && detail_len)
            r = buf_printf(&b, "\n%.*s", (int)detail_len, detail);
        if (r == 0)
            r = capped_result(ret, true, buf_str(&b), b.len, result_max);
        buf_release(&b);
    } else if (content) {
        r = capped_result(ret, false, detail, detail_len, result_max);
    } else {
        r = capped_result(ret, false, body, len, result_max);
    }
    json_object_put(doc);
    return r;
}

/* ---- running a call --------------------------------------------------------------------- */

/* The timeout a call of spec gets: timeoutMs + 10 s when set, else default_ms (0 = 30 s). */
static uint64_t tool_callback_timeout_ms(const struct tool_spec *spec, uint64_t default_ms)
{
    if (spec && spec->timeout_ms > 0)
        return spec->timeout_ms + TOOL_TIMEOUT_GRACE_MS;
    return default_ms ? default_ms : TOOL_TIMEOUT_DEFAULT_MS;
}

/* The header lines of a callback or direct request into lines[] (backed by store). */
static int headers_for(const struct tool_call_ctx *ctx, json_object *view, struct buf *store,
                       const char *lines[3], size_t *ret_n)
{
    const char *kind = jsonx_str(jsonx_get(view, "run"), "kind");
    size_t offs[3], n = 0;
    int r;

    offs[n++] = store->len;
    r = buf_append(store, "content-type: application/json", 31);
    if (r == 0 && ctx->authorization) {
        r = buf_append_char(store, '\0');
        offs[n++] = store->len;
        if (r == 0)
            r = buf_printf(store, "authorization: %s", ctx->authorization);
    }
    if (r == 0 && kind) {
        r = buf_append_char(store, '\0');
        offs[n++] = store->len;
        if (r == 0)
            r = buf_printf(store, "x-agenta-run-kind: %s", kind);
    }
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++)
        lines[i] = store->data + offs[i];
    *ret_n = n;
    return 0;
}

static const char *transport_reason(int r, uint64_t timeout_ms, const char *detail, char *out,
                                    size_t outlen)
{
    if (r == -ETIMEDOUT)
        snprintf(out, outlen, "timed out after %" PRIu64 " ms", timeout_ms);
    else if (r == -EINVAL)
        snprintf(out, outlen, "the request could not be built (check toolCallback)");
    else
        snprintf(out, outlen, "%.200s", detail);
    return out;
}

static int run_callback(const struct tool_call_ctx *ctx, const struct tool_spec *spec,
                        const char *tool_call_id, json_object *args, json_object *view,
                        struct tool_result *ret)
{
    struct tool_http_request rq = {.method = "POST", .url = ctx->endpoint,
                                   .max_body = TOOL_RAW_READ_MAX, .truncate_ok = true,
                                   .cancel = ctx->cancel};
    struct httpc_response res;
    const char *lines[3];
    json_object *bound = NULL;
    struct buf body, store;
    char err[512], why[256];
    size_t result_max = ctx->result_max ? ctx->result_max : TOOL_RESULT_MAX_DEFAULT;
    int r;

    buf_init(&body, BODY_MAX);
    buf_init(&store, HEADER_MAX);
    r = tool_args_bind(args, spec->context_bindings, view, &bound, err, sizeof(err));
    if (r == -ENOENT) {
        r = tool_result_set(ret, true, err);
        goto out;
    }
    if (r < 0)
        goto out;
    /* without bindings the model's arguments go as they are (an object or {} when absent) */
    r = callback_body(spec->call_ref, tool_call_id, spec->context_bindings ? bound : args, &body);
    if (r == 0)
        r = headers_for(ctx, view, &store, lines, &rq.nheaders);
    if (r < 0)
        goto out;
    rq.body = buf_str(&body);
    rq.body_len = body.len;
    rq.headers = lines;
    rq.timeout_ms = tool_callback_timeout_ms(spec, ctx->default_timeout_ms);
    r = tool_http_perform(ctx->curl, &rq, &res, err, sizeof(err));
    if (r == -ECANCELED || r == -ENOMEM)
        goto out;
    if (r < 0) {
        char text[1024];

        snprintf(text, sizeof(text), "tool call %s failed: %s", spec->call_ref,
                 transport_reason(r, rq.timeout_ms, err, why, sizeof(why)));
        log_debug("tool \"%s\": callback failed: %s", spec->name, why);
        r = tool_result_set(ret, true, text);
        goto out;
    }
    if (res.status < 200 || res.status > 299)
        log_debug("tool \"%s\": callback answered HTTP %ld", spec->name, res.status);
    r = parse_reply(spec->call_ref, res.status, res.body.data ? res.body.data : "", res.body.len,
                    result_max, ret);
    httpc_response_release(&res);
out:
    json_object_put(bound);
    buf_release(&body);
    buf_release(&store);
    return r;
}

static int run_direct(const struct tool_call_ctx *ctx, const struct tool_spec *spec,
                      json_object *args, json_object *view, struct tool_result *ret)
{
    const char *method = jsonx_str(spec->call, "method");
    struct tool_http_request rq = {.method = method, .max_body = TOOL_RAW_READ_MAX,
                                   .truncate_ok = true, .cancel = ctx->cancel};
    struct httpc_response res;
    json_object *body = NULL;
    const char *lines[3];
    struct buf store;
    char err[512], why[256], text[1024];
    char *url = NULL;
    size_t result_max = ctx->result_max ? ctx->result_max : TOOL_RESULT_MAX_DEFAULT;
    int r;

    buf_init(&store, HEADER_MAX);
    r = tool_direct_body(spec->call, args, view, &body, err, sizeof(err));
    if (r == 0)
        r = tool_direct_url(ctx->endpoint, spec->call, body, &url, err, sizeof(err));
    if (r == -ENOENT || r == -EINVAL) {
        r = tool_result_set(ret, true, err);
        goto out;
    }
    if (r == 0)
        r = headers_for(ctx, view, &store, lines, &rq.nheaders);
    if (r < 0)
        goto out;
    rq.url = url;
    rq.headers = lines;
    if (method && (strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0)) {
        size_t len;

        rq.body = jsonx_text(body, &len);
        rq.body_len = len;
    }
    rq.timeout_ms = tool_callback_timeout_ms(spec, ctx->default_timeout_ms);
    r = tool_http_perform(ctx->curl, &rq, &res, err, sizeof(err));
    if (r == -ECANCELED || r == -ENOMEM)
        goto out;
    if (r < 0) {
        snprintf(text, sizeof(text), "direct tool call failed: %s",
                 transport_reason(r, rq.timeout_ms, err, why, sizeof(why)));
        log_debug("tool \"%s\": direct call failed: %s", spec->name, why);
        r = tool_result_set(ret, true, text);
        goto out;
    }
    ret->http_status = res.status;
    if (res.status < 200 || res.status > 299) {
        log_debug("tool \"%s\": direct call answered HTTP %ld", spec->name, res.status);
        snprintf(text, sizeof(text), "direct tool call failed: HTTP %ld", res.status);
        r = tool_result_set(ret, true, text);
    } else {
        r = capped_result(ret, false, res.body.data ? res.body.data : "", res.body.len,
                          result_max);
    }
    httpc_response_release(&res);
out:
    free(url);
    json_object_put(body);
    buf_release(&store);
    return r;
}

int tool_callback_run(const struct tool_call_ctx *ctx, const struct tool_spec *spec,
                      const char *tool_call_id, json_object *args, struct tool_result *ret)
{
    struct tool_result res = {0};
    json_object *view = NULL, *stripped = NULL;
    struct buf missing;
    int r;

    if (spec->exec != TOOL_EXEC_CALLBACK && spec->exec != TOOL_EXEC_DIRECT)
        return -EINVAL;
    log_redact_add(ctx->authorization);
    buf_init(&missing, 64 * 1024);
    if (!ctx->endpoint) {
        r = tool_result_set(&res, true, "missing toolCallback endpoint");
        goto done;
    }
    r = tool_spec_check_required(spec, args, &missing);
    if (r != 0) {
        if (r > 0)
            r = tool_result_set(&res, true, buf_str(&missing));
        goto done;
    }
    stripped = tool_args_strip_ephemeral(args, spec->ephemeral_args);
    view = tool_args_ctx_view(ctx->run_context, ctx->session_id);
    if ((args && !stripped) || !view) {
        r = -ENOMEM;
        goto done;
    }
    if (spec->exec == TOOL_EXEC_CALLBACK)
        r = run_callback(ctx, spec, tool_call_id, stripped, view, &res);
    else
        r = run_direct(ctx, spec, stripped, view, &res);
done:
    if (r == 0 && !res.text)
        r = -EIO;
    if (r == 0) {
        *ret = res;
        memset(&res, 0, sizeof(res));
    }
    tool_result_release(&res);
    json_object_put(view);
    json_object_put(stripped);
    buf_release(&missing);
    return r;
}
