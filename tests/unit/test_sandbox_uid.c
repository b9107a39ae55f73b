/*
 * sandbox_uid: the per-environment host uid range check, the privilege drop in the child that
 * starts bwrap, and that bwrap (not setuid) really runs the sandbox as that host uid.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fstree.h"
#include "base/util.h"
#include "sandbox/uid.h"
#include "suites.h"

#define BASE 2000000000u

static char dir[64];

static void fixture_dir(void)
{
    snprintf(dir, sizeof(dir), "/tmp/ar-unit-uid-XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
}

static const char *fixture(const char *name, const char *text)
{
    static char paths[8][128];
    static int next;
    char *p = paths[next++ % 8];

    snprintf(p, 128, "%s/%s", dir, name);
    CU_ASSERT_EQUAL(util_write_file(p, text, strlen(text), 0644), 0);
    return p;
}

static struct sandbox_uid_files clean_files(void)
{
    struct sandbox_uid_files f = {
        .passwd = fixture("passwd", "root:x:0:0:root:/root:/bin/sh\n"
                                    "bob:x:1000:1000::/home/bob:/bin/bash\n"
                                    "nobody:x:65534:65534::/:/usr/sbin/nologin\n"),
        .group = fixture("group", "root:x:0:\nbob:x:1000:\nnogroup:x:65534:\n"),
        .login_defs = fixture("login.defs", "# comment\nUID_MIN 1000\nUID_MAX\t60000\n"
                                            "SUB_UID_MIN 100000\nSUB_UID_MAX 600100000\n"),
        .subuid = fixture("subuid", "bob:100000:65536\n"),
        .subgid = fixture("subgid", "bob:100000:65536\n"),
        .use_nss = false,
    };
    return f;
}

static void expect_refused(const struct sandbox_uid_files *f, uint32_t base, uint32_t count,
                           const char *needle)
{
    char err[512] = "";

    CU_ASSERT_EQUAL(sandbox_uid_check_range(f, base, count, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
    if (!strstr(err, needle))
        printf("\n    message was: %s (expected '%s')\n", err, needle);
}

static void test_sandbox_uid_range_check_refuses_clashes(void)
{
    struct sandbox_uid_files f;
    char err[512] = "";

    fixture_dir();
    f = clean_files();
    CU_ASSERT_EQUAL(sandbox_uid_check_range(&f, BASE, 1024, err, sizeof(err)), 0);

    expect_refused(&f, BASE, 0, "empty");
    expect_refused(&f, 500, 10, "1000..2147483646");
    expect_refused(&f, 2147483000u, 1024, "1000..2147483646");
    expect_refused(&f, 65000, 1000, "65534");
    expect_refused(&f, 50000, 100, "UID_MIN..UID_MAX (1000..60000)");
    expect_refused(&f, 300000000, 100, "SUB_UID_MIN..SUB_UID_MAX");

    f.passwd = fixture("passwd2", "root:x:0:0::/:/bin/sh\nmallory:x:2000000005:7::/:/bin/sh\n");
    expect_refused(&f, BASE, 1024, "user 'mallory' (id 2000000005)");
    f = clean_files();
    f.group = fixture("group2", "root:x:0:\nbuild:x:2000001000:\n");
    expect_refused(&f, BASE, 1024, "group 'build' (id 2000001000)");
    CU_ASSERT_EQUAL(sandbox_uid_check_range(&f, BASE, 1000, err, sizeof(err)), 0);
    f = clean_files();
    f.subuid = fixture("subuid2", "bob:100000:65536\nci:1999999000:2000\n");
    expect_refused(&f, BASE, 1024, "subordinate range 1999999000..2000000999 of 'ci'");
    f = clean_files();
    f.login_defs = fixture("login2", "UID_MIN 1000\nUID_MAX 2000000000\n");
    expect_refused(&f, BASE, 1024, "UID_MIN..UID_MAX");
    f = clean_files();
    f.passwd = "/nonexistent/passwd"; /* a missing file is not an error */
    CU_ASSERT_EQUAL(sandbox_uid_check_range(&f, BASE, 1024, err, sizeof(err)), 0);
    fstree_remove(dir);
}

