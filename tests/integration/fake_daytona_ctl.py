"""Client side of tests/fixtures/fake_daytona.py for tests (Python 3 stdlib only).

FakeDaytona starts the fake in a temp dir (like stack.FakeModel) and wraps its three surfaces:
the Daytona API (`api`), the toolbox (`toolbox`) and the fake's control API (`ctl`), plus the
session-log WebSocket (`follow` -> LogStream, with the 0x01/0x02 demultiplexer a client needs)
and raw requests to the preview listener (`preview`).

    d = FakeDaytona()
    sb = d.create(name="x")                       # POST /api/sandbox, asserts 200
    d.session(sb["id"], "s1")
    cid = d.exec(sb["id"], "s1", "cat", run_async=True, suppress_echo=True)
    logs = d.follow(sb["id"], "s1", cid)
    d.input(sb["id"], "s1", cid, "hello")
    assert logs.readline(5) == ("stdout", b"hello\\n")
    d.stop()
"""

import base64
import hashlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
DEFAULT_KEY = "fake-daytona-key"
SDK_VERSION = "0.198.0"
STDOUT_PREFIX = b"\x01\x01\x01"
STDERR_PREFIX = b"\x02\x02\x02"


class HTTPError(AssertionError):
    def __init__(self, status, doc, what):
        super().__init__(f"{what}: HTTP {status}: {doc}")
        self.status = status
        self.doc = doc


class Demux:
    """Splits a Daytona session log (chunks prefixed 0x01x3 = stdout, 0x02x3 = stderr) that
    arrives cut at arbitrary bytes, e.g. WebSocket frames: a marker may straddle two frames,
    so up to two trailing bytes that could start one are carried to the next feed."""

    def __init__(self):
        self.carry = b""
        self.stream = "stdout"

    def feed(self, data, final=False):
        buf = self.carry + data
        self.carry = b""
        out = []
        i = 0
        while i < len(buf):
            j1 = buf.find(STDOUT_PREFIX, i)
            j2 = buf.find(STDERR_PREFIX, i)
            js = [j for j in (j1, j2) if j >= 0]
            j = min(js) if js else -1
            if j < 0:
                end = len(buf)
                if not final:
                    for k in (2, 1):
                        tail = buf[end - k:end] if end - k >= i else b""
                        if tail in (STDOUT_PREFIX[:k], STDERR_PREFIX[:k]) and len(tail) == k:
                            self.carry = tail
                            end -= k
                            break
                if end > i:
                    out.append((self.stream, buf[i:end]))
                break
            if j > i:
                out.append((self.stream, buf[i:j]))
            self.stream = "stdout" if buf[j] == 1 else "stderr"
            i = j + 3
        return out


