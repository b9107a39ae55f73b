"""What the harnesses report back: a turn whose model endpoint is down ends ok:false with the
harness's own message (pi's through the extension's `error` notification, which pi-acp hides,
labelled as the harness's with code harness_error: it is pi's word, not the runner's; the model
gateway resets the harness's call as the dead endpoint would), and the fake model's token
counts appear in the usage events and in the result: one event per model call, as the model
gateway measured it (README "The model gateway"), whatever the harness reports itself (pi per
call, claude the turn's totals, codex a count per call)."""

import uuid

from stack import free_port
from turns import MODELS, harness_request, of, run

STACK = {"workers": 2, "threads": 8}


def down_request(ctx, harness, **extra):
    req = harness_request(ctx, harness, "Say hello", "sk-down-" + uuid.uuid4().hex[:6], **extra)
    path = MODELS[harness][2]
    req["modelConnection"]["endpoint"]["baseUrl"] = f"http://127.0.0.1:{free_port()}{path}"
    return req


def test_pi_with_the_model_endpoint_down_fails_with_pis_message(ctx):
    res, evs = run(ctx, down_request(ctx, "pi_core"))
    said = "the harness reported: Connection error."
    assert res["ok"] is False and res["error"] == said, res
    err = of(evs, "error")
    # pi's words, labelled as pi's; the code is what the model gateway saw: no endpoint
    assert len(err) == 1 and err[0]["code"] == "model_unavailable", err
    assert err[0]["message"] == said, err
    assert evs[-1]["type"] == "done", evs[-1]


def test_pi_with_an_http_error_fails_with_pis_message_labelled(ctx):
    name = "fail-" + uuid.uuid4().hex[:8]
    ctx.model.script(name, [{"fail": {"status": 500, "message": "upstream exploded"}}])
    res, evs = run(ctx, harness_request(ctx, "pi_core", f"hi [[script:{name}]]", "sk-x"))
    assert res["ok"] is False and "upstream exploded" in res["error"], res
    assert res["error"].startswith("the harness reported: "), res
    # the code is what the model gateway saw (a 500 from the provider), not pi's word
    assert of(evs, "error")[0]["code"] == "provider_error", evs


def test_claude_with_the_model_endpoint_down_fails_with_claudes_message(ctx):
    # claude retries a dead endpoint for minutes by default; the request may turn that off
    req = down_request(ctx, "claude")
    req["modelConnection"]["environment"] = {"CLAUDE_CODE_MAX_RETRIES": "0"}
    res, evs = run(ctx, req)
    assert res["ok"] is False, res
    assert "API Error: Unable to connect to API" in res["error"], res
    err = of(evs, "error")
    assert len(err) == 1 and err[0]["code"] == "model_unavailable", err
    assert err[0]["message"] == res["error"], err
    assert evs[-1]["type"] == "done", evs[-1]


def usage_turn(ctx, harness):
    _, _, _, tool, args = MODELS[harness]
    name = f"usage-{harness}-{uuid.uuid4().hex[:8]}"
    ctx.model.script(name, [
        {"tool": {"name": tool, "arguments": args("echo counted")},
         "usage": {"input": 111, "output": 22}},
        {"text": "done", "usage": {"input": 333, "output": 44}}])
    return run(ctx, harness_request(ctx, harness, f"Count [[script:{name}]]", "sk-usage",
                                    permissions={"default": "allow"}))


def test_pi_usage_per_model_call_and_the_turn_total(ctx):
    res, evs = usage_turn(ctx, "pi_core")
    assert res["ok"] is True, res
    usage = [(u["input"], u["output"], u["total"]) for u in of(evs, "usage")]
    assert usage == [(111, 22, 133), (333, 44, 377)], usage
    assert (res["usage"]["input"], res["usage"]["output"], res["usage"]["total"]) == \
        (444, 66, 510), res["usage"]


def test_claude_usage_per_model_call_measured_and_the_turn_total(ctx):
    res, evs = usage_turn(ctx, "claude")
    assert res["ok"] is True, res
    usage = of(evs, "usage")
    assert [(u["input"], u["output"], u["total"]) for u in usage] == \
        [(111, 22, 133), (333, 44, 377)], usage
    # no price table on this runner: the cost is unknown (left out), never claude's own guess
    assert all("cost" not in u for u in usage), usage
    assert (res["usage"]["input"], res["usage"]["output"], res["usage"]["total"]) == \
        (444, 66, 510), res["usage"]
    assert "cost" not in res["usage"], res["usage"]


def test_codex_usage_per_model_call_and_the_turn_total(ctx):
    res, evs = usage_turn(ctx, "codex")
    assert res["ok"] is True, res
    # one event per model call with the split, as the gateway read it from the Responses API
    assert [(u["input"], u["output"], u["total"]) for u in of(evs, "usage")] == \
        [(111, 22, 133), (333, 44, 377)], of(evs, "usage")
    assert res["usage"]["total"] == 510, res["usage"]
