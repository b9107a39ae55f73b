"""A short chaos run (tests/chaos/chaos.py) on this module's stack: six rounds, each kind of
kill (worker, keeper, master) twice, under a steady warm + cold load, with every invariant
checked after each round and after the final SIGTERM; a stream a kill cuts is reattached and
must come back whole (no lost turn). `make chaos` runs the long version."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))

import chaos  # noqa: E402

SESSIONS = 8
SEED = int(os.environ.get("CHAOS_SEED", "20261129"))
STACK = chaos.stack_options(SESSIONS)


def test_chaos_six_rounds(ctx):
    c = chaos.Chaos(rounds=6, seconds=3.0, sessions=SESSIONS, seed=SEED, clients=4,
                    schedule="balanced", stack=ctx.stack, out=sys.stdout)
    s = c.run()
    assert s["totals"].get("lost", 0) == 0, s["totals"]
    if s["failures"]:
        cats = {}
        for r, cat, what in s["violations"]:
            cats.setdefault(cat, []).append(f"round {r}: {what.strip()[:240]}")
        raise AssertionError(
            f"chaos (seed {s['seed']}): {s['failures']} invariant violations, "
            f"{s['survived']}/{s['rounds']} rounds survived; logs in {s['tmp']}\n" +
            "\n".join(f"  {cat} x{len(v)}: {v[0]}" for cat, v in cats.items()))
