/*
 * tool_callback — Agenta's /tools/call body and headers byte for byte (golden pi request),
 * contextBindings and ephemeralArgs, every reply shape (string content, object content,
 * STATUS_CODE_ERROR, not JSON, non-2xx, timeout), the 100,000-byte cap with its note, direct
 * calls (args_into, fixed body, $ctx with the live session id, path parameters, the mount and
 * the path refusals), and that the authorization reaches no result and no log line.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "http_stub.h"
#include "request/request.h"
#include "suites.h"
#include "tools/tool_callback.h"

struct reply {
    int status;
    const char *body;
    size_t repeat;
    bool hang;
};

static void replier(void *ctx, const struct http_stub_request *rq, struct http_stub_reply *out)
{
    const struct reply *r = ctx;
    size_t n = r->body ? strlen(r->body) : 0, times = r->repeat ? r->repeat : 1;

    (void)rq;
    out->status = r->status;
    out->hang = r->hang;
    snprintf(out->headers, sizeof(out->headers), "Content-Type: application/json\r\n");
    if (n) {
        out->body = malloc(n * times);
        for (size_t i = 0; i < times; i++)
            memcpy(out->body + i * n, r->body, n);
        out->body_len = n * times;
    }
}

/* The golden pi request's tool set, with the callback endpoint moved to the stub. */
struct fixture {
    json_object *req;
    struct run_request parsed;
    struct tool_set *set;
    struct http_stub *stub;
    char endpoint[256];
    struct tool_call_ctx ctx;
};

static void fixture_start(struct fixture *f, struct reply *reply, const char *custom)
{
    struct request_limits lim;
    json_object *tools;
    const char *text;
    char err[512];
    size_t len;
    int r;

    memset(f, 0, sizeof(*f));
    f->req = test_shared_json("run_request.pi_core.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->req);
    f->stub = http_stub_start(replier, reply);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->stub);
    http_stub_url(f->stub, "/api/tools/call", f->endpoint, sizeof(f->endpoint));
    json_object_object_add(jsonx_get(f->req, "toolCallback"), "endpoint",
                           json_object_new_string(f->endpoint));
    if (custom) {
        tools = test_json(custom);
        CU_ASSERT_PTR_NOT_NULL_FATAL(tools);
        json_object_object_add(f->req, "customTools", tools);
    }
    request_limits_default(&lim);
    text = jsonx_text(f->req, &len);
    err[0] = '\0';
    r = request_parse(text, len, &lim, &f->parsed, err, sizeof(err));
    if (r < 0)
        fprintf(stderr, "fixture: %s\n", err);
    CU_ASSERT_EQUAL_FATAL(r, 0);
    CU_ASSERT_EQUAL_FATAL(tool_set_new(&f->parsed.tools, &f->set), 0);
    f->ctx.endpoint = f->set->callback_endpoint;
    f->ctx.authorization = jsonx_str(jsonx_get(f->req, "toolCallback"), "authorization");
    f->ctx.run_context = jsonx_get(f->req, "runContext");
    f->ctx.session_id = "sess-1";
}

static void fixture_stop(struct fixture *f)
{
    http_stub_stop(f->stub);
    tool_set_free(f->set);
    run_request_release(&f->parsed);
    json_object_put(f->req);
    log_redact_clear();
}

