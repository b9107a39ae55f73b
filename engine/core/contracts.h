/*
 * contracts — the engine's shared types: run request, run result, teardown reasons and the
 * project error codes. Every other engine module speaks in these types; nothing here does I/O.
 *
 * Ownership: a struct run_request holds one reference to the parsed JSON document (root);
 * every `const char *` in it points into that document and lives exactly as long as the request.
 * run_request_release() drops the reference and the arrays. A struct run_result owns its strings.
 */
#ifndef AR_CONTRACTS_H
#define AR_CONTRACTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/buf.h"

#define AR_VERSION "0.1.0"
#define AR_PROTOCOL 1

/* Project error codes live below -10000 so they never collide with -errno. */
enum ar_error {
    AR_E_BASE = -10000,
    AR_E_INVALID_REQUEST = -10001,  /* a request field is wrong: message names it */
    AR_E_PROTOCOL = -10002,         /* the harness broke ACP */
    AR_E_HARNESS_EXITED = -10003,   /* the harness process went away */
    AR_E_HARNESS_ERROR = -10004,    /* the harness answered with a JSON-RPC error */
    AR_E_TIMEOUT = -10005,          /* a run limit tripped */
    AR_E_CAPACITY = -10006,         /* no free slot, no free keeper */
    AR_E_SANDBOX = -10007,          /* the sandbox could not be created */
    AR_E_CANCELLED = -10008,        /* the turn was cancelled */
    AR_E_CLIENT_GONE = -10009,      /* the HTTP client disconnected */
    AR_E_UNAVAILABLE = -10010,      /* a harness or provider is not installed */
    AR_E_MODEL = -10011,            /* the requested model cannot be selected */
    AR_E_RETRY = -10012,            /* failed before any output: the caller may retry cold */
    AR_E_SANDBOX_CAPACITY = -10013, /* the sandbox provider refused for capacity (429s) */
    AR_E_SANDBOX_LIMIT = -10014,    /* a sandbox limit tripped (memory, pids, disk) */
    AR_E_KEEPER_LOST = -10015,      /* the environment's keeper died (its sandbox with it) */
};

/*
 * Limits: every buffer cap of the engine and the front, in one place. A growable buffer gets
 * one of these at creation (buf_init); hitting it is an error the caller sees.
 */
#define RUN_OUTPUT_MAX (64u * 1024 * 1024) /* the assistant text of one turn */
/* one NDJSON result record: JSON escaping may turn an output byte into six ("\u00XX") */
#define RESULT_LINE_MAX (8u * RUN_OUTPUT_MAX)
#define EVENT_LINE_MAX (256u * 1024 * 1024)   /* one NDJSON event record */
#define PROMPT_TEXT_MAX (80u * 1024 * 1024)   /* the prompt text of a turn, a replay included */
#define TOOL_OUTPUT_MAX (4u * 1024 * 1024)    /* the text of one tool result event */
#define CANONICAL_ARGS_MAX (1024u * 1024)     /* canonical tool arguments (stored decisions) */
#define CANONICAL_MAX (64u * 1024 * 1024)     /* canonical JSON of a fingerprinted document */
#define REPLAY_LATEST_MAX (16u * 1024 * 1024) /* the latest user text of a cold replay */
#define REPLAY_TEXT_MAX (64u * 1024 * 1024)   /* the rendered history of a cold replay */
#define KEEPER_SPEC_MAX (64u * 1024 * 1024)   /* the spec a keeper reads at start */
#define KEEPER_QUEUE_MAX (256u * 1024 * 1024) /* a keeper's queue towards worker or harness */
#define KEEPER_QUEUE_HIGH (8u * 1024 * 1024)  /* the keeper stops reading the harness above it */
#define HARNESS_LOG_MAX (1024u * 1024)        /* harness stderr kept in harness.log */
#define KEEPER_REPLY_MAX (1024u * 1024)       /* an answer the keeper writes to the harness */
#define METRICS_TEXT_MAX (4u * 1024 * 1024)   /* the /metrics exposition */

/* Paths inside every sandbox, whatever the provider. */
#define SANDBOX_WORKSPACE "/workspace" /* the workspace: the only host-writable place */
#define SANDBOX_HOME "/home/agent"     /* the harness's private home (a tmpfs) */

/* strerror for -errno and the project codes above. Never NULL. */
const char *ar_strerror(int r);

