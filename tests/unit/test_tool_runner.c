/*
 * tool_runner: one run's tools on the worker — the checks at plan time, MCP servers reached
 * (SSRF guard, listing, include lists), calls of callback and MCP tools, cancel from the
 * calling thread, the test resolver override.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "engine_tools.h"
#include "http_stub.h"
#include "request/request.h"
#include "suites.h"
#include "tools/tool_runner.h"

/* ---- a tiny MCP server and a callback on the same stub --------------------------------- */

struct stub {
    int mcp_calls;
    int callback_calls;
    bool hang_callback;
    bool fail_callback;
};

static void reply_json(struct http_stub_reply *out, const char *headers, const char *body)
{
    snprintf(out->headers, sizeof(out->headers), "Content-Type: application/json\r\n%s",
             headers ? headers : "");
    out->body = strdup(body);
    out->body_len = strlen(body);
}

static void handler(void *ctx, const struct http_stub_request *rq, struct http_stub_reply *out)
{
    struct stub *st = ctx;
    json_object *msg = json_tokener_parse(rq->body ? rq->body : "null");
    const char *method = jsonx_str(msg, "method");
    char body[1024], key[64];

    if (strncmp(rq->target, "/api/", 5) == 0) {
        st->callback_calls++;
        if (st->hang_callback) {
            out->hang = true;
        } else if (st->fail_callback) {
            out->status = 500;
            reply_json(out, NULL, "{\"detail\":\"backend exploded\"}");
        } else {
            reply_json(out, NULL, "{\"call\":{\"data\":{\"content\":\"from the callback\"},"
                                  "\"status\":{\"code\":\"STATUS_CODE_OK\"}}}");
        }
        goto out;
    }
    if (!http_stub_header(rq, "x-api-key", key, sizeof(key)) || strcmp(key, "mcp-SECRET") != 0) {
        out->status = 401;
        goto out;
    }
    if (method && strcmp(method, "initialize") == 0) {
        snprintf(body, sizeof(body),
                 "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"protocolVersion\":\"2025-06-18\","
                 "\"capabilities\":{}}}",
                 jsonx_text(jsonx_get(msg, "id"), NULL));
        reply_json(out, "Mcp-Session-Id: s-1\r\n", body);
    } else if (method && strcmp(method, "notifications/initialized") == 0) {
        out->status = 202;
    } else if (method && strcmp(method, "tools/list") == 0) {
        snprintf(body, sizeof(body),
                 "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"tools\":["
                 "{\"name\":\"search\",\"inputSchema\":{\"type\":\"object\",\"required\":[\"q\"]},"
                 "\"annotations\":{\"readOnlyHint\":true}},{\"name\":\"drop\"}]}}",
                 jsonx_text(jsonx_get(msg, "id"), NULL));
        reply_json(out, NULL, body);
    } else if (method && strcmp(method, "tools/call") == 0) {
        st->mcp_calls++;
        snprintf(body, sizeof(body),
                 "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\","
                 "\"text\":\"found %s\"}]}}",
                 jsonx_text(jsonx_get(msg, "id"), NULL),
                 jsonx_str(jsonx_path(msg, "params.arguments"), "q")
                     ? jsonx_str(jsonx_path(msg, "params.arguments"), "q")
                     : "?");
        reply_json(out, NULL, body);
    } else {
        out->status = 405;
    }
out:
    json_object_put(msg);
}

struct fixture {
    struct stub st;
    struct http_stub *http;
    struct run_request req;
    struct tools_config cfg;
    struct tool_runner *r;
    char err[1024];
};

/* body_tmpl with every "@BASE@" replaced by base (malloc'ed, NULL on ENOMEM). */
static char *with_base(const char *body_tmpl, const char *base)
{
    static const char tok[] = "@BASE@";
    size_t n = 0, blen = strlen(base), tlen = sizeof(tok) - 1;
    const char *p;
    char *out, *w;

    for (p = strstr(body_tmpl, tok); p; p = strstr(p + tlen, tok))
        n++;
    out = malloc(strlen(body_tmpl) + n * blen + 1);
    if (!out)
        return NULL;
    w = out;
    for (p = body_tmpl; *p;) {
        if (strncmp(p, tok, tlen) == 0) {
            memcpy(w, base, blen);
            w += blen;
            p += tlen;
        } else {
            *w++ = *p++;
        }
    }
    *w = '\0';
    return out;
}

