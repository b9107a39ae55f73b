/*
 * request_sections — the sections of a run request that are arrays of objects or small
 * objects (harnessFiles, skills, permissions, sandboxPermission, lifecycle, telemetry), each as
 * a table of its members read by rq_fields / rq_each (request_sections.h).
 */
#include "request/request_sections.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "egress/egress_policy.h"
#include "request/request_fields.h"
#include "request/request_url.h"

#define HARNESS_FILE_MAX (1024u * 1024)
#define SKILL_NAME_MAX 64
#define SKILL_DESCRIPTION_MAX 1024 /* code points */
#define SKILL_BODY_MAX 50000
#define SKILL_PATH_MAX 255
#define SKILL_CONTENT_MAX 200000
#define SKILL_FILES_MAX 64
#define RULES_MAX 256
#define LIFECYCLE_IDLE_MAX (24ull * 3600 * 1000)

/* A relative path inside the workspace: no absolute path, no "..", no empty components. */
static bool safe_relative_path(const char *p, size_t max)
{
    size_t n = strlen(p);
    const char *s = p;

    if (n == 0 || n > max || p[0] == '/' || rq_has_control(p) || strchr(p, '\\'))
        return false;
    while (*s) {
        size_t len = strcspn(s, "/");

        if (len == 0)
            return false; /* "//" or trailing "/" */
        if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
            return false;
        s += len;
        if (*s == '/')
            s++;
    }
    return p[n - 1] != '/';
}

static size_t utf8_code_points(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        if (((unsigned char)*s & 0xc0) != 0x80)
            n++;
    return n;
}

static bool skill_name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > SKILL_NAME_MAX || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '-') {
            if (s[i + 1] == '-')
                return false;
            continue;
        }
        if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]))
            return false;
    }
    return true;
}

/* A host name as an allowlist entry: LDH labels with a letter, optionally "*.", <= 253. */
static bool rq_host_name(const char *s)
{
    size_t n = strlen(s), label = 0;
    bool letter = false;

    if (strncmp(s, "*.", 2) == 0) {
        s += 2;
        n -= 2;
    }
    if (n == 0 || n > 253 || s[0] == '.' || s[n - 1] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];

        if (ch == '.') {
            if (label == 0 || s[i - 1] == '-')
                return false;
            label = 0;
            continue;
        }
        if (!(isalnum(ch) || ch == '-') || (label == 0 && ch == '-') || ++label > 63)
            return false;
        letter = letter || isalpha(ch);
    }
    return letter && s[n - 1] != '-' && strchr(s, '.') != NULL;
}

/*
 * Every allowlist entry is a CIDR range or a single address (egress_cidr_parse), or a host
 * name (the provider decides whether it can enforce names: engine_prepare), named when not.
 */
static int rq_allowlist(struct rq_ctx *c, json_object *list, bool *ret_names, size_t *ret_first)
{
    size_t n = list ? json_object_array_length(list) : 0;

    *ret_names = false;
    if (n > EGRESS_ALLOWLIST_MAX)
        return rq_fail(c, "sandboxPermission.network.allowlist: at most %d entries",
                       EGRESS_ALLOWLIST_MAX);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(list, i);
        struct egress_cidr cidr;
        char why[160];

        if (!e || !json_object_is_type(e, json_type_string))
            return rq_fail(c, "sandboxPermission.network.allowlist[%zu]: expected a string", i);
        why[0] = '\0';
        if (egress_cidr_parse(json_object_get_string(e), &cidr, why, sizeof(why)) == 0)
            continue;
        /* a name that is no address at all ("1.2.3.999" and "10.0.0.1/8" stay errors) */
        if (strspn(json_object_get_string(e), "0123456789./:") == 0 &&
            rq_host_name(json_object_get_string(e))) {
            if (!*ret_names)
                *ret_first = i;
            *ret_names = true;
            continue;
        }
        return rq_fail(c, "sandboxPermission.network.allowlist[%zu]: %s", i,
                       why[0] ? why : "not a CIDR range, address or host name");
    }
    return 0;
}

