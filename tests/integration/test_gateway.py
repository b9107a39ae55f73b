"""The model gateway (README "The model gateway"): every harness reaches the fake model through
its sandbox's gateway, the fake model receives the run's real key, and the key is nowhere in the
sandbox (no process's environment or command line, no file under its home, workspace, /tmp or
/run: not the key, not any 8 characters of it), also when code in the sandbox looks for it (a
scripted exec step, pi's bash tool). The result's usage is what the model sent, whatever the
harness reports over the keeper channel; streams pass unbuffered; calls outside the run's
endpoint, model allowlist or size cap are refused with an error event; provider errors reach
the harness and name the turn's error code; /health says the key stays out."""

import base64
import json
import os
import re
import tempfile
import uuid

import stack
from spares import pi_of, ready_event
from turns import (MODELS, events_of, exec_request, harness_request, ids, model_connection, of,
                   pi_request, result_of, run, script, scripted_request)

CAP = 1024 * 1024
# the operator's price table: one priced model (fake-model itself stays unpriced: cost unknown)
PRICES = os.path.join(tempfile.mkdtemp(prefix="ar-prices."), "prices.json")
with open(PRICES, "w") as f:
    json.dump({"priced-model": {"input": 2.0, "output": 10.0, "cacheRead": 0.5}}, f)
os.chmod(os.path.dirname(PRICES), 0o755)
STACK = {"env": {"AGENT_RUNNER_MODEL_GATEWAY_MAX_REQUEST_BYTES": str(CAP),
                 "AGENT_RUNNER_MODEL_PRICES": PRICES,
                 "AGENT_RUNNER_SPARES": "pi=1", "AGENT_RUNNER_SLOTS": "32"}}
PLACEHOLDER = "agent-runner-model-gateway"
GATEWAY = "http://127.0.0.1:1001"


def new_key():
    return "sk-gw-" + uuid.uuid4().hex + uuid.uuid4().hex[:8]


def pieces(key):
    """Every 8-character substring of the key."""
    return {key[i:i + 8] for i in range(len(key) - 7)}


def leaked(text, key):
    return sorted(p for p in pieces(key) if p in text)


def metric(ctx, name):
    status, _, body = ctx.stack.request("GET", "/metrics")
    assert status == 200, status
    m = re.search(rf"^{name} (\d+)$", body, re.M)
    return int(m.group(1)) if m else 0


def calls_with_key(ctx, key):
    return [r for r in ctx.model.requests() if r.get("credential") == key]


def expected_usage(ctx, key):
    """The usage the fake model reported to the calls made with key (no cache in these tests)."""
    sent = [r["usage"] for r in calls_with_key(ctx, key) if "usage" in r]
    inp = sum(u["input"] + u["cacheRead"] + u["cacheWrite"] for u in sent)
    out = sum(u["output"] for u in sent)
    return {"input": inp, "output": out, "total": inp + out}, len(sent)


def sandbox_root(pids):
    """The /proc/<pid>/root of a process inside the sandbox's own mount namespace."""
    for pid in pids:
        root = f"/proc/{pid}/root"
        if os.path.isdir(root + "/home/agent") and os.path.isdir(root + "/workspace"):
            return root
    raise AssertionError("no sandbox process with the sandbox's view")


def scan_sandbox(ctx, session_key, key):
    """Every sandbox process's environment and command line, every file under its home,
    workspace, /tmp and /run: (where a piece of key was found, files read, processes)."""
    s = ctx.stack.session(session_key)
    assert s and s["keeperPid"] > 0, s
    pids = stack.descendants(s["keeperPid"])
    assert pids, "the sandbox has no processes"
    found, files = [], 0
    for pid in pids:
        for what in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as f:
                    data = f.read().decode("utf-8", "replace")
            except OSError:
                continue
            if leaked(data, key):
                found.append(f"/proc/{pid}/{what}")
    root = sandbox_root(pids)
    for top in ("home/agent", "workspace", "tmp", "run"):
        for dp, _, fns in os.walk(os.path.join(root, top)):
            for fn in fns:
                path = os.path.join(dp, fn)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                try:
                    with open(path, "rb") as f:
                        data = f.read(8 << 20).decode("utf-8", "replace")
                except OSError:
                    continue
                files += 1
                if leaked(data, key):
                    found.append(path[len(root):])
    return found, files, len(pids)


