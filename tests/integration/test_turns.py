"""Turns that outlive their client and their worker: numbered records, the journal, reattach
(GET /turns/{id}/events), the hand-over of a dead worker's turn, detached turns, keepalives."""

import json
import os
import random
import signal
import threading
import time
import urllib.parse
import uuid

import stack
from stack import wait_for
from turns import events_of, ids, model_requests, pi_request, result_of, script, scripted_request

STACK = {"workers": 2, "threads": 8,
         "env": {"AGENT_RUNNER_STREAM_KEEPALIVE_MS": "10000"}}


def new_turn_id():
    return "turn-" + uuid.uuid4().hex[:12]


def events_path(turn_id, after=None, project=None):
    q = {}
    if after is not None:
        q["after"] = str(after)
    if project is not None:
        q["projectId"] = project
    path = "/turns/" + urllib.parse.quote(turn_id, safe="") + "/events"
    return path + ("?" + urllib.parse.urlencode(q) if q else "")


def reattach(ctx, turn_id, after=0, project=None, token=True, timeout=300):
    """GET the turn's records after `after`: (status, headers, [record]) or the JSON error."""
    h = {"accept": "application/x-ndjson"}
    if token:
        h["authorization"] = "Bearer " + stack.TOKEN
    c = ctx.stack.connection(timeout)
    c.request("GET", events_path(turn_id, after, project), headers=h)
    r = c.getresponse()
    headers = dict(r.getheaders())
    if r.status != 200:
        body = r.read()
        c.close()
        return r.status, headers, json.loads(body) if body else None
    out = []
    while True:
        line = r.readline()
        if not line:
            break
        out.append(json.loads(line))
    c.close()
    return r.status, headers, out


def read_records(resp, until=None):
    """Records from an open response until it ends (or until(records) says stop)."""
    out = []
    while True:
        line = resp.readline()
        if not line:
            return out
        out.append(json.loads(line))
        if until and until(out):
            return out


def seqs(recs):
    return [r["seq"] for r in recs]


def test_records_are_numbered_and_name_the_turn(ctx):
    tid = new_turn_id()
    req = scripted_request(script([{"chunk": "alpha "}, {"chunk": "beta"}]), turnId=tid)
    c, r = ctx.stack.open_stream(req)
    assert r.status == 200
    assert r.getheader("X-Agent-Runner-Turn") == tid
    recs = read_records(r)
    c.close()
    assert seqs(recs) == list(range(1, len(recs) + 1)), seqs(recs)
    assert recs[0]["turnId"] == tid and all("turnId" not in x for x in recs[1:])
    assert recs[-1]["kind"] == "result" and recs[-1]["result"]["ok"] is True
    # a reattach after the turn: the records after the cursor, the result last
    status, headers, again = reattach(ctx, tid, after=2)
    assert status == 200 and headers.get("X-Agent-Runner-Turn") == tid
    assert again == recs[2:], (again, recs)
    status, _, whole = reattach(ctx, tid)
    assert status == 200 and whole == recs


def ctl_turns(ctx):
    out = ctx.stack.ctl("--state-dir", ctx.stack.state, "turns", "--json")
    return json.loads(out.stdout)["turns"]


def turn_entry(ctx, tid):
    for t in ctl_turns(ctx):
        if t["turnId"] == tid:
            return t
    return None


def read_until_cut(resp, until=None):
    """Records until the stream ends; a connection cut mid-chunk ends it too."""
    out = []
    try:
        out = read_records(resp, until)
    except Exception:  # noqa: BLE001 - http.client's IncompleteRead and friends: the cut
        pass
    return out


def deltas(recs):
    return "".join(r["event"].get("delta", "") for r in recs
                   if r["kind"] == "event" and r["event"]["type"] == "message_delta")


def check_whole(recs):
    """Every seq once, in order, from 1; exactly one result, and it is last."""
    assert seqs(recs) == list(range(1, len(recs) + 1)), seqs(recs)
    kinds = [r["kind"] for r in recs]
    assert kinds.count("result") == 1 and kinds[-1] == "result", kinds


def kill_writer_mid_turn(ctx, req, tid, after_deltas, on_kill=None):
    """Stream req; once after_deltas message deltas arrived, SIGKILL the worker writing the turn
    (the journal's pid), read what is left of the cut stream, reattach with the last seq.
    Returns (records before the kill, records of the reattach)."""
    c, r = ctx.stack.open_stream(req)
    assert r.status == 200
    got = read_until_cut(r, until=lambda recs: deltas(recs).count("|") >= after_deltas)
    entry = wait_for(lambda: turn_entry(ctx, tid), what="the turn's journal")
    assert entry["state"] == "running", entry
    if on_kill:
        on_kill()
    os.kill(entry["pid"], signal.SIGKILL)
    got += read_until_cut(r)
    c.close()
    assert not any(x["kind"] == "result" for x in got), "the cut stream had a result"
    status, _, more = reattach(ctx, tid, after=got[-1]["seq"], project=req.get("projectId"))
    assert status == 200, more
    return got, more


