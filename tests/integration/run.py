#!/usr/bin/env python3
"""Integration test runner: real nginx (TLS) + spawn-fcgi + agent-runnerd + keepers + bwrap +
real harnesses against the scripted fake model, on loopback in a temp dir.

Each tests/integration/test_*.py module gets its own stack (started once, stopped at the end);
every `test_*(ctx)` function runs in file order, and after each one the runner checks that no
keeper, sandbox, harness process or environment folder was left behind.

usage: run.py [-k substring] [module ...]
"""

import importlib.util
import os
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import stack  # noqa: E402


class Ctx:
    pass


def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    args = sys.argv[1:]
    pattern = None
    if len(args) >= 2 and args[0] == "-k":
        pattern = args[1]
        args = args[2:]
    modules = args or sorted(os.path.join(HERE, f) for f in os.listdir(HERE)
                             if f.startswith("test_") and f.endswith(".py"))
    passed, failed, skipped = 0, [], 0
    t_all = time.monotonic()
    for path in modules:
        mod = load(path)
        tests = [(n, getattr(mod, n)) for n in dir(mod) if n.startswith("test_")]
        tests.sort(key=lambda t: t[1].__code__.co_firstlineno)
        if pattern:
            tests = [t for t in tests if pattern in t[0]]
        if not tests:
            continue
        print(f"== {os.path.basename(path)} ({len(tests)} tests)", flush=True)
        ctx = Ctx()
        ctx.model = stack.FakeModel(tempfile.mkdtemp(prefix="ar-model."))
        opts = getattr(mod, "STACK", {})
        ctx.stack = stack.Stack(model=ctx.model, **opts)
        try:
            ctx.stack.start()
        except Exception:
            traceback.print_exc()
            failed.append((os.path.basename(path), "stack start"))
            ctx.model.stop()
            continue
        try:
            for name, fn in tests:
                t0 = time.monotonic()
                try:
                    fn(ctx)
                    leaks = ctx.stack.leaks()
                    if leaks:
                        raise AssertionError("left behind: " + "; ".join(leaks))
                    passed += 1
                    print(f"  ok    {name} ({time.monotonic() - t0:.2f}s)", flush=True)
                except SkipTest as e:
                    skipped += 1
                    print(f"  skip  {name}: {e}", flush=True)
                except Exception:
                    failed.append((os.path.basename(path), name))
                    print(f"  FAIL  {name} ({time.monotonic() - t0:.2f}s)", flush=True)
                    traceback.print_exc()
                    print("  --- runner log (tail) ---")
                    print("\n".join(ctx.stack.log_text().splitlines()[-40:]))
        finally:
            ctx.stack.stop()
            rc = ctx.stack.master.returncode if ctx.stack.master else None
            if rc not in (0, None, -9) and not getattr(mod, "MASTER_MAY_FAIL", False):
                failed.append((os.path.basename(path), f"master exit status {rc}"))
            ctx.model.stop()
            if not failed:
                ctx.stack.cleanup()
    print(f"integration: {passed} passed, {len(failed)} failed, {skipped} skipped "
          f"in {time.monotonic() - t_all:.1f}s")
    for mod, name in failed:
        print(f"  failed: {mod}::{name}")
    return 1 if failed else 0


class SkipTest(Exception):
    pass


stack.SkipTest = SkipTest

if __name__ == "__main__":
    sys.exit(main())
