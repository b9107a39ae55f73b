/*
 * env_link: a warm turn's attach without waiting for the keeper's hello
 * (environment_attach_ahead + environment_recv), against a listening unix socket that plays
 * the keeper.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "base/util.h"
#include "core/contracts.h"
#include "engine.h"
#include "environment/env_link.h"
#include "proto/acp.h"
#include "suites.h"

struct fake_keeper {
    char dir[64];
    int listen_fd;
    struct engine_config cfg; /* no sandbox: environment_recv waits for the turn's deadline */
    struct environment *env;
};

static int keeper_open(struct fake_keeper *k)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};

    memset(k, 0, sizeof(*k));
    snprintf(k->dir, sizeof(k->dir), "/tmp/ar-envlink.XXXXXX");
    if (!mkdtemp(k->dir))
        return -1;
    k->env = environment_new(&k->cfg);
    if (!k->env)
        return -1;
    snprintf(k->env->paths.socket, sizeof(k->env->paths.socket), "%s/keeper.sock", k->dir);
    memcpy(sa.sun_path, k->env->paths.socket, strlen(k->env->paths.socket) + 1);
    k->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (k->listen_fd < 0 || bind(k->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(k->listen_fd, 4) < 0)
        return -1;
    return 0;
}

static void keeper_close(struct fake_keeper *k)
{
    environment_free(k->env);
    if (k->listen_fd > 0)
        close(k->listen_fd);
    if (k->env || k->dir[0]) {
        char path[128];
        snprintf(path, sizeof(path), "%s/keeper.sock", k->dir);
        unlink(path);
        rmdir(k->dir);
    }
}

/* What the worker sent before the keeper said anything: read from the accepted connection. */
static ssize_t read_some(int fd, char *out, size_t cap)
{
    ssize_t n = read(fd, out, cap - 1);

    out[n > 0 ? n : 0] = '\0';
    return n;
}

static bool say(int fd, const char *text)
{
    return util_write_all(fd, text, strlen(text)) == 0;
}

static void test_env_link_attach_ahead_takes_the_hello_first(void)
{
    struct fake_keeper k;
    struct buf line;
    struct acp_msg m;
    char got[256], err[128];
    int c, r;

    CU_ASSERT_EQUAL_FATAL(keeper_open(&k), 0);
    k.env->keeper_pid = 11; /* the session table's, until the hello */
    CU_ASSERT_EQUAL_FATAL(environment_attach_ahead(k.env, util_now_ms() + 5000, err, sizeof(err)),
                          0);
    CU_ASSERT_TRUE(k.env->hello_pending);
    /* the prompt goes out before the keeper accepted or said hello */
    buf_init(&line, 4096);
    CU_ASSERT_EQUAL(buf_append_str(&line, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"x\"}\n"), 0);
    CU_ASSERT_EQUAL(environment_send(k.env, &line), 0);
    buf_release(&line);
    c = accept(k.listen_fd, NULL, NULL);
    CU_ASSERT_FATAL(c >= 0);
    CU_ASSERT(read_some(c, got, sizeof(got)) > 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(got, "\"id\":7"));
    /* the hello, then the harness's answer, in one write */
    CU_ASSERT(say(c, "#hello 4242 4343\n{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n"));
    memset(&m, 0, sizeof(m));
    r = environment_recv(k.env, util_now_ms() + 5000, &m);
    CU_ASSERT_EQUAL(r, 0);
    CU_ASSERT_EQUAL(json_object_get_int64(m.id), 7);
    acp_msg_release(&m);
    CU_ASSERT_FALSE(k.env->hello_pending);
    CU_ASSERT_EQUAL(k.env->keeper_pid, 4242);
    CU_ASSERT_EQUAL(k.env->sandbox_pid, 4343);
    close(c);
    keeper_close(&k);
}

static void test_env_link_attach_ahead_refused_or_silent_is_a_lost_keeper(void)
{
    struct fake_keeper k;
    struct acp_msg m;
    char err[128];
    int64_t t0;
    int c;

    /* "#busy": another worker is attached, the keeper closes the connection unread */
    CU_ASSERT_EQUAL_FATAL(keeper_open(&k), 0);
    CU_ASSERT_EQUAL_FATAL(environment_attach_ahead(k.env, util_now_ms() + 5000, err, sizeof(err)),
                          0);
    c = accept(k.listen_fd, NULL, NULL);
    CU_ASSERT_FATAL(c >= 0);
    CU_ASSERT(say(c, "#busy\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n"));
    close(c);
    memset(&m, 0, sizeof(m));
    CU_ASSERT_EQUAL(environment_recv(k.env, util_now_ms() + 5000, &m), AR_E_KEEPER_LOST);
    CU_ASSERT_TRUE(k.env->keeper_lost);
    keeper_close(&k);

    /* a keeper that accepts and never answers: lost at the hello's deadline, not the turn's */
    CU_ASSERT_EQUAL_FATAL(keeper_open(&k), 0);
    t0 = util_now_ms();
    CU_ASSERT_EQUAL_FATAL(environment_attach_ahead(k.env, t0 + 200, err, sizeof(err)), 0);
    c = accept(k.listen_fd, NULL, NULL);
    CU_ASSERT_FATAL(c >= 0);
    CU_ASSERT_EQUAL(environment_recv(k.env, t0 + 600000, &m), AR_E_KEEPER_LOST);
    CU_ASSERT(util_now_ms() - t0 < 60000); /* the hello's 200 ms, not the turn's 10 minutes */
    close(c);
    keeper_close(&k);
}

/* A prompt larger than a socket's buffer waits for the hello first: a keeper that accepts
 * nothing cannot leave it blocked past the hello's deadline. */
static void test_env_link_big_write_waits_for_the_hello(void)
{
    struct fake_keeper k;
    struct buf line;
    char err[128];
    int64_t t0;

    CU_ASSERT_EQUAL_FATAL(keeper_open(&k), 0);
    t0 = util_now_ms();
    CU_ASSERT_EQUAL_FATAL(environment_attach_ahead(k.env, t0 + 300, err, sizeof(err)), 0);
    buf_init(&line, 8u << 20);
    for (int i = 0; i < 64 * 1024; i++)
        CU_ASSERT_EQUAL_FATAL(buf_append_str(&line, "0123456789abcdef"), 0); /* 1 MiB */
    CU_ASSERT_EQUAL(buf_append_char(&line, '\n'), 0);
    CU_ASSERT_EQUAL(environment_send(k.env, &line), AR_E_KEEPER_LOST); /* never accepted */
    CU_ASSERT(util_now_ms() - t0 < 60000);
    buf_release(&line);
    keeper_close(&k);
}

CU_TestInfo env_link_tests[] = {
    {"test_env_link_big_write_waits_for_the_hello", test_env_link_big_write_waits_for_the_hello},
    {"test_env_link_attach_ahead_takes_the_hello_first",
     test_env_link_attach_ahead_takes_the_hello_first},
    {"test_env_link_attach_ahead_refused_or_silent_is_a_lost_keeper",
     test_env_link_attach_ahead_refused_or_silent_is_a_lost_keeper},
    CU_TEST_INFO_NULL,
};
