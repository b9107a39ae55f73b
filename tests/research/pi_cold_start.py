#!/usr/bin/env python3
"""Research driver (not part of `make test`): cold first delta of pi through pi-acp 0.0.24,
with and without the `pi --version` stub (harnesses/extension/bin/pi; FINDINGS.md (c)).

Each run is one cold environment as the runner starts it: spawn bwrap, then send ACP
`initialize`, `session/new` and `session/prompt`. The time is measured from the spawn to the
first `agent_message_chunk`. The variants are interleaved, so machine noise hits them alike.

  baseline   today's plan: pi-acp spawns `pi` from PATH (harness .bin); no stub
  stub       `pi` stub first on PATH; PI_ACP_PI_COMMAND = the real pi (.bin/pi)
  launch     stub + PI_ACP_PI_COMMAND = extension/bin/pi-launch (pinned Node, our extension
             only, a live fake channel answering hello): the recommended full path
  folder     no stub; the extension from the agent folder, with the same channel

usage: pi_cold_start.py [--runs 10] [--variants baseline,stub,launch,folder]
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import stack  # noqa: E402
from fake_channel import FakeChannel  # noqa: E402
from pi_sandbox import HARNESS_DIR, PiSandbox  # noqa: E402

REAL_PI = os.path.join(HARNESS_DIR, "node_modules", ".bin", "pi")


def one(model, variant):
    tmp = tempfile.mkdtemp(prefix="ar-coldstart.")
    chdir = os.path.join(tmp, "channel")
    os.makedirs(chdir)
    channel = None
    kw = {"extension": False}
    if variant == "stub":
        kw.update(version_stub=True, pi_command=REAL_PI)
    elif variant == "launch":
        kw.update(version_stub=True, launcher=True)
    elif variant == "folder":
        kw.update(extension=True)
    if variant in ("launch", "folder"):
        channel = FakeChannel(os.path.join(chdir, "channel.sock"))
        kw["channel_dir"] = chdir
    box = PiSandbox(tmp, model.base, **kw)
    acp = box.start()
    try:
        sid, _ = acp.start_session("/workspace", timeout=120)
        t_new = acp.now()
        acp.prompt(sid, "Say hello.", timeout=120)
        first = acp.first(lambda m: m.get("method") == "session/update" and
                          m["params"]["update"].get("sessionUpdate") == "agent_message_chunk")
        return {"session_new": t_new, "first_delta": first}
    finally:
        box.stop()
        if channel:
            channel.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--variants", default="baseline,stub,launch,folder")
    o = ap.parse_args()
    variants = o.variants.split(",")
    tmp = tempfile.mkdtemp(prefix="ar-coldstart-model.")
    model = stack.FakeModel(tmp)
    res = {v: [] for v in variants}
    try:
        one(model, variants[0])  # warm the page cache once, not counted
        for i in range(o.runs):
            for v in variants:
                r = one(model, v)
                res[v].append(r)
                print(f"run {i} {v:8s} session/new {r['session_new'] * 1000:7.1f} ms  "
                      f"first delta {r['first_delta'] * 1000:7.1f} ms", flush=True)
    finally:
        model.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("\nmedians (min-max) over", o.runs, "runs, ms from spawning bwrap")
    for v in variants:
        fd = [r["first_delta"] * 1000 for r in res[v]]
        sn = [r["session_new"] * 1000 for r in res[v]]
        print(f"  {v:8s} session/new {statistics.median(sn):7.1f} ({min(sn):.1f}-{max(sn):.1f})"
              f"   first delta {statistics.median(fd):7.1f} ({min(fd):.1f}-{max(fd):.1f})")


if __name__ == "__main__":
    main()
