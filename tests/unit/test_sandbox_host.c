/*
 * sandbox_host: the master's probe on this machine (settings, uid range refusal, traversable
 * folders, what is enforced), one environment's host resources made and removed in order
 * (identity, workspace tmpfs, cgroup), a full workspace named as the disk limit, the
 * start-up sweep of a crashed predecessor's leftovers, and the egress report's rate limit.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../keeper/egress_report.h"
#include "base/fstree.h"
#include "base/util.h"
#include "sandbox/disk.h"
#include "sandbox/host.h"
#include "suites.h"

static char state[64], instance[32];

static void small_limits(void)
{
    setenv("AGENT_RUNNER_SANDBOX_DISK_MAX", "2M", 1);
    setenv("AGENT_RUNNER_SANDBOX_MEMORY_MAX", "64M", 1);
    setenv("AGENT_RUNNER_SANDBOX_PIDS_MAX", "64", 1);
    unsetenv("AGENT_RUNNER_SANDBOX_UID_BASE");
    unsetenv("AGENT_RUNNER_REQUIRE_LIMITS");
}

static void clear_limits(void)
{
    unsetenv("AGENT_RUNNER_SANDBOX_DISK_MAX");
    unsetenv("AGENT_RUNNER_SANDBOX_MEMORY_MAX");
    unsetenv("AGENT_RUNNER_SANDBOX_PIDS_MAX");
    unsetenv("AGENT_RUNNER_SANDBOX_UID_BASE");
}

static int host_up(struct sandbox_host *h)
{
    char err[512] = "";
    int r;

    snprintf(state, sizeof(state), "/tmp/ar-unit-host-XXXXXX");
    if (!mkdtemp(state))
        return -errno;
    chmod(state, 0755);
    snprintf(instance, sizeof(instance), "ut-host-%d", (int)getpid());
    small_limits();
    r = sandbox_host_init(h, instance, state, 16, err, sizeof(err));
    if (r < 0)
        fprintf(stderr, "\n    sandbox_host_init: %s\n", err);
    return r;
}

static void host_down(struct sandbox_host *h)
{
    sandbox_host_release(h, true);
    fstree_remove(state);
    clear_limits();
}

/* <state>/envs/<id> with its workspace, as env_setup_create makes it. */
static void make_env(const struct sandbox_host *h, const char *id, char *dir, size_t len)
{
    char ws[512];

    snprintf(dir, len, "%s/%s", h->envs, id);
    snprintf(ws, sizeof(ws), "%s/workspace", dir);
    CU_ASSERT_EQUAL(mkdir(dir, 0700), 0);
    CU_ASSERT_EQUAL(mkdir(ws, 0755), 0);
}

static bool exists(const char *path)
{
    struct stat st;

    return lstat(path, &st) == 0;
}

static void test_sandbox_host_probe_prepares_the_folders(void)
{
    struct sandbox_host h;
    struct stat st;
    json_object *d;
    char path[512];

    CU_ASSERT_EQUAL_FATAL(host_up(&h), 0);
    /* bubblewrap runs as the sandbox user: it must traverse the state and envs folders */
    CU_ASSERT_EQUAL(stat(state, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 07777, 0711);
    snprintf(path, sizeof(path), "%s/envs", state);
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 07777, 0711);
    CU_ASSERT_EQUAL(h.uids.shared, geteuid() != 0);
    CU_ASSERT_EQUAL(sandbox_host_nproc(&h), h.uids.shared                  ? 0
                                            : (h.cg.can & SANDBOX_CG_PIDS) ? 128
                                                                           : 64);
    d = sandbox_host_describe(&h);
    CU_ASSERT_EQUAL(json_object_get_int64(
                        json_object_object_get(json_object_object_get(d, "limits"), "diskBytes")),
                    2 << 20);
    CU_ASSERT_PTR_NOT_NULL(json_object_object_get(d, "notEnforced"));
    printf("\n    enforced here: %s; not: \"%s\"; network namespace: %s\n",
           json_object_to_json_string(json_object_object_get(d, "enforced")), h.missing,
           h.net_ok ? "yes" : h.net_why);
    json_object_put(d);
    host_down(&h);
}

