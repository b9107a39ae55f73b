#!/usr/bin/env python3
"""Write the hand-made seed inputs of tests/fuzz/corpus/mcp_bridge/ (the agenta-tools MCP server).

Run from the repository root: python3 tests/fuzz/seeds_tools.py. Seeds are named seed-*;
inputs libFuzzer found and that were kept are named found-* and are not touched here. The
input layout is described at the top of tests/fuzz/fuzz_mcp_bridge.c.
"""
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus", "mcp_bridge")


def j(o):
    return json.dumps(o, separators=(",", ":"))


def h(o):
    return "H" + (o if isinstance(o, str) else j(o))


def r(o):
    return "R" + (o if isinstance(o, str) else j(o))


def req(i, method, params=None):
    o = {"jsonrpc": "2.0", "id": i, "method": method}
    if params is not None:
        o["params"] = params
    return o


def call(i, name, args=None, meta=None):
    p = {"name": name}
    if args is not None:
        p["arguments"] = args
    if meta is not None:
        p["_meta"] = meta
    return req(i, "tools/call", p)


def result(i, text, is_error=False):
    return {"jsonrpc": "2.0", "id": i,
            "result": {"content": [{"type": "text", "text": text}], "isError": is_error}}


HELLO_OK = r({"jsonrpc": "2.0", "id": 1, "result": {"protocol": 1}})
INIT = h(req(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "claude-code", "version": "2.1"}}))

SEEDS = {
    "session": [HELLO_OK, INIT, h({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                h(req(1, "tools/list", {})),
                h(call(2, "get_user", {"a": 1}, {"claudecode/toolUseId": "toolu_01ABC"})),
                r(result(2, "done"))],
    "two-calls-out-of-order": [HELLO_OK, h(call(5, "get_user")), h(call("six", "pick", {})),
                               r(result(3, "b", True)), r(result(2, "a"))],
    "answer-all": [h(call(i, "github__search", {"q": str(i)})) for i in range(10)] + ["A"],
    "cancel": [h(call(9, "pick")),
               h({"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": 9, "reason": "user"}}), r(result(2, "late"))],
    "down-mid-call": [h(call(1, "pick")), h(call(2, "pick")), "D", h(call(3, "pick"))],
    "down-no-reconnect": ["D", "F", h(call(1, "pick")), "F", h(call(2, "pick")), "A"],
    "bad-hello": [h(call(1, "pick")), r({"jsonrpc": "2.0", "id": 1, "result": {"protocol": 9}})],
    "hello-error": [r({"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "x"}})],
    "runner-request": [r(req(77, "fs/read_text_file", {"path": "/etc/shadow"}))],
    "runner-junk": ["R", "Rnull", "R[]", r({"jsonrpc": "2.0", "id": "x", "result": {}}),
                    r(result(999, "unknown id")),
                    r({"jsonrpc": "2.0", "id": 2, "result": {"content": "not a list"}})],
    "malformed-result": [h(call(1, "pick")), r({"jsonrpc": "2.0", "id": 2, "result": {}})],
    "errors": [h(call(1, "nope")), h(call(2, "pick", [1, 2])), h(req(3, "tools/call", [])),
               h(req(4, "resources/list")), h(req(5, "ping")),
               h("[" + j(req(6, "ping")) + "]"), h('{"id":7,"method":"ping"}'),
               h('{"jsonrpc":"2.0","id":8,'), h(""), "L", h("null"), h('"str"'),
               h('{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}'),
               h('{"jsonrpc":"2.0","id":null,"method":"ping"}')],
    "responses-from-harness": [h({"jsonrpc": "2.0", "id": 1, "result": {}}),
                               h({"jsonrpc": "2.0", "id": 2, "error": {"code": 1, "message": "x"}})],
    "ids": [h(call(2 ** 62, "pick")), h(call(-1, "pick")), h(call("", "pick")),
            h(call("x" * 300, "pick", meta={"claudecode/toolUseId": "bad id with spaces"})),
            h(call(3, "pick", meta={"toolCallId": "call_abc:1.2-3"})), "A"],
    "versions": [h(req(1, "initialize", {"protocolVersion": "x" * 40})),
                 h(req(2, "initialize", {"protocolVersion": 5})), h(req(3, "initialize"))],
    "unicode": [h(call(1, "get_user", {"name": "\u00e9\u6f22\U0001f600"})),
                r('{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":'
                  '"\\u00e9\\ud83d\\ude00"}],"isError":false}}')],
    "crlf": [h(req(1, "ping")) + "\r", "U", "F", "D", "U"],
    "tools-file": ["T" + j([{"name": "a", "description": "A", "inputSchema": {"type": "object"}},
                            {"name": "b-c_d.e"}]), h(req(1, "tools/list")), h(call(2, "b-c_d.e")),
                   "A"],
    "tools-file-bad": ["T" + j([{"name": "a b"}])],
    "tools-file-dup": ["T" + j([{"name": "a"}, {"name": "a"}])],
    "tools-file-empty": ["T[]", h(req(1, "tools/list")), h(call(2, "a"))],
    "pending-cap": [h(call(i, "pick")) for i in range(70)] + ["D"],
}


def main():
    os.makedirs(CORPUS, exist_ok=True)
    for name, lines in SEEDS.items():
        with open(os.path.join(CORPUS, "seed-" + name), "wb") as f:
            f.write("\n".join(lines).encode())
    print(f"wrote {len(SEEDS)} seeds to {os.path.relpath(CORPUS, ROOT)}")


if __name__ == "__main__":
    main()
