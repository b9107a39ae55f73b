"""A real agent-runner stack on loopback, in a temp dir, for integration tests.

Starts the scripted fake model server, spawn-fcgi + agent-runnerd (master, workers; keepers
and bubblewrap sandboxes appear per turn) and nginx terminating TLS. Only the pids started
here are ever signalled. `leaks()` lists processes and files a test left behind. What a test
sends and reads (run requests, the records of a stream) is in turns.py.
"""

import http.client
import json
import os
import pwd
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BUILD", "build")
BIN = os.path.join(ROOT, BUILD, "bin")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
TOKEN = "test-token-" + os.urandom(8).hex()

# One client TLS context for every request: the stack's certificate is self-signed and not
# verified, so there is no CA store to load per connection.
CLIENT_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
CLIENT_TLS.check_hostname = False
CLIENT_TLS.verify_mode = ssl.CERT_NONE


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for(pred, timeout=10.0, step=0.02, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError("timed out waiting for " + what)


def proc_states():
    """pid -> (ppid, state, cmdline) for every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            rest = stat[stat.rindex(")") + 2:].split()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError):
            continue
        out[int(d)] = (int(rest[1]), rest[0], cmd)
    return out


def proc_table():
    """pid -> (ppid, cmdline) for every process; zombies are marked in the cmdline."""
    return {pid: (ppid, "[zombie] " + cmd if state == "Z" else cmd)
            for pid, (ppid, state, cmd) in proc_states().items()}


def descendants(root, table=None):
    table = table or proc_table()
    kids = {}
    for pid, (ppid, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


class FakeModel:
    def __init__(self, tmp):
        self.portfile = os.path.join(tmp, "model.port")
        self.log = os.path.join(tmp, "model.log")
        self.proc = subprocess.Popen(
            ["python3", os.path.join(FIXTURES, "fake_model.py"), "--port", "0",
             "--portfile", self.portfile, "--log", self.log],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "model.err"), "w"))
        wait_for(lambda: os.path.exists(self.portfile), what="fake model port")
        with open(self.portfile) as f:
            self.port = int(f.read().strip())
        self.base = f"http://127.0.0.1:{self.port}"

    def _call(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"content-type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return json.loads(data)

    def script(self, name, steps):
        self._call("POST", "/_script", {"name": name, "steps": steps})

    def requests(self):
        return self._call("GET", "/_log")

    def reset(self):
        self._call("POST", "/_reset", {})

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def make_cert(tmp, name="cert", key_name="key"):
    """A self-signed certificate for 127.0.0.1 (a SAN, so TLS clients can verify the address
    against it when they trust it): (cert path, key path)."""
    cert, key = os.path.join(tmp, name + ".pem"), os.path.join(tmp, key_name + ".pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", cert],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


class Stack:
    def __init__(self, workers=2, threads=8, env=None, scripted=True, model=None, instance=None):
        self.tmp = tempfile.mkdtemp(prefix="ar-it.")
        os.chmod(self.tmp, 0o755)
        self.state = os.path.join(self.tmp, "state")
        self.sock = os.path.join(self.tmp, "fcgi.sock")
        self.port = free_port()
        self.model = model
        self.workers = workers
        self.threads = threads
        self.extra_env = dict(env or {})
        self.scripted = scripted
        self.master = None
        self.nginx = None
        self.runner_log = os.path.join(self.tmp, "runner.log")
        self.instance = instance or "it-" + os.path.basename(self.tmp).split(".")[-1]
        self.url = f"https://127.0.0.1:{self.port}"
        self.cert = os.path.join(self.tmp, "cert.pem")

    # --- lifecycle -------------------------------------------------------------------------

    def start(self):
        if not os.path.exists(self.cert):
            make_cert(self.tmp)
        conf = subprocess.run(
            ["bash", os.path.join(ROOT, "scripts", "render-nginx"), self.tmp,
             f"127.0.0.1:{self.port}", self.sock, os.path.join(self.tmp, "cert.pem"),
             os.path.join(self.tmp, "key.pem")], check=True, capture_output=True, text=True)
        with open(os.path.join(self.tmp, "nginx.conf"), "w") as f:
            f.write(conf.stdout)
        self.start_master()
        self.nginx = subprocess.Popen(["nginx", "-p", self.tmp, "-c",
                                       os.path.join(self.tmp, "nginx.conf")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._https_up, what="nginx")
        return self

    def runner_env(self):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "AGENT_RUNNER_TOKEN": TOKEN,
               "AGENT_RUNNER_STATE_DIR": self.state,
               "AGENT_RUNNER_INSTANCE": self.instance,
               "AGENT_RUNNER_HARNESS_DIR": os.path.join(ROOT, "harnesses"),
               "AGENT_RUNNER_KEEPER_BIN": os.path.join(BIN, "agent-runner-keeper"),
               "AGENT_RUNNER_DRAIN_MS": "5000",
               "AGENT_RUNNER_LOG_LEVEL": "debug",
               # pre-started spares are keepers and folders the leak check and the process
               # counts would see: off unless a suite turns them on (test_spares)
               "AGENT_RUNNER_SPARES": "0",
               # pre-made sandbox shells likewise (test_shells turns them on)
               "AGENT_RUNNER_SHELLS": "0",
               # must never reach a sandbox
               "AGENT_RUNNER_SECRET_CANARY": "canary-" + os.urandom(6).hex()}
        if self.scripted:
            env["AGENT_RUNNER_SCRIPTED_AGENT"] = os.path.join(BIN, "acp-scripted")
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS", "LSAN_OPTIONS"):
            if k in os.environ:
                env[k] = os.environ[k]
        env.update(self.extra_env)
        return env

    def start_master(self):
        user = "www-data"
        try:
            pwd.getpwnam(user)
        except KeyError:
            user = "root"
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        self.env = self.runner_env()
        self.master = subprocess.Popen(
            ["spawn-fcgi", "-n", "-s", self.sock, "-M", "0660", "-U", user, "--",
             os.path.join(BIN, "agent-runnerd"), "--workers", str(self.workers),
             "--threads", str(self.threads)],
            env=self.env, stdout=subprocess.DEVNULL, stderr=open(self.runner_log, "a"))
        wait_for(lambda: os.path.exists(self.sock), what="fastcgi socket")
        wait_for(lambda: len(self.worker_pids()) == self.workers, what="workers")

    def _https_up(self):
        try:
            status, _, _ = self.request("GET", "/livez")
            return status == 200
        except OSError:
            return False

    def stop(self):
        if self.nginx and self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGQUIT)
            try:
                self.nginx.wait(10)
            except subprocess.TimeoutExpired:
                self.nginx.kill()
                self.nginx.wait()
        self.stop_master()

    def stop_master(self, sig=signal.SIGTERM, timeout=30):
        if self.master and self.master.poll() is None:
            self.master.send_signal(sig)
            try:
                self.master.wait(timeout)
            except subprocess.TimeoutExpired:
                self.master.kill()
                self.master.wait()
        return self.master.returncode if self.master else None

    def cleanup(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- processes -------------------------------------------------------------------------

    def worker_pids(self):
        if not self.master or self.master.poll() is not None:
            return []
        t = proc_table()
        return [p for p, (pp, cmd) in t.items() if pp == self.master.pid and
                "agent-runnerd" in cmd and not cmd.startswith("[zombie]")]

    def keeper_pids(self):
        if not self.master:
            return []
        t = proc_table()
        return [p for p, (pp, cmd) in t.items() if pp == self.master.pid and
                "agent-runner-keeper" in cmd]

    def strays(self):
        """Processes below the master that are not workers, plus anything naming our tmp."""
        t = proc_table()
        workers = set(self.worker_pids())
        out = []
        if self.master and self.master.poll() is None:
            for p in descendants(self.master.pid, t):
                if p in workers or t.get(p, (0, ""))[0] in workers:
                    continue
                out.append((p, t[p][1]))
        mine = {os.getpid()}
        for p in (self.master, self.nginx):
            if p:
                mine.add(p.pid)
        for p, (pp, cmd) in t.items():
            if p in mine or self.tmp not in cmd or "nginx" in cmd:
                continue
            if p in workers or (self.master and pp == self.master.pid and p in workers):
                continue
            if "agent-runnerd" in cmd or "spawn-fcgi" in cmd:
                continue
            if (p, cmd) not in out:
                out.append((p, cmd))
        return out

    def spare_slots(self):
        """The slots holding (or building) spares: a spare belongs to the stack, no test."""
        if not self.master or self.master.poll() is not None:
            return []
        return [s for s in self.sessions()["sessions"] if s.get("spare")]

    def _spare_exempt(self, stray, left):
        slots = self.spare_slots()
        if not slots:
            return stray, left
        t = proc_table()
        pids, dirs = set(), set()
        for s in slots:
            if s["keeperPid"] > 0:
                pids.add(s["keeperPid"])
                pids.update(descendants(s["keeperPid"], t))
            if s["envDir"]:
                dirs.add(os.path.basename(s["envDir"]))
        return ([(p, c) for p, c in stray if p not in pids],
                [d for d in left if d not in dirs])

    def leaks(self, timeout=10.0):
        """Wait until nothing is left behind; return what still is."""
        deadline = time.monotonic() + timeout
        envs = os.path.join(self.state, "envs")
        spares = (self.extra_env.get("AGENT_RUNNER_SPARES", "0") not in ("0", "pi=0") or
                  self.extra_env.get("AGENT_RUNNER_SHELLS", "0") != "0")
        while True:
            stray = self.strays()
            left = os.listdir(envs) if os.path.isdir(envs) else []
            if spares:
                stray, left = self._spare_exempt(stray, left)
            if not stray and not left:
                return []
            if time.monotonic() > deadline:
                return [f"process {p}: {c}" for p, c in stray] + [f"env dir {d}" for d in left]
            time.sleep(0.05)

    def ctl(self, *args, check=True):
        out = subprocess.run([os.path.join(BIN, "agent-runner-ctl"), "--instance",
                              self.env["AGENT_RUNNER_INSTANCE"], *args],
                             capture_output=True, text=True, timeout=60)
        if check and out.returncode != 0:
            raise AssertionError(f"agent-runner-ctl {args}: {out.returncode} {out.stderr}")
        return out

    def sessions(self):
        return json.loads(self.ctl("sessions", "--json").stdout)

    def session(self, key):
        for s in self.sessions()["sessions"]:
            if s["key"] == key:
                return s
        return None

    def recent_reason(self, key):
        for r in self.sessions()["recent"]:
            if r["key"] == key:
                return r["reason"]
        return None

    def log_text(self):
        with open(self.runner_log, errors="replace") as f:
            return f.read()

    # --- HTTP ------------------------------------------------------------------------------

    def connection(self, timeout=120):
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=CLIENT_TLS,
                                           timeout=timeout)

    def request(self, method, path, body=None, headers=None, token=True, raw=None, timeout=120):
        h = {"content-type": "application/json"}
        if token:
            h["authorization"] = "Bearer " + TOKEN
        h.update(headers or {})
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c = self.connection(timeout)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        payload = r.read()
        c.close()
        try:
            doc = json.loads(payload) if payload else None
        except ValueError:
            doc = payload.decode(errors="replace")
        return r.status, dict(r.getheaders()), doc

    def open_stream(self, body, headers=None, path="/run", timeout=300):
        """POST an NDJSON run and return (connection, response) with the body unread."""
        h = {"content-type": "application/json", "accept": "application/x-ndjson",
             "authorization": "Bearer " + TOKEN}
        h.update(headers or {})
        c = self.connection(timeout)
        c.request("POST", path, body=json.dumps(body), headers=h)
        return c, c.getresponse()

    def stream(self, body, headers=None, path="/run", timeout=300):
        """POST an NDJSON run; returns (status, [(arrival_s, record)])."""
        t0 = time.monotonic()
        c, r = self.open_stream(body, headers, path, timeout)
        out = []
        if r.status != 200:
            data = r.read()
            c.close()
            return r.status, json.loads(data) if data else None
        while True:
            line = r.readline()
            if not line:
                break
            out.append((time.monotonic() - t0, json.loads(line)))
        c.close()
        return r.status, out



# --- several hosts: a Redis, members, a round-robin balancer --------------------------------


def resp_command(port, *args, timeout=5.0, host="127.0.0.1"):
    """One Redis command over RESP (stdlib only): the reply as str / int / list / None; an
    error reply raises."""
    def encode(a):
        b = a if isinstance(a, bytes) else str(a).encode()
        return b"$%d\r\n%s\r\n" % (len(b), b)

    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(b"*%d\r\n" % len(args) + b"".join(encode(a) for a in args))
        f = s.makefile("rb")

        def read():
            line = f.readline()
            if not line:
                raise ConnectionError("redis closed the connection")
            kind, rest = line[:1], line[1:-2]
            if kind == b"+":
                return rest.decode()
            if kind == b"-":
                raise RuntimeError("redis: " + rest.decode())
            if kind == b":":
                return int(rest)
            if kind == b"$":
                n = int(rest)
                if n < 0:
                    return None
                data = f.read(n + 2)[:-2]
                return data.decode(errors="replace")
            if kind == b"*":
                n = int(rest)
                return None if n < 0 else [read() for _ in range(n)]
            raise RuntimeError(f"redis: unexpected reply {line!r}")

        return read()


class Redis:
    """A real redis-server on loopback in its own dir and port (and a TLS port with tls=True,
    its certificate in cert.pem there). Only its own pid is ever signalled."""

    def __init__(self, tls=False):
        self.dir = tempfile.mkdtemp(prefix="ar-redis.")
        os.chmod(self.dir, 0o755)
        self.port = free_port()
        self.tls_port = free_port() if tls else None
        self.proc = None
        self.cert = None
        if tls:
            self.cert, self.key = make_cert(self.dir)
            os.chmod(self.key, 0o644)  # redis may run as another user; the dir is ours

    def start(self):
        args = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
                "--dir", self.dir, "--save", "", "--appendonly", "no",
                "--logfile", os.path.join(self.dir, "redis.log"), "--daemonize", "no"]
        if self.tls_port:
            args += ["--tls-port", str(self.tls_port), "--tls-cert-file", self.cert,
                     "--tls-key-file", self.key, "--tls-ca-cert-file", self.cert,
                     "--tls-auth-clients", "no"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self.up, what="redis-server")
        return self

    def up(self):
        try:
            return self.cmd("PING") == "PONG"
        except OSError:
            return False

    def url(self, tls=False, db=0):
        if tls:
            return f"rediss://127.0.0.1:{self.tls_port}/{db}"
        return f"redis://127.0.0.1:{self.port}/{db}"

    def cmd(self, *args):
        return resp_command(self.port, *args)

    def keys(self, pattern):
        return sorted(self.cmd("KEYS", pattern) or [])

    def get(self, key):
        return self.cmd("GET", key)

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


FRONT_CONF = """
@USER_LINE@
worker_processes 1;
daemon off;
pid @PREFIX@/nginx.pid;
error_log @PREFIX@/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log @PREFIX@/nginx-access.log;
    client_body_temp_path @PREFIX@/nginx-tmp/body;
    proxy_temp_path @PREFIX@/nginx-tmp/proxy;
    fastcgi_temp_path @PREFIX@/nginx-tmp/fastcgi;
    uwsgi_temp_path @PREFIX@/nginx-tmp/uwsgi;
    scgi_temp_path @PREFIX@/nginx-tmp/scgi;
    upstream agent_runner_hosts {{
{servers}
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate @PREFIX@/cert.pem;
        ssl_certificate_key @PREFIX@/key.pem;
        proxy_ssl_trusted_certificate {ca};
        proxy_ssl_verify on;
        proxy_ssl_name 127.0.0.1;
        include {conf_dir}/agent-runner-cluster.conf;
    }}
}}
"""


class Front:
    """A round-robin nginx in front of several members (nginx/agent-runner-cluster.conf), the
    way a plain load balancer spreads requests: no session affinity."""

    def __init__(self, members, ca_file):
        self.tmp = tempfile.mkdtemp(prefix="ar-front.")
        os.chmod(self.tmp, 0o755)
        os.makedirs(os.path.join(self.tmp, "nginx-tmp"))
        self.port = free_port()
        self.members = members
        self.ca = ca_file
        self.nginx = None
        self.master = None  # no runner of its own (tests/bench/run.py's CPU snapshot asks)

    def start(self):
        make_cert(self.tmp)
        servers = "\n".join(f"        server 127.0.0.1:{m.port} max_fails=1 fail_timeout=2s;"
                            for m in self.members)
        user = "user www-data;" if os.geteuid() == 0 else ""
        conf = FRONT_CONF.format(servers=servers, port=self.port, ca=self.ca,
                                 conf_dir=os.path.join(ROOT, "nginx"))
        conf = conf.replace("@PREFIX@", self.tmp).replace("@USER_LINE@", user)
        path = os.path.join(self.tmp, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf)
        self.nginx = subprocess.Popen(["nginx", "-p", self.tmp, "-c", path],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self._up(), what="front nginx")
        return self

    def _up(self):
        try:
            c = http.client.HTTPSConnection("127.0.0.1", self.port, context=CLIENT_TLS,
                                            timeout=5)
            c.request("GET", "/livez")
            ok = c.getresponse().status == 200
            c.close()
            return ok
        except OSError:
            return False

    # the same client surface as Stack (request / open_stream / stream)
    connection = Stack.connection
    request = Stack.request
    open_stream = Stack.open_stream
    stream = Stack.stream

    def stop(self):
        if self.nginx and self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGQUIT)
            try:
                self.nginx.wait(10)
            except subprocess.TimeoutExpired:
                self.nginx.kill()
                self.nginx.wait()

    def cleanup(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


class Cluster:
    """Several members of one group on this machine (own instance names, ports, state dirs and
    sandbox uid ranges) sharing one Redis, and a round-robin Front over them."""

    UID_BASE = 2000000000
    UID_STEP = 100000

    def __init__(self, model, n=2, redis=None, env=None, workers=2, threads=8, ttl_ms=2000,
                 refresh_ms=400, group=None):
        self.model = model
        self.redis = redis
        self.group = group or "c-" + os.urandom(3).hex()
        self.env = dict(env or {})
        self.workers, self.threads = workers, threads
        self.ttl_ms, self.refresh_ms = ttl_ms, refresh_ms
        self.bundle_dir = tempfile.mkdtemp(prefix="ar-cluster.")
        os.chmod(self.bundle_dir, 0o755)
        self.bundle = os.path.join(self.bundle_dir, "members-ca.pem")
        self.members = []
        for _ in range(n):
            self.add(start=False)
        self.front = None

    def member_env(self, st, k):
        env = {"AGENT_RUNNER_REDIS_URL": self.redis.url(),
               "AGENT_RUNNER_ADVERTISE_URL": st.url,
               "AGENT_RUNNER_CLUSTER_GROUP": self.group,
               "AGENT_RUNNER_CLUSTER_MEMBER": st.instance,
               "AGENT_RUNNER_CLUSTER_TTL_MS": str(self.ttl_ms),
               "AGENT_RUNNER_CLUSTER_REFRESH_MS": str(self.refresh_ms),
               "AGENT_RUNNER_CLUSTER_CA_FILE": self.bundle,
               "AGENT_RUNNER_SANDBOX_UID_BASE": str(self.UID_BASE + k * self.UID_STEP)}
        env.update(self.env)
        return env

    def add(self, start=True, env=None):
        """One more member (started unless start=False: start() starts them all)."""
        k = len(self.members)
        st = Stack(workers=self.workers, threads=self.threads, model=self.model,
                   instance=f"{self.group}-{chr(ord('a') + k)}")
        st.extra_env = self.member_env(st, k)
        st.extra_env.update(env or {})
        make_cert(st.tmp)
        self.members.append(st)
        self.write_bundle()
        if start:
            st.start()
        return st

    def write_bundle(self):
        with open(self.bundle + ".tmp", "w") as out:
            for st in self.members:
                with open(st.cert) as f:
                    out.write(f.read())
        os.rename(self.bundle + ".tmp", self.bundle)

    def start(self):
        for st in self.members:
            if not st.master:
                st.start()
        self.front = Front(self.members, self.bundle).start()
        return self

    def stop(self):
        if self.front:
            self.front.stop()
        for st in self.members:
            st.stop()

    def cleanup(self):
        if self.front:
            self.front.cleanup()
        for st in self.members:
            st.cleanup()
        shutil.rmtree(self.bundle_dir, ignore_errors=True)
