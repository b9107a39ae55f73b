"""The runner's tool path with the four real harnesses, driven by the fake model (README "Tools"):
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
from stack import BIN, ROOT
from turns import (MODELS, events_of, harness_request, model_requests, of, result_of,
                   tool_results_seen_by_model)

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
    assert c["headers"]["x-agenta-run-kind"] == "test", c["headers"]
    call_id = c["body"]["data"]["id"]
    # exactly Agenta's body: nothing else, the binding applied over the model's arguments
    assert c["body"] == {"data": {"id": call_id, "type": "function", "function": {
        "name": CALL_REF, "arguments": {"login": "octocat",
                                        "target": {"workflow_variant_id": "var_abc"}}}}}, c
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


def golden(name):
    with open(os.path.join(ROOT, "tests", "fixtures", "agenta-golden", name)) as f:
        return json.load(f)


def run_golden(ctx, name, harness, model_steps, adapt):
    """Agenta's golden request as sent, except what must point at this test's fakes."""
    CB.reset()
    req = golden(name)
    tag = uuid.uuid4().hex[:10]
    script = f"golden-{harness}-{tag}"
    ctx.model.script(script, model_steps(tag))
    req["messages"][0]["content"] = f"hi [[script:{script}]]"
    req["toolCallback"]["endpoint"] = CB.endpoint
    CB.set_authorization(req["toolCallback"]["authorization"])
    adapt(req)
    try:
        status, recs = ctx.stack.stream(req)
    finally:
        CB.set_authorization(CB.initial_authorization)
    assert status == 200, status
    return tag, script, result_of(recs), events_of(recs)


def pi_golden_adapt(ctx):
    def adapt(req):
        mc = req["modelConnection"]
        mc["endpoint"]["baseUrl"] = ctx.model.base + "/v1"
        # the golden's route is pi's built-in openai-codex provider (ChatGPT's codex API);
        # the fake model speaks OpenAI's APIs: the same request on pi's "openai" provider
        mc["provider"] = "openai"
        req["model"] = "openai/gpt-5.5"
        # sandboxPermission as sent: network "off" leaves the sandbox only its model endpoint
        req["telemetry"]["exporters"]["otlp"]["endpoint"] = "http://127.0.0.1:9/v1/traces"
    return adapt


def test_golden_pi_request_runs(ctx):
    """get_user (readOnly, a callback with a context binding) runs under allow_reads; the
    model's answer follows."""
    tag, script, res, evs = run_golden(
        ctx, "run_request.pi_core.json", "pi_core",
        lambda t: [{"tool": {"name": "get_user", "arguments": {}}}, {"text": f"golden {t}"}],
        pi_golden_adapt(ctx))
    assert res["ok"] is True and res["output"].endswith(f"golden {tag}"), res
    [c] = CB.tool_calls(CALL_REF)
    assert c["headers"]["authorization"] == "Access tok-123", c["headers"]
    assert c["headers"]["x-agenta-run-kind"] == "test", c["headers"]
    assert c["body"]["data"]["function"] == {
        "name": CALL_REF, "arguments": {"target": {"workflow_variant_id": "var_abc"}}}, c["body"]
    # pi's Responses call ids join two ids with "|": the runner takes them as they are
    [tc] = of(evs, "tool_call")
    assert tc["name"] == "get_user" and c["body"]["data"]["id"] == tc["id"], (tc, c)
    [tr] = of(evs, "tool_result")
    assert tr["isError"] is False and CALL_REF in tr["output"], tr
    told = " ".join(tool_results_seen_by_model(model_requests(ctx, script)[-1]))
    assert CALL_REF in told, told


