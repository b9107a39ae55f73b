/*
 * daytona_api — Daytona's control API and toolbox over libcurl + json-c
 * (reference/daytona-api.md; the wire names are those of SDK 0.198.0).
 *
 * Configuration (daytona_config_from_env):
 *   AGENT_RUNNER_DAYTONA_API_URL        required, e.g. https://app.daytona.io/api; plain http
 *                                       only for a loopback host (the key must not cross a
 *                                       network in clear)
 *   AGENT_RUNNER_DAYTONA_API_KEY        required; an API key (or a JWT together with the
 *                                       organization). Never logged, never put in a sandbox,
 *                                       never in an error message (scrubbed from server text)
 *   AGENT_RUNNER_DAYTONA_ORGANIZATION   optional: sent as X-Daytona-Organization-ID
 *   AGENT_RUNNER_DAYTONA_TARGET         optional region, sent as `target` on create
 *   AGENT_RUNNER_DAYTONA_SNAPSHOT       optional snapshot name, or
 *   AGENT_RUNNER_DAYTONA_IMAGE          optional image (a `FROM <image>` buildInfo); not both
 *   AGENT_RUNNER_DAYTONA_CA_FILE        optional PEM bundle to trust instead of the system's
 *
 * Every call sends `Authorization: Bearer <key>` and `X-Daytona-SDK-Version: 0.198.0` (the
 * daemon picks its log format by it). A 429 is retried after the server's Retry-After(-scope)
 * header (or an exponential backoff when it gives none), at most max_429_retries times, then
 * surfaces as DAYTONA_E_CAPACITY (the engine reports `sandbox_capacity`). Nothing else is
 * retried here: the lease driver (daytona_sandbox) decides what a failure means.
 *
 * Errors: functions return >= 0 or a negative code: -ENOENT (404), -EBUSY (409: a state
 * change in progress or a conflicting operation), -EINVAL (400), -EACCES (401/403), -EPIPE
 * (410: the command ended / the session shell died), -ETIMEDOUT (408, transport timeout, a
 * wait that ran out), -E2BIG (an answer over its cap), DAYTONA_E_* below, or -errno. The last
 * failure's HTTP status and server message (capped, key scrubbed) are kept in the client:
 * daytona_client_status(), daytona_client_message().
 *
 * Threads: a struct daytona_client (one libcurl handle, reused connections) belongs to one
 * thread at a time; make one per thread. The config is copied into the client.
 */
#ifndef AR_DAYTONA_API_H
#define AR_DAYTONA_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "../buf.h"
#include "../contracts.h"

#define DAYTONA_SDK_VERSION "0.198.0"
#define DAYTONA_URL_MAX 512
#define DAYTONA_KEY_MAX 4096
#define DAYTONA_ID_MAX 64
#define DAYTONA_MESSAGE_MAX 256
#define DAYTONA_MAX_ALLOW 10 /* entries per allow list (networkAllowList, domainAllowList) */

/* Provider-specific codes, in their own range below the project's (contracts.h). */
enum daytona_error {
    DAYTONA_E_BASE = -10100,
    DAYTONA_E_CAPACITY = -10101,       /* still 429 after the bounded retries */
    DAYTONA_E_SERVER = -10102,         /* 5xx, or an answer that is not what the API promises */
    DAYTONA_E_SANDBOX_FAILED = -10103, /* create/start ended in error or build_failed */
    DAYTONA_E_UNCERTAIN = -10104,      /* create lost its answer: the sandbox may exist */
};

/* strerror for the codes above, ar_strerror() for the rest. Never NULL. */
const char *daytona_strerror(int r);

struct daytona_config {
    char api_url[DAYTONA_URL_MAX]; /* without a trailing '/' */
    char api_key[DAYTONA_KEY_MAX];
    char organization[128];
    char target[64];
    char snapshot[256];
    char image[256];
    char ca_file[512];
    long request_timeout_ms; /* one HTTP exchange; create and start hold up to 30 s */
    long connect_timeout_ms;
    unsigned max_429_retries;
    long retry_cap_ms;  /* the longest single wait before a retry */
    long poll_step_ms;  /* transitional states are polled this often (250) */
};

