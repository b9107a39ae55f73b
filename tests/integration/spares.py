"""What the spare suites share (test_spares.py, test_spares_cold.py, test_spares_opencode.py):
pi below a keeper, the environment_ready event that says whether a spare served the turn,
retiring spares, and a pi session's first and second turn with the checks of what the model saw
(the same first turn runs with spares on and off).
"""

import json
import os
import signal
import uuid

from stack import descendants, proc_table, wait_for
from turns import events_of, model_requests_with, pi_request, result_of


def pi_of(keeper_pid):
    """The pid of pi (not pi-acp) running inside the sandbox below keeper_pid, or None."""
    t = proc_table()
    for p in descendants(keeper_pid, t):
        cmd = t.get(p, (0, ""))[1]
        # pi names its process "pi" once it runs (process.title)
        if cmd == "pi" or ("pi-coding-agent/dist/cli.js" in cmd and "--mode rpc" in cmd):
            return p
    return None


def session_request(ctx, tag, **extra):
    req = pi_request(ctx.model, f"hello spare {tag}", key=f"sk-session-{tag}",
                     projectId="proj-spares", sessionId=f"s-{tag}",
                     systemPrompt=f"SYSTEM-MARKER-{tag}", agentsMd=f"AGENTS-MARKER-{tag}",
                     **extra)
    return req


def ready_event(events):
    ready = [e for e in events if e.get("type") == "data" and
             (e.get("data") or {}).get("phase") == "environment_ready"]
    assert len(ready) == 1, events
    return ready[0]["data"]


def retire_spares(ctx, keepers, timeout=60):
    """End the spares of these keeper pids that still wait for a claim (SIGTERM to the keeper)
    and wait until no slot names them."""
    for s in ctx.stack.spare_slots():
        if s["keeperPid"] in keepers and s["state"] == "spare":
            os.kill(s["keeperPid"], signal.SIGTERM)
    wait_for(lambda: not any(x["keeperPid"] in keepers for x in ctx.stack.spare_slots()),
             timeout=timeout, what="the broken spares gone")


def follow_up(ctx, req, first, again):
    """The session's second turn ([first, the fake model's answer, again]); asserts it ran."""
    req["messages"] = [{"role": "user", "content": first},
                       {"role": "assistant", "content": "Hello from the fake model."},
                       {"role": "user", "content": again}]
    status, recs = ctx.stack.stream(req)
    assert status == 200, recs
    res = result_of(recs)
    assert res["ok"] is True, res
    return res


def first_turn(ctx, expect_spare, tag=None):
    """Run a new pi session's first turn; check what the model saw. Returns (tag, result)."""
    tag = tag or uuid.uuid4().hex[:10]
    status, recs = ctx.stack.stream(session_request(ctx, tag))
    assert status == 200, recs
    res = result_of(recs)
    assert res["ok"] is True and res["output"] == "Hello from the fake model.", res
    assert ready_event(events_of(recs))["spare"] is expect_spare, events_of(recs)
    seen = model_requests_with(ctx, f"hello spare {tag}")
    assert len(seen) == 1, seen
    req = seen[0]
    text = json.dumps(req)
    # the session's own key, endpoint (the fake model got it), system prompt and AGENTS.md
    assert req["headers"].get("authorization") == f"Bearer sk-session-{tag}", req["headers"]
    assert req["body"]["model"] == "fake-model", req["body"]["model"]
    system = json.dumps([m for m in req["body"]["messages"] if m["role"] == "system"])
    assert f"SYSTEM-MARKER-{tag}" in system, system
    assert f"AGENTS-MARKER-{tag}" in system, system
    # nothing of the spare's placeholder
    for placeholder in ("spare-placeholder", "127.0.0.1:9/"):
        assert placeholder not in text, f"{placeholder!r} reached the model"
    return tag, res
