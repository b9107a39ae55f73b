"""What the integration test modules send and read, in one place (stdlib only): request
builders, turn drivers and readers of a turn's records. stack.py runs the stack; this module
knows the run request and the NDJSON records (tests/bench uses it too).

    status, recs = ctx.stack.stream(scripted_request(script([{"chunk": "hi"}])))
    res = result_of(recs)                                 # the one result record
    p, s = ids()                                          # a fresh projectId and sessionId
    req = harness_request(ctx, "codex", "hi [[script:x]]", "sk-x", projectId=p, sessionId=s)
    res, evs = run(ctx, req)                              # asserts the stream's 200
    denied = [e for e in of(evs, "tool_result") if e.get("denied")]
    seen = model_requests(ctx, "x")                       # what the fake model got for it

A command inside the sandbox, two ways (the scripted/pi pair most sandbox checks run):

    status, recs = ctx.stack.stream(exec_request("id -u"))          # scripted agent's exec
    status, recs = ctx.stack.stream(bash_request(ctx, "id -u"))     # real pi's bash tool
    out = tool_output(recs)
"""

import json
import threading
import uuid

# harness: (provider, key binding, base path under the fake model, shell tool name,
#           the shell tool's arguments for a command)
MODELS = {
    "pi_core": ("openai", "OPENAI_API_KEY", "/v1", "bash", lambda cmd: {"command": cmd}),
    "claude": ("anthropic", "ANTHROPIC_API_KEY", "", "Bash",
               lambda cmd: {"command": cmd, "description": "run it"}),
    "codex": ("openai", "OPENAI_API_KEY", "/v1", "exec_command", lambda cmd: {"cmd": cmd}),
    "opencode": ("openai", "OPENAI_API_KEY", "/v1", "bash",
                 lambda cmd: {"command": cmd, "description": "run it"}),
}


# --- ids and requests ---------------------------------------------------------------------

def script(steps):
    """A prompt the scripted agent (tests/fixtures/acp_scripted.c) plays as its steps."""
    return "SCRIPT:" + json.dumps(steps)


def scripted_request(prompt, **extra):
    req = {"harness": "scripted", "messages": [{"role": "user", "content": prompt}]}
    req.update(extra)
    return req


def ids(session_hex=8):
    """A fresh (projectId, sessionId) pair."""
    return "proj-" + uuid.uuid4().hex[:6], "sess-" + uuid.uuid4().hex[:session_hex]


def model_connection(provider, binding, base_url, key):
    """A custom endpoint whose API key reaches the harness as the environment variable binding."""
    return {"provider": provider, "deployment": "custom", "endpoint": {"baseUrl": base_url},
            "credentialMode": "env",
            "credentials": [{"binding": {"kind": "environment", "name": binding},
                             "value": key, "usage": "opaque_http"}]}


def pi_request(model, prompt, model_name="fake-model", key="sk-test", **extra):
    """A local pi run against the fake model (stack.FakeModel `model`)."""
    req = {
        "harness": "pi_core", "sandbox": "local", "model": model_name,
        "messages": [{"role": "user", "content": prompt}],
        "modelConnection": model_connection("openai", "OPENAI_API_KEY", model.base + "/v1", key)}
    req.update(extra)
    return req


def harness_request(ctx, harness, prompt, key, **extra):
    """A local run of a real harness (MODELS) against the fake model with API key `key`."""
    provider, binding, path, _, _ = MODELS[harness]
    req = {"harness": harness, "sandbox": "local", "model": "fake-model",
           "messages": [{"role": "user", "content": prompt}],
           "modelConnection": model_connection(provider, binding, ctx.model.base + path, key)}
    req.update(extra)
    return req


def named_model(ctx):
    """A modelConnection that names the fake model as the run's endpoint (no credential)."""
    return {"provider": "openai", "deployment": "custom",
            "endpoint": {"baseUrl": ctx.model.base + "/v1"}, "credentialMode": "none"}


def answer(call_id, approved, token=None, role="user"):
    """The message that answers a parked gate (with its interactionToken when given)."""
    out = {"approved": approved}
    if token:
        out["interactionToken"] = token
    return {"role": role, "content": [{"type": "tool_result", "toolCallId": call_id,
                                       "output": out}]}


def exec_request(cmd, **extra):
    """A scripted run whose agent runs the shell command cmd in the sandbox (its `exec` step)."""
    return scripted_request(script([{"exec": cmd}]), **extra)


def bash_request(ctx, cmd, prefix="bash", **extra):
    """A pi run whose model calls pi's bash tool with cmd once, then ends with "done <name>";
    the plan allows the call. The fake model's script is named <prefix>-<random>."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    ctx.model.script(name, [{"tool": {"name": "bash", "arguments": {"command": cmd}}},
                            {"text": "done " + name}])
    return pi_request(ctx.model, f"run it [[script:{name}]]", permissions={"default": "allow"},
                      **extra)


# --- running a turn and reading it --------------------------------------------------------

def events_of(records):
    """The events of a stream's [(arrival_s, record)], in order."""
    return [rec["event"] for _, rec in records if rec.get("kind") == "event"]


def result_of(records):
    """The result record's result; asserts there is exactly one and that it came last."""
    res = [rec["result"] for _, rec in records if rec.get("kind") == "result"]
    assert len(res) == 1, f"expected exactly one result record, got {len(res)}"
    assert records[-1][1]["kind"] == "result", "the result must be the last record"
    return res[0]


def run(ctx, req):
    """Stream req; asserts the 200 and returns (result, events)."""
    status, recs = ctx.stack.stream(req)
    assert status == 200, (status, recs)
    return result_of(recs), events_of(recs)


def of(evs, kind):
    """The events of one type."""
    return [e for e in evs if e["type"] == kind]


def tool_output(recs):
    """The first tool result's output ("" when there is none)."""
    outs = [e["output"] for e in events_of(recs) if e["type"] == "tool_result"]
    return outs[0] if outs else ""


def tool_outputs(recs):
    """Every tool result's output, one after the other."""
    return "\n".join(e["output"] for e in events_of(recs) if e["type"] == "tool_result")


# --- what the fake model saw --------------------------------------------------------------

def model_requests_with(ctx, marker):
    """The fake model's logged requests whose body contains marker."""
    return [r for r in ctx.model.requests() if marker in json.dumps(r["body"])]


def model_requests(ctx, name):
    """The fake model's logged requests of the model script `name` ([[script:name]])."""
    return model_requests_with(ctx, f"[[script:{name}]]")


def tool_results_seen_by_model(req):
    """What the model got back as tool results, from one logged request (any API)."""
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


def in_parallel(fn, n, join_s):
    """fn(i) for i in range(n), each on its own thread; waits up to join_s for each."""
    threads = [threading.Thread(target=fn, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_s)
