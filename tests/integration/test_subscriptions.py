"""Subscription logins (modelConnection.credentialMode "runtime_provided"): the operator's
harness login folders (AGENT_RUNNER_CODEX_HOME, _CLAUDE_CONFIG_DIR, _PI_AGENT_DIR), what the real
harnesses get of them in the sandbox, the lifecycle rule for them, and GET /subscription-status.

The fixture logins are fakes each harness accepts: codex's auth.json with an API key or a
ChatGPT login (JWTs the harness parses, never verifies), claude's .credentials.json with a
claude.ai OAuth token, pi's auth.json with an Anthropic OAuth login. The fake model must see the
fixture's credential; nothing of the operator's folder but that credential enters a sandbox,
and the refresh token never does."""

import atexit
import base64
import datetime
import json
import os
import shutil
import tempfile
import time
import uuid

from stack import TOKEN, wait_for
from turns import events_of, ids, model_requests_with, result_of, run

# made when a test writes a login; removed when the test run ends, whichever tests ran
LOGINS = os.path.join(tempfile.gettempdir(), "ar-logins." + uuid.uuid4().hex)
atexit.register(shutil.rmtree, LOGINS, True)
CODEX = os.path.join(LOGINS, "codex")
CLAUDE = os.path.join(LOGINS, "claude")
PI = os.path.join(LOGINS, "pi")

STACK = {"workers": 2, "threads": 8, "env": {
    "AGENT_RUNNER_CODEX_HOME": CODEX, "AGENT_RUNNER_CLAUDE_CONFIG_DIR": CLAUDE,
    "AGENT_RUNNER_PI_AGENT_DIR": PI}}


def write(path, text):
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    os.chmod(LOGINS, 0o700)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(claims):
    """A JWT-shaped token: codex reads its claims and never checks the signature."""
    return (b64(json.dumps({"alg": "RS256", "typ": "JWT"}).encode()) + "." +
            b64(json.dumps(claims).encode()) + "." + b64(b"not-a-signature"))


def chatgpt_login(tag):
    auth = {"https://api.openai.com/auth": {"chatgpt_plan_type": "plus",
                                            "chatgpt_account_id": "acct-" + tag,
                                            "chatgpt_user_id": "user-" + tag}}
    now = int(time.time())
    return {"auth_mode": "chatgpt", "OPENAI_API_KEY": None,
            "tokens": {"id_token": jwt(dict(email=f"{tag}@example.com", exp=now + 86400,
                                            **auth)),
                       "access_token": jwt(dict(exp=now + 86400, jti="at-" + tag, **auth)),
                       "refresh_token": "rt-operator-only-" + tag,
                       "account_id": "acct-" + tag},
            "last_refresh": datetime.datetime.now(datetime.timezone.utc)
            .strftime("%Y-%m-%dT%H:%M:%SZ")}


def claude_login(tag):
    return {"claudeAiOauth": {"accessToken": "sk-ant-oat01-" + tag,
                              "refreshToken": "sk-ant-ort01-operator-only-" + tag,
                              "expiresAt": int(time.time() * 1000) + 3600 * 1000,
                              "scopes": ["user:inference", "user:profile"],
                              "subscriptionType": "pro"},
            "mcpOAuth": {"some-server": {"accessToken": "mcp-operator-only-" + tag}}}


def subscription_request(ctx, harness, prompt, provider, path, **extra):
    req = {"harness": harness, "sandbox": "local", "model": "fake-model",
           "messages": [{"role": "user", "content": prompt}],
           "permissions": {"default": "allow"},
           "modelConnection": {"provider": provider, "deployment": "custom",
                               "endpoint": {"baseUrl": ctx.model.base + path},
                               "credentialMode": "runtime_provided", "credentials": []}}
    req.update(extra)
    return req


