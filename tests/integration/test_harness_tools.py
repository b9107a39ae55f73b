"""The runner's tool path with the four real harnesses, driven by the fake model (issue 14):
pi gets the run's tools through its extension (RUNNER_TOOLS_FILE, tool/call on the keeper
channel), claude, codex and opencode through the agenta-tools MCP server in session/new. A
callback tool is called, the callback receives exactly Agenta's body with the authorization
header, and its answer reaches the model. Plus: pi gets MCP tools too, ask/approve on pi,
and Agenta's golden pi and claude requests run."""

import atexit
import copy
import json
import os
import shutil
import tempfile
import uuid

from fakes import FakeCallback, FakeMcp
from stack import ROOT, events_of, result_of
from test_harnesses import MODELS, harness_request

FAKES = tempfile.mkdtemp(prefix="ar-htools-fakes.")
atexit.register(shutil.rmtree, FAKES, True)
CB = FakeCallback(os.path.join(FAKES, "cb"))
MCP = FakeMcp(os.path.join(FAKES, "mcp"), tls_names=["mcp.test"])

STACK = {"workers": 2, "threads": 8, "env": {
    "AGENT_RUNNER_MCP_HOST_ALLOWLIST": "mcp.test",
    "AGENT_RUNNER_TOOLS_CA_FILE": MCP.ca_file,
    "AGENT_RUNNER_TOOLS_TEST_RESOLVE": "mcp.test=127.0.0.1"}}

CALL_REF = "tools__composio__github__GET_THE_AUTHENTICATED_USER__github-tvn"
GET_USER = {"name": "get_user", "description": "Get a user",
            "inputSchema": {"type": "object", "properties": {"login": {"type": "string"}}},
            "readOnly": True, "kind": "callback", "callRef": CALL_REF,
            "contextBindings": {"target.workflow_variant_id": "$ctx.workflow.variant.id"},
            "timeoutMs": 120000}


def model_tool(harness, name, arguments):
    """The model's call of runner tool `name` as each harness offers it."""
    if harness == "claude":
        return {"name": f"mcp__agenta-tools__{name}", "arguments": arguments}
    if harness == "codex":
        return {"name": name, "namespace": "mcp__agenta_tools", "arguments": arguments}
    if harness == "opencode":
        return {"name": f"agenta-tools_{name}", "arguments": arguments}
    return {"name": name, "arguments": arguments}


def of(evs, kind):
    return [e for e in evs if e["type"] == kind]


def model_requests(ctx, name):
    return [r for r in ctx.model.requests() if f"[[script:{name}]]" in json.dumps(r["body"])]


def tool_results_seen_by_model(req):
    body, out = req["body"], []
    for m in body.get("messages") or []:
        if m.get("role") == "tool":
            out.append(json.dumps(m.get("content")))
        if isinstance(m.get("content"), list):
            out += [json.dumps(b) for b in m["content"] if b.get("type") == "tool_result"]
    for it in body.get("input") or [] if isinstance(body.get("input"), list) else []:
        if it.get("type") in ("function_call_output", "custom_tool_call_output"):
            out.append(json.dumps(it.get("output")))
    return out


def callback_turn(ctx, harness):
    CB.reset()
    tag = uuid.uuid4().hex[:10]
    CB.script_tool(CALL_REF, {"content": f"user octocat-{tag}"})
    name = f"tools-{harness}-{tag}"
    ctx.model.script(name, [{"tool": model_tool(harness, "get_user", {"login": "octocat"})},
                            {"text": f"done {tag}"}])
    req = harness_request(ctx, harness, f"Who am I? [[script:{name}]]", "sk-tools-" + tag,
                          permissions={"default": "allow_reads"},
                          customTools=[GET_USER],
                          toolCallback={"endpoint": CB.endpoint,
                                        "authorization": CB.authorization},
                          runContext={"run": {"kind": "test"},
                                      "workflow": {"variant": {"id": "var_abc"}}})
    status, recs = ctx.stack.stream(req)
    assert status == 200, status
    res, evs = result_of(recs), events_of(recs)
    assert res["ok"] is True, (harness, res)
    calls = CB.tool_calls(CALL_REF)
    assert len(calls) == 1, (harness, calls, [e["type"] for e in evs])
    c = calls[0]
    assert c["headers"]["authorization"] == CB.authorization, c["headers"]
    assert c["headers"]["content-type"].startswith("application/json"), c["headers"]
    assert c["body"]["data"]["type"] == "function", c["body"]
    assert c["body"]["data"]["function"] == {
        "name": CALL_REF, "arguments": {"login": "octocat",
                                        "target": {"workflow_variant_id": "var_abc"}}}, c
    call_id = c["body"]["data"]["id"]
    # the runner reported the call with the harness's call id (pi, claude) or the bridge's
    [tc] = [e for e in of(evs, "tool_call") if e["id"] == call_id]
    assert tc["name"] == "get_user" and tc["input"] == {"login": "octocat"}, tc
    [tr] = [e for e in of(evs, "tool_result") if e["id"] == call_id]
    assert tr["isError"] is False and tr["output"] == f"user octocat-{tag}", tr
    # nothing else reported the same call under the harness's own name
    assert all("agenta-tools" not in (e.get("name") or "") and
               "agenta_tools" not in (e.get("name") or "") for e in of(evs, "tool_call")), evs
    seen = model_requests(ctx, name)
    assert len(seen) >= 2, (harness, len(seen))
    told = " ".join(tool_results_seen_by_model(seen[-1]))
    assert f"user octocat-{tag}" in told, (harness, told)
    assert res["output"].endswith(f"done {tag}"), res["output"]
    return res, evs


def test_pi_callback_tool(ctx):
    callback_turn(ctx, "pi_core")


def test_claude_callback_tool(ctx):
    callback_turn(ctx, "claude")


def test_codex_callback_tool(ctx):
    callback_turn(ctx, "codex")


def test_opencode_callback_tool(ctx):
    callback_turn(ctx, "opencode")
