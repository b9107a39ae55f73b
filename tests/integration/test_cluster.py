"""Several hosts, one service (README "Several hosts"): a real redis-server on loopback (its own
port and dir, plain and TLS), two and then three members of one group on this machine (own
instance names, ports, state dirs, sandbox uid ranges) and a round-robin nginx in front of them
(nginx/agent-runner-cluster.conf) with no session affinity.

The members are started by the first test and kept for the module (each test removes the
sessions it made, and every member is checked for leftovers after each test); the fake Daytona
is started when the module is imported, as in test_daytona.py. run.py's own stack (STACK) is
not a member: it only keeps the runner's per-module contract.

The scripted agent's prompt counter proves warmth: its k-th prompt in one process answers
"echo[k]: ...", and a cold start replays the conversation ("echo[1]: Conversation so far:").
"""

import atexit
import json
import os
import signal
import sys
import threading
import time
import urllib.parse
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fake_daytona_ctl  # noqa: E402
import stack  # noqa: E402
from stack import wait_for  # noqa: E402
from turns import events_of, harness_request, ids, result_of, script  # noqa: E402

STACK = {"workers": 1, "threads": 4}

REDIS = stack.Redis(tls=True).start()
DAYTONA_KEY = "fake-daytona-key-" + uuid.uuid4().hex
D = fake_daytona_ctl.FakeDaytona(api_key=DAYTONA_KEY)
atexit.register(lambda: (D.stop(), D.cleanup(), REDIS.stop(), REDIS.cleanup()))

CL = None  # the cluster, made by the first test


def cluster(ctx):
    global CL
    if CL is None:
        CL = stack.Cluster(ctx.model, n=2, redis=REDIS,
                           env={"AGENT_RUNNER_DAYTONA_API_URL": D.api_url,
                                "AGENT_RUNNER_DAYTONA_API_KEY": DAYTONA_KEY})
        atexit.register(lambda: (CL.stop(), CL.cleanup()))
        CL.start()
        # a failing test shows the members' logs (run.py prints its stack's log_text)
        ctx.stack.log_text = lambda: "\n".join(
            f"[{m.instance}] {line}" for m in CL.members
            for line in m.log_text().splitlines()[-40:])
    return CL


def A(cl):
    return cl.members[0]


def B(cl):
    return cl.members[1]


def convo(*texts):
    """user, assistant, user, ... ending with a user message."""
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": t}
            for i, t in enumerate(texts)]


def turn(target, p, s, texts, harness="scripted", **extra):
    status, recs = target.stream(dict({"harness": harness, "projectId": p, "sessionId": s,
                                       "messages": convo(*texts)}, **extra))
    assert status == 200, (status, recs)
    return result_of(recs), events_of(recs)


def owner_of(cl, key):
    """The member whose key this is in Redis (None when nobody owns it)."""
    v = REDIS.get(f"agent-runner:{cl.group}:owner:{key}")
    if not v:
        return None
    name = v.split()[0]
    return next(m for m in cl.members if m.instance == name)


def holders(cl, key):
    """The live members whose session table holds key."""
    return [m for m in cl.members if m.master and m.master.poll() is None and m.session(key)]


def metric(target, name):
    status, _, text = target.request("GET", "/metrics")
    assert status == 200, status
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def cleanup(cl, keys=()):
    """Kill every session the members hold (through the front), then check each member leaves
    nothing behind."""
    for k in keys:
        p, s = k.split(":", 1)
        status, _, _ = cl.front.request("POST", "/kill", {"projectId": p, "sessionId": s})
        assert status == 200, status
    for m in cl.members:
        if not m.master or m.master.poll() is not None:
            continue
        for sess in m.sessions()["sessions"]:
            m.ctl("kill", sess["key"])
        left = m.leaks()
        assert not left, (m.instance, left)


# ---- warm follow-ups through a round-robin balancer ------------------------------------------


