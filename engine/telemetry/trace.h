/*
 * trace — OpenTelemetry traces of a run, exported as OTLP/HTTP JSON to the run's
 * telemetry.exporters.otlp.endpoint with its authorization header (either casing).
 *
 * Span tree: invoke_agent (child of context.propagation.traceparent when given, else a new
 * trace) -> turn -> execute_tool <name> (one per tool call, from its announcement to its
 * result). Attributes come from a closed allowlist (gen_ai.* and a few runner keys); tool
 * arguments and results are captured only when telemetry.capture.content.enabled is not false,
 * and always pass through the run's redaction set.
 *
 * Export is asynchronous: the finished trace is queued to one exporter thread per process
 * (bounded queue; a full queue drops the trace) which POSTs it with short timeouts. An export
 * that fails is logged at debug and never affects the turn.
 */
#ifndef AR_TRACE_H
#define AR_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include "core/contracts.h"

#define TRACE_ATTR_ALLOWLIST                                                                    \
    "gen_ai.operation.name", "gen_ai.system", "gen_ai.agent.name", "gen_ai.request.model",      \
        "gen_ai.conversation.id", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",    \
        "gen_ai.response.finish_reasons", "gen_ai.tool.name", "gen_ai.tool.call.id",            \
        "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "agent_runner.turn.id",       \
        "agent_runner.harness", "agent_runner.environment", "agent_runner.tool.denied",        \
        "error.type", "agent_runner.sandbox.provider", "agent_runner.sandbox.lease.outcome",    \
        "agent_runner.sandbox.lease.reason", "agent_runner.sandbox.sandbox_id",                 \
        "agent_runner.sandbox.acquire.wall_ms", "agent_runner.sandbox.upload.files",           \
        "agent_runner.sandbox.upload.bytes", "agent_runner.sandbox.exec.command",              \
        "agent_runner.sandbox.exec.exit_code", "agent_runner.sandbox.exec.wall_ms",            \
        "agent_runner.sandbox.exec.timed_out", "agent_runner.sandbox.exec.critical_path",      \
        "agent_runner.sandbox.exec.reconnects", "agent_runner.sandbox.outcome"

struct trace_run;

/*
 * Start the trace of a run (NULL when the request asks for no export: then only a trace id is
 * made). ret_trace_id receives 32 hex digits either way.
 */
struct trace_run *trace_run_start(const struct run_request *req, const char *model,
                                  char ret_trace_id[33]);
/* Feed an event of the turn (tool calls open/close execute_tool spans; usage and done are
 * recorded). ev is borrowed. */
void trace_run_event(struct trace_run *t, json_object *ev);
/* Note that the turn ran on a warm/cold environment. */
void trace_run_environment(struct trace_run *t, const char *kind);
/*
 * A remote sandbox's lease report (provider.h, borrowed): its outcome on the turn span, a
 * sandbox.acquire span and one sandbox.exec span per command the provider ran, children of
 * the turn. Attributes pass the allowlist; a number that is not finite is left out.
 */
void trace_run_sandbox(struct trace_run *t, json_object *report);
/* End every span, queue the export, free t. NULL is a no-op. */
void trace_run_finish(struct trace_run *t, const struct run_result *res);
/* Free t without exporting anything (a run refused before it started). NULL is a no-op. */
void trace_run_discard(struct trace_run *t);

#endif
