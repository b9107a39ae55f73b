"""Platform mode (README "Platform mode (Agenta)"): agent-runner against a fake Agenta API
(tests/fixtures/fake_agenta_api.py): admission by heartbeat, the session record log, the history
rebuilt from it after a cold start, the turns ledger, interaction rows, attachments, and no
credential in anything stored."""

import base64
import json
import os
import tempfile
import time
import uuid

import fakes
from stack import TOKEN, wait_for
from turns import answer, ids, model_requests_with, pi_request, run, script

# The fake starts with the module: its URL is part of the stack's environment.
API = fakes.FakeAgentaApi(tempfile.mkdtemp(prefix="ar-agenta."))
STACK = {"workers": 2, "threads": 8,
         "env": {"AGENTA_API_INTERNAL_URL": API.base,
                 "AGENT_RUNNER_AGENTA_HEARTBEAT_MS": "200",
                 "AGENTA_RECORDS_INGEST_MAX_RETRIES": "3",
                 "AGENTA_RECORD_TOOL_TTL_MS": "500"}}

INGEST = "/sessions/records/ingest"


def kill(ctx, p, s):
    status, _, _ = ctx.stack.request("POST", "/kill", {"sessionId": s, "projectId": p})
    assert status == 200, status


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


def strip(rec):
    """A stored record as a golden compares it."""
    return {k: rec.get(k) for k in ("record_index", "record_source", "record_type",
                                    "attributes", "turn_id")}


# -- admission ----------------------------------------------------------------------------------

def test_a_refused_heartbeat_refuses_the_run_before_any_side_effect(ctx):
    p, s = ids(10)
    API.refuse_heartbeats(s, 1)
    res, evs = run(ctx, scripted(p, s, "hello"))
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
    res, evs = run(ctx, scripted(p, s, "hello again", turn_id=tid))
    assert res["ok"] is True, res
    assert evs[0] == {"type": "turn", "turnId": tid}, evs[0]
    kill(ctx, p, s)


def test_the_platform_taking_the_turn_back_interrupts_it(ctx):
    p, s = ids(10)
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


# -- the record log -----------------------------------------------------------------------------

def test_the_record_log_of_a_turn_is_coalesced_with_agentas_ids(ctx):
    p, s = ids(10)
    tid = str(uuid.uuid4())
    steps = [{"thought": "Let me "}, {"thought": "look."},
             {"chunk": "Hel"}, {"chunk": "lo"},
             {"tool": {"id": "call-1", "title": "Read file", "kind": "read",
                       "input": {"path": "a.txt"}, "output": "A"}},
             {"chunk": "Done."}]
    res, evs = run(ctx, scripted(p, s, "Please " + script(steps), turn_id=tid))
    assert res["ok"] is True and res["output"] == "HelloDone.", res
    got = records(s, 8)
    message = "Please " + script(steps)
    want = [
        # the user's message first, as Agenta persists an inbound message
        (0, "user", {"type": "message", "text": message, "attachments": []}),
        # deltas coalesced into one thought and one message; no turn event, no transient data
        (1, "agent", {"type": "thought", "text": "Let me look."}),
        (2, "agent", {"type": "message", "text": "Hello"}),
        # the tool call's snapshots merged into one record
        (3, "agent", {"type": "tool_call", "id": "call-1", "name": "Read file",
                      "input": {"path": "a.txt"}}),
        (4, "agent", {"type": "tool_result", "id": "call-1", "output": "A", "isError": False}),
        (5, "agent", {"type": "message", "text": "Done."}),
        (6, "agent", {"type": "usage", "input": 10, "output": 5, "total": 15, "cost": 0.0}),
        (7, "agent", {"type": "done", "stopReason": "end_turn", "traceId": res["traceId"]}),
    ]
    assert [strip(r) for r in got] == [
        {"record_index": i, "record_source": src, "record_type": a["type"], "attributes": a,
         "turn_id": tid} for i, src, a in want], json.dumps(got, indent=1)
    # tool-family records carry Agenta's stable uuid5 ids; the others get the API's
    assert got[3]["record_id"] == fakes.record_id(s, "call-1", "tool_call", tid)
    assert got[4]["record_id"] == fakes.record_id(s, "call-1", "tool_result", tid)
    assert [r["record_id_sent"] for r in got] == [False, False, False, True, True, False,
                                                   False, False]
    assert all(r["ingests"] == 1 for r in got), got
    kill(ctx, p, s)


