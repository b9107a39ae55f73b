/*
 * agent-runner-mcp — the stdio MCP server "agenta-tools" inside the sandbox (claude, codex,
 * opencode). It lists the run's tools from $RUNNER_TOOLS_FILE and forwards every tools/call
 * to the runner over the keeper channel; the protocol work is in engine/tools/mcp_bridge.c,
 * this file only moves bytes.
 *
 * The keeper channel is no path and holds no secret: the keeper makes the connection and the
 * sandbox inherits it (keeper/keeper_channel.h). The harness that starts this server (claude,
 * codex, opencode) cannot pass it a descriptor of our choosing, so the sandbox's command is
 *
 *   agent-runner-mcp hold -- <the harness's command...>
 *       Takes the descriptor named by $RUNNER_CHANNEL_FD (close-on-exec from then on), leaves
 *       a holder process with it and a listening socket at HANDOFF_SOCK (folder 0700), then
 *       execs the harness without either: the harness and every tool it runs never have it.
 *   agent-runner-mcp            (the harness's mcpServers entry)
 *       Makes itself non-dumpable (other processes of the sandbox's uid cannot read or write
 *       its memory), connects to HANDOFF_SOCK once and receives the connection (SCM_RIGHTS);
 *       the holder removes the socket and exits, so the connection is handed over once: the
 *       first server the harness starts gets it, before the model has run any tool.
 *
 * No network, no credentials, nothing but libc and json-c. stdin/stdout carry MCP (one
 * JSON-RPC message per line); stderr gets a line when something is wrong. Exits 0 when stdin
 * closes (the harness is done), 1 when the tools file is missing or broken (the harness then
 * shows the server as failed: no silently empty tool list), 2 on a fatal internal error.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/util.h"
#include "proto/tool_channel.h"
#include "tools/mcp_bridge.h"

#define HARNESS_LINE_MAX (8u * 1024 * 1024)
#define READ_CHUNK 65536
#define HANDOFF_DIR "/tmp/.agent-runner-mcp"
#define HANDOFF_SOCK HANDOFF_DIR "/sock"

/* Control data for one descriptor, aligned for struct cmsghdr. */
union fd_cmsg {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
};

struct framer {
    struct buf line;
    bool skipping; /* inside a line that was too long: drop until its '\n' */
};

static int channel_fd = -1;
static bool handed_over; /* the holder's one connection was taken (or refused) already */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "agent-runner-mcp: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* Receive the keeper channel from the holder, once; -errno and err when it cannot. */
static int connect_channel(void *ctx, char *err, size_t errlen)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    union fd_cmsg cbuf;
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr m = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = cbuf.buf,
                       .msg_controllen = sizeof(cbuf.buf)};
    struct cmsghdr *c;
    ssize_t got;
    int fd, r = -EPROTO;

    (void)ctx;
    if (handed_over) {
        snprintf(err, errlen, "the keeper channel is gone (it is handed over once)");
        return -ENOTCONN;
    }
    handed_over = true;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", HANDOFF_SOCK);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        r = -errno;
        snprintf(err, errlen, "no keeper channel to take at %s: %s", HANDOFF_SOCK, strerror(-r));
        goto out;
    }
    do
        got = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    while (got < 0 && errno == EINTR);
    c = got == 1 ? CMSG_FIRSTHDR(&m) : NULL;
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
        c->cmsg_len != CMSG_LEN(sizeof(int))) {
        snprintf(err, errlen, "the keeper channel's holder handed over nothing");
        goto out;
    }
    memcpy(&channel_fd, CMSG_DATA(c), sizeof(int));
    r = 0;
out:
    if (fd >= 0)
        close(fd);
    return r;
}

static void close_channel(struct mcp_bridge *b, const char *why)
{
    if (channel_fd >= 0) {
        close(channel_fd);
        channel_fd = -1;
    }
    if (mcp_bridge_channel_down(b, why) < 0)
        exit(2);
}

