/*
 * keeper_loop — the keeper's poll loop (keeper_loop.h).
 */
#include "keeper_loop.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "keeper_relay.h"
#include "keeper_teardown.h"

/* The provider's own fds (the local sandbox's egress proxy and name server, a remote
 * sandbox's keeper channel relay). */
static int provider_fds(struct keeper *k, struct pollfd *p, int *timeout)
{
    size_t n;

    if (!k->provider || !k->provider->poll_fds || !k->proc.priv)
        return 0;
    n = k->provider->poll_fds(&k->proc, p, PROVIDER_POLLFDS_MAX, util_now_ms(), timeout);
    return (int)(n < PROVIDER_POLLFDS_MAX ? n : PROVIDER_POLLFDS_MAX);
}

/* The harness is gone (a shell has none yet: it waits for its claim). */
static bool harness_gone(const struct keeper *k)
{
    return !k->shell &&
           (k->child_exited || (k->child_out < 0 && k->child_err < 0 && k->proc.exit_fd < 0));
}

/* The attached worker's socket: flush what waits for it, read what it sent. */
static void client_events(struct keeper *k, short revents, bool *stop)
{
    if (revents & POLLOUT) {
        bool broken = false;
        keeper_flush_fd(k->client_fd, &k->client_out, &broken);
        if (broken)
            keeper_relay_client_gone(k);
    }
    if (k->client_fd >= 0 && (revents & (POLLIN | POLLHUP | POLLERR)))
        keeper_relay_read(k, &k->client_fd, &k->client_in, false, stop);
}

int keeper_loop(struct keeper *k)
{
    bool stop = false;

    while (!stop) {
        struct pollfd p[7 + KEEPER_CHANNEL_POLLFDS + PROVIDER_POLLFDS_MAX];
        int np = 0, ilisten = -1, iclient = -1, iout = -1, ierr = -1, iin = -1, iexit = -1, isig;
        int ich, iprov, nprov;
        int timeout = -1;
        size_t nch;

        isig = np;
        p[np++] = (struct pollfd){.fd = k->sig_fd, .events = POLLIN};
        if (k->client_fd < 0) {
            ilisten = np;
            p[np++] = (struct pollfd){.fd = k->listen_fd, .events = POLLIN};
        } else {
            iclient = np;
            p[np++] = (struct pollfd){
                .fd = k->client_fd, .events = (short)(POLLIN | (k->client_out.len ? POLLOUT : 0))};
        }
        ich = np;
        nch = keeper_channel_pollfds(&k->channel, p + np, KEEPER_CHANNEL_POLLFDS,
                                     k->client_fd < 0 || k->client_out.len < KEEPER_QUEUE_HIGH);
        np += (int)nch;
        if (k->child_out >= 0 && k->client_out.len < KEEPER_QUEUE_HIGH) {
            iout = np;
            p[np++] = (struct pollfd){.fd = k->child_out, .events = POLLIN};
        }
        if (k->child_err >= 0) {
            ierr = np;
            p[np++] = (struct pollfd){.fd = k->child_err, .events = POLLIN};
        }
        if (k->child_in >= 0 && k->child_stdin.len) {
            iin = np;
            p[np++] = (struct pollfd){.fd = k->child_in, .events = POLLOUT};
        }
        if (k->proc.exit_fd >= 0 && !k->child_exited) {
            iexit = np;
            p[np++] = (struct pollfd){.fd = k->proc.exit_fd, .events = POLLIN};
        }
        if (k->deadline) {
            int64_t left = k->deadline - util_now_ms();
            if (left <= 0 && k->turn.held) {
                keeper_relay_abandon(k);
                continue;
            }
            if (left <= 0) {
                log_info("idle deadline passed: tearing down");
                k->reason = k->awaiting ? TEARDOWN_APPROVAL_EXPIRY : TEARDOWN_IDLE_EXPIRY;
                break;
            }
            timeout = left > 60000 ? 60000 : (int)left;
        }
        keeper_channel_timeout(&k->channel, util_now_ms(), &timeout);
        iprov = np;
        nprov = provider_fds(k, p + np, &timeout);
        np += nprov;
        if (poll(p, (nfds_t)np, timeout) == -1) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (k->provider && k->provider->service && k->proc.priv)
            k->provider->service(&k->proc, p + iprov, (size_t)nprov, util_now_ms());
        if (p[isig].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(k->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                if (si.ssi_signo == SIGCHLD)
                    keeper_teardown_reap(k);
                else
                    stop = true;
            }
            if (stop)
                break;
        }
        /* the attached worker before a new one: a worker that died and the one adopting its
         * turn can be seen in the same poll, and the adopter must not get "#busy" */
        if (iclient >= 0 && k->client_fd >= 0)
            client_events(k, p[iclient].revents, &stop);
        if (ilisten >= 0 && (p[ilisten].revents & POLLIN))
            keeper_relay_accept(k);
        if (iin >= 0 && (p[iin].revents & (POLLOUT | POLLERR | POLLHUP))) {
            bool broken = false;
            keeper_flush_fd(k->child_in, &k->child_stdin, &broken);
            if (broken) {
                close(k->child_in);
                k->child_in = -1;
            }
        }
        /* the channel before the harness's stdout: pi's usage and error notifications are
         * in the socket before pi-acp ends the prompt, and must reach the worker first */
        keeper_channel_handle(&k->channel, p + ich, nch);
        if (iout >= 0 && (p[iout].revents & (POLLIN | POLLHUP | POLLERR)))
            keeper_relay_read(k, &k->child_out, &k->child_lines, true, &stop);
        if (ierr >= 0 && (p[ierr].revents & (POLLIN | POLLHUP | POLLERR)))
            keeper_relay_drain_stderr(k);
        if (iexit >= 0 && (p[iexit].revents & POLLIN))
            keeper_teardown_remote_exited(k);
        if (k->client_fd >= 0 && k->client_out.len) {
            bool broken = false;
            keeper_flush_fd(k->client_fd, &k->client_out, &broken);
            if (broken)
                keeper_relay_client_gone(k);
        }
        if (harness_gone(k)) {
            keeper_teardown_await_child(k);
            log_info("harness exited with status %d", k->exit_status);
            k->reason = TEARDOWN_HARNESS_EXITED;
            break;
        }
    }
    return 0;
}
