"""Chaos rounds against a real agent-runner stack (tests/integration/stack.py).

A steady load runs against the stack: client threads each loop warm follow-up turns on their own
scripted sessions (streaming NDJSON, keeping each session's transcript with the real assistant
outputs so the history fingerprints match), one more thread runs cold no-session turns. Every
round kills one thing with SIGKILL while that load runs: a random worker, a random keeper (from
`agent-runner-ctl sessions --json`) or the master (restarted at once with Stack.start_master(),
GET /readyz must answer 200 within READYZ_BUDGET_S). Then the load is paused and the invariants
are checked:

  - every request ended with a result line, or with a clean connection error / 5xx that a kill
    explains; none hung (socket timeouts), no stream ended cleanly without its result line;
    a stream a kill cut is reattached (GET /turns/{turnId}/events?after=<last seq>) and must
    end with its result, every seq once: the summary counts reattached turns, turns whose
    worker died before their prompt (not started: nothing ran, the client may send them
    again) and lost turns (must be 0);
  - sessions whose keeper was not killed and whose turns were not interrupted are still warm:
    the same keeperPid in ctl sessions, and the next turn's echo counter continues;
  - sessions whose keeper was killed come back cold (an echo[1] replay) and work;
  - `agent-runner-ctl check` says "consistent";
  - every keeper / bwrap / harness process of this stack is accounted for by a live slot, every
    environment folder belongs to a live slot, no slot names a dead keeper;
after the final SIGTERM: master exit status 0, no /dev/shm segment of the instance, nothing left
(Stack.leaks() and a scan of every process that touches the stack's temp dir or shm segment).

The RNG is seeded (and the seed printed): the kind of each round, the victims (by rank), the
kill times and the turn mix are reproducible; thread interleavings are not.
"""

import http.client
import json
import urllib.parse
import uuid
import os
import random
import re
import signal
import socket
import ssl
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import stack as stk  # noqa: E402

KINDS = ("worker", "keeper", "master")
READYZ_BUDGET_S = 2.0
REQUEST_TIMEOUT_S = 10.0       # a read that waits longer than this is a hung request
PAUSE_TIMEOUT_S = REQUEST_TIMEOUT_S + 30.0
SETTLE_S = 10.0                # how long the structural invariants may take to converge
TRANSCRIPT_ROTATE_BYTES = 48 * 1024
SLOW_TURN_P = 0.25             # share of session turns that sleep inside the agent
COLD_SLOW_P = 0.3
ECHO = re.compile(r"echo\[(\d+)\]: (.*)\Z", re.S)
REPLAY_PREFIX = "echo[1]: Conversation so far:"


def stack_options(sessions, workers=2, threads=16, log_level="info"):
    """Stack(...) keyword arguments for a chaos run with `sessions` warm sessions."""
    return {"workers": workers, "threads": threads,
            "env": {"AGENT_RUNNER_SESSION_POOL_MAX": str(max(sessions + 8, 16)),
                    "AGENT_RUNNER_LOG_LEVEL": log_level}}


# --- one HTTP turn -------------------------------------------------------------------------


class Outcome:
    """How one /run request ended.

    kind: result (a result record ended the stream) | conn (the connection failed, before or
    during the stream) | 5xx (an error status before the stream) | hung (a read timed out) |
    truncated (a clean end of stream without a result record) | bad (malformed stream) |
    http (another non-200 status)
    """

    def __init__(self):
        self.kind = None
        self.status = None
        self.result = None
        self.records = 0
        self.error = ""
        self.t0 = self.t1 = 0.0
        self.turn_id = None
        self.cut = False          # the stream was cut (a kill) after it started
        self.reattached = False   # ... and a reattach brought the rest and the result
        self.not_started = False  # ... the worker died before the prompt: nothing ran

    @property
    def ok(self):
        return self.kind == "result" and self.result.get("ok") is True

    def brief(self):
        if self.kind == "result":
            r = self.result
            txt = r.get("output") if r.get("ok") else r.get("error")
            return f"result ok={r.get('ok')} {str(txt)[:90]!r}"
        return f"{self.kind} status={self.status} {self.error[:120]}"


CONN_ERRORS = (ConnectionError, http.client.HTTPException, ssl.SSLError, OSError)


