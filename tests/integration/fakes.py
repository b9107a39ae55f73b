"""Clients for the scripted fake servers in tests/fixtures/ (stdlib only).

Each class starts its fixture as a subprocess in a directory the test owns (port file, call
log, stderr, TLS material), waits until it listens, and wraps its control API:

    cb = FakeCallback(tmp)                      # tests/fixtures/fake_callback.py
    req["toolCallback"] = {"endpoint": cb.endpoint, "authorization": cb.authorization}
    cb.script_tool("tools__x__y", {"error": "bad city"})
    ... run a turn ...
    [call] = cb.tool_calls("tools__x__y")
    assert call["headers"]["authorization"] == cb.authorization

    mcp = FakeMcp(tmp, tls_names=["mcp.test"])  # tests/fixtures/fake_mcp.py, HTTPS
    srv = mcp.add_server("docs", tools=[{"name": "search"}])
    srv.url, srv.header_name, srv.header_value, mcp.ca_file

    api = FakeAgentaApi(tmp)                    # tests/fixtures/fake_agenta_api.py
    env["AGENTA_API_INTERNAL_URL"] = api.base
    req["telemetry"] = {"exporters": {"otlp": {"endpoint": api.otlp_endpoint,
                                               "headers": {"authorization": api.credential}}}}

stop() (or the context manager, or interpreter exit) terminates only the process started
here. Give each fake its own temp dir, not one under Stack.tmp: Stack.leaks() counts any live
process naming the stack's dir as left behind. A module whose STACK env must carry a fake's
URL (AGENTA_API_INTERNAL_URL) can start the fake at import time, or pick the port first:
FakeAgentaApi(tmp, port=stack.free_port()).
"""

import atexit
import base64
import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def _wait_for(pred, timeout=15.0, step=0.02, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError("timed out waiting for " + what)


# Agenta's stable record ids (services/runner/src/sessions/record-id.ts): uuid5 of
# "<sessionId>:<toolCallId>:<recordType>:<turnId or ''>" under uuid5(uuid5(DNS, "agenta"),
# "records"). tool_call records use type "tool_call"; tool_result / interaction_request use
# their own type.
RECORDS_NAMESPACE = uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_DNS, "agenta"), "records")


def record_id(session_id, tool_call_id, record_type, turn_id=None):
    return str(uuid.uuid5(RECORDS_NAMESPACE,
                          f"{session_id}:{tool_call_id}:{record_type}:{turn_id or ''}"))


class FakeError(AssertionError):
    pass


