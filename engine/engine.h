/*
 * engine — the engine's face for the front (fcgi/): the turn API, the worker's admission and
 * readiness facts, and the reader of the engine's own settings. The master's and
 * agent-runner-ctl's operations on the host and the session table are in admin.h.
 *
 * A turn: engine_prepare() refuses what can be refused before a response starts (uninstalled
 * harness, a request the harness or the sandbox provider cannot run, no user message, an
 * impossible lifecycle) and computes the turn's identity: pool key, config fingerprint,
 * history fingerprint of the prior conversation, credential epoch.
 *
 * engine_run() dispatches and decides whether to park; the session table does the slot
 * mechanics, the environment module the keepers, the transcript the approval lookups and
 * prompts, run_turn the turn itself:
 *   - no pool key, or a per-turn policy: cold, destroyed after the turn;
 *   - an idle environment whose identity still matches and a fresh user message: warm — only
 *     the new user text is sent to the live harness; a failure before the harness said
 *     anything retries cold once;
 *   - any mismatch: the old environment is torn down with its named reason, then cold (the
 *     transcript is replayed as text when there is earlier history);
 *   - a busy environment of the same session is superseded.
 * After a successful turn under a warm policy the environment is parked in the session table
 * (capacity: the least recently used idle one is evicted when full; if every parked one is
 * busy or awaiting approval, this one is not kept). Every stream ends with `done` once the
 * turn started, and the result is always filled.
 */
#ifndef AR_ENGINE_H
#define AR_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <json-c/json.h>

#include "core/contracts.h"

struct engine_turn;  /* a prepared turn (opaque) */
struct event_stream; /* turn/events.h */
struct event_sink;   /* turn/events.h */

/* A session key ("<projectId>:<sessionId>"), NUL included, fits this many bytes. */
#define ENGINE_KEY_MAX 272

/* ---- a turn ---------------------------------------------------------------------------- */

/*
 * Prepare a turn of req (borrowed until engine_turn_free) under cfg: *ret is a new turn.
 * A refusal is AR_E_UNAVAILABLE (harness not installed) or AR_E_INVALID_REQUEST with err
 * saying why; -ENOMEM; other -errno when the request cannot be fingerprinted.
 */
int engine_prepare(const struct engine_config *cfg, struct run_request *req,
                   struct engine_turn **ret, char *err, size_t errlen);
/*
 * Free a prepared turn (run or not). NULL is a no-op. A per-turn environment whose turn ended
 * is torn down here, so a caller frees the turn after it sent the result: the teardown is
 * never on the way to the result.
 */
void engine_turn_free(struct engine_turn *t);

/* Run the prepared turn; events go to es, the outcome to res (initialised by the caller). */
void engine_run(struct engine_turn *t, struct event_stream *es, struct run_result *res);

/* The session key of a /kill or /cancel body's ids; -ENAMETOOLONG when it does not fit. */
int engine_session_key(const char *project_id, const char *session_id, char *out, size_t outlen);

/*
 * Destroy the environment of key (warm, parked or running) and wait for the teardown.
 * 0 also when there was none (idempotent), 1 when one was destroyed, -errno.
 */
int engine_kill_session(const struct engine_config *cfg, const char *key,
                        enum teardown_reason reason);

/*
 * Remove the session's kept harness state (session/kept.h): /kill, unless it asks to end the
 * environment only. 1 when there was one, 0 when not, -errno.
 */
int engine_forget_session(const struct engine_config *cfg, const char *key);

/*
 * POST /cancel: stop the session's current turn but keep its environment warm. A running turn
 * is flagged (it sends session/cancel and ends with stopReason cancelled); a turn parked on
 * approvals gets its gates answered "cancelled". -ENOENT when the session is not held here.
 * A target_turn that is not the running one is a no-op.
 */
int engine_cancel_session(const struct engine_config *cfg, const char *key,
                          const char *target_turn);

/* ---- a streamed turn's records after its connection (engine_turns.h) --------------------- */

struct engine_follow; /* a reader of one turn's journal (opaque) */

/*
 * GET /turns/{turnId}/events?after=N: open the journal of the turn turn_id of project_id
 * (NULL or "": a turn that had none) for its records with seq > after. -ENOENT when there is
 * no such turn here (unknown, expired, another project's), -ERANGE when the journal no longer
 * holds seq after + 1 (*ret_oldest: the oldest it holds).
 */
int engine_follow_open(const struct engine_config *cfg, const char *turn_id, const char *project_id,
                       uint64_t after, struct engine_follow **ret, uint64_t *ret_oldest);
