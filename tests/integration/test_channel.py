"""The keeper channel end to end with the scripted agent speaking it the way pi's extension
does (tests/fixtures/acp_scripted.c "channel" steps): tool/permission through the same gate
as ACP permission requests (deny, ask -> park -> resume on the same process, cancel), the
approval answer shapes Agenta sends, stale and foreign tokens, usage and model errors."""

import os
import uuid

from stack import wait_for
from turns import answer, ids, of, run, script

STACK = {"workers": 2, "threads": 8}


def turn(ctx, messages, p=None, s=None, **extra):
    req = {"harness": "scripted", "messages": messages,
           "permissions": {"default": "allow_reads"}}
    if p:
        req.update(projectId=p, sessionId=s)
    req.update(extra)
    return run(ctx, req)


def gated(call_id, name="bash", exec_=None, **input_):
    step = {"toolCallId": call_id, "toolName": name, "input": input_ or {"command": "x"}}
    if exec_:
        step["exec"] = exec_
    return {"channel": step}


def test_channel_denied_by_the_plan_never_runs(ctx):
    res, evs = turn(ctx, [{"role": "user", "content": script([
        gated("c1", exec_="touch /workspace/ran", command="touch /workspace/ran"),
        {"exec": "ls /workspace"}, {"chunk": "went on"}])}],
        permissions={"default": "ask", "rules": [{"pattern": "Bash", "permission": "deny"}]})
    assert res["ok"] is True and res["stopReason"] == "end_turn", res
    tr = {e["id"]: e for e in of(evs, "tool_result")}
    assert tr["c1"]["denied"] is True and tr["c1"]["isError"] is True, tr
    assert "permission plan does not allow" in tr["c1"]["output"], tr["c1"]
    assert "ran" not in tr["exec"]["output"], tr["exec"]
    assert not of(evs, "interaction_request")


def test_channel_allow_reads_lets_a_read_builtin_through(ctx):
    res, evs = turn(ctx, [{"role": "user", "content": script([
        gated("r1", name="read", path="/workspace/a"), {"chunk": "read"}])}])
    assert res["stopReason"] == "end_turn", res
    assert of(evs, "tool_result")[0]["output"] == "approved", evs


def paused(ctx, steps, **extra):
    p, s = ids()
    first = [{"role": "user", "content": script(steps)}]
    res, evs = turn(ctx, first, p, s, **extra)
    assert res["ok"] is True and res["stopReason"] == "paused", res
    ctx.last_output = res["output"]
    reqs = of(evs, "interaction_request")
    assert len(reqs) == 1, reqs
    sess = ctx.stack.session(f"{p}:{s}")
    assert sess["state"] == "awaiting_approval", sess
    return p, s, first, reqs[0], sess


def test_channel_ask_parks_and_approve_resumes_the_same_process(ctx):
    p, s, first, req, sess = paused(ctx, [
        {"pid": True}, gated("c1", exec_="echo made > /workspace/made.txt"), {"pid": True},
        {"chunk": " after"}])
    before_pid = ctx.last_output
    # Agenta's interactionEventId: the event's id is the token an answer names
    assert req["id"] == req["payload"]["interactionToken"] and len(req["id"]) == 32, req
    assert req["payload"]["toolCallId"] == "c1", req
    assert req["payload"]["toolCall"]["resolvedName"] == "bash", req
    assert req["payload"]["availableReplies"] == ["once", "reject"], req
    workspace = os.path.join(sess["envDir"], "workspace")
    assert not os.path.exists(os.path.join(workspace, "made.txt")), "ran before approval"
    res, evs = turn(ctx, first + [answer("c1", True, req["id"])], p, s)
    assert res["ok"] is True and res["stopReason"] == "end_turn", res
    resp = of(evs, "interaction_response")
    assert resp and resp[0]["id"] == req["id"], resp
    assert resp[0]["payload"] == {"approved": True, "toolCallId": "c1"}, resp
    assert of(evs, "tool_result")[0]["output"].startswith("approved"), evs
    after = ctx.stack.session(f"{p}:{s}")
    assert after["keeperPid"] == sess["keeperPid"], (sess, after)
    assert after["sandboxPid"] == sess["sandboxPid"], (sess, after)
    assert os.path.exists(os.path.join(workspace, "made.txt")), "the approved call did not run"
    # the same agent process went on: the pid it printed before the gate is the one after it
    assert before_pid.startswith("pid:") and res["output"] == before_pid + " after", \
        (before_pid, res["output"])
    ctx.stack.ctl("kill", f"{p}:{s}")


