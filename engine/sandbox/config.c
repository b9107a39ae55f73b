#include "sandbox/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)
#define TiB (1024ull * GiB)
#define SIZE_MAX_BYTES (64ull * TiB)

void sandbox_config_default(struct sandbox_config *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->uid_base = SANDBOX_UID_BASE_DEFAULT;
    ret->pids_max = 512;
    ret->memory_max = 2 * GiB;
    ret->cpu_millis = 1000;
    ret->disk_max = 2 * GiB;
    ret->tmp_max = 512 * MiB;
    ret->home_max = 512 * MiB;
    ret->require_limits = false;
    ret->private_egress = false;
    ret->nrunner_ports = 2;
    ret->runner_ports[0] = 443;
    ret->runner_ports[1] = 8443;
}

/* "443,8443" -> ports (1..65535, at most SANDBOX_RUNNER_PORTS_MAX, no duplicates needed). */
static int sandbox_config_parse_ports(const char *s, uint16_t *ports, size_t max, size_t *ret_n)
{
    size_t n = 0;

    if (!s || !*s)
        return -EINVAL;
    while (*s) {
        char item[8];
        size_t len = strcspn(s, ",");
        uint64_t v;

        if (len == 0 || len >= sizeof(item))
            return -EINVAL;
        memcpy(item, s, len);
        item[len] = '\0';
        if (util_parse_u64(item, 1, 65535, &v) < 0)
            return -EINVAL;
        if (n >= max)
            return -E2BIG;
        ports[n++] = (uint16_t)v;
        s += len;
        if (*s == ',' && !*++s)
            return -EINVAL; /* a trailing comma */
    }
    *ret_n = n;
    return 0;
}

/* true/false (1/0, yes/no) of a variable; -EINVAL with a message naming it otherwise. */
static int bool_var(const char *name, const char *v, bool *ret, char *err, size_t errlen)
{
    if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0 || strcmp(v, "yes") == 0) {
        *ret = true;
    } else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0 || strcmp(v, "no") == 0) {
        *ret = false;
    } else {
        snprintf(err, errlen, "%s: expected true or false, got \"%.40s\"", name, v);
        return -EINVAL;
    }
    return 0;
}

int sandbox_config_parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *ret)
{
    static const struct {
        const char *suffix;
        uint64_t unit;
    } units[] = {
        {"", 1},      {"B", 1},    {"K", KiB},   {"KB", KiB},  {"KiB", KiB},
        {"M", MiB},   {"MB", MiB}, {"MiB", MiB}, {"G", GiB},   {"GB", GiB},
        {"GiB", GiB}, {"T", TiB},  {"TB", TiB},  {"TiB", TiB},
    };
    char digits[24];
    size_t n = 0;
    uint64_t v;
    int r;

    if (!s)
        return -EINVAL;
    while (s[n] >= '0' && s[n] <= '9')
        n++;
    if (n == 0 || n >= sizeof(digits))
        return n == 0 ? -EINVAL : -ERANGE;
    memcpy(digits, s, n);
    digits[n] = '\0';
    r = util_parse_u64(digits, 0, UINT64_MAX, &v);
    if (r < 0)
        return r;
    for (size_t i = 0; i < ARRAY_SIZE(units); i++) {
        if (strcmp(s + n, units[i].suffix) != 0)
            continue;
        if (v > UINT64_MAX / units[i].unit)
            return -ERANGE;
        v *= units[i].unit;
        if (v < min || v > max)
            return -ERANGE;
        *ret = v;
        return 0;
    }
    return -EINVAL;
}

int sandbox_config_parse_cpus(const char *s, uint32_t *ret)
{
    uint64_t whole = 0, frac = 0;
    const char *p = s;
    int decimals = 0;

    if (!s || !(*p >= '0' && *p <= '9'))
        return -EINVAL;
    for (; *p >= '0' && *p <= '9'; p++) {
        whole = whole * 10 + (uint64_t)(*p - '0');
        if (whole > 1024)
            return -ERANGE;
    }
    if (*p == '.') {
        p++;
        if (!(*p >= '0' && *p <= '9'))
            return -EINVAL;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (++decimals > 3)
                return -EINVAL;
            frac = frac * 10 + (uint64_t)(*p - '0');
        }
    }
    if (*p)
        return -EINVAL;
    while (decimals++ < 3)
        frac *= 10;
    if (whole * 1000 + frac > 1024000)
        return -ERANGE;
    *ret = (uint32_t)(whole * 1000 + frac);
    return 0;
}

/* The value of a variable, NULL when unset or blank. */
static const char *var(const char *name)
{
    const char *v = getenv(name);

    if (!v)
        return NULL;
    while (*v == ' ' || *v == '\t')
        v++;
    return *v ? v : NULL;
}

static int size_var(const char *name, uint64_t min, uint64_t *field, char *err, size_t errlen)
{
    const char *v = var(name);
    int r;

    if (!v)
        return 0;
    r = sandbox_config_parse_size(v, min, SIZE_MAX_BYTES, field);
    if (r == -ERANGE && min > 0)
        snprintf(err, errlen, "%s: \"%.40s\" is outside [%llu bytes, 64T]", name, v,
                 (unsigned long long)min);
    else if (r == -ERANGE)
        snprintf(err, errlen, "%s: \"%.40s\" is larger than 64T", name, v);
    else if (r < 0)
        snprintf(err, errlen,
                 "%s: \"%.40s\" is not a size (bytes, or a whole number with K, M, G "
                 "or T)",
                 name, v);
    return r < 0 ? -EINVAL : 0;
}

