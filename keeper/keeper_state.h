/*
 * keeper_state — one keeper's state, which its parts share (the start-up in keeper.c, the
 * relay, the loop, the teardown), and the small steps on it each of them takes: the keeper's
 * slot in the session table updated (no-ops without a table), a control line queued for the
 * attached worker, a remote sandbox told whether a turn is in flight, a queue flushed.
 */
#ifndef AR_KEEPER_STATE_H
#define AR_KEEPER_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"
#include "egress_report.h"
#include "keeper_channel.h"
#include "keeper_model.h"
#include "keeper_turn.h"
#include "proto/acp.h"
#include "proto/keeper_proto.h"
#include "provider/provider.h"
#include "sandbox/tripwire.h"
#include "session/pool.h"

#define PENDING_MAX 32

struct keeper {
    struct keeper_spec spec;
    const struct provider_ops *provider;
    struct provider_process proc;
    struct provider_lease lease; /* remote providers: the sandbox this keeper leased */
    bool leased;
    const char *env_dir;
    const char *socket_path;
    int64_t idle_ms;
    int64_t deadline; /* monotonic ms; 0 = none */
    bool per_turn;

    int listen_fd;
    int client_fd;
    int sig_fd;
    struct acp_lines client_in;
    struct buf client_out;

    pid_t child; /* proc.pid, kept after the provider stopped it */
    int child_in, child_out, child_err;
    struct acp_lines child_lines;
    struct buf child_stdin;
    int log_fd;
    size_t log_bytes;

    struct pool *pool;
    struct pool_handle h;
    struct egress_report egress;
    char fail[160]; /* why the keeper ends the environment itself ("#fail"), or "" */

    bool prompt_in_flight;
    char prompt_id[64];
    char acp_session[128];
    bool parked;
    bool awaiting; /* parked on a permission gate: expiry is approval-expiry */
    uint64_t dropped;
    int exit_status;
    bool child_exited;
    uint8_t reason; /* why the keeper ends (0: the reason its slot was drained with) */
    /* harness requests relayed to the attached worker and not answered yet */
    char *pending[PENDING_MAX];
    size_t npending;
    struct keeper_channel channel;  /* the sandbox's tool channel, relayed as "@tool" lines */
    struct keeper_model model;      /* the sandbox's model calls, to the worker as "#model" */
    struct keeper_turn turn;        /* the turn on the worker, held when it dies (keeper_turn.h) */
    struct log_budget sandbox_logs; /* keeper_sandbox_log_allowed's budget */
    struct sandbox_tripwire trip;   /* the limit counters, read at a prompt's answer */
    bool shell;           /* a pre-made shell whose sandbox has not started (keeper_shell_start) */
    json_object *claimed; /* a shell's claim: the sandbox description spec.sandbox points at */
    char claimed_harness[32];
};

/*
 * The sandbox started through the spec's provider, with the keeper channel's end in it: at
 * start, or (a shell) at its claim once spec.sandbox is the claim's. -errno, err says why.
 */
int keeper_start_sandbox(struct keeper *k, char *err, size_t errlen);

/*
 * Whether a line the sandbox's harness can provoke (a full queue, a request between turns) may
 * be logged now: at most KEEPER_SANDBOX_LOGS_PER_S a second, the rest summed in one line.
 */
#define KEEPER_SANDBOX_LOGS_PER_S 5
bool keeper_sandbox_log_allowed(struct keeper *k);

/*
 * A remote provider keeps its sandbox alive while a turn is in flight (a worker attached, or
 * a prompt waiting on an approval) and lets its idle backstop run otherwise.
 */
void keeper_sandbox_busy(struct keeper *k, bool busy);
/* A control line to the attached worker (dropped and logged when its queue is full). */
void keeper_control_to_client(struct keeper *k, const struct keeper_msg *m);

/* The keeper's and the sandbox's pids into the slot. */
void keeper_slot_set_pids(struct keeper *k);
/* The session's history is broken (a prompt cancelled because its worker vanished). */
void keeper_slot_mark_broken(struct keeper *k);
/* The attached worker vanished without parking: keep a keyed session warm but broken. */
void keeper_slot_orphaned(struct keeper *k);
/* Free the slot with k->reason (the keeper's teardown). */
void keeper_slot_release(struct keeper *k);

/* Write q to the non-blocking fd until it is empty or would block; *broken on a write error. */
void keeper_flush_fd(int fd, struct buf *q, bool *broken);

#endif