def kill(ctx, p, s):
    status, _, _ = ctx.stack.request("POST", "/kill", {"projectId": p, "sessionId": s})
    assert status == 200, status


def gateway_turn(ctx, harness, spare=None):
    """A warm turn of a real harness with one tool call through the gateway; the sandbox is
    scanned for the key while it lives. spare: whether a pre-started spare must serve it."""
    key = new_key()
    p, s = ids()
    _, _, _, tool, args = MODELS[harness]
    name = f"gw-{harness}-{uuid.uuid4().hex[:8]}"
    ctx.model.script(name, [
        {"tool": {"name": tool, "arguments": args("echo tool-ran")}, "usage": {"input": 21,
                                                                              "output": 7}},
        {"text": "done " + name, "usage": {"input": 34, "output": 5}}])
    mismatches = metric(ctx, "agent_runner_usage_mismatch_total")
    req = harness_request(ctx, harness, f"go [[script:{name}]]", key, projectId=p, sessionId=s,
                          permissions={"default": "allow"}, lifecycle={"mode": "warm"})
    res, evs = run(ctx, req)
    assert res["ok"] is True, res
    assert res["output"].endswith("done " + name), res["output"]
    if spare is not None:
        assert ready_event(evs)["spare"] is spare, ready_event(evs)
    calls = calls_with_key(ctx, key)
    assert len([c for c in calls if name in json.dumps(c["body"])]) >= 2, len(calls)
    assert not [r for r in ctx.model.requests()
                if name in json.dumps(r["body"]) and r.get("credential") != key], \
        "a model call with the marker reached the model without the run's key"
    # the usage the runner reports is the usage the model sent
    want, n = expected_usage(ctx, key)
    assert n >= 2, n
    got = {k: res["usage"][k] for k in ("input", "output", "total")}
    assert got == want, (got, want)
    per_call = of(evs, "usage")
    assert len(per_call) == n, per_call
    assert sum(u["total"] for u in per_call) == want["total"], per_call
    assert "cost" not in res["usage"], res["usage"]  # no price table: unknown, not 0
    assert metric(ctx, "agent_runner_usage_mismatch_total") == mismatches
    found, files, procs = scan_sandbox(ctx, f"{p}:{s}", key)
    assert not found, f"pieces of the key in the {harness} sandbox: {found}"
    assert files > 0 and procs > 1, (files, procs)
    # the keeper loaded libcurl for the gateway's upstream calls (keeper/curl_lazy.c)
    assert keeper_maps(ctx, f"{p}:{s}", "libcurl.so"), "the keeper forwarded without libcurl?"
    kill(ctx, p, s)
    return res


def keeper_maps(ctx, key, lib):
    sess = ctx.stack.session(key)
    assert sess and sess["keeperPid"] > 0, sess
    with open(f"/proc/{sess['keeperPid']}/maps") as f:
        return lib in f.read()


def test_a_keeper_loads_libcurl_at_its_first_model_call_only(ctx):
    # a scripted session calls no model: its keeper never maps libcurl and the thirty
    # libraries behind it (the start of every keeper pays none of them); the pi keepers of
    # the tests above did, at their first call
    p, s = ids()
    status, recs = ctx.stack.stream(scripted_request(script([{"chunk": "x"}]), projectId=p,
                                                     sessionId=s))
    assert status == 200 and result_of(recs)["ok"] is True, recs
    assert not keeper_maps(ctx, f"{p}:{s}", "libcurl.so")
    assert not keeper_maps(ctx, f"{p}:{s}", "libssl.so")
    kill(ctx, p, s)


