"""Run limits: each trips with an error event naming it, done, ok:false and a torn-down
environment; a pause (approval) freezes them."""


from stack import wait_for
from turns import events_of, ids, result_of, script

STACK = {"workers": 1, "threads": 8, "env": {
    "AGENT_RUNNER_RUN_TOTAL_MS": "3500", "AGENT_RUNNER_RUN_IDLE_MS": "1500",
    "AGENT_RUNNER_RUN_FIRST_EVENT_MS": "1000", "AGENT_RUNNER_RUN_TOOL_CALL_MS": "1200",
    "AGENT_RUNNER_MAX_CONCURRENT_RUNS": "2"}}


def limited_turn(ctx, steps, streaming=True):
    p, s = ids()
    req = {"harness": "scripted", "projectId": p, "sessionId": s,
           "messages": [{"role": "user", "content": script(steps)}]}
    if streaming:
        status, recs = ctx.stack.stream(req)
        res, evs = result_of(recs), events_of(recs)
    else:
        status, _, res = ctx.stack.request("POST", "/run", req)
        evs = res["events"]
    return f"{p}:{s}", res, evs


def assert_tripped(ctx, key, res, evs, words):
    assert res["ok"] is False and words in res["error"], res
    err = next(e for e in evs if e["type"] == "error")
    assert err["code"] == "run_limit" and words in err["message"], err
    assert evs[-1]["type"] == "done", evs[-1]
    # the environment is torn down, not parked
    wait_for(lambda: ctx.stack.session(key) is None, what="teardown")
    assert ctx.stack.recent_reason(key) == "failed-turn"


def test_first_event_limit(ctx):
    key, res, evs = limited_turn(ctx, [{"sleep": 3000}, {"chunk": "too late"}])
    assert_tripped(ctx, key, res, evs, "no first response within 1000ms")


def test_idle_limit(ctx):
    key, res, evs = limited_turn(ctx, [{"chunk": "a"}, {"sleep": 3000}, {"chunk": "b"}])
    assert_tripped(ctx, key, res, evs, "idle timeout after 1500ms")


def test_tool_call_limit(ctx):
    key, res, evs = limited_turn(ctx, [{"chunk": "a"}, {"exec": "sleep 3", "id": "slow"}])
    assert_tripped(ctx, key, res, evs, "tool call slow exceeded 1200ms")


def test_total_limit(ctx):
    steps = []
    for i in range(6):
        steps += [{"chunk": f"c{i} "}, {"sleep": 900}]
    key, res, evs = limited_turn(ctx, steps)
    assert_tripped(ctx, key, res, evs, "total run deadline of 3500ms exceeded")


def test_limits_trip_the_same_without_streaming(ctx):
    key, res, evs = limited_turn(ctx, [{"chunk": "a"}, {"sleep": 3000}], streaming=False)
    assert_tripped(ctx, key, res, evs, "idle timeout after 1500ms")


def test_a_pause_freezes_the_limits(ctx):
    p, s = ids()
    gate = {"toolCallId": "g1", "title": "Write", "kind": "edit"}
    first = [{"role": "user", "content": script([{"permission": gate}, {"chunk": "done"}])}]
    req = {"harness": "scripted", "projectId": p, "sessionId": s, "messages": first}
    status, recs = ctx.stack.stream(req)
    assert result_of(recs)["stopReason"] == "paused"
    import time
    time.sleep(2.0)  # longer than the first-event and idle limits
    req["messages"] = first + [{"role": "user", "content": [
        {"type": "tool_result", "toolCallId": "g1", "output": {"approved": True}}]}]
    status, recs = ctx.stack.stream(req)
    res = result_of(recs)
    assert res["ok"] is True and res["output"] == "done", res
    ctx.stack.ctl("kill", f"{p}:{s}")


def test_admission_cap_answers_429_before_reading_the_body(ctx):
    import threading
    holder = {}

    def slow():
        holder["r"] = ctx.stack.stream({"harness": "scripted", "messages": [
            {"role": "user", "content": script([{"chunk": "a"}, {"sleep": 800},
                                                {"chunk": "b"}])}]})

    threads = [threading.Thread(target=slow) for _ in range(2)]
    for t in threads:
        t.start()
    wait_for(lambda: json_stats(ctx)["runs_in_flight"] >= 2, what="two runs in flight")
    status, _, body = ctx.stack.request("POST", "/run", {"harness": "scripted", "messages": [
        {"role": "user", "content": "third"}]})
    assert status == 429 and body == {"ok": False,
                                      "error": "Runner at capacity (2 concurrent runs)"}, body
    for t in threads:
        t.join(20)
    assert json_stats(ctx)["admission_rejected"] >= 1


def json_stats(ctx):
    import json
    return json.loads(ctx.stack.ctl("stats", "--json").stdout)["counters"]
