/*
 * agent-runner's pi extension: the sandbox end of the keeper channel.
 *
 * pi (@mariozechner/pi-coding-agent 0.73.1) loads it when it starts and again after every
 * session replacement: from its agent folder ($PI_CODING_AGENT_DIR/extensions/agent-runner,
 * a symlink to this read-only folder) or as `--extension` through bin/pi-launch. The folder's
 * package.json ("type": "module") makes pi's loader import it natively (in a cold sandbox's
 * one-file pi, tools/bundle, through require() of an ES module: no top-level await here).
 * Node built-ins only.
 * The full protocol, with the reasons behind each rule, is in PROTOCOL.md next to this file;
 * in short:
 *
 * Channel: one unix stream socket per pi process, the connection the keeper made for the
 * harness and pi inherited (descriptor $RUNNER_CHANNEL_FD, local sandboxes), else one opened
 * to $RUNNER_CHANNEL (a remote sandbox's relay); newline-delimited JSON-RPC 2.0, one object
 * per line. It holds no secret: the connection itself is the capability. This side chooses
 * the request ids (integers from 1) and sends:
 *   request  hello            {client:"pi-extension", version, gating, tools}
 *                             -> {protocol:1}
 *   request  tool/permission  {toolCallId, toolName, input}
 *                             -> {outcome:"allow"} | {outcome:"deny", message} | {outcome:"cancelled"}
 *   request  tool/call        {toolCallId, toolName, arguments}
 *                             -> {content:[{type:"text", text}], isError}
 *   notify   usage            {input, output, cacheRead, cacheWrite, total, cost}   per model call
 *   notify   error            {message, code}   code "provider_error" | "model_unavailable"
 * The runner sends only responses. Answers may take minutes (a human approves); nothing here
 * times them out. Requests are answered in any order.
 *
 * Environment:
 *   RUNNER_CHANNEL_FD     the inherited connection's descriptor number. Taken when this module
 *                         first loads and deleted from process.env; Node made the descriptor
 *                         close-on-exec when pi started, so no tool pi runs has it
 *   RUNNER_CHANNEL        socket path when there is no descriptor; neither = no channel
 *   RUNNER_GATE_BUILTINS  "1": every tool call except the runner's own tools waits for
 *                         tool/permission (the built-ins read bash edit write grep find ls,
 *                         and any tool another extension adds)
 *   RUNNER_TOOLS_FILE     JSON [{name, description, inputSchema}]: tools registered here and
 *                         executed by the runner through tool/call
 *   RUNNER_SESSION_FILE   JSON {gateBuiltins: bool}, read at every load: the session's gating
 *                         when pi started before its session existed (a spare, whose runner
 *                         writes the file at claim and has pi reload us). Missing or unreadable:
 *                         RUNNER_GATE_BUILTINS decides (the spare's is "1": gated)
 *
 * Fail closed: with gating on, a missing, refused, closed or misbehaving channel blocks every
 * gated call with a reason the model sees; it never lets one through. Loading never throws:
 * an extension that fails to load would leave pi running ungated.
 */
import fs from "node:fs";
import net from "node:net";

const VERSION = "1";
const PROTOCOL = 1;
const MAX_LINE = 16 * 1024 * 1024; /* a longer line from the runner is a protocol error */
const MAX_TOOLS_FILE = 8 * 1024 * 1024;
const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const BUILTINS = new Set(["read", "bash", "edit", "write", "grep", "find", "ls"]);

/*
 * The process's one channel, kept on globalThis: pi loads the extension again after a session
 * replacement (a spare's claim), and every load speaks over the same connection (the keeper
 * made exactly one for the harness; a remote sandbox's relay gives the harness's role to the
 * first connection only). The descriptor number leaves the environment at the first load.
 */
const CHANNEL_KEY = Symbol.for("agent-runner.channel");
const FD_KEY = Symbol.for("agent-runner.channel-fd");
if (process.env.RUNNER_CHANNEL_FD !== undefined) {
    if (globalThis[FD_KEY] === undefined)
        globalThis[FD_KEY] = process.env.RUNNER_CHANNEL_FD;
    delete process.env.RUNNER_CHANNEL_FD;
}

function log(msg) {
    /* stderr only: pi's stdout carries its RPC protocol */
    process.stderr.write(`agent-runner extension: ${msg}\n`);
}

/* One JSON-RPC connection to the keeper. Once broken it stays broken (no reconnect). */
class Channel {
    constructor() {
        this.sock = null;
        this.nextId = 1;
        this.pending = new Map(); /* id -> {resolve, reject} */
        this.buf = "";
        this.dead = "not connected";
    }

