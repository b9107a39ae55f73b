#!/usr/bin/env python3
"""Research driver (not part of `make test`): which configuration makes codex-acp 0.16.0 and
opencode 1.18.33 ask ACP `session/request_permission` for every tool call, and what each does
with a rejected or cancelled answer.

Each case starts the harness the way the runner does (bubblewrap with the local provider's
arguments, the harness's config in its private home, the fake model as the endpoint), lets
the fake model call one tool, answers every permission request with the case's policy,
and prints: the modes/config options from session/new, every permission request, the tool
call updates, the stop reason, whether the command's effect exists, and what the model got
back as the tool result.

usage: harness_permissions.py codex|opencode [CASE ...] [--json OUT]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import stack  # noqa: E402
from acp_client import AcpClient, pick_option  # noqa: E402
from pi_sandbox import HARNESS_DIR, NODE, SANDBOX_HOME, SYSTEM_PATH, system_dirs  # noqa: E402

CODEX_BIN = os.path.join(HARNESS_DIR, "node_modules", "@zed-industries", "codex-acp-linux-x64",
                         "bin", "codex-acp")
OPENCODE_BIN = os.path.join(HARNESS_DIR, "node_modules", "opencode-linux-x64", "bin", "opencode")


def sandbox_argv(tmp, homes, cmd, disable_userns=False):
    """bwrap as engine/provider/local.c builds it; `homes` maps sandbox paths under the home
    to host folders (the runner writes those files from memfds; a bind is equivalent here)."""
    a = ["bwrap", "--unshare-all", "--share-net", "--uid", "1000", "--gid", "1000",
         "--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if disable_userns:  # as the runner's own sandbox: no nested user namespaces
        a += ["--unshare-user", "--disable-userns"]
    a += system_dirs()
    a += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", SANDBOX_HOME,
          "--ro-bind", HARNESS_DIR, HARNESS_DIR, "--bind", os.path.join(tmp, "workspace"),
          "/workspace"]
    for inside, host in homes.items():
        a += ["--bind", host, inside]
    return a + ["--chdir", "/workspace", "--"] + cmd


def base_env():
    return {"PATH": SYSTEM_PATH, "HOME": SANDBOX_HOME, "USER": "agent", "LOGNAME": "agent",
            "LANG": "C.UTF-8", "TERM": "dumb", "TMPDIR": "/tmp"}


def summarize(acp, sid, model, marker, effect):
    perms = [m["params"] for m in acp.agent_requests("session/request_permission")]
    ups = [u["update"] for u in acp.updates(sid)]
    calls = [{k: u.get(k) for k in ("sessionUpdate", "toolCallId", "title", "kind", "status")}
             for u in ups if u.get("sessionUpdate") in ("tool_call", "tool_call_update")]
    seen = [r for r in model.requests() if marker in json.dumps(r["body"])]
    tool_results = []
    for r in seen[1:2]:
        body = r["body"]
        for it in body.get("input", []) if isinstance(body.get("input"), list) else []:
            if it.get("type") == "function_call_output":
                tool_results.append(it.get("output"))
        for m in body.get("messages", []):
            if m.get("role") == "tool":
                tool_results.append(m.get("content"))
    return {"permission_requests": perms, "tool_updates": calls,
            "model_requests": len(seen), "tool_result_seen_by_model": tool_results,
            "effect_exists": os.path.exists(effect), "text": acp.text(sid)}


def run_case(kind, case, model, answer):
    tmp = tempfile.mkdtemp(prefix=f"ar-research-{kind}.")
    ws = os.path.join(tmp, "workspace")
    os.makedirs(ws)
    t = uuid.uuid4().hex[:8]
    effect = f"made-{t}"
    marker = f"[[script:{kind}-{t}]]"
    env = base_env()
    homes = {}
    if kind == "codex":
        home = os.path.join(tmp, "codexhome")
        os.makedirs(home)
        with open(os.path.join(home, "config.toml"), "w") as f:
            f.write(case["toml"].format(base=model.base))
        if case.get("rules"):
            os.makedirs(os.path.join(home, "rules"))
            with open(os.path.join(home, "rules", "agent-runner.rules"), "w") as f:
                f.write(case["rules"])
        homes[SANDBOX_HOME + "/.codex"] = home
        env.update(CODEX_HOME=SANDBOX_HOME + "/.codex", OPENAI_API_KEY="sk-research")
        cmd = [CODEX_BIN]
        tool = case.get("tool") or {"name": "exec_command", "arguments": {
            "cmd": case.get("command", "touch /workspace/EFFECT")}}
        tool = json.loads(json.dumps(tool).replace("EFFECT", effect))
    else:
        cfgdir = os.path.join(tmp, "config")
        os.makedirs(os.path.join(cfgdir, "opencode", "node_modules", "@opencode-ai", "plugin"))
        with open(os.path.join(cfgdir, "opencode", ".gitignore"), "w") as f:
            f.write("node_modules\n")
        with open(os.path.join(cfgdir, "opencode", "node_modules", "@opencode-ai", "plugin",
                               "package.json"), "w") as f:
            f.write('{"name":"@opencode-ai/plugin","version":"1.18.33"}\n')
        homes[SANDBOX_HOME + "/.config"] = cfgdir
        cfg = {"provider": {"custom": {"npm": "@ai-sdk/openai-compatible", "name": "openai",
                                       "options": {"baseURL": model.base + "/v1",
                                                   "apiKey": "{env:OPENAI_API_KEY}"},
                                       "models": {"fake-model": {}}}},
               "model": "custom/fake-model", "autoupdate": False, "share": "disabled",
               "agent": {"title": {"disable": True}}}
        if case.get("permission") is not None:
            cfg["permission"] = case["permission"]
        env.update(XDG_CONFIG_HOME=SANDBOX_HOME + "/.config", OPENAI_API_KEY="sk-research",
                   OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_DISABLE_AUTOUPDATE="1",
                   OPENCODE_DISABLE_DEFAULT_PLUGINS="1", OPENCODE_DISABLE_LSP_DOWNLOAD="1",
                   OPENCODE_SERVER_PASSWORD=uuid.uuid4().hex,
                   OPENCODE_CONFIG_CONTENT=json.dumps(cfg))
        cmd = [OPENCODE_BIN, "acp"]
        tool = case.get("tool") or {"name": "bash", "arguments": {
            "command": f"touch /workspace/{effect}", "description": "make the file"}}
        tool = json.loads(json.dumps(tool).replace("EFFECT", effect))
    model.script(marker[9:-2], [{"tool": tool}, {"text": f"finished {t}"}])
    argv = sandbox_argv(tmp, homes, cmd, disable_userns=case.get("disable_userns", False))
    acp = AcpClient(argv, env=env, stderr_path=os.path.join(tmp, "stderr"),
                    permission=lambda p: pick_option(p, answer))
    out = {"case": case["name"], "answer": answer}
    try:
        sid, new = acp.start_session("/workspace", timeout=120)
        out["session_new"] = {k: new.get(k) for k in ("modes", "configOptions")}
        res = acp.prompt(sid, f"do it {marker}", timeout=180)
        out["stopReason"] = res.get("stopReason")
        out.update(summarize(acp, sid, model, marker, os.path.join(ws, effect)))
    except Exception as e:  # a research run reports, it does not stop
        out["error"] = repr(e)
    finally:
        acp.close()
        with open(os.path.join(tmp, "stderr"), errors="replace") as f:
            out["stderr_tail"] = f.read()[-1500:]
        shutil.rmtree(tmp, ignore_errors=True)
    return out


CODEX_TOML = """model = "fake-model"
model_provider = "fake"
approval_policy = "{approval}"
sandbox_mode = "{sandbox}"
check_for_update_on_startup = false
[model_providers.fake]
name = "Fake"
base_url = "{{base}}/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
"""


# codex's "known safe" commands (codex-rs/shell-command/src/command_safety/is_safe_command.rs)
# run without approval even under approval_policy = "untrusted". A prefix rule with decision
# "prompt" on each of them, by bare name and by the absolute paths the lookup also accepts,
# makes them ask too.
SAFE = ["cat", "cd", "cut", "echo", "expr", "false", "grep", "head", "id", "ls", "nl", "paste",
        "pwd", "rev", "seq", "stat", "tail", "tr", "true", "uname", "uniq", "wc", "which",
        "whoami", "numfmt", "tac", "base64", "find", "rg", "sed"]
ASK_RULES = "prefix_rule(pattern = [[%s]], decision = \"prompt\")\n" % ", ".join(
    json.dumps(p + n) for n in SAFE for p in ("", "/bin/", "/usr/bin/"))


def codex_cases():
    out = []
    for approval, sandbox in (("never", "danger-full-access"),
                              ("on-request", "danger-full-access"),
                              ("untrusted", "danger-full-access"),
                              ("on-request", "workspace-write"),
                              ("untrusted", "read-only")):
        name = f"{approval}+{sandbox}"
        out.append({"name": name, "toml": CODEX_TOML.format(approval=approval, sandbox=sandbox)})
    # a read-only command under untrusted: does a "known safe" command skip the question?
    out.append({"name": "untrusted+danger-full-access, cat", "command": "cat /etc/hostname",
                "toml": CODEX_TOML.format(approval="untrusted", sandbox="danger-full-access")})
    out.append({"name": "untrusted+workspace-write, nested userns off", "disable_userns": True,
                "toml": CODEX_TOML.format(approval="untrusted", sandbox="workspace-write")})
    out.append({"name": "untrusted+danger-full-access, nested userns off", "disable_userns": True,
                "toml": CODEX_TOML.format(approval="untrusted", sandbox="danger-full-access")})
    # rules: can a prefix rule make a "known safe" command ask?
    out.append({"name": "untrusted+danger-full-access, cat, prompt rule",
                "command": "cat /etc/hostname",
                "rules": 'prefix_rule(pattern = [["cat", "ls"]], decision = "prompt")\n',
                "toml": CODEX_TOML.format(approval="untrusted", sandbox="danger-full-access")})
    for command in ("cat /etc/hostname", "/bin/cat /etc/hostname", "ls | wc -l",
                    "sed -n 1p /etc/hostname", "cd /workspace && pwd"):
        out.append({"name": f"untrusted+danger-full-access, all-safe rules, {command}",
                    "command": command, "rules": ASK_RULES,
                    "toml": CODEX_TOML.format(approval="untrusted", sandbox="danger-full-access")})
    # apply_patch (offered for a known model slug): does a file edit ask?
    gpt = CODEX_TOML.replace('model = "fake-model"', 'model = "gpt-5.4"')
    patch = "*** Begin Patch\n*** Add File: /workspace/EFFECT\n+patched\n*** End Patch\n"
    out.append({"name": "untrusted+danger-full-access, apply_patch",
                "tool": {"name": "apply_patch", "input": patch},
                "toml": gpt.format(approval="untrusted", sandbox="danger-full-access")})
    out.append({"name": "on-request+danger-full-access, apply_patch",
                "tool": {"name": "apply_patch", "input": patch},
                "toml": gpt.format(approval="on-request", sandbox="danger-full-access")})
    return out


def opencode_cases():
    return [
        {"name": "no permission block", "permission": None},
        {"name": "edit/bash/webfetch ask (today's opencode.c)",
         "permission": {"edit": "ask", "bash": "ask", "webfetch": "ask"}},
        {"name": "\"*\": ask", "permission": {"*": "ask"}},
        {"name": "\"*\": ask, read tool", "permission": {"*": "ask"},
         "tool": {"name": "read", "arguments": {"filePath": "/etc/hostname"}}},
        {"name": "\"*\": ask, write tool", "permission": {"*": "ask"},
         "tool": {"name": "write", "arguments": {"filePath": "/workspace/EFFECT",
                                                 "content": "x"}}},
        {"name": "\"*\": deny", "permission": {"*": "deny"}},
        # every tool opencode 1.18.33 offers the model, each under "*": ask
        {"name": "\"*\": ask, read in workspace", "permission": {"*": "ask"},
         "tool": {"name": "read", "arguments": {"filePath": "/workspace/EFFECT"}}},
        {"name": "\"*\": ask, glob", "permission": {"*": "ask"},
         "tool": {"name": "glob", "arguments": {"pattern": "*"}}},
        {"name": "\"*\": ask, grep", "permission": {"*": "ask"},
         "tool": {"name": "grep", "arguments": {"pattern": "x"}}},
        {"name": "\"*\": ask, edit", "permission": {"*": "ask"},
         "tool": {"name": "edit", "arguments": {"filePath": "/workspace/EFFECT",
                                                "oldString": "a", "newString": "b"}}},
        {"name": "\"*\": ask, todowrite", "permission": {"*": "ask"},
         "tool": {"name": "todowrite", "arguments": {"todos": [
             {"content": "x", "status": "pending", "priority": "low", "id": "1"}]}}},
        {"name": "\"*\": ask, webfetch", "permission": {"*": "ask"},
         "tool": {"name": "webfetch", "arguments": {"url": "https://example.invalid/"}}},
        {"name": "\"*\": ask, task", "permission": {"*": "ask"},
         "tool": {"name": "task", "arguments": {"description": "d", "prompt": "p",
                                                "subagent_type": "general"}}},
        {"name": "\"*\": ask, skill", "permission": {"*": "ask"},
         "tool": {"name": "skill", "arguments": {"name": "nothing"}}},
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("harness", choices=["codex", "opencode"])
    ap.add_argument("cases", nargs="*", help="substrings of case names (default: all)")
    ap.add_argument("--answers", default="allow,reject,cancel")
    ap.add_argument("--json")
    o = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ar-research-model.")
    model = stack.FakeModel(tmp)
    results = []
    try:
        cases = codex_cases() if o.harness == "codex" else opencode_cases()
        for case in cases:
            if o.cases and not any(c in case["name"] for c in o.cases):
                continue
            for answer in o.answers.split(","):
                r = run_case(o.harness, case, model, answer)
                results.append(r)
                brief = {k: r.get(k) for k in ("case", "answer", "stopReason", "effect_exists",
                                               "model_requests", "error")}
                brief["asked"] = [{"title": (p.get("toolCall") or {}).get("title"),
                                   "options": [x.get("kind") for x in p.get("options", [])]}
                                  for p in r.get("permission_requests", [])]
                brief["model_saw"] = [str(x)[:160] for x in r.get("tool_result_seen_by_model", [])]
                print(json.dumps(brief), flush=True)
    finally:
        model.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if o.json:
        with open(o.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
