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

from fakes import FakeAgentaApi, FakeCallback, FakeMcp
from turns import answer, ids, of, run, script

FAKES = tempfile.mkdtemp(prefix="ar-tools-fakes.")
atexit.register(shutil.rmtree, FAKES, True)
CB = FakeCallback(os.path.join(FAKES, "cb"))
MCP = FakeMcp(os.path.join(FAKES, "mcp"), tls_names=["mcp.test", "evil.test", "127.0.0.1"])

STACK = {"workers": 2, "threads": 8, "env": {
    "AGENT_RUNNER_MCP_HOST_ALLOWLIST": "mcp.test",
    "AGENT_RUNNER_TOOLS_CA_FILE": MCP.ca_file,
    "AGENT_RUNNER_TOOLS_TEST_RESOLVE": "mcp.test=127.0.0.1,evil.test=127.0.0.1"}}

CALL_REF = "tools__composio__github__GET_THE_AUTHENTICATED_USER__github-tvn"


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
    return run(ctx, req)


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


def test_tools_work_in_a_sandbox_without_network(ctx):
    """network "off": the sandbox reaches nothing, yet its tools run — the call crosses the
    keeper channel and the runner makes the request from the host."""
    CB.reset()
    res, evs = turn(ctx, [{"exec": "curl -s -m 2 -o /dev/null " + CB.endpoint + "; echo rc=$?"},
                          call("get_user", "n1"), {"chunk": " done"}],
                    tools=[callback_tool()], sandboxPermission={"network": {"mode": "off"}})
    assert res["ok"] is True and res["stopReason"] == "end_turn", res
    ex = [e for e in of(evs, "tool_result") if e["id"] == "exec"][0]
    rc = int(ex["output"].strip().rsplit("rc=", 1)[1])
    assert rc not in (0, 127), ex  # curl ran and could not connect
    [c] = CB.tool_calls(CALL_REF)
    assert c["headers"]["authorization"] == CB.authorization, c["headers"]
    tr = [e for e in of(evs, "tool_result") if e["id"] == "n1"][0]
    assert tr["isError"] is False, tr


WEATHER = {"name": "get_weather", "description": "Look up weather for a city",
           "inputSchema": {"type": "object", "properties": {"city": {"type": "string"},
                                                            "description": {"type": "string"}}},
           "kind": "callback", "ephemeralArgs": ["description"],
           "call": {"method": "POST", "path": "/api/workflows/invoke",
                    "body": {"references": {"workflow_revision": {"id": "rev_abc123"}}},
                    "args_into": "data.inputs",
                    "context": {"meta.variant": "$ctx.workflow.variant.id",
                                "meta.session": "$ctx.session.id"}}}


def test_direct_call_fills_ctx_tokens_and_args_into(ctx):
    CB.reset()
    p, s = ids()
    res, evs = turn(ctx, [call("get_weather", "w1", city="Oslo", description="why I call")],
                    tools=[WEATHER], p=p, s=s)
    assert res["ok"] is True, res
    [d] = CB.direct_calls(path="/api/workflows/invoke")
    assert d["method"] == "POST", d
    assert d["headers"]["authorization"] == CB.authorization, d["headers"]
    # args at data.inputs (minus the ephemeral one), the fixed body, the $ctx bindings
    assert d["body"] == {"references": {"workflow_revision": {"id": "rev_abc123"}},
                         "data": {"inputs": {"city": "Oslo"}},
                         "meta": {"variant": "var_abc", "session": s}}, d["body"]
    [tr] = of(evs, "tool_result")
    assert tr["isError"] is False and "/api/workflows/invoke" in tr["output"], tr
    ctx.stack.ctl("kill", f"{p}:{s}")


def test_callback_500_and_timeout_are_tool_errors_and_the_turn_goes_on(ctx):
    CB.reset()
    CB.script_tool("tools__fail", {"http_status": 500})
    CB.script_tool("tools__slow", {"delay": 14})
    res, evs = turn(ctx, [call("fails", "f1"), call("slow", "s1"), {"chunk": " still here"}],
                    tools=[callback_tool("fails", "tools__fail"),
                           callback_tool("slow", "tools__slow", timeoutMs=1)])
    assert res["ok"] is True and res["stopReason"] == "end_turn", res
    tr = {e["id"]: e for e in of(evs, "tool_result")}
    assert tr["f1"]["isError"] is True and "500" in tr["f1"]["output"], tr["f1"]
    assert tr["s1"]["isError"] is True and "tim" in tr["s1"]["output"].lower(), tr["s1"]
    assert "tool fails error: " in res["output"] and "tool slow error: " in res["output"], res
    assert res["output"].endswith(" still here"), res["output"]
    assert not of(evs, "error"), evs


