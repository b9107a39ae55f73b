/*
 * local: the bubblewrap command of the local provider — the minimal host view (no host /etc,
 * /proc/sys read-only, no nested user namespaces, size-capped tmpfs, seccomp, read-only
 * root) — checked in the argv and by running it.
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
#include "provider/provider.h"
#include "sandbox/seccomp.h"
#include "suites.h"

static char ws[64];

static json_object *description(const char *script)
{
    json_object *sb = json_object_new_object(), *argv = json_object_new_array();
    json_object *env = json_object_new_object(), *lim = json_object_new_object();

    snprintf(ws, sizeof(ws), "/tmp/ar-unit-local-XXXXXX");
    if (!mkdtemp(ws))
        return NULL;
    json_object_object_add(sb, "workspace", json_object_new_string(ws));
    json_object_object_add(sb, "roBinds", json_object_new_array());
    json_object_object_add(sb, "files", json_object_new_array());
    json_object_array_add(argv, json_object_new_string("/bin/sh"));
    json_object_array_add(argv, json_object_new_string("-c"));
    json_object_array_add(argv, json_object_new_string(script));
    json_object_object_add(sb, "argv", argv);
    json_object_object_add(env, "PATH", json_object_new_string("/usr/bin:/bin"));
    json_object_object_add(sb, "env", env);
    json_object_object_add(sb, "cwd", json_object_new_string("/workspace"));
    json_object_object_add(lim, "tmpBytes", json_object_new_int64(3 << 20));
    json_object_object_add(lim, "homeBytes", json_object_new_int64(5 << 20));
    json_object_object_add(sb, "limits", lim);
    /* the worker's programme (environment_sandbox_description) */
    {
        const char *hex = NULL;
        char err[256];

        if (sandbox_seccomp_program(&hex, err, sizeof(err)) == 0)
            json_object_object_add(sb, "seccomp", json_object_new_string(hex));
    }
    return sb;
}

/* No programme in the description, or not one: no sandbox (never one without the filter). */
static void test_local_command_refuses_a_sandbox_without_seccomp(void)
{
    static const char *const bad[] = {NULL, "", "0011", "zz00000000000000"};

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_object *sb = description("true");
        char **argv = NULL, **envp = NULL, err[256] = "";
        int fds[64];
        size_t nfds = 99;

        CU_ASSERT_PTR_NOT_NULL_FATAL(sb);
        json_object_object_del(sb, "seccomp");
        if (bad[i])
            json_object_object_add(sb, "seccomp", json_object_new_string(bad[i]));
        CU_ASSERT_EQUAL(local_sandbox_command("/usr/bin/bwrap", sb, NULL, &argv, &envp, fds, 64,
                                              &nfds, err, sizeof(err)),
                        -EINVAL);
        CU_ASSERT_PTR_NULL(argv);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "seccomp"));
        json_object_put(sb);
        fstree_remove(ws);
    }
}

static int find(char **argv, const char *a, const char *b, const char *c)
{
    for (int i = 0; argv[i]; i++)
        if (strcmp(argv[i], a) == 0 && (!b || (argv[i + 1] && strcmp(argv[i + 1], b) == 0)) &&
            (!c || (argv[i + 1] && argv[i + 2] && strcmp(argv[i + 2], c) == 0)))
            return i;
    return -1;
}

