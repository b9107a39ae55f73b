/*
 * agenta_api — the one client for every call agent-runner makes to Agenta's API in platform
 * mode (reference/agenta-runner.md §1.12): heartbeat, credential refresh, records ingest and
 * query, interaction rows, the turns ledger and attachments. libcurl, synchronous, no shared
 * state besides one curl handle per thread (connection reuse).
 *
 * Configuration (agenta_config_load): platform mode is on when AGENTA_API_INTERNAL_URL (then
 * AGENTA_API_URL) is set, exactly as in Agenta's runner; without it nothing here is ever
 * called. Every call authenticates with the run credential (the request's
 * telemetry.exporters.otlp.headers.authorization), which the heartbeat may replace with a
 * refreshed one (agenta_api_set_credential); the caller puts every credential into the run's
 * redaction set (redact.h), this module never logs or reports one: errors name the method,
 * the path and the failure, never a header.
 *
 * Every exchange has a timeout, a capped response body and a bounded number of attempts: a
 * transport failure and HTTP 408/425/429/5xx are retried with the call's backoff, any other
 * status is final. Calls never run under a shm lock (this module takes no lock of the pool;
 * the engine calls it before or after its critical sections) and may block for up to their
 * timeout times their attempts: the engine makes the ones that must not delay a turn's events
 * from the records queue (records.h) or the heartbeat thread (heartbeat.h).
 *
 * Returns: >= 0 ok, -errno with a message in err otherwise (-ETIMEDOUT, -ECONNREFUSED,
 * -EREMOTEIO for an unexpected HTTP status, -EBADMSG for an answer that is not what the API
 * promises, -E2BIG for an answer over its cap, -ECANCELED when the abort flag was raised).
 */
#ifndef AR_AGENTA_API_H
#define AR_AGENTA_API_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/buf.h"

#define AGENTA_URL_MAX 2048
#define AGENTA_ID_MAX 256
#define AGENTA_CREDENTIAL_MAX (16u * 1024)
#define AGENTA_RESPONSE_MAX (1024u * 1024)         /* default cap of an answer */
#define AGENTA_QUERY_RESPONSE_MAX (256u * 1024 * 1024) /* a session's whole record log */
#define AGENTA_ATTACHMENT_MAX (16u * 1024 * 1024)   /* Agenta's largest stored attachment */
#define AGENTA_CONNECT_TIMEOUT_MS 5000
#define AGENTA_HEARTBEAT_TIMEOUT_MS 10000

/* The routes (§1.12). */
#define AGENTA_PATH_HEARTBEAT "/sessions/streams/heartbeat"
#define AGENTA_PATH_REFRESH "/access/permissions/check?action=run_service&resource_type=service"
#define AGENTA_PATH_RECORDS_INGEST "/sessions/records/ingest"
#define AGENTA_PATH_RECORDS_QUERY "/sessions/records/query"
#define AGENTA_PATH_INTERACTIONS "/sessions/interactions/"
#define AGENTA_PATH_INTERACTIONS_TRANSITION "/sessions/interactions/transition"
#define AGENTA_PATH_INTERACTIONS_CANCEL_STALE "/sessions/interactions/cancel-stale"
#define AGENTA_PATH_TURNS "/sessions/turns/"
#define AGENTA_PATH_TURNS_COMPLETE "/sessions/turns/complete"
#define AGENTA_PATH_TURNS_QUERY "/sessions/turns/query"
#define AGENTA_PATH_ATTACHMENTS_REFERENCE "/sessions/attachments/reference"

/* Retry policies of Agenta's runner. */
#define AGENTA_INTERACTION_ATTEMPTS 3 /* create: linear 100 ms * attempt */
#define AGENTA_RETRY_BASE_MS 100

/* ---- configuration ---------------------------------------------------------------------- */

struct agenta_config {
    bool enabled;                       /* an API base URL is configured */
    char base_url[AGENTA_URL_MAX];      /* without trailing slashes */
    /* AGENTA_RUNNER_REPLICA_ID, else "agent-runner@<host name>/<AGENT_RUNNER_INSTANCE>":
     * stable across the workers of one runner and its restarts */
    char replica_id[AGENTA_ID_MAX];
    bool reconstruct;                   /* AGENTA_SESSIONS_RECONSTRUCT != "false" */
    bool records_durable;               /* AGENTA_RECORDS_DURABLE != "false" */
    unsigned ingest_max_retries;        /* AGENTA_RECORDS_INGEST_MAX_RETRIES, 6, [1, 12] */
    uint64_t record_tool_ttl_ms;        /* AGENTA_RECORD_TOOL_TTL_MS, 3000 */
    uint64_t records_query_timeout_ms;  /* AGENTA_SESSIONS_RECORDS_QUERY_TIMEOUT_MS, 5000 */
    uint64_t attachments_timeout_ms;    /* AGENTA_ATTACHMENTS_FETCH_TIMEOUT_MS, 15000 */
    unsigned attachments_max_per_turn;  /* AGENTA_ATTACHMENTS_MAX_PER_TURN, 100 */
    uint64_t call_timeout_ms;           /* AGENT_RUNNER_AGENTA_TIMEOUT_MS, 10000: other calls */
    /* AGENT_RUNNER_AGENTA_HEARTBEAT_MS, 30000 (Agenta's HEARTBEAT_INTERVAL_SECONDS), [50, 600000] */
    uint64_t heartbeat_interval_ms;
    unsigned refresh_every;             /* AGENT_RUNNER_AGENTA_REFRESH_EVERY, 10, [1, 1000] */
};

