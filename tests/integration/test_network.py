"""Every sandbox in its own network (README "Network"), tried from inside with the scripted agent's
`exec` step and pi's `bash` tool: under "on" the runner's nginx port, another loopback
service, the host's own address and the metadata address are out of reach while the model
endpoint works (for pi, whose key goes through it, only its model gateway: the endpoint itself
is not named for its sandbox) and every real harness completes a turn; a listener inside is
unreachable from the host; "allowlist" opens a listed loopback alias and nothing unlisted;
under "off" every real harness still completes a turn against the fake model and nothing else
answers; a malformed allowlist entry is a 400 naming it; refused connections are logged and
counted."""

import http.server
import json
import socket
import threading
import time
import uuid

from stack import free_port
from turns import (MODELS, bash_request, exec_request, harness_request, model_requests_with,
                   named_model, result_of, script, scripted_request, tool_output)

SERVICES = {}
GATEWAY_MODELS = "http://127.0.0.1:1001/v1/models"  # the sandbox's model gateway (a GET goes)


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("service " + self.server.server_address[0]).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def service(addr):
    """A plain HTTP service on the host at addr (started once per module): its port."""
    if addr not in SERVICES:
        srv = http.server.ThreadingHTTPServer((addr, 0), Hello)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        SERVICES[addr] = srv
    return SERVICES[addr].server_address[1]


def host_address():
    """An address of this host that is not loopback (the route to anywhere), or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.123", 9))
        addr = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if addr.startswith("127.") else addr


def probe(targets):
    """A shell command that curls each name=url and prints name=<code> rc=<rc> per line."""
    lines = ["c() { curl -sk -o /dev/null -w '%{http_code}' --max-time 4 \"$1\"; "
             "echo \" rc=$?\"; }"]
    lines += [f"echo \"{name}=$(c {url})\"" for name, url in targets.items()]
    return "; ".join(lines)


def run_scripted(ctx, cmd, **extra):
    status, recs = ctx.stack.stream(exec_request(cmd, **extra))
    assert status == 200, (status, recs)
    assert result_of(recs)["ok"] is True, result_of(recs)
    return tool_output(recs)


def run_pi(ctx, cmd, **extra):
    extra.pop("modelConnection", None)  # pi_request names the model (with pi's API key)
    status, recs = ctx.stack.stream(bash_request(ctx, cmd, "net", **extra))
    assert status == 200, (status, recs)
    assert result_of(recs)["ok"] is True, result_of(recs)
    return tool_output(recs)


def reached(out, name):
    line = next((ln for ln in out.splitlines() if ln.startswith(name + "=")), "")
    assert line, f"no {name} line in:\n{out}"
    return line.startswith(name + "=200")


def denied_total(ctx):
    _, _, text = ctx.stack.request("GET", "/metrics")
    for line in text.splitlines():
        if line.startswith("agent_runner_egress_denied_total "):
            return int(line.split()[1])
    raise AssertionError("no agent_runner_egress_denied_total in /metrics")


def model_targets(ctx, run):
    """pi holds a key: its model is the gateway, and the endpoint itself is out of reach; the
    scripted agent's run names the endpoint without a credential: it reaches it itself."""
    if run is run_pi:
        return {"model": GATEWAY_MODELS, "direct": ctx.model.base + "/v1/models"}
    return {"model": ctx.model.base + "/v1/models"}


def check_direct(out):
    if "direct=" in out:
        assert not reached(out, "direct"), f"pi reached the endpoint around its gateway:\n{out}"


def on_targets(ctx, run):
    t = {**model_targets(ctx, run),
         "nginx": f"https://127.0.0.1:{ctx.stack.port}/health",
         "other": f"http://127.0.0.1:{service('127.0.0.1')}/",
         "metadata": "http://169.254.169.254/latest/meta-data/"}
    addr = host_address()
    if addr:
        t["hostaddr"] = f"http://{addr}:{service('0.0.0.0')}/"
    return t


def check_on(ctx, run):
    before = denied_total(ctx)
    tag = uuid.uuid4().hex[:8]
    out = run(ctx, probe(on_targets(ctx, run)), modelConnection=named_model(ctx),
              projectId="net-" + tag, sessionId="s-" + tag)
    assert reached(out, "model"), out
    check_direct(out)
    for name in ("nginx", "other", "metadata", "hostaddr"):
        if name in on_targets(ctx, run):
            assert not reached(out, name), f"{name} was reachable:\n{out}"
    # the refused metadata (and host address) connections were counted and logged
    assert denied_total(ctx) >= before + 1
    log = ctx.stack.log_text()
    line = next((ln for ln in log.splitlines()
                 if "egress denied: connection to '169.254.169.254:80'" in ln
                 and f"s-{tag}" in ln), None)
    assert line, "no log line for the refused metadata connection"
    doc = json.loads(line)
    assert doc["sessionKey"] == f"net-{tag}:s-{tag}" and doc["harness"], doc
    ctx.stack.ctl("kill", f"net-{tag}:s-{tag}")
    return out


