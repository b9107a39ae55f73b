#include "environment/spare.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "environment/env_home.h"
#include "harness/harness.h"
#include "request/request.h"

bool spare_harness_supported(enum harness_kind kind)
{
    return kind == HARNESS_PI || kind == HARNESS_OPENCODE;
}

bool spare_settings_any(const struct spare_settings *s)
{
    for (size_t i = 0; i < HARNESS_COUNT; i++)
        if (s->count[i])
            return true;
    return false;
}

static void settings_default(struct spare_settings *s)
{
    memset(s, 0, sizeof(*s));
    s->count[HARNESS_PI] = 2;
}

int spare_settings_parse(const char *text, struct spare_settings *ret, char *err, size_t errlen)
{
    struct spare_settings s;
    const char *p = text ? text : "";
    size_t total = strlen(p);

    settings_default(&s);
    if (strcmp(p, "0") == 0 || strcmp(p, "off") == 0 || strcmp(p, "none") == 0) {
        memset(&s, 0, sizeof(s)); /* every harness off */
        p += total;
    }
    if (total >= SPARE_SETTINGS_TEXT_MAX) {
        snprintf(err, errlen, "AGENT_RUNNER_SPARES: longer than %d bytes",
                 SPARE_SETTINGS_TEXT_MAX - 1);
        return -EINVAL;
    }
    while (*p) {
        char entry[SPARE_SETTINGS_TEXT_MAX], *eq;
        size_t n = strcspn(p, ",");
        enum harness_kind kind;
        uint64_t count;

        memcpy(entry, p, n);
        entry[n] = '\0';
        p += n;
        if (*p == ',')
            p++;
        eq = strchr(entry, '=');
        if (!eq || eq == entry || !eq[1]) {
            snprintf(err, errlen, "AGENT_RUNNER_SPARES: \"%.40s\" is not <harness>=<count>", entry);
            return -EINVAL;
        }
        *eq = '\0';
        if (harness_lookup(entry, false, &kind) < 0 || kind == HARNESS_SCRIPTED) {
            snprintf(err, errlen, "AGENT_RUNNER_SPARES: unknown harness \"%.40s\"", entry);
            return -EINVAL;
        }
        if (util_parse_u64(eq + 1, 0, SPARE_PER_HARNESS_MAX, &count) < 0) {
            snprintf(err, errlen,
                     "AGENT_RUNNER_SPARES: %s: expected a count in 0..%d, not "
                     "\"%.20s\"",
                     entry, SPARE_PER_HARNESS_MAX, eq + 1);
            return -EINVAL;
        }
        if (count && !spare_harness_supported(kind)) {
            snprintf(err, errlen,
                     "AGENT_RUNNER_SPARES: %s cannot have spares (its harness "
                     "reads its configuration only when it starts): use %s=0",
                     entry, entry);
            return -EINVAL;
        }
        s.count[kind] = (uint32_t)count;
    }
    *ret = s;
    return 0;
}

void spare_settings_format(const struct spare_settings *s, char *out, size_t outlen)
{
    static const enum harness_kind kinds[] = {HARNESS_PI, HARNESS_CLAUDE, HARNESS_CODEX,
                                              HARNESS_OPENCODE};
    size_t used = 0;

    if (outlen)
        out[0] = '\0';
    for (size_t i = 0; i < ARRAY_SIZE(kinds) && used < outlen; i++) {
        int n = snprintf(out + used, outlen - used, "%s%s=%u", i ? "," : "",
                         harness_kind_name(kinds[i]), (unsigned)s->count[kinds[i]]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

const char *spare_ineligible(const struct spare_settings *s, const struct run_request *req)
{
    if (req->harness >= HARNESS_COUNT || !s->count[req->harness])
        return "no spares of this harness";
    if (!req->sandbox || strcmp(req->sandbox, "local") != 0)
        return "not a local sandbox";
    if (req->network == NETWORK_OFF)
        return "network off";
    if (req->mc.nenvironment > 0)
        return "modelConnection.environment";
    if (req->mc.credential_mode == CREDENTIAL_MODE_RUNTIME)
        return "runtime-provided credentials";
    if (req->mc.ncredentials != 1)
        return "not exactly one credential";
    if (req->tools.ncustom > 0 || req->tools.nservers > 0)
        return "runner-side tools";
    return NULL;
}

int spare_placeholder_request(enum harness_kind kind, struct run_request *ret, char *err,
                              size_t errlen)
{
    struct request_limits lim;
    char body[1024];

    if (!spare_harness_supported(kind)) {
        snprintf(err, errlen, "harness %s cannot have spares", harness_kind_name(kind));
        return -ENOTSUP;
    }
    snprintf(body, sizeof(body),
             "{\"harness\":\"%s\",\"sandbox\":\"local\",\"model\":\"" SPARE_PLACEHOLDER_MODEL
             "\",\"messages\":[{\"role\":\"user\",\"content\":\"spare\"}],"
             "\"modelConnection\":{\"provider\":\"openai\",\"deployment\":\"custom\","
             "\"endpoint\":{\"baseUrl\":\"" SPARE_PLACEHOLDER_URL "\"},"
             "\"credentialMode\":\"env\",\"credentials\":[{\"binding\":{\"kind\":"
             "\"environment\",\"name\":\"OPENAI_API_KEY\"},\"value\":\"" SPARE_PLACEHOLDER_KEY
             "\",\"usage\":\"opaque_http\"}]}}",
             harness_kind_name(kind));
    request_limits_default(&lim);
    return request_parse(body, strlen(body), &lim, ret, err, errlen);
}

int spare_write_home_files(pid_t sandbox_pid, uid_t uid, gid_t gid, json_object *files, char *err,
                           size_t errlen)
{
    struct sandbox_uid_ids ids = {.uid = uid, .gid = gid};
    struct env_home home;
    int r;

    r = env_home_enter(sandbox_pid, &ids, &home, err, errlen);
    if (r < 0)
        return r;
    for (size_t i = 0; files && i < json_object_array_length(files); i++) {
        json_object *f = json_object_array_get_idx(files, i);
        const char *path = jsonx_str(f, "path");
        json_object *content = jsonx_get(f, "content"), *mode = jsonx_get(f, "mode");
        size_t n = strlen(SANDBOX_HOME "/");

        if (!path || !content)
            continue;
        if (strncmp(path, SANDBOX_HOME "/", n) != 0)
            continue; /* /etc/passwd, /etc/group: the same in every environment */
        r = util_write_file_beneath(home.root, path + n, json_object_get_string(content),
                                    (size_t)json_object_get_string_len(content),
                                    mode ? (mode_t)(json_object_get_int(mode) & 0777) : 0600);
        if (r < 0) {
            snprintf(err, errlen, "spare: cannot write %.200s: %s", path, strerror(-r));
            break;
        }
    }
    env_home_leave(&home);
    return r;
}
