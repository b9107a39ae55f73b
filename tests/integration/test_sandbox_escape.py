"""The sandbox as an attacker tries it (README "The sandbox"), from the scripted agent's `exec`
step and from real pi's `bash` tool driven by the fake model: no host root, sessions apart, a
minimal host view, kernel-enforced limits that end only their own turn, a teardown no tree can
break, request-side bounds, and admission that keeps the probes answering.

Every check runs for real; one skips (with the reason printed) only where this kernel or
host cannot enforce the limit it checks, and the first test prints what is enforced here.
"""

import json
import os
import signal
import threading
import time
import uuid

import stack
from stack import descendants, proc_table, wait_for
from turns import (bash_request, events_of, exec_request, named_model, result_of, script,
                   scripted_request, tool_output)

LIMITS = {"AGENT_RUNNER_SANDBOX_PIDS_MAX": "128",
          "AGENT_RUNNER_SANDBOX_MEMORY_MAX": "768M",
          "AGENT_RUNNER_SANDBOX_DISK_MAX": "256M",
          "AGENT_RUNNER_SANDBOX_TMP_MAX": "64M",
          "AGENT_RUNNER_SANDBOX_HOME_MAX": "64M"}
STACK = {"workers": 2, "threads": 8, "env": dict(LIMITS)}

ENFORCED = {}


def enforced(ctx):
    if not ENFORCED:
        _, _, body = ctx.stack.request("GET", "/health", token=False)
        ENFORCED.update(body["sandbox"])
    return ENFORCED


def skip_unless(ctx, limit):
    if limit not in enforced(ctx)["enforced"]:
        raise stack.SkipTest(f"this host cannot enforce the {limit} limit: "
                           f"{enforced(ctx)['notEnforced']}")


def new_key():
    tag = uuid.uuid4().hex[:8]
    return "proj-" + tag, "sess-" + tag


def scripted_exec(ctx, cmd, session=None, **extra):
    if session:
        extra.update(projectId=session[0], sessionId=session[1])
    return ctx.stack.stream(exec_request(cmd, **extra), timeout=600)


def pi_bash(ctx, cmd, session=None, **extra):
    if session:
        extra.update(projectId=session[0], sessionId=session[1])
    return ctx.stack.stream(bash_request(ctx, cmd, "esc", **extra), timeout=600)


RUNNERS = {"scripted": scripted_exec, "pi": pi_bash}


def uids_of(pid):
    """Real uids of pid and every descendant (read from the host's /proc)."""
    table = proc_table()
    out = set()
    for p in [pid] + descendants(pid, table):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        out.add(int(line.split()[1]))
        except OSError:
            pass
    return out