def test_pi_runs_through_the_gateway_and_its_key_stays_out(ctx):
    gateway_turn(ctx, "pi_core")


def test_a_claimed_pi_spare_runs_through_the_gateway_and_its_key_stays_out(ctx):
    def ready():
        spares = [x for x in ctx.stack.sessions()["sessions"]
                  if x["spare"] and x["state"] == "spare"]
        return spares and pi_of(spares[0]["keeperPid"])

    stack.wait_for(ready, timeout=90, step=0.2, what="a ready pi spare")
    gateway_turn(ctx, "pi_core", spare=True)


def test_claude_runs_through_the_gateway_and_its_key_stays_out(ctx):
    gateway_turn(ctx, "claude")


def test_codex_runs_through_the_gateway_and_its_key_stays_out(ctx):
    gateway_turn(ctx, "codex")


def test_opencode_runs_through_the_gateway_and_its_key_stays_out(ctx):
    gateway_turn(ctx, "opencode")


# (node_modules skipped: the harnesses' read-only tree is bound at its host path, which may lie
# under /tmp, and its text would crowd out the rest)
LOOK = ("env; cat /proc/*/environ | tr '\\0' '\\n'; cat /proc/*/cmdline | tr '\\0' ' '; echo; "
        "ls -laR /home/agent /tmp /run 2>&1 | head -300; "
        "grep -rIah --exclude-dir=node_modules . /home/agent /tmp /run /workspace 2>/dev/null "
        "| head -3000")


def test_code_in_the_sandbox_looking_for_the_key_finds_only_the_placeholder(ctx):
    key = new_key()
    mc = model_connection("openai", "OPENAI_API_KEY", ctx.model.base + "/v1", key)
    status, recs = ctx.stack.stream(exec_request(LOOK, modelConnection=mc))
    assert status == 200
    out = "\n".join(e["output"] for e in events_of(recs) if e["type"] == "tool_result")
    assert "OPENAI_API_KEY=" + PLACEHOLDER in out, out[:2000]
    assert not leaked(out, key), leaked(out, key)
    # the same through pi's bash tool, its models.json and key file included (last: pi keeps
    # the end of a long output)
    name = "look-" + uuid.uuid4().hex[:8]
    ctx.model.script(name, [{"tool": {"name": "bash", "arguments": {
        "command": LOOK + "; cat ~/.pi/agent/models.json ~/.pi/agent/runner-key 2>&1"}}},
        {"text": "looked"}])
    res, evs = run(ctx, pi_request(ctx.model, f"look [[script:{name}]]", key=key,
                                   permissions={"default": "allow"}))
    assert res["ok"] is True, res
    out = "\n".join(e["output"] for e in of(evs, "tool_result"))
    assert GATEWAY + "/v1" in out and PLACEHOLDER in out, out[:2000]
    assert not leaked(out, key), leaked(out, key)
    # and the model got the key
    assert calls_with_key(ctx, key), "the fake model never saw the run's key"


def gateway_call(body, path="/v1/chat/completions", size=None):
    """A shell command for an exec step: python3 POSTs body (or size bytes of junk) to the
    sandbox's gateway with the placeholder key and prints the status and the answer's start."""
    data = f"b'x' * {size}" if size is not None else repr(json.dumps(body)) + ".encode()"
    prog = ("import urllib.request as u, urllib.error as e\n"
            f"rq = u.Request({GATEWAY + path!r}, data={data}, headers={{"
            f"'content-type': 'application/json', 'authorization': 'Bearer {PLACEHOLDER}'}})\n"
            "try:\n r = u.urlopen(rq, timeout=30); print(r.status, r.read().decode()[:400])\n"
            "except e.HTTPError as x:\n print(x.code, x.read().decode()[:400])\n")
    return f"echo {base64.b64encode(prog.encode()).decode()} | base64 -d | python3"


