"""Benchmark row 7 for tests/bench/run.py: what a runner-executed tool call adds over the
callback server's own time.

The path measured: the harness calls one of the run's tools (tool/call on the keeper channel),
the keeper relays it to the worker running the turn, the worker gates it, announces it
(tool_call event), POSTs Agenta's body to toolCallback.endpoint (libcurl, keep-alive within
the turn), reads the answer, reports it (tool_result event) and answers the harness back over
the channel. The callback is a small keep-alive HTTP/1.1 server here (raw sockets, one thread
per connection) that times each request itself: from the first byte of the request to the
last byte of its answer written. That is "the callback's own time"; overhead = round trip as
the harness saw it - the callback's own time, per call.

  scripted  acp-scripted's runner_tool step (tests/fixtures/acp_scripted.c): `repeat` calls in
            one turn, each round trip timed inside the agent (CLOCK_MONOTONIC, microseconds)
            and printed as "rtt_us: [...]"; paired with the callback's times by call id.
  pi        real pi (pi_core) against tests/fixtures/fake_model.py, scripted to call the
            callback tool N times in one turn; per call, the gap between the model's answer
            asking for the tool (fake_model "done") and pi's next model request ("ts"), minus
            the callback's own time. This includes pi's own handling of a tool call (parsing
            the model's stream, its extension, building the next request), not only ours, so
            the same gap is measured for pi's built-in `ls` (no runner tool, no callback) for
            comparison: on a quiet machine their difference is what the runner's path adds.

Agenta's runner relays tool calls through files it polls every 300 ms: the ratio column
compares that poll interval with the p50.
"""

import json
import os
import socket
import statistics
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from turns import pi_request, result_of, script  # noqa: E402

AGENTA_POLL_MS = 300.0
TARGET_P50_MS = 2.0
CALL_REF = "tools__bench__get_user"
AUTHORIZATION = "Access bench-" + uuid.uuid4().hex[:12]
MAX_HEADER = 64 * 1024