# -- the history rebuilt from the log -----------------------------------------------------------

def test_pi_keeps_its_context_across_a_cold_start_from_the_record_log(ctx):
    p, s = ids(10)
    tag = uuid.uuid4().hex[:8]
    name = f"rebuild-{tag}"
    ctx.model.script(name, [{"text": f"Nice to meet you, Zed-{tag}."}])
    t1, t2 = str(uuid.uuid4()), str(uuid.uuid4())
    res, evs = run(ctx, pi(ctx, p, s, f"My name is Zed-{tag}. [[script:{name}]]", turn_id=t1))
    assert res["ok"] is True and res["output"] == f"Nice to meet you, Zed-{tag}.", res
    assert evs[0] == {"type": "turn", "turnId": t1}, evs[0]
    # the environment goes away: the next turn starts cold and carries only its own message
    kill(ctx, p, s)
    assert ctx.stack.session(f"{p}:{s}") is None
    res, evs = run(ctx, pi(ctx, p, s, f"What is my name? [[script:{name}]]", turn_id=t2))
    assert res["ok"] is True, res
    seen = model_requests_with(ctx, "What is my name?")
    assert seen, "the second turn never reached the model"
    body = json.dumps(seen[-1]["body"])
    # the model got the earlier exchange, rebuilt from the session's records
    assert f"My name is Zed-{tag}." in body, body
    assert f"Nice to meet you, Zed-{tag}." in body, body
    assert "Conversation so far:" in body, body
    # the log holds both turns, each with its user message first
    got = records(s)
    turns = [r["turn_id"] for r in got]
    assert turns.index(t2) > max(i for i, t in enumerate(turns) if t == t1), turns
    first = [r for r in got if r["turn_id"] == t2][0]
    assert first["record_source"] == "user" and first["attributes"]["text"].startswith(
        "What is my name?"), first
    # the turns ledger: one row per turn, completed, in order
    ledger = wait_for(lambda: (lambda rows: rows if len(rows) == 2 and
                               all(r.get("end_time") for r in rows) else None)(API.turns(s)),
                      what="two completed ledger rows")
    ledger.sort(key=lambda r: r["turn_index"])
    assert [r["turn_index"] for r in ledger] == [0, 1], ledger
    assert [r["turn_id"] for r in ledger] == [t1, t2], ledger
    assert all(r["harness_kind"] == "pi_core" and r["stream_id"] for r in ledger), ledger
    # each turn ran in a new pi session (a cold start replays; it does not load)
    assert all(r.get("agent_session_id") for r in ledger), ledger
    assert ledger[0]["agent_session_id"] != ledger[1]["agent_session_id"], ledger
    kill(ctx, p, s)


def test_pi_loads_its_kept_session_when_the_log_matches(ctx):
    """The environment ends but the harness's kept state stays (README "Sessions": kept harness
    state): the next turn rebuilds the history from the log, finds it is the kept one (its
    user side: the log's tool-call ids are its own) and loads pi's own session instead of
    replaying it."""
    p, s = ids(10)
    tag = uuid.uuid4().hex[:8]
    name, name2 = f"kept-{tag}", f"kept2-{tag}"
    ctx.model.script(name, [{"tool": {"name": "bash",
                                      "arguments": {"command": f"echo plat-out-{tag}"}}},
                            {"text": f"ran it {tag}"}])
    ctx.model.script(name2, [{"text": f"it printed plat-out-{tag}"}])
    t1, t2 = str(uuid.uuid4()), str(uuid.uuid4())
    allow = {"default": "allow"}
    res, _ = run(ctx, pi(ctx, p, s, f"Run it. [[script:{name}]]", turn_id=t1, permissions=allow))
    assert res["ok"] is True, res
    status, _, _ = ctx.stack.request("POST", "/kill", {"sessionId": s, "projectId": p,
                                                       "environmentOnly": True})
    assert status == 200 and ctx.stack.session(f"{p}:{s}") is None
    records(s, want=3)
    res, evs = run(ctx, pi(ctx, p, s, f"What did it print? [[script:{name2}]]", turn_id=t2,
                           permissions=allow))
    assert res["ok"] is True and res["output"] == f"it printed plat-out-{tag}", res
    ready = next(e["data"] for e in evs if e.get("data", {}).get("phase") == "environment_ready")
    assert ready["resume"] == "load", ready
    body = model_requests_with(ctx, "What did it print?")[0]["body"]
    assert "Conversation so far" not in json.dumps(body), body
    assert any(m["role"] == "tool" and f"plat-out-{tag}" in json.dumps(m) for m in
               body["messages"]), body
    # one harness session across both turns: the ledger rows name the same one
    ledger = wait_for(lambda: (lambda rows: rows if len(rows) == 2 and
                               all(r.get("end_time") for r in rows) else None)(API.turns(s)),
                      what="two completed ledger rows")
    assert len({r["agent_session_id"] for r in ledger}) == 1, ledger
    kill(ctx, p, s)


