"""Pre-started opencode spares (opt-in: AGENT_RUNNER_SPARES=opencode=N; README "Spares"). A spare
is `opencode acp` with no configuration at all, ready once it answered initialize; a new
opencode session served from one answers with the session's own endpoint, key and AGENTS.md
(fake model log) and nothing of a placeholder; the key is only in a 0600 file of the private
home, never in opencode's environment. A run the rule keeps cold still runs cold, with its own
key; an eligible run whose spare cannot serve starts cold in the same turn from the same files.
test_harnesses.py runs opencode cold with spares off.
"""

import json
import os
import signal
import uuid

from spares import follow_up, ready_event, retire_spares
from stack import descendants, proc_table, wait_for
from turns import events_of, harness_request, model_requests_with, result_of

STACK = {"env": {"AGENT_RUNNER_SPARES": "pi=0,opencode=1", "AGENT_RUNNER_SLOTS": "32"}}
PROJECT = "proj-oc-spares"
KEY_FILE = "home/agent/.config/opencode/runner-key"


def ready_spares(ctx):
    return [s for s in ctx.stack.sessions()["sessions"]
            if s["spare"] and s["state"] == "spare" and s["harness"] == "opencode"]


def wait_spare(ctx, timeout=240):
    # opencode's own start is ~5 CPU-s: a spare is "spare" once it answered initialize
    wait_for(lambda: len(ready_spares(ctx)) >= 1, timeout=timeout, step=0.5,
             what="a ready opencode spare")
    return ready_spares(ctx)


def opencode_of(keeper_pid):
    """The pid of `opencode acp` inside the sandbox below keeper_pid, or None."""
    t = proc_table()
    for p in descendants(keeper_pid, t):
        cmd = t.get(p, (0, ""))[1]
        # opencode itself, not bubblewrap (whose command line holds opencode's)
        if cmd.split(" ")[0].endswith("opencode-linux-x64/bin/opencode") and " acp" in cmd:
            return p
    return None


