/*
 * turn_loop: run_turn_prompt against a fake environment (struct turn_env). The fake hands the
 * loop scripted harness lines (skipping malformed ones the way environment_recv does; a line
 * "TOOL <json>" comes from the keeper channel), records every line the loop sends (ACP and
 * channel apart), and sleeps to the deadline when its script is empty.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "suites.h"
#include "turn/run_turn.h"
#include "turn/turn_channel.h"

#define SCRIPT_MAX 16
#define TOOL "TOOL "

struct fake_env {
    const char *script[SCRIPT_MAX]; /* harness lines; "EXIT n" ends the harness with status n */
    size_t nscript;
    size_t next;
    json_object *sent;      /* every line the loop sent, parsed */
    json_object *sent_tool; /* every channel line the loop sent, parsed */
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

static int fake_send_tool(void *ctx, const struct buf *line)
{
    struct fake_env *f = ctx;
    json_object *o = NULL;
    char err[64];

    if (jsonx_parse(line->data, line->len, 16, &o, err, sizeof(err)) == 0 && o)
        json_object_array_add(f->sent_tool, o);
    return 0;
}

static int fake_recv(void *ctx, int64_t deadline_ms, struct acp_msg *ret)
{
    struct fake_env *f = ctx;
    char err[128];

    while (f->next < f->nscript) {
        const char *line = f->script[f->next++];

        if (strncmp(line, TOOL, strlen(TOOL)) == 0) {
            if (acp_decode(line + strlen(TOOL), strlen(line) - strlen(TOOL), ret, err,
                           sizeof(err)) == 0)
                return TURN_RECV_TOOL;
            f->malformed++;
            continue;
        }
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
    r->f.sent_tool = json_object_new_array();
    r->te = (struct turn_env){.ctx = &r->f,
                              .send = fake_send,
                              .send_tool = fake_send_tool,
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
    json_object_put(r->f.sent_tool);
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

/* ---- the keeper channel ----------------------------------------------------------------- */

#define CHAN_PERMISSION(id, call, tool, input)                                                     \
    TOOL "{\"jsonrpc\":\"2.0\",\"id\":" id ",\"method\":\"tool/permission\",\"params\":{"          \
         "\"toolCallId\":\"" call "\",\"toolName\":\"" tool "\",\"input\":" input "}}"

static json_object *sent_tool(struct run *r, size_t i)
{
    return i < json_object_array_length(r->f.sent_tool)
               ? json_object_array_get_idx(r->f.sent_tool, i)
               : NULL;
}

static enum permission stored_of_case(void *ctx, const char *tool, json_object *args)
{
    (void)tool;
    (void)args;
    return *(enum permission *)ctx;
}

/*
 * One golden case through one path: the channel's tool/permission (channel) or ACP's
 * session/request_permission. Both reach the same gate (run_turn.c loop_gate); the verdict is
 * read from what the loop answered: allow, deny, or a parked gate.
 */
static const char *golden_verdict(json_object *c, bool channel)
{
    json_object *gate = jsonx_get(c, "gate"), *hint = jsonx_get(gate, "readOnlyHint");
    json_object *args = jsonx_get(gate, "args");
    enum permission stored = policy_permission_parse(jsonx_str(c, "stored"));
    const char *tool = jsonx_str(gate, "toolName"), *verdict = "none";
    char line[1024];
    const char *script[2];
    struct run r;

    /* a pi built-in carries its read-only flag; a name pi does not know has none */
    if (!tool)
        tool = !hint ? "other_tool" : json_object_get_boolean(hint) ? "read" : "bash";
    if (channel)
        snprintf(line, sizeof(line),
                 TOOL "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tool/permission\",\"params\":{"
                      "\"toolCallId\":\"call_9\",\"toolName\":\"%s\",\"input\":%s}}",
                 tool, args ? jsonx_text(args, NULL) : "{}");
    else
        snprintf(line, sizeof(line),
                 "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"session/request_permission\","
                 "\"params\":{\"sessionId\":\"sess-1\",\"toolCall\":{\"toolCallId\":\"call_9\","
                 "\"title\":\"%s\"%s,\"rawInput\":%s},\"options\":[{\"optionId\":\"ok\",\"kind\":"
                 "\"allow_once\"},{\"optionId\":\"no\",\"kind\":\"reject_once\"}]}}",
                 tool,
                 !hint                           ? ""
                 : json_object_get_boolean(hint) ? ",\"kind\":\"read\""
                                                 : ",\"kind\":\"execute\"",
                 args ? jsonx_text(args, NULL) : "{}");
    script[0] = line;
    script[1] = DONE("end_turn");
    run_init(&r, script, 2);
    r.permissions = json_object_get(jsonx_get(c, "plan"));
    r.opt.permissions = r.permissions;
    r.opt.stored = stored_of_case;
    r.opt.stored_ctx = &stored;
    CU_ASSERT_EQUAL(run_go(&r), 0);
    if (event_of(&r, "interaction_request")) {
        /* a gate opened: the request stays unanswered (the scripted prompt end follows) */
        verdict =
            json_object_array_length(channel ? r.f.sent_tool : r.f.sent) == (channel ? 0u : 1u)
                ? "pendingApproval"
                : "answered";
    } else if (channel) {
        const char *o = jsonx_str(jsonx_get(sent_tool(&r, 0), "result"), "outcome");
        verdict = o && strcmp(o, "allow") == 0  ? "allow"
                  : o && strcmp(o, "deny") == 0 ? "deny"
                                                : "?";
    } else {
        const char *o = jsonx_str(jsonx_path(sent(&r, 1), "result.outcome"), "optionId");
        verdict = o && strcmp(o, "ok") == 0 ? "allow" : o && strcmp(o, "no") == 0 ? "deny" : "?";
    }
    run_release(&r);
    return verdict;
}

/*
 * permission_decisions.json through pi's channel and through ACP: every case whose gate a
 * harness can present (no tool-spec or MCP-server permission: those belong to runner tools,
 * whose gate is the same policy function, tested in test_policy.c) gets its verdict.
 */
static void test_turn_loop_channel_golden_vectors(void)
{
    json_object *doc = test_shared_json("permission_decisions.json");
    json_object *cases = jsonx_get(doc, "cases");
    size_t ran = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(cases);
    for (size_t i = 0; i < json_object_array_length(cases); i++) {
        json_object *c = json_object_array_get_idx(cases, i), *gate = jsonx_get(c, "gate");
        const char *want = jsonx_str(jsonx_get(c, "expected"), "verdict");
        const char *via_channel, *via_acp;

        if (jsonx_get(gate, "specPermission") || jsonx_get(gate, "serverPermission"))
            continue;
        via_channel = golden_verdict(c, true);
        via_acp = golden_verdict(c, false);
        if (strcmp(via_channel, want) != 0 || strcmp(via_acp, want) != 0)
            fprintf(stderr, "\n  case '%s': channel %s, acp %s, want %s\n", jsonx_str(c, "name"),
                    via_channel, via_acp, want);
        CU_ASSERT_STRING_EQUAL(via_channel, want);
        CU_ASSERT_STRING_EQUAL(via_acp, want);
        ran++;
    }
    CU_ASSERT(ran >= 18);
    json_object_put(doc);
}

static void test_turn_loop_channel_gate_parks_resumes_and_cancels(void)
{
    static const char *const script[] = {
        CHAN_PERMISSION("\"p7\"", "call_7", "bash", "{\"command\":\"rm -rf /x\"}")};
    static const char *const done[] = {DONE("end_turn")};
    struct approval_gate gate;
    struct run r;
    json_object *ev, *a;

    run_init(&r, script, 1);
    r.permissions = test_json("{\"default\":\"ask\"}");
    r.opt.permissions = r.permissions;
    CU_ASSERT_EQUAL(run_go(&r), 0);
    CU_ASSERT_TRUE(r.out.paused);
    CU_ASSERT_EQUAL_FATAL(r.out.ngates, 1);
    gate = r.out.gates[0];
    CU_ASSERT_TRUE(gate.channel);
    CU_ASSERT_STRING_EQUAL(gate.request_id, "\"p7\"");
    CU_ASSERT_STRING_EQUAL(gate.tool_name, "bash");
    CU_ASSERT_EQUAL(json_object_array_length(r.f.sent_tool), 0); /* the request stays open */
    ev = event_of(&r, "interaction_request");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(ev, "id")), gate.token);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_path(ev, "payload.toolCall"), "kind")),
                           "execute");
    CU_ASSERT_STRING_EQUAL(
        TEST_STR(jsonx_str(jsonx_path(ev, "payload.toolCall.rawInput"), "command")), "rm -rf /x");
    CU_ASSERT_EQUAL(json_object_array_length(jsonx_path(ev, "payload.availableReplies")), 2);
    run_release(&r);

    /* approved: answered allow on the channel, under the request's own id */
    gate.decision = 1;
    run_init(&r, done, 1);
    r.opt.prompt = NULL;
    r.opt.resume_prompt_id = 1;
    r.opt.resume = &gate;
    r.opt.nresume = 1;
    CU_ASSERT_EQUAL(run_go(&r), 0);
    a = sent_tool(&r, 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(a, "id")), "p7");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(a, "result"), "outcome")), "allow");
    CU_ASSERT_EQUAL(json_object_array_length(r.f.sent), 0); /* nothing went to ACP */
    run_release(&r);

    /* denied by the user: deny, with a message the model reads */
    gate.decision = 0;
    run_init(&r, done, 1);
    r.opt.prompt = NULL;
    r.opt.resume_prompt_id = 1;
    r.opt.resume = &gate;
    r.opt.nresume = 1;
    CU_ASSERT_EQUAL(run_go(&r), 0);
    a = jsonx_get(sent_tool(&r, 0), "result");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(a, "outcome")), "deny");
    CU_ASSERT_PTR_NOT_NULL(strstr(TEST_STR(jsonx_str(a, "message")), "user did not approve"));
    run_release(&r);

    /* /cancel of the parked turn: cancelled */
    gate.decision = -1;
    run_init(&r, done, 1);
    r.opt.prompt = NULL;
    r.opt.resume_prompt_id = 1;
    r.opt.resume = &gate;
    r.opt.nresume = 1;
    r.f.cancel_after = 1;
    r.opt.should_cancel = fake_should_cancel;
    r.opt.cancel_ctx = &r.f;
    CU_ASSERT_EQUAL(run_go(&r), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(sent_tool(&r, 0), "result"), "outcome")),
                           "cancelled");
    run_release(&r);
}

