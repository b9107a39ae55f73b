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
         "env": {"AGENT_RUNNER_STREAM_KEEPALIVE_MS": "10000",
                 # small journals, so that one turn can outgrow its own (the 410 test)
                 "AGENT_RUNNER_TURN_JOURNAL_BYTES": "16384"}}


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
    out = ctx.stack.ctl("turns", "--json")
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


def slow_steps(tag, n=8, ms=150):
    steps = []
    for k in range(n):
        steps += [{"chunk": f"|{tag}{k}"}, {"sleep": ms}]
    return steps


def test_two_readers_of_a_live_turn_get_every_record(ctx):
    tid = new_turn_id()
    req = scripted_request(script(slow_steps("two", 8, 120)), turnId=tid)
    c, r = ctx.stack.open_stream(req)
    first = read_records(r, until=lambda recs: "|two0" in deltas(recs))
    outs = [None, None]

    def follow(i):
        outs[i] = reattach(ctx, tid, after=0)

    ts = [threading.Thread(target=follow, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    recs = first + read_records(r)
    c.close()
    for t in ts:
        t.join(60)
    check_whole(recs)
    for status, _, got in outs:
        assert status == 200 and got == recs, (status, got, recs)


def test_a_detached_turn_completes_without_its_client(ctx):
    tid = new_turn_id()
    req = scripted_request(script(slow_steps("det", 6, 150)), turnId=tid, detached=True)
    c, r = ctx.stack.open_stream(req)
    got = read_records(r, until=lambda recs: "|det0" in deltas(recs))
    c.close()  # the client goes away after the first delta
    wait_for(lambda: (turn_entry(ctx, tid) or {}).get("state") == "done", timeout=30,
             what="the detached turn done")
    status, _, more = reattach(ctx, tid, after=got[-1]["seq"])
    assert status == 200
    whole = got + more
    check_whole(whole)
    res = whole[-1]["result"]
    want = "".join(f"|det{k}" for k in range(6))
    assert res["ok"] is True and res["stopReason"] == "end_turn" and res["output"] == want, res


def test_a_turn_that_is_not_detached_is_cancelled_when_its_client_goes(ctx):
    tid = new_turn_id()
    req = scripted_request(script(slow_steps("gone", 20, 150)), turnId=tid)
    c, r = ctx.stack.open_stream(req)
    got = read_records(r, until=lambda recs: "|gone0" in deltas(recs))
    c.close()
    wait_for(lambda: (turn_entry(ctx, tid) or {}).get("state") == "done", timeout=30,
             what="the turn done")
    status, _, more = reattach(ctx, tid, after=got[-1]["seq"])
    whole = got + more
    check_whole(whole)
    res = whole[-1]["result"]
    assert res["stopReason"] == "cancelled", res
    assert "|gone19" not in deltas(whole), deltas(whole)


def test_reattach_refusals(ctx):
    p, _ = ids()
    tid = new_turn_id()
    status, recs = ctx.stack.stream(scripted_request(script([{"chunk": "x"}]), turnId=tid,
                                                     projectId=p))
    assert result_of(recs)["ok"] is True
    # unknown turn: 404 with a JSON error
    status, _, doc = reattach(ctx, new_turn_id())
    assert status == 404 and doc["ok"] is False and "turn" in doc["error"], (status, doc)
    # the token is required
    status, _, doc = reattach(ctx, tid, project=p, token=False)
    assert status == 401 and doc == {"ok": False, "error": "Unauthorized"}, (status, doc)
    # another project's turn (or none named) is not readable
    assert reattach(ctx, tid, project="proj-other")[0] == 404
    assert reattach(ctx, tid)[0] == 404
    status, _, whole = reattach(ctx, tid, project=p)
    assert status == 200 and [x["seq"] for x in whole] == [x["seq"] for _, x in recs]
    # a bad cursor
    c = ctx.stack.connection()
    c.request("GET", events_path(tid, project=p) + "&after=-1",
              headers={"authorization": "Bearer " + stack.TOKEN})
    r = c.getresponse()
    assert r.status == 400 and "after" in json.loads(r.read())["error"]
    c.close()


def test_a_cursor_older_than_the_journal_is_410(ctx):
    tid = new_turn_id()
    steps = [{"chunk": "|" + "x" * 120} for _ in range(400)]
    status, recs = ctx.stack.stream(scripted_request(script(steps), turnId=tid))
    assert result_of(recs)["ok"] is True
    status, _, doc = reattach(ctx, tid, after=0)
    assert status == 410 and doc["ok"] is False, (status, doc)
    oldest = doc["oldestSeq"]
    assert 1 < oldest < len(recs) and str(oldest) in doc["error"], doc
    # from the oldest one kept on, everything is there
    status, _, tail = reattach(ctx, tid, after=oldest - 1)
    assert status == 200 and tail == [x for _, x in recs][oldest - 1:]


def test_a_silent_tool_step_gets_keepalives(ctx):
    """A 40 s tool call that prints nothing, keepalive 10 s (this stack's setting)."""
    status, recs = ctx.stack.stream(scripted_request(script([{"exec": "sleep 40"},
                                                             {"chunk": "after"}])))
    res = result_of(recs)
    assert res["ok"] is True and res["output"].endswith("after"), res
    evs = events_of(recs)
    keep = [e for e in evs if e["type"] == "data" and e["data"].get("phase") == "working"]
    assert len(keep) >= 3, [e["type"] for e in evs]
    assert all(e["transient"] is True and e["name"] == "agent-status" for e in keep)
    gaps = [b - a for (a, _), (b, _) in zip(recs, recs[1:])]
    print(f"    {len(keep)} keepalives, the longest silence {max(gaps):.1f}s")
    assert max(gaps) < 15, gaps


def test_ctl_lists_turns(ctx):
    tid = new_turn_id()
    c, r = ctx.stack.open_stream(scripted_request(script(slow_steps("ctl", 20, 150)),
                                                  turnId=tid))
    read_records(r, until=lambda recs: "|ctl0" in deltas(recs))
    e = turn_entry(ctx, tid)
    assert e["state"] == "running" and e["ageMs"] >= 0, e
    # a journal nobody reads is written at least once a second
    e = wait_for(lambda: (turn_entry(ctx, tid) or {}).get("seq", 0) >= 3 and turn_entry(ctx, tid),
                 timeout=5, what="the journal's progress")
    assert e["state"] == "running", e
    read_records(r)
    c.close()
    e = wait_for(lambda: (turn_entry(ctx, tid) or {}).get("state") == "done" and
                 turn_entry(ctx, tid), what="done")
    assert e["detached"] is False and e["bytes"] > 0, e
    text = ctx.stack.ctl("turns").stdout
    assert tid in text and "SEQ" in text.splitlines()[0], text


def test_a_reattach_within_the_grace_window_keeps_the_turn(ctx):
    """AGENT_RUNNER_REATTACH_GRACE_MS (a stack of its own, grace 3 s): a gone client's turn
    waits for a reattach instead of being cancelled; without one it is cancelled after it."""
    st = stack.Stack(workers=1, threads=8, model=ctx.model,
                     env={"AGENT_RUNNER_REATTACH_GRACE_MS": "3000"}).start()
    try:
        sub = type("Ctx", (), {"stack": st})()
        tid = new_turn_id()
        req = scripted_request(script(slow_steps("grace", 10, 150)), turnId=tid)
        c, r = st.open_stream(req)
        got = read_records(r, until=lambda recs: "|grace0" in deltas(recs))
        c.close()
        time.sleep(1.0)  # gone, but within the grace window
        status, _, more = reattach(sub, tid, after=got[-1]["seq"])
        whole = got + more
        check_whole(whole)
        res = whole[-1]["result"]
        assert res["stopReason"] == "end_turn" and deltas(whole) == "".join(
            f"|grace{k}" for k in range(10)), res
        # nobody comes back: cancelled once the window is over
        tid = new_turn_id()
        req = scripted_request(script(slow_steps("late", 60, 150)), turnId=tid)
        c, r = st.open_stream(req)
        got = read_records(r, until=lambda recs: "|late0" in deltas(recs))
        c.close()
        sub_entry = lambda: next((t for t in json.loads(st.ctl(  # noqa: E731
            "turns", "--json").stdout)["turns"] if t["turnId"] == tid), {})
        wait_for(lambda: sub_entry().get("state") == "done", timeout=30, what="cancelled")
        status, _, more = reattach(sub, tid, after=got[-1]["seq"])
        res = more[-1]["result"]
        assert res["stopReason"] == "cancelled", res
        n = deltas(got + more).count("|late")
        assert 10 <= n < 60, n  # it went on for the window (3 s at ~7 a second), then stopped
        assert not st.leaks(), st.leaks()
    finally:
        st.stop()
        st.cleanup()