/*
 * Fill cfg from variables read through lookup (getenv in the runner, a table in tests; NULL
 * and "" both mean unset). A value that is set but invalid is an error naming the variable:
 * -EINVAL with the message in err. Without an API URL, cfg->enabled is false and the rest
 * holds the defaults.
 */
int agenta_config_load(struct agenta_config *cfg, const char *(*lookup)(const char *name, void *ctx),
                       void *ctx, char *err, size_t errlen);

/* ---- the client ------------------------------------------------------------------------- */

struct agenta_api;

/*
 * A client for one run: a copy of cfg and of the run credential (may be "" : the calls then
 * go out without authorization and the API answers 401, as Agenta's runner would). Reference
 * counted so a record still queued after the turn keeps its client: agenta_api_ref() takes one
 * more reference, agenta_api_free() drops one and frees at zero (NULL is a no-op).
 * -EINVAL when the credential holds a control character or is longer than
 * AGENTA_CREDENTIAL_MAX.
 */
int agenta_api_new(const struct agenta_config *cfg, const char *credential,
                   struct agenta_api **ret_api);
struct agenta_api *agenta_api_ref(struct agenta_api *api);
void agenta_api_free(struct agenta_api *api);

/* The configuration the client was made with. */
const struct agenta_config *agenta_api_config(const struct agenta_api *api);

/* Replace the run credential (a refresh); same checks as agenta_api_new. Thread-safe. */
int agenta_api_set_credential(struct agenta_api *api, const char *credential);

enum agenta_method { AGENTA_GET = 0, AGENTA_POST };
enum agenta_backoff { AGENTA_BACKOFF_LINEAR = 0, AGENTA_BACKOFF_EXPONENTIAL };

struct agenta_call {
    enum agenta_method method;
    const char *path;      /* starts with '/', already escaped, may carry a query */
    const char *body;      /* POST body (JSON text), NULL for none */
    size_t body_len;
    uint64_t timeout_ms;   /* the whole exchange; 0 = cfg->call_timeout_ms */
    size_t response_max;   /* 0 = AGENTA_RESPONSE_MAX */
    unsigned attempts;     /* 0 counts as 1 */
    enum agenta_backoff backoff;
    uint64_t backoff_base_ms;
    const atomic_bool *abort; /* NULL, or a flag that stops the exchange and its retries */
};

struct agenta_response {
    long status;                    /* the HTTP status of the last attempt */
    unsigned attempts;              /* attempts made */
    struct buf body;                /* capped at the call's response_max */
    char content_type[128];         /* media type, lower case, parameters dropped */
    char content_disposition[1024]; /* as sent, "" when absent or too long */
};

/* The delay after failed attempt n (1-based): base * n, or base * 2^(n-1) (capped at 1 h). */
uint64_t agenta_backoff_ms(enum agenta_backoff b, uint64_t base_ms, unsigned attempt);
/* Whether an HTTP status is worth another attempt: 408, 425, 429 and 5xx. */
bool agenta_status_retryable(long status);

/*
 * One exchange with retries. Returns the final HTTP status (> 0, whatever it is) with ret
 * filled, or -errno (transport failure after the last attempt, -E2BIG answer over its cap,
 * -ECANCELED) with err set and ret released. ret must be released with
 * agenta_response_release() after a success.
 */
int agenta_api_call(struct agenta_api *api, const struct agenta_call *call,
                    struct agenta_response *ret, char *err, size_t errlen);
void agenta_response_release(struct agenta_response *r);

/* ---- bodies and answers (pure: unit-tested without a server) ------------------------------ */

/* runContext.workflow as Agenta's invoke references: {"workflow":{id,slug,version},
 * "workflow_variant":{..},"workflow_revision":{..}}; NULL when there is none. */
json_object *agenta_workflow_references(json_object *run_context);
/* The same as the flat list persisted shapes use: [{id?,slug?,version?,key}], NULL if none. */
json_object *agenta_workflow_reference_list(json_object *run_context);

struct agenta_beat {
    const char *session_id;
    const char *replica_id;
    const char *turn_id;     /* NULL: an ownership claim */
    bool is_running;
    const char *name;        /* proposed session name, may be NULL */
    json_object *references; /* borrowed list or NULL */
};