def test_a_warm_follow_up_needs_no_rebuild(ctx):
    p, s = ids(10)
    res, _ = run(ctx, scripted(p, s, "first"))
    assert res["output"] == "echo[1]: first", res
    before = len(API.calls(path="/sessions/records/query"))
    res, _ = run(ctx, scripted(p, s, "second"))
    # the live agent got only the new text, and the log was not read
    assert res["output"] == "echo[2]: second", res
    assert len(API.calls(path="/sessions/records/query")) == before
    kill(ctx, p, s)


# -- failures of the API ------------------------------------------------------------------------

def test_an_ingest_outage_neither_blocks_nor_fails_the_turn_and_is_retried(ctx):
    p, s = ids(10)
    since = API.calls()[-1]["seq"] if API.calls() else 0
    # two refusals: with 3 tries per record every record still lands
    API.inject(INGEST, status=503, count=2)
    res, evs = run(ctx, scripted(p, s, "through the outage"))
    assert res["ok"] is True and res["output"] == "echo[1]: through the outage", res
    assert [e["type"] for e in evs][-1] == "done", evs
    got = records(s, 4)
    # one usage record: the turn's usage event is recorded once, not twice
    assert [r["record_type"] for r in got] == ["message", "usage", "message", "done"], got
    assert [r["record_index"] for r in got] == [0, 1, 2, 3], got
    assert all(r["ingests"] == 1 for r in got), got
    tries = [c for c in API.calls(path=INGEST, since=since) if c["body"].get("session_id") == s]
    assert [c["status"] for c in tries[:3]] == [503, 503, 200], tries[:3]
    # the first record was retried, not duplicated: same body every time
    assert tries[0]["body"] == tries[1]["body"] == tries[2]["body"], tries[:3]
    # nothing was dropped: a cold start can rebuild the conversation
    kill(ctx, p, s)
    res, evs = run(ctx, scripted(p, s, "after"))
    assert res["ok"] is True and "through the outage" in res["output"], res
    kill(ctx, p, s)


def test_a_session_whose_records_were_dropped_refuses_to_rebuild(ctx):
    p, s = ids(10)
    API.inject(INGEST, status=503, count=-1)
    try:
        res, _ = run(ctx, scripted(p, s, "lost"))
    finally:
        API.clear_injections()
    # the turn itself is fine: persistence never fails it
    assert res["ok"] is True and res["output"] == "echo[1]: lost", res
    kill(ctx, p, s)
    # any worker (the mark is shared) refuses to answer without the lost context
    for _ in range(2):
        res, evs = run(ctx, scripted(p, s, "do you remember?"))
        assert res["ok"] is False, res
        assert "lost a durable record" in res["error"], res
        err = [e for e in evs if e["type"] == "error"]
        assert err and "refusing to rebuild an incomplete conversation" in err[0]["message"], evs
        assert evs[-1]["type"] == "done", evs
    assert ctx.stack.session(f"{p}:{s}") is None
    # the mark is a file under the state dir, which every worker (and a restart) sees
    marks = os.path.join(ctx.stack.state, "platform", "incomplete")
    held = []
    for f in os.listdir(marks):
        with open(os.path.join(marks, f)) as fh:
            held.append(fh.read())
    assert f"{p}:{s}" in held, held