class _Fake:
    fixture = None  # file name under tests/fixtures
    name = None

    def __init__(self, tmp, args=(), tls_names=None, port=0):
        os.makedirs(tmp, exist_ok=True)
        self.tmp = tmp
        self.portfile = os.path.join(tmp, f"{self.name}.port")
        self.log = os.path.join(tmp, f"{self.name}.log")
        self.errfile = os.path.join(tmp, f"{self.name}.err")
        self.tls_dir = os.path.join(tmp, f"{self.name}-tls") if tls_names else None
        cmd = [sys.executable, os.path.join(FIXTURES, self.fixture), "--port", str(port),
               "--portfile", self.portfile, "--log", self.log, *args]
        if tls_names:
            cmd += ["--tls-self-signed", ",".join(tls_names), "--tls-dir", self.tls_dir]
        with open(self.errfile, "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        atexit.register(self.stop)  # a test that forgets stop() leaves no process behind
        try:
            _wait_for(lambda: os.path.exists(self.portfile) or self.proc.poll() is not None,
                      what=f"{self.name} port")
            if self.proc.poll() is not None:
                raise FakeError(f"{self.name} exited {self.proc.returncode}: {self.stderr()}")
        except BaseException:
            self.stop()
            raise
        with open(self.portfile) as f:
            self.port = int(f.read().strip())
        self.scheme = "https" if tls_names else "http"
        self.ca_file = os.path.join(self.tls_dir, "ca.pem") if tls_names else None
        self.base = f"{self.scheme}://127.0.0.1:{self.port}"
        self._local = threading.local()
        self._tls = None
        if tls_names:
            self._tls = ssl.create_default_context(cafile=self.ca_file)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stderr(self):
        try:
            with open(self.errfile, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def url(self, path, host="127.0.0.1"):
        """This fake's URL for `path` under another host name (e.g. an allowlisted one)."""
        return f"{self.scheme}://{host}:{self.port}{path}"

    # -- raw HTTP ------------------------------------------------------------------------------

    def connection(self, timeout=30):
        if self._tls:  # verified against the fake's CA (the leaf carries IP:127.0.0.1)
            return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout,
                                               context=self._tls)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, raw=None, timeout=30):
        """One request; returns (status, {lower-cased header: value}, parsed body or bytes).

        Keeps one keep-alive connection per thread (a TLS handshake per request is slow on a
        loaded machine). Never retries: a request the fake drops raises, as it should.
        """
        h = {}
        data = raw
        if body is not None:
            data = json.dumps(body)
            h["content-type"] = "application/json"
        h.update(headers or {})
        c = getattr(self._local, "conn", None)
        if c is None:
            c = self._local.conn = self.connection(timeout)
        c.timeout = timeout
        try:
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            payload = r.read()
            hdrs = {k.lower(): v for k, v in r.getheaders()}
        except BaseException:
            c.close()
            self._local.conn = None
            raise
        if r.will_close:
            c.close()
        ctype = hdrs.get("content-type", "")
        if payload and "json" in ctype:
            try:
                return r.status, hdrs, json.loads(payload)
            except ValueError:
                pass
        return r.status, hdrs, payload

    def control(self, method, path, body=None):
        status, _, doc = self.request(method, path, body)
        if status != 200:
            raise FakeError(f"{self.name} {method} {path}: {status} {doc!r}")
        return doc

    # -- shared control API --------------------------------------------------------------------

    def calls(self, path=None, method=None, prefix=None, since=0, **match):
        """Recorded calls (oldest first), filtered by exact path, method, prefix, seq."""
        q = {k: v for k, v in dict(path=path, method=method, prefix=prefix, since=since or None,
                                   **match).items() if v is not None}
        return self.control("GET", "/_log" + ("?" + urllib.parse.urlencode(q) if q else ""))

    def inject(self, path, method=None, count=1, status=None, delay=None, drop=False,
               json_body=None, body=None, headers=None):
        """Fail the next `count` matching requests (see fakekit.py); returns the rule id."""
        rule = {"path": path, "count": count}
        for k, v in (("method", method), ("status", status), ("delay", delay),
                     ("json", json_body), ("body", body), ("headers", headers)):
            if v is not None:
                rule[k] = v
        if drop:
            rule["drop"] = True
        return self.control("POST", "/_inject", rule)["id"]

    def injections(self):
        return self.control("GET", "/_inject")

    def clear_injections(self):
        self.control("POST", "/_inject/clear", {})

    def reset(self):
        self.control("POST", "/_reset", {})

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class FakeCallback(_Fake):
    """tests/fixtures/fake_callback.py: the backend's /tools/call and direct-call routes."""

    fixture = "fake_callback.py"
    name = "callback"

    def __init__(self, tmp, mount="/api", authorization=None, tls_names=None, port=0):
        self.authorization = authorization or "Access cb-" + os.urandom(8).hex()
        self.initial_authorization = self.authorization
        super().__init__(tmp, ["--authorization", self.authorization], tls_names, port)
        self.mount = mount
        self.endpoint = f"{self.base}{mount}/tools/call"

    def script_tool(self, call_ref, *steps):
        self.control("POST", "/_script", {"tool": call_ref, "steps": list(steps)})

    def script_route(self, method, path, *steps):
        self.control("POST", "/_script", {"route": f"{method} {path}", "steps": list(steps)})

    def reset(self):
        """Clear log, scripts, injections; the authorization goes back to the initial one."""
        super().reset()
        self.authorization = self.initial_authorization

    def set_authorization(self, value):
        """Require exactly this Authorization header (None: accept anything)."""
        self.authorization = value
        self.control("POST", "/_config", {"authorization": value})

    def tool_calls(self, call_ref=None):
        match = {"tool": call_ref} if call_ref else {}
        return self.calls(kind="gateway", **match)

    def direct_calls(self, path=None, method=None):
        return self.calls(path=path, method=method, kind="direct")


class McpServer:
    """One server of a FakeMcp: its URL and the credential header it requires."""

    def __init__(self, fake, name, path, header_name, header_value):
        self.fake, self.name, self.path = fake, name, path
        self.header_name, self.header_value = header_name, header_value
        self.url = fake.base + path

    def url_for(self, host):
        """The URL under another host name (an allowlisted one resolving to loopback)."""
        return self.fake.url(self.path, host)

    def headers(self):
        """The credential as Agenta's McpServerConfig carries it (connection.credentials)."""
        if not self.header_name:
            return []
        return [{"binding": {"kind": "header", "name": self.header_name},
                 "value": self.header_value, "usage": "opaque_http"}]

    def config(self, url=None, mode="all", names=None, permission=None):
        """A McpServerConfig for a run request: {name, connection {type: "http", url,
        credentials?}, policy {tools {mode, names?}, permission?}}."""
        policy = {"tools": {"mode": mode}}
        if names is not None:
            policy["tools"]["names"] = list(names)
        if permission:
            policy["permission"] = permission
        conn = {"type": "http", "url": url or self.url}
        if self.header_name:
            conn["credentials"] = self.headers()
        return {"name": self.name, "connection": conn, "policy": policy}

    def script(self, tool, *steps):
        self.fake.control("POST", "/_script", {"server": self.name, "tool": tool,
                                               "steps": list(steps)})

    def calls(self, rpc_method=None):
        match = {"rpc_method": rpc_method} if rpc_method else {}
        return self.fake.calls(server=self.name, **match)


