"""The Daytona provider building blocks (engine/provider/daytona_*) end to end against the fake
Daytona server (tests/fixtures/fake_daytona.py), driven by build/bin/daytona-driver: no nginx,
worker or keeper involved (the stack run.py starts for this module is not used).

Each test starts its own fake (real bwrap sandboxes; real pi-acp inside) and checks at the end
that no sandbox is left in the fake and no driver process is left locally.
"""

import contextlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import fake_daytona_ctl  # noqa: E402
import stack  # noqa: E402

BIN = os.path.join(ROOT, os.environ.get("BUILD", "build"), "bin")
DRIVER = os.path.join(BIN, "daytona-driver")
HARNESSES = os.path.join(ROOT, "harnesses", "node_modules")
PI_ACP = os.path.join(HARNESSES, "pi-acp", "dist", "index.js")
CODEX_ACP = os.path.join(HARNESSES, "@zed-industries", "codex-acp-linux-x64", "bin", "codex-acp")
API_KEY = "fake-daytona-key-0123456789"
MODEL_KEY = "sk-model-secret-5f0e1d2c3b4a"

STACK = {"workers": 1, "threads": 4}
LATENCIES = {}


@contextlib.contextmanager
def fake():
    d = fake_daytona_ctl.FakeDaytona(api_key=API_KEY)
    ok = False
    try:
        yield d
        ok = True
    finally:
        try:
            if ok:
                # a delete answers "destroying" and completes shortly after
                left = []
                for sb in d.state()["sandboxes"]:
                    try:
                        d.wait_state(sb["id"], ["gone"], timeout=15)
                    except AssertionError:
                        left.append((sb["id"], sb["state"]))
                assert not left, f"sandboxes left in the fake: {left}"
        finally:
            d.stop()
            d.cleanup()


