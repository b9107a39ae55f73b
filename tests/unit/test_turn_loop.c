/*
 * turn_loop: run_turn_prompt against a fake environment (struct turn_env). The fake hands the
 * loop scripted harness lines (skipping malformed ones the way environment_recv does), records
 * every line the loop sends, and sleeps to the deadline when its script is empty.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "../../engine/jsonx.h"
#include "../../engine/run_turn.h"
#include "../../engine/util.h"
#include "suites.h"

#define SCRIPT_MAX 16

struct fake_env {
    const char *script[SCRIPT_MAX]; /* harness lines; "EXIT n" ends the harness with status n */
    size_t nscript;
    size_t next;
    json_object *sent; /* every line the loop sent, parsed */
    int64_t id;
    bool exited;
    int status;
    unsigned malformed;
    unsigned cancel_after; /* should_cancel turns true after this many polls (0 = never) */
    unsigned polls;
};

static int fake_send(void *ctx, const struct buf *line)
{
    struct fake_env *f = ctx;
    json_object *o = NULL;
    char err[64];

    if (f->exited)
        return AR_E_HARNESS_EXITED;
    if (jsonx_parse(line->data, line->len, 16, &o, err, sizeof(err)) == 0 && o)
        json_object_array_add(f->sent, o);
    return 0;
}

static int fake_recv(void *ctx, int64_t deadline_ms, struct acp_msg *ret)
{
    struct fake_env *f = ctx;
    char err[128];

    while (f->next < f->nscript) {
        const char *line = f->script[f->next++];

        if (strncmp(line, "EXIT ", 5) == 0) {
            f->exited = true;
            f->status = line[5] - '0';
            return AR_E_HARNESS_EXITED;
        }
        if (acp_decode(line, strlen(line), ret, err, sizeof(err)) == 0)
            return 0;
        f->malformed++;
    }
    if (f->exited || !deadline_ms)
        return AR_E_HARNESS_EXITED;
    while (util_now_ms() < deadline_ms)
        usleep(1000);
    return -ETIMEDOUT;
}

static int64_t fake_next_id(void *ctx)
{
    return ++((struct fake_env *)ctx)->id;
}

static bool fake_exited(void *ctx, int *ret_status)
{
    struct fake_env *f = ctx;

    *ret_status = f->status;
    return f->exited;
}

static bool fake_should_cancel(void *ctx)
{
    struct fake_env *f = ctx;

    return f->cancel_after && ++f->polls >= f->cancel_after;
}

struct run {
    struct fake_env f;
    struct turn_env te;
    struct turn_options opt;
    struct run_limits_config limits;
    struct test_sink sink;
    struct event_stream es;
    struct run_result res;
    struct turn_outcome out;
    json_object *prompt;
    json_object *permissions;
};

static void run_init(struct run *r, const char *const *script, size_t n)
{
    struct event_sink es_sink;

    memset(r, 0, sizeof(*r));
    for (size_t i = 0; i < n && i < SCRIPT_MAX; i++)
        r->f.script[r->f.nscript++] = script[i];
    r->f.sent = json_object_new_array();
    r->te = (struct turn_env){.ctx = &r->f,
                              .send = fake_send,
                              .recv = fake_recv,
                              .next_id = fake_next_id,
                              .exited = fake_exited,
                              .acp_session = "sess-1"};
    r->prompt = test_json("[{\"type\":\"text\",\"text\":\"hi\"}]");
    r->opt.prompt = r->prompt;
    r->limits.total_ms = 5000; /* a broken loop fails instead of hanging the suite */
    r->opt.limits = &r->limits;
    test_sink_init(&r->sink, 0, &es_sink);
    event_stream_init(&r->es, &es_sink);
    run_result_init(&r->res);
}

static int run_go(struct run *r)
{
    return run_turn_prompt(&r->te, &r->opt, &r->es, &r->res, &r->out);
}

static void run_release(struct run *r)
{
    json_object_put(r->f.sent);
    json_object_put(r->prompt);
    json_object_put(r->permissions);
    run_result_release(&r->res);
    event_stream_release(&r->es);
    test_sink_release(&r->sink);
}

