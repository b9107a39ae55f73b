"""Warm sessions: reuse across turns and workers, mismatch eviction, keeper death, idle
expiry and capacity eviction, observed through the session table (agent-runner-ctl)."""

import os
import signal
import time

from stack import wait_for
from turns import ids, pi_request, result_of, script

STACK = {"workers": 2, "threads": 8, "env": {"AGENT_RUNNER_SESSION_POOL_MAX": "3"}}


def convo(*texts):
    """user, assistant, user, ... messages ending with a user message."""
    msgs = []
    for i, t in enumerate(texts):
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": t})
    return msgs


def scripted_turn(ctx, project, session, texts, **extra):
    req = {"harness": "scripted", "projectId": project, "sessionId": session,
           "messages": convo(*texts)}
    req.update(extra)
    status, recs = ctx.stack.stream(req)
    assert status == 200
    return result_of(recs), recs


def first_delta(recs):
    return next(t for t, r in recs if r.get("kind") == "event" and
                r["event"]["type"] == "message_delta")


def test_scripted_follow_up_reuses_the_same_agent_process(ctx):
    p, s = ids()
    key = f"{p}:{s}"
    res1, _ = scripted_turn(ctx, p, s, ["first"])
    assert res1["output"] == "echo[1]: first", res1
    sess = wait_for(lambda: ctx.stack.session(key), what="parked session")
    assert sess["state"] == "idle" and sess["turns"] == 1, sess
    keeper = sess["keeperPid"]
    res2, _ = scripted_turn(ctx, p, s, ["first", res1["output"], "second"])
    # the same agent process answers its second prompt, with only the new text
    assert res2["output"] == "echo[2]: second", res2
    sess = ctx.stack.session(key)
    assert sess["keeperPid"] == keeper and sess["turns"] == 2, sess
    ctx.stack.ctl("kill", key)
    assert ctx.stack.session(key) is None
    assert ctx.stack.recent_reason(key) == "kill"


def test_pi_warm_follow_up_sends_only_the_new_text(ctx):
    p, s = ids()
    key = f"{p}:{s}"
    ctx.model.reset()
    base = pi_request(ctx.model, "Remember the word apple.", projectId=p, sessionId=s)
    status, recs1 = ctx.stack.stream(base)
    res1 = result_of(recs1)
    assert res1["ok"] is True, res1
    keeper = wait_for(lambda: ctx.stack.session(key), what="parked pi session")["keeperPid"]
    follow = dict(base)
    follow["messages"] = [{"role": "user", "content": "Remember the word apple."},
                          {"role": "assistant", "content": res1["output"]},
                          {"role": "user", "content": "Which word?"}]
    status, recs2 = ctx.stack.stream(follow)
    res2 = result_of(recs2)
    assert res2["ok"] is True, res2
    assert ctx.stack.session(key)["keeperPid"] == keeper
    chats = [r for r in ctx.model.requests() if r["path"].endswith("/chat/completions")]
    assert len(chats) == 2, len(chats)
    second = chats[1]["body"]["messages"]
    users = [m for m in second if m["role"] == "user"]
    texts = [m["content"] if isinstance(m["content"], str) else
             " ".join(c.get("text", "") for c in m["content"]) for m in users]
    # the live conversation carries turn 1; turn 2 added only the new text (no replay)
    assert texts[-1] == "Which word?", texts
    assert any("Remember the word apple." == t for t in texts[:-1]), texts
    assert not any("Conversation so far" in t for t in texts), texts
    cold, warm = first_delta(recs1), first_delta(recs2)
    print(f"    pi first delta: cold {cold:.3f}s, warm {warm:.3f}s, ratio {cold / warm:.1f}")
    assert warm < cold
    ctx.stack.ctl("kill", key)


def test_changing_the_model_replaces_the_environment(ctx):
    p, s = ids()
    key = f"{p}:{s}"
    res1, _ = scripted_turn(ctx, p, s, ["one"])
    keeper = wait_for(lambda: ctx.stack.session(key), what="parked")["keeperPid"]
    res2, _ = scripted_turn(ctx, p, s, ["one", res1["output"], "two"], model="other-model")
    assert res2["ok"] is True
    # a new agent process: the replay carries the history, the counter restarts
    assert res2["output"].startswith("echo[1]: Conversation so far:"), res2["output"]
    sess = ctx.stack.session(key)
    assert sess["keeperPid"] != keeper, sess
    assert sess["lastTeardown"] == "runtime-incompatible", sess
    ctx.stack.ctl("kill", key)


def test_edited_history_is_continuity_invalid(ctx):
    p, s = ids()
    key = f"{p}:{s}"
    res1, _ = scripted_turn(ctx, p, s, ["alpha"])
    wait_for(lambda: ctx.stack.session(key), what="parked")
    res2, _ = scripted_turn(ctx, p, s, ["ALTERED", res1["output"], "beta"])
    assert res2["output"].startswith("echo[1]: Conversation so far:"), res2["output"]
    assert ctx.stack.session(key)["lastTeardown"] == "continuity-invalid"
    ctx.stack.ctl("kill", key)