def test_a_large_result_is_capped_with_the_note(ctx):
    CB.reset()
    CB.script_tool("tools__big", {"size": 150000})
    res, evs = turn(ctx, [call("big", "b1")], tools=[callback_tool("big", "tools__big")])
    [tr] = of(evs, "tool_result")
    assert tr["isError"] is False, tr
    assert len(tr["output"].encode()) <= 100000, len(tr["output"])
    assert "bytes omitted]" in tr["output"] and "Narrow" in tr["output"], tr["output"][-300:]
    assert tr["output"].startswith("<<BEGIN:"), tr["output"][:40]


def test_render_hints_and_a_denied_tool(ctx):
    CB.reset()
    render = {"kind": "component", "component": "UserCard"}
    res, evs = turn(ctx, [call("get_user", "u1"), call("nope", "n1"), {"chunk": " ok"}],
                    tools=[callback_tool(render=render),
                           callback_tool("nope", "tools__nope", permission="deny")])
    assert res["ok"] is True and res["stopReason"] == "end_turn", res
    tc = {e["id"]: e for e in of(evs, "tool_call")}
    tr = {e["id"]: e for e in of(evs, "tool_result")}
    assert tc["u1"]["render"] == render and tr["u1"]["render"] == render, (tc, tr)
    assert tr["n1"]["denied"] is True and tr["n1"]["isError"] is True, tr["n1"]
    assert tr["n1"]["output"] == "Tool 'nope' is denied by policy.", tr["n1"]
    assert not CB.tool_calls("tools__nope"), "a denied tool was called"
    assert "tool nope error: Tool 'nope' is denied by policy." in res["output"], res


def paused(ctx, steps, tools, **extra):
    p, s = ids()
    first = [{"role": "user", "content": script(steps)}]
    res, evs = turn(ctx, None, tools, p, s, messages=first, **extra)
    assert res["ok"] is True and res["stopReason"] == "paused", res
    reqs = of(evs, "interaction_request")
    assert len(reqs) == 1, reqs
    sess = ctx.stack.session(f"{p}:{s}")
    assert sess["state"] == "awaiting_approval", sess
    return p, s, first, reqs[0], sess, res


def test_ask_parks_and_approve_runs_the_call_on_the_same_process(ctx):
    CB.reset()
    p, s, first, req, sess, res = paused(
        ctx, [{"pid": True}, call("get_user", "a1"), {"pid": True}],
        [callback_tool(permission="ask")])
    assert req["kind"] == "user_approval" and req["payload"]["toolCallId"] == "a1", req
    assert req["payload"]["toolCall"]["resolvedName"] == "get_user", req
    assert req["payload"]["availableReplies"] == ["once", "reject"], req
    assert not CB.tool_calls(CALL_REF), "ran before approval"
    before_pid = res["output"]
    res, evs = turn(ctx, None, [callback_tool(permission="ask")], p, s,
                    messages=first + [answer("a1", True, req["id"])])
    assert res["ok"] is True and res["stopReason"] == "end_turn", res
    assert of(evs, "interaction_response")[0]["payload"] == {"approved": True,
                                                            "toolCallId": "a1"}, evs
    [c] = CB.tool_calls(CALL_REF)
    assert c["body"]["data"]["id"] == "a1", c
    [tr] = of(evs, "tool_result")
    assert tr["id"] == "a1" and tr["isError"] is False, tr
    after = ctx.stack.session(f"{p}:{s}")
    assert after["keeperPid"] == sess["keeperPid"], (sess, after)
    # the same agent process went on: the tool's answer, then the pid it printed before
    assert before_pid.startswith("pid:"), before_pid
    assert res["output"].startswith("tool get_user: ") and res["output"].endswith(before_pid), \
        res["output"]
    ctx.stack.ctl("kill", f"{p}:{s}")


def test_ask_then_deny_never_calls_the_tool(ctx):
    CB.reset()
    tools = [callback_tool(permission="ask")]
    p, s, first, req, sess, _ = paused(ctx, [call("get_user", "a2"), {"chunk": " went on"}],
                                       tools)
    res, evs = turn(ctx, None, tools, p, s, messages=first + [answer("a2", False, req["id"])])
    assert res["ok"] is True and res["stopReason"] == "end_turn", res
    [tr] = of(evs, "tool_result")
    assert tr["denied"] is True and tr["isError"] is True, tr
    assert not CB.tool_calls(CALL_REF)
    assert res["output"].endswith(" went on"), res
    ctx.stack.ctl("kill", f"{p}:{s}")


