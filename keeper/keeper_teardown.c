/*
 * keeper_teardown — the end of a keeper's environment (keeper_teardown.h).
 */
#include "keeper_teardown.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fstree.h"
#include "base/log.h"
#include "proto/keeper_proto.h"
#include "sandbox/host.h"

void keeper_teardown_reap(struct keeper *k)
{
    int status;
    pid_t pid;

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid == k->child) {
            k->child_exited = true;
            k->proc.pid = 0; /* reaped: its pid may be reused, never signal it again */
            k->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
    }
}

/* A leased sandbox goes as the reason this keeper ends says (else its slot's drain reason). */
static void release_lease(struct keeper *k)
{
    enum teardown_reason why = (enum teardown_reason)k->reason;
    int r;

    if (!k->leased)
        return;
    if (why == TEARDOWN_NONE && k->pool) {
        r = pool_session_teardown_reason(k->pool, k->h);
        why = r > 0 ? (enum teardown_reason)r : TEARDOWN_NONE;
    }
    if (why == TEARDOWN_NONE)
        why = k->per_turn || !k->parked ? TEARDOWN_PER_TURN : TEARDOWN_SHUTDOWN_IDLE;
    provider_lease_end(k->provider, &k->lease, why, k->pool);
    k->leased = false;
}

/* A remote harness's exit is announced on exit_fd (there is no child to reap). */
void keeper_teardown_remote_exited(struct keeper *k)
{
    int status = k->provider->exit_status ? k->provider->exit_status(&k->proc) : 255;

    if (status == -EAGAIN)
        return;
    k->exit_status = status;
    k->child_exited = true;
}

/* The harness closed its output: wait a moment for its exit, then end it (it may hide). */
void keeper_teardown_await_child(struct keeper *k)
{
    for (int i = 0; i < 100 && !k->child_exited; i++, usleep(5000))
        keeper_teardown_reap(k);
    if (!k->child_exited) {
        k->provider->stop(&k->proc);
        k->child_exited = true;
        k->exit_status = 128 + SIGKILL;
    }
}

/* Cgroup and mount first (quick); the folder after the worker was let go (deep trees). */
static void remove_env(struct keeper *k, bool folder)
{
    const struct sandbox_cgroup *cg = k->spec.confined ? &k->spec.confine.cg : NULL;

    if ((folder ? fstree_remove(k->env_dir) : sandbox_host_release_env(cg, k->env_dir)) < 0)
        log_warn("cannot remove all of the environment '%s'", k->env_dir);
}

void keeper_teardown(struct keeper *k)
{
    if (k->provider && (k->proc.exit_fd >= 0 || k->proc.pid > 0 || k->proc.priv))
        k->provider->stop(&k->proc); /* the process tree, the cgroup's rest, the network */
    release_lease(k);
    if (k->client_fd >= 0 && (k->child_exited || k->fail[0])) {
        struct keeper_msg m = {.kind = k->fail[0] ? KEEPER_MSG_FAIL : KEEPER_MSG_EXIT,
                               .status = k->exit_status,
                               .payload = k->fail,
                               .payload_len = strlen(k->fail)};

        keeper_control_to_client(k, &m);
        {
            bool broken = false; /* the last lines, blocking */
            fcntl(k->client_fd, F_SETFL, fcntl(k->client_fd, F_GETFL) & ~O_NONBLOCK);
            keeper_flush_fd(k->client_fd, &k->client_out, &broken);
        }
    }
    if (k->log_fd >= 0)
        close(k->log_fd);
    keeper_channel_close(&k->channel);
    if (k->listen_fd >= 0)
        close(k->listen_fd);
    (void)unlink(k->socket_path);
    remove_env(k, false);
    keeper_slot_release(k);
    /* the worker waits for this close as the sign that the sandbox is gone */
    if (k->client_fd >= 0)
        close(k->client_fd);
    remove_env(k, true);
    acp_lines_release(&k->client_in);
    buf_release(&k->client_out);
    keeper_turn_end(k);
}
