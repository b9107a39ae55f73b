"""sandbox:"daytona" end to end through the real stack: nginx -> worker -> keeper -> the Daytona
API, against the fake Daytona server (tests/fixtures/fake_daytona.py: each sandbox is a real
bubblewrap sandbox, so the real harnesses run in it over toolbox process sessions).

The fake is started when this module is imported (run.py loads the module before it starts the
stack) and its API URL and key reach the runner through STACK's environment. Every test leaves
no session behind (the stack's leak check) and no sandbox in the fake except where it says so;
the last test stops the fake and checks that nothing of it is left.
"""

import atexit
import http.server
import json
import os
import signal
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fake_daytona_ctl  # noqa: E402
from stack import wait_for  # noqa: E402
from turns import (events_of, harness_request, ids, model_requests,  # noqa: E402
                   model_requests_with, pi_request, result_of, run)

API_KEY = "fake-daytona-key-" + uuid.uuid4().hex
D = fake_daytona_ctl.FakeDaytona(api_key=API_KEY)
atexit.register(lambda: (D.stop(), D.cleanup()))

STACK = {"workers": 2, "threads": 8,
         "env": {"AGENT_RUNNER_DAYTONA_API_URL": D.api_url,
                 "AGENT_RUNNER_DAYTONA_API_KEY": API_KEY}}

CREATE = "POST /api/sandbox"
START = "POST /api/sandbox/{id}/start"
STOP = "POST /api/sandbox/{id}/stop"
DELETE = "DELETE /api/sandbox/{id}"
UPLOAD = "POST /toolbox/{id}/files/bulk-upload"
MODEL_KEYS = []


def model_key():
    k = "sk-model-" + uuid.uuid4().hex
    MODEL_KEYS.append(k)
    return k


def session():
    p, s = ids()
    return p, s, f"{p}:{s}"


def codex_request(ctx, prompt, key, **extra):
    return harness_request(ctx, "codex", prompt, key, sandbox="daytona", **extra)


def follow_up(req, res, prompt):
    req = dict(req)
    req["messages"] = req["messages"] + [{"role": "assistant", "content": res["output"]},
                                         {"role": "user", "content": prompt}]
    return req


def calls_since(since, route=None):
    return [c for c in D.calls(since) if route is None or c.get("route") == route]


def last_seq():
    calls = D.calls()
    return calls[-1]["seq"] if calls else 0


def sandboxes(live_only=True):
    out = []
    for sb in D.state()["sandboxes"]:
        if live_only and sb["state"] in ("destroying", "destroyed"):
            continue
        out.append(sb)
    return out


def metric(ctx, name):
    status, _, text = ctx.stack.request("GET", "/metrics")
    assert status == 200
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def kill(ctx, key):
    ctx.stack.ctl("kill", key)


def wait_gone(ids):
    for i in ids:
        D.wait_state(i, ["gone"], timeout=30)


REPLY = "Hello from the fake model."


# ---- turns -----------------------------------------------------------------------------------


def test_daytona_is_listed_in_health(ctx):
    status, _, doc = ctx.stack.request("GET", "/health", token=False)
    assert status == 200 and doc["sandboxes"] == ["local", "daytona"], doc


def test_a_pi_turn_runs_per_turn_and_deletes_its_sandbox(ctx):
    p, s, key = session()
    since = last_seq()
    res, evs = run(ctx, pi_request(ctx.model, "Say hello", key=model_key(), sandbox="daytona",
                                   projectId=p, sessionId=s))
    assert res["ok"] is True and res["output"] == REPLY, res
    # pi is not a measured harness: per-turn by default, nothing parked
    assert ctx.stack.session(key) is None
    creates = calls_since(since, CREATE)
    assert len(creates) == 1, creates
    body = creates[0]["body"]
    assert body["autoDeleteInterval"] == 0 and body["autoStopInterval"] == 15, body
    assert not body.get("envKeys"), f"the create env must hold nothing: {body}"
    labels = body["labels"]
    assert labels["agent-runner-lease"] == "per_turn", labels
    for v in labels.values():
        assert p not in v and s not in v, labels
    deleted = calls_since(since, DELETE)
    assert len(deleted) == 1 and deleted[0]["status"] == 200, deleted
    wait_gone([deleted[0]["sandbox"]])
    assert metric(ctx, 'agent_runner_sandbox_leases_total{outcome="created",reason="none"}') >= 1


