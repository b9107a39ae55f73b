"""Every tool call of pi, codex and opencode reaches the permission plan (README "Tools"):
pi through agent-runner's extension and the keeper channel, codex through approval_policy
"untrusted" and its rules file, opencode through {"*": "ask"}. Deny never runs the tool, ask
parks the turn on the live process, approve resumes that same process and the command's
effect exists, deny on resume leaves none."""

import os
import uuid

from stack import descendants, proc_table
from turns import (MODELS, events_of, harness_request, ids, model_requests, of, result_of,
                   tool_results_seen_by_model)

STACK = {"workers": 2, "threads": 8}


def tool_turn(ctx, harness, permissions, session=None, messages=None, tag=None):
    """A turn whose model calls the harness's shell tool to create /workspace/<tag>."""
    tag = tag or uuid.uuid4().hex[:10]
    _, _, _, tool, args = MODELS[harness]
    name = f"gate-{harness}-{tag}"
    ctx.model.script(name, [{"tool": {"name": tool, "arguments": args(f"touch /workspace/{tag}")}},
                            {"text": f"finished {tag}"}])
    req = harness_request(ctx, harness, f"Make the file [[script:{name}]]", "sk-gate-" + tag,
                          permissions=permissions)
    if session:
        req.update(projectId=session[0], sessionId=session[1])
    if messages:
        req["messages"] = messages
    status, recs = ctx.stack.stream(req)
    assert status == 200, status
    return tag, name, req, result_of(recs), events_of(recs)


def assert_denied(ctx, harness, permissions):
    p, s = ids()
    try:
        tag, name, _, res, evs = tool_turn(ctx, harness, permissions, session=(p, s))
        sess = ctx.stack.session(f"{p}:{s}")
        ran = os.path.exists(os.path.join(sess["envDir"], "workspace", tag))
    finally:
        ctx.stack.ctl("kill", f"{p}:{s}")
    assert res["ok"] is True and res["stopReason"] == "end_turn", res
    denied = [e for e in of(evs, "tool_result") if e.get("denied")]
    assert denied and denied[0]["isError"] is True, of(evs, "tool_result")
    assert not of(evs, "interaction_request"), evs
    assert not ran, "a denied command ran"
    seen = model_requests(ctx, name)
    if harness == "pi_core":
        # pi went on: the model's next request carries the denial as the tool's result
        assert len(seen) == 2, len(seen)
        told = " ".join(tool_results_seen_by_model(seen[1]))
        assert "Permission denied" in told, told
    else:
        # codex and opencode end the turn on a rejected call: the model is not asked again
        assert len(seen) == 1, len(seen)
    return tag, evs


def harness_pid(sess, is_harness):
    """The pid of the harness process in the sandbox (is_harness(cmdline) says which)."""
    t = proc_table()
    kids = [p for p in descendants(sess["sandboxPid"], t)
            if not t[p][1].startswith("/usr/bin/bwrap")]
    pids = [p for p in kids if is_harness(t[p][1])]
    assert len(pids) == 1, [(p, t[p][1][:120]) for p in kids]
    return pids[0]


HARNESS_PROCESS = {
    "pi_core": lambda cmd: cmd == "pi",  # pi names its process "pi"
    "codex": lambda cmd: cmd.endswith("/codex-acp"),
    "opencode": lambda cmd: cmd.endswith("/opencode acp"),
}


def ask_then_answer(ctx, harness, approved):
    p, s = ids()
    try:
        ask_then_answer_in(ctx, harness, approved, p, s)
    finally:
        ctx.stack.ctl("kill", f"{p}:{s}")


def ask_then_answer_in(ctx, harness, approved, p, s):
    key = f"{p}:{s}"
    tag, name, req, res, evs = tool_turn(ctx, harness, {"default": "ask"}, session=(p, s))
    assert res["ok"] is True and res["stopReason"] == "paused", res
    gates = of(evs, "interaction_request")
    assert len(gates) == 1, gates
    gate = gates[0]
    assert gate["id"] == gate["payload"]["interactionToken"], gate
    before = ctx.stack.session(key)
    assert before["state"] == "awaiting_approval", before
    workspace = os.path.join(before["envDir"], "workspace")
    assert not os.path.exists(os.path.join(workspace, tag)), "ran before the approval"
    pid = harness_pid(before, HARNESS_PROCESS[harness])
    answer = {"role": "user", "content": [{
        "type": "tool_result", "toolCallId": gate["payload"]["toolCallId"],
        "output": {"approved": approved, "interactionToken": gate["id"]}}]}
    _, _, _, res, evs = tool_turn(ctx, harness, {"default": "ask"}, session=(p, s),
                                  messages=req["messages"] + [answer], tag=tag)
    assert res["ok"] is True and res["stopReason"] == "end_turn", res
    assert of(evs, "interaction_response")[0]["id"] == gate["id"], evs
    after = ctx.stack.session(key)
    # the same harness process went on
    assert after["keeperPid"] == before["keeperPid"], (before, after)
    assert after["sandboxPid"] == before["sandboxPid"], (before, after)
    assert harness_pid(after, HARNESS_PROCESS[harness]) == pid
    exists = os.path.exists(os.path.join(workspace, tag))
    assert exists is approved, f"approved={approved} but the file exists={exists}"
    if not approved:
        assert any(e.get("denied") for e in of(evs, "tool_result")), of(evs, "tool_result")
    else:
        assert res["output"] == f"finished {tag}", res


def test_pi_default_deny_never_runs_bash(ctx):
    assert_denied(ctx, "pi_core", {"default": "deny"})


def test_pi_a_bash_deny_rule_never_runs_bash(ctx):
    tag, evs = assert_denied(ctx, "pi_core", {"default": "allow", "rules": [
        {"pattern": "Bash", "permission": "deny"}]})
    assert "permission plan" in [e for e in of(evs, "tool_result") if e.get("denied")][0]["output"]


def test_pi_ask_parks_and_approve_resumes_the_same_pi(ctx):
    ask_then_answer(ctx, "pi_core", True)


def test_pi_ask_then_deny_leaves_no_effect(ctx):
    ask_then_answer(ctx, "pi_core", False)


def test_codex_default_deny_never_runs_the_command(ctx):
    assert_denied(ctx, "codex", {"default": "deny"})


def test_codex_ask_parks_and_approve_resumes_the_same_codex(ctx):
    ask_then_answer(ctx, "codex", True)


def test_codex_ask_then_deny_leaves_no_effect(ctx):
    ask_then_answer(ctx, "codex", False)


def test_opencode_default_deny_never_runs_the_command(ctx):
    assert_denied(ctx, "opencode", {"default": "deny"})


def test_opencode_ask_parks_and_approve_resumes_the_same_opencode(ctx):
    ask_then_answer(ctx, "opencode", True)


def test_opencode_ask_then_deny_leaves_no_effect(ctx):
    ask_then_answer(ctx, "opencode", False)