CLIENT = {"name": "pick_color", "description": "Let the user pick a color in the browser",
          "inputSchema": {"type": "object", "properties": {"palette": {"type": "string"}}},
          "kind": "client", "render": {"kind": "component", "component": "ColorPicker"}}


def test_client_tool_pauses_and_resumes_with_the_browser_result(ctx):
    p, s, first, req, sess, _ = paused(
        ctx, [call("pick_color", "cc1", palette="warm"), {"chunk": " thanks"}], [CLIENT])
    assert req["kind"] == "client_tool", req
    pl = req["payload"]
    assert pl["toolCallId"] == "cc1" and pl["toolName"] == "pick_color", pl
    assert pl["input"] == {"palette": "warm"} and pl["render"] == CLIENT["render"], pl
    browser = {"role": "user", "content": [{"type": "tool_result", "toolCallId": "cc1",
                                            "toolName": "pick_color",
                                            "output": {"color": "#ff8800"}}]}
    res, evs = turn(ctx, None, [CLIENT], p, s, messages=first + [browser])
    assert res["ok"] is True and res["stopReason"] == "end_turn", res
    assert 'tool pick_color: {"color":"#ff8800"}' in res["output"], res["output"]
    assert res["output"].endswith(" thanks"), res["output"]
    [tr] = of(evs, "tool_result")
    assert tr["id"] == "cc1" and tr["isError"] is False, tr
    after = ctx.stack.session(f"{p}:{s}")
    assert after["keeperPid"] == sess["keeperPid"], (sess, after)
    ctx.stack.ctl("kill", f"{p}:{s}")


def test_client_tool_result_after_the_session_is_gone_replays_cold(ctx):
    p, s, first, req, sess, _ = paused(ctx, [call("pick_color", "cc2", palette="cold")],
                                       [CLIENT])
    ctx.stack.ctl("kill", f"{p}:{s}")
    history = first + [{"role": "assistant", "content": [
        {"type": "tool_call", "toolCallId": "cc2", "toolName": "pick_color",
         "input": {"palette": "cold"}}]},
        {"role": "user", "content": [{"type": "tool_result", "toolCallId": "cc2",
                                      "toolName": "pick_color", "output": {"color": "#0044ff"}}]}]
    res, evs = turn(ctx, None, [CLIENT], p, s, messages=history)
    assert res["ok"] is True, res
    # the scripted agent echoes a cold replay: the browser's result is in it
    assert "#0044ff" in res["output"] and "Conversation so far" in res["output"], res["output"]
    ctx.stack.ctl("kill", f"{p}:{s}")


DOCS = MCP.add_server("docs", tools=[
    {"name": "search", "description": "Search the docs",
     "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}},
                     "required": ["q"]}},
    {"name": "delete_all", "description": "Delete every doc"}])


def mcp_config(server=DOCS, host="mcp.test", **policy):
    return server.config(url=server.url_for(host), **policy)


def test_mcp_tool_is_listed_and_called_with_its_header_credential(ctx):
    MCP.reset()
    res, evs = turn(ctx, [{"exec": "cat /home/agent/.agent-runner/tools.json"},
                          call("docs__search", "m1", q="warm sessions")],
                    mcpServers=[mcp_config()])
    assert res["ok"] is True, res
    tools = json.loads(of(evs, "tool_result")[0]["output"])
    assert sorted(t["name"] for t in tools) == ["docs__delete_all", "docs__search"], tools
    assert all(set(t) <= {"name", "description", "inputSchema"} for t in tools), tools
    calls = DOCS.calls("tools/call")
    assert len(calls) == 1, calls
    assert calls[0]["headers"][DOCS.header_name] == DOCS.header_value, calls[0]["headers"]
    assert calls[0]["tool"] == "search" and calls[0]["arguments"] == {"q": "warm sessions"}, calls
    tr = [e for e in of(evs, "tool_result") if e["id"] == "m1"][0]
    assert tr["isError"] is False, tr
    assert json.loads(tr["output"]) == {"tool": "search", "arguments": {"q": "warm sessions"}}, tr
    assert "tool docs__search: " in res["output"], res["output"]