class TimedCallback:
    """A keep-alive HTTP/1.1 callback that answers every POST with Agenta's envelope and keeps,
    per call id (the body's data.id), its own time in seconds."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}/api/tools/call"
        self.lock = threading.Lock()
        self.own = {}    # call id -> seconds
        self.order = []  # call ids in arrival order
        self.bad = []    # requests that were not what the runner must send
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def reset(self):
        with self.lock:
            self.own, self.order, self.bad = {}, [], []

    def stop(self):
        self.stopping = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _accept(self):
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    if not buf:
                        t0 = time.perf_counter()
                    buf += chunk
                    if len(buf) > MAX_HEADER:
                        return
                head, _, rest = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers[k.strip().lower()] = v.strip()
                n = int(headers.get("content-length", "0"))
                while len(rest) < n:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    rest += chunk
                body, buf = rest[:n], rest[n:]
                self._answer(conn, lines[0], headers, body, t0)
                if buf:
                    t0 = time.perf_counter()
        except OSError:
            return
        finally:
            conn.close()

    def _answer(self, conn, request_line, headers, body, t0):
        try:
            data = json.loads(body)["data"]
            call_id = data["id"]
        except (ValueError, KeyError, TypeError):
            data, call_id = None, None
        ok = (request_line.startswith("POST /api/tools/call ") and data is not None and
              headers.get("authorization") == AUTHORIZATION and
              data.get("function", {}).get("name") == CALL_REF)
        content = json.dumps({"successful": True, "data": {"login": "octocat"}})
        out = json.dumps({"call": {"id": str(uuid.uuid4()), "data": {
            "role": "tool", "tool_call_id": call_id, "content": content},
            "status": {"code": "STATUS_CODE_OK", "message": None}}}).encode()
        status = b"200 OK" if ok else b"400 Bad Request"
        conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(out)).encode() + b"\r\n\r\n" + out)
        own = time.perf_counter() - t0
        with self.lock:
            if not ok:
                self.bad.append(request_line)
            elif call_id is not None:
                self.own[call_id] = own
                self.order.append(call_id)


def tool_spec():
    return {"name": "get_user", "description": "Get the signed-in user",
            "inputSchema": {"type": "object", "properties": {}},
            "kind": "callback", "callRef": CALL_REF}


def pct(vals, q):
    vals = sorted(vals)
    if not vals:
        return float("nan")
    k = min(len(vals) - 1, max(0, int(round(q / 100.0 * (len(vals) - 1)))))
    return vals[k]


def summary(overheads_ms, own_ms, rtt_ms):
    return {"n": len(overheads_ms), "p50": pct(overheads_ms, 50), "p99": pct(overheads_ms, 99),
            "own_p50": pct(own_ms, 50), "rtt_p50": pct(rtt_ms, 50), "rtt_p99": pct(rtt_ms, 99),
            "max": max(overheads_ms) if overheads_ms else float("nan")}


def bench_scripted(st, cb, turns, calls, log):
    """turns x (one per-turn run of the scripted agent making `calls` runner tool calls)."""
    over, own_all, rtt_all = [], [], []
    for i in range(turns):
        cb.reset()
        base = f"b{i}"
        steps = [{"runner_tool": {"toolCallId": base, "toolName": "get_user", "arguments": {},
                                  "repeat": calls, "rtt": True}}]
        status, recs = st.stream({
            "harness": "scripted", "messages": [{"role": "user", "content": script(steps)}],
            "permissions": {"default": "allow"}, "customTools": [tool_spec()],
            "toolCallback": {"endpoint": cb.endpoint, "authorization": AUTHORIZATION}},
            timeout=900)
        if status != 200:
            raise RuntimeError(f"scripted tool turn: status {status}")
        res = result_of(recs)
        out = res.get("output") or ""
        if res.get("ok") is not True or "rtt_us: " not in out or "tool get_user: " not in out:
            raise RuntimeError(f"scripted tool turn failed: {str(res)[:500]}")
        if cb.bad:
            raise RuntimeError(f"the callback got unexpected requests: {cb.bad[:3]}")
        rtts = json.loads(out.rsplit("rtt_us: ", 1)[1].strip())
        if len(rtts) != calls:
            raise RuntimeError(f"{len(rtts)} round trips for {calls} calls")
        for k, rtt_us in enumerate(rtts):
            own = cb.own.get(f"{base}-{k}" if calls > 1 else base)
            if own is None:
                raise RuntimeError(f"call {base}-{k} never reached the callback")
            over.append(rtt_us / 1000.0 - own * 1000.0)
            own_all.append(own * 1000.0)
            rtt_all.append(rtt_us / 1000.0)
        log(f"  scripted tool calls {i + 1}/{turns}: {calls} calls, overhead p50 "
            f"{pct(over[-calls:], 50):.3f} ms")
    return summary(over, own_all, rtt_all)


def pi_gaps(st, model, calls, tool, extra):
    """One pi turn whose model asks for `tool` `calls` times in a row: per call, model answer
    written -> pi's next model request, in ms."""
    name = f"bench-pi-tools-{uuid.uuid4().hex[:8]}"
    model.script(name, [{"tool": tool}] * calls + [{"text": "done"}])
    req = pi_request(model, f"Who am I? [[script:{name}]]",
                           permissions={"default": "allow"}, **extra)
    status, recs = st.stream(req, timeout=900)
    if status != 200:
        raise RuntimeError(f"pi tool turn: status {status}")
    res = result_of(recs)
    if res.get("ok") is not True or not (res.get("output") or "").endswith("done"):
        raise RuntimeError(f"pi tool turn failed: {str(res)[:500]}")
    seen = sorted((r for r in model.requests() if f"[[script:{name}]]" in json.dumps(r["body"])),
                  key=lambda r: r["ts"])
    if len(seen) != calls + 1:
        raise RuntimeError(f"pi made {len(seen)} model requests for {calls} tool calls")
    return [(seen[k + 1]["ts"] - seen[k]["done"]) * 1000.0 for k in range(calls)]