int rq_sandbox_permission(struct rq_ctx *c, json_object *o, struct run_request *req)
{
    static const char *const modes[] = {"on", "off", "allowlist", NULL};
    static const char *const enforcements[] = {"strict", "best_effort", NULL};
    json_object *network;
    const char *mode, *enforcement;
    int r;

    if (jsonx_get(o, "filesystem"))
        return rq_fail(c, "sandboxPermission.filesystem: not supported by this runner");
    r = rq_enum(c, o, "enforcement", "sandboxPermission.enforcement", enforcements,
                "strict, best_effort", &enforcement);
    if (r < 0)
        return r;
    req->network_strict = !enforcement || strcmp(enforcement, "strict") == 0;
    r = rq_object(c, o, "network", "sandboxPermission.network", &network);
    if (r < 0 || !network)
        return r;
    r = rq_enum(c, network, "mode", "sandboxPermission.network.mode", modes, "on, off, allowlist",
                &mode);
    if (r < 0)
        return r;
    if (!mode || strcmp(mode, "on") == 0) {
        req->network = NETWORK_ON;
    } else if (strcmp(mode, "off") == 0) {
        req->network = NETWORK_OFF;
    } else {
        json_object *list = jsonx_get(network, "allowlist");
        if (list && !json_object_is_type(list, json_type_array))
            return rq_fail(c, "sandboxPermission.network.allowlist: expected an array");
        r = rq_allowlist(c, list, &req->network_allow_names, &req->network_allow_name_at);
        if (r < 0)
            return r;
        req->network = NETWORK_ALLOWLIST;
        req->network_allowlist = list;
    }
    return 0;
}

int rq_lifecycle(struct rq_ctx *c, json_object *o, struct run_request *req)
{
    static const char *const modes[] = {"warm", "per_turn", NULL};
    json_object *idle;
    const char *mode;
    int r;

    r = rq_enum(c, o, "mode", "lifecycle.mode", modes, "warm, per_turn", &mode);
    if (r < 0)
        return r;
    if (mode)
        req->lifecycle_mode = strcmp(mode, "warm") == 0 ? LIFECYCLE_WARM : LIFECYCLE_PER_TURN;
    idle = jsonx_get(o, "idleTimeoutMs");
    if (idle) {
        int64_t v;

        if (!json_object_is_type(idle, json_type_int))
            return rq_fail(c, "lifecycle.idleTimeoutMs: expected an integer");
        v = json_object_get_int64(idle);
        if (v <= 0 || (uint64_t)v > LIFECYCLE_IDLE_MAX)
            return rq_fail(c, "lifecycle.idleTimeoutMs: must be between 1 and %llu",
                           (unsigned long long)LIFECYCLE_IDLE_MAX);
        req->lifecycle_idle_ms = (uint64_t)v;
    }
    return 0;
}

int rq_model_gateway(struct rq_ctx *c, json_object *o, struct run_request *req)
{
    json_object *list = jsonx_get(o, "allowedModels");
    size_t n;

    if (!list)
        return 0;
    if (!json_object_is_type(list, json_type_array))
        return rq_fail(c, "modelGateway.allowedModels: expected an array");
    n = json_object_array_length(list);
    if (n == 0 || n > GATEWAY_MODELS_MAX)
        return rq_fail(c, "modelGateway.allowedModels: expected 1 to %d model names",
                       GATEWAY_MODELS_MAX);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(list, i);
        const char *s = json_object_is_type(e, json_type_string) ? json_object_get_string(e) : NULL;

        if (!s || !s[0] || strlen(s) > GATEWAY_MODEL_NAME_MAX || rq_has_control(s))
            return rq_fail(c, "modelGateway.allowedModels[%zu]: expected a model name", i);
    }
    req->gateway_models = list;
    return 0;
}

int rq_telemetry(struct rq_ctx *c, json_object *o)
{
    json_object *otlp = jsonx_path(o, "exporters.otlp"), *headers;
    const char *endpoint;
    int r;

    if (!otlp)
        return 0;
    if (!json_object_is_type(otlp, json_type_object))
        return rq_fail(c, "telemetry.exporters.otlp: expected an object");
    r = rq_string(c, otlp, "endpoint", "telemetry.exporters.otlp.endpoint", 2048, &endpoint);
    if (r < 0)
        return r;
    if (endpoint) {
        char scheme[8], host[256];
        unsigned port;
        if (request_parse_url(endpoint, scheme, sizeof(scheme), host, sizeof(host), &port) < 0)
            return rq_fail(c, "telemetry.exporters.otlp.endpoint: not an http(s) URL with a host");
    }
    r = rq_object(c, otlp, "headers", "telemetry.exporters.otlp.headers", &headers);
    if (r < 0)
        return r;
    if (headers) {
        json_object_object_foreach(headers, key, val)
        {
            if (!val || !json_object_is_type(val, json_type_string))
                return rq_fail(c, "telemetry.exporters.otlp.headers.%.64s: expected a string", key);
        }
    }
    return 0;
}

