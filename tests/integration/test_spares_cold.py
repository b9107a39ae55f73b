"""test_spares.py's first turn (spares.first_turn) with spares disabled (AGENT_RUNNER_SPARES=pi=0): the same
session answers with its own endpoint, key, system prompt and AGENTS.md from a cold start, and
environment_ready says spare:false; no spare is ever made. Then the cold path itself: pi
started at once beside pi-acp (agent-runner-pi-stdio start cold), both from their one-file builds
(tools/bundle), the CPU quota written once the harness has started, a pi that dies mid-turn
ending the turn."""

import json
import os
import signal
import uuid

from spares import first_turn, pi_of
from stack import descendants, proc_table, wait_for
from turns import pi_request, result_of

STACK = {"env": {"AGENT_RUNNER_SPARES": "pi=0"}}


def test_spares_disabled_the_same_session_runs_cold(ctx):
    tag, _ = first_turn(ctx, False)
    s = ctx.stack.session(f"proj-spares:s-{tag}")
    assert s is not None and not s["fromSpare"], s
    assert not ctx.stack.spare_slots(), ctx.stack.spare_slots()
    ctx.stack.request("POST", "/kill", {"sessionId": f"s-{tag}", "projectId": "proj-spares"})


# --- the cold path itself (bin/pi-start cold) ----------------------------------------------

def cpu_quota(pid):
    """The CPU quota of pid's cgroup as "<quota> <period>" in microseconds ("max <period>"
    when none), from cgroup v1 (cpu.cfs_*) or v2 (cpu.max); None without a cpu controller."""
    with open(f"/proc/{pid}/cgroup") as f:
        lines = [l.rstrip("\n").split(":", 2) for l in f]
    for _, ctrls, path in lines:
        if "cpu" in ctrls.split(","):
            for mnt in ("/sys/fs/cgroup/" + ctrls, "/sys/fs/cgroup/cpu,cpuacct",
                        "/sys/fs/cgroup/cpu"):
                d = mnt + path
                if os.path.exists(d + "/cpu.cfs_quota_us"):
                    with open(d + "/cpu.cfs_quota_us") as q, open(d + "/cpu.cfs_period_us") as p:
                        quota = int(q.read())
                        return f"{'max' if quota < 0 else quota} {int(p.read())}"
    for _, ctrls, path in lines:
        if ctrls == "" and os.path.exists(f"/sys/fs/cgroup{path}/cpu.max"):
            with open(f"/sys/fs/cgroup{path}/cpu.max") as f:
                return f.read().strip()
    return None


def test_cold_pi_session_has_its_cpu_quota_once_the_harness_started(ctx):
    """A harness's own start runs without the CPU quota (no agent code runs before the first
    prompt); the quota (AGENT_RUNNER_SANDBOX_CPUS, default 1 CPU per 100 ms) is written once
    session/new answered, so the first turn and every later one run under it."""
    _, _, health = ctx.stack.request("GET", "/health", token=False)
    enforced = (health.get("sandbox") or {}).get("enforced") or []
    tag, _ = first_turn(ctx, False)
    key = f"proj-spares:s-{tag}"
    s = ctx.stack.session(key)
    pi = pi_of(s["keeperPid"])
    assert pi, "no pi in the parked session's sandbox"
    quota = cpu_quota(pi)
    if "cpu" in enforced:
        assert quota in ("100000 100000",), quota
    else:
        assert quota in (None, "max 100000"), (quota, enforced)
    ctx.stack.request("POST", "/kill", {"sessionId": f"s-{tag}", "projectId": "proj-spares"})


def test_cold_pi_runs_the_one_file_builds(ctx):
    """A cold pi sandbox runs pi and pi-acp from the builds install-harnesses made
    (dist/agent-runner/start.mjs in each package), and the session's first turn is the same as
    from the packages (first_turn checks the fake model saw the session's key, endpoint,
    system prompt and AGENTS.md). pi renames its process "pi" (process.title), so only
    pi-acp's command line still names its file here; test_harness.c pins pi's."""
    tag, _ = first_turn(ctx, False)
    s = ctx.stack.session(f"proj-spares:s-{tag}")
    t = proc_table()
    cmds = [t[p][1] for p in descendants(s["keeperPid"], t) if p in t]
    acp = [c for c in cmds if "pi-acp/" in c]
    assert acp and all("pi-acp/dist/agent-runner/start.mjs" in c for c in acp), cmds
    assert pi_of(s["keeperPid"]), cmds
    assert not any("pi-coding-agent/dist/cli.js" in c for c in cmds), cmds
    ctx.stack.request("POST", "/kill", {"sessionId": f"s-{tag}", "projectId": "proj-spares"})


