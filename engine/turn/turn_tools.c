/*
 * turn_tools — the runner's tools inside a turn: a tool/call gated, executed, parked or handed
 * to the browser (turn_tools.h).
 */
#include "turn/turn_tools.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "harness/harness.h"
#include "session/identity.h"
#include "tools/tool_spec.h"

#define CALL_CANCELLED "Tool call cancelled."

/* Answer an open tool/call (its id as JSON text) with a result. */
static void answer_call(const struct turn_env *te, const char *id_json, const char *text,
                        bool is_error)
{
    json_object *id = NULL;
    char err[64];
    struct buf out;

    if (jsonx_parse(id_json, strlen(id_json), 4, &id, err, sizeof(err)) < 0)
        return;
    buf_init(&out, TOOL_CHANNEL_LINE_MAX);
    if (tool_channel_encode_call_result(&out, id, text, is_error) == 0)
        turn_loop_send_tool_line(te, &out);
    buf_release(&out);
    json_object_put(id);
}

/* The arguments of a runner call, canonical: the harness's own report is matched by them. */
static void runner_call_input(struct turn_loop *L, const char *id, json_object *args)
{
    struct turn_tool *t = turn_find_tool(&L->st, id);
    struct buf canon;

    if (!t)
        return;
    buf_init(&canon, CANONICAL_ARGS_MAX);
    if (identity_canonical(args, &canon) == 0) {
        free(t->input);
        t->input = util_xstrdup(buf_str(&canon));
    }
    buf_release(&canon);
}

/* The runner's own tool_call event for a call (its spec's render hint, when known). */
static void runner_call_announce(struct turn_loop *L, const char *id, const char *name,
                                 json_object *args, json_object *render)
{
    struct turn_tool *t = turn_find_tool(&L->st, id);
    json_object *ev;

    if (!t)
        t = turn_add_tool(&L->st, id);
    if (!t)
        return;
    t->hidden = false;
    t->runner = true;
    if (!t->name || strcmp(t->name, name) != 0) {
        free(t->name);
        t->name = util_xstrdup(name);
    }
    runner_call_input(L, id, args);
    turn_close_block(&L->st, L->es);
    ev = event_tool_call(id, name, args);
    if (ev && render)
        json_object_object_add(ev, "render", json_object_get(render));
    event_emit(L->es, ev);
}

/* The runner's tool_result event for a call (once). */
static void runner_call_result(struct turn_loop *L, const char *id, const char *text, bool is_error,
                               bool denied, json_object *render)
{
    struct turn_tool *t = turn_find_tool(&L->st, id);
    json_object *ev;

    if (t && t->done)
        return;
    if (t)
        t->done = true;
    ev = event_tool_result(id, text, is_error, denied);
    if (ev && render)
        json_object_object_add(ev, "render", json_object_get(render));
    event_emit(L->es, ev);
}

static bool exec_stop(void *ctx)
{
    const struct turn_options *opt = ctx;

    return opt->should_cancel && opt->should_cancel(opt->cancel_ctx);
}

/* Run an allowed call and answer it: its result, or a tool error, never a failed turn. */
static void runner_call_run(struct turn_loop *L, const char *id_json, const char *call_id,
                            const struct tool_spec *spec, json_object *args)
{
    const struct turn_tools *tt = L->opt->tools;
    struct tool_result tr = {0};
    int r;

    event_stream_flush(L->es); /* the client sees the call before it runs */
    r = tt->exec(tt->ctx, spec, call_id, args, exec_stop, (void *)L->opt, &tr);
    if (r == -ECANCELED) {
        answer_call(L->te, id_json, CALL_CANCELLED, true);
        runner_call_result(L, call_id,
                           "INTERRUPTED_BY_USER: the turn was cancelled before this "
                           "call finished",
                           true, false, spec->render);
        return;
    }
    if (r < 0 || !tr.text) {
        char msg[160];

        snprintf(msg, sizeof(msg), "agent-runner: the tool call failed (%s)", ar_strerror(r));
        answer_call(L->te, id_json, msg, true);
        runner_call_result(L, call_id, msg, true, false, spec->render);
        tool_result_release(&tr);
        return;
    }
    answer_call(L->te, id_json, tr.text, tr.is_error);
    runner_call_result(L, call_id, tr.text, tr.is_error, false, spec->render);
    tool_result_release(&tr);
}

/* A refused call: the denial the model reads, denied:true in the event. */
static void runner_call_deny(struct turn_loop *L, const char *id_json, const char *call_id,
                             const struct tool_spec *spec, const char *text)
{
    char msg[256];

    if (!text) {
        tool_spec_denial(spec, msg, sizeof(msg));
        text = msg;
    }
    answer_call(L->te, id_json, text, true);
    runner_call_result(L, call_id, text, true, true, spec->render);
}

