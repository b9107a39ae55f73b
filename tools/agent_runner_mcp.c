/*
 * agent-runner-mcp — the stdio MCP server "agenta-tools" inside the sandbox (claude, codex,
 * opencode). It lists the run's tools from $RUNNER_TOOLS_FILE and forwards every tools/call
 * to the runner over the keeper channel at $RUNNER_CHANNEL; the protocol work is in
 * engine/tools/mcp_bridge.c, this file only moves bytes.
 *
 * The keeper channel takes nothing before a hello with the environment's secret: it comes in
 * $RUNNER_CHANNEL_TOKEN (the harness's mcpServers entry), which is read and removed from the
 * environment at start, after the process made itself non-dumpable so that other processes of
 * the sandbox's uid (tool code) cannot read its /proc/<pid>/environ, memory or fds.
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
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/util.h"
#include "proto/tool_channel.h"
#include "tools/mcp_bridge.h"

#define HARNESS_LINE_MAX (8u * 1024 * 1024)
#define READ_CHUNK 65536

struct framer {
    struct buf line;
    bool skipping; /* inside a line that was too long: drop until its '\n' */
};

static int channel_fd = -1;
static const char *channel_path;

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

static int connect_channel(void *ctx, char *err, size_t errlen)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int fd;

    (void)ctx;
    if (!channel_path || !*channel_path) {
        snprintf(err, errlen, "RUNNER_CHANNEL is not set");
        return -ENOENT;
    }
    if (strlen(channel_path) >= sizeof(a.sun_path)) {
        snprintf(err, errlen, "RUNNER_CHANNEL path is too long");
        return -ENAMETOOLONG;
    }
    memcpy(a.sun_path, channel_path, strlen(channel_path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        int e = errno;

        snprintf(err, errlen, "cannot connect to the channel: %s", strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    channel_fd = fd;
    return 0;
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

/* The channel secret from $RUNNER_CHANNEL_TOKEN, removed from the environment ("" when unset). */
static void take_token(char *out, size_t outlen)
{
    const char *t = getenv("RUNNER_CHANNEL_TOKEN");

    out[0] = '\0';
    if (t && strlen(t) < outlen)
        memcpy(out, t, strlen(t) + 1);
    else if (t)
        say("RUNNER_CHANNEL_TOKEN is too long: the channel will refuse the hello");
    (void)unsetenv("RUNNER_CHANNEL_TOKEN");
}

int main(void)
{
    struct framer in = {0}, chan = {0};
    struct mcp_bridge b;
    char chunk[READ_CHUNK], err[256], token[TOOL_CHANNEL_TOKEN_MAX + 1];

    /* first: the secret below must not be readable through /proc by tool code */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
        say("prctl(PR_SET_DUMPABLE): %s", strerror(errno));
        return 2;
    }
    take_token(token, sizeof(token));
    signal(SIGPIPE, SIG_IGN);
    if (load_tools(&b) < 0) {
        mcp_bridge_release(&b);
        return 1;
    }
    memcpy(b.token, token, sizeof(b.token));
    buf_init(&in.line, HARNESS_LINE_MAX);
    buf_init(&chan.line, TOOL_CHANNEL_LINE_MAX);
    channel_path = getenv("RUNNER_CHANNEL");
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