enum harness_kind {
    HARNESS_PI = 0,
    HARNESS_CLAUDE,
    HARNESS_CODEX,
    HARNESS_OPENCODE,
    HARNESS_SCRIPTED, /* the test fixture agent, only when the runner is configured with one */
    HARNESS_COUNT,
};

enum credential_mode { CREDENTIAL_MODE_NONE = 0, CREDENTIAL_MODE_ENV, CREDENTIAL_MODE_RUNTIME };
enum credential_usage { CREDENTIAL_USAGE_OPAQUE_HTTP = 0, CREDENTIAL_USAGE_LOCAL_USE };

struct str_pair {
    const char *name;
    const char *value;
};

struct credential {
    const char *name; /* the environment variable it binds */
    const char *value;
    enum credential_usage usage;
};

struct model_connection {
    bool present;
    const char *provider;
    const char *deployment;
    const char *base_url; /* endpoint.baseUrl, may be NULL */
    const char *api_version;
    const char *region;
    struct str_pair *headers; /* endpoint.headers */
    size_t nheaders;
    enum credential_mode credential_mode;
    struct str_pair *environment;
    size_t nenvironment;
    struct credential *credentials;
    size_t ncredentials;
};

enum block_type {
    BLOCK_TEXT = 0,
    BLOCK_IMAGE,
    BLOCK_RESOURCE,
    BLOCK_ATTACHMENT,
    BLOCK_TOOL_CALL,
    BLOCK_TOOL_RESULT,
    BLOCK_OTHER,
};

struct content_block {
    enum block_type type;
    const char *type_name;
    const char *text;
    const char *data; /* base64 for images */
    const char *mime_type;
    const char *uri;
    const char *tool_call_id;
    const char *tool_name;
    const char *attachment_id; /* attachment blocks: the id in Agenta's API */
    const char *filename;      /* attachment blocks: the name shown (not trusted as a path) */
    json_object *input;        /* borrowed */
    json_object *output;       /* borrowed */
    bool is_error;
};

struct chat_message {
    const char *role;
    struct content_block *blocks; /* a string content is one text block */
    size_t nblocks;
};

struct harness_file {
    const char *path; /* relative to the workspace, validated */
    const char *content;
};

struct skill_file {
    const char *path;
    const char *content;
    bool executable;
};

struct skill {
    const char *name;
    const char *description;
    const char *body;
    struct skill_file *files;
    size_t nfiles;
    bool disable_model_invocation;
    bool allow_executable_files;
};

/* ---- the run's tools: customTools, mcpServers and toolCallback, parsed by request/ -------- */

/*
 * The name of the runner's own MCP server, through which claude, codex and opencode reach the
 * run's tools; everything that names the server spells it with this macro. No MCP server and
 * no custom tool of a request may take it (rq_tool_name_free in request/request_fields.c is
 * the one check).
 */
#define RUN_TOOLS_MCP_NAME "agenta-tools"
#define TOOL_NAME_MAX 64                 /* what every model API accepts */
#define TOOL_DESCRIPTION_MAX (64 * 1024) /* bytes */
#define TOOL_SCHEMA_MAX (256 * 1024)     /* bytes of one inputSchema as JSON */
#define TOOL_TIMEOUT_MAX_MS (24ull * 3600 * 1000)

/* A tool's or a server's permission (core/policy.h decides with it). */
enum permission { PERMISSION_UNSET = -1, PERMISSION_ALLOW = 0, PERMISSION_ASK, PERMISSION_DENY };

/* Who runs a tool. */
enum tool_exec {
    TOOL_EXEC_CALLBACK = 0, /* callRef: POST toolCallback.endpoint */
    TOOL_EXEC_DIRECT,       /* call: a direct request to the callback's origin */
    TOOL_EXEC_CLIENT,       /* kind "client": the browser runs it (the turn pauses) */
    TOOL_EXEC_MCP,          /* a user MCP server's tool: the runner calls the server */
};

/*
 * One customTools entry, checked. The json members are borrowed from the request document,
 * each of the type named (checked), or NULL when absent or null.
 */