def test_forty_follow_ups_through_round_robin_stay_warm_on_their_owner(ctx):
    cl = cluster(ctx)
    before = {m.instance: {p: metric(m, f'agent_runner_cluster_turns_total{{path="{p}"}}')
                           for p in ("local", "forwarded", "received")} for m in cl.members}
    sessions = [ids() for _ in range(8)]
    texts = {s: [] for s in sessions}
    for t in range(1, 6):  # 5 turns x 8 sessions, interleaved; each round starts one session
        # later, so round robin sends each session's turns to both members in turn
        for p, s in sessions[t:] + sessions[:t]:
            texts[(p, s)].append(f"turn {t} of {s}")
            res, _ = turn(cl.front, p, s, texts[(p, s)])
            assert res["ok"] is True, res
            # the agent process of the first turn answers every follow-up: warm
            assert res["output"] == f"echo[{t}]: turn {t} of {s}", res["output"]
            texts[(p, s)].append(res["output"])
    for p, s in sessions:
        key = f"{p}:{s}"
        held = holders(cl, key)
        assert len(held) == 1, (key, [m.instance for m in held])
        assert owner_of(cl, key) is held[0], key
        assert held[0].session(key)["turns"] == 5, held[0].session(key)
    after = {m.instance: {p: metric(m, f'agent_runner_cluster_turns_total{{path="{p}"}}')
                          for p in ("local", "forwarded", "received")} for m in cl.members}
    d = {p: sum(after[i][p] - before[i][p] for i in after) for p in ("local", "forwarded",
                                                                     "received")}
    # every turn ran once, on its owner; about half of them had to be forwarded there
    assert d["local"] + d["received"] == 40, d
    assert d["forwarded"] == d["received"] and d["forwarded"] >= 8, d
    for m in cl.members:
        status, _, ready = m.request("GET", "/readyz", token=False)
        assert status == 200 and ready["cluster"] == "ok", ready
    cleanup(cl, [f"{p}:{s}" for p, s in sessions])


