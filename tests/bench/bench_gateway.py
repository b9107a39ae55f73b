"""Benchmark row 9 for tests/bench/run.py: what the model gateway adds to a model call.

The same client, inside a local sandbox (acp-scripted's exec step running a python3 HTTP/1.1
client on keep-alive connections), calls tests/fixtures/fake_model.py's Chat Completions:

  direct   a run without a credential (credentialMode "none"): the gateway does not apply and
           the endpoint is named, so the client reaches the fake model itself, through the
           keeper's egress proxy (a transparent TCP relay: what every call paid before);
  gateway  a run with a key: the client calls the sandbox's gateway (127.0.0.1:1001) with the
           placeholder; the keeper reads the request, checks it, forwards it with libcurl and
           the real key (the upstream connection kept alive), streams the answer back chunked
           and reads the usage on the way.

Two answers: a 1 KB JSON answer (keep-alive) and a 200-chunk event stream (the fake model
closes each stream's connection, so both paths open one upstream connection per stream). Per
call the client times the first body byte and the whole answer from the request's first byte;
added = p50(gateway) - p50(direct), in the same sandbox kind and against the same server.
"""

import json
import statistics
import uuid

from turns import model_connection, result_of, script, scripted_request

TARGET_MS = 1.0
PLACEHOLDER = "agent-runner-model-gateway"

CLIENT = r'''
import http.client, json, socket, sys, time
host, port, path, key, n, stream, name = sys.argv[1:8]
n, stream = int(n), stream == "1"
body = json.dumps({"model": "fake-model", "stream": stream,
                   "messages": [{"role": "user", "content": "[[script:%s]]" % name}]})
hdr = {"content-type": "application/json", "authorization": "Bearer " + key}
conn, out = None, []
for i in range(n + 5):
    if conn is None:
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as harnesses do
    t0 = time.perf_counter()
    conn.request("POST", path, body, hdr)
    r = conn.getresponse()
    first = r.read(1)
    t1 = time.perf_counter()
    rest = r.read()
    t2 = time.perf_counter()
    if r.status != 200 or not first:
        print("BAD", r.status, (first + rest)[:200]); sys.exit(1)
    if r.will_close:
        conn.close(); conn = None
    if i >= 5:
        out.append([(t1 - t0) * 1e3, (t2 - t0) * 1e3, len(first) + len(rest)])
print("TIMES " + json.dumps(out))
'''


def client_cmd(host, port, path, key, n, stream, name):
    prog = CLIENT.replace("'", "'\\''")
    return (f"python3 -c '{prog}' {host} {port} {path} {key} {n} {1 if stream else 0} {name}")


def run_client(st, model, key, stream, n, name):
    if key:
        mc = model_connection("openai", "OPENAI_API_KEY", model.base + "/v1", key)
        host, port, secret = "127.0.0.1", 1001, PLACEHOLDER
    else:
        mc = {"provider": "openai", "deployment": "custom",
              "endpoint": {"baseUrl": model.base + "/v1"}, "credentialMode": "none"}
        host, port, secret = "127.0.0.1", model.port, "none"
    cmd = client_cmd(host, port, "/v1/chat/completions", secret, n, stream, name)
    status, recs = st.stream(scripted_request(script([{"exec": cmd}]), modelConnection=mc))
    res = result_of(recs)
    outs = [rec["event"]["output"] for _, rec in recs
            if rec.get("kind") == "event" and rec["event"]["type"] == "tool_result"]
    line = next((x for o in outs for x in o.splitlines() if x.startswith("TIMES ")), None)
    if status != 200 or not res.get("ok") or not line:
        raise RuntimeError(f"the client run failed: {res.get('error')} {outs[:1]}")
    return json.loads(line[6:])


def p50(xs):
    return statistics.median(xs)


def measure(st, model, quick, log):
    """Both answers, both paths: {kind: {path: {first_p50, total_p50, n, bytes}}}."""
    out = {}
    for kind, stream, text, n in (("json", False, " ".join(["w" * 7] * 128), 40 if quick else 300),
                                  ("stream", True, " ".join(["word"] * 200), 10 if quick else 60)):
        name = f"bench-gw-{kind}-{uuid.uuid4().hex[:6]}"
        model.script(name, [{"text": text}])
        out[kind] = {}
        for path, key in (("direct", None), ("gateway", "sk-bench-" + uuid.uuid4().hex)):
            log(f"model gateway: {n} {kind} calls, {path}")
            t = run_client(st, model, key, stream, n, name)
            out[kind][path] = {"first_p50": p50([x[0] for x in t]),
                               "total_p50": p50([x[1] for x in t]), "n": len(t),
                               "bytes": t[0][2]}
    return out


def rows(g, fmt_ms):
    def verdict(v):
        return "met" if v <= TARGET_MS else "**missed**"

    out = []
    for kind, what in (("json", "1 KB answer"), ("stream", "200-chunk stream")):
        d, w = g[kind]["direct"], g[kind]["gateway"]
        added_total = w["total_p50"] - d["total_p50"]
        added_first = w["first_p50"] - d["first_p50"]
        detail = (f"{w['n']} calls each way from a sandbox (python3 client, keep-alive) to "
                  f"fake_model.py, {w['bytes']} body bytes; direct (through the egress proxy) "
                  f"p50 {fmt_ms(d['total_p50'])} whole / {fmt_ms(d['first_p50'])} first byte, "
                  f"gateway p50 {fmt_ms(w['total_p50'])} / {fmt_ms(w['first_p50'])}")
        out.append((f"12. model gateway added per call p50, {what}", fmt_ms(added_total),
                    f"<= {TARGET_MS:g} ms ({verdict(added_total)})", detail,
                    f"gateway / direct = {w['total_p50'] / max(d['total_p50'], 1e-6):.2f}"))
        out.append((f"12. model gateway added to the first byte p50, {what}", fmt_ms(added_first),
                    f"<= {TARGET_MS:g} ms ({verdict(added_first)})", "same calls",
                    f"gateway / direct = {w['first_p50'] / max(d['first_p50'], 1e-6):.2f}"))
    return out
