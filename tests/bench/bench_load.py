"""Row 10 of `make bench`: a cold turn of a long pi conversation, its history loaded into pi's
own kept session (ACP session/load, README "Sessions": kept harness state) vs replayed as text.

For each of n sessions: a 20-turn pi conversation against tests/fixtures/fake_model.py, every
other turn with a bash tool call (its output in the history), warm turn after turn; then the
environment ends and the 20th user message comes again twice, cold both times, with the same
request: once with the session's kept state (`/kill` with environmentOnly: resume "load"), once
without it (`/kill`: resume "replay"). Measured: the time to the first message_delta of each
cold turn, and the prompt tokens of its first model request as the fake model counts them
(words of every string of the messages).
"""

import json
import statistics
import time
import uuid

import stack
from turns import pi_request

TURNS = 20


def _turn_script(model, name, i):
    if i % 2:
        steps = [{"tool": {"name": "bash", "arguments": {"command": f"seq 1 {20 + i}"}}},
                 {"text": f"Counted to {20 + i}. Noted as step {i}."}]
    else:
        steps = [{"text": f"Noted: item {i} is the word w{i}-{name}."}]
    model.script(f"{name}-{i}", steps)


def _body(model, p, s, history):
    req = pi_request(model, "", projectId=p, sessionId=s, permissions={"default": "allow"})
    req["messages"] = history
    return req


def _stream(conn, body):
    """(seconds to the first message_delta, result, environment_ready data, tool calls)."""
    h = {"content-type": "application/json", "accept": "application/x-ndjson",
         "authorization": "Bearer " + stack.TOKEN}
    t0 = time.monotonic()
    conn.request("POST", "/run", body=json.dumps(body), headers=h)
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:300]!r}")
    first, result, ready, calls = None, None, {}, []
    while True:
        line = r.readline()
        if not line:
            break
        rec = json.loads(line)
        ev = rec.get("event") or {}
        if first is None and ev.get("type") == "message_delta":
            first = time.monotonic() - t0
        if (ev.get("data") or {}).get("phase") == "environment_ready":
            ready = ev["data"]
        if ev.get("type") == "tool_call":
            calls.append(ev)
        if rec.get("kind") == "result":
            result = rec["result"]
    return first, result, ready, calls


def _conversation(model, conn):
    """One session's 19 warm turns; returns (project, session, history so far)."""
    p, s = "bench-load", "load-" + uuid.uuid4().hex[:8]
    name = "bl" + uuid.uuid4().hex[:6]
    history = []
    for i in range(1, TURNS):
        _turn_script(model, name, i)
        text = f"Step {i}: count or note as asked. [[script:{name}-{i}]]"
        history.append({"role": "user", "content": text})
        _, res, _, calls = _stream(conn, _body(model, p, s, history))
        if not res or res.get("ok") is not True:
            raise RuntimeError(f"turn {i} failed: {res}")
        blocks = [{"type": "tool_call", "toolCallId": c["id"], "toolName": c["name"],
                   "input": c.get("input") or {}} for c in calls]
        history.append({"role": "assistant",
                        "content": blocks + [{"type": "text", "text": res["output"]}]})
    return p, s, name, history


def measure(st, model, quick, log):
    n = 1 if quick else 3
    out = {"load": [], "replay": [], "load_tokens": [], "replay_tokens": []}
    conn = st.connection(300)
    conn.connect()
    try:
        for k in range(n):
            p, s, name, history = _conversation(model, conn)
            marker = f"Last step {uuid.uuid4().hex[:6]}"
            model.script(f"{name}-last", [{"text": "That was all of it."}])
            last = history + [{"role": "user", "content": f"{marker}: sum it up. "
                                                          f"[[script:{name}-last]]"}]
            for mode in ("load", "replay"):
                body = {"sessionId": s, "projectId": p}
                if mode == "load":
                    body["environmentOnly"] = True
                status, _, _ = st.request("POST", "/kill", body)
                if status != 200:
                    raise RuntimeError(f"/kill answered {status}")
                before = len(model.requests())
                first, res, ready, _ = _stream(conn, _body(model, p, s, last))
                if not res or res.get("ok") is not True or first is None:
                    raise RuntimeError(f"cold {mode} turn failed: {res}")
                if ready.get("resume") != mode:
                    raise RuntimeError(f"expected resume {mode}, got {ready}")
                tokens = [r["promptTokens"] for r in model.requests()[before:]
                          if r["path"].endswith("/chat/completions")][0]
                out[mode].append(first)
                out[mode + "_tokens"].append(tokens)
                log(f"  load {k + 1}/{n} {mode}: first delta {first * 1000:.0f} ms, "
                    f"prompt {tokens} tokens")
            st.request("POST", "/kill", {"sessionId": s, "projectId": p})
    finally:
        conn.close()
    return out


def rows(res, fmt_ms):
    ml, mr = statistics.median(res["load"]) * 1000, statistics.median(res["replay"]) * 1000
    tl, tr = statistics.median(res["load_tokens"]), statistics.median(res["replay_tokens"])
    return [
        ("10. cold turn of a 20-turn pi conversation, loaded (median)", f"{ml:.0f} ms", "—",
         f"{len(res['load'])} sessions; 19 warm turns (every other one a bash call), the "
         "environment ended (/kill environmentOnly), turn 20 cold: pi's kept session restored "
         "and opened with session/load; first message_delta; all: "
         + ", ".join(f"{x * 1000:.0f}" for x in res["load"]) + " ms; first model request "
         f"{tl:.0f} prompt tokens (fake model's count)",
         f"replay/load = {mr / ml:.2f}x"),
        ("10. the same turn, replayed as text (median)", f"{mr:.0f} ms", "—",
         "the same request after /kill (kept state removed): a new pi session and the "
         "conversation as one text message; all: "
         + ", ".join(f"{x * 1000:.0f}" for x in res["replay"]) + f" ms; {tr:.0f} prompt tokens",
         f"tokens replay/load = {tr / tl:.2f}x"),
    ]
