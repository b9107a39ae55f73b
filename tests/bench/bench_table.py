"""The table of tests/bench/run.py: the targets, one function of rows per part of the run,
and BENCHMARKS.md around them. Pure: everything here formats what run.py measured (r)."""

import statistics

import bench_cluster
import bench_gateway
import bench_load
import bench_tools
import bench_turns

MiB = 1024 * 1024

TARGETS = {
    "warm_p50_1": 0.5,        # ms (issue 27)
    "warm_tps_64": 2800.0,    # turns/s (issue 27)
    "warm_p99_64": 50.0,      # ms
    "warm_syscalls": 40.0,    # system calls per warm turn in a worker (issue 27)
    "cold_p50": 25.0,         # ms
    "cold_cpu_ms": 25.0,      # CPU per cold turn, the whole stack (issue 27)
    "net_p50": 15.0,          # ms: what the network setup adds to a cold start
    "pi_ratio": 10.0,
    "daytona_ratio": 4.0,     # Paperclip on Daytona: follow-up 30.4 s per-turn -> 7.6 s warm
    "keeper_rss": 4 * MiB,
    "spare_first_ms": 300.0,  # first delta of a new pi session served from a spare
    "cold_first_ms": 800.0,   # the same, cold
    "spare_pss": 120 * MiB,   # one idle spare
}


def mib(n):
    return f"{n / MiB:.2f} MiB"


def fmt_ms(v):
    return f"{v:.3f} ms" if v < 10 else f"{v:.1f} ms"


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


# --- the table -------------------------------------------------------------------------------

def verdict(ok):
    return "met" if ok else "**missed**"


def build_rows(r):
    """The rows of the parts that ran (r["parts"])."""
    rows = []
    w1, w16, w64, cold = r.get("w1"), r.get("w16"), r.get("w64"), r.get("cold")

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

    if w1:
        rows.extend(warm_rows(w1, w16, w64, lg, followup))
    if "syscalls" in r:
        rows.extend(syscall_rows(r["syscalls"]))
    if cold:
        rows.extend(cold_rows(cold, w1, lg))
    if r.get("stages"):
        rows.extend(stage_rows(r["stages"]))
    if "net" in r:
        rows.extend(net_rows(r["net"]))
    if "pi_cold" in r:
        rows.extend(pi_rows(r))
    elif "pi" in r["parts"]:
        rows.append(("3. pi first message_delta, cold and warm", "not run", "cold/warm >= 10",
                     "harness pi_core is not installed here: `make harnesses`", ""))
    if "pool" in r:
        rows.extend(pool_rows(r["pool"]))
    if "rss" in r:
        rows.extend(rss_rows(r["rss"]))
    if "daytona" in r:
        rows.extend(daytona_rows(r))
    elif "daytona" in r["parts"]:
        rows.append(("6. daytona cold / warm / resumed", "not run",
                     f"cold/warm >= {TARGETS['daytona_ratio']:g}", r.get("daytona_why", ""),
                     ""))
    if "tools" in r:
        rows.extend(bench_tools.rows(r["tools"], fmt_ms))
    if "spares" in r and "pi_cold" in r:
        rows.extend(spare_rows(r))
    elif "spares" in r["parts"]:
        rows.append(("8. pi spares", "not run", "spare <= 300 ms, cold <= 800 ms",
                     r.get("spares_why", "needs the pi part and harness pi_core"), ""))
    if "cluster" in r:
        rows.extend(bench_cluster.rows(r["cluster"], fmt_ms))
    elif "cluster" in r["parts"]:
        rows.append(("9. several hosts", "not run", "+<= 1 ms forwarded",
                     r.get("cluster_why", ""), ""))
    if "load" in r:
        rows.extend(bench_load.rows(r["load"], fmt_ms))
    elif "load" in r["parts"]:
        rows.append(("10. cold turn of a 20-turn pi conversation, load vs replay", "not run",
                     "—", r.get("load_why", ""), ""))
    if "turns" in r:
        rows.extend(bench_turns.rows(r["turns"], fmt_ms))
    if "gateway" in r:
        rows.extend(bench_gateway.rows(r["gateway"], fmt_ms))
    return rows


def warm_rows(w1, w16, w64, lg, followup):
    t = TARGETS
    rows = []
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
    return rows


