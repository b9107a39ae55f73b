#include "config.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

enum kind { K_STR, K_U64, K_BOOL };

struct setting {
    const char *name;
    enum kind kind;
    size_t offset;
    const char *def; /* NULL: no default */
    uint64_t min, max;
};

#define OFF(f) offsetof(struct runner_config, f)
#define EOFF(f) (offsetof(struct runner_config, engine) + offsetof(struct engine_config, f))
#define MiB (1024ull * 1024)

static const struct setting settings[] = {
    {"AGENT_RUNNER_TOKEN", K_STR, OFF(token), NULL, 0, 0},
    {"AGENT_RUNNER_MAX_BODY_BYTES", K_U64, OFF(max_body), "8388608", 1024, 1024 * MiB},
    {"AGENT_RUNNER_MAX_CONTROL_BODY_BYTES", K_U64, OFF(max_small_body), "16384", 256, MiB},
    {"AGENT_RUNNER_MAX_CONCURRENT_RUNS", K_U64, OFF(max_concurrent_runs), "1000", 1, 1000000},
    {"AGENT_RUNNER_WORKERS", K_U64, OFF(workers), "2", 1, 256},
    {"AGENT_RUNNER_THREADS", K_U64, OFF(threads), "64", 1, 4096},
    {"AGENT_RUNNER_SLOTS", K_U64, OFF(slots), "1024", 16, 1u << 20},
    {"AGENT_RUNNER_DRAIN_MS", K_U64, OFF(drain_ms), "20000", 0, 3600000},
    {"AGENT_RUNNER_STATE_DIR", K_STR, OFF(state_dir), "/var/lib/agent-runner", 0, 0},
    {"AGENT_RUNNER_HARNESS_DIR", K_STR, OFF(harness_dir), "", 0, 0},
    {"AGENT_RUNNER_KEEPER_BIN", K_STR, OFF(keeper_bin), "", 0, 0},
    {"AGENT_RUNNER_KEEPER_REMOTE_BIN", K_STR, OFF(keeper_remote_bin), "", 0, 0},
    {"AGENT_RUNNER_PI_STDIO_BIN", K_STR, OFF(pi_stdio_bin), "", 0, 0},
    {"AGENT_RUNNER_SCRIPTED_AGENT", K_STR, OFF(scripted_agent), "", 0, 0},
    {"AGENT_RUNNER_BWRAP", K_STR, OFF(bwrap), "/usr/bin/bwrap", 0, 0},
    {"AGENT_RUNNER_INSTANCE", K_STR, OFF(instance), "default", 0, 0},
    {"AGENT_RUNNER_LOG_LEVEL", K_STR, OFF(log_level), "info", 0, 0},
    {"AGENT_RUNNER_LOCAL_LIFECYCLE", K_STR, OFF(local_lifecycle), "inherit", 0, 0},
    {"AGENT_RUNNER_SESSION_TTL_MS", K_U64, EOFF(session_ttl_ms), "60000", 1, 86400000},
    {"AGENT_RUNNER_SESSION_POOL_MAX", K_U64, EOFF(session_pool_max), "8", 0, 1u << 20},
    {"AGENT_RUNNER_APPROVAL_TTL_MS", K_U64, EOFF(approval_ttl_ms), "600000", 1, 86400000},
    {"AGENT_RUNNER_KEEPER_START_MS", K_U64, EOFF(keeper_start_ms), "30000", 100, 600000},
    {"AGENT_RUNNER_HARNESS_INIT_MS", K_U64, EOFF(harness_init_ms), "60000", 100, 600000},
    {"AGENT_RUNNER_RUN_TOTAL_MS", K_U64, EOFF(limits.total_ms), "39600000", 0, 86400000},
    {"AGENT_RUNNER_RUN_IDLE_MS", K_U64, EOFF(limits.idle_ms), "1800000", 0, 86400000},
    {"AGENT_RUNNER_RUN_FIRST_EVENT_MS", K_U64, EOFF(limits.first_event_ms), "120000", 0, 86400000},
    {"AGENT_RUNNER_RUN_TOOL_CALL_MS", K_U64, EOFF(limits.tool_call_ms), "1800000", 0, 86400000},
    {"AGENT_RUNNER_MODEL_STRICT", K_BOOL, EOFF(model_strict), "true", 0, 0},
    {"AGENT_RUNNER_CODEX_HOME", K_STR, OFF(codex_home), "", 0, 0},
    {"AGENT_RUNNER_CLAUDE_CONFIG_DIR", K_STR, OFF(claude_config_dir), "", 0, 0},
    {"AGENT_RUNNER_PI_AGENT_DIR", K_STR, OFF(pi_agent_dir), "", 0, 0},
    {"AGENT_RUNNER_SPARE_TTL_MS", K_U64, EOFF(spare_ttl_ms), "1800000", 1000, 86400000},
    {"AGENT_RUNNER_SHELLS", K_U64, EOFF(shells), "0", 0, 64},
    {"AGENT_RUNNER_SESSION_STATE_MAX_BYTES", K_U64, EOFF(kept.max_bytes), "16777216", 0,
     4096 * MiB},
    {"AGENT_RUNNER_SESSION_STATE_TOTAL_BYTES", K_U64, EOFF(kept.total_bytes), "2147483648", 0,
     1024 * 1024 * MiB},
    {"AGENT_RUNNER_SESSION_STATE_TTL_MS", K_U64, EOFF(kept.ttl_ms), "604800000", 1000,
     31536000000ull},
    {"AGENT_RUNNER_MCP_BIN", K_STR, OFF(mcp_bin), "", 0, 0},
    {"AGENT_RUNNER_MCP_HOST_ALLOWLIST", K_STR, OFF(mcp_allowlist), "", 0, 0},
    {"AGENT_RUNNER_TOOLS_CA_FILE", K_STR, OFF(tools_ca_file), "", 0, 0},
    {"AGENT_RUNNER_MODEL_GATEWAY", K_BOOL, EOFF(gateway.enabled), "true", 0, 0},
    {"AGENT_RUNNER_MODEL_GATEWAY_MAX_REQUEST_BYTES", K_U64, EOFF(gateway.max_request_bytes),
     "33554432", 1024, 1024 * MiB},
};