static void test_sandbox_uid_range_on_this_host(void)
{
    struct sandbox_uid_range rg;
    struct sandbox_uid_ids ids;
    char err[512] = "";

    CU_ASSERT_EQUAL_FATAL(sandbox_uid_range_init(BASE, 1024, &rg, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(rg.shared, geteuid() != 0);
    CU_ASSERT_EQUAL(sandbox_uid_for_slot(&rg, 7, &ids), 0);
    if (geteuid() == 0) {
        CU_ASSERT_EQUAL(ids.uid, BASE + 7);
        CU_ASSERT_EQUAL(ids.gid, BASE + 7);
        CU_ASSERT_FALSE(ids.shared);
        CU_ASSERT_EQUAL(sandbox_uid_for_slot(&rg, 1024, &ids), -ERANGE);
    } else {
        CU_ASSERT_EQUAL(ids.uid, geteuid());
        CU_ASSERT(ids.shared);
    }
    /* the login range always refuses, whatever the host */
    CU_ASSERT_EQUAL(sandbox_uid_range_init(1000, 10, &rg, err, sizeof(err)),
                    geteuid() == 0 ? -EINVAL : 0);
}

static int status_field(const char *name, char *out, size_t len)
{
    char *text = NULL, *p;

    if (util_read_file("/proc/self/status", 1 << 16, &text, NULL) < 0)
        return -1;
    p = strstr(text, name);
    if (!p) {
        free(text);
        return -1;
    }
    p += strlen(name);
    while (*p == ' ' || *p == '\t')
        p++;
    snprintf(out, len, "%.*s", (int)strcspn(p, "\n"), p);
    free(text);
    return 0;
}

/* The drop in a forked child: ids, groups, capabilities, no_new_privs, root-only files. */
static void test_sandbox_uid_enter_drops_everything(void)
{
    int pipefd[2], status;
    char report[512] = "";
    pid_t pid;
    ssize_t n;

    if (geteuid() != 0) {
        printf("\n    skipped: dropping to another uid needs root\n");
        return;
    }
    CU_ASSERT_EQUAL_FATAL(pipe(pipefd), 0);
    pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        struct sandbox_uid_ids ids = {BASE + 3, BASE + 3, false};
        char nnp[32] = "", capeff[32] = "", line[400];
        int r, fd, shadow_errno;
        struct rlimit lim;

        close(pipefd[0]);
        r = sandbox_uid_enter(&ids, 77);
        fd = open("/etc/shadow", O_RDONLY);
        shadow_errno = fd == -1 ? errno : 0;
        status_field("NoNewPrivs:", nnp, sizeof(nnp));
        status_field("CapEff:", capeff, sizeof(capeff));
        getrlimit(RLIMIT_NPROC, &lim);
        snprintf(line, sizeof(line),
                 "r=%d uid=%u euid=%u gid=%u groups=%d shadow=%d nnp=%s "
                 "capeff=%s nproc=%llu setuid0=%d",
                 r, getuid(), geteuid(), getgid(), getgroups(0, NULL), shadow_errno, nnp, capeff,
                 (unsigned long long)lim.rlim_cur, setuid(0));
        if (write(pipefd[1], line, strlen(line)) < 0)
            _exit(2);
        _exit(0);
    }
    close(pipefd[1]);
    n = read(pipefd[0], report, sizeof(report) - 1);
    close(pipefd[0]);
    waitpid(pid, &status, 0);
    CU_ASSERT(n > 0);
    report[n > 0 ? n : 0] = '\0';
    CU_ASSERT_PTR_NOT_NULL(strstr(report, "r=0 uid=2000000003 euid=2000000003 gid=2000000003 "
                                          "groups=0 shadow=13 nnp=1 capeff=0000000000000000 "
                                          "nproc=77 setuid0=-1"));
    if (!strstr(report, "r=0 uid=2000000003"))
        printf("\n    child said: %s\n", report);
}

/*
 * bubblewrap 0.8 (not setuid) started as the dropped uid: the sandbox user (uid 1000 inside)
 * is that host uid — a file it creates in the bound workspace belongs to it on the host, and
 * the host sees the uid in the sandbox process's uid_map — while user namespaces inside are
 * disabled.
 */
static void test_sandbox_uid_bwrap_runs_as_the_sandbox_uid(void)
{
    char ws[128], path[192], out[512] = "";
    struct sandbox_uid_ids ids = {BASE + 11, BASE + 11, false};
    struct stat st;
    int pipefd[2], status;
    size_t len;
    pid_t pid;
    ssize_t n;

    if (geteuid() != 0 || access("/usr/bin/bwrap", X_OK) != 0) {
        printf("\n    skipped: needs root and /usr/bin/bwrap\n");
        return;
    }
    fixture_dir();
    CU_ASSERT_EQUAL(chmod(dir, 0711), 0);
    snprintf(ws, sizeof(ws), "%s/workspace", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(ws, 0755), 0);
    snprintf(path, sizeof(path), "%s/AGENTS.md", ws);
    CU_ASSERT_EQUAL(util_write_file(path, "hi", 2, 0644), 0);
    CU_ASSERT_EQUAL(sandbox_uid_give_workspace(ws, &ids), 0);
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(st.st_uid, BASE + 11);
    CU_ASSERT_EQUAL(stat(ws, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 07777, 0700);

    CU_ASSERT_EQUAL_FATAL(pipe(pipefd), 0);
    pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        char *argv[] = {
            "bwrap",
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--uid",
            "1000",
            "--gid",
            "1000",
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/bin",
            "/bin",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--bind",
            ws,
            "/workspace",
            "--",
            "/bin/sh",
            "-c",
            "echo hello > /workspace/made-inside; echo \"id=$(id -u) map=$(cat "
            "/proc/self/uid_map | tr -s ' ')\"; unshare -U true 2>/dev/null; echo userns=$?; "
            "cat /workspace/AGENTS.md",
            NULL};
        dup2(pipefd[1], STDOUT_FILENO);
        close(pipefd[0]);
        if (sandbox_uid_enter(&ids, 0) < 0)
            _exit(120);
        execv("/usr/bin/bwrap", argv);
        _exit(127);
    }
    close(pipefd[1]);
    len = 0;
    while (len < sizeof(out) - 1 && (n = read(pipefd[0], out + len, sizeof(out) - 1 - len)) > 0)
        len += (size_t)n;
    close(pipefd[0]);
    waitpid(pid, &status, 0);
    out[len] = '\0';
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "id=1000 map= 1000 0 1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "userns=1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "hi"));
    if (!strstr(out, "userns=1"))
        printf("\n    sandbox said: %s\n", out);
    snprintf(path, sizeof(path), "%s/made-inside", ws);
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(st.st_uid, BASE + 11); /* host root never owns what the sandbox made */
    CU_ASSERT_EQUAL(st.st_gid, BASE + 11);
    fstree_remove(dir);
}

CU_TestInfo sandbox_uid_tests[] = {
    {"test_sandbox_uid_range_check_refuses_clashes", test_sandbox_uid_range_check_refuses_clashes},
    {"test_sandbox_uid_range_on_this_host", test_sandbox_uid_range_on_this_host},
    {"test_sandbox_uid_enter_drops_everything", test_sandbox_uid_enter_drops_everything},
    {"test_sandbox_uid_bwrap_runs_as_the_sandbox_uid",
     test_sandbox_uid_bwrap_runs_as_the_sandbox_uid},
    CU_TEST_INFO_NULL,
};
