#!/usr/bin/env python3
"""Chaos rounds against a real agent-runner stack on loopback (see chaos.py).

usage: run.py [--rounds N] [--seconds-per-round S] [--sessions K] [--seed SEED]
              [--clients C] [--schedule random|balanced] [--workers W] [--threads T] [--keep]

Exit status 0 when every round kept every invariant. The stack's temp dir (runner.log,
chaos-requests.ndjson, chaos-events.ndjson) is kept when something failed, or with --keep.
"""

import argparse
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
PROGRAMS = ("agent-runnerd", "agent-runner-keeper", "agent-runner-keeper-remote",
            "agent-runner-ctl", "acp-scripted", "agent-runner-mcp", "agent-runner-pi-stdio")


def snapshot_build():
    """Copy the programs under test to a private dir and point stack.py at it (BUILD), so a
    rebuild of build/bin during the run cannot swap binaries under a restarted master."""
    src = os.path.join(ROOT, os.environ.get("BUILD", "build"), "bin")
    dst = tempfile.mkdtemp(prefix="ar-chaos-bin.")
    os.chmod(dst, 0o755)
    os.makedirs(os.path.join(dst, "bin"), mode=0o755)
    for name in PROGRAMS:
        shutil.copy2(os.path.join(src, name), os.path.join(dst, "bin", name))
    os.environ["BUILD"] = dst
    return dst


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
    ap.add_argument("--no-snapshot", action="store_true",
                    help="run build/bin itself instead of a private copy of it")
    a = ap.parse_args()
    snap = None if a.no_snapshot else snapshot_build()
    sys.path.insert(0, HERE)
    import chaos  # noqa: E402  (after BUILD is set: stack.py reads it at import)
    if snap:
        print(f"chaos: testing a snapshot of build/bin in {snap}/bin", flush=True)
    c = chaos.Chaos(rounds=a.rounds, seconds=a.seconds_per_round, sessions=a.sessions,
                    seed=a.seed, clients=a.clients, schedule=a.schedule, workers=a.workers,
                    threads=a.threads)
    try:
        summary = c.run()
    finally:
        if snap:
            shutil.rmtree(snap, ignore_errors=True)
    if summary["failures"] == 0 and not a.keep:
        c.st.cleanup()
    return 0 if summary["failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
