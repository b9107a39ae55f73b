"""Walking skeleton: routes, auth, caps, a scripted turn, streaming, real pi turns."""

import json
import os
import uuid

from stack import TOKEN
from turns import events_of, pi_request, result_of, script, scripted_request


def test_health_lists_installed_harnesses(ctx):
    status, headers, body = ctx.stack.request("GET", "/health", token=False)
    assert status == 200, status
    assert body["status"] == "ok" and body["protocol"] == 1
    assert "pi_core" in body["harnesses"] and "scripted" in body["harnesses"]
    status, _, body = ctx.stack.request("GET", "/livez", token=False)
    assert status == 200 and body["status"] == "alive"
    status, _, body = ctx.stack.request("GET", "/readyz", token=False)
    assert status == 200 and body["status"] == "ready", body


def test_run_requires_the_token(ctx):
    req = scripted_request("hi")
    status, _, body = ctx.stack.request("POST", "/run", req, token=False)
    assert status == 401 and body == {"ok": False, "error": "Unauthorized"}, (status, body)
    status, _, body = ctx.stack.request("POST", "/run", req, token=False,
                                        headers={"authorization": "Bearer wrong"})
    assert status == 401, status
    status, _, body = ctx.stack.request("POST", "/run", req, token=False,
                                        headers={"x-agenta-runner-token": "wrong"})
    assert status == 401, status
    # the dedicated header wins over Authorization
    status, _, body = ctx.stack.request("POST", "/run", req, token=False,
                                        headers={"x-agenta-runner-token": TOKEN,
                                                 "authorization": "Bearer wrong"})
    assert status == 200 and body["ok"] is True, (status, body)


def test_oversized_body_is_413(ctx):
    big = json.dumps(scripted_request("x" * (9 * 1024 * 1024)))
    status, _, body = ctx.stack.request("POST", "/run", raw=big)
    assert status == 413, status
    assert body == {"ok": False, "error": "request body too large"}, body


def test_bad_json_and_bad_fields_are_400(ctx):
    status, _, body = ctx.stack.request("POST", "/run", raw='{"harness": ')
    assert status == 400 and body["ok"] is False and "Invalid JSON" in body["error"], body
    status, _, body = ctx.stack.request("POST", "/run", {"harness": "nope", "messages": []})
    assert status == 400 and "harness" in body["error"] and "nope" in body["error"], body
    status, _, body = ctx.stack.request("POST", "/run", {"harness": "scripted", "messages": []})
    assert status == 400 and "No user message" in body["error"], body
    status, _, body = ctx.stack.request("POST", "/run", {"harness": "scripted", "provider": "x"})
    assert status == 400 and "Legacy top-level" in body["error"], body


def refusal_in_stream(recs):
    """The records of a run refused before its turn: error, done, result ok:false."""
    evs = events_of(recs)
    res = result_of(recs)
    assert [e["type"] for e in evs] == ["error", "done"], evs
    assert evs[0]["code"] == "runner_error", evs[0]
    assert res["ok"] is False and res["error"] == evs[0]["message"], res
    return evs[0]["message"]


def test_streamed_refusals_are_200_with_an_error_event(ctx):
    # Agenta's client shows only "Agent runner HTTP 400" for an error status on the NDJSON
    # path: a refused request answers 200 and says why in the stream (parser, then engine)
    status, recs = ctx.stack.stream({"harness": "nope", "messages": []})
    assert status == 200, (status, recs)
    msg = refusal_in_stream(recs)
    assert "harness" in msg and "nope" in msg, msg
    status, recs = ctx.stack.stream({"harness": "scripted", "provider": "x"})
    assert status == 200 and "Legacy top-level" in refusal_in_stream(recs)
    status, recs = ctx.stack.stream({"harness": "scripted", "messages": []})
    assert status == 200 and "No user message" in refusal_in_stream(recs)
    status, recs = ctx.stack.stream(scripted_request(
        "hi", sandboxPermission={"network": {"mode": "allowlist", "allowlist": ["example.com"]}}))
    assert status == 200 and "allowlist[0]" in refusal_in_stream(recs)
    # a JSON document that is not an object is a refused request, not invalid JSON
    status, recs = ctx.stack.stream([1, 2])
    assert status == 200 and "expected a JSON object" in refusal_in_stream(recs)
    # invalid JSON stays 400, and so do the statuses decided before the body is parsed
    h = {"content-type": "application/json", "accept": "application/x-ndjson",
         "authorization": "Bearer " + TOKEN}
    for raw in ('{"harness": ', "[1,"):
        conn = ctx.stack.connection()
        conn.request("POST", "/run", body=raw, headers=h)
        resp = conn.getresponse()
        body = json.loads(resp.read())
        conn.close()
        assert resp.status == 400 and body["ok"] is False, (resp.status, body)
        assert body["error"].startswith("Invalid JSON"), body
    status, body = ctx.stack.stream(scripted_request("hi"), headers={"authorization": "Bearer x"})
    assert status == 401 and body == {"ok": False, "error": "Unauthorized"}, (status, body)
    status, body = ctx.stack.stream(scripted_request("x" * (9 * 1024 * 1024)))
    assert status == 413 and body == {"ok": False, "error": "request body too large"}, status