def test_an_unreadable_log_fails_the_rebuild_clearly(ctx):
    p, s = ids(10)
    res, _ = run(ctx, scripted(p, s, "hello"))
    assert res["ok"] is True
    kill(ctx, p, s)
    API.inject("/sessions/records/query", status=500, count=1)
    res, evs = run(ctx, scripted(p, s, "again"))
    assert res["ok"] is False and "record log is unreadable" in res["error"], res
    # a later turn reads it again
    res, _ = run(ctx, scripted(p, s, "and again"))
    assert res["ok"] is True and "Conversation so far:" in res["output"], res
    assert "user: hello" in res["output"], res
    kill(ctx, p, s)


# -- interaction rows ---------------------------------------------------------------------------

GATE = {"toolCallId": "w1", "title": "Write file", "kind": "edit", "input": {"path": "a.txt"}}


def gate_token(ev):
    """The gate's interaction token: the payload's, or the event id once ids are tokens."""
    return ev["payload"].get("interactionToken") or ev["id"]


def test_interaction_rows_follow_a_park_and_a_resume(ctx):
    p, s = ids(10)
    t1, t2 = str(uuid.uuid4()), str(uuid.uuid4())
    first = scripted(p, s, script([{"chunk": "before"}, {"permission": GATE},
                                   {"chunk": " after"}]), turn_id=t1,
                     effectiveParameters={"temperature": 0.2},
                     runContext={"workflow": {"artifact": {"id": "wf-1"},
                                              "revision": {"id": "rev-1", "version": "3"}}})
    res, evs = run(ctx, first)
    assert res["stopReason"] == "paused", res
    [gate] = [e for e in evs if e["type"] == "interaction_request"]
    token = gate_token(gate)
    rows = wait_for(lambda: API.interactions(s), what="the interaction row")
    assert len(rows) == 1, rows
    row = rows[0]
    assert row["token"] == token and row["turn_id"] == t1, row
    assert row["kind"] == "user_approval" and row["status"] == "pending", row
    assert row["data"]["request"] == {"tool": "Write file", "args": {"path": "a.txt"},
                                      "tool_call_id": "w1"}, row
    assert row["data"]["parameters"] == {"temperature": 0.2}, row
    assert row["data"]["references"]["workflow"] == {"id": "wf-1"}, row
    assert row["flags"]["delivered_in_band"] is True, row
    # the parked gate's record carries Agenta's stable id
    recs = records(s, 4)
    req_rec = [r for r in recs if r["record_type"] == "interaction_request"]
    assert req_rec and req_rec[0]["record_id"] == fakes.record_id(
        s, gate["id"], "interaction_request", t1), req_rec
    # the answer resumes the parked agent: the row is resolved with the verdict
    msgs = first["messages"] + [{"role": "assistant", "content": "before"},
                                answer("w1", True, gate["payload"].get("interactionToken"))]
    res, evs = run(ctx, dict(first, turnId=t2, messages=msgs))
    assert res["ok"] is True and res["output"].endswith(" after"), res
    assert "interaction_response" in [e["type"] for e in evs], evs

    def resolved():
        r = API.interactions(s)
        return r if r and r[0]["status"] == "resolved" else None
    row = wait_for(resolved, what="the resolved row")[0]
    assert row["data"]["resolution"] == {"verdict": "approved", "tool_call_id": "w1"}, row
    resp = [r for r in records(s) if r["record_type"] == "interaction_response"]
    assert resp and resp[0]["turn_id"] == t2, resp
    # cancel-stale ran at each turn's start, sparing the gate that was in play
    sweeps = [c["body"] for c in API.calls(path="/sessions/interactions/cancel-stale")
              if c["body"].get("session_id") == s]
    assert [b["turn_id"] for b in sweeps] == [t1, t2], sweeps
    assert sweeps[1].get("tokens") == [token], sweeps
    kill(ctx, p, s)


