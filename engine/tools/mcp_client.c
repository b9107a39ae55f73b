/*
 * mcp_client — one MCP server's session: initialize, tools/list, tools/call over Streamable
 * HTTP, its answers as JSON or SSE (mcp_client.h).
 */
#include "tools/mcp_client.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "base/httpc.h"
#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "core/contracts.h"
#include "tools/mcp_sse.h"
#include "tools/tool_callback.h"
#include "tools/tool_http.h"

#define RPC_DEPTH 128
#define SESSION_MAX 255
#define REPLY_TIMEOUT_MS 5000u
#define CLOSE_TIMEOUT_MS 2000u

static const char *const supported_versions[] = {"2025-06-18", "2025-03-26"};

/* The server as the client holds it: its header lines, each "Name: value". */
struct conf {
    char *name;
    char *url;
    char *headers[MCP_SERVER_HEADERS_MAX];
    size_t nheaders;
    char *secrets[MCP_SERVER_HEADERS_MAX]; /* the credential values (for redaction) */
    size_t nsecrets;
};

struct mcp_client {
    struct conf cfg;
    char *allowlist;
    char *ca_file;
    uint64_t timeout_ms;
    struct ssrf_target target;
    CURL *h;
    char session[SESSION_MAX + 1];
    char protocol[32];
    int64_t next_id;
};

/* ---- the server ----------------------------------------------------------------------- */

static void conf_release(struct conf *cf)
{
    free(cf->name);
    free(cf->url);
    for (size_t i = 0; i < cf->nheaders; i++)
        free(cf->headers[i]);
    for (size_t i = 0; i < cf->nsecrets; i++)
        free(cf->secrets[i]);
    memset(cf, 0, sizeof(*cf));
}

/* sv's name, url and "Name: value" header lines (credential values kept apart, for redaction). */
static int conf_of(const struct mcp_server *sv, struct conf *cf)
{
    memset(cf, 0, sizeof(*cf));
    cf->name = strdup(sv->name);
    cf->url = strdup(sv->url);
    if (!cf->name || !cf->url)
        return -ENOMEM;
    for (size_t i = 0; i < sv->nheaders && i < MCP_SERVER_HEADERS_MAX; i++) {
        const struct mcp_header *h = &sv->headers[i];
        size_t n = strlen(h->name) + strlen(h->value) + 3;

        cf->headers[i] = malloc(n);
        if (!cf->headers[i])
            return -ENOMEM;
        snprintf(cf->headers[i], n, "%s: %s", h->name, h->value);
        cf->nheaders++;
        if (h->secret) {
            cf->secrets[cf->nsecrets] = strdup(h->value);
            if (!cf->secrets[cf->nsecrets])
                return -ENOMEM;
            cf->nsecrets++;
        }
    }
    return 0;
}

/* ---- one exchange ----------------------------------------------------------------------- */

struct exchange {
    struct mcp_client *c;
    int64_t id;
    json_object *response; /* the matched response (owned) */
    struct mcp_sse sse;
    bool sse_on;
    int error; /* -errno noticed while reading */
};

static bool id_is(json_object *id, int64_t want)
{
    return id && json_object_is_type(id, json_type_int) && json_object_get_int64(id) == want;
}

static int post(struct mcp_client *c, CURL *h, const char *body, size_t len, bool with_session,
                uint64_t timeout_ms, const atomic_int *cancel, httpc_data_fn data_fn, void *ctx,
                struct httpc_response *res, char *err, size_t errlen);