/*
 * Write the records to sink (each one NDJSON line, flushed), then follow the live turn until
 * its result record. When the turn's worker died, this worker carries the turn on (the keeper
 * holds the harness; engine_turns.h). Returns at the result, when the sink's client went away,
 * or when the reader fell behind the journal's bound (the stream then ends without a result).
 */
void engine_follow_run(struct engine_follow *f, const struct event_sink *sink);
void engine_follow_free(struct engine_follow *f);

/* The name of a harness as the logs and agent-runner-ctl show it ("unknown" for none). */
const char *engine_harness_name(enum harness_kind kind);

/* ---- a worker process ------------------------------------------------------------------- */

/*
 * Once per worker process, before its first run (platform mode: the shared folder of the
 * "records incomplete" marks; the scan that carries on turns whose worker died, once a few
 * seconds, engine_turns.h). -ENAMETOOLONG when the state folder is too long for it.
 */
int engine_worker_start(const struct engine_config *cfg);
/* At worker shutdown: wait until deadline_ms (monotonic) for queued platform calls; -ETIMEDOUT. */
int engine_worker_stop(int64_t deadline_ms);
/* A request came on a new FastCGI connection (kept false) or on one nginx kept open. */
void engine_note_connection(const struct engine_config *cfg, bool kept);
/* The worker's entry in the in-flight table of the session table: its index, or -ENOSPC. */
int engine_inflight_claim(const struct engine_config *cfg, pid_t pid);

/*
 * Admission (the front asks before it reads a /run body): count one run in flight on this
 * worker's entry; false, counted as rejected, when that makes more than max_runs in flight
 * over all workers or more than worker_max on this worker (whose threads beyond it stay free
 * for /health, /livez, /readyz, /kill, /cancel and /metrics). Every admitted run is released
 * once.
 */
bool engine_admit(const struct engine_config *cfg, int inflight_slot, uint64_t max_runs,
                  uint64_t worker_max);
void engine_admit_release(const struct engine_config *cfg, int inflight_slot);
uint64_t engine_runs_in_flight(const struct engine_config *cfg);

/* ---- health and readiness facts ---------------------------------------------------------- */

/* The pid of the master recorded in the session table; -1 when no intact table is attached. */
pid_t engine_master_pid(const struct engine_config *cfg);
/* Harness names (as /health lists them) that are installed under cfg: a new array. */
json_object *engine_installed_harnesses(const struct engine_config *cfg);
/*
 * /health's "modelGateway": whether it is on ("enabled") and working on this host ("active":
 * sandbox networks are made), and per harness name whether the model key stays out of the
 * sandbox and when it does not (README "The model gateway").
 */
json_object *engine_model_gateway_describe(const struct engine_config *cfg);
/* The enabled sandbox providers' names (/health "sandboxes"): a new array. */
json_object *engine_sandbox_names(void);
/* What local sandboxes get on this host (/health "sandbox"): a new object, NULL without a probe. */
json_object *engine_sandbox_describe(const struct engine_config *cfg);

/* The master's probe of this host's local sandboxes, as /readyz and the start-up log say it. */
struct engine_sandbox_facts {
    bool shared_uid;     /* sandboxes run as the runner's own user (it is not root) */
    uint32_t runner_uid; /* that user */
    uint32_t uid_base;   /* else: host uid/gid uid_base + slot, uid_count slots */
    uint32_t uid_count;
    bool net_ok;         /* network namespaces can be made */
    const char *net_why; /* why not ("" when net_ok) */
    const char *missing; /* configured limits this host cannot enforce ("" none) */
};
/* The facts (strings borrowed from cfg's probe); false when there was no probe. */
bool engine_sandbox_facts(const struct engine_config *cfg, struct engine_sandbox_facts *ret);
/*
 * GET /subscription-status: per harness whether this runner holds a login it could use for
 * credentialMode runtime_provided (a local file check: state words and provider families
 * only). A new object, NULL on ENOMEM.
 */
json_object *engine_subscription_status(const struct engine_config *cfg);

/* ---- several hosts (README "Several hosts"; engine/cluster) ------------------------------- */

/* Whether AGENT_RUNNER_REDIS_URL made this runner a member of a cluster. */
bool engine_cluster_on(const struct engine_config *cfg);

/* What a request is about, for routing it to the member that owns it. */
struct engine_subject {
    const char *session_key; /* "<projectId>:<sessionId>" (NULL: a turn, or nothing) */
    /* a /run: its turn id (recorded as run by the session's owner); without a session key and
     * may_claim: the turn the request is about (routed to the member that ran it) */
    const char *turn_id;
    bool may_claim; /* a /run: a session nobody owns is claimed here; without one: run here */
    /* /kill, /cancel, a reattach: refused with a JSON error, counted apart from turns */
    bool control;
};

