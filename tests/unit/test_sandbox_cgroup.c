/*
 * sandbox_cgroup: the layout on v1, hybrid and v2 hosts (from fixture texts), and on this
 * machine for real: limits written, a fork bomb and a memory hog trip the named limit, the
 * whole group is killed, removed, and the start-up sweep keeps only what it is told to.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "sandbox/cgroup.h"
#include "sandbox/cgroup_host.h"
#include "suites.h"

static const char hybrid_mounts[] =
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
    "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
static const char hybrid_self[] = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n"
                                  "2:cpuacct:/\n1:cpu:/\n0::/\n";

static const struct sandbox_cgroup_hier *find_hier(const struct sandbox_cgroup_host *h,
                                                   unsigned ctrl, bool v2)
{
    for (size_t i = 0; i < h->n; i++)
        if (h->h[i].v2 == v2 && (v2 || (h->h[i].ctrl & ctrl)))
            return &h->h[i];
    return NULL;
}

static void test_sandbox_cgroup_layout_hybrid(void)
{
    struct sandbox_cgroup_host h;
    const struct sandbox_cgroup_hier *x;
    char err[256] = "";

    CU_ASSERT_EQUAL_FATAL(
        sandbox_cgroup_layout(hybrid_mounts, hybrid_self, "inst", &h, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(h.n, 4);
    x = find_hier(&h, SANDBOX_CG_MEMORY, false);
    CU_ASSERT_FATAL(x != NULL);
    CU_ASSERT_STRING_EQUAL(x->dir, "/sys/fs/cgroup/memory/process_api/abc/agent-runner/inst");
    CU_ASSERT_EQUAL(x->ctrl, SANDBOX_CG_MEMORY);
    x = find_hier(&h, SANDBOX_CG_PIDS, false);
    CU_ASSERT_FATAL(x != NULL);
    CU_ASSERT_STRING_EQUAL(x->dir, "/sys/fs/cgroup/pids/agent-runner/inst");
    x = find_hier(&h, SANDBOX_CG_CPU, false);
    CU_ASSERT_FATAL(x != NULL);
    CU_ASSERT_STRING_EQUAL(x->dir, "/sys/fs/cgroup/cpu/agent-runner/inst");
    x = find_hier(&h, 0, true);
    CU_ASSERT_FATAL(x != NULL);
    CU_ASSERT_STRING_EQUAL(x->dir, "/sys/fs/cgroup/unified/agent-runner/inst");
}

static void test_sandbox_cgroup_layout_v2_delegated(void)
{
    static const char mounts[] = "25 20 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 "
                                 "rw,nsdelegate,memory_recursiveprot\n";
    struct sandbox_cgroup_host h;
    char err[256] = "";

    CU_ASSERT_EQUAL_FATAL(sandbox_cgroup_layout(mounts, "0::/system.slice/agent-runner.service\n",
                                                "default", &h, err, sizeof(err)),
                          0);
    CU_ASSERT_EQUAL_FATAL(h.n, 1);
    CU_ASSERT(h.h[0].v2);
    CU_ASSERT_STRING_EQUAL(h.h[0].dir,
                           "/sys/fs/cgroup/system.slice/agent-runner.service/agent-runner/default");
    /* a master the probe moved into <own>/supervisor keeps the same layout */
    CU_ASSERT_EQUAL_FATAL(
        sandbox_cgroup_layout(mounts, "0::/system.slice/agent-runner.service/supervisor\n",
                              "default", &h, err, sizeof(err)),
        0);
    CU_ASSERT_STRING_EQUAL(h.h[0].dir,
                           "/sys/fs/cgroup/system.slice/agent-runner.service/agent-runner/default");
}

