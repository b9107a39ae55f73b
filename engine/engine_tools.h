/*
 * engine_tools — the engine's side of the run's tools (customTools and mcpServers: the
 * runner, not the sandbox, calls their callbacks and MCP servers): the hooks a turn reaches
 * them through (struct turn_tools: find a tool, run a call on the engine_turn's tool_runner,
 * park a call's arguments, the browser's answer to a client tool) and, for a cold start, the
 * MCP servers listed and the public specs put into the sandbox plan.
 *
 * A parked call's arguments live in <environment>/calls/<token>.json (0600, outside anything
 * the sandbox sees, gone with the environment); the token is the gate's hex token, anything
 * else is refused.
 */
#ifndef AR_ENGINE_TOOLS_H
#define AR_ENGINE_TOOLS_H

#include <stddef.h>

#include "core/contracts.h"
#include "engine_turn.h"
#include "environment/environment.h"
#include "turn/run_turn.h"

struct engine_tools {
    struct engine_turn *t;
    const struct environment *env;
    struct turn_tools ops;
};

/*
 * Whether the run's tools can reach its harness in this sandbox: claude, codex and opencode
 * reach them through agent-runner-mcp, a host program bound into a local sandbox, which a
 * remote sandbox does not have: AR_E_INVALID_REQUEST naming the fields, the harness and the
 * provider. pi and the scripted agent reach them through the keeper channel (relayed into a
 * remote sandbox).
 */
int engine_tools_usable(const struct run_request *req, bool remote, const char *provider,
                        char *err, size_t errlen);
/* The turn's hooks over t's tools in env (h filled, returned); NULL when the run has none. */
const struct turn_tools *engine_tools_init(struct engine_tools *h, struct engine_turn *t,
                                           const struct environment *env);
/*
 * A cold start with tools: the MCP servers are reached and listed (SSRF guard first) and the
 * public specs become the sandbox's tool file (once per turn). err names the server at fault.
 */
int engine_tools_into_plan(struct engine_turn *t, char *err, size_t errlen);

#endif
