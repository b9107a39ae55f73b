"""Load: 500 concurrent streaming turns all complete correctly with bounded memory; past the
admission cap runs get a clean 429 instead of failing."""

import threading
import time

from turns import in_parallel, result_of, script

# 2 x 600 threads: each worker admits 525 runs and keeps 75 threads for probes and control
# routes (admission stays below the thread count), so all 500 concurrent turns are
# admitted however the kernel spreads the connections over the two workers
# 500 cold sandboxes at once on 2 cores: each waits its turn for the CPU, so the harness's
# initialize gets the whole run's budget (the test is about completion, not latency)
STACK = {"workers": 2, "threads": 600, "env": {"AGENT_RUNNER_MAX_CONCURRENT_RUNS": "1000",
                                                "AGENT_RUNNER_HARNESS_INIT_MS": "300000"}}

CONCURRENCY = 500


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def blast(ctx, n, prompt_of):
    results = [None] * n
    start = threading.Barrier(n)

    def one(i):
        start.wait()
        try:
            status, recs = ctx.stack.stream({"harness": "scripted", "messages": [
                {"role": "user", "content": prompt_of(i)}]}, timeout=300)
            results[i] = (status, recs)
        except Exception as e:  # a connection error is an answer too, but counted
            results[i] = ("error", repr(e))

    in_parallel(one, n, 600)
    return results


def test_500_concurrent_streaming_turns_complete(ctx):
    workers = ctx.stack.worker_pids()
    before = {p: rss_kib(p) for p in workers + [ctx.stack.master.pid]}
    t0 = time.monotonic()
    results = blast(ctx, CONCURRENCY,
                    lambda i: script([{"chunk": f"turn {i} "}, {"sleep": 100}, {"chunk": "done"}]))
    took = time.monotonic() - t0
    bad = []
    for i, (status, recs) in enumerate(results):
        if status != 200:
            bad.append((i, status, recs))
            continue
        res = result_of(recs)
        if not (res["ok"] and res["output"] == f"turn {i} done"):
            bad.append((i, res))
    assert not bad, f"{len(bad)} of {CONCURRENCY} turns failed, e.g. {bad[:3]}"
    after = {p: rss_kib(p) for p in before if p}
    growth = {p: after[p] - before[p] for p in after}
    print(f"    {CONCURRENCY} turns in {took:.1f}s; RSS growth KiB {growth}")
    # bounded: each turn's memory is returned, nothing grows with the number of turns
    assert all(g < 64 * 1024 for g in growth.values()), growth


def test_past_the_admission_cap_runs_get_429(ctx):
    # a second stack setting: 60 runs at most
    ctx.stack.stop_master()
    ctx.stack.extra_env["AGENT_RUNNER_MAX_CONCURRENT_RUNS"] = "60"
    ctx.stack.start_master()
    # long enough that the 200 clients overlap however slowly their TLS handshakes arrive
    results = blast(ctx, 200, lambda i: script([{"chunk": "x"}, {"sleep": 3000}]))
    codes = {}
    for status, recs in results:
        codes[status] = codes.get(status, 0) + 1
        if status == 429:
            assert recs == {"ok": False, "error": "Runner at capacity (60 concurrent runs)"}, recs
        elif status == 200:
            assert result_of(recs)["ok"] is True
    print(f"    statuses: {codes}")
    assert set(codes) <= {200, 429}, codes
    assert codes.get(429, 0) > 0 and codes.get(200, 0) >= 60, codes
