/*
 * sandbox_tripwire: the keeper's open limit counters — the same verdicts, in the same order,
 * as sandbox_host_tripped() gives from reading the files anew (memory over pids over disk), a
 * counter rewritten after the open seen by the next check, nothing armed without counters.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fstree.h"
#include "base/util.h"
#include "sandbox/disk.h"
#include "sandbox/tripwire.h"
#include "suites.h"

static void put(const char *dir, const char *name, const char *text)
{
    char path[SANDBOX_CG_PATH_MAX + 32];
    int fd;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    /* rewritten in place (truncate): the tripwire's descriptor sees the new text */
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(util_write_all(fd, text, strlen(text)), 0);
    close(fd);
}

static void test_sandbox_tripwire_reads_the_counters_it_holds(void)
{
    char dir[] = "/tmp/ar-tripwire.XXXXXX";
    struct sandbox_cgroup cg = {.n = 1};
    struct sandbox_tripwire t;

    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    cg.h[0].ctrl = SANDBOX_CG_MEMORY | SANDBOX_CG_PIDS;
    snprintf(cg.h[0].dir, sizeof(cg.h[0].dir), "%s", dir);
    put(dir, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
    put(dir, "pids.events", "max 0\n");

    /* a folder that is no mount point: no disk verdict, counters only */
    CU_ASSERT_EQUAL(sandbox_tripwire_open(&t, &cg, dir), 0);
    CU_ASSERT_TRUE(sandbox_tripwire_armed(&t));
    CU_ASSERT_EQUAL(t.ws_fd, -1);
    CU_ASSERT_STRING_EQUAL(sandbox_tripwire_check(&t), "none");
    put(dir, "pids.events", "max 3\n");
    CU_ASSERT_STRING_EQUAL(sandbox_tripwire_check(&t), "sandbox_pids_limit");
    put(dir, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
    CU_ASSERT_STRING_EQUAL(sandbox_tripwire_check(&t), "sandbox_memory_limit"); /* wins */
    sandbox_tripwire_close(&t);
    CU_ASSERT_FALSE(sandbox_tripwire_armed(&t));
    sandbox_tripwire_close(&t); /* twice: nothing happens */

    /* v2 names its memory counter memory.events */
    cg.h[0].v2 = true;
    cg.h[0].ctrl = SANDBOX_CG_MEMORY;
    put(dir, "memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 0\n");
    CU_ASSERT_EQUAL(sandbox_tripwire_open(&t, &cg, NULL), 0);
    CU_ASSERT_STRING_EQUAL(sandbox_tripwire_check(&t), "none"); /* max hits are no kill */
    put(dir, "memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 2\n");
    CU_ASSERT_STRING_EQUAL(sandbox_tripwire_check(&t), "sandbox_memory_limit");
    sandbox_tripwire_close(&t);

    /* a counter missing: unarmed, nothing left open; no cgroup and no mount: unarmed */
    cg.h[0].ctrl = SANDBOX_CG_PIDS | SANDBOX_CG_MEMORY;
    snprintf(cg.h[0].dir, sizeof(cg.h[0].dir), "%s/missing", dir);
    CU_ASSERT_EQUAL(sandbox_tripwire_open(&t, &cg, NULL), -ENOENT);
    CU_ASSERT_FALSE(sandbox_tripwire_armed(&t));
    cg.n = 0;
    CU_ASSERT_EQUAL(sandbox_tripwire_open(&t, &cg, dir), -ENOENT);
    CU_ASSERT_FALSE(sandbox_tripwire_armed(&t));
    CU_ASSERT_EQUAL(fstree_remove(dir), 0);
}

/* The workspace's own tmpfs: fstatfs through the held descriptor, as sandbox_disk_full(). */
static void test_sandbox_tripwire_sees_a_full_workspace(void)
{
    char dir[] = "/tmp/ar-tripwire.XXXXXX", ws[64], path[96], err[256] = "";
    struct sandbox_cgroup cg = {.n = 0};
    struct sandbox_tripwire t;
    int fd;

    if (geteuid() != 0) {
        printf("\n    skipped: mounting a tmpfs needs root\n");
        return;
    }
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(ws, sizeof(ws), "%s/workspace", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(ws, 0755), 0);
    CU_ASSERT_EQUAL_FATAL(sandbox_disk_mount(ws, "unit", 1u << 20, 64, 0, 0, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(sandbox_tripwire_open(&t, &cg, ws), 0);
    CU_ASSERT_TRUE(t.ws_fd >= 0);
    CU_ASSERT_STRING_EQUAL(sandbox_tripwire_check(&t), "none");
    snprintf(path, sizeof(path), "%s/big", ws);
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    CU_ASSERT_FATAL(fd >= 0);
    {
        static char block[65536];
        while (write(fd, block, sizeof(block)) > 0)
            ;
    }
    close(fd);
    CU_ASSERT_EQUAL(sandbox_disk_full(ws), 1);
    CU_ASSERT_STRING_EQUAL(sandbox_tripwire_check(&t), "sandbox_disk_limit");
    CU_ASSERT_EQUAL(unlink(path), 0);
    CU_ASSERT_STRING_EQUAL(sandbox_tripwire_check(&t), "none");
    sandbox_tripwire_close(&t); /* before the unmount: it holds the mount */
    CU_ASSERT_EQUAL(sandbox_disk_unmount(ws), 0);
    CU_ASSERT_EQUAL(fstree_remove(dir), 0);
}

CU_TestInfo sandbox_tripwire_tests[] = {
    {"test_sandbox_tripwire_reads_the_counters_it_holds",
     test_sandbox_tripwire_reads_the_counters_it_holds},
    {"test_sandbox_tripwire_sees_a_full_workspace", test_sandbox_tripwire_sees_a_full_workspace},
    CU_TEST_INFO_NULL,
};