/* The first event of type, or NULL. */
static json_object *event_of(struct run *r, const char *type)
{
    for (size_t i = 0; i < test_sink_count(&r->sink); i++) {
        json_object *ev = test_sink_event(&r->sink, i);
        const char *t = jsonx_str(ev, "type");
        if (t && strcmp(t, type) == 0)
            return ev;
    }
    return NULL;
}

/* The sent line number i. */
static json_object *sent(struct run *r, size_t i)
{
    return i < json_object_array_length(r->f.sent) ? json_object_array_get_idx(r->f.sent, i) : NULL;
}

#define UPDATE(json)                                                                               \
    "{\"jsonrpc\":\"2.0\",\"method\":\"session/"                                                   \
    "update\",\"params\":{\"sessionId\":\"sess-1\",\"update\":" json "}}"
#define DONE(stop) "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"stopReason\":\"" stop "\"}}"
#define PERMISSION(id, call)                                                                       \
    "{\"jsonrpc\":\"2.0\",\"id\":" id ",\"method\":\"session/request_permission\",\"params\":{"    \
    "\"sessionId\":\"sess-1\",\"toolCall\":{\"toolCallId\":\"" call "\",\"title\":\"bash\","       \
    "\"kind\":\"execute\",\"rawInput\":{\"command\":\"ls\"}},\"options\":["                        \
    "{\"optionId\":\"ok-always\",\"kind\":\"allow_always\"},{\"optionId\":\"ok\",\"kind\":"        \
    "\"allow_once\"},{\"optionId\":\"no\",\"kind\":\"reject_once\"}]}}"

static void test_turn_loop_prompt_to_end_turn(void)
{
    static const char *const script[] = {
        UPDATE("{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":"
               "\"Hel\"}}"),
        UPDATE("{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":"
               "\"lo\"}}"),
        "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"other\","
        "\"update\":{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\","
        "\"text\":\"NOT OURS\"}}}}",
        DONE("end_turn"),
    };
    struct run r;
    json_object *p;

    run_init(&r, script, 4);
    CU_ASSERT_EQUAL(run_go(&r), 0);
    CU_ASSERT_TRUE(r.res.ok);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r.res.stop_reason), "end_turn");
    CU_ASSERT_STRING_EQUAL(buf_str(&r.res.output), "Hello");
    CU_ASSERT_EQUAL(r.out.prompt_id, 1);
    CU_ASSERT_FALSE(r.out.paused);
    p = sent(&r, 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(p, "method")), "session/prompt");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(p, "params"), "sessionId")), "sess-1");
    CU_ASSERT_PTR_NOT_NULL(event_of(&r, "message_start"));
    CU_ASSERT_PTR_NOT_NULL(event_of(&r, "message_end"));
    /* the harness reported no usage: the result says zero, no usage event claims a call */
    CU_ASSERT_PTR_NULL(event_of(&r, "usage"));
    CU_ASSERT_TRUE(r.res.usage.present);
    CU_ASSERT_PTR_NULL(event_of(&r, "error"));
    run_release(&r);
}

static void test_turn_loop_malformed_lines_and_unknown_requests(void)
{
    static const char *const script[] = {
        "this is {not json",
        "{\"jsonrpc\":\"2.0\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":\"r9\",\"method\":\"fs/read_text_file\",\"params\":{}}",
        UPDATE("{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":"
               "\"ok\"}}"),
        DONE("end_turn"),
    };
    struct run r;
    json_object *answer;

    run_init(&r, script, 5);
    CU_ASSERT_EQUAL(run_go(&r), 0);
    CU_ASSERT_TRUE(r.res.ok);
    CU_ASSERT_EQUAL(r.f.malformed, 2);
    CU_ASSERT_STRING_EQUAL(buf_str(&r.res.output), "ok");
    answer = sent(&r, 1); /* the unknown request got -32601 */
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(answer, "id")), "r9");
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(jsonx_get(answer, "error"), "code")), -32601);
    run_release(&r);
}

