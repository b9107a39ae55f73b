/*
 * mcp_client — CallToolResult rendering, and a whole session against an in-process MCP server:
 * initialize + initialized + session id + protocol header, paginated tools/list, tools/call
 * answered as JSON and as an SSE stream with a notification and a ping first, the credential
 * header on every request, a server-ended session re-initialized once, HTTP and JSON-RPC
 * errors as tool errors, and the SSRF refusal before any connection.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "http_stub.h"
#include "suites.h"
#include "tools/mcp_client.h"
#include "tools/tool_callback.h"

/* ---- results ----------------------------------------------------------------------------- */

static void test_mcp_client_render(void)
{
    static const struct {
        const char *result;
        bool is_error;
        const char *text;
    } cases[] = {
        {"{\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}",
         false, "a\nb"},
        {"{\"content\":[{\"type\":\"image\",\"data\":\"AAA\",\"mimeType\":\"image/png\"}],"
         "\"isError\":false}",
         false, "[image image/png]"},
        {"{\"content\":[{\"type\":\"resource\",\"resource\":{\"uri\":\"file:///a\",\"text\":"
         "\"body\"}},{\"type\":\"resource\",\"resource\":{\"uri\":\"file:///b\",\"blob\":\"x\"}},"
         "{\"type\":\"resource_link\",\"uri\":\"file:///c\",\"name\":\"c\"}]}",
         false, "body\n[resource file:///b]\n[resource_link file:///c]"},
        {"{\"content\":[],\"structuredContent\":{\"n\":1}}", false, "{\"n\":1}"},
        {"{\"content\":[{\"type\":\"text\",\"text\":\"boom\"}],\"isError\":true}", true, "boom"},
        {"{}", false, ""},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_object *o = test_json(cases[i].result);
        struct tool_result r = {0};

        CU_ASSERT_EQUAL(mcp_client_render_result(o, 0, &r), 0);
        CU_ASSERT_EQUAL(r.is_error, cases[i].is_error);
        CU_ASSERT_STRING_EQUAL(TEST_STR(r.text), cases[i].text);
        tool_result_release(&r);
        json_object_put(o);
    }
    {
        json_object *o = json_object_new_object(), *arr = json_object_new_array();
        json_object *item = json_object_new_object();
        char *big = malloc(300001);
        struct tool_result r = {0};

        memset(big, 'y', 300000);
        big[300000] = '\0';
        json_object_object_add(item, "type", json_object_new_string("text"));
        json_object_object_add(item, "text", json_object_new_string(big));
        json_object_array_add(arr, item);
        json_object_object_add(o, "content", arr);
        CU_ASSERT_EQUAL(mcp_client_render_result(o, 0, &r), 0);
        CU_ASSERT(strlen(r.text) <= TOOL_RESULT_MAX_DEFAULT);
        CU_ASSERT_PTR_NOT_NULL(strstr(r.text, "Narrow your query"));
        tool_result_release(&r);
        json_object_put(o);
        free(big);
    }
}

/* ---- a scripted MCP server -------------------------------------------------------------- */

struct mcp_stub {
    int sessions;        /* sessions handed out */
    char live[32];       /* the live session id */
    bool expire_next;    /* the next request with a session gets 404 */
    bool sse;            /* answer tools/call as an SSE stream */
    int fail_status;     /* answer tools/call with this HTTP status */
    bool bad_header;     /* a request lacked the credential or the protocol header */
};

/*
 * JSON parsing inside the stub's thread: plain json-c, not jsonx (whose per-thread tokener
 * cache would outlive the thread and show up as a leak under ASan).
 */
static json_object *stub_json(const char *text)
{
    return json_tokener_parse(text);
}

static void reply_json(struct http_stub_reply *out, const char *headers, json_object *o)
{
    const char *t = jsonx_text(o, NULL);

    snprintf(out->headers, sizeof(out->headers), "Content-Type: application/json\r\n%s",
             headers ? headers : "");
    out->body = strdup(t);
    out->body_len = strlen(t);
}

static void mcp_handler(void *ctx, const struct http_stub_request *rq,
                        struct http_stub_reply *out)
{
    struct mcp_stub *st = ctx;
    json_object *msg = stub_json(rq->body), *reply = json_object_new_object(), *result;
    const char *method = jsonx_str(msg, "method");
    char v[256], hdr[128];