def bench_pi(st, model, cb, turns, calls, log):
    """turns x (one pi turn whose model asks for the callback tool `calls` times in a row),
    and as many turns calling pi's built-in ls (the baseline)."""
    over, own_all, gap_all, base = [], [], [], []
    for i in range(turns):
        base += pi_gaps(st, model, calls, {"name": "ls", "arguments": {"path": "."}}, {})
        cb.reset()
        gaps = pi_gaps(st, model, calls, {"name": "get_user", "arguments": {}},
                       {"customTools": [tool_spec()],
                        "toolCallback": {"endpoint": cb.endpoint,
                                         "authorization": AUTHORIZATION}})
        if cb.bad:
            raise RuntimeError(f"the callback got unexpected requests: {cb.bad[:3]}")
        if len(cb.order) != calls:
            raise RuntimeError(f"{len(cb.order)} callback calls for {calls} tool calls")
        for k, gap in enumerate(gaps):
            own = cb.own[cb.order[k]] * 1000.0
            over.append(gap - own)
            own_all.append(own)
            gap_all.append(gap)
        log(f"  pi tool calls {i + 1}/{turns}: {calls} calls, overhead p50 "
            f"{pct(over[-calls:], 50):.2f} ms; built-in ls gap p50 "
            f"{pct(base[-calls:], 50):.2f} ms")
    out = summary(over, own_all, gap_all)
    out["ls_p50"], out["ls_p99"] = pct(base, 50), pct(base, 99)
    return out


def measure(st, model, quick, have_pi, log):
    cb = TimedCallback()
    out = {}
    try:
        log("running runner tool calls (scripted agent)")
        out["scripted"] = bench_scripted(st, cb, 1 if quick else 3, 200 if quick else 1000, log)
        if have_pi:
            log("running runner tool calls (pi)")
            out["pi"] = bench_pi(st, model, cb, 1 if quick else 3, 10 if quick else 20, log)
    finally:
        cb.stop()
    return out


def rows(t, fmt_ms):
    def verdict(v):
        return "met" if v <= TARGET_P50_MS else "**missed**"

    out = []
    s = t["scripted"]
    out.append(("7. runner tool call overhead p50, scripted agent", fmt_ms(s["p50"]),
                f"<= {TARGET_P50_MS:g} ms ({verdict(s['p50'])})",
                f"{s['n']} callback-tool calls (acp-scripted runner_tool, repeat, one per-turn "
                f"run each) harness -> keeper -> worker -> callback -> worker -> keeper -> "
                f"harness, round trip in the agent minus the callback's own time; round trip "
                f"p50 {fmt_ms(s['rtt_p50'])}, callback's own p50 {fmt_ms(s['own_p50'])}",
                f"Agenta's 300 ms poll / p50 = {AGENTA_POLL_MS / max(s['p50'], 1e-6):.0f}x"))
    out.append(("7. runner tool call overhead p99, scripted agent", fmt_ms(s["p99"]), "—",
                f"same calls; round trip p99 {fmt_ms(s['rtt_p99'])}, max overhead "
                f"{fmt_ms(s['max'])}",
                f"Agenta's 300 ms poll / p99 = {AGENTA_POLL_MS / max(s['p99'], 1e-6):.0f}x"))
    if "pi" in t:
        p = t["pi"]
        out.append(("7. runner tool call overhead p50, pi", fmt_ms(p["p50"]), "—",
                    f"{p['n']} calls of a callback tool by pi_core (fake_model.py scripts the "
                    f"calls in a row): model answer written -> pi's next model request, minus "
                    f"the callback's own time; includes pi's own tool-call handling (stream "
                    f"parsing, extension, next request); gap p50 {fmt_ms(p['rtt_p50'])}; the "
                    f"same gap for pi's built-in ls (no runner tool, no callback; pi's own "
                    f"handling of a tool call, for comparison): p50 {fmt_ms(p['ls_p50'])}",
                    f"Agenta's 300 ms poll / p50 = {AGENTA_POLL_MS / max(p['p50'], 1e-6):.0f}x"))
        out.append(("7. runner tool call overhead p99, pi", fmt_ms(p["p99"]), "—",
                    f"same calls; gap p99 {fmt_ms(p['rtt_p99'])}; built-in ls gap p99 "
                    f"{fmt_ms(p['ls_p99'])}",
                    f"Agenta's 300 ms poll / p99 = {AGENTA_POLL_MS / max(p['p99'], 1e-6):.0f}x"))
    else:
        out.append(("7. runner tool call overhead, pi", "not run", "—",
                    "harness pi_core is not installed here: `make harnesses`", ""))
    return out
