/*
 * Install-time build (scripts/install-harnesses runs it with the pinned Node): turns the pinned
 * pi (@mariozechner/pi-coding-agent) and pi-acp into one CommonJS file each, next to a small
 * starter (start.mjs, from this folder) and V8's code cache for the file. A cold local pi
 * sandbox starts these (engine/harness/pi.c): the same code as the packages, without resolving,
 * reading and compiling several hundred modules first, which was most of pi's own start
 * (README, "The cold pi start").
 *
 *   node tools/bundle/bundle.mjs <harness dir>
 *
 * Output, inside each package so that the package's own relative lookups (its package.json,
 * pi's themes and extension loader, require() of its dependencies) still land where they did:
 *   node_modules/@mariozechner/pi-coding-agent/dist/agent-runner/{start.mjs,bundle.cjs,bundle.cjs.cache}
 *   node_modules/pi-acp/dist/agent-runner/{start.mjs,bundle.cjs,bundle.cjs.cache}
 *
 * The cache is written by running each program once on a placeholder configuration (pi: its
 * start and a get_state; pi-acp: initialize), then checked by running it again: the build
 * fails unless V8 accepts the cache, so a cache that does not fit this Node never ships.
 */
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";
import esbuild from "esbuild";

const here = path.dirname(fileURLToPath(import.meta.url));
const harnessDir = path.resolve(process.argv[2] ?? path.join(here, "../../harnesses"));
const nm = path.join(harnessDir, "node_modules");

/*
 * Two spots a CommonJS bundle cannot take as they are, rewritten to the equivalent form. The
 * text is that of the pinned packages: the build stops if it is not found.
 *  - pi-ai loads its Bedrock provider through import(variable), which a bundler cannot
 *    follow; a literal import() makes it part of the bundle (loaded on first use, as before).
 *  - pi-acp's `--terminal-login` (never used here) awaits import("child_process") at top
 *    level; CommonJS has no top-level await, and require() gives the same built-in module.
 */
const rewrites = [
    { file: /pi-ai[\\/]dist[\\/]providers[\\/]register-builtins\.js$/,
        from: 'importNodeOnlyProvider("./amazon-bedrock.js")', to: 'import("./amazon-bedrock.js")' },
    { file: /pi-acp[\\/]dist[\\/]index\.js$/,
        from: 'await import("child_process")', to: 'require("child_process")' },
];
const rewrite = {
    name: "rewrite",
    setup(build) {
        for (const r of rewrites) {
            build.onLoad({ filter: r.file }, async (args) => {
                const text = await fs.promises.readFile(args.path, "utf8");
                if (!text.includes(r.from))
                    throw new Error(`${args.path}: expected ${r.from} (the package changed: review tools/bundle)`);
                return { contents: text.replace(r.from, r.to), loader: "js" };
            });
        }
    },
};

async function bundle(entry, outDir) {
    const out = path.join(outDir, "bundle.cjs");
    const result = await esbuild.build({
        entryPoints: [entry],
        outfile: out,
        bundle: true,
        platform: "node",
        format: "cjs",
        target: "node20",
        minifyWhitespace: true,
        minifySyntax: true,
        // ASCII only (non-ASCII text escaped, licence comments in bundle.cjs.LEGAL.txt): the
        // starter reads the file as Latin-1, a plain copy, where UTF-8 would be decoded
        charset: "ascii",
        legalComments: "external",
        // import() becomes require(): no dynamic import is left for the starter's vm.Script,
        // where Node 20 cannot run one once the code comes from a cache.
        supported: { "dynamic-import": false },
        define: {
            "import.meta.url": "__agent_runner_import_meta.url",
            "import.meta.resolve": "__agent_runner_import_meta.resolve",
        },
        // @mistralai/mistralai's optional OpenTelemetry hooks: imported in a try, and their
        // package (@opentelemetry/api) is not installed. Left out, they fail to load as before.
        external: ["../extra/observability/otel.js", "../extra/observability/telemetry.js"],
        plugins: [rewrite],
        logLevel: "warning",
        write: false,
    });
    const code = result.outputFiles.find((f) => f.path === out);
    let text = code.text;
    if (text.startsWith("#!"))
        text = `//${text.slice(2)}`; // a CommonJS wrapper cannot start with a hashbang
    if (/[^\x00-\x7f]/.test(text))
        throw new Error(`${out}: not ASCII, the starter could not read it as Latin-1`);
    fs.mkdirSync(outDir, { recursive: true });
    for (const f of fs.readdirSync(outDir))
        fs.rmSync(path.join(outDir, f), { force: true });
    fs.writeFileSync(out, text);
    for (const f of result.outputFiles.filter((f) => f !== code))
        fs.writeFileSync(f.path, f.contents);
    fs.copyFileSync(path.join(here, "start.mjs"), path.join(outDir, "start.mjs"));
    return out;
}

