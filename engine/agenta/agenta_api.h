/*
 * agenta_api — the one client for every call agent-runner makes to Agenta's API in platform
 * mode: heartbeat, credential refresh, records ingest and query, interaction rows, the turns
 * ledger and attachments. Synchronous, over base/httpc, one connection-keeping handle per
 * thread. Its settings are agenta_config.h's, its bodies agenta_bodies.h's, the attachment
 * file name parser agenta_disposition.h's: this header includes all three.
 *
 * Every call authenticates with the run credential (the request's
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

#include "agenta/agenta_bodies.h"
#include "agenta/agenta_config.h"
#include "agenta/agenta_disposition.h"
#include "base/buf.h"

#define AGENTA_CREDENTIAL_MAX (16u * 1024)
#define AGENTA_RESPONSE_MAX (1024u * 1024)             /* default cap of an answer */
#define AGENTA_QUERY_RESPONSE_MAX (256u * 1024 * 1024) /* a session's whole record log */
#define AGENTA_ATTACHMENT_MAX (16u * 1024 * 1024)      /* Agenta's largest stored attachment */
#define AGENTA_CONNECT_TIMEOUT_MS 5000
#define AGENTA_HEARTBEAT_TIMEOUT_MS 10000

/* The routes of Agenta's sessions API, relative to the base URL. */
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

/* Retry policies of Agenta's runner (records.h sends the interaction rows with them). */
#define AGENTA_INTERACTION_ATTEMPTS 3 /* create: linear 100 ms * attempt */
#define AGENTA_RETRY_BASE_MS 100

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
/* After failed attempt n (1-based): base * n, or base * 2^(n-1); either capped at 1 h. */
enum agenta_backoff { AGENTA_BACKOFF_LINEAR = 0, AGENTA_BACKOFF_EXPONENTIAL };

struct agenta_call {
    enum agenta_method method;
    const char *path; /* starts with '/', already escaped, may carry a query */
    const char *body; /* POST body (JSON text), NULL for none */
    size_t body_len;
    uint64_t timeout_ms; /* the whole exchange; 0 = cfg->call_timeout_ms */
    size_t response_max; /* 0 = AGENTA_RESPONSE_MAX */
    unsigned attempts;   /* 0 counts as 1 */
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

/*
 * One exchange with retries: transport failures and HTTP 408, 425, 429 and 5xx are tried
 * again, up to call->attempts. Returns the final HTTP status (> 0, whatever it is) with ret
 * filled, or -errno (transport failure after the last attempt, -E2BIG answer over its cap,
 * -ECANCELED) with err set and ret released. ret must be released with
 * agenta_response_release() after a success.
 */
int agenta_api_call(struct agenta_api *api, const struct agenta_call *call,
                    struct agenta_response *ret, char *err, size_t errlen);
void agenta_response_release(struct agenta_response *r);

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
                                 const char *harness_kind, struct agenta_turn_row *ret, char *err,
                                 size_t errlen);

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

#endif