def test_session_survives_the_death_of_every_worker(ctx):
    p, s = ids()
    key = f"{p}:{s}"
    res1, _ = scripted_turn(ctx, p, s, ["before"])
    keeper = wait_for(lambda: ctx.stack.session(key), what="parked")["keeperPid"]
    old = set(ctx.stack.worker_pids())
    for w in old:
        os.kill(w, signal.SIGKILL)
    wait_for(lambda: len(ctx.stack.worker_pids()) == 2 and
             not (set(ctx.stack.worker_pids()) & old), what="respawned workers")
    res2, _ = scripted_turn(ctx, p, s, ["before", res1["output"], "after"])
    assert res2["output"] == "echo[2]: after", res2
    assert ctx.stack.session(key)["keeperPid"] == keeper
    ctx.stack.ctl("kill", key)


def test_killed_keeper_frees_the_slot_and_the_next_turn_is_cold(ctx):
    p, s = ids()
    key = f"{p}:{s}"
    res1, _ = scripted_turn(ctx, p, s, ["x"])
    keeper = wait_for(lambda: ctx.stack.session(key), what="parked")["keeperPid"]
    os.kill(keeper, signal.SIGKILL)
    wait_for(lambda: ctx.stack.session(key) is None, what="slot reclaimed")
    assert ctx.stack.ctl("check").stdout.strip() == "consistent"
    res2, _ = scripted_turn(ctx, p, s, ["x", res1["output"], "y"])
    assert res2["output"].startswith("echo[1]: Conversation so far:"), res2
    assert ctx.stack.session(key)["keeperPid"] != keeper
    ctx.stack.ctl("kill", key)


def test_idle_expiry_tears_the_environment_down(ctx):
    p, s = ids()
    key = f"{p}:{s}"
    scripted_turn(ctx, p, s, ["short lived"], lifecycle={"mode": "warm", "idleTimeoutMs": 400})
    sess = wait_for(lambda: ctx.stack.session(key), what="parked")
    assert sess["state"] == "idle" and sess["idleLeftMs"] <= 400, sess
    wait_for(lambda: ctx.stack.session(key) is None, timeout=10, what="idle expiry")
    assert ctx.stack.recent_reason(key) == "idle-expiry"


def test_per_turn_lifecycle_is_not_parked(ctx):
    p, s = ids()
    key = f"{p}:{s}"
    res, _ = scripted_turn(ctx, p, s, ["once"], lifecycle={"mode": "per_turn"})
    assert res["ok"] is True
    assert ctx.stack.session(key) is None


def test_capacity_evicts_the_least_recently_used_idle_session(ctx):
    keys = []
    for i in range(4):
        p, s = ids()
        scripted_turn(ctx, p, s, [f"session {i}"])
        keys.append(f"{p}:{s}")
        wait_for(lambda: ctx.stack.session(keys[-1]), what="parked")
        time.sleep(0.01)
    # pool max is 3: the oldest idle one made room for the fourth
    assert ctx.stack.session(keys[0]) is None
    assert ctx.stack.recent_reason(keys[0]) == "capacity-eviction"
    for k in keys[1:]:
        assert ctx.stack.session(k)["state"] == "idle"
        ctx.stack.ctl("kill", k)


def test_kill_route_destroys_a_session(ctx):
    p, s = ids()
    key = f"{p}:{s}"
    scripted_turn(ctx, p, s, ["to be killed"])
    wait_for(lambda: ctx.stack.session(key), what="parked")
    status, _, body = ctx.stack.request("POST", "/kill", {"sessionId": s, "projectId": p})
    assert status == 200 and body == {"ok": True}, (status, body)
    assert ctx.stack.session(key) is None
    assert ctx.stack.recent_reason(key) == "kill"
    # idempotent
    status, _, body = ctx.stack.request("POST", "/kill", {"sessionId": s, "projectId": p})
    assert status == 200 and body == {"ok": True}
    status, _, body = ctx.stack.request("POST", "/kill", {"sessionId": s})
    assert status == 400 and "projectId" in body["error"], body
    status, _, body = ctx.stack.request("POST", "/kill", raw="{" + " " * 20000 + "}")
    assert status == 413, status


def test_a_turn_cut_by_worker_death_goes_on_and_a_history_without_it_is_cold(ctx):
    import threading
    p, s = ids()
    key = f"{p}:{s}"
    res1, _ = scripted_turn(ctx, p, s, ["first"])
    keeper = wait_for(lambda: ctx.stack.session(key), what="parked")["keeperPid"]
    slow = script([{"chunk": "working"}, {"sleep": 5000}, {"chunk": "never"}])
    holder = {}

    def run():
        try:
            holder["r"] = ctx.stack.stream({"harness": "scripted", "projectId": p,
                                            "sessionId": s, "messages": convo(
                                                "first", res1["output"], slow)})
        except Exception as e:  # the connection may break with the worker
            holder["r"] = e

    t = threading.Thread(target=run)
    t.start()
    sess = wait_for(lambda: (ctx.stack.session(key) or {}).get("state") == "busy" and
                    ctx.stack.session(key), what="busy")
    time.sleep(0.3)
    os.kill(sess["ownerPid"], signal.SIGKILL)
    t.join(30)
    # the keeper held the turn, a worker adopted it (test_turns.py), it ran to its end and the
    # session parked on the same keeper; a next turn whose history leaves it out is cold
    after = wait_for(lambda: (ctx.stack.session(key) or {}).get("state") == "idle" and
                     ctx.stack.session(key), what="idle again")
    assert after["keeperPid"] == keeper, after
    res3, _ = scripted_turn(ctx, p, s, ["first", res1["output"], "again"])
    assert res3["output"].startswith("echo[1]: Conversation so far:"), res3["output"]
    assert ctx.stack.session(key)["lastTeardown"] == "continuity-invalid"
    ctx.stack.ctl("kill", key)
