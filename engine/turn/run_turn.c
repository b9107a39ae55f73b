#include "turn/run_turn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "core/policy.h"
#include "harness/harness.h"
#include "telemetry/stages.h"
#include "turn/turn_channel.h"
#include "turn/turn_loop.h"
#include "turn/turn_model.h"
#include "turn/turn_tools.h"

#define CANCEL_POLL_MS 100
#define CANCEL_GRACE_MS 10000

static bool harness_gone(const struct turn_env *te)
{
    int status;

    return te->exited(te->ctx, &status);
}

/* Encode and send a request with a fresh id. */
static int send_request(const struct turn_env *te, const char *method, json_object *params,
                        int64_t *ret_id)
{
    struct buf line;
    int64_t id = te->next_id(te->ctx);
    int r;

    buf_init(&line, ACP_LINE_MAX_DEFAULT);
    r = acp_encode_request(&line, id, method, params);
    if (r == 0)
        r = te->send(te->ctx, &line);
    buf_release(&line);
    if (r == 0)
        *ret_id = id;
    return r;
}

/* Answer a harness request that is not part of the turn's logic. */
static void answer_unknown(const struct turn_env *te, const struct acp_msg *m)
{
    char msg[160];
    struct buf out;

    buf_init(&out, 4096);
    snprintf(msg, sizeof(msg), "Method not found: %.120s", m->method);
    if (acp_encode_error(&out, m->id, ACP_METHOD_NOT_FOUND, msg) == 0)
        (void)te->send(te->ctx, &out);
    buf_release(&out);
}

/* A channel message while no turn runs (a session opening): answered as between turns; a
 * hello is noted in seen (may be NULL). */
static void channel_outside(const struct turn_env *te, const struct acp_msg *m,
                            struct turn_session *seen)
{
    bool gating = false;
    struct buf out;

    buf_init(&out, 64 * 1024);
    if (turn_channel_outside(m, &out, &gating) == 1 && seen) {
        seen->channel_hello = true;
        seen->channel_gating = seen->channel_gating || gating;
    }
    turn_loop_send_tool_line(te, &out);
    buf_release(&out);
}

/* Wait for the response to request id, handling whatever arrives meanwhile. */
static int await_response(const struct turn_env *te, int64_t id, int64_t deadline,
                          struct acp_msg *ret, struct turn_session *seen)
{
    for (;;) {
        struct acp_msg m;
        int64_t got;
        int r = te->recv(te->ctx, deadline, &m);

        if (r < 0)
            return r;
        if (r == TURN_RECV_TOOL) {
            channel_outside(te, &m, seen);
        } else if (m.kind == ACP_RESPONSE && acp_msg_int_id(&m, &got) == 0 && got == id) {
            *ret = m;
            return 0;
        } else if (m.kind == ACP_REQUEST) {
            answer_unknown(te, &m);
        }
        acp_msg_release(&m);
    }
}

static int call(const struct turn_env *te, const char *method, json_object *params,
                int64_t deadline, json_object **ret_result, char *err, size_t errlen,
                struct turn_session *seen)
{
    char why[640];
    struct acp_msg m;
    int64_t id;
    int r;

    r = send_request(te, method, params, &id);
    if (r < 0) {
        snprintf(err, errlen, "%s: the harness is gone", method);
        return r;
    }
    r = await_response(te, id, deadline, &m, seen);
    if (r == -ETIMEDOUT) {
        snprintf(err, errlen, "%s: no answer from the harness in time", method);
        return AR_E_TIMEOUT;
    }
    if (r < 0) {
        snprintf(err, errlen, "%s: the harness exited%s", method,
                 harness_gone(te) ? "" : " (connection lost)");
        return r;
    }
    if (m.error) {
        turn_error_text(&m, why, sizeof(why));
        snprintf(err, errlen, "%s failed: %s", method, why);
        acp_msg_release(&m);
        return AR_E_HARNESS_ERROR;
    }
    *ret_result = m.result ? json_object_get(m.result) : NULL;
    acp_msg_release(&m);
    return 0;
}

/*
 * Make the session run on model_id: nothing to do when it already does (models.currentModelId
 * or the model config option), else session/set_config_option for agents with a model option
 * (codex), else the older session/set_model (pi, claude). Strict: failing to select is fatal.
 */