struct custom_tool {
    const char *name;              /* 1-64 of [A-Za-z0-9_-], unique, never RUN_TOOLS_MCP_NAME */
    enum tool_exec exec;           /* CALLBACK, DIRECT or CLIENT */
    const char *description;       /* may be NULL */
    json_object *input_schema;     /* object (inputSchema, else input_schema) */
    const char *call_ref;          /* CALLBACK: non-empty; NULL otherwise */
    json_object *call;             /* DIRECT: {method, path, body?, context?, args_into?} */
    json_object *context_bindings; /* object {"arg.path": "$ctx.path"} */
    json_object *ephemeral_args;   /* array of top-level argument names */
    json_object *render;           /* object: the RenderHint */
    uint64_t timeout_ms;           /* 0 = the default */
    int read_only;                 /* readOnly: -1 absent, 0 no, 1 yes */
    enum permission permission;    /* PERMISSION_UNSET when absent */
};

/* One header an MCP server gets: connection.headers, then the credentials bound as headers. */
struct mcp_header {
    const char *name;  /* an HTTP token, never one the transport sets itself */
    const char *value; /* no CR or LF; a credential's is non-empty */
    bool secret;       /* a credential value: redacted from logs, never in an error */
};

/* One mcpServers entry, checked (the SSRF guard judges the url when the runner connects). */
struct mcp_server {
    const char *name;           /* like a tool name, unique, never RUN_TOOLS_MCP_NAME */
    const char *url;            /* an http(s) URL with a host, at most 2048 bytes */
    enum permission permission; /* policy.permission, PERMISSION_UNSET when absent */
    bool include_all;           /* policy.tools.mode "all" (the default) */
    json_object *include;       /* mode "include": the names (strings; borrowed), or NULL */
    struct mcp_header *headers; /* owned array (the strings are borrowed) */
    size_t nheaders;            /* at most MCP_SERVER_HEADERS_MAX */
};

#define MCP_SERVER_HEADERS_MAX 32

/* The run's tools. Every callback or direct tool has a callback_endpoint. */
struct run_tools {
    struct custom_tool *custom; /* owned array */
    size_t ncustom;
    struct mcp_server *servers; /* owned array */
    size_t nservers;
    const char *callback_endpoint;      /* toolCallback.endpoint, NULL without a toolCallback */
    const char *callback_authorization; /* toolCallback.authorization (a credential), or NULL */
};

/*
 * A dotted argument or body path ("data.inputs"): 1-32 non-empty segments of at most 128
 * bytes, none of them __proto__, constructor or prototype, no control byte.
 */
bool run_tools_path_ok(const char *path);
/* "$ctx." followed by a valid path. */
bool run_tools_ctx_token_ok(const char *token);
/*
 * A tool's input schema, as a request's customTools entry or an MCP server's tools/list entry
 * carries it: o's "inputSchema" (else "input_schema"), an object whose JSON fits
 * TOOL_SCHEMA_MAX. 0 with *ret borrowed from o (NULL when absent); -EINVAL with err
 * "<field>.inputSchema: ...".
 */
int run_tools_schema(json_object *o, const char *field, json_object **ret, char *err,
                     size_t errlen);

enum network_mode { NETWORK_ON = 0, NETWORK_OFF, NETWORK_ALLOWLIST };

enum lifecycle_mode { LIFECYCLE_UNSET = 0, LIFECYCLE_WARM, LIFECYCLE_PER_TURN };

struct run_request {
    json_object *root; /* one reference, owned */

    const char *harness_name; /* as sent ("pi_core", ...) */
    enum harness_kind harness;
    const char *sandbox;
    const char *session_id;
    const char *turn_id;
    const char *project_id; /* runContext.project.id, else projectId */
    const char *agents_md;
    const char *system_prompt;
    const char *append_system_prompt;
    const char *model;
    const char *harness_mode;
    const char *connection_mode;
    const char *connection_slug;
    struct model_connection mc;
    /* modelGateway.allowedModels (borrowed, validated array of names), or NULL: any model */
    json_object *gateway_models;

    struct chat_message *messages;
    size_t nmessages;

    struct harness_file *harness_files;
    size_t nharness_files;
    struct skill *skills;
    size_t nskills;

    /*
     * Two tool sections as sent (borrowed, or NULL when absent or null), kept for two readers:
     * the parser's second pass (request_tools.c, request_mcp.c) walks both, and the config
     * fingerprint (session/identity.c) hashes customTools verbatim and covers the tool set
     * whenever one of the sections is sent, even as an empty array. Everything else reads
     * their parsed form, tools (which holds toolCallback too).
     */
    json_object *custom_tools;
    json_object *mcp_servers;
    struct run_tools tools;
    json_object *permissions; /* borrowed or NULL */
    json_object *telemetry;   /* borrowed or NULL */
    json_object *run_context; /* borrowed or NULL */
    const char *traceparent;

