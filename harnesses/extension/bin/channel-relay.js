// channel-relay — the keeper channel's sandbox end on a remote sandbox (Daytona).
//
//   node channel-relay.js /abs/path/channel.sock
//
// The keeper cannot bind its channel socket into a sandbox on another machine, so it starts
// this relay there (a toolbox process session) before the harness: the relay listens on the
// path the harness finds in $RUNNER_CHANNEL, prints "ready", and multiplexes every accepted
// connection over its stdio; the keeper (engine/provider/daytona/daytona_relay.h) opens one
// connection to its own channel socket per relayed one. One text line per frame, payloads
// base64 (a line from the sandbox may hold any byte; the toolbox log must not see raw ones):
//   stdout  "ready" | "o <id>" (accepted) | "d <id> <base64 line>" | "c <id>" (closed)
//   stdin   "d <id> <base64 line>" (for the connection) | "c <id>" (close it)
// At most CONNS_MAX connections at once (more are closed at once), lines of at most
// LINE_MAX bytes (a longer one closes its connection), at most QUEUE_MAX bytes queued towards
// one connection. No network: a unix socket in a 0700 folder of the sandbox user, who runs
// the harness too. Exits when stdin closes (the keeper went), removing its socket.
import fs from "node:fs";
import net from "node:net";
import path from "node:path";

const LINE_MAX = 8 * 1024 * 1024; // TOOL_CHANNEL_LINE_MAX
const FRAME_MAX = 32 + Math.ceil((LINE_MAX + 2) / 3) * 4;
const CONNS_MAX = 16;
const QUEUE_MAX = 4 * FRAME_MAX;
const ID_MAX = 2147483647;

function fail(msg, code = 2) {
    process.stderr.write(`channel-relay: ${msg}\n`);
    process.exit(code);
}

const sockPath = process.argv[2] || "";
if (!path.isAbsolute(sockPath) || Buffer.byteLength(sockPath) > 107)
    fail("usage: channel-relay.js /absolute/socket/path (at most 107 bytes)");

// The folder: ours and 0700; whatever is at the socket's path is a leftover of an earlier
// relay (a kept sandbox) in that folder, never followed.
const dir = path.dirname(sockPath);
try {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    const st = fs.lstatSync(dir);
    if (!st.isDirectory() || st.uid !== process.getuid())
        fail(`'${dir}' is not a folder of this user`);
    fs.chmodSync(dir, 0o700);
    const old = fs.lstatSync(sockPath, { throwIfNoEntry: false });
    if (old && old.isDirectory()) fail(`'${sockPath}' is a folder`);
    if (old) fs.unlinkSync(sockPath);
} catch (e) {
    fail(`cannot prepare '${dir}': ${e.message}`);
}
process.umask(0o077);

const conns = new Map(); // id -> {sock, pending: Buffer[], pendingLen}
let nextId = 1;
let closing = false;

function out(line) {
    process.stdout.write(line + "\n");
}

function closed(id) {
    if (!conns.has(id)) return;
    conns.delete(id);
    if (!closing) out(`c ${id}`);
}

function onData(id, c, chunk) {
    let start = 0;
    for (;;) {
        const nl = chunk.indexOf(10, start);
        if (nl < 0) break;
        const part = chunk.subarray(start, nl);
        const line = c.pendingLen ? Buffer.concat([...c.pending, part]) : part;
        c.pending = [];
        c.pendingLen = 0;
        if (line.length > LINE_MAX) return c.sock.destroy();
        out(`d ${id} ${line.toString("base64")}`);
        start = nl + 1;
    }
    if (start < chunk.length) {
        c.pending.push(chunk.subarray(start));
        c.pendingLen += chunk.length - start;
        if (c.pendingLen > LINE_MAX) c.sock.destroy();
    }
}

const server = net.createServer((sock) => {
    if (closing || conns.size >= CONNS_MAX) return sock.destroy();
    while (conns.has(nextId)) nextId = nextId >= ID_MAX ? 1 : nextId + 1; // never reused while open
    const id = nextId;
    nextId = nextId >= ID_MAX ? 1 : nextId + 1;
    const c = { sock, pending: [], pendingLen: 0 };
    conns.set(id, c);
    out(`o ${id}`);
    sock.on("data", (chunk) => onData(id, c, chunk));
    sock.on("error", () => {});
    sock.on("close", () => closed(id));
});
server.on("error", (e) => fail(`cannot listen on '${sockPath}': ${e.message}`));
server.listen(sockPath, () => out("ready"));

function fromKeeper(line) {
    let m = /^d ([1-9][0-9]{0,9}) ([A-Za-z0-9+/]*={0,2})$/.exec(line);
    if (m) {
        const c = conns.get(Number(m[1]));
        if (!c || m[2].length % 4) return;
        c.sock.write(Buffer.concat([Buffer.from(m[2], "base64"), Buffer.from("\n")]));
        if (c.sock.writableLength > QUEUE_MAX) c.sock.destroy();
        return;
    }
    m = /^c ([1-9][0-9]{0,9})$/.exec(line);
    if (m) {
        const id = Number(m[1]);
        const c = conns.get(id);
        if (!c) return;
        conns.delete(id); // the keeper knows: no "c" back
        c.sock.end();
        return;
    }
    if (line.length) process.stderr.write("channel-relay: a frame it does not know was dropped\n");
}

let inbuf = [];
let inlen = 0;
process.stdin.on("data", (chunk) => {
    let start = 0;
    for (;;) {
        const nl = chunk.indexOf(10, start);
        if (nl < 0) break;
        const part = chunk.subarray(start, nl);
        const line = inlen ? Buffer.concat([...inbuf, part]) : part;
        inbuf = [];
        inlen = 0;
        fromKeeper(line.toString("latin1").replace(/\r$/, ""));
        start = nl + 1;
    }
    if (start < chunk.length) {
        inbuf.push(chunk.subarray(start));
        inlen += chunk.length - start;
        if (inlen > FRAME_MAX) shutdown(3, "a frame from the keeper over the limit");
    }
});

function shutdown(code, why) {
    if (why) process.stderr.write(`channel-relay: ${why}\n`);
    closing = true;
    server.close();
    for (const c of conns.values()) c.sock.destroy();
    conns.clear();
    try {
        fs.unlinkSync(sockPath);
    } catch {}
    process.exit(code);
}

process.stdin.on("end", () => shutdown(0));
process.stdin.on("error", () => shutdown(0));
process.stdout.on("error", () => shutdown(0)); // the keeper went: nobody reads us
process.on("SIGTERM", () => shutdown(0));
process.on("SIGHUP", () => shutdown(0));
