/*
 * sandbox_config — the limits and host identity of local sandboxes, from the environment of
 * agent-runnerd. Every value is checked at start-up; a bad one stops the runner with a
 * message naming the variable.
 *
 *   AGENT_RUNNER_SANDBOX_UID_BASE   2000000000  first host uid/gid of sandboxes; the
 *                                   environment in session slot i runs as base + i (see
 *                                   sandbox/uid.h for why this default and what is refused)
 *   AGENT_RUNNER_SANDBOX_PIDS_MAX   512         tasks (processes + threads) per sandbox
 *   AGENT_RUNNER_SANDBOX_MEMORY_MAX 2G          memory of the sandbox's processes, no swap
 *   AGENT_RUNNER_SANDBOX_CPUS       1           CPU bandwidth in CPUs (0.5, 2, ...)
 *   AGENT_RUNNER_SANDBOX_DISK_MAX   2G          size of the /workspace file system
 *   AGENT_RUNNER_SANDBOX_TMP_MAX    512M        size of /tmp
 *   AGENT_RUNNER_SANDBOX_HOME_MAX   512M        size of the home folder
 *   AGENT_RUNNER_REQUIRE_LIMITS     false       refuse to start when the host cannot enforce
 *                                               one of the limits above
 *   AGENT_RUNNER_SANDBOX_PRIVATE_EGRESS false   under network mode "on", let sandboxes reach
 *                                               private ranges (RFC 1918, ...) as well
 *   AGENT_RUNNER_PORTS              443,8443    the TCP ports the runner is served on (nginx):
 *                                               never reachable from a sandbox on a local
 *                                               address, even when an allowlist names it
 *
 * Sizes are bytes, or a whole number with K, M, G or T (powers of 1024; "KiB"/"KB" spellings
 * are accepted too). 0 turns the pids, memory, CPU or disk limit off. The workspace, /tmp,
 * home and /dev/shm (SANDBOX_SHM_BYTES; /dev itself is read-only) are RAM-backed (tmpfs) and
 * charged to the sandbox's memory cgroup, so the cgroup's
 * ceiling is sandbox_config_memory_ceiling(): processes always get MEMORY_MAX, and the whole
 * sandbox can never pin more than that sum.
 */
#ifndef AR_SANDBOX_CONFIG_H
#define AR_SANDBOX_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* /dev/shm's size: POSIX shared memory and semaphores, not a place for files */
#define SANDBOX_SHM_BYTES (64ull * 1024 * 1024)

#define SANDBOX_UID_BASE_DEFAULT 2000000000u
#define SANDBOX_RUNNER_PORTS_MAX 16

struct sandbox_config {
    uint32_t uid_base;
    uint64_t pids_max;   /* 0: no limit */
    uint64_t memory_max; /* bytes; 0: no limit */
    uint32_t cpu_millis; /* thousandths of a CPU; 0: no limit */
    uint64_t disk_max;   /* bytes; 0: no disk cap (the workspace is a plain folder) */
    uint64_t tmp_max;    /* bytes, >= 1 MiB */
    uint64_t home_max;   /* bytes, >= 1 MiB */
    bool require_limits;
    bool private_egress;
    size_t nrunner_ports;
    uint16_t runner_ports[SANDBOX_RUNNER_PORTS_MAX];
};

/* The defaults above (what sandbox_config_load gives with no variable set). */
void sandbox_config_default(struct sandbox_config *ret);

/* Read the AGENT_RUNNER_SANDBOX_* variables, AGENT_RUNNER_REQUIRE_LIMITS and AGENT_RUNNER_PORTS. */
int sandbox_config_load(struct sandbox_config *ret, char *err, size_t errlen);

/* "2G", "512M", "1048576", "3KiB" -> bytes in [min, max]. -EINVAL on junk, -ERANGE outside. */
int sandbox_config_parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *ret);

/* "1", "0.5", "2.25" -> thousandths of a CPU in [0, 1024000]. At most three decimals. */
int sandbox_config_parse_cpus(const char *s, uint32_t *ret);

/*
 * memory.max of the sandbox's cgroup: memory_max plus the tmpfs sizes (workspace, /tmp,
 * home), whose pages are charged to it. 0 when memory_max is 0.
 */
uint64_t sandbox_config_memory_ceiling(const struct sandbox_config *cfg);

/* tmpfs inode cap for the workspace: one inode per 4 KiB of disk_max, at least 4096. */
uint64_t sandbox_config_disk_inodes(const struct sandbox_config *cfg);

#endif
