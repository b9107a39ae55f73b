"""Benchmark row 11 for tests/bench/run.py: what numbered, journaled streams cost.

  journal   the warm turn of row 1 (one session, one turn at a time) on the bench stack
            (journal on, the default) and on a second stack that differs only in
            AGENT_RUNNER_TURN_JOURNAL_MS=0 (records still numbered, nothing journaled), in the
            same loadgen runs: `loadgen --alternate URL --block 100` has a session on each stack
            and sends 100 turns to one, then 100 to the other, and so on, so that both see the
            same machine within a fraction of a second (a drift of the machine between runs,
            often larger than the journal's cost, hits both alike; a block keeps each stack's
            caches as warm as in row 1). Each run gives a ratio of the two p50s; the row shows
            the median of 8 runs' ratios (the stack named first alternating), and each side's
            p50 the median of its runs' p50s.
  reattach  GET /turns/{id}/events?after=1 of a finished scripted turn on a keep-alive TLS
            connection: from writing the request to reading the first replayed record.
"""

import json
import os
import statistics
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import stack  # noqa: E402
from turns import script, scripted_request  # noqa: E402

TARGET_RATIO = 1.05  # journal on / off, warm p50
RUNS = 8  # loadgen runs over both stacks (RUNS_QUICK with --quick)
RUNS_QUICK = 2
BLOCK = 100  # turns on one stack before the other's (loadgen --block)
TARGET_REATTACH_MS = 2.0


def journal_cost(st, env, model, loadgen, q, log):
    """Warm p50 with the journal (st) and without (a second stack), in the same loadgen runs:
    `--alternate` sends one session's turns to each stack, one turn in flight, BLOCK turns to
    one then BLOCK to the other, so that both see the same machine within a second (the first
    stack named alternating between runs). Each run gives a ratio; the row shows their median."""
    off_env = dict(env)
    off_env["AGENT_RUNNER_TURN_JOURNAL_MS"] = "0"
    off = stack.Stack(workers=2, threads=96, model=model, env=off_env)
    on_runs, off_runs, ratios, errors = [], [], [], 0
    turns = "500" if q else "4000"
    try:
        log(f"starting a second stack without the journal in {off.tmp}")
        off.start()
        loadgen(off, "--sessions", "4", "--turns", "50", "--prefix", "warmup")
        for i in range(RUNS_QUICK if q else RUNS):
            first, second = (st, off) if i % 2 == 0 else (off, st)
            res = loadgen(first, "--alternate", f"https://127.0.0.1:{second.port}/run",
                          "--block", str(BLOCK), "--turns", turns,
                          "--prefix", f"j{i}-{uuid.uuid4().hex[:6]}")
            a, b = res["all"]["p50_ms"], res["alternate"]["p50_ms"]
            on, offp = (a, b) if first is st else (b, a)
            on_runs.append(on)
            off_runs.append(offp)
            ratios.append(on / max(offp, 1e-9))
            errors += res["errors"]
    finally:
        off.stop()
        off.cleanup()
    return {"on": statistics.median(on_runs), "off": statistics.median(off_runs),
            "turns": turns, "paired": statistics.median(ratios), "ratios": ratios,
            "on_runs": on_runs, "off_runs": off_runs, "errors": errors}


def reattach_latency(st, n, log):
    """Request -> first replayed record of a finished turn's journal, n times."""
    ids = []
    c = st.connection(60)
    c.connect()
    h = {"content-type": "application/json", "accept": "application/x-ndjson",
         "authorization": "Bearer " + stack.TOKEN}
    log(f"running {n} scripted turns to reattach to")
    for _ in range(n):
        tid = "bench-" + uuid.uuid4().hex[:12]
        body = scripted_request(script([{"chunk": "a"}, {"chunk": "b"}]), turnId=tid)
        c.request("POST", "/run", body=json.dumps(body), headers=h)
        r = c.getresponse()
        r.read()
        if r.status != 200:
            raise RuntimeError(f"status {r.status}")
        ids.append(tid)
    lat, nrec = [], 0
    g = {"authorization": "Bearer " + stack.TOKEN}
    for tid in ids:
        t0 = time.monotonic()
        c.request("GET", f"/turns/{tid}/events?after=1", headers=g)
        r = c.getresponse()
        first = r.readline()
        lat.append((time.monotonic() - t0) * 1000)
        rest = r.read()
        if r.status != 200 or json.loads(first).get("seq") != 2:
            raise RuntimeError(f"reattach {tid}: {r.status} {first[:200]!r}")
        nrec += 1 + rest.count(b"\n")
    c.close()
    lat.sort()
    return {"n": n, "p50": statistics.median(lat), "p99": lat[int(len(lat) * 0.99) - 1],
            "records": nrec / n}


def measure(st, env, model, loadgen, q, log):
    out = {"journal": journal_cost(st, env, model, loadgen, q, log)}
    out["reattach"] = reattach_latency(st, 50 if q else 300, log)
    return out


def rows(t, fmt_ms):
    j, a = t["journal"], t["reattach"]
    ratio = j["paired"]
    runs = ", ".join(fmt_ms(x) for x in j["on_runs"])
    offs = ", ".join(fmt_ms(x) for x in j["off_runs"])
    return [
        ("11. warm turn p50, journaled (the default)", fmt_ms(j["on"]),
         f"<= {TARGET_RATIO:.2f}x unjournaled ({'met' if ratio <= TARGET_RATIO else '**missed**'})",
         f"{len(j['on_runs'])} runs of `loadgen --alternate URL --block {BLOCK} --turns "
         f"{j['turns']}`: {j['turns']} one-session warm turns on this stack and as many on one "
         f"with AGENT_RUNNER_TURN_JOURNAL_MS=0, {BLOCK} at a time, one in flight; "
         f"runs: {runs}; {j['errors']} errors",
         f"journaled / unjournaled = {ratio:.3f}x (median of the runs' ratios: "
         f"{', '.join(f'{x:.3f}' for x in j['ratios'])})"),
        ("11. warm turn p50, not journaled", fmt_ms(j["off"]), "—",
         f"the same turns on the second stack (records numbered, no journal); runs: {offs}", ""),
        ("11. reattach: request to the first replayed record p50", fmt_ms(a["p50"]),
         f"<= {TARGET_REATTACH_MS:g} ms ({'met' if a['p50'] <= TARGET_REATTACH_MS else '**missed**'})",
         f"GET /turns/{{id}}/events?after=1 of {a['n']} finished scripted turns, one keep-alive "
         f"TLS connection; p99 {fmt_ms(a['p99'])}; {a['records']:.0f} records replayed each", ""),
    ]