class LogStream:
    """A followed command log: GET .../logs?follow=true upgraded to a WebSocket."""

    def __init__(self, port, path, headers, protocol=None, timeout=30):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}",
                 "Sec-WebSocket-Version: 13"]
        if protocol:
            lines.append(f"Sec-WebSocket-Protocol: {protocol}")
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.rfile = self.sock.makefile("rb")
        status = self.rfile.readline().decode()
        self.headers = {}
        while True:
            line = self.rfile.readline().decode().strip()
            if not line:
                break
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.status = int(status.split()[1])
        if self.status != 101:
            n = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(n)
            self.sock.close()
            raise HTTPError(self.status, body.decode(errors="replace"), "follow logs")
        want = base64.b64encode(hashlib.sha1(
            (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        assert self.headers.get("sec-websocket-accept") == want, "bad Sec-WebSocket-Accept"
        self.demux = Demux()
        self.raw = bytearray()          # every payload byte, in order
        self.frames = []                # payload sizes
        self.close_code = None
        self.closed = False
        self.pending = []               # demuxed (stream, bytes) not yet returned
        self.lines_buf = {"stdout": b"", "stderr": b""}

    def _frame(self, timeout):
        self.sock.settimeout(timeout)
        h = self.rfile.read(2)
        if len(h) < 2:
            raise EOFError
        op, n = h[0] & 0x0F, h[1] & 0x7F
        assert not h[1] & 0x80, "server frames must not be masked"
        if n == 126:
            n = int.from_bytes(self.rfile.read(2), "big")
        elif n == 127:
            n = int.from_bytes(self.rfile.read(8), "big")
        data = self.rfile.read(n)
        return op, data

    def _send(self, op, payload=b""):
        key = os.urandom(4)
        n = len(payload)
        head = bytearray([0x80 | op])
        if n < 126:
            head.append(0x80 | n)
        else:
            head.append(0x80 | 126)
            head += n.to_bytes(2, "big")
        masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes(head) + key + masked)

    def poll(self, timeout):
        """Read one frame (or time out); returns False once the stream closed."""
        if self.closed:
            return False
        try:
            op, data = self._frame(timeout)
        except socket.timeout:
            return True
        except (EOFError, OSError):
            self.closed = True
            self.close_code = self.close_code or 1006
            self.pending += self.demux.feed(b"", final=True)
            return False
        if op == 0x8:
            self.close_code = int.from_bytes(data[:2], "big") if len(data) >= 2 else 1005
            self.closed = True
            try:
                self._send(0x8, data[:2])
            except OSError:
                pass
            self.pending += self.demux.feed(b"", final=True)
            return False
        if op == 0x9:
            self._send(0xA, data)
            return True
        if op in (0x1, 0x2, 0x0):
            self.raw += data
            self.frames.append(len(data))
            self.pending += self.demux.feed(data)
        return True

    def read(self, timeout=10.0):
        """Next demuxed (stream, bytes) chunk, or None when the stream closed."""
        deadline = time.monotonic() + timeout
        while not self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no log data within %.1fs" % timeout)
            if not self.poll(left) and not self.pending:
                return None
        return self.pending.pop(0)

    def readline(self, timeout=10.0, stream=None):
        """Next complete line (stream, bytes with its newline); None at close."""
        deadline = time.monotonic() + timeout
        while True:
            for s in ([stream] if stream else ["stdout", "stderr"]):
                buf = self.lines_buf[s]
                if b"\n" in buf:
                    line, rest = buf.split(b"\n", 1)
                    self.lines_buf[s] = rest
                    return s, line + b"\n"
            chunk = self.read(max(0.01, deadline - time.monotonic()))
            if chunk is None:
                return None
            self.lines_buf[chunk[0]] += chunk[1]

    def drain(self, timeout=10.0):
        """Everything until the server closes: {"stdout": bytes, "stderr": bytes}."""
        out = {"stdout": bytearray(self.lines_buf["stdout"]),
               "stderr": bytearray(self.lines_buf["stderr"])}
        self.lines_buf = {"stdout": b"", "stderr": b""}
        deadline = time.monotonic() + timeout
        while True:
            chunk = self.read(max(0.01, deadline - time.monotonic()))
            if chunk is None:
                return {k: bytes(v) for k, v in out.items()}
            out[chunk[0]] += chunk[1]

    def close(self):
        if not self.closed:
            try:
                self._send(0x8, (1000).to_bytes(2, "big"))
            except OSError:
                pass
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


def multipart(fields, boundary=None):
    """(body, content type) for [(name, filename|None, bytes)]."""
    boundary = boundary or "----fake-daytona-" + os.urandom(8).hex()
    out = bytearray()
    for name, filename, data in fields:
        disp = f'form-data; name="{name}"'
        if filename is not None:
            disp += f'; filename="{filename}"'
        out += f"--{boundary}\r\nContent-Disposition: {disp}\r\n".encode()
        if filename is not None:
            out += b"Content-Type: application/octet-stream\r\n"
        out += b"\r\n" + data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


class FakeDaytona:
    def __init__(self, tmp=None, profile="fast", api_key=DEFAULT_KEY, args=(), env=None):
        self.own_tmp = tmp is None
        self.tmp = tmp or tempfile.mkdtemp(prefix="fake-daytona-it.")
        self.key = api_key
        self.portfile = os.path.join(self.tmp, "daytona.port")
        self.pportfile = os.path.join(self.tmp, "daytona.preview-port")
        self.calls_log = os.path.join(self.tmp, "daytona.calls")
        self.debug_log = os.path.join(self.tmp, "daytona.debug")
        self.err = open(os.path.join(self.tmp, "daytona.err"), "w")
        self.proc = subprocess.Popen(
            ["python3", os.path.join(FIXTURES, "fake_daytona.py"), "--port", "0",
             "--portfile", self.portfile, "--preview-portfile", self.pportfile,
             "--log", self.calls_log, "--debug-log", self.debug_log, "--profile", profile,
             "--api-key", api_key, *args],
            stdout=subprocess.DEVNULL, stderr=self.err, env=env)
        deadline = time.monotonic() + 60
        while not (os.path.exists(self.portfile) and os.path.exists(self.pportfile)):
            if self.proc.poll() is not None:
                raise RuntimeError("fake_daytona exited: " + self.stderr())
            if time.monotonic() > deadline:
                raise RuntimeError("fake_daytona did not start")
            time.sleep(0.02)
        with open(self.portfile) as f:
            self.port = int(f.read())
        with open(self.pportfile) as f:
            self.preview_port = int(f.read())
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self.toolbox_url = f"http://127.0.0.1:{self.port}/toolbox"
        health = self.ctl("GET", "/health")
        self.state_dir = health["stateDir"]
        self.pid = self.proc.pid

    def stderr(self):
        try:
            with open(os.path.join(self.tmp, "daytona.err")) as f:
                return f.read()
        except OSError:
            return ""

    def stop(self, timeout=20):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()
        return self.proc.returncode

    def cleanup(self):
        if self.own_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # ---- HTTP ----
    def request(self, method, path, body=None, headers=None, key=True, raw=None, timeout=60,
                sdk=SDK_VERSION):
        h = {}
        if body is not None or raw is not None:
            h["Content-Type"] = "application/json"
        if key:
            h["Authorization"] = "Bearer " + (self.key if key is True else key)
        if sdk:
            h["X-Daytona-SDK-Version"] = sdk
        h.update(headers or {})
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            payload = r.read()
            hdrs = {k.lower(): v for k, v in r.getheaders()}
        finally:
            c.close()
        ctype = hdrs.get("content-type", "")
        if payload and "json" in ctype:
            doc = json.loads(payload)
        elif payload and ctype.startswith("text/"):
            doc = payload.decode(errors="replace")
        else:
            doc = payload if payload else None
        return r.status, hdrs, doc

    def api(self, method, path, body=None, **kw):
        return self.request(method, "/api" + path, body, **kw)

    def toolbox(self, sbid, method, path, body=None, **kw):
        return self.request(method, f"/toolbox/{sbid}{path}", body, **kw)

    def ctl(self, method, path, body=None):
        status, _, doc = self.request(method, "/_" + path.lstrip("/_"), body, key=False,
                                      sdk=None)
        if status != 200:
            raise HTTPError(status, doc, f"control {method} {path}")
        return doc

    def expect(self, want, result, what):
        status, _, doc = result
        if status != want:
            raise HTTPError(status, doc, what)
        return doc

    # ---- API conveniences ----
    def create(self, **body):
        return self.expect(200, self.api("POST", "/sandbox", body), "create")

    def get(self, ident):
        return self.expect(200, self.api("GET", f"/sandbox/{ident}"), "get")

    def wait_state(self, ident, states, timeout=30):
        states = [states] if isinstance(states, str) else list(states)
        doc = self.ctl("POST", "/wait", {"sandboxId": ident, "states": states,
                                         "timeout": timeout})
        if not doc["matched"]:
            raise AssertionError(f"sandbox {ident} is {doc['state']}, wanted {states}")
        return doc["state"]

    def delete(self, ident, wait=True):
        doc = self.expect(200, self.api("DELETE", f"/sandbox/{ident}"), "delete")
        if wait:
            self.wait_state(doc["id"], ["gone"])
        return doc

    # ---- control conveniences ----
    def calls(self, since=0):
        return self.ctl("GET", f"/calls?since={since}")

    def routes(self, route, since=0):
        return [c for c in self.calls(since) if c.get("route") == route]

    def inject(self, **rule):
        return self.ctl("POST", "/inject", rule)["added"][0]

    def clear_injections(self):
        self.ctl("DELETE", "/inject")

    def advance(self, seconds):
        return self.ctl("POST", "/clock/advance", {"seconds": seconds})

    def profile(self, **kw):
        return self.ctl("POST", "/profile", kw)

    def state(self):
        return self.ctl("GET", "/state")

    def internal(self, sbid):
        for s in self.state()["sandboxes"]:
            if s["id"] == sbid:
                return s
        return None

    # ---- toolbox conveniences ----
    def execute(self, sbid, command, **kw):
        return self.expect(200, self.toolbox(sbid, "POST", "/process/execute",
                                             dict(kw, command=command)), "execute")

    def session(self, sbid, sid):
        self.expect(201, self.toolbox(sbid, "POST", "/process/session", {"sessionId": sid}),
                    "create session")

    def exec(self, sbid, sid, command, run_async=True, suppress_echo=False):
        body = {"command": command, "runAsync": run_async}
        if suppress_echo:
            body["suppressInputEcho"] = True
        doc = self.expect(202 if run_async else 200,
                          self.toolbox(sbid, "POST", f"/process/session/{sid}/exec", body),
                          "session exec")
        return doc["cmdId"] if run_async else doc

    def input(self, sbid, sid, cid, data):
        self.expect(204, self.toolbox(sbid, "POST",
                                      f"/process/session/{sid}/command/{cid}/input",
                                      {"data": data}), "input")

    def command(self, sbid, sid, cid):
        return self.expect(200, self.toolbox(sbid, "GET",
                                             f"/process/session/{sid}/command/{cid}"),
                           "get command")

    def follow(self, sbid, sid, cid, sdk=SDK_VERSION, key=True, protocol=True):
        headers = {}
        if key:
            headers["Authorization"] = "Bearer " + (self.key if key is True else key)
        if sdk and not protocol:
            headers["X-Daytona-SDK-Version"] = sdk
        proto = f"X-Daytona-SDK-Version~{sdk}" if sdk and protocol else None
        return LogStream(self.port, f"/toolbox/{sbid}/process/session/{sid}/command/{cid}"
                                    "/logs?follow=true", headers, proto)

    def upload(self, sbid, files):
        fields = []
        for i, (path, data) in enumerate(files.items()):
            fields.append((f"files[{i}].path", None, path.encode()))
            fields.append((f"files[{i}].file", path, data))
        body, ctype = multipart(fields)
        return self.toolbox(sbid, "POST", "/files/bulk-upload", raw=body,
                            headers={"Content-Type": ctype})

    def download(self, sbid, path):
        return self.toolbox(sbid, "GET", "/files/download?" +
                            urllib.parse.urlencode({"path": path}))

    # ---- preview ----
    def preview(self, host, method="GET", path="/", headers=None, body=b"", timeout=30):
        """A raw HTTP/1.1 request to the preview listener with the given Host header."""
        s = socket.create_connection(("127.0.0.1", self.preview_port), timeout=timeout)
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}",
                 f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        head, _, payload = data.partition(b"\r\n\r\n")
        hl = head.decode("latin-1").split("\r\n")
        status = int(hl[0].split()[1]) if hl and hl[0] else 0
        hdrs = {}
        for line in hl[1:]:
            k, _, v = line.partition(":")
            hdrs.setdefault(k.strip().lower(), []).append(v.strip())
        return status, hdrs, payload