static void test_local_command_has_the_minimal_host_view(void)
{
    json_object *sb = description("true");
    char **argv = NULL, **envp = NULL, err[256] = "";
    int fds[64], i_proc, i_sys, i_ro, i_chdir, i_sec;
    size_t nfds = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(sb);
    CU_ASSERT_EQUAL_FATAL(local_sandbox_command("/usr/bin/bwrap", sb, NULL, &argv, &envp, fds, 64,
                                                &nfds, err, sizeof(err)),
                          0);
    CU_ASSERT_EQUAL(find(argv, "--ro-bind", "/etc", "/etc"), -1);
    CU_ASSERT_EQUAL(find(argv, "--bind", "/", NULL), -1);
    CU_ASSERT(find(argv, "--unshare-user", NULL, NULL) > 0);
    /* no egress policy: an empty network namespace of its own, never the host's */
    CU_ASSERT(find(argv, "--unshare-all", NULL, NULL) > 0);
    CU_ASSERT_EQUAL(find(argv, "--share-net", NULL, NULL), -1);
    CU_ASSERT(find(argv, "--disable-userns", NULL, NULL) > 0);
    CU_ASSERT(find(argv, "--cap-drop", "ALL", NULL) > 0);
    CU_ASSERT(find(argv, "--size", "3145728", "--tmpfs") > 0);
    CU_ASSERT(find(argv, "--size", "5242880", "--tmpfs") > 0);
    CU_ASSERT(find(argv, "--ro-bind", "/etc/ssl/certs", "/etc/ssl/certs") > 0 ||
              access("/etc/ssl/certs", F_OK) != 0);
    /* /etc's files are written into the root (read-only at the end), never a mount each */
    CU_ASSERT_EQUAL(find(argv, "--ro-bind-data", NULL, NULL), -1);
    CU_ASSERT(find(argv, "--file", NULL, "/etc/passwd") > 0);
    CU_ASSERT(find(argv, "--file", NULL, "/etc/ld.so.cache") > 0 ||
              access("/etc/ld.so.cache", R_OK) != 0);
    CU_ASSERT_EQUAL(find(argv, "--ro-bind", "/etc/ld.so.cache", NULL), -1);
    i_proc = find(argv, "--proc", "/proc", NULL);
    i_sys = find(argv, "--ro-bind", "/proc/sys", "/proc/sys");
    i_sec = find(argv, "--seccomp", NULL, NULL);
    i_ro = find(argv, "--remount-ro", "/", NULL);
    i_chdir = find(argv, "--chdir", NULL, NULL);
    CU_ASSERT(i_proc > 0 && i_sys > i_proc);
    CU_ASSERT(i_sec > 0);
    CU_ASSERT(i_ro > i_sys && i_ro > i_sec && i_chdir > i_ro);
    /* every mount and file operation comes before the root turns read-only */
    for (int i = i_ro + 2; argv[i] && strcmp(argv[i], "--") != 0; i++)
        CU_ASSERT(strcmp(argv[i], "--chdir") == 0 ||
                  (i > 0 && strcmp(argv[i - 1], "--chdir") == 0));
    /* the seccomp fd is handed over (close-on-exec cleared) and is one of the returned fds */
    {
        uint64_t v = 0;
        int fd, seen = 0;

        CU_ASSERT_EQUAL(util_parse_u64(argv[i_sec + 1], 0, 1u << 20, &v), 0);
        fd = (int)v;
        for (size_t k = 0; k < nfds; k++)
            seen += fds[k] == fd;
        CU_ASSERT_EQUAL(seen, 1);
        CU_ASSERT_EQUAL(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
    }
    for (size_t k = 0; k < nfds; k++)
        close(fds[k]);
    provider_argv_free(argv);
    provider_argv_free(envp);
    json_object_put(sb);
    fstree_remove(ws);
}

/* Run it: what an attacker inside tries, and what a harness needs, from the same shell. */
static void test_local_sandbox_holds_when_run(void)
{
    static const char script[] =
        "r() { \"$@\" >/dev/null 2>&1 && echo yes || echo no; };"
        "echo shadow=$(r head -c1 /etc/shadow);"
        "echo envfile=$(r ls /etc/agent-runner);"
        "echo sysctl=$(r sh -c 'cat /proc/sys/kernel/hostname > /proc/sys/kernel/hostname');"
        "echo userns=$(r unshare -U true);"
        "echo rootfs=$(r touch /evil);"
        "echo etcw=$(r touch /etc/evil);"
        /* /etc's files are copies in the read-only root: not writable, not removable, not
         * re-permissioned, and the same bytes as the host's public file */
        "echo pwdw=$(r sh -c 'echo x >> /etc/passwd');"
        "echo svcw=$(r sh -c 'echo x >> /etc/services');"
        "echo svcrm=$(r rm -f /etc/services);"
        "echo svcmod=$(r chmod 666 /etc/services);"
        "echo svc=$(cksum < /etc/services);"
        "echo usr=$(r touch /usr/evil);"
        "echo tmpcap=$(r dd if=/dev/zero of=/tmp/fill bs=1M count=8);"
        "echo ws=$(r touch /workspace/ok);"
        "echo seccomp=$(grep -c '^Seccomp:.2' /proc/self/status);"
        "echo user=$(id -un);"
        "echo awk=$(awk 'BEGIN{print 7}');"
        "echo certs=$(r test -s /etc/ssl/certs/ca-certificates.crt);";
    json_object *sb = description(script);
    char **argv = NULL, **envp = NULL, err[256] = "", out[1024] = "";
    int fds[64], pipefd[2], status;
    size_t nfds = 0, len = 0;
    ssize_t n;
    pid_t pid;

    if (access("/usr/bin/bwrap", X_OK) != 0) {
        printf("\n    skipped: /usr/bin/bwrap is not installed\n");
        json_object_put(sb);
        return;
    }
    CU_ASSERT_PTR_NOT_NULL_FATAL(sb);
    CU_ASSERT_EQUAL_FATAL(local_sandbox_command("/usr/bin/bwrap", sb, NULL, &argv, &envp, fds, 64,
                                                &nfds, err, sizeof(err)),
                          0);
    CU_ASSERT_EQUAL_FATAL(pipe(pipefd), 0);
    pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        dup2(pipefd[1], STDOUT_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        execve(argv[0], argv, envp);
        _exit(127);
    }
    close(pipefd[1]);
    while (len < sizeof(out) - 1 && (n = read(pipefd[0], out + len, sizeof(out) - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = '\0';
    close(pipefd[0]);
    waitpid(pid, &status, 0);
    for (size_t k = 0; k < nfds; k++)
        close(fds[k]);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "shadow=no\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "envfile=no\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "sysctl=no\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "userns=no\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "rootfs=no\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "etcw=no\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "pwdw=no\n"));
    if (access("/etc/services", R_OK) == 0) {
        char want[128] = "svc=", line[96] = "";
        FILE *f = popen("cksum < /etc/services", "r");

        CU_ASSERT_PTR_NOT_NULL(strstr(out, "svcw=no\n"));
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "svcrm=no\n"));
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "svcmod=no\n"));
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        CU_ASSERT_PTR_NOT_NULL(fgets(line, sizeof(line), f));
        pclose(f);
        strncat(want, line, sizeof(want) - strlen(want) - 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "usr=no\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "tmpcap=no\n")); /* 8 MiB into a 3 MiB /tmp */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "ws=yes\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "seccomp=1\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "user=agent\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "awk=7\n"));
    if (access("/etc/ssl/certs/ca-certificates.crt", R_OK) == 0)
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "certs=yes\n"));
    if (!strstr(out, "userns=no\n") || !strstr(out, "ws=yes\n"))
        printf("\n    sandbox said:\n%s\n", out);
    provider_argv_free(argv);
    provider_argv_free(envp);
    json_object_put(sb);
    fstree_remove(ws);
}