/* Runs start.mjs once, sends `requests` one at a time (each waits for the line that answers
 * it), then SIGTERM; returns stderr. */
function drive(outDir, args, env, requests) {
    return new Promise((resolve, reject) => {
        const node = process.execPath;
        const child = spawn(node, [path.join(outDir, "start.mjs"), ...args], {
            env, cwd: env.HOME, stdio: ["pipe", "pipe", "pipe"],
        });
        let stderr = "";
        child.stderr.on("data", (d) => { stderr += d; });
        const timer = setTimeout(() => {
            child.kill("SIGKILL");
            reject(new Error(`${outDir}: no answer within 120 s; stderr:\n${stderr}`));
        }, 120000);
        const pending = [...requests];
        const next = () => {
            const r = pending.shift();
            if (!r) {
                child.kill("SIGTERM");
                return;
            }
            child.stdin.write(`${JSON.stringify(r.send)}\n`);
            r.waiting = true;
            pending.unshift(r);
        };
        readline.createInterface({ input: child.stdout }).on("line", (line) => {
            const r = pending[0];
            if (r?.waiting && r.answers(line)) {
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

async function cache(name, outDir, args, env, requests) {
    const cacheFile = path.join(outDir, "bundle.cjs.cache");
    await drive(outDir, args, { ...env, AGENT_RUNNER_CODE_CACHE: "write" }, requests);
    if (!fs.existsSync(cacheFile))
        throw new Error(`${name}: no code cache written`);
    const said = await drive(outDir, args, { ...env, AGENT_RUNNER_CODE_CACHE: "check" }, requests);
    if (!said.includes("agent-runner code cache: accepted"))
        throw new Error(`${name}: V8 does not take the code cache: ${said.trim()}`);
    console.log(`bundle: ${name}: ${path.relative(harnessDir, outDir)}: bundle.cjs ` +
        `${(fs.statSync(path.join(outDir, "bundle.cjs")).size / 1048576).toFixed(1)} MiB, cache ` +
        `${(fs.statSync(cacheFile).size / 1048576).toFixed(1)} MiB (accepted)`);
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "ar-bundle."));
try {
    const agentDir = path.join(tmp, "agent");
    fs.mkdirSync(agentDir);
    fs.writeFileSync(path.join(agentDir, "models.json"), JSON.stringify({
        providers: { placeholder: { baseUrl: "http://127.0.0.1:9/v1", api: "openai-completions",
            apiKey: "placeholder", models: [{ id: "placeholder" }] } },
    }));
    fs.writeFileSync(path.join(agentDir, "settings.json"), JSON.stringify({
        defaultProvider: "placeholder", defaultModel: "placeholder", quietStartup: true,
        enableInstallTelemetry: false,
    }));
    const env = { PATH: "/usr/bin:/bin", HOME: tmp, LANG: "C.UTF-8", PI_OFFLINE: "1",
        PI_CODING_AGENT_DIR: agentDir };

    const piDir = path.join(nm, "@mariozechner/pi-coding-agent/dist/agent-runner");
    await bundle(path.join(nm, "@mariozechner/pi-coding-agent/dist/cli.js"), piDir);
    await cache("pi", piDir,
        ["--no-extensions", "--extension", path.join(harnessDir, "extension/index.js"),
            "--mode", "rpc", "--no-themes"], env,
        [{ send: { type: "get_state", id: "bundle" }, answers: (l) => l.includes('"id":"bundle"') }]);

    const acpDir = path.join(nm, "pi-acp/dist/agent-runner");
    await bundle(path.join(nm, "pi-acp/dist/index.js"), acpDir);
    await cache("pi-acp", acpDir, [], env,
        [{ send: { jsonrpc: "2.0", id: 1, method: "initialize",
            params: { protocolVersion: 1, clientCapabilities: {} } },
        answers: (l) => l.includes('"id":1') }]);
} finally {
    fs.rmSync(tmp, { recursive: true, force: true });
}