    if (!http_stub_header(rq, "x-api-key", v, sizeof(v)) || strcmp(v, "k-SECRET") != 0) {
        st->bad_header = true;
        out->status = 401;
        goto done;
    }
    if (method && strcmp(method, "initialize") != 0) {
        if (!http_stub_header(rq, "mcp-protocol-version", v, sizeof(v)) ||
            strcmp(v, "2025-06-18") != 0)
            st->bad_header = true;
        if (!http_stub_header(rq, "mcp-session-id", v, sizeof(v)) || strcmp(v, st->live) != 0 ||
            st->expire_next) {
            st->expire_next = false;
            out->status = 404;
            goto done;
        }
    }
    json_object_object_add(reply, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(reply, "id", json_object_get(jsonx_get(msg, "id")));
    result = json_object_new_object();
    if (method && strcmp(method, "initialize") == 0) {
        json_object_object_add(result, "protocolVersion", json_object_new_string("2025-06-18"));
        json_object_object_add(result, "capabilities", json_object_new_object());
        snprintf(st->live, sizeof(st->live), "sess-%d", ++st->sessions);
        snprintf(hdr, sizeof(hdr), "Mcp-Session-Id: %s\r\n", st->live);
        json_object_object_add(reply, "result", result);
        reply_json(out, hdr, reply);
    } else if (method && strcmp(method, "notifications/initialized") == 0) {
        json_object_put(result);
        out->status = 202;
    } else if (method && strcmp(method, "tools/list") == 0) {
        const char *cursor = jsonx_str(jsonx_get(msg, "params"), "cursor");
        json_object *tools = stub_json(cursor ? "[{\"name\":\"c\"}]"
                                              : "[{\"name\":\"a\"},{\"name\":\"b\"}]");

        json_object_object_add(result, "tools", tools);
        if (!cursor)
            json_object_object_add(result, "nextCursor", json_object_new_string("page2"));
        json_object_object_add(reply, "result", result);
        reply_json(out, NULL, reply);
    } else if (method && strcmp(method, "tools/call") == 0) {
        json_object *params = jsonx_get(msg, "params");
        const char *name = jsonx_str(params, "name");
        char text[512];

        if (st->fail_status) {
            json_object_put(result);
            out->status = st->fail_status;
            goto done;
        }
        if (name && strcmp(name, "broken") == 0) {
            json_object *e = json_object_new_object();

            json_object_put(result);
            json_object_object_add(e, "code", json_object_new_int(-32602));
            json_object_object_add(e, "message", json_object_new_string("Unknown tool: broken"));
            json_object_object_add(reply, "error", e);
            reply_json(out, NULL, reply);
            goto done;
        }
        {
            json_object *content = json_object_new_array(), *item = json_object_new_object();
            char said[256];

            snprintf(said, sizeof(said), "%s got %s", name ? name : "?",
                     jsonx_text(jsonx_get(params, "arguments"), NULL));
            json_object_object_add(item, "type", json_object_new_string("text"));
            json_object_object_add(item, "text", json_object_new_string(said));
            json_object_array_add(content, item);
            json_object_object_add(result, "content", content);
            snprintf(text, sizeof(text), "%s", jsonx_text(result, NULL));
        }
        json_object_put(result);
        result = NULL;
        if (st->sse) {
            char body[2048];
            int n = snprintf(body, sizeof(body),
                             ": keep-alive\n\n"
                             "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":"
                             "\"notifications/message\",\"params\":{\"level\":\"info\"}}\n\n"
                             "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"srv-1\","
                             "\"method\":\"ping\"}\n\n"
                             "id: 9\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,"
                             "\"result\":%s}\n\n",
                             jsonx_text(jsonx_get(msg, "id"), NULL), text);

            snprintf(out->headers, sizeof(out->headers), "Content-Type: text/event-stream\r\n");
            out->body = strdup(body);
            out->body_len = (size_t)n;
        } else {
            json_object_object_add(reply, "result", stub_json(text));
            reply_json(out, NULL, reply);
        }
    } else if (!method && jsonx_get(msg, "result")) {
        json_object_put(result);
        out->status = 202; /* our answer to the server's ping */
    } else {
        json_object_put(result);
        out->status = 400;
    }
done:
    json_object_put(reply);
    json_object_put(msg);
}

static struct mcp_client *open_stub(struct http_stub *s, char *err, size_t errlen, int *ret_r)
{
    struct mcp_client_options opt = {.ssrf = {.allowlist = "127.0.0.1"}, .timeout_ms = 5000};
    struct mcp_header key = {.name = "X-Api-Key", .value = "k-SECRET", .secret = true};
    struct mcp_server server = {.name = "stub", .headers = &key, .nheaders = 1};
    struct mcp_client *c = NULL;
    char url[128];

