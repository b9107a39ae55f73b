#!/usr/bin/env python3
"""Chaos rounds against a real agent-runner stack on loopback (see chaos.py).

usage: run.py [--rounds N] [--seconds-per-round S] [--sessions K] [--seed SEED]
              [--clients C] [--schedule random|balanced] [--workers W] [--threads T] [--keep]

Exit status 0 when every round kept every invariant. The stack's temp dir (runner.log,
chaos-requests.ndjson, chaos-events.ndjson) is kept when something failed, or with --keep.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import chaos  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--seconds-per-round", type=float, default=3.0)
    ap.add_argument("--sessions", type=int, default=12)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--clients", type=int, default=4, help="session client threads")
    ap.add_argument("--schedule", choices=("random", "balanced"), default="random")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--keep", action="store_true", help="keep the temp dir even on success")
    a = ap.parse_args()
    c = chaos.Chaos(rounds=a.rounds, seconds=a.seconds_per_round, sessions=a.sessions,
                    seed=a.seed, clients=a.clients, schedule=a.schedule, workers=a.workers,
                    threads=a.threads)
    summary = c.run()
    if summary["failures"] == 0 and not a.keep:
        c.st.cleanup()
    return 0 if summary["failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