def cold_rows(cold, w1, lg):
    t = TARGETS
    rows = []
    ratio = (f"cold/warm p50 = {cold['all']['p50_ms'] / w1['all']['p50_ms']:.1f}x "
             "(warm: 1-session run)" if w1 else "")
    cpu_ms = cold["stack_cpu_s"] / cold["turns"] * 1000
    rows.append(("2. cold local turn p50", fmt_ms(cold["all"]["p50_ms"]),
                 f"<= {t['cold_p50']:g} ms ({verdict(cold['all']['p50_ms'] <= t['cold_p50'])})",
                 lg(cold) + spread(cold, "cpu") + spread(cold, "other"), ratio))
    rows.append(("2. CPU per cold local turn", fmt_ms(cpu_ms),
                 f"<= {t['cold_cpu_ms']:g} ms ({verdict(cpu_ms <= t['cold_cpu_ms'])})",
                 "same run: nginx, master, workers, keepers, sandboxes and agents (with the "
                 "children they reaped) over the measured phase, per turn", ""))
    rows.append(("2. cold local turn p99", fmt_ms(cold["all"]["p99_ms"]), "—",
                 f"same run; p50 of the parts: environment_ready (keeper + bwrap + agent + ACP "
                 f"initialize + session/new) at {fmt_ms(cold['environment_ready']['p50_ms'])}, "
                 f"first message_delta at {fmt_ms(cold['first_delta']['p50_ms'])}, result (after "
                 f"the per-turn teardown) at {fmt_ms(cold['all']['p50_ms'])}", ""))
    return rows