def environ_of(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return f.read().decode(errors="replace")


def session_request(ctx, tag, **extra):
    return harness_request(ctx, "opencode", f"hello oc spare {tag}", f"sk-oc-{tag}",
                           projectId=PROJECT, sessionId=f"s-{tag}",
                           agentsMd=f"AGENTS-MARKER-{tag}", **extra)


def first_turn(ctx, expect_spare, **extra):
    """A new opencode session's first turn; checks what the model saw. Returns the tag."""
    tag = uuid.uuid4().hex[:10]
    status, recs = ctx.stack.stream(session_request(ctx, tag, **extra))
    assert status == 200, recs
    res = result_of(recs)
    assert res["ok"] is True and res["output"] == "Hello from the fake model.", res
    assert ready_event(events_of(recs))["spare"] is expect_spare, events_of(recs)
    seen = model_requests_with(ctx, f"hello oc spare {tag}")
    assert seen, "the fake model got no request of the session"
    for req in seen:
        text = json.dumps(req)
        # the session's own key and endpoint (the fake model got it), model and AGENTS.md
        assert req["headers"].get("authorization") == f"Bearer sk-oc-{tag}", req["headers"]
        assert req["body"]["model"] == "fake-model", req["body"]["model"]
        system = json.dumps([m for m in req["body"]["messages"] if m["role"] == "system"])
        assert f"AGENTS-MARKER-{tag}" in system, system
        for placeholder in ("spare-placeholder", "127.0.0.1:9/"):
            assert placeholder not in text, f"{placeholder!r} reached the model"
    return tag


def kill(ctx, tag):
    ctx.stack.request("POST", "/kill", {"sessionId": f"s-{tag}", "projectId": PROJECT})


def test_opencode_spare_serves_a_new_session(ctx):
    before = {s["slot"]: s for s in wait_spare(ctx)}
    spare_pid = opencode_of(next(iter(before.values()))["keeperPid"])
    assert spare_pid, "no opencode in the spare"
    # a spare holds no session data: no config in its environment, no key file
    env = environ_of(spare_pid)
    assert "OPENCODE_CONFIG_CONTENT=" not in env and "OPENAI_API_KEY" not in env, env
    assert not os.path.exists(f"/proc/{spare_pid}/root/{KEY_FILE}")
    tag = first_turn(ctx, True)
    s = ctx.stack.session(f"{PROJECT}:s-{tag}")
    assert s is not None and s["fromSpare"] is True and not s["spare"], s
    assert s["slot"] in before, (s, before)
    assert s["keeperPid"] == before[s["slot"]]["keeperPid"], "the spare's keeper serves it"
    # the spare's own opencode served the session (not a second start)
    oc = opencode_of(s["keeperPid"])
    assert oc == spare_pid, (oc, spare_pid)
    # the key is a 0600 file of the private home, never opencode's environment
    st = os.stat(f"/proc/{oc}/root/{KEY_FILE}")
    assert st.st_mode & 0o777 == 0o600, oct(st.st_mode)
    assert f"sk-oc-{tag}" not in environ_of(oc)
    # a follow-up is a warm turn of the same session on the same process
    follow_up(ctx, session_request(ctx, tag), f"hello oc spare {tag}", f"again {tag}")
    assert ctx.stack.session(f"{PROJECT}:s-{tag}")["turns"] >= 2
    last = [r for r in ctx.model.requests() if f"again {tag}" in json.dumps(r["body"])]
    assert last and last[-1]["headers"].get("authorization") == f"Bearer sk-oc-{tag}", last
    kill(ctx, tag)
    # the claimed spare is replaced in the background
    wait_spare(ctx)
    assert all(x["slot"] != s["slot"] for x in ready_spares(ctx))


def test_opencode_with_connection_environment_starts_cold(ctx):
    spares = {s["keeperPid"] for s in wait_spare(ctx)}
    tag = uuid.uuid4().hex[:10]
    req = session_request(ctx, tag)
    req["modelConnection"]["environment"] = {"AR_OC_TEST": "1"}
    status, recs = ctx.stack.stream(req)
    assert status == 200, recs
    res = result_of(recs)
    assert res["ok"] is True and res["output"] == "Hello from the fake model.", res
    assert ready_event(events_of(recs))["spare"] is False, events_of(recs)
    seen = model_requests_with(ctx, f"hello oc spare {tag}")
    assert seen and seen[0]["headers"].get("authorization") == f"Bearer sk-oc-{tag}", seen
    s = ctx.stack.session(f"{PROJECT}:s-{tag}")
    assert s is not None and not s["fromSpare"] and s["keeperPid"] not in spares, s
    # the spare is still there, unclaimed
    assert {x["keeperPid"] for x in ready_spares(ctx)} & spares
    kill(ctx, tag)


def test_opencode_spare_that_cannot_serve_falls_back_to_a_cold_start(ctx):
    """An eligible run whose spare is broken starts cold in the same turn, from the same
    session plan: the configuration and key as files of the private home, the key in no
    environment."""
    spares = wait_spare(ctx)
    for s in spares:
        pid = opencode_of(s["keeperPid"])
        assert pid, "no opencode in the spare"
        os.kill(pid, signal.SIGKILL)
    broken = {s["keeperPid"] for s in spares}
    tag = first_turn(ctx, False)
    s = ctx.stack.session(f"{PROJECT}:s-{tag}")
    assert s is not None and not s["fromSpare"] and s["keeperPid"] not in broken, s
    oc = opencode_of(s["keeperPid"])
    assert oc, "no opencode in the cold session"
    env = environ_of(oc)
    assert f"sk-oc-{tag}" not in env and "OPENCODE_CONFIG_CONTENT=" not in env
    st = os.stat(f"/proc/{oc}/root/{KEY_FILE}")
    assert st.st_mode & 0o777 == 0o600, oct(st.st_mode)
    kill(ctx, tag)
    # the broken spare goes; the master makes a new one
    retire_spares(ctx, broken)
    wait_spare(ctx)
