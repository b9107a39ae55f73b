"""test_spares.py's first turn with spares disabled (AGENT_RUNNER_SPARES=pi=0): the same
session answers with its own endpoint, key, system prompt and AGENTS.md from a cold start, and
environment_ready says spare:false; no spare is ever made."""

from test_spares import first_turn

STACK = {"env": {"AGENT_RUNNER_SPARES": "pi=0"}}


def test_spares_disabled_the_same_session_runs_cold(ctx):
    tag, _ = first_turn(ctx, False)
    s = ctx.stack.session(f"proj-spares:s-{tag}")
    assert s is not None and not s["fromSpare"], s
    assert not ctx.stack.spare_slots(), ctx.stack.spare_slots()
    ctx.stack.request("POST", "/kill", {"sessionId": f"s-{tag}", "projectId": "proj-spares"})
