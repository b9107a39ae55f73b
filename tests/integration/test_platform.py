"""Platform mode (issue 16): agent-runner against a fake Agenta API (tests/fixtures/
fake_agenta_api.py): admission by heartbeat, the session record log, the history rebuilt from it
after a cold start, the turns ledger, interaction rows, attachments, and no credential in
anything stored."""

import base64
import json
import os
import tempfile
import time
import uuid

import fakes
from stack import TOKEN, events_of, pi_request, result_of, script, wait_for

# The fake starts with the module: its URL is part of the stack's environment.
API = fakes.FakeAgentaApi(tempfile.mkdtemp(prefix="ar-agenta."))
STACK = {"workers": 2, "threads": 8,
         "env": {"AGENTA_API_INTERNAL_URL": API.base,
                 "AGENT_RUNNER_AGENTA_HEARTBEAT_MS": "200",
                 "AGENTA_RECORDS_INGEST_MAX_RETRIES": "3",
                 "AGENTA_RECORD_TOOL_TTL_MS": "500"}}

INGEST = "/sessions/records/ingest"


def ids():
    return "proj-" + uuid.uuid4().hex[:6], "sess-" + uuid.uuid4().hex[:10]


def kill(ctx, p, s):
    status, _, _ = ctx.stack.request("POST", "/kill", {"sessionId": s, "projectId": p})
    assert status == 200, status


def stream(ctx, req):
    status, recs = ctx.stack.stream(req)
    assert status == 200, (status, recs)
    return result_of(recs), events_of(recs)


def scripted(p, s, content, turn_id=None, **extra):
    req = {"harness": "scripted", "projectId": p, "sessionId": s,
           "turnId": turn_id or str(uuid.uuid4()), "telemetry": API.telemetry(),
           "messages": [{"role": "user", "content": content}],
           "permissions": {"default": "allow_reads"}}
    req.update(extra)
    return req


def pi(ctx, p, s, content, turn_id=None, key="sk-plat-test", **extra):
    req = pi_request(ctx.model, "x", key=key, projectId=p, sessionId=s,
                     turnId=turn_id or str(uuid.uuid4()), telemetry=API.telemetry(), **extra)
    req["messages"] = [{"role": "user", "content": content}]
    return req


def records(s, want=None, timeout=15):
    """The session's stored records, once there are at least `want` of them."""
    if want is None:
        return API.records(s)
    return wait_for(lambda: (lambda r: r if len(r) >= want else None)(API.records(s)),
                    timeout=timeout, what=f"{want} records of {s}")


def model_requests_with(ctx, marker):
    return [r for r in ctx.model.requests() if marker in json.dumps(r["body"])]


def strip(rec):
    """A stored record as a golden compares it."""
    return {k: rec.get(k) for k in ("record_index", "record_source", "record_type",
                                    "attributes", "turn_id")}


# -- admission ----------------------------------------------------------------------------------

def test_a_refused_heartbeat_refuses_the_run_before_any_side_effect(ctx):
    p, s = ids()
    API.refuse_heartbeats(s, 1)
    res, evs = stream(ctx, scripted(p, s, "hello"))
    assert res["ok"] is False, res
    assert "already running a turn" in res["error"], res
    assert [e["type"] for e in evs] == ["error"], evs
    assert evs[0]["code"] == "session_turn_in_use", evs[0]
    # no environment was started, nothing was written
    assert ctx.stack.session(f"{p}:{s}") is None
    assert not ctx.stack.keeper_pids()
    store = API.store(s)
    assert store["records"] == [] and store["turns"] == [] and store["interactions"] == []
    beats = [c for c in API.calls(path="/sessions/streams/heartbeat")
             if c["body"].get("session_id") == s]
    assert [b["body"]["is_running"] for b in beats] == [True, False], beats
    assert not [c for c in API.calls() if c["path"] != "/sessions/streams/heartbeat" and
                s in json.dumps(c.get("body"))]
    # the next turn is admitted: the `turn` event comes first
    tid = str(uuid.uuid4())
    res, evs = stream(ctx, scripted(p, s, "hello again", turn_id=tid))
    assert res["ok"] is True, res
    assert evs[0] == {"type": "turn", "turnId": tid}, evs[0]
    kill(ctx, p, s)


def test_the_platform_taking_the_turn_back_interrupts_it(ctx):
    p, s = ids()
    c, r = ctx.stack.open_stream(scripted(p, s, script([{"chunk": "working"},
                                                         {"wait_cancel": True}])))
    assert r.status == 200
    first = json.loads(r.readline())
    assert first["event"]["type"] == "turn", first
    API.interrupt(s)
    lines = [json.loads(x) for x in r.read().splitlines() if x.strip()]
    c.close()
    res = lines[-1]["result"]
    assert res["ok"] is True and res["stopReason"] == "cancelled", res
    kill(ctx, p, s)