/* Where a forwarded request's answer goes (the front's response). */
struct engine_forward_io {
    /* once; turn_id: the owner's X-Agent-Runner-Turn (NULL: none); <0 client gone */
    int (*start)(void *ctx, int status, const char *content_type, const char *turn_id);
    int (*write)(void *ctx, const char *data, size_t len); /* <0 client gone */
    int (*flush)(void *ctx);
    bool (*alive)(void *ctx); /* may be NULL */
    void *ctx;
};

/* The request as it came, to forward it unchanged. */
struct engine_forward_req {
    const char *method;
    const char *path; /* with its query string */
    const char *body;
    size_t body_len;
    const char *accept;
    const char *request_id;
    const char *token;        /* the runner's token (every member has the same) */
    const char *forwarded_by; /* the X-Agent-Runner-Forwarded header: NULL from a client */
    bool ndjson;
};

enum engine_dispatch {
    ENGINE_DISPATCH_LOCAL = 0, /* run it here */
    ENGINE_DISPATCH_DONE,      /* forwarded to its owner; the answer went through io */
    ENGINE_DISPATCH_REFUSED,   /* answer ret: status, code, message */
};

struct engine_refusal {
    int status;
    char code[48];
    char message[512];
};

/*
 * Several hosts: run the request here, or forward it to the member that owns its session and
 * relay the answer (a peer that does not answer is retried until its owner key could have
 * expired and the session been claimed here). Without a cluster: LOCAL, nothing else done.
 * Counted in /metrics (agent_runner_cluster_*).
 */
enum engine_dispatch engine_cluster_dispatch(const struct engine_config *cfg,
                                             const struct engine_subject *s,
                                             const struct engine_forward_req *fw,
                                             const struct engine_forward_io *io,
                                             struct engine_refusal *ret);
/* /health "cluster": {"member","group","state","members":[{name,url,capacity,load,...}]}; a
 * new object, NULL without a cluster. */
json_object *engine_cluster_describe(const struct engine_config *cfg);
/* /readyz: "ok", "degraded" (Redis unreachable: sessions are served here), NULL without one. */
const char *engine_cluster_state(const struct engine_config *cfg);
/* The cluster's group (AGENT_RUNNER_CLUSTER_GROUP), NULL without a cluster. */
const char *engine_cluster_group(const struct engine_config *cfg);
/* For the start-up log: the cluster's settings (never the Redis password). */
void engine_config_cluster_text(const struct engine_config *cfg, char *out, size_t outlen);

/* ---- settings ----------------------------------------------------------------------------- */

/* A getenv(3)-like accessor: the value of name, or NULL. */
typedef const char *(*engine_getenv_fn)(const char *name, void *ctx);

/*
 * The engine's settings that need its own parsers, read through get once the front has
 * filled the rest of cfg: AGENT_RUNNER_TOOLS_TEST_RESOLVE (tests only), AGENT_RUNNER_SPARES
 * (leading blanks skipped, blank = the default "pi=2"), AGENTA_* of platform mode (on when
 * Agenta's API is named); the run limits are normalised. -EINVAL with err naming the
 * variable, -ENOMEM. What it allocates is freed by engine_config_release.
 */
int engine_config_read(struct engine_config *cfg, engine_getenv_fn get, void *ctx, char *err,
                       size_t errlen);
void engine_config_release(struct engine_config *cfg);
/* The start-up log's texts below fit this many bytes. */
#define ENGINE_CONFIG_TEXT_MAX 4096
/* For the start-up log: the spare settings as AGENT_RUNNER_SPARES reads them ("pi=2, ..."). */
void engine_config_spares_text(const struct engine_config *cfg, char *out, size_t outlen);
/* For the start-up log: whether platform mode is on, and its settings (never a credential). */
void engine_config_platform_text(const struct engine_config *cfg, char *out, size_t outlen);
/* The session table's shared-memory name of an instance; -ENAMETOOLONG when it does not fit. */
int engine_table_name(const char *instance, char *out, size_t outlen);
/*
 * The default folder of an instance's turn journals, beside its session table in the tmpfs of
 * /dev/shm ("/dev/shm/agent-runner.<instance>.turns"); -ENAMETOOLONG when it does not fit.
 */
int engine_turns_dir(const char *instance, char *out, size_t outlen);

#endif
