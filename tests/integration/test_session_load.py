"""Kept harness state (README "Sessions": kept harness state): a session's cold start gives the
harness its own conversation back with ACP session/load instead of a text replay, falls back to
the replay when the kept state is unusable, and the kept state belongs to its session only."""

import glob
import hashlib
import json
import os
import stat
import time
import uuid

from stack import wait_for
from turns import MODELS, harness_request, ids, of, pi_request, run

TTL_MS = 8000
STACK = {"workers": 2, "threads": 8,
         "env": {"AGENT_RUNNER_SPARES": "0",
                 "AGENT_RUNNER_SESSION_STATE_TTL_MS": str(TTL_MS)}}


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


def kept_path(ctx, p, s):
    """The store's file of session p:s (engine/session/kept.h: SHA-256 of the pool key)."""
    return os.path.join(ctx.stack.state, "kept", hashlib.sha256(f"{p}:{s}".encode()).hexdigest())


def decode_kept(data):
    """(meta, [(path, bytes)]) of a kept file, its digest checked."""
    header, rest = data.split(b"\n", 1)
    magic, version, digest = header.split(b" ")
    assert (magic, version) == (b"agent-runner-kept", b"1"), header
    assert hashlib.sha256(rest).hexdigest().encode() == digest, "digest"
    meta_line, rest = rest.split(b"\n", 1)
    meta, files = json.loads(meta_line), []
    for _ in range(meta["files"]):
        line, rest = rest.split(b"\n", 1)
        f = json.loads(line)
        files.append((f["path"], rest[:f["size"]]))
        assert rest[f["size"]:f["size"] + 1] == b"\n"
        rest = rest[f["size"] + 1:]
    assert rest == b""
    return meta, files


def encode_kept(meta, files):
    """A kept file with a correct digest (what the runner itself would have written)."""
    meta = dict(meta, files=len(files))
    body = json.dumps(meta).encode() + b"\n"
    for path, data in files:
        body += json.dumps({"path": path, "size": len(data)}).encode() + b"\n" + data + b"\n"
    return b"agent-runner-kept 1 " + hashlib.sha256(body).hexdigest().encode() + b"\n" + body


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


def test_a_warm_turn_keeps_the_state_up_to_date(ctx):
    """Turn 1 cold, turn 2 warm with a tool call, then the environment ends: turn 3 loads a
    session that holds turn 2's call and result (every turn saves, warm ones too)."""
    p, s = ids()
    tag = uuid.uuid4().hex[:8]
    ctx.model.script(f"one-{tag}", [{"text": f"hello {tag}"}])
    req = pi_request(ctx.model, f"Hi. [[script:one-{tag}]]", projectId=p, sessionId=s,
                     permissions={"default": "allow"})
    res1, _ = run(ctx, req)
    assert res1["ok"] is True, res1
    ctx.model.script(f"load-{tag}", [{"tool": {"name": "bash",
                                               "arguments": {"command": f"echo tool-out-{tag}"}}},
                                     {"text": f"ran it {tag}"}])
    warm = dict(req)
    warm["messages"] = req["messages"] + [
        {"role": "assistant", "content": res1["output"]},
        {"role": "user", "content": f"Run the echo. [[script:load-{tag}]]"}]
    res2, evs2 = run(ctx, warm)
    assert res2["ok"] is True and ctx.stack.session(f"{p}:{s}")["turns"] == 2, res2
    call_id = of(evs2, "tool_call")[0]["id"]
    kill(ctx, p, s, environment_only=True)
    ctx.model.script(f"second-{tag}", [{"text": f"second answer {tag}"}])
    nxt, _ = follow_up(warm, res2, call_id, tag, f"Third {tag}?")
    nxt["messages"] = warm["messages"] + nxt["messages"][1:]
    res3, evs3 = run(ctx, nxt)
    assert res3["ok"] is True and ready(evs3)["resume"] == "load", (res3, ready(evs3))
    assert structured_history(chat_requests_with(ctx, f"Third {tag}?")[0]["body"], tag)
    kill(ctx, p, s)


# -- claude and codex --------------------------------------------------------------------------

