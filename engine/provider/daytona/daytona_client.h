/*
 * daytona_client — the HTTP client under both Daytona surfaces (control API and toolbox):
 * configuration, one libcurl handle per client (base/httpc does the exchanges on it),
 * authentication, the 429 backoff, status and error mapping. Header and field names are the
 * wire names of Daytona's SDK 0.198.0. daytona_api (the control API) and daytona_toolbox (the
 * toolbox) are built on daytona_client_call().
 *
 * Configuration (daytona_config_load):
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
 * failure's server message (capped, key scrubbed) is kept in the client:
 * daytona_client_message().
 *
 * Threads: a struct daytona_client (one libcurl handle, reused connections) belongs to one
 * thread at a time; make one per thread. The config is copied into the client.
 */
#ifndef AR_DAYTONA_CLIENT_H
#define AR_DAYTONA_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "core/contracts.h"

struct curl_mime;

#define DAYTONA_SDK_VERSION "0.198.0"
#define DAYTONA_URL_MAX 512
#define DAYTONA_KEY_MAX 4096
#define DAYTONA_ID_MAX 64
#define DAYTONA_MESSAGE_MAX 256

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
    long retry_cap_ms; /* the longest single wait before a retry */
    long poll_step_ms; /* transitional states are polled this often (250) */
};

/*
 * Read the AGENT_RUNNER_DAYTONA_* variables through get (the provider's settings lookup) into
 * ret with the defaults above. -ENOENT when the URL or the key is not set (err names it),
 * -EINVAL for a bad value.
 */
int daytona_config_load(const char *(*get)(const char *name), struct daytona_config *ret, char *err,
                        size_t errlen);
/* Overwrite the key in memory. */
void daytona_config_wipe(struct daytona_config *cfg);

/* ---- the client ----------------------------------------------------------------------- */

struct daytona_client;

int daytona_client_new(const struct daytona_config *cfg, struct daytona_client **ret);
void daytona_client_free(struct daytona_client *c);
const struct daytona_config *daytona_client_config(const struct daytona_client *c);
/* The message of the last failed call (never NULL). */
const char *daytona_client_message(const struct daytona_client *c);
/* Record a failure text for daytona_client_message() (control characters and the key are
 * scrubbed). */
void daytona_client_set_message(struct daytona_client *c, const char *msg);

struct daytona_request {
    const char *method;     /* GET, POST, DELETE, ... */
    const char *url;        /* absolute */
    json_object *body;      /* a JSON body, or NULL */
    struct curl_mime *mime; /* a multipart body instead (daytona_client_mime), or NULL */
    bool skip_activity;     /* X-Daytona-Skip-Last-Activity-Update: true */
    long timeout_ms;        /* 0 = the configured request timeout */
    size_t answer_max;      /* the largest answer accepted; 0 = 4 MiB */
};

/*
 * One exchange with the 429 retries. 0 for a 2xx answer, whose JSON body (when ret_doc is
 * given and the body is not empty) goes to *ret_doc (new reference; DAYTONA_E_SERVER if it is
 * not JSON); the mapped error otherwise. ret_status may be NULL.
 */
int daytona_client_call(struct daytona_client *c, const struct daytona_request *rq,
                        json_object **ret_doc, long *ret_status);
/* The same, with the raw answer body in ret_body (its cap applies; also for error answers). */
int daytona_client_fetch(struct daytona_client *c, const struct daytona_request *rq,
                         struct buf *ret_body, long *ret_status);
/* URL-escape s (malloc'ed, free()); NULL on allocation failure. */
char *daytona_client_escape(struct daytona_client *c, const char *s);
/* A multipart body on this client's handle (curl_mime_free() it). */
struct curl_mime *daytona_client_mime(struct daytona_client *c);

/* An id or name that can go into a URL path: [A-Za-z0-9._-]{1,63}, not "." or "..". */
bool daytona_id_ok(const char *s);
/* An http(s) URL without spaces or control characters. */
bool daytona_url_ok(const char *u);
/* No control characters. */
bool daytona_text_ok(const char *s);
/* An environment variable name: [A-Za-z_][A-Za-z0-9_]*. */
bool daytona_env_name_ok(const char *s);
/*
 * An absolute path in the sandbox, at most 4000 bytes, without control characters and
 * without "." or ".." components (a file lands exactly where the path says).
 */
bool daytona_abs_path_ok(const char *p);

#endif