def test_a_codex_turn_is_warm_and_its_follow_up_reuses_the_sandbox(ctx):
    p, s, key = session()
    mkey = model_key()
    since = last_seq()
    req = codex_request(ctx, "Say hello", mkey, projectId=p, sessionId=s,
                        agentsMd="# Rules\nBe brief.\n")
    res, _ = run(ctx, req)
    assert res["ok"] is True and res["output"].endswith(REPLY), res
    # codex is measured: warm by default on a provider with reusable leases
    sess = wait_for(lambda: ctx.stack.session(key), what="a parked session")
    keeper = sess["keeperPid"]
    creates = calls_since(since, CREATE)
    assert len(creates) == 1
    body = creates[0]["body"]
    # the 300 s remote idle window is the sandbox's auto-stop; auto-delete is the backstop
    assert body["autoStopInterval"] == 5 and body["autoDeleteInterval"] == 1440, body
    assert body["labels"]["agent-runner-lease"] == "reusable"
    sbid = creates[0]["sandbox"] if creates[0].get("sandbox") else None
    sbs = [sb for sb in sandboxes() if sb["labels"].get("agent-runner-lease") == "reusable"]
    assert len(sbs) == 1, sbs
    sbid = sbs[0]["id"]
    assert sbs[0]["name"].startswith("ar-") and s not in sbs[0]["name"]
    # workspace once: the agents file went up with the harness files in one bulk upload
    ups = calls_since(since, UPLOAD)
    assert len(ups) == 1, ups
    paths = [f["path"] for f in ups[0]["files"]]
    assert any(x.endswith("/workspace/AGENTS.md") for x in paths), paths
    assert any(x.endswith("/.codex/config.toml") for x in paths), paths
    # the follow-up: the same keeper, the same sandbox, nothing created or uploaded
    since2 = last_seq()
    res2, _ = run(ctx, follow_up(req, res, "Again"))
    assert res2["ok"] is True and res2["output"].endswith(REPLY), res2
    assert ctx.stack.session(key)["keeperPid"] == keeper
    assert not calls_since(since2, CREATE) and not calls_since(since2, UPLOAD)
    assert not calls_since(since2, START)
    # the key of this runner never reaches the sandbox; the model key only in the 0600 env file
    out = D.execute(sbid, "env; ls -l ~/.agent-runner; cat ~/.agent-runner/harness.env")
    text = out["result"]
    assert API_KEY not in text, "the Daytona API key reached the sandbox"
    assert "-rw-------" in text and mkey in text, text
    assert mkey not in D.execute(sbid, "env")["result"], "the model key is in the sandbox env"
    kill(ctx, key)
    wait_gone([sbid])