/* Runner-executed tools: the MCP bridge binary, the SSRF allowlist, the CA file. */
static int load_tools(struct runner_config *cfg, char *err, size_t errlen)
{
    if (cfg->mcp_bin[0] != '/') {
        snprintf(err, errlen, "AGENT_RUNNER_MCP_BIN must be an absolute path");
        return -EINVAL;
    }
    if (cfg->tools_ca_file[0] && cfg->tools_ca_file[0] != '/') {
        snprintf(err, errlen, "AGENT_RUNNER_TOOLS_CA_FILE must be an absolute path");
        return -EINVAL;
    }
    cfg->engine.tools.mcp_bin = cfg->mcp_bin;
    cfg->engine.tools.mcp_allowlist = cfg->mcp_allowlist[0] ? cfg->mcp_allowlist : NULL;
    cfg->engine.tools.ca_file = cfg->tools_ca_file[0] ? cfg->tools_ca_file : NULL;
    return 0;
}

/* The operator's harness login folders: each unset or an absolute path. */
static int check_login_dirs(const struct runner_config *cfg, char *err, size_t errlen)
{
    const struct {
        const char *name;
        const char *value;
    } dirs[] = {{"AGENT_RUNNER_CODEX_HOME", cfg->codex_home},
                {"AGENT_RUNNER_CLAUDE_CONFIG_DIR", cfg->claude_config_dir},
                {"AGENT_RUNNER_PI_AGENT_DIR", cfg->pi_agent_dir}};

    for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
        if (dirs[i].value[0] && dirs[i].value[0] != '/') {
            snprintf(err, errlen, "%s must be an absolute path", dirs[i].name);
            return -EINVAL;
        }
    }
    return 0;
}

/* The environment as engine_config_read reads it. */
static const char *env_lookup(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

static int parse_bool(const char *s, bool *ret)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};

    for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
        if (strcmp(s, yes[i]) == 0) {
            *ret = true;
            return 0;
        }
        if (strcmp(s, no[i]) == 0) {
            *ret = false;
            return 0;
        }
    }
    return -EINVAL;
}

/* Folder of the running executable (build/bin). */
static int exe_dir(char *out, size_t len)
{
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);

    if (n <= 0)
        return -errno;
    path[n] = '\0';
    snprintf(out, len, "%s", dirname(path));
    return 0;
}

static int set_default_path(char **field, const char *rel)
{
    char dir[PATH_MAX], path[PATH_MAX + 64], real[PATH_MAX];
    int r;

    if (*field && (*field)[0])
        return 0;
    r = exe_dir(dir, sizeof(dir));
    if (r < 0)
        return r;
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    free(*field);
    *field = strdup(realpath(path, real) ? real : path);
    return *field ? 0 : -ENOMEM;
}

/* The remote keeper: beside the keeper unless set (AGENT_RUNNER_KEEPER_BIN + "-remote"). */
static int keeper_remote_default(struct runner_config *cfg)
{
    char *path;

    if (cfg->keeper_remote_bin && cfg->keeper_remote_bin[0])
        return 0;
    if (asprintf(&path, "%s-remote", cfg->keeper_bin) < 0)
        return -ENOMEM;
    free(cfg->keeper_remote_bin);
    cfg->keeper_remote_bin = path;
    return 0;
}

