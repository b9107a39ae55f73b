/*
 * netns_helpers — what the sandbox_net, egress_proxy and egress_dns suites share: whether
 * this process may create network namespaces (root), TCP echo servers on host addresses, and
 * a child process that runs a probe inside a sandbox namespace and reports one result byte.
 */
#ifndef AR_TEST_NETNS_HELPERS_H
#define AR_TEST_NETNS_HELPERS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "egress/sandbox_net.h"

/* True when a sandbox namespace can be made here; else prints why the test is skipped. */
bool netns_test_possible(const char *test);

/* An echo server on addr (a literal) and a kernel-chosen port, served by a thread. */
struct echo_server {
    int fd;
    uint16_t port;
    unsigned long thread;
    unsigned accepted;
};

int echo_server_start(struct echo_server *s, const char *addr);
void echo_server_stop(struct echo_server *s);

/* Probe results (one byte each). */
enum probe_result {
    PROBE_ECHOED = 'E',  /* connected, sent "ping", read "ping" back */
    PROBE_REFUSED = 'R', /* connect() failed */
    PROBE_RESET = 'X',   /* connected, then reset / closed without an answer */
    PROBE_OTHER = '?',
};

/*
 * Fork a child that enters net's namespace (optionally dropping to uid/gid 65534) and runs
 * fn; fn's return value is written to a pipe whose read end is returned in *ret_fd.
 */
typedef int (*probe_fn)(void *arg);
pid_t probe_spawn(const struct sandbox_net *net, bool drop_privileges, probe_fn fn, void *arg,
                  int *ret_fd);
/* Connect to addr:port from the current namespace, send "ping", expect "ping" back. */
int probe_tcp(const char *addr, uint16_t port);

#endif
