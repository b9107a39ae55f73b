"""Row 9 of `make bench`: several hosts (README "Several hosts").

Two members of one group on this machine with a real redis-server (tests/integration/stack.py
Cluster), the scripted zero-latency agent, build/bin/loadgen:

  - a warm turn sent to its owner (local) and one sent to the other member, which forwards it
    to the owner and relays the stream (forwarded): 1 session, p50 of each, same run, the two
    interleaved run by run; the target is that forwarding adds at most 1 ms at p50;
  - turns/s with 64 sessions through a round-robin nginx (nginx/agent-runner-cluster.conf) in
    front of one member and in front of both (about half the turns forwarded): the ratio. On
    one 2-core machine both members share the cores, so it measures the overhead of
    forwarding, not scale.
"""

import os
import statistics
import tempfile

import stack

TARGET_ADDED_MS = 1.0


def measure(model, quick, loadgen, env, log):
    """Run the cluster part; loadgen(target, *args) is run.py's driver (target has .port)."""
    redis = stack.Redis().start()
    cl = stack.Cluster(model, n=2, redis=redis, env=dict(env, AGENT_RUNNER_CLUSTER_CAPACITY="256"),
                       workers=2, threads=96, ttl_ms=6000, refresh_ms=2000)
    fronts = []
    out = {}
    try:
        log(f"starting two members and a Redis ({cl.members[0].tmp}, {cl.members[1].tmp})")
        cl.start()
        a, b = cl.members
        one = stack.Front([a], cl.bundle).start()
        fronts.append(one)
        fronts.append(cl.front)
        loadgen(a, "--sessions", "4", "--turns", "50", "--prefix", "cwarmup")
        loadgen(b, "--sessions", "4", "--turns", "50", "--prefix", "cwarmup2",
                "--setup-url", f"https://127.0.0.1:{a.port}/run")
        runs = 1 if quick else 3
        turns = "300" if quick else "2000"
        local, fwd = [], []
        for i in range(runs):
            local.append(loadgen(a, "--sessions", "1", "--turns", turns, "--prefix",
                                 f"cl{i}-{os.urandom(3).hex()}"))
            fwd.append(loadgen(b, "--sessions", "1", "--turns", turns, "--prefix",
                               f"cf{i}-{os.urandom(3).hex()}", "--setup-url",
                               f"https://127.0.0.1:{a.port}/run"))
        out["local"], out["forwarded"] = local, fwd
        t64 = "20" if quick else "120"
        out["one"], out["two"] = [], []
        for i in range(runs):
            out["one"].append(loadgen(one, "--sessions", "64", "--turns", t64, "--prefix",
                                      f"c1-{i}-{os.urandom(3).hex()}"))
            out["two"].append(loadgen(cl.front, "--sessions", "64", "--turns", t64, "--prefix",
                                      f"c2-{i}-{os.urandom(3).hex()}"))
        status, _, text = b.request("GET", "/metrics")
        out["b_forwarded"] = next((float(l.split()[-1]) for l in text.splitlines()
                                   if l.startswith('agent_runner_cluster_turns_total{path="forwarded"}')),
                                  0.0)
        for m in cl.members:
            left = m.leaks(timeout=15)
            if left:
                log(f"left behind on {m.instance}: " + "; ".join(left))
    finally:
        for f in fronts:
            f.stop()
            f.cleanup()
        cl.front = None
        cl.stop()
        cl.cleanup()
        redis.stop()
        redis.cleanup()
    return out


def med(runs, key):
    vals = [r["all"][key] if key.endswith("_ms") else r[key] for r in runs]
    return statistics.median(vals), min(vals), max(vals)


def rows(c, fmt_ms):
    lp50, lmin, lmax = med(c["local"], "p50_ms")
    fp50, fmin, fmax = med(c["forwarded"], "p50_ms")
    added = fp50 - lp50
    errors = sum(r["errors"] for k in ("local", "forwarded", "one", "two") for r in c[k])
    n = len(c["local"])
    out = [("9. several hosts: forwarded warm turn p50 (vs local)", fmt_ms(fp50),
            f"+<= {TARGET_ADDED_MS:g} ms ({'met' if added <= TARGET_ADDED_MS else '**missed**'})",
            f"2 members + redis-server on this machine; 1 session owned by member A, "
            f"{c['local'][0]['turns']} warm turns sent to A (local p50 {fmt_ms(lp50)}, {n} runs "
            f"{lmin:.3g}-{lmax:.3g} ms) and as many to B, which forwards each to A over https "
            f"and relays the stream (forwarded, {n} runs {fmin:.3g}-{fmax:.3g} ms); {errors} "
            f"wrong turns in the cluster rows",
            f"forwarding adds {added:+.3f} ms")]
    t1, t1min, t1max = med(c["one"], "turns_per_s")
    t2, t2min, t2max = med(c["two"], "turns_per_s")
    out.append(("9. several hosts: turns/s, 64 sessions, 2 members vs 1",
                f"{t2:.0f} vs {t1:.0f} turns/s", "ratio reported",
                f"round-robin nginx (nginx/agent-runner-cluster.conf) in front of both members "
                f"(about half the turns forwarded to their owner; {c['b_forwarded']:.0f} "
                f"forwarded by B in the whole part) and in front of one; {len(c['one'])} runs each: "
                f"{t2min:.0f}-{t2max:.0f} and {t1min:.0f}-{t1max:.0f} turns/s; both members share "
                f"this machine's cores: overhead, not scale",
                f"2 members / 1 = {t2 / max(t1, 1e-9):.2f}"))
    return out