static void test_sandbox_cgroup_layout_v1_comounted_and_bind_root(void)
{
    /* cpu,cpuacct together; memory mounted from a sub-tree (a container's view) */
    static const char mounts[] =
        "31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "34 30 0:31 /ctr /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "35 30 0:31 /ctr /mnt/again rw - cgroup cgroup rw,memory\n"
        "36 30 0:40 / /sys/fs/cgroup/pids\\040x rw - cgroup cgroup rw,pids\n";
    static const char self[] = "5:pids:/p\n4:memory:/ctr/inner\n1:cpu,cpuacct:/c\n";
    const struct sandbox_cgroup_hier *x;
    struct sandbox_cgroup_host h;
    char err[256] = "";

    CU_ASSERT_EQUAL_FATAL(sandbox_cgroup_layout(mounts, self, "i", &h, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(h.n, 3); /* the second memory mount is the same hierarchy */
    x = find_hier(&h, SANDBOX_CG_CPU, false);
    CU_ASSERT_FATAL(x != NULL);
    CU_ASSERT_STRING_EQUAL(x->dir, "/sys/fs/cgroup/cpu,cpuacct/c/agent-runner/i");
    x = find_hier(&h, SANDBOX_CG_MEMORY, false);
    CU_ASSERT_FATAL(x != NULL);
    CU_ASSERT_STRING_EQUAL(x->dir, "/sys/fs/cgroup/memory/inner/agent-runner/i");
    x = find_hier(&h, SANDBOX_CG_PIDS, false);
    CU_ASSERT_FATAL(x != NULL);
    CU_ASSERT_STRING_EQUAL(x->dir, "/sys/fs/cgroup/pids x/p/agent-runner/i");
    CU_ASSERT_EQUAL(sandbox_cgroup_layout(mounts, self, "../x", &h, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a plain name"));
    /* no cgroup file system at all: nothing, and no error */
    CU_ASSERT_EQUAL(sandbox_cgroup_layout("1 0 8:1 / / rw - ext4 /dev/sda rw\n", "0::/\n", "i", &h,
                                          err, sizeof(err)),
                    0);
    CU_ASSERT_EQUAL(h.n, 0);
}

static void test_sandbox_cgroup_parsers(void)
{
    uint64_t v = 0;
    char buf[64];

    CU_ASSERT_EQUAL(
        sandbox_cgroup_parse_key("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\n", "oom_kill", &v), 0);
    CU_ASSERT_EQUAL(v, 2);
    CU_ASSERT_EQUAL(sandbox_cgroup_parse_key("low 0\nhigh 0\nmax 12\noom 3\n", "max", &v), 0);
    CU_ASSERT_EQUAL(v, 12);
    CU_ASSERT_EQUAL(
        sandbox_cgroup_parse_key("oom_kill_disable 0\nunder_oom 0\noom_kill 5", "oom_kill", &v), 0);
    CU_ASSERT_EQUAL(v, 5);
    CU_ASSERT_EQUAL(sandbox_cgroup_parse_key("max 1\n", "oom_kill", &v), -ENOENT);
    CU_ASSERT_EQUAL(sandbox_cgroup_parse_key("max x\n", "max", &v), -EINVAL);
    sandbox_cgroup_cpu_max(1000, buf, sizeof(buf));
    CU_ASSERT_STRING_EQUAL(buf, "100000 100000");
    sandbox_cgroup_cpu_max(1500, buf, sizeof(buf));
    CU_ASSERT_STRING_EQUAL(buf, "150000 100000");
    sandbox_cgroup_cpu_max(1, buf, sizeof(buf));
    CU_ASSERT_STRING_EQUAL(buf, "1000 100000");
    sandbox_cgroup_cpu_max(0, buf, sizeof(buf));
    CU_ASSERT_STRING_EQUAL(buf, "max 100000");
    CU_ASSERT_STRING_EQUAL(sandbox_cgroup_trip_code(SANDBOX_TRIP_MEMORY), "sandbox_memory_limit");
    CU_ASSERT_STRING_EQUAL(sandbox_cgroup_trip_code(SANDBOX_TRIP_PIDS), "sandbox_pids_limit");
    CU_ASSERT_PTR_NULL(sandbox_cgroup_trip_code(SANDBOX_TRIP_NONE));
}

/* --- on this machine --------------------------------------------------------------------- */

static char instance[32];
static struct sandbox_cgroup_host host;
static bool host_ok;

static bool probe(void)
{
    char err[256] = "";

    if (host_ok)
        return true;
    if (geteuid() != 0) {
        printf("\n    skipped: creating cgroups needs root here\n");
        return false;
    }
    snprintf(instance, sizeof(instance), "unit-%d", (int)getpid());
    CU_ASSERT_EQUAL_FATAL(sandbox_cgroup_probe(instance, &host, err, sizeof(err)), 0);
    printf("\n    enforced here:%s%s%s%s%s%s%s\n", host.can & SANDBOX_CG_PIDS ? " pids" : "",
           host.can & SANDBOX_CG_MEMORY ? " memory" : "",
           host.can & SANDBOX_CG_SWAP ? " no-swap" : "", host.can & SANDBOX_CG_CPU ? " cpu" : "",
           host.can & SANDBOX_CG_KILL ? " cgroup.kill" : "", host.missing[0] ? "; missing: " : "",
           host.missing);
    host_ok = true;
    return true;
}

static bool exists(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0;
}

/* Start a child in cg that runs fn; returns its pid (the caller waits). */
static pid_t spawn_in(const struct sandbox_cgroup *cg, void (*fn)(void))
{
    pid_t pid = fork();

    if (pid == 0) {
        if (sandbox_cgroup_enter(cg) < 0)
            _exit(99);
        fn();
        _exit(0);
    }
    return pid;
}

static void fork_bomb(void)
{
    for (int i = 0; i < 40; i++) {
        pid_t c = fork();
        if (c == 0) {
            pause();
            _exit(0);
        }
        if (c < 0)
            _exit(3); /* refused by pids.max */
    }
    _exit(0);
}

static void memory_hog(void)
{
    size_t chunk = 8u << 20;

    for (int i = 0; i < 64; i++) { /* 512 MiB against a 32 MiB limit */
        char *p = mmap(NULL, chunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            _exit(4);
        memset(p, 1, chunk);
    }
    _exit(0);
}

static void sleeper(void)
{
    for (int i = 0; i < 5; i++)
        if (fork() == 0)
            break;
    pause();
}

static void test_sandbox_cgroup_limits_trip_and_name_themselves(void)
{
    struct sandbox_cgroup_limits lim = {8, 32u << 20, 500};
    struct sandbox_cgroup_stats st;
    struct sandbox_cgroup cg;
    char err[256] = "", *text = NULL;
    int status;
    pid_t pid;

    if (!probe())
        return;
    CU_ASSERT_EQUAL_FATAL(sandbox_cgroup_create(&host, "env-limits", &lim, &cg, err, sizeof(err)),
                          0);
    CU_ASSERT_EQUAL(sandbox_cgroup_create(&host, "env-limits", &lim, &cg, err, sizeof(err)),
                    -EEXIST);
    CU_ASSERT_EQUAL(sandbox_cgroup_tripped(&cg), SANDBOX_TRIP_NONE);
    for (size_t i = 0; i < cg.n; i++) {
        if (!cg.h[i].v2 && (cg.h[i].ctrl & SANDBOX_CG_CPU)) {
            char path[600];
            snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", cg.h[i].dir);
            CU_ASSERT_EQUAL(util_read_file(path, 64, &text, NULL), 0);
            CU_ASSERT_STRING_EQUAL(TEST_STR(text), "50000\n");
            free(text);
            text = NULL;
        }
    }
    if (host.can & SANDBOX_CG_PIDS) {
        pid = spawn_in(&cg, fork_bomb);
        CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
        CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 3);
        CU_ASSERT_EQUAL(sandbox_cgroup_stats(&cg, &st), 0);
        CU_ASSERT(st.have_pids);
        CU_ASSERT(st.pids_max >= 1);
        CU_ASSERT(st.pids_current >= 6); /* the bomb's children are still there */
        CU_ASSERT_EQUAL(sandbox_cgroup_tripped(&cg), SANDBOX_TRIP_PIDS);
        CU_ASSERT_EQUAL(sandbox_cgroup_kill(&cg, 5000), 0);
        /* killed ones count in pids.current until their (new) parent reaps them */
        for (int i = 0; i < 500; i++) {
            CU_ASSERT_EQUAL(sandbox_cgroup_stats(&cg, &st), 0);
            if (st.pids_current == 0)
                break;
            usleep(10000);
        }
        CU_ASSERT_EQUAL(st.pids_current, 0);
    } else {
        printf("\n    skipped the fork bomb: %s\n", host.missing);
    }
    CU_ASSERT_EQUAL(sandbox_cgroup_remove(&cg), 0);
    for (size_t i = 0; i < cg.n; i++)
        CU_ASSERT_FALSE(exists(cg.h[i].dir));

    if (!(host.can & SANDBOX_CG_MEMORY)) {
        printf("\n    skipped the memory hog: %s\n", host.missing);
        return;
    }
    lim.pids_max = 64;
    CU_ASSERT_EQUAL_FATAL(sandbox_cgroup_create(&host, "env-memory", &lim, &cg, err, sizeof(err)),
                          0);
    pid = spawn_in(&cg, memory_hog);
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    CU_ASSERT_EQUAL(sandbox_cgroup_stats(&cg, &st), 0);
    CU_ASSERT(st.oom_kills >= 1);
    CU_ASSERT_EQUAL(sandbox_cgroup_tripped(&cg), SANDBOX_TRIP_MEMORY);
    CU_ASSERT_EQUAL(sandbox_cgroup_kill(&cg, 5000), 0);
    CU_ASSERT_EQUAL(sandbox_cgroup_remove(&cg), 0);
}

static bool keep_b(const char *id, void *ctx)
{
    (void)ctx;
    return strcmp(id, "env-b") == 0;
}

static void test_sandbox_cgroup_sweep_removes_leftovers_but_keeps_live_ones(void)
{
    struct sandbox_cgroup_limits lim = {64, 0, 0};
    struct sandbox_cgroup a, b;
    char err[256] = "";
    int status, r;
    pid_t pid;

    if (!probe())
        return;
    CU_ASSERT_EQUAL_FATAL(sandbox_cgroup_create(&host, "env-a", &lim, &a, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(sandbox_cgroup_create(&host, "env-b", &lim, &b, err, sizeof(err)), 0);
    pid = spawn_in(&a, sleeper); /* a crashed predecessor's sandbox, still running */
    if (host.can & SANDBOX_CG_PIDS) {
        struct sandbox_cgroup_stats st = {0};
        for (int i = 0; i < 1000 && st.pids_current < 6; i++) {
            usleep(5000);
            sandbox_cgroup_stats(&a, &st);
        }
        CU_ASSERT_EQUAL(st.pids_current, 6);
    }
    r = sandbox_cgroup_sweep(&host, keep_b, NULL, 5000);
    CU_ASSERT_EQUAL(r, 1);
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    for (size_t i = 0; i < a.n; i++)
        CU_ASSERT_FALSE(exists(a.h[i].dir));
    for (size_t i = 0; i < b.n; i++)
        CU_ASSERT(exists(b.h[i].dir));
    /* the master reclaiming one dead keeper's environment by its id */
    {
        struct sandbox_cgroup again;
        CU_ASSERT_EQUAL(sandbox_cgroup_for_id(&host, "../x", &again), -EINVAL);
        CU_ASSERT_EQUAL(sandbox_cgroup_for_id(&host, "env-b", &again), 0);
        CU_ASSERT_EQUAL(again.n, b.n);
        for (size_t i = 0; i < b.n; i++)
            CU_ASSERT_STRING_EQUAL(again.h[i].dir, b.h[i].dir);
        CU_ASSERT_EQUAL(sandbox_cgroup_kill(&again, 5000), 0);
        CU_ASSERT_EQUAL(sandbox_cgroup_remove(&again), 0);
    }
    for (size_t i = 0; i < b.n; i++)
        CU_ASSERT_FALSE(exists(b.h[i].dir));
    CU_ASSERT_EQUAL(sandbox_cgroup_sweep(&host, NULL, NULL, 5000), 0);
    CU_ASSERT_EQUAL(sandbox_cgroup_host_remove(&host), 0);
    for (size_t i = 0; i < host.n; i++)
        CU_ASSERT_FALSE(exists(host.h[i].dir));
    host_ok = false;
}

CU_TestInfo sandbox_cgroup_tests[] = {
    {"test_sandbox_cgroup_layout_hybrid", test_sandbox_cgroup_layout_hybrid},
    {"test_sandbox_cgroup_layout_v2_delegated", test_sandbox_cgroup_layout_v2_delegated},
    {"test_sandbox_cgroup_layout_v1_comounted_and_bind_root",
     test_sandbox_cgroup_layout_v1_comounted_and_bind_root},
    {"test_sandbox_cgroup_parsers", test_sandbox_cgroup_parsers},
    {"test_sandbox_cgroup_limits_trip_and_name_themselves",
     test_sandbox_cgroup_limits_trip_and_name_themselves},
    {"test_sandbox_cgroup_sweep_removes_leftovers_but_keeps_live_ones",
     test_sandbox_cgroup_sweep_removes_leftovers_but_keeps_live_ones},
    CU_TEST_INFO_NULL,
};
