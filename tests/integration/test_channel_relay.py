"""The keeper channel relay a remote (Daytona) sandbox runs (harnesses/extension/bin/
channel-relay.js), on the pinned Node, driven through its stdio the way the keeper's pump
(engine/provider/daytona/daytona_relay.c) drives it; the end-to-end path through the fake Daytona is
in test_daytona.py. The runner's stack is not involved; every test ends its relay and checks
that nothing of it survives."""

import base64
import os
import select
import socket
import stat
import subprocess
import tempfile
import uuid

import stack
from pi_sandbox import NODE, installed

HERE = os.path.dirname(os.path.abspath(__file__))
RELAY = os.path.join(HERE, "..", "..", "harnesses", "extension", "bin", "channel-relay.js")
LINE_MAX = 8 * 1024 * 1024

STACK = {"workers": 1, "threads": 2}


class Relay:
    def __init__(self, sock=None):
        if not installed():
            raise stack.SkipTest("harnesses not installed (make harnesses)")
        self.tmp = tempfile.mkdtemp(prefix="ar-relay.")
        self.sock = sock or os.path.join(self.tmp, "ch", "channel.sock")
        self.p = subprocess.Popen([NODE, RELAY, self.sock], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.pending = b""

    def frame(self, timeout=10):
        """The next line the relay prints, as text ('' at EOF)."""
        while b"\n" not in self.pending:
            r, _, _ = select.select([self.p.stdout], [], [], timeout)
            assert r, f"the relay said nothing for {timeout}s (had {self.pending[:80]!r})"
            chunk = os.read(self.p.stdout.fileno(), 1 << 20)
            if not chunk:
                return ""
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode()

    def send(self, text):
        self.p.stdin.write(text.encode() + b"\n")
        self.p.stdin.flush()

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.sock)
        s.settimeout(10)
        return s

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            rc = self.p.wait(timeout=10)
        else:
            rc = self.p.returncode
        self.p.stdout.close()
        self.p.stderr.close()
        subprocess.run(["rm", "-rf", self.tmp], check=False)
        return rc


def data(conn, raw):
    return f"d {conn} {base64.b64encode(raw).decode()}"


def read_line(s):
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        buf += chunk
    return buf


def test_relay_carries_any_byte_both_ways_on_separate_connections(ctx):
    r = Relay()
    try:
        assert r.frame() == "ready"
        folder = os.path.dirname(r.sock)
        st = os.stat(folder)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid(), oct(st.st_mode)
        assert stat.S_ISSOCK(os.lstat(r.sock).st_mode)
        assert stat.S_IMODE(os.lstat(r.sock).st_mode) & 0o077 == 0
        a, b = r.connect(), r.connect()
        assert r.frame() == "o 1" and r.frame() == "o 2"
        hostile = b'\x01\x01\x01{"x":"\xff\xfe"}\x02\x02\x02\r'
        a.sendall(hostile + b"\n")
        assert r.frame() == data(1, hostile)
        b.sendall(b'{"id":1}\n{"id":2}\n')
        assert r.frame() == data(2, b'{"id":1}') and r.frame() == data(2, b'{"id":2}')
        r.send(data(2, hostile))
        assert read_line(b) == hostile + b"\n"
        r.send(data(1, b'{"result":1}'))
        assert read_line(a) == b'{"result":1}\n'
        # frames it does not know, or for no connection, change nothing
        r.send("bogus")
        r.send(data(9, b"x"))
        # the keeper closes connection 1: the sandbox side sees EOF, no "c 1" comes back
        r.send("c 1")
        assert a.recv(10) == b""
        # the sandbox closes connection 2: the keeper hears "c 2"
        b.close()
        assert r.frame() == "c 2"
        a.close()
    finally:
        assert r.close() == 0
    assert not os.path.exists(r.sock)


def test_relay_bounds_connections_and_lines(ctx):
    r = Relay()
    try:
        assert r.frame() == "ready"
        conns = [r.connect() for _ in range(16)]
        assert [r.frame() for _ in range(16)] == [f"o {i}" for i in range(1, 17)]
        extra = r.connect()
        assert extra.recv(10) == b"", "a 17th connection was served"
        extra.close()
        # a line over the limit closes its connection, and the keeper hears so
        big = conns[0]
        try:
            big.sendall(b"x" * (LINE_MAX + 2))
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert r.frame(timeout=30) == "c 1"
        # the others still work
        conns[1].sendall(b"{}\n")
        assert r.frame() == data(2, b"{}")
        for c in conns:
            c.close()
        assert sorted(r.frame() for _ in range(15)) == sorted(f"c {i}" for i in range(2, 17))
    finally:
        assert r.close() == 0


def test_relay_replaces_a_leftover_socket_and_refuses_a_foreign_folder(ctx):
    tmp = tempfile.mkdtemp(prefix="ar-relay-t.")
    try:
        folder = os.path.join(tmp, "ch")
        os.makedirs(folder, mode=0o755)
        sock = os.path.join(folder, "channel.sock")
        with open(sock, "w") as f:  # a leftover (or something planted) at the path
            f.write("x")
        r = Relay(sock)
        try:
            assert r.frame() == "ready"
            assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
            assert stat.S_ISSOCK(os.lstat(sock).st_mode)
        finally:
            assert r.close() == 0
        # the folder is a symlink: refused, nothing listens
        link = os.path.join(tmp, "link")
        os.symlink(folder, link)
        r = Relay(os.path.join(link, "channel.sock"))
        try:
            assert r.frame() == ""
            assert r.p.wait(timeout=10) == 2
            assert b"is not a folder of this user" in r.p.stderr.read()
        finally:
            r.close()
        # a relative path is refused
        r = Relay("channel-" + uuid.uuid4().hex[:6] + ".sock")
        try:
            assert r.frame() == "" and r.p.wait(timeout=10) == 2
        finally:
            r.close()
    finally:
        subprocess.run(["rm", "-rf", tmp], check=False)
