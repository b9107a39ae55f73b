/*
 * bench-net: what a sandbox's own network adds to a cold start (`make bench` row 2).
 *
 * Times exactly what the keeper does for each new environment before it forks the sandbox:
 * sandbox_egress_new() — the run's egress policy from its JSON, the named endpoint, a new
 * network namespace with loopback, routes and the nf_tables batch, the proxy and DNS sockets,
 * the proxy and name server objects, the /etc/hosts and resolv.conf texts — then
 * sandbox_egress_free(). With the master's anchor namespace held (as agent-runnerd holds it)
 * and, for comparison, without it. Prints one JSON object on stdout. Needs root.
 *
 * usage: bench-net [--iters N]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/util.h"
#include "egress/sandbox_net.h"
#include "sandbox/egress.h"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

/* n runs of new + free: p50 and p99 wall time in microseconds; -errno on a failed setup. */
static int run(json_object *policy, int n, int64_t *ret_p50, int64_t *ret_p99, double *ret_cpu)
{
    int64_t *t = calloc((size_t)n, sizeof(*t));
    struct timespec c0, c1;
    char err[256];
    int r = 0;

    if (!t)
        return -ENOMEM;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    for (int i = 0; i < n; i++) {
        struct sandbox_egress *e = NULL;
        int64_t t0 = util_now_ns();

        r = sandbox_egress_new(policy, NULL, NULL, NULL, NULL, &e, err, sizeof(err));
        if (r < 0) {
            fprintf(stderr, "bench-net: %s\n", err);
            break;
        }
        sandbox_egress_free(e);
        t[i] = (util_now_ns() - t0) / 1000;
    }
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    if (r == 0) {
        qsort(t, (size_t)n, sizeof(*t), cmp_i64);
        *ret_p50 = t[n / 2];
        *ret_p99 = t[(n * 99) / 100];
        *ret_cpu =
            ((double)(c1.tv_sec - c0.tv_sec) * 1e6 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e3) / n;
    }
    free(t);
    return r;
}

int main(int argc, char **argv)
{
    /* what a run under "on" with a model endpoint on host loopback carries */
    static const char policy_text[] =
        "{\"mode\":\"on\",\"privateEgress\":false,\"allowlist\":[],"
        "\"endpoints\":[{\"host\":\"127.0.0.1\",\"port\":18080}],\"runnerPorts\":[443,8443]}";
    json_object *policy = json_tokener_parse(policy_text);
    int64_t a50 = 0, a99 = 0, n50 = 0, n99 = 0;
    double acpu = 0, ncpu = 0;
    uint64_t iters = 200;
    char err[256];
    int anchor, r;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc &&
            util_parse_u64(argv[i + 1], 10, 100000, &iters) == 0) {
            i++;
            continue;
        }
        fprintf(stderr, "usage: bench-net [--iters N]\n");
        return 2;
    }
    if (!policy || geteuid() != 0) {
        fprintf(stderr, "bench-net: needs root (network namespaces, nf_tables)\n");
        return 1;
    }
    /* without the anchor first: the kernel's netfilter hooks toggle with every setup */
    r = run(policy, (int)iters / 4 > 10 ? (int)iters / 4 : 10, &n50, &n99, &ncpu);
    anchor = r == 0 ? sandbox_net_anchor(err, sizeof(err)) : r;
    if (anchor < 0) {
        fprintf(stderr, "bench-net: %s\n", r < 0 ? strerror(-r) : err);
        return 1;
    }
    r = run(policy, (int)iters, &a50, &a99, &acpu);
    close(anchor);
    json_object_put(policy);
    if (r < 0)
        return 1;
    printf("{\"iters\":%llu,\"anchored\":{\"p50_us\":%lld,\"p99_us\":%lld,\"cpu_us\":%.0f},"
           "\"unanchored\":{\"p50_us\":%lld,\"p99_us\":%lld,\"cpu_us\":%.0f}}\n",
           (unsigned long long)iters, (long long)a50, (long long)a99, acpu, (long long)n50,
           (long long)n99, ncpu);
    return 0;
}