def status(ctx):
    code, _, body = ctx.stack.request("GET", "/subscription-status")
    assert code == 200, (code, body)
    assert body["version"] == 1, body
    text = json.dumps(body)
    assert LOGINS not in text, "a login path leaked into /subscription-status"
    return {h: v for h, v in body["harnesses"].items()}


def test_subscription_status_reports_each_state(ctx):
    code, _, body = ctx.stack.request("GET", "/subscription-status", token=False)
    assert code == 401 and body == {"ok": False, "error": "Unauthorized"}, (code, body)
    # configured folders that do not exist yet
    st = status(ctx)
    assert st["codex"] == {"state": "login_missing", "provider": "openai"}, st
    for d in (CODEX, CLAUDE, PI):
        os.makedirs(d, mode=0o700, exist_ok=True)
    # configured folders without a login file
    st = status(ctx)
    assert st["codex"] == {"state": "login_missing", "provider": "openai"}, st
    assert st["claude"] == {"state": "login_missing", "provider": "anthropic"}, st
    assert st["pi_core"] == {"state": "login_missing"} == st["pi_agenta"], st
    assert st["opencode"] == {"state": "unsupported"}, st
    # files that are no login
    write(os.path.join(CODEX, "auth.json"), "")
    write(os.path.join(CLAUDE, ".credentials.json"), "not json at all")
    write(os.path.join(PI, "auth.json"), "[]")
    st = status(ctx)
    assert [st[h]["state"] for h in ("codex", "claude", "pi_core", "pi_agenta")] == \
        ["login_unusable"] * 4, st
    # real-looking logins: ready, with provider families only
    tag = uuid.uuid4().hex[:8]
    write(os.path.join(CODEX, "auth.json"), json.dumps(chatgpt_login(tag)))
    write(os.path.join(CLAUDE, ".credentials.json"), json.dumps(claude_login(tag)))
    write(os.path.join(PI, "auth.json"), json.dumps({
        "anthropic": {"type": "oauth", "access": "sk-ant-oat01-pi-" + tag,
                      "refresh": "pi-refresh-" + tag, "expires": 4102444800000},
        "openai": {"type": "api_key", "key": "sk-pi-key-" + tag}}))
    code, _, body = ctx.stack.request("GET", "/subscription-status")
    assert tag not in json.dumps(body), "a login value leaked into /subscription-status"
    st = body["harnesses"]
    assert st["codex"] == {"state": "ready", "provider": "openai"}, st
    assert st["claude"] == {"state": "ready", "provider": "anthropic"}, st
    assert st["pi_core"] == {"state": "ready", "providers": ["anthropic"]} == st["pi_agenta"], st
    assert st["opencode"] == {"state": "unsupported"}, st
    assert tag not in ctx.stack.log_text(), "a login value reached the runner log"


def test_codex_runs_on_the_operators_api_key_login_and_stays_warm(ctx):
    key1 = "sk-codex-login-" + uuid.uuid4().hex[:10]
    write(os.path.join(CODEX, "auth.json"), json.dumps({"OPENAI_API_KEY": key1}))
    p, s = ids()
    key = f"{p}:{s}"
    marker = "sub-codex-" + uuid.uuid4().hex[:8]
    req = subscription_request(ctx, "codex", f"hello {marker}", "openai", "/v1",
                               projectId=p, sessionId=s)
    res, _ = run(ctx, req)
    assert res["ok"] is True and res["output"] == "Hello from the fake model.", res
    seen = model_requests_with(ctx, marker)
    assert seen and all(r["headers"].get("authorization") == "Bearer " + key1 for r in seen), \
        [r["headers"].get("authorization") for r in seen]
    # codex is the harness with a managed warm session: the environment stays
    sess = wait_for(lambda: ctx.stack.session(key), what="parked")
    assert sess["state"] == "idle", sess
    keeper = sess["keeperPid"]
    req["messages"] += [{"role": "assistant", "content": res["output"]},
                        {"role": "user", "content": f"again {marker}"}]
    res2, _ = run(ctx, req)
    assert res2["ok"] is True, res2
    assert ctx.stack.session(key)["keeperPid"] == keeper, "the warm follow-up was not warm"
    # the operator logs in again: the warm environment holds the old login and is replaced
    key2 = "sk-codex-login-" + uuid.uuid4().hex[:10]
    write(os.path.join(CODEX, "auth.json"), json.dumps({"OPENAI_API_KEY": key2}))
    req["messages"] += [{"role": "assistant", "content": res2["output"]},
                        {"role": "user", "content": f"third {marker}"}]
    res3, _ = run(ctx, req)
    assert res3["ok"] is True, res3
    sess = ctx.stack.session(key)
    assert sess["keeperPid"] != keeper and sess["lastTeardown"] == "runtime-incompatible", sess
    last = model_requests_with(ctx, f"third {marker}")
    assert last and last[-1]["headers"].get("authorization") == "Bearer " + key2
    ctx.stack.ctl("kill", key)
    for k in (key1, key2):
        assert k not in ctx.stack.log_text(), "a login value reached the runner log"


