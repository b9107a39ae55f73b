#!/usr/bin/env python3
"""Reproducer: FastCGI connections of a worker leak into keepers and sandboxes.

libfcgi accepts connections without close-on-exec, and the keeper is started with
posix_spawn (engine/environment/environment.c spawn_keeper) without closing inherited descriptors; the
keeper forks + execs bwrap (keeper/keeper.c start_sandbox) the same way, and bwrap hands them to
the harness. So every FastCGI connection the worker has open while it starts a keeper (its own
and those of the other threads' requests) lives on in that keeper and inside its sandbox.

  1. the sandboxed harness (here: a tool command run by the scripted agent) holds the socket of
     a *different, concurrent* request and writes a forged FastCGI STDOUT record into it: the
     other client receives a record it never should ({"kind":"forged"});
  2. kill -9 of a worker in the middle of a streamed turn: nginx never sees the upstream close
     (the keeper and the harness still hold the connection), so the client hangs instead of
     getting a connection error, until the keeper exits (idle TTL) - fastcgi_read_timeout is 1h.

Exit status 1 while the bug is present, 0 when fixed.
"""

import json
import os
import signal
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)

import stack as stk  # noqa: E402
from chaos import run_repro  # noqa: E402

FORGE = ("for f in /proc/$$/fd/*; do n=${f##*/}; if [ -S $f ]; then "
         "printf '\\001\\006\\000\\001\\000\\022\\000\\000{\"kind\":\"forged\"}\\n' >&$n; "
         "echo forged into fd $n; fi; done; ls -l /proc/$$/fd")


def check(st):
    bugs = []
    # --- 1: a sandbox writes into another request's response -------------------------
    victim_lines = []
    slow = {"harness": "scripted", "projectId": "repro", "sessionId": "victim",
            "messages": [{"role": "user", "content": "SCRIPT:" + json.dumps(
                [{"chunk": "victim "}, {"sleep": 2500}, {"chunk": "done"}])}]}
    c, r = st.open_stream(slow, timeout=30)
    victim_lines.append(r.readline())

    def drain():
        try:
            while True:
                line = r.readline()
                if not line:
                    break
                victim_lines.append(line)
        except Exception as e:  # noqa: BLE001
            victim_lines.append(repr(e).encode())
    t = threading.Thread(target=drain)
    t.start()
    time.sleep(0.5)   # the victim's turn is running, its connection open in the worker
    status, recs = st.stream({"harness": "scripted", "messages": [
        {"role": "user", "content": "SCRIPT:" + json.dumps([{"exec": FORGE}])}]})
    t.join(30)
    c.close()
    tool = [rec["event"]["output"] for _, rec in recs
            if rec.get("kind") == "event" and rec["event"]["type"] == "tool_result"]
    print("sandboxed tool command saw and wrote:\n  " +
          "\n  ".join((tool[0] if tool else "?").splitlines()))
    forged = [ln for ln in victim_lines if b'"forged"' in ln]
    print(f"victim request (a different client) received {len(forged)} forged record(s): "
          f"{forged[:1]}")
    if forged:
        bugs.append("a sandboxed harness injected records into another client's response")
    st.ctl("kill", "repro:victim")

    # --- 2: kill -9 of the worker mid-stream hangs the client ------------------------
    c, r = st.open_stream(dict(slow, sessionId="hang"), timeout=8)
    while b"message_delta" not in r.readline():
        pass
    worker = st.worker_pids()[0]
    holders = []
    sock_inodes = {os.readlink(f"/proc/{worker}/fd/{fd}") for fd in
                   os.listdir(f"/proc/{worker}/fd")
                   if os.readlink(f"/proc/{worker}/fd/{fd}").startswith("socket:")}
    table = stk.proc_table()
    for pid in stk.descendants(st.master.pid, table):
        if pid == worker:
            continue
        try:
            mine = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        except OSError:
            continue
        shared = sorted(mine & sock_inodes)
        if shared:
            holders.append(f"{pid} {table[pid][1].split()[0]} holds {', '.join(shared)}")
    print("worker sockets also open in its keepers/sandboxes:\n  " + "\n  ".join(holders))
    t0 = time.monotonic()
    os.kill(worker, signal.SIGKILL)
    try:
        while r.readline():
            pass
        what = "clean end of stream"
    except Exception as e:  # noqa: BLE001
        what = f"{type(e).__name__}: {e}"
    took = time.monotonic() - t0
    c.close()
    print(f"after kill -9 of worker {worker} mid-stream the client got: {what} "
          f"after {took:.1f}s")
    if took > 5:
        bugs.append(f"client hung {took:.1f}s after its worker died (read timeout 8s)")
    st.ctl("kill", "repro:hang")
    return bugs


if __name__ == "__main__":
    sys.exit(run_repro(check))
