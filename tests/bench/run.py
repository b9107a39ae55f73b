#!/usr/bin/env python3
"""Benchmarks for `make bench`: one table on stdout, the same table with the machine
description in BENCHMARKS.md.

Starts its own stack in a temp dir (tests/integration/stack.py: nginx with TLS on a loopback
port, spawn-fcgi, agent-runnerd master + workers, keepers and bubblewrap sandboxes per
environment, the scripted fake model for pi) and stops everything it started. Rows:

  1. warm turns through TLS nginx, keep-alive, scripted zero-latency agent (build/bin/loadgen):
     p50/p99 at 1 session, turns/s and p99 at 16 and 64 concurrent sessions
  2. cold local turns (no sessionId: new keeper + bwrap + agent per turn), cold/warm p50
  3. real pi (pi_core) against tests/fixtures/fake_model.py: time to the first message_delta
     of a cold turn and of a warm follow-up, and their ratio
  2. (network) what a sandbox's own network namespace, egress proxy and name server add to a
     cold start: the keeper's sandbox_egress_new + free (build/bin/bench-net)
  4. the shm session table with 10,000 slots (build/bin/bench-pool)
  5. VmRSS of the master, a worker, an idle keeper (scripted and pi), harness excluded/included
  7. pi spares (issue 17): a new pi session's first message_delta served from a pre-started
     spare (a second stack with AGENT_RUNNER_SPARES=pi=2) and cold (the first stack, spares
     off), medians of 10, through nginx end to end; the PSS of one idle spare
  6. sandbox:"daytona" against the fake Daytona server with its "real" timing profile
     (tests/fixtures/fake_daytona.py: published create/start/upload delays): a cold first
     codex turn (sandbox created), its warm follow-up (same keeper and sandbox), and a
     follow-up after the idle window stopped the sandbox (resumed), and warm/cold

usage: run.py [--out BENCHMARKS.md] [--quick] [--profile DIR] [--wait-idle S]
  --quick    fewer turns (a smoke run, figures are noisier)
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
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import fake_daytona_ctl  # noqa: E402
import stack  # noqa: E402

BIN = stack.BIN
PROGRAMS = ("loadgen", "bench-pool", "bench-net", "agent-runnerd", "agent-runner-keeper",
            "acp-scripted", "agent-runner-ctl")
MiB = 1024 * 1024

TARGETS = {
    "warm_p50_1": 1.0,        # ms
    "warm_tps_64": 3000.0,    # turns/s
    "warm_p99_64": 50.0,      # ms
    "cold_p50": 25.0,         # ms
    "net_p50": 15.0,          # ms: what the network setup adds to a cold start
    "pi_ratio": 10.0,
    "daytona_ratio": 4.0,     # seed 004: 30.4 s -> 7.6 s
    "keeper_rss": 4 * MiB,
    "spare_first_ms": 300.0,  # issue 17
    "cold_first_ms": 800.0,
    "spare_pss": 120 * MiB,
}


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


def mib(n):
    return f"{n / MiB:.2f} MiB"


def fmt_ms(v):
    return f"{v:.3f} ms" if v < 10 else f"{v:.1f} ms"


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


def spread(res, what):
    runs = res.get("runs", [res])
    if what == "other":
        vals = [r["other"] * 100 for r in runs]
        return (f"; CPU outside the stack and driver: {min(vals):.0f}-{max(vals):.0f} %"
                if len(runs) > 1 else f"; CPU outside the stack and driver: {vals[0]:.0f} %")
    if what == "cpu":
        return (f"; CPU per turn: stack {res['stack_cpu_s'] / res['turns'] * 1e6:.0f} us, "
                f"driver {res['driver_cpu_s'] / res['turns'] * 1e6:.0f} us")
    if len(runs) < 2:
        return ""
    if what == "tps":
        vals = [r["turns_per_s"] for r in runs]
        return f"; {len(runs)} runs: {min(vals):.0f}-{max(vals):.0f} turns/s"
    vals = [r["all"][what] for r in runs]
    return f"; {len(runs)} runs: {min(vals):.3g}-{max(vals):.3g} ms"


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


def net_rows(net):
    t = TARGETS["net_p50"]
    if "error" in net:
        return [("2. network setup per cold start p50", "not run", f"< {t:g} ms",
                 f"`bench-net`: {net['error']}", "")]
    a, u = net["anchored"], net["unanchored"]
    p50 = a["p50_us"] / 1000
    return [("2. network setup per cold start p50", fmt_ms(p50),
             f"< {t:g} ms ({verdict(p50 < t)})",
             f"`{net['cmd']}`: the keeper's sandbox_egress_new + free (new network namespace, "
             f"loopback + routes, nf_tables batch, proxy and DNS sockets, /etc texts) with the "
             f"master's anchor namespace held; p99 {fmt_ms(a['p99_us'] / 1000)}, CPU "
             f"{a['cpu_us'] / 1000:.2f} ms per setup; without the anchor p50 "
             f"{fmt_ms(u['p50_us'] / 1000)}, CPU {u['cpu_us'] / 1000:.2f} ms",
             "included in the cold turn above")]


def pi_body(model, text, project, session, history=None):
    req = stack.pi_request(model, text, projectId=project, sessionId=session)
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


def spare_rows(r):
    t = TARGETS
    rows = []
    sp, cold = r["spares"], r["pi_cold"]
    ms, mc = statistics.median(sp["first"]) * 1000, statistics.median(cold) * 1000
    rows.append(("7. pi new session first message_delta from a spare (median)", f"{ms:.0f} ms",
                 f"<= {t['spare_first_ms']:g} ms ({verdict(ms <= t['spare_first_ms'])})",
                 f"{len(sp['first'])} new sessions on a stack with AGENT_RUNNER_SPARES=pi=2, "
                 "each claiming a spare (the next one once the master replaced it), through "
                 "TLS nginx; all: " + ", ".join(f"{x * 1000:.0f}" for x in sp["first"]) + " ms",
                 f"cold/spare = {mc / ms:.1f}x"))
    rows.append(("7. pi new session first message_delta, cold (median)", f"{mc:.0f} ms",
                 f"<= {t['cold_first_ms']:g} ms ({verdict(mc <= t['cold_first_ms'])})",
                 f"row 3's {len(cold)} cold turns (spares off; pi's version probe answered "
                 "without starting pi)", ""))
    rows.append(("7. idle pi spare PSS", f"{sp['pss'] / MiB:.0f} MiB",
                 f"<= {t['spare_pss'] / MiB:.0f} MiB ({verdict(sp['pss'] <= t['spare_pss'])})",
                 f"sum of Pss (/proc/<pid>/smaps_rollup) over the spare's {sp['pss_procs']} "
                 "sandbox processes (bubblewrap x2, pi-acp, pi), 5 s after the second spare was "
                 "ready, two spares side by side",
                 f"its keeper: {sp['keeper_pss'] / MiB:.1f} MiB more"))
    return rows


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


def daytona_rows(r):
    t = TARGETS
    d = r["daytona"]
    mc, mw, mr = (statistics.median(d[k]) for k in ("cold", "warm", "resumed"))
    n = len(d["cold"])

    def all_of(k):
        return ", ".join(f"{x * 1000:.0f}" for x in d[k]) + " ms"

    how = (f"{n} new codex sessions on sandbox:\"daytona\" against tests/fixtures/"
           f"fake_daytona.py --profile real, request to result record")
    return [
        ("6. daytona cold first turn (median)", f"{mc * 1000:.0f} ms", "—",
         f"{how}; sandbox created ({d['creates']} creates in all), preflight exec, one bulk "
         f"upload, codex started over a toolbox session; all: {all_of('cold')}", ""),
        ("6. daytona warm follow-up (median)", f"{mw * 1000:.0f} ms",
         f"cold/warm >= {t['daytona_ratio']:g} ({verdict(mc / mw >= t['daytona_ratio'])})",
         f"same keeper, harness and sandbox right after; all: {all_of('warm')}",
         f"cold/warm = {mc / mw:.1f}x (seed 004: 30.4 s -> 7.6 s = 4.0x)"),
        ("6. daytona follow-up after the idle stop (median)", f"{mr * 1000:.0f} ms", "—",
         f"idle window 3 s: the keeper stopped the sandbox; the next turn started it again "
         f"({d['starts']} starts in all), a fresh codex, bulk uploads per session: "
         f"{d['uploads']} (1 = the create's only); all: {all_of('resumed')}",
         f"cold/resumed = {mc / mr:.1f}x"),
    ]


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


# --- the table -------------------------------------------------------------------------------

def verdict(ok):
    return "met" if ok else "**missed**"


def build_rows(r):
    rows = []
    w1, w16, w64, cold = r["w1"], r["w16"], r["w64"], r["cold"]

    def lg(res):
        runs = res.get("runs", [res])
        errors = sum(x["errors"] for x in runs)
        each = f"{len(runs)} x " if len(runs) > 1 else ""
        extra = (f"{each}{res['turns']} warm turns, {errors} errors, "
                 f"{sum(x['new_connections'] for x in runs)} new connections")
        if res["mode"] == "cold":
            extra = f"{each}{res['turns']} cold turns, {errors} errors"
        return f"`{res['cmd']}` ({extra})"

    def followup(res):
        f = res["followup"]
        return (f"; [user,assistant,user] follow-ups alone: p50 {fmt_ms(f['p50_ms'])}, "
                f"p99 {fmt_ms(f['p99_ms'])}")

    t = TARGETS
    rows.append(("1. warm turn p50, 1 session", fmt_ms(w1["all"]["p50_ms"]),
                 f"<= {t['warm_p50_1']:g} ms ({verdict(w1['all']['p50_ms'] <= t['warm_p50_1'])})",
                 lg(w1) + spread(w1, "p50_ms") + followup(w1) + spread(w1, "cpu") +
                 spread(w1, "other"), ""))
    rows.append(("1. warm turn p99, 1 session", fmt_ms(w1["all"]["p99_ms"]), "—",
                 f"same run; {w1['turns_per_s']:.0f} turns/s" + spread(w1, "p99_ms"), ""))
    rows.append(("1. warm turns/s, 16 sessions", f"{w16['turns_per_s']:.0f} turns/s", "—",
                 lg(w16) + spread(w16, "tps") + spread(w16, "cpu") + spread(w16, "other"),
                 f"{w16['turns_per_s'] / w1['turns_per_s']:.2f}x the 1-session rate"))
    rows.append(("1. warm turn p99, 16 sessions", fmt_ms(w16["all"]["p99_ms"]), "—",
                 f"same run; p50 {fmt_ms(w16['all']['p50_ms'])}" + spread(w16, "p99_ms"), ""))
    rows.append(("1. warm turns/s, 64 sessions", f"{w64['turns_per_s']:.0f} turns/s",
                 f">= {t['warm_tps_64']:g} ({verdict(w64['turns_per_s'] >= t['warm_tps_64'])})",
                 lg(w64) + spread(w64, "tps") + spread(w64, "cpu") + spread(w64, "other"),
                 f"{w64['turns_per_s'] / w16['turns_per_s']:.2f}x the 16-session rate"))
    rows.append(("1. warm turn p99, 64 sessions", fmt_ms(w64["all"]["p99_ms"]),
                 f"<= {t['warm_p99_64']:g} ms "
                 f"({verdict(w64['all']['p99_ms'] <= t['warm_p99_64'])})",
                 f"same run; p50 {fmt_ms(w64['all']['p50_ms'])}" + spread(w64, "p99_ms"), ""))
    rows.append(("2. cold local turn p50", fmt_ms(cold["all"]["p50_ms"]),
                 f"<= {t['cold_p50']:g} ms ({verdict(cold['all']['p50_ms'] <= t['cold_p50'])})",
                 lg(cold) + spread(cold, "cpu") + spread(cold, "other"), f"cold/warm p50 = {cold['all']['p50_ms'] / w1['all']['p50_ms']:.1f}x "
                           "(warm: 1-session run)"))
    rows.append(("2. cold local turn p99", fmt_ms(cold["all"]["p99_ms"]), "—",
                 f"same run; p50 of the parts: environment_ready (keeper + bwrap + agent + ACP "
                 f"initialize + session/new) at {fmt_ms(cold['environment_ready']['p50_ms'])}, "
                 f"first message_delta at {fmt_ms(cold['first_delta']['p50_ms'])}, result (after "
                 f"the per-turn teardown) at {fmt_ms(cold['all']['p50_ms'])}", ""))
    rows.extend(net_rows(r["net"]))
    if "pi_cold" in r:
        rows.extend(pi_rows(r))
    else:
        rows.append(("3. pi first message_delta, cold and warm", "not run", "cold/warm >= 10",
                     "harness pi_core is not installed here: `make harnesses`", ""))
    rows.extend(pool_rows(r["pool"]))
    rows.extend(rss_rows(r["rss"]))
    if "spares" in r and "pi_cold" in r:
        rows.extend(spare_rows(r))
    else:
        rows.append(("7. pi spares", "not run", "spare <= 300 ms, cold <= 800 ms",
                     r.get("spares_why", "harness pi_core is not installed here"), ""))
    if "daytona" in r:
        rows.extend(daytona_rows(r))
    else:
        rows.append(("6. daytona cold / warm / resumed", "not run",
                     f"cold/warm >= {TARGETS['daytona_ratio']:g}", r.get("daytona_why", ""),
                     ""))
    return rows


def pi_rows(r):
    t = TARGETS
    rows = []
    pc, pw = r["pi_cold"], r["pi_warm"]
    mc, mw = statistics.median(pc), statistics.median(pw)
    mr = statistics.median(r["pi_ready"])
    rows.append(("3. pi first message_delta, cold turn (median)", f"{mc * 1000:.0f} ms", "—",
                 f"{len(pc)} new sessions, pi_core vs fake_model.py, one keep-alive TLS "
                 f"connection; all: " + ", ".join(f"{x * 1000:.0f}" for x in pc) + " ms; "
                 f"environment_ready (keeper + bwrap + node/pi start + ACP initialize + "
                 f"session/new) at {mr * 1000:.0f} ms (median)",
                 f"{mr / mc * 100:.0f} % of it before the prompt is sent"))
    rows.append(("3. pi first message_delta, warm follow-up (median)", f"{mw * 1000:.1f} ms",
                 f"cold/warm >= {t['pi_ratio']:g} ({verdict(mc / mw >= t['pi_ratio'])})",
                 "[user, assistant, user] on the same session right after; all: " +
                 ", ".join(f"{x * 1000:.1f}" for x in pw) + " ms",
                 f"cold/warm = {mc / mw:.1f}x"))
    return rows


def pool_rows(pool):
    rows = []
    for key, label in (("lookup", "lookup (pool_find_locked, hit)"),
                       ("reserve_free", "reserve + free"),
                       ("park_checkout", "checkout + park"),
                       ("lock_unlock", "pool_lock + pool_unlock alone")):
        v = pool[key]
        note = ("two critical sections per op; hold times per section"
                if key in ("reserve_free", "park_checkout") else "")
        rows.append((f"4. pool {label}, 10,000 slots", f"{v['ns_per_op']:.0f} ns/op", "—",
                     f"`{pool['cmd']}`: lock hold p50 {v['hold_p50_ns']:.0f} ns, "
                     f"p99 {v['hold_p99_ns']:.0f} ns" + (f" ({note})" if note else ""),
                     f"{v['ns_per_op'] / pool['lock_unlock']['ns_per_op']:.1f}x lock+unlock"
                     if key != "lock_unlock" else
                     f"clock read inside a hold: {pool['clock_read_ns']} ns"))
    return rows


def rss_rows(m):
    t = TARGETS
    rows = []

    def parts(ps):
        return (f"anon {mib(ps.get('RssAnon', 0))}, file {mib(ps.get('RssFile', 0))}, "
                f"shmem {mib(ps.get('RssShmem', 0))}")

    rows.append(("5. RSS master", mib(m["master"].get("VmRSS", 0)), "—",
                 "VmRSS of the agent-runnerd master after the load runs; " +
                 parts(m["master"]), ""))
    rows.append(("5. RSS one worker", mib(m["worker"].get("VmRSS", 0)), "—",
                 f"VmRSS of a worker (2 workers x 96 threads) after the load runs; " +
                 parts(m["worker"]) + f"; the other worker {mib(m['worker2'])}", ""))
    for harness in ("scripted", "pi"):
        if harness not in m:
            continue
        ks, sandbox, npids, names = m[harness]
        kr = ks.get("VmRSS", 0)
        rows.append((f"5. RSS idle keeper ({harness}), harness excluded", mib(kr),
                     f"<= 4 MiB ({verdict(kr <= t['keeper_rss'])})",
                     "keeperPid from `agent-runner-ctl sessions --json`; " + parts(ks), ""))
        rows.append((f"5. RSS idle keeper ({harness}), sandbox + harness included",
                     mib(kr + sandbox), "—",
                     f"keeper + sandboxPid and its {npids - 1} descendants ({names}); "
                     f"VmRSS summed (shared pages counted per process)",
                     f"harness side {sandbox / max(kr, 1):.1f}x the keeper"))
    return rows


def render(rows):
    head = ("figure", "value", "target", "command / parameters", "ratio")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
    return "\n".join(lines)


def write_markdown(path, mach, table, r, wall):
    w = r["w64"]
    text = f"""# Benchmarks

