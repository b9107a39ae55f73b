"""Operations: /metrics counters, OTLP traces, logs without credentials, nginx and systemd
configuration checks."""

import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import uuid

from stack import BIN, ROOT, free_port, wait_for
from turns import events_of, ids, model_connection, result_of, script, scripted_request

TRACE_ALLOW = {
    "gen_ai.operation.name", "gen_ai.system", "gen_ai.agent.name", "gen_ai.request.model",
    "gen_ai.conversation.id", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
    "gen_ai.response.finish_reasons", "gen_ai.tool.name", "gen_ai.tool.call.id",
    "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "agent_runner.turn.id",
    "agent_runner.harness", "agent_runner.environment", "agent_runner.tool.denied", "error.type"}

SECRETS = []  # every credential value a request of this module carried


def secret(prefix="sk-secret-"):
    value = prefix + uuid.uuid4().hex
    SECRETS.append(value)
    return value


def scripted(prompt, **extra):
    return scripted_request(prompt, modelConnection=model_connection(
        "acme", "ACME_KEY", "https://models.example/v1", secret()), **extra)


def metrics(ctx):
    status, headers, body = ctx.stack.request("GET", "/metrics")
    assert status == 200, status
    assert headers.get("Content-Type", "").startswith("text/plain"), headers
    out = {}
    for line in body.splitlines() if isinstance(body, str) else []:
        if not line or line.startswith("#"):
            continue
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def test_metrics_need_the_token(ctx):
    status, _, body = ctx.stack.request("GET", "/metrics", token=False)
    assert status == 401, status


def test_metrics_count_known_turns_exactly(ctx):
    before = metrics(ctx)
    ok = 'agent_runner_turns_total{harness="scripted",provider="acme",outcome="ok"}'
    err = 'agent_runner_turns_total{harness="scripted",provider="acme",outcome="error"}'
    paused = 'agent_runner_turns_total{harness="scripted",provider="acme",outcome="paused"}'
    for _ in range(2):
        status, recs = ctx.stack.stream(scripted("hello"))
        assert result_of(recs)["ok"] is True
    status, recs = ctx.stack.stream(scripted(script([{"crash": 1}])))
    assert result_of(recs)["ok"] is False
    p, s = ids(6)
    gate = {"toolCallId": "g", "title": "Write", "kind": "edit"}
    status, recs = ctx.stack.stream(scripted(script([{"permission": gate}]), projectId=p,
                                             sessionId=s))
    assert result_of(recs)["stopReason"] == "paused"
    after = metrics(ctx)
    assert after.get(ok, 0) - before.get(ok, 0) == 2, (before.get(ok), after.get(ok))
    assert after.get(err, 0) - before.get(err, 0) == 1
    assert after.get(paused, 0) - before.get(paused, 0) == 1
    miss = 'agent_runner_cold_starts_total{reason="miss"}'
    assert after[miss] - before.get(miss, 0) == 4
    per_turn = 'agent_runner_teardowns_total{reason="per-turn"}'
    assert after[per_turn] - before.get(per_turn, 0) == 2
    assert after['agent_runner_sessions{state="awaiting_approval"}'] == 1
    spawn = "agent_runner_keeper_spawn_seconds_count"
    assert after[spawn] - before.get(spawn, 0) == 4
    first = "agent_runner_first_event_seconds_count"
    assert after[first] - before.get(first, 0) == 4  # the crash's error event counts too
    # a warm follow-up counts as a warm hit
    ctx.stack.ctl("kill", f"{p}:{s}")
    status, recs = ctx.stack.stream(scripted("one", projectId=p, sessionId=s))
    out = result_of(recs)["output"]
    wait_for(lambda: ctx.stack.session(f"{p}:{s}"), what="parked")
    hits = metrics(ctx)["agent_runner_warm_hits_total"]
    status, recs = ctx.stack.stream(scripted("two", projectId=p, sessionId=s, messages=[
        {"role": "user", "content": "one"}, {"role": "assistant", "content": out},
        {"role": "user", "content": "two"}]))
    # a new credential value is a rotated credential: runtime-incompatible, not a warm hit
    m = metrics(ctx)
    assert m["agent_runner_warm_hits_total"] == hits
    assert m['agent_runner_cold_starts_total{reason="runtime-incompatible"}'] >= 1
    ctx.stack.ctl("kill", f"{p}:{s}")


