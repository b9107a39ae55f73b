/*
 * keeper — the keeper program's start-up (keeper.h): the spec read, the socket bound, the
 * fork that lets the master adopt it, the slot attached, the sandbox started, "ready"
 * written; then the loop (keeper_loop.h) and the teardown (keeper_teardown.h).
 */
#include "keeper.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "keeper_loop.h"
#include "keeper_state.h"
#include "keeper_teardown.h"
#include "proto/keeper_proto.h"
#include "telemetry/stages.h"

static void emit_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void emit_error(const char *fmt, ...)
{
    char text[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    (void)keeper_proto_start_error(STDOUT_FILENO, text); /* the start pipe */
}

static int setup_signals(void)
{
    static const int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP};

    signal(SIGPIPE, SIG_IGN);
    return util_signalfd_for(sigs, ARRAY_SIZE(sigs));
}

static int attach_slot(struct keeper *k)
{
    struct pool_info info;
    int r;

    if (!k->spec.has_slot)
        return 0;
    r = pool_attach(k->spec.shm, false, &k->pool);
    if (r < 0)
        return r;
    k->h.index = k->spec.slot;
    k->h.generation = k->spec.generation;
    pool_get_info(k->pool, &info);
    if (k->h.index >= info.nslots)
        return -EINVAL;
    keeper_slot_set_pids(k);
    return 0;
}

/* The sandbox, through the spec's provider. */
static int start_sandbox(struct keeper *k, char *err, size_t errlen)
{
    int r;

    k->provider = provider_get(k->spec.provider);
    if (!k->provider || !k->provider->start) {
        snprintf(err, errlen, "sandbox provider '%s' cannot start sandboxes here",
                 k->spec.provider);
        return -ENOTSUP;
    }
    k->proc.exit_fd = -1;
    if (k->provider->acquire) {
        r = provider_lease_begin(k->provider, &k->spec, k->pool, &k->lease, err, errlen);
        if (r < 0)
            return r;
        k->leased = true;
    }
    r = k->provider->start(&k->spec, &k->proc, err, errlen);
    if (r < 0)
        return r;
    if (!k->provider->exit_status)
        k->proc.exit_fd = -1; /* a local child: its exit comes as SIGCHLD */
    if (k->leased) {
        r = provider_report_write(k->spec.env_dir, k->lease.report);
        if (r < 0)
            log_debug("cannot write the lease report: %s", strerror(-r));
    }
    k->child = k->proc.pid;
    k->child_in = k->proc.in_fd;
    k->child_out = k->proc.out_fd;
    k->child_err = k->proc.err_fd;
    if (k->spec.confined && !k->leased) {
        /* the limit counters, read at every prompt's answer (keeper_relay.c); without them the
         * worker reads them itself */
        char ws[PATH_MAX];

        if ((size_t)snprintf(ws, sizeof(ws), "%s/workspace", k->env_dir) < sizeof(ws) &&
            sandbox_tripwire_open(&k->trip, &k->spec.confine.cg, ws) < 0)
            log_debug("no tripwire: the worker reads the limit counters");
    }
    return 0;
}

int keeper_start_sandbox(struct keeper *k, char *err, size_t errlen)
{
    int r;

    /* the harness's end of the channel: inherited into a local sandbox, relayed into a remote
     * one (keeper_channel.h); a held turn keeps the lines meant for its worker (keeper_turn.h) */
    r = keeper_channel_open(
        &k->channel, k->env_dir, keeper_channel_role_of(jsonx_str(k->spec.sandbox, "channel")),
        jsonx_get(k->spec.sandbox, "channelRelay") != NULL,
        &(struct keeper_channel_worker){&k->client_fd, &k->parked, &k->client_out, &k->turn.held,
                                        keeper_turn_keep_tool, k},
        &k->proc.channel_fd, err, errlen);
    if (r == 0)
        r = start_sandbox(k, err, errlen);
    if (k->proc.channel_fd >= 0)
        close(k->proc.channel_fd); /* the sandbox has it now (or never will) */
    k->proc.channel_fd = -1;
    return r;
}

/* A shell: what comes before the sandbox made now (the provider's network), the rest at its
 * claim (keeper_claim.h). */
static int prepare_shell(struct keeper *k, char *err, size_t errlen)
{
    k->provider = provider_get(k->spec.provider);
    if (!k->provider || !k->provider->prepare || !k->provider->start) {
        snprintf(err, errlen, "sandbox provider '%s' has no shells", k->spec.provider);
        return -ENOTSUP;
    }
    k->shell = true;
    return k->provider->prepare(&k->spec, &k->proc, err, errlen);
}

static const char *env_get(const char *name)
{
    return getenv(name);
}

