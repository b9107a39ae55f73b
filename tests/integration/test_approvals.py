"""Permission gates parked on live sessions and resumed; /cancel; client disconnects."""

import json
import os
import signal
import socket
import ssl
import threading
import time

from stack import TOKEN, wait_for
from turns import answer, ids, run, script

STACK = {"workers": 2, "threads": 8, "env": {"AGENT_RUNNER_APPROVAL_TTL_MS": "2500"}}

GATE = {"toolCallId": "w1", "title": "Write file", "kind": "edit", "input": {"path": "a.txt"}}


def turn(ctx, p, s, messages, **extra):
    req = {"harness": "scripted", "projectId": p, "sessionId": s, "messages": messages,
           "permissions": {"default": "allow_reads"}}
    req.update(extra)
    return run(ctx, req)


def paused_turn(ctx, steps):
    p, s = ids()
    first = [{"role": "user", "content": script(steps)}]
    res, evs = turn(ctx, p, s, first)
    assert res["ok"] is True and res["stopReason"] == "paused", res
    assert evs[-1]["type"] == "done" and evs[-1]["stopReason"] == "paused", evs[-1]
    assert len(evs[-1]["traceId"]) == 32, evs[-1]
    reqs = [e for e in evs if e["type"] == "interaction_request"]
    sess = ctx.stack.session(f"{p}:{s}")
    assert sess["state"] == "awaiting_approval", sess
    return p, s, first, reqs, sess


def test_policy_table_lets_reads_through_and_denies_on_deny(ctx):
    p, s = ids()
    steps = [{"permission": {"toolCallId": "r1", "title": "Read", "kind": "read"}},
             {"chunk": "read done"}]
    res, evs = turn(ctx, p, s, [{"role": "user", "content": script(steps)}])
    assert res["stopReason"] == "end_turn" and res["output"] == "read done", res
    ctx.stack.ctl("kill", f"{p}:{s}")
    p, s = ids()
    res, evs = turn(ctx, p, s, [{"role": "user", "content": script([{"permission": GATE}])}],
                    permissions={"default": "ask", "rules": [{"pattern": "Write file",
                                                              "permission": "deny"}]})
    tr = next(e for e in evs if e["type"] == "tool_result")
    assert tr["denied"] is True and tr["isError"] is True, tr
    assert res["stopReason"] == "end_turn"
    ctx.stack.ctl("kill", f"{p}:{s}")


def test_park_and_resume_with_allow_on_the_same_process(ctx):
    p, s, first, reqs, sess = paused_turn(ctx, [{"chunk": "before"}, {"permission": GATE},
                                                {"pid": True}, {"chunk": " after"}])
    assert len(reqs) == 1 and reqs[0]["kind"] == "user_approval", reqs
    payload = reqs[0]["payload"]
    assert payload["toolCallId"] == "w1" and payload["interactionToken"]
    assert {o["kind"] for o in payload["options"]} >= {"allow_once", "reject_once"}
    keeper = sess["keeperPid"]
    msgs = first + [{"role": "assistant", "content": "before"},
                    answer("w1", True, payload["interactionToken"])]
    res, evs = turn(ctx, p, s, msgs)
    assert evs[2]["type"] == "interaction_response", [e["type"] for e in evs]
    assert evs[2]["payload"] == {"approved": True, "toolCallId": "w1"}
    tr = next(e for e in evs if e["type"] == "tool_result")
    assert tr["output"] == "approved:allow-once" and not tr.get("denied"), tr
    assert res["stopReason"] == "end_turn" and res["output"].endswith(" after"), res
    sess = ctx.stack.session(f"{p}:{s}")
    assert sess["keeperPid"] == keeper and sess["state"] == "idle", sess
    ctx.stack.ctl("kill", f"{p}:{s}")


def test_resume_with_deny_marks_the_result_denied(ctx):
    p, s, first, reqs, _ = paused_turn(ctx, [{"permission": GATE}, {"chunk": "went on"}])
    res, evs = turn(ctx, p, s, first + [answer("w1", False)])
    tr = next(e for e in evs if e["type"] == "tool_result")
    assert tr["denied"] is True and tr["output"] == "denied", tr
    assert res["output"] == "went on" and res["stopReason"] == "end_turn"
    ctx.stack.ctl("kill", f"{p}:{s}")