def test_health_and_ctl_list_the_live_members(ctx):
    cl = cluster(ctx)
    status, _, doc = A(cl).request("GET", "/health", token=False)
    assert status == 200, status
    c = doc["cluster"]
    assert c["member"] == A(cl).instance and c["group"] == cl.group and c["state"] == "ok", c
    names = sorted(m["name"] for m in c["members"])
    assert names == sorted(m.instance for m in cl.members), names
    assert [m["self"] for m in c["members"] if m["name"] == A(cl).instance] == [True]
    assert {m["url"] for m in c["members"]} == {m.url for m in cl.members}
    env = dict(os.environ, **B(cl).env)
    out = stack.subprocess.run([os.path.join(stack.BIN, "agent-runner-ctl"), "cluster", "--json"],
                               env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["member"] == B(cl).instance, doc
    assert sorted(m["name"] for m in doc["members"]) == names, doc
    out = stack.subprocess.run([os.path.join(stack.BIN, "agent-runner-ctl"), "cluster"],
                               env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and A(cl).instance in out.stdout, out.stdout
    cleanup(cl)


# ---- one turn at a time, everywhere ------------------------------------------------------------


def test_two_concurrent_turns_of_one_session_on_two_hosts_one_runs_one_is_refused(ctx):
    cl = cluster(ctx)
    for first_to_owner in (True, False):
        p, s = ids()
        key = f"{p}:{s}"
        res1, _ = turn(A(cl), p, s, ["hello"])
        assert res1["output"] == "echo[1]: hello"
        owner = owner_of(cl, key)
        other = B(cl) if owner is A(cl) else A(cl)
        slow = script([{"chunk": "slow "}, {"sleep": 2500}, {"chunk": "done"}])
        first, second = (owner, other) if first_to_owner else (other, owner)
        out = {}

        def run_slow():
            out["slow"] = turn(first, p, s, ["hello", res1["output"], slow])

        t = threading.Thread(target=run_slow)
        t.start()
        wait_for(lambda: (owner.session(key) or {}).get("state") == "busy", timeout=30,
                 what="the slow turn running on the owner")
        res2, evs2 = turn(second, p, s, ["hello", res1["output"], "meanwhile"])
        t.join(60)
        slow_res, _ = out["slow"]
        assert slow_res["ok"] is True and slow_res["output"] == "slow done", slow_res
        assert res2["ok"] is False, res2
        errs = [e for e in evs2 if e["type"] == "error"]
        assert errs and errs[0]["code"] == "session_turn_in_use", evs2
        assert "already running a turn" in res2["error"], res2
        # the refused turn never reached the agent: its third prompt is the next one
        res3, _ = turn(second, p, s, ["hello", res1["output"], slow, "done", "next"])
        assert res3["output"] == "echo[3]: next", res3
        assert holders(cl, key) == [owner]
        cleanup(cl, [key])


def test_kill_and_cancel_sent_to_the_non_owner_act_on_the_owner(ctx):
    cl = cluster(ctx)
    p, s = ids()
    key = f"{p}:{s}"
    res1, _ = turn(A(cl), p, s, ["hello"])
    owner = owner_of(cl, key)
    other = B(cl) if owner is A(cl) else A(cl)
    fwd0 = metric(other, 'agent_runner_cluster_control_total{path="forwarded"}')
    rcv0 = metric(owner, 'agent_runner_cluster_control_total{path="received"}')
    keeper = owner.session(key)["keeperPid"]
    out = {}
    waiting = script([{"chunk": "waiting "}, {"wait_cancel": 30000}])

    def run_waiting():
        out["r"] = turn(owner, p, s, ["hello", res1["output"], waiting])

    t = threading.Thread(target=run_waiting)
    t.start()
    wait_for(lambda: (owner.session(key) or {}).get("state") == "busy", timeout=30,
             what="the turn running")
    status, _, body = other.request("POST", "/cancel", {"projectId": p, "sessionId": s})
    assert status == 202 and body == {"ok": True}, (status, body)
    t.join(30)
    res2, _ = out["r"]
    assert res2["stopReason"] == "cancelled", res2
    # /cancel keeps the environment warm, on the owner
    sess = wait_for(lambda: (owner.session(key) or {}).get("state") == "idle" and
                    owner.session(key), what="idle after the cancel")
    assert sess["keeperPid"] == keeper
    # an unknown session: the owner's 404 comes back through the non-owner
    status, _, body = other.request("POST", "/cancel", {"projectId": p, "sessionId": "nope"})
    assert status == 404 and body["error"] == "session not held here", (status, body)
    status, _, body = other.request("POST", "/kill", {"projectId": p, "sessionId": s})
    assert status == 200 and body == {"ok": True}, (status, body)
    assert owner.session(key) is None and other.session(key) is None
    assert metric(other, 'agent_runner_cluster_control_total{path="forwarded"}') >= fwd0 + 2
    assert metric(owner, 'agent_runner_cluster_control_total{path="received"}') >= rcv0 + 2
    # the owner's master releases the key once the environment is gone
    wait_for(lambda: owner_of(cl, key) is None, timeout=10, what="the owner key released")
    cleanup(cl)


def test_a_forwarded_request_is_never_forwarded_again(ctx):
    cl = cluster(ctx)
    p, s = ids()
    key = f"{p}:{s}"
    res1, _ = turn(A(cl), p, s, ["hello"])
    owner = owner_of(cl, key)
    other = B(cl) if owner is A(cl) else A(cl)
    # a request that says it was forwarded, at a member that does not own the session
    status, recs = other.stream({"harness": "scripted", "projectId": p, "sessionId": s,
                                 "messages": convo("hello", res1["output"], "again")},
                                headers={"X-Agent-Runner-Forwarded": "some-member"})
    assert status == 200, status
    res = result_of(recs)
    errs = [e for e in events_of(recs) if e["type"] == "error"]
    assert res["ok"] is False and errs[0]["code"] == "cluster_loop", recs
    assert owner.instance in res["error"] and "some-member" in res["error"], res["error"]
    assert other.instance in res["error"], res["error"]
    assert metric(other, 'agent_runner_cluster_refused_total{reason="loop"}') >= 1
    # the balancer drops a client's mark: through it the turn runs on the owner, warm
    status, recs = cl.front.stream({"harness": "scripted", "projectId": p, "sessionId": s,
                                    "messages": convo("hello", res1["output"], "again")},
                                   headers={"X-Agent-Runner-Forwarded": "some-member"})
    assert status == 200 and result_of(recs)["output"] == "echo[2]: again", recs
    # a one-shot (non-NDJSON) run through the non-owner: the owner's JSON answer, relayed
    status, headers, doc = other.request("POST", "/run", {
        "harness": "scripted", "projectId": p, "sessionId": s,
        "messages": convo("hello", res1["output"], "again", "echo[2]: again", "one shot")})
    assert status == 200 and doc["output"] == "echo[3]: one shot", (status, doc)
    assert headers["Content-Type"].startswith("application/json"), headers
    cleanup(cl, [key])


# ---- a turn's reattach goes to the member that ran it ----------------------------------------


def reattach(target, turn_id, after=0, project=None):
    """GET /turns/{id}/events at target: (status, headers, [record]) or the JSON error."""
    q = {"after": str(after)}
    if project:
        q["projectId"] = project
    c = target.connection(300)
    c.request("GET", f"/turns/{urllib.parse.quote(turn_id, safe='')}/events?"
              + urllib.parse.urlencode(q),
              headers={"accept": "application/x-ndjson",
                       "authorization": "Bearer " + stack.TOKEN})
    r = c.getresponse()
    headers = dict(r.getheaders())
    if r.status != 200:
        body = r.read()
        c.close()
        return r.status, headers, json.loads(body) if body else None
    out = [json.loads(line) for line in iter(r.readline, b"")]
    c.close()
    return r.status, headers, out


def test_a_reattach_sent_to_the_non_owner_follows_the_turn_on_its_owner(ctx):
    cl = cluster(ctx)
    p, s = ids()
    key = f"{p}:{s}"
    res1, _ = turn(A(cl), p, s, ["hello"])
    owner = owner_of(cl, key)
    other = B(cl) if owner is A(cl) else A(cl)
    fwd0 = metric(other, 'agent_runner_cluster_control_total{path="forwarded"}')
    rcv0 = metric(owner, 'agent_runner_cluster_control_total{path="received"}')
    tid = "turn-" + uuid.uuid4().hex[:12]
    slow = script([{"chunk": "slow "}, {"sleep": 2500}, {"chunk": "done"}])
    out = {}

    def run_slow():
        # sent to the non-owner: forwarded, its stream relayed with the owner's turn header
        c, r = other.open_stream({"harness": "scripted", "projectId": p, "sessionId": s,
                                  "turnId": tid, "messages": convo("hello", res1["output"], slow)})
        out["header"] = r.getheader("X-Agent-Runner-Turn")
        out["recs"] = [json.loads(line) for line in iter(r.readline, b"")]
        c.close()

    t = threading.Thread(target=run_slow)
    t.start()
    wait_for(lambda: (owner.session(key) or {}).get("state") == "busy", timeout=30,
             what="the slow turn running on the owner")
    # a follower at the non-owner while the turn runs: every record, live, to the result
    status, headers, live = reattach(other, tid, 0, p)
    t.join(60)
    assert out["header"] == tid, out
    recs = out["recs"]
    assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1)), recs
    assert recs[0]["turnId"] == tid and recs[-1]["result"]["output"] == "slow done", recs
    assert status == 200 and headers.get("X-Agent-Runner-Turn") == tid, (status, headers)
    assert live == recs, (live, recs)
    # after the turn, at either member: the records past the cursor
    for target in (other, owner):
        status, _, rest = reattach(target, tid, 2, p)
        assert status == 200 and rest == recs[2:], (target.instance, rest)
    # the owner's refusals come back through the non-owner: another project's turn, a cursor
    status, _, body = reattach(other, tid, 0, "another-project")
    assert status == 404 and "turn not found" in body["error"], (status, body)
    assert metric(other, 'agent_runner_cluster_control_total{path="forwarded"}') >= fwd0 + 3
    assert metric(owner, 'agent_runner_cluster_control_total{path="received"}') >= rcv0 + 3
    # a turn nobody recorded is looked for here: 404
    status, _, body = reattach(other, "turn-" + uuid.uuid4().hex[:12], 0, p)
    assert status == 404, (status, body)
    # a turn id minted by the owner (the request named none) is found through the non-owner
    c, r = other.open_stream({"harness": "scripted", "projectId": p, "sessionId": s,
                              "messages": convo("hello", res1["output"], slow, "slow done",
                                                "again")})
    minted = r.getheader("X-Agent-Runner-Turn")
    recs = [json.loads(line) for line in iter(r.readline, b"")]
    c.close()
    assert minted and recs[0]["turnId"] == minted, (minted, recs[:1])
    assert recs[-1]["result"]["output"] == "echo[3]: again", recs[-1]
    status, _, again = reattach(other, minted, 0, p)
    assert status == 200 and again == recs, again
    cleanup(cl, [key])