def test_usage_is_measured_and_a_forged_channel_report_changes_nothing_but_a_counter(ctx):
    key = new_key()
    name = "forge-" + uuid.uuid4().hex[:8]
    ctx.model.script(name, [{"text": "measured", "usage": {"input": 123, "output": 45}}])
    body = {"model": "fake-model", "messages": [{"role": "user", "content": f"[[script:{name}]]"}]}
    steps = [{"exec": gateway_call(body)},
             {"channel_notify": {"method": "usage",
                                 "params": {"input": 5000, "output": 4000, "total": 9000}}}]
    before = metric(ctx, "agent_runner_usage_mismatch_total")
    mc = model_connection("openai", "OPENAI_API_KEY", ctx.model.base + "/v1", key)
    status, recs = ctx.stack.stream(scripted_request(script(steps), modelConnection=mc))
    assert status == 200
    res, evs = result_of(recs), events_of(recs)
    assert res["ok"] is True, res
    assert "200 " in evs[[e["type"] for e in evs].index("tool_result")]["output"]
    assert {k: res["usage"][k] for k in ("input", "output", "total")} == \
        {"input": 123, "output": 45, "total": 168}, res["usage"]
    usage = of(evs, "usage")
    assert [(u["input"], u["output"], u["total"]) for u in usage] == [(123, 45, 168)], usage
    assert metric(ctx, "agent_runner_usage_mismatch_total") == before + 1
    assert "usage mismatch" in ctx.stack.log_text()


def test_cost_comes_from_the_operators_price_table(ctx):
    key = new_key()
    name = "priced-" + uuid.uuid4().hex[:8]
    ctx.model.script(name, [{"text": "priced", "usage": {"input": 1000, "output": 500}}])
    body = {"model": "priced-model",
            "messages": [{"role": "user", "content": f"[[script:{name}]]"}]}
    mc = model_connection("openai", "OPENAI_API_KEY", ctx.model.base + "/v1", key)
    status, recs = ctx.stack.stream(exec_request(gateway_call(body), modelConnection=mc))
    res, evs = result_of(recs), events_of(recs)
    assert res["ok"] is True, res
    want = (1000 * 2.0 + 500 * 10.0) / 1e6
    usage = of(evs, "usage")
    assert len(usage) == 1 and abs(usage[0]["cost"] - want) < 1e-12, usage
    assert abs(res["usage"]["cost"] - want) < 1e-12, res["usage"]


def test_the_first_chunk_reaches_the_client_before_the_model_sends_its_last(ctx):
    name, gate = "hold-" + uuid.uuid4().hex[:8], "gate-" + uuid.uuid4().hex[:8]
    ctx.model.script(name, [{"text": "first second third fourth", "hold": gate}])
    c, r = ctx.stack.open_stream(pi_request(ctx.model, f"hold [[script:{name}]]", key=new_key()))
    records = []
    try:
        assert r.status == 200
        while True:
            line = r.readline()
            assert line, "the stream ended before any message_delta"
            records.append((0, json.loads(line)))
            ev = records[-1][1].get("event") or {}
            if ev.get("type") == "message_delta":
                break
        entry = [e for e in ctx.model.requests() if name in json.dumps(e["body"])][-1]
        # the model holds its stream after the first chunk: nothing buffered it on the way
        assert entry.get("held") is True and "done" not in entry, entry.get("held")
        assert ev["delta"].startswith("first"), ev
    finally:
        ctx.model._call("POST", "/_release", {"gate": gate})
    for line in r:
        records.append((0, json.loads(line)))
    c.close()
    res = result_of(records)
    assert res["ok"] is True and res["output"] == "first second third fourth", res