class Collector(http.server.BaseHTTPRequestHandler):
    received = []

    def do_POST(self):
        n = int(self.headers.get("content-length", 0))
        body = self.rfile.read(n)
        Collector.received.append({"path": self.path, "headers": dict(self.headers),
                                   "body": json.loads(body)})
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def spans_of(doc):
    out = []
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            out.extend(ss["spans"])
    return out


def test_traces_reach_the_collector_with_the_callers_parent(ctx):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Collector.received = []
    trace_id = uuid.uuid4().hex
    parent = uuid.uuid4().hex[:16]
    auth = secret("Access tok-")
    try:
        req = scripted(script([{"chunk": "hi"},
                               {"tool": {"id": "t1", "title": "bash", "kind": "execute",
                                         "input": {"command": "ls"}, "output": "ok"}}]),
                       context={"propagation": {"traceparent": f"00-{trace_id}-{parent}-01"}},
                       telemetry={"capture": {"content": {"enabled": False}}, "exporters": {
                           "otlp": {"endpoint": f"http://127.0.0.1:{server.server_port}",
                                    "headers": {"Authorization": auth}}}})
        status, recs = ctx.stack.stream(req)
        res = result_of(recs)
        assert res["traceId"] == trace_id, res
        assert events_of(recs)[-1]["traceId"] == trace_id
        wait_for(lambda: Collector.received, what="an OTLP export")
        got = Collector.received[0]
        assert got["path"] == "/v1/traces", got["path"]
        assert got["headers"].get("Authorization") == auth
        spans = {s["name"]: s for s in spans_of(got["body"])}
        assert set(spans) == {"invoke_agent", "turn", "execute_tool bash"}, list(spans)
        assert all(s["traceId"] == trace_id for s in spans.values())
        assert spans["invoke_agent"]["parentSpanId"] == parent
        assert spans["turn"]["parentSpanId"] == spans["invoke_agent"]["spanId"]
        assert spans["execute_tool bash"]["parentSpanId"] == spans["turn"]["spanId"]
        keys = {a["key"] for s in spans.values() for a in s["attributes"]}
        assert keys <= TRACE_ALLOW, keys - TRACE_ALLOW
        assert "gen_ai.usage.input_tokens" in keys
        # content capture is off: no tool arguments or results
        assert "gen_ai.tool.call.arguments" not in keys and "gen_ai.tool.call.result" not in keys
    finally:
        server.shutdown()


def test_an_unreachable_collector_does_not_fail_the_turn(ctx):
    port = free_port()
    req = scripted("still fine", telemetry={"exporters": {"otlp": {
        "endpoint": f"http://127.0.0.1:{port}/v1/traces",
        "headers": {"authorization": secret("Bearer ")}}}})
    status, recs = ctx.stack.stream(req)
    res = result_of(recs)
    assert res["ok"] is True and res["output"] == "echo[1]: still fine", res


def test_logs_never_contain_a_credential(ctx):
    # a failing request that carries credentials, to exercise the error paths too
    req = scripted("x", model="no-such-model")
    status, recs = ctx.stack.stream(req)
    assert result_of(recs)["ok"] is False
    with open(os.path.join(ROOT, "tests", "fixtures", "agenta-golden",
                           "redaction.known_value.json")) as f:
        known = json.load(f)["knownSecrets"]
    req = scripted("y")
    req["modelConnection"]["credentials"][0]["value"] = known[0]
    status, recs = ctx.stack.stream(req)
    assert result_of(recs)["ok"] is True
    log = ctx.stack.log_text()
    assert SECRETS, "the module sent no credentials"
    for value in SECRETS + [known[0]]:
        assert value not in log, f"credential {value[:12]}... found in the runner log"