def test_two_gates_answered_one_at_a_time(ctx):
    g2 = dict(GATE, toolCallId="w2", title="Write other")
    p, s, first, reqs, sess = paused_turn(ctx, [{"permissions": [GATE, g2]},
                                                {"chunk": "both done"}])
    assert sorted(r["payload"]["toolCallId"] for r in reqs) == ["w1", "w2"], reqs
    # each interaction's id is its token (Agenta's interactionEventId)
    assert all(r["id"] == r["payload"]["interactionToken"] for r in reqs), reqs
    res, evs = turn(ctx, p, s, first + [answer("w1", True)])
    assert res["stopReason"] == "paused", res
    types = [e["type"] for e in evs]
    assert types.count("interaction_response") == 1 and "interaction_request" in types, types
    again = next(e for e in evs if e["type"] == "interaction_request")
    assert again["payload"]["toolCallId"] == "w2", again
    assert again["id"] == next(r["id"] for r in reqs if r["payload"]["toolCallId"] == "w2")
    w1 = next(e for e in evs if e["type"] == "tool_result")
    assert w1["id"] == "w1" and w1["output"] == "approved:allow-once", w1
    assert ctx.stack.session(f"{p}:{s}")["approvals"] == 1
    res, evs = turn(ctx, p, s, first + [answer("w1", True), answer("w2", False)])
    assert res["stopReason"] == "end_turn" and res["output"] == "both done", res
    results = {e["id"]: e for e in evs if e["type"] == "tool_result"}
    assert list(results) == ["w2"] and results["w2"]["denied"] is True, results
    assert ctx.stack.session(f"{p}:{s}")["keeperPid"] == sess["keeperPid"]
    ctx.stack.ctl("kill", f"{p}:{s}")


def test_resume_after_the_parking_worker_was_killed(ctx):
    p, s, first, reqs, sess = paused_turn(ctx, [{"permission": GATE}, {"chunk": "resumed"}])
    old = set(ctx.stack.worker_pids())
    for w in old:
        os.kill(w, signal.SIGKILL)
    wait_for(lambda: len(ctx.stack.worker_pids()) == 2 and
             not (set(ctx.stack.worker_pids()) & old), what="respawned workers")
    res, evs = turn(ctx, p, s, first + [answer("w1", True)])
    assert res["output"] == "resumed" and res["stopReason"] == "end_turn", res
    assert ctx.stack.session(f"{p}:{s}")["keeperPid"] == sess["keeperPid"]
    ctx.stack.ctl("kill", f"{p}:{s}")


def test_approval_ttl_expiry_falls_back_to_a_cold_replay(ctx):
    p, s, first, reqs, sess = paused_turn(ctx, [{"permission": GATE}, {"chunk": "never"}])
    key = f"{p}:{s}"
    wait_for(lambda: ctx.stack.session(key) is None, timeout=10, what="approval expiry")
    assert ctx.stack.recent_reason(key) == "approval-expiry"
    res, evs = turn(ctx, p, s, first + [answer("w1", True)])
    assert res["ok"] is True, res
    # a new agent process got the conversation and the decision as text
    assert res["output"].startswith("echo[1]: Conversation so far:"), res["output"]
    assert "[user APPROVED" in res["output"] and "NOT run yet" in res["output"], res["output"]
    ctx.stack.ctl("kill", key)


def test_cancel_stops_a_running_turn_and_keeps_it_warm(ctx):
    p, s = ids()
    key = f"{p}:{s}"
    res, _ = turn(ctx, p, s, [{"role": "user", "content": "warm up"}])
    keeper = wait_for(lambda: ctx.stack.session(key), what="parked")["keeperPid"]
    holder = {}
    msgs = [{"role": "user", "content": "warm up"}, {"role": "assistant", "content": res["output"]},
            {"role": "user", "content": script([{"chunk": "working"},
                                                {"tool": {"id": "t9", "title": "x"}},
                                                {"wait_cancel": True}])}]

    def run():
        holder["r"] = turn(ctx, p, s, msgs)

    t = threading.Thread(target=run)
    t.start()
    wait_for(lambda: (ctx.stack.session(key) or {}).get("state") == "busy", what="busy")
    time.sleep(0.2)
    status, _, body = ctx.stack.request("POST", "/cancel", {"sessionId": s, "projectId": p})
    assert status == 202 and body == {"ok": True}, (status, body)
    t.join(20)
    res2, evs = holder["r"]
    assert res2["ok"] is True and res2["stopReason"] == "cancelled", res2
    assert evs[-1]["stopReason"] == "cancelled"
    sess = wait_for(lambda: ctx.stack.session(key), what="still parked")
    assert sess["keeperPid"] == keeper and sess["state"] == "idle", sess
    # the same agent process takes the next turn
    # a faithful transcript names the turn's tool calls
    msgs2 = msgs + [{"role": "assistant", "content": [
                        {"type": "text", "text": res2["output"]},
                        {"type": "tool_call", "toolCallId": "t9", "toolName": "x", "input": {}}]},
                    {"role": "user", "content": "after cancel"}]
    res3, _ = turn(ctx, p, s, msgs2)
    assert res3["output"] == "echo[3]: after cancel", res3
    ctx.stack.ctl("kill", key)