static void test_tool_callback_golden_body_and_headers(void)
{
    struct reply reply = {.status = 200, .body = "{\"call\":{\"data\":{\"content\":\"{\\\"login\\\":\\\"octocat\\\"}\"},"
                               "\"status\":{\"code\":\"STATUS_CODE_OK\"}}}"};
    json_object *args = test_json("{\"target\":{\"workflow_variant_id\":\"model-variant\"},"
                                  "\"q\":1}");
    const struct http_stub_request *got;
    struct tool_result res = {0};
    struct fixture f;
    char v[256];

    fixture_start(&f, &reply, NULL);
    CU_ASSERT_EQUAL_FATAL(
        tool_callback_run(&f.ctx, tool_set_find(f.set, "get_user"), "call-1", args, &res), 0);
    CU_ASSERT(!res.is_error);
    CU_ASSERT_STRING_EQUAL(res.text, "{\"login\":\"octocat\"}");
    CU_ASSERT_EQUAL(res.http_status, 200);
    CU_ASSERT_EQUAL_FATAL(http_stub_count(f.stub), 1);
    got = http_stub_get(f.stub, 0);
    CU_ASSERT_STRING_EQUAL(got->method, "POST");
    CU_ASSERT_STRING_EQUAL(got->target, "/api/tools/call");
    /* exactly Agenta's envelope; the binding beat the model's value */
    CU_ASSERT_STRING_EQUAL(got->body,
                           "{\"data\":{\"id\":\"call-1\",\"type\":\"function\",\"function\":{"
                           "\"name\":\"tools__composio__github__GET_THE_AUTHENTICATED_USER__"
                           "github-tvn\",\"arguments\":{\"target\":{\"workflow_variant_id\":"
                           "\"var_abc\"},\"q\":1}}}}");
    CU_ASSERT(http_stub_header(got, "content-type", v, sizeof(v)));
    CU_ASSERT_STRING_EQUAL(v, "application/json");
    CU_ASSERT(http_stub_header(got, "authorization", v, sizeof(v)));
    CU_ASSERT_STRING_EQUAL(v, "Access tok-123");
    CU_ASSERT(http_stub_header(got, "x-agenta-run-kind", v, sizeof(v)));
    CU_ASSERT_STRING_EQUAL(v, "test");
    /* the authorization is in the redaction set from now on */
    {
        char *line = log_redact_copy("sent Access tok-123 along", 256);
        CU_ASSERT_PTR_NULL(strstr(line, "tok-123"));
        free(line);
    }
    tool_result_release(&res);
    json_object_put(args);
    fixture_stop(&f);
}

static void test_tool_callback_replies(void)
{
    static const struct {
        int status;
        const char *body;
        bool is_error;
        const char *text;
    } cases[] = {
        {200, "{\"call\":{\"data\":{\"content\":{\"a\":[1,2]}}}}", false, "{\"a\":[1,2]}"},
        {200, "{\"call\":{\"data\":{\"content\":\"bad arg\"},\"status\":{\"code\":"
              "\"STATUS_CODE_ERROR\",\"message\":\"invalid owner\"}}}",
         true, "tool call R failed: invalid owner\nbad arg"},
        {200, "{\"call\":{\"status\":{\"code\":\"STATUS_CODE_ERROR\",\"message\":null}}}", true,
         "tool call R failed"},
        {200, "<html>proxy</html>", false, "<html>proxy</html>"},
        {200, "{\"other\":true}", false, "{\"other\":true}"},
        {500, "{\"detail\":\"db password hunter2\"}", true, "tool call R failed: HTTP 500"},
        {404, "", true, "tool call R failed: HTTP 404"},
    };
    struct fixture f;
    struct reply reply = {.status = 200};

    fixture_start(&f, &reply, "[{\"name\":\"t\",\"callRef\":\"R\"}]");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tool_result res = {0};

        reply.status = cases[i].status;
        reply.body = cases[i].body;
        CU_ASSERT_EQUAL_FATAL(
            tool_callback_run(&f.ctx, tool_set_find(f.set, "t"), "c", NULL, &res), 0);
        if (res.is_error != cases[i].is_error || strcmp(res.text, cases[i].text) != 0)
            fprintf(stderr, "case %zu: %d %s\n", i, res.is_error, res.text);
        CU_ASSERT_EQUAL(res.is_error, cases[i].is_error);
        CU_ASSERT_STRING_EQUAL(res.text, cases[i].text);
        tool_result_release(&res);
    }
    /* absent arguments go as {} */
    CU_ASSERT_PTR_NOT_NULL(strstr(http_stub_get(f.stub, 0)->body, "\"arguments\":{}"));
    fixture_stop(&f);
}