def test_channel_four_answer_shapes(ctx):
    """An answer in a user or an assistant message, approving or denying, names the
    interaction_request's id as its interactionToken."""
    for role in ("user", "assistant"):
        for approved in (True, False):
            tag = uuid.uuid4().hex[:6]
            p, s, first, req, sess = paused(ctx, [
                gated("c1", exec_=f"touch /workspace/{tag}"), {"chunk": "done"}])
            workspace = os.path.join(sess["envDir"], "workspace")
            res, evs = turn(ctx, first + [answer("c1", approved, req["id"], role)], p, s)
            assert res["ok"] is True and res["stopReason"] == "end_turn", (role, approved, res)
            assert of(evs, "interaction_response")[0]["payload"]["approved"] is approved
            tr = of(evs, "tool_result")[0]
            assert bool(tr.get("denied")) is (not approved), (role, approved, tr)
            assert os.path.exists(os.path.join(workspace, tag)) is approved, (role, approved)
            assert ctx.stack.session(f"{p}:{s}")["keeperPid"] == sess["keeperPid"]
            ctx.stack.ctl("kill", f"{p}:{s}")


def test_channel_stale_or_foreign_token_is_refused_without_teardown(ctx):
    p, s, first, req, sess = paused(ctx, [gated("c1", exec_="touch /workspace/ok"),
                                          {"chunk": "done"}])
    for token in ("0" * 32, uuid.uuid4().hex):
        res, evs = turn(ctx, first + [answer("c1", True, token)], p, s)
        assert res["ok"] is False and "interactionToken" in res["error"], res
        err = of(evs, "error")
        assert err and err[0]["code"] == "invalid_request", evs
        assert evs[-1]["type"] == "done", evs
        still = ctx.stack.session(f"{p}:{s}")
        assert still["state"] == "awaiting_approval", still
        assert still["keeperPid"] == sess["keeperPid"], (sess, still)
    res, evs = turn(ctx, first + [answer("c1", True, req["id"])], p, s)
    assert res["ok"] is True and res["output"] == "done", res
    assert os.path.exists(os.path.join(sess["envDir"], "workspace", "ok"))
    ctx.stack.ctl("kill", f"{p}:{s}")


def test_channel_cancel_answers_a_parked_gate(ctx):
    p, s, first, req, sess = paused(ctx, [gated("c1", exec_="touch /workspace/no"),
                                          {"chunk": "never"}])
    status, _, body = ctx.stack.request("POST", "/cancel", {"sessionId": s, "projectId": p})
    assert status == 202, (status, body)
    after = wait_for(lambda: (ctx.stack.session(f"{p}:{s}") or {}).get("state") == "idle" and
                     ctx.stack.session(f"{p}:{s}"), what="idle after cancel")
    assert after["keeperPid"] == sess["keeperPid"], after
    assert not os.path.exists(os.path.join(sess["envDir"], "workspace", "no"))
    ctx.stack.ctl("kill", f"{p}:{s}")


def test_channel_usage_per_model_call_and_the_turn_total(ctx):
    u1 = {"input": 100, "output": 20, "cacheRead": 5, "total": 125, "cost": 0.25}
    u2 = {"input": 300, "output": 40, "total": 340, "cost": 0.5}
    res, evs = turn(ctx, [{"role": "user", "content": script([
        {"channel_notify": {"method": "usage", "params": u1}},
        {"channel_notify": {"method": "usage", "params": u2}}, {"chunk": "counted"}])}])
    usage = of(evs, "usage")
    assert [(u["input"], u["output"], u["total"]) for u in usage] == \
        [(100, 20, 125), (300, 40, 340)], usage
    assert res["usage"]["input"] == 400 and res["usage"]["output"] == 60, res
    assert res["usage"]["total"] == 465 and abs(res["usage"]["cost"] - 0.75) < 1e-9, res


def test_channel_model_error_without_output_fails_the_turn(ctx):
    # the harness's word, said as the harness's: whatever code it names, never a runner code
    err = {"message": "Connection error.", "code": "model_unavailable"}
    res, evs = turn(ctx, [{"role": "user", "content": script([
        {"channel_notify": {"method": "error", "params": err}}])}])
    said = "the harness reported: Connection error."
    assert res["ok"] is False and res["error"] == said, res
    e = of(evs, "error")
    assert e and e[0]["code"] == "harness_error" and e[0]["message"] == said, e
    assert evs[-1]["type"] == "done"
    # output after the failure means the turn went on
    res, evs = turn(ctx, [{"role": "user", "content": script([
        {"channel_notify": {"method": "error", "params": {"message": "500 boom", "code": "x"}}},
        {"chunk": "recovered"}])}])
    assert res["ok"] is True and res["output"] == "recovered", res
    res, evs = turn(ctx, [{"role": "user", "content": script([
        {"channel_notify": {"method": "error", "params": {"message": "500 boom", "code": "x"}}}
    ])}])
    assert res["ok"] is False and of(evs, "error")[0]["code"] == "harness_error", evs