/* Feed bytes to a framer; every complete line goes to fn. <0 only when fn fails. */
static int frame(struct framer *f, const char *data, size_t len, struct mcp_bridge *b,
                 int (*fn)(struct mcp_bridge *, const char *, size_t), bool harness)
{
    while (len > 0) {
        const char *nl = memchr(data, '\n', len);
        size_t n = nl ? (size_t)(nl - data) : len;
        int r;

        if (!f->skipping && buf_append(&f->line, data, n) < 0) {
            buf_reset(&f->line);
            f->skipping = true;
            if (harness && (r = mcp_bridge_line_too_long(b)) < 0)
                return r;
        }
        if (nl) {
            if (!f->skipping) {
                size_t l = f->line.len;

                if (l > 0 && f->line.data[l - 1] == '\r')
                    l--;
                r = fn(b, f->line.data ? f->line.data : "", l);
                if (r < 0)
                    return r;
            }
            buf_reset(&f->line);
            f->skipping = false;
            n++;
        }
        data += n;
        len -= n;
    }
    return 0;
}

/* Write what the bridge queued; a broken channel is closed (pending calls get errors). */
static void flush(struct mcp_bridge *b)
{
    if (b->to_runner.len && channel_fd >= 0) {
        if (util_write_all(channel_fd, b->to_runner.data, b->to_runner.len) < 0)
            close_channel(b, "writing to the channel failed");
        buf_reset(&b->to_runner);
    }
    if (channel_fd >= 0 && !b->channel_up)
        close_channel(b, b->channel_error); /* the runner refused our hello */
    if (b->to_harness.len) {
        if (util_write_all(STDOUT_FILENO, b->to_harness.data, b->to_harness.len) < 0)
            exit(0); /* the harness is gone */
        buf_reset(&b->to_harness);
    }
}

static int load_tools(struct mcp_bridge *b)
{
    const char *path = getenv("RUNNER_TOOLS_FILE");
    char err[512], *data = NULL;
    size_t len = 0;
    int r;

    if (!path || !*path) {
        say("RUNNER_TOOLS_FILE is not set");
        return -ENOENT;
    }
    r = util_read_file(path, MCP_BRIDGE_TOOLS_FILE_MAX, &data, &len);
    if (r < 0) {
        say("cannot read the tools file \"%s\": %s", path, strerror(-r));
        return r;
    }
    r = mcp_bridge_init(b, data, len, err, sizeof(err));
    free(data);
    if (r < 0)
        say("the tools file \"%s\" is invalid: %s", path, err);
    return r;
}

/* The holder: hand the channel to the first connection, then go. */
static void hold(int lfd, int chan)
{
    union fd_cmsg cbuf;
    char byte = 'c';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr m = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = cbuf.buf,
                       .msg_controllen = sizeof(cbuf.buf)};
    struct cmsghdr *c;
    int conn, null = open("/dev/null", O_RDWR | O_CLOEXEC);

    /* the sandbox's stdio is the harness's: holding it would hide the harness's exit */
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    do
        conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    while (conn < 0 && errno == EINTR);
    unlink(HANDOFF_SOCK);
    close(lfd);
    if (conn < 0)
        _exit(1);
    memset(&cbuf, 0, sizeof(cbuf));
    c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &chan, sizeof(int));
    _exit(sendmsg(conn, &m, MSG_NOSIGNAL) == 1 ? 0 : 1);
}

static int handoff_listen(void)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int fd;

    if (mkdir(HANDOFF_DIR, 0700) < 0)
        return -errno;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", HANDOFF_SOCK);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || chmod(HANDOFF_SOCK, 0600) < 0 ||
        listen(fd, 1) < 0) {
        int r = -errno;

        close(fd);
        return r;
    }
    return fd;
}