static void test_tool_callback_cap_and_timeout(void)
{
    static const char head[] = "{\"call\":{\"data\":{\"content\":\"", tail[] = "\"}}}";
    struct reply reply = {.status = 200};
    struct tool_result res = {0};
    struct fixture f;
    char *big;

    /* a 250,000-byte string content */
    big = malloc(sizeof(head) + 250000 + sizeof(tail));
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    memcpy(big, head, sizeof(head) - 1);
    memset(big + sizeof(head) - 1, 'x', 250000);
    memcpy(big + sizeof(head) - 1 + 250000, tail, sizeof(tail));
    reply.body = big;
    fixture_start(&f, &reply, "[{\"name\":\"t\",\"callRef\":\"R\"}]");
    CU_ASSERT_EQUAL_FATAL(tool_callback_run(&f.ctx, tool_set_find(f.set, "t"), "c", NULL, &res),
                          0);
    CU_ASSERT(!res.is_error);
    CU_ASSERT(strlen(res.text) <= TOOL_RESULT_MAX_DEFAULT);
    CU_ASSERT(strlen(res.text) > TOOL_RESULT_MAX_DEFAULT - 400);
    CU_ASSERT_PTR_NOT_NULL(strstr(res.text, " bytes omitted]\n\nThis result was too large"));
    CU_ASSERT_PTR_NOT_NULL(strstr(res.text, "Narrow your query"));
    tool_result_release(&res);

    f.ctx.result_max = 1000;
    CU_ASSERT_EQUAL(tool_callback_run(&f.ctx, tool_set_find(f.set, "t"), "c", NULL, &res), 0);
    CU_ASSERT(strlen(res.text) <= 1000);
    tool_result_release(&res);

    reply.hang = true;
    f.ctx.default_timeout_ms = 300;
    CU_ASSERT_EQUAL(tool_callback_run(&f.ctx, tool_set_find(f.set, "t"), "c", NULL, &res), 0);
    CU_ASSERT(res.is_error);
    CU_ASSERT_STRING_EQUAL(res.text, "tool call R failed: timed out after 300 ms");
    tool_result_release(&res);
    {
        atomic_int cancel = 1;
        f.ctx.cancel = &cancel;
        f.ctx.default_timeout_ms = 600000;
        CU_ASSERT_EQUAL(tool_callback_run(&f.ctx, tool_set_find(f.set, "t"), "c", NULL, &res),
                        -ECANCELED);
        CU_ASSERT_PTR_NULL(res.text);
    }
    fixture_stop(&f);
    free(big);
}