static void test_turn_loop_channel_usage_errors_calls_and_hello(void)
{
    static const char *const failed[] = {
        TOOL "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{\"client\":\"x\"}}",
        TOOL "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tool/call\",\"params\":{\"toolCallId\":"
             "\"c\",\"toolName\":\"lookup\",\"arguments\":{}}}",
        TOOL "{\"jsonrpc\":\"2.0\",\"method\":\"usage\",\"params\":{\"input\":0,\"output\":0}}",
        TOOL "{\"jsonrpc\":\"2.0\",\"method\":\"error\",\"params\":{\"message\":\"Connection "
             "error.\",\"code\":\"model_unavailable\"}}",
        TOOL "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tool/oops\"}",
        DONE("end_turn"),
    };
    struct run r;
    json_object *err;

    run_init(&r, failed, 6);
    CU_ASSERT_EQUAL(run_go(&r), 0); /* the environment stays usable */
    CU_ASSERT_FALSE(r.res.ok);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r.res.error), "the harness reported: Connection error.");
    err = event_of(&r, "error");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(err, "code")), "harness_error");
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(sent_tool(&r, 0), "result.protocol")), 1);
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_path(sent_tool(&r, 1), "result.isError")));
    CU_ASSERT_STRING_EQUAL(
        TEST_STR(jsonx_str(
            json_object_array_get_idx(jsonx_path(sent_tool(&r, 1), "result.content"), 0), "text")),
        TURN_CHANNEL_NO_TOOLS);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(sent_tool(&r, 2), "error.code")), -32601);
    run_release(&r);
}

