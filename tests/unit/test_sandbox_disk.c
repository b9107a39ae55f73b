/*
 * sandbox_disk: the workspace tmpfs cap — size, inodes, owner, full detection, unmount, the
 * start-up sweep, and that its pages are charged to the writer's memory cgroup.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fstree.h"
#include "base/util.h"
#include "sandbox/cgroup.h"
#include "sandbox/cgroup_host.h"
#include "sandbox/disk.h"
#include "suites.h"

static char root[64];

static bool need_root(void)
{
    if (geteuid() == 0)
        return true;
    printf("\n    skipped: mounting a tmpfs needs root\n");
    return false;
}

static void make_root(void)
{
    snprintf(root, sizeof(root), "/tmp/ar-unit-disk-XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(root));
}

/* Write chunks into dir/name until the file system refuses; returns the errno. */
static int fill(const char *dir, const char *name, size_t max_bytes)
{
    char path[256], buf[65536];
    size_t done = 0;
    int fd, e = 0;

    memset(buf, 'x', sizeof(buf));
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd == -1)
        return errno;
    while (done < max_bytes) {
        ssize_t n = write(fd, buf, sizeof(buf));
        if (n <= 0) {
            e = n < 0 ? errno : EIO;
            break;
        }
        done += (size_t)n;
    }
    close(fd);
    return e;
}