static void test_turn_loop_permission_allow_and_deny(void)
{
    static const char *const script[] = {PERMISSION("5", "call-a"), DONE("end_turn")};
    struct run r;
    json_object *reply;

    run_init(&r, script, 2);
    r.permissions = test_json("{\"default\":\"allow\"}");
    r.opt.permissions = r.permissions;
    CU_ASSERT_EQUAL(run_go(&r), 0);
    reply = sent(&r, 1);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(reply, "id")), 5);
    /* allow is answered "once", never "always" */
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_path(reply, "result.outcome"), "optionId")),
                           "ok");
    run_release(&r);

    run_init(&r, script, 2);
    r.permissions = test_json("{\"default\":\"deny\"}");
    r.opt.permissions = r.permissions;
    CU_ASSERT_EQUAL(run_go(&r), 0);
    reply = sent(&r, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_path(reply, "result.outcome"), "optionId")),
                           "no");
    CU_ASSERT_TRUE(r.res.ok);
    run_release(&r);
}

static enum permission stored_allow(void *ctx, const char *tool, json_object *args)
{
    (void)ctx;
    (void)args;
    return tool && strcmp(tool, "bash") == 0 ? PERMISSION_ALLOW : PERMISSION_UNSET;
}

static void test_turn_loop_ask_pauses_on_a_gate(void)
{
    static const char *const script[] = {PERMISSION("6", "call-b")};
    struct run r;
    json_object *ev;

    run_init(&r, script, 1);
    r.permissions = test_json("{\"default\":\"ask\"}");
    r.opt.permissions = r.permissions;
    CU_ASSERT_EQUAL(run_go(&r), 0);
    CU_ASSERT_TRUE(r.out.paused);
    CU_ASSERT_TRUE(r.res.ok);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r.res.stop_reason), "paused");
    CU_ASSERT_EQUAL_FATAL(r.out.ngates, 1);
    CU_ASSERT_STRING_EQUAL(r.out.gates[0].tool_call_id, "call-b");
    CU_ASSERT_STRING_EQUAL(r.out.gates[0].request_id, "6");
    CU_ASSERT_STRING_EQUAL(r.out.gates[0].allow_option, "ok");
    CU_ASSERT_STRING_EQUAL(r.out.gates[0].reject_option, "no");
    CU_ASSERT_EQUAL(r.out.gates[0].decision, -1);
    CU_ASSERT_EQUAL(strlen(r.out.gates[0].token), 32);
    ev = event_of(&r, "interaction_request");
    CU_ASSERT_PTR_NOT_NULL_FATAL(ev);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(ev, "kind")), "user_approval");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(ev, "payload"), "interactionToken")),
                           r.out.gates[0].token);
    /* the harness's request stays unanswered: only the prompt was sent */
    CU_ASSERT_EQUAL(json_object_array_length(r.f.sent), 1);
    run_release(&r);

    /* a decision stored in the transcript answers the same gate at once */
    static const char *const again[] = {PERMISSION("6", "call-b"), DONE("end_turn")};
    run_init(&r, again, 2);
    r.permissions = test_json("{\"default\":\"ask\"}");
    r.opt.permissions = r.permissions;
    r.opt.stored = stored_allow;
    CU_ASSERT_EQUAL(run_go(&r), 0);
    CU_ASSERT_FALSE(r.out.paused);
    CU_ASSERT_STRING_EQUAL(
        TEST_STR(jsonx_str(jsonx_path(sent(&r, 1), "result.outcome"), "optionId")), "ok");
    run_release(&r);
}

static void test_turn_loop_resume_answers_decided_gates(void)
{
    static const char *const script[] = {DONE("end_turn")};
    struct approval_gate gates[2] = {
        {.tool_call_id = "call-y",
         .request_id = "3",
         .allow_option = "ok",
         .reject_option = "no",
         .decision = 1},
        {.tool_call_id = "call-n",
         .request_id = "\"s4\"",
         .allow_option = "ok",
         .reject_option = "no",
         .decision = 0},
    };
    struct run r;

    run_init(&r, script, 1);
    r.opt.prompt = NULL;
    r.opt.resume_prompt_id = 1;
    r.opt.resume = gates;
    r.opt.nresume = 2;
    CU_ASSERT_EQUAL(run_go(&r), 0);
    CU_ASSERT_TRUE(r.res.ok);
    CU_ASSERT_EQUAL(r.out.prompt_id, 1);
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(r.f.sent), 2); /* no new prompt */
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(sent(&r, 0), "id")), 3);
    CU_ASSERT_STRING_EQUAL(
        TEST_STR(jsonx_str(jsonx_path(sent(&r, 0), "result.outcome"), "optionId")), "ok");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(sent(&r, 1), "id")), "s4");
    CU_ASSERT_STRING_EQUAL(
        TEST_STR(jsonx_str(jsonx_path(sent(&r, 1), "result.outcome"), "optionId")), "no");
    CU_ASSERT_PTR_NOT_NULL(event_of(&r, "interaction_response"));
    run_release(&r);
}