def test_an_unanswered_gate_is_cancelled_by_the_next_turn_and_a_cold_answer_resolves(ctx):
    p, s = ids(10)
    res, evs = run(ctx, scripted(p, s, script([{"permission": GATE}])))
    assert res["stopReason"] == "paused", res
    gate = next(e for e in evs if e["type"] == "interaction_request")
    wait_for(lambda: API.interactions(s), what="the interaction row")
    # the session is gone; the user answers anyway: the cold turn resolves the row in band
    kill(ctx, p, s)
    res, _ = run(ctx, scripted(p, s, "x", messages=[
        {"role": "user", "content": script([{"permission": GATE}])},
        answer("w1", False, gate["payload"].get("interactionToken"))]))
    assert res["ok"] is True, res
    row = wait_for(lambda: (lambda r: r[0] if r and r[0]["status"] != "pending" else None)(
        API.interactions(s)), what="the row settled")
    assert row["status"] == "resolved", row
    assert row["data"]["resolution"] == {"verdict": "denied", "tool_call_id": "w1"}, row
    kill(ctx, p, s)
    # a gate nobody answers is cancelled when the next turn of the session starts
    p, s = ids(10)
    res, _ = run(ctx, scripted(p, s, script([{"permission": GATE}])))
    assert res["stopReason"] == "paused", res
    wait_for(lambda: API.interactions(s), what="the interaction row")
    kill(ctx, p, s)
    res, _ = run(ctx, scripted(p, s, "never mind"))
    assert res["ok"] is True, res
    row = wait_for(lambda: (lambda r: r[0] if r and r[0]["status"] != "pending" else None)(
        API.interactions(s)), what="the row settled")
    assert row["status"] == "cancelled", row
    kill(ctx, p, s)


# -- attachments --------------------------------------------------------------------------------

def png_1x1():
    import struct
    import zlib

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
    raw = zlib.compress(b"\x00\xff\x00\x00")  # one red pixel, filter 0
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", raw) + chunk(b"IEND", b""))


def test_attachments_reach_the_model(ctx):
    p, s = ids(10)
    tag = uuid.uuid4().hex[:8]
    png = png_1x1()
    img = API.seed_attachment(s, "pixel.png", "image/png", png)
    doc = API.seed_attachment(s, "notes.txt", "text/plain", f"The secret word is PLUM-{tag}.\n")
    name = f"attach-{tag}"
    ctx.model.script(name, [{"tool": {"name": "read",
                                      "arguments": {"path": f"attachments/{doc}/notes.txt"}}},
                            {"text": "I read it."}])
    content = [{"type": "attachment", "attachmentId": img, "filename": "pixel.png",
                "mimeType": "image/png"},
               {"type": "attachment", "attachmentId": doc, "filename": "notes.txt",
                "mimeType": "text/plain"},
               {"type": "text", "text": f"What do these say? [[script:{name}]]"}]
    req = pi(ctx, p, s, content, modelCapabilities={"inputModalities": ["text", "image"]})
    res, evs = run(ctx, req)
    assert res["ok"] is True and res["output"].endswith("I read it."), res
    deliveries = {e["attachmentId"]: e for e in evs if e["type"] == "attachment_delivery"}
    assert deliveries[img] == {"type": "attachment_delivery", "attachmentId": img,
                               "outcome": "native", "reasonCode": "native_supported",
                               "workingPath": f"attachments/{img}/pixel.png"}, deliveries
    assert deliveries[doc]["outcome"] == "workspace_only", deliveries
    assert deliveries[doc]["workingPath"] == f"attachments/{doc}/notes.txt", deliveries
    seen = model_requests_with(ctx, f"[[script:{name}]]")
    assert len(seen) >= 2, seen
    first = json.dumps(seen[0]["body"])
    # the image itself, natively, and the document as a working copy the agent can open
    assert base64.b64encode(png).decode() in first, first[:2000]
    assert f"[attached file: notes.txt at attachments/{doc}/notes.txt]" in first, first[:2000]
    # the agent opened the working copy: its content reached the model
    assert f"PLUM-{tag}" in json.dumps(seen[-1]["body"]), seen[-1]["body"]
    store = API.store(s)
    atts = {a["attachment_id"]: a for a in store["attachments"]}
    assert atts[img]["fetches"] >= 1 and atts[img]["referenced_at"], atts
    assert atts[doc]["fetches"] >= 1 and atts[doc]["referenced_at"], atts
    user = [r for r in store["records"] if r["record_source"] == "user"][0]
    assert [a["attachmentId"] for a in user["attributes"]["attachments"]] == [img, doc], user
    kill(ctx, p, s)