/* The start pipe's last line: the pids, and the stage stamps of the start (telemetry/stages.h). */
static void write_ready(const struct keeper *k)
{
    char stamps[STAGES_K_COUNT * 44];

    stages_keeper_mark(STAGES_K_READY);
    stages_keeper_text(stamps, sizeof(stamps));
    (void)keeper_proto_start_ready(STDOUT_FILENO, getpid(), k->child, stamps);
}

int keeper_main(int argc, char **argv)
{
    struct keeper k;
    char err[512], logpath[512];
    int64_t attach_ms;
    pid_t pid;
    int r;

    (void)argc;
    (void)argv;
    stages_keeper_mark(STAGES_K_MAIN);
    /*
     * Whatever else the starting worker had open (FastCGI connections of concurrent requests:
     * libfcgi does not mark them close-on-exec) must not live on here or in the sandbox.
     */
    close_range(3, ~0U, 0);
    memset(&k, 0, sizeof(k));
    keeper_channel_init(&k.channel);
    k.listen_fd = k.client_fd = k.sig_fd = k.child_in = k.child_out = k.child_err = -1;
    k.proc.exit_fd = -1;
    k.proc.channel_fd = -1;
    k.log_fd = -1;
    log_setup("keeper", LOG_LEVEL_INFO);
    log_level_from_env("AGENT_RUNNER_LOG_LEVEL");

    r = keeper_spec_read(STDIN_FILENO, &k.spec, err, sizeof(err));
    if (r < 0) {
        emit_error("%s", err);
        return 1;
    }
    /* remote providers read their settings from the environment the worker handed over */
    r = provider_configure_all(env_get, err, sizeof(err));
    if (r < 0) {
        emit_error("%s", err);
        return 1;
    }
    log_ctx_set(NULL, k.spec.session_key, NULL, k.spec.harness);
    k.env_dir = k.spec.env_dir;
    k.socket_path = k.spec.socket;
    k.idle_ms = (int64_t)k.spec.idle_ms;
    attach_ms = (int64_t)k.spec.attach_timeout_ms;
    k.per_turn = k.spec.per_turn;
    r = util_unix_listen(k.socket_path, 0600, 4);
    if (r < 0) {
        emit_error("cannot listen on '%s': %s", k.socket_path, strerror(-r));
        keeper_teardown(&k);
        return 1;
    }
    k.listen_fd = r;

    /* detach from the starting worker: the master (child subreaper) adopts us */
    stages_keeper_before_fork();
    pid = fork();
    if (pid == -1) {
        emit_error("fork: %s", strerror(errno));
        keeper_teardown(&k);
        return 1;
    }
    if (pid > 0)
        _exit(0);
    stages_keeper_forked();
    setsid();
    util_redirect_null(STDIN_FILENO);

    r = setup_signals();
    if (r < 0) {
        emit_error("signals: %s", strerror(-r));
        keeper_teardown(&k);
        return 1;
    }
    k.sig_fd = r;
    r = attach_slot(&k);
    if (r < 0) {
        emit_error("cannot attach the session table: %s", strerror(-r));
        keeper_teardown(&k);
        return 1;
    }
    snprintf(logpath, sizeof(logpath), "%s/harness.log", k.env_dir);
    k.log_fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    acp_lines_init(&k.child_lines, ACP_LINE_MAX_DEFAULT);
    buf_init(&k.child_stdin, KEEPER_QUEUE_MAX);
    egress_report_init(&k.egress, k.pool);
    k.proc.on_egress = keeper_model_egress;
    k.proc.on_model = keeper_model_report;
    k.proc.ctx = &k;
    /* the harness's end of the channel: inherited into a local sandbox, relayed into a remote
     * one (keeper_channel.h); a held turn keeps the lines meant for its worker (keeper_turn.h) */
    r = k.spec.shell ? prepare_shell(&k, err, sizeof(err))
                     : keeper_start_sandbox(&k, err, sizeof(err));
    if (r < 0) {
        /* nothing is left once the worker reads the error (it removes nothing itself) */
        keeper_teardown(&k);
        emit_error("%s", err);
        acp_lines_release(&k.child_lines);
        buf_release(&k.child_stdin);
        pool_detach(k.pool);
        keeper_spec_release(&k.spec);
        return 1;
    }
    keeper_slot_set_pids(&k);
    write_ready(&k);
    util_redirect_null(STDOUT_FILENO);
    k.deadline = util_now_ms() + attach_ms;
    r = keeper_loop(&k);
    keeper_teardown(&k);
    keeper_model_release(&k.model);
    acp_lines_release(&k.child_lines);
    buf_release(&k.child_stdin);
    pool_detach(k.pool);
    keeper_spec_release(&k.spec);
    json_object_put(k.claimed);
    return r < 0 ? 1 : 0;
}
