"""Runner-executed tools end to end with the scripted agent (tests/fixtures/acp_scripted.c
"runner_tool" steps speak tool/call on the keeper channel the way pi's extension does): the
callback tool and Agenta's body, direct calls with $ctx. and args_into, callback failures as
tool errors, result capping, deny / ask / approve on the same process, client tools, MCP
servers (listing, calls with the header credential, include lists, per-server permission,
every SSRF refusal), the tool set in the warm fingerprint, a rotated authorization."""

import atexit
import json
import os
import shutil
import tempfile
import uuid

from fakes import FakeCallback, FakeMcp
from stack import events_of, result_of, script

FAKES = tempfile.mkdtemp(prefix="ar-tools-fakes.")
atexit.register(shutil.rmtree, FAKES, True)
CB = FakeCallback(os.path.join(FAKES, "cb"))
MCP = FakeMcp(os.path.join(FAKES, "mcp"), tls_names=["mcp.test", "evil.test", "127.0.0.1"])

STACK = {"workers": 2, "threads": 8, "env": {
    "AGENT_RUNNER_MCP_HOST_ALLOWLIST": "mcp.test",
    "AGENT_RUNNER_TOOLS_CA_FILE": MCP.ca_file,
    "AGENT_RUNNER_TOOLS_TEST_RESOLVE": "mcp.test=127.0.0.1,evil.test=127.0.0.1"}}

CALL_REF = "tools__composio__github__GET_THE_AUTHENTICATED_USER__github-tvn"


def ids():
    return "proj-" + uuid.uuid4().hex[:6], "sess-" + uuid.uuid4().hex[:8]


def of(evs, kind):
    return [e for e in evs if e["type"] == kind]


def call(name, call_id="rt1", **arguments):
    return {"runner_tool": {"toolCallId": call_id, "toolName": name, "arguments": arguments}}


def callback_tool(name="get_user", call_ref=CALL_REF, **extra):
    tool = {"name": name, "description": "Get a user",
            "inputSchema": {"type": "object", "properties": {}},
            "kind": "callback", "callRef": call_ref}
    tool.update(extra)
    return tool


def turn(ctx, steps, tools=(), p=None, s=None, messages=None, **extra):
    req = {"harness": "scripted",
           "messages": messages or [{"role": "user", "content": script(steps)}],
           "permissions": {"default": "allow"},
           "toolCallback": {"endpoint": CB.endpoint, "authorization": CB.authorization},
           "runContext": {"run": {"kind": "test"}, "workflow": {"variant": {"id": "var_abc"}}}}
    if tools:
        req["customTools"] = list(tools)
    if p:
        req.update(projectId=p, sessionId=s)
    req.update(extra)
    status, recs = ctx.stack.stream(req)
    assert status == 200, status
    return result_of(recs), events_of(recs)


def test_callback_tool_gets_agentas_body_and_its_answer_reaches_the_agent(ctx):
    CB.reset()
    res, evs = turn(ctx, [call("get_user", "call_1"), {"chunk": " done"}],
                    tools=[callback_tool(contextBindings={
                        "target.workflow_variant_id": "$ctx.workflow.variant.id"})])
    assert res["ok"] is True and res["stopReason"] == "end_turn", res
    [c] = CB.tool_calls(CALL_REF)
    assert c["headers"]["authorization"] == CB.authorization, c["headers"]
    assert c["headers"]["x-agenta-run-kind"] == "test", c["headers"]
    assert c["body"] == {"data": {"id": "call_1", "type": "function", "function": {
        "name": CALL_REF, "arguments": {"target": {"workflow_variant_id": "var_abc"}}}}}, c
    # the runner reports the call itself; the agent received the callback's answer
    [tc] = of(evs, "tool_call")
    assert tc["id"] == "call_1" and tc["name"] == "get_user", tc
    [tr] = of(evs, "tool_result")
    assert tr["id"] == "call_1" and tr["isError"] is False and not tr.get("denied"), tr
    assert '\\"call_id\\": \\"call_1\\"' in tr["output"] or "call_1" in tr["output"], tr
    assert "tool get_user: " in res["output"] and "call_1" in res["output"], res["output"]