def test_subscription_status_without_login_folders(ctx):
    # this stack has no AGENT_RUNNER_*_HOME/_DIR: every login is not configured (the other
    # states: test_subscriptions.py); opencode cannot use one on this runner at all
    status, _, body = ctx.stack.request("GET", "/subscription-status", token=False)
    assert status == 401 and body == {"ok": False, "error": "Unauthorized"}, (status, body)
    status, _, body = ctx.stack.request("GET", "/subscription-status")
    assert status == 200, (status, body)
    assert body == {"version": 1, "harnesses": {
        "codex": {"state": "not_configured", "provider": "openai"},
        "claude": {"state": "not_configured", "provider": "anthropic"},
        "pi_core": {"state": "not_configured"}, "pi_agenta": {"state": "not_configured"},
        "opencode": {"state": "unsupported"}}}, body
    status, _, body = ctx.stack.request("POST", "/subscription-status")
    assert status == 405, status


def test_unknown_route_and_method(ctx):
    status, _, body = ctx.stack.request("GET", "/nope")
    assert status == 404 and body == {"ok": False, "error": "Not found"}, (status, body)
    status, _, body = ctx.stack.request("GET", "/run")
    assert status == 405 and body["ok"] is False, (status, body)
    status, _, body = ctx.stack.request("POST", "/health")
    assert status == 405, status


def test_scripted_turn_streams_deltas_done_and_result(ctx):
    prompt = script([{"chunk": "Hello"}, {"chunk": " world"}, {"thought": "hm"},
                     {"tool": {"id": "t1", "title": "bash", "kind": "execute",
                               "input": {"command": "ls"}, "output": "a b"}},
                     {"usage": {"used": 42, "size": 1000, "cost": 0.25}}])
    status, recs = ctx.stack.stream(scripted_request(prompt))
    assert status == 200
    evs = events_of(recs)
    types = [e["type"] for e in evs]
    assert types[0] == "data" and evs[0]["data"]["phase"] == "environment_starting", types
    assert "environment_ready" in [e.get("data", {}).get("phase") for e in evs]
    deltas = [e["delta"] for e in evs if e["type"] == "message_delta"]
    assert deltas == ["Hello", " world"], deltas
    assert types.index("message_start") < types.index("message_delta") < \
        types.index("message_end") < types.index("thought_start")
    call = next(e for e in evs if e["type"] == "tool_call")
    assert call["id"] == "t1" and call["name"] == "bash" and call["input"] == {"command": "ls"}
    tres = next(e for e in evs if e["type"] == "tool_result")
    assert tres["id"] == "t1" and tres["output"] == "a b" and tres["isError"] is False
    assert types[-1] == "done" and evs[-1]["stopReason"] == "end_turn"
    res = result_of(recs)
    assert res["ok"] is True and res["output"] == "Hello world" and res["events"] == []
    assert res["messages"] == [{"role": "assistant", "content": "Hello world"}]
    assert res["stopReason"] == "end_turn" and res["usage"]["total"] == 15
    assert res["usage"]["cost"] == 0.25


def test_lines_arrive_before_the_turn_ends(ctx):
    # nginx must not buffer: the first delta is seen long before the result
    prompt = script([{"chunk": "early"}, {"sleep": 1500}, {"chunk": "late"}])
    status, recs = ctx.stack.stream(scripted_request(prompt))
    assert status == 200
    first = next(t for t, r in recs if r.get("kind") == "event" and
                 r["event"]["type"] == "message_delta")
    last = recs[-1][0]
    assert last - first >= 1.0, f"first delta at {first:.3f}s, result at {last:.3f}s"


def test_one_shot_json_coalesces_events(ctx):
    prompt = script([{"chunk": "one "}, {"chunk": "two"}])
    status, _, body = ctx.stack.request("POST", "/run", scripted_request(prompt))
    assert status == 200, (status, body)
    assert body["ok"] is True and body["output"] == "one two"
    msgs = [e for e in body["events"] if e["type"] == "message"]
    assert msgs == [{"type": "message", "text": "one two"}], body["events"]
    assert not [e for e in body["events"] if e["type"].startswith("message_")]
    assert body["events"][-1]["type"] == "done"


