/*
 * netns_helpers — see netns_helpers.h.
 */
#include "netns_helpers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

bool netns_test_possible(const char *test)
{
    struct sandbox_net n;
    char err[256] = "";
    struct sandbox_net_config cfg = {0};

    if (geteuid() != 0) {
        fprintf(stderr, "\n    %s: skipped (needs root for network namespaces)\n", test);
        return false;
    }
    if (sandbox_net_create(&cfg, &n, err, sizeof(err)) < 0) {
        fprintf(stderr, "\n    %s: skipped (%s)\n", test, err);
        return false;
    }
    sandbox_net_release(&n);
    return true;
}

static void *echo_main(void *arg)
{
    struct echo_server *s = arg;

    for (;;) {
        char buf[256];
        ssize_t n;
        int c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);

        if (c == -1) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL; /* shut down */
        }
        __atomic_add_fetch(&s->accepted, 1, __ATOMIC_SEQ_CST);
        n = read(c, buf, sizeof(buf));
        if (n > 0)
            (void)!write(c, buf, (size_t)n);
        close(c);
    }
}

int echo_server_start(struct echo_server *s, const char *addr)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int one = 1;
    pthread_t t;

    memset(s, 0, sizeof(*s));
    memset(&ss, 0, sizeof(ss));
    if (strchr(addr, ':')) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        in6->sin6_family = AF_INET6;
        inet_pton(AF_INET6, addr, &in6->sin6_addr);
        len = sizeof(*in6);
    } else {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        in->sin_family = AF_INET;
        inet_pton(AF_INET, addr, &in->sin_addr);
        len = sizeof(*in);
    }
    s->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->fd == -1)
        return -errno;
    setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s->fd, (struct sockaddr *)&ss, len) == -1 || listen(s->fd, 64) == -1)
        goto fail;
    len = sizeof(ss);
    if (getsockname(s->fd, (struct sockaddr *)&ss, &len) == -1)
        goto fail;
    s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (pthread_create(&t, NULL, echo_main, s) != 0) {
        errno = EAGAIN;
        goto fail;
    }
    s->thread = (unsigned long)t;
    return 0;
fail:
    close(s->fd);
    s->fd = -1;
    return -errno;
}

void echo_server_stop(struct echo_server *s)
{
    if (s->fd < 0)
        return;
    shutdown(s->fd, SHUT_RDWR);
    pthread_join((pthread_t)s->thread, NULL);
    close(s->fd);
    s->fd = -1;
}

pid_t probe_spawn(const struct sandbox_net *net, bool drop_privileges, probe_fn fn, void *arg,
                  int *ret_fd)
{
    int p[2];
    pid_t pid;

    if (pipe2(p, O_CLOEXEC) == -1)
        return -errno;
    pid = fork();
    if (pid == -1) {
        int r = -errno;
        close(p[0]);
        close(p[1]);
        return r;
    }
    if (pid == 0) {
        unsigned char b = PROBE_OTHER;

        close(p[0]);
        alarm(20);
        if (sandbox_net_enter(net) < 0)
            _exit(3);
        if (drop_privileges &&
            (setgroups(0, NULL) == -1 || setgid(65534) == -1 || setuid(65534) == -1))
            _exit(4);
        b = (unsigned char)fn(arg);
        (void)!write(p[1], &b, 1);
        _exit(0);
    }
    close(p[1]);
    *ret_fd = p[0];
    return pid;
}

int probe_tcp(const char *addr, uint16_t port)
{
    struct sockaddr_storage ss;
    struct timeval tv = {.tv_sec = 10};
    socklen_t len;
    char buf[8];
    ssize_t n;
    int fd;

    memset(&ss, 0, sizeof(ss));
    if (strchr(addr, ':')) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        inet_pton(AF_INET6, addr, &in6->sin6_addr);
        len = sizeof(*in6);
    } else {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        in->sin_family = AF_INET;
        in->sin_port = htons(port);
        inet_pton(AF_INET, addr, &in->sin_addr);
        len = sizeof(*in);
    }
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd == -1)
        return PROBE_OTHER;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&ss, len) == -1) {
        close(fd);
        return PROBE_REFUSED;
    }
    if (write(fd, "ping", 4) != 4) {
        close(fd);
        return PROBE_RESET;
    }
    n = read(fd, buf, sizeof(buf));
    close(fd);
    if (n == 4 && memcmp(buf, "ping", 4) == 0)
        return PROBE_ECHOED;
    return n <= 0 ? PROBE_RESET : PROBE_OTHER;
}