def test_calls_outside_the_endpoint_the_models_or_the_cap_are_refused(ctx):
    key = new_key()
    name = "refuse-" + uuid.uuid4().hex[:8]
    ok_body = {"model": "fake-model", "messages": [{"role": "user", "content": f"[[script:{name}]]"}]}
    other = dict(ok_body, model="other-model")
    steps = [{"exec": gateway_call(ok_body, path="/elsewhere/chat/completions"), "id": "path"},
             {"exec": gateway_call(other), "id": "model"},
             {"exec": gateway_call(None, size=CAP + 100), "id": "size"},
             {"exec": gateway_call(ok_body), "id": "fine"}]
    before = metric(ctx, "agent_runner_model_refused_total")
    mc = model_connection("openai", "OPENAI_API_KEY", ctx.model.base + "/v1", key)
    status, recs = ctx.stack.stream(scripted_request(
        script(steps), modelConnection=mc, modelGateway={"allowedModels": ["fake-model"]}))
    assert status == 200
    evs = events_of(recs)
    outs = [e["output"] for e in of(evs, "tool_result")]
    assert [o.split(" ")[0] for o in outs] == ["403", "403", "413", "200"], outs
    errors = [e for e in of(evs, "error") if e["code"] == "model_refused"]
    assert len(errors) == 3, errors
    assert "/elsewhere/chat/completions" in errors[0]["message"], errors[0]
    assert "other-model" in errors[1]["message"], errors[1]
    assert "cap" in errors[2]["message"], errors[2]
    # only the allowed call reached the model
    seen = calls_with_key(ctx, key)
    assert len(seen) == 1 and seen[0]["body"]["model"] == "fake-model", seen
    assert metric(ctx, "agent_runner_model_refused_total") == before + 3


def test_provider_errors_reach_the_harness_and_name_the_turns_code(ctx):
    for status, code in ((429, "provider_rate_limited"), (401, "provider_auth_error"),
                         (503, "provider_error")):
        name = f"fail{status}-" + uuid.uuid4().hex[:8]
        ctx.model.script(name, [{"fail": {"status": status, "message": f"failed {status}"}}])
        res, evs = run(ctx, pi_request(ctx.model, f"fail [[script:{name}]]", key=new_key()))
        assert res["ok"] is False, res
        err = of(evs, "error")
        assert err and err[-1]["code"] == code, (status, err)
        assert f"failed {status}" in res["error"], res["error"]


def test_network_off_reaches_the_model_through_the_gateway_only(ctx):
    key = new_key()
    res, evs = run(ctx, pi_request(ctx.model, "hello", key=key,
                                   sandboxPermission={"network": {"mode": "off"}}))
    assert res["ok"] is True, res
    assert calls_with_key(ctx, key)
    # the endpoint itself is not reachable from the sandbox: only its gateway is
    port = ctx.model.port
    status, recs = ctx.stack.stream(exec_request(
        f"python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', {port}), 5);"
        f" s.sendall(b'GET /v1/models HTTP/1.0\\\\r\\\\n\\\\r\\\\n'); print('GOT', s.recv(64))\""
        " 2>&1 | tail -1",
        modelConnection=model_connection("openai", "OPENAI_API_KEY", ctx.model.base + "/v1", key),
        sandboxPermission={"network": {"mode": "off"}}))
    out = "\n".join(e["output"] for e in of(events_of(recs), "tool_result"))
    assert "GOT" not in out, out


def test_health_says_the_key_stays_out(ctx):
    status, _, body = ctx.stack.request("GET", "/health", token=False)
    assert status == 200
    gw = body["modelGateway"]
    assert gw["enabled"] is True and gw["active"] is True, gw
    for name in ("pi_core", "claude", "codex", "opencode"):
        h = gw["harnesses"][name]
        assert h["keyStaysOut"] is True, (name, h)
        assert "sandbox daytona" in h["keyInSandboxWhen"], h
    assert "credentialMode runtime_provided" in gw["harnesses"]["codex"]["keyInSandboxWhen"]