/*
 * Read the AGENT_RUNNER_DAYTONA_* variables (getenv) into ret with the defaults above.
 * -ENOENT when the URL or the key is not set (err names it), -EINVAL for a bad value.
 */
int daytona_config_from_env(struct daytona_config *ret, char *err, size_t errlen);
/* The same from an explicit lookup function (tests). */
int daytona_config_load(const char *(*get)(const char *name), struct daytona_config *ret,
                        char *err, size_t errlen);
/* Overwrite the key in memory. */
void daytona_config_wipe(struct daytona_config *cfg);

/* ---- sandboxes ------------------------------------------------------------------------ */

enum daytona_state {
    DAYTONA_STATE_OTHER = 0, /* a state this client does not know */
    DAYTONA_STATE_CREATING,
    DAYTONA_STATE_RESTORING,
    DAYTONA_STATE_DESTROYED,
    DAYTONA_STATE_DESTROYING,
    DAYTONA_STATE_STARTED,
    DAYTONA_STATE_STOPPED,
    DAYTONA_STATE_STARTING,
    DAYTONA_STATE_STOPPING,
    DAYTONA_STATE_ERROR,
    DAYTONA_STATE_BUILD_FAILED,
    DAYTONA_STATE_PENDING_BUILD,
    DAYTONA_STATE_BUILDING_SNAPSHOT,
    DAYTONA_STATE_UNKNOWN, /* the server's own "unknown" */
    DAYTONA_STATE_PULLING_SNAPSHOT,
    DAYTONA_STATE_ARCHIVED,
    DAYTONA_STATE_ARCHIVING,
    DAYTONA_STATE_RESIZING,
    DAYTONA_STATE_SNAPSHOTTING,
    DAYTONA_STATE_FORKING,
    DAYTONA_STATE_PAUSING,
    DAYTONA_STATE_PAUSED,
    DAYTONA_STATE_RESUMING,
    DAYTONA_STATE_COUNT,
};

enum daytona_state daytona_state_parse(const char *s);
const char *daytona_state_name(enum daytona_state s);
/* A state the server moves out of by itself (creating, starting, stopping, ...). */
bool daytona_state_transitional(enum daytona_state s);

struct daytona_sandbox {
    char id[DAYTONA_ID_MAX];
    char name[128];
    enum daytona_state state;
    enum daytona_state desired;
    char error_reason[DAYTONA_MESSAGE_MAX];
    bool recoverable;
    int auto_stop_min;
    int auto_archive_min;
    int auto_delete_min;
    bool network_block_all;
    char network_allow_list[256];
    char domain_allow_list[2600];
    char toolbox[DAYTONA_URL_MAX]; /* toolboxProxyUrl + "/" + id: the toolbox base URL */
    json_object *labels;           /* owned; an object of strings (never NULL once parsed) */
};

/*
 * Parse a Sandbox (or SandboxListItem) DTO. The id must be a plain token (it goes into URL
 * paths); toolboxProxyUrl, when present, must be http(s). -EBADMSG with err otherwise.
 */
int daytona_sandbox_parse(json_object *dto, struct daytona_sandbox *ret, char *err,
                          size_t errlen);
void daytona_sandbox_release(struct daytona_sandbox *sb);
/* The label's value, or NULL. */
const char *daytona_sandbox_label(const struct daytona_sandbox *sb, const char *name);

struct daytona_kv {
    const char *name;
    const char *value;
};

#define DAYTONA_INTERVAL_UNSET (-1000)

struct daytona_create_params {
    const char *name;                 /* unique in the organization; NULL = the id */
    const struct daytona_kv *labels;  /* never a session id or a credential */
    size_t nlabels;
    const struct daytona_kv *env;     /* returned in every sandbox description: no secrets */
    size_t nenv;
    int auto_stop_min;    /* >= 0 (0 = never); DAYTONA_INTERVAL_UNSET = server default */
    int auto_archive_min; /* >= 0 (0 = the provider maximum) */
    int auto_delete_min;  /* -1 = never, 0 = on stop, > 0 minutes after stop */
    enum network_mode network;
    const char *const *allow; /* NETWORK_ALLOWLIST: the run's list (IPv4 CIDR, IPv4, host) */
    size_t nallow;
    const char *const *always_allow; /* reachable whatever the mode (the model endpoint) */
    size_t nalways_allow;
};