# ---- a member dies ------------------------------------------------------------------------------


def kill_master_and_workers(m):
    """kill -9 a member's master and workers (its keepers live on, as after a crash)."""
    workers = m.worker_pids()
    os.kill(m.master.pid, signal.SIGKILL)
    for w in workers:
        try:
            os.kill(w, signal.SIGKILL)
        except ProcessLookupError:
            pass
    m.master.wait()


def test_a_killed_member_s_sessions_go_cold_to_the_others_and_its_leftovers_are_cleaned(ctx):
    cl = cluster(ctx)
    c = cl.members[2] if len(cl.members) > 2 else cl.add()
    wait_for(lambda: len(A(cl).request("GET", "/health", token=False)[2]["cluster"]["members"])
             == 3, what="three members")
    sessions, outputs = [ids() for _ in range(3)], {}
    for p, s in sessions:  # C claims them (a new session is claimed where it lands)
        res, _ = turn(c, p, s, [f"hello {s}"])
        outputs[(p, s)] = res["output"]
        assert owner_of(cl, f"{p}:{s}") is c
    keepers = [c.session(f"{p}:{s}")["keeperPid"] for p, s in sessions]
    kill_master_and_workers(c)
    for i, (p, s) in enumerate(sessions):
        # within the TTL plus one turn: the request waits for C's claim to expire, then the
        # member it reached claims the session and starts it cold from the request's history
        target = cl.members[i % 2]
        res, _ = turn(target, p, s, [f"hello {s}", outputs[(p, s)], "after"])
        assert res["ok"] is True, res
        assert res["output"].startswith("echo[1]: Conversation so far:"), res["output"]
        key = f"{p}:{s}"
        assert owner_of(cl, key) is target
        assert [m.instance for m in holders(cl, key)] == [target.instance]
    # C's keepers kept their sandboxes while C was down; they serve nobody
    assert all(os.path.exists(f"/proc/{k}") for k in keepers)
    c.start_master()
    # C's master reconciles: each of its sessions is owned elsewhere now -> owner-moved
    for p, s in sessions:
        key = f"{p}:{s}"
        wait_for(lambda: c.session(key) is None, timeout=20, what="C's stale session killed")
        assert c.recent_reason(key) == "owner-moved", c.recent_reason(key)
    wait_for(lambda: not any(os.path.exists(f"/proc/{k}") for k in keepers), timeout=20,
             what="C's old keepers gone")
    assert metric(c, "agent_runner_cluster_conflicts_total") == len(sessions)
    # and the next turns are warm on their new owners
    for i, (p, s) in enumerate(sessions):
        res, _ = turn(cl.front, p, s, [f"hello {s}", outputs[(p, s)], "after",
                                       "echo[1]: Conversation so far:", "next"])
        assert res["output"] == "echo[2]: next", res
    cleanup(cl, [f"{p}:{s}" for p, s in sessions])