int sandbox_config_load(struct sandbox_config *ret, char *err, size_t errlen)
{
    struct sandbox_config c;
    const char *v;
    uint64_t u;
    int r;

    sandbox_config_default(&c);
    v = var("AGENT_RUNNER_SANDBOX_UID_BASE");
    if (v) {
        if (util_parse_u64(v, 1, 0x7fffffffu, &u) < 0) {
            snprintf(err, errlen,
                     "AGENT_RUNNER_SANDBOX_UID_BASE: expected an integer in [1, 2147483647], "
                     "got \"%.40s\"",
                     v);
            return -EINVAL;
        }
        c.uid_base = (uint32_t)u;
    }
    v = var("AGENT_RUNNER_SANDBOX_PIDS_MAX");
    if (v && util_parse_u64(v, 0, 4194304, &c.pids_max) < 0) {
        snprintf(err, errlen,
                 "AGENT_RUNNER_SANDBOX_PIDS_MAX: expected an integer in [0, 4194304] (0: no "
                 "limit), got \"%.40s\"",
                 v);
        return -EINVAL;
    }
    if (c.pids_max > 0 && c.pids_max < 8) {
        snprintf(err, errlen,
                 "AGENT_RUNNER_SANDBOX_PIDS_MAX: %llu is too few for a harness "
                 "(at least 8, or 0 for no limit)",
                 (unsigned long long)c.pids_max);
        return -EINVAL;
    }
    r = size_var("AGENT_RUNNER_SANDBOX_MEMORY_MAX", 0, &c.memory_max, err, errlen);
    if (r == 0 && c.memory_max > 0 && c.memory_max < 16 * MiB) {
        snprintf(err, errlen,
                 "AGENT_RUNNER_SANDBOX_MEMORY_MAX: at least 16M (or 0 for no "
                 "limit)");
        r = -EINVAL;
    }
    if (r == 0)
        r = size_var("AGENT_RUNNER_SANDBOX_DISK_MAX", 0, &c.disk_max, err, errlen);
    if (r == 0 && c.disk_max > 0 && c.disk_max < MiB) {
        snprintf(err, errlen, "AGENT_RUNNER_SANDBOX_DISK_MAX: at least 1M (or 0 for no cap)");
        r = -EINVAL;
    }
    if (r == 0)
        r = size_var("AGENT_RUNNER_SANDBOX_TMP_MAX", MiB, &c.tmp_max, err, errlen);
    if (r == 0)
        r = size_var("AGENT_RUNNER_SANDBOX_HOME_MAX", MiB, &c.home_max, err, errlen);
    if (r < 0)
        return r;
    v = var("AGENT_RUNNER_SANDBOX_CPUS");
    if (v && sandbox_config_parse_cpus(v, &c.cpu_millis) < 0) {
        snprintf(err, errlen,
                 "AGENT_RUNNER_SANDBOX_CPUS: expected a number of CPUs such as 1, "
                 "0.5 or 2 (at most 3 decimals, at most 1024; 0: no limit), got \"%.40s\"",
                 v);
        return -EINVAL;
    }
    if (c.cpu_millis > 0 && c.cpu_millis < 10) {
        snprintf(err, errlen, "AGENT_RUNNER_SANDBOX_CPUS: at least 0.01 (or 0 for no limit)");
        return -EINVAL;
    }
    v = var("AGENT_RUNNER_REQUIRE_LIMITS");
    if (v && bool_var("AGENT_RUNNER_REQUIRE_LIMITS", v, &c.require_limits, err, errlen) < 0)
        return -EINVAL;
    v = var("AGENT_RUNNER_SANDBOX_PRIVATE_EGRESS");
    if (v && bool_var("AGENT_RUNNER_SANDBOX_PRIVATE_EGRESS", v, &c.private_egress, err, errlen) < 0)
        return -EINVAL;
    v = var("AGENT_RUNNER_PORTS");
    if (v && sandbox_config_parse_ports(v, c.runner_ports, SANDBOX_RUNNER_PORTS_MAX,
                                        &c.nrunner_ports) < 0) {
        snprintf(err, errlen,
                 "AGENT_RUNNER_PORTS: expected a comma-separated list of at most %d TCP ports, "
                 "got \"%.60s\"",
                 SANDBOX_RUNNER_PORTS_MAX, v);
        return -EINVAL;
    }
    *ret = c;
    return 0;
}

uint64_t sandbox_config_memory_ceiling(const struct sandbox_config *cfg)
{
    if (cfg->memory_max == 0)
        return 0;
    return cfg->memory_max + cfg->disk_max + cfg->tmp_max + cfg->home_max + SANDBOX_SHM_BYTES;
}

uint64_t sandbox_config_disk_inodes(const struct sandbox_config *cfg)
{
    uint64_t n = cfg->disk_max / (4 * KiB);

    return n < 4096 ? 4096 : n;
}