/* ---- harnessFiles ------------------------------------------------------------------------ */

static int check_workspace_path(struct rq_ctx *c, const char *field, void *elem)
{
    const struct harness_file *hf = elem;

    if (!hf->path || !safe_relative_path(hf->path, 255))
        return rq_fail(c, "%s: must be a relative path inside the workspace", field);
    return 0;
}

static const struct rq_field harness_file_fields[] = {
    {.key = "path",
     .kind = RQ_STRING,
     .max = 255,
     .need = RQ_OPTIONAL,
     .offset = offsetof(struct harness_file, path),
     .check = check_workspace_path},
    {.key = "content",
     .kind = RQ_STRING,
     .max = HARNESS_FILE_MAX,
     .need = RQ_PRESENT,
     .offset = offsetof(struct harness_file, content)},

};

static int harness_file(struct rq_ctx *c, json_object *o, const char *field, size_t i, void *elem,
                        void *ctx)
{
    const struct run_request *req = ctx;
    const struct harness_file *hf = elem;
    int r = rq_fields(c, o, field, harness_file_fields, ARRAY_SIZE(harness_file_fields), elem);

    for (size_t j = 0; r == 0 && j < i; j++)
        if (strcmp(req->harness_files[j].path, hf->path) == 0)
            r = rq_fail(c, "harnessFiles[%zu].path: duplicate path", i);
    return r;
}

int rq_harness_files(struct rq_ctx *c, json_object *arr, struct run_request *req)
{
    return rq_each(c, arr, "harnessFiles", sizeof(struct harness_file),
                   (void **)&req->harness_files, &req->nharness_files, harness_file, req);
}

/* ---- skills ------------------------------------------------------------------------------ */

static int check_skill_name(struct rq_ctx *c, const char *field, void *elem)
{
    const struct skill *sk = elem;

    if (!sk->name || !skill_name_ok(sk->name))
        return rq_fail(c, "%s: must match ^[a-z0-9]+(-[a-z0-9]+)*$ and be at most %d characters",
                       field, SKILL_NAME_MAX);
    return 0;
}

static int check_skill_description(struct rq_ctx *c, const char *field, void *elem)
{
    const struct skill *sk = elem;

    if (utf8_code_points(sk->description) > SKILL_DESCRIPTION_MAX)
        return rq_fail(c, "%s: longer than %d characters", field, SKILL_DESCRIPTION_MAX);
    return 0;
}

static const struct rq_field skill_name_field[] = {
    {.key = "name",
     .kind = RQ_STRING,
     .max = SKILL_NAME_MAX * 4,
     .need = RQ_OPTIONAL,
     .offset = offsetof(struct skill, name),
     .check = check_skill_name},

};

static const struct rq_field skill_fields[] = {
    {.key = "description",
     .kind = RQ_STRING,
     .max = SKILL_DESCRIPTION_MAX * 4,
     .need = RQ_NONEMPTY,
     .offset = offsetof(struct skill, description),
     .check = check_skill_description},
    {.key = "body",
     .kind = RQ_STRING,
     .max = SKILL_BODY_MAX,
     .need = RQ_PRESENT,
     .offset = offsetof(struct skill, body)},
    {.key = "disableModelInvocation",
     .kind = RQ_BOOL,
     .max = 0,
     .need = RQ_OPTIONAL,
     .offset = offsetof(struct skill, disable_model_invocation)},
    {.key = "allowExecutableFiles",
     .kind = RQ_BOOL,
     .max = 0,
     .need = RQ_OPTIONAL,
     .offset = offsetof(struct skill, allow_executable_files)},

};

static int check_skill_path(struct rq_ctx *c, const char *field, void *elem)
{
    const struct skill_file *sf = elem;

    if (!sf->path || !safe_relative_path(sf->path, SKILL_PATH_MAX) ||
        strcmp(sf->path, "SKILL.md") == 0)
        return rq_fail(c, "%s: must be a relative path inside the skill folder", field);
    return 0;
}

