"""Pre-made sandbox shells (AGENT_RUNNER_SHELLS; README "Sessions"): keepers that made a slot's
host uid, cgroup, network namespace and egress ahead, claimed by a cold start of any harness and
refilled by the master off the request path. A claimed shell reports itself in
environment_ready (shell: true), is never handed to a second session, a shell killed
underneath is replaced and the turn still succeeds, and nothing is left after stop."""

import os
import signal

from stack import wait_for
from turns import ids, run, scripted_request

STACK = {"env": {"AGENT_RUNNER_SHELLS": "2"}}


def ready_shells(ctx):
    return [s for s in ctx.stack.spare_slots() if s["state"] == "spare"]


def two_ready(ctx):
    s = ready_shells(ctx)
    return s if len(s) == 2 and all(x["keeperPid"] > 0 for x in s) else None


def ready_event(evs):
    for e in evs:
        data = e.get("data") or {}
        if e.get("name") == "agent-status" and data.get("phase") == "environment_ready":
            return data
    raise AssertionError(f"no environment_ready in {evs}")


def test_a_cold_turn_claims_a_shell_and_the_master_refills_it(ctx):
    before = {s["keeperPid"] for s in wait_for(lambda: two_ready(ctx), what="two shells")}
    res, evs = run(ctx, scripted_request("hello shell"))
    assert res["ok"], res
    assert ready_event(evs).get("shell") is True, ready_event(evs)
    # refilled: two ready shells again, one of them new (the claimed one is gone with its turn)
    after = wait_for(lambda: (lambda s: s and {x["keeperPid"] for x in s} != before and s)(
        two_ready(ctx)), what="a refilled shell")
    pids = {s["keeperPid"] for s in after}
    assert len(pids & before) == 1, (before, pids)


def test_a_shell_serves_one_session_only(ctx):
    wait_for(lambda: two_ready(ctx), what="two shells")
    keepers = []
    for _ in range(2):
        project, session = ids()
        res, evs = run(ctx, scripted_request("hi", projectId=project, sessionId=session))
        assert res["ok"], res
        assert ready_event(evs).get("shell") is True
        s = ctx.stack.session(f"{project}:{session}")
        assert s and s["fromSpare"] and not s["spare"], s
        keepers.append((s["keeperPid"], s["slot"], s["generation"]))
        ctx.stack.request("POST", "/kill", {"sessionId": session, "projectId": project})
    assert keepers[0][0] != keepers[1][0], keepers
    # neither session's keeper is offered again as a shell
    wait_for(lambda: two_ready(ctx), what="shells refilled")
    assert not {k for k, _, _ in keepers} & {s["keeperPid"] for s in ready_shells(ctx)}


def test_a_shell_killed_underneath_is_replaced_and_the_turn_succeeds(ctx):
    shells = wait_for(lambda: two_ready(ctx), what="two shells")
    for s in shells:
        os.kill(s["keeperPid"], signal.SIGKILL)
    res, evs = run(ctx, scripted_request("after a kill"))
    assert res["ok"], res
    wait_for(lambda: (lambda s: s and not {x["keeperPid"] for x in s} &
                      {x["keeperPid"] for x in shells} and s)(two_ready(ctx)),
             timeout=20, what="replacement shells")


def test_nothing_is_left_after_stop(ctx):
    wait_for(lambda: two_ready(ctx), what="two shells")
    ctx.stack.stop()
    assert ctx.stack.leaks(timeout=15) == []