static void test_sandbox_host_refuses_a_uid_range_over_users(void)
{
    struct sandbox_host h;
    char err[512] = "";

    if (geteuid() != 0) {
        printf("\n    skipped: the uid range is only checked for a root runner\n");
        return;
    }
    snprintf(state, sizeof(state), "/tmp/ar-unit-host-XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(state));
    setenv("AGENT_RUNNER_SANDBOX_UID_BASE", "1", 1);
    CU_ASSERT_EQUAL(sandbox_host_init(&h, "ut-range", state, 16, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENT_RUNNER_SANDBOX_UID_BASE"));
    unsetenv("AGENT_RUNNER_SANDBOX_UID_BASE");
    fstree_remove(state);
}

/* An environment's identity, tmpfs and cgroup are made, then removed, in the right order. */
static void test_sandbox_host_environment_made_and_removed(void)
{
    struct sandbox_host h;
    struct sandbox_env e;
    const char *code = NULL;
    char dir[512], ws[600], file[700], err[512] = "", msg[256] = "";
    struct stat st;

    CU_ASSERT_EQUAL_FATAL(host_up(&h), 0);
    make_env(&h, "e0123456789abcde", dir, sizeof(dir));
    snprintf(ws, sizeof(ws), "%s/workspace", dir);
    CU_ASSERT_EQUAL_FATAL(sandbox_host_env_prepare(&h, 3, dir, &e, err, sizeof(err)), 0);
    if (!h.uids.shared) {
        CU_ASSERT_EQUAL(e.ids.uid, h.uids.base + 3);
        CU_ASSERT_EQUAL(stat(dir, &st), 0);
        CU_ASSERT_EQUAL(st.st_uid, h.uids.base + 3);
        CU_ASSERT_EQUAL(st.st_mode & 07777, 0700);
    }
    CU_ASSERT_EQUAL(sandbox_disk_is_mounted(ws), h.disk_ok ? 1 : 0);
    snprintf(file, sizeof(file), "%s/AGENTS.md", ws);
    CU_ASSERT_EQUAL(util_write_file(file, "hi\n", 3, 0644), 0);
    CU_ASSERT_EQUAL_FATAL(sandbox_host_env_seal(&h, dir, &e, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(stat(file, &st), 0);
    CU_ASSERT_EQUAL(st.st_uid, e.ids.uid);
    CU_ASSERT_EQUAL(stat(ws, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 07777, 0700);
    CU_ASSERT_EQUAL(e.cg.n > 0, h.cg.can != 0);
    for (size_t i = 0; i < e.cg.n; i++)
        CU_ASSERT(exists(e.cg.h[i].dir));
    CU_ASSERT_EQUAL(sandbox_host_tripped(&h, dir, &code, msg, sizeof(msg)), 0);
    /* a symlink the sandbox left pointing outside is removed itself, its target kept */
    snprintf(file, sizeof(file), "%s/escape", ws);
    CU_ASSERT_EQUAL(symlink(state, file), 0);
    CU_ASSERT_EQUAL(sandbox_host_remove_env(&e.cg, dir), 0);
    CU_ASSERT_FALSE(exists(dir));
    CU_ASSERT(exists(state));
    for (size_t i = 0; i < e.cg.n; i++)
        CU_ASSERT_FALSE(exists(e.cg.h[i].dir));
    host_down(&h);
}

static void test_sandbox_host_names_a_full_workspace(void)
{
    struct sandbox_host h;
    struct sandbox_env e;
    const char *code = NULL;
    char dir[512], file[600], err[512] = "", msg[256] = "", chunk[65536];
    int fd;

    CU_ASSERT_EQUAL_FATAL(host_up(&h), 0);
    if (!h.disk_ok) {
        printf("\n    skipped: this host cannot mount the workspace cap (%s)\n", h.missing);
        host_down(&h);
        return;
    }
    make_env(&h, "f0123456789abcde", dir, sizeof(dir));
    CU_ASSERT_EQUAL_FATAL(sandbox_host_env_prepare(&h, 1, dir, &e, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(sandbox_host_env_seal(&h, dir, &e, err, sizeof(err)), 0);
    snprintf(file, sizeof(file), "%s/workspace/fill", dir);
    fd = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    CU_ASSERT_FATAL(fd >= 0);
    memset(chunk, 'x', sizeof(chunk));
    while (write(fd, chunk, sizeof(chunk)) > 0)
        ;
    CU_ASSERT_EQUAL(errno, ENOSPC); /* 2 MiB and no more */
    close(fd);
    CU_ASSERT_EQUAL(sandbox_host_tripped(&h, dir, &code, msg, sizeof(msg)), 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(code), "sandbox_disk_limit");
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "2 MiB"));
    CU_ASSERT_EQUAL(sandbox_host_reclaim(&h, dir), 0);
    CU_ASSERT_FALSE(exists(dir));
    host_down(&h);
}

static bool keep_kept(const char *id, void *ctx)
{
    (void)ctx;
    return strcmp(id, "kept") == 0;
}

/* What a crashed predecessor left (folder, mount, cgroup) goes; what a live slot holds stays. */
static void test_sandbox_host_sweep_removes_leftovers(void)
{
    struct sandbox_host h;
    struct sandbox_env gone, kept;
    char dgone[512], dkept[512], err[512] = "";

    CU_ASSERT_EQUAL_FATAL(host_up(&h), 0);
    make_env(&h, "gone", dgone, sizeof(dgone));
    make_env(&h, "kept", dkept, sizeof(dkept));
    CU_ASSERT_EQUAL_FATAL(sandbox_host_env_prepare(&h, 1, dgone, &gone, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(sandbox_host_env_seal(&h, dgone, &gone, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(sandbox_host_env_prepare(&h, 2, dkept, &kept, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(sandbox_host_env_seal(&h, dkept, &kept, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(sandbox_host_sweep(&h, keep_kept, NULL), 1);
    CU_ASSERT_FALSE(exists(dgone));
    for (size_t i = 0; i < gone.cg.n; i++)
        CU_ASSERT_FALSE(exists(gone.cg.h[i].dir));
    CU_ASSERT(exists(dkept));
    for (size_t i = 0; i < kept.cg.n; i++)
        CU_ASSERT(exists(kept.cg.h[i].dir));
    /* a clean stop sweeps everything */
    CU_ASSERT_EQUAL(sandbox_host_sweep(&h, NULL, NULL), 1);
    CU_ASSERT_FALSE(exists(dkept));
    host_down(&h);
}

static void test_sandbox_host_egress_report_is_rate_limited(void)
{
    struct egress_report r;

    egress_report_init(&r, NULL);
    for (int i = 0; i < 3 * EGRESS_REPORT_LINES_PER_S; i++)
        egress_report_event(&r, true, "127.0.0.1:9", "loopback");
    CU_ASSERT_EQUAL(r.budget.logged, EGRESS_REPORT_LINES_PER_S);
    CU_ASSERT_EQUAL(r.budget.dropped, 2 * EGRESS_REPORT_LINES_PER_S);
    egress_report_event(&r, false, "made.up.name", "name refused"); /* not counted */
    CU_ASSERT_EQUAL(r.budget.dropped, 2 * EGRESS_REPORT_LINES_PER_S);
}

CU_TestInfo sandbox_host_tests[] = {
    {"test_sandbox_host_probe_prepares_the_folders", test_sandbox_host_probe_prepares_the_folders},
    {"test_sandbox_host_refuses_a_uid_range_over_users",
     test_sandbox_host_refuses_a_uid_range_over_users},
    {"test_sandbox_host_environment_made_and_removed",
     test_sandbox_host_environment_made_and_removed},
    {"test_sandbox_host_names_a_full_workspace", test_sandbox_host_names_a_full_workspace},
    {"test_sandbox_host_sweep_removes_leftovers", test_sandbox_host_sweep_removes_leftovers},
    {"test_sandbox_host_egress_report_is_rate_limited",
     test_sandbox_host_egress_report_is_rate_limited},
    CU_TEST_INFO_NULL,
};