struct agenta_beat_reply {
    bool admitted;         /* "admitted" when the API sends it, else is_current_turn != false */
    bool is_current_turn;  /* false only when the API said so */
    char stream_id[AGENTA_ID_MAX];  /* "" when absent */
    char replica_id[AGENTA_ID_MAX]; /* the owner replica, "" when absent */
};

json_object *agenta_beat_body(const struct agenta_beat *b);
/* Parse a heartbeat answer; -EBADMSG when it is not a JSON object. */
int agenta_beat_reply_parse(const char *body, size_t len, struct agenta_beat_reply *ret);

struct agenta_record {
    const char *session_id;
    const char *record_id;   /* stable uuid5 for tool-family records, else NULL */
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
    const char *stream_id;       /* required: Agenta writes no ledger row without one */
    const char *turn_id;         /* may be NULL */
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
/* A file name safe to create: the base name, control characters dropped, not "." or "..".
 * -EINVAL when nothing is left, -E2BIG when it does not fit. */
int agenta_sanitize_filename(const char *in, char *out, size_t outlen);
/* The file name of a Content-Disposition value: filename*=charset''pct (UTF-8, ISO-8859-1)
 * first, then filename="quoted", then filename=plain; sanitized. -ENOENT when there is none. */
int agenta_disposition_filename(const char *disposition, char *out, size_t outlen);

/* ISO 8601 UTC with milliseconds ("2026-11-30T10:00:00.123Z") of a wall clock in ms. */
void agenta_iso_time(int64_t wall_ms, char out[32]);

/* ---- the calls -------------------------------------------------------------------------- */

/* One beat (a single attempt, AGENTA_HEARTBEAT_TIMEOUT_MS). 0 with ret filled on a 2xx JSON
 * answer; the caller fails open on any error. */
int agenta_api_heartbeat(struct agenta_api *api, const struct agenta_beat *b,
                         const atomic_bool *abort, struct agenta_beat_reply *ret, char *err,
                         size_t errlen);

/* GET the permissions check; a fresh credential (malloc'ed) in *ret_credential. */
int agenta_api_refresh_credential(struct agenta_api *api, const atomic_bool *abort,
                                  char **ret_credential, char *err, size_t errlen);

/* POST /sessions/records/query {session_id} (cfg timeout, one attempt): the "records" array
 * (a new reference; [] when the answer has none). */
int agenta_api_records_query(struct agenta_api *api, const char *session_id,
                             json_object **ret_records, char *err, size_t errlen);

/* POST /sessions/interactions/ (3 attempts, linear backoff). */
int agenta_api_interaction_create(struct agenta_api *api, const struct agenta_interaction *it,
                                  char *err, size_t errlen);
/* POST /sessions/interactions/transition to "resolved" (one attempt). */
int agenta_api_interaction_transition(struct agenta_api *api, const char *session_id,
                                      const char *token, const char *verdict,
                                      const char *tool_call_id, char *err, size_t errlen);
/* POST /sessions/interactions/cancel-stale (one attempt). */
int agenta_api_interactions_cancel_stale(struct agenta_api *api, const char *session_id,
                                         const char *turn_id, const char *const *tokens,
                                         size_t ntokens, char *err, size_t errlen);

/* POST /sessions/turns/: 0 when written, 1 when the row already existed (HTTP 409, benign:
 * an approval resume reuses its turn's row). -EINVAL without a stream id. */
int agenta_api_turn_create(struct agenta_api *api, const struct agenta_turn *t, char *err,
                           size_t errlen);
/* POST /sessions/turns/complete. */
int agenta_api_turn_complete(struct agenta_api *api, const char *session_id, uint64_t turn_index,
                             const char *agent_session_id, const char *end_time, char *err,
                             size_t errlen);
/* POST /sessions/turns/query, the latest row (optionally of one harness). */
int agenta_api_turn_query_latest(struct agenta_api *api, const char *session_id,
                                 const char *harness_kind, struct agenta_turn_row *ret,
                                 char *err, size_t errlen);

struct agenta_attachment {
    uint8_t *data; /* malloc'ed, len bytes (+ a NUL not counted) */
    size_t len;
    char media_type[128];
    char filename[256];
};

/* GET /sessions/attachments/{id}/content?session_id= (cfg timeout, at most
 * AGENTA_ATTACHMENT_MAX bytes); the API must name the media type and the file name. */
int agenta_api_attachment_content(struct agenta_api *api, const char *session_id,
                                  const char *attachment_id, struct agenta_attachment *ret,
                                  char *err, size_t errlen);
void agenta_attachment_release(struct agenta_attachment *a);
/* POST /sessions/attachments/reference {session_id, attachment_ids}. */
int agenta_api_attachments_reference(struct agenta_api *api, const char *session_id,
                                     const char *const *ids, size_t nids, char *err,
                                     size_t errlen);

#endif