# a 1x1 PNG: pi's read tool sends it on as an image once photon (wasm) has checked its size
PNG_B64 = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
           "RU5ErkJggg==")


def test_cold_pi_reads_an_image_through_its_bundled_image_code(ctx):
    """pi's read tool resizes images with photon, whose wasm a module finds next to its own
    file: in the one-file build that is the bundle's folder (tools/bundle copies it there).
    Without it the model would get "[Image omitted: ...]" instead of the picture."""
    tag = uuid.uuid4().hex[:8]
    name = f"img-{tag}"
    ctx.model.script(name, [
        {"tool": {"name": "bash", "arguments": {
            "command": f"echo {PNG_B64} | base64 -d > /workspace/dot-{tag}.png"}}},
        {"tool": {"name": "read", "arguments": {"path": f"/workspace/dot-{tag}.png"}}},
        {"text": f"seen {tag}"}])
    req = pi_request(ctx.model, f"Look at it [[script:{name}]]", projectId="proj-spares",
                     sessionId=f"img-{tag}", permissions={"default": "allow"},
                     modelCapabilities={"inputModalities": ["text", "image"]})
    status, recs = ctx.stack.stream(req)
    assert status == 200
    res = result_of(recs)
    assert res["ok"] is True and res["output"].endswith(f"seen {tag}"), res
    seen = [json.dumps(r["body"]) for r in ctx.model.requests()
            if f"[[script:{name}]]" in json.dumps(r["body"])]
    assert len(seen) == 3, (len(seen), res)
    assert "Image omitted" not in seen[2], seen[2][-2000:]
    assert "data:image/png;base64," in seen[2], seen[2][-2000:]
    ctx.stack.request("POST", "/kill", {"sessionId": f"img-{tag}", "projectId": "proj-spares"})


def test_cold_pi_that_dies_mid_turn_ends_the_turn_as_a_harness_failure(ctx):
    """pi runs beside pi-acp from the sandbox's start; pi-acp's `pi` only relays. When pi dies
    mid-turn the relay ends as pi would have (pi-acp sees its pi exit), so the turn ends with
    a harness error instead of waiting on a silent pipe, and the environment goes."""
    tag = uuid.uuid4().hex[:10]
    name = "slow-" + tag
    ctx.model.script(name, [{"text": " ".join(f"w{i}" for i in range(40)), "delay": 5}])
    req = pi_request(ctx.model, f"[[script:{name}]] talk slowly", projectId="proj-spares",
                     sessionId=f"s-{tag}")
    c, r = ctx.stack.open_stream(req)
    recs = []
    try:
        assert r.status == 200
        killed = None
        while True:
            line = r.readline()
            if not line:
                break
            rec = json.loads(line)
            recs.append(rec)
            ev = rec.get("event") or {}
            if killed is None and ev.get("type") == "message_delta":
                s = ctx.stack.session(f"proj-spares:s-{tag}")
                killed = pi_of(s["keeperPid"])
                assert killed, "no pi in the running session's sandbox"
                os.kill(killed, signal.SIGKILL)
    finally:
        c.close()
    assert killed, recs
    res = [x["result"] for x in recs if x.get("kind") == "result"]
    assert len(res) == 1, recs
    res = res[0]
    assert res["ok"] is False, res
    errors = [x["event"] for x in recs if (x.get("event") or {}).get("type") == "error"]
    assert errors, recs
    # the relay ended the harness (pi-acp with it): not a limit or deadline of the turn
    assert "the harness exited during the turn" in errors[0].get("message", ""), errors
    wait_for(lambda: ctx.stack.session(f"proj-spares:s-{tag}") is None, timeout=30,
             what="the broken session's environment gone")