Written by `make bench` (tests/bench/run.py) — do not edit by hand; run it again.

Machine: {mach['cpu']}, {mach['cores']} cores, {mach['memory']}, kernel {mach['kernel']};
{mach['nginx']}, {mach['curl']}, {mach['bwrap']}, node {mach['node']}.
Date: {mach['date']}. Before the run the machine was {mach['busy_before'] * 100:.0f} % busy
with other work (load average {' '.join(mach['loadavg'])}); after it, load average
{' '.join(r['loadavg_after'])}. The whole run took {wall:.0f} s.

Everything runs on this one machine and shares its {mach['cores']} cores: nginx (1 worker
process, TLS), the FastCGI master and 2 workers x 96 threads, one keeper + bwrap + agent per
environment, and the load driver (build/bin/loadgen, libcurl, one keep-alive connection per
session). Log level `info`; `AGENT_RUNNER_SESSION_POOL_MAX=256`,
`AGENT_RUNNER_MAX_CONCURRENT_RUNS=100000`.

{table}

How to read it:
- A warm turn is measured from handing the request to libcurl to the arrival of the final
  NDJSON `{{"kind":"result"}}` record. Every result is checked: HTTP 200, `ok:true`, and the
  output exactly `echo[k]: <text>` with the agent's own prompt count k (a turn that silently
  went cold would answer `echo[1]: Conversation so far: ...` and count as an error).
