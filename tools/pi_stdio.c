/*
 * agent-runner-pi-stdio — pi started before pi-acp asks for it, and handed to pi-acp's "pi"
 * over a socket (engine/harness/pi.c; README "The cold pi start"). Runs inside the sandbox.
 *
 *   agent-runner-pi-stdio start cold|spare -- <pi argv...> -- <pi-acp argv...>
 *       The sandbox command. Starts pi at once with its stdin+stdout on one socket pair and its
 *       stderr on another (sockets, never pipes or FIFOs: nothing in the sandbox can reopen a
 *       socket through /proc/<pid>/fd or a path). spare: waits for pi's answer to a get_state
 *       first (a spare is ready only once pi is). Leaves a holder process with pi's ends and a
 *       listening socket at PI_STDIO_SOCK, then execs pi-acp, so pi's start runs alongside
 *       pi-acp's start, initialize and session/new instead of after them. The keeper
 *       channel the sandbox inherited ($RUNNER_CHANNEL_FD, keeper/keeper_channel.h) goes to pi
 *       alone, as its descriptor 3 (pi's extension takes it; Node marks it close-on-exec, so
 *       pi's tools never have it); pi-acp and the holder never do.
 *   agent-runner-pi-stdio [anything else]  (PI_ACP_PI_COMMAND: pi-acp starting "pi")
 *       Attach: connect once, receive pi's ends and the mode (SCM_RIGHTS); the holder then
 *       removes the socket and exits, so nothing else can ever attach. A spare's pi is told
 *       `new_session` (it re-reads the configuration the runner wrote at the claim) and its
 *       answer awaited. Then relay: our stdin -> pi, pi -> our stdout, pi's stderr -> ours.
 *       With `--session <file>` (pi-acp's session/load), pi is told `switch_session` to that
 *       file (a session file the runner restored into the home) and its answer awaited first.
 *       When pi is gone, pi-acp (our parent) is stopped: pi-acp 0.0.24 fails only pending
 *       commands when its pi exits and would wait forever for the end of the prompt; the
 *       runner sees the harness exit and ends the turn. When pi-acp closes our stdin, pi's
 *       input is closed too and pi ends as if pi-acp had started it.
 *
 * The listening socket exists only between the sandbox's start and the attach: before the
 * first session/new (cold) or the claim (spare), when no agent code has run in the sandbox.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PI_STDIO_DIR "/tmp/.pi"
#define PI_STDIO_SOCK PI_STDIO_DIR "/sock"
#define READY_ID "runner-spare-ready"
#define CLAIM_ID "runner-spare-claim"
#define LOAD_ID "runner-load"
#define LOAD_TIMEOUT_MS 60000
#define READY_TIMEOUT_MS 120000
#define CLAIM_TIMEOUT_MS 20000
#define LINE_MAX_BYTES (1 << 20)
#define RELAY_BUF 65536
#define PI_CHANNEL_FD 3 /* the keeper channel in pi: low, so Node marks it close-on-exec */
#define PI_CHANNEL_FD_TEXT "3"

/* Control data for two descriptors, aligned for struct cmsghdr. */
union fd_cmsg {
    char buf[CMSG_SPACE(2 * sizeof(int))];
    struct cmsghdr align;
};

static void die(const char *what, int err)
{
    fprintf(stderr, "pi-stdio: %s: %s\n", what, strerror(err));
    exit(1);
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/*
 * Wait for pi's answer to the command with id `id` on fd, reading one byte at a time so that
 * nothing after that line is taken from what the relay passes on. Lines before it (there
 * should be none) are dropped. 0 on `"success":true`, -EPROTO on a failed answer, -ETIMEDOUT,
 * or -EPIPE when pi is gone.
 */
static int await_answer(int fd, const char *id, int timeout_ms)
{
    char want[64], *line = malloc(LINE_MAX_BYTES);
    int64_t deadline = now_ms() + timeout_ms;
    size_t n = 0;
    int r = -ETIMEDOUT;

    if (!line)
        return -ENOMEM;
    snprintf(want, sizeof(want), "\"id\":\"%s\"", id);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int64_t left = deadline - now_ms();
        ssize_t got;
        char c;

        if (left <= 0)
            break;
        if (poll(&p, 1, (int)left) <= 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        got = read(fd, &c, 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            r = -EPIPE;
            break;
        }
        if (c != '\n') {
            if (n < LINE_MAX_BYTES - 1)
                line[n++] = c;
            continue;
        }
        line[n] = '\0';
        n = 0;
        if (strstr(line, want)) {
            r = strstr(line, "\"success\":true") ? 0 : -EPROTO;
            break;
        }
    }
    free(line);
    return r;
}

static int send_command(int fd, const char *type, const char *id)
{
    char cmd[128];
    int n = snprintf(cmd, sizeof(cmd), "{\"type\":\"%s\",\"id\":\"%s\"}\n", type, id);

    return write_all(fd, cmd, (size_t)n);
}

/* pi's switch_session to path: the path as a JSON string (it is pi-acp's, from our argv). */
static int send_switch(int fd, const char *path)
{
    size_t cap = strlen(path) * 6 + 128, n;
    char *cmd = malloc(cap);
    int r;

    if (!cmd)
        return -ENOMEM;
    n = (size_t)snprintf(cmd, cap,
                         "{\"type\":\"switch_session\",\"id\":\"" LOAD_ID "\",\"sessionPath\":\"");
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (*p == '"' || *p == '\\')
            n += (size_t)snprintf(cmd + n, cap - n, "\\%c", *p);
        else if (*p < 0x20)
            n += (size_t)snprintf(cmd + n, cap - n, "\\u%04x", *p);
        else
            cmd[n++] = (char)*p;
    }
    n += (size_t)snprintf(cmd + n, cap - n, "\"}\n");
    r = write_all(fd, cmd, n);
    free(cmd);
    return r;
}