class FakeMcp(_Fake):
    """tests/fixtures/fake_mcp.py: MCP servers over Streamable HTTP (HTTPS with tls_names)."""

    fixture = "fake_mcp.py"
    name = "mcp"

    def __init__(self, tmp, tls_names=None, port=0):
        super().__init__(tmp, [], tls_names, port)

    def add_server(self, name, tools=(), path=None, header="x-api-key", credential=None,
                   **options):
        """Add (or replace) a server; header=None serves it without a credential."""
        spec = {"name": name, "tools": [t if isinstance(t, dict) else {"name": t}
                                        for t in tools], **options}
        if path:
            spec["path"] = path
        value = None
        if header:
            value = credential or "mcp-" + os.urandom(8).hex()
            spec["auth"] = {"header": header, "value": value}
        path = self.control("POST", "/_servers", spec)["path"]
        return McpServer(self, name, path, header, value)

    def sessions(self):
        return self.control("GET", "/_sessions")

    def expire(self, server, session=None):
        self.control("POST", "/_expire", {"server": server, "session": session})


class FakeAgentaApi(_Fake):
    """tests/fixtures/fake_agenta_api.py: the Agenta API of platform mode.

    `base` is what the runner gets as AGENTA_API_INTERNAL_URL; `credential` is the run
    credential a request carries in telemetry.exporters.otlp.headers.authorization (also
    accepted on `otlp_endpoint`, where the fake stores exported traces).
    """

    fixture = "fake_agenta_api.py"
    name = "agenta-api"

    def __init__(self, tmp, credential=None, tls_names=None, port=0):
        self.credential = credential or "Access run-" + os.urandom(12).hex()
        super().__init__(tmp, ["--credential", self.credential], tls_names, port)
        self.otlp_endpoint = self.base + "/otlp/v1/traces"

    def telemetry(self):
        """The request's `telemetry` block that makes a run use this API's credential."""
        return {"exporters": {"otlp": {"endpoint": self.otlp_endpoint,
                                       "headers": {"authorization": self.credential}}}}

    # -- reading the store ---------------------------------------------------------------------

    def store(self, session_id=None):
        q = "?" + urllib.parse.urlencode({"session_id": session_id}) if session_id else ""
        return self.control("GET", "/_store" + q)

    def records(self, session_id):
        """The session's records in Agenta's query order (plus "ingests", "record_id_sent")."""
        return self.store(session_id)["records"]

    def interactions(self, session_id=None):
        return self.store(session_id)["interactions"]

    def turns(self, session_id=None):
        return self.store(session_id)["turns"]

    def traces(self):
        return self.control("GET", "/_traces")

    def auth(self):
        return self.control("GET", "/_auth")

    # -- scripting -----------------------------------------------------------------------------

    def refuse_heartbeats(self, session_id, count=1):
        """The next `count` new turns of the session are not admitted ("*" = any session)."""
        self.control("POST", "/_heartbeat", {"session_id": session_id, "refuse": count})

    def interrupt(self, session_id, turn_id=None):
        return self.control("POST", "/_interrupt", {"session_id": session_id,
                                                    "turn_id": turn_id})["turn_id"]

    def set_owner(self, session_id, replica_id):
        self.control("POST", "/_owner", {"session_id": session_id, "replica_id": replica_id})

    def configure(self, **cfg):
        return self.control("POST", "/_config", cfg)

    def add_credential(self, value):
        self.control("POST", "/_auth", {"add": [value]})

    def revoke_credential(self, value):
        self.control("POST", "/_auth", {"revoke": [value]})

    def seed_records(self, session_id, records):
        return self.control("POST", "/_seed/records", {"session_id": session_id,
                                                       "records": records})["record_ids"]

    def seed_attachment(self, session_id, filename, media_type, data, attachment_id=None):
        body = {"session_id": session_id, "filename": filename, "media_type": media_type,
                "content_b64": base64.b64encode(data if isinstance(data, bytes)
                                                else data.encode()).decode()}
        if attachment_id:
            body["attachment_id"] = attachment_id
        return self.control("POST", "/_seed/attachments", body)["attachment_id"]

    def seed_interaction(self, **row):
        return self.control("POST", "/_seed/interactions", row)["interaction"]

    def seed_turn(self, **row):
        return self.control("POST", "/_seed/turns", row)["turn"]

    # -- calling it as the runner does (self-tests and ad-hoc checks) --------------------------

    def call(self, method, route, body=None, credential=None, headers=None):
        h = {"authorization": credential or self.credential}
        h.update(headers or {})
        return self.request(method, route, body, headers=h)
