/*
 * tripwire — an environment's limit counters held open by its keeper, read when the harness
 * answers a prompt (keeper/keeper_relay.c), so that the worker need not open and read them
 * (and stat the workspace) on every turn.
 *
 * It holds the counter files sandbox_cgroup_tripped() reads (memory.events or
 * memory.oom_control, pids.events) and an O_PATH descriptor of the workspace when it is its
 * own capped tmpfs, and reads them with pread(2) and fstatfs(2): the same counters and the
 * same rule, in the same order (memory over pids over disk), as sandbox_host_tripped(). An
 * unarmed tripwire (nothing could be opened) gives no verdict: the worker reads for itself.
 * The descriptors are the keeper's alone (close-on-exec, closed before the teardown unmounts
 * the workspace).
 */
#ifndef AR_SANDBOX_TRIPWIRE_H
#define AR_SANDBOX_TRIPWIRE_H

#include <stdbool.h>

#include "sandbox/cgroup.h"

#define SANDBOX_TRIPWIRE_MAX (2 * SANDBOX_CG_HIER_MAX)

struct sandbox_tripwire {
    int fd[SANDBOX_TRIPWIRE_MAX];
    bool memory[SANDBOX_TRIPWIRE_MAX]; /* a memory counter (else pids) */
    bool v2[SANDBOX_TRIPWIRE_MAX];
    int n;
    int ws_fd;  /* the workspace mount, -1 when it is not one */
    bool armed; /* false in a zeroed struct: nothing to close */
};

/* Nothing open (a zeroed struct is that too). */
void sandbox_tripwire_init(struct sandbox_tripwire *t);
/*
 * Open cg's counters and, when workspace is a mount point, the workspace. 0 when every
 * counter cg carries and the workspace (if mounted) are open, else -errno and t unarmed.
 */
int sandbox_tripwire_open(struct sandbox_tripwire *t, const struct sandbox_cgroup *cg,
                          const char *workspace);
/* True when open succeeded. */
bool sandbox_tripwire_armed(const struct sandbox_tripwire *t);
/*
 * The limit tripped: "sandbox_memory_limit", "sandbox_pids_limit", "sandbox_disk_limit", or
 * "none". A counter that cannot be read counts as not tripped (as sandbox_host_tripped()).
 */
const char *sandbox_tripwire_check(const struct sandbox_tripwire *t);
/* Close everything; t is unarmed after. */
void sandbox_tripwire_close(struct sandbox_tripwire *t);

#endif