def get(st, path, timeout=2.0):
    c = st.connection(timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        data = r.read()
    finally:
        c.close()
    try:
        return r.status, json.loads(data)
    except ValueError:
        return r.status, data[:200]


def read_stream(r, lines, timeout):
    """Lines of an NDJSON response into lines: (None | "hung" | broke-description)."""
    while True:
        try:
            line = r.readline()
        except socket.timeout:
            return "hung"
        except CONN_ERRORS as e:
            return f"{type(e).__name__}: {e}"
        if not line:
            return None
        lines.append(line)


def parse_records(lines, broke):
    """(records, error): a torn last line of a broken stream is dropped."""
    recs = []
    for i, line in enumerate(lines):
        try:
            if not line.endswith(b"\n"):
                raise ValueError("record without its newline")
            recs.append(json.loads(line))
        except ValueError as e:
            if broke and i == len(lines) - 1:
                break  # the connection failed in the middle of this record
            return recs, f"record {i}: {e}: {line[:120]!r}"
    return recs, None


REATTACH_S = 30.0


def reattach(st, out, body, recs):
    """A stream cut after it started: follow the turn from its last seq to its result."""
    project = body.get("projectId")
    deadline = time.monotonic() + REATTACH_S
    while time.monotonic() < deadline:
        q = {"after": str(recs[-1]["seq"] if recs else 0)}
        if project:
            q["projectId"] = project
        path = f"/turns/{urllib.parse.quote(out.turn_id, safe='')}/events?" + \
            urllib.parse.urlencode(q)
        c = st.connection(REQUEST_TIMEOUT_S)
        lines, broke = [], None
        try:
            c.request("GET", path, headers={"authorization": "Bearer " + stk.TOKEN})
            r = c.getresponse()
            if r.status == 404 and not recs:
                out.not_started = True  # the worker died before the turn had a journal
                return
            if r.status != 200:
                r.read()
                raise ConnectionError(f"reattach status {r.status}")
            broke = read_stream(r, lines, REQUEST_TIMEOUT_S)
        except CONN_ERRORS:
            time.sleep(0.1)  # the runner is restarting: try again
            continue
        finally:
            c.close()
        more, err = parse_records(lines, broke)
        if err:
            out.kind, out.error = "bad", "reattach: " + err
            return
        recs += more
        if recs and recs[-1].get("kind") == "result":
            out.reattached = True
            return
    out.error += f"; reattach gave no result within {REATTACH_S:.0f}s"


def http_turn(st, body, timeout=REQUEST_TIMEOUT_S):
    out = Outcome()
    out.t0 = time.monotonic()
    body = dict(body)
    body.setdefault("turnId", "chaos-" + uuid.uuid4().hex[:16])
    out.turn_id = body["turnId"]
    h = {"content-type": "application/json", "accept": "application/x-ndjson",
         "authorization": "Bearer " + stk.TOKEN}
    c = st.connection(timeout)
    lines, broke = [], None
    try:
        try:
            c.request("POST", "/run", body=json.dumps(body), headers=h)
            r = c.getresponse()
        except socket.timeout as e:
            out.kind, out.error = "hung", f"no response head in {timeout:.0f}s ({e})"
            return out
        except CONN_ERRORS as e:
            out.kind, out.error = "conn", f"{type(e).__name__}: {e}"
            return out
        out.status = r.status
        if r.status != 200:
            try:
                data = r.read()
            except socket.timeout:
                out.kind, out.error = "hung", f"status {r.status}, body never ended"
                return out
            except CONN_ERRORS:
                data = b""
            out.kind = "5xx" if 500 <= r.status < 600 else "http"
            out.error = data[:200].decode(errors="replace")
            return out
        broke = read_stream(r, lines, timeout)
        if broke == "hung":
            out.kind = "hung"
            out.error = (f"stream stalled {timeout:.0f}s after {len(lines)} records"
                         f" (last: {lines[-1][:100]!r})" if lines else "")
            return out
    finally:
        c.close()
        out.t1 = time.monotonic()
    recs, err = parse_records(lines, broke)
    if err:
        out.kind, out.error = "bad", err
        return out
    if not recs or recs[-1].get("kind") != "result":
        out.cut = True
        reattach(st, out, body, recs)
        out.t1 = time.monotonic()
        if out.kind == "bad":
            return out
    out.records = len(recs)
    results = [i for i, rec in enumerate(recs) if rec.get("kind") == "result"]
    if len(results) > 1 or (results and results[0] != len(recs) - 1):
        out.kind, out.error = "bad", f"result records at {results} of {len(recs)}"
        return out
    if [rec.get("seq") for rec in recs] != list(range(1, len(recs) + 1)):
        out.kind, out.error = "bad", f"seqs {[rec.get('seq') for rec in recs]}"
        return out
    if results:
        out.kind, out.result = "result", recs[-1]["result"]
        if out.reattached and not out.result.get("ok") and \
                "send the turn again" in str(out.result.get("error")):
            out.not_started, out.reattached = True, False
            out.kind, out.error = "conn", "the worker died before the prompt: not started"
        return out
    if broke:
        out.kind, out.error = "conn", f"stream cut after {len(recs)} records ({broke})"
        return out
    out.kind = "truncated"
    out.error = f"clean end of stream after {len(recs)} records, no result record"
    return out


# --- processes -----------------------------------------------------------------------------


def kids_of(table):
    kids = {}
    for pid, (ppid, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    return kids


def subtree(roots, kids):
    out, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def touches(pid, tmp, shm):
    """Does the process hold a file under tmp or map the shm segment (keepers do both)?"""
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith(tmp + "/") or link == shm:
                return True
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/maps") as f:
            return shm in f.read()
    except OSError:
        return False


# --- sessions ------------------------------------------------------------------------------


class Session:
    def __init__(self, project, index):
        self.project = project
        self.index = index
        self.gen = 0
        self.sid = f"s{index:02d}-g0"
        self.mu = threading.Lock()
        self.transcript = []
        self.k = None            # prompts answered by the current agent process, if known
        self.expect = "new"      # warm | cold | any | new: what the next turn must show
        self.epoch = 0           # bumped when this session's keeper is killed
        self.seq = 0
        self.baseline_keeper = 0  # keeperPid at the last round check
        self.clean = True        # only clean warm turns since the baseline
        self.killed = []         # keeper pids killed this round
        self.await_cold = None   # a killed keeper whose cold comeback is still to be seen
        self.interrupted = 0     # turns cut by a kill this round
        self.came_back = []      # how turns after an interruption/kill came back this round

    @property
    def key(self):
        return f"{self.project}:{self.sid}"

    def rotate(self):
        self.gen += 1
        self.sid = f"s{self.index:02d}-g{self.gen}"
        self.transcript = []
        self.k = None
        self.expect = "new"
        self.await_cold = None


# --- the run -------------------------------------------------------------------------------


class Chaos:
    def __init__(self, rounds=30, seconds=3.0, sessions=12, seed=None, clients=4,
                 schedule="random", workers=2, threads=16, stack=None, out=None):
        self.rounds = rounds
        self.seconds = seconds
        self.nsessions = sessions
        self.seed = seed if seed is not None else int.from_bytes(os.urandom(4), "big")
        self.rng = random.Random(self.seed)
        self.nclients = max(1, min(clients, sessions))
        self.schedule = schedule
        self.workers = workers
        self.threads = threads
        self.st = stack
        self.own_stack = stack is None
        self.out = out or sys.stdout
        self.t_start = time.monotonic()
        self.mu = threading.Lock()
        self.sessions = []
        self.violations = []     # (round, what)
        self.notes = []          # (round, what): noteworthy, not failures
        self.windows = []        # [kind, t_kill, t_end or None]
        self.readyz = []         # (round, restart->ready s, kill->ready s)
        self.round = 0
        self.totals = {}
        self.round_counts = {}
        self.req_id = 0
        self.go = threading.Event()
        self.cv = threading.Condition()
        self.inflight = {}       # request id -> (client, key, t0)
        self.stopping = False
        self.threads_ = []
        self.reqlog = None
        self.survived = 0
        self.known = set()       # structural problems already reported

    # -- reporting --

    def say(self, msg):
        print(msg, file=self.out, flush=True)

    def violation(self, what):
        cat = classify(what)
        with self.mu:
            self.violations.append((self.round, cat, what))
            n = sum(1 for r, c, _ in self.violations if r == self.round and c == cat)
        if n <= 3:
            self.say(f"    VIOLATION [{cat}]: {what}")
        elif n == 4:
            self.say(f"    VIOLATION [{cat}]: more of these this round (counted in the summary)")

    def note(self, what):
        with self.mu:
            self.notes.append((self.round, what))

    def count(self, name, n=1):
        with self.mu:
            self.totals[name] = self.totals.get(name, 0) + n
            self.round_counts[name] = self.round_counts.get(name, 0) + n

    def now(self):
        return time.monotonic() - self.t_start

    def log_request(self, rid, who, key, out, extra=""):
        if not self.reqlog:
            return
        rec = {"id": rid, "round": self.round, "who": who, "key": key,
               "t0": round(out.t0 - self.t_start, 3), "t1": round(out.t1 - self.t_start, 3),
               "wall": time.strftime("%H:%M:%S", time.gmtime()), "kind": out.kind,
               "status": out.status, "detail": out.brief(), "note": extra}
        with self.mu:
            self.reqlog.write(json.dumps(rec) + "\n")

    def event(self, what, **kw):
        rec = {"round": self.round, "t": round(self.now(), 3),
               "wall": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()), "what": what}
        rec.update(kw)
        with self.mu, open(os.path.join(self.st.tmp, "chaos-events.ndjson"), "a") as f:
            f.write(json.dumps(rec) + "\n")

    # -- attribution of errors to kills --

    def explained(self, out, kinds):
        for kind, t0, t1 in list(self.windows):
            if kind not in kinds:
                continue
            if out.t0 <= (t1 if t1 is not None else float("inf")) and out.t1 >= t0:
                return True
        return False

    # -- the load --

    def _enter(self, who, key):
        with self.cv:
            if not self.go.is_set() or self.stopping:
                return None
            self.req_id += 1
            self.inflight[self.req_id] = (who, key, time.monotonic())
            return self.req_id

    def _leave(self, rid):
        with self.cv:
            self.inflight.pop(rid, None)
            self.cv.notify_all()

    def pause(self):
        with self.cv:
            self.go.clear()
            done = self.cv.wait_for(lambda: not self.inflight, timeout=PAUSE_TIMEOUT_S)
            left = dict(self.inflight)
        if not done:
            for rid, (who, key, t0) in left.items():
                self.violation(f"request {rid} ({who} {key or 'no session'}) still running "
                               f"{time.monotonic() - t0:.1f}s into the pause")

    def resume(self):
        self.go.set()

    def session_client(self, idx, mine):
        rng = random.Random(self.seed * 1000 + idx)
        i = 0
        while not self.stopping:
            if not self.go.wait(0.2):
                continue
            sess = mine[i % len(mine)]
            i += 1
            rid = self._enter(f"client{idx}", sess.key)
            if rid is None:
                continue
            out = None
            try:
                out, _ = self.session_turn(sess, rng, rid=rid, who=f"client{idx}")
            except Exception:
                self.violation(f"client{idx} crashed: {traceback.format_exc()}")
            finally:
                self._leave(rid)
            time.sleep(rng.random() * 0.01 + (0 if out is not None and out.kind == "result"
                                               else 0.05))

    def cold_client(self):
        rng = random.Random(self.seed * 1000 + 999)
        n = 0
        while not self.stopping:
            if not self.go.wait(0.2):
                continue
            rid = self._enter("cold", "")
            if rid is None:
                continue
            n += 1
            ok = False
            try:
                ok = self.cold_turn(rng, n, rid)
            except Exception:
                self.violation(f"cold client crashed: {traceback.format_exc()}")
            finally:
                self._leave(rid)
            time.sleep(rng.random() * 0.02 + (0 if ok else 0.05))

    def cold_turn(self, rng, n, rid):
        if rng.random() < COLD_SLOW_P:
            tag = f"cold{n}"
            text = "SCRIPT:" + json.dumps([{"chunk": f"{tag} "},
                                           {"sleep": rng.randint(50, 300)}, {"chunk": "done"}])
            want = f"{tag} done"
        else:
            text = f"cold turn {n}"
            want = f"echo[1]: {text}"
        out = http_turn(self.st, {"harness": "scripted",
                                  "messages": [{"role": "user", "content": text}]})
        self.count("requests")
        self.count("cold_requests")
        note = self.judge_transport(out, "cold", "")
        if out.kind == "result":
            if out.ok and out.result.get("output") != want:
                self.violation(f"cold turn {n}: expected {want!r}, got "
                               f"{out.result.get('output')!r:.200}")
            elif not out.ok and not self.explained(out, ("keeper",)):
                self.violation(f"cold turn {n}: ok:false without a keeper kill: "
                               f"{out.result.get('error')!r:.200}")
        self.log_request(rid, "cold", "", out, note)
        return out.kind == "result"

    def judge_transport(self, out, who, key):
        """Count the outcome; flag the ones no kill can excuse. Returns a note."""
        if out.cut:
            self.count("cut")
            if out.reattached:
                self.count("reattached")
            elif out.not_started:
                self.count("not_started")
            else:
                self.count("lost")
                self.violation(f"{who} {key or 'no session'}: lost turn {out.turn_id}: its "
                               f"stream was cut and the reattach did not finish it "
                               f"({out.kind} {out.error[:200]})")
        if out.kind == "result":
            self.count("ok" if out.ok else "ok_false")
            if out.reattached and not out.ok and "reached again" in str(out.result.get("error")):
                self.count("lost")
                self.violation(f"{who} {key or 'no session'}: lost turn {out.turn_id}: "
                               f"{out.result.get('error')}")
            return "reattached" if out.reattached else ""
        # A stream that ends without its result record is how a lost connection to the runner
        # reaches the client through nginx (which ends an unbuffered FastCGI response cleanly
        # when the worker process dies): the contract makes it a transport error, so it counts
        # as a connection error - when a worker or master kill explains it.
        if out.kind in ("conn", "5xx", "truncated"):
            self.count({"conn": "conn_errors", "5xx": "http_5xx"}.get(out.kind, "truncated"))
            if not self.explained(out, ("worker", "master")):
                self.violation(f"{who} {key or 'no session'}: {out.kind} that no worker/master "
                               f"kill explains: {out.error}")
                return "unexplained"
            return "explained"
        self.count(out.kind)
        extra = ""
        if key and out.kind == "hung":
            try:
                s = self.st.session(key)
            except (AssertionError, ValueError):
                s = None
            if s:
                extra = (f" [slot: state {s['state']}, keeper {s['keeperPid']}, owner "
                         f"{s['ownerPid']} {'alive' if pid_alive(s['ownerPid']) else 'dead'}]")
        self.violation(f"{who} {key or 'no session'}: {out.kind}"
                       f"{' ' + str(out.status) if out.kind == 'http' else ''} request "
                       f"(t={out.t0 - self.t_start:.2f}s..{out.t1 - self.t_start:.2f}s): "
                       f"{out.error}{extra}")
        return "violation"

    def master_alive(self):
        return self.st.master is not None and self.st.master.poll() is None

    def session_turn(self, sess, rng, rid=None, who="probe", slow=None):
        """One follow-up turn on sess; checks its output against what the session must show."""
        with sess.mu:
            sess.seq += 1
            n = sess.seq
            if slow is None:
                slow = rng.random() < SLOW_TURN_P
            if slow:
                tag = f"{sess.sid}.{n}"
                text = "SCRIPT:" + json.dumps([{"chunk": f"slow {tag} "},
                                               {"sleep": rng.randint(50, 300)},
                                               {"chunk": "done"}])
                want_warm = f"slow {tag} done"
            else:
                text = f"{sess.sid} turn {n}"
                want_warm = None
            body = {"harness": "scripted", "projectId": sess.project, "sessionId": sess.sid,
                    "messages": sess.transcript + [{"role": "user", "content": text}]}
            snap = (sess.epoch, sess.expect, sess.k, sess.key)
        out = http_turn(self.st, body)
        self.count("requests")
        if who == "probe":
            self.count("probes")
        note = self.judge_transport(out, who, snap[3])
        with sess.mu:
            how = self.settle_turn(sess, snap, out, text, want_warm, who)
        self.log_request(rid or 0, who, snap[3], out, (note + " " + how).strip())
        return out, how

    def settle_turn(self, sess, snap, out, text, want_warm, who):
        epoch0, expect0, k0, key = snap
        overlapped = sess.epoch != epoch0   # its keeper was killed while this turn ran
        strict = who == "probe"             # nothing is being killed during a probe
        if out.kind != "result":
            sess.clean = False
            sess.interrupted += 1
            if sess.expect != "cold":
                sess.expect = "any"
            return f"interrupted ({out.kind})"
        res = out.result
        if not res.get("ok"):
            sess.clean = False
            sess.interrupted += 1
            if strict or not overlapped:
                self.violation(f"{who} {key}: ok:false without a keeper kill: "
                               f"{res.get('error')!r:.300}")
            sess.expect = "cold"   # a failed turn's environment is destroyed
            return "failed turn"
        output = res.get("output") or ""
        m = ECHO.match(output)
        if output.startswith(REPLAY_PREFIX):
            how = "cold"
            if not output.endswith("The user now says:\n" + text):
                self.violation(f"{who} {key}: the cold replay does not end with the new text "
                               f"({output[-120:]!r})")
            if expect0 == "warm" and not overlapped:
                sess.came_back.append("cold")
                self.violation(f"{who} {key}: warm session lost (expected echo[{(k0 or 0) + 1}],"
                               f" got a cold replay; keeper was not killed)")
            elif expect0 == "new":
                self.violation(f"{who} {key}: first turn replayed a history it does not have")
            k = 1
        elif (want_warm is not None and output == want_warm) or \
                (want_warm is None and m and m.group(2) == text):
            how = "warm"
            k = int(m.group(1)) if m else None
            if expect0 == "new":
                if k not in (None, 1):
                    self.violation(f"{who} {key}: a new session answered echo[{k}]")
                k = 1 if k is None else k
            elif k == 1 or (k is not None and k0 is not None and k <= k0):
                self.violation(f"{who} {key}: history lost: echo[{k}] without a replay "
                               f"(previous echo[{k0}]): {output[:120]!r}")
            elif expect0 == "cold" and not overlapped:
                self.violation(f"{who} {key}: expected a cold replay after its keeper was killed"
                               f", got a warm answer {output[:80]!r}")
            elif expect0 == "warm" and k is not None and k0 is not None and k != k0 + 1:
                self.violation(f"{who} {key}: echo counter jumped from {k0} to {k}")
            if k is None:
                k = k0 + 1 if (k0 is not None and expect0 == "warm") else None
        else:
            self.violation(f"{who} {key}: unexpected output {output[:160]!r} for {text[:80]!r}")
            sess.clean = False
            sess.expect = "any"
            return "unexpected"
        sess.transcript += [{"role": "user", "content": text},
                            {"role": "assistant", "content": output}]
        sess.k = k
        if expect0 in ("cold", "any") and not overlapped:
            sess.came_back.append(how)
        if how == "cold":
            sess.await_cold = None   # a new agent process replayed the history
        if how != "warm" or expect0 != "warm" or overlapped:
            sess.clean = False
        if overlapped:
            # a warm answer came from the keeper that was killed after it: the next turn must
            # be cold; a cold one may have started the keeper that was killed, or not
            sess.expect = "cold" if how == "warm" else "any"
        else:
            sess.expect = "warm"
        self.count("warm_turns" if how == "warm" else "cold_replays")
        return how

    # -- kills --

    def kill_worker(self):
        pids = sorted(self.st.worker_pids())
        victim = self.rng.choice(pids)
        t = time.monotonic()
        # the window opens before the kill: a client that sees its stream cut must find it
        win = ["worker", t, None]
        self.windows.append(win)
        os.kill(victim, signal.SIGKILL)
        self.event("kill worker", pid=victim)
        try:
            stk.wait_for(lambda: len(self.st.worker_pids()) == self.workers and
                         victim not in self.st.worker_pids(), timeout=5, what="respawn")
            desc = f"kill -9 worker {victim} (respawned in {time.monotonic() - t:.2f}s)"
        except AssertionError:
            self.violation(f"worker {victim} was not respawned within 5s "
                           f"(workers now {self.st.worker_pids()})")
            desc = f"kill -9 worker {victim} (NOT respawned)"
        win[2] = time.monotonic() + 0.5
        return desc

    def kill_keeper(self):
        snap = self.st.sessions()["sessions"]
        cands = sorted((s for s in snap if s["keeperPid"] > 0), key=lambda s: (s["key"], s["slot"]))
        if not cands:
            return "kill -9 keeper: no keeper listed"
        pick = self.rng.choice(cands)
        pid = pick["keeperPid"]
        shm = self.shm_path()
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                is_keeper = f.read().startswith(b"agent-runner-keeper")
        except OSError:
            is_keeper = False
        if not is_keeper or not touches(pid, self.st.tmp, shm):
            return f"kill -9 keeper {pid}: gone before the kill ({pick['key'] or 'per-turn'})"
        t = time.monotonic()
        win = ["keeper", t, None]  # open before the kill, as for a worker
        self.windows.append(win)
        os.kill(pid, signal.SIGKILL)
        win[2] = time.monotonic() + 1.0
        sess = next((s for s in self.sessions if s.key == pick["key"]), None)
        if sess:
            with sess.mu:
                sess.epoch += 1
                sess.expect = "cold"
                sess.killed.append(pid)
                sess.await_cold = pid
                sess.clean = False
        self.event("kill keeper", pid=pid, key=pick["key"], state=pick["state"])
        return (f"kill -9 keeper {pid} (session {pick['key'] or '<per-turn run>'}, "
                f"slot {pick['state']})")

    def kill_master(self):
        old = self.st.master
        t_kill = time.monotonic()
        win = ["master", t_kill, None]
        self.windows.append(win)
        old.kill()
        old.wait()
        self.event("kill master", pid=old.pid)
        t0 = time.monotonic()
        try:
            self.st.start_master()
        except AssertionError as e:
            self.violation(f"the master did not come back: {e}")
            raise
        t_started = time.monotonic()
        ready = None
        deadline = t0 + 15
        last = None
        attempts = []
        while time.monotonic() < deadline:
            ta = time.monotonic()
            try:
                last = get(self.st, "/readyz")
            except CONN_ERRORS as e:
                last = repr(e)
            attempts.append((round(ta - t0, 3), round(time.monotonic() - ta, 3), str(last)[:80]))
            if last[0] == 200:
                ready = time.monotonic()
                break
            time.sleep(0.01)
        self.event("readyz attempts", attempts=attempts)
        win[2] = (ready or time.monotonic()) + 0.5
        if ready is None:
            self.violation(f"GET /readyz not 200 within 15s of the restart (last: {last})")
            return f"kill -9 master {old.pid}, restart: readyz NEVER 200"
        r_s, d_s = ready - t0, ready - t_kill
        self.readyz.append((self.round, r_s, d_s))
        self.event("master ready", pid=self.st.master.pid, restart_to_ready=round(r_s, 3))
        if r_s > READYZ_BUDGET_S:
            self.violation(f"readyz took {r_s:.3f}s after the restart (budget "
                           f"{READYZ_BUDGET_S}s); attempts (start s, took s, answer): "
                           f"{attempts[:3]}{' ...' if len(attempts) > 3 else ''}")
        return (f"kill -9 master {old.pid} -> new master {self.st.master.pid}: readyz 200 "
                f"{r_s:.3f}s after restart (start_master {t_started - t0:.3f}s, "
                f"downtime {d_s:.3f}s)")

    # -- invariants --

    def shm_path(self):
        return "/dev/shm/agent-runner." + self.st.env["AGENT_RUNNER_INSTANCE"]

    def structure(self):
        """Slot table, processes and folders; returns (problems, summary)."""
        problems = []
        chk = self.st.ctl("check", check=False)
        if chk.returncode != 0 or chk.stdout.strip() != "consistent":
            problems.append((("check",), f"ctl check: {chk.stdout.strip()} {chk.stderr.strip()}"))
        snap = self.st.sessions()["sessions"]
        table = stk.proc_states()
        kids = kids_of(table)
        shm = self.shm_path()
        me = os.getpid()
        own = set()
        for pid, (ppid, state, cmd) in table.items():
            if pid == me or state in ("Z", "X"):
                continue
            if self.st.tmp in cmd or touches(pid, self.st.tmp, shm):
                own.add(pid)
        own |= {p for p in subtree(own, kids) if table[p][1] not in ("Z", "X")}
        allowed = set()
        master = self.st.master.pid if self.master_alive() else None
        if master:
            allowed.add(master)
            allowed |= {p for p in kids.get(master, []) if "agent-runnerd" in table[p][2]}
        if self.st.nginx and self.st.nginx.poll() is None:
            allowed.add(self.st.nginx.pid)
            allowed |= set(kids.get(self.st.nginx.pid, []))
        keepers = {}
        for s in snap:
            kp = s["keeperPid"]
            if kp <= 0:
                if s["state"] != "starting":
                    problems.append((("slot", s["slot"], s["generation"]),
                                     f"slot {s['slot']} ({s['key'] or 'per-turn'}, {s['state']})"
                                     f" has no keeper"))
                continue
            keepers[kp] = s
            if kp not in table or table[kp][1] in ("Z", "X"):
                problems.append((("slot", s["slot"], s["generation"]),
                                 f"slot {s['slot']} ({s['key'] or 'per-turn'}, {s['state']}) "
                                 f"names dead keeper {kp}"))
                continue
            if not table[kp][2].startswith("agent-runner-keeper"):
                problems.append((("slot", s["slot"], s["generation"]),
                                 f"slot {s['slot']} names pid {kp} which is {table[kp][2]!r:.60}"))
            allowed.add(kp)
            allowed |= subtree([kp], kids)
            if not os.path.isdir(s["envDir"]):
                problems.append((("envdir", s["envDir"]),
                                 f"slot {s['slot']} ({s['key'] or 'per-turn'}) env folder "
                                 f"{s['envDir']} is missing"))
        for pid in sorted(own - allowed):
            ppid, state, cmd = table[pid]
            problems.append((("proc", pid, cmd[:40]),
                             f"unaccounted process {pid} (ppid {ppid}, {state}): {cmd[:110]}"))
        envs = os.path.join(self.st.state, "envs")
        live_dirs = {s["envDir"] for s in snap}
        for d in sorted(os.listdir(envs) if os.path.isdir(envs) else []):
            if os.path.join(envs, d) not in live_dirs:
                problems.append((("env", d), f"env folder {d} without a live slot"))
        try:
            stats = json.loads(self.st.ctl("stats", "--json").stdout)
            inflight = stats["counters"].get("runs_in_flight")
        except (AssertionError, ValueError, KeyError) as e:
            inflight = f"unreadable ({e})"
        if inflight != 0:
            problems.append((("inflight", self.round),
                             f"ctl stats runs_in_flight is {inflight} with no request running"))
        busy_orphans = [s for s in snap if s["state"] in ("busy", "starting") and
                        not pid_alive(s["ownerPid"])]
        nproc = len(own)
        summary = (f"ctl check {chk.stdout.strip() or '?'}; {nproc} stack processes, "
                   f"{nproc - len(own - allowed)} accounted ({len(keepers)} keepers in "
                   f"{len(snap)} slots); {len(live_dirs)} env folders")
        return problems, summary, busy_orphans, snap

    def settle_structure(self, timeout=SETTLE_S, label=None):
        """Wait for the structural invariants; each lasting problem is reported once."""
        deadline = time.monotonic() + timeout
        t0 = time.monotonic()
        while True:
            problems, summary, orphans, snap = self.structure()
            new = [(k, m) for k, m in problems if k not in self.known]
            if not new or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        took = time.monotonic() - t0
        for k, m in new:
            self.known.add(k)
            self.violation(f"{label or f'after {took:.1f}s'}: {m}")
        self.reap_orphan_workers(new)
        if took > 2:
            summary += f" (converged in {took:.1f}s)"
        return summary, snap, orphans

    def check_round(self):
        """With the load paused: everything the round must leave true."""
        summary, snap, orphans = self.settle_structure()
        lines = [summary]
        if orphans:
            lines.append(f"{len(orphans)} busy/starting slot(s) of dead workers: " +
                         ", ".join(f"{s['key'] or 'per-turn'} keeper {s['keeperPid']}"
                                   for s in orphans))
        for s in orphans:
            k = ("orphan", s["slot"], s["generation"])
            if k not in self.known:
                self.known.add(k)
                self.note(f"slot {s['slot']} ({s['key'] or 'per-turn run'}) stays {s['state']} "
                          f"for dead worker {s['ownerPid']}, its keeper {s['keeperPid']} alive "
                          f"(it lives until the keeper's idle/attach deadline)")
        by_key = {s["key"]: s for s in snap}
        kept = kept_ok = 0
        for sess in self.sessions:
            if not sess.clean:
                continue
            kept += 1
            cur = by_key.get(sess.key)
            if cur is None:
                self.violation(f"{sess.key}: only clean warm turns, but its slot is gone")
            elif cur["keeperPid"] != sess.baseline_keeper:
                self.violation(f"{sess.key}: only clean warm turns, but keeperPid "
                               f"{sess.baseline_keeper} -> {cur['keeperPid']}")
            else:
                kept_ok += 1
        # the next turn of every session, nothing being killed
        probe_rng = random.Random(self.seed * 7919 + self.round)
        res = {"warm": 0, "cold": 0, "other": 0}
        killed = back_cold = 0
        interrupted = {"warm": 0, "cold": 0}
        for sess in self.sessions:
            expect = sess.expect
            had_kill = bool(sess.killed)
            out, how = self.session_turn(sess, probe_rng, who="probe", slow=False)
            res[how if how in res else "other"] += 1
            if had_kill:
                killed += 1
                if sess.await_cold is None and out.ok:
                    back_cold += 1
            elif expect == "any" and how in interrupted:
                interrupted[how] += 1
            if sess.await_cold is not None:
                self.violation(f"{sess.key}: keeper {sess.await_cold} was killed but no cold "
                               f"replay was seen since")
        hit = [s for s in self.sessions if s.interrupted and not s.killed]
        if hit:
            self.note(f"{len(hit)} session(s) had {sum(s.interrupted for s in hit)} interrupted "
                      f"turn(s) without a keeper kill; came back: " + ", ".join(
                          f"{s.sid} {'/'.join(sorted(set(s.came_back))) or 'not yet'}"
                          for s in hit))
        lines.append(f"clean sessions kept their keeper {kept_ok}/{kept}; probes: warm "
                     f"{res['warm']}, cold {res['cold']}, other {res['other']}; killed-keeper "
                     f"sessions back cold {back_cold}/{killed}; interrupted sessions came back "
                     f"warm {interrupted['warm']} / cold {interrupted['cold']}")
        self.rotate_long_sessions()
        # the new baseline
        snap = self.st.sessions()["sessions"]
        by_key = {s["key"]: s for s in snap}
        seen = {}
        for sess in self.sessions:
            cur = by_key.get(sess.key)
            if cur is None or cur["state"] != "idle" or cur["keeperPid"] <= 0:
                self.violation(f"{sess.key}: not parked idle after its probe: {cur}")
                sess.baseline_keeper = 0
            else:
                sess.baseline_keeper = cur["keeperPid"]
                if cur["keeperPid"] in seen:
                    self.violation(f"{sess.key} and {seen[cur['keeperPid']]} share keeper "
                                   f"{cur['keeperPid']}")
                seen[cur["keeperPid"]] = sess.key
            sess.clean = sess.expect == "warm"
            sess.killed = []
            sess.interrupted = 0
            sess.came_back = []
        self.settle_structure(timeout=3, label="after the probes")
        return lines

    def reap_orphan_workers(self, problems):
        """Workers of a dead master that never exit spin in libfcgi at 100% CPU: once reported,
        SIGKILL them so they do not skew the rounds that follow."""
        for k, _ in problems:
            if k[0] != "proc" or "agent-runnerd" not in k[2]:
                continue
            pid = k[1]
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            if self.master_alive() and ppid == self.st.master.pid:
                continue
            if touches(pid, self.st.tmp, self.shm_path()):
                os.kill(pid, signal.SIGKILL)
                self.note(f"SIGKILLed orphaned worker {pid} of a dead master after reporting it")

    def rotate_long_sessions(self):
        for sess in self.sessions:
            if len(json.dumps(sess.transcript)) < TRANSCRIPT_ROTATE_BYTES:
                continue
            old = sess.key
            status, _, body = self.st.request("POST", "/kill", {"projectId": sess.project,
                                                                "sessionId": sess.sid})
            if status != 200:
                self.violation(f"POST /kill {old}: {status} {body}")
            sess.rotate()
            self.create_session(sess)
            self.count("rotations")

    def create_session(self, sess):
        out, how = self.session_turn(sess, self.rng, who="create", slow=False)
        if not out.ok or how != "warm" or sess.k != 1:
            self.violation(f"creating {sess.key}: {out.brief()} ({how})")

    # -- the whole run --

    def start(self):
        if self.own_stack:
            self.st = stk.Stack(**stack_options(self.nsessions, self.workers, self.threads))
            self.st.start()
        self.reqlog = open(os.path.join(self.st.tmp, "chaos-requests.ndjson"), "a")
        project = f"chaos-{self.seed}"
        self.sessions = [Session(project, i) for i in range(self.nsessions)]
        for sess in self.sessions:
            self.create_session(sess)
        snap = {s["key"]: s for s in self.st.sessions()["sessions"]}
        for sess in self.sessions:
            sess.baseline_keeper = snap.get(sess.key, {}).get("keeperPid", 0)
            sess.clean = True
        groups = [self.sessions[i::self.nclients] for i in range(self.nclients)]
        for i, mine in enumerate(groups):
            t = threading.Thread(target=self.session_client, args=(i, mine), daemon=True)
            t.start()
            self.threads_.append(t)
        t = threading.Thread(target=self.cold_client, daemon=True)
        t.start()
        self.threads_.append(t)

    def plan(self):
        if self.schedule == "balanced":
            kinds = [KINDS[i % len(KINDS)] for i in range(self.rounds)]
            self.rng.shuffle(kinds)
            return kinds
        return [self.rng.choice(KINDS) for _ in range(self.rounds)]

    def run(self):
        self.say(f"chaos: seed {self.seed}, {self.rounds} rounds x {self.seconds:g}s, "
                 f"{self.nsessions} sessions, {self.nclients} session clients + 1 cold client, "
                 f"{self.workers} workers x {self.threads} threads")
        self.start()
        self.say(f"chaos: stack in {self.st.tmp} (runner.log, chaos-requests.ndjson, "
                 f"chaos-events.ndjson)")
        kinds = self.plan()
        self.say(f"chaos: schedule {' '.join(kinds)}")
        aborted = None
        try:
            for i, kind in enumerate(kinds, 1):
                self.round = i
                self.round_counts = {}
                nviol = len(self.violations)
                t_round = time.monotonic()
                self.resume()
                kill_at = self.seconds * self.rng.uniform(0.25, 0.6)
                time.sleep(kill_at)
                try:
                    desc = getattr(self, "kill_" + kind)()
                except AssertionError as e:
                    aborted = f"round {i}: {e}"
                    raise
                rest = self.seconds - (time.monotonic() - t_round)
                time.sleep(max(rest, 0.5))
                self.pause()
                c = self.round_counts
                self.say(f"round {i:2d}/{len(kinds)} [{kind}] {desc}")
                self.say(f"    load: {c.get('requests', 0)} requests (ok {c.get('ok', 0)}, "
                         f"ok:false {c.get('ok_false', 0)}, conn errors "
                         f"{c.get('conn_errors', 0)}, 5xx {c.get('http_5xx', 0)}, hung "
                         f"{c.get('hung', 0)}, truncated {c.get('truncated', 0)}); cut streams "
                         f"{c.get('cut', 0)}: reattached {c.get('reattached', 0)}, not started "
                         f"{c.get('not_started', 0)}, lost {c.get('lost', 0)}; warm turns "
                         f"{c.get('warm_turns', 0)}, cold replays {c.get('cold_replays', 0)}")
                nnotes = len(self.notes)
                for line in self.check_round():
                    self.say("    " + line)
                for _, w in self.notes[nnotes:]:
                    self.say(f"    note: {w[:400]}")
                ok = len(self.violations) == nviol
                if ok:
                    self.survived += 1
                self.say(f"    => {'OK' if ok else 'FAILED (%d violations)' % (len(self.violations) - nviol)}"
                         f" ({time.monotonic() - t_round:.1f}s)")
        except Exception:
            if not aborted:
                aborted = traceback.format_exc()
            self.violation(f"chaos aborted: {aborted}")
        finally:
            self.finish()
        return self.summary()

    def finish(self):
        """Stop the load, SIGTERM the stack, check nothing is left."""
        self.round = "shutdown"
        self.stopping = True
        self.go.set()
        for t in self.threads_:
            t.join(PAUSE_TIMEOUT_S)
            if t.is_alive():
                self.violation("a client thread did not stop")
        stats = None
        try:
            stats = json.loads(self.st.ctl("stats", "--json").stdout)
        except Exception as e:
            self.say(f"chaos: ctl stats failed: {e}")
        self.stats = stats
        shm = self.shm_path()
        instance = self.st.env["AGENT_RUNNER_INSTANCE"]
        self.st.stop()
        rc = self.st.master.returncode
        if rc != 0:
            self.violation(f"the master exited with status {rc} on SIGTERM")
        left = [f for f in os.listdir("/dev/shm") if instance in f]
        if left:
            self.violation(f"/dev/shm segments left after the clean shutdown: {left}")
        leaks = self.st.leaks()
        if leaks:
            self.violation(f"Stack.leaks() after SIGTERM: {leaks}")
        table = stk.proc_states()
        rest = [(p, c) for p, (pp, s, c) in table.items()
                if p != os.getpid() and s not in ("Z", "X") and
                (self.st.tmp in c or touches(p, self.st.tmp, shm))]
        if rest:
            self.violation(f"processes of the stack still alive after SIGTERM: {rest}")
            for p, _ in rest:   # report, then do not leave them running
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        if self.reqlog:
            self.reqlog.close()
            self.reqlog = None

    def summary(self):
        t = self.totals
        conn = t.get("conn_errors", 0) + t.get("http_5xx", 0)
        lines = []
        if self.stats:
            c = self.stats.get("counters", {})
            lines.append("chaos: stack counters: " + ", ".join(
                f"{k} {c[k]}" for k in ("turns_ok", "turns_error", "warm_hits", "cold_starts",
                                        "keeper_spawns", "worker_restarts") if k in c) +
                f", table repairs {self.stats.get('repairs')}")
        if self.readyz:
            lines.append("chaos: readyz after master restart: " + ", ".join(
                f"r{r}: {a:.3f}s" for r, a, _ in self.readyz) +
                f" (max {max(a for _, a, _ in self.readyz):.3f}s, budget {READYZ_BUDGET_S}s)")
        lines.append(f"chaos: requests {t.get('requests', 0)} (probes {t.get('probes', 0)}, cold "
                     f"no-session {t.get('cold_requests', 0)}): ok {t.get('ok', 0)}, ok:false "
                     f"{t.get('ok_false', 0)}, connection errors {t.get('conn_errors', 0)}, 5xx "
                     f"{t.get('http_5xx', 0)}, hung {t.get('hung', 0)}, truncated "
                     f"{t.get('truncated', 0)}, bad {t.get('bad', 0)}; warm turns "
                     f"{t.get('warm_turns', 0)}, cold replays {t.get('cold_replays', 0)}, "
                     f"rotations {t.get('rotations', 0)}")
        lines.append(f"chaos: streams cut by a kill {t.get('cut', 0)}: reattached "
                     f"{t.get('reattached', 0)}, not started (the worker died before the prompt) "
                     f"{t.get('not_started', 0)}, lost {t.get('lost', 0)}")
        if self.notes:
            lines.append(f"chaos: {len(self.notes)} notes:")
            lines += [f"  [round {r}] {w[:300]}" for r, w in self.notes[:40]]
            if len(self.notes) > 40:
                lines.append(f"  ... {len(self.notes) - 40} more")
        if self.violations:
            cats = {}
            for r, c, w in self.violations:
                cats.setdefault(c, []).append((r, w))
            lines.append(f"chaos: {len(self.violations)} violations in {len(cats)} categories:")
            for c, items in sorted(cats.items(), key=lambda kv: -len(kv[1])):
                rounds = sorted({r for r, _ in items}, key=str)
                lines.append(f"  {c}: {len(items)} in rounds {', '.join(map(str, rounds))}")
                lines += [f"    [round {r}] {w}" for r, w in items[:3]]
        lines.append(f"chaos: {self.survived} rounds survived, {t.get('requests', 0)} requests, "
                     f"{conn} connection errors, {len(self.violations)} failures "
                     f"(seed {self.seed}; logs in {self.st.tmp})")
        for line in lines:
            self.say(line)
        return {"survived": self.survived, "rounds": self.rounds, "requests": t.get("requests", 0),
                "connection_errors": conn, "failures": len(self.violations),
                "violations": [(r, c, w) for r, c, w in self.violations], "notes": list(self.notes),
                "readyz": list(self.readyz), "seed": self.seed, "tmp": self.st.tmp,
                "totals": dict(t)}


VIOLATION_CLASSES = (
    ("still running", "hung"), (": hung request", "hung"), ("crashed", "harness-crash"),
    ("ok:false without", "ok-false"), ("no worker/master kill explains", "unexplained-conn"),
    (": truncated request", "truncated-stream"), (": bad request", "malformed-stream"),
    (": http 429 request", "http-429"), (": http ", "http-status"),
    ("cold replay does not end", "replay-content"), ("warm session lost", "warm-lost"),
    ("only clean warm turns", "warm-lost"), ("history lost", "history-lost"),
    ("expected a cold replay", "dead-keeper-answered"), ("echo counter jumped", "echo-jump"),
    ("unexpected output", "wrong-output"), ("cold turn", "wrong-output"),
    ("first turn", "wrong-output"), ("new session answered", "wrong-output"),
    ("not respawned", "respawn"), ("did not come back", "master-restart"),
    ("runs_in_flight", "inflight-counter"), ("readyz", "readyz"), ("ctl check", "ctl-check"), ("names dead keeper", "stale-slot"),
    ("has no keeper", "stale-slot"), ("names pid", "stale-slot"),
    ("unaccounted process", "process-leak"), ("env folder", "env-folder"),
    ("lost turn", "lost-turn"),
    ("was killed but no cold", "killed-not-cold"), ("not parked idle", "not-parked"),
    ("share keeper", "shared-keeper"), ("POST /kill", "kill-route"), ("creating", "create"),
    ("aborted", "aborted"), ("did not stop", "harness-crash"), ("exited with status", "shutdown"),
    ("/dev/shm", "shm-left"), ("leaks()", "shutdown-leak"), ("still alive after SIGTERM",
                                                              "shutdown-leak"),
)


def classify(what):
    for needle, cat in VIOLATION_CLASSES:
        if needle in what:
            return cat
    return "other"


def pid_alive(pid):
    if not pid or pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return stat[stat.rindex(")") + 2] not in "ZX"
    except (OSError, ValueError):
        return False


def run_repro(check, threads=4):
    """Main of a tests/chaos/repro_*.py script: check(stack) runs against a one-worker stack and
    returns the bugs it saw (a bool, or a list of descriptions). Exit status 1 while a bug is
    present, 0 when fixed."""
    st = stk.Stack(workers=1, threads=threads, env={"AGENT_RUNNER_LOG_LEVEL": "info"}).start()
    try:
        bugs = check(st)
    finally:
        st.stop()
        st.cleanup()
    for b in bugs if isinstance(bugs, list) else []:
        print("BUG:", b)
    print("reproduced" if bugs else "not reproduced (fixed)")
    return 1 if bugs else 0