/* pi-acp's `pi --mode rpc ... --session <file>`: the file, or NULL. */
static const char *session_arg(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--session") == 0)
            return argv[i + 1];
    return NULL;
}

static int listen_socket(void)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int fd;

    if (mkdir(PI_STDIO_DIR, 0700) < 0)
        return -errno;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", PI_STDIO_SOCK);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || chmod(PI_STDIO_SOCK, 0600) < 0 ||
        listen(fd, 1) < 0) {
        int r = -errno;
        close(fd);
        return r;
    }
    return fd;
}

/* The holder: hand pi's ends and the mode to the first (and only) connection, then go. */
static void hold(int lfd, int io, int er, char mode)
{
    union fd_cmsg cbuf;
    struct iovec iov = {.iov_base = &mode, .iov_len = 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf,
                       .msg_controllen = sizeof(cbuf.buf)};
    struct cmsghdr *c;
    int conn, null = open("/dev/null", O_RDWR);

    /* the sandbox's stdio is pi-acp's: holding it would hide pi-acp's exit from the keeper */
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        if (null > 2)
            close(null);
    }
    do
        conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    while (conn < 0 && errno == EINTR);
    unlink(PI_STDIO_SOCK);
    close(lfd);
    if (conn < 0)
        _exit(1);
    memset(&cbuf, 0, sizeof(cbuf));
    c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(2 * sizeof(int));
    memcpy(CMSG_DATA(c), (int[]){io, er}, 2 * sizeof(int));
    _exit(sendmsg(conn, &m, MSG_NOSIGNAL) == 1 ? 0 : 1);
}

/* The inherited keeper channel ($RUNNER_CHANNEL_FD, removed from the environment), or -1. */
static int take_channel(void)
{
    const char *v = getenv("RUNNER_CHANNEL_FD");
    struct stat st;
    int fd = 0;

    for (const char *p = v; p && *p && fd < 4096; p++)
        fd = *p >= '0' && *p <= '9' ? fd * 10 + (*p - '0') : 4096;
    unsetenv("RUNNER_CHANNEL_FD");
    if (!v || fd < 3 || fd >= 4096 || fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode) ||
        fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        return -1;
    return fd;
}

/* In pi's child: the channel at descriptor 3, open across exec, named in pi's environment. */
static void give_channel(int chan)
{
    if (chan < 0)
        return;
    if (chan == PI_CHANNEL_FD ? fcntl(chan, F_SETFD, 0) < 0 : dup2(chan, PI_CHANNEL_FD) < 0)
        _exit(127);
    setenv("RUNNER_CHANNEL_FD", PI_CHANNEL_FD_TEXT, 1);
}

/* argv: cold|spare -- <pi argv...> -- <pi-acp argv...> */
static int start(int argc, char **argv)
{
    char **pi, **acp;
    int io[2], er[2], lfd, i, chan;
    bool spare;
    pid_t pid;

    if (argc < 5 || (strcmp(argv[0], "cold") != 0 && strcmp(argv[0], "spare") != 0) ||
        strcmp(argv[1], "--") != 0) {
        fprintf(stderr, "usage: agent-runner-pi-stdio start cold|spare -- PI... -- ACP...\n");
        return 2;
    }
    spare = strcmp(argv[0], "spare") == 0;
    pi = argv + 2;
    for (i = 2; i < argc && strcmp(argv[i], "--") != 0; i++)
        ;
    if (i >= argc - 1 || i == 2) {
        fprintf(stderr, "pi-stdio: start needs both a pi and a pi-acp command\n");
        return 2;
    }
    argv[i] = NULL;
    acp = argv + i + 1;
    chan = take_channel();
    lfd = listen_socket();
    if (lfd < 0)
        die("listening socket " PI_STDIO_SOCK, -lfd);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, io) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, er) < 0)
        die("socketpair", errno);
    pid = fork();
    if (pid < 0)
        die("fork", errno);
    if (pid == 0) {
        /* pi: dup2 clears close-on-exec on 0, 1, 2; everything else closes at exec */
        if (dup2(io[1], 0) < 0 || dup2(io[1], 1) < 0 || dup2(er[1], 2) < 0)
            _exit(127);
        give_channel(chan);
        execv(pi[0], pi);
        _exit(127);
    }
    close(io[1]);
    close(er[1]);
    if (chan >= 0)
        close(chan);
    if (spare) {
        int r = send_command(io[0], "get_state", READY_ID);

        if (r == 0)
            r = await_answer(io[0], READY_ID, READY_TIMEOUT_MS);
        if (r < 0)
            die("the spare's pi did not answer", -r);
    }
    pid = fork();
    if (pid < 0)
        die("fork", errno);
    if (pid == 0)
        hold(lfd, io[0], er[0], spare ? 's' : 'c');
    close(lfd);
    close(io[0]);
    close(er[0]);
    execv(acp[0], acp);
    die(acp[0], errno);
    return 1;
}

