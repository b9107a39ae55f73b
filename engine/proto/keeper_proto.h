/*
 * keeper_proto — the one definition of the worker <-> keeper protocol.
 * The keeper (keeper/) and the worker's environment layer (engine/environment/) both speak
 * it through these functions; no other file spells a verb of it.
 *
 * The start pipe (keeper stdout -> starting worker), one line:
 *   "ready <keeper-pid> <sandbox-pid>"   the sandbox runs, the socket listens
 *   "error <message>"                    it could not start (nothing is left behind)
 *
 * The keeper socket, one '\n'-terminated line at a time in both directions. The first byte
 * says what a line is:
 *   '{'       an ACP JSON-RPC message: worker -> keeper for the harness's stdin, keeper ->
 *             worker from the harness's stdout. A harness line that does not start with '{'
 *             is never relayed (it could otherwise pose as a control line).
 *   '@'       a tagged channel line "@<channel> <json>". Channel "tool" (KEEPER_MSG_TOOL)
 *             carries JSON-RPC between the sandbox's tool channel (a socket the keeper hands
 *             the harness side) and the attached worker, in both directions: permission
 *             requests and notifications from the pi extension / the agenta-tools MCP server,
 *             and the worker's answers (keeper_channel.h: requests carry keeper-wide ids).
 *   '#'       a control line:
 *     worker -> keeper  "#park <ms>"     the turn ended, stay warm ms with nobody attached
 *                       "#await <ms>"    the turn paused on approvals: its prompt stays in
 *                                        flight, the harness's requests stay unanswered
 *                       "#destroy"       tear everything down now; the keeper closes the
 *                                        socket once the sandbox is gone (processes, cgroup,
 *                                        workspace mount, slot); only the folder's removal
 *                                        comes after
 *                       "#claim <json>"  bind a spare keeper (started with a placeholder spec,
 *                                        in a slot of its own) to the session that claimed
 *                                        its slot: {idleMs, perTurn, sessionKey, egress?,
 *                                        modelGateway?} (keeper_claim.h); a refused claim
 *                                        ends the environment with "#fail"; a shell's claim
 *                                        also carries {sandbox, harness} and the keeper
 *                                        answers "#hello" once the sandbox runs
 *                       "#model-sync"    answer "#model-synced" once every "#model" line of a
 *                                        call reported so far is written ahead of it
 *                       "#turn <json>"   a turn's prompt follows: keep what is relayed to the
 *                                        worker from now on, and if the worker vanishes before
 *                                        the turn ends, hold the turn (the harness goes on,
 *                                        its requests wait) for a worker that adopts it; the
 *                                        JSON is the worker's own (engine_turns.c) except
 *                                        "turnId" and "adoptMs" (how long to hold it)
 *                       "#adopt <turnId>" adopt the held turn: the keeper answers "#turn" with
 *                                        the JSON it was given, then every line it relayed
 *                                        since, then goes on relaying; or "#noturn"
 *     keeper -> worker  "#hello <keeper-pid> <sandbox-pid>"   on attach
 *                       "#model <json>"  one model call through the sandbox's model gateway
 *                                        (keeper/keeper_model.h): what the runner measured
 *                       "#model-synced"  the answer to "#model-sync"
 *                       "#busy"          another worker is attached: the socket is closed
 *                       "#exit <status>" the harness went away (status 0..1000)
 *                       "#fail <message>" the keeper ends the environment for a reason of
 *                                        its own ("harness output line over N bytes"); the
 *                                        socket closes after its teardown
 *                       "#turn <json>"   (answering "#adopt") the held turn, replay follows
 *                       "#noturn"        (answering "#adopt") no such turn is held
 *                       "#limits <code>" right before the harness's answer to a prompt: the
 *                                        sandbox's limit counters read then (tripwire.h),
 *                                        "none" or the limit's code; absent when the keeper
 *                                        holds no counters (the worker reads them itself)
 *
 * Decoding never allocates: a decoded message points into the line it came from. Numbers are
 * parsed strictly (util_parse_u64 bounds); anything else is -EBADMSG, which both sides skip.
 *
 * The keeper spec (worker -> keeper stdin, one JSON document, at most KEEPER_SPEC_MAX bytes)
 * is struct keeper_spec; keeper_spec_encode and keeper_spec_decode hold the only copy of its
 * keys.
 */
#ifndef AR_KEEPER_PROTO_H
#define AR_KEEPER_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "core/contracts.h"
#include "sandbox/host.h"

#define KEEPER_PROTO_WINDOW_MAX_MS 86400000ull /* #park / #await: at most 24 h */
#define KEEPER_PROTO_EXIT_MAX 1000u
#define KEEPER_PROTO_CHANNEL_TOOL "tool"
#define KEEPER_PROTO_LINE_MAX 4096 /* a control or start line (not ACP / tool lines) */
/* A remote sandbox's keeper channel socket: <env_dir>/KEEPER_CHANNEL_DIR/KEEPER_CHANNEL_SOCKET
 * on the host, reached only by the keeper's own relay pump (keeper/keeper_channel.h). */
#define KEEPER_CHANNEL_DIR "channel"
#define KEEPER_CHANNEL_SOCKET "channel.sock"