static void test_tool_callback_refused_before_sending(void)
{
    struct reply reply = {.status = 200, .body = "ok"};
    struct tool_result res = {0};
    json_object *args = test_json("{\"note\":\"why\",\"keep\":1}");
    struct fixture f;

    fixture_start(&f, &reply,
                  "[{\"name\":\"bound\",\"callRef\":\"B\",\"contextBindings\":{\"x.y\":"
                  "\"$ctx.workflow.missing\"}},"
                  "{\"name\":\"req\",\"callRef\":\"Q\",\"inputSchema\":{\"type\":\"object\","
                  "\"required\":[\"city\",\"opts\"],\"properties\":{\"opts\":{\"type\":"
                  "\"object\",\"required\":[\"unit\"]}}}},"
                  "{\"name\":\"eph\",\"callRef\":\"E\",\"ephemeralArgs\":[\"note\"]}]");
    CU_ASSERT_EQUAL(tool_callback_run(&f.ctx, tool_set_find(f.set, "bound"), "c", args, &res), 0);
    CU_ASSERT(res.is_error);
    CU_ASSERT_STRING_EQUAL(res.text, "missing run-context value for tool binding 'x.y'");
    tool_result_release(&res);
    CU_ASSERT_EQUAL(tool_callback_run(&f.ctx, tool_set_find(f.set, "req"), "c", args, &res), 0);
    CU_ASSERT(res.is_error);
    CU_ASSERT_STRING_EQUAL(res.text, "Tool 'req' missing required argument(s): city, opts. Retry "
                                     "the tool call with those argument fields populated.");
    tool_result_release(&res);
    CU_ASSERT_EQUAL(http_stub_count(f.stub), 0);
    {
        json_object *a2 = test_json("{\"city\":\"x\",\"opts\":{}}");
        CU_ASSERT_EQUAL(tool_callback_run(&f.ctx, tool_set_find(f.set, "req"), "c", a2, &res), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(res.text, "argument(s): opts.unit."));
        tool_result_release(&res);
        json_object_put(a2);
    }
    /* ephemeral arguments never leave the runner; the caller's args are untouched */
    CU_ASSERT_EQUAL(tool_callback_run(&f.ctx, tool_set_find(f.set, "eph"), "c", args, &res), 0);
    CU_ASSERT(!res.is_error);
    CU_ASSERT_EQUAL_FATAL(http_stub_count(f.stub), 1);
    CU_ASSERT_PTR_NULL(strstr(http_stub_get(f.stub, 0)->body, "note"));
    CU_ASSERT_PTR_NOT_NULL(strstr(http_stub_get(f.stub, 0)->body, "\"keep\":1"));
    CU_ASSERT_PTR_NOT_NULL(jsonx_get(args, "note"));
    tool_result_release(&res);
    json_object_put(args);
    fixture_stop(&f);
}

static void test_tool_callback_direct_golden(void)
{
    struct reply reply = {.status = 200, .body = "{\"data\":{\"outputs\":\"sunny\"}}"};
    json_object *args = test_json("{\"city\":\"Berlin\"}"), *body;
    const struct http_stub_request *got;
    struct tool_result res = {0};
    struct fixture f;
    char v[256];

    fixture_start(&f, &reply, NULL);
    /* the golden descriptor's path is /api/workflows/invoke: inside the stub's /api mount */
    CU_ASSERT_EQUAL_FATAL(
        tool_callback_run(&f.ctx, tool_set_find(f.set, "get_weather"), "c", args, &res), 0);
    CU_ASSERT(!res.is_error);
    CU_ASSERT_STRING_EQUAL(res.text, "{\"data\":{\"outputs\":\"sunny\"}}");
    got = http_stub_get(f.stub, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT_STRING_EQUAL(got->method, "POST");
    CU_ASSERT_STRING_EQUAL(got->target, "/api/workflows/invoke");
    body = test_json(got->body);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_path(body, "data.inputs"), "city")), "Berlin");
    CU_ASSERT_STRING_EQUAL(
        TEST_STR(jsonx_str(jsonx_path(body, "references.workflow_revision"), "id")), "rev_abc123");
    CU_ASSERT(http_stub_header(got, "authorization", v, sizeof(v)));
    CU_ASSERT_STRING_EQUAL(v, "Access tok-123");
    json_object_put(body);
    tool_result_release(&res);
    json_object_put(args);
    fixture_stop(&f);
}