/* Every setting of the table into cfg: blank = unset = the default; a bad value is an error. */
static int read_table(struct runner_config *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i < ARRAY_SIZE(settings); i++) {
        const struct setting *s = &settings[i];
        const char *v = getenv(s->name);
        void *field = (char *)cfg + s->offset;

        if (v) {
            while (*v == ' ' || *v == '\t')
                v++;
            if (!*v)
                v = NULL; /* empty or blank = unset */
        }
        if (!v)
            v = s->def;
        if (!v) {
            snprintf(err, errlen, "%s must be set", s->name);
            return -EINVAL;
        }
        switch (s->kind) {
        case K_STR:
            *(char **)field = strdup(v);
            if (!*(char **)field)
                return -ENOMEM;
            break;
        case K_U64:
            if (util_parse_u64(v, s->min, s->max, (uint64_t *)field) < 0) {
                snprintf(err, errlen, "%s: expected an integer in [%llu, %llu], got \"%.40s\"",
                         s->name, (unsigned long long)s->min, (unsigned long long)s->max, v);
                return -EINVAL;
            }
            break;
        case K_BOOL:
            if (parse_bool(v, (bool *)field) < 0) {
                snprintf(err, errlen, "%s: expected true or false, got \"%.40s\"", s->name, v);
                return -EINVAL;
            }
            break;
        }
    }
    return 0;
}

/* AGENT_RUNNER_LOG_LEVEL (applied at once) and AGENT_RUNNER_LOCAL_LIFECYCLE. */
static int read_levels(struct runner_config *cfg, char *err, size_t errlen)
{
    enum log_level lvl;

    if (log_level_parse(cfg->log_level, &lvl) < 0) {
        snprintf(err, errlen, "AGENT_RUNNER_LOG_LEVEL: expected error, warn, info or debug");
        return -EINVAL;
    }
    log_max_level = (int)lvl;
    if (strcmp(cfg->local_lifecycle, "warm") == 0) {
        cfg->engine.local_mode = LIFECYCLE_WARM;
    } else if (strcmp(cfg->local_lifecycle, "per_turn") == 0) {
        cfg->engine.local_mode = LIFECYCLE_PER_TURN;
    } else if (strcmp(cfg->local_lifecycle, "inherit") != 0) {
        snprintf(err, errlen, "AGENT_RUNNER_LOCAL_LIFECYCLE: expected warm, per_turn or inherit");
        return -EINVAL;
    }
    return 0;
}

int config_load(struct runner_config *cfg, char *err, size_t errlen)
{
    int r;

    memset(cfg, 0, sizeof(*cfg));
    r = read_table(cfg, err, errlen);
    if (r < 0)
        return r;
    if (!cfg->token[0]) {
        snprintf(err, errlen, "AGENT_RUNNER_TOKEN must be set");
        return -EINVAL;
    }
    if (cfg->state_dir[0] != '/') {
        snprintf(err, errlen, "AGENT_RUNNER_STATE_DIR must be an absolute path");
        return -EINVAL;
    }
    if (set_default_path(&cfg->harness_dir, "../../harnesses") < 0 ||
        set_default_path(&cfg->keeper_bin, "agent-runner-keeper") < 0 ||
        keeper_remote_default(cfg) < 0 ||
        set_default_path(&cfg->pi_stdio_bin, "agent-runner-pi-stdio") < 0 ||
        set_default_path(&cfg->mcp_bin, "agent-runner-mcp") < 0) {
        snprintf(err, errlen, "cannot locate the install folder");
        return -EINVAL;
    }
    if (cfg->pi_stdio_bin[0] != '/') {
        snprintf(err, errlen, "AGENT_RUNNER_PI_STDIO_BIN must be an absolute path");
        return -EINVAL;
    }
    if (strlen(cfg->instance) > 40 || strchr(cfg->instance, '/')) {
        snprintf(err, errlen, "AGENT_RUNNER_INSTANCE must be a short name without '/'");
        return -EINVAL;
    }
    if (read_levels(cfg, err, errlen) < 0)
        return -EINVAL;
    /* an explicitly configured window is the provider's; otherwise the request's may apply */
    {
        const char *ttl = getenv("AGENT_RUNNER_SESSION_TTL_MS");
        if (ttl && ttl[0])
            cfg->engine.local_idle_ms = cfg->engine.session_ttl_ms;
    }
    if (engine_table_name(cfg->instance, cfg->shm_name, sizeof(cfg->shm_name)) < 0) {
        snprintf(err, errlen, "AGENT_RUNNER_INSTANCE: too long");
        return -EINVAL;
    }
    if (check_login_dirs(cfg, err, errlen) < 0 || load_tools(cfg, err, errlen) < 0)
        return -EINVAL;
    cfg->engine.logins.codex_home = cfg->codex_home[0] ? cfg->codex_home : NULL;
    cfg->engine.logins.claude_config_dir =
        cfg->claude_config_dir[0] ? cfg->claude_config_dir : NULL;
    cfg->engine.logins.pi_agent_dir = cfg->pi_agent_dir[0] ? cfg->pi_agent_dir : NULL;
    /* the test resolver, the spares, platform mode (a bad AGENTA_* value stops the start) */
    r = engine_config_read(&cfg->engine, env_lookup, NULL, err, errlen);
    if (r < 0)
        return r;
    cfg->engine.state_dir = cfg->state_dir;
    cfg->engine.harness_dir = cfg->harness_dir;
    cfg->engine.scripted_agent = cfg->scripted_agent[0] ? cfg->scripted_agent : NULL;
    cfg->engine.keeper_bin = cfg->keeper_bin;
    cfg->engine.keeper_remote_bin = cfg->keeper_remote_bin;
    cfg->engine.pi_stdio_bin = cfg->pi_stdio_bin;
    cfg->engine.bwrap = cfg->bwrap;
    cfg->engine.shm_name = cfg->shm_name;
    cfg->engine.log_level = cfg->log_level;
    return 0;
}