def test_the_idle_window_stops_the_sandbox_and_the_next_turn_resumes_it(ctx):
    p, s, key = session()
    mkey = model_key()
    req = codex_request(ctx, "Say hello", mkey, projectId=p, sessionId=s,
                        lifecycle={"idleTimeoutMs": 1500})
    since = last_seq()
    res, _ = run(ctx, req)
    assert res["ok"] is True, res
    sbid = [sb for sb in sandboxes() if sb["labels"].get("agent-runner-lease") == "reusable"][0]
    sbid = sbid["id"]
    assert calls_since(since, CREATE)[0]["body"]["autoStopInterval"] == 1
    # past the idle window the keeper goes and the sandbox is stopped, not deleted
    wait_for(lambda: ctx.stack.session(key) is None, timeout=30, what="idle expiry")
    D.wait_state(sbid, ["stopped"], timeout=30)
    assert not calls_since(since, DELETE)
    assert ctx.stack.recent_reason(key) == "idle-expiry"
    # the next turn of the session starts it again: resumed, nothing re-uploaded
    since2 = last_seq()
    resumed_before = metric(ctx, 'agent_runner_sandbox_leases_total{outcome="resumed",'
                                 'reason="none"}')
    again = f"Again {uuid.uuid4().hex[:6]}"
    res2, evs2 = run(ctx, follow_up(req, res, again))
    assert res2["ok"] is True and res2["output"].endswith(REPLY), res2
    assert not calls_since(since2, CREATE)
    assert len(calls_since(since2, START)) == 1
    assert not calls_since(since2, UPLOAD), calls_since(since2, UPLOAD)
    # the sandbox's disk kept codex's own session: it is loaded, not replayed as text
    ready = next(e["data"] for e in evs2 if e.get("data", {}).get("phase") == "environment_ready")
    assert ready["resume"] == "load", ready
    body = json.dumps(model_requests_with(ctx, again)[0]["body"])
    assert "Conversation so far" not in body and "Say hello" in body, body[:2000]
    assert D.get(sbid)["state"] == "started"
    assert metric(ctx, 'agent_runner_sandbox_leases_total{outcome="resumed",reason="none"}') == \
        resumed_before + 1
    assert "sandbox lease: resumed" in ctx.stack.log_text()
    kill(ctx, key)
    wait_gone([sbid])


def test_a_server_side_auto_stop_under_a_warm_keeper_keeps_the_sandbox(ctx):
    """The fake's clock runs past the sandbox's auto-stop while its keeper is still warm: the
    harness is lost with the stopped sandbox, the keeper goes without deleting it, and the
    next turn resumes it."""
    p, s, key = session()
    req = codex_request(ctx, "Say hello", model_key(), projectId=p, sessionId=s,
                        lifecycle={"idleTimeoutMs": 10 * 60 * 1000})
    res, _ = run(ctx, req)
    assert res["ok"] is True, res
    sbid = [sb for sb in sandboxes() if sb["labels"].get("agent-runner-lease") == "reusable"]
    sbid = sbid[0]["id"]
    assert D.get(sbid)["autoStopInterval"] == 10
    since = last_seq()
    D.advance(11 * 60)
    D.wait_state(sbid, ["stopped"], timeout=30)
    wait_for(lambda: ctx.stack.session(key) is None, timeout=30, what="the keeper to go")
    assert not calls_since(since, DELETE), "a sandbox stopped by its backstop was deleted"
    res2, _ = run(ctx, follow_up(req, res, "Again"))
    assert res2["ok"] is True, res2
    assert D.get(sbid)["state"] == "started"
    kill(ctx, key)
    wait_gone([sbid])


def test_an_error_state_gives_a_replacement_with_its_reason(ctx):
    p, s, key = session()
    req = codex_request(ctx, "Say hello", model_key(), projectId=p, sessionId=s,
                        lifecycle={"idleTimeoutMs": 1000})
    res, _ = run(ctx, req)
    assert res["ok"] is True, res
    old = [sb for sb in sandboxes() if sb["labels"].get("agent-runner-lease") == "reusable"]
    old = old[0]["id"]
    wait_for(lambda: ctx.stack.session(key) is None, timeout=30, what="idle expiry")
    D.wait_state(old, ["stopped"], timeout=30)
    # the runtime lost the container behind our back
    D.ctl("POST", f"/sandbox/{old}/state", {"state": "error", "noSuchContainer": True})
    before = metric(ctx, 'agent_runner_sandbox_leases_total{outcome="replacement",'
                         'reason="expired"}')
    since = last_seq()
    res2, _ = run(ctx, follow_up(req, res, "Again"))
    assert res2["ok"] is True and res2["output"].endswith(REPLY), res2
    assert len(calls_since(since, CREATE)) == 1
    D.wait_state(old, ["gone"], timeout=30)  # the errored one was deleted
    assert metric(ctx, 'agent_runner_sandbox_leases_total{outcome="replacement",'
                       'reason="expired"}') == before + 1
    assert "sandbox lease: replacement (expired)" in ctx.stack.log_text()
    new = [sb for sb in sandboxes() if sb["labels"].get("agent-runner-lease") == "reusable"]
    kill(ctx, key)
    wait_gone([sb["id"] for sb in new])


