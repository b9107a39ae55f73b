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
from turns import events_of, ids, pi_request, result_of, script, scripted_request

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