void config_admission(struct runner_config *cfg)
{
    uint64_t reserve = cfg->threads / 8 < 2 ? 2 : cfg->threads / 8;

    if (reserve > cfg->threads - 1)
        reserve = cfg->threads - 1;
    cfg->worker_runs_max = cfg->threads - reserve;
    cfg->runs_max = cfg->workers * cfg->worker_runs_max;
    if (cfg->runs_max > cfg->max_concurrent_runs)
        cfg->runs_max = cfg->max_concurrent_runs;
}

void config_log(const struct runner_config *cfg)
{
    char text[ENGINE_CONFIG_TEXT_MAX];

    log_info("config: workers %llu, threads %llu (%llu runs each), slots %llu, max body %llu, "
             "max runs %llu, "
             "state '%s', harnesses '%s', keeper '%s', bwrap '%s', shm '%s', session ttl %llums, "
             "pool max %llu, scripted agent '%s'",
             (unsigned long long)cfg->workers, (unsigned long long)cfg->threads,
             (unsigned long long)cfg->worker_runs_max, (unsigned long long)cfg->slots,
             (unsigned long long)cfg->max_body, (unsigned long long)cfg->runs_max, cfg->state_dir,
             cfg->harness_dir, cfg->keeper_bin, cfg->bwrap, cfg->shm_name,
             (unsigned long long)cfg->engine.session_ttl_ms,
             (unsigned long long)cfg->engine.session_pool_max,
             cfg->engine.scripted_agent ? cfg->engine.scripted_agent : "");
    engine_config_spares_text(&cfg->engine, text, sizeof(text));
    log_info("config: spares %s, spare ttl %llums, shells %llu, pi started by '%s'", text,
             (unsigned long long)cfg->engine.spare_ttl_ms, (unsigned long long)cfg->engine.shells,
             cfg->pi_stdio_bin);
    /* which harness logins are configured, never where */
    log_info("subscription logins: codex %s, claude %s, pi %s",
             cfg->engine.logins.codex_home ? "configured" : "not configured",
             cfg->engine.logins.claude_config_dir ? "configured" : "not configured",
             cfg->engine.logins.pi_agent_dir ? "configured" : "not configured");
    log_info("config: tools: mcp bridge '%s', mcp host allowlist '%s'%s%s", cfg->mcp_bin,
             cfg->mcp_allowlist, cfg->tools_ca_file[0] ? ", tools CA file set" : "",
             cfg->engine.tools.test_resolve ? ", TEST resolver override on" : "");
    engine_config_platform_text(&cfg->engine, text, sizeof(text));
    log_info("config: %s", text);
    engine_config_cluster_text(&cfg->engine, text, sizeof(text));
    log_info("config: several hosts: %s", text);
}

void config_release(struct runner_config *cfg)
{
    free(cfg->token);
    free(cfg->state_dir);
    free(cfg->harness_dir);
    free(cfg->keeper_bin);
    free(cfg->keeper_remote_bin);
    free(cfg->pi_stdio_bin);
    free(cfg->scripted_agent);
    free(cfg->bwrap);
    free(cfg->instance);
    free(cfg->log_level);
    free(cfg->local_lifecycle);
    free(cfg->codex_home);
    free(cfg->claude_config_dir);
    free(cfg->pi_agent_dir);
    free(cfg->mcp_bin);
    free(cfg->mcp_allowlist);
    free(cfg->tools_ca_file);
    engine_config_release(&cfg->engine);
    memset(cfg, 0, sizeof(*cfg));
}