/* No keeper channel socket is bound in (the harness inherits its connection): nothing of the
 * channel's host folder, nothing at /run/agent-runner. */
static void test_local_command_binds_no_keeper_channel(void)
{
    json_object *sb = description("true");
    char **argv = NULL, **envp = NULL, err[256] = "";
    int fds[64];
    size_t nfds = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(sb);
    json_object_object_add(sb, "channel", json_object_new_string("harness"));
    CU_ASSERT_EQUAL_FATAL(local_sandbox_command("/usr/bin/bwrap", sb, NULL, &argv, &envp, fds, 64,
                                                &nfds, err, sizeof(err)),
                          0);
    for (size_t i = 0; argv[i]; i++) {
        CU_ASSERT_PTR_NULL(strstr(argv[i], "/run/agent-runner"));
        CU_ASSERT_PTR_NULL(strstr(argv[i], "channel"));
    }
    for (size_t i = 0; envp[i]; i++)
        CU_ASSERT_PTR_NULL(strstr(envp[i], "RUNNER_CHANNEL"));
    for (size_t i = 0; i < nfds; i++)
        close(fds[i]);
    provider_argv_free(argv);
    provider_argv_free(envp);
    json_object_put(sb);
    fstree_remove(ws);
}

/* With the sandbox's own namespace: --share-net keeps it, /etc carries the keeper's resolver. */
static void test_local_command_with_a_network_namespace(void)
{
    struct local_command_opts opts = {.share_net = true,
                                      .hosts_extra = "10.9.8.7 model.example\n",
                                      .resolv_conf = "nameserver 127.0.0.1\n"};
    json_object *sb = description("true");
    char **argv = NULL, **envp = NULL, err[256] = "";
    int fds[64], seen = 0;
    size_t nfds = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(sb);
    CU_ASSERT_EQUAL_FATAL(local_sandbox_command("/usr/bin/bwrap", sb, &opts, &argv, &envp, fds, 64,
                                                &nfds, err, sizeof(err)),
                          0);
    CU_ASSERT(find(argv, "--share-net", NULL, NULL) > find(argv, "--unshare-all", NULL, NULL));
    for (int i = 0; argv[i]; i++) {
        char text[256] = "";
        ssize_t n;
        uint64_t fd;

        if (strcmp(argv[i], "--file") != 0 || !argv[i + 2] ||
            (strcmp(argv[i + 2], "/etc/hosts") != 0 && strcmp(argv[i + 2], "/etc/resolv.conf")))
            continue;
        CU_ASSERT_EQUAL_FATAL(util_parse_u64(argv[i + 1], 0, 1u << 20, &fd), 0);
        n = pread((int)fd, text, sizeof(text) - 1, 0);
        CU_ASSERT(n > 0);
        text[n > 0 ? n : 0] = '\0';
        if (strcmp(argv[i + 2], "/etc/hosts") == 0) {
            CU_ASSERT_PTR_NOT_NULL(strstr(text, "10.9.8.7 model.example\n"));
        } else {
            CU_ASSERT_STRING_EQUAL(text, "nameserver 127.0.0.1\n");
        }
        seen++;
    }
    CU_ASSERT_EQUAL(seen, 2);
    for (size_t k = 0; k < nfds; k++)
        close(fds[k]);
    provider_argv_free(argv);
    provider_argv_free(envp);
    json_object_put(sb);
    fstree_remove(ws);
}

CU_TestInfo local_tests[] = {
    {"test_local_command_refuses_a_sandbox_without_seccomp",
     test_local_command_refuses_a_sandbox_without_seccomp},
    {"test_local_command_with_a_network_namespace", test_local_command_with_a_network_namespace},
    {"test_local_command_has_the_minimal_host_view", test_local_command_has_the_minimal_host_view},
    {"test_local_sandbox_holds_when_run", test_local_sandbox_holds_when_run},
    {"test_local_command_binds_no_keeper_channel", test_local_command_binds_no_keeper_channel},
    CU_TEST_INFO_NULL,
};