static void test_tool_callback_direct_context_and_params(void)
{
    struct reply reply = {.status = 404, .body = "{\"secret\":\"no\"}"};
    json_object *args = test_json("{\"id\":\"a b&c\",\"session_id\":\"forged\",\"x\":1}");
    const struct http_stub_request *got;
    struct tool_result res = {0};
    json_object *body;
    struct fixture f;

    fixture_start(&f, &reply,
                  "[{\"name\":\"stop\",\"call\":{\"method\":\"POST\",\"path\":\"/api/s/{id}/stop"
                  "?force=1\",\"body\":{\"x\":2},\"context\":{\"session_id\":\"$ctx.session.id\","
                  "\"meta.variant\":\"$ctx.workflow.variant.slug\"}}},"
                  "{\"name\":\"get\",\"call\":{\"method\":\"GET\",\"path\":\"/api/items\"}}]");
    CU_ASSERT_EQUAL_FATAL(
        tool_callback_run(&f.ctx, tool_set_find(f.set, "stop"), "c", args, &res), 0);
    CU_ASSERT(res.is_error);
    CU_ASSERT_STRING_EQUAL(res.text, "direct tool call failed: HTTP 404");
    got = http_stub_get(f.stub, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT_STRING_EQUAL(got->target, "/api/s/a%20b%26c/stop?force=1");
    body = test_json(got->body);
    /* fixed fields beat the model, bindings beat both, path parameters leave the body */
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(body, "x")), 2);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(body, "session_id")), "sess-1");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(body, "meta"), "variant")),
                           "weather-agent");
    CU_ASSERT_PTR_NULL(jsonx_get(body, "id"));
    json_object_put(body);
    tool_result_release(&res);

    /* a parameter value cannot walk out of the path */
    json_object_object_add(args, "id", json_object_new_string("../../admin"));
    CU_ASSERT_EQUAL(tool_callback_run(&f.ctx, tool_set_find(f.set, "stop"), "c", args, &res), 0);
    CU_ASSERT(res.is_error);
    CU_ASSERT_PTR_NOT_NULL(strstr(res.text, "is not a safe absolute path"));
    tool_result_release(&res);
    CU_ASSERT_EQUAL(http_stub_count(f.stub), 1);

    reply.status = 200;
    reply.body = "[1,2]";
    CU_ASSERT_EQUAL(tool_callback_run(&f.ctx, tool_set_find(f.set, "get"), "c", args, &res), 0);
    CU_ASSERT_STRING_EQUAL(res.text, "[1,2]");
    got = http_stub_get(f.stub, 1);
    CU_ASSERT_STRING_EQUAL(got->method, "GET");
    CU_ASSERT_EQUAL(got->body_len, 0);
    tool_result_release(&res);
    json_object_put(args);
    fixture_stop(&f);
}

static void test_tool_callback_cap_utf8(void)
{
    struct buf b;
    const char *euro = "\xe2\x82\xac"; /* 3 bytes */
    char text[3 * 100 + 1];

    for (int i = 0; i < 100; i++)
        memcpy(text + 3 * i, euro, 3);
    text[300] = '\0';
    buf_init(&b, 4096);
    CU_ASSERT_EQUAL(tool_callback_cap(text, 300, 300, NULL, &b), 0);
    CU_ASSERT_EQUAL(b.len, 300);
    for (size_t max = 24; max < 60; max++) {
        const char *marker;
        size_t keep;

        buf_reset(&b);
        CU_ASSERT_EQUAL(tool_callback_cap(text, 300, max, NULL, &b), 0);
        CU_ASSERT(b.len <= max);
        marker = strstr(buf_str(&b), " [... ");
        CU_ASSERT_PTR_NOT_NULL_FATAL(marker);
        keep = (size_t)(marker - b.data);
        CU_ASSERT_EQUAL(keep % 3, 0); /* never a split character */
        CU_ASSERT_EQUAL(strtoul(marker + 6, NULL, 10), 300 - keep);
    }
    /* smaller than the marker itself: the marker alone */
    buf_reset(&b);
    CU_ASSERT_EQUAL(tool_callback_cap(text, 300, 5, NULL, &b), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&b), " [... 300 bytes omitted]");
    buf_release(&b);
}

CU_TestInfo tool_callback_tests[] = {
    {"test_tool_callback_golden_body_and_headers", test_tool_callback_golden_body_and_headers},
    {"test_tool_callback_replies", test_tool_callback_replies},
    {"test_tool_callback_cap_and_timeout", test_tool_callback_cap_and_timeout},
    {"test_tool_callback_refused_before_sending", test_tool_callback_refused_before_sending},
    {"test_tool_callback_direct_golden", test_tool_callback_direct_golden},
    {"test_tool_callback_direct_context_and_params", test_tool_callback_direct_context_and_params},
    {"test_tool_callback_cap_utf8", test_tool_callback_cap_utf8},
    CU_TEST_INFO_NULL,
};
