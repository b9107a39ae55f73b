/*
 * daytona_api — Daytona's control API (tests/fixtures/fake_daytona.md "Control API"): sandbox
 * descriptions and states, the create body (our labels, the auto-stop/archive/delete
 * backstops, the network rule of daytona_network, snapshot or image, target), and the
 * lifecycle calls (create, get, list by labels, start, stop, archive, recover, delete,
 * interval setters, network settings, activity, waiting out transitions). Built on
 * daytona_client (configuration, authentication, 429 backoff, error mapping); the toolbox is
 * daytona_toolbox. Nothing here retries beyond the client's 429 backoff: the lease driver
 * (daytona_sandbox) decides what a failure means.
 */
#ifndef AR_DAYTONA_API_H
#define AR_DAYTONA_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "provider/daytona/daytona_client.h"
#include "provider/daytona/daytona_network.h"

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
int daytona_sandbox_parse(json_object *dto, struct daytona_sandbox *ret, char *err, size_t errlen);
void daytona_sandbox_release(struct daytona_sandbox *sb);
/* The label's value, or NULL. */
const char *daytona_sandbox_label(const struct daytona_sandbox *sb, const char *name);

struct daytona_kv {
    const char *name;
    const char *value;
};

#define DAYTONA_INTERVAL_UNSET (-1000)

struct daytona_create_params {
    const char *name;                /* unique in the organization; NULL = the id */
    const struct daytona_kv *labels; /* never a session id or a credential */
    size_t nlabels;
    const struct daytona_kv *env; /* returned in every sandbox description: no secrets */
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
 * The CreateSandbox body for p with cfg's snapshot/image/target; the network fields are
 * daytona_network_fields() of p's rule (never silently widened: -EINVAL naming the entry).
 */
int daytona_create_body(const struct daytona_config *cfg, const struct daytona_create_params *p,
                        json_object **ret, char *err, size_t errlen);

/*
 * Network convergence on resume: a retained sandbox must get the network rule of the run
 * that resumes it, never keep a wider one (daytona_network_matches on its fields).
 */
bool daytona_sandbox_network_matches(const struct daytona_sandbox *sb, json_object *body);

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
int daytona_sandbox_list(struct daytona_client *c, const struct daytona_kv *labels, size_t nlabels,
                         size_t max_items, daytona_list_fn fn, void *ctx);

/* POST /start (idempotent for a started sandbox); ret (may be NULL) is the answer. */
int daytona_sandbox_start(struct daytona_client *c, const char *id, struct daytona_sandbox *ret);
int daytona_sandbox_stop(struct daytona_client *c, const char *id, bool force);
int daytona_sandbox_recover(struct daytona_client *c, const char *id);
/* DELETE; a sandbox that does not exist counts as deleted (0). */
int daytona_sandbox_delete(struct daytona_client *c, const char *id);

/* POST .../network-settings with a daytona_network_settings() body; ret (may be NULL). */
int daytona_sandbox_set_network(struct daytona_client *c, const char *id, json_object *settings,
                                struct daytona_sandbox *ret);
/* POST /last-activity: resets the auto-stop clock. */
int daytona_sandbox_mark_activity(struct daytona_client *c, const char *id);
/* PUT /sandbox/{id}/labels: replace every label with labels[0..n) (several hosts: a member that
 * resumed a sandbox another member made names itself its instance). */
int daytona_sandbox_set_labels(struct daytona_client *c, const char *id,
                               const struct daytona_kv *labels, size_t n);

/*
 * Poll GET every poll_step_ms until the state is one of want (a bitmask of 1u << state),
 * for at most timeout_ms. -ETIMEDOUT then (ret holds the last answer), -ENOENT when it
 * vanished; error/build_failed end the wait with DAYTONA_E_SANDBOX_FAILED unless wanted.
 */
int daytona_sandbox_wait(struct daytona_client *c, const char *id, uint32_t want, long timeout_ms,
                         struct daytona_sandbox *ret);

#define DAYTONA_BIT(s) (1u << (s))

#endif