def test_failed_turn_is_500_one_shot_and_error_event_streamed(ctx):
    prompt = script([{"chunk": "partial"}, {"crash": 3}])
    status, _, body = ctx.stack.request("POST", "/run", scripted_request(prompt))
    assert status == 500 and body["ok"] is False and "exited" in body["error"], (status, body)
    status, recs = ctx.stack.stream(scripted_request(prompt))
    evs = events_of(recs)
    assert [e["type"] for e in evs][-2:] == ["error", "done"], evs
    res = result_of(recs)
    assert res["ok"] is False and "exited" in res["error"]


def test_malformed_harness_line_is_skipped(ctx):
    prompt = script([{"malformed": "this is {not json"}, {"chunk": "still fine"}])
    status, recs = ctx.stack.stream(scripted_request(prompt))
    res = result_of(recs)
    assert res["ok"] is True and res["output"] == "still fine", res


def test_tool_output_that_is_not_utf8_arrives_as_text(ctx):
    # the scripted agent, like a real harness, sends text: bytes that are not UTF-8 become "?"
    # (a line that is not UTF-8 would be skipped as malformed and the call's result lost)
    status, recs = ctx.stack.stream(scripted_request(script([
        {"exec": "printf 'a\\377\\303\\251b\\342\\202'"}])))
    assert status == 200
    outs = [e["output"] for e in events_of(recs) if e["type"] == "tool_result"]
    assert outs == ["a?\u00e9b??"], outs


def test_pi_turn_against_the_fake_model(ctx):
    ctx.model.reset()
    status, recs = ctx.stack.stream(pi_request(ctx.model, "Say hello"))
    assert status == 200
    res = result_of(recs)
    assert res["ok"] is True, res
    assert res["output"] == "Hello from the fake model.", res["output"]
    assert res["model"] == "fake-model"
    evs = events_of(recs)
    first = next(t for t, r in recs if r.get("kind") == "event" and
                 r["event"]["type"] == "message_delta")
    print(f"    pi cold turn: first delta {first:.2f}s, total {recs[-1][0]:.2f}s")
    assert evs[-1]["type"] == "done"
    reqs = [r for r in ctx.model.requests() if r["path"].endswith("/chat/completions")]
    assert reqs, "the fake model saw no request"
    assert reqs[-1]["body"]["model"] == "fake-model"
    assert reqs[-1]["headers"].get("authorization") == "Bearer sk-test"


def test_pi_tool_call_writes_only_inside_the_sandbox(ctx):
    marker = "marker-" + uuid.uuid4().hex
    name = "tool-" + uuid.uuid4().hex[:8]
    host_probe = os.path.join("/tmp", marker)
    repo_probe = os.path.join(ctx.stack.tmp, marker)
    cmd = (f"echo sandboxed > /workspace/out.txt && cat /workspace/out.txt && "
           f"touch {host_probe}; touch {repo_probe} 2>&1; echo exit=$?; ls /workspace")
    ctx.model.script(name, [{"tool": {"name": "bash", "arguments": {"command": cmd}}},
                            {"text": "Wrote the file."}])
    # the plan allows pi's tools (the default, allow_reads, would ask before bash)
    status, recs = ctx.stack.stream(pi_request(ctx.model, f"Write a file [[script:{name}]]",
                                               permissions={"default": "allow"}))
    res = result_of(recs)
    assert res["ok"] is True, res
    evs = events_of(recs)
    call = next(e for e in evs if e["type"] == "tool_call")
    assert call["name"] == "bash" and call["input"]["command"] == cmd, call
    out = next(e for e in evs if e["type"] == "tool_result")["output"]
    assert "sandboxed" in out and "out.txt" in out, out
    # the sandbox /tmp is private and the rest of the host is read-only or absent
    assert "exit=1" in out, out
    assert not os.path.exists(host_probe), "the sandbox wrote to the host /tmp"
    assert not os.path.exists(repo_probe), "the sandbox wrote outside its workspace"
    assert res["output"] == "Wrote the file."


def test_inline_images_reach_a_harness_that_takes_them(ctx):
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
    req = {"harness": "scripted", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image", "data": png, "mimeType": "image/png"}]}]}
    status, recs = ctx.stack.stream(req)
    res = result_of(recs)
    assert res["output"] == "echo[1]: look (images: 1)", res


def test_a_failing_setup_leaves_nothing_behind(ctx):
    # the second file needs "a" to be a folder, but the first made it a file: the write fails
    # inside the acquisition boundary, after the environment folder and slot were made
    req = scripted_request("hi", harnessFiles=[{"path": "a", "content": "file"},
                                               {"path": "a/b", "content": "below a file"}])
    status, recs = ctx.stack.stream(req)
    res = result_of(recs)
    assert res["ok"] is False and "harnessFiles[1]" in res["error"], res
    # the runner's per-test leak check verifies no keeper, sandbox or folder is left
