/*
 * agenta_bodies — the JSON bodies agent-runner sends to Agenta's API and the answers it reads
 * back, in the shapes Agenta's own runner uses. Pure functions: no I/O, unit-tested without a
 * server. A builder returns a new object (NULL when out of memory); the borrowed json_object
 * fields of its input are referenced, not copied. A parser never trusts the answer: strings it
 * copies out are length-checked and printable.
 */
#ifndef AR_AGENTA_BODIES_H
#define AR_AGENTA_BODIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "agenta/agenta_config.h"

/* runContext.workflow as the flat list persisted shapes use: [{id?,slug?,version?,key}] with
 * key workflow, workflow_variant or workflow_revision; NULL if none. */
json_object *agenta_workflow_reference_list(json_object *run_context);

struct agenta_beat {
    const char *session_id;
    const char *replica_id;
    const char *turn_id; /* NULL: an ownership claim */
    bool is_running;
    const char *name;        /* proposed session name, may be NULL */
    json_object *references; /* borrowed list or NULL */
};

struct agenta_beat_reply {
    bool admitted;        /* "admitted" when the API sends it, else is_current_turn != false */
    bool is_current_turn; /* false only when the API said so */
    char stream_id[AGENTA_ID_MAX];  /* "" when absent */
    char replica_id[AGENTA_ID_MAX]; /* the owner replica, "" when absent */
};

json_object *agenta_beat_body(const struct agenta_beat *b);
/* Parse a heartbeat answer; -EBADMSG when it is not a JSON object. */
int agenta_beat_reply_parse(const char *body, size_t len, struct agenta_beat_reply *ret);

struct agenta_record {
    const char *session_id;
    const char *record_id; /* stable uuid5 for tool-family records, else NULL */
    uint64_t record_index;
    const char *timestamp;   /* ISO 8601, UTC, milliseconds */
    const char *source;      /* "agent" or "user" */
    json_object *attributes; /* the redacted event (borrowed); record_type is its "type" */
    const char *turn_id;     /* may be NULL */
    const char *span_id;     /* may be NULL */
};

json_object *agenta_record_body(const struct agenta_record *rec);

struct agenta_interaction {
    const char *session_id;
    const char *turn_id;
    const char *token;        /* the gate's interaction token */
    const char *kind;         /* "user_approval", "user_input", "client_tool" */
    const char *tool;         /* the tool's name */
    json_object *args;        /* borrowed, may be NULL */
    const char *tool_call_id; /* the harness's call id, may be NULL */
    json_object *run_context; /* borrowed, for data.references; may be NULL */
    json_object *parameters;  /* effectiveParameters, borrowed; omitted when NULL or empty */
};

json_object *agenta_interaction_body(const struct agenta_interaction *it);
/* verdict "approved" / "denied" with tool_call_id, or NULL for no resolution. */
json_object *agenta_transition_body(const char *session_id, const char *token, const char *verdict,
                                    const char *tool_call_id);
json_object *agenta_cancel_stale_body(const char *session_id, const char *turn_id,
                                      const char *const *tokens, size_t ntokens);

struct agenta_turn {
    const char *session_id;
    const char *stream_id; /* required: Agenta writes no ledger row without one */
    const char *turn_id;   /* may be NULL */
    uint64_t turn_index;
    const char *harness_kind;
    const char *agent_session_id; /* may be NULL */
    const char *sandbox_id;       /* may be NULL */
    json_object *references;      /* borrowed list, may be NULL */
    const char *trace_id;         /* may be NULL */
    const char *span_id;          /* may be NULL */
    const char *start_time;       /* ISO 8601, may be NULL */
};

struct agenta_turn_row {
    bool found;
    char turn_id[AGENTA_ID_MAX];
    char harness_kind[64];
    char agent_session_id[AGENTA_ID_MAX];
    char sandbox_id[AGENTA_ID_MAX];
    int64_t turn_index; /* -1 when absent */
    bool ended;         /* end_time is set: the turn completed */
};

json_object *agenta_turn_body(const struct agenta_turn *t);
json_object *agenta_turn_complete_body(const char *session_id, uint64_t turn_index,
                                       const char *agent_session_id, const char *end_time);
json_object *agenta_turn_query_body(const char *session_id, const char *harness_kind);
/* The first row of a /sessions/turns/query answer ({"turns":[...]}); found=false when empty. */
int agenta_turn_query_parse(json_object *answer, struct agenta_turn_row *ret);

json_object *agenta_attachments_reference_body(const char *session_id, const char *const *ids,
                                               size_t nids);

/* ISO 8601 UTC with milliseconds ("2026-11-30T10:00:00.123Z") of a wall clock in ms. */
void agenta_iso_time(int64_t wall_ms, char out[32]);

#endif
