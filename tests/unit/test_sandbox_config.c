/* sandbox_config: AGENT_RUNNER_SANDBOX_* variables, sizes, CPUs, clear errors. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/config.h"
#include "suites.h"

static const char *const vars[] = {
    "AGENT_RUNNER_SANDBOX_UID_BASE",       "AGENT_RUNNER_SANDBOX_PIDS_MAX",
    "AGENT_RUNNER_SANDBOX_MEMORY_MAX",     "AGENT_RUNNER_SANDBOX_CPUS",
    "AGENT_RUNNER_SANDBOX_DISK_MAX",       "AGENT_RUNNER_SANDBOX_TMP_MAX",
    "AGENT_RUNNER_SANDBOX_HOME_MAX",       "AGENT_RUNNER_REQUIRE_LIMITS",
    "AGENT_RUNNER_SANDBOX_PRIVATE_EGRESS", "AGENT_RUNNER_PORTS",
};

static void clear_vars(void)
{
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
}

static void test_sandbox_config_defaults(void)
{
    struct sandbox_config c;
    char err[256] = "";

    clear_vars();
    CU_ASSERT_EQUAL_FATAL(sandbox_config_load(&c, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(c.uid_base, 2000000000u);
    CU_ASSERT_EQUAL(c.pids_max, 512);
    CU_ASSERT_EQUAL(c.memory_max, 2ull << 30);
    CU_ASSERT_EQUAL(c.cpu_millis, 1000);
    CU_ASSERT_EQUAL(c.disk_max, 2ull << 30);
    CU_ASSERT_EQUAL(c.tmp_max, 512ull << 20);
    CU_ASSERT_EQUAL(c.home_max, 512ull << 20);
    CU_ASSERT_FALSE(c.require_limits);
    CU_ASSERT_FALSE(c.private_egress);
    CU_ASSERT_EQUAL(c.nrunner_ports, 2);
    CU_ASSERT_EQUAL(c.runner_ports[0], 443);
    CU_ASSERT_EQUAL(c.runner_ports[1], 8443);
    CU_ASSERT_EQUAL(sandbox_config_memory_ceiling(&c), (2ull << 30) * 2 + (512ull << 20) * 2 + SANDBOX_SHM_BYTES);
    CU_ASSERT_EQUAL(sandbox_config_disk_inodes(&c), (2ull << 30) / 4096);
}

static void test_sandbox_config_sizes(void)
{
    uint64_t v = 7;

    CU_ASSERT_EQUAL(sandbox_config_parse_size("2G", 0, UINT64_MAX, &v), 0);
    CU_ASSERT_EQUAL(v, 2ull << 30);
    CU_ASSERT_EQUAL(sandbox_config_parse_size("512MiB", 0, UINT64_MAX, &v), 0);
    CU_ASSERT_EQUAL(v, 512ull << 20);
    CU_ASSERT_EQUAL(sandbox_config_parse_size("3KB", 0, UINT64_MAX, &v), 0);
    CU_ASSERT_EQUAL(v, 3072);
    CU_ASSERT_EQUAL(sandbox_config_parse_size("1048576", 0, UINT64_MAX, &v), 0);
    CU_ASSERT_EQUAL(v, 1048576);
    CU_ASSERT_EQUAL(sandbox_config_parse_size("0", 0, UINT64_MAX, &v), 0);
    CU_ASSERT_EQUAL(v, 0);
    v = 7;
    CU_ASSERT_EQUAL(sandbox_config_parse_size("1.5G", 0, UINT64_MAX, &v), -EINVAL);
    CU_ASSERT_EQUAL(sandbox_config_parse_size("2X", 0, UINT64_MAX, &v), -EINVAL);
    CU_ASSERT_EQUAL(sandbox_config_parse_size("-1", 0, UINT64_MAX, &v), -EINVAL);
    CU_ASSERT_EQUAL(sandbox_config_parse_size("", 0, UINT64_MAX, &v), -EINVAL);
    CU_ASSERT_EQUAL(sandbox_config_parse_size("G", 0, UINT64_MAX, &v), -EINVAL);
    CU_ASSERT_EQUAL(sandbox_config_parse_size("99999999999T", 0, UINT64_MAX, &v), -ERANGE);
    CU_ASSERT_EQUAL(sandbox_config_parse_size("1K", 2048, UINT64_MAX, &v), -ERANGE);
    CU_ASSERT_EQUAL(v, 7); /* untouched on failure */
}

static void test_sandbox_config_cpus(void)
{
    uint32_t m = 7;

    CU_ASSERT_EQUAL(sandbox_config_parse_cpus("1", &m), 0);
    CU_ASSERT_EQUAL(m, 1000);
    CU_ASSERT_EQUAL(sandbox_config_parse_cpus("0.5", &m), 0);
    CU_ASSERT_EQUAL(m, 500);
    CU_ASSERT_EQUAL(sandbox_config_parse_cpus("2.125", &m), 0);
    CU_ASSERT_EQUAL(m, 2125);
    CU_ASSERT_EQUAL(sandbox_config_parse_cpus("0", &m), 0);
    CU_ASSERT_EQUAL(m, 0);
    m = 7;
    CU_ASSERT_EQUAL(sandbox_config_parse_cpus("0.1234", &m), -EINVAL);
    CU_ASSERT_EQUAL(sandbox_config_parse_cpus(".5", &m), -EINVAL);
    CU_ASSERT_EQUAL(sandbox_config_parse_cpus("1.", &m), -EINVAL);
    CU_ASSERT_EQUAL(sandbox_config_parse_cpus("one", &m), -EINVAL);
    CU_ASSERT_EQUAL(sandbox_config_parse_cpus("5000", &m), -ERANGE);
    CU_ASSERT_EQUAL(m, 7);
}

