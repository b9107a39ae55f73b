#!/usr/bin/env python3
"""Reproducer: after kill -9 of the master, the restarted master wedges admission at capacity.

A master that adopts the session table zeroes every per-worker in-flight counter
(fcgi/master.c adopt_or_create: counters[PC_INFLIGHT_BASE + i] = 0), but the dead master's
workers still drain their running turns (PR_SET_PDEATHSIG SIGTERM -> finish requests in
progress) and each finished one calls release_admission() (fcgi/routes.c), which decrements the
same counter index below zero. The uint64 counter wraps, runs_in_flight() sums to ~2^64, and
from then on every POST /run is 429 "Runner at capacity" and GET /readyz is 503 "at capacity" -
until a worker of that index is respawned or the master restarts again.

Exit status 1 while the bug is present, 0 when fixed.
"""

import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)

from chaos import get, http_turn, run_repro  # noqa: E402


def check(st):
    slow = "SCRIPT:" + json.dumps([{"chunk": "slow "}, {"sleep": 1500}, {"chunk": "done"}])
    outs = []
    ts = [threading.Thread(target=lambda: outs.append(http_turn(st, {
        "harness": "scripted", "messages": [{"role": "user", "content": slow}]})))
        for _ in range(3)]
    for t in ts:
        t.start()
    time.sleep(0.5)   # three turns running in the old worker
    st.master.kill()
    st.master.wait()
    st.start_master()  # adopts the table, zeroes the in-flight counters
    for t in ts:
        t.join(30)
    print("the 3 turns of the old worker:", [o.brief() for o in outs])
    stats = json.loads(st.ctl("stats", "--json").stdout)
    inflight = stats["counters"]["runs_in_flight"]
    print(f"ctl stats runs_in_flight with nothing running: {inflight}")
    ready = get(st, "/readyz")
    print(f"GET /readyz: {ready}")
    run = http_turn(st, {"harness": "scripted",
                         "messages": [{"role": "user", "content": "hello"}]})
    print(f"POST /run: {run.brief()}")
    return inflight != 0 or ready[0] != 200 or not run.ok


if __name__ == "__main__":
    sys.exit(run_repro(check, threads=8))
