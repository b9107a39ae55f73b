/*
 * env_link — a worker's link to an environment: struct environment and the connection to its
 * keeper's socket. Whoever starts or reattaches an environment (environment.h,
 * environment_spare.h) fills the struct and attaches with environment_connect_keeper(); the
 * turn then talks to the harness through it.
 *
 * Messages: environment_send() writes one ACP line to the harness (the turn's view,
 * environment_turn_env, also writes lines to the sandbox's keeper channel, tagged "@tool");
 * environment_recv() returns the next message, waiting at most until deadline_ms
 * (CLOCK_MONOTONIC ms; 0 = no deadline): 0 for an ACP message of the harness, TURN_RECV_TOOL
 * (turn_env.h) for one of the channel, TURN_RECV_MODEL for one of the model gateway ("#model",
 * "#model-synced"; the turn's model_sync sends "#model-sync"). Malformed lines are skipped and
 * counted; the keeper's other lines are handled here.
 *
 * After a turn the caller either parks the environment (environment_park: the keeper keeps it
 * warm, the worker detaches) or destroys it (environment_destroy). Destroy is idempotent: the
 * keeper tears down once, and every caller returns only when that teardown has finished
 * (the keeper's socket closed or, for a keeper nobody is attached to, the keeper process gone).
 */
#ifndef AR_ENV_LINK_H
#define AR_ENV_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/contracts.h"
#include "environment/env_setup.h"
#include "harness/harness.h"
#include "proto/acp.h"
#include "provider/provider.h"
#include "session/pool.h"

struct environment {
    const struct engine_config *cfg;
    const struct provider_ops *provider;
    struct pool_handle h;
    bool has_slot;
    struct env_paths paths;
    pid_t keeper_pid;
    pid_t sandbox_pid;
    int fd;
    struct acp_lines lines;
    int64_t next_id;
    uint64_t malformed;
    bool harness_exited;
    int harness_status;
    bool destroyed;
    bool warm;                /* reconnected to a live harness */
    bool from_spare;          /* a claimed spare (environment_claim_spare) */
    bool from_shell;          /* a claimed pre-made shell (environment_claim_shell) */
    bool keeper_lost;         /* the keeper's socket closed without "#exit" or "#fail" */
    /* attached without waiting for the keeper's "#hello" (environment_attach_ahead): the
     * first line environment_recv reads must be it, before hello_deadline (monotonic ms) */
    bool hello_pending;
    int64_t hello_deadline;
    char fail[192];           /* why the keeper ended the environment ("#fail"), or "" */
    const char *limit;        /* the sandbox limit that tripped ("sandbox_pids_limit"), or NULL */
    char limit_msg[192];      /* and what it says */
    int64_t next_limit_check; /* monotonic ms */
    /* the keeper's "#limits" verdict at the harness's answer to the last prompt ("none", a
     * code), "" when none came since that prompt was sent (sandbox/tripwire.h) */
    char keeper_limits[32];
    struct buf ahead; /* "#turn", held to go out with the prompt in one write */
    char acp_session[128];
    json_object *agent_caps;   /* initialize result agentCapabilities (owned) */
    json_object *lease_report; /* a remote provider's lease report (owned) or NULL */
    char cwd[1024];            /* the harness's working folder ("" = SANDBOX_WORKSPACE) */
    /* called before every wait for the harness (the turn flushes its events there), and for
     * the keeper's hello when set before environment_connect_keeper */
    void (*before_wait)(void *ctx);
    void *before_wait_ctx;
};

/* A fresh struct for cfg: no slot, no keeper, not attached (NULL when out of memory). */
struct environment *environment_new(const struct engine_config *cfg);
/* Release the struct (does not tear down: destroy or park first). NULL is a no-op. */
void environment_free(struct environment *env);

/*
 * Read one '\n'-terminated line from fd into *ret (malloc'd, the caller frees it) before
 * deadline (monotonic ms, 0 = none), through lines; env (may be NULL) gets its before_wait
 * call before every wait. -ETIMEDOUT, -EPIPE at the end of the stream, -E2BIG for an
 * overlong line, -errno.
 */
int env_link_read_line(int fd, struct acp_lines *lines, int64_t deadline, char **ret,
                       size_t *ret_len, const struct environment *env);

/*
 * Attach to the keeper at env->paths.socket and read its "#hello" (before deadline; before_wait,
 * when set, runs while it is awaited): env->fd, keeper_pid and sandbox_pid set. -EBUSY when another worker is attached; err says why.
 */
int environment_connect_keeper(struct environment *env, int64_t deadline, char *err, size_t errlen);
/*
 * Attach to the keeper at env->paths.socket without waiting for its "#hello": what the caller
 * sends next (the turn's "#turn" and prompt) is in the keeper's socket when it accepts, and
 * environment_recv takes the hello (by hello_deadline) before any other line. A keeper that
 * refuses ("#busy", another worker is attached: it closes the connection unread) or does not
 * answer in time ends the link as a lost keeper (AR_E_KEEPER_LOST), before any harness line.
 * env->keeper_pid and sandbox_pid are the caller's (the session table's) until the hello.
 */
int environment_attach_ahead(struct environment *env, int64_t hello_deadline, char *err,
                             size_t errlen);

struct turn_env;
/* The turn's view of env (turn_env.h): valid while env lives. */
void environment_turn_env(struct environment *env, struct turn_env *ret);

int environment_send(struct environment *env, const struct buf *line);
/* Encode and send a request with a fresh id; *ret_id receives the id. */
int environment_request(struct environment *env, const char *method, json_object *params,
                        int64_t *ret_id);
int environment_recv(struct environment *env, int64_t deadline_ms, struct acp_msg *ret);

/*
 * "#turn <json>" (keeper_proto.h): this worker's turn sends its prompt next; the keeper keeps
 * what it relays from now on and holds the turn for an adopter if this worker dies. The line
 * goes out with the next one sent (the prompt: one write), or alone before the next wait or
 * the environment's destruction.
 */
int environment_turn_begin(struct environment *env, const char *json, size_t len);
/*
 * Adopt the turn turn_id the keeper holds (its worker died): *ret is the JSON its worker gave
 * "#turn" (malloc'd, the caller frees it); the lines the keeper relayed since then follow as
 * the harness's. -ENOENT when the keeper holds no such turn, -errno; err says why.
 */
int environment_turn_adopt(struct environment *env, const char *turn_id, char **ret, char *err,
                           size_t errlen);

/*
 * Keep it alive for window_ms and detach; awaiting: a prompt waits on approvals (its expiry is
 * approval-expiry). The slot must already be parked by the caller.
 */
int environment_park(struct environment *env, uint64_t window_ms, bool awaiting);
/*
 * Did the sandbox hit one of its limits (an OOM kill, a refused fork, a full workspace)?
 * 1 with env->limit and env->limit_msg set (and kept: a trip stays a trip), 0 when not (or
 * no probed host). environment_recv() asks every ENVIRONMENT_LIMIT_POLL_MS while it waits
 * and returns AR_E_SANDBOX_LIMIT on a trip; the engine asks again after every turn. Once the
 * harness answered the prompt, the keeper's verdict (read from the counters it holds open)
 * answers without a file opened here; without one the counters and the workspace are read.
 */
#define ENVIRONMENT_LIMIT_POLL_MS 250
int environment_check_limits(struct environment *env);

/* Tear it down and wait for the teardown to finish (bounded). */
int environment_destroy(struct environment *env, enum teardown_reason reason);

#endif