/* codex ends a denied call's turn "cancelled" and never reports the call: a denied result */
static void test_turn_loop_denied_call_never_reported_gets_a_denied_result(void)
{
    static const char *const script[] = {PERMISSION("5", "call-c"), DONE("cancelled")};
    struct run r;
    json_object *call, *res;

    run_init(&r, script, 2);
    r.permissions = test_json("{\"default\":\"deny\"}");
    r.opt.permissions = r.permissions;
    CU_ASSERT_EQUAL(run_go(&r), 0);
    CU_ASSERT_TRUE(r.res.ok);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r.res.stop_reason), "end_turn");
    call = event_of(&r, "tool_call");
    res = event_of(&r, "tool_result");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(call, "id")), "call-c");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(call, "input"), "command")), "ls");
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_get(res, "denied")));
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_get(res, "isError")));
    run_release(&r);
}

/* pi's extension says hello while session/new runs: answered, and noted for the gating check */
static void test_turn_loop_open_session_notes_the_channel_hello(void)
{
    static const char *const script[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":1}}",
        TOOL "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{\"client\":"
             "\"pi-extension\",\"version\":\"1\",\"gating\":true,\"tools\":[]}}",
        TOOL "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tool/permission\",\"params\":{"
             "\"toolCallId\":\"c\",\"toolName\":\"bash\"}}",
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"sessionId\":\"s-9\"}}",
    };
    static const char *const without[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":1}}",
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"sessionId\":\"s-9\"}}",
    };
    struct turn_session sess = {.agent_caps = NULL};
    char err[256];
    struct run r;

    run_init(&r, script, 4);
    CU_ASSERT_EQUAL(
        run_turn_open_session(&r.te, NULL, false, util_now_ms() + 2000, &sess, err, sizeof(err)),
        0);
    CU_ASSERT_STRING_EQUAL(sess.acp_session, "s-9");
    CU_ASSERT_TRUE(sess.channel_hello);
    CU_ASSERT_TRUE(sess.channel_gating);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(sent_tool(&r, 0), "result.protocol")), 1);
    /* no turn runs yet: a gated call is answered cancelled, never allowed */
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(sent_tool(&r, 1), "result"), "outcome")),
                           "cancelled");
    json_object_put(sess.agent_caps);
    run_release(&r);

    memset(&sess, 0, sizeof(sess));
    run_init(&r, without, 2);
    CU_ASSERT_EQUAL(
        run_turn_open_session(&r.te, NULL, false, util_now_ms() + 2000, &sess, err, sizeof(err)),
        0);
    CU_ASSERT_FALSE(sess.channel_hello);
    CU_ASSERT_FALSE(sess.channel_gating);
    json_object_put(sess.agent_caps);
    run_release(&r);
}