/* Connect and receive pi's two ends and the mode; -errno. */
static int attach_fds(int *io, int *er, char *mode)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    union fd_cmsg cbuf;
    struct iovec iov = {.iov_base = mode, .iov_len = 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf,
                       .msg_controllen = sizeof(cbuf.buf)};
    struct cmsghdr *c;
    int fd, r = -EPROTO, fds[2];
    ssize_t got;

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", PI_STDIO_SOCK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        r = -errno;
        goto out;
    }
    do
        got = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    while (got < 0 && errno == EINTR);
    c = got == 1 ? CMSG_FIRSTHDR(&m) : NULL;
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(2 * sizeof(int))) {
        memcpy(fds, CMSG_DATA(c), sizeof(fds));
        *io = fds[0];
        *er = fds[1];
        r = 0;
    }
out:
    close(fd);
    return r;
}

enum { PUMP_OK = 1, PUMP_EOF = 0, PUMP_READ_ERR = -1, PUMP_WRITE_ERR = -2 };

/* Copy what is readable on from to to. */
static int pump(int from, int to, char *buf)
{
    ssize_t n = read(from, buf, RELAY_BUF);

    if (n < 0)
        return errno == EINTR || errno == EAGAIN ? PUMP_OK : PUMP_READ_ERR;
    if (n == 0)
        return PUMP_EOF;
    return write_all(to, buf, (size_t)n) < 0 ? PUMP_WRITE_ERR : PUMP_OK;
}

static int attach(const char *session)
{
    struct pollfd p[3];
    char mode = 0, *buf = malloc(RELAY_BUF);
    bool input_open = true, err_open = true, acp_closed = false;
    pid_t acp = getppid();
    int io = -1, er = -1, r;

    if (!buf)
        die("relay buffer", ENOMEM);
    r = attach_fds(&io, &er, &mode);
    if (r < 0) {
        fprintf(stderr, "pi-stdio: pi is not running (%s)\n", strerror(-r));
        return 1;
    }
    if (mode == 's') {
        r = send_command(io, "new_session", CLAIM_ID);
        if (r == 0)
            r = await_answer(io, CLAIM_ID, CLAIM_TIMEOUT_MS);
        if (r < 0) {
            fprintf(stderr, "spare: pi did not take the session's configuration (%s)\n",
                    strerror(-r));
            return 1;
        }
    }
    if (session) {
        r = send_switch(io, session);
        if (r == 0)
            r = await_answer(io, LOAD_ID, LOAD_TIMEOUT_MS);
        if (r < 0) {
            fprintf(stderr, "pi did not load the session (%s)\n", strerror(-r));
            return 1;
        }
    }
    for (;;) {
        p[0] = (struct pollfd){.fd = input_open ? 0 : -1, .events = POLLIN};
        p[1] = (struct pollfd){.fd = io, .events = POLLIN};
        p[2] = (struct pollfd){.fd = err_open ? er : -1, .events = POLLIN};
        if (poll(p, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[2].revents && pump(er, 2, buf) != PUMP_OK)
            err_open = false;
        if (p[0].revents) {
            r = pump(0, io, buf);
            if (r == PUMP_WRITE_ERR)
                break; /* pi is gone */
            if (r != PUMP_OK) {
                /* pi-acp let go of its pi: pi's input ends, and pi with it */
                input_open = false;
                acp_closed = true;
                shutdown(io, SHUT_WR);
            }
        }
        if (p[1].revents && pump(io, 1, buf) != PUMP_OK)
            break;
    }
    /* what pi wrote to stderr before it went (never wait for more: pi may be alive) */
    if (err_open && fcntl(er, F_SETFL, O_NONBLOCK) == 0) {
        ssize_t n;
        while ((n = read(er, buf, RELAY_BUF)) > 0)
            (void)write_all(2, buf, (size_t)n);
    }
    if (acp_closed)
        return 0;
    fprintf(stderr, "pi exited\n");
    if (getppid() == acp) /* not whoever adopted us after pi-acp went */
        kill(acp, SIGTERM);
    return 1;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 2 && strcmp(argv[1], "start") == 0)
        return start(argc - 2, argv + 2);
    return attach(session_arg(argc, argv));
}
