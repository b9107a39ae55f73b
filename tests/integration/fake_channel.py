"""A stand-in for the runner's end of the keeper channel (harnesses/extension/PROTOCOL.md).

A unix stream socket server speaking newline-delimited JSON-RPC 2.0. It records every line
it receives and answers each request on its own thread through `handler(method, params)`,
which returns the result (it may sleep first: answers can take minutes), or raises
ChannelError(code, message) for an error answer. Nothing here ever sends a request.

    ch = FakeChannel(path, handler)
    ch.received("tool/permission")      # params of each such request, in arrival order
    ch.notifications("usage")
    ch.close()
"""

import json
import os
import socket
import threading
import time


class ChannelError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def default_handler(method, params):
    if method == "hello":
        return {"protocol": 1}
    if method == "tool/permission":
        return {"outcome": "allow"}
    raise ChannelError(-32601, f"no handler for {method}")


class FakeChannel:
    def __init__(self, path, handler=None):
        self.path = path
        self.handler = handler or default_handler
        self.t0 = time.monotonic()
        self.cond = threading.Condition()
        self.log = []          # (seconds, connection number, message)
        self.answers = []      # (seconds, connection number, id, result or error)
        self.conns = []
        self.closing = False
        if os.path.exists(path):
            os.unlink(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        os.chmod(path, 0o666)
        self.sock.listen(8)
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.closing:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.cond:
                self.conns.append(conn)
                n = len(self.conns)
            threading.Thread(target=self._serve, args=(conn, n), daemon=True).start()

    def _serve(self, conn, n):
        wlock = threading.Lock()
        buf = b""
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                break
            if not data:
                break
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
                try:
                    msg = json.loads(line)
                except ValueError:
                    msg = {"unparsed": line.decode(errors="replace")}
                with self.cond:
                    self.log.append((time.monotonic() - self.t0, n, msg))
                    self.cond.notify_all()
                if "method" in msg and "id" in msg:
                    threading.Thread(target=self._answer, args=(conn, wlock, n, msg),
                                     daemon=True).start()
        with self.cond:
            self.cond.notify_all()

    def _answer(self, conn, wlock, n, msg):
        try:
            out = {"jsonrpc": "2.0", "id": msg["id"],
                   "result": self.handler(msg["method"], msg.get("params") or {})}
        except ChannelError as e:
            out = {"jsonrpc": "2.0", "id": msg["id"],
                   "error": {"code": e.code, "message": e.message}}
        with self.cond:
            self.answers.append((time.monotonic() - self.t0, n, msg["id"],
                                 out.get("result", out.get("error"))))
        try:
            with wlock:
                conn.sendall((json.dumps(out) + "\n").encode())
        except OSError:
            pass

    # --- what arrived ----------------------------------------------------------------------

    def messages(self, method=None):
        with self.cond:
            return [m for _, _, m in self.log if method is None or m.get("method") == method]

    def received(self, method):
        return [m.get("params") for m in self.messages(method) if "id" in m]

    def notifications(self, method):
        return [m.get("params") for m in self.messages(method) if "id" not in m]

    def wait_for(self, pred, timeout=30, what="channel message"):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                v = pred()
                if v:
                    return v
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("timed out waiting for " + what)
                self.cond.wait(min(left, 0.2))

    def drop_connections(self):
        """Close every accepted connection (the runner going away)."""
        with self.cond:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def close(self):
        self.closing = True
        self.sock.close()
        self.drop_connections()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
