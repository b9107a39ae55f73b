/*
 * turn_translate — ACP to AgentEvents, pure: the session/update notifications of ACP v1 as
 * the harnesses send them, into the event objects of events.h.
 *
 * turn_translate_update reads one ACP `update` object and emits zero or more events into the
 * stream, keeping the small state it needs (open text block, known tool calls) in struct
 * turn_state. Message and thought blocks never overlap: starting one closes the other. The
 * other functions build the approval events, settle a cancelled turn's tools, read a prompt
 * result's usage and map agent capabilities. Nothing here does I/O.
 */
#ifndef AR_TURN_TRANSLATE_H
#define AR_TURN_TRANSLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "core/contracts.h"
#include "core/policy.h"
#include "proto/acp.h"
#include "turn/events.h"
#include "turn/run_limits.h"

struct turn_tool {
    char *id;
    char *name;
    char *input; /* compact JSON of the last rawInput sent */
    bool done;
    bool denied;      /* its permission was refused: its result says denied */
    bool unannounced; /* known only from its permission request: no tool_call event yet */
    bool hidden;      /* the harness's view of a runner tool call: no events of its own */
    bool runner;      /* a runner-executed call: its events come from the runner itself */
    bool matched;     /* runner: a hidden report of the harness was found to be this call */
};

#define TURN_RUNNER_NAME_MAX 160

struct turn_state {
    int open; /* 0 none, 1 message, 2 thought */
    unsigned msg_seq;
    unsigned thought_seq;
    char open_id[32];
    struct turn_tool *tools;
    size_t ntools;
    size_t cap_tools;
    struct run_limits *limits;          /* may be NULL */
    bool (*is_noise)(const char *text); /* drop such message chunks (may be NULL) */
    /*
     * Runner tools (turn_tools.h): the harness reports its calls of them too (pi names the tool,
     * claude "mcp__agenta-tools__<name>", codex and opencode the agenta-tools server); those
     * reports make no events — the runner's own tool_call / tool_result describe the call.
     * kind says how the harness names them; is_runner (may be NULL) says whether pi's tool
     * `name` is one of the run's.
     */
    enum harness_kind kind;
    bool (*is_runner)(void *ctx, const char *name);
    void *is_runner_ctx;
    /*
     * Runner calls this (resumed) turn answers the gates of. The harness announced its view
     * of them in the paused turn under ids of its own the runner never learns (codex,
     * opencode); after the resume it reports them with the id alone (no title, no input): an
     * unknown call reported that way is one of these, hidden like any runner tool report.
     */
    unsigned resumed_runner_calls;
    /* usage per model call seen so far (usage_update with a count, the channel's usage) */
    unsigned call_usages;
    bool channel_usage;     /* the channel reported them (pi): their sum is the turn's */
    struct run_usage calls; /* their sum */
    /* the model gateway measures usage (turn_model.h): the harness's reports make no events
     * and only add to calls, the cross-check */
    bool measured;
};

void turn_state_init(struct turn_state *st, struct run_limits *limits);
void turn_state_release(struct turn_state *st);

/* Translate one ACP SessionUpdate; output text is appended to res->output. */
int turn_translate_update(struct turn_state *st, json_object *update, struct event_stream *es,
                          struct run_result *res);
/* Close an open message/thought block (emits *_end). */
void turn_close_block(struct turn_state *st, struct event_stream *es);

/* The tool call of id, or NULL; turn_add_tool registers a new one (NULL on ENOMEM). */
struct turn_tool *turn_find_tool(struct turn_state *st, const char *id);
struct turn_tool *turn_add_tool(struct turn_state *st, const char *id);
/*
 * A call a resumed turn answers the gate of: the harness announced it in the paused turn, so
 * its updates now (often with empty arguments) carry its name and announce nothing new.
 */
void turn_resume_tool(struct turn_state *st, const char *tool_call_id, const char *name);
/*
 * Its permission was refused: its result will say denied. name and args (may be NULL) name a
 * call the harness never announced (codex asks before it announces).
 */
