/*
 * config — the runner's settings, read once from the environment at start-up (one table:
 * name, kind, default, range) and read-only afterwards. Invalid values are fatal; every
 * effective value except the token is logged at start-up.
 *
 * The engine gets its part as a struct engine_config (config.engine): the plain numbers and
 * paths from the table, the rest read by engine_config_read (engine.h) through the same
 * environment; nothing under engine/ calls getenv(3).
 */
#ifndef AR_CONFIG_H
#define AR_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

struct runner_config {
    char *token;
    uint64_t max_body;
    uint64_t max_small_body;
    uint64_t max_concurrent_runs;
    uint64_t workers;
    uint64_t threads;
    /* admission (config_admission): runs one worker admits, and over all workers */
    uint64_t worker_runs_max;
    uint64_t runs_max;
    uint64_t slots;
    uint64_t drain_ms;
    char *state_dir;
    char *harness_dir;
    char *keeper_bin;
    char *keeper_remote_bin;
    char *pi_stdio_bin;      /* agent-runner-pi-stdio (default: next to agent-runnerd) */
    char *scripted_agent;
    char *bwrap;
    char *instance;
    char *log_level;
    char *local_lifecycle;
    char *codex_home;        /* the operator's harness login folders ("" = not configured) */
    char *claude_config_dir;
    char *pi_agent_dir;
    char *mcp_bin;           /* agent-runner-mcp (default: next to agent-runnerd) */
    char *mcp_allowlist;     /* AGENT_RUNNER_MCP_HOST_ALLOWLIST ("" = none) */
    char *tools_ca_file;     /* AGENT_RUNNER_TOOLS_CA_FILE ("" = the system's CAs) */
    char shm_name[96];
    /* the engine's settings; AGENT_RUNNER_SPARES, AGENT_RUNNER_TOOLS_TEST_RESOLVE and the
     * AGENTA_* of platform mode are read by engine_config_read */
    struct engine_config engine;
};

/* Fill cfg from the environment; on failure err says which variable is wrong. */
int config_load(struct runner_config *cfg, char *err, size_t errlen);
/*
 * Once workers and threads are final: each worker admits at most threads - reserve runs
 * (reserve = threads / 8, at least 2, always leaving one run), so a worker full of long
 * turns still has threads for the probes, /kill, /cancel and /metrics; runs_max is the
 * smaller of AGENT_RUNNER_MAX_CONCURRENT_RUNS and workers x that.
 */
void config_admission(struct runner_config *cfg);
void config_log(const struct runner_config *cfg);
void config_release(struct runner_config *cfg);

#endif