def test_a_daytona_session_whose_owner_died_is_resumed_on_the_same_sandbox(ctx):
    cl = cluster(ctx)
    c = cl.members[2] if len(cl.members) > 2 else cl.add()
    p, s = ids()
    key = f"{p}:{s}"
    req = harness_request(ctx, "codex", "Say hello", "sk-" + uuid.uuid4().hex,
                          sandbox="daytona", projectId=p, sessionId=s)
    res1, _ = turn_raw(c, req)
    assert res1["ok"] is True, res1
    assert owner_of(cl, key) is c
    live = [sb for sb in D.state()["sandboxes"] if sb["state"] == "started"]
    assert len(live) == 1, live
    sandbox = live[0]["id"]
    since = D.calls()[-1]["seq"]
    kill_master_and_workers(c)
    follow = dict(req, messages=req["messages"] + [
        {"role": "assistant", "content": res1["output"]}, {"role": "user", "content": "again"}])
    res2, evs2 = turn_raw(A(cl), follow)
    assert res2["ok"] is True, res2
    assert owner_of(cl, key) is A(cl)
    # kept harness state is per host: the new owner replays the conversation as text
    ready = next(e["data"] for e in evs2
                 if (e.get("data") or {}).get("phase") == "environment_ready")
    assert ready["resume"] == "replay", ready
    calls = [c_["route"] for c_ in D.calls(since)]
    assert "POST /api/sandbox" not in calls, calls  # resumed, not created
    assert metric(A(cl), 'agent_runner_sandbox_leases_total{outcome="resumed",reason="none"}') >= 1
    # the new owner names itself the sandbox's instance: C's sweep and release leave it alone
    sb = next(x for x in D.state()["sandboxes"] if x["id"] == sandbox)
    assert sb["labels"]["agent-runner-instance"].startswith(A(cl).instance + "@"), sb["labels"]
    # C comes back: its stale environment goes (owner-moved) and leaves the sandbox running
    c.start_master()
    wait_for(lambda: c.session(key) is None, timeout=30, what="C's stale session killed")
    assert c.recent_reason(key) == "owner-moved"
    assert next(x for x in D.state()["sandboxes"] if x["id"] == sandbox)["state"] == "started"
    follow2 = dict(follow, messages=follow["messages"] + [
        {"role": "assistant", "content": res2["output"]}, {"role": "user", "content": "more"}])
    res3, _ = turn_raw(cl.front, follow2)
    assert res3["ok"] is True, res3
    cleanup(cl, [key])
    D.wait_state(sandbox, ["gone"], timeout=30)


