"""A small Agent Client Protocol client for tests and harness research (Python 3 stdlib).

Spawns an ACP agent with stdio pipes, speaks newline-delimited JSON-RPC 2.0 to it, records
every line in both directions with a timestamp, answers the agent's own requests through a
handler (default: -32601, except `session/request_permission`, which `permission` decides),
and kills the whole process group it started on close.

    c = AcpClient(argv, env=..., cwd=..., stderr_path=...)
    c.request("initialize", {...}); sid = c.request("session/new", {...})["sessionId"]
    res = c.request("session/prompt", {...}, timeout=120)
    c.updates(sid)            # session/update params, in order
    c.close()

usage as a driver: acp_client.py [--cwd D] [--prompt T]... [--permission allow|reject|cancel]
                                 [--log FILE] -- CMD...
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time


class AcpError(Exception):
    def __init__(self, method, error):
        super().__init__(f"{method}: {json.dumps(error)}")
        self.error = error


class AcpClient:
    def __init__(self, argv, env=None, cwd=None, stderr_path=None, permission=None,
                 on_request=None):
        self.t0 = time.monotonic()
        self.lock = threading.Condition()
        self.log = []             # (seconds since start, "<<" | ">>", message)
        self.responses = {}
        self.next_id = 0
        self.permission = permission or (lambda params: pick_option(params, "allow"))
        self.on_request = on_request
        self.stderr = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env=env, cwd=cwd,
                                     start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def now(self):
        return time.monotonic() - self.t0

    # --- wire ------------------------------------------------------------------------------

    def _send(self, msg):
        with self.lock:
            self.log.append((self.now(), ">>", msg))
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def _read(self):
        for raw in self.proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                with self.lock:
                    self.log.append((self.now(), "<<", {"unparsed": raw.decode(errors="replace")}))
                continue
            with self.lock:
                self.log.append((self.now(), "<<", msg))
                if "method" not in msg and "id" in msg:
                    self.responses[msg["id"]] = msg
                self.lock.notify_all()
            if "method" in msg and "id" in msg:
                threading.Thread(target=self._answer, args=(msg,), daemon=True).start()
        with self.lock:
            self.lock.notify_all()

    def _answer(self, msg):
        method, params = msg["method"], msg.get("params") or {}
        try:
            if self.on_request:
                handled = self.on_request(method, params)
                if handled is not None:
                    self._send({"jsonrpc": "2.0", "id": msg["id"], "result": handled})
                    return
            if method == "session/request_permission":
                result = self.permission(params)
                self._send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
                return
            self._send({"jsonrpc": "2.0", "id": msg["id"],
                        "error": {"code": -32601, "message": "Method not found"}})
        except (BrokenPipeError, ValueError, OSError):
            pass

    def request(self, method, params, timeout=60):
        with self.lock:
            self.next_id += 1
            rid = self.next_id
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        with self.lock:
            while rid not in self.responses:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{method}: no answer in {timeout}s")
                if self.proc.poll() is not None and not self.reader.is_alive():
                    raise AcpError(method, {"message": f"agent exited ({self.proc.returncode})"})
                self.lock.wait(min(left, 0.2))
            msg = self.responses.pop(rid)
        if "error" in msg:
            raise AcpError(method, msg["error"])
        return msg["result"]

    def notify(self, method, params):
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    # --- reading what came back ------------------------------------------------------------

    def updates(self, session_id=None):
        with self.lock:
            return [m["params"] for _, d, m in self.log
                    if d == "<<" and m.get("method") == "session/update" and
                    (session_id is None or m["params"].get("sessionId") == session_id)]

    def agent_requests(self, method=None):
        with self.lock:
            return [m for _, d, m in self.log if d == "<<" and "method" in m and "id" in m and
                    (method is None or m["method"] == method)]

    def first(self, pred):
        """Seconds since start of the first received message matching pred, or None."""
        with self.lock:
            for t, d, m in self.log:
                if d == "<<" and pred(m):
                    return t
        return None

    def text(self, session_id=None):
        return "".join(u["update"]["content"].get("text", "") for u in self.updates(session_id)
                       if u["update"].get("sessionUpdate") == "agent_message_chunk")

    # --- the common sequence ---------------------------------------------------------------

    def start_session(self, cwd, mcp_servers=None, timeout=60):
        self.request("initialize", {"protocolVersion": 1, "clientCapabilities": {
            "fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}},
            timeout=timeout)
        res = self.request("session/new", {"cwd": cwd, "mcpServers": mcp_servers or []},
                           timeout=timeout)
        return res["sessionId"], res

    def prompt(self, session_id, text, timeout=120):
        return self.request("session/prompt", {"sessionId": session_id, "prompt": [
            {"type": "text", "text": text}]}, timeout=timeout)

    def close(self, timeout=5):
        """Close stdin, wait, then kill the process group we started."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.reader.join(5)
        if self.stderr is not subprocess.DEVNULL:
            self.stderr.close()
        return self.proc.returncode


def pick_option(params, kind):
    """A permission answer: the first option whose kind starts with `kind` (allow / reject),
    or {"outcome": "cancelled"} when kind is "cancel" or nothing matches."""
    if kind != "cancel":
        for o in params.get("options") or []:
            if str(o.get("kind", "")).startswith(kind):
                return {"outcome": {"outcome": "selected", "optionId": o["optionId"]}}
    return {"outcome": {"outcome": "cancelled"}}


def main():
    ap = argparse.ArgumentParser(description="drive an ACP agent and print every line")
    ap.add_argument("--cwd", default=os.getcwd())
    ap.add_argument("--prompt", action="append", default=[])
    ap.add_argument("--permission", default="allow", choices=["allow", "reject", "cancel"])
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--log", help="write the transcript here as JSON lines")
    ap.add_argument("cmd", nargs="+")
    o = ap.parse_args()
    c = AcpClient(o.cmd, cwd=o.cwd, permission=lambda p: pick_option(p, o.permission))
    try:
        sid, _ = c.start_session(o.cwd, timeout=o.timeout)
        for p in o.prompt:
            c.prompt(sid, p, timeout=o.timeout)
    finally:
        rc = c.close()
        for t, d, m in c.log:
            line = json.dumps({"t": round(t, 4), "dir": d, "msg": m})
            print(line)
        if o.log:
            with open(o.log, "w") as f:
                for t, d, m in c.log:
                    f.write(json.dumps({"t": round(t, 4), "dir": d, "msg": m}) + "\n")
        print(f"# agent exit status {rc}", file=sys.stderr)


if __name__ == "__main__":
    main()