def driver(d, *args, model=None, timeout=240, check=True):
    """Run daytona-driver; returns (last JSON record, all records, stdout+stderr text)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "AGENT_RUNNER_DAYTONA_API_URL": d.api_url,
        "AGENT_RUNNER_DAYTONA_API_KEY": API_KEY,
        "DRIVER_MODEL_KEY": MODEL_KEY,
    }
    out = subprocess.run([DRIVER, *args], capture_output=True, text=True, timeout=timeout,
                         env=env)
    text = out.stdout + out.stderr
    recs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert recs, f"daytona-driver {args}: no output: {text}"
    last = recs[-1]
    if check:
        assert last.get("ok") and out.returncode == 0, f"daytona-driver {args}: {text}"
    # neither credential ever reaches the driver's output
    assert API_KEY not in text and MODEL_KEY not in text, "a credential was printed"
    return last, recs, text


def no_local_leftovers():
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        assert DRIVER.encode() not in cmd, f"daytona-driver left running: {pid}"


def routes(d, route):
    return [c for c in d.calls() if c.get("route") == route]


def e2e(ctx, d, harness, js):
    res, _, _ = driver(d, "e2e", "--harness", harness, "--harness-js", js,
                       "--harness-bin", os.path.join(HARNESSES, ".bin"),
                       "--model-url", f"http://127.0.0.1:{ctx.model.port}/v1",
                       "--instance", "it-e2e", "--pool", "proj-1:sess-1")
    reply = "Hello from the fake model."
    t1, t2 = res["turn1"], res["turn2"]
    assert res["create"]["outcome"] == "created", res
    # codex prefixes a note about the unknown model slug; the reply follows it
    assert t1["prompt"]["text"].endswith(reply), res
    assert t1["prompt"]["stopReason"] == "end_turn", res
    assert t1["warmPrompt"]["text"].endswith(reply), res
    assert res["resume"]["outcome"] == "resumed", res
    assert res["resume"]["id"] == res["create"]["id"], "resume must reuse the sandbox"
    assert t2["prompt"]["text"].endswith(reply), res
    # workspace once: the first start uploads, the resumed one finds nothing changed
    assert t1["bridge"]["uploaded"] > 0 and t2["bridge"]["uploaded"] == 0, res
    return res


def test_daytona_codex_turns_warm_by_default_then_stopped_and_resumed(ctx):
    if not os.path.exists(CODEX_ACP):
        raise stack.SkipTest("codex-acp is not installed (make harnesses)")
    with fake() as d:
        res = e2e(ctx, d, "codex", CODEX_ACP)
        # codex is a measured harness: warm without asking, the idle window as auto-stop
        assert res["autoStopMinutes"] == 5, res
        assert res["turn1"]["bridge"]["uploaded"] == 3, res  # config.toml, env, launcher
        assert len(routes(d, "POST /api/sandbox")) == 1
        assert len(routes(d, "POST /toolbox/{id}/files/bulk-upload")) == 1
    no_local_leftovers()


def test_daytona_pi_turns_warm_then_stopped_and_resumed(ctx):
    if not os.path.exists(PI_ACP):
        raise stack.SkipTest("pi-acp is not installed (make harnesses)")
    with fake() as d:
        res = e2e(ctx, d, "pi", PI_ACP)
        t1, t2 = res["turn1"], res["turn2"]
        assert t1["bridge"]["uploaded"] == 4, res  # models.json, settings.json, env, launcher
        # the 300 s remote idle window is the sandbox's auto-stop
        assert res["autoStopMinutes"] == 5 and res["create"]["autoStop"] == 5, res
        creates = routes(d, "POST /api/sandbox")
        assert len(creates) == 1, creates
        assert len(routes(d, "POST /toolbox/{id}/files/bulk-upload")) == 1
        body = creates[0]["body"]
        assert not body.get("envKeys"), f"create env must hold nothing: {body}"
        labels = body.get("labels") or {}
        assert set(labels) == {"agent-runner-instance", "agent-runner-pool",
                               "agent-runner-lease"}, labels
        for v in labels.values():
            assert "sess-1" not in v and "proj-1" not in v and MODEL_KEY not in v, labels
        # network off, with the model endpoint still reachable
        assert body.get("networkAllowList") == "127.0.0.1/32", body
        starts = routes(d, "POST /api/sandbox/{id}/start")
        assert len(starts) == 1, starts
        with open(d.calls_log) as f:
            log = f.read()
        assert MODEL_KEY not in log and API_KEY not in log
        assert 0 < t1["acpRoundTripMedianMs"] < 10000, t1
        LATENCIES.update({
            "create (lease acquired), ms": res["create"]["ms"],
            "stop until stopped, ms": res["stopMs"],
            "resume from stopped, ms": res["resume"]["ms"],
            "ACP round trip on the warm harness (median of 10), ms":
                round(t1["acpRoundTripMedianMs"], 1),
            "pi-acp initialize (node start) cold, ms": t1["initializeMs"],
            "first prompt round trip, ms": t1["prompt"]["ms"],
            "warm prompt round trip, ms": t1["warmPrompt"]["ms"],
            "upload (4 files, one bulk call), ms": t1["bridge"]["uploadMs"],
            "harness start (session+exec+stream), ms": t1["bridge"]["startMs"],
        })
        print("    latencies against the fake (fast profile): " + json.dumps(LATENCIES))
    no_local_leftovers()


def test_daytona_429_on_create_is_retried_then_surfaced_as_capacity(ctx):
    with fake() as d:
        d.inject(kind="rate_limit", scope="sandbox-create", count=2, retryAfter=1)
        res, _, _ = driver(d, "acquire", "--per-turn", "--release", "destroy")
        assert res["lease"]["outcome"] == "created", res
        # two 429s waited out, then the create went through
        assert len([c for c in routes(d, "POST /api/sandbox") if c["status"] == 429]) == 2
        d.wait_state(res["lease"]["id"], ["gone"])
        seq = max(c["seq"] for c in d.calls())
        d.inject(kind="rate_limit", scope="sandbox-create", count=-1, retryAfter=1,
                 retryAfterStyle="plain")
        res, _, _ = driver(d, "acquire", "--per-turn", check=False)
        assert not res["ok"] and res["capacity"], res
        assert res["error"].startswith("sandbox_capacity:"), res
        # bounded: three waits (four 429s), then the error
        throttled = [c for c in d.routes("POST /api/sandbox", since=seq) if c["status"] == 429]
        assert len(throttled) == 4, throttled
        d.clear_injections()
    no_local_leftovers()


def test_daytona_failed_or_uncertain_creates_leave_nothing_behind(ctx):
    with fake() as d:
        # the answer is lost after the record was stored: found by name and adopted
        for mode in ("5xx", "drop"):
            d.inject(kind="create_fail", mode=mode)
            res, _, _ = driver(d, "acquire", "--per-turn", "--release", "destroy")
            assert res["lease"]["outcome"] == "created", res
            d.wait_state(res["lease"]["id"], ["gone"])
        statuses = [c["status"] for c in routes(d, "POST /api/sandbox")]
        assert statuses == [500, "dropped"], statuses  # one create each: adopted, not redone
        # the sandbox ends in error: the create fails with the reason and the record is deleted
        d.inject(kind="create_state", state="error", errorReason="no capacity on runner")
        res, _, _ = driver(d, "acquire", "--per-turn", check=False)
        assert not res["ok"] and "no capacity on runner" in res["error"], res
        assert not res.get("capacity"), res
        assert all(s["state"] in ("destroying", "destroyed") for s in d.state()["sandboxes"])
    no_local_leftovers()


def test_daytona_resume_decisions_replacement_reasons(ctx):
    with fake() as d:
        common = ["--warm", "--pool", "p:resume"]
        first, _, _ = driver(d, "acquire", *common, "--release", "keep")
        old = first["lease"]["id"]
        # a non-recoverable error: replaced, the old one deleted
        d.ctl("POST", f"/sandbox/{old}/state", {"state": "error", "errorReason": "boom"})
        res, _, _ = driver(d, "acquire", *common, "--had-lease", "--release", "keep")
        lease = res["lease"]
        assert lease["outcome"] == "replacement" and lease["reason"] == "resume_failed", res
        assert lease["previous"] == old and lease["id"] != old, res
        d.wait_state(old, ["gone"])
        # the container is gone: the lease expired
        old = lease["id"]
        d.ctl("POST", f"/sandbox/{old}/state", {"state": "error", "noSuchContainer": True})
        res, _, _ = driver(d, "acquire", *common, "--had-lease", "--release", "keep")
        assert (res["lease"]["outcome"], res["lease"]["reason"]) == ("replacement", "expired")
        d.wait_state(old, ["gone"])
        # a recoverable error is recovered, not replaced
        old = res["lease"]["id"]
        d.ctl("POST", f"/sandbox/{old}/state", {"state": "error", "errorReason": "flaky",
                                                 "recoverable": True})
        res, _, _ = driver(d, "acquire", *common, "--had-lease", "--release", "keep")
        assert res["lease"]["outcome"] == "resumed" and res["lease"]["id"] == old, res
        # archived: started again
        d.ctl("POST", f"/sandbox/{old}/state", {"state": "archived"})
        res, _, _ = driver(d, "acquire", *common, "--had-lease", "--release", "keep")
        assert res["lease"]["outcome"] == "resumed" and res["lease"]["id"] == old, res
        # it vanished behind our back: not found
        d.ctl("POST", f"/sandbox/{old}/vanish", {})
        res, _, _ = driver(d, "acquire", *common, "--had-lease", "--release", "destroy")
        assert (res["lease"]["outcome"], res["lease"]["reason"]) == ("replacement",
                                                                     "not_found"), res
        d.wait_state(res["lease"]["id"], ["gone"])
    no_local_leftovers()


def test_daytona_idle_window_stops_the_sandbox_and_the_next_turn_resumes(ctx):
    with fake() as d:
        # codex is a measured harness: warm by default, auto-stop = the 5 min idle window
        res, _, _ = driver(d, "acquire", "--harness", "codex", "--pool", "p:idle",
                           "--release", "keep")
        assert res["lifecycle"] == "warm" and res["lease"]["autoStop"] == 5, res
        sb = res["lease"]["id"]
        d.advance(4 * 60)
        assert d.get(sb)["state"] == "started", "stopped before its idle window"
        d.advance(2 * 60)
        d.wait_state(sb, ["stopped"])
        res, _, _ = driver(d, "acquire", "--harness", "codex", "--pool", "p:idle",
                           "--had-lease", "--release", "destroy")
        assert res["lease"]["outcome"] == "resumed" and res["lease"]["id"] == sb, res
        d.wait_state(sb, ["gone"])
        # pi is not measured: per-turn by default, an ephemeral sandbox with a 15 min backstop
        res, _, _ = driver(d, "acquire", "--harness", "pi", "--pool", "p:pi",
                           "--release", "keep")
        assert res["lifecycle"] == "per_turn", res
        assert res["lease"]["autoStop"] == 15 and res["lease"]["autoDelete"] == 0, res
        sb = res["lease"]["id"]
        d.advance(16 * 60)  # a crashed runner: the backstop stops it, and stop deletes it
        d.wait_state(sb, ["gone"])
    no_local_leftovers()


def test_daytona_exec_streams_in_order_and_survives_a_dropped_stream(ctx):
    with fake() as d:
        res, _, _ = driver(d, "acquire", "--warm", "--pool", "p:exec", "--release", "keep")
        sb = res["lease"]["id"]
        cmd = "for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; done; exit 3"
        res, recs, _ = driver(d, "exec", "--id", sb, "--cmd", cmd)
        chunks = [(r["stream"], r["data"]) for r in recs if "stream" in r]
        out = "".join(t for s, t in chunks if s == "stdout")
        err = "".join(t for s, t in chunks if s == "stderr")
        assert out == "out1\nout2\nout3\n" and err == "err1\nerr2\nerr3\n", chunks
        assert res["exitCode"] == 3 and res["stdout"] == out and res["stderr"] == err, res
        span = res["span"]
        assert span["agent_runner.sandbox.outcome"] == "failed", span
        assert span["agent_runner.sandbox.exec.command"] == "other", span
        assert len(span["agent_runner.sandbox.sandbox_id"]) == 12 and sb not in json.dumps(span)
        # the stream closes early: reconnect, replay skipped, nothing lost or doubled
        d.inject(kind="ws_close_early", afterBytes=9)
        res, recs, _ = driver(d, "exec", "--id", sb,
                              "--cmd", "echo one; sleep 0.3; echo two; sleep 0.3; echo three")
        out = "".join(r["data"] for r in recs if r.get("stream") == "stdout")
        assert out == "one\ntwo\nthree\n" and res["exitCode"] == 0, recs
        assert res["span"]["agent_runner.sandbox.exec.command"] == "echo", res
        # a timeout kills the command's session
        res, _, _ = driver(d, "exec", "--id", sb, "--cmd", "sleep 30", "--timeout-ms", "1000")
        assert res["timedOut"] and not res["exited"], res
        sessions = d.internal(sb)["sessions"]
        assert not any(s.get("sessionId", "").startswith("ar-x-") for s in sessions), sessions
        d.delete(sb)
    no_local_leftovers()


def test_daytona_relay_keeps_line_order_across_reconnects_and_split_markers(ctx):
    with fake() as d:
        d.profile(wsMaxFrame=7, wsRandomSplit=True)
        res, _, _ = driver(d, "acquire", "--warm", "--pool", "p:relay", "--release", "keep")
        sb = res["lease"]["id"]
        d.inject(kind="ws_close_early", afterBytes=40)
        lines = "".join(f"line {i} {'x' * (i % 13)}\n" for i in range(60))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "AGENT_RUNNER_DAYTONA_API_URL": d.api_url,
               "AGENT_RUNNER_DAYTONA_API_KEY": API_KEY}
        # echo 60 lines slowly (so the stream is open while they come), then exit: stdout
        # reaches EOF through the bridge and the exit status arrives
        prog = ("i=0; while [ $i -lt 60 ] && IFS= read -r l; do printf '%s\\n' \"$l\"; "
                "sleep 0.02; i=$((i+1)); done")
        out = subprocess.run([DRIVER, "relay", "--id", sb, "--cmd", prog],
                             input=lines, capture_output=True, text=True, timeout=120, env=env)
        res = json.loads(out.stdout.splitlines()[-1])
        assert res["ok"], out.stdout + out.stderr
        assert res["stdout"] == lines, res["stdout"][:300]
        assert res["exitStatus"] == 0 and res["bridge"]["reconnects"] >= 1, res
        d.profile(name="fast")
        d.delete(sb)
    no_local_leftovers()


def test_daytona_restart_sweep_adopts_live_and_deletes_orphans(ctx):
    with fake() as d:
        live, _, _ = driver(d, "acquire", "--warm", "--pool", "p:live", "--instance", "i1",
                            "--release", "keep")
        orphan, _, _ = driver(d, "acquire", "--warm", "--pool", "p:orphan", "--instance", "i1",
                              "--release", "keep")
        retained, _, _ = driver(d, "acquire", "--warm", "--pool", "p:kept", "--instance", "i1",
                                "--release", "stop")
        per_turn, _, _ = driver(d, "acquire", "--per-turn", "--instance", "i1",
                                "--release", "keep")
        other, _, _ = driver(d, "acquire", "--warm", "--pool", "p:x", "--instance", "i2",
                             "--release", "keep")
        d.wait_state(retained["lease"]["id"], ["stopped"])
        res, _, _ = driver(d, "sweep", "--instance", "i1", "--live", live["lease"]["id"])
        assert res["seen"] == 4 and res["kept"] == 2 and res["deleted"] == 2, res
        for gone in (orphan, per_turn):
            d.wait_state(gone["lease"]["id"], ["gone"])
        for kept in (live, retained, other):
            assert d.get(kept["lease"]["id"])["id"] == kept["lease"]["id"]
            d.delete(kept["lease"]["id"])
    no_local_leftovers()