def test_on_reaches_the_model_and_nothing_local_scripted(ctx):
    print("    " + check_on(ctx, run_scripted).replace("\n", "; "))


def test_on_reaches_the_model_and_nothing_local_pi(ctx):
    print("    " + check_on(ctx, run_pi).replace("\n", "; "))


def test_a_listener_inside_is_unreachable_from_the_host(ctx):
    port = free_port()
    holder = {}
    cmd = (f"python3 -m http.server {port} --bind 0.0.0.0 >/dev/null 2>&1 & sleep 1; "
           f"curl -s -o /dev/null -w 'inside=%{{http_code}}' http://127.0.0.1:{port}/")

    def run():
        holder["res"] = ctx.stack.stream(scripted_request(
            script([{"exec": cmd}, {"chunk": "listening"}, {"sleep": 5000}])))

    t = threading.Thread(target=run)
    t.start()
    time.sleep(3)  # the listener is up inside (the turn sleeps 5 s after it)
    tried = []
    for addr in ["127.0.0.1", host_address()]:
        if not addr:
            continue
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect((addr, port))
            tried.append((addr, "connected"))
        except OSError as e:
            tried.append((addr, type(e).__name__))
        finally:
            s.close()
    t.join(60)
    status, recs = holder["res"]
    assert "inside=200" in tool_output(recs), tool_output(recs)  # it did listen, inside
    print(f"    from the host: {tried}")
    assert tried and all(r != "connected" for _, r in tried), tried


def test_allowlist_opens_a_listed_alias_only(ctx):
    listed, unlisted = service("127.0.0.2"), service("127.0.0.3")
    targets = {"listed": f"http://127.0.0.2:{listed}/",
               "unlisted": f"http://127.0.0.3:{unlisted}/",
               "other": f"http://127.0.0.1:{service('127.0.0.1')}/"}
    perm = {"network": {"mode": "allowlist", "allowlist": ["127.0.0.2/32"]}}
    for run in (run_scripted, run_pi):
        out = run(ctx, probe({**targets, **model_targets(ctx, run)}), sandboxPermission=perm,
                  modelConnection=named_model(ctx))
        print("    " + out.replace("\n", "; "))
        assert reached(out, "listed") and reached(out, "model"), out
        check_direct(out)
        assert not reached(out, "unlisted") and not reached(out, "other"), out


def test_off_reaches_only_the_model(ctx):
    targets = {"other": f"http://127.0.0.1:{service('127.0.0.1')}/",
               "alias": f"http://127.0.0.2:{service('127.0.0.2')}/",
               "public": "http://93.184.216.34/"}
    perm = {"network": {"mode": "off"}}
    for run in (run_scripted, run_pi):
        cmd = (probe({**targets, **model_targets(ctx, run)}) +
               "; getent hosts example.com >/dev/null && echo dns=yes || echo dns=no")
        out = run(ctx, cmd, sandboxPermission=perm, modelConnection=named_model(ctx))
        print("    " + out.replace("\n", "; "))
        assert reached(out, "model"), out
        check_direct(out)
        for name in ("other", "alias", "public"):
            assert not reached(out, name), f"{name} under off:\n{out}"
        assert "dns=no" in out, out


def check_harness_turns(ctx, mode):
    for harness in MODELS:
        tag = uuid.uuid4().hex[:8]
        req = harness_request(ctx, harness, f"Say hello {tag}", "sk-net-" + uuid.uuid4().hex[:8],
                              sandboxPermission={"network": {"mode": mode}})
        status, recs = ctx.stack.stream(req)
        res = result_of(recs)
        assert status == 200 and res["ok"] is True, (harness, mode, res)
        assert res["output"].endswith("Hello from the fake model."), (harness, res["output"])
        seen = model_requests_with(ctx, tag)
        assert seen, f"{harness} under {mode} never reached the model"


def test_every_harness_completes_a_turn_under_on(ctx):
    check_harness_turns(ctx, "on")


def test_every_harness_completes_a_turn_under_off(ctx):
    check_harness_turns(ctx, "off")


def test_a_malformed_allowlist_entry_is_a_400_naming_it(ctx):
    for entries, index, words in ((["10.0.0.0/8", "10.0.0.1/8"], 1, "host bits set"),
                                  (["exa mple.com"], 0, "not an IPv4 or IPv6 address"),
                                  # a host name parses; the local sandbox cannot enforce it
                                  (["10.0.0.0/8", "example.com"], 1,
                                   '"example.com" is a host name; the local sandbox enforces'),
                                  (["127.0.0.1/33"], 0, "prefix length"),
                                  ([42], 0, "expected a string")):
        status, _, body = ctx.stack.request("POST", "/run", scripted_request(
            "hi", sandboxPermission={"network": {"mode": "allowlist", "allowlist": entries}}))
        assert status == 400, (status, body)
        assert f"sandboxPermission.network.allowlist[{index}]" in body["error"], body
        assert words in body["error"], body