static int select_model(const struct turn_env *te, json_object *session_result,
                        const char *model_id, bool strict, int64_t deadline, char *err,
                        size_t errlen)
{
    json_object *opt = turn_model_option(session_result), *params, *res = NULL;
    const char *current = jsonx_str(jsonx_get(session_result, "models"), "currentModelId");
    const char *method;
    char why[256];
    int r;

    if (!model_id || !model_id[0])
        return 0;
    if (!current && opt)
        current = jsonx_str(opt, "currentValue");
    if (current && strcmp(current, model_id) == 0)
        return 0;
    params = json_object_new_object();
    json_object_object_add(params, "sessionId", json_object_new_string(te->acp_session));
    if (opt && jsonx_str(opt, "id")) {
        method = "session/set_config_option";
        json_object_object_add(params, "configId", json_object_new_string(jsonx_str(opt, "id")));
        json_object_object_add(params, "value", json_object_new_string(model_id));
    } else {
        method = "session/set_model";
        json_object_object_add(params, "modelId", json_object_new_string(model_id));
    }
    r = call(te, method, params, deadline, &res, err, errlen, NULL);
    json_object_put(params);
    json_object_put(res);
    if (r < 0 && strict) {
        snprintf(why, sizeof(why), "%s", err);
        snprintf(err, errlen, "model: cannot select \"%.200s\" (%s)", model_id, why);
        return r == AR_E_HARNESS_ERROR ? AR_E_MODEL : r;
    }
    if (r < 0)
        log_debug("model '%s' not selected, continuing (not strict)", model_id);
    return 0;
}

/* initialize: the agent's capabilities into ret->agent_caps. */
static int initialize(const struct turn_env *te, int64_t deadline, struct turn_session *ret,
                      char *err, size_t errlen)
{
    json_object *params, *caps, *fs, *info, *result = NULL;
    int r;

    params = json_object_new_object();
    json_object_object_add(params, "protocolVersion", json_object_new_int(ACP_PROTOCOL_VERSION));
    caps = json_object_new_object();
    fs = json_object_new_object();
    json_object_object_add(fs, "readTextFile", json_object_new_boolean(0));
    json_object_object_add(fs, "writeTextFile", json_object_new_boolean(0));
    json_object_object_add(caps, "fs", fs);
    json_object_object_add(caps, "terminal", json_object_new_boolean(0));
    json_object_object_add(params, "clientCapabilities", caps);
    info = json_object_new_object();
    json_object_object_add(info, "name", json_object_new_string("agent-runner"));
    json_object_object_add(info, "version", json_object_new_string(AR_VERSION));
    json_object_object_add(params, "clientInfo", info);
    r = call(te, "initialize", params, deadline, &result, err, errlen, ret);
    json_object_put(params);
    if (r < 0)
        return r;
    if (ret->agent_caps)
        json_object_put(ret->agent_caps);
    ret->agent_caps = json_object_get(jsonx_get(result, "agentCapabilities"));
    json_object_put(result);
    return 0;
}

/*
 * session/load of ret->load_id (its updates replaying the conversation are read and dropped:
 * the client that asked already has them) or session/new; *ret_result is the answer.
 */
static int open_or_load(const struct turn_env *te, int64_t deadline, struct turn_session *ret,
                        json_object **ret_result, char *err, size_t errlen)
{
    bool load = ret->load_id && ret->load_id[0] &&
                json_object_get_boolean(jsonx_get(ret->agent_caps, "loadSession"));
    json_object *params = json_object_new_object();
    const char *sid;
    int r;

    ret->loaded = ret->load_failed = false;
    if (load)
        json_object_object_add(params, "sessionId", json_object_new_string(ret->load_id));
    json_object_object_add(params, "cwd",
                           json_object_new_string(te->cwd ? te->cwd : SANDBOX_WORKSPACE));
    json_object_object_add(params, "mcpServers",
                           ret->mcp_servers ? json_object_get(ret->mcp_servers)
                                            : json_object_new_array());
    r = call(te, load ? "session/load" : "session/new", params, deadline, ret_result, err, errlen,
             ret);
    json_object_put(params);
    if (r < 0) {
        ret->load_failed = load;
        return r;
    }
    sid = load ? ret->load_id : jsonx_str(*ret_result, "sessionId");
    if (!sid || !sid[0] || strlen(sid) >= sizeof(ret->acp_session)) {
        snprintf(err, errlen, "session/new: the harness returned no usable sessionId");
        return AR_E_PROTOCOL;
    }
    snprintf(ret->acp_session, sizeof(ret->acp_session), "%s", sid);
    ret->loaded = load;
    return 0;
}