def syscall_rows(sc):
    t = TARGETS
    if "error" in sc:
        return [("1. system calls per warm turn, one worker", "not run",
                 f"<= {t['warm_syscalls']:g}", sc["error"], "")]
    top = sorted(sc["worker_calls"].items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{name} {n:.2f}" for name, n in top if n >= 0.05)
    ktop = sorted(sc["keeper_calls"].items(), key=lambda kv: -kv[1])
    kshown = ", ".join(f"{name} {n:.2f}" for name, n in ktop if n >= 0.05)
    return [("1. system calls per warm turn in a worker", f"{sc['worker']:.1f}",
             f"<= {t['warm_syscalls']:g} ({verdict(sc['worker'] <= t['warm_syscalls'])})",
             f"`strace -c -f` on both workers over {sc['turns']} one-session warm turns "
             f"({sc['errors']} errors; every thread of the workers counted, whatever it did "
             f"meanwhile): {shown}; the session's keeper: {sc['keeper']:.1f} per turn "
             f"({kshown})", "")]


def stage_rows(lines):
    """A row per stage of a cold turn: p50 of its wall time and of its CPU."""
    rows = []
    names = [st[0] for st in lines[0]["stages"]]
    total = statistics.median(x["totalMs"] for x in lines)
    notes = {
        "request to environment": "the engine's request handling before the environment "
                                  "(worker CPU not sampled here: a CPU clock read is a system "
                                  "call on every turn)",
        "uid, cgroup and workspace set-up": "worker: session slot, folder, the slot's uid, "
                                            "workspace tmpfs and files, cgroup made",
        "keeper start": "worker spawns the keeper -> keeper exec'ed, spec read, socket, "
                        "detaching fork, slot attached, channel open; CPU: the worker's spawn "
                        "+ the keeper's",
        "network namespace": "keeper: sandbox_egress_new (namespace, loopback, routes, "
                             "nf_tables, proxy and DNS sockets)",
        "/etc and seccomp programme": "keeper: bwrap's command line (/etc texts, seccomp "
                                      "programme, files as memfds)",
        "bwrap until exec": "keeper: stdio pairs, fork, the child enters cgroup, namespace, "
                            "uid, exec's bwrap; CPU: the keeper's only (the child's is not "
                            "counted)",
        "ready line and attach": "keeper's ready line -> worker connected and read its hello",
        "harness start and ACP initialize": "bwrap's own set-up, the harness's exec and start, "
                                            "its initialize answer (one stage: the harness "
                                            "cannot answer before it started); CPU: the "
                                            "worker's only",
        "ACP session/new": "CPU: the worker's only",
        "prompt to first delta": "CPU quota written, prompt sent, first message_delta emitted",
        "first delta to the turn's end": "the rest of the turn, the after-turn limit check",
        "teardown": "the per-turn environment torn down (keeper, sandbox, cgroup, workspace)",
    }
    for i, name in enumerate(names):
        wall = statistics.median(x["stages"][i][1] for x in lines)
        cpu = statistics.median(x["stages"][i][2] for x in lines)
        rows.append((f"2. cold stage: {name} (p50)", fmt_ms(wall), "—",
                     f"CPU p50 {fmt_ms(cpu)}; {notes.get(name, '')}",
                     f"{wall / total * 100:.0f} % of the stamped {fmt_ms(total)}"))
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
  texts of the previous turn (engine/session/identity.c), so `[u2, a2, u3]` after `[u1, a1, u2]` is
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
- System calls per warm turn: `strace -c -f` attached to both workers (every thread) and the
  keepers while loadgen is stopped, then 1000 one-session warm turns, then detached while it
  is stopped again; the counts over the turns. Calls the workers' other threads make meanwhile
  (timers, sweeps) count too; the run is slower under strace, so they weigh a little more.
- Cold stages: the worker and the keeper stamp CLOCK_MONOTONIC and their own CPU clock at the
  stage boundaries (engine/telemetry/stages.h, AGENT_RUNNER_STAGE_LOG); p50 over the cold
  run's turns, each stage's p50 on its own (they need not add up to the total's p50). CPU is
  the worker thread's and the keeper process's; the sandbox's own (bwrap, the harness) is not
  in the stage rows, only in "CPU per cold local turn".
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
- Tool calls (7): a callback tool the runner executes (harness -> keeper channel -> worker ->
  libcurl -> callback -> back); the callback is a keep-alive server in the driver that times
  itself (first request byte to last answer byte), and that time is subtracted from each
  call's round trip. Scripted: the round trip timed inside the agent. pi: from the fake
  model's answer asking for the tool to pi's next model request, so pi's own handling of a
  tool call is in it. Agenta's runner relays tool calls through files polled every 300 ms.
- Turns (11): every streamed record is numbered; the journal keeps a turn's records in a file
  outside the worker (tests/bench/bench_turns.py). Row 1's one-session warm turn on this
  stack (journal on, the default) and on a second stack with AGENT_RUNNER_TURN_JOURNAL_MS=0,
  their runs interleaved; reattach: GET /turns/{{id}}/events?after=1 of a finished turn on a
  keep-alive TLS connection, request written to first record read.
"""
    with open(path, "w") as f:
        f.write(text)


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
         f"cold/warm = {mc / mw:.1f}x (Paperclip on Daytona: 30.4 s -> 7.6 s = 4.0x)"),
        ("6. daytona follow-up after the idle stop (median)", f"{mr * 1000:.0f} ms", "—",
         f"idle window 3 s: the keeper stopped the sandbox; the next turn started it again "
         f"({d['starts']} starts in all), a fresh codex, bulk uploads per session: "
         f"{d['uploads']} (1 = the create's only); all: {all_of('resumed')}",
         f"cold/resumed = {mc / mr:.1f}x"),
    ]


def spare_rows(r):
    t = TARGETS
    rows = []
    sp, cold = r["spares"], r["pi_cold"]
    ms, mc = statistics.median(sp["first"]) * 1000, statistics.median(cold) * 1000
    rows.append(("8. pi new session first message_delta from a spare (median)", f"{ms:.0f} ms",
                 f"<= {t['spare_first_ms']:g} ms ({verdict(ms <= t['spare_first_ms'])})",
                 f"{len(sp['first'])} new sessions on a stack with AGENT_RUNNER_SPARES=pi=2, "
                 "each claiming a spare (the next one once the master replaced it), through "
                 "TLS nginx; all: " + ", ".join(f"{x * 1000:.0f}" for x in sp["first"]) + " ms",
                 f"cold/spare = {mc / ms:.1f}x"))
    own = r.get("pi_own_start") or []
    mo = statistics.median(own) * 1000 if own else 0
    rows.append(("8. pi new session first message_delta, cold (median)", f"{mc:.0f} ms",
                 f"<= {t['cold_first_ms']:g} ms ({verdict(mc <= t['cold_first_ms'])})",
                 f"row 3's {len(cold)} cold turns (spares off; pi's version probe answered "
                 "without starting pi; pi started at once beside pi-acp, both from one-file "
                 "builds with code caches; the CPU quota written once session/new answered)",
                 f"cold / pi's own start = {mc / mo:.2f}x" if mo else ""))
    if own:
        rows.append(("8. pi's own start on this machine (median): the floor of a cold start",
                     f"{mo:.0f} ms", "—",
                     "pinned Node + pi's one-file build with its code cache (what a cold "
                     "sandbox runs, tools/bundle) --mode rpc outside any sandbox, spawn -> answer "
                     "to a get_state sent at spawn; all: "
                     + ", ".join(f"{x * 1000:.0f}" for x in own) + " ms", ""))
    pkg = r.get("pi_own_start_package") or []
    if pkg:
        mp = statistics.median(pkg) * 1000
        rows.append(("8. pi's own start from the package's cli.js (median)", f"{mp:.0f} ms",
                     "— (627 ms on the reference machine of the spares study)",
                     "the same, starting the package's dist/cli.js (what pi-acp would run, and "
                     "what a cold sandbox ran before the one-file build); all: "
                     + ", ".join(f"{x * 1000:.0f}" for x in pkg) + " ms",
                     f"package / build = {mp / mo:.2f}x" if mo else ""))
    rows.append(("8. idle pi spare PSS", f"{sp['pss'] / MiB:.0f} MiB",
                 f"<= {t['spare_pss'] / MiB:.0f} MiB ({verdict(sp['pss'] <= t['spare_pss'])})",
                 f"sum of Pss (/proc/<pid>/smaps_rollup) over the spare's {sp['pss_procs']} "
                 "sandbox processes (bubblewrap x2, pi-acp, pi, pi-stdio's holder), 5 s after the "
                 "second spare was "
                 "ready, two spares side by side",
                 f"its keeper: {sp['keeper_pss'] / MiB:.1f} MiB more"))
    return rows
