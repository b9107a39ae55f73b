/*
 * agent-runner: starts the one-file build of a pinned harness that sits next to this file
 * (bundle.cjs, written by tools/bundle/bundle.mjs at install time) with V8's code cache for
 * it (bundle.cjs.cache), so a cold start neither resolves and reads hundreds of modules nor
 * compiles them. The harness's arguments are this program's arguments.
 *
 * The bundle is CommonJS (Node 20 has no code cache for ES modules) and ASCII (the build
 * checks), read as Latin-1: a copy, no UTF-8 decoding. Its modules' import.meta.url is each
 * module's own file again (the build rewrites it); import.meta.resolve is this module's
 * resolver (__agent_runner_import_meta), from the bundle's folder.
 *
 * V8 checks the cache against its own version, its flags and the source length, and compiles
 * instead when any differ (another Node, other flags: slower, not wrong). The cache is only
 * valid for the bundle.cjs written with it; the build writes both, into the harness folder,
 * which is read-only in every sandbox.
 * Install time only (the harness folder is read-only in a sandbox):
 *   AGENT_RUNNER_CODE_CACHE=write  no cache is read; the cache is written when the process
 *                                  ends (SIGTERM or exit), after the harness ran its start
 *   AGENT_RUNNER_CODE_CACHE=check  says on stderr whether V8 took the cache
 */
import fs from "node:fs";
import Module from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import vm from "node:vm";

const url = new URL("./bundle.cjs", import.meta.url);
const file = fileURLToPath(url);
const cacheFile = `${file}.cache`;
const mode = process.env.AGENT_RUNNER_CODE_CACHE;

globalThis.__agent_runner_import_meta = { resolve: (specifier) => import.meta.resolve(specifier) };

let cachedData;
if (mode !== "write") {
    try {
        cachedData = fs.readFileSync(cacheFile);
    } catch {
        cachedData = undefined;
    }
}
const script = new vm.Script(Module.wrap(fs.readFileSync(file, "latin1")), {
    filename: file,
    cachedData,
});
if (mode === "check")
    process.stderr.write(`agent-runner code cache: ${!cachedData ? "missing" : script.cachedDataRejected ? "rejected" : "accepted"}\n`);
if (mode === "write") {
    let written = false;
    const save = () => {
        const tmp = `${cacheFile}.${process.pid}`;
        if (!written) {
            try {
                fs.writeFileSync(tmp, script.createCachedData());
                fs.renameSync(tmp, cacheFile);
            } finally {
                fs.rmSync(tmp, { force: true });
            }
        }
        written = true;
    };
    process.on("exit", save);
    // install time only: the harness's own SIGTERM handling does not run
    process.on("SIGTERM", () => {
        save();
        process.exit(0);
    });
}

const module = new Module(file, null);
module.filename = file;
module.paths = Module._nodeModulePaths(path.dirname(file));
script.runInThisContext()(module.exports, Module.createRequire(file), module, file, path.dirname(file));
module.loaded = true;