    http_stub_url(s, "/mcp", url, sizeof(url));
    server.url = url;
    *ret_r = mcp_client_open(&server, &opt, &c, err, errlen);
    return c;
}

static void test_mcp_client_session(void)
{
    struct mcp_stub st = {0};
    struct http_stub *s = http_stub_start(mcp_handler, &st);
    json_object *tools = NULL, *args = test_json("{\"q\":\"x\"}");
    struct tool_result res = {0};
    struct mcp_client *c;
    char err[512];
    int r;

    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    c = open_stub(s, err, sizeof(err), &r);
    if (r != 0)
        fprintf(stderr, "open: %s\n", err);
    CU_ASSERT_EQUAL_FATAL(r, 0);
    CU_ASSERT_STRING_EQUAL(mcp_client_protocol(c), "2025-06-18");
    CU_ASSERT_STRING_EQUAL(mcp_client_session(c), "sess-1");
    CU_ASSERT_EQUAL(http_stub_count(s), 2); /* initialize, notifications/initialized */

    CU_ASSERT_EQUAL_FATAL(mcp_client_list_tools(c, &tools, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(json_object_array_length(tools), 3);
    CU_ASSERT_STRING_EQUAL(jsonx_str(json_object_array_get_idx(tools, 2), "name"), "c");
    json_object_put(tools);

    CU_ASSERT_EQUAL(mcp_client_call(c, "search", args, 0, NULL, 0, &res), 0);
    CU_ASSERT(!res.is_error);
    CU_ASSERT_STRING_EQUAL(res.text, "search got {\"q\":\"x\"}");
    tool_result_release(&res);

    /* an SSE answer with a notification and a server ping before the response */
    st.sse = true;
    CU_ASSERT_EQUAL(mcp_client_call(c, "search", NULL, 0, NULL, 0, &res), 0);
    CU_ASSERT(!res.is_error);
    CU_ASSERT_STRING_EQUAL(res.text, "search got {}");
    tool_result_release(&res);
    st.sse = false;
    {
        /* the ping was answered with the same id, {} */
        bool answered = false;
        for (size_t i = 0; i < http_stub_count(s); i++)
            answered = answered || strstr(http_stub_get(s, i)->body,
                                          "\"id\":\"srv-1\",\"result\":{}") != NULL;
        CU_ASSERT(answered);
    }

    /* the server forgets the session: initialize again, once, and repeat */
    st.expire_next = true;
    CU_ASSERT_EQUAL(mcp_client_call(c, "search", NULL, 0, NULL, 0, &res), 0);
    CU_ASSERT(!res.is_error);
    CU_ASSERT_STRING_EQUAL(mcp_client_session(c), "sess-2");
    tool_result_release(&res);

    /* errors of the tool are tool results naming the server */
    CU_ASSERT_EQUAL(mcp_client_call(c, "broken", NULL, 0, NULL, 0, &res), 0);
    CU_ASSERT(res.is_error);
    CU_ASSERT_STRING_EQUAL(res.text, "MCP server \"stub\": tools/call failed: Unknown tool: broken "
                                     "(code -32602)");
    tool_result_release(&res);
    st.fail_status = 500;
    CU_ASSERT_EQUAL(mcp_client_call(c, "search", NULL, 0, NULL, 0, &res), 0);
    CU_ASSERT(res.is_error);
    CU_ASSERT_STRING_EQUAL(res.text, "MCP server \"stub\": tools/call: HTTP 500");
    tool_result_release(&res);
    st.fail_status = 0;
    CU_ASSERT(!st.bad_header);
    {
        char *line = log_redact_copy("key k-SECRET", 64);
        CU_ASSERT_STRING_EQUAL(line, "key [redacted]");
        free(line);
    }
    mcp_client_close(c);
    /* close ended the session */
    CU_ASSERT_STRING_EQUAL(http_stub_get(s, http_stub_count(s) - 1)->method, "DELETE");
    log_redact_clear();
    json_object_put(args);
    http_stub_stop(s);
}

static void test_mcp_client_refusals(void)
{
    struct mcp_stub st = {0};
    struct http_stub *s = http_stub_start(mcp_handler, &st);
    struct mcp_server cfg = {0};
    struct mcp_client_options opt = {0};
    struct mcp_client *c = NULL;
    char url[128], err[512];
    int r;

    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    /* plain http on loopback without the allowlist: refused before any connection */
    http_stub_url(s, "/mcp", url, sizeof(url));
    cfg.name = "local";
    cfg.url = url;
    r = mcp_client_open(&cfg, &opt, &c, err, sizeof(err));
    CU_ASSERT_EQUAL(r, -EACCES);
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "MCP server \"local\": url must use https"));
    CU_ASSERT_EQUAL(http_stub_count(s), 0);
    /* a wrong credential is named as such */
    opt.ssrf.allowlist = "127.0.0.1";
    r = mcp_client_open(&cfg, &opt, &c, err, sizeof(err));
    CU_ASSERT_EQUAL(r, -EACCES);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "MCP server \"local\": initialize: HTTP 401"));
    http_stub_stop(s);
}

CU_TestInfo mcp_client_tests[] = {
    {"test_mcp_client_render", test_mcp_client_render},
    {"test_mcp_client_session", test_mcp_client_session},
    {"test_mcp_client_refusals", test_mcp_client_refusals},
    CU_TEST_INFO_NULL,
};