void turn_mark_denied(struct turn_state *st, const char *tool_call_id, const char *name,
                      json_object *args);
/*
 * The turn ended: a denied call the harness never reported a result for (codex ends the turn
 * "cancelled" instead) gets its tool_call (if never announced) and a denied tool_result.
 * Returns how many were settled.
 */
size_t turn_settle_denied(struct turn_state *st, struct event_stream *es);
/*
 * The gate of a session/request_permission as the permission plan sees it. The tool's name is
 * the one its announcement carried (claude names the tool there, and only a title here).
 */
void turn_gate_of(struct turn_state *st, json_object *params, struct permission_gate *g);
/*
 * interaction_request for gate g (params: the permission request's, NULL when re-emitted).
 * Its id is the gate's interaction token (Agenta's interactionEventId): an answer names it as
 * output.interactionToken. payload: toolCallId, toolCall (+ resolvedName), options,
 * availableReplies (what the runner honours: "once" when the call can be allowed, "reject"),
 * interactionToken.
 */
json_object *turn_interaction_request(const struct approval_gate *g, json_object *params);
/*
 * Whether an ACP tool call (a tool_call / tool_call_update, or a permission request's
 * toolCall) is the harness calling a runner tool; its runner name into name (may be NULL).
 */
bool turn_runner_tool_of(const struct turn_state *st, json_object *tool_call, char *name,
                         size_t namelen);
/*
 * interaction_request kind "client_tool" for a client tool's gate: payload {toolCallId,
 * toolName, input, render, toolCall: {toolCallId, title, rawInput}, interactionToken}
 * (the client-tool payload of Agenta's runner). args and render are borrowed (may be NULL).
 */
json_object *turn_client_tool_request(const struct approval_gate *g, json_object *args,
                                      json_object *render);
/* interaction_response (the same id) when a decision is forwarded to the harness. */
json_object *turn_interaction_response(const struct approval_gate *g);
/*
 * One model call's usage (the channel's usage notification): an event, added to the turn's;
 * with st->measured only added (the cross-check), no event.
 */
void turn_call_usage(struct turn_state *st, const struct run_usage *u, struct event_stream *es);
/* A cancelled turn settles the tool calls that never finished. */
void turn_settle_open_tools(struct turn_state *st, struct event_stream *es);
/*
 * The turn's usage into res (present even when the harness gave none): the sum of the
 * channel's per-call usage (pi), else the session/prompt result's usage (claude: the whole
 * turn, its only report), else the sum of per-call usage_update counts (codex); cost as the
 * harness reported it. A usage event for the result's numbers is emitted only when no per-call
 * event was, so usage events never count a model call twice.
 */
void turn_finish_usage(struct turn_state *st, struct run_result *res, json_object *prompt_result,
                       struct event_stream *es);
/* The ids of the turn's tool calls into res->tool_call_ids. */
void turn_record_tool_ids(const struct turn_state *st, struct run_result *res);

/* error.message of a failed response, with its data when the harness put details there. */
void turn_error_text(const struct acp_msg *m, char *out, size_t len);
/*
 * The error event code of a harness's failure message: "model_unavailable" when it says the
 * model endpoint cannot be reached or the model does not exist, else "provider_error".
 */
const char *turn_error_code(const char *message);
/* The model config option (category "model") of a session/new result, or NULL. */
json_object *turn_model_option(json_object *session_result);
/* The optionId of a permission request's first option of kind kind_prefix ("allow",
 * "reject"), a "once" one first, never an "always" one; NULL when there is none. */
const char *turn_option_of(json_object *params, const char *kind_prefix);

/* Map an initialize result's agentCapabilities onto the result's capability flags. */
void turn_caps_from_agent(json_object *agent_caps, enum harness_kind kind,
                          struct harness_caps *caps);
/* Capability flags as stored in a pool slot. */
uint32_t turn_caps_to_bits(const struct harness_caps *caps);
void turn_caps_from_bits(uint32_t bits, struct harness_caps *caps);

#endif