int run_turn_open_session(const struct turn_env *te, const char *model_id, bool strict,
                          int64_t deadline, struct turn_session *ret, char *err, size_t errlen)
{
    json_object *result = NULL;
    struct turn_env in_session;
    int r;

    ret->channel_hello = ret->channel_gating = false;
    r = initialize(te, deadline, ret, err, errlen);
    stages_mark(STAGES_W_INIT1);
    if (r == 0)
        r = open_or_load(te, deadline, ret, &result, err, errlen);
    if (r < 0) {
        json_object_put(result);
        return r;
    }
    in_session = *te;
    in_session.acp_session = ret->acp_session;
    r = select_model(&in_session, result, model_id, strict, deadline, err, errlen);
    json_object_put(result);
    return r;
}

static void send_cancel(const struct turn_env *te)
{
    json_object *params = json_object_new_object();
    struct buf out;

    json_object_object_add(params, "sessionId", json_object_new_string(te->acp_session));
    buf_init(&out, 4096);
    if (acp_encode_notification(&out, "session/cancel", params) == 0)
        (void)te->send(te->ctx, &out);
    buf_release(&out);
    json_object_put(params);
}

/* ---- the turn loop: one struct, one handler per kind of input, one exit ------------------ */

static void loop_fail(struct turn_loop *L, enum loop_exit how, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void loop_fail(struct turn_loop *L, enum loop_exit how, int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    util_vseterr(L->why, sizeof(L->why), fmt, ap);
    va_end(ap);
    L->rc = rc;
    L->exit = how;
}

/* Resume a parked approval: answer the decided gates, carry the others forward. */
static void loop_resume(struct turn_loop *L)
{
    const struct turn_options *opt = L->opt;

    L->prompt_id = opt->resume_prompt_id;
    for (size_t i = 0; i < opt->nresume; i++) {
        const struct approval_gate *g = &opt->resume[i];

        turn_resume_tool(&L->st, g->tool_call_id, g->tool_name);
        if (g->kind != GATE_PERMISSION) {
            struct turn_tool *t = turn_find_tool(&L->st, g->tool_call_id);
            if (t)
                t->runner = true; /* the runner reports it, whatever the harness says */
            L->st.resumed_runner_calls++;
        }

        if (g->decision < 0) {
            L->gates[L->ngates++] = *g; /* carried forward */
            continue;
        }
        event_emit(L->es, turn_interaction_response(g));
        turn_tools_answer_parked(L, g, g->decision == 1 ? TURN_CHANNEL_ALLOW : TURN_CHANNEL_DENY);
        if (g->kind != GATE_PERMISSION)
            continue; /* answered (and run) right here */
        if (g->decision == 1)
            snprintf(L->waiting_for[L->nwaiting++], sizeof(L->waiting_for[0]), "%s",
                     g->tool_call_id);
        else
            turn_mark_denied(&L->st, g->tool_call_id, g->tool_name, NULL);
    }
    if (L->ngates > 0 && L->nwaiting == 0)
        L->quiet_until = util_now_ms() + PAUSE_QUIET_MS;
}

static void loop_start(struct turn_loop *L)
{
    json_object *params;
    int r;

    if (L->opt->resume_prompt_id > 0) {
        loop_resume(L);
    } else if (L->opt->adopt_prompt_id > 0) {
        L->prompt_id = L->opt->adopt_prompt_id;
    } else {
        params = json_object_new_object();
        json_object_object_add(params, "sessionId", json_object_new_string(L->te->acp_session));
        json_object_object_add(params, "prompt", json_object_get(L->opt->prompt));
        r = send_request(L->te, "session/prompt", params, &L->prompt_id);
        json_object_put(params);
        if (r < 0) {
            loop_fail(L, LOOP_FAIL, r, "the harness is gone before the prompt");
            return;
        }
    }
    L->out->prompt_id = L->prompt_id;
    L->seen_events = L->es->nevents;
}

/* /cancel or a gone client: session/cancel, open gates answered "cancelled", limits frozen. */
static void loop_check_cancel(struct turn_loop *L, int64_t now)
{
    if (!L->opt->should_cancel || L->cancelling || !L->opt->should_cancel(L->opt->cancel_ctx))
        return;
    L->cancelling = true;
    L->cancel_deadline = now + CANCEL_GRACE_MS;
    send_cancel(L->te);
    for (size_t i = 0; i < L->ngates; i++)
        turn_tools_answer_parked(L, &L->gates[i], TURN_CHANNEL_CANCELLED);
    L->ngates = 0;
    L->quiet_until = 0;
    run_limits_pause(&L->limits);
    log_debug("cancelling the turn");
}

/*
 * The next wait ends at the earliest of: a run limit, the pause, the cancel grace, a poll, the
 * stream's next keepalive.
 */
static int64_t loop_deadline(const struct turn_loop *L, int64_t now)
{
    int64_t deadline = run_limits_deadline(&L->limits);
    int64_t keepalive = event_stream_keepalive_at(L->es);

    if (keepalive && (!deadline || keepalive < deadline))
        deadline = keepalive;
    if (L->quiet_until && (!deadline || L->quiet_until < deadline))
        deadline = L->quiet_until;
    if (L->cancelling && (!deadline || L->cancel_deadline < deadline))
        deadline = L->cancel_deadline;
    if (L->opt->should_cancel && !L->cancelling && (!deadline || now + CANCEL_POLL_MS < deadline))
        deadline = now + CANCEL_POLL_MS;
    if (L->syncing && (!deadline || L->sync_deadline < deadline))
        deadline = L->sync_deadline;
    return deadline;
}

/* Nothing arrived before the deadline: which one passed? */
static void finish_held(struct turn_loop *L);

static void on_deadline(struct turn_loop *L, int64_t now)
{
    int64_t keepalive = event_stream_keepalive_at(L->es);
    int r;

    if (keepalive && now >= keepalive)
        event_stream_keepalive(L->es); /* a silent stream: proxies and clients keep it */
    if (turn_model_expired(L, now)) {
        finish_held(L);
        return;
    }
    if (L->cancelling && now >= L->cancel_deadline) {
        loop_fail(L, LOOP_FAIL, AR_E_TIMEOUT, "the harness did not stop within %dms of the cancel",
                  CANCEL_GRACE_MS);
        return;
    }
    if (L->quiet_until && now >= L->quiet_until) {
        L->exit = LOOP_PAUSED;
        return;
    }
    r = run_limits_check(&L->limits, now, L->why, sizeof(L->why));
    if (r < 0) {
        send_cancel(L->te);
        L->rc = r;
        L->exit = LOOP_FAIL;
    }
}

static void on_lost(struct turn_loop *L, int r)
{
    const char *code = NULL;
    char msg[256];
    int status = 0;

    if (L->te->failure && L->te->failure(L->te->ctx, msg, sizeof(msg), &code)) {
        loop_fail(L, LOOP_FAIL, r, "%s", msg);
        L->code = code;
    } else if (L->te->exited(L->te->ctx, &status))
        loop_fail(L, LOOP_FAIL, r, "the harness exited during the turn (status %d)", status);
    else
        loop_fail(L, LOOP_FAIL, r, "lost the harness: %s", ar_strerror(r));
}

/* An approved call that finished lets a carried-forward pause happen. */
static void settle_waiting(struct turn_loop *L, int64_t now)
{
    for (size_t i = 0; i < L->nwaiting; i++) {
        struct turn_tool *t = turn_find_tool(&L->st, L->waiting_for[i]);

        if (t && t->done) {
            memmove(L->waiting_for[i], L->waiting_for[--L->nwaiting], sizeof(L->waiting_for[0]));
            if (L->nwaiting == 0 && L->ngates > 0)
                L->quiet_until = now + PAUSE_QUIET_MS;
            return;
        }
    }
}

static void on_update(struct turn_loop *L, const struct acp_msg *m, int64_t now)
{
    json_object *update = jsonx_get(m->params, "update");
    const char *sid = jsonx_str(m->params, "sessionId");
    int r;

    if (!update || (sid && strcmp(sid, L->te->acp_session) != 0))
        return;
    r = turn_translate_update(&L->st, update, L->es, L->res);
    if (r < 0) {
        loop_fail(L, LOOP_FAIL, r, "turn output exceeds its limit");
        send_cancel(L->te);
        return;
    }
    settle_waiting(L, now);
}

/* A permission request as the one gate sees it, whoever asked: ACP or the keeper channel. */
struct gate_request {
    const char *tool_call_id; /* NULL: the harness named no call (denied) */
    const char *id_json;      /* the request's id, as JSON text */
    bool channel;             /* answered on the channel (tool/permission) */
    json_object *params;      /* ACP-shaped request: toolCall, options */
    struct permission_gate pg;
};

/* ask: a gate with a fresh interaction token; the turn pauses once gates stop arriving. */
static void open_gate(struct turn_loop *L, const struct gate_request *q, const char *allow,
                      const char *reject, int64_t now)
{
    struct approval_gate *g = &L->gates[L->ngates++];

    memset(g, 0, sizeof(*g));
    snprintf(g->tool_call_id, sizeof(g->tool_call_id), "%s", q->tool_call_id);
    snprintf(g->request_id, sizeof(g->request_id), "%s", q->id_json);
    snprintf(g->tool_name, sizeof(g->tool_name), "%s", q->pg.tool_name ? q->pg.tool_name : "tool");
    snprintf(g->allow_option, sizeof(g->allow_option), "%s", allow ? allow : "");
    snprintf(g->reject_option, sizeof(g->reject_option), "%s", reject ? reject : "");
    g->decision = -1;
    g->channel = q->channel;
    (void)util_random_hex(g->token, 16);
    turn_close_block(&L->st, L->es);
    event_emit(L->es, turn_interaction_request(g, q->params));
    run_limits_pause(&L->limits);
    L->quiet_until = now + PAUSE_QUIET_MS;
}

/*
 * The one gate: the permission plan (or, for "ask", a decision stored in the transcript)
 * allows, denies, or opens a gate that parks the turn. Used for ACP's
 * session/request_permission and the channel's tool/permission alike.
 */
static void loop_gate(struct turn_loop *L, const struct gate_request *q, int64_t now)
{
    const struct turn_options *opt = L->opt;
    const char *allow = turn_option_of(q->params, "allow"),
               *reject = turn_option_of(q->params, "reject");
    enum permission eff, stored = PERMISSION_UNSET;
    enum verdict v;

    eff = policy_permission_effective(opt->permissions, &q->pg);
    if (opt->stored && eff == PERMISSION_ASK)
        stored = opt->stored(opt->stored_ctx, q->pg.tool_name, q->pg.args);
    v = policy_permission_decide(eff, stored);
    if (L->cancelling) {
        turn_loop_answer_gate(L->te, q->channel, q->id_json, TURN_CHANNEL_CANCELLED, NULL, NULL,
                              false);
    } else if (v == VERDICT_ALLOW) {
        turn_loop_answer_gate(L->te, q->channel, q->id_json, TURN_CHANNEL_ALLOW, allow, NULL,
                              false);
    } else if (v == VERDICT_DENY || !q->tool_call_id || L->ngates >= APPROVAL_GATES_MAX ||
               strlen(q->id_json) >= sizeof(L->gates[0].request_id)) {
        turn_loop_answer_gate(L->te, q->channel, q->id_json, TURN_CHANNEL_DENY, reject,
                              q->pg.tool_name, stored == PERMISSION_DENY);
        if (q->tool_call_id)
            turn_mark_denied(&L->st, q->tool_call_id, q->pg.tool_name, q->pg.args);
    } else {
        open_gate(L, q, allow, reject, now);
    }
}

/* A permission request of the harness for one of the run's runner tools. */
static bool runner_permission(struct turn_loop *L, json_object *params)
{
    json_object *tc = jsonx_get(params, "toolCall");
    const char *id = jsonx_str(tc, "toolCallId");
    struct turn_tool *t = id ? turn_find_tool(&L->st, id) : NULL;

    return (t && (t->hidden || t->runner)) || turn_runner_tool_of(&L->st, tc, NULL, 0);
}

static void on_permission(struct turn_loop *L, const struct acp_msg *m, int64_t now)
{
    struct gate_request q = {
        .tool_call_id = jsonx_str(jsonx_get(m->params, "toolCall"), "toolCallId"),
        .id_json = jsonx_text(m->id, NULL),
        .params = m->params,
    };

    turn_gate_of(&L->st, m->params, &q.pg);
    if (L->opt->tools && !L->cancelling && runner_permission(L, m->params)) {
        /* claude asks before it calls an MCP tool: the runner tool is gated at its tool/call,
         * in one place for every harness */
        turn_loop_answer_gate(L->te, false, q.id_json, TURN_CHANNEL_ALLOW,
                              turn_option_of(m->params, "allow"), NULL, false);
        return;
    }
    loop_gate(L, &q, now);
}

/* A line of the keeper channel: gated tool calls, runner tools, usage, model errors. */
static void on_tool(struct turn_loop *L, const struct acp_msg *m, int64_t now)
{
    struct tool_channel_msg tm;
    struct gate_request q = {.channel = true};
    struct run_usage u;
    char err[256];

    if (tool_channel_decode(m, &tm, err, sizeof(err)) < 0 || tm.kind == TOOL_CHANNEL_HELLO) {
        channel_outside(L->te, m, NULL); /* hello, or a malformed line */
        return;
    }
    switch (tm.kind) {
    case TOOL_CHANNEL_PERMISSION:
        q.tool_call_id = tm.tool_call_id;
        q.id_json = jsonx_text(m->id, NULL);
        turn_channel_gate(&tm, &q.pg, &q.params);
        loop_gate(L, &q, now);
        json_object_put(q.params);
        break;
    case TOOL_CHANNEL_CALL:
        turn_tools_on_call(L, m, &tm, now);
        break;
    case TOOL_CHANNEL_USAGE:
        turn_channel_usage(tm.params, &u);
        turn_call_usage(&L->st, &u, L->es);
        break;
    case TOOL_CHANNEL_ERROR:
        turn_channel_error(tm.params, L->model_error, sizeof(L->model_error), &L->model_error_code);
        log_debug("the harness reported a model error: %s", L->model_error);
        break;
    default:
        break;
    }
}

static void on_prompt_response(struct turn_loop *L, struct acp_msg *m)
{
    struct run_result *res = L->res;
    const char *stop;
    char why[640];

    /* measured: held until every model call it depended on is reported (turn_model.h) */
    if (turn_model_hold(L, m, util_now_ms()))
        return;
    turn_close_block(&L->st, L->es);
    if (m->error) {
        turn_error_text(m, why, sizeof(why));
        loop_fail(L, LOOP_FAIL_REUSABLE, AR_E_HARNESS_ERROR, "the harness failed the prompt: %s",
                  why);
        L->code = L->gateway_code ? L->gateway_code : turn_error_code(why);
        return;
    }
    stop = jsonx_str(m->result, "stopReason");
    stop = L->cancelling ? "cancelled" : stop ? stop : "end_turn";
    /* codex ends the turn "cancelled" when a call is denied: that is a denied tool result */
    if (turn_settle_denied(&L->st, L->es) > 0 && !L->cancelling && strcmp(stop, "cancelled") == 0)
        stop = "end_turn";
    /* pi-acp ends a failed model call end_turn without text: the channel said what failed */
    if (!L->cancelling && L->model_error[0] && res->output.len == 0) {
        loop_fail(L, LOOP_FAIL_REUSABLE, AR_E_HARNESS_ERROR, "%s", L->model_error);
        L->code = L->gateway_code ? L->gateway_code : L->model_error_code;
        return;
    }
    res->stop_reason = strdup(stop);
    if (L->cancelling || strcmp(stop, "cancelled") == 0)
        turn_settle_open_tools(&L->st, L->es);
    if (L->opt->measured)
        turn_model_finish(L, m->result);
    else
        turn_finish_usage(&L->st, res, m->result, L->es);
    res->ok = true;
    L->out->cancelled = L->cancelling;
    turn_record_tool_ids(&L->st, res);
    L->exit = LOOP_DONE;
}

/* The prompt's answer, held while the model gateway's reports came in, is due now. */
static void finish_held(struct turn_loop *L)
{
    struct acp_msg m = L->held;

    memset(&L->held, 0, sizeof(L->held));
    on_prompt_response(L, &m);
    acp_msg_release(&m);
}

/* One wait for the harness and what follows from it. */
static void loop_step(struct turn_loop *L)
{
    struct acp_msg m;
    int64_t got, now = util_now_ms();
    int r;

    loop_check_cancel(L, now);
    r = L->te->recv(L->te->ctx, loop_deadline(L, now), &m);
    now = util_now_ms();
    if (L->es->nevents != L->seen_events) {
        run_limits_event(&L->limits, now);
        L->seen_events = L->es->nevents;
    }
    if (r == -ETIMEDOUT) {
        on_deadline(L, now);
        return;
    }
    if (r < 0) {
        on_lost(L, r);
        return;
    }
    run_limits_progress(&L->limits, now);
    if (r == TURN_RECV_MODEL && turn_model_on_message(L, &m))
        finish_held(L);
    else if (r == TURN_RECV_MODEL)
        ; /* a call's report: its events are out */
    else if (r == TURN_RECV_TOOL)
        on_tool(L, &m, now);
    else if (m.kind == ACP_NOTIFICATION && strcmp(m.method, "session/update") == 0)
        on_update(L, &m, now);
    else if (m.kind == ACP_REQUEST && strcmp(m.method, "session/request_permission") == 0)
        on_permission(L, &m, now);
    else if (m.kind == ACP_REQUEST)
        answer_unknown(L->te, &m);
    else if (m.kind == ACP_RESPONSE && acp_msg_int_id(&m, &got) == 0 && got == L->prompt_id)
        on_prompt_response(L, &m);
    acp_msg_release(&m);
}

/* The prompt stays in flight: its gates wait, unanswered, for the client's decision. */
static void finish_paused(struct turn_loop *L)
{
    const struct turn_options *opt = L->opt;

    turn_close_block(&L->st, L->es);
    for (size_t i = 0; i < opt->nresume; i++)
        for (size_t j = 0; j < L->ngates; j++)
            if (opt->resume[i].decision < 0 &&
                strcmp(opt->resume[i].tool_call_id, L->gates[j].tool_call_id) == 0)
                event_emit(L->es, turn_tools_reannounce(L, &L->gates[j]));
    memcpy(L->out->gates, L->gates, L->ngates * sizeof(L->gates[0]));
    L->out->ngates = L->ngates;
    L->out->paused = true;
    L->res->ok = true;
    L->res->stop_reason = strdup("paused");
    L->res->usage.present = true;
    turn_record_tool_ids(&L->st, L->res);
}

/* The one exit: what the turn's end means for the result, the events and the caller. */
/* A sandbox limit tripped (its turn fails with the limit's name, never retried silently). */
static bool sandbox_limit(const struct turn_loop *L)
{
    return L->code && strncmp(L->code, "sandbox_", 8) == 0;
}

static int loop_finish(struct turn_loop *L)
{
    bool silent = L->opt->retry_if_silent && L->es->nevents == L->start_events && !sandbox_limit(L);
    int rc = 0;

    switch (L->exit) {
    case LOOP_PAUSED:
        finish_paused(L);
        break;
    case LOOP_FAIL:
        if (silent) {
            rc = AR_E_RETRY;
            break;
        }
        turn_close_block(&L->st, L->es);
        turn_record_tool_ids(&L->st, L->res);
        event_emit(L->es, event_error(L->why, L->code                 ? L->code
                                              : L->rc == AR_E_TIMEOUT ? "run_limit"
                                                                      : "runner_error"));
        run_result_fail(L->res, "%s", L->why);
        L->out->limit_tripped = L->rc == AR_E_TIMEOUT || sandbox_limit(L);
        rc = L->rc < 0 ? L->rc : AR_E_PROTOCOL;
        break;
    case LOOP_FAIL_REUSABLE:
        if (silent) {
            rc = AR_E_RETRY;
            break;
        }
        turn_record_tool_ids(&L->st, L->res);
        event_emit(L->es, event_error(L->why, L->code ? L->code : "provider_error"));
        run_result_fail(L->res, "%s", L->why);
        break;
    default: /* LOOP_DONE */
        break;
    }
    acp_msg_release(&L->held); /* an answer held when the turn ended otherwise */
    turn_state_release(&L->st);
    return rc;
}

int run_turn_prompt(const struct turn_env *te, const struct turn_options *opt,
                    struct event_stream *es, struct run_result *res, struct turn_outcome *out)
{
    struct turn_loop L;

    memset(out, 0, sizeof(*out));
    memset(&L, 0, sizeof(L));
    L.te = te;
    L.opt = opt;
    L.es = es;
    L.res = res;
    L.out = out;
    L.start_events = es->nevents;
    run_limits_start(&L.limits, opt->limits, util_now_ms());
    turn_state_init(&L.st, &L.limits);
    L.st.is_noise = opt->is_noise;
    L.st.kind = opt->harness;
    L.st.measured = opt->measured;
    if (opt->tools) {
        L.st.is_runner = turn_tools_runner_named;
        L.st.is_runner_ctx = (void *)opt->tools;
    }
    loop_start(&L);
    while (L.exit == LOOP_RUNNING)
        loop_step(&L);
    return loop_finish(&L);
}