static const struct rq_field skill_file_fields[] = {
    {.key = "path",
     .kind = RQ_STRING,
     .max = SKILL_PATH_MAX,
     .need = RQ_OPTIONAL,
     .offset = offsetof(struct skill_file, path),
     .check = check_skill_path},
    {.key = "content",
     .kind = RQ_STRING,
     .max = SKILL_CONTENT_MAX,
     .need = RQ_PRESENT,
     .offset = offsetof(struct skill_file, content)},
    {.key = "executable",
     .kind = RQ_BOOL,
     .max = 0,
     .need = RQ_OPTIONAL,
     .offset = offsetof(struct skill_file, executable)},

};

static int skill_file(struct rq_ctx *c, json_object *o, const char *field, size_t i, void *elem,
                      void *ctx)
{
    const struct skill *sk = ctx;
    const struct skill_file *sf = elem;
    int r = rq_fields(c, o, field, skill_file_fields, ARRAY_SIZE(skill_file_fields), elem);

    (void)i;
    if (r == 0 && sf->executable && !sk->allow_executable_files)
        r = rq_fail(c, "%s.executable: executable files need allowExecutableFiles", field);
    return r;
}

static int skill(struct rq_ctx *c, json_object *o, const char *field, size_t i, void *elem,
                 void *ctx)
{
    const struct run_request *req = ctx;
    struct skill *sk = elem;
    json_object *files;
    char f[160];
    int r = rq_fields(c, o, field, skill_name_field, ARRAY_SIZE(skill_name_field), elem);

    for (size_t j = 0; r == 0 && j < i; j++)
        if (strcmp(req->skills[j].name, sk->name) == 0)
            r = rq_fail(c, "%s.name: duplicate skill \"%s\"", field, sk->name);
    if (r == 0)
        r = rq_fields(c, o, field, skill_fields, ARRAY_SIZE(skill_fields), elem);
    if (r < 0)
        return r;
    snprintf(f, sizeof(f), "%s.files", field);
    r = rq_array(c, o, "files", f, SKILL_FILES_MAX, &files);
    if (r == 0)
        r = rq_each(c, files, f, sizeof(struct skill_file), (void **)&sk->files, &sk->nfiles,
                    skill_file, sk);
    return r;
}

int rq_skills(struct rq_ctx *c, json_object *arr, struct run_request *req)
{
    return rq_each(c, arr, "skills", sizeof(struct skill), (void **)&req->skills, &req->nskills,
                   skill, req);
}

/* ---- permissions --------------------------------------------------------------------------- */

static const char *const default_words[] = {"allow", "ask", "deny", "allow_reads", NULL};

static const struct rq_field permissions_fields[] = {
    {.key = "default",
     .kind = RQ_ENUM,
     .max = 0,
     .need = RQ_OPTIONAL,
     .offset = RQ_NOWHERE,
     .set = default_words,
     .expected = "allow, ask, deny, allow_reads"},
    {.key = "rules", .kind = RQ_ARRAY, .max = RULES_MAX, .need = RQ_OPTIONAL, .offset = 0},

};

static const struct rq_field rule_fields[] = {
    {.key = "pattern", .kind = RQ_STRING, .max = 512, .need = RQ_NONEMPTY, .offset = RQ_NOWHERE},
    {.key = "permission",
     .kind = RQ_ENUM,
     .max = 0,
     .need = RQ_PRESENT,
     .offset = RQ_NOWHERE,
     .set = rq_permission_words,
     .expected = RQ_PERMISSION_EXPECTED},

};

static int rule(struct rq_ctx *c, json_object *o, const char *field, size_t i, void *elem,
                void *ctx)
{
    (void)i;
    (void)elem;
    (void)ctx;
    return rq_fields(c, o, field, rule_fields, ARRAY_SIZE(rule_fields), NULL);
}

int rq_permissions(struct rq_ctx *c, json_object *o)
{
    json_object *rules = NULL;
    int r =
        rq_fields(c, o, "permissions", permissions_fields, ARRAY_SIZE(permissions_fields), &rules);

    return r < 0 ? r : rq_each(c, rules, "permissions.rules", 0, NULL, NULL, rule, NULL);
}