def turn_raw(target, req):
    status, recs = target.stream(req)
    assert status == 200, (status, recs)
    return result_of(recs), events_of(recs)


def test_a_new_session_at_a_full_member_is_claimed_by_the_least_loaded_one(ctx):
    cl = cluster(ctx)
    # C comes back with room for one session only
    c = cl.members[2]
    c.stop_master()
    c.extra_env["AGENT_RUNNER_CLUSTER_CAPACITY"] = "1"
    c.start_master()
    wait_for(lambda: len(A(cl).request("GET", "/health", token=False)[2]["cluster"]["members"])
             == 3, what="three members")
    p1, s1 = ids()
    turn(c, p1, s1, ["first"])
    assert owner_of(cl, f"{p1}:{s1}") is c
    wait_for(lambda: metric(c, "agent_runner_cluster_sessions_held") == 1, what="C's load")
    p2, s2 = ids()
    res, _ = turn(c, p2, s2, ["second"])
    assert res["output"] == "echo[1]: second", res
    assert owner_of(cl, f"{p2}:{s2}") in (A(cl), B(cl)), owner_of(cl, f"{p2}:{s2}")
    assert c.session(f"{p2}:{s2}") is None
    cleanup(cl, [f"{p1}:{s1}", f"{p2}:{s2}"])