enum keeper_msg_kind {
    KEEPER_MSG_ACP = 0, /* payload: the JSON text */
    KEEPER_MSG_TOOL,    /* payload: the JSON text after "@tool " */
    KEEPER_MSG_PARK,    /* ms */
    KEEPER_MSG_AWAIT,   /* ms */
    KEEPER_MSG_DESTROY,
    KEEPER_MSG_CLAIM, /* payload: the spec JSON */
    KEEPER_MSG_HELLO, /* keeper_pid, sandbox_pid */
    KEEPER_MSG_BUSY,
    KEEPER_MSG_EXIT,  /* status */
    KEEPER_MSG_READY, /* keeper_pid, sandbox_pid, payload: stage stamps or none (start pipe) */
    KEEPER_MSG_ERROR, /* payload: the message (start pipe) */
    KEEPER_MSG_FAIL,  /* payload: why the keeper ends the environment */
    KEEPER_MSG_MODEL, /* payload: one model call the gateway saw (JSON) */
    KEEPER_MSG_MODEL_SYNC,
    KEEPER_MSG_MODEL_SYNCED,
    KEEPER_MSG_TURN,  /* payload: the turn's JSON (both directions) */
    KEEPER_MSG_ADOPT, /* payload: the turn id */
    KEEPER_MSG_NOTURN,
    KEEPER_MSG_LIMITS, /* payload: "none" or the code of the limit tripped */
    KEEPER_MSG_KIND_COUNT,
};

struct keeper_msg {
    enum keeper_msg_kind kind;
    uint64_t ms;
    int32_t keeper_pid;
    int32_t sandbox_pid;
    int status;
    const char *payload; /* points into the decoded line (not NUL-terminated by us) */
    size_t payload_len;
};

/*
 * Decode one line (without its '\n'; a trailing '\r' is not stripped). Socket lines and
 * start-pipe lines share this decoder: the caller checks that the kind is one it expects.
 * -EBADMSG for a line that is none of the above (unknown verb, bad number, empty payload).
 */
int keeper_proto_decode(const char *line, size_t len, struct keeper_msg *ret);

/*
 * Append the line for m, '\n' included, to out. A payload must be one line (no '\n', no NUL):
 * -EINVAL otherwise, and for an ACP payload that does not start with '{', a number out of its
 * range or a kind that carries none of these. -E2BIG when out is full. out is unchanged on
 * failure.
 */
int keeper_proto_encode(const struct keeper_msg *m, struct buf *out);

/* Encode m and write it whole to fd (blocking writes, EINTR retried): -errno. */
int keeper_proto_write(int fd, const struct keeper_msg *m);

/* The start pipe: "error <text>" (newlines become spaces) and "ready <keeper> <sandbox>". */
int keeper_proto_start_error(int fd, const char *text);
int keeper_proto_start_ready(int fd, int32_t keeper_pid, int32_t sandbox_pid, const char *stamps);

/* The verb of a kind as it appears on the wire ("park", "hello", ...), for logs. */
const char *keeper_proto_kind_name(enum keeper_msg_kind kind);

/*
 * What a keeper is started with. Decoded specs own `root` and every string and object points
 * into it; an encoded spec borrows everything.
 */
struct keeper_spec {
    const char *env_dir;        /* the environment folder (removed at teardown) */
    const char *socket;         /* the keeper's unix socket */
    uint64_t idle_ms;           /* idle window with nobody attached (> 0) */
    uint64_t attach_timeout_ms; /* how long a fresh keeper waits for its first worker */
    bool per_turn;              /* tear down when the first worker detaches */
    const char *provider;       /* the sandbox provider that starts the sandbox ("local") */
    const char *bwrap;          /* local provider: the bubblewrap binary */
    bool has_slot;              /* false: no session table (unit tests) */
    const char *shm;            /* the session table's shm name */
    uint32_t slot;
    uint32_t generation;
    json_object *sandbox; /* the sandbox description (provider/provider.h) */
    /* a pre-made sandbox shell (env_shell.h): no sandbox yet, the keeper makes the local
     * provider's network and waits; "#claim" brings the sandbox description */
    bool shell;
    const char *session_key; /* the pool key, for the keeper's log lines (may be NULL) */
    const char *harness;     /* the harness's name, for log lines (may be NULL) */
    /* local provider: the host identity, RLIMIT_NPROC and cgroup the worker prepared */
    bool confined;
    struct sandbox_env confine;
    /* local provider: where the sandbox may connect (egress_policy_to_json); NULL: nowhere,
     * the sandbox gets an empty network namespace */
    json_object *egress;
    /* local provider: the model gateway's route (gateway_route_encode: the run's endpoint and
     * credential, which travel only here and in a "#claim"); NULL: no gateway route */
    json_object *gateway;
    json_object *root; /* decoded specs: the document everything above points into */
};

/* The spec as one JSON document appended to out. */
int keeper_spec_encode(const struct keeper_spec *s, struct buf *out);
/*
 * Parse and check a spec: envDir, socket and sandbox are required, idleMs must be >
 * 0, a slot needs shm + slot + generation. On failure err names the problem and nothing is kept.
 * attachTimeoutMs defaults to KEEPER_SPEC_ATTACH_DEFAULT_MS, provider to "local".
 */
int keeper_spec_decode(const char *text, size_t len, struct keeper_spec *ret, char *err,
                       size_t errlen);
void keeper_spec_release(struct keeper_spec *s);
/* Read fd to its end (at most KEEPER_SPEC_MAX bytes) and decode the spec. */
int keeper_spec_read(int fd, struct keeper_spec *ret, char *err, size_t errlen);

#define KEEPER_SPEC_ATTACH_DEFAULT_MS 30000u

#endif
