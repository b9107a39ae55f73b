/*
 * keeper_channel — the keeper's end of the sandbox's tool channel: the connection pi's
 * extension (or the agenta-tools MCP bridge) reaches the runner's tools and permission gate
 * through (harnesses/extension/PROTOCOL.md is the wire format, tool_channel.h its codec); the
 * keeper relays it to the worker running the turn. Never the network.
 *
 * No secret. A capability any process of the sandbox could copy (a token in an environment,
 * file or command line) is one the agent's own code can steal: every process there runs as one
 * uid. So the harness's connection is made by the keeper itself, before the sandbox starts: a
 * socket pair, one end kept here as a connection with a role, the other handed into the
 * sandbox as an inherited descriptor (RUNNER_CHANNEL_FD names its number; the harness side
 * takes it and marks it close-on-exec before any tool runs, and a socket cannot be reopened
 * through /proc/<pid>/fd). Roles:
 *   HARNESS  pi's extension, the scripted agent: hello, tool/permission, tool/call, usage,
 *            error;
 *   TOOLS    agent-runner-mcp (claude, codex, opencode): hello and tool/call only; anything
 *            else is refused (requests answered KEEPER_CHANNEL_UNAUTHORIZED, notifications
 *            dropped) and the connection stays;
 *   NONE     a stranger: whatever it sends first (one read of at most
 *            KEEPER_CHANNEL_STRANGER_LINE bytes and a chunk) is answered
 *            KEEPER_CHANNEL_UNAUTHORIZED KEEPER_CHANNEL_STRANGER and it is closed; it never
 *            reaches the worker.
 * A local sandbox has nothing else: no socket is bound into it. A remote (Daytona) sandbox
 * cannot inherit a descriptor from the keeper: a relay in it (daytona_relay.h) carries each
 * connection a sandbox program opens to a listening socket here
 * (<env_dir>/channel/channel.sock, folder 0700, socket 0600: only the keeper's own relay pump
 * reaches it). The first connection accepted there takes the harness's role (the relay is
 * ready before the harness starts, and pi's extension connects once per process, at its first
 * load, before any agent code runs); every later one is a stranger.
 *
 * Bounds. Whatever a sandbox sends, the keeper's memory stays flat: at most
 * KEEPER_CHANNEL_CONNS_MAX connections; a stranger is closed at the first bytes it sends, or
 * after KEEPER_CHANNEL_STRANGER_MS if it sends none; a role's lines
 * TOOL_CHANNEL_LINE_MAX; everything buffered for the channel (lines coming in, answers going
 * out, over all connections) at most KEEPER_CHANNEL_BUFFERED_MAX, a connection that would
 * exceed it dropped. Every warning a sandbox can provoke goes through one limiter
 * (KEEPER_CHANNEL_WARNS_PER_S, the rest summed in one line).
 *
 * The protocol on a connection: hello first (anything else first is answered
 * KEEPER_CHANNEL_UNAUTHORIZED KEEPER_CHANNEL_HELLO_FIRST and closes it); pi's extension says
 * hello again on the same connection after each reload.
 *
 * Relay. Requests relayed to the attached worker get a keeper-wide id (an integer never
 * reused over the keeper's life) and the worker's answer is routed back to the connection
 * that asked, under the id it used. Notifications (usage, error) are relayed as they are.
 * Lines go to the worker as "@tool <json>" (keeper_proto.h), queued where struct
 * keeper_channel_worker says. A request stays open until the worker answers it, its
 * connection closes, or keeper_channel_detached.
 *
 * Alone (no worker attached): hello is answered {protocol: 1}, tool/permission {outcome:
 * "cancelled"}, tool/call an error result; notifications are dropped and counted. When the
 * worker detaches, what it left unanswered is answered the same way, except that "#await"
 * (a turn parked on approvals) holds the open requests: a later worker answers them under the
 * ids it was given. Malformed lines are answered -32600/-32601/-32602 by the keeper itself and
 * never reach the worker; a line longer than its bound drops its connection.
 *
 * Poll-loop hooks: keeper_channel_pollfds adds this module's fds to the keeper's poll set,
 * keeper_channel_timeout lowers its timeout to the next stranger's deadline,
 * keeper_channel_handle handles what poll reported. Nothing here blocks.
 */
#ifndef AR_KEEPER_CHANNEL_H
#define AR_KEEPER_CHANNEL_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/log.h"
#include "proto/acp.h"
#include "proto/keeper_proto.h"
#include "proto/tool_channel.h"

#define KEEPER_CHANNEL_CONNS_MAX 16
#define KEEPER_CHANNEL_PENDING_MAX 64
#define KEEPER_CHANNEL_WARNS_PER_S 5         /* warnings the sandbox provokes, per second */
#define KEEPER_CHANNEL_UNAUTHORIZED (-32001) /* the JSON-RPC error of a refused request */
#define KEEPER_CHANNEL_HELLO_FIRST "channel: hello first"
#define KEEPER_CHANNEL_STRANGER "channel: this connection is not the harness's own"
#define KEEPER_CHANNEL_TOOLS_ONLY "channel: this connection may only call the runner's tools"
#define KEEPER_CHANNEL_STRANGER_LINE 4096u         /* a stranger's one line */
#define KEEPER_CHANNEL_STRANGER_MS 5000            /* a silent stranger is closed after it */
#define KEEPER_CHANNEL_OUT_MAX (16u * 1024 * 1024) /* queued towards one connection */
/* everything buffered for the channel, in and out, over all its connections */
#define KEEPER_CHANNEL_BUFFERED_MAX (24u * 1024 * 1024)
/* the descriptor's number in the harness's environment (the local provider sets it) */
#define KEEPER_CHANNEL_FD_ENV "RUNNER_CHANNEL_FD"
/* The most pollfds keeper_channel_pollfds contributes. */
#define KEEPER_CHANNEL_POLLFDS (1 + KEEPER_CHANNEL_CONNS_MAX)

