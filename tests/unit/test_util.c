/* util — the small shared helpers: plain names, byte classes, clocks, fd flags, the sleep. */
#include <fcntl.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "suites.h"

static void test_util_plain_name_takes_only_plain_names(void)
{
    char long_name[80];

    CU_ASSERT_TRUE(util_plain_name("a", 1));
    CU_ASSERT_TRUE(util_plain_name("sb-1_x.Y", 64));
    CU_ASSERT_TRUE(util_plain_name("...", 3));
    CU_ASSERT_FALSE(util_plain_name(NULL, 64));
    CU_ASSERT_FALSE(util_plain_name("", 64));
    CU_ASSERT_FALSE(util_plain_name(".", 64));
    CU_ASSERT_FALSE(util_plain_name("..", 64));
    CU_ASSERT_FALSE(util_plain_name("a/b", 64));
    CU_ASSERT_FALSE(util_plain_name("a b", 64));
    CU_ASSERT_FALSE(util_plain_name("a\n", 64));
    CU_ASSERT_FALSE(util_plain_name("caf\xc3\xa9", 64));
    memset(long_name, 'x', 64);
    long_name[64] = '\0';
    CU_ASSERT_TRUE(util_plain_name(long_name, 64));
    CU_ASSERT_FALSE(util_plain_name(long_name, 63));
}

static void test_util_has_ctl_and_visible_tell_the_bytes_apart(void)
{
    CU_ASSERT_FALSE(util_has_ctl(""));
    CU_ASSERT_FALSE(util_has_ctl("a b\xc3\xa9"));
    CU_ASSERT_TRUE(util_has_ctl("a\tb"));
    CU_ASSERT_TRUE(util_has_ctl("a\x7f"));
    CU_ASSERT_TRUE(util_visible(""));
    CU_ASSERT_TRUE(util_visible("https://x/y?z=1\xc3\xa9"));
    CU_ASSERT_FALSE(util_visible("a b"));
    CU_ASSERT_FALSE(util_visible("a\n"));
    CU_ASSERT_FALSE(util_visible("\x7f"));
}

static void test_util_set_nonblock_adds_the_flag(void)
{
    int fds[2];

    CU_ASSERT_EQUAL_FATAL(pipe(fds), 0);
    CU_ASSERT_FALSE(fcntl(fds[0], F_GETFL) & O_NONBLOCK);
    util_set_nonblock(fds[0]);
    CU_ASSERT_TRUE(fcntl(fds[0], F_GETFL) & O_NONBLOCK);
    util_set_nonblock(-1); /* nothing */
    close(fds[0]);
    close(fds[1]);
}

static void test_util_wall_ns_is_the_wall_clock(void)
{
    int64_t ms = util_wall_ms(), ns = util_wall_ns();

    CU_ASSERT_TRUE(ns / 1000000 >= ms && ns / 1000000 - ms < 60000); /* not the monotonic one */
}

static void test_util_sleep_ms_sleeps_at_least_that_long(void)
{
    int64_t t0 = util_now_ms();

    util_sleep_ms(20);
    CU_ASSERT_TRUE(util_now_ms() - t0 >= 20);
    t0 = util_now_ms();
    util_sleep_ms(0);
    util_sleep_ms(-5);
    CU_ASSERT_TRUE(util_now_ms() - t0 < 20);
}

static void test_util_deadline_ts_splits_the_milliseconds(void)
{
    struct timespec ts;

    util_deadline_ts(12345, &ts);
    CU_ASSERT_EQUAL(ts.tv_sec, 12);
    CU_ASSERT_EQUAL(ts.tv_nsec, 345000000);
    util_deadline_ts(7000, &ts);
    CU_ASSERT_EQUAL(ts.tv_sec, 7);
    CU_ASSERT_EQUAL(ts.tv_nsec, 0);
}

/* The per-thread random page: no two draws repeat, and a forked child draws other bytes than
 * its parent's next ones (the page is wiped in the child). */
static void test_util_random_bytes_differ_across_draws_and_fork(void)
{
    uint8_t a[16], b[16], mine[16], child[16];
    int fds[2], status = 0;
    pid_t pid;

    CU_ASSERT_EQUAL(util_random_bytes(a, sizeof(a)), 0);
    CU_ASSERT_EQUAL(util_random_bytes(b, sizeof(b)), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, sizeof(a)), 0);
    for (int i = 0; i < 600; i++) /* past a refill of the page */
        CU_ASSERT_EQUAL(util_random_bytes(a, sizeof(a)), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, sizeof(a)), 0);
    CU_ASSERT_EQUAL_FATAL(pipe(fds), 0);
    pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        uint8_t c[16];

        _exit(util_random_bytes(c, sizeof(c)) == 0 && write(fds[1], c, sizeof(c)) == 16 ? 0 : 1);
    }
    CU_ASSERT_EQUAL(util_random_bytes(mine, sizeof(mine)), 0);
    CU_ASSERT_EQUAL(read(fds[0], child, sizeof(child)), 16);
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CU_ASSERT_NOT_EQUAL(memcmp(mine, child, sizeof(mine)), 0);
    close(fds[0]);
    close(fds[1]);
}

CU_TestInfo util_tests[] = {
    {"test_util_random_bytes_differ_across_draws_and_fork",
     test_util_random_bytes_differ_across_draws_and_fork},
    {"test_util_deadline_ts_splits_the_milliseconds",
     test_util_deadline_ts_splits_the_milliseconds},
    {"test_util_plain_name_takes_only_plain_names", test_util_plain_name_takes_only_plain_names},
    {"test_util_has_ctl_and_visible_tell_the_bytes_apart",
     test_util_has_ctl_and_visible_tell_the_bytes_apart},
    {"test_util_set_nonblock_adds_the_flag", test_util_set_nonblock_adds_the_flag},
    {"test_util_wall_ns_is_the_wall_clock", test_util_wall_ns_is_the_wall_clock},
    {"test_util_sleep_ms_sleeps_at_least_that_long", test_util_sleep_ms_sleeps_at_least_that_long},
    CU_TEST_INFO_NULL,
};
