#!/usr/bin/env python3
"""Integration test runner: real nginx (TLS) + spawn-fcgi + agent-runnerd + keepers + bwrap +
real harnesses against the scripted fake model, on loopback in a temp dir.

Each tests/integration/test_*.py module gets its own stack (started once, stopped at the end);
every `test_*(ctx)` function runs in file order, and after each one the runner checks that no
keeper, sandbox, harness process or environment folder was left behind.

usage: run.py [-k substring] [module ...]
       run.py --smoke      the SMOKE tests below only (`make check`)
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


# The smoke subset `make check` runs: each layer at least once through the real stack, in
# about a minute. A name here that no longer exists fails the run (rename it here too).
SMOKE = [
    # the front door (fcgi/): auth, the request parser's 400s, the event stream, a cold
    # scripted turn, a harness crash, a failing environment set-up, a real pi turn and a pi
    # tool call through the keeper channel
    "test_skeleton.py::test_run_requires_the_token",
    "test_skeleton.py::test_bad_json_and_bad_fields_are_400",
    "test_skeleton.py::test_scripted_turn_streams_deltas_done_and_result",
    "test_skeleton.py::test_failed_turn_is_500_one_shot_and_error_event_streamed",
    "test_skeleton.py::test_a_failing_setup_leaves_nothing_behind",
    "test_skeleton.py::test_pi_turn_against_the_fake_model",
    "test_skeleton.py::test_pi_tool_call_writes_only_inside_the_sandbox",
    # session and environment: a warm follow-up on the same agent process, the kill route
    "test_warm.py::test_scripted_follow_up_reuses_the_same_agent_process",
    "test_warm.py::test_kill_route_destroys_a_session",
    # kept harness state: pi's own session loaded by a cold turn after its environment ended
    "test_session_load.py::test_pi_cold_turn_two_loads_its_own_session",
    # keepers and the master: a killed worker, a killed keeper
    "test_lifecycle.py::test_a_dead_worker_is_respawned",
    "test_lifecycle.py::test_a_killed_keeper_ends_the_turn_and_frees_everything",
    # the turn: a permission gate parked and resumed; a run limit trips
    "test_approvals.py::test_park_and_resume_with_allow_on_the_same_process",
    "test_limits.py::test_idle_limit",
    # tools: a callback tool and an MCP server
    "test_tools.py::test_callback_tool_gets_agentas_body_and_its_answer_reaches_the_agent",
    "test_tools.py::test_mcp_tool_is_listed_and_called_with_its_header_credential",
    # egress and the sandbox, from inside
    "test_network.py::test_on_reaches_the_model_and_nothing_local_scripted",
    # the model gateway: a real harness through it, the key nowhere in its sandbox
    "test_gateway.py::test_pi_runs_through_the_gateway_and_its_key_stays_out",
    "test_sandbox_escape.py::test_scripted_sandbox_is_not_root_and_sees_a_minimal_host",
    # telemetry, and platform mode against the fake Agenta API
    "test_ops.py::test_metrics_count_known_turns_exactly",
    "test_platform.py::test_the_record_log_of_a_turn_is_coalesced_with_agentas_ids",
    # several hosts: a Redis, two members and a round-robin front; warm through forwarding
    "test_cluster.py::test_forty_follow_ups_through_round_robin_stay_warm_on_their_owner",
    # the Daytona provider against the fake Daytona (its last test stops the fake)
    "test_daytona.py::test_a_pi_turn_runs_per_turn_and_deletes_its_sandbox",
    "test_daytona.py::test_no_credential_in_logs_labels_or_the_fake_call_log_and_nothing_left",
]


class Ctx:
    pass


def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def smoke_selection():
    """SMOKE as {module path: set of test names}, in the order listed."""
    out = {}
    for entry in SMOKE:
        module, name = entry.split("::")
        out.setdefault(os.path.join(HERE, module), set()).add(name)
    return out


def main():
    args = sys.argv[1:]
    pattern, only = None, {}
    if args[:1] == ["--smoke"]:
        only = smoke_selection()
        args = list(only)
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
        if path in only:
            missing = only[path] - {n for n, _ in tests}
            for name in sorted(missing):
                failed.append((os.path.basename(path), f"{name}: in SMOKE, not in the module"))
            tests = [t for t in tests if t[0] in only[path]]
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