/* Who is at the other end of a connection (the spec's sandbox "channel" names it). */
enum keeper_channel_role {
    KEEPER_CHANNEL_NONE = 0, /* a stranger */
    KEEPER_CHANNEL_HARNESS,  /* "harness": pi's extension, the scripted agent */
    KEEPER_CHANNEL_TOOLS,    /* "tools": agent-runner-mcp */
};

struct keeper_channel_conn {
    int fd;
    uint64_t serial; /* never reused: a pending request names its connection by it */
    enum keeper_channel_role role;
    bool hello;       /* said hello */
    int64_t deadline; /* a stranger is closed at it (0: none) */
    struct acp_lines in;
    struct buf out;
};

struct keeper_channel_pending {
    int64_t id;    /* the id the worker sees */
    uint64_t conn; /* serial of the connection that asked */
    char *orig_id; /* the connection's own id, as JSON text */
    int kind;      /* enum tool_channel_kind: what the keeper answers alone */
};

/*
 * Where the keeper keeps its worker: lines go to it while *fd >= 0 and it has not let go
 * (*gone: it sent "#park" or "#await" and takes no more lines), queued "@tool <json>" in *out.
 * While *holding (a turn whose worker died, held for a worker that adopts it) the worker
 * counts as attached but away: requests are relayed (and stay open) without going to *out.
 * keep (may be NULL) sees every "@tool" line meant for the worker, written or held, with ctx.
 */
struct keeper_channel_worker {
    const int *fd;
    const bool *gone;
    struct buf *out;
    const bool *holding;
    void (*keep)(void *ctx, const char *line, size_t len);
    void *ctx;
};

struct keeper_channel {
    int listen_fd;                  /* a relayed sandbox's (-1: none) */
    enum keeper_channel_role first; /* the role of the next connection accepted */
    char path[256];
    char dir[256];
    struct keeper_channel_conn conns[KEEPER_CHANNEL_CONNS_MAX];
    size_t nconns;
    struct keeper_channel_pending pending[KEEPER_CHANNEL_PENDING_MAX];
    size_t npending;
    int64_t next_id;
    uint64_t next_serial;
    uint64_t dropped;        /* lines nobody took: notifications while alone, malformed lines */
    uint64_t refused;        /* strangers closed, requests refused for their role */
    uint64_t over;           /* connections dropped for a line or buffering over its bound */
    uint64_t calls_answered; /* tool/call requests the worker answered (they ran on it) */
    /* warn_allowed's budget: KEEPER_CHANNEL_WARNS_PER_S */
    struct log_budget warns;
    struct keeper_channel_worker worker;
    /* the poll set of the last keeper_channel_pollfds: which fd each slot was */
    int polled[KEEPER_CHANNEL_POLLFDS];
    size_t npolled;
};

/* An unopened channel: no connection, no socket; every other call is a no-op on it. */
void keeper_channel_init(struct keeper_channel *kc);
/* The role a sandbox description's "channel" names ("harness", "tools"; else NONE). */
enum keeper_channel_role keeper_channel_role_of(const char *name);
/*
 * Open the channel of a sandbox whose harness side has `role` (NONE: it has none; lines for
 * the worker go through w, borrowed: it must outlive kc):
 *   - relayed false: a socket pair; one end is the role's connection, *ret_fd the other end
 *     (close-on-exec; the caller hands it into the sandbox, then closes it). -1 for NONE.
 *   - relayed true (a remote sandbox): listen on <env_dir>/channel/channel.sock (folder 0700,
 *     socket 0600); the first connection accepted takes role. *ret_fd is -1.
 * On failure err names the problem (a path too long for a unix socket, a mkdir or bind error).
 */
int keeper_channel_open(struct keeper_channel *kc, const char *env_dir,
                        enum keeper_channel_role role, bool relayed,
                        const struct keeper_channel_worker *w, int *ret_fd, char *err,
                        size_t errlen);
/* Close every connection and the socket (the folder goes with the environment folder). */
void keeper_channel_close(struct keeper_channel *kc);

/*
 * Add this module's fds to p[0..max): the listening socket and each connection (read only
 * when `reading`, i.e. while the worker's queue has room; write while output is queued).
 * Returns how many were added (at most KEEPER_CHANNEL_POLLFDS).
 */
size_t keeper_channel_pollfds(struct keeper_channel *kc, struct pollfd *p, size_t max,
                              bool reading);
/* Lower *timeout_ms (-1: none) to the next stranger's deadline. */
void keeper_channel_timeout(const struct keeper_channel *kc, int64_t now, int *timeout_ms);
/* Handle what poll reported on the n entries keeper_channel_pollfds added; close the strangers
 * whose deadline passed. */
void keeper_channel_handle(struct keeper_channel *kc, const struct pollfd *p, size_t n);

/* The worker's "@tool <json>" line: its answer to a relayed request (anything else dropped). */
void keeper_channel_from_worker(struct keeper_channel *kc, const char *json, size_t len);
/*
 * The worker let go ("#park", or its connection went away mid-turn): answer the requests it
 * left open as the keeper would alone. After "#await" the keeper does not call this: the open
 * requests stay open for a later worker, which answers them under the ids it was given.
 */
void keeper_channel_detached(struct keeper_channel *kc);

#endif