static void test_sandbox_disk_cap_owner_and_full(void)
{
    struct sandbox_disk_usage u;
    char ws[128], err[256] = "", path[192];
    struct stat st;
    int i;

    if (!need_root())
        return;
    make_root();
    snprintf(ws, sizeof(ws), "%s/workspace", root);
    CU_ASSERT_EQUAL_FATAL(mkdir(ws, 0755), 0);
    CU_ASSERT_EQUAL(sandbox_disk_is_mounted(ws), 0);
    CU_ASSERT_EQUAL_FATAL(
        sandbox_disk_mount(ws, "unit", 4u << 20, 64, 2000000021, 2000000021, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(sandbox_disk_is_mounted(ws), 1);
    CU_ASSERT_EQUAL(stat(ws, &st), 0);
    CU_ASSERT_EQUAL(st.st_uid, 2000000021);
    CU_ASSERT_EQUAL(st.st_mode & 07777, 0700);
    CU_ASSERT_EQUAL(sandbox_disk_usage(ws, &u), 0);
    CU_ASSERT_EQUAL(u.size, 4u << 20);
    CU_ASSERT_EQUAL(u.inodes, 64);
    CU_ASSERT_EQUAL(sandbox_disk_full(ws), 0);

    /* bytes: 16 MiB into 4 MiB */
    CU_ASSERT_EQUAL(fill(ws, "big", 16u << 20), ENOSPC);
    CU_ASSERT_EQUAL(sandbox_disk_full(ws), 1);
    snprintf(path, sizeof(path), "%s/big", ws);
    CU_ASSERT_EQUAL(unlink(path), 0);
    CU_ASSERT_EQUAL(sandbox_disk_full(ws), 0);

    /* inodes: more files than the cap */
    for (i = 0; i < 100; i++) {
        int fd;
        snprintf(path, sizeof(path), "%s/f%d", ws, i);
        fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd == -1)
            break;
        close(fd);
    }
    CU_ASSERT(i < 100);
    CU_ASSERT_EQUAL(errno, ENOSPC);
    CU_ASSERT_EQUAL(sandbox_disk_full(ws), 1);

    /* teardown: the removal refuses to walk into the mount; unmount frees it at once */
    CU_ASSERT_EQUAL(fstree_remove(root), -EBUSY);
    CU_ASSERT_EQUAL(sandbox_disk_unmount(ws), 0);
    CU_ASSERT_EQUAL(sandbox_disk_is_mounted(ws), 0);
    CU_ASSERT_EQUAL(sandbox_disk_unmount(ws), 0); /* idempotent */
    CU_ASSERT_EQUAL(fstree_remove(root), 0);
    CU_ASSERT_EQUAL(sandbox_disk_unmount(ws), 0); /* gone: still fine */

    CU_ASSERT_EQUAL(
        sandbox_disk_mount("/nonexistent/ws", "unit", 1u << 20, 8, 0, 0, err, sizeof(err)),
        -ENOENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent/ws"));
    CU_ASSERT_EQUAL(sandbox_disk_mount(ws, "bad,name", 1u << 20, 8, 0, 0, err, sizeof(err)),
                    -EINVAL);
}

static bool keep_b(const char *id, void *ctx)
{
    (void)ctx;
    return strcmp(id, "b") == 0;
}

static void test_sandbox_disk_sweep_unmounts_leftovers(void)
{
    char envs[128], ws[3][192], mine[32], other[32], err[256] = "";
    static const char *const ids[3] = {"a", "b", "c"};

    if (!need_root())
        return;
    make_root();
    snprintf(envs, sizeof(envs), "%s/envs", root);
    snprintf(mine, sizeof(mine), "unit-%d", (int)getpid());
    snprintf(other, sizeof(other), "other-%d", (int)getpid());
    for (int i = 0; i < 3; i++) {
        snprintf(ws[i], sizeof(ws[i]), "%s/%s/workspace", envs, ids[i]);
        CU_ASSERT_EQUAL_FATAL(util_mkdir_p(ws[i], 0700), 0);
        CU_ASSERT_EQUAL_FATAL(
            sandbox_disk_mount(ws[i], i == 2 ? other : mine, 1u << 20, 16, 0, 0, err, sizeof(err)),
            0);
    }
    CU_ASSERT_EQUAL(sandbox_disk_sweep(mine, envs, keep_b, NULL), 1);
    CU_ASSERT_EQUAL(sandbox_disk_is_mounted(ws[0]), 0);
    CU_ASSERT_EQUAL(sandbox_disk_is_mounted(ws[1]), 1); /* live: kept */
    CU_ASSERT_EQUAL(sandbox_disk_is_mounted(ws[2]), 1); /* another instance's: not ours */
    CU_ASSERT_EQUAL(sandbox_disk_sweep(mine, envs, NULL, NULL), 1);
    CU_ASSERT_EQUAL(sandbox_disk_is_mounted(ws[1]), 0);
    CU_ASSERT_EQUAL(sandbox_disk_sweep(other, envs, NULL, NULL), 1);
    CU_ASSERT_EQUAL(sandbox_disk_is_mounted(ws[2]), 0);
    CU_ASSERT_EQUAL(sandbox_disk_probe(root, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(fstree_remove(root), 0);
}

/* The workspace's pages are charged to the memory cgroup of the sandbox that writes them. */
static void test_sandbox_disk_pages_count_against_the_writers_memory_cgroup(void)
{
    struct sandbox_cgroup_limits lim = {64, 256u << 20, 0};
    struct sandbox_cgroup_host host;
    struct sandbox_cgroup cg;
    char ws[128], err[256] = "", instance[32], *text = NULL;
    uint64_t before = 0, after = 0;
    int status;
    pid_t pid;

    if (!need_root())
        return;
    snprintf(instance, sizeof(instance), "unit-disk-%d", (int)getpid());
    CU_ASSERT_EQUAL_FATAL(sandbox_cgroup_probe(instance, &host, err, sizeof(err)), 0);
    if (!(host.can & SANDBOX_CG_MEMORY)) {
        printf("\n    skipped: no memory cgroup here (%s)\n", host.missing);
        sandbox_cgroup_host_remove(&host);
        return;
    }
    make_root();
    snprintf(ws, sizeof(ws), "%s/workspace", root);
    CU_ASSERT_EQUAL_FATAL(mkdir(ws, 0700), 0);
    CU_ASSERT_EQUAL_FATAL(sandbox_disk_mount(ws, "unit", 64u << 20, 1024, 0, 0, err, sizeof(err)),
                          0);
    CU_ASSERT_EQUAL_FATAL(sandbox_cgroup_create(&host, "env-disk", &lim, &cg, err, sizeof(err)), 0);
    for (size_t i = 0; i < cg.n; i++) {
        if (!(cg.h[i].ctrl & SANDBOX_CG_MEMORY))
            continue;
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", cg.h[i].dir,
                 cg.h[i].v2 ? "memory.current" : "memory.usage_in_bytes");
        if (util_read_file(path, 64, &text, NULL) == 0) {
            text[strcspn(text, "\n")] = '\0';
            util_parse_u64(text, 0, UINT64_MAX, &before);
            free(text);
            text = NULL;
        }
        pid = fork();
        if (pid == 0) {
            if (sandbox_cgroup_enter(&cg) < 0)
                _exit(9);
            _exit(fill(ws, "charged", 16u << 20) == 0 ? 0 : 1);
        }
        CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
        CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (util_read_file(path, 64, &text, NULL) == 0) {
            text[strcspn(text, "\n")] = '\0';
            util_parse_u64(text, 0, UINT64_MAX, &after);
            free(text);
            text = NULL;
        }
        /* the writer is gone, its 16 MiB of files are still charged to the sandbox */
        CU_ASSERT(after >= before + (15u << 20));
    }
    CU_ASSERT_EQUAL(sandbox_disk_unmount(ws), 0);
    CU_ASSERT_EQUAL(sandbox_cgroup_kill(&cg, 5000), 0);
    CU_ASSERT_EQUAL(sandbox_cgroup_remove(&cg), 0);
    CU_ASSERT_EQUAL(sandbox_cgroup_host_remove(&host), 0);
    CU_ASSERT_EQUAL(fstree_remove(root), 0);
}

CU_TestInfo sandbox_disk_tests[] = {
    {"test_sandbox_disk_cap_owner_and_full", test_sandbox_disk_cap_owner_and_full},
    {"test_sandbox_disk_sweep_unmounts_leftovers", test_sandbox_disk_sweep_unmounts_leftovers},
    {"test_sandbox_disk_pages_count_against_the_writers_memory_cgroup",
     test_sandbox_disk_pages_count_against_the_writers_memory_cgroup},
    CU_TEST_INFO_NULL,
};
