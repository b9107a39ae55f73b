#!/usr/bin/env python3
"""Write the hand-made seed inputs of tests/fuzz/corpus/<target>/.

Run from the repository root: python3 tests/fuzz/seeds.py. Seeds are named seed-*; inputs
libFuzzer found and that were kept (minimised) are named found-* and are not touched here.
The input layouts are described at the top of each tests/fuzz/fuzz_<target>.c.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")
GOLDEN = os.path.join(ROOT, "tests", "fixtures", "agenta-golden")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def j(o):
    return json.dumps(o, separators=(",", ":"))


def request_seeds():
    t = "request"
    for g in sorted(os.listdir(GOLDEN)):
        if g.startswith("run_request."):
            with open(os.path.join(GOLDEN, g), "rb") as f:
                write(t, "golden-" + g[len("run_request."):], f.read())
    user = [{"role": "user", "content": "hi"}]
    mc_env = {"provider": "openai", "deployment": "direct", "credentialMode": "env",
              "credentials": [{"binding": {"kind": "environment", "name": "OPENAI_API_KEY"},
                               "value": "sk0123456789abcdef", "usage": "opaque_http"}]}
    seeds = {
        "empty": "",
        "blank": " \r\n\t",
        "object": "{}",
        "null": "null",
        "array": "[]",
        "string": "\"x\"",
        "truncated": "{\"harness\":\"pi",
        "trailing": "{} x",
        "scripted": j({"harness": "scripted", "messages": user}),
        "legacy": j({"secrets": {}, "provider": "openai", "endpoint": "x"}),
        "sandbox": j({"sandbox": "daytona"}),
        "ids": j({"sessionId": "  ", "turnId": "t\u0001", "projectId": "a:b"}),
        "id-long": j({"sessionId": "s" * 129}),
        "nul-model": "{\"model\":\"a\\u0000b\",\"messages\":[{\"role\":\"user\",\"content\":\"x\\u0000\"}]}",
        "mc-env": j({"modelConnection": mc_env, "messages": user}),
        "mc-leak": j({"modelConnection": dict(mc_env, credentials=[
            dict(mc_env["credentials"][0], usage="bogus")])}),
        "mc-custom": j({"modelConnection": {
            "provider": "x", "deployment": "custom", "credentialMode": "env",
            "endpoint": {"baseUrl": "http://127.0.0.1:8080/v1", "headers": {"X-A": "b"}},
            "environment": {"MY_VAR": "1", "LD_PRELOAD": "x"},
            "credentials": mc_env["credentials"]}}),
        "mc-urls": j({"modelConnection": {
            "provider": "x", "deployment": "d", "credentialMode": "none",
            "endpoint": {"baseUrl": "https://user@[::1]:65536/"}}}),
        "blocks": j({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "tool_call", "toolCallId": "c1", "toolName": "t", "input": {"a": 1}},
            {"type": "tool_result", "toolCallId": "c1", "output": "o", "isError": True},
            {"type": "resource", "uri": "file:///x"}, {"type": "weird"}]}]}),
        "blocks-bad": j({"messages": [{"role": "user", "content": [{"type": "image"}, 3]}, 7]}),
        "files": j({"harnessFiles": [{"path": "a/b.txt", "content": "x"},
                                     {"path": "../etc/passwd", "content": "x"},
                                     {"path": "a//b", "content": "x"}, {"path": "/abs", "content": ""}]}),
        "files-dup": j({"harnessFiles": [{"path": "a", "content": "x"}, {"path": "a", "content": "y"}]}),
        "skills": j({"skills": [
            {"name": "ok-skill", "description": "d\u00e9j\u00e0", "body": "b",
             "files": [{"path": "SKILL.md", "content": "x"}]},
            {"name": "Bad--name", "description": "d", "body": "b"}]}),
        "skills-exec": j({"skills": [{"name": "s", "description": "d", "body": "b",
                                      "files": [{"path": "run.sh", "content": "x",
                                                 "executable": True}]}]}),
        "tools": j({"customTools": [
            {"name": "a", "kind": "callback", "call": {"method": "GET", "path": "/x"}},
            {"name": "b", "kind": "code"}, {"name": "a", "callRef": "r", "call": {}}]}),
        "mcp": j({"mcpServers": [
            {"name": "srv", "connection": {"type": "http", "url": "http://localhost:9/mcp"},
             "policy": {"permission": "ask", "tools": {"mode": "include"}}},
            {"name": "agenta-tools", "connection": {"type": "stdio"}}]}),
        "callback": j({"toolCallback": {"endpoint": "http://10.0.0.1/x",
                                        "authorization": "Bearer 123456789012345678"}}),
        # the tool sections' second pass: accepted in full, and one fault of each kind
        "tools-full": j({"toolCallback": {"endpoint": "https://cb.example/tools/call",
                                          "authorization": "Bearer abc123def456ghi789"},
                         "customTools": [
            {"name": "t1", "callRef": "r1", "description": "d", "timeoutMs": 5000,
             "inputSchema": {"type": "object", "required": ["a"]}, "readOnly": True,
             "permission": "ask", "contextBindings": {"x.y": "$ctx.run.id"},
             "ephemeralArgs": ["z"], "render": {"kind": "c"}},
            {"name": "t2", "call": {"method": "POST", "path": "/api/{id}", "body": {"k": 1},
                                    "context": {"c": "$ctx.a"}, "args_into": "data.inputs"}},
            {"name": "t3", "kind": "client", "callRef": ""}]}),
        "tools-deep": j({"customTools": [
            {"name": "a", "callRef": "r", "contextBindings": {"__proto__.x": "$ctx.x"},
             "ephemeralArgs": ["", 1], "timeoutMs": -1},
            {"name": "b", "call": {"method": "GET", "path": "//x", "args_into": ".x"}}]}),
        "tools-no-endpoint": j({"customTools": [{"name": "c", "kind": "client"},
                                                {"name": "b", "callRef": "r"}]}),
        "mcp-full": j({"mcpServers": [
            {"name": "gh", "connection": {
                "type": "http", "url": "https://mcp.gh/mcp",
                "headers": {"X-Org": "acme", "b-Second": "2"},
                "credentials": [{"binding": {"kind": "header", "name": "Authorization"},
                                 "value": "Bearer gh0123456789abcdef", "usage": "opaque_http"}]},
             "policy": {"tools": {"mode": "include", "names": ["a", "b.c"]},
                        "permission": "ask"}},
            {"name": "docs", "connection": {"type": "http", "url": "https://mcp.docs/mcp"},
             "policy": {"tools": {"mode": "include"}}}]}),
        "mcp-headers": j({"mcpServers": [
            {"name": "s", "connection": {
                "type": "http", "url": "https://m/",
                "headers": {"Accept": "x", "X-A": "a\r\nB: c", "Bad Name": "v"},
                "credentials": [{"binding": {"kind": "header", "name": "x-a"},
                                 "value": "tok0123456789abcdef"},
                                {"binding": {"kind": "environment", "name": "T"}}]}}]}),
        "mcp-include": j({"mcpServers": [
            {"name": "s", "connection": {"type": "http", "url": "https://m/", "headers": [1]},
             "policy": {"tools": {"mode": "include", "names": "x"}}}]}),
        "permissions": j({"permissions": {"default": "ask", "rules": [
            {"pattern": "Bash(*)", "permission": "deny"}, {"pattern": "", "permission": "x"}]}}),
        "sandbox-perm": j({"sandboxPermission": {"enforcement": "best_effort", "network": {
            "mode": "allowlist", "allowlist": ["example.com"]}}}),
        "sandbox-fs": j({"sandboxPermission": {"filesystem": {}}}),
        "lifecycle": j({"lifecycle": {"mode": "warm", "idleTimeoutMs": 86400000}}),
        "lifecycle-bad": j({"lifecycle": {"mode": "per_turn", "idleTimeoutMs": 9223372036854775808}}),
        "telemetry": j({"telemetry": {"exporters": {"otlp": {
            "endpoint": "https://otlp.example:4318/v1/traces", "headers": {"a": 1}}}}}),
        "traceparent": j({"context": {"propagation": {
            "traceparent": "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"}}}),
        "run-context": j({"projectId": "p1", "runContext": {"project": {"id": "proj:x"}}}),
        "connection": j({"connection": {"mode": "m", "slug": "bad slug"}, "harnessMode": "agent"}),
        "deep": "[" * 70 + "]" * 70,
        "session-ref": j({"sessionId": "sess-1", "projectId": "proj-1", "targetTurnId": "turn-1"}),
        "session-ref-bad": j({"sessionId": "s", "projectId": "a:b"}),
        "unicode": "{\"agentsMd\":\"\\ud83d\\ude00 \\u2028\",\"model\":\"m\u00e9\"}",
        "bad-utf8": b"{\"model\":\"\xc3\x28\"}",
    }
    for name, data in seeds.items():
        write(t, name + ".json", data)


def acp_seeds():
    t = "acp"
    lines = [
        '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,'
        '"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true},'
        '"clientInfo":{"name":"my-client","title":"My Client","version":"1.0.0"}}}',
        '{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":true,'
        '"promptCapabilities":{"image":true,"audio":true,"embeddedContext":true}},'
        '"agentInfo":{"name":"my-agent","title":"My Agent","version":"1.0.0"},"authMethods":[]}}',
        '{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/home/user/project","mcpServers":[]}}',
        '{"jsonrpc":"2.0","id":1,"result":{"sessionId":"sess_abc123","modes":{},"configOptions":[]}}',
        '{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}',
        '{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"sess_abc123"}}',
        '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":'
        '{"sessionUpdate":"agent_message_chunk","messageId":"msg_1","content":{"type":"text","text":"I\'ll analyze..."}}}}',
        '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":'
        '{"sessionUpdate":"tool_call","toolCallId":"call_001","title":"Reading configuration file","kind":"read","status":"pending"}}}',
        '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":'
        '{"sessionUpdate":"usage_update","used":53000,"size":200000,"cost":{"amount":0.045,"currency":"USD"}}}}',
        '{"jsonrpc":"2.0","id":5,"method":"session/request_permission","params":{"sessionId":"sess_abc123",'
        '"toolCall":{"toolCallId":"call_001"},"options":[{"optionId":"allow-once","name":"Allow once","kind":"allow_once"},'
        '{"optionId":"reject-once","name":"Reject","kind":"reject_once"}]}}',
        '{"jsonrpc":"2.0","id":3,"method":"fs/read_text_file","params":{"sessionId":"s","path":"/abs/main.py","line":10,"limit":50}}',
        '{"jsonrpc":"2.0","id":4,"result":null}',
        '{"jsonrpc":"2.0","id":7,"error":{"code":-32000,"message":"Authentication required"}}',
        '{"jsonrpc":"2.0","id":"req-\\u00e9","method":"x/unknown","params":[1,2.5e300,-0,true,null]}',
    ]
    # byte 0: line maximum index (6 = 64 MiB), byte 1: chunk seed
    write(t, "session.ndjson", bytes([6, 1]) + ("\n".join(lines) + "\n").encode())
    for i, line in enumerate(lines):
        write(t, "line-%02d.ndjson" % i, bytes([5, i]) + (line + "\n").encode())
    edge = {
        "crlf": (5, b'{"jsonrpc":"2.0","method":"m"}\r\n\r\n\n'),
        "no-newline": (5, b'{"jsonrpc":"2.0","id":1,"result":{}}'),
        "over-max": (1, b'{"jsonrpc":"2.0"}\n{"jsonrpc":"2.0","method":"m"}\n'),
        "over-partial": (2, b'{"jsonrpc":"2.0","method":"a-very-long-method-name-without-end'),
        "bad": (5, b'{\n[]\n"x"\n{"jsonrpc":"1.0","id":1}\n{"jsonrpc":"2.0"}\n'
                   b'{"jsonrpc":"2.0","id":1.5,"method":"m"}\n{"jsonrpc":"2.0","id":1}\n'
                   b'{"jsonrpc":"2.0","method":7}\n'),
        "null-id": (5, b'{"jsonrpc":"2.0","id":null,"method":"m"}\n'
                       b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}\n'),
        "big-ids": (5, b'{"jsonrpc":"2.0","id":18446744073709551615,"method":"m"}\n'
                       b'{"jsonrpc":"2.0","id":-9223372036854775809,"method":"m"}\n'
                       b'{"jsonrpc":"2.0","id":99999999999999999999999,"result":1}\n'),
        "nul-byte": (5, b'{"jsonrpc":"2.0","method":"a\x00b"}\n{"jsonrpc":"2.0","method":"a\\u0000b"}\n'),
        "bad-utf8": (5, b'{"jsonrpc":"2.0","method":"\xff"}\n{"jsonrpc":"2.0","method":"\xe2\x82"}\n'),
        "dup-keys": (5, b'{"jsonrpc":"2.0","id":1,"id":"s","method":"m","method":"n"}\n'),
        "deep": (5, b'{"jsonrpc":"2.0","method":"m","params":' + b"[" * 130 + b"]" * 130 + b"}\n"),
    }
    for name, (mx, data) in edge.items():
        write(t, name + ".ndjson", bytes([mx, len(name)]) + data)


def ndjson_seeds():
    t = "ndjson"
    seeds = {
        "text": (0, [b"Hello, world!", b"msg_1"]),
        "thought": (1, [b"thinking\nabout it", b"t1"]),
        "escapes": (0, [b'quote " backslash \\ slash / tab \t cr \r', b"id"]),
        "controls": (0, [bytes(range(1, 32)) + b"\x7f", b"c"]),
        "unicode": (0, ["d\u00e9j\u00e0 \u2028 \u2029 \U0001F600 \ufeff".encode(), b"u"]),
        "tool-result": (2 | 0x30, [b"exit 1\nstderr: boom", b"call_001"]),
        "tool-result-ok": (2, [b"", b"call_002"]),
        "error": (3, [b"the harness exited", b"harness_exited"]),
        "error-nocode": (3, [b"x"]),
        "tool-call": (4, [b"", b"call_003", b"read_file"]),
        "done": (5, [b"", b"0af7651916cd43dd8448eb211c80319c", b"end_turn"]),
        "empty": (0, []),
        "invalid-utf8": (0, [b"\xc3\x28 \xff \xed\xa0\x80"]),
        "overlong": (0, [b"\xc0\xaf \xe0\x80\xaf"]),
        "truncated-utf8": (0, [b"abc\xe2\x82"]),
        "long": (0, [("0123456789abcdef" * 64).encode(), b"m"]),
        "json-looking": (0, [b'{"kind":"event","event":{}}\n', b'"}\n']),
        "cuts": (0x38, ["a\u00e9b\u20acc\U0001F600d".encode() * 4, b"m"]),
        "beyond-unicode": (1, [b"\xf4\x90\x80\x80 \xf7\xbf\xbf\xbf", b"t"]),
        "five-byte": (0, [b"\xf8\x88\x80\x80\x80"]),
        "surrogate": (2, [b"\xed\xa0\xbd\xed\xb8\x80", b"call"]),
        "fields-in-id": (5, [b"", "\u00e9\"\\\n".encode(), b"max_tokens"]),
    }
    for name, (which, fields) in seeds.items():
        write(t, name + ".bin", bytes([which]) + b"\x00".join(fields))


def fcgi_seeds():
    t = "fcgi_params"
    # fields: method, document_uri, request_uri, content_length, request_id, expected,
    # header token, authorization; then the body. byte 0: presence bits, byte 1: mode bits
    # (bit 0 header = expected, bit 1 authorization = "Bearer " + expected + field 7,
    # bits 2-4 body cap index: 0 1 7 64 1000 65536 1MiB UINT64_MAX-1).
    def rec(present, mode, fields, body=b""):
        fields = [f.encode() if isinstance(f, str) else f for f in fields]
        fields += [b""] * (8 - len(fields))
        return bytes([present, mode]) + b"\x00".join(fields) + b"\x00" + body

    body = b'{"messages":[{"role":"user","content":"hi"}]}'
    seeds = {
        "post-run": rec(0xff, 6 << 2, ["POST", "/v1/run", "/v1/run?x=1", str(len(body)),
                                       "req-123", "s3cret", "s3cret", ""], body),
        "bearer": rec(0xbf, 4 << 2, ["POST", "", "/v1/run?stream=1", "0", "", "tok", "",
                                     "Bearer   tok \t"]),
        "bearer-lower": rec(0xbf, 0, ["GET", "", "/healthz", "", "", "tok", "", "bearer\ttok"]),
        "bearer-nospace": rec(0xbf, 0, ["GET", "", "/", "", "", "tok", "", "Bearertok"]),
        "bearer-built": rec(0xff, 2 | (3 << 2), ["POST", "/v1/kill", "", "5", "", "tok-123", "",
                                                 "  \n"], b"{}{}{"),
        "bearer-long": rec(0xbf, 0, ["GET", "", "/", "", "", "a" * 1100, "",
                                     "Bearer " + "a" * 1100]),
        "header-wrong": rec(0xff, 0, ["GET", "/", "", "", "", "tok", "tok2", "Bearer tok"]),
        "header-empty": rec(0xff, 0, ["GET", "/", "", "", "", "tok", "", "Bearer tok"]),
        "no-expected": rec(0xdf, 1, ["GET", "/", "", "", "", "", "", "Bearer "]),
        "cl-junk": rec(0x0f, 7 << 2, ["POST", "/v1/run", "", "12a"]),
        "cl-neg": rec(0x0f, 7 << 2, ["POST", "/v1/run", "", "-1"]),
        "cl-space": rec(0x0f, 7 << 2, ["POST", "/v1/run", "", " 5"], b"hello"),
        "cl-plus": rec(0x0f, 7 << 2, ["POST", "/v1/run", "", "+5"], b"hello"),
        "cl-max": rec(0x0f, 7 << 2, ["POST", "/v1/run", "", "18446744073709551615"]),
        "cl-overflow": rec(0x0f, 7 << 2, ["POST", "/v1/run", "", "18446744073709551616"]),
        "cl-zeros": rec(0x0f, 3 << 2, ["POST", "/v1/run", "", "00017"], b"x" * 20),
        "cl-over-cap": rec(0x0f, 1 << 2, ["POST", "/v1/run", "", "2"], b"xx"),
        "cl-short": rec(0x0f, 5 << 2, ["POST", "/v1/run", "", "100"], b"short body"),
        "cl-hex": rec(0x0f, 7 << 2, ["POST", "/v1/run", "", "0x10"], b"x" * 16),
        "long-method": rec(0x07, 0, ["PROPFINDPROPFINDPROPFIND", "/a", "/b"]),
        "long-path": rec(0x02, 0, ["", "/" + "p" * 300 + "?q"]),
        "query-only": rec(0x04, 0, ["", "", "?a=b"]),
        "no-uri": rec(0x00, 0, []),
        "request-id-39": rec(0x10, 0, ["", "", "", "", "r" * 39]),
        "request-id-40": rec(0x10, 0, ["", "", "", "", "r" * 40]),
        "request-id-ctl": rec(0x10, 0, ["", "", "", "", "id\r\nX-Injected: 1"]),
        "short": bytes([0xff]),
    }
    for name, data in seeds.items():
        write(t, name + ".bin", data)


def keeper_proto_seeds():
    # byte 0 even: '\n'-separated socket / start-pipe lines; odd: a keeper spec
    lines = {
        "worker-control": "#park 60000\n#await 600000\n#destroy\n#model-sync\n",
        "keeper-control": "#hello 123 456\n#busy\n#exit 137\n#model-synced\n#model "
                          + j({"event": "call", "api": "chat", "model": "m", "status": 200,
                               "usage": {"input": 1, "output": 2, "total": 3}}) + "\n",
        "start-pipe": "ready 42 43\nerror cannot listen on /x: Address in use\n",
        "acp-tool": j({"jsonrpc": "2.0", "id": 1, "method": "session/prompt",
                       "params": {"sessionId": "s"}}) + "\n@tool "
                    + j({"jsonrpc": "2.0", "id": "t1", "method": "tool/call"}) + "\n",
        "malformed": "#park\n#park 0\n#park 86400001\n#hello 1\n#exit 1001\n#destroyer\n"
                     "@tool [1]\n#claim\n\n#unknown x\n#model\n#model-sync x\n#model-synced 1\n",
        "claim": "#claim " + j({"envDir": "/e", "socket": "/e/keeper.sock", "idleMs": 1000,
                                "sandbox": {}}) + "\n",
    }
    for name, text in lines.items():
        write("keeper_proto", name, b"\x00" + text.encode())
    spec = {"envDir": "/state/envs/e1", "socket": "/state/envs/e1/keeper.sock",
            "idleMs": 60000, "perTurn": False, "attachTimeoutMs": 30000, "provider": "local",
            "bwrap": "/usr/bin/bwrap", "shm": "/agent-runner.default", "slot": 3,
            "generation": 17,
            "sandbox": {"workspace": "/state/envs/e1/workspace", "network": "on", "channel": "harness",
                        "roBinds": [], "files": [], "env": {"PATH": "/usr/bin"},
                        "argv": ["pi-acp"], "cwd": "/workspace"}}
    specs = {
        "spec": j(spec),
        "spec-spare": j({"envDir": "/e", "socket": "/s", "idleMs": 5, "sandbox": {}}),
        "spec-bad-slot": j({"envDir": "/e", "socket": "/s", "idleMs": 5, "sandbox": {},
                            "shm": "/x", "slot": -1, "generation": 1}),
        "spec-not-object": "[1,2,3]",
    }
    for name, text in specs.items():
        write("keeper_proto", name, b"\x01" + text.encode())
def dns_query(qid, name, qtype, flags=0x0100, qd=1, extra=b"", ar=0):
    q = (qid.to_bytes(2, "big") + flags.to_bytes(2, "big") + qd.to_bytes(2, "big") + b"\0" * 4
         + ar.to_bytes(2, "big"))
    for label in name.split(".") if name else []:
        q += bytes([len(label)]) + label.encode()
    return q + b"\0" + qtype.to_bytes(2, "big") + b"\0\1" + extra


def model_gateway_request_seeds():
    user = [{"role": "user", "content": "hi"}]
    mc = {"provider": "openai", "deployment": "custom",
          "endpoint": {"baseUrl": "https://api.example.com/v1"}, "credentialMode": "env",
          "credentials": [{"binding": {"kind": "environment", "name": "OPENAI_API_KEY"},
                           "value": "sk0123456789abcdef", "usage": "opaque_http"}]}
    write("request", "model-gateway.json", j({
        "harness": "pi_core", "model": "fake-model", "messages": user,
        "modelGateway": {"allowedModels": ["fake-model", "other-model"]},
        "modelConnection": mc}))
    write("request", "model-gateway-bad.json", j({
        "harness": "pi_core", "messages": user, "modelGateway": {"allowedModels": [1, ""]}}))


def dnsmsg_seeds():
    t = "dnsmsg"
    opt = b"\0\0\x29\x04\xd0\0\0\0\0\0\0"  # an EDNS0 OPT record
    seeds = {
        "a": dns_query(0x1234, "api.example.com", 1),
        "aaaa": dns_query(0x4321, "Api.Example.COM", 28),
        "mx": dns_query(7, "example.com", 15),
        "https": dns_query(8, "example.com", 65),
        "root": dns_query(9, "", 1),
        "edns": dns_query(10, "localhost", 1, extra=opt, ar=1),
        "odd-label": dns_query(11, "a b.example", 1),
        "long": dns_query(12, ".".join(["a" * 63] * 3 + ["b" * 61]), 1),
        "too-long": dns_query(13, ".".join(["a" * 63] * 4), 1),
        "two-questions": dns_query(14, "x.example", 1, qd=2),
        "response": dns_query(15, "x.example", 1, flags=0x8180),
        "opcode": dns_query(16, "x.example", 1, flags=0x2800),
        "pointer": dns_query(17, "", 1)[:12] + b"\xc0\x0c\0\1\0\1",
        "truncated": dns_query(18, "x.example", 1)[:20],
        "header": b"\x12\x34\x01\x00",
        "class-chaos": dns_query(19, "version.bind", 16)[:-2] + b"\0\3",
    }
    for name, data in seeds.items():
        write(t, name + ".bin", data)


def egress_cidr_seeds():
    t = "egress_cidr"
    cidrs = ["10.0.0.0/8", "127.0.0.2", "0.0.0.0/0", "::/0", "2001:db8::/32", "fe80::1%eth0",
             "10.0.0.1/8", "010.0.0.0/8", "10.0.0.0/33", "::ffff:10.0.0.0/104", "64:ff9b::/96",
             "169.254.169.254/32", "1.2.3.4/", "1.2.3.4/+1", "", "example.com/8"]
    urls = ["https://api.example.com/v1", "http://127.0.0.1:18080/v1", "http://[::1]:9000/",
            "http://user:pw@localhost:8080", "ftp://x", "http://h:0/", "http://h:65536/",
            "http://[::1", "http://0x7f.1/", "HTTPS://DUP.example", "ws://[fe80::1]/",
            "http://" + "a" * 300]
    for i, c in enumerate(cidrs):
        write(t, "cidr-%02d" % i, b"\0" + c.encode())
    for i, u in enumerate(urls):
        write(t, "url-%02d" % i, b"\1" + u.encode())


def keeper_channel_seeds():
    t = "keeper_channel"
    hello = j({"jsonrpc": "2.0", "id": 1, "method": "hello",
               "params": {"client": "pi-extension", "version": "1", "gating": True}})
    perm = j({"jsonrpc": "2.0", "id": 2, "method": "tool/permission",
              "params": {"toolCallId": "call_1", "toolName": "bash",
                         "input": {"command": "rm -rf /"}}})
    call = j({"jsonrpc": "2.0", "id": "c", "method": "tool/call",
              "params": {"toolCallId": "call_2", "toolName": "lookup", "arguments": {}}})
    usage = j({"jsonrpc": "2.0", "method": "usage", "params": {"input": 1, "output": 2}})
    error = j({"jsonrpc": "2.0", "method": "error",
               "params": {"message": "Connection error.", "code": "model_unavailable"}})
    write(t, "relay-and-answer", "\n".join(["S" + hello, "W", "S" + perm, "S" + usage, "W",
                                            "S" + call, "S" + error, "D"]))
    write(t, "alone", "\n".join(["A", "S" + hello, "S" + perm, "S" + call, "S" + usage]))
    write(t, "unauthenticated", "\n".join(["S" + usage, "S" + perm]))
    write(t, "hello-twice", "\n".join(["S" + hello, "S" + error, "S" + hello, "W", "W"]))
    write(t, "strangers", "\n".join(["S" + hello, "W", "X" + hello, "X" + usage, "X" + error,
                                      "X" + perm, "X" + call, "Xnot json", "X", "S" + usage]))
    write(t, "held-across-await", "\n".join([
        "S" + hello, "W", "S" + perm, "G", "S" + call,
        "J" + j({"jsonrpc": "2.0", "id": 1, "result": {"outcome": "deny", "message": "no"}}),
        "G", "S" + perm, "D"]))
    write(t, "malformed", "\n".join([
        "S" + hello, "W", "Snot json", "S{}", "S[1,2]", "S" + j({"jsonrpc": "2.0", "id": 3}),
        "S" + j({"jsonrpc": "2.0", "id": 4, "method": "tool/steal", "params": {}}),
        "S" + j({"jsonrpc": "2.0", "id": 5, "method": "tool/permission",
                 "params": {"toolCallId": "bad id!", "toolName": "x"}}),
        "S" + j({"jsonrpc": "2.0", "id": 6, "result": {}}),
        "S" + j({"jsonrpc": "2.0", "id": {"nested": [1]}, "method": "hello",
                 "params": {"client": "x"}}),
        "W"]))
    write(t, "worker-junk", "\n".join([
        "S" + hello, "W", "S" + perm, "Jgarbage", "J" + j({"jsonrpc": "2.0", "id": 999, "result": {}}),
        "J" + j({"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "x"}}),
        "J" + j({"jsonrpc": "2.0", "id": 1, "result": {}}), "J" + j({"jsonrpc": "2.0",
                                                                    "method": "hello"})]))
    write(t, "many-open", "\n".join(
        ["S" + hello, "W"] + ["S" + j({"jsonrpc": "2.0", "id": i, "method": "tool/call",
                  "params": {"toolCallId": "c%d" % i, "toolName": "t"}}) for i in range(80)]
        + ["D"]))


def http_query_seeds():
    """fuzz_http_query: output-size byte, name, NUL, QUERY_STRING."""
    t = "http_query"
    cases = {
        "after": (0, "after", "after=37&projectId=p1"),
        "project-encoded": (0, "projectId", "after=0&projectId=proj%2Fa+b%C3%A9"),
        "first-wins": (0, "after", "after=1&after=2"),
        "bare-name": (0, "after", "x=1&after&y"),
        "absent": (0, "projectId", "after=3"),
        "bad-escape": (0, "after", "after=%zz"),
        "short-escape": (0, "after", "after=1%4"),
        "nul-escape": (0, "projectId", "projectId=a%00b"),
        "too-long": (4, "after", "after=123456"),
        "empty": (0, "after", ""),
        "name-prefix": (0, "after", "afterx=1&aft=2&after=3"),
    }
    for name, (size, key, query) in cases.items():
        write(t, name, bytes([size]) + key.encode() + b"\0" + query.encode())


def kept_seeds():
    # a whole kept harness state (engine/session/kept.h), and damaged ones
    import hashlib

    def kept(meta, files):
        body = j(dict(meta, files=len(files))).encode() + b"\n"
        for path, data in files:
            body += j({"path": path, "size": len(data)}).encode() + b"\n" + data + b"\n"
        return (b"agent-runner-kept 1 " + hashlib.sha256(body).hexdigest().encode() + b"\n"
                + body)

    fp = "ab" * 32
    meta = {"harness": "pi", "acpSession": "019a-sess", "configFp": fp, "historyFp": fp,
            "userFp": fp, "savedMs": 1796145947815}
    log = b'{"type":"session","id":"019a-sess","cwd":"/workspace"}\n{"type":"message"}\n'
    good = kept(meta, [(".pi/agent/sessions/--workspace--/a_019a.jsonl", log),
                       ("b/\u00e9.jsonl".encode().decode("unicode_escape"), b"\x00\n\xff")])
    write("kept", "pi", good)
    write("kept", "claude-empty", kept(dict(meta, harness="claude"), []))
    write("kept", "truncated", good[:len(good) // 2])
    write("kept", "altered", good[:-5] + b"X" + good[-4:])
    write("kept", "bad-path", kept(meta, [("../escape.jsonl", b"x")]))
    write("kept", "size-past-end", kept(meta, [("a.jsonl", b"x")]).replace(b'"size":1', b'"size":9'))
    write("kept", "bad-meta", kept({"harness": 7}, []))


def main():
    http_query_seeds()
    kept_seeds()
    keeper_channel_seeds()
    request_seeds()
    acp_seeds()
    ndjson_seeds()
    fcgi_seeds()
    keeper_proto_seeds()
    dnsmsg_seeds()
    egress_cidr_seeds()
    model_gateway_request_seeds()
    for t in sorted(os.listdir(CORPUS)):
        print("%s: %d files" % (t, len(os.listdir(os.path.join(CORPUS, t)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