def test_a_bad_attachment_reference_fails_before_anything_starts(ctx):
    p, s = ids(10)
    res, evs = run(ctx, scripted(p, s, [{"type": "attachment", "attachmentId": "../../etc"},
                                           {"type": "text", "text": "look"}]))
    assert res["ok"] is False and "Attachment reference is invalid" in res["error"], res
    assert evs[0] == {"type": "attachment_delivery", "attachmentId": "../../etc",
                      "outcome": "failed", "reasonCode": "contract_violation"}, evs
    assert ctx.stack.session(f"{p}:{s}") is None
    # a missing one is announced as failed and the turn goes on without it
    missing = str(uuid.uuid4())
    res, evs = run(ctx, scripted(p, s, [{"type": "attachment", "attachmentId": missing,
                                            "filename": "gone.txt"},
                                           {"type": "text", "text": "look"}]))
    assert res["ok"] is True, res
    d = [e for e in evs if e["type"] == "attachment_delivery"]
    assert d == [{"type": "attachment_delivery", "attachmentId": missing, "outcome": "failed",
                  "reasonCode": "fetch_failed"}], d
    assert "[attached file: gone.txt - no longer available]" in res["output"], res
    kill(ctx, p, s)


# -- credentials --------------------------------------------------------------------------------

def test_no_credential_in_anything_stored(ctx):
    p, s = ids(10)
    model_key = "sk-model-" + uuid.uuid4().hex
    callback_auth = "Bearer cb-" + uuid.uuid4().hex
    env_secret = "env-secret-" + uuid.uuid4().hex
    before = set(API.auth()["minted"])
    # the user pastes every credential of the run into the message; the agent echoes it and
    # takes long enough for the heartbeat to refresh the run credential (every 10th beat)
    leak = f"{model_key} {API.credential} {callback_auth} {env_secret}"
    steps = [{"chunk": "leaking " + leak}, {"sleep": 2600},
             {"tool": {"id": "leak-1", "title": "Leak", "kind": "read",
                       "input": {"q": model_key}, "output": API.credential}},
             {"permission": dict(GATE, input={"token": API.credential})}]
    req = scripted(p, s, f"my keys: {leak} " + script(steps),
                   toolCallback={"endpoint": "http://127.0.0.1:9/api/tools/call",
                                 "authorization": callback_auth},
                   modelConnection={"provider": "openai", "deployment": "custom",
                                    "endpoint": {"baseUrl": "https://models.example/v1"},
                                    "credentialMode": "env",
                                    "environment": {"MODEL_REGION": env_secret},
                                    "credentials": [{"binding": {"kind": "environment",
                                                                 "name": "OPENAI_API_KEY"},
                                                     "value": model_key,
                                                     "usage": "opaque_http"}]})
    res, evs = run(ctx, req)
    assert res["stopReason"] == "paused", res
    minted = set(API.auth()["minted"]) - before
    assert minted, "the run credential was never refreshed"
    wait_for(lambda: API.interactions(s), what="the interaction row")
    got = records(s, 6)
    secrets = [model_key, API.credential, API.credential.split(" ", 1)[1], callback_auth,
               callback_auth.split(" ", 1)[1], env_secret] + sorted(minted)
    dump = json.dumps(API.store(s))
    for secret in secrets:
        assert secret not in dump, f"a credential ({secret[-4:]}) is in the store"
    # not vacuous: the values were there, and came out as Agenta's placeholders
    assert "[ag:redacted:secret:" in json.dumps([r["attributes"] for r in got]), got
    assert "[ag:redacted:secret:" in json.dumps(API.interactions(s)), API.interactions(s)
    # every call after the refresh used the refreshed credential
    calls = [c for c in API.calls() if s in json.dumps(c.get("body"))]
    used = {c["headers"].get("authorization") for c in calls}
    assert used <= {API.credential} | minted, used
    assert used & minted, used
    # nor in the runner's log
    log = ctx.stack.log_text()
    for secret in secrets:
        assert secret not in log, f"a credential ({secret[-4:]}) is in the runner log"
    kill(ctx, p, s)