    connect(path) {
        return new Promise((resolve) => {
            const sock = net.createConnection({ path });
            const fail = (err) => {
                this.fail(`cannot connect to ${path}: ${err.code || err.message}`);
                resolve(false);
            };
            sock.once("error", fail);
            sock.once("connect", () => {
                sock.removeListener("error", fail);
                this.attach(sock);
                resolve(true);
            });
        });
    }

    /* The inherited connection, descriptor fdText; false (and why in dead) when unusable. */
    adopt(fdText) {
        const fd = /^[0-9]{1,4}$/.test(String(fdText)) ? Number(fdText) : -1;
        if (fd < 3) {
            this.dead = `RUNNER_CHANNEL_FD=${fdText} is not a descriptor`;
            return false;
        }
        try {
            this.attach(new net.Socket({ fd, readable: true, writable: true }));
        } catch (err) {
            this.dead = `cannot use the keeper channel (descriptor ${fd}): ${err.code || err.message}`;
            return false;
        }
        return true;
    }

    attach(sock) {
        this.sock = sock;
        this.dead = null;
        sock.setEncoding("utf8");
        sock.on("data", (chunk) => this.onData(chunk));
        sock.on("error", (err) => this.fail(`channel error: ${err.code || err.message}`));
        sock.on("close", () => this.fail("the runner closed the channel"));
        sock.unref(); /* idle, it never keeps pi alive; see track() */
    }

    /* The socket holds node's event loop open exactly while an answer is awaited. */
    track() {
        if (!this.sock)
            return;
        if (this.pending.size)
            this.sock.ref();
        else
            this.sock.unref();
    }

    fail(reason) {
        if (this.dead)
            return;
        this.dead = reason;
        if (this.sock) {
            this.sock.destroy();
            this.sock = null;
        }
        const waiting = [...this.pending.values()];
        this.pending.clear();
        for (const p of waiting)
            p.reject(new Error(reason));
    }

    onData(chunk) {
        this.buf += chunk;
        let nl;
        while ((nl = this.buf.indexOf("\n")) >= 0) {
            const line = this.buf.slice(0, nl);
            this.buf = this.buf.slice(nl + 1);
            if (line.trim())
                this.onLine(line);
            if (this.dead)
                return;
        }
        if (this.buf.length > MAX_LINE)
            this.fail("protocol error: line from the runner too long");
    }

    onLine(line) {
        let msg;
        try {
            msg = JSON.parse(line);
        } catch {
            this.fail("protocol error: the runner sent a line that is not JSON");
            return;
        }
        if (!msg || typeof msg !== "object" || Array.isArray(msg)) {
            this.fail("protocol error: the runner sent a non-object");
            return;
        }
        if (typeof msg.method === "string") {
            /* the runner only answers; refuse requests, ignore notifications */
            if (msg.id !== undefined && msg.id !== null)
                this.write({ jsonrpc: "2.0", id: msg.id,
                             error: { code: -32601, message: "Method not found" } });
            return;
        }
        const p = this.pending.get(msg.id);
        if (!p)
            return; /* late answer to a call we gave up on (cancelled) */
        this.pending.delete(msg.id);
        this.track();
        if (msg.error && typeof msg.error === "object")
            p.reject(new Error(String(msg.error.message || "error response")));
        else if ("result" in msg)
            p.resolve(msg.result);
        else
            p.reject(new Error("protocol error: response without result or error"));
    }

    write(obj) {
        return new Promise((resolve) => {
            if (this.dead) {
                resolve(false);
                return;
            }
            /* resolves once the line is in the kernel: it precedes anything pi emits later */
            this.sock.write(JSON.stringify(obj) + "\n", (err) => resolve(!err));
        });
    }

    /* A request; rejects on an error answer or a broken channel; `signal` abandons it. */
    request(method, params, signal) {
        if (this.dead)
            return Promise.reject(new Error(this.dead));
        const id = this.nextId++;
        return new Promise((resolve, reject) => {
            let onAbort = null;
            const done = (fn) => (v) => {
                if (onAbort)
                    signal.removeEventListener("abort", onAbort);
                fn(v);
            };
            this.pending.set(id, { resolve: done(resolve), reject: done(reject) });
            this.track();
            if (signal) {
                onAbort = () => {
                    this.pending.delete(id);
                    this.track();
                    reject(new AbortError());
                };
                if (signal.aborted) {
                    onAbort();
                    return;
                }
                signal.addEventListener("abort", onAbort, { once: true });
            }
            this.write({ jsonrpc: "2.0", id, method, params });
        });
    }

