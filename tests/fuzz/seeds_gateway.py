#!/usr/bin/env python3
"""Write the seed inputs of tests/fuzz/corpus/gateway_http/ and gateway_usage/ (the layouts are
described at the top of tests/fuzz/fuzz_gateway_http.c and fuzz_gateway_usage.c).

Run from the repository root: python3 tests/fuzz/seeds_gateway.py.
"""
import json
import os

from seeds import CORPUS, write  # tests/fuzz/seeds.py: seed-<name> files under the corpus folder


def j(o):
    return json.dumps(o, separators=(",", ":"))


def http_seeds():
    t = "gateway_http"
    heads = {
        "post": "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:1001\r\n"
                "Authorization: Bearer agent-runner-model-gateway\r\nContent-Length: 2\r\n\r\n{}",
        "http10": "GET /v1/models HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        "bare-lf": "HEAD / HTTP/1.1\nX: y\n\n",
        "smuggle": "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        "two-lengths": "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        "te-gzip": "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "folded": "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
        "ctl": "GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n",
        "cr": "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
        "expect": "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 9999999\r\n\r\n",
        "many": "GET / HTTP/1.1\r\n" + "".join(f"X{i}: {i}\r\n" for i in range(120)) + "\r\n",
        "absolute": "GET http://evil/x HTTP/1.1\r\n\r\n",
    }
    for name, h in heads.items():
        write(t, "head-" + name, b"\x00" + h.encode("latin-1"))
    bodies = {
        "simple": "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        "ext-trailer": "5;a=b\r\nhello\r\n0\r\nX: y\r\n\r\nNEXT",
        "lf-only": "3\nabc\n0\n\n",
        "bad-size": "zz\r\nabc\r\n",
        "bad-crlf": "3\r\nabcX\r\n",
        "huge": "fffffffffffffffff\r\n",
    }
    for name, b in bodies.items():
        write(t, "chunked-" + name, b"\x01\x03\x05" + b.encode())


def usage_seeds():
    t = "gateway_usage"
    chat = ("data: " + j({"model": "m", "choices": [{"delta": {"content": "hi"}}],
                          "usage": None}) + "\n\n" +
            "data: " + j({"choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 7,
                                                    "total_tokens": 37, "prompt_tokens_details":
                                                    {"cached_tokens": 20}}}) + "\n\n"
            "data: [DONE]\n\n")
    anth = ("event: message_start\r\ndata: " + j({"type": "message_start", "message": {
        "model": "c", "usage": {"input_tokens": 10, "cache_read_input_tokens": 5,
                                "output_tokens": 1}}}) + "\r\n\r\n"
            "event: message_delta\r\ndata: " + j({"type": "message_delta", "usage": {
                "output_tokens": 9}}) + "\r\n\r\nevent: message_stop\r\ndata: {}\r\n\r\n")
    resp = ("event: response.completed\ndata: " + j({"type": "response.completed", "response": {
        "model": "g", "usage": {"input_tokens": 4, "output_tokens": 3, "total_tokens": 7}}})
            + "\n\n")
    seeds = {
        "chat-stream": (1, 1, chat),
        "anthropic-stream": (3, 1, anth),
        "responses-stream": (2, 1, resp),
        "chat-json": (1, 0, j({"model": "m", "usage": {"prompt_tokens": 3,
                                                       "completion_tokens": 4}})),
        "anthropic-json": (3, 0, j({"usage": {"input_tokens": 3, "output_tokens": 4}})),
        "multiline-data": (1, 1, "data: {\"usage\":\ndata: {\"prompt_tokens\":1}}\n\n"),
        "negative": (1, 1, "data: " + j({"usage": {"prompt_tokens": -5,
                                                   "completion_tokens": 2 ** 62}}) + "\n\n"),
        "garbage": (3, 1, "event: message_delta\ndata: {\"type\":\"message_delta\",\n\n\n"),
        "gemini-stream": (4, 1, "data: " + j({"usageMetadata": {"promptTokenCount": 9,
                                                                "candidatesTokenCount": 4}})
                          + "\r\n\r\n"),
        "gemini-array": (4, 0, j([{"usageMetadata": {"promptTokenCount": 3}},
                                  {"usageMetadata": {"candidatesTokenCount": 5}}])),
    }
    for name, (api, sse, text) in seeds.items():
        write(t, name, bytes([api, sse, 6]) + text.encode())


if __name__ == "__main__":
    http_seeds()
    usage_seeds()
    for t in ("gateway_http", "gateway_usage"):
        print("%s: %d files" % (t, len(os.listdir(os.path.join(CORPUS, t)))))
