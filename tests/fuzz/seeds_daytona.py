#!/usr/bin/env python3
"""Write the hand-made seed inputs of tests/fuzz/corpus/{ws_frame,daytona_demux}/.

Run from the repository root: python3 tests/fuzz/seeds_daytona.py. Seeds are named seed-*;
inputs libFuzzer found and that were kept are named found-* and are not touched here. The input
layouts are described at the top of tests/fuzz/fuzz_ws_frame.c and fuzz_daytona_demux.c.
"""
import struct

from seeds import write  # tests/fuzz/seeds.py: seed-<name> files under the corpus folder


def frame(op, payload, fin=True, masked=False, length=None):
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | op])
    m = 0x80 if masked else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 65536:
        head += bytes([m | 126]) + struct.pack(">H", n)
    else:
        head += bytes([m | 127]) + struct.pack(">Q", n)
    if masked:
        head += b"\x01\x02\x03\x04"
    return head + payload


def ws_seeds():
    t = "ws_frame"
    log = b"\x01\x01\x01{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\x02\x02\x02warn\n"
    seeds = {
        "binary-log": frame(2, log),
        "fragmented": frame(2, b"abc", fin=False) + frame(9, b"hi") + frame(0, b"de", fin=False)
        + frame(0, b"f") + frame(8, b"\x03\xe8"),
        "text-then-close": frame(1, b"hello") + frame(8, b"\x03\xe8bye"),
        "close-empty": frame(8, b""),
        "ping-pong": frame(9, b"keepalive") + frame(10, b"") + frame(2, b"x"),
        "len16": frame(2, b"y" * 300),
        "len64": frame(2, b"z" * 70000),
        "masked": frame(2, b"abc", masked=True),
        "reserved": b"\xc2\x01a",
        "bad-opcode": b"\x83\x00",
        "cont-first": frame(0, b"a"),
        "ping-fragmented": frame(9, b"", fin=False),
        "ping-too-long": b"\x89\x7e\x00\x7e" + b"p" * 126,
        "nonminimal16": b"\x82\x7e\x00\x05hello",
        "nonminimal64": b"\x82\x7f" + struct.pack(">Q", 5) + b"hello",
        "huge64": b"\x82\x7f\x80" + b"\x00" * 7,
        "close-1-byte": b"\x88\x01\x03",
        "close-bad-code": frame(8, b"\x03\xed"),
        "after-close": frame(8, b"\x03\xe8") + frame(2, b"late"),
        "truncated": frame(2, b"abcdef")[:5],
        "many-small": b"".join(frame(2, bytes([i]) * (i % 7)) for i in range(40)),
    }
    for i, (name, data) in enumerate(sorted(seeds.items())):
        write(t, name, bytes([i * 37 % 256]) + data)
    # the same log at every frame limit and step
    for b in (0, 5, 0x20 | 3, 0xe0 | 16):
        write(t, f"log-b{b:02x}", bytes([b]) + frame(2, log[:7]) + frame(2, log[7:]))


def demux_seeds():
    t = "daytona_demux"
    logs = {
        "plain": b"\x01\x01\x01hello\n\x02\x02\x02oops\n\x01\x01\x01world\n",
        "no-marker": b"just text before any marker\n",
        "straddle": b"\x01\x01\x01ab\x01\x01\x02\x02\x02cd\x02\x02",
        "partials": b"a\x01\x01b\x02\x02\x02c\x01\x02\x02\x02d\x02",
        "runs": b"\x01" * 7 + b"\x02" * 5 + b"x",
        "empty": b"",
        "acp": b"\x01\x01\x01" + b"{\"jsonrpc\":\"2.0\",\"method\":\"session/update\"}\n" * 3
        + b"\x02\x02\x02[pi] starting\n",
        "binary": bytes(range(256)),
    }
    for name, log in logs.items():
        for k, head in enumerate((b"\x00\x40\x80\xff", b"\x10\x10\x10\x10", b"\xfe\x01\x7f\x33")):
            write(t, f"{name}-{k}", head + log)


if __name__ == "__main__":
    ws_seeds()
    demux_seeds()
