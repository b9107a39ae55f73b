/*
 * keeper_channel — the keeper's end of the sandbox's tool channel: one unix socket per
 * sandbox (never the network) that pi's extension and the agenta-tools MCP bridge reach the
 * runner's tools through (harnesses/extension/PROTOCOL.md is the wire format, tool_channel.h
 * its codec); the keeper relays it to the worker running the turn.
 *
 * The keeper listens on <env_dir>/channel/channel.sock; the local provider binds the folder
 * read-only at /run/agent-runner in the sandbox (RUNNER_CHANNEL). The folder is 0711 and the
 * socket 0666 so that the sandbox's own uid can connect whatever host uid it runs as: only
 * this sandbox sees the socket (the environment folder is 0700 on the host). Any number of
 * connections may come and go (pi opens one per loaded extension, the agenta-tools MCP bridge
 * its own), at most KEEPER_CHANNEL_CONNS_MAX at once.
 *
 * Authentication. The socket is open to every process of the sandbox, tool code the model
 * wrote among them, so a connection is trusted only after its first request, a hello that
 * carries the environment's channel secret (params.token, constant-time compare). The secret
 * reaches the harness side only (RUNNER_CHANNEL_TOKEN: pi's extension and agent-runner-mcp
 * read it and remove it from their environment before any tool runs). Anything else first
 * is answered KEEPER_CHANNEL_UNAUTHORIZED "channel: hello with the environment's token
 * first", a hello with another token "channel: wrong token", and the connection is closed;
 * refusals are logged rate-limited and counted. The token is removed from a hello before it
 * is relayed: it never reaches the worker.
 *
 * Relay. Every connection picks its own request ids, so ids collide across connections: a
 * request relayed to the attached worker gets a keeper-wide id (an integer never reused over
 * the keeper's life) and the worker's answer is routed back to the connection that asked,
 * under the id it used. Notifications (usage, error) are relayed as they are. Lines go to the
 * worker as "@tool <json>" (keeper_proto.h), queued where struct keeper_channel_worker says. A
 * request stays open until the worker answers it, its connection closes, or
 * keeper_channel_detached.
 *
 * Alone (no worker attached): hello is answered {protocol: 1}, tool/permission {outcome:
 * "cancelled"}, tool/call an error result; notifications are dropped and counted. When the
 * worker detaches, what it left unanswered is answered the same way, except that "#await"
 * (a turn parked on approvals) holds the open requests: a later worker answers them under the
 * ids it was given. Malformed lines are answered -32600/-32601/-32602 by the keeper itself and
 * never reach the worker; a line longer than TOOL_CHANNEL_LINE_MAX drops its connection.
 *
 * Poll-loop hooks: keeper_channel_pollfds adds this module's fds to the keeper's poll set,
 * keeper_channel_handle handles what poll reported on them. Nothing here blocks.
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
#define KEEPER_CHANNEL_WARNS_PER_S 5 /* warnings the sandbox provokes, per second */
#define KEEPER_CHANNEL_UNAUTHORIZED (-32001) /* the JSON-RPC error of a refused connection */
#define KEEPER_CHANNEL_HELLO_FIRST "channel: hello with the environment's token first"
#define KEEPER_CHANNEL_OUT_MAX (16u * 1024 * 1024) /* queued towards one connection */
/* The most pollfds keeper_channel_pollfds contributes. */
#define KEEPER_CHANNEL_POLLFDS (1 + KEEPER_CHANNEL_CONNS_MAX)

struct keeper_channel_conn {
    int fd;
    uint64_t serial; /* never reused: a pending request names its connection by it */
    bool authed;     /* said hello with the environment's token */
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
    int listen_fd;
    char path[256];
    char dir[256];
    struct keeper_channel_conn conns[KEEPER_CHANNEL_CONNS_MAX];
    size_t nconns;
    struct keeper_channel_pending pending[KEEPER_CHANNEL_PENDING_MAX];
    size_t npending;
    int64_t next_id;
    uint64_t next_serial;
    uint64_t dropped;        /* lines nobody took: notifications while alone, malformed lines */
    uint64_t refused;        /* connections closed for not saying hello with the token first */
    uint64_t calls_answered; /* tool/call requests the worker answered (they ran on it) */
    char token[TOOL_CHANNEL_TOKEN_MAX + 1]; /* the environment's channel secret */
    /* warn_allowed's budget: KEEPER_CHANNEL_WARNS_PER_S */
    struct log_budget warns;
    struct keeper_channel_worker worker;
    /* the poll set of the last keeper_channel_pollfds: which fd each slot was */
    int polled[KEEPER_CHANNEL_POLLFDS];
    size_t npolled;
};

/* An unopened channel (listen_fd -1): every other call is a no-op on it. */
void keeper_channel_init(struct keeper_channel *kc);
/*
 * Create <env_dir>/channel (0711) and listen on channel.sock in it (0666); connections must
 * say hello with token (copied; TOOL_CHANNEL_TOKEN_LEN..TOOL_CHANNEL_TOKEN_MAX bytes, else
 * -EINVAL) first; lines for the worker go through w (borrowed: it must outlive kc). On
 * failure err names the problem (a bad token, a path too long for a unix socket, a mkdir or
 * bind error).
 */
int keeper_channel_open(struct keeper_channel *kc, const char *env_dir, const char *token,
                        const struct keeper_channel_worker *w, char *err, size_t errlen);
/* Close every connection and the socket (the folder goes with the environment folder). */
void keeper_channel_close(struct keeper_channel *kc);

/*
 * Add this module's fds to p[0..max): the listening socket and each connection (read only
 * when `reading`, i.e. while the worker's queue has room; write while output is queued).
 * Returns how many were added (at most KEEPER_CHANNEL_POLLFDS).
 */
size_t keeper_channel_pollfds(struct keeper_channel *kc, struct pollfd *p, size_t max,
                              bool reading);
/* Handle what poll reported on the n entries keeper_channel_pollfds added. */
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