/* session/load of a kept session when the agent can load; session/new when it cannot; a failed
 * load says so */
static void test_turn_loop_open_session_loads_a_kept_session(void)
{
    static const char *const loads[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":1,"
        "\"agentCapabilities\":{\"loadSession\":true}}}",
        "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"kept-1\","
        "\"update\":{\"sessionUpdate\":\"user_message_chunk\",\"content\":{\"type\":\"text\","
        "\"text\":\"an earlier turn, replayed\"}}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}",
    };
    static const char *const cannot[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":1}}",
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"sessionId\":\"fresh-2\"}}",
    };
    static const char *const fails[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":1,"
        "\"agentCapabilities\":{\"loadSession\":true}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{\"code\":-32602,\"message\":\"Unknown "
        "sessionId: kept-1\"}}",
    };
    struct turn_session sess = {.load_id = "kept-1"};
    char err[256];
    struct run r;

    run_init(&r, loads, 3);
    CU_ASSERT_EQUAL(
        run_turn_open_session(&r.te, NULL, false, util_now_ms() + 2000, &sess, err, sizeof(err)),
        0);
    CU_ASSERT_TRUE(sess.loaded);
    CU_ASSERT_STRING_EQUAL(sess.acp_session, "kept-1");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(sent(&r, 1), "method")), "session/load");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(sent(&r, 1), "params"), "sessionId")),
                           "kept-1");
    json_object_put(sess.agent_caps);
    run_release(&r);

    memset(&sess, 0, sizeof(sess));
    sess.load_id = "kept-1";
    run_init(&r, cannot, 2);
    CU_ASSERT_EQUAL(
        run_turn_open_session(&r.te, NULL, false, util_now_ms() + 2000, &sess, err, sizeof(err)),
        0);
    CU_ASSERT_FALSE(sess.loaded);
    CU_ASSERT_STRING_EQUAL(sess.acp_session, "fresh-2");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(sent(&r, 1), "method")), "session/new");
    json_object_put(sess.agent_caps);
    run_release(&r);

    memset(&sess, 0, sizeof(sess));
    sess.load_id = "kept-1";
    run_init(&r, fails, 2);
    CU_ASSERT_EQUAL(
        run_turn_open_session(&r.te, NULL, false, util_now_ms() + 2000, &sess, err, sizeof(err)),
        AR_E_HARNESS_ERROR);
    CU_ASSERT_TRUE(sess.load_failed);
    CU_ASSERT_FALSE(sess.loaded);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "session/load failed"));
    json_object_put(sess.agent_caps);
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
    {"test_turn_loop_channel_golden_vectors", test_turn_loop_channel_golden_vectors},
    {"test_turn_loop_channel_gate_parks_resumes_and_cancels",
     test_turn_loop_channel_gate_parks_resumes_and_cancels},
    {"test_turn_loop_channel_usage_errors_calls_and_hello",
     test_turn_loop_channel_usage_errors_calls_and_hello},
    {"test_turn_loop_denied_call_never_reported_gets_a_denied_result",
     test_turn_loop_denied_call_never_reported_gets_a_denied_result},
    {"test_turn_loop_open_session_notes_the_channel_hello",
     test_turn_loop_open_session_notes_the_channel_hello},
    {"test_turn_loop_open_session_loads_a_kept_session",
     test_turn_loop_open_session_loads_a_kept_session},
    CU_TEST_INFO_NULL,
};