def test_mcp_include_list_filters_and_server_permission_applies(ctx):
    MCP.reset()
    res, evs = turn(ctx, [{"exec": "cat /home/agent/.agent-runner/tools.json"},
                          call("docs__delete_all", "m2"), call("docs__search", "m3", q="x"),
                          {"chunk": " end"}],
                    mcpServers=[mcp_config(mode="include", names=["search"],
                                           permission="deny")])
    assert res["ok"] is True and res["stopReason"] == "end_turn", res
    tools = json.loads(of(evs, "tool_result")[0]["output"])
    assert [t["name"] for t in tools] == ["docs__search"], tools
    tr = {e["id"]: e for e in of(evs, "tool_result")}
    assert tr["m2"]["isError"] is True and "no tool named" in tr["m2"]["output"], tr["m2"]
    assert tr["m3"]["denied"] is True, tr["m3"]
    assert not DOCS.calls("tools/call"), "a filtered or denied tool reached the server"


def test_mcp_missing_required_argument_is_a_tool_error(ctx):
    MCP.reset()
    res, evs = turn(ctx, [call("docs__search", "m4")], mcpServers=[mcp_config()])
    [tr] = [e for e in of(evs, "tool_result") if e["id"] == "m4"]
    assert tr["isError"] is True and "missing required argument" in tr["output"], tr
    assert not DOCS.calls("tools/call")


def test_mcp_ssrf_cases_are_refused_naming_the_server(ctx):
    port = MCP.port
    cases = {
        "http": f"http://mcp-plain.example:{port}/mcp/docs",
        "localhost": f"https://localhost:{port}/mcp/docs",
        "private": "https://10.1.2.3/mcp/docs",
        "metadata": "https://169.254.169.254/latest/meta-data",
        "rebound": f"https://evil.test:{port}/mcp/docs",
    }
    for case, url in cases.items():
        MCP.reset()
        cfg = DOCS.config(url=url)
        cfg["name"] = "srv_" + case
        res, evs = turn(ctx, [call("x", "s1")], mcpServers=[cfg])
        assert res["ok"] is False, (case, res)
        assert f'"srv_{case}"' in res["error"], (case, res["error"])
        err = of(evs, "error")
        assert err and f'"srv_{case}"' in err[0]["message"], (case, evs)
        assert DOCS.header_value not in res["error"], case
        assert not MCP.calls(), (case, MCP.calls())


def test_warm_session_keeps_its_tools_and_takes_a_rotated_authorization(ctx):
    CB.reset()
    p, s = ids()
    tools = [callback_tool()]
    res, _ = turn(ctx, [call("get_user", "w1")], tools, p, s)
    assert res["ok"] is True, res
    first = ctx.stack.session(f"{p}:{s}")
    rotated = "Access cb-rotated-" + uuid.uuid4().hex[:8]
    CB.set_authorization(rotated)
    # a follow-up carries the new message only (as Agenta's platform sends it)
    req_cb = {"endpoint": CB.endpoint, "authorization": rotated}
    res, evs = turn(ctx, [call("get_user", "w2")], tools, p, s, toolCallback=req_cb)
    assert res["ok"] is True, res
    again = ctx.stack.session(f"{p}:{s}")
    assert again["keeperPid"] == first["keeperPid"], "a rotated authorization tore it down"
    calls = CB.tool_calls(CALL_REF)
    assert [c["headers"]["authorization"] for c in calls] == [CB.initial_authorization,
                                                              rotated], calls
    # another tool set is another environment
    res, _ = turn(ctx, None, tools + [callback_tool("other", "tools__other")], p, s,
                  messages=[{"role": "user", "content": "hello"}], toolCallback=req_cb)
    assert res["ok"] is True, res
    assert ctx.stack.session(f"{p}:{s}")["keeperPid"] != first["keeperPid"]
    assert ctx.stack.recent_reason(f"{p}:{s}") == "runtime-incompatible"
    ctx.stack.ctl("kill", f"{p}:{s}")
    CB.reset()


def test_warm_session_takes_a_rotated_mcp_credential(ctx):
    MCP.reset()
    p, s = ids()
    srv = MCP.add_server("rot", tools=["lookup"])
    res, _ = turn(ctx, [call("rot__lookup", "r1")], p=p, s=s,
                  mcpServers=[mcp_config(srv)])
    assert res["ok"] is True and "tool rot__lookup: " in res["output"], res
    first = ctx.stack.session(f"{p}:{s}")
    srv2 = MCP.add_server("rot", tools=["lookup"])  # the same server, a new credential
    assert srv2.header_value != srv.header_value
    res, _ = turn(ctx, [call("rot__lookup", "r2")], p=p, s=s, mcpServers=[mcp_config(srv2)])
    assert res["ok"] is True and "tool rot__lookup: " in res["output"], res
    assert ctx.stack.session(f"{p}:{s}")["keeperPid"] == first["keeperPid"]
    calls = srv2.calls("tools/call")
    assert calls[-1]["headers"][srv2.header_name] == srv2.header_value, calls
    ctx.stack.ctl("kill", f"{p}:{s}")


