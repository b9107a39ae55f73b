/* env_setup: the environment folder, and the workspace files a request asks for. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fstree.h"
#include "base/util.h"
#include "environment/env_setup.h"
#include "request/request.h"
#include "suites.h"

static char state[64];

static void make_state(void)
{
    /* mkdtemp's template ends in six 'X' placeholders */
    int n = snprintf(state, sizeof(state), "/tmp/ar-unit-env-");

    memset(state + n, 'X', 6);
    state[n + 6] = '\0';
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(state));
}

static int parse(const char *json, struct run_request *req)
{
    struct request_limits lim;
    char err[256];

    request_limits_default(&lim);
    lim.allow_scripted = true;
    return request_parse(json, strlen(json), &lim, req, err, sizeof(err));
}

static char *slurp(const char *dir, const char *rel)
{
    char path[512], *data = NULL;

    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    if (util_read_file(path, 1 << 20, &data, NULL) < 0)
        return NULL;
    return data;
}

static void test_env_setup_creates_private_folders(void)
{
    struct env_paths p;
    struct stat st;
    char err[256];

    make_state();
    CU_ASSERT_EQUAL_FATAL(env_setup_create(state, &p, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(stat(p.dir, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0700);
    CU_ASSERT_EQUAL(stat(p.workspace, &st), 0);
    CU_ASSERT(S_ISDIR(st.st_mode));
    CU_ASSERT(strncmp(p.socket, p.dir, strlen(p.dir)) == 0);
    CU_ASSERT_EQUAL(strlen(p.id), 16);
    fstree_remove(state);
}

static void test_env_setup_agents_md_name_follows_the_harness(void)
{
    struct run_request req;
    struct env_paths p;
    char err[256], *text;

    make_state();
    CU_ASSERT_EQUAL_FATAL(env_setup_create(state, &p, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(parse("{\"harness\":\"claude\",\"agentsMd\":\"be brief\"}", &req), 0);
    CU_ASSERT_EQUAL(env_setup_workspace(&p, &req, err, sizeof(err)), 0);
    text = slurp(p.workspace, "CLAUDE.md");
    CU_ASSERT_STRING_EQUAL(TEST_STR(text), "be brief");
    free(text);
    CU_ASSERT_PTR_NULL(slurp(p.workspace, "AGENTS.md"));
    run_request_release(&req);
    CU_ASSERT_EQUAL_FATAL(parse("{\"harness\":\"codex\",\"agentsMd\":\"hi\"}", &req), 0);
    CU_ASSERT_EQUAL(env_setup_workspace(&p, &req, err, sizeof(err)), 0);
    text = slurp(p.workspace, "AGENTS.md");
    CU_ASSERT_STRING_EQUAL(TEST_STR(text), "hi");
    free(text);
    run_request_release(&req);
    fstree_remove(state);
}

static void test_env_setup_skills_and_harness_files(void)
{
    struct run_request req;
    struct env_paths p;
    char err[256], *text;
    struct stat st;

    make_state();
    CU_ASSERT_EQUAL_FATAL(env_setup_create(state, &p, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(
        parse("{\"harness\":\"pi_core\",\"harnessFiles\":[{\"path\":\".cfg/a.json\","
              "\"content\":\"{}\"}],\"skills\":[{\"name\":\"notes\",\"description\":\"d\","
              "\"body\":\"B\",\"allowExecutableFiles\":true,\"files\":[{\"path\":"
              "\"bin/run.sh\",\"content\":\"echo\",\"executable\":true}]}]}",
              &req),
        0);
    CU_ASSERT_EQUAL(env_setup_workspace(&p, &req, err, sizeof(err)), 0);
    text = slurp(p.workspace, ".cfg/a.json");
    CU_ASSERT_STRING_EQUAL(TEST_STR(text), "{}");
    free(text);
    text = slurp(p.workspace, ".agents/skills/notes/SKILL.md");
    CU_ASSERT_PTR_NOT_NULL(text);
    CU_ASSERT(text && strstr(text, "name: notes") && strstr(text, "\nB\n"));
    free(text);
    {
        char path[512];
        snprintf(path, sizeof(path), "%s/.agents/skills/notes/bin/run.sh", p.workspace);
        CU_ASSERT_EQUAL(stat(path, &st), 0);
        CU_ASSERT(st.st_mode & S_IXUSR);
    }
    run_request_release(&req);
    fstree_remove(state);
}

/* A symlink left in a warm workspace must not redirect a later write out of it. */
static void test_env_setup_refuses_writes_through_symlinks(void)
{
    struct run_request req;
    struct env_paths p;
    char err[256], link[512], outside[128];

    make_state();
    snprintf(outside, sizeof(outside), "%s/outside", state);
    CU_ASSERT_EQUAL_FATAL(mkdir(outside, 0755), 0);
    CU_ASSERT_EQUAL_FATAL(env_setup_create(state, &p, err, sizeof(err)), 0);
    snprintf(link, sizeof(link), "%s/.claude", p.workspace);
    CU_ASSERT_EQUAL_FATAL(symlink(outside, link), 0);
    CU_ASSERT_EQUAL_FATAL(parse("{\"harness\":\"claude\",\"harnessFiles\":[{\"path\":"
                                "\".claude/settings.json\",\"content\":\"x\"}]}",
                                &req),
                          0);
    CU_ASSERT_EQUAL(env_setup_workspace(&p, &req, err, sizeof(err)), AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "harnessFiles[0]"));
    {
        char path[256];
        snprintf(path, sizeof(path), "%s/settings.json", outside);
        CU_ASSERT_EQUAL(access(path, F_OK), -1);
    }
    run_request_release(&req);
    fstree_remove(state);
}

/*
 * A FIFO (or any non-regular file) the sandbox planted where the runner writes (a warm
 * workspace: platform attachments) must fail the write, not block the writer forever on an
 * open that waits for a reader. Run in a child with an alarm so that a hang fails the test.
 */
static void test_write_beneath_refuses_a_fifo(void)
{
    char dir[128], fifo[256];
    pid_t pid;
    int status = 0;

    make_state();
    snprintf(dir, sizeof(dir), "%s/attachments", state);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    snprintf(fifo, sizeof(fifo), "%s/report.pdf", dir);
    CU_ASSERT_EQUAL_FATAL(mkfifo(fifo, 0666), 0);
    pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        int r;

        alarm(10);
        r = util_write_file_beneath(state, "attachments/report.pdf", "x", 1, 0644);
        _exit(r < 0 ? 0 : 1);
    }
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (WIFSIGNALED(status))
        fprintf(stderr, "util_write_file_beneath blocked on a FIFO (signal %d)\n",
                WTERMSIG(status));
    fstree_remove(state);
}

CU_TestInfo env_setup_tests[] = {
    {"test_write_beneath_refuses_a_fifo", test_write_beneath_refuses_a_fifo},
    {"test_env_setup_creates_private_folders", test_env_setup_creates_private_folders},
    {"test_env_setup_agents_md_name_follows_the_harness",
     test_env_setup_agents_md_name_follows_the_harness},
    {"test_env_setup_skills_and_harness_files", test_env_setup_skills_and_harness_files},
    {"test_env_setup_refuses_writes_through_symlinks",
     test_env_setup_refuses_writes_through_symlinks},
    CU_TEST_INFO_NULL,
};