/* A browser's answer to a client tool as the text the model reads. */
static void client_answer(struct turn_loop *L, const char *id_json, const char *call_id,
                          const struct tool_spec *spec, json_object *output, bool is_error)
{
    const char *text = json_object_is_type(output, json_type_string)
                           ? json_object_get_string(output)
                           : jsonx_text(output, NULL);

    answer_call(L->te, id_json, text ? text : "", is_error);
    runner_call_result(L, call_id, text ? text : "", is_error, false, spec->render);
}

/* The spec of a parked gate's tool (NULL when the run no longer has it). */
static const struct tool_spec *gate_spec(struct turn_loop *L, const struct approval_gate *g)
{
    const struct turn_tools *tt = L->opt->tools;
    const struct tool_spec *spec = NULL;
    char err[256];

    if (!tt || tt->find(tt->ctx, g->tool_name, &spec, err, sizeof(err)) < 0)
        return NULL;
    return spec;
}

/* The interaction_request of a parked call (args: its arguments, may be NULL). */
static json_object *call_gate_request(struct turn_loop *L, const struct approval_gate *g,
                                      json_object *args)
{
    const struct tool_spec *spec = gate_spec(L, g);
    json_object *params, *tc, *ev;

    if (g->kind == GATE_CLIENT)
        return turn_client_tool_request(g, args, spec ? spec->render : NULL);
    params = json_object_new_object();
    tc = json_object_new_object();
    json_object_object_add(tc, "toolCallId", json_object_new_string(g->tool_call_id));
    json_object_object_add(tc, "title", json_object_new_string(g->tool_name));
    json_object_object_add(tc, "kind",
                           json_object_new_string(spec && spec->read_only == 1 ? "read" : "other"));
    json_object_object_add(tc, "rawInput", args ? json_object_get(args) : json_object_new_object());
    json_object_object_add(params, "toolCall", tc);
    ev = turn_interaction_request(g, params);
    if (ev && spec && spec->render)
        json_object_object_add(jsonx_get(ev, "payload"), "render", json_object_get(spec->render));
    json_object_put(params);
    return ev;
}

/* A carried-forward gate's interaction_request again (the same token). */
json_object *turn_tools_reannounce(struct turn_loop *L, const struct approval_gate *g)
{
    const struct turn_tools *tt = L->opt->tools;
    json_object *args, *ev;

    if (g->kind == GATE_PERMISSION || !tt)
        return turn_interaction_request(g, NULL);
    /* the arguments stay stashed: a peek, put back */
    args = tt->unstash(tt->ctx, g->token);
    ev = call_gate_request(L, g, args);
    if (args)
        (void)tt->stash(tt->ctx, g->token, args);
    json_object_put(args);
    return ev;
}

/* Park a call (ask, or a client tool): its tool/call stays open until the gate is answered. */
static void runner_call_park(struct turn_loop *L, enum gate_kind kind, const char *id_json,
                             const char *call_id, const struct tool_spec *spec, json_object *args,
                             int64_t now)
{
    const struct turn_tools *tt = L->opt->tools;
    struct approval_gate *g;

    if (L->ngates >= APPROVAL_GATES_MAX) {
        runner_call_deny(L, id_json, call_id, spec,
                         "agent-runner: too many calls are waiting for an answer; the call was "
                         "not run");
        return;
    }
    if (strlen(id_json) >= sizeof(g->request_id) || strlen(call_id) >= sizeof(g->tool_call_id) ||
        strlen(spec->name) >= sizeof(g->tool_name)) {
        runner_call_deny(L, id_json, call_id, spec,
                         "agent-runner: the call's id is too long to wait for an answer; the "
                         "call was not run");
        return;
    }
    g = &L->gates[L->ngates];
    memset(g, 0, sizeof(*g));
    snprintf(g->tool_call_id, sizeof(g->tool_call_id), "%s", call_id);
    snprintf(g->request_id, sizeof(g->request_id), "%s", id_json);
    snprintf(g->tool_name, sizeof(g->tool_name), "%s", spec->name);
    g->decision = -1;
    g->channel = true;
    g->kind = (uint8_t)kind;
    (void)util_random_hex(g->token, 16);
    if (tt->stash(tt->ctx, g->token, args) < 0) {
        runner_call_deny(L, id_json, call_id, spec,
                         "agent-runner: the call could not be parked; it was not run");
        return;
    }
    L->ngates++;
    turn_close_block(&L->st, L->es);
    event_emit(L->es, call_gate_request(L, g, args));
    run_limits_pause(&L->limits);
    L->quiet_until = now + PAUSE_QUIET_MS;
}

/*
 * tool/call: the runner's tools. The call is announced (tool_call with the spec's render
 * hint), gated like any permission request — the spec's own permission, its MCP server's,
 * the plan, a decision stored in the transcript — and then run (allow), refused (deny),
 * parked for the user (ask) or handed to the browser (client tools).
 */