def test_nginx_configs_pass_nginx_t(ctx):
    tmp = tempfile.mkdtemp(prefix="ar-nginx-t.")
    try:
        shutil.copy(os.path.join(ctx.stack.tmp, "cert.pem"), tmp)
        shutil.copy(os.path.join(ctx.stack.tmp, "key.pem"), tmp)
        standalone = subprocess.run(
            ["bash", os.path.join(ROOT, "scripts", "render-nginx"), tmp, "127.0.0.1:1",
             os.path.join(tmp, "fcgi.sock"), os.path.join(tmp, "cert.pem"),
             os.path.join(tmp, "key.pem")], check=True, capture_output=True, text=True).stdout
        with open(os.path.join(tmp, "standalone.conf"), "w") as f:
            f.write(standalone)
        # the drop-in: upstream + locations included into someone else's server block
        with open(os.path.join(tmp, "existing.conf"), "w") as f:
            f.write(f"""
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{}}
http {{
    client_body_temp_path {tmp}/nginx-tmp/body;
    fastcgi_temp_path {tmp}/nginx-tmp/fastcgi;
    proxy_temp_path {tmp}/nginx-tmp/proxy;
    uwsgi_temp_path {tmp}/nginx-tmp/uwsgi;
    scgi_temp_path {tmp}/nginx-tmp/scgi;
    include {ROOT}/nginx/agent-runner-upstream.conf;
    server {{
        listen 127.0.0.1:1 ssl;
        server_name runner.example;
        ssl_certificate {tmp}/cert.pem;
        ssl_certificate_key {tmp}/key.pem;
        include {ROOT}/nginx/agent-runner-locations.conf;
    }}
}}
""")
        for conf in ("standalone.conf", "existing.conf"):
            out = subprocess.run(["nginx", "-t", "-p", tmp, "-c", os.path.join(tmp, conf)],
                                 capture_output=True, text=True)
            assert out.returncode == 0 and "test is successful" in out.stderr, (conf, out.stderr)
        # slowloris: room for thousands of connections, slow headers shed, a cap per address
        assert re.search(r"^worker_processes auto;", standalone, re.M)
        conns = int(re.search(r"worker_connections (\d+);", standalone).group(1))
        assert conns >= 8192, conns
        locations = open(os.path.join(ROOT, "nginx", "agent-runner-locations.conf")).read()
        for directive in ("client_header_timeout", "client_body_timeout", "send_timeout",
                          "limit_conn agent_runner_addr"):
            assert re.search(r"^" + directive + r" ", locations, re.M), directive
        assert "limit_conn_zone $binary_remote_addr zone=agent_runner_addr" in standalone
        assert "limit_conn_zone $binary_remote_addr zone=agent_runner_addr" in open(
            os.path.join(ROOT, "nginx", "agent-runner-upstream.conf")).read()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_systemd_units_verify(ctx):
    if not shutil.which("systemd-analyze"):
        print("    skipped: systemd-analyze is not installed here")
        return
    tmp = tempfile.mkdtemp(prefix="ar-systemd.")
    try:
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "install-systemd"), tmp],
                       check=True)
        unit = os.path.join(tmp, "etc", "systemd", "system", "agent-runner.service")
        out = subprocess.run(["systemd-analyze", "verify", unit], capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stderr
        text = open(unit).read()
        assert "TimeoutStopSec=25s" in text and "Restart=on-failure" in text
        assert re.search(r"RestrictNamespaces=.*user.*mnt.*pid.*net", text)
        # cgroup v2: the unit's cgroup is delegated, and /sys/fs/cgroup stays writable
        assert re.search(r"^Delegate=.*pids.*memory.*cpu", text, re.M)
        assert not re.search(r"^ProtectControlGroups=yes", text, re.M)
        tmpfiles = os.path.join(tmp, "etc", "tmpfiles.d", "agent-runner.conf")
        assert open(tmpfiles).read().startswith("# /run/agent-runner")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_harness_folder_the_sandbox_user_cannot_reach_refuses_the_start(ctx):
    """Sandboxes bind the harness folder as their own host uid: a folder on its path that
    others cannot search (a checkout under /root, 0700) would fail every sandbox. The master
    says so at start instead."""
    closed = tempfile.mkdtemp(dir=ctx.stack.tmp)  # mode 0700
    os.chmod(closed, 0o700)
    link = os.path.join(closed, "harnesses")
    os.symlink(os.path.join(ROOT, "harnesses"), link)
    env = ctx.stack.runner_env()
    env.update({"AGENT_RUNNER_HARNESS_DIR": link,
                "AGENT_RUNNER_STATE_DIR": os.path.join(ctx.stack.tmp, "reach-state"),
                "AGENT_RUNNER_INSTANCE": "it-reach-" + uuid.uuid4().hex[:6]})
    sock = os.path.join(ctx.stack.tmp, "reach.sock")
    p = subprocess.run(["spawn-fcgi", "-n", "-s", sock, "--", os.path.join(BIN, "agent-runnerd"),
                        "--workers", "1", "--threads", "2"],
                       env=env, capture_output=True, text=True, timeout=120)
    print("    " + (p.stderr.strip().splitlines() or [""])[-1][:300])
    assert p.returncode != 0, p
    assert "refusing to start" in p.stderr and "cannot reach" in p.stderr, p.stderr
    assert link in p.stderr, p.stderr

