"""Process lifecycle: worker respawn, keeper reaping, graceful drain on SIGTERM."""

import os
import signal
import threading
import time

from stack import wait_for
from turns import events_of, ids, result_of, script, scripted_request

STACK = {"workers": 2, "threads": 4}


def test_a_dead_worker_is_respawned(ctx):
    before = set(ctx.stack.worker_pids())
    victim = sorted(before)[0]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: len(ctx.stack.worker_pids()) == 2 and victim not in ctx.stack.worker_pids(),
             what="respawned worker")
    # the new worker serves turns
    for _ in range(4):
        status, recs = ctx.stack.stream(scripted_request("after respawn"))
        assert result_of(recs)["ok"] is True


def test_a_killed_keeper_ends_the_turn_and_frees_everything(ctx):
    holder = {}

    def run():
        holder["res"] = ctx.stack.stream(scripted_request(script([{"chunk": "x"},
                                                                   {"sleep": 20000}])))

    t = threading.Thread(target=run)
    t.start()
    keepers = wait_for(ctx.stack.keeper_pids, what="a keeper")
    time.sleep(0.3)
    os.kill(keepers[0], signal.SIGKILL)
    t.join(30)
    assert not t.is_alive(), "the turn did not end after its keeper died"
    status, recs = holder["res"]
    res = result_of(recs)
    assert res["ok"] is False and "harness" in res["error"], res
    assert [e["type"] for e in events_of(recs)][-2:] == ["error", "done"]
    # a clear error (not "harness exited (status 0)") and a real reason
    assert "keeper process died" in res["error"] and "status 0" not in res["error"], res
    wait_for(lambda: teardowns(ctx).get("keeper-died", 0) >= 1, what="a keeper-died teardown")
    assert teardowns(ctx).get("none", 0) == 0, teardowns(ctx)


def teardowns(ctx):
    _, _, text = ctx.stack.request("GET", "/metrics")
    out = {}
    for line in text.splitlines():
        if line.startswith("agent_runner_teardowns_total{reason=\""):
            reason = line.split('"')[1]
            out[reason] = int(line.rsplit(" ", 1)[1])
    return out


def test_sigterm_drains_running_turns_then_exits_clean(ctx):
    holder = {}

    def run():
        holder["res"] = ctx.stack.stream(scripted_request(script([{"chunk": "start"},
                                                                   {"sleep": 1500},
                                                                   {"chunk": " end"}])))

    t = threading.Thread(target=run)
    t.start()
    wait_for(ctx.stack.keeper_pids, what="a keeper")
    time.sleep(0.2)
    ctx.stack.master.send_signal(signal.SIGTERM)
    t.join(30)
    status, recs = holder["res"]
    res = result_of(recs)
    assert res["ok"] is True and res["output"] == "start end", res
    ctx.stack.master.wait(30)
    assert ctx.stack.master.returncode == 0, ctx.stack.master.returncode
    assert not os.path.exists(os.path.join("/dev/shm", "agent-runner." +
                                           ctx.stack.env["AGENT_RUNNER_INSTANCE"]))
    # bring it back for the tests that follow
    ctx.stack.start_master()
    status, recs = ctx.stack.stream(scripted_request("back"))
    assert result_of(recs)["ok"] is True


def test_a_restarted_master_adopts_live_sessions(ctx):
    p, s = ids()
    key = f"{p}:{s}"
    req = {"harness": "scripted", "projectId": p, "sessionId": s,
           "messages": [{"role": "user", "content": "one"}]}
    status, recs = ctx.stack.stream(req)
    out1 = result_of(recs)["output"]
    keeper = wait_for(lambda: ctx.stack.session(key), what="parked")["keeperPid"]
    old_workers = set(ctx.stack.worker_pids())
    ctx.stack.master.kill()
    ctx.stack.master.wait()
    # its workers follow it; the keeper does not
    wait_for(lambda: not any(os.path.exists(f"/proc/{w}") and
                             open(f"/proc/{w}/stat").read().split()[2] != "Z"
                             for w in old_workers), what="old workers gone")
    assert os.path.exists(f"/proc/{keeper}")
    t0 = time.monotonic()
    ctx.stack.start_master()
    wait_for(lambda: ctx.stack.request("GET", "/readyz", token=False)[0] == 200,
             what="readyz after restart")
    print(f"    readyz {time.monotonic() - t0:.3f}s after the master restart")
    req["messages"] = [{"role": "user", "content": "one"},
                       {"role": "assistant", "content": out1},
                       {"role": "user", "content": "two"}]
    status, recs = ctx.stack.stream(req)
    assert result_of(recs)["output"] == "echo[2]: two", result_of(recs)
    assert ctx.stack.session(key)["keeperPid"] == keeper
    ctx.stack.ctl("kill", key)