void turn_tools_on_call(struct turn_loop *L, const struct acp_msg *m,
                        const struct tool_channel_msg *tm, int64_t now)
{
    const struct turn_options *opt = L->opt;
    const struct turn_tools *tt = opt->tools;
    const char *id_json = jsonx_text(m->id, NULL);
    json_object *args = tm->input ? json_object_get(tm->input) : json_object_new_object();
    enum permission eff, stored = PERMISSION_UNSET;
    const struct tool_spec *spec = NULL;
    struct permission_gate pg;
    char err[512];
    enum verdict v;

    if (!tt) {
        answer_call(L->te, id_json, TURN_CHANNEL_NO_TOOLS, true);
        goto out;
    }
    if (tt->find(tt->ctx, tm->tool_name, &spec, err, sizeof(err)) < 0) {
        runner_call_announce(L, tm->tool_call_id, tm->tool_name, args, NULL);
        answer_call(L->te, id_json, err, true);
        runner_call_result(L, tm->tool_call_id, err, true, false, NULL);
        goto out;
    }
    runner_call_announce(L, tm->tool_call_id, spec->name, args, spec->render);
    if (L->cancelling) {
        answer_call(L->te, id_json, CALL_CANCELLED, true);
        runner_call_result(L, tm->tool_call_id, CALL_CANCELLED, true, false, spec->render);
        goto out;
    }
    tool_spec_gate(spec, args, &pg);
    eff = policy_permission_effective(opt->permissions, &pg);
    if (opt->stored && eff == PERMISSION_ASK)
        stored = opt->stored(opt->stored_ctx, spec->name, args);
    v = policy_permission_decide(eff, stored);
    if (v == VERDICT_DENY) {
        runner_call_deny(L, id_json, tm->tool_call_id, spec, NULL);
    } else if (spec->exec == TOOL_EXEC_CLIENT) {
        bool is_error = false;
        json_object *out =
            tt->client_output(tt->ctx, tm->tool_call_id, spec->name, args, &is_error);

        if (out)
            client_answer(L, id_json, tm->tool_call_id, spec, out, is_error);
        else
            runner_call_park(L, GATE_CLIENT, id_json, tm->tool_call_id, spec, args, now);
        json_object_put(out);
    } else if (v == VERDICT_ALLOW) {
        runner_call_run(L, id_json, tm->tool_call_id, spec, args);
    } else {
        runner_call_park(L, GATE_CALL, id_json, tm->tool_call_id, spec, args, now);
    }
out:
    json_object_put(args);
}

/* Answer a parked gate: the client's decision (or answer), or cancelled. */
void turn_tools_answer_parked(struct turn_loop *L, const struct approval_gate *g,
                              enum turn_channel_answer a)
{
    const struct turn_tools *tt = L->opt->tools;
    const struct tool_spec *spec;
    json_object *args, *out;
    bool is_error = false;

    if (g->kind == GATE_PERMISSION) {
        turn_loop_answer_gate(L->te, g->channel, g->request_id, a,
                              a == TURN_CHANNEL_ALLOW ? g->allow_option : g->reject_option,
                              g->tool_name, true);
        return;
    }
    if (a == TURN_CHANNEL_CANCELLED || !tt || !(spec = gate_spec(L, g))) {
        const char *why = a == TURN_CHANNEL_CANCELLED
                              ? CALL_CANCELLED
                              : "agent-runner: this tool is no longer part of the run";
        answer_call(L->te, g->request_id, why, true);
        runner_call_result(L, g->tool_call_id, why, true, false, NULL);
        if (tt)
            json_object_put(tt->unstash(tt->ctx, g->token));
        return;
    }
    args = tt->unstash(tt->ctx, g->token);
    if (!args)
        args = json_object_new_object();
    runner_call_input(L, g->tool_call_id, args);
    if (a == TURN_CHANNEL_DENY) {
        char msg[256];

        if (g->kind == GATE_CLIENT)
            tool_spec_denial(spec, msg, sizeof(msg));
        else
            snprintf(msg, sizeof(msg), "Permission denied: the user denied tool '%s'.", spec->name);
        runner_call_deny(L, g->request_id, g->tool_call_id, spec, msg);
    } else if (g->kind == GATE_CALL) {
        runner_call_run(L, g->request_id, g->tool_call_id, spec, args);
    } else {
        out = tt->client_output(tt->ctx, g->tool_call_id, spec->name, args, &is_error);
        if (out)
            client_answer(L, g->request_id, g->tool_call_id, spec, out, is_error);
        else
            runner_call_deny(L, g->request_id, g->tool_call_id, spec,
                             "agent-runner: the browser's result for this client tool call "
                             "was not found in the request");
        json_object_put(out);
    }
    json_object_put(args);
}

/* pi names a runner tool as it is: is `name` one of the run's? */
bool turn_tools_runner_named(void *ctx, const char *name)
{
    const struct turn_tools *tt = ctx;
    const struct tool_spec *spec;
    const char *kind;
    char err[256];
    bool ro;

    if (harness_pi_builtin(name, &ro, &kind))
        return false; /* pi's own tool: the extension never registers a runner tool so named */
    return tt->find(tt->ctx, name, &spec, err, sizeof(err)) == 0;
}
