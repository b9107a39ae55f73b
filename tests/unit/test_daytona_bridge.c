/*
 * daytona_bridge — what can be checked without a sandbox: the env file and the launcher (run
 * for real with /bin/sh: hostile values stay literal, argv arrives intact, the environment is
 * exactly the file's). The relay itself runs in tests/integration.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fstree.h"
#include "base/util.h"
#include "provider/daytona/daytona_bridge.h"
#include "suites.h"

/* Run `sh launcher` in dir (the env file at dir/harness.env) and capture its stdout. */
static int run_sh(const char *dir, const char *script, const char *envfile, char *out,
                  size_t outlen)
{
    char path[512], envp[512];
    int pfd[2], status;
    ssize_t n, got = 0;
    pid_t pid;

    snprintf(path, sizeof(path), "%s/launch.sh", dir);
    snprintf(envp, sizeof(envp), "%s/harness.env", dir);
    if (util_write_file(path, script, strlen(script), 0700) < 0 ||
        util_write_file(envp, envfile, strlen(envfile), 0600) < 0 || pipe(pfd) < 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        char *const argv[] = {"env", "-i", "/bin/sh", path, NULL};

        dup2(pfd[1], 1);
        close(pfd[0]);
        execv("/usr/bin/env", argv);
        _exit(127);
    }
    close(pfd[1]);
    while ((n = read(pfd[0], out + got, outlen - 1 - (size_t)got)) > 0)
        got += n;
    out[got] = '\0';
    close(pfd[0]);
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_daytona_bridge_env_and_launcher_run(void)
{
    char dir[] = "/tmp/ar-unit-bridge-XXXXXX", envpath[600], out[4096], err[256];
    json_object *env = json_object_new_object(), *argv = json_object_new_array();
    struct buf envf, launch;

    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
    snprintf(envpath, sizeof(envpath), "%s/harness.env", dir);
    json_object_object_add(env, "PATH", json_object_new_string("/usr/bin:/bin"));
    json_object_object_add(env, "SECRET", json_object_new_string("x'; touch /tmp/pwned; '\n$HOME"));
    json_object_object_add(env, "EMPTY", json_object_new_string(""));
    json_object_array_add(argv, json_object_new_string("/usr/bin/env"));
    buf_init(&envf, 1u << 20);
    buf_init(&launch, 1u << 20);
    CU_ASSERT_EQUAL(daytona_bridge_env_file(env, &envf, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(daytona_bridge_launcher(envpath, argv, dir, &launch, err, sizeof(err)), 0);
    /* the harness sees exactly the file's environment (plus what sh itself sets) */
    CU_ASSERT_EQUAL(run_sh(dir, buf_str(&launch), buf_str(&envf), out, sizeof(out)), 0);
    CU_ASSERT(strstr(out, "SECRET=x'; touch /tmp/pwned; '\n$HOME\n") != NULL);
    CU_ASSERT(strstr(out, "EMPTY=\n") != NULL);
    CU_ASSERT(strstr(out, "PATH=/usr/bin:/bin\n") != NULL);
    CU_ASSERT(strstr(out, "HOME=") == NULL); /* env -i: nothing inherited */
    CU_ASSERT(access("/tmp/pwned", F_OK) != 0);
    /* argv words arrive intact */
    json_object_put(argv);
    argv = json_object_new_array();
    json_object_array_add(argv, json_object_new_string("printf"));
    json_object_array_add(argv, json_object_new_string("[%s]"));
    json_object_array_add(argv, json_object_new_string("a b"));
    json_object_array_add(argv, json_object_new_string("c'd"));
    json_object_array_add(argv, json_object_new_string("$SECRET"));
    buf_reset(&launch);
    CU_ASSERT_EQUAL(daytona_bridge_launcher(envpath, argv, dir, &launch, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(run_sh(dir, buf_str(&launch), buf_str(&envf), out, sizeof(out)), 0);
    CU_ASSERT_STRING_EQUAL(out, "[a b][c'd][$SECRET]");
    /* the working directory is created */
    {
        char sub[600];

        snprintf(sub, sizeof(sub), "%s/work/space", dir);
        json_object_put(argv);
        argv = json_object_new_array();
        json_object_array_add(argv, json_object_new_string("pwd"));
        buf_reset(&launch);
        CU_ASSERT_EQUAL(daytona_bridge_launcher(envpath, argv, sub, &launch, err, sizeof(err)), 0);
        CU_ASSERT_EQUAL(run_sh(dir, buf_str(&launch), buf_str(&envf), out, sizeof(out)), 0);
        CU_ASSERT(strncmp(out, sub, strlen(sub)) == 0);
    }
    json_object_put(env);
    json_object_put(argv);
    buf_release(&envf);
    buf_release(&launch);
    (void)fstree_remove(dir);
}

static void test_daytona_bridge_rejects_bad_specs(void)
{
    json_object *env = json_object_new_object(), *argv = json_object_new_array();
    struct buf b;
    char err[256];

    buf_init(&b, 1u << 20);
    json_object_object_add(env, "BAD NAME", json_object_new_string("x"));
    CU_ASSERT_EQUAL(daytona_bridge_env_file(env, &b, err, sizeof(err)), -EINVAL);
    CU_ASSERT(strstr(err, "BAD NAME") != NULL);
    json_object_put(env);
    env = json_object_new_object();
    json_object_object_add(env, "N", json_object_new_int(3));
    CU_ASSERT_EQUAL(daytona_bridge_env_file(env, &b, err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(daytona_bridge_launcher("/x/harness.env", argv, "/w", &b, err, sizeof(err)),
                    -EINVAL); /* empty argv */
    json_object_array_add(argv, json_object_new_string("node"));
    CU_ASSERT_EQUAL(daytona_bridge_launcher("/x/harness.env", argv, "w", &b, err, sizeof(err)),
                    -EINVAL); /* relative cwd */
    CU_ASSERT_EQUAL(
        daytona_bridge_launcher("/x/harness.env", argv, "/a/../b", &b, err, sizeof(err)), -EINVAL);
    json_object_array_add(argv, json_object_new_int(1));
    CU_ASSERT_EQUAL(daytona_bridge_launcher("/x/harness.env", argv, "/w", &b, err, sizeof(err)),
                    -EINVAL);
    json_object_put(env);
    json_object_put(argv);
    buf_release(&b);
}

CU_TestInfo daytona_bridge_tests[] = {
    {"test_daytona_bridge_env_and_launcher_run", test_daytona_bridge_env_and_launcher_run},
    {"test_daytona_bridge_rejects_bad_specs", test_daytona_bridge_rejects_bad_specs},
    CU_TEST_INFO_NULL,
};