/* A request with the given customTools / mcpServers JSON ("@BASE@" = the stub's base url). */
static int fixture_init(struct fixture *f, const char *body_tmpl)
{
    char base[128], *body;
    struct request_limits lim;
    int r;

    memset(f, 0, sizeof(*f));
    f->http = http_stub_start(handler, &f->st);
    if (!f->http)
        return -EIO;
    http_stub_url(f->http, "", base, sizeof(base));
    body = with_base(body_tmpl, base);
    if (!body)
        return -ENOMEM;
    request_limits_default(&lim);
    lim.allow_scripted = true;
    r = request_parse(body, strlen(body), &lim, &f->req, f->err, sizeof(f->err));
    free(body);
    if (r < 0)
        return r;
    f->cfg.mcp_allowlist = "127.0.0.1";
    return tool_runner_new(&f->cfg, &f->req, &f->r, f->err, sizeof(f->err));
}

static void fixture_release(struct fixture *f)
{
    tool_runner_free(f->r);
    run_request_release(&f->req);
    http_stub_stop(f->http);
}

#define MCP_DOCS(url_fmt, policy)                                                                  \
    "{\"harness\":\"scripted\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"            \
    "\"mcpServers\":[{\"name\":\"docs\",\"connection\":{\"type\":\"http\",\"url\":\"" url_fmt     \
    "\",\"credentials\":[{\"binding\":{\"kind\":\"header\",\"name\":\"x-api-key\"},"              \
    "\"value\":\"mcp-SECRET\",\"usage\":\"opaque_http\"}]},\"policy\":" policy "}]}"

static void test_tool_runner_none_without_tools(void)
{
    struct fixture f;

    CU_ASSERT_EQUAL_FATAL(fixture_init(&f, "{\"harness\":\"scripted\",\"messages\":[{\"role\":"
                                           "\"user\",\"content\":\"hi\"}],\"toolCallback\":{"
                                           "\"endpoint\":\"@BASE@/api/tools/call\"}}"),
                          0);
    CU_ASSERT_PTR_NULL(f.r);
    CU_ASSERT_FALSE(tool_runner_any(f.r));
    fixture_release(&f);
}