- Warm turns alternate a one-message `[user]` turn and a `[user, assistant, user]` follow-up
  on the same session (`--chain 1`). A fixed three-message window cannot stay warm for more
  than one follow-up: the runner compares the follow-up's earlier user texts with the user
  texts of the previous turn (engine/identity.c), so `[u2, a2, u3]` after `[u1, a1, u2]` is
  continuity-invalid and replays cold. A one-message turn needs no history check.
- Throughput counts the warm turns of the measured phase over its wall time (all sessions
  warm before the clock starts; each session's cold turn and its final `/kill` are not
  counted).
- CPU per turn (from /proc over the measured phase): "stack" is nginx, the master, the
  workers, the keepers, sandboxes and agents (with the children they reaped), "driver" is
  loadgen. "CPU outside the stack and driver" is the rest of the machine's busy time in the
  same window as a share of both cores: other jobs and kernel threads. When it is high the
  figures are low; the run waits up to 120 s for the machine to calm down before it starts.
- Cold turns carry no sessionId: a keeper, a bwrap sandbox and the scripted agent are
  started, the turn runs, and the environment is torn down before the result is sent.
- pi: first `message_delta` on an already open TLS connection; the cold turn includes starting
  node + pi inside bwrap, ACP initialize and session/new.
- Network setup: every sandbox gets its own network namespace; the keeper makes it (with
  the egress proxy's and name server's sockets) before it starts bubblewrap, so its cost is
  part of every cold start. Measured alone, in one process, as the keeper does it.