static void test_sandbox_config_from_variables(void)
{
    struct sandbox_config c;
    char err[256] = "";

    clear_vars();
    setenv("AGENT_RUNNER_SANDBOX_UID_BASE", "3000000", 1);
    setenv("AGENT_RUNNER_SANDBOX_PIDS_MAX", "0", 1);
    setenv("AGENT_RUNNER_SANDBOX_MEMORY_MAX", "256M", 1);
    setenv("AGENT_RUNNER_SANDBOX_CPUS", "0.25", 1);
    setenv("AGENT_RUNNER_SANDBOX_DISK_MAX", "64M", 1);
    setenv("AGENT_RUNNER_SANDBOX_TMP_MAX", "8M", 1);
    setenv("AGENT_RUNNER_SANDBOX_HOME_MAX", "16M", 1);
    setenv("AGENT_RUNNER_REQUIRE_LIMITS", "true", 1);
    CU_ASSERT_EQUAL_FATAL(sandbox_config_load(&c, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(c.uid_base, 3000000);
    CU_ASSERT_EQUAL(c.pids_max, 0);
    CU_ASSERT_EQUAL(c.memory_max, 256ull << 20);
    CU_ASSERT_EQUAL(c.cpu_millis, 250);
    CU_ASSERT_EQUAL(c.disk_max, 64ull << 20);
    CU_ASSERT_EQUAL(c.tmp_max, 8ull << 20);
    CU_ASSERT_EQUAL(c.home_max, 16ull << 20);
    CU_ASSERT(c.require_limits);
    CU_ASSERT_EQUAL(sandbox_config_memory_ceiling(&c), ((256ull + 64 + 8 + 16) << 20) + SANDBOX_SHM_BYTES);
    clear_vars();
}

static void expect_error(const char *name, const char *value, const char *needle)
{
    struct sandbox_config c;
    char err[256] = "";

    clear_vars();
    setenv(name, value, 1);
    CU_ASSERT_EQUAL(sandbox_config_load(&c, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, name));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
    clear_vars();
}

static void test_sandbox_config_errors_name_the_variable(void)
{
    expect_error("AGENT_RUNNER_SANDBOX_UID_BASE", "abc", "abc");
    expect_error("AGENT_RUNNER_SANDBOX_UID_BASE", "3000000000", "2147483647");
    expect_error("AGENT_RUNNER_SANDBOX_PIDS_MAX", "3", "too few");
    expect_error("AGENT_RUNNER_SANDBOX_MEMORY_MAX", "2X", "not a size");
    expect_error("AGENT_RUNNER_SANDBOX_MEMORY_MAX", "1M", "at least 16M");
    expect_error("AGENT_RUNNER_SANDBOX_DISK_MAX", "lots", "not a size");
    expect_error("AGENT_RUNNER_SANDBOX_TMP_MAX", "0", "outside");
    expect_error("AGENT_RUNNER_SANDBOX_HOME_MAX", "12", "outside");
    expect_error("AGENT_RUNNER_SANDBOX_CPUS", "fast", "fast");
    expect_error("AGENT_RUNNER_REQUIRE_LIMITS", "maybe", "true or false");
}

static void test_sandbox_config_network_settings(void)
{
    struct sandbox_config c;
    char err[256] = "";

    clear_vars();
    setenv("AGENT_RUNNER_SANDBOX_PRIVATE_EGRESS", "true", 1);
    setenv("AGENT_RUNNER_PORTS", "9443,8080", 1);
    CU_ASSERT_EQUAL_FATAL(sandbox_config_load(&c, err, sizeof(err)), 0);
    CU_ASSERT_TRUE(c.private_egress);
    CU_ASSERT_EQUAL(c.nrunner_ports, 2);
    CU_ASSERT_EQUAL(c.runner_ports[0], 9443);
    CU_ASSERT_EQUAL(c.runner_ports[1], 8080);
    setenv("AGENT_RUNNER_PORTS", "443,", 1);
    CU_ASSERT_EQUAL(sandbox_config_load(&c, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENT_RUNNER_PORTS"));
    setenv("AGENT_RUNNER_PORTS", "70000", 1);
    CU_ASSERT_EQUAL(sandbox_config_load(&c, err, sizeof(err)), -EINVAL);
    unsetenv("AGENT_RUNNER_PORTS");
    setenv("AGENT_RUNNER_SANDBOX_PRIVATE_EGRESS", "sometimes", 1);
    CU_ASSERT_EQUAL(sandbox_config_load(&c, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENT_RUNNER_SANDBOX_PRIVATE_EGRESS"));
    clear_vars();
}

CU_TestInfo sandbox_config_tests[] = {
    {"test_sandbox_config_network_settings", test_sandbox_config_network_settings},
    {"test_sandbox_config_defaults", test_sandbox_config_defaults},
    {"test_sandbox_config_sizes", test_sandbox_config_sizes},
    {"test_sandbox_config_cpus", test_sandbox_config_cpus},
    {"test_sandbox_config_from_variables", test_sandbox_config_from_variables},
    {"test_sandbox_config_errors_name_the_variable", test_sandbox_config_errors_name_the_variable},
    CU_TEST_INFO_NULL,
};