    notify(method, params) {
        return this.write({ jsonrpc: "2.0", method, params });
    }
}

class AbortError extends Error {
    constructor() {
        super("cancelled");
        this.name = "AbortError";
    }
}

function currentSignal(ctx) {
    try {
        return ctx?.signal; /* the getter throws once the context is stale */
    } catch {
        return undefined;
    }
}

/* The process's channel and a promise of whether it is up (made at the first load). */
function processChannel() {
    let entry = globalThis[CHANNEL_KEY];
    if (entry)
        return entry;
    const channel = new Channel();
    const fdText = globalThis[FD_KEY];
    const path = process.env.RUNNER_CHANNEL || "";
    let ready;
    if (fdText !== undefined) {
        ready = Promise.resolve(channel.adopt(fdText));
    } else if (path) {
        ready = channel.connect(path);
    } else {
        channel.dead = "no keeper channel (neither RUNNER_CHANNEL_FD nor RUNNER_CHANNEL is set)";
        ready = Promise.resolve(false);
    }
    entry = { channel, ready };
    globalThis[CHANNEL_KEY] = entry;
    return entry;
}

/* The runner's tools: [{name, description, inputSchema}], checked one by one. */
function readToolSpecs(path) {
    const out = [];
    let specs;
    try {
        const st = fs.statSync(path);
        if (!st.isFile() || st.size > MAX_TOOLS_FILE)
            throw new Error(`not a regular file of at most ${MAX_TOOLS_FILE} bytes`);
        specs = JSON.parse(fs.readFileSync(path, "utf8"));
    } catch (err) {
        log(`RUNNER_TOOLS_FILE ${path}: ${err.message}; no runner tools registered`);
        return out;
    }
    if (!Array.isArray(specs)) {
        log(`RUNNER_TOOLS_FILE ${path}: not a JSON array; no runner tools registered`);
        return out;
    }
    const seen = new Set();
    specs.forEach((s, i) => {
        const name = s && typeof s === "object" ? s.name : undefined;
        const schema = s?.inputSchema ?? { type: "object", properties: {} };
        let why = null;
        if (typeof name !== "string" || !TOOL_NAME.test(name))
            why = "name must match [A-Za-z0-9_-]{1,64}";
        else if (BUILTINS.has(name.toLowerCase()))
            why = `"${name}" is a pi built-in`;
        else if (seen.has(name))
            why = `"${name}" is listed twice`;
        else if (s.description !== undefined && typeof s.description !== "string")
            why = "description must be a string";
        else if (!schema || typeof schema !== "object" || Array.isArray(schema))
            why = "inputSchema must be a JSON object";
        if (why) {
            log(`RUNNER_TOOLS_FILE entry ${i} skipped: ${why}`);
            return;
        }
        seen.add(name);
        out.push({ name, description: s.description || name, inputSchema: schema });
    });
    return out;
}

/* model_unavailable: the endpoint cannot be reached or does not have the model. */
function errorCode(message) {
    const unreachable = /ECONNREFUSED|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|connection.?(error|refused)|fetch failed|getaddrinfo|\b404\b|model.{0,40}(not.?found|does not exist|unknown)|no such model/i;
    return unreachable.test(message) ? "model_unavailable" : "provider_error";
}

function num(v) {
    return typeof v === "number" && Number.isFinite(v) ? v : 0;
}

function resultText(result) {
    if (!result || typeof result !== "object" || !Array.isArray(result.content))
        throw new Error("the runner answered tool/call without a content array");
    return result.content
        .filter((c) => c && c.type === "text" && typeof c.text === "string")
        .map((c) => c.text)
        .join("\n");
}

/* The session file's gating (RUNNER_SESSION_FILE), or the environment's when it has none. */
function sessionGating() {
    const envGating = process.env.RUNNER_GATE_BUILTINS === "1";
    const path = process.env.RUNNER_SESSION_FILE || "";
    if (!path)
        return envGating;
    let doc;
    try {
        doc = JSON.parse(fs.readFileSync(path, "utf8"));
    } catch {
        return envGating;
    }
    if (!doc || typeof doc !== "object" || typeof doc.gateBuiltins !== "boolean")
        return true; /* a file we cannot read right: fail closed */
    return doc.gateBuiltins;
}

