"""Real harnesses (pi, claude, codex) against the fake model: one tool call each in the
sandbox, the configured model and key reach the model API, and nothing of the runner's own
environment reaches the sandbox."""

import os
import uuid

from turns import (MODELS, bash_request, events_of, exec_request, harness_request,
                   model_requests_with, named_model, pi_request, result_of, script,
                   scripted_request)


def run_tool_turn(ctx, harness):
    _, binding, _, tool, args = MODELS[harness]
    tag = uuid.uuid4().hex[:10]
    key = "sk-" + harness + "-" + tag
    cmd = f"echo {tag} > /workspace/made-by-{harness}.txt && cat /workspace/made-by-{harness}.txt"
    name = f"{harness}-{tag}"
    ctx.model.script(name, [{"tool": {"name": tool, "arguments": args(cmd)}},
                            {"text": f"done {tag}"}])
    req = harness_request(ctx, harness, f"Make the file [[script:{name}]]", key,
                          permissions={"default": "allow"})
    status, recs = ctx.stack.stream(req)
    assert status == 200
    res = result_of(recs)
    assert res["ok"] is True, res
    assert res["output"].endswith(f"done {tag}"), res["output"]
    evs = events_of(recs)
    calls = [e for e in evs if e["type"] == "tool_call"]
    results = [e for e in evs if e["type"] == "tool_result"]
    assert calls and results, [e["type"] for e in evs]
    assert any(tag in r["output"] for r in results), results
    assert all(r["isError"] is False for r in results), results
    seen = model_requests_with(ctx, f"[[script:{name}]]")
    assert len(seen) >= 2, f"expected the tool loop to reach the model twice, saw {len(seen)}"
    for r in seen:
        assert r["body"]["model"] == "fake-model", r["body"]["model"]
        auth = r["headers"].get("authorization") or ""
        assert key in auth or r["headers"].get("x-api-key") == key, r["headers"]
    return res


def test_pi_runs_a_tool_call(ctx):
    run_tool_turn(ctx, "pi_core")


def test_claude_runs_a_tool_call(ctx):
    res = run_tool_turn(ctx, "claude")
    assert res["capabilities"]["permissions"] is True


def test_codex_runs_a_tool_call(ctx):
    res = run_tool_turn(ctx, "codex")
    # codex's "unknown model metadata" chatter is not the model's output
    assert "Model metadata" not in res["output"], res["output"]


def test_opencode_runs_a_tool_call(ctx):
    run_tool_turn(ctx, "opencode")


def test_runner_environment_never_reaches_the_sandbox(ctx):
    canary = ctx.stack.env["AGENT_RUNNER_SECRET_CANARY"]
    token = ctx.stack.env["AGENT_RUNNER_TOKEN"]
    status, recs = ctx.stack.stream(scripted_request(script([{"env": True}])))
    env_text = result_of(recs)["output"]
    assert "HOME=/home/agent" in env_text, env_text
    for forbidden in (token, canary, "AGENT_RUNNER", ctx.stack.state):
        assert forbidden not in env_text, f"{forbidden!r} leaked into the sandbox"
    # the same through a real harness's shell tool
    status, recs = ctx.stack.stream(bash_request(ctx, "env", "env"))
    out = next(e for e in events_of(recs) if e["type"] == "tool_result")["output"]
    # the model key stays with the runner's model gateway: pi holds the placeholder
    assert "OPENAI_API_KEY=agent-runner-model-gateway" in out, out
    assert "sk-test" not in out, out
    for forbidden in (token, canary, "AGENT_RUNNER"):
        assert forbidden not in out, f"{forbidden!r} leaked into the pi sandbox"


def test_agents_md_and_harness_files_land_in_the_workspace(ctx):
    prompt = script([{"exec": "cat AGENTS.md; echo; cat .config/x.json; ls -a"}])
    status, recs = ctx.stack.stream(scripted_request(
        prompt, agentsMd="Be brief.", harnessFiles=[{"path": ".config/x.json",
                                                     "content": "{\"a\":1}"}]))
    res = result_of(recs)
    out = next(e for e in events_of(recs) if e["type"] == "tool_result")["output"]
    assert "Be brief." in out and '{"a":1}' in out, out
    assert res["ok"] is True


def test_unselectable_model_fails_the_run(ctx):
    status, recs = ctx.stack.stream(scripted_request("hi", model="no-such-model"))
    res = result_of(recs)
    assert res["ok"] is False and "no-such-model" in res["error"], res
    err = next(e for e in events_of(recs) if e["type"] == "error")
    assert err["code"] == "model_unavailable", err