API = FakeAgentaApi(os.path.join(FAKES, "api"))


def sandbox_scan(secrets):
    """A shell step that looks for the secrets everywhere the sandbox can read: its files, every
    process's environment and command line. The values are sent reversed (`rev` turns them
    back inside), so the prompt itself never carries a credential into the sandbox. A canary
    written first proves the scan finds what is there."""
    canary = "canary-" + uuid.uuid4().hex
    secrets = list(secrets) + [canary]
    pats = " ".join(f"-e \"$(printf %s '{v[::-1]}' | rev)\"" for v in secrets)
    return {"exec": f"printf %s \"$(printf %s '{canary[::-1]}' | rev)\" > /tmp/canary.txt; "
                    f"grep -rIl {pats} /home /tmp /workspace /run /etc 2>/dev/null; "
                    f"for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do "
                    f"tr '\\0' '\\n' < $f 2>/dev/null | grep -q -F {pats} && echo $f; done; "
                    f"echo scanned"}


def host_scan(root, secrets):
    """Files under root (the runner's state: environment folders, parked calls) holding any of
    the secrets, read as bytes."""
    hits = []
    for d, _, files in os.walk(root):
        for n in files:
            path = os.path.join(d, n)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            hits += [f"{path}: {v[:6]}..." for v in secrets if v.encode() in data]
    return hits


def test_no_tool_credential_in_the_sandbox_logs_or_spans(ctx):
    """The callback authorization and an MCP header credential, both used in the turn, appear
    nowhere in the sandbox (environment of every process, command lines, files), in the
    runner's state folder on the host (with a call parked for approval), in the runner log or
    in the exported spans."""
    CB.reset()
    MCP.reset()
    p, s = ids()
    secrets = [CB.authorization, DOCS.header_value]
    tools = [callback_tool(), callback_tool("ask_me", "tools__ask", permission="ask")]
    res, evs = turn(ctx, [
        {"env": True}, sandbox_scan(secrets),
        call("get_user", "g1"), call("docs__search", "g2", q="creds"), call("ask_me", "g3", reason="parked-arg")],
        tools=tools, p=p, s=s, mcpServers=[mcp_config()], telemetry={
            "capture": {"content": {"enabled": True}},
            "exporters": {"otlp": {"endpoint": API.otlp_endpoint,
                                   "headers": {"authorization": API.credential}}}})
    assert res["ok"] is True and res["stopReason"] == "paused", res
    env_dump = res["output"]
    assert "RUNNER_TOOLS_FILE=/home/agent/.agent-runner/tools.json" in env_dump, env_dump
    scan = [e for e in of(evs, "tool_result") if e["id"] == "exec"][0]["output"]
    assert scan.split() == ["/tmp/canary.txt", "scanned"], scan
    # both calls really carried their credentials
    assert CB.tool_calls(CALL_REF)[0]["headers"]["authorization"] == CB.authorization
    assert DOCS.calls("tools/call")[0]["headers"][DOCS.header_name] == DOCS.header_value
    # the parked call's arguments are in the environment folder, its credential is not
    assert ctx.stack.session(f"{p}:{s}")["state"] == "awaiting_approval"
    parked = [os.path.join(d, n) for d, _, fs in os.walk(ctx.stack.state) for n in fs
              if os.path.basename(d) == "calls" and n.endswith(".json")]
    assert len(parked) == 1, parked
    with open(parked[0]) as f:
        assert "parked-arg" in f.read()  # the call's arguments, kept for the approval
    assert host_scan(ctx.stack.state, secrets) == []
    log = ctx.stack.log_text()
    for v in secrets:
        assert v not in env_dump and v not in log, v[:10]
    traces = wait_for_traces()
    text = json.dumps(traces)
    for v in secrets:
        assert v not in text, v[:10]
    assert "execute_tool get_user" in text and "execute_tool docs__search" in text, \
        text[:2000]
    ctx.stack.ctl("kill", f"{p}:{s}")


def wait_for_traces():
    from stack import wait_for
    return wait_for(lambda: API.traces(), timeout=20, what="exported trace")