static void test_tool_runner_refuses_code_tools_at_plan_time(void)
{
    struct fixture f;
    int r = fixture_init(&f, "{\"harness\":\"scripted\",\"messages\":[{\"role\":\"user\","
                             "\"content\":\"hi\"}],\"toolCallback\":{\"endpoint\":"
                             "\"@BASE@/api/tools/call\"},\"customTools\":[{\"name\":\"calc\","
                             "\"kind\":\"code\"}]}");

    /* the request itself is refused (plan time), naming the tool and the kind */
    CU_ASSERT_EQUAL(r, AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.err, "customTools[0]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(f.err, "code"));
    CU_ASSERT_PTR_NULL(f.r);
    CU_ASSERT_EQUAL(f.st.callback_calls, 0);
    fixture_release(&f);
}

static void test_tool_runner_refuses_the_reserved_server_name(void)
{
    struct fixture f;
    int r = fixture_init(
        &f, "{\"harness\":\"scripted\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
            "\"mcpServers\":[{\"name\":\"agenta-tools\",\"connection\":{\"type\":\"http\","
            "\"url\":\"@BASE@/mcp\"}}]}");

    CU_ASSERT_EQUAL(r, AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.err, "mcpServers[0]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(f.err, "agenta-tools"));
    CU_ASSERT_PTR_NULL(f.r);
    CU_ASSERT_EQUAL(http_stub_count(f.http), 0);
    fixture_release(&f);
}

static void test_tool_runner_lists_mcp_tools_and_calls_them(void)
{
    struct fixture f;
    const struct tool_spec *spec = NULL;
    struct tool_result res = {0};
    json_object *args = json_tokener_parse("{\"q\":\"warm\"}");
    struct buf pub;

    CU_ASSERT_EQUAL_FATAL(
        fixture_init(&f, MCP_DOCS("@BASE@/mcp", "{\"tools\":{\"mode\":\"include\",\"names\":"
                                            "[\"search\"]}}")),
        0);
    CU_ASSERT_TRUE(tool_runner_any(f.r));
    /* a warm turn: the first call of an unknown name connects and lists */
    CU_ASSERT_EQUAL(tool_runner_find(f.r, "docs__search", &spec, f.err, sizeof(f.err)), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(spec);
    CU_ASSERT_EQUAL(spec->exec, TOOL_EXEC_MCP);
    CU_ASSERT_EQUAL(spec->read_only, 1);
    /* the include list left "drop" out */
    CU_ASSERT_EQUAL(tool_runner_find(f.r, "docs__drop", &spec, f.err, sizeof(f.err)), -ENOENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.err, "docs__drop"));
    CU_ASSERT_EQUAL(tool_runner_find(f.r, "docs__search", &spec, f.err, sizeof(f.err)), 0);
    CU_ASSERT_EQUAL(tool_runner_exec(f.r, spec, "c1", args, NULL, NULL, NULL, &res), 0);
    CU_ASSERT_FALSE(res.is_error);
    CU_ASSERT_STRING_EQUAL(TEST_STR(res.text), "found warm");
    CU_ASSERT_EQUAL(f.st.mcp_calls, 1);
    tool_result_release(&res);
    /* a required argument missing: a tool error, no request */
    CU_ASSERT_EQUAL(tool_runner_exec(f.r, spec, "c2", NULL, NULL, NULL, NULL, &res), 0);
    CU_ASSERT_TRUE(res.is_error);
    CU_ASSERT_PTR_NOT_NULL(res.text && strstr(res.text, "missing required argument"));
    CU_ASSERT_EQUAL(f.st.mcp_calls, 1);
    tool_result_release(&res);
    /* the public specs: names, descriptions, schemas; never the url or the credential */
    buf_init(&pub, 1 << 20);
    CU_ASSERT_EQUAL(tool_runner_public_json(f.r, &pub), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf_str(&pub), "docs__search"));
    CU_ASSERT_PTR_NULL(strstr(buf_str(&pub), "mcp-SECRET"));
    CU_ASSERT_PTR_NULL(strstr(buf_str(&pub), "127.0.0.1"));
    buf_release(&pub);
    json_object_put(args);
    fixture_release(&f);
}

static void test_tool_runner_ssrf_refusal_names_the_server_once(void)
{
    struct fixture f;
    const struct tool_spec *spec = NULL;

    CU_ASSERT_EQUAL_FATAL(fixture_init(&f, MCP_DOCS("https://10.1.2.3/mcp", "{}")), 0);
    CU_ASSERT_NOT_EQUAL(tool_runner_connect(f.r, f.err, sizeof(f.err)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.err, "mcpServers[0] \"docs\""));
    CU_ASSERT_PTR_NULL(strstr(f.err, "mcp-SECRET"));
    /* the failure is remembered: no second attempt in this turn, the same message */
    f.err[0] = '\0';
    CU_ASSERT_NOT_EQUAL(tool_runner_find(f.r, "docs__search", &spec, f.err, sizeof(f.err)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.err, "mcpServers[0] \"docs\""));
    fixture_release(&f);
}

#define CALLBACK_TOOL                                                                              \
    "{\"harness\":\"scripted\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"            \
    "\"toolCallback\":{\"endpoint\":\"@BASE@/api/tools/call\",\"authorization\":\"Bearer cb-1\"},"     \
    "\"customTools\":[{\"name\":\"who\",\"callRef\":\"tools__who\"}]}"

static void test_tool_runner_runs_a_callback_tool(void)
{
    struct fixture f;
    const struct tool_spec *spec = NULL;
    struct tool_result res = {0};
    char v[64];

    CU_ASSERT_EQUAL_FATAL(fixture_init(&f, CALLBACK_TOOL), 0);
    CU_ASSERT_EQUAL_FATAL(tool_runner_find(f.r, "who", &spec, f.err, sizeof(f.err)), 0);
    CU_ASSERT_EQUAL(tool_runner_exec(f.r, spec, "c1", NULL, "sess-1", NULL, NULL, &res), 0);
    CU_ASSERT_FALSE(res.is_error);
    CU_ASSERT_STRING_EQUAL(TEST_STR(res.text), "from the callback");
    CU_ASSERT_TRUE(http_stub_header(http_stub_get(f.http, 0), "authorization", v, sizeof(v)) &&
                   strcmp(v, "Bearer cb-1") == 0);
    tool_result_release(&res);
    fixture_release(&f);
}

static void test_tool_runner_callback_failure_is_a_tool_error(void)
{
    struct fixture f;
    const struct tool_spec *spec = NULL;
    struct tool_result res = {0};

    CU_ASSERT_EQUAL_FATAL(fixture_init(&f, CALLBACK_TOOL), 0);
    f.st.fail_callback = true;
    CU_ASSERT_EQUAL_FATAL(tool_runner_find(f.r, "who", &spec, f.err, sizeof(f.err)), 0);
    /* a 500 is the tool's failure, not the turn's: rc 0 and an error result */
    CU_ASSERT_EQUAL(tool_runner_exec(f.r, spec, "c1", NULL, NULL, NULL, NULL, &res), 0);
    CU_ASSERT_TRUE(res.is_error);
    CU_ASSERT_EQUAL(res.http_status, 500);
    CU_ASSERT_PTR_NOT_NULL_FATAL(res.text);
    CU_ASSERT_PTR_NULL(strstr(res.text, "cb-1"));
    CU_ASSERT_EQUAL(f.st.callback_calls, 1);
    tool_result_release(&res);
    /* the runner is still usable: the next call succeeds */
    f.st.fail_callback = false;
    CU_ASSERT_EQUAL(tool_runner_exec(f.r, spec, "c2", NULL, NULL, NULL, NULL, &res), 0);
    CU_ASSERT_FALSE(res.is_error);
    CU_ASSERT_EQUAL(f.st.callback_calls, 2);
    tool_result_release(&res);
    fixture_release(&f);
}

static int polls;

static bool stop_after_three(void *ctx)
{
    (void)ctx;
    return ++polls >= 3;
}

static void test_tool_runner_stop_cancels_a_running_call(void)
{
    struct fixture f;
    const struct tool_spec *spec = NULL;
    struct tool_result res = {0};

    CU_ASSERT_EQUAL_FATAL(fixture_init(&f, CALLBACK_TOOL), 0);
    f.st.hang_callback = true;
    polls = 0;
    CU_ASSERT_EQUAL_FATAL(tool_runner_find(f.r, "who", &spec, f.err, sizeof(f.err)), 0);
    CU_ASSERT_EQUAL(tool_runner_exec(f.r, spec, "c1", NULL, NULL, stop_after_three, NULL, &res),
                    -ECANCELED);
    CU_ASSERT_PTR_NULL(res.text);
    CU_ASSERT(polls >= 3);
    fixture_release(&f);
}

static void test_tool_runner_resolve_override(void)
{
    struct tool_runner_resolve m;
    struct sockaddr_storage out[4];
    char err[128], addr[64];
    size_t n = 0;

    CU_ASSERT_EQUAL(tool_runner_resolve_parse("mcp.test=127.0.0.1,v6.test=::1", &m, err,
                                              sizeof(err)),
                    0);
    CU_ASSERT_EQUAL(m.n, 2);
    CU_ASSERT_EQUAL(tool_runner_resolve_fn(&m, "MCP.test", out, 4, &n), 0);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(out[0].ss_family, AF_INET);
    inet_ntop(AF_INET, &((struct sockaddr_in *)&out[0])->sin_addr, addr, sizeof(addr));
    CU_ASSERT_STRING_EQUAL(addr, "127.0.0.1");
    CU_ASSERT_EQUAL(tool_runner_resolve_fn(&m, "v6.test", out, 4, &n), 0);
    CU_ASSERT_EQUAL(out[0].ss_family, AF_INET6);
    /* any other name: the system resolver */
    CU_ASSERT_EQUAL(tool_runner_resolve_fn(&m, "localhost", out, 4, &n), 0);
    CU_ASSERT(n >= 1);
    CU_ASSERT_EQUAL(tool_runner_resolve_parse("no-equals", &m, err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(tool_runner_resolve_parse("a.test=not-an-ip", &m, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not-an-ip"));
    CU_ASSERT_EQUAL(tool_runner_resolve_parse("=1.2.3.4", &m, err, sizeof(err)), -EINVAL);
}

/* A remote sandbox has no agent-runner-mcp: claude/codex/opencode runs with tools are refused
 * before anything starts; pi (the keeper channel is relayed) and runs without tools are not. */
static void test_tool_runner_remote_sandbox_refuses_the_mcp_bridge_harnesses(void)
{
    static const char *const bodies[] = {
        "{\"harness\":\"claude\",\"customTools\":[{\"name\":\"pick\",\"kind\":\"client\"}]}",
        "{\"harness\":\"pi_core\",\"customTools\":[{\"name\":\"pick\",\"kind\":\"client\"}]}",
        "{\"harness\":\"codex\"}",
    };
    static const int remote_rc[] = {AR_E_INVALID_REQUEST, 0, 0};
    struct request_limits lim;
    char err[512];

    request_limits_default(&lim);
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        struct run_request req;

        CU_ASSERT_EQUAL_FATAL(
            request_parse(bodies[i], strlen(bodies[i]), &lim, &req, err, sizeof(err)), 0);
        err[0] = '\0';
        CU_ASSERT_EQUAL(engine_tools_usable(&req, true, "daytona", err, sizeof(err)), remote_rc[i]);
        if (remote_rc[i] < 0) {
            CU_ASSERT_PTR_NOT_NULL(strstr(err, "customTools"));
            CU_ASSERT_PTR_NOT_NULL(strstr(err, "claude"));
            CU_ASSERT_PTR_NOT_NULL(strstr(err, "daytona"));
        }
        CU_ASSERT_EQUAL(engine_tools_usable(&req, false, "local", err, sizeof(err)), 0);
        run_request_release(&req);
    }
}

CU_TestInfo tool_runner_tests[] = {
    {"test_tool_runner_none_without_tools", test_tool_runner_none_without_tools},
    {"test_tool_runner_refuses_code_tools_at_plan_time",
     test_tool_runner_refuses_code_tools_at_plan_time},
    {"test_tool_runner_refuses_the_reserved_server_name",
     test_tool_runner_refuses_the_reserved_server_name},
    {"test_tool_runner_lists_mcp_tools_and_calls_them",
     test_tool_runner_lists_mcp_tools_and_calls_them},
    {"test_tool_runner_ssrf_refusal_names_the_server_once",
     test_tool_runner_ssrf_refusal_names_the_server_once},
    {"test_tool_runner_runs_a_callback_tool", test_tool_runner_runs_a_callback_tool},
    {"test_tool_runner_callback_failure_is_a_tool_error",
     test_tool_runner_callback_failure_is_a_tool_error},
    {"test_tool_runner_stop_cancels_a_running_call",
     test_tool_runner_stop_cancels_a_running_call},
    {"test_tool_runner_resolve_override", test_tool_runner_resolve_override},
    {"test_tool_runner_remote_sandbox_refuses_the_mcp_bridge_harnesses",
     test_tool_runner_remote_sandbox_refuses_the_mcp_bridge_harnesses},
    CU_TEST_INFO_NULL,
};