def harness_tool_turns(ctx, harness):
    """Turn 1 runs a shell command through the harness's own tool; the environment ends; turn 2
    starts cold. The first model request of turn 2, and turn 2's events."""
    p, s = ids()
    tag = uuid.uuid4().hex[:8]
    name = f"load-{harness}-{tag}"
    _, _, _, tool, args = MODELS[harness]
    ctx.model.script(name, [{"tool": {"name": tool, "arguments": args(f"echo tool-out-{tag}")}},
                            {"text": f"ran it {tag}"}])
    req = harness_request(ctx, harness, f"Run the echo. [[script:{name}]]", f"sk-{harness}-load",
                          projectId=p, sessionId=s, permissions={"default": "allow"})
    res, evs = run(ctx, req)
    assert res["ok"] is True, res
    assert ready(evs)["resume"] == "new", ready(evs)
    calls = of(evs, "tool_call")
    assert calls, evs
    kill(ctx, p, s, environment_only=True)
    name2 = f"second-{harness}-{tag}"
    ctx.model.script(name2, [{"text": f"second answer {tag}"}])
    nxt = dict(req)
    nxt["messages"] = [req["messages"][0],
                       {"role": "assistant", "content": [
                           {"type": "tool_call", "toolCallId": c["id"], "toolName": c["name"],
                            "input": c.get("input") or {}} for c in calls] +
                           [{"type": "text", "text": res["output"]}]},
                       {"role": "user", "content": f"What did {tag} print? [[script:{name2}]]"}]
    res2, evs2 = run(ctx, nxt)
    assert res2["ok"] is True, res2
    assert res2["output"].endswith(f"second answer {tag}"), res2
    seen = [r for r in ctx.model.requests() if f"What did {tag} print?" in json.dumps(r["body"])]
    assert seen, "turn 2 never reached the model"
    kill(ctx, p, s)
    return tag, seen[0]["body"], evs2


def test_claude_cold_turn_two_loads_its_own_session(ctx):
    tag, body, evs = harness_tool_turns(ctx, "claude")
    assert ready(evs)["resume"] == "load", ready(evs)
    text = json.dumps(body)
    blocks = [b for m in body["messages"] if isinstance(m.get("content"), list)
              for b in m["content"] if isinstance(b, dict)]
    assert any(b.get("type") == "tool_use" and f"echo tool-out-{tag}" in json.dumps(b.get("input"))
               for b in blocks), text[:3000]
    assert any(b.get("type") == "tool_result" and f"tool-out-{tag}" in json.dumps(b)
               for b in blocks), text[:3000]
    assert "Conversation so far" not in text


def test_codex_cold_turn_two_loads_its_own_session(ctx):
    tag, body, evs = harness_tool_turns(ctx, "codex")
    assert ready(evs)["resume"] == "load", ready(evs)
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    text = json.dumps(items)
    assert any(i.get("type") == "function_call" and f"echo tool-out-{tag}" in i.get("arguments", "")
               for i in items), text[:3000]
    assert any(i.get("type") == "function_call_output" and f"tool-out-{tag}" in json.dumps(i)
               for i in items), text[:3000]
    assert "Conversation so far" not in text



# -- fallbacks ---------------------------------------------------------------------------------

