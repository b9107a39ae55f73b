"""Pre-started pi spares (README "Spares"): a new pi session served from a spare carries the
session's own endpoint, key, system prompt and AGENTS.md and nothing of the spare's placeholder;
the spare is replaced; two concurrent sessions get different spares (different host uids); a
spare whose pi died fails its claim and the turn starts cold; agent-runner-ctl shows spares; no
spare outlives a SIGTERM of the master. test_spares_cold.py runs the same first turn with spares
off.
"""

import json
import os
import signal
import threading
import time
import uuid

from spares import first_turn, follow_up, pi_of, ready_event, retire_spares, session_request
from stack import descendants, proc_table, wait_for
from turns import events_of, model_requests_with, result_of

SPARES = 2
STACK = {"env": {"AGENT_RUNNER_SPARES": f"pi={SPARES}", "AGENT_RUNNER_SLOTS": "32"}}


def ready_spares(ctx):
    return [s for s in ctx.stack.sessions()["sessions"] if s["spare"] and s["state"] == "spare"]


def wait_spares(ctx, n=SPARES, timeout=90):
    # a spare is ready once its keeper runs; give pi in it time to finish its own start too
    wait_for(lambda: len(ready_spares(ctx)) >= n, timeout=timeout, step=0.2,
             what=f"{n} ready spares")
    for s in ready_spares(ctx):
        wait_for(lambda s=s: pi_of(s["keeperPid"]) is not None, timeout=timeout, step=0.2,
                 what="pi running in the spare")
    time.sleep(1.0)  # pi loads its extension and settles
    return ready_spares(ctx)


def host_uid(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    return None


def test_spare_serves_a_new_pi_session(ctx):
    before = {s["slot"]: s for s in wait_spares(ctx)}
    tag, _ = first_turn(ctx, True)
    s = ctx.stack.session(f"proj-spares:s-{tag}")
    assert s is not None and s["fromSpare"] is True and not s["spare"], s
    assert s["slot"] in before, (s, before)
    assert s["keeperPid"] == before[s["slot"]]["keeperPid"], "the spare's keeper serves it"
    # pi's stdio are sockets (nothing in the sandbox can reopen them through /proc) and the
    # hand-over socket is gone once pi-acp's "pi" attached
    pi = pi_of(s["keeperPid"])
    assert pi, "no pi in the claimed spare"
    for fd in (0, 1, 2):
        assert os.readlink(f"/proc/{pi}/fd/{fd}").startswith("socket:"), (fd, pi)
    assert not os.path.exists(f"/proc/{pi}/root/tmp/.pi/sock")
    # the claimed spare is replaced in the background
    wait_spares(ctx)
    assert all(x["slot"] != s["slot"] for x in ready_spares(ctx))
    # a follow-up on the claimed spare is a warm turn of the same session
    follow_up(ctx, session_request(ctx, tag), f"hello spare {tag}", f"again {tag}")
    assert ctx.stack.session(f"proj-spares:s-{tag}")["turns"] >= 2
    ctx.stack.request("POST", "/kill", {"sessionId": f"s-{tag}", "projectId": "proj-spares"})


def test_a_spare_loads_a_sessions_kept_pi_session(ctx):
    """The session's environment ends; its next turn claims a spare, which gets pi's kept
    session written into its home and loads it (README "Kept harness state")."""
    wait_spares(ctx)
    tag, res = first_turn(ctx, True)
    p, s = "proj-spares", f"s-{tag}"
    status, _, _ = ctx.stack.request("POST", "/kill", {"sessionId": s, "projectId": p,
                                                       "environmentOnly": True})
    assert status == 200 and ctx.stack.session(f"{p}:{s}") is None
    wait_spares(ctx)
    again = f"again spare {tag}"
    req = session_request(ctx, tag)
    req["messages"] = [{"role": "user", "content": f"hello spare {tag}"},
                       {"role": "assistant", "content": res["output"]},
                       {"role": "user", "content": again}]
    status, recs = ctx.stack.stream(req)
    assert status == 200, recs
    assert result_of(recs)["ok"] is True, recs
    ready = ready_event(events_of(recs))
    assert ready["spare"] is True and ready["resume"] == "load", ready
    body = model_requests_with(ctx, again)[0]["body"]
    users = [m for m in body["messages"] if m["role"] == "user"]
    # turn 1 is a message of its own in pi's loaded session, not a replay
    assert len(users) == 2 and f"hello spare {tag}" in json.dumps(users[0]), users
    assert "Conversation so far" not in json.dumps(body)
    ctx.stack.request("POST", "/kill", {"sessionId": s, "projectId": p})
    wait_spares(ctx)


def test_two_concurrent_sessions_get_different_spares(ctx):
    wait_spares(ctx)
    tags = [uuid.uuid4().hex[:10] for _ in range(2)]
    out, errors = {}, []

    def run(tag):
        try:
            out[tag] = first_turn(ctx, True, tag)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in tags]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    slots = [ctx.stack.session(f"proj-spares:s-{t}") for t in tags]
    assert all(s and s["fromSpare"] for s in slots), slots
    assert slots[0]["slot"] != slots[1]["slot"], slots
    assert slots[0]["keeperPid"] != slots[1]["keeperPid"], slots
    uids = [host_uid(s["sandboxPid"]) for s in slots]
    assert None not in uids and uids[0] != uids[1], uids
    assert 0 not in uids, "a sandbox runs as host root"
    for t in tags:
        ctx.stack.request("POST", "/kill", {"sessionId": f"s-{t}", "projectId": "proj-spares"})


def test_spare_whose_pi_died_falls_back_to_cold_in_the_turn(ctx):
    spares = wait_spares(ctx)
    # every ready spare loses its pi: whichever the session claims fails its claim
    for s in spares:
        os.kill(pi_of(s["keeperPid"]), signal.SIGKILL)
    broken = {s["keeperPid"] for s in spares}
    tag, _ = first_turn(ctx, False)
    s = ctx.stack.session(f"proj-spares:s-{tag}")
    assert s is not None and not s["fromSpare"], s
    assert "a spare could not serve the session" in ctx.stack.log_text()
    ctx.stack.request("POST", "/kill", {"sessionId": f"s-{tag}", "projectId": "proj-spares"})
    # the broken spares that were not claimed go; the master replaces them
    retire_spares(ctx, broken)
    wait_spares(ctx)


def test_ctl_sessions_shows_spares(ctx):
    spares = wait_spares(ctx)
    assert len(spares) == SPARES, spares
    for s in spares:
        assert s["key"] == "" and s["harness"] == "pi" and s["keeperPid"] > 0, s
    text = ctx.stack.ctl("sessions").stdout
    lines = [l for l in text.splitlines() if l.startswith("(spare)")]
    assert len(lines) >= SPARES and all(" spare " in l for l in lines), text


def test_no_spare_outlives_sigterm_of_the_master(ctx):
    spares = wait_spares(ctx)
    t = proc_table()
    pids = set()
    for s in spares:
        pids.add(s["keeperPid"])
        pids.update(descendants(s["keeperPid"], t))
    dirs = [s["envDir"] for s in spares]
    assert len(pids) > 2 * SPARES, pids  # keepers, bwrap, pi-acp, pi
    assert ctx.stack.stop_master() == 0
    alive = [p for p in pids if os.path.exists(f"/proc/{p}")]
    assert not alive, f"still running after the master stopped: {alive}"
    assert not [d for d in dirs if os.path.exists(d)], dirs