/*
 * The CreateSandbox body for p with cfg's snapshot/image/target. Network mapping
 * (sandboxPermission.network): on -> no field; off -> networkBlockAll:true, or, when
 * always_allow is not empty, only those; allowlist -> networkAllowList (IPv4 CIDRs, a bare
 * address is /32) and domainAllowList (host names, optionally "*."), each at most 10 entries,
 * plus always_allow; an empty result blocks all. An entry Daytona cannot express (IPv6, a
 * URL, a port) or a list over the limit is -EINVAL with err naming it: never silently widened.
 */
int daytona_create_body(const struct daytona_config *cfg, const struct daytona_create_params *p,
                        json_object **ret, char *err, size_t errlen);

/*
 * Network convergence on resume (a retained sandbox must get the network rule of the run that
 * resumes it, never keep a wider one). body is a create body from daytona_create_body():
 * daytona_network_matches() compares its network fields with the sandbox's (order and spaces
 * of the lists ignored); daytona_network_settings() makes the POST .../network-settings body
 * that turns any sandbox into that rule.
 */
bool daytona_network_matches(const struct daytona_sandbox *sb, json_object *body);
int daytona_network_settings(json_object *body, json_object **ret);

/* ---- the client ----------------------------------------------------------------------- */

struct daytona_client;

int daytona_client_new(const struct daytona_config *cfg, struct daytona_client **ret);
void daytona_client_free(struct daytona_client *c);
const struct daytona_config *daytona_client_config(const struct daytona_client *c);
/* HTTP status of the last failed call (0: transport), and its message (never NULL). */
long daytona_client_status(const struct daytona_client *c);
const char *daytona_client_message(const struct daytona_client *c);
/* Number of 429 answers this client waited out (metrics, tests). */
unsigned daytona_client_throttled(const struct daytona_client *c);

/*
 * POST /sandbox. The server holds the answer up to 30 s; a sandbox still creating afterwards
 * is polled until started (create_timeout_ms in all). A create that ends in error/build_failed
 * is deleted and gives DAYTONA_E_SANDBOX_FAILED; an answer lost to a 5xx or a dropped
 * connection gives DAYTONA_E_UNCERTAIN (the caller looks the sandbox up by name).
 */
int daytona_sandbox_create(struct daytona_client *c, const struct daytona_create_params *p,
                           long create_timeout_ms, struct daytona_sandbox *ret, char *err,
                           size_t errlen);
/* GET /sandbox/{idOrName}: -ENOENT when it does not exist (or is destroyed). */
int daytona_sandbox_get(struct daytona_client *c, const char *id, struct daytona_sandbox *ret);

typedef int (*daytona_list_fn)(void *ctx, const struct daytona_sandbox *sb);
/*
 * GET /sandbox?labels=<json> page by page (limit 100), at most max_items sandboxes; fn is
 * called for each (a negative return stops the walk and is returned). Returns the count.
 */
int daytona_sandbox_list(struct daytona_client *c, const struct daytona_kv *labels,
                         size_t nlabels, size_t max_items, daytona_list_fn fn, void *ctx);

/* POST /start (idempotent for a started sandbox); ret (may be NULL) is the answer. */
int daytona_sandbox_start(struct daytona_client *c, const char *id, struct daytona_sandbox *ret);
int daytona_sandbox_stop(struct daytona_client *c, const char *id, bool force);
int daytona_sandbox_archive(struct daytona_client *c, const char *id);
int daytona_sandbox_recover(struct daytona_client *c, const char *id);
/* DELETE; a sandbox that does not exist counts as deleted (0). */
int daytona_sandbox_delete(struct daytona_client *c, const char *id);

enum daytona_interval { DAYTONA_AUTOSTOP, DAYTONA_AUTOARCHIVE, DAYTONA_AUTODELETE };
int daytona_sandbox_set_interval(struct daytona_client *c, const char *id,
                                 enum daytona_interval which, int minutes);
