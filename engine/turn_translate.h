/*
 * turn_translate — ACP to AgentEvents, pure (reference/acp-harnesses.md, CONTRACT.md Events).
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

#include "contracts.h"
#include "events.h"
#include "policy.h"
#include "run_limits.h"

struct turn_tool {
    char *id;
    char *name;
    char *input; /* compact JSON of the last rawInput sent */
    bool done;
    bool denied; /* its permission was refused: its result says denied */
};

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
/* Its permission was refused: its result will say denied. */
void turn_mark_denied(struct turn_state *st, const char *tool_call_id);
/*
 * The gate of a session/request_permission as the permission plan sees it. The tool's name is
 * the one its announcement carried (claude names the tool there, and only a title here).
 */
void turn_gate_of(struct turn_state *st, json_object *params, struct permission_gate *g);
/* interaction_request for gate g (params: the permission request's, NULL when re-emitted). */
json_object *turn_interaction_request(const struct approval_gate *g, json_object *params);
json_object *turn_interaction_response(const struct approval_gate *g);
/* A cancelled turn settles the tool calls that never finished. */
void turn_settle_open_tools(struct turn_state *st, struct event_stream *es);
/* The usage of a session/prompt result into res (present even when the harness gave none). */
void turn_finish_usage(struct run_result *res, json_object *prompt_result);
/* The ids of the turn's tool calls into res->tool_call_ids. */
void turn_record_tool_ids(const struct turn_state *st, struct run_result *res);

/* Map an initialize result's agentCapabilities onto the result's capability flags. */
void turn_caps_from_agent(json_object *agent_caps, enum harness_kind kind,
                          struct harness_caps *caps);
/* Capability flags as stored in a pool slot. */
uint32_t turn_caps_to_bits(const struct harness_caps *caps);
void turn_caps_from_bits(uint32_t bits, struct harness_caps *caps);

#endif