static void test_turn_loop_cancel_stops_the_turn(void)
{
    static const char *const script[] = {DONE("end_turn")};
    struct run r;
    json_object *cancel;

    run_init(&r, script, 1);
    r.f.cancel_after = 1;
    r.opt.should_cancel = fake_should_cancel;
    r.opt.cancel_ctx = &r.f;
    CU_ASSERT_EQUAL(run_go(&r), 0);
    CU_ASSERT_TRUE(r.out.cancelled);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r.res.stop_reason), "cancelled");
    cancel = sent(&r, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(cancel, "method")), "session/cancel");
    CU_ASSERT_PTR_NULL(jsonx_get(cancel, "id"));
    run_release(&r);
}

static void test_turn_loop_limit_trips(void)
{
    struct run r;
    json_object *err;
    int rc;

    run_init(&r, NULL, 0);
    r.limits.total_ms = 60;
    rc = run_go(&r);
    CU_ASSERT(rc < 0);
    CU_ASSERT_TRUE(r.out.limit_tripped);
    CU_ASSERT_FALSE(r.res.ok);
    err = event_of(&r, "error");
    CU_ASSERT_PTR_NOT_NULL_FATAL(err);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(err, "code")), "run_limit");
    /* the harness was told to stop */
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(sent(&r, 1), "method")), "session/cancel");
    run_release(&r);
}

static void test_turn_loop_harness_exit_and_retry(void)
{
    static const char *const script[] = {
        UPDATE("{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":"
               "\"x\"}}"),
        "EXIT 3",
    };
    static const char *const silent[] = {"EXIT 1"};
    static const char *const failed[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32000,\"message\":\"quota\"}}"};
    struct run r;
    int rc;

    run_init(&r, script, 2);
    rc = run_go(&r);
    CU_ASSERT(rc < 0 && rc != AR_E_RETRY);
    CU_ASSERT_FALSE(r.res.ok);
    CU_ASSERT_PTR_NOT_NULL(strstr(TEST_STR(r.res.error), "status 3"));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(event_of(&r, "error"), "code")), "runner_error");
    run_release(&r);

    /* a warm turn that failed before any event is retried cold, silently */
    run_init(&r, silent, 1);
    r.opt.retry_if_silent = true;
    CU_ASSERT_EQUAL(run_go(&r), AR_E_RETRY);
    CU_ASSERT_EQUAL(test_sink_count(&r.sink), 0);
    run_release(&r);

    /* the harness failing the prompt leaves a reusable environment */
    run_init(&r, failed, 1);
    CU_ASSERT_EQUAL(run_go(&r), 0);
    CU_ASSERT_FALSE(r.res.ok);
    CU_ASSERT_PTR_NOT_NULL(strstr(TEST_STR(r.res.error), "quota"));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(event_of(&r, "error"), "code")), "provider_error");
    run_release(&r);
}

CU_TestInfo turn_loop_tests[] = {
    {"test_turn_loop_prompt_to_end_turn", test_turn_loop_prompt_to_end_turn},
    {"test_turn_loop_malformed_lines_and_unknown_requests",
     test_turn_loop_malformed_lines_and_unknown_requests},
    {"test_turn_loop_permission_allow_and_deny", test_turn_loop_permission_allow_and_deny},
    {"test_turn_loop_ask_pauses_on_a_gate", test_turn_loop_ask_pauses_on_a_gate},
    {"test_turn_loop_resume_answers_decided_gates", test_turn_loop_resume_answers_decided_gates},
    {"test_turn_loop_cancel_stops_the_turn", test_turn_loop_cancel_stops_the_turn},
    {"test_turn_loop_limit_trips", test_turn_loop_limit_trips},
    {"test_turn_loop_harness_exit_and_retry", test_turn_loop_harness_exit_and_retry},
    CU_TEST_INFO_NULL,
};