/* POST .../network-settings with a daytona_network_settings() body; ret (may be NULL). */
int daytona_sandbox_set_network(struct daytona_client *c, const char *id, json_object *settings,
                                struct daytona_sandbox *ret);
/* POST /last-activity: resets the auto-stop clock. */
int daytona_sandbox_mark_activity(struct daytona_client *c, const char *id);

/*
 * Poll GET every poll_step_ms until the state is one of want (a bitmask of 1u << state),
 * for at most timeout_ms. -ETIMEDOUT then (ret holds the last answer), -ENOENT when it
 * vanished; error/build_failed end the wait with DAYTONA_E_SANDBOX_FAILED unless wanted.
 */
int daytona_sandbox_wait(struct daytona_client *c, const char *id, uint32_t want,
                         long timeout_ms, struct daytona_sandbox *ret);

#define DAYTONA_BIT(s) (1u << (s))

/* ---- toolbox (tb = struct daytona_sandbox.toolbox) ------------------------------------ */

/* GET /user-home-dir: the sandbox user's home (absolute) into ret. */
int daytona_user_home(struct daytona_client *c, const char *tb, char *ret, size_t len);

/* POST /process/execute: one-shot shell command, output combined (capped at max_output). */
int daytona_execute(struct daytona_client *c, const char *tb, const char *command,
                    int timeout_s, size_t max_output, int *ret_exit_code, struct buf *ret_output);

int daytona_session_create(struct daytona_client *c, const char *tb, const char *sid);
int daytona_session_delete(struct daytona_client *c, const char *tb, const char *sid);
/* POST .../exec {runAsync:true}: ret_cmd_id receives the command id (<= DAYTONA_ID_MAX). */
int daytona_session_exec(struct daytona_client *c, const char *tb, const char *sid,
                         const char *command, bool suppress_input_echo,
                         char ret_cmd_id[DAYTONA_ID_MAX]);
/*
 * GET .../command/{cid}: 1 and *ret_exit_code when it exited, 0 while it runs.
 */
int daytona_command_status(struct daytona_client *c, const char *tb, const char *sid,
                           const char *cid, int *ret_exit_code);
/*
 * POST .../input {data}: the daemon appends the newline. skip_activity sends
 * X-Daytona-Skip-Last-Activity-Update (harness chatter between turns must not keep the
 * sandbox alive). -EPIPE (410) when the command is over.
 */
int daytona_command_input(struct daytona_client *c, const char *tb, const char *sid,
                          const char *cid, const char *data, size_t len, bool skip_activity);
/*
 * GET .../logs (no follow): the raw marked log (`output`) into ret_raw, and the split
 * streams when the caller wants them (either may be NULL). Caps are the buffers' own.
 */
int daytona_command_logs(struct daytona_client *c, const char *tb, const char *sid,
                         const char *cid, struct buf *ret_raw, struct buf *ret_stdout,
                         struct buf *ret_stderr);

struct ws_conn;
/*
 * Open GET .../logs?follow=true as a WebSocket (binary frames of the raw marked log, replayed
 * from byte 0). skip_activity: the stream does not count as sandbox activity.
 */
int daytona_command_follow(struct daytona_client *c, const char *tb, const char *sid,
                           const char *cid, bool skip_activity, struct ws_conn **ret, char *err,
                           size_t errlen);

struct daytona_file {
    const char *path;    /* absolute, or relative to the sandbox user's home */
    const void *data;
    size_t len;
};
/*
 * POST /files/bulk-upload: one multipart request, parts `files[i].path` then `files[i].file`.
 * -EIO when any entry failed (the message names the first).
 */
int daytona_files_upload(struct daytona_client *c, const char *tb, const struct daytona_file *f,
                         size_t n);
/* POST /files/folder?path=&mode= (parents created). mode as octal text, e.g. "700". */
int daytona_files_folder(struct daytona_client *c, const char *tb, const char *path,
                         const char *mode);
/* POST /files/permissions?path=&mode= */
int daytona_files_chmod(struct daytona_client *c, const char *tb, const char *path,
                        const char *mode);
/* GET /files/download?path= into ret (its cap applies). */
int daytona_files_download(struct daytona_client *c, const char *tb, const char *path,
                           struct buf *ret);

#endif