def test_scripted_turn_goes_on_when_its_worker_is_killed(ctx):
    p, s = ids()
    tid = new_turn_id()
    steps = []
    for k in range(10):
        steps += [{"chunk": f"|part{k}"}, {"sleep": 150}]
    req = scripted_request(script(steps), turnId=tid, projectId=p, sessionId=s)
    before = {}

    def note_session():
        before.update(ctx.stack.session(f"{p}:{s}"))

    got, more = kill_writer_mid_turn(ctx, req, tid, 3, on_kill=note_session)
    whole = got + more
    check_whole(whole)
    text = deltas(whole)
    assert text == "".join(f"|part{k}" for k in range(10)), text
    res = whole[-1]["result"]
    assert res["ok"] is True and res["output"] == text, res
    # the same keeper and agent process finished it, and the session stays warm
    after = wait_for(lambda: ctx.stack.session(f"{p}:{s}"), what="the session")
    assert (after["keeperPid"], after["sandboxPid"]) == (before["keeperPid"],
                                                        before["sandboxPid"]), (before, after)
    wait_for(lambda: ctx.stack.session(f"{p}:{s}")["state"] == "idle", what="parked idle")
    # the journal says done
    wait_for(lambda: (turn_entry(ctx, tid) or {}).get("state") == "done", what="journal done")
    # and the next turn is a warm follow-up on that process
    req["messages"] += [{"role": "assistant", "content": text}, {"role": "user", "content": "next"}]
    req["turnId"] = new_turn_id()
    status, recs = ctx.stack.stream(req)
    assert result_of(recs)["output"] == "echo[2]: next", result_of(recs)
    assert ctx.stack.session(f"{p}:{s}")["keeperPid"] == before["keeperPid"]
    ctx.stack.ctl("kill", f"{p}:{s}")


def test_pi_turn_goes_on_when_its_worker_is_killed(ctx):
    """kill -9 of the worker in the middle of a pi turn whose model streams slowly: the client
    reattaches with its last seq and gets the rest; the same pi finishes the answer."""
    p, s = ids()
    tid = new_turn_id()
    name = "slow-" + uuid.uuid4().hex[:8]
    answer = " ".join(f"|w{k}" for k in range(24))
    ctx.model.script(name, [{"text": answer, "delay": 0.12}])
    req = pi_request(ctx.model, f"talk slowly [[script:{name}]]", turnId=tid, projectId=p,
                     sessionId=s)
    before = {}
    got, more = kill_writer_mid_turn(
        ctx, req, tid, 3, on_kill=lambda: before.update(ctx.stack.session(f"{p}:{s}")))
    whole = got + more
    check_whole(whole)
    text = deltas(whole)
    assert text == answer, (text, answer)
    res = whole[-1]["result"]
    assert res["ok"] is True and res["output"] == answer, res
    assert len(model_requests(ctx, name)) == 1, "the model was asked twice"
    after = wait_for(lambda: ctx.stack.session(f"{p}:{s}"), what="the session")
    assert (after["keeperPid"], after["sandboxPid"]) == (before["keeperPid"],
                                                        before["sandboxPid"]), (before, after)
    ctx.stack.ctl("kill", f"{p}:{s}")


def test_twenty_kills_at_random_points_lose_no_turn(ctx):
    """A scripted turn per round, its worker killed after a random number of deltas plus a
    random moment; half of them session turns, half per-turn. Every turn comes back whole."""
    rng = random.Random(int(os.environ.get("TURNS_SEED", "2401")))
    lost = []
    for n in range(20):
        tid = new_turn_id()
        steps = []
        for k in range(8):
            steps += [{"chunk": f"|r{n}c{k}"}, {"sleep": rng.choice((20, 60, 120))}]
        extra = {"turnId": tid}
        if n % 2:
            extra.update(zip(("projectId", "sessionId"), ids()))
        req = scripted_request(script(steps), **extra)
        at = rng.randint(1, 7)
        jitter = rng.random() * 0.1
        got, more = kill_writer_mid_turn(ctx, req, tid, at,
                                         on_kill=lambda: time.sleep(jitter))
        whole = got + more
        check_whole(whole)
        res = whole[-1]["result"]
        want = "".join(f"|r{n}c{k}" for k in range(8))
        if not (res["ok"] and deltas(whole) == want and res["output"] == want):
            lost.append((n, at, res.get("error"), deltas(whole)))
        if "projectId" in extra:
            ctx.stack.ctl("kill", f"{extra['projectId']}:{extra['sessionId']}")
    print(f"    20 kills: {20 - len(lost)} turns came back whole, {len(lost)} lost")
    assert not lost, lost