    enum network_mode network;
    json_object *network_allowlist; /* borrowed, validated array of CIDR strings, or NULL */
    bool network_allow_names;       /* some allowlist entry is a host name ... */
    size_t network_allow_name_at;   /* ... the first of them */
    bool network_strict;

    enum lifecycle_mode lifecycle_mode;
    uint64_t lifecycle_idle_ms; /* 0 = unset */
    bool detached; /* Agenta's `detached`: the turn goes on when its client disconnects */

    /* the body as received (borrowed from the caller of request_parse, which keeps it while
     * the turn runs): a worker that adopts the turn after its worker died parses it again */
    const char *body;
    size_t body_len;

    char turn_id_buf[40]; /* minted when the request has none */
};

/* Release everything a parsed request holds; safe on a zeroed struct. */
void run_request_release(struct run_request *req);

/* The text of the last message when it is a user message (text blocks joined), or NULL. */
int run_request_prompt_text(const struct run_request *req, struct buf *out);
/* The request's modelCapabilities.inputModalities declares images ("image" or "images"). */
bool run_request_model_takes_images(const struct run_request *req);

struct run_usage {
    int64_t input;
    int64_t output;
    int64_t total;
    double cost;
    bool cost_unknown; /* no price for the model: "cost" is left out */
    bool present;
};

struct harness_caps {
    bool text_messages;
    bool images;
    bool file_attachments;
    bool mcp_tools;
    bool tool_calls;
    bool reasoning;
    bool plan_mode;
    bool permissions;
    bool usage;
    bool streaming_deltas;
    bool session_lifecycle;
    bool known;
};

struct run_result {
    bool ok;
    struct buf output; /* assistant text of the turn */
    char *error;       /* concise message when !ok */
    char *stop_reason; /* end_turn, cancelled, paused, ... */
    char *session_id;
    char *model;
    char *trace_id;
    struct run_usage usage;
    struct harness_caps caps;
    json_object *events;        /* coalesced events (one-shot path) or NULL when streamed */
    json_object *tool_call_ids; /* ids of the tool calls the turn made (array), or NULL */
};