def test_cancel_answers_parked_gates_and_unknown_sessions_are_404(ctx):
    p, s, first, reqs, sess = paused_turn(ctx, [{"permission": GATE}, {"chunk": "never"}])
    status, _, body = ctx.stack.request("POST", "/cancel", {"sessionId": s, "projectId": p})
    assert status == 202, (status, body)
    after = ctx.stack.session(f"{p}:{s}")
    assert after["state"] == "idle" and after["keeperPid"] == sess["keeperPid"], after
    status, _, body = ctx.stack.request("POST", "/cancel", {"sessionId": "nope", "projectId": p})
    assert status == 404 and body == {"ok": False, "error": "session not held here"}
    ctx.stack.ctl("kill", f"{p}:{s}")


def raw_stream_then_hang_up(ctx, body):
    """Start an NDJSON run, read until the first message delta, then drop the connection."""
    ctx_ssl = ssl.create_default_context()
    ctx_ssl.check_hostname = False
    ctx_ssl.verify_mode = ssl.CERT_NONE
    raw = socket.create_connection(("127.0.0.1", ctx.stack.port))
    sock = ctx_ssl.wrap_socket(raw)
    data = json.dumps(body).encode()
    sock.sendall(b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Accept: application/x-ndjson\r\nAuthorization: Bearer " + TOKEN.encode() +
                 b"\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    seen = b""
    while b"message_delta" not in seen:
        chunk = sock.recv(65536)
        assert chunk, "stream ended early"
        seen += chunk
    sock.close()


def counter(ctx, name):
    return json.loads(ctx.stack.ctl("stats", "--json").stdout)["counters"][name]


def test_client_disconnect_cancels_a_run_without_session(ctx):
    before = counter(ctx, "turns_cancelled")
    raw_stream_then_hang_up(ctx, {"harness": "scripted", "messages": [
        {"role": "user", "content": script([{"chunk": "hello"}, {"wait_cancel": True}])}]})
    wait_for(lambda: counter(ctx, "turns_cancelled") == before + 1, timeout=10,
             what="a cancelled turn")
    assert "aborted" in ctx.stack.log_text()


def test_client_disconnect_of_a_session_run_finishes_but_does_not_park(ctx):
    p, s = ids()
    before = counter(ctx, "turns_ok")
    raw_stream_then_hang_up(ctx, {"harness": "scripted", "projectId": p, "sessionId": s,
                                  "messages": [{"role": "user", "content": script(
                                      [{"chunk": "a"}, {"sleep": 600}, {"chunk": "b"}])}]})
    wait_for(lambda: counter(ctx, "turns_ok") == before + 1, timeout=10, what="finished turn")
    wait_for(lambda: ctx.stack.session(f"{p}:{s}") is None, what="not parked")


def test_between_turns_the_keeper_rejects_permission_requests(ctx):
    p, s = ids()
    first = [{"role": "user", "content": script([{"chunk": "x"},
                                                 {"ask_after": {"ms": 300,
                                                                "toolCallId": "late1"}}])}]
    res, _ = turn(ctx, p, s, first)
    assert res["ok"] is True
    time.sleep(0.8)  # the request arrives while the session is parked idle
    msgs = first + [{"role": "assistant", "content": res["output"]},
                    {"role": "user", "content": script([{"report_late": True}])}]
    res2, _ = turn(ctx, p, s, msgs)
    late = json.loads(res2["output"][len("late:"):])
    assert len(late) == 1, late
    outcome = list(late.values())[0]["result"]["outcome"]
    assert outcome == {"outcome": "selected", "optionId": "reject-once"}, outcome
    ctx.stack.ctl("kill", f"{p}:{s}")