def test_codex_chatgpt_login_copy_holds_no_refresh_token(ctx):
    tag = uuid.uuid4().hex[:10]
    login = chatgpt_login(tag)
    original = json.dumps(login)
    write(os.path.join(CODEX, "auth.json"), original)
    name = "codex-sub-" + tag
    # what the agent can see: its copy of the login, and not the operator's folder
    cmd = f"cat $CODEX_HOME/auth.json; echo; ls {CODEX} 2>&1; echo listed"
    ctx.model.script(name, [{"tool": {"name": "exec_command", "arguments": {"cmd": cmd}}},
                            {"text": "looked " + tag}])
    res, evs = run(ctx, subscription_request(ctx, "codex", f"look [[script:{name}]]", "openai",
                                             "/v1"))
    assert res["ok"] is True and res["output"].endswith("looked " + tag), res
    out = "".join(e["output"] for e in evs if e["type"] == "tool_result")
    assert login["tokens"]["access_token"] in out, out
    assert "rt-operator-only" not in out, "the refresh token entered the sandbox"
    assert "listed" in out and "No such file or directory" in out, out
    seen = model_requests_with(ctx, f"[[script:{name}]]")
    assert len(seen) >= 2, seen
    for r in seen:
        assert r["headers"].get("authorization") == \
            "Bearer " + login["tokens"]["access_token"], r["headers"]
        assert r["headers"].get("chatgpt-account-id") == "acct-" + tag, r["headers"]
    with open(os.path.join(CODEX, "auth.json")) as f:
        assert f.read() == original, "the operator's login was changed"
    assert tag not in ctx.stack.log_text(), "a login value reached the runner log"


def test_claude_runs_on_the_operators_login_per_turn(ctx):
    tag = uuid.uuid4().hex[:10]
    login = claude_login(tag)
    write(os.path.join(CLAUDE, ".credentials.json"), json.dumps(login))
    p, s = ids()
    key = f"{p}:{s}"
    name = "claude-sub-" + tag
    cmd = f"cat $CLAUDE_CONFIG_DIR/.credentials.json; echo; ls {CLAUDE} 2>&1; echo listed"
    ctx.model.script(name, [{"tool": {"name": "Bash", "arguments": {
        "command": cmd, "description": "look"}}}, {"text": "looked " + tag}])
    res, evs = run(ctx, subscription_request(ctx, "claude", f"look [[script:{name}]]",
                                             "anthropic", "", projectId=p, sessionId=s))
    assert res["ok"] is True and res["output"].endswith("looked " + tag), res
    out = "".join(e["output"] for e in evs if e["type"] == "tool_result")
    assert "sk-ant-oat01-" + tag in out, out
    assert "operator-only" not in out, "more than the claude.ai login entered the sandbox"
    assert "listed" in out and "No such file or directory" in out, out
    seen = model_requests_with(ctx, f"[[script:{name}]]")
    assert len(seen) >= 2, seen
    for r in seen:
        assert r["headers"].get("authorization") == "Bearer sk-ant-oat01-" + tag, r["headers"]
        assert "x-api-key" not in r["headers"], r["headers"]
    # managed credentials on a harness without a managed warm session: per-turn
    assert ctx.stack.session(key) is None
    assert ctx.stack.recent_reason(key) == "per-turn", ctx.stack.sessions()["recent"]
    assert tag not in ctx.stack.log_text(), "a login value reached the runner log"