void run_result_init(struct run_result *res);
void run_result_release(struct run_result *res);
/* Record a failure (first one wins): the message is copied. */
void run_result_fail(struct run_result *res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Add input/output/total/cost of u to the JSON object o. */
void run_usage_fill(json_object *o, const struct run_usage *u);
/* The AgentRunResult JSON object (a new reference). */
json_object *run_result_to_json(const struct run_result *res);

#define APPROVAL_GATES_MAX 8

/*
 * A permission gate the harness is waiting on (its request is unanswered): a turn that paused
 * parks its gates with the session; the next request's answers resume them.
 */
/* What a parked gate holds open: a permission request, or a runner tool's tool/call. */
enum gate_kind {
    GATE_PERMISSION = 0, /* ACP session/request_permission or the channel's tool/permission */
    GATE_CALL,           /* a runner tool's tool/call waiting for approval (permission "ask") */
    GATE_CLIENT,         /* a client tool's tool/call waiting for the browser's result */
};

struct approval_gate {
    char tool_call_id[160]; /* pi's Responses ids join two ids: "call_...|fc_..." */
    char token[48];
    char request_id[64];    /* the JSON-RPC id of the open request (permission or tool/call) */
    char tool_name[80];     /* a runner tool's name is up to 64 bytes */
    char allow_option[48];  /* the allow_once option to answer "approved" with */
    char reject_option[48]; /* the reject option to answer "denied" with ("" = cancelled) */
    int8_t decision;        /* resume input: -1 undecided, 0 denied, 1 approved / answered */
    bool channel; /* asked over the keeper channel (pi's tool/permission): answered there */
    uint8_t kind; /* enum gate_kind; CALL and CLIENT are always channel requests */
};

/* Why an environment was torn down (the names teardown_reason_name gives: metrics, logs). */
enum teardown_reason {
    TEARDOWN_NONE = 0,
    TEARDOWN_PER_TURN,
    TEARDOWN_CONTINUITY_INVALID,
    TEARDOWN_RUNTIME_INCOMPATIBLE,
    TEARDOWN_SESSION_INCOMPATIBLE,
    TEARDOWN_CAPACITY_EVICTION,
    TEARDOWN_IDLE_EXPIRY,
    TEARDOWN_KILL,
    TEARDOWN_FAILED_TURN,
    TEARDOWN_ABORTED,
    TEARDOWN_SHUTDOWN_IDLE,
    TEARDOWN_SHUTDOWN_IN_FLIGHT,
    TEARDOWN_HARNESS_EXITED,
    TEARDOWN_APPROVAL_EXPIRY,
    TEARDOWN_SUPERSEDED,
    TEARDOWN_SANDBOX_LIMIT, /* the sandbox hit its memory, pids or disk limit */
    TEARDOWN_KEEPER_DIED,   /* the keeper process died (killed): the master reclaimed it */
    TEARDOWN_OWNER_MOVED,   /* several hosts: another member owns the session now */
    TEARDOWN_COUNT,
};

const char *teardown_reason_name(enum teardown_reason r);
/*
 * The harness's name ("pi", "claude", ...; "unknown"), its harness_ops.name (a unit test holds
 * them equal): here, not in the harness registry, so naming a kind (metrics, pool) does not
 * link every harness and what they need into the keeper.
 */
const char *harness_kind_name(enum harness_kind kind);

/* The operator's harness login folders (harness/login.h), NULL or "" = not configured;
 * absolute paths. */
struct login_dirs {
    const char *codex_home;
    const char *claude_config_dir;
    const char *pi_agent_dir;
};

/* ---- sandbox leases (provider/provider.h): shared with metrics and traces ---------- */

enum provider_lease_outcome {
    PROVIDER_LEASE_CREATED = 0,
    PROVIDER_LEASE_RESUMED,
    PROVIDER_LEASE_REPLACEMENT,
};

enum provider_replacement_reason {
    PROVIDER_REPLACED_NONE = 0,
    PROVIDER_REPLACED_NOT_FOUND,
    PROVIDER_REPLACED_EXPIRED,
    PROVIDER_REPLACED_IDENTITY_MISMATCH,
    PROVIDER_REPLACED_RESUME_FAILED,
};

/* What the runner does with a leased sandbox after a turn. */
enum provider_disposition {
    PROVIDER_KEEP_RUNNING = 0,
    PROVIDER_STOP_AND_RETAIN,
    PROVIDER_DESTROY,
};

const char *provider_disposition_name(enum provider_disposition d);
const char *provider_lease_outcome_name(enum provider_lease_outcome o);
const char *provider_replacement_reason_name(enum provider_replacement_reason r);

/* Run limits (turn/run_limits.h): the turn, idle, first-event and tool-call deadlines; 0
 * disables a limit. */
struct run_limits_config {
    uint64_t total_ms;
    uint64_t idle_ms;
    uint64_t first_event_ms;
    uint64_t tool_call_ms;
};

/*
 * Streamed turns that outlive their connection (turn/journal.h, engine_turns.c): the journal
 * of numbered records, reattach, keepalives. keep_ms 0 disables the journal (and with it
 * reattach and the hand-over of a dead worker's turn).
 */
struct turn_settings {
    char dir[256];         /* where the journals are (a tmpfs: /dev/shm/<table>.turns) */
    uint64_t keep_ms;      /* a finished turn's journal is kept this long */
    uint64_t turn_bytes;   /* one turn's journal holds at most about this much */
    uint64_t total_bytes;  /* all journals together (the master's sweep) */
    uint64_t keepalive_ms; /* a stream silent this long gets a keepalive record (0: never) */
    uint64_t grace_ms;     /* a gone client's turn waits this long for a reattach */
    uint64_t adopt_ms;     /* a dead worker's turn waits this long for a worker to adopt it */
};

struct pool;
struct agenta_config;
struct cluster_config;
struct sandbox_host;
struct tool_runner_resolve;

/* Runner-executed tools (tool_runner.h): what the operator configured. */
struct tools_config {
    const char *mcp_bin;       /* agent-runner-mcp, bound read-only into sandboxes */
    const char *mcp_allowlist; /* AGENT_RUNNER_MCP_HOST_ALLOWLIST (comma-separated), or NULL */
    const char *ca_file;       /* AGENT_RUNNER_TOOLS_CA_FILE: CA bundle for https MCP servers */
    /* AGENT_RUNNER_TOOLS_TEST_RESOLVE (tests only): host names resolved to given addresses */
    const struct tool_runner_resolve *test_resolve;
};

/*
 * What the engine needs from the runner's configuration; read-only while workers run.
 * Filled by fcgi/config.c (the engine never reads the environment itself).
 */
/* Spares kept per harness (spare.h; AGENT_RUNNER_SPARES). */
struct spare_settings {
    uint32_t count[HARNESS_COUNT]; /* 0: none */
};

#define GATEWAY_MODELS_MAX 64 /* modelGateway.allowedModels */
#define GATEWAY_MODEL_NAME_MAX 256

/* The model gateway (README "The model gateway"): AGENT_RUNNER_MODEL_GATEWAY_*. */
struct model_gateway_config {
    bool enabled;               /* local sandboxes' harnesses reach their model through it */
    uint64_t max_request_bytes; /* one call's request body */
    const char *ca_file;        /* PEM bundle for https endpoints (NULL: the system's) */
    json_object *prices;        /* AGENT_RUNNER_MODEL_PRICES: {"<model>": {input, output,
                                   cacheRead?, cacheWrite?} USD per million tokens}, or NULL */
};

/*
 * A session's harness state kept outside its environment (session/kept.h;
 * AGENT_RUNNER_SESSION_STATE_*): the bounds of the store under <state_dir>/kept.
 */
struct kept_config {
    uint64_t max_bytes;   /* one session's state at most (0: nothing is kept) */
    uint64_t total_bytes; /* every session's state together at most */
    uint64_t ttl_ms;      /* a state neither saved nor loaded for this long is removed */
};

struct engine_config {
    const char *state_dir;      /* envs/ and kept/ live here */
    const char *harness_dir;    /* node_modules of the pinned harnesses */
    const char *scripted_agent; /* test agent binary or NULL */
    const char *keeper_bin;     /* agent-runner-keeper: a local sandbox's keeper */
    const char *keeper_remote_bin; /* agent-runner-keeper-remote: a remote provider's keeper
                                      (NULL: keeper_bin) */
    const char *pi_stdio_bin;   /* agent-runner-pi-stdio, bound read-only into pi sandboxes */
    const char *bwrap;          /* bubblewrap binary */
    const char *shm_name;       /* the session table */
    struct pool *pool;          /* attached session table (may be NULL in unit tests) */
    /* what local sandboxes get on this host (the master's probe; NULL: unconfined tests) */
    const struct sandbox_host *sandbox;
    uint64_t session_ttl_ms;   /* warm idle window default */
    uint64_t session_pool_max; /* warm environments kept at most */
    uint64_t approval_ttl_ms;
    uint64_t keeper_start_ms; /* keeper + sandbox start deadline */
    uint64_t harness_init_ms; /* initialize + session/new deadline */
    struct run_limits_config limits;
    bool model_strict;
    const char *log_level;          /* passed to keepers */
    enum lifecycle_mode local_mode; /* runner's mode for the local provider (UNSET = inherit) */
    uint64_t local_idle_ms;         /* configured idle window of the local provider (0 = none) */
    uint8_t epoch_key[32];          /* credential epoch HMAC key, made per master boot */
    struct login_dirs logins;       /* the operator's harness logins (runtime_provided) */
    struct tools_config tools;      /* runner-executed tools: the MCP bridge, SSRF allowlist */
    /* platform mode (engine/agenta/platform.h): Agenta's API, NULL when it is not configured */
    const struct agenta_config *agenta;
    /* several hosts (engine/cluster/cluster.h): NULL without AGENT_RUNNER_REDIS_URL */
    const struct cluster_config *cluster;
    struct spare_settings spares; /* pre-started environments (spare.h) */
    uint64_t spare_ttl_ms;        /* an unclaimed spare is replaced after this */
    uint64_t shells;              /* pre-made sandbox shells kept (AGENT_RUNNER_SHELLS) */
    struct model_gateway_config gateway; /* the model gateway (gateway/model_gateway.h) */
    struct turn_settings turns;   /* journal, reattach, keepalives (engine_config_read) */
    struct kept_config kept;      /* harnesses' own session state kept (session/kept.h) */
};

#endif