def claude_write_session(ctx, approve):
    tag = uuid.uuid4().hex[:8]
    p, s = "proj-" + tag, "sess-" + tag
    key = f"{p}:{s}"
    fname = f"approved-{tag}.txt"
    name = f"claude-write-{tag}"
    ctx.model.script(name, [{"tool": {"name": "Write", "arguments": {
        "file_path": f"/workspace/{fname}", "content": "yes\n"}}}, {"text": "finished"}])
    first = [{"role": "user", "content": f"Write the file [[script:{name}]]"}]
    req = harness_request(ctx, "claude", "", "sk-claude-" + tag, projectId=p, sessionId=s,
                          permissions={"default": "allow_reads"})
    req["messages"] = first
    status, recs = ctx.stack.stream(req)
    res = result_of(recs)
    assert res["ok"] is True and res["stopReason"] == "paused", res
    gate = next(e for e in events_of(recs) if e["type"] == "interaction_request")
    assert gate["payload"]["toolCall"]["resolvedName"] == "Write", gate
    before = ctx.stack.session(key)
    assert before["state"] == "awaiting_approval", before
    workspace = os.path.join(before["envDir"], "workspace")
    assert not os.path.exists(os.path.join(workspace, fname)), "ran before approval"
    req["messages"] = first + [{"role": "user", "content": [{
        "type": "tool_result", "toolCallId": gate["id"],
        "output": {"approved": approve,
                   "interactionToken": gate["payload"]["interactionToken"]}}]}]
    status, recs = ctx.stack.stream(req)
    res = result_of(recs)
    assert res["ok"] is True and res["stopReason"] == "end_turn", res
    evs = events_of(recs)
    assert evs[2]["type"] == "interaction_response", [e["type"] for e in evs]
    after = ctx.stack.session(key)
    # the same claude process went on: neither the keeper nor the sandbox changed
    assert after["keeperPid"] == before["keeperPid"], (before, after)
    assert after["sandboxPid"] == before["sandboxPid"], (before, after)
    exists = os.path.exists(os.path.join(workspace, fname))
    ctx.stack.ctl("kill", key)
    return exists, evs


def test_claude_asks_before_writing_and_resumes_on_approval(ctx):
    exists, evs = claude_write_session(ctx, True)
    assert exists, "the approved write did not happen"


def test_claude_denied_write_leaves_no_file(ctx):
    exists, evs = claude_write_session(ctx, False)
    assert not exists, "a denied write happened"
    tr = [e for e in evs if e["type"] == "tool_result"]
    assert tr and tr[0]["denied"] is True, tr


def test_pi_registers_the_model_into_a_builtin_provider(ctx):
    # deployment "direct": the model joins pi's own "openai" provider (routed through the
    # given endpoint) and is selected fully qualified
    tag = uuid.uuid4().hex[:8]
    req = harness_request(ctx, "pi_core", f"hello builtin {tag}", "sk-builtin-" + tag,
                          model="openai/fake-model")
    req["modelConnection"]["deployment"] = "direct"
    status, recs = ctx.stack.stream(req)
    res = result_of(recs)
    assert res["ok"] is True and res["output"] == "Hello from the fake model.", res
    seen = model_requests_with(ctx, f"hello builtin {tag}")
    assert seen and seen[-1]["body"]["model"] == "fake-model", seen
    auth = seen[-1]["headers"].get("authorization", "")
    assert auth == "Bearer sk-builtin-" + tag, seen[-1]["headers"]


def test_network_off_really_removes_the_network(ctx):
    # Every sandbox has its own network namespace: the run's model endpoint is reachable in
    # every mode, anything else on host loopback in none, and "off" reaches nothing but that
    # endpoint. So the probe names the model through modelConnection, and a real harness under
    # "off" now completes its turn.
    probe = (f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 3 "
             f"{ctx.model.base}/v1/models; echo \" rc=$?\"")

    def curl(**extra):
        status, recs = ctx.stack.stream(exec_request(probe, **extra))
        return next(e for e in events_of(recs) if e["type"] == "tool_result")["output"]

    out_on = curl(modelConnection=named_model(ctx))
    assert "200 rc=0" in out_on, out_on
    off = {"network": {"mode": "off"}}
    out_off = curl(sandboxPermission=off)
    assert "rc=7" in out_off, out_off  # curl: could not connect: nothing is named
    out_named = curl(sandboxPermission=off, modelConnection=named_model(ctx))
    assert "200 rc=0" in out_named, out_named  # the run's own endpoint, and only it
    # a real harness under "off" reaches its model and nothing else
    status, recs = ctx.stack.stream(pi_request(
        ctx.model, "hi", sandboxPermission={"network": {"mode": "off"}}))
    res = result_of(recs)
    assert status == 200 and res["ok"] is True, res
    # allowlist is enforced now: a listed range is accepted, a malformed entry is a 400
    status, recs = ctx.stack.stream(scripted_request(
        "hi", sandboxPermission={"network": {"mode": "allowlist", "allowlist": ["10.0.0.0/8"]}}))
    assert status == 200 and result_of(recs)["ok"] is True
    status, _, body = ctx.stack.request("POST", "/run", scripted_request(
        "hi", sandboxPermission={"network": {"mode": "allowlist", "allowlist": ["10.0.0.1/8"]}}))
    assert status == 400 and "sandboxPermission.network.allowlist[0]" in body["error"], body