def test_a_429_on_create_is_retried_then_surfaced_as_sandbox_capacity(ctx):
    since = last_seq()
    # two 429s: waited out with the server's Retry-After, then created
    D.inject(kind="rate_limit", scope="sandbox-create", count=2, retryAfter=1)
    res, _ = run(ctx, pi_request(ctx.model, "Say hello", key=model_key(), sandbox="daytona"))
    assert res["ok"] is True, res
    statuses = [c["status"] for c in calls_since(since, CREATE)]
    assert statuses == [429, 429, 200], statuses
    # 429s that do not stop: bounded retries, then the run fails with sandbox_capacity
    D.inject(kind="rate_limit", scope="sandbox-create", count=-1, retryAfter=1)
    try:
        since = last_seq()
        t0 = time.monotonic()
        res, evs = run(ctx, pi_request(ctx.model, "Say hello", key=model_key(),
                                       sandbox="daytona"))
        took = time.monotonic() - t0
    finally:
        D.clear_injections()
    assert res["ok"] is False and "sandbox_capacity" in res["error"], res
    errors = [e for e in evs if e["type"] == "error"]
    assert errors and errors[0]["code"] == "sandbox_capacity", evs
    assert evs[-1]["type"] == "done", evs
    creates = calls_since(since, CREATE)
    assert [c["status"] for c in creates] == [429] * 4, creates  # 1 + 3 retries
    assert took >= 3, took  # it waited the Retry-After between them
    assert not sandboxes(), sandboxes()


def test_network_rules_map_from_sandbox_permission(ctx):
    since = last_seq()
    req = pi_request(ctx.model, "Say hello", key=model_key(), sandbox="daytona",
                     sandboxPermission={"network": {"mode": "allowlist",
                                                    "allowlist": ["10.1.0.0/16", "example.com"]}})
    res, _ = run(ctx, req)
    assert res["ok"] is True, res
    body = calls_since(since, CREATE)[0]["body"]
    # the listed entries plus the run's model endpoint, never wider
    assert sorted(body["networkAllowList"].split(",")) == ["10.1.0.0/16", "127.0.0.1/32"], body
    assert body["domainAllowList"] == "example.com", body
    # what Daytona cannot express is refused before anything starts (streamed: 200 with the
    # refusal in the stream, as Agenta's runner answers; README "Routes")
    status, recs = ctx.stack.stream(pi_request(
        ctx.model, "x", sandbox="daytona",
        sandboxPermission={"network": {"mode": "allowlist", "allowlist": ["2001:db8::/32"]}}))
    evs, res = events_of(recs), result_of(recs)
    assert status == 200 and [e["type"] for e in evs] == ["error", "done"], (status, recs)
    assert res["ok"] is False and "sandboxPermission.network" in res["error"], res
    assert not sandboxes()


