"""Kept harness state (README "Sessions": kept harness state): a session's cold start gives the
harness its own conversation back with ACP session/load instead of a text replay, falls back to
the replay when the kept state is unusable, and the kept state belongs to its session only."""

import glob
import json
import os
import uuid

from stack import wait_for
from turns import ids, of, pi_request, run

STACK = {"workers": 2, "threads": 8, "env": {"AGENT_RUNNER_SPARES": "0"}}


def kill(ctx, p, s, environment_only=False):
    body = {"sessionId": s, "projectId": p}
    if environment_only:
        body["environmentOnly"] = True
    status, _, _ = ctx.stack.request("POST", "/kill", body)
    assert status == 200, status
    assert ctx.stack.session(f"{p}:{s}") is None


def ready(evs):
    """The data of the turn's environment_ready event."""
    return next(e["data"] for e in evs if e.get("type") == "data" and
                e.get("data", {}).get("phase") == "environment_ready")


def kept_files(ctx):
    return sorted(glob.glob(os.path.join(ctx.stack.state, "kept", "*")))


def chat_requests_with(ctx, marker):
    """The chat-completions requests whose last user message holds marker, in order."""
    out = []
    for r in ctx.model.requests():
        if not r["path"].endswith("/chat/completions"):
            continue
        users = [m for m in r["body"]["messages"] if m["role"] == "user"]
        if users and marker in json.dumps(users[-1]):
            out.append(r)
    return out


def tool_turn(ctx, p, s, tag, **extra):
    """Turn 1: the model calls bash (`echo tool-out-<tag>`), then answers. (request, result,
    events, the tool call's id)."""
    name = f"load-{tag}"
    ctx.model.script(name, [{"tool": {"name": "bash",
                                      "arguments": {"command": f"echo tool-out-{tag}"}}},
                            {"text": f"ran it {tag}"}])
    req = pi_request(ctx.model, f"Run the echo. [[script:{name}]]", projectId=p, sessionId=s,
                     permissions={"default": "allow"}, **extra)
    res, evs = run(ctx, req)
    assert res["ok"] is True, res
    assert res["output"] == f"ran it {tag}", res
    calls = of(evs, "tool_call")
    assert len(calls) == 1, calls
    return req, res, evs, calls[0]["id"]


def follow_up(req, res, call_id, tag, text):
    """Turn 2's request: turn 1 as the client holds it (the tool call and its result as content
    blocks of the assistant message), then a new user message."""
    name = f"second-{tag}"
    nxt = dict(req)
    nxt["messages"] = [
        req["messages"][0],
        {"role": "assistant", "content": [
            {"type": "tool_call", "toolCallId": call_id, "toolName": "bash",
             "input": {"command": f"echo tool-out-{tag}"}},
            {"type": "tool_result", "toolCallId": call_id, "output": f"tool-out-{tag}\n"},
            {"type": "text", "text": res["output"]}]},
        {"role": "user", "content": f"{text} [[script:{name}]]"}]
    return nxt, name


def structured_history(body, tag):
    """Whether a chat body carries turn 1's bash call and its result as messages of their own."""
    msgs = body["messages"]
    call = [m for m in msgs if m["role"] == "assistant" and any(
        f"echo tool-out-{tag}" in tc["function"]["arguments"] for tc in m.get("tool_calls") or [])]
    result = [m for m in msgs if m["role"] == "tool" and f"tool-out-{tag}" in json.dumps(m)]
    return bool(call) and bool(result)


def test_pi_cold_turn_two_loads_its_own_session(ctx):
    p, s = ids()
    tag = uuid.uuid4().hex[:8]
    req, res, evs, call_id = tool_turn(ctx, p, s, tag)
    assert ready(evs)["resume"] == "new", ready(evs)
    assert len(kept_files(ctx)) >= 1
    # the environment ends; the harness's kept state stays
    kill(ctx, p, s, environment_only=True)
    ctx.model.script(f"second-{tag}", [{"text": f"second answer {tag}"}])
    nxt, _ = follow_up(req, res, call_id, tag, "What did the tool print?")
    res2, evs2 = run(ctx, nxt)
    assert res2["ok"] is True, res2
    assert res2["output"] == f"second answer {tag}", res2
    assert ready(evs2)["resume"] == "load", ready(evs2)
    seen = chat_requests_with(ctx, "What did the tool print?")
    assert seen, "turn 2 never reached the model"
    first = seen[0]["body"]
    # turn 1's tool call and result reach the model as structured messages, not a replay
    assert structured_history(first, tag), json.dumps(first["messages"])[:3000]
    assert "Conversation so far" not in json.dumps(first), first
    kill(ctx, p, s)
    assert not kept_files(ctx)