/* The inherited keeper channel ($RUNNER_CHANNEL_FD, removed from the environment), or -1. */
static int take_channel(void)
{
    const char *v = getenv("RUNNER_CHANNEL_FD");
    uint64_t n;
    struct stat st;
    int fd = -1;

    if (v && util_parse_u64(v, 3, 1024, &n) == 0 && fstat((int)n, &st) == 0 &&
        S_ISSOCK(st.st_mode) && fcntl((int)n, F_SETFD, FD_CLOEXEC) == 0)
        fd = (int)n;
    else if (v)
        say("RUNNER_CHANNEL_FD=%s is no socket", v);
    (void)unsetenv("RUNNER_CHANNEL_FD");
    return fd;
}

/*
 * hold -- <command...>: leave a holder (a grandchild, so that the sandbox's init reaps it, not
 * the harness) with the channel, then exec the command without it.
 */
static int hold_main(int argc, char **argv)
{
    int chan, lfd = -1;
    pid_t pid;

    if (argc < 2 || strcmp(argv[0], "--") != 0) {
        say("usage: agent-runner-mcp hold -- COMMAND...");
        return 2;
    }
    chan = take_channel();
    if (chan >= 0)
        lfd = handoff_listen();
    if (chan >= 0 && lfd < 0)
        say("cannot listen on %s: %s", HANDOFF_SOCK, strerror(-lfd));
    if (lfd >= 0) {
        pid = fork();
        if (pid == 0) {
            if (fork() == 0)
                hold(lfd, chan);
            _exit(0);
        }
        while (pid > 0 && waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        close(lfd);
    }
    if (chan >= 0)
        close(chan);
    execv(argv[1], argv + 1);
    say("cannot run %s: %s", argv[1], strerror(errno));
    return 127;
}

int main(int argc, char **argv)
{
    struct framer in = {0}, chan = {0};
    struct mcp_bridge b;
    char chunk[READ_CHUNK], err[256];

    if (argc >= 2 && strcmp(argv[1], "hold") == 0)
        return hold_main(argc - 2, argv + 2);
    /* first: the connection below must not be reachable through /proc by tool code (its memory:
     * no Yama on a host lets the same uid write a dumpable process's /proc/<pid>/mem) */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
        say("prctl(PR_SET_DUMPABLE): %s", strerror(errno));
        return 2;
    }
    (void)unsetenv("RUNNER_CHANNEL_FD");
    signal(SIGPIPE, SIG_IGN);
    if (load_tools(&b) < 0) {
        mcp_bridge_release(&b);
        return 1;
    }
    buf_init(&in.line, HARNESS_LINE_MAX);
    buf_init(&chan.line, TOOL_CHANNEL_LINE_MAX);
    b.reconnect = connect_channel;
    if (connect_channel(NULL, err, sizeof(err)) == 0) {
        if (mcp_bridge_channel_up(&b) < 0)
            return 2;
    } else {
        /* keep serving the tool list; a call will try again and say why it cannot run */
        say("%s", err);
        snprintf(b.channel_error, sizeof(b.channel_error), "%s", err);
    }
    for (;;) {
        struct pollfd p[2] = {{.fd = STDIN_FILENO, .events = POLLIN},
                              {.fd = channel_fd, .events = POLLIN}};
        ssize_t n;

        flush(&b);
        if (poll(p, channel_fd >= 0 ? 2 : 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 2;
        }
        if (p[0].revents) {
            n = read(STDIN_FILENO, chunk, sizeof(chunk));
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (n <= 0)
                break;
            if (frame(&in, chunk, (size_t)n, &b, mcp_bridge_on_harness_line, true) < 0)
                return 2;
        }
        if (channel_fd >= 0 && p[1].revents) {
            n = read(channel_fd, chunk, sizeof(chunk));
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (n <= 0) {
                close_channel(&b, "the runner closed the channel");
                buf_reset(&chan.line);
                chan.skipping = false;
                continue;
            }
            if (frame(&chan, chunk, (size_t)n, &b, mcp_bridge_on_runner_line, false) < 0)
                return 2;
        }
    }
    flush(&b);
    if (channel_fd >= 0)
        close(channel_fd);
    buf_release(&in.line);
    buf_release(&chan.line);
    mcp_bridge_release(&b);
    return 0;
}