def test_golden_pi_request_asks_before_get_weather(ctx):
    """get_weather (a direct call, not readOnly) asks under allow_reads: the turn pauses with
    the approval's interaction_request and nothing was called."""
    tag, script, res, evs = run_golden(
        ctx, "run_request.pi_core.json", "pi_core",
        lambda t: [{"tool": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
                   {"text": f"golden {t}"}], pi_golden_adapt(ctx))
    assert res["ok"] is True and res["stopReason"] == "paused", res
    [req] = of(evs, "interaction_request")
    assert req["kind"] == "user_approval", req
    assert req["payload"]["toolCall"]["resolvedName"] == "get_weather", req
    assert req["payload"]["toolCall"]["rawInput"] == {"city": "Oslo"}, req
    assert not CB.direct_calls(), CB.direct_calls()


def test_golden_claude_request_runs(ctx):
    """The golden claude request: permissions default "deny" (no rule names get_user) and its
    own .claude/settings.json denies mcp__agenta-tools__get_user: the model's call is refused,
    the callback never called, the turn goes on to the model's answer."""
    def adapt(req):
        mc = req["modelConnection"]
        mc["endpoint"]["baseUrl"] = ctx.model.base

    tag, script, res, evs = run_golden(
        ctx, "run_request.claude.json", "claude",
        lambda t: [{"tool": model_tool("claude", "get_user", {})}, {"text": f"golden {t}"}],
        adapt)
    assert res["ok"] is True and res["output"].endswith(f"golden {tag}"), res
    assert not CB.tool_calls(), CB.tool_calls()
    # its settings took the tool away from claude: it reports the refusal itself, under the
    # runner's name for the tool
    [tr] = of(evs, "tool_result")
    assert tr["isError"] is True and "get_user" in tr["output"], tr
    [tc] = of(evs, "tool_call")
    assert tc["name"] == "get_user", tc
    told = " ".join(tool_results_seen_by_model(model_requests(ctx, script)[-1]))
    assert "get_user" in told or "denied" in told.lower() or "permission" in told.lower(), told


DOCS = MCP.add_server("docs", tools=[
    {"name": "search", "description": "Search the docs",
     "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}},
                     "required": ["q"]}}])


def test_pi_gets_mcp_tools_too(ctx):
    MCP.reset()
    tag = uuid.uuid4().hex[:10]
    DOCS.script("search", {"text": f"found {tag}"})
    name = f"pi-mcp-{tag}"
    ctx.model.script(name, [{"tool": {"name": "docs__search", "arguments": {"q": "warm"}}},
                            {"text": f"done {tag}"}])
    req = harness_request(ctx, "pi_core", f"Search [[script:{name}]]", "sk-" + tag,
                          permissions={"default": "allow"},
                          mcpServers=[DOCS.config(url=DOCS.url_for("mcp.test"))])
    status, recs = ctx.stack.stream(req)
    res, evs = result_of(recs), events_of(recs)
    assert res["ok"] is True and res["output"].endswith(f"done {tag}"), res
    [c] = DOCS.calls("tools/call")
    assert c["headers"][DOCS.header_name] == DOCS.header_value, c["headers"]
    assert c["arguments"] == {"q": "warm"}, c
    [tr] = of(evs, "tool_result")
    assert tr["output"] == f"found {tag}", tr
    told = " ".join(tool_results_seen_by_model(model_requests(ctx, name)[-1]))
    assert f"found {tag}" in told, told
    # pi offered the MCP tool to the model under the runner's name
    offered = json.dumps(model_requests(ctx, name)[0]["body"].get("tools"))
    assert "docs__search" in offered, offered[:500]


def ask_then_approve(ctx, harness):
    """permission "ask" on a callback tool: the turn parks with the call open on the live
    process; the approval resumes that process, the call runs, its answer reaches the model."""
    CB.reset()
    tag = uuid.uuid4().hex[:10]
    p, s = "proj-" + tag[:6], "sess-" + tag
    CB.script_tool(CALL_REF, {"content": f"approved user {tag}"})
    name = f"ask-{harness}-{tag}"
    ctx.model.script(name, [{"tool": model_tool(harness, "get_user", {"login": "x"})},
                            {"text": f"done {tag}"}])
    tool = dict(GET_USER, permission="ask")
    first = [{"role": "user", "content": f"Who? [[script:{name}]]"}]
    base = harness_request(ctx, harness, "", "sk-" + tag, permissions={"default": "allow"},
                           customTools=[tool], projectId=p, sessionId=s,
                           toolCallback={"endpoint": CB.endpoint,
                                         "authorization": CB.authorization},
                           runContext={"workflow": {"variant": {"id": "var_abc"}}})
    try:
        status, recs = ctx.stack.stream(dict(base, messages=first))
        res, evs = result_of(recs), events_of(recs)
        assert res["ok"] is True and res["stopReason"] == "paused", res
        [req] = of(evs, "interaction_request")
        assert req["payload"]["toolCall"]["resolvedName"] == "get_user", req
        assert not CB.tool_calls(), "ran before approval"
        parked = ctx.stack.session(f"{p}:{s}")
        assert parked["state"] == "awaiting_approval", parked
        answer = {"role": "user", "content": [{"type": "tool_result",
                                               "toolCallId": req["payload"]["toolCallId"],
                                               "output": {"approved": True,
                                                          "interactionToken": req["id"]}}]}
        status, recs = ctx.stack.stream(dict(base, messages=first + [answer]))
        res, evs = result_of(recs), events_of(recs)
        assert res["ok"] is True and res["output"].endswith(f"done {tag}"), res
        assert len(CB.tool_calls(CALL_REF)) == 1, (CB.tool_calls(), evs)
        trs = of(evs, "tool_result")
        assert len(trs) == 1, (harness, evs)  # the harness's own view of the call stays hidden
        assert all(e["id"] == trs[0]["id"] for e in of(evs, "tool_call")), (harness, evs)
        assert trs[0]["output"] == f"approved user {tag}", trs
        after = ctx.stack.session(f"{p}:{s}")
        assert after["keeperPid"] == parked["keeperPid"], (parked, after)
        assert after["sandboxPid"] == parked["sandboxPid"], (parked, after)
        told = " ".join(tool_results_seen_by_model(model_requests(ctx, name)[-1]))
        assert f"approved user {tag}" in told, told
    finally:
        ctx.stack.ctl("kill", f"{p}:{s}", check=False)