def test_the_trace_carries_the_lease_and_sandbox_exec_spans(ctx):
    received = []

    class Collector(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            n = int(self.headers.get("content-length", 0))
            received.append(json.loads(self.rfile.read(n)))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        req = pi_request(ctx.model, "Say hello", key=model_key(), sandbox="daytona",
                         telemetry={"exporters": {"otlp": {
                             "endpoint": f"http://127.0.0.1:{server.server_port}"}}})
        res, _ = run(ctx, req)
        assert res["ok"] is True, res
        wait_for(lambda: received, what="an OTLP export")
    finally:
        server.shutdown()
    spans = [sp for rs in received[0]["resourceSpans"] for ss in rs["scopeSpans"]
             for sp in ss["spans"]]
    by = {}
    for sp in spans:
        by.setdefault(sp["name"], []).append(sp)
    turn = by["turn"][0]
    attrs = {a["key"]: a["value"] for a in turn["attributes"]}
    assert attrs["agent_runner.sandbox.lease.outcome"]["stringValue"] == "created", attrs
    acq = by["sandbox.acquire"][0]
    ex = by["sandbox.exec"][0]
    assert acq["parentSpanId"] == turn["spanId"] and ex["parentSpanId"] == turn["spanId"]
    ea = {a["key"]: a["value"] for a in ex["attributes"]}
    assert ea["agent_runner.sandbox.exec.command"]["stringValue"] == "mkdir", ea
    assert ea["agent_runner.sandbox.outcome"]["stringValue"] == "ok", ea
    hashed = ea["agent_runner.sandbox.sandbox_id"]["stringValue"]
    assert len(hashed) == 12, hashed
    ids = {sb["id"] for sb in D.state()["sandboxes"]}
    text = json.dumps(received)
    for i in ids:
        assert i not in text, "a raw sandbox id is on the trace"
    assert API_KEY not in text
    for sp in by["sandbox.exec"] + by["sandbox.acquire"]:
        for a in sp["attributes"]:
            assert a["key"].startswith("agent_runner.sandbox."), a


def test_a_killed_and_restarted_runner_adopts_its_warm_sandbox_and_deletes_an_orphan(ctx):
    p, s, key = session()
    req = codex_request(ctx, "Say hello", model_key(), projectId=p, sessionId=s)
    res, _ = run(ctx, req)
    assert res["ok"] is True, res
    keeper = wait_for(lambda: ctx.stack.session(key), what="parked")["keeperPid"]
    warm = [sb for sb in sandboxes() if sb["labels"].get("agent-runner-lease") == "reusable"]
    assert len(warm) == 1
    warm = warm[0]
    instance = warm["labels"]["agent-runner-instance"]
    # an orphan of this runner (its keeper died with a crash) and one of another runner
    orphan = D.create(name="orphan-" + uuid.uuid4().hex[:6], labels={
        "agent-runner-instance": instance, "agent-runner-pool": uuid.uuid4().hex,
        "agent-runner-lease": "per_turn"})
    foreign = D.create(name="foreign-" + uuid.uuid4().hex[:6], labels={
        "agent-runner-instance": "someone-else@elsewhere", "agent-runner-lease": "per_turn"})
    D.wait_state(orphan["id"], ["started"])
    old_workers = set(ctx.stack.worker_pids())
    ctx.stack.master.send_signal(signal.SIGKILL)
    ctx.stack.master.wait()
    wait_for(lambda: not any(os.path.exists(f"/proc/{w}") and
                             open(f"/proc/{w}/stat").read().split()[2] != "Z"
                             for w in old_workers), what="old workers gone")
    assert os.path.exists(f"/proc/{keeper}")
    ctx.stack.start_master()
    # the start-up sweep deletes the orphan, keeps (adopts) the live session's sandbox
    D.wait_state(orphan["id"], ["gone"], timeout=60)
    wait_for(lambda: metric(ctx, 'agent_runner_sandbox_sweep_total{action="adopted"}') >= 1,
             timeout=30, what="the sweep's adoption")
    assert D.get(warm["id"])["state"] == "started"
    assert D.get(foreign["id"])["state"] == "started", "another runner's sandbox was touched"
    # and the session is still warm on the same keeper and sandbox
    since = last_seq()
    res2, _ = run(ctx, follow_up(req, res, "Again"))
    assert res2["ok"] is True, res2
    assert ctx.stack.session(key)["keeperPid"] == keeper
    assert not calls_since(since, CREATE)
    kill(ctx, key)
    D.delete(foreign["id"])
    wait_gone([warm["id"]])


GATE_KEYS = {}


def gated_pi_turn(ctx, permissions, p, s, tag, messages=None):
    """A warm pi turn on daytona whose model calls bash to create <workspace>/<tag>."""
    name = f"dpi-{tag}"
    if tag not in GATE_KEYS:
        GATE_KEYS[tag] = model_key()  # one credential per session: a new one is a new epoch
    ctx.model.script(name, [{"tool": {"name": "bash", "arguments": {"command": f"touch {tag}"}}},
                            {"text": f"finished {tag}"}])
    req = pi_request(ctx.model, f"Make the file [[script:{name}]]", key=GATE_KEYS[tag],
                     sandbox="daytona", projectId=p, sessionId=s, permissions=permissions,
                     lifecycle={"mode": "warm"})
    if messages:
        req["messages"] = messages
    res, evs = run(ctx, req)
    return name, req, res, evs


def warm_sandbox_of(since):
    sbids = {c["sandbox"] for c in calls_since(since, UPLOAD) if c.get("sandbox")}
    assert len(sbids) == 1, sbids
    return sbids.pop()


def test_a_denied_pi_tool_call_on_daytona_never_runs(ctx):
    """pi's gate reaches the keeper channel through the relay in the remote sandbox: a bash
    call the plan denies is answered by the runner, never runs, and pi hands the denial to
    the model as the tool's result."""
    p, s, key = session()
    tag = uuid.uuid4().hex[:10]
    since, sbid = last_seq(), None
    try:
        name, _, res, evs = gated_pi_turn(ctx, {"default": "deny"}, p, s, tag)
        assert res["ok"] is True and res["stopReason"] == "end_turn", res
        denied = [e for e in evs if e["type"] == "tool_result" and e.get("denied")]
        assert denied and denied[0]["isError"] is True, evs
        assert not [e for e in evs if e["type"] == "interaction_request"], evs
        seen = model_requests(ctx, name)
        assert len(seen) == 2, len(seen)
        assert "Permission denied" in json.dumps(seen[1]["body"]), seen[1]["body"]
        sbid = warm_sandbox_of(since)
        out = D.execute(sbid, f"ls -la ~/workspace ~/.agent-runner/channel; test -e ~/workspace/{tag}"
                              "; echo exists=$?")["result"]
        assert "exists=1" in out, out
        assert "channel.sock" in out and "drwx------" in out, out
    finally:
        kill(ctx, key)
    if sbid:
        wait_gone([sbid])


def test_an_asked_pi_tool_call_on_daytona_parks_and_approve_resumes_it(ctx):
    """ask: the turn parks with the gated call held open across the relay; the approval
    resumes the same keeper and pi, and the command's effect exists in the sandbox."""
    p, s, key = session()
    tag = uuid.uuid4().hex[:10]
    since, sbid = last_seq(), None
    try:
        name, req, res, evs = gated_pi_turn(ctx, {"default": "ask"}, p, s, tag)
        assert res["ok"] is True and res["stopReason"] == "paused", res
        gates = [e for e in evs if e["type"] == "interaction_request"]
        assert len(gates) == 1, evs
        gate = gates[0]
        before = ctx.stack.session(key)
        assert before["state"] == "awaiting_approval", before
        sbid = warm_sandbox_of(since)
        check = f"test -e ~/workspace/{tag}; echo exists=$?"
        assert "exists=1" in D.execute(sbid, check)["result"], "ran before the approval"
        answer = {"role": "user", "content": [{
            "type": "tool_result", "toolCallId": gate["payload"]["toolCallId"],
            "output": {"approved": True, "interactionToken": gate["id"]}}]}
        _, _, res2, evs2 = gated_pi_turn(ctx, {"default": "ask"}, p, s, tag,
                                         messages=req["messages"] + [answer])
        assert res2["ok"] is True and res2["output"] == f"finished {tag}", res2
        assert [e for e in evs2 if e["type"] == "interaction_response"][0]["id"] == gate["id"]
        assert ctx.stack.session(key)["keeperPid"] == before["keeperPid"]
        assert "exists=0" in D.execute(sbid, check)["result"], "the approved command did not run"
        assert not calls_since(since, CREATE)[1:], "a second sandbox was created"
    finally:
        kill(ctx, key)
    if sbid:
        wait_gone([sbid])


KILL_RELAY = ("for p in /proc/[0-9]*; do case \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" in "
              "*channel-relay.js*) kill ${p#/proc/} && echo killed;; esac; done")


def test_a_relay_that_dies_leaves_pi_gated_calls_blocked(ctx):
    """The relay in the sandbox is killed under a warm pi: pi's channel closes, its next gated
    call is blocked (never ungated), and nothing of the command happens."""
    p, s, key = session()
    tag = uuid.uuid4().hex[:10]
    since, sbid = last_seq(), None
    try:
        ctx.model.script(f"dpi-first-{tag}", [{"text": "ready"}])
        GATE_KEYS[tag] = model_key()
        req = pi_request(ctx.model, f"Hi [[script:dpi-first-{tag}]]", key=GATE_KEYS[tag],
                         sandbox="daytona", projectId=p, sessionId=s,
                         permissions={"default": "ask"}, lifecycle={"mode": "warm"})
        res, _ = run(ctx, req)
        assert res["ok"] is True, res
        sbid = warm_sandbox_of(since)
        assert "killed" in D.execute(sbid, KILL_RELAY)["result"]
        wait_for(lambda: "channel-relay" not in D.execute(sbid, "ps -eo args")["result"],
                 what="the relay gone")
        name, _, res2, evs = gated_pi_turn(ctx, {"default": "ask"}, p, s, tag,
                                           messages=follow_up(
                                               req, res, f"Make the file [[script:dpi-{tag}]]")
                                           ["messages"])
        assert not [e for e in evs if e["type"] == "interaction_request"], evs
        # pi goes on with the call blocked (fail closed), and tells the model so
        assert res2["ok"] is True, res2
        blocked = [e for e in evs if e["type"] == "tool_result"]
        assert len(blocked) == 1 and blocked[0]["isError"] is True, evs
        assert "permission channel is unavailable" in blocked[0]["output"], blocked
        told = json.dumps(model_requests(ctx, name)[-1]["body"])
        assert "permission channel is unavailable" in told, told
        check = f"test -e ~/workspace/{tag}; echo exists=$?"
        assert "exists=1" in D.execute(sbid, check)["result"], "a gated command ran ungated"
    finally:
        kill(ctx, key)
    if sbid:
        wait_gone([sbid])


# What a program of the remote sandbox reaches: the relay's socket, whose every connection
# after pi's is a stranger to the keeper (keeper/keeper_channel.h). A flood of them, each
# forging what only pi may say, then fifteen that never say hello and hold an unfinished line
# just under 8 MiB, kept by a setsid process. Written to a file and run with sh: the execute
# call's command is not a shell.
STRANGERS = r"""
import json, os, socket, sys, time
path = os.path.expanduser("~/.agent-runner/channel/channel.sock")
if sys.argv[1] == "flood":
    heard = {}
    for i in range(200):
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path); s.settimeout(5)
            s.sendall((json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tool/permission",
                                   "params": {"toolCallId": "forged", "toolName": "bash",
                                              "input": {"command": "rm -rf /"}}}) + "\n").encode())
            a = s.recv(4096).decode(errors="replace")
            k = "stranger" if "not the harness" in a else a[:80] or "closed"
        except OSError as e:
            k = e.strerror or type(e).__name__
        heard[k] = heard.get(k, 0) + 1
        s.close()
    print("flood=" + json.dumps(heard))
    sys.exit(0)
if os.fork():
    time.sleep(3); print("held=" + open("/tmp/held").read()); sys.exit(0)
os.setsid()
null = os.open("/dev/null", os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
held, chunk = [], b"x" * (1 << 20)
for _ in range(15):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path); s.setblocking(False)
        for _ in range(8):
            try:
                s.send(chunk)
            except BlockingIOError:
                break
        held.append(s)
    except OSError:
        s.close()
open("/tmp/held", "w").write(str(len(held)))
time.sleep(3000)
"""


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    return 0


def sandbox_python(sbid, code, *args):
    b64 = __import__("base64").b64encode(code.encode()).decode()
    D.execute(sbid, f"sh -c 'echo {b64} | base64 -d > /tmp/strangers.py'")
    return D.execute(sbid, "python3 /tmp/strangers.py " + " ".join(args))["result"]


def test_strangers_through_the_relay_are_refused_bounded_and_logged_within_the_budget(ctx):
    """Only pi's connection (the relay's first) is the harness's: a flood of other connections
    forging a permission request is refused one by one, never reaches the turn, and logs at
    most the limiter's allowance; fifteen held never-hello connections with 8 MiB unfinished
    lines leave the keeper's memory flat; pi's gated calls still go through the runner."""
    p, s, key = session()
    tag = uuid.uuid4().hex[:10]
    since, sbid = last_seq(), None
    words = "tool channel: refused"
    try:
        ctx.model.script(f"dpi-first-{tag}", [{"text": "ready"}])
        GATE_KEYS[tag] = model_key()
        req = pi_request(ctx.model, f"Hi [[script:dpi-first-{tag}]]", key=GATE_KEYS[tag],
                         sandbox="daytona", projectId=p, sessionId=s,
                         permissions={"default": "ask"}, lifecycle={"mode": "warm"})
        res, _ = run(ctx, req)
        assert res["ok"] is True, res
        sbid = warm_sandbox_of(since)
        keeper = ctx.stack.session(key)["keeperPid"]
        before, logged = rss_kib(keeper), ctx.stack.log_text().count(words)
        t0 = time.monotonic()
        out = sandbox_python(sbid, STRANGERS, "flood")
        secs = int(time.monotonic() - t0) + 1
        print("    " + out.strip())
        flood = json.loads(out.split("flood=", 1)[1].splitlines()[0])
        assert flood.get("stranger", 0) >= 150, flood
        n = ctx.stack.log_text().count(words) - logged
        print(f"    {n} refusal lines logged for {sum(flood.values())} connections in ~{secs}s")
        assert 1 <= n <= secs * 6, n
        out = sandbox_python(sbid, STRANGERS, "hold")
        print("    " + out.strip())
        # pi's own connection is untouched: its gated call still parks on the runner's gate
        name, _, res2, evs = gated_pi_turn(ctx, {"default": "ask"}, p, s, tag,
                                           messages=follow_up(
                                               req, res, f"Make the file [[script:dpi-{tag}]]")
                                           ["messages"])
        assert res2["ok"] is True and res2["stopReason"] == "paused", res2
        asks = [e for e in evs if e["type"] == "interaction_request"]
        assert len(asks) == 1 and "forged" not in json.dumps(asks), asks
        after = rss_kib(keeper)
        print(f"    keeper RSS {before} -> {after} KiB")
        assert after - before < 16 * 1024, (before, after)
    finally:
        kill(ctx, key)
    if sbid:
        wait_gone([sbid])


def test_no_credential_in_logs_labels_or_the_fake_call_log_and_nothing_left(ctx):
    texts = {"runner log": ctx.stack.log_text()}
    with open(D.calls_log) as f:
        texts["fake call log"] = f.read()
    texts["labels"] = json.dumps([sb["labels"] for sb in D.state()["sandboxes"]])
    for what, text in texts.items():
        assert API_KEY not in text, f"the Daytona API key is in the {what}"
        for k in MODEL_KEYS:
            assert k not in text, f"a model key is in the {what}"
    # every sandbox the tests made is gone (deleted, or stopped ones the tests deleted)
    left = [(sb["name"], sb["state"]) for sb in sandboxes()]
    assert not left, left
    assert D.stop() == 0