def worker_rss_kib(ctx):
    out = {}
    for p in ctx.stack.worker_pids():
        with open(f"/proc/{p}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out[p] = int(line.split()[1])
    return out


# --- what the host enforces --------------------------------------------------------------

def test_prints_the_enforced_limits(ctx):
    sb = enforced(ctx)
    print(f"    identity: {json.dumps(sb['identity'])}")
    print(f"    limits: {json.dumps(sb['limits'])}")
    print(f"    enforced here: {', '.join(sb['enforced'])}")
    print(f"    not enforced here: {sb['notEnforced'] or 'nothing'}")
    print(f"    network: {json.dumps(sb['network'])}")
    assert sb["limits"]["pidsMax"] == 128 and sb["limits"]["diskBytes"] == 256 << 20, sb
    _, _, ready = ctx.stack.request("GET", "/readyz", token=False)
    assert ready.get("limitsNotEnforced", "") == sb["notEnforced"], ready


# --- identity and host view, from both agents --------------------------------------------

def probe_script(ctx, other_ws):
    return "; ".join([
        'r() { "$@" >/dev/null 2>&1 && echo yes || echo no; }',
        "echo shadow=$(r cat /etc/shadow)",
        "echo envfile=$(r cat /etc/agent-runner/agent-runner.env)",
        f"echo tokenfile=$(r cat {ctx.stack.tmp}/runner.env)",
        "n=0; for f in $(find /proc/sys -type f 2>/dev/null); do "
        'if true 2>/dev/null >"$f"; then n=$((n+1)); fi; done; echo sysctlw=$n',
        "echo userns=$(r unshare -U true)",
        "echo usernet=$(r unshare -rn true)",
        f"echo otherws=$(r ls {other_ws})",
        f"echo state=$(r ls {ctx.stack.state})",
        f"echo fcgi=$(r test -e {ctx.stack.sock})",
        "echo shm=$(ls /dev/shm 2>/dev/null | grep -c agent-runner)",
        "echo insideuid=$(id -u)",
        # the harness's stdin (pid 1 of the sandbox passes it on): opening it to write forged
        # client messages (a permission answer) must fail, whatever the agent runs as; so must
        # opening pi's stdio (pi-stdio hands it to pi-acp's "pi" over sockets) to forge pi's
        # commands or its answers
        "n=0; for c in /proc/[0-9]*/comm; do case \"$(cat $c 2>/dev/null)\" in "
        "acp-scripted|node|pi|MainThread|agent-runner-pi*) for f in 0 1; do "
        "sh -c \"exec 3>${c%/comm}/fd/$f\" 2>/dev/null && n=$((n+1)); done;; esac; done; "
        "echo stdinw=$n",
        # pi-stdio's hand-over socket is gone once pi-acp's "pi" attached
        "echo pisock=$(test -e /tmp/.pi/sock && echo yes || echo no)",
        "echo probe > /workspace/owner-probe && echo made=yes",
    ])


def check_identity_and_view(ctx, runner):
    # the runner's env file as production has it (with the token), on the host
    with open(os.path.join(ctx.stack.tmp, "runner.env"), "w") as f:
        f.write("AGENT_RUNNER_TOKEN=" + ctx.stack.env["AGENT_RUNNER_TOKEN"] + "\n")
    os.chmod(os.path.join(ctx.stack.tmp, "runner.env"), 0o600)
    run = RUNNERS[runner]
    a, b = new_key(), new_key()
    status, recs = run(ctx, "echo first > /workspace/a.txt; echo ok", session=a)
    assert result_of(recs)["ok"] is True, result_of(recs)
    sa = ctx.stack.session(f"{a[0]}:{a[1]}")
    other_ws = os.path.join(sa["envDir"], "workspace")
    status, recs = run(ctx, probe_script(ctx, other_ws), session=b)
    res = result_of(recs)
    out = tool_output(recs)
    assert res["ok"] is True, res
    for want in ("shadow=no", "envfile=no", "tokenfile=no", "sysctlw=0", "userns=no",
                 "usernet=no", "otherws=no", "state=no", "fcgi=no", "shm=0", "made=yes",
                 "stdinw=0", "pisock=no"):
        assert want in out, f"{runner}: expected {want!r} in:\n{out}"
    sb = ctx.stack.session(f"{b[0]}:{b[1]}")
    # from the host: every process of each sandbox runs as a non-root uid of its own
    ua, ub = uids_of(sa["sandboxPid"]), uids_of(sb["sandboxPid"])
    print(f"    {runner}: host uids of session A {sorted(ua)}, of session B {sorted(ub)}")
    assert ua and ub and 0 not in ua and 0 not in ub, (ua, ub)
    assert not ua & ub, (ua, ub)
    # and what a sandbox writes belongs to its own uid
    owner_a = os.stat(os.path.join(sa["envDir"], "workspace", "a.txt")).st_uid
    owner_b = os.stat(os.path.join(sb["envDir"], "workspace", "owner-probe")).st_uid
    assert owner_a != 0 and owner_b != 0 and owner_a != owner_b, (owner_a, owner_b)
    assert os.stat(sb["envDir"]).st_mode & 0o777 == 0o700
    for k in (a, b):
        ctx.stack.ctl("kill", f"{k[0]}:{k[1]}")


def test_scripted_sandbox_is_not_root_and_sees_a_minimal_host(ctx):
    check_identity_and_view(ctx, "scripted")


def test_pi_sandbox_is_not_root_and_sees_a_minimal_host(ctx):
    check_identity_and_view(ctx, "pi")


# --- limits end their own turn, and only it ----------------------------------------------

class Bystander:
    """A warm scripted session whose turns keep running while another session trips."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.key = new_key()
        self.results = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self):
        n = 0
        while not self.stop.is_set():
            n += 1
            status, recs = self.ctx.stack.stream(scripted_request(
                f"bystander {n}", projectId=self.key[0], sessionId=self.key[1]))
            self.results.append(result_of(recs) if status == 200 else {"status": status})
            time.sleep(0.1)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        wait_for(lambda: len(self.results) >= 2, timeout=60, what="bystander turns")
        self.stop.set()
        self.thread.join(120)
        self.ctx.stack.ctl("kill", f"{self.key[0]}:{self.key[1]}")
        bad = [r for r in self.results if not r.get("ok")]
        assert not bad, f"a bystander turn failed: {bad[:2]}"
        print(f"    {len(self.results)} bystander turns completed meanwhile")


def trip(ctx, runner, cmd, code, words):
    key = new_key()
    with Bystander(ctx):
        status, recs = RUNNERS[runner](ctx, cmd, session=key)
    res = result_of(recs)
    assert status == 200 and res["ok"] is False, res
    errs = [e for e in events_of(recs) if e["type"] == "error"]
    assert errs and errs[-1]["code"] == code, errs
    assert words in errs[-1]["message"] and words in res["error"], (errs, res)
    assert events_of(recs)[-1]["type"] == "done"
    k = f"{key[0]}:{key[1]}"
    wait_for(lambda: ctx.stack.session(k) is None, timeout=30, what="the teardown")
    assert ctx.stack.recent_reason(k) == "sandbox-limit", ctx.stack.recent_reason(k)
    return res


FORK_BOMB = "f() { f | f & }; f; sleep 120"
MEMORY_HOG = ("python3 -c \"s = 'x' * (3 << 30); print(len(s))\" 2>&1 || "
              "head -c 3G /dev/zero | tail; echo after")
DISK_FILLER = "dd if=/dev/zero of=/workspace/fill bs=1M count=1024 2>&1; echo rc=$?"


def test_scripted_fork_bomb_trips_the_pids_limit(ctx):
    skip_unless(ctx, "pids")
    trip(ctx, "scripted", FORK_BOMB, "sandbox_pids_limit", "limit of 128 processes")


def test_scripted_memory_hog_trips_the_memory_limit(ctx):
    skip_unless(ctx, "memory")
    trip(ctx, "scripted", MEMORY_HOG, "sandbox_memory_limit", "memory limit (768 MiB)")


def test_scripted_disk_filler_trips_the_disk_limit(ctx):
    skip_unless(ctx, "disk")
    trip(ctx, "scripted", DISK_FILLER, "sandbox_disk_limit", "disk limit is 256 MiB")


def test_pi_fork_bomb_trips_the_pids_limit(ctx):
    skip_unless(ctx, "pids")
    trip(ctx, "pi", FORK_BOMB, "sandbox_pids_limit", "limit of 128 processes")


def test_pi_memory_hog_trips_the_memory_limit(ctx):
    skip_unless(ctx, "memory")
    trip(ctx, "pi", MEMORY_HOG, "sandbox_memory_limit", "memory limit (768 MiB)")


def test_pi_disk_filler_trips_the_disk_limit(ctx):
    skip_unless(ctx, "disk")
    trip(ctx, "pi", DISK_FILLER, "sandbox_disk_limit", "disk limit is 256 MiB")


# --- teardown no tree can break -----------------------------------------------------------

DEEP_TREE = ("python3 -c \"import os\nos.chdir('/workspace')\nfor i in range(30000):\n"
             "    os.mkdir('d'); os.chdir('d')\nprint('depth', i + 1)\"")


def test_a_30000_deep_tree_is_removed_at_teardown(ctx):
    # in the capped workspace tmpfs: the keeper unmounts it
    status, recs = scripted_exec(ctx, DEEP_TREE)
    assert "depth 30000" in tool_output(recs), tool_output(recs)
    assert result_of(recs)["ok"] is True
    assert ctx.stack.master.poll() is None
    wait_for(lambda: not os.listdir(os.path.join(ctx.stack.state, "envs")), timeout=30,
             what="the environment folder to go")
    # in a plain folder (no disk cap): the keeper's iterative removal, then the master's
    # removal of a killed keeper's environment, never recursion, never a crash
    ctx.stack.stop_master()
    ctx.stack.extra_env["AGENT_RUNNER_SANDBOX_DISK_MAX"] = "0"
    ctx.stack.start_master()
    envs = os.path.join(ctx.stack.state, "envs")
    try:
        status, recs = scripted_exec(ctx, DEEP_TREE)
        assert "depth 30000" in tool_output(recs), tool_output(recs)
        assert result_of(recs)["ok"] is True
        # the keeper let the worker go, then removes the folder (a minute on a slow disk)
        wait_for(lambda: not os.listdir(envs), timeout=300, step=0.5,
                 what="the keeper to remove its 30,000-deep tree")
        key = new_key()
        status, recs = scripted_exec(ctx, DEEP_TREE, session=key)
        assert "depth 30000" in tool_output(recs)
        s = ctx.stack.session(f"{key[0]}:{key[1]}")
        os.kill(s["keeperPid"], signal.SIGKILL)
        # the master removes it in a child of its own and answers meanwhile
        status, recs = scripted_exec(ctx, "echo alive")
        assert result_of(recs)["ok"] is True
        wait_for(lambda: not os.path.exists(s["envDir"]), timeout=300, step=0.5,
                 what="the master to remove the dead keeper's 30,000-deep tree")
        assert ctx.stack.master.poll() is None, "the master died"
        assert ctx.stack.request("GET", "/livez", token=False)[0] == 200
    finally:
        ctx.stack.stop_master()
        ctx.stack.extra_env["AGENT_RUNNER_SANDBOX_DISK_MAX"] = LIMITS[
            "AGENT_RUNNER_SANDBOX_DISK_MAX"]
        ctx.stack.start_master()


# --- request-side bounds and admission ----------------------------------------------------

def test_amplification_bodies_leave_worker_rss_flat(ctx):
    body = b'{"x":[' + b"{}," * ((8 << 20) // 3 - 10)
    body = body[:-1] + b"]}"
    assert len(body) <= 8 << 20
    before = worker_rss_kib(ctx)
    for _ in range(20):
        status, _, doc = ctx.stack.request("POST", "/run", raw=body)
        assert status == 400 and "JSON elements" in doc["error"], (status, doc)
    after = worker_rss_kib(ctx)
    growth = {p: after[p] - before[p] for p in before if p in after}
    print(f"    worker RSS before {before} KiB, after {after} KiB")
    assert all(g < 50 * 1024 for g in growth.values()), growth


def test_200_concurrent_long_turns_get_429_past_the_cap_while_health_answers(ctx):
    n = 200
    results = [None] * n
    start = threading.Barrier(n + 2)  # the turns, the prober and this thread
    probes, done = [], threading.Event()

    def one(i):
        start.wait()
        try:
            status, recs = ctx.stack.stream(scripted_request(
                script([{"chunk": "x"}, {"sleep": 6000}])), timeout=120)
            results[i] = (status, recs)
        except Exception as e:  # noqa: BLE001 - a connection error is counted as a failure
            results[i] = ("error", repr(e))

    def probe():
        start.wait()
        while not done.is_set():
            t0 = time.monotonic()
            h = ctx.stack.request("GET", "/health", token=False, timeout=30)[0]
            r = ctx.stack.request("GET", "/readyz", token=False, timeout=30)
            probes.append((h, r[0], r[2], time.monotonic() - t0))
            time.sleep(0.2)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    prober = threading.Thread(target=probe)
    for t in threads + [prober]:
        t.start()
    start.wait()
    for t in threads:
        t.join(300)
    done.set()
    prober.join(60)
    codes = {}
    for status, recs in results:
        codes[status] = codes.get(status, 0) + 1
        if status == 429:
            assert recs == {"ok": False, "error": "Runner at capacity (12 concurrent runs)"}, recs
        elif status == 200:
            assert result_of(recs)["ok"] is True, result_of(recs)
    print(f"    statuses {codes}; {len(probes)} probes, slowest "
          f"{max(p[3] for p in probes):.2f}s")
    assert set(codes) <= {200, 429}, codes
    # each worker admits 6 (8 threads, 2 kept for the probes and control routes)
    assert codes.get(200, 0) >= 6 and codes.get(429, 0) >= 100, codes
    assert probes and all(p[0] == 200 for p in probes), probes
    assert any(p[1] == 503 and "saturated" in p[2]["reason"] for p in probes), probes


# --- small ones --------------------------------------------------------------------------

def test_a_harness_line_over_the_cap_is_named(ctx):
    # 64 MiB of text in one ACP line (plus its JSON framing): more than any line the relay
    # takes; the turn says so instead of "E2BIG" or "harness exited"
    status, recs = ctx.stack.stream(scripted_request(script([{"chunk": "a"},
                                                             {"big": 64 << 20}])))
    res = result_of(recs)
    assert status == 200 and res["ok"] is False, res
    assert "harness output line over 67108864 bytes" in res["error"], res
    err = [e for e in events_of(recs) if e["type"] == "error"][-1]
    assert "harness output line over" in err["message"] and err["code"] == "runner_error", err
    assert "E2BIG" not in res["error"] and "status" not in res["error"], res


# --- a runner that is not root -------------------------------------------------------------

def test_a_runner_that_is_not_root_maps_sandboxes_to_its_own_user(ctx):
    """Started as an ordinary user (65534 here), the runner cannot give sandboxes host uids
    of their own: they run as its user. The network namespace still holds (made through a
    user namespace of the runner's own), nested user namespaces still fail, and /readyz says
    which limits this runner cannot enforce."""
    import subprocess
    nobody = 65534
    st = stack.Stack(model=ctx.model, env=dict(LIMITS))
    os.chown(st.tmp, nobody, nobody)

    def start_master():
        st.env = st.runner_env()
        st.master = subprocess.Popen(
            ["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups",
             "--inh-caps=-all", "spawn-fcgi", "-n", "-s", st.sock, "-M", "0666", "--",
             os.path.join(stack.BIN, "agent-runnerd"), "--workers", "1", "--threads", "4"],
            env=st.env, stdout=subprocess.DEVNULL, stderr=open(st.runner_log, "a"))
        wait_for(lambda: os.path.exists(st.sock), what="fastcgi socket")
        wait_for(lambda: len(st.worker_pids()) == 1, what="workers")

    st.start_master = start_master
    try:
        st.start()
        _, _, health = st.request("GET", "/health", token=False)
        sb = health["sandbox"]
        assert sb["identity"] == {"mode": "shared", "uid": nobody}, sb
        assert sb["network"]["namespace"] is True, sb
        status, _, ready = st.request("GET", "/readyz", token=False)
        assert status == 200 and ready.get("limitsNotEnforced"), ready
        print(f"    not root: enforced {sb['enforced']}; not: {ready['limitsNotEnforced'][:80]}...")
        key = new_key()
        cmd = probe(ctx) + "; unshare -U true && echo userns=yes || echo userns=no"
        status, recs = st.stream(exec_request(cmd, projectId=key[0], sessionId=key[1],
                                              modelConnection=named_model(ctx)))
        out = tool_output(recs)
        assert result_of(recs)["ok"] is True, result_of(recs)
        assert "model=200" in out and "metadata=000" in out and "userns=no" in out, out
        s = st.session(f"{key[0]}:{key[1]}")
        assert uids_of(s["sandboxPid"]) == {nobody}, uids_of(s["sandboxPid"])
        st.ctl("kill", f"{key[0]}:{key[1]}")
        assert not st.leaks(), st.leaks()
    finally:
        st.stop()
        st.cleanup()


def probe(ctx):
    c = "curl -s -o /dev/null -w '%{http_code}' --max-time 3"
    return (f"echo model=$({c} {ctx.model.base}/v1/models); "
            f"echo metadata=$({c} http://169.254.169.254/)")