def spoil(ctx, p, s, how):
    path = kept_path(ctx, p, s)
    with open(path, "rb") as f:
        data = f.read()
    if how == "tamper":  # one byte of the session log changed, the digest left as it was
        i = data.rindex(b"tool-out-")
        data = data[:i] + b"T" + data[i + 1:]
    elif how == "truncate":
        data = data[:len(data) // 2]
    elif how == "unknown-session":  # whole and unaltered, but the harness cannot load it
        meta, files = decode_kept(data)
        data = encode_kept(dict(meta, acpSession="0" * 8 + "-0000-4000-8000-" + "0" * 12),
                           files)
    with open(path, "wb") as f:
        f.write(data)


def fallback_turn(ctx, how, note):
    p, s = ids()
    tag = uuid.uuid4().hex[:8]
    req, res, evs, call_id = tool_turn(ctx, p, s, tag)
    kill(ctx, p, s, environment_only=True)
    spoil(ctx, p, s, how)
    ctx.model.script(f"second-{tag}", [{"text": f"second answer {tag}"}])
    nxt, _ = follow_up(req, res, call_id, tag, f"Again {tag}?")
    res2, evs2 = run(ctx, nxt)
    # the turn works: the conversation is replayed as text, and the stream says why
    assert res2["ok"] is True, res2
    assert res2["output"] == f"second answer {tag}", res2
    info = ready(evs2)
    assert info["resume"] == "replay", info
    assert note in info.get("resumeNote", ""), info
    seen = chat_requests_with(ctx, f"Again {tag}?")
    assert seen and "Conversation so far" in json.dumps(seen[0]["body"]), seen
    # the turn kept a fresh state of its own
    meta, files = decode_kept(open(kept_path(ctx, p, s), "rb").read())
    assert files and meta["harness"] == "pi", meta
    kill(ctx, p, s)


def test_a_tampered_kept_state_falls_back_to_replay(ctx):
    fallback_turn(ctx, "tamper", "digest mismatch")


def test_a_truncated_kept_state_falls_back_to_replay(ctx):
    fallback_turn(ctx, "truncate", "digest mismatch")


def test_a_state_the_harness_cannot_load_replays_on_a_fresh_environment(ctx):
    fallback_turn(ctx, "unknown-session", "session/load")


def test_an_edited_conversation_is_not_loaded(ctx):
    p, s = ids()
    tag = uuid.uuid4().hex[:8]
    req, res, evs, call_id = tool_turn(ctx, p, s, tag)
    kill(ctx, p, s, environment_only=True)
    ctx.model.script(f"second-{tag}", [{"text": f"second answer {tag}"}])
    nxt, _ = follow_up(req, res, call_id, tag, "Go on.")
    nxt["messages"][0] = {"role": "user", "content": "An edited first message."}
    res2, evs2 = run(ctx, nxt)
    assert res2["ok"] is True, res2
    assert ready(evs2)["resume"] == "replay", ready(evs2)
    assert "conversation differs" in ready(evs2)["resumeNote"], ready(evs2)
    kill(ctx, p, s)


# -- other ways an environment ends ------------------------------------------------------------

def test_the_idle_window_ending_the_environment_keeps_the_state(ctx):
    p, s = ids()
    tag = uuid.uuid4().hex[:8]
    req, res, evs, call_id = tool_turn(ctx, p, s, tag,
                                       lifecycle={"mode": "warm", "idleTimeoutMs": 600})
    wait_for(lambda: ctx.stack.session(f"{p}:{s}") is None, timeout=15, what="idle expiry")
    assert ctx.stack.recent_reason(f"{p}:{s}") == "idle-expiry"
    ctx.model.script(f"second-{tag}", [{"text": f"second answer {tag}"}])
    nxt, _ = follow_up(req, res, call_id, tag, f"And then {tag}?")
    res2, evs2 = run(ctx, nxt)
    assert res2["ok"] is True and ready(evs2)["resume"] == "load", (res2, ready(evs2))
    assert structured_history(chat_requests_with(ctx, f"And then {tag}?")[0]["body"], tag)
    kill(ctx, p, s)


def test_a_per_turn_session_loads_every_turn(ctx):
    p, s = ids()
    tag = uuid.uuid4().hex[:8]
    req, res, evs, call_id = tool_turn(ctx, p, s, tag, lifecycle={"mode": "per_turn"})
    assert ctx.stack.session(f"{p}:{s}") is None  # nothing stays warm
    ctx.model.script(f"second-{tag}", [{"text": f"second answer {tag}"}])
    nxt, _ = follow_up(req, res, call_id, tag, f"Per turn {tag}?")
    res2, evs2 = run(ctx, nxt)
    assert res2["ok"] is True and ready(evs2)["resume"] == "load", (res2, ready(evs2))
    kill(ctx, p, s)


# -- security ----------------------------------------------------------------------------------

def test_the_kept_state_is_the_runners_own_and_holds_no_key(ctx):
    p, s = ids()
    tag = uuid.uuid4().hex[:8]
    key = f"sk-kept-{uuid.uuid4().hex}"
    req, res, evs, call_id = tool_turn(ctx, p, s, tag, key=key)
    path = kept_path(ctx, p, s)
    st, folder = os.stat(path), os.stat(os.path.dirname(path))
    assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
    assert stat.S_IMODE(folder.st_mode) == 0o700, oct(folder.st_mode)
    data = open(path, "rb").read()
    meta, files = decode_kept(data)
    # only pi's session log: never its models.json, settings, auth or key file
    assert [f for f, _ in files] and all(
        f.startswith(".pi/agent/sessions/") and f.endswith(".jsonl") for f, _ in files), files
    assert key.encode() not in data
    assert f"{p}:{s}".encode() not in data and s.encode() not in os.path.basename(path).encode()
    # another session's sandbox sees neither the store nor the restored files
    other_p, other_s = ids()
    name = f"snoop-{tag}"
    probe = (f"ls -la {ctx.stack.state}/kept 2>&1; cat {path} 2>&1 | head -c 200; "
             "find / -xdev -name '*.jsonl' 2>/dev/null | xargs cat 2>/dev/null | head -c 4000; "
             "cat /proc/*/root/home/agent/.pi/agent/sessions/*/*.jsonl 2>&1 | head -c 4000")
    ctx.model.script(name, [{"tool": {"name": "bash", "arguments": {"command": probe}}},
                            {"text": "looked"}])
    snoop = pi_request(ctx.model, f"Look around. [[script:{name}]]", projectId=other_p,
                       sessionId=other_s, permissions={"default": "allow"})
    res2, evs2 = run(ctx, snoop)
    assert res2["ok"] is True, res2
    out = json.dumps(of(evs2, "tool_result"))
    assert f"tool-out-{tag}" not in out and "agent-runner-kept" not in out, out
    kill(ctx, p, s)
    kill(ctx, other_p, other_s)
    assert not os.path.exists(path)


def test_a_conversation_holding_the_key_is_not_kept(ctx):
    # the key never enters the sandbox (the model gateway): what the agent echoes is the
    # placeholder, and that conversation is kept without the key
    p, s = ids()
    tag = uuid.uuid4().hex[:8]
    key = f"sk-echoed-{uuid.uuid4().hex}"
    name = f"leak-{tag}"
    ctx.model.script(name, [{"tool": {"name": "bash",
                                      "arguments": {"command": "echo $OPENAI_API_KEY"}}},
                            {"text": "printed it"}])
    req = pi_request(ctx.model, f"Print the key. [[script:{name}]]", key=key, projectId=p,
                     sessionId=s, permissions={"default": "allow"})
    res, evs = run(ctx, req)
    assert res["ok"] is True, res
    assert "agent-runner-model-gateway" in json.dumps(of(evs, "tool_result")), evs
    with open(kept_path(ctx, p, s), "rb") as f:
        assert key.encode() not in f.read()
    kill(ctx, p, s)
    # a key the user pasted into the conversation is in pi's log: nothing is kept
    p, s = ids()
    req = pi_request(ctx.model, f"My key is {key}, remember it.", key=key, projectId=p,
                     sessionId=s)
    res, evs = run(ctx, req)
    assert res["ok"] is True, res
    assert not os.path.exists(kept_path(ctx, p, s))
    assert "holds a credential of the run" in ctx.stack.log_text()
    assert key not in ctx.stack.log_text()
    kill(ctx, p, s)


def test_kept_states_expire_after_their_ttl(ctx):
    p, s = ids()
    tag = uuid.uuid4().hex[:8]
    tool_turn(ctx, p, s, tag)
    path = kept_path(ctx, p, s)
    assert os.path.exists(path)
    kill(ctx, p, s, environment_only=True)
    t0 = time.monotonic()
    wait_for(lambda: not os.path.exists(path), timeout=TTL_MS / 1000 * 3, what="the TTL sweep")
    # removed by the sweep, not before its TTL ran out
    assert time.monotonic() - t0 > TTL_MS / 1000 / 2