export default async function agentRunner(pi) {
    const gating = sessionGating();
    const toolsFile = process.env.RUNNER_TOOLS_FILE || "";
    const { channel, ready } = processChannel();
    const runnerTools = new Map(); /* name -> the schema object we registered it with */
    let tools = [];

    /*
     * A runner tool is decided at tool/call, so it skips tool/permission, but only if the
     * tool pi will run under that name is really ours: the first extension to register a name
     * wins, and discovery loads <cwd>/.pi/extensions before the agent folder.
     */
    const isOurs = (name) => {
        try {
            const t = pi.getAllTools().find((x) => x.name === name);
            return t !== undefined && t.parameters === runnerTools.get(name);
        } catch {
            return false;
        }
    };

    /* Registered first and unconditionally: whatever fails below, gated calls stay blocked. */
    pi.on("tool_call", async (event, ctx) => {
        if (!gating || (runnerTools.has(event.toolName) && isOurs(event.toolName)))
            return undefined;
        const snapshot = JSON.stringify(event.input ?? {});
        let verdict;
        try {
            verdict = await channel.request("tool/permission", {
                toolCallId: String(event.toolCallId),
                toolName: String(event.toolName),
                input: JSON.parse(snapshot),
            }, currentSignal(ctx));
        } catch (err) {
            if (err instanceof AbortError)
                return { block: true, reason: "Tool call cancelled." };
            return { block: true,
                     reason: `Tool call blocked: the runner's permission channel is unavailable (${err.message}).` };
        }
        const outcome = verdict && typeof verdict === "object" ? verdict.outcome : undefined;
        if (outcome === "allow") {
            /* what runs must be what was approved, even if another handler kept a reference */
            if (JSON.stringify(event.input ?? {}) !== snapshot)
                return { block: true, reason: "Tool call blocked: its input changed while awaiting permission." };
            return undefined;
        }
        if (outcome === "deny") {
            const message = typeof verdict.message === "string" && verdict.message
                ? verdict.message : "Permission denied.";
            return { block: true, reason: message };
        }
        if (outcome === "cancelled")
            return { block: true, reason: "Tool call cancelled." };
        return { block: true, reason: "Tool call blocked: the runner answered tool/permission without a valid outcome." };
    });

    try {
        if (toolsFile)
            tools = readToolSpecs(toolsFile);
        for (const spec of tools) {
            runnerTools.set(spec.name, spec.inputSchema);
            pi.registerTool({
                name: spec.name,
                label: spec.name,
                description: spec.description,
                promptSnippet: spec.description.split("\n")[0].slice(0, 200),
                parameters: spec.inputSchema,
                async execute(toolCallId, params, signal) {
                    let result;
                    try {
                        result = await channel.request("tool/call", {
                            toolCallId: String(toolCallId),
                            toolName: spec.name,
                            arguments: params ?? {},
                        }, signal);
                    } catch (err) {
                        if (err instanceof AbortError)
                            throw new Error("Tool call cancelled.");
                        throw new Error(`Tool ${spec.name} is unavailable: the runner channel failed (${err.message}).`);
                    }
                    const text = resultText(result);
                    if (result.isError === true)
                        throw new Error(text || `Tool ${spec.name} failed.`); /* pi marks it isError */
                    return { content: [{ type: "text", text }], details: {} };
                },
            });
        }

        pi.on("message_end", async (event) => {
            const m = event.message;
            if (!m || m.role !== "assistant" || channel.dead)
                return undefined;
            const u = m.usage || {};
            await channel.notify("usage", {
                input: num(u.input), output: num(u.output),
                cacheRead: num(u.cacheRead), cacheWrite: num(u.cacheWrite),
                total: num(u.totalTokens), cost: num(u.cost?.total),
            });
            if (m.stopReason === "error") {
                const message = String(m.errorMessage || "the model call failed");
                await channel.notify("error", { message, code: errorCode(message) });
            }
            return undefined;
        });

        /* the connection outlives a session replacement: the next load says hello on it */
        if (!(await ready)) {
            if (gating || tools.length)
                log(`${channel.dead}: gated and runner tool calls will be refused`);
            return;
        }
        const hello = await channel.request("hello", {
            client: "pi-extension", version: VERSION, gating,
            tools: tools.map((t) => t.name),
        });
        if (!hello || hello.protocol !== PROTOCOL)
            channel.fail(`the runner speaks protocol ${JSON.stringify(hello?.protocol)}, not ${PROTOCOL}`);
    } catch (err) {
        channel.fail(`setup failed: ${err.message}`);
        log(`${channel.dead}: gated and runner tool calls will be refused`);
    }
}
