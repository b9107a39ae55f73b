/* log — JSON lines on stderr, scrubbed of the thread's secrets; never a silent drop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "suites.h"

/* What log_debug(fmt...) writes, captured from fd 2 into a malloc'ed string. */
static char *capture_line(const char *msg)
{
    FILE *tmp = tmpfile();
    int saved = dup(STDERR_FILENO), level = log_max_level;
    char *out = NULL;
    long n;

    if (!tmp || saved < 0)
        return NULL;
    fflush(stderr);
    dup2(fileno(tmp), STDERR_FILENO);
    log_max_level = LOG_LEVEL_DEBUG;
    log_debug("%s", msg);
    log_max_level = level;
    dup2(saved, STDERR_FILENO);
    close(saved);
    n = ftell(tmp);
    if (n >= 0 && fseek(tmp, 0, SEEK_SET) == 0) {
        out = calloc(1, (size_t)n + 1);
        if (out && fread(out, 1, (size_t)n, tmp) != (size_t)n) {
            free(out);
            out = NULL;
        }
    }
    fclose(tmp);
    return out;
}

/* a request with more than 32 credentials (the old per-thread cap): every one is scrubbed */
static void test_log_redacts_more_than_32_secrets(void)
{
    char secrets[100][32], msg[4096] = "";
    size_t used = 0;
    char *line;

    for (int i = 0; i < 100; i++) {
        int n;

        snprintf(secrets[i], sizeof(secrets[i]), "secret-%03d-value", i);
        log_redact_add(secrets[i]);
        n = snprintf(msg + used, sizeof(msg) - used, "%s ", secrets[i]);
        CU_ASSERT_FATAL(n > 0 && (size_t)n < sizeof(msg) - used);
        used += (size_t)n;
    }
    line = capture_line(msg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(line);
    for (int i = 0; i < 100; i++)
        CU_ASSERT_PTR_NULL(strstr(line, secrets[i]));
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "[redacted]"));
    free(line);
    log_redact_clear();
    line = capture_line("secret-000-value");
    CU_ASSERT_PTR_NOT_NULL(line && strstr(line, "secret-000-value"));
    free(line);
}

/* past the cap the thread's lines are withheld, never written with a secret in them */
static void test_log_withholds_lines_when_a_secret_cannot_be_kept(void)
{
    char s[32], *line, *copy;

    for (int i = 0; i < 1100; i++) {
        snprintf(s, sizeof(s), "cap-secret-%04d", i);
        log_redact_add(s);
    }
    line = capture_line("leaking cap-secret-1099 here");
    CU_ASSERT_PTR_NOT_NULL_FATAL(line);
    CU_ASSERT_PTR_NULL(strstr(line, "cap-secret-1099"));
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "withheld"));
    free(line);
    copy = log_redact_copy("cap-secret-1099", 100);
    CU_ASSERT_PTR_NOT_NULL_FATAL(copy);
    CU_ASSERT_PTR_NULL(strstr(copy, "cap-secret-1099"));
    free(copy);
    log_redact_clear();
    line = capture_line("fine again");
    CU_ASSERT_PTR_NOT_NULL(line && strstr(line, "fine again"));
    free(line);
}

/* at most per_s lines a second; the next second hands back how many were not logged */
static void test_log_budget_takes_per_s_lines_a_second(void)
{
    struct log_budget b = {0};
    uint64_t dropped = 99;

    CU_ASSERT_TRUE(log_budget_take(&b, 2, &dropped));
    CU_ASSERT_EQUAL(dropped, 0);
    CU_ASSERT_TRUE(log_budget_take(&b, 2, &dropped));
    CU_ASSERT_FALSE(log_budget_take(&b, 2, &dropped));
    CU_ASSERT_FALSE(log_budget_take(&b, 2, &dropped));
    CU_ASSERT_EQUAL(dropped, 0);
    CU_ASSERT_EQUAL(b.logged, 2);
    CU_ASSERT_EQUAL(b.dropped, 2);
    b.window_ms -= 1000; /* a second later */
    CU_ASSERT_TRUE(log_budget_take(&b, 2, &dropped));
    CU_ASSERT_EQUAL(dropped, 2);
    CU_ASSERT_EQUAL(b.logged, 1);
    CU_ASSERT_EQUAL(b.dropped, 0);
    b.window_ms -= 1000;
    CU_ASSERT_TRUE(log_budget_take(&b, 2, &dropped));
    CU_ASSERT_EQUAL(dropped, 0);
}

CU_TestInfo log_tests[] = {
    {"test_log_budget_takes_per_s_lines_a_second", test_log_budget_takes_per_s_lines_a_second},
    {"test_log_redacts_more_than_32_secrets", test_log_redacts_more_than_32_secrets},
    {"test_log_withholds_lines_when_a_secret_cannot_be_kept",
     test_log_withholds_lines_when_a_secret_cannot_be_kept},
    CU_TEST_INFO_NULL,
};