- Pool: one process, no contention; ns/op from a tight loop, hold times from a second loop
  reading CLOCK_MONOTONIC inside each critical section.
- daytona: whole turns (request to result record) of real codex on `sandbox:"daytona"`
  against tests/fixtures/fake_daytona.py with `--profile real` (Daytona's published create
  and start delays, per-call API/toolbox latency, upload costs; each sandbox is a local
  bubblewrap sandbox). Cold = a new sandbox (create, preflight exec, one bulk upload, harness
  start, ACP initialize + session/new, the prompt); warm = the same keeper, harness and
  sandbox; resumed = the session's next turn after its 3 s idle window stopped the sandbox
  (start, no upload, a fresh harness and a cold replay of the conversation).
"""
    with open(path, "w") as f:
        f.write(text)


# --- main ------------------------------------------------------------------------------------

def measure(args, r):
    """Everything on the stack; fills r."""
    q = args.quick
    model_tmp = tempfile.mkdtemp(prefix="ar-bench-model.")
    model = stack.FakeModel(model_tmp)
    env = {
        "AGENT_RUNNER_LOG_LEVEL": "info",
        "AGENT_RUNNER_SESSION_POOL_MAX": "256",
        "AGENT_RUNNER_MAX_CONCURRENT_RUNS": "100000",
        "AGENT_RUNNER_SESSION_TTL_MS": "600000",
    }
    dt = None
    try:
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
        r["w1"] = repeated(st, runs, "--sessions", "1", "--turns", "300" if q else "3000")
        r["w16"] = repeated(st, runs, "--sessions", "16", "--turns", "40" if q else "300")
        r["w64"] = repeated(st, runs, "--sessions", "64", "--turns", "20" if q else "120")
        r["cold"] = repeated(st, 1, "--cold", "--sessions", "1", "--turns",
                             "40" if q else "300")
        if args.profile:
            profile_run(st, args.profile)
        workers = sorted(st.worker_pids())
        mem = {"master": proc_status(st.master.pid), "worker": proc_status(workers[0]),
               "worker2": rss(workers[1]) if len(workers) > 1 else 0}
        mem["scripted"] = scripted_rss(st)
        status, _, health = st.request("GET", "/health", token=False)
        if status == 200 and "pi_core" in (health or {}).get("harnesses", []):
            log("running pi turns")
            r["pi_cold"], r["pi_warm"], r["pi_ready"], mem["pi"] = bench_pi(st, model,
                                                                            2 if q else 10)
        else:
            log("pi is not installed (make harnesses): skipping the pi rows")
        r["rss"] = mem
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
        if "pi_cold" in r:
            log("running pi turns on spares")
            try:
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
    ap.add_argument("--profile", metavar="DIR")
    ap.add_argument("--wait-idle", type=float, default=120, metavar="S",
                    help="wait up to S seconds for other work on the machine to calm down")
    args = ap.parse_args()
    t_all = time.monotonic()
    for prog in PROGRAMS:
        if not os.access(os.path.join(BIN, prog), os.X_OK):
            sys.exit(f"bench: {BIN}/{prog} is missing: run `make bench`")
    # run a private copy of the programs: a rebuild in the work tree while the benchmark runs
    # (another make in the same checkout) must not swap binaries under a running stack
    bin_copy = tempfile.mkdtemp(prefix="ar-bench-bin.")
    r = {}
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
        r["pool"] = bench_pool()
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
    write_markdown(args.out, mach, table, r, wall)
    log(f"wrote {args.out}")
    errors = sum(x["errors"] for k in ("w1", "w16", "w64", "cold") for x in r[k]["runs"])
    if errors:
        log(f"{errors} turns were wrong (see the loadgen errors above)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
