"""The total limit bounds every wait of a turn, the permission reply path included."""


from stack import wait_for
from turns import events_of, ids, result_of, script

STACK = {"workers": 1, "threads": 4, "env": {
    "AGENT_RUNNER_RUN_TOTAL_MS": "2000", "AGENT_RUNNER_RUN_IDLE_MS": "0",
    "AGENT_RUNNER_RUN_FIRST_EVENT_MS": "0", "AGENT_RUNNER_RUN_TOOL_CALL_MS": "0"}}


def test_a_hang_after_the_permission_reply_trips_the_total_limit(ctx):
    p, s = ids()
    key = f"{p}:{s}"
    gate = {"toolCallId": "g1", "title": "Write", "kind": "edit"}
    first = [{"role": "user", "content": script([{"permission": gate}, {"hang": True}])}]
    req = {"harness": "scripted", "projectId": p, "sessionId": s, "messages": first}
    status, recs = ctx.stack.stream(req)
    assert result_of(recs)["stopReason"] == "paused"
    req["messages"] = first + [{"role": "user", "content": [
        {"type": "tool_result", "toolCallId": "g1", "output": {"approved": True}}]}]
    status, recs = ctx.stack.stream(req)
    res, evs = result_of(recs), events_of(recs)
    assert res["ok"] is False and "total run deadline of 2000ms" in res["error"], res
    assert [e["type"] for e in evs][-2:] == ["error", "done"]
    wait_for(lambda: ctx.stack.session(key) is None, what="teardown")


def test_a_silent_harness_trips_the_total_limit(ctx):
    status, recs = ctx.stack.stream({"harness": "scripted", "messages": [
        {"role": "user", "content": script([{"hang": True}])}]})
    res = result_of(recs)
    assert res["ok"] is False and "total run deadline" in res["error"], res