/* Answer a request the server sent inside an SSE stream: ping gets {}, the rest -32601. */
static void answer_server_request(struct mcp_client *c, json_object *msg)
{
    json_object *reply = json_object_new_object(), *id = jsonx_get(msg, "id");
    const char *method = jsonx_str(msg, "method"), *text;
    struct httpc_response res;
    char err[256];
    size_t len;

    if (!reply)
        return;
    json_object_object_add(reply, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(reply, "id", json_object_get(id));
    if (method && strcmp(method, "ping") == 0) {
        json_object_object_add(reply, "result", json_object_new_object());
    } else {
        json_object *e = json_object_new_object();

        json_object_object_add(e, "code", json_object_new_int(-32601));
        json_object_object_add(e, "message", json_object_new_string("method not supported"));
        json_object_object_add(reply, "error", e);
    }
    text = jsonx_text(reply, &len);
    if (post(c, NULL, text, len, true, REPLY_TIMEOUT_MS, NULL, NULL, NULL, &res, err,
             sizeof(err)) == 0)
        httpc_response_release(&res);
    json_object_put(reply);
}

/* One JSON-RPC message from the server: keep our response, answer its requests. */
static int take_message(struct exchange *x, json_object *msg)
{
    json_object *id;

    if (!msg || !json_object_is_type(msg, json_type_object))
        return 0;
    id = jsonx_get(msg, "id");
    if (jsonx_str(msg, "method")) {
        if (id)
            answer_server_request(x->c, msg);
        return 0;
    }
    if (id_is(id, x->id) && !x->response) {
        x->response = json_object_get(msg);
        return 1;
    }
    return 0;
}

static int on_sse_event(void *ctx, const char *event, const char *data, size_t len)
{
    struct exchange *x = ctx;
    json_object *msg = NULL;
    char err[128];
    int r;

    if (strcmp(event, "message") != 0)
        return 0;
    if (jsonx_parse(data, len, RPC_DEPTH, &msg, err, sizeof(err)) < 0)
        return 0; /* not JSON-RPC: ignore the event */
    r = take_message(x, msg);
    json_object_put(msg);
    return r;
}

static int on_data(void *ctx, const struct httpc_response *res, const char *data, size_t len)
{
    struct exchange *x = ctx;

    if (res->status != 200 || strcmp(res->content_type, "text/event-stream") != 0)
        return 0;
    x->sse_on = true;
    return mcp_sse_feed(&x->sse, data, len);
}

static int post(struct mcp_client *c, CURL *h, const char *body, size_t len, bool with_session,
                uint64_t timeout_ms, const atomic_int *cancel, httpc_data_fn data_fn, void *ctx,
                struct httpc_response *res, char *err, size_t errlen)
{
    const char *lines[MCP_SERVER_HEADERS_MAX + 4];
    char version[64], session[SESSION_MAX + 32];
    struct tool_http_request rq = {
        .method = "POST",
        .url = c->cfg.url,
        .body = body,
        .body_len = len,
        .headers = lines,
        .timeout_ms = timeout_ms,
        .max_body = MCP_BODY_MAX,
        .pin_resolve = c->target.resolve[0] ? c->target.resolve : NULL,
        .pin_addr = c->target.addr,
        .capture_header = "mcp-session-id",
        .ca_file = c->ca_file,
        .cancel = cancel,
        .on_data = data_fn,
        .on_data_ctx = ctx,
    };
    size_t n = 0;

    lines[n++] = "Content-Type: application/json";
    lines[n++] = "Accept: application/json, text/event-stream";
    if (c->protocol[0]) {
        snprintf(version, sizeof(version), "MCP-Protocol-Version: %s", c->protocol);
        lines[n++] = version;
    }
    if (with_session && c->session[0]) {
        snprintf(session, sizeof(session), "Mcp-Session-Id: %s", c->session);
        lines[n++] = session;
    }
    for (size_t i = 0; i < c->cfg.nheaders; i++)
        lines[n++] = c->cfg.headers[i];
    rq.nheaders = n;
    return tool_http_perform(h, &rq, res, err, errlen);
}

static const char *reason_of(int r, const char *detail, uint64_t timeout_ms, char *out,
                             size_t outlen)
{
    if (r == -ETIMEDOUT)
        snprintf(out, outlen, "no answer within %" PRIu64 " ms", timeout_ms);
    else if (r == -EPERM)
        snprintf(out, outlen, "the connection reached an unchecked address");
    else if (r == -E2BIG)
        snprintf(out, outlen, "answer larger than %u bytes", MCP_BODY_MAX);
    else
        snprintf(out, outlen, "%.200s", detail);
    return out;
}

static int initialize(struct mcp_client *c, char *err, size_t errlen);

/*
 * Send one request; on 0, *ret_result is the response's result (a new reference, NULL for a
 * null result). A JSON-RPC error is -EPROTO with its message in err.
 */
static int request(struct mcp_client *c, const char *method, json_object *params,
                   uint64_t timeout_ms, const atomic_int *cancel, bool may_reinit,
                   json_object **ret_result, char *err, size_t errlen)
{
    json_object *msg = json_object_new_object(), *doc = NULL, *e;
    struct httpc_response res;
    struct exchange x = {.c = c};
    char why[256], perr[128];
    const char *text;
    bool have_res = false;
    size_t len;
    int r;

    if (!msg)
        return -ENOMEM;
    x.id = ++c->next_id;
    mcp_sse_init(&x.sse, MCP_BODY_MAX, on_sse_event, &x);
    json_object_object_add(msg, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(msg, "id", json_object_new_int64(x.id));
    json_object_object_add(msg, "method", json_object_new_string(method));
    if (params)
        json_object_object_add(msg, "params", json_object_get(params));
    text = jsonx_text(msg, &len);
    r = post(c, c->h, text, len, true, timeout_ms, cancel, on_data, &x, &res, err, errlen);
    if (r < 0) {
        if (r != -ECANCELED && r != -ENOMEM)
            r = util_fail(r, err, errlen, "MCP server \"%s\": %s: %s", c->cfg.name, method,
                          reason_of(r, err, timeout_ms, why, sizeof(why)));
        goto out;
    }
    have_res = true;
    if (res.status == 404 && c->session[0] && may_reinit) {
        /* the session ended on the server: start a new one and ask again, once */
        log_debug("mcp server \"%s\": session ended, initializing again", c->cfg.name);
        c->session[0] = '\0';
        c->protocol[0] = '\0';
        r = initialize(c, err, errlen);
        if (r == 0)
            r = request(c, method, params, timeout_ms, cancel, false, ret_result, err, errlen);
        goto out;
    }
    if (res.status == 401 || res.status == 403) {
        r = util_fail(-EACCES, err, errlen,
                      "MCP server \"%s\": %s: HTTP %ld (check its credentials)", c->cfg.name,
                      method, res.status);
        goto out;
    }
    if (res.status < 200 || res.status > 299) {
        r = util_fail(-EIO, err, errlen, "MCP server \"%s\": %s: HTTP %ld", c->cfg.name, method,
                      res.status);
        goto out;
    }
    if (strcmp(method, "initialize") == 0 && res.captured[0]) {
        size_t n = strlen(res.captured);
        bool ok = n <= SESSION_MAX;

        for (const char *p = res.captured; ok && *p; p++)
            ok = *p >= 0x21 && *p <= 0x7e;
        if (!ok) {
            r = util_fail(-EPROTO, err, errlen, "MCP server \"%s\": invalid Mcp-Session-Id",
                          c->cfg.name);
            goto out;
        }
        memcpy(c->session, res.captured, n + 1); /* n <= SESSION_MAX: checked above */
    }
    if (!x.sse_on) {
        /* one JSON document: the response (or a batch holding it) */
        if (jsonx_parse(res.body.data ? res.body.data : "", res.body.len, RPC_DEPTH, &doc, perr,
                        sizeof(perr)) == 0) {
            if (json_object_is_type(doc, json_type_array)) {
                for (size_t i = 0; i < json_object_array_length(doc) && !x.response; i++)
                    take_message(&x, json_object_array_get_idx(doc, i));
            } else {
                take_message(&x, doc);
            }
        }
    }
    if (!x.response) {
        r = util_fail(-EPROTO, err, errlen,
                      "MCP server \"%s\": %s: no JSON-RPC response in the answer", c->cfg.name,
                      method);
        goto out;
    }
    e = jsonx_get(x.response, "error");
    if (e) {
        const char *m = jsonx_str(e, "message");

        r = util_fail(-EPROTO, err, errlen, "MCP server \"%s\": %s failed: %.512s (code %d)",
                      c->cfg.name, method, m ? m : "unknown error",
                      json_object_get_int(jsonx_get(e, "code")));
        goto out;
    }
    *ret_result = json_object_get(jsonx_get(x.response, "result"));
    r = 0;
out:
    if (have_res)
        httpc_response_release(&res);
    mcp_sse_release(&x.sse);
    json_object_put(x.response);
    json_object_put(doc);
    json_object_put(msg);
    return r;
}

static int notify(struct mcp_client *c, const char *method, char *err, size_t errlen)
{
    struct httpc_response res;
    char buf[256], why[256];
    int r;

    snprintf(buf, sizeof(buf), "{\"jsonrpc\":\"2.0\",\"method\":\"%s\"}", method);
    r = post(c, c->h, buf, strlen(buf), true, c->timeout_ms, NULL, NULL, NULL, &res, err, errlen);
    if (r < 0)
        return util_fail(r, err, errlen, "MCP server \"%s\": %s: %s", c->cfg.name, method,
                         reason_of(r, err, c->timeout_ms, why, sizeof(why)));
    r = res.status >= 200 && res.status <= 299
            ? 0
            : util_fail(-EIO, err, errlen, "MCP server \"%s\": %s: HTTP %ld", c->cfg.name, method,
                        res.status);
    httpc_response_release(&res);
    return r;
}

static int initialize(struct mcp_client *c, char *err, size_t errlen)
{
    json_object *params = json_object_new_object(), *info = json_object_new_object();
    json_object *result = NULL;
    const char *version;
    bool known = false;
    int r;

    if (!params || !info) {
        json_object_put(params);
        json_object_put(info);
        return -ENOMEM;
    }
    json_object_object_add(params, "protocolVersion", json_object_new_string(MCP_PROTOCOL_VERSION));
    json_object_object_add(params, "capabilities", json_object_new_object());
    json_object_object_add(info, "name", json_object_new_string("agent-runner"));
    json_object_object_add(info, "version", json_object_new_string(AR_VERSION));
    json_object_object_add(params, "clientInfo", info);
    r = request(c, "initialize", params, c->timeout_ms, NULL, false, &result, err, errlen);
    json_object_put(params);
    if (r < 0)
        return r;
    version = jsonx_str(result, "protocolVersion");
    for (size_t i = 0; version && i < sizeof(supported_versions) / sizeof(supported_versions[0]);
         i++)
        known = known || strcmp(version, supported_versions[i]) == 0;
    if (!known) {
        r = util_fail(-EPROTO, err, errlen,
                      "MCP server \"%s\": unsupported protocol version \"%.32s\"", c->cfg.name,
                      version ? version : "");
        goto out;
    }
    snprintf(c->protocol, sizeof(c->protocol), "%s", version);
    r = notify(c, "notifications/initialized", err, errlen);
out:
    json_object_put(result);
    return r;
}

int mcp_client_open(const struct mcp_server *server, const struct mcp_client_options *opt,
                    struct mcp_client **ret, char *err, size_t errlen)
{
    struct mcp_client *c = calloc(1, sizeof(*c));
    struct ssrf_policy policy = {0};
    int r;

    if (!c)
        return -ENOMEM;
    r = conf_of(server, &c->cfg);
    if (r < 0)
        goto out;
    for (size_t i = 0; i < c->cfg.nsecrets; i++)
        log_redact_add(c->cfg.secrets[i]);
    if (opt) {
        policy = opt->ssrf;
        c->timeout_ms = opt->timeout_ms;
        if ((opt->ssrf.allowlist && !(c->allowlist = strdup(opt->ssrf.allowlist))) ||
            (opt->ca_file && !(c->ca_file = strdup(opt->ca_file)))) {
            r = -ENOMEM;
            goto out;
        }
    }
    if (!c->timeout_ms)
        c->timeout_ms = MCP_TIMEOUT_DEFAULT_MS;
    r = ssrf_guard_check(&policy, c->cfg.name, c->cfg.url, &c->target, err, errlen);
    if (r < 0)
        goto out;
    c->h = httpc_handle_new();
    if (!c->h) {
        r = -ENOMEM;
        goto out;
    }
    r = initialize(c, err, errlen);
    if (r < 0)
        goto out;
    *ret = c;
    c = NULL;
out:
    if (r == -ENOMEM)
        snprintf(err, errlen, "out of memory");
    if (c) {
        c->session[0] = '\0'; /* nothing to end on the server */
        mcp_client_close(c);
    }
    return r;
}

int mcp_client_list_tools(struct mcp_client *c, json_object **ret, char *err, size_t errlen)
{
    json_object *all = json_object_new_array(), *params = NULL, *result = NULL;
    char cursor[1024] = "";
    int r = 0;

    if (!all)
        return -ENOMEM;
    for (int page = 0;; page++) {
        json_object *tools;
        const char *next;

        if (page == MCP_LIST_PAGES_MAX) {
            r = util_fail(-E2BIG, err, errlen,
                          "MCP server \"%s\": tools/list has more than %d pages", c->cfg.name,
                          MCP_LIST_PAGES_MAX);
            break;
        }
        params = json_object_new_object();
        if (!params) {
            r = -ENOMEM;
            break;
        }
        if (cursor[0])
            json_object_object_add(params, "cursor", json_object_new_string(cursor));
        r = request(c, "tools/list", params, c->timeout_ms, NULL, true, &result, err, errlen);
        json_object_put(params);
        params = NULL;
        if (r < 0)
            break;
        tools = jsonx_get(result, "tools");
        if (!tools || !json_object_is_type(tools, json_type_array)) {
            r = util_fail(-EPROTO, err, errlen,
                          "MCP server \"%s\": tools/list without a tools array", c->cfg.name);
            break;
        }
        if (json_object_array_length(all) + json_object_array_length(tools) > MCP_LIST_TOOLS_MAX) {
            r = util_fail(-E2BIG, err, errlen, "MCP server \"%s\": lists more than %d tools",
                          c->cfg.name, MCP_LIST_TOOLS_MAX);
            break;
        }
        for (size_t i = 0; i < json_object_array_length(tools); i++)
            json_object_array_add(all, json_object_get(json_object_array_get_idx(tools, i)));
        next = jsonx_str(result, "nextCursor");
        if (!next || !*next)
            break;
        if (strlen(next) >= sizeof(cursor) || strcmp(next, cursor) == 0) {
            r = util_fail(-EPROTO, err, errlen, "MCP server \"%s\": tools/list cursor is invalid",
                          c->cfg.name);
            break;
        }
        snprintf(cursor, sizeof(cursor), "%s", next);
        json_object_put(result);
        result = NULL;
    }
    json_object_put(result);
    if (r < 0) {
        if (r == -ENOMEM)
            snprintf(err, errlen, "out of memory");
        json_object_put(all);
        return r;
    }
    *ret = all;
    return 0;
}

/* ---- results ---------------------------------------------------------------------------- */

static int render_item(json_object *item, struct buf *out)
{
    const char *type = jsonx_str(item, "type"), *t;
    json_object *res;

    if (!type)
        return buf_append_str(out, jsonx_text(item, NULL));
    if (strcmp(type, "text") == 0)
        return buf_append_str(out, (t = jsonx_str(item, "text")) ? t : "");
    if (strcmp(type, "image") == 0 || strcmp(type, "audio") == 0)
        return buf_printf(out, "[%s %s]", type, (t = jsonx_str(item, "mimeType")) ? t : "unknown");
    if (strcmp(type, "resource") == 0) {
        res = jsonx_get(item, "resource");
        if ((t = jsonx_str(res, "text")))
            return buf_append_str(out, t);
        return buf_printf(out, "[resource %s]", (t = jsonx_str(res, "uri")) ? t : "");
    }
    if (strcmp(type, "resource_link") == 0)
        return buf_printf(out, "[resource_link %s]", (t = jsonx_str(item, "uri")) ? t : "");
    return buf_append_str(out, jsonx_text(item, NULL));
}

int mcp_client_render_result(json_object *result, size_t result_max, struct tool_result *ret)
{
    json_object *content = jsonx_get(result, "content"), *structured;
    json_object *is_error = jsonx_get(result, "isError");
    struct buf text, capped;
    int r = 0;

    buf_init(&text, 64u * 1024 * 1024);
    buf_init(&capped, (result_max ? result_max : TOOL_RESULT_MAX_DEFAULT) + 4096);
    for (size_t i = 0; content && json_object_is_type(content, json_type_array) &&
                       i < json_object_array_length(content) && r == 0;
         i++) {
        if (i > 0)
            r = buf_append_char(&text, '\n');
        if (r == 0)
            r = render_item(json_object_array_get_idx(content, i), &text);
    }
    structured = jsonx_get(result, "structuredContent");
    if (r == 0 && text.len == 0 && structured)
        r = buf_append_str(&text, jsonx_text(structured, NULL));
    if (r == 0)
        r = tool_callback_cap(buf_str(&text), text.len,
                              result_max ? result_max : TOOL_RESULT_MAX_DEFAULT,
                              tool_callback_steering, &capped);
    if (r == 0)
        r = tool_result_set(ret, is_error && json_object_get_boolean(is_error), buf_str(&capped));
    buf_release(&text);
    buf_release(&capped);
    return r;
}

int mcp_client_call(struct mcp_client *c, const char *tool, json_object *args, uint64_t timeout_ms,
                    const atomic_int *cancel, size_t result_max, struct tool_result *ret)
{
    json_object *params = json_object_new_object(), *result = NULL;
    char err[1024];
    int r;

    if (!params)
        return -ENOMEM;
    for (size_t i = 0; i < c->cfg.nsecrets; i++)
        log_redact_add(c->cfg.secrets[i]);
    json_object_object_add(params, "name", json_object_new_string(tool));
    json_object_object_add(params, "arguments",
                           args ? json_object_get(args) : json_object_new_object());
    r = request(c, "tools/call", params, timeout_ms ? timeout_ms : c->timeout_ms, cancel, true,
                &result, err, sizeof(err));
    json_object_put(params);
    if (r == -ECANCELED || r == -ENOMEM)
        goto out;
    if (r < 0) {
        log_debug("mcp tool \"%s\": %s", tool, err);
        r = tool_result_set(ret, true, err);
        goto out;
    }
    r = mcp_client_render_result(result, result_max, ret);
out:
    json_object_put(result);
    return r;
}

void mcp_client_close(struct mcp_client *c)
{
    if (!c)
        return;
    if (c->session[0] && c->h) {
        const char *lines[MCP_SERVER_HEADERS_MAX + 2];
        char session[SESSION_MAX + 32];
        struct tool_http_request rq = {.method = "DELETE",
                                       .url = c->cfg.url,
                                       .headers = lines,
                                       .timeout_ms = CLOSE_TIMEOUT_MS,
                                       .max_body = 4096,
                                       .truncate_ok = true,
                                       .pin_resolve =
                                           c->target.resolve[0] ? c->target.resolve : NULL,
                                       .pin_addr = c->target.addr,
                                       .ca_file = c->ca_file};
        struct httpc_response res;
        char err[128];
        size_t n = 0;

        snprintf(session, sizeof(session), "Mcp-Session-Id: %s", c->session);
        lines[n++] = session;
        for (size_t i = 0; i < c->cfg.nheaders; i++)
            lines[n++] = c->cfg.headers[i];
        rq.nheaders = n;
        if (tool_http_perform(c->h, &rq, &res, err, sizeof(err)) == 0)
            httpc_response_release(&res);
    }
    if (c->h)
        curl_easy_cleanup(c->h);
    conf_release(&c->cfg);
    free(c->allowlist);
    free(c->ca_file);
    free(c);
}

const char *mcp_client_protocol(const struct mcp_client *c)
{
    return c->protocol;
}

const char *mcp_client_session(const struct mcp_client *c)
{
    return c->session;
}