def test_pi_ask_parks_and_approve_resumes_the_same_process(ctx):
    ask_then_approve(ctx, "pi_core")


def test_claude_ask_parks_and_approve_resumes_the_same_process(ctx):
    ask_then_approve(ctx, "claude")


PICK = {"name": "pick_color", "description": "Let the user pick a color in the browser",
        "inputSchema": {"type": "object", "properties": {"palette": {"type": "string"}}},
        "kind": "client", "render": {"kind": "component", "component": "ColorPicker"}}


def client_tool_pause_resume(ctx, harness):
    """A client tool: the turn ends paused with interaction_request client_tool and the call
    open on the live process; the request carrying the browser's tool_result resumes that
    process, and the browser's output reaches the model as the tool's answer."""
    tag = uuid.uuid4().hex[:10]
    p, s = "proj-" + tag[:6], "sess-" + tag
    name = f"client-{harness}-{tag}"
    ctx.model.script(name, [{"tool": model_tool(harness, "pick_color", {"palette": "warm"})},
                            {"text": f"done {tag}"}])
    first = [{"role": "user", "content": f"Pick one [[script:{name}]]"}]
    base = harness_request(ctx, harness, "", "sk-" + tag, permissions={"default": "allow"},
                           customTools=[PICK], projectId=p, sessionId=s)
    try:
        status, recs = ctx.stack.stream(dict(base, messages=first))
        res, evs = result_of(recs), events_of(recs)
        assert res["ok"] is True and res["stopReason"] == "paused", (harness, res)
        [req] = of(evs, "interaction_request")
        assert req["kind"] == "client_tool", req
        pl = req["payload"]
        assert pl["toolName"] == "pick_color" and pl["input"] == {"palette": "warm"}, pl
        assert pl["render"] == PICK["render"], pl
        parked = ctx.stack.session(f"{p}:{s}")
        assert parked["state"] == "awaiting_approval", parked
        color = f"#{tag[:6]}"
        browser = {"role": "user", "content": [{"type": "tool_result",
                                                "toolCallId": pl["toolCallId"],
                                                "toolName": "pick_color",
                                                "output": {"color": color}}]}
        status, recs = ctx.stack.stream(dict(base, messages=first + [browser]))
        res, evs = result_of(recs), events_of(recs)
        assert res["ok"] is True and res["output"].endswith(f"done {tag}"), (harness, res)
        # one report of the call: the runner's (the harness's own view of it stays hidden)
        [tr] = of(evs, "tool_result")
        assert tr["id"] == pl["toolCallId"], (harness, evs)
        assert tr["isError"] is False and color in tr["output"], tr
        assert all(e["id"] == pl["toolCallId"] for e in of(evs, "tool_call")), (harness, evs)
        after = ctx.stack.session(f"{p}:{s}")
        assert after["keeperPid"] == parked["keeperPid"], (parked, after)
        assert after["sandboxPid"] == parked["sandboxPid"], (parked, after)
        told = " ".join(tool_results_seen_by_model(model_requests(ctx, name)[-1]))
        assert color in told, (harness, told)
    finally:
        ctx.stack.ctl("kill", f"{p}:{s}", check=False)


def test_pi_client_tool_pauses_and_resumes_with_the_browser_result(ctx):
    client_tool_pause_resume(ctx, "pi_core")


def test_claude_client_tool_pauses_and_resumes_with_the_browser_result(ctx):
    client_tool_pause_resume(ctx, "claude")


def test_codex_client_tool_pauses_and_resumes_with_the_browser_result(ctx):
    client_tool_pause_resume(ctx, "codex")


def test_opencode_client_tool_pauses_and_resumes_with_the_browser_result(ctx):
    client_tool_pause_resume(ctx, "opencode")


def test_codex_ask_parks_and_approve_resumes_the_same_process(ctx):
    ask_then_approve(ctx, "codex")


def test_opencode_ask_parks_and_approve_resumes_the_same_process(ctx):
    ask_then_approve(ctx, "opencode")