# ---- Redis goes away -----------------------------------------------------------------------------


def test_redis_stopped_mid_run_then_back_reconciles_ownership(ctx):
    cl = cluster(ctx)
    live = [m for m in cl.members if m.master and m.master.poll() is None]
    p, s = ids()
    key = f"{p}:{s}"
    res1, _ = turn(A(cl), p, s, ["hello"])
    owner = owner_of(cl, key)
    REDIS.stop()
    try:
        for m in live:
            wait_for(lambda: m.request("GET", "/readyz", token=False)[2].get("cluster") ==
                     "degraded", timeout=10, what="degraded")
            status, _, ready = m.request("GET", "/readyz", token=False)
            assert status == 200, ready  # still serving
        # each host serves its own sessions and new ones locally
        res2, _ = turn(owner, p, s, ["hello", res1["output"], "without redis"])
        assert res2["output"] == "echo[2]: without redis", res2
        new = {}
        for m in live:
            pn, sn = ids()
            r, _ = turn(m, pn, sn, ["new"])
            assert r["output"] == "echo[1]: new", r
            new[m.instance] = f"{pn}:{sn}"
            assert m.session(new[m.instance])
    finally:
        REDIS.start()
    # back: every member re-asserts what it holds
    for m in live:
        wait_for(lambda: m.request("GET", "/readyz", token=False)[2].get("cluster") == "ok",
                 timeout=10, what="ok again")
    wait_for(lambda: owner_of(cl, key) is owner, timeout=10, what="the owner re-asserted")
    for m in live:
        wait_for(lambda: owner_of(cl, new[m.instance]) is m, timeout=10,
                 what="a new session re-asserted")
    # and forwarding works again: the non-owner sends the turn to the owner, still warm
    other = next(m for m in live if m is not owner)
    res3, _ = turn(other, p, s, ["hello", res1["output"], "without redis", res2["output"],
                                 "back"])
    assert res3["output"] == "echo[3]: back", res3
    cleanup(cl, [key] + list(new.values()))


def test_redis_over_tls(ctx):
    cl = cluster(ctx)
    env = dict(B(cl).env, AGENT_RUNNER_REDIS_URL=REDIS.url(tls=True),
               AGENT_RUNNER_REDIS_CA_FILE=REDIS.cert)
    out = stack.subprocess.run([os.path.join(stack.BIN, "agent-runner-ctl"), "cluster", "--json"],
                               env=dict(os.environ, **env), capture_output=True, text=True,
                               timeout=30)
    assert out.returncode == 0, out.stderr
    assert B(cl).instance in out.stdout
    # a certificate the client does not trust is refused
    env["AGENT_RUNNER_REDIS_CA_FILE"] = A(cl).cert
    out = stack.subprocess.run([os.path.join(stack.BIN, "agent-runner-ctl"), "cluster"],
                               env=dict(os.environ, **env), capture_output=True, text=True,
                               timeout=30)
    assert out.returncode == 1 and "TLS" in out.stderr, out.stderr


def test_the_members_leave_cleanly(ctx):
    cl = cluster(ctx)
    cl.stop()
    # a clean stop releases every owner key and the member records
    assert REDIS.keys(f"agent-runner:{cl.group}:owner:*") == []
    assert REDIS.keys(f"agent-runner:{cl.group}:member:*") == []
    for m in cl.members:
        assert m.master.returncode == 0, (m.instance, m.master.returncode)