def test_pi_runs_on_the_operators_anthropic_login(ctx):
    # the golden attachment request's shape: pi_core, anthropic, direct, runtime_provided
    tag = uuid.uuid4().hex[:10]
    write(os.path.join(PI, "auth.json"), json.dumps({
        "anthropic": {"type": "oauth", "access": "sk-ant-oat01-pi-" + tag,
                      "refresh": "pi-refresh-operator-only", "expires": 4102444800000},
        "openai-codex": {"type": "oauth", "access": "other-login-" + tag, "refresh": "x",
                         "expires": 4102444800000}}))
    marker = "sub-pi-" + tag
    req = subscription_request(ctx, "pi_core", f"hello {marker}", "anthropic", "",
                               model="anthropic/fake-model")
    req["modelConnection"]["deployment"] = "direct"
    res, _ = run(ctx, req)
    assert res["ok"] is True and res["output"] == "Hello from the fake model.", res
    seen = model_requests_with(ctx, marker)
    assert seen, "pi never reached the model"
    for r in seen:
        assert r["path"].split("?")[0].endswith("/messages"), r["path"]
        auth = r["headers"].get("authorization", "") + r["headers"].get("x-api-key", "")
        assert "sk-ant-oat01-pi-" + tag in auth, r["headers"]


def test_login_problems_are_refused_in_the_stream(ctx):
    write(os.path.join(CODEX, "auth.json"), "{}")
    os.unlink(os.path.join(CODEX, "auth.json"))
    status, recs = ctx.stack.stream(subscription_request(ctx, "codex", "hi", "openai", "/v1"))
    assert status == 200, (status, recs)
    evs = events_of(recs)
    res = result_of(recs)
    assert [e["type"] for e in evs] == ["error", "done"], evs
    assert evs[0]["code"] == "runner_error", evs[0]
    msg = evs[0]["message"]
    assert "AGENT_RUNNER_CODEX_HOME" in msg and "login_missing" in msg, msg
    assert LOGINS not in msg and res["ok"] is False and res["error"] == msg, res
    # the one-shot path keeps its 400
    code, _, body = ctx.stack.request("POST", "/run", subscription_request(
        ctx, "codex", "hi", "openai", "/v1"))
    assert code == 400 and "login_missing" in body["error"], (code, body)
    # a pi login without the run's provider
    write(os.path.join(PI, "auth.json"), json.dumps({"openai": {"type": "api_key", "key": "k"}}))
    req = subscription_request(ctx, "pi_core", "hi", "anthropic", "", model="anthropic/x")
    req["modelConnection"]["deployment"] = "direct"
    status, recs = ctx.stack.stream(req)
    assert status == 200 and "holds no login for provider \"anthropic\"" in \
        result_of(recs)["error"], recs
    # opencode has no subscription login here
    status, recs = ctx.stack.stream(subscription_request(ctx, "opencode", "hi", "openai", "/v1"))
    assert status == 200 and "runtime_provided" in result_of(recs)["error"], recs


def test_zz_remove_the_fixture_logins(ctx):
    shutil.rmtree(LOGINS, ignore_errors=True)
    st = status(ctx)
    assert [st[h]["state"] for h in ("codex", "claude", "pi_core")] == ["login_missing"] * 3, st