def deny_turn(ctx, harness):
    """permission "deny" on a callback tool: the runner refuses the call (denied tool_result,
    the callback never called) and the model reads the refusal; the turn goes on."""
    CB.reset()
    tag = uuid.uuid4().hex[:10]
    name = f"deny-{harness}-{tag}"
    ctx.model.script(name, [{"tool": model_tool(harness, "get_user", {"login": "x"})},
                            {"text": f"done {tag}"}])
    req = harness_request(ctx, harness, f"Who? [[script:{name}]]", "sk-" + tag,
                          permissions={"default": "allow"},
                          customTools=[dict(GET_USER, permission="deny")],
                          toolCallback={"endpoint": CB.endpoint,
                                        "authorization": CB.authorization})
    status, recs = ctx.stack.stream(req)
    res, evs = result_of(recs), events_of(recs)
    assert status == 200 and res["ok"] is True, (harness, res)
    assert res["output"].endswith(f"done {tag}"), res["output"]
    assert not CB.tool_calls(), CB.tool_calls()
    [tr] = of(evs, "tool_result")
    assert tr["denied"] is True and tr["isError"] is True, tr
    assert tr["output"] == "Tool 'get_user' is denied by policy.", tr
    told = " ".join(tool_results_seen_by_model(model_requests(ctx, name)[-1]))
    assert "denied by policy" in told, (harness, told)


def test_pi_deny(ctx):
    deny_turn(ctx, "pi_core")


def test_claude_deny(ctx):
    deny_turn(ctx, "claude")


def test_codex_deny(ctx):
    deny_turn(ctx, "codex")


def test_opencode_deny(ctx):
    deny_turn(ctx, "opencode")


# Tool code run by claude or codex goes for the keeper channel of the agenta-tools server: the
# holder's hand-over socket (gone: the server took the connection when it started) and the
# server itself, started by hand with a tools/call on its stdin (it finds no connection to
# take). The callback never hears of it; the model's own call of the tool still works.
def tool_code_takes_no_channel(ctx, harness):
    CB.reset()
    tag = uuid.uuid4().hex[:10]
    CB.script_tool(CALL_REF, {"content": f"user octocat-{tag}"})
    mcp = os.path.join(BIN, "agent-runner-mcp")
    probe = ("python3 -c 'import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n"
             "    s.connect(\"/tmp/.agent-runner-mcp/sock\"); print(\"handoff=connected\")\n"
             "except OSError as e:\n    print(\"handoff=\" + e.strerror)'; "
             "printf '%s\\n%s\\n' '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
             "\"params\":{}}' '{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"get_user\",\"arguments\":{}}}' | "
             f"RUNNER_TOOLS_FILE=/home/agent/.agent-runner/tools.json timeout 5 {mcp} 2>&1 "
             "| tail -c 400; echo; echo probed")
    _, _, _, bash, args = MODELS[harness]
    name = f"steal-{harness}-{tag}"
    ctx.model.script(name, [{"tool": {"name": bash, "arguments": args(probe)}},
                            {"tool": model_tool(harness, "get_user", {"login": "octocat"})},
                            {"text": f"done {tag}"}])
    req = harness_request(ctx, harness, f"Go [[script:{name}]]", "sk-steal-" + tag,
                          permissions={"default": "allow"}, customTools=[GET_USER],
                          toolCallback={"endpoint": CB.endpoint,
                                        "authorization": CB.authorization},
                          runContext={"run": {"kind": "test"},
                                      "workflow": {"variant": {"id": "var_abc"}}})
    status, recs = ctx.stack.stream(req)
    assert status == 200, status
    res, evs = result_of(recs), events_of(recs)
    assert res["ok"] is True, (harness, res)
    probed = [e["output"] for e in of(evs, "tool_result") if "probed" in (e.get("output") or "")]
    assert probed, (harness, of(evs, "tool_result"))
    print(f"    {harness} tool code: " + probed[0].replace("\n", "; ")[:400])
    assert "handoff=No such file or directory" in probed[0], probed[0]
    assert "channel is unavailable" in probed[0] and "was not run" in probed[0], probed[0]
    # one call reached the callback: the model's own, through the harness's server
    assert len(CB.tool_calls(CALL_REF)) == 1, CB.tool_calls(CALL_REF)
    [tr] = [e for e in of(evs, "tool_result") if (e.get("output") or "").startswith("user ")]
    assert tr["output"] == f"user octocat-{tag}", tr


def test_claude_tool_code_takes_no_channel(ctx):
    tool_code_takes_no_channel(ctx, "claude")


def test_codex_tool_code_takes_no_channel(ctx):
    tool_code_takes_no_channel(ctx, "codex")
