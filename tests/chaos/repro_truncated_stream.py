#!/usr/bin/env python3
"""Reproducer: a worker that dies mid-stream yields a *clean* end of the HTTP response.

A warm follow-up turn (its keeper was started by an earlier request, so this request's
FastCGI connection is not inherited anywhere - compare repro_inherited_fcgi_fd.py) is streaming
when its worker is killed. nginx (fastcgi_buffering off, nginx/agent-runner-locations.conf)
treats the upstream EOF without FCGI_END_REQUEST as the normal end of the response: it sends
the terminating zero-length chunk and keeps the connection alive, logs nothing, and the client
sees a complete HTTP response whose NDJSON stream simply has no result record.

Exit status 1 while the bug is present, 0 when fixed (a connection error, or a result record).
"""

import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)

from chaos import run_repro  # noqa: E402


def check(st):
    bug = False
    base = {"harness": "scripted", "projectId": "repro", "sessionId": "trunc"}
    status, recs = st.stream(dict(base, messages=[{"role": "user", "content": "one"}]))
    out1 = recs[-1][1]["result"]["output"]
    slow = "SCRIPT:" + json.dumps([{"chunk": "two "}, {"sleep": 3000}, {"chunk": "done"}])
    body = dict(base, messages=[{"role": "user", "content": "one"},
                                {"role": "assistant", "content": out1},
                                {"role": "user", "content": slow}])
    c, r = st.open_stream(body, timeout=10)
    lines = []
    while True:
        line = r.readline()
        lines.append(line)
        if b"message_delta" in line:
            break
    worker = st.worker_pids()[0]
    os.kill(worker, signal.SIGKILL)
    t0 = time.monotonic()
    try:
        while True:
            line = r.readline()
            if not line:
                break
            lines.append(line)
        what = "a clean end of the chunked response (zero-length chunk)"
        kinds = [json.loads(ln).get("kind") for ln in lines if ln.strip()]
        bug = "result" not in kinds
        what += f", keep-alive {not r.will_close}, record kinds {kinds}"
    except Exception as e:  # noqa: BLE001
        what = f"a connection error: {type(e).__name__}: {e}"
    c.close()
    print(f"worker {worker} killed mid-stream; {time.monotonic() - t0:.2f}s later the "
          f"client saw {what}")
    with open(os.path.join(st.tmp, "nginx-error.log")) as f:
        errs = [ln.strip() for ln in f if "temporary file" not in ln]
    print(f"nginx-error.log: {errs or 'nothing'}")
    st.ctl("kill", "repro:trunc")
    return bug


if __name__ == "__main__":
    sys.exit(run_repro(check))
