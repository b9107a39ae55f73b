"""Benchmark row 11 for tests/bench/run.py: what numbered, journaled streams cost.

  journal   the warm turn of row 1 (`loadgen --sessions 1`) on the bench stack (journal on,
            the default) and on a second stack that differs only in
            AGENT_RUNNER_TURN_JOURNAL_MS=0 (records still numbered, nothing journaled), in
            back-to-back pairs of runs (the order alternating) so that both see the same
            machine; the ratio is the median of the pairs' ratios (a run-to-run drift of the
            machine, often larger than the journal's cost, cancels within a pair), and each
            side's p50 the median of its runs' p50s.
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
PAIRS = 16  # back-to-back runs of each side (PAIRS_QUICK with --quick)
PAIRS_QUICK = 2
TARGET_REATTACH_MS = 2.0


def journal_cost(st, env, model, loadgen, q, log):
    """Warm p50 with the journal (st) and without (a second stack): runs in back-to-back pairs,
    the order alternating (on, off / off, on, ...) so that drift hits both sides alike."""
    off_env = dict(env)
    off_env["AGENT_RUNNER_TURN_JOURNAL_MS"] = "0"
    off = stack.Stack(workers=2, threads=96, model=model, env=off_env)
    on_runs, off_runs = [], []
    turns = "300" if q else "2000"
    try:
        log(f"starting a second stack without the journal in {off.tmp}")
        off.start()
        loadgen(off, "--sessions", "4", "--turns", "50", "--prefix", "warmup")
        for i in range(PAIRS_QUICK if q else PAIRS):
            sides = [("on", st, on_runs), ("off", off, off_runs)]
            for side, s, runs in (sides if i % 2 == 0 else sides[::-1]):
                runs.append(loadgen(s, "--sessions", "1", "--turns", turns, "--prefix",
                                    f"j{side}{i}-{uuid.uuid4().hex[:6]}"))
    finally:
        off.stop()
        off.cleanup()
    p50 = {k: statistics.median(x["all"]["p50_ms"] for x in v)
           for k, v in (("on", on_runs), ("off", off_runs))}
    pairs = [a["all"]["p50_ms"] / max(b["all"]["p50_ms"], 1e-9) for a, b in zip(on_runs, off_runs)]
    return {"on": p50["on"], "off": p50["off"], "turns": turns,
            "paired": statistics.median(pairs),
            "on_runs": [x["all"]["p50_ms"] for x in on_runs],
            "off_runs": [x["all"]["p50_ms"] for x in off_runs],
            "errors": sum(x["errors"] for x in on_runs + off_runs)}


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
         f"`loadgen --sessions 1 --turns {j['turns']}` in {len(j['on_runs'])} back-to-back pairs "
         f"with the same on a stack with AGENT_RUNNER_TURN_JOURNAL_MS=0 (order alternating); "
         f"runs: {runs}; {j['errors']} errors",
         f"journaled / unjournaled = {ratio:.3f}x (median of the pairs' ratios; "
         f"{j['on'] / max(j['off'], 1e-9):.3f}x of the two medians)"),
        ("11. warm turn p50, not journaled", fmt_ms(j["off"]), "—",
         f"the same turns on the second stack (records numbered, no journal); runs: {offs}", ""),
        ("11. reattach: request to the first replayed record p50", fmt_ms(a["p50"]),
         f"<= {TARGET_REATTACH_MS:g} ms ({'met' if a['p50'] <= TARGET_REATTACH_MS else '**missed**'})",
         f"GET /turns/{{id}}/events?after=1 of {a['n']} finished scripted turns, one keep-alive "
         f"TLS connection; p99 {fmt_ms(a['p99'])}; {a['records']:.0f} records replayed each", ""),
    ]
