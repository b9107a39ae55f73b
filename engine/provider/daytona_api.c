#include "daytona_api.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "../jsonx.h"
#include "../util.h"
#include "ws_client.h"

#define API_ANSWER_MAX (4u * 1024 * 1024)
#define LIST_PAGE_MAX (16u * 1024 * 1024)
#define LIST_PAGE_LIMIT 100
#define LIST_PAGES_MAX 200
#define BODY_MAX (64u * 1024 * 1024)

/* ---- errors, states ------------------------------------------------------------------- */

const char *daytona_strerror(int r)
{
    switch (r) {
    case DAYTONA_E_CAPACITY:
        return "sandbox_capacity: the sandbox provider is rate limiting";
    case DAYTONA_E_SERVER:
        return "sandbox provider error";
    case DAYTONA_E_SANDBOX_FAILED:
        return "the sandbox failed to start";
    case DAYTONA_E_UNCERTAIN:
        return "the sandbox create lost its answer";
    default:
        return ar_strerror(r);
    }
}

static const char *const state_names[DAYTONA_STATE_COUNT] = {
    [DAYTONA_STATE_OTHER] = "other",
    [DAYTONA_STATE_CREATING] = "creating",
    [DAYTONA_STATE_RESTORING] = "restoring",
    [DAYTONA_STATE_DESTROYED] = "destroyed",
    [DAYTONA_STATE_DESTROYING] = "destroying",
    [DAYTONA_STATE_STARTED] = "started",
    [DAYTONA_STATE_STOPPED] = "stopped",
    [DAYTONA_STATE_STARTING] = "starting",
    [DAYTONA_STATE_STOPPING] = "stopping",
    [DAYTONA_STATE_ERROR] = "error",
    [DAYTONA_STATE_BUILD_FAILED] = "build_failed",
    [DAYTONA_STATE_PENDING_BUILD] = "pending_build",
    [DAYTONA_STATE_BUILDING_SNAPSHOT] = "building_snapshot",
    [DAYTONA_STATE_UNKNOWN] = "unknown",
    [DAYTONA_STATE_PULLING_SNAPSHOT] = "pulling_snapshot",
    [DAYTONA_STATE_ARCHIVED] = "archived",
    [DAYTONA_STATE_ARCHIVING] = "archiving",
    [DAYTONA_STATE_RESIZING] = "resizing",
    [DAYTONA_STATE_SNAPSHOTTING] = "snapshotting",
    [DAYTONA_STATE_FORKING] = "forking",
    [DAYTONA_STATE_PAUSING] = "pausing",
    [DAYTONA_STATE_PAUSED] = "paused",
    [DAYTONA_STATE_RESUMING] = "resuming",
};

enum daytona_state daytona_state_parse(const char *s)
{
    if (!s)
        return DAYTONA_STATE_OTHER;
    for (int i = 1; i < DAYTONA_STATE_COUNT; i++) {
        if (strcmp(s, state_names[i]) == 0)
            return (enum daytona_state)i;
    }
    return DAYTONA_STATE_OTHER;
}

const char *daytona_state_name(enum daytona_state s)
{
    if ((int)s < 0 || s >= DAYTONA_STATE_COUNT)
        return "other";
    return state_names[s];
}

bool daytona_state_transitional(enum daytona_state s)
{
    switch (s) {
    case DAYTONA_STATE_CREATING:
    case DAYTONA_STATE_RESTORING:
    case DAYTONA_STATE_DESTROYING:
    case DAYTONA_STATE_STARTING:
    case DAYTONA_STATE_STOPPING:
    case DAYTONA_STATE_PENDING_BUILD:
    case DAYTONA_STATE_BUILDING_SNAPSHOT:
    case DAYTONA_STATE_UNKNOWN:
    case DAYTONA_STATE_PULLING_SNAPSHOT:
    case DAYTONA_STATE_ARCHIVING:
    case DAYTONA_STATE_RESIZING:
    case DAYTONA_STATE_SNAPSHOTTING:
    case DAYTONA_STATE_FORKING:
    case DAYTONA_STATE_PAUSING:
    case DAYTONA_STATE_RESUMING:
        return true;
    default:
        return false;
    }
}

/* ---- configuration -------------------------------------------------------------------- */

static bool has_ctl(const char *s)
{
    for (; *s; s++) {
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    }
    return false;
}

static int copy_opt(const char *(*get)(const char *), const char *name, char *dst, size_t cap,
                    char *err, size_t errlen)
{
    const char *v = get(name);

    dst[0] = '\0';
    if (!v || !v[0])
        return 0;
    if (strlen(v) >= cap || has_ctl(v)) {
        snprintf(err, errlen, "%s: too long or holds control characters", name);
        return -EINVAL;
    }
    memcpy(dst, v, strlen(v) + 1);
    return 1;
}

/* http(s)://host[:port][/path]; plain http only for a loopback host. */
static int check_api_url(const char *url, char *err, size_t errlen)
{
    const char *host, *end;
    char h[256];
    size_t n;

    if (strncmp(url, "https://", 8) == 0) {
        host = url + 8;
    } else if (strncmp(url, "http://", 7) == 0) {
        host = url + 7;
    } else {
        snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_API_URL: must be an http(s) URL");
        return -EINVAL;
    }
    end = host + strcspn(host, ":/?#");
    n = (size_t)(end - host);
    if (n == 0 || n >= sizeof(h) || memchr(host, '@', strcspn(host, "/?#")) ||
        strpbrk(url, " \t")) {
        snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_API_URL: not a valid URL");
        return -EINVAL;
    }
    memcpy(h, host, n);
    h[n] = '\0';
    if (url[4] == ':' && strcmp(h, "localhost") != 0 && strncmp(h, "127.", 4) != 0 &&
        strcmp(h, "[::1]") != 0) {
        snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_API_URL: plain http is only allowed for "
                              "loopback hosts");
        return -EINVAL;
    }
    return 0;
}

int daytona_config_load(const char *(*get)(const char *name), struct daytona_config *ret,
                        char *err, size_t errlen)
{
    struct daytona_config *cfg;
    size_t n;
    int r;

    cfg = calloc(1, sizeof(*cfg));
    if (!cfg)
        return -ENOMEM;
    cfg->request_timeout_ms = 90000;
    cfg->connect_timeout_ms = 10000;
    cfg->max_429_retries = 3;
    cfg->retry_cap_ms = 30000;
    cfg->poll_step_ms = 250;
    r = copy_opt(get, "AGENT_RUNNER_DAYTONA_API_URL", cfg->api_url, sizeof(cfg->api_url), err,
                 errlen);
    if (r == 0) {
        snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_API_URL is not set");
        r = -ENOENT;
    }
    if (r < 0)
        goto out;
    n = strlen(cfg->api_url);
    while (n > 0 && cfg->api_url[n - 1] == '/')
        cfg->api_url[--n] = '\0';
    r = check_api_url(cfg->api_url, err, errlen);
    if (r < 0)
        goto out;
    r = copy_opt(get, "AGENT_RUNNER_DAYTONA_API_KEY", cfg->api_key, sizeof(cfg->api_key), err,
                 errlen);
    if (r == 0) {
        snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_API_KEY is not set");
        r = -ENOENT;
    }
    if (r < 0)
        goto out;
    r = copy_opt(get, "AGENT_RUNNER_DAYTONA_ORGANIZATION", cfg->organization,
                 sizeof(cfg->organization), err, errlen);
    if (r >= 0)
        r = copy_opt(get, "AGENT_RUNNER_DAYTONA_TARGET", cfg->target, sizeof(cfg->target), err,
                     errlen);
    if (r >= 0)
        r = copy_opt(get, "AGENT_RUNNER_DAYTONA_SNAPSHOT", cfg->snapshot, sizeof(cfg->snapshot),
                     err, errlen);
    if (r >= 0)
        r = copy_opt(get, "AGENT_RUNNER_DAYTONA_IMAGE", cfg->image, sizeof(cfg->image), err,
                     errlen);
    if (r >= 0)
        r = copy_opt(get, "AGENT_RUNNER_DAYTONA_CA_FILE", cfg->ca_file, sizeof(cfg->ca_file),
                     err, errlen);
    if (r < 0)
        goto out;
    if (cfg->snapshot[0] && cfg->image[0]) {
        snprintf(err, errlen, "AGENT_RUNNER_DAYTONA_SNAPSHOT and AGENT_RUNNER_DAYTONA_IMAGE: "
                              "set one, not both");
        r = -EINVAL;
        goto out;
    }
    *ret = *cfg;
    r = 0;
out:
    daytona_config_wipe(cfg);
    free(cfg);
    return r;
}

static const char *env_get(const char *name)
{
    return getenv(name);
}

int daytona_config_from_env(struct daytona_config *ret, char *err, size_t errlen)
{
    return daytona_config_load(env_get, ret, err, errlen);
}

void daytona_config_wipe(struct daytona_config *cfg)
{
    explicit_bzero(cfg->api_key, sizeof(cfg->api_key));
}

/* ---- sandbox DTO ---------------------------------------------------------------------- */

/* A plain token that can go into a URL path: [A-Za-z0-9._-]{1,63}, not "." or "..". */
static bool token_ok(const char *s)
{
    size_t n = 0;

    if (!s || !s[0] || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (; s[n]; n++) {
        char ch = s[n];

        if (!(isalnum((unsigned char)ch) || ch == '-' || ch == '_' || ch == '.'))
            return false;
    }
    return n < DAYTONA_ID_MAX;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = src ? strlen(src) : 0;

    if (n >= cap)
        n = cap - 1;
    if (n)
        memcpy(dst, src, n);
    dst[n] = '\0';
}

static int int_member(json_object *o, const char *key, int dflt)
{
    json_object *v = jsonx_get(o, key);

    if (!v || !json_object_is_type(v, json_type_int))
        return dflt;
    return json_object_get_int(v);
}

static bool http_url_ok(const char *u)
{
    return (strncmp(u, "http://", 7) == 0 || strncmp(u, "https://", 8) == 0) && !has_ctl(u) &&
           !strchr(u, ' ');
}

int daytona_sandbox_parse(json_object *dto, struct daytona_sandbox *ret, char *err,
                          size_t errlen)
{
    struct daytona_sandbox sb;
    const char *id, *tb, *state;
    json_object *labels;
    size_t n;

    memset(&sb, 0, sizeof(sb));
    if (!dto || !json_object_is_type(dto, json_type_object)) {
        snprintf(err, errlen, "sandbox description: not an object");
        return -EBADMSG;
    }
    id = jsonx_str(dto, "id");
    if (!token_ok(id)) {
        snprintf(err, errlen, "sandbox description: bad id");
        return -EBADMSG;
    }
    copy_str(sb.id, sizeof(sb.id), id);
    copy_str(sb.name, sizeof(sb.name), jsonx_str(dto, "name"));
    state = jsonx_str(dto, "state");
    if (!state) {
        snprintf(err, errlen, "sandbox description: no state");
        return -EBADMSG;
    }
    sb.state = daytona_state_parse(state);
    sb.desired = daytona_state_parse(jsonx_str(dto, "desiredState"));
    copy_str(sb.error_reason, sizeof(sb.error_reason), jsonx_str(dto, "errorReason"));
    sb.recoverable = json_object_get_boolean(jsonx_get(dto, "recoverable"));
    sb.auto_stop_min = int_member(dto, "autoStopInterval", DAYTONA_INTERVAL_UNSET);
    sb.auto_archive_min = int_member(dto, "autoArchiveInterval", DAYTONA_INTERVAL_UNSET);
    sb.auto_delete_min = int_member(dto, "autoDeleteInterval", DAYTONA_INTERVAL_UNSET);
    sb.network_block_all = json_object_get_boolean(jsonx_get(dto, "networkBlockAll"));
    copy_str(sb.network_allow_list, sizeof(sb.network_allow_list),
             jsonx_str(dto, "networkAllowList"));
    copy_str(sb.domain_allow_list, sizeof(sb.domain_allow_list),
             jsonx_str(dto, "domainAllowList"));
    tb = jsonx_str(dto, "toolboxProxyUrl");
    if (tb) {
        if (!http_url_ok(tb)) {
            snprintf(err, errlen, "sandbox description: bad toolboxProxyUrl");
            return -EBADMSG;
        }
        n = strlen(tb);
        while (n > 0 && tb[n - 1] == '/')
            n--;
        if (n + 1 + strlen(sb.id) >= sizeof(sb.toolbox)) {
            snprintf(err, errlen, "sandbox description: toolboxProxyUrl too long");
            return -EBADMSG;
        }
        memcpy(sb.toolbox, tb, n);
        snprintf(sb.toolbox + n, sizeof(sb.toolbox) - n, "/%s", sb.id);
    }
    labels = json_object_new_object();
    if (!labels)
        return -ENOMEM;
    json_object_object_foreach(jsonx_get(dto, "labels") ? jsonx_get(dto, "labels") : labels, k,
                               v)
    {
        if (v && json_object_is_type(v, json_type_string))
            json_object_object_add(labels, k, json_object_new_string(json_object_get_string(v)));
    }
    sb.labels = labels;
    *ret = sb;
    return 0;
}

void daytona_sandbox_release(struct daytona_sandbox *sb)
{
    if (!sb)
        return;
    json_object_put(sb->labels);
    sb->labels = NULL;
}

const char *daytona_sandbox_label(const struct daytona_sandbox *sb, const char *name)
{
    return jsonx_str(sb->labels, name);
}

/* ---- create body ---------------------------------------------------------------------- */

/*
 * One allow-list entry: an IPv4 address or CIDR (normalised to a.b.c.d/n) or a host name
 * (lower case, optionally "*."). Anything else is not expressible on Daytona.
 */
static int classify_entry(const char *in, char *out, size_t outlen, bool *ret_domain)
{
    char s[300], addr[64];
    const char *slash;
    struct in_addr a;
    bool letter = false;
    size_t n;

    while (*in == ' ' || *in == '\t')
        in++;
    n = strlen(in);
    while (n > 0 && (in[n - 1] == ' ' || in[n - 1] == '\t'))
        n--;
    if (n == 0 || n >= sizeof(s))
        return -EINVAL;
    memcpy(s, in, n);
    s[n] = '\0';
    slash = strchr(s, '/');
    if (slash || strspn(s, "0123456789.") == n) {
        uint64_t prefix = 32;
        size_t alen = slash ? (size_t)(slash - s) : n;

        if (alen == 0 || alen >= sizeof(addr))
            return -EINVAL;
        memcpy(addr, s, alen);
        addr[alen] = '\0';
        if (inet_pton(AF_INET, addr, &a) != 1)
            return -EINVAL;
        if (slash && parse_u64(slash + 1, 0, 32, &prefix) < 0)
            return -EINVAL;
        snprintf(out, outlen, "%s/%u", addr, (unsigned)prefix);
        *ret_domain = false;
        return 0;
    }
    if (n > 253)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];

        if (i == 0 && ch == '*' && s[1] == '.')
            continue;
        if (isalpha(ch))
            letter = true;
        else if (!(isdigit(ch) || ch == '-' || ch == '.'))
            return -EINVAL;
        if (ch == '.' && (i + 1 == n || s[i + 1] == '.' || (i > 0 && s[i - 1] == '.' && i != 1)))
            return -EINVAL;
        s[i] = (char)tolower(ch);
    }
    if (!letter || s[0] == '.' || s[0] == '-' || n >= outlen)
        return -EINVAL;
    memcpy(out, s, n + 1);
    *ret_domain = true;
    return 0;
}

struct allow_lists {
    char cidr[DAYTONA_MAX_ALLOW][24];
    size_t ncidr;
    char dom[DAYTONA_MAX_ALLOW][256];
    size_t ndom;
};

static int allow_add(struct allow_lists *l, const char *entry, const char *field, size_t idx,
                     char *err, size_t errlen)
{
    char norm[256];
    bool domain;

    if (classify_entry(entry, norm, sizeof(norm), &domain) < 0) {
        snprintf(err, errlen, "%s[%zu]: \"%.64s\" is not an IPv4 address, IPv4 CIDR or host "
                              "name (all Daytona can enforce)",
                 field, idx, entry);
        return -EINVAL;
    }
    if (domain) {
        for (size_t i = 0; i < l->ndom; i++) {
            if (strcmp(l->dom[i], norm) == 0)
                return 0;
        }
        if (l->ndom == DAYTONA_MAX_ALLOW) {
            snprintf(err, errlen, "%s: Daytona enforces at most %d host names", field,
                     DAYTONA_MAX_ALLOW);
            return -EINVAL;
        }
        copy_str(l->dom[l->ndom++], sizeof(l->dom[0]), norm);
    } else {
        for (size_t i = 0; i < l->ncidr; i++) {
            if (strcmp(l->cidr[i], norm) == 0)
                return 0;
        }
        if (l->ncidr == DAYTONA_MAX_ALLOW) {
            snprintf(err, errlen, "%s: Daytona enforces at most %d IPv4 CIDRs", field,
                     DAYTONA_MAX_ALLOW);
            return -EINVAL;
        }
        copy_str(l->cidr[l->ncidr++], sizeof(l->cidr[0]), norm);
    }
    return 0;
}

static json_object *join_list(char (*items)[24], size_t n, char (*ditems)[256], size_t dn)
{
    struct buf b;
    json_object *o;

    buf_init(&b, 8192);
    for (size_t i = 0; i < n; i++)
        (void)buf_printf(&b, "%s%s", i ? "," : "", items[i]);
    for (size_t i = 0; i < dn; i++)
        (void)buf_printf(&b, "%s%s", i ? "," : "", ditems[i]);
    o = json_object_new_string(buf_str(&b));
    buf_release(&b);
    return o;
}

static bool env_name_ok(const char *s)
{
    if (!s || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
        return false;
    for (; *s; s++) {
        if (!(isalnum((unsigned char)*s) || *s == '_'))
            return false;
    }
    return true;
}

static int map_object(const struct daytona_kv *kv, size_t n, bool env, const char *field,
                      json_object **ret, char *err, size_t errlen)
{
    json_object *o = json_object_new_object();

    if (!o)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!kv[i].name || !kv[i].name[0] || !kv[i].value || (env && !env_name_ok(kv[i].name))) {
            snprintf(err, errlen, "%s[%zu]: bad name or value", field, i);
            json_object_put(o);
            return -EINVAL;
        }
        json_object_object_add(o, kv[i].name, json_object_new_string(kv[i].value));
    }
    *ret = o;
    return 0;
}

int daytona_create_body(const struct daytona_config *cfg, const struct daytona_create_params *p,
                        json_object **ret, char *err, size_t errlen)
{
    struct allow_lists *l = NULL;
    json_object *body = NULL, *o = NULL;
    bool block_all = false;
    int r;

    body = json_object_new_object();
    l = calloc(1, sizeof(*l));
    if (!body || !l) {
        r = -ENOMEM;
        goto out;
    }
    if (p->name) {
        if (!token_ok(p->name)) {
            snprintf(err, errlen, "sandbox name: not a plain token");
            r = -EINVAL;
            goto out;
        }
        json_object_object_add(body, "name", json_object_new_string(p->name));
    }
    r = map_object(p->labels, p->nlabels, false, "labels", &o, err, errlen);
    if (r < 0)
        goto out;
    json_object_object_add(body, "labels", o);
    r = map_object(p->env, p->nenv, true, "env", &o, err, errlen);
    if (r < 0)
        goto out;
    json_object_object_add(body, "env", o);
    if (p->auto_stop_min != DAYTONA_INTERVAL_UNSET) {
        if (p->auto_stop_min < 0) {
            snprintf(err, errlen, "autoStopInterval: must be >= 0");
            r = -EINVAL;
            goto out;
        }
        json_object_object_add(body, "autoStopInterval", json_object_new_int(p->auto_stop_min));
    }
    if (p->auto_archive_min != DAYTONA_INTERVAL_UNSET) {
        if (p->auto_archive_min < 0) {
            snprintf(err, errlen, "autoArchiveInterval: must be >= 0");
            r = -EINVAL;
            goto out;
        }
        json_object_object_add(body, "autoArchiveInterval",
                               json_object_new_int(p->auto_archive_min));
    }
    if (p->auto_delete_min != DAYTONA_INTERVAL_UNSET)
        json_object_object_add(body, "autoDeleteInterval",
                               json_object_new_int(p->auto_delete_min < 0 ? -1
                                                                          : p->auto_delete_min));
    switch (p->network) {
    case NETWORK_ON:
        break;
    case NETWORK_ALLOWLIST:
        for (size_t i = 0; i < p->nallow; i++) {
            r = allow_add(l, p->allow[i], "sandboxPermission.network.allowlist", i, err, errlen);
            if (r < 0)
                goto out;
        }
        /* the run's own endpoints are always reachable */
        __attribute__((fallthrough));
    case NETWORK_OFF:
        for (size_t i = 0; i < p->nalways_allow; i++) {
            r = allow_add(l, p->always_allow[i], "run endpoints", i, err, errlen);
            if (r < 0)
                goto out;
        }
        block_all = l->ncidr == 0 && l->ndom == 0;
        break;
    }
    if (block_all) {
        json_object_object_add(body, "networkBlockAll", json_object_new_boolean(1));
    } else if (p->network != NETWORK_ON) {
        json_object_object_add(body, "networkBlockAll", json_object_new_boolean(0));
        if (l->ncidr)
            json_object_object_add(body, "networkAllowList",
                                   join_list(l->cidr, l->ncidr, NULL, 0));
        if (l->ndom)
            json_object_object_add(body, "domainAllowList", join_list(NULL, 0, l->dom, l->ndom));
    }
    if (cfg->snapshot[0]) {
        json_object_object_add(body, "snapshot", json_object_new_string(cfg->snapshot));
    } else if (cfg->image[0]) {
        char df[300];

        snprintf(df, sizeof(df), "FROM %s\n", cfg->image);
        o = json_object_new_object();
        json_object_object_add(o, "dockerfileContent", json_object_new_string(df));
        json_object_object_add(o, "contextHashes", json_object_new_array());
        json_object_object_add(body, "buildInfo", o);
    }
    if (cfg->target[0])
        json_object_object_add(body, "target", json_object_new_string(cfg->target));
    json_object_object_add(body, "public", json_object_new_boolean(0));
    *ret = body;
    body = NULL;
    r = 0;
out:
    json_object_put(body);
    free(l);
    return r;
}

/* ---- network convergence ------------------------------------------------------------- */

/* Does the comma list a hold the same entries as b (order, spaces and case ignored)? */
static bool same_list(const char *a, const char *b)
{
    const char *lists[2] = {a ? a : "", b ? b : ""};

    for (int k = 0; k < 2; k++) {
        const char *p = lists[k], *other = lists[1 - k];

        while (*p) {
            const char *e;
            size_t n;
            bool found = false;

            while (*p == ' ' || *p == ',')
                p++;
            e = p + strcspn(p, ",");
            n = (size_t)(e - p);
            while (n > 0 && p[n - 1] == ' ')
                n--;
            if (n > 0) {
                const char *q = other;

                while (*q && !found) {
                    const char *qe;
                    size_t m;

                    while (*q == ' ' || *q == ',')
                        q++;
                    qe = q + strcspn(q, ",");
                    m = (size_t)(qe - q);
                    while (m > 0 && q[m - 1] == ' ')
                        m--;
                    found = m == n && strncasecmp(p, q, n) == 0;
                    q = qe;
                }
                if (!found)
                    return false;
            }
            p = e;
        }
    }
    return true;
}

bool daytona_network_matches(const struct daytona_sandbox *sb, json_object *body)
{
    bool block = json_object_get_boolean(jsonx_get(body, "networkBlockAll"));

    if (block != sb->network_block_all)
        return false;
    if (block)
        return true;
    return same_list(jsonx_str(body, "networkAllowList"), sb->network_allow_list) &&
           same_list(jsonx_str(body, "domainAllowList"), sb->domain_allow_list);
}

int daytona_network_settings(json_object *body, json_object **ret)
{
    json_object *o = json_object_new_object();
    const char *allow = jsonx_str(body, "networkAllowList");
    const char *dom = jsonx_str(body, "domainAllowList");

    if (!o)
        return -ENOMEM;
    /* block-all clears the CIDR list by itself; the domain list is cleared explicitly */
    if (json_object_get_boolean(jsonx_get(body, "networkBlockAll"))) {
        json_object_object_add(o, "networkBlockAll", json_object_new_boolean(1));
    } else {
        json_object_object_add(o, "networkBlockAll", json_object_new_boolean(0));
        json_object_object_add(o, "networkAllowList", json_object_new_string(allow ? allow : ""));
    }
    json_object_object_add(o, "domainAllowList", json_object_new_string(dom ? dom : ""));
    *ret = o;
    return 0;
}

/* ---- HTTP core ------------------------------------------------------------------------ */

struct daytona_client {
    struct daytona_config cfg;
    CURL *curl;
    long status;
    char message[DAYTONA_MESSAGE_MAX];
    unsigned throttled;
    /* the exchange in flight */
    long retry_after_ms;
    struct buf *resp;
    bool overflow;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

int daytona_client_new(const struct daytona_config *cfg, struct daytona_client **ret)
{
    struct daytona_client *c;

    pthread_once(&curl_once, curl_init_once);
    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->cfg = *cfg;
    c->curl = curl_easy_init();
    if (!c->curl) {
        daytona_client_free(c);
        return -ENOMEM;
    }
    *ret = c;
    return 0;
}

void daytona_client_free(struct daytona_client *c)
{
    if (!c)
        return;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    daytona_config_wipe(&c->cfg);
    free(c);
}

const struct daytona_config *daytona_client_config(const struct daytona_client *c)
{
    return &c->cfg;
}

long daytona_client_status(const struct daytona_client *c)
{
    return c->status;
}

const char *daytona_client_message(const struct daytona_client *c)
{
    return c->message;
}

unsigned daytona_client_throttled(const struct daytona_client *c)
{
    return c->throttled;
}

/* Remember a failure message with the key (and anything longer than it) scrubbed out. */
static void set_message(struct daytona_client *c, const char *msg)
{
    char *hit;
    size_t klen = strlen(c->cfg.api_key);

    snprintf(c->message, sizeof(c->message), "%s", msg ? msg : "");
    for (char *p = c->message; *p; p++) {
        if ((unsigned char)*p < 0x20)
            *p = ' ';
    }
    if (klen < 4)
        return;
    for (hit = strstr(c->message, c->cfg.api_key); hit; hit = strstr(hit, c->cfg.api_key)) {
        memmove(hit + 3, hit + klen, strlen(hit + klen) + 1);
        memcpy(hit, "***", 3);
    }
}

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
    struct daytona_client *c = ctx;

    if (!c->resp)
        return size * n;
    if (buf_append(c->resp, data, size * n) < 0) {
        c->overflow = true;
        return 0;
    }
    return size * n;
}

/* Retry-After and Retry-After-<scope>, in seconds (honour both spellings). */
static size_t on_header(char *data, size_t size, size_t n, void *ctx)
{
    struct daytona_client *c = ctx;
    size_t len = size * n;
    const char *colon, *end = data + len;
    char val[32];
    size_t vlen = 0;
    uint64_t secs;

    if (len <= 11 || strncasecmp(data, "retry-after", 11) != 0)
        return len;
    colon = memchr(data, ':', len); /* the header line is not NUL-terminated */
    if (colon) {
        colon++;
        while (colon < end && (*colon == ' ' || *colon == '\t'))
            colon++;
        while (colon + vlen < end && colon[vlen] != '\r' && colon[vlen] != '\n')
            vlen++;
        if (vlen > 0 && vlen < sizeof(val)) {
            memcpy(val, colon, vlen);
            val[vlen] = '\0';
            if (parse_u64(val, 0, 3600, &secs) == 0 && (long)secs * 1000 > c->retry_after_ms)
                c->retry_after_ms = (long)secs * 1000;
        }
    }
    return len;
}

static int status_errno(long status)
{
    if (status >= 200 && status < 300)
        return 0;
    switch (status) {
    case 400:
    case 422:
        return -EINVAL;
    case 401:
    case 403:
        return -EACCES;
    case 404:
        return -ENOENT;
    case 408:
        return -ETIMEDOUT;
    case 409:
        return -EBUSY;
    case 410:
        return -EPIPE;
    case 429:
        return DAYTONA_E_CAPACITY;
    default:
        return status >= 500 ? DAYTONA_E_SERVER : -EPROTO;
    }
}

static int curl_errno(CURLcode rc, bool overflow)
{
    switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
        return -EHOSTUNREACH;
    case CURLE_WRITE_ERROR:
        return overflow ? -E2BIG : -EIO;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
        return -ECONNRESET;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
        return -EPROTO;
    default:
        return -EIO;
    }
}

/* The server's error text: `message` (a string, or NestJS's array of strings). */
static void message_from_body(struct daytona_client *c, const struct buf *body)
{
    json_object *doc = NULL, *m;
    char err[64];

    c->message[0] = '\0';
    if (!body || body->len == 0)
        return;
    if (jsonx_parse(body->data, body->len, 16, &doc, err, sizeof(err)) < 0 || !doc) {
        set_message(c, "");
        return;
    }
    m = jsonx_get(doc, "message");
    if (m && json_object_is_type(m, json_type_array) && json_object_array_length(m) > 0)
        m = json_object_array_get_idx(m, 0);
    if (m && json_object_is_type(m, json_type_string))
        set_message(c, json_object_get_string(m));
    json_object_put(doc);
}

struct request {
    const char *method;
    const char *url;
    const char *body; /* JSON text, or NULL */
    size_t body_len;
    curl_mime *mime;
    bool skip_activity;
    struct buf *resp; /* the answer body (its cap applies); NULL = discard */
    long timeout_ms;  /* 0 = the configured request timeout */
};

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/*
 * One exchange, with the 429 retries. Returns 0 for a 2xx answer (status in *ret_status),
 * the mapped error otherwise (the body of an error answer feeds the message).
 */
static int perform(struct daytona_client *c, const struct request *rq, long *ret_status)
{
    struct curl_slist *h = NULL;
    long status = 0;
    int r = 0;

    c->status = 0;
    c->message[0] = '\0';
    h = curl_slist_append(h, "X-Daytona-SDK-Version: " DAYTONA_SDK_VERSION);
    h = curl_slist_append(h, "X-Daytona-Source: agent-runner");
    h = curl_slist_append(h, "Expect:");
    if (rq->body)
        h = curl_slist_append(h, "Content-Type: application/json");
    if (rq->skip_activity)
        h = curl_slist_append(h, "X-Daytona-Skip-Last-Activity-Update: true");
    if (c->cfg.organization[0]) {
        char org[200];

        snprintf(org, sizeof(org), "X-Daytona-Organization-ID: %s", c->cfg.organization);
        h = curl_slist_append(h, org);
    }
    if (!h) {
        r = -ENOMEM;
        goto out;
    }
    for (unsigned attempt = 0;; attempt++) {
        CURLcode rc;
        CURL *e = c->curl;

        curl_easy_reset(e);
        c->retry_after_ms = 0;
        c->overflow = false;
        c->resp = rq->resp;
        if (rq->resp)
            buf_reset(rq->resp);
        curl_easy_setopt(e, CURLOPT_URL, rq->url);
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                         rq->timeout_ms > 0 ? rq->timeout_ms : c->cfg.request_timeout_ms);
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->cfg.connect_timeout_ms);
        curl_easy_setopt(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        curl_easy_setopt(e, CURLOPT_XOAUTH2_BEARER, c->cfg.api_key);
        curl_easy_setopt(e, CURLOPT_USERAGENT, "agent-runner/" AR_VERSION);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
        curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
        if (c->cfg.ca_file[0])
            curl_easy_setopt(e, CURLOPT_CAINFO, c->cfg.ca_file);
        if (rq->mime) {
            curl_easy_setopt(e, CURLOPT_MIMEPOST, rq->mime);
        } else if (rq->body) {
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, rq->body);
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
        }
        if (strcmp(rq->method, "GET") != 0 && !(strcmp(rq->method, "POST") == 0 &&
                                                 (rq->mime || rq->body)))
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, rq->method);
        if (strcmp(rq->method, "POST") == 0 && !rq->mime && !rq->body) {
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
        }
        rc = curl_easy_perform(e);
        if (rc == CURLE_OK)
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        if (rc != CURLE_OK) {
            r = curl_errno(rc, c->overflow);
            c->status = 0;
            set_message(c, r == -E2BIG ? "answer too large" : curl_easy_strerror(rc));
            goto out;
        }
        if (status == 429 && attempt < c->cfg.max_429_retries) {
            long wait = c->retry_after_ms > 0 ? c->retry_after_ms : 500L << attempt;

            if (wait > c->cfg.retry_cap_ms)
                wait = c->cfg.retry_cap_ms;
            c->throttled++;
            sleep_ms(wait);
            continue;
        }
        break;
    }
    *ret_status = status;
    r = status_errno(status);
    if (r < 0) {
        c->status = status;
        message_from_body(c, rq->resp);
        if (status == 429)
            set_message(c, "rate limited by Daytona: retries exhausted");
        else if (!c->message[0])
            snprintf(c->message, sizeof(c->message), "HTTP %ld", status);
    }
out:
    c->resp = NULL;
    curl_slist_free_all(h);
    return r;
}

/* url = api_url + path (path printf-style). */
static int api_url(struct daytona_client *c, char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int api_url(struct daytona_client *c, char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    size_t n = strlen(c->cfg.api_url);
    int m;

    if (n >= cap)
        return -ENAMETOOLONG;
    memcpy(out, c->cfg.api_url, n);
    va_start(ap, fmt);
    m = vsnprintf(out + n, cap - n, fmt, ap);
    va_end(ap);
    if (m < 0 || (size_t)m >= cap - n)
        return -ENAMETOOLONG;
    return 0;
}

/* JSON request + JSON answer (either may be absent). */
static int call_json(struct daytona_client *c, const char *method, const char *url,
                     json_object *body, bool skip_activity, long timeout_ms, size_t answer_max,
                     json_object **ret_doc, long *ret_status)
{
    struct request rq = {.method = method, .url = url, .skip_activity = skip_activity,
                         .timeout_ms = timeout_ms};
    struct buf resp;
    json_object *doc = NULL;
    long status = 0;
    char err[96];
    size_t blen = 0;
    int r;

    buf_init(&resp, answer_max);
    if (body) {
        rq.body = jsonx_text(body, &blen);
        rq.body_len = blen;
    }
    rq.resp = &resp;
    r = perform(c, &rq, &status);
    if (ret_status)
        *ret_status = status;
    if (r < 0)
        goto out;
    if (ret_doc && resp.len > 0) {
        if (jsonx_parse(resp.data, resp.len, 32, &doc, err, sizeof(err)) < 0) {
            set_message(c, "the answer is not JSON");
            c->status = status;
            r = DAYTONA_E_SERVER;
            goto out;
        }
    }
    if (ret_doc) {
        *ret_doc = doc;
        doc = NULL;
    }
out:
    json_object_put(doc);
    buf_release(&resp);
    return r;
}

static int sandbox_from(struct daytona_client *c, json_object *doc, struct daytona_sandbox *ret)
{
    char err[96];
    int r;

    r = daytona_sandbox_parse(doc, ret, err, sizeof(err));
    if (r < 0) {
        set_message(c, err);
        return DAYTONA_E_SERVER;
    }
    return 0;
}

/* ---- sandbox lifecycle ---------------------------------------------------------------- */

int daytona_sandbox_get(struct daytona_client *c, const char *id, struct daytona_sandbox *ret)
{
    json_object *doc = NULL;
    char url[DAYTONA_URL_MAX + 128];
    int r;

    if (!token_ok(id))
        return -EINVAL;
    r = api_url(c, url, sizeof(url), "/sandbox/%s", id);
    if (r < 0)
        return r;
    r = call_json(c, "GET", url, NULL, false, 0, API_ANSWER_MAX, &doc, NULL);
    if (r >= 0)
        r = sandbox_from(c, doc, ret);
    json_object_put(doc);
    return r;
}

int daytona_sandbox_wait(struct daytona_client *c, const char *id, uint32_t want,
                         long timeout_ms, struct daytona_sandbox *ret)
{
    int64_t deadline = now_ms() + timeout_ms;
    struct daytona_sandbox sb = {0};
    int r;

    for (;;) {
        daytona_sandbox_release(&sb);
        r = daytona_sandbox_get(c, id, &sb);
        if (r < 0)
            return r;
        if (want & DAYTONA_BIT(sb.state))
            break;
        if (sb.state == DAYTONA_STATE_ERROR || sb.state == DAYTONA_STATE_BUILD_FAILED) {
            set_message(c, sb.error_reason[0] ? sb.error_reason : "sandbox in error state");
            r = DAYTONA_E_SANDBOX_FAILED;
            break;
        }
        if (sb.state == DAYTONA_STATE_DESTROYED) {
            r = -ENOENT;
            break;
        }
        if (now_ms() >= deadline) {
            snprintf(c->message, sizeof(c->message), "sandbox still %s",
                     daytona_state_name(sb.state));
            r = -ETIMEDOUT;
            break;
        }
        sleep_ms(c->cfg.poll_step_ms);
    }
    if (ret) {
        *ret = sb;
        return r;
    }
    daytona_sandbox_release(&sb);
    return r;
}

int daytona_sandbox_create(struct daytona_client *c, const struct daytona_create_params *p,
                           long create_timeout_ms, struct daytona_sandbox *ret, char *err,
                           size_t errlen)
{
    int64_t start = now_ms();
    struct daytona_sandbox sb = {0};
    json_object *body = NULL, *doc = NULL;
    char url[DAYTONA_URL_MAX + 32];
    long status = 0, left;
    int r;

    r = daytona_create_body(&c->cfg, p, &body, err, errlen);
    if (r < 0)
        return r;
    r = api_url(c, url, sizeof(url), "/sandbox");
    if (r < 0)
        goto out;
    r = call_json(c, "POST", url, body, false,
                  create_timeout_ms > c->cfg.request_timeout_ms ? create_timeout_ms : 0,
                  API_ANSWER_MAX, &doc, &status);
    if (r == DAYTONA_E_SERVER || r == -ECONNRESET || r == -ETIMEDOUT) {
        snprintf(err, errlen, "Daytona create: %s (the sandbox may exist)",
                 c->message[0] ? c->message : daytona_strerror(r));
        r = DAYTONA_E_UNCERTAIN;
        goto out;
    }
    if (r == -EINVAL && strncmp(c->message, "Sandbox failed to start", 23) == 0) {
        snprintf(err, errlen, "Daytona: %s", c->message);
        if (p->name)
            (void)daytona_sandbox_delete(c, p->name);
        r = DAYTONA_E_SANDBOX_FAILED;
        goto out;
    }
    if (r < 0) {
        snprintf(err, errlen, "Daytona create: %s",
                 c->message[0] ? c->message : daytona_strerror(r));
        goto out;
    }
    r = sandbox_from(c, doc, &sb);
    if (r < 0) {
        snprintf(err, errlen, "Daytona create: %s", c->message);
        goto out;
    }
    if (sb.state != DAYTONA_STATE_STARTED) {
        struct daytona_sandbox now = {0};

        left = create_timeout_ms - (now_ms() - start);
        r = daytona_sandbox_wait(c, sb.id, DAYTONA_BIT(DAYTONA_STATE_STARTED),
                                 left > 0 ? left : 0, &now);
        if (r < 0) {
            snprintf(err, errlen, "Daytona create: sandbox did not start: %s",
                     c->message[0] ? c->message : daytona_strerror(r));
            daytona_sandbox_release(&now);
            (void)daytona_sandbox_delete(c, sb.id);
            goto out;
        }
        daytona_sandbox_release(&sb);
        sb = now;
    }
    *ret = sb;
    memset(&sb, 0, sizeof(sb));
out:
    daytona_sandbox_release(&sb);
    json_object_put(body);
    json_object_put(doc);
    return r;
}

int daytona_sandbox_list(struct daytona_client *c, const struct daytona_kv *labels,
                         size_t nlabels, size_t max_items, daytona_list_fn fn, void *ctx)
{
    json_object *lab = NULL, *doc = NULL;
    char *enc = NULL, cursor[64] = "";
    struct buf url;
    size_t count = 0;
    char err[96];
    int r;

    buf_init(&url, 16384);
    r = map_object(labels, nlabels, false, "labels", &lab, err, sizeof(err));
    if (r < 0)
        goto out;
    enc = curl_easy_escape(c->curl, jsonx_text(lab, NULL), 0);
    if (!enc) {
        r = -ENOMEM;
        goto out;
    }
    for (int page = 0; page < LIST_PAGES_MAX && count < max_items; page++) {
        json_object *items, *next;
        const char *nc;

        buf_reset(&url);
        r = buf_printf(&url, "%s/sandbox?labels=%s&limit=%d%s%s", c->cfg.api_url, enc,
                       LIST_PAGE_LIMIT, cursor[0] ? "&cursor=" : "", cursor);
        if (r < 0)
            goto out;
        json_object_put(doc);
        doc = NULL;
        r = call_json(c, "GET", buf_str(&url), NULL, false, 0, LIST_PAGE_MAX, &doc, NULL);
        if (r < 0)
            goto out;
        /* {items, nextCursor}; an older server answers a bare array */
        items = json_object_is_type(doc, json_type_array) ? doc : jsonx_get(doc, "items");
        if (!items || !json_object_is_type(items, json_type_array)) {
            set_message(c, "list: no items");
            r = DAYTONA_E_SERVER;
            goto out;
        }
        for (size_t i = 0; i < json_object_array_length(items) && count < max_items; i++) {
            struct daytona_sandbox sb;

            if (daytona_sandbox_parse(json_object_array_get_idx(items, i), &sb, err,
                                      sizeof(err)) < 0)
                continue;
            count++;
            r = fn ? fn(ctx, &sb) : 0;
            daytona_sandbox_release(&sb);
            if (r < 0)
                goto out;
        }
        next = json_object_is_type(doc, json_type_array) ? NULL : jsonx_get(doc, "nextCursor");
        nc = next && json_object_is_type(next, json_type_string) ? json_object_get_string(next)
                                                                 : NULL;
        if (!nc || !nc[0] || !token_ok(nc) || strcmp(nc, cursor) == 0)
            break;
        snprintf(cursor, sizeof(cursor), "%s", nc);
    }
    r = count > 0x7fffffff ? 0x7fffffff : (int)count;
out:
    curl_free(enc);
    json_object_put(lab);
    json_object_put(doc);
    buf_release(&url);
    return r;
}

static int lifecycle_post(struct daytona_client *c, const char *id, const char *what,
                          struct daytona_sandbox *ret)
{
    json_object *doc = NULL;
    char url[DAYTONA_URL_MAX + 160];
    int r;

    if (!token_ok(id))
        return -EINVAL;
    r = api_url(c, url, sizeof(url), "/sandbox/%s/%s", id, what);
    if (r < 0)
        return r;
    r = call_json(c, "POST", url, NULL, false, 0, API_ANSWER_MAX, ret ? &doc : NULL, NULL);
    if (r >= 0 && ret)
        r = sandbox_from(c, doc, ret);
    json_object_put(doc);
    return r;
}

int daytona_sandbox_start(struct daytona_client *c, const char *id, struct daytona_sandbox *ret)
{
    return lifecycle_post(c, id, "start", ret);
}

int daytona_sandbox_stop(struct daytona_client *c, const char *id, bool force)
{
    return lifecycle_post(c, id, force ? "stop?force=true" : "stop", NULL);
}

int daytona_sandbox_archive(struct daytona_client *c, const char *id)
{
    return lifecycle_post(c, id, "archive", NULL);
}

int daytona_sandbox_recover(struct daytona_client *c, const char *id)
{
    return lifecycle_post(c, id, "recover", NULL);
}

int daytona_sandbox_set_network(struct daytona_client *c, const char *id, json_object *settings,
                                struct daytona_sandbox *ret)
{
    json_object *doc = NULL;
    char url[DAYTONA_URL_MAX + 160];
    int r;

    if (!token_ok(id))
        return -EINVAL;
    r = api_url(c, url, sizeof(url), "/sandbox/%s/network-settings", id);
    if (r < 0)
        return r;
    r = call_json(c, "POST", url, settings, false, 0, API_ANSWER_MAX, ret ? &doc : NULL, NULL);
    if (r >= 0 && ret)
        r = sandbox_from(c, doc, ret);
    json_object_put(doc);
    return r;
}

int daytona_sandbox_mark_activity(struct daytona_client *c, const char *id)
{
    return lifecycle_post(c, id, "last-activity", NULL);
}

int daytona_sandbox_set_interval(struct daytona_client *c, const char *id,
                                 enum daytona_interval which, int minutes)
{
    static const char *const names[] = {"autostop", "autoarchive", "autodelete"};
    char what[48];

    if ((unsigned)which >= ARRAY_SIZE(names) || (which != DAYTONA_AUTODELETE && minutes < 0))
        return -EINVAL;
    snprintf(what, sizeof(what), "%s/%d", names[which], minutes);
    return lifecycle_post(c, id, what, NULL);
}

int daytona_sandbox_delete(struct daytona_client *c, const char *id)
{
    char url[DAYTONA_URL_MAX + 128];
    int r;

    if (!token_ok(id))
        return -EINVAL;
    r = api_url(c, url, sizeof(url), "/sandbox/%s", id);
    if (r < 0)
        return r;
    r = call_json(c, "DELETE", url, NULL, false, 0, API_ANSWER_MAX, NULL, NULL);
    return r == -ENOENT ? 0 : r;
}

/* ---- toolbox -------------------------------------------------------------------------- */

static int tb_url(const char *tb, struct buf *out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int tb_url(const char *tb, struct buf *out, const char *fmt, ...)
{
    va_list ap;
    int r;

    if (!tb || !http_url_ok(tb))
        return -EINVAL;
    buf_reset(out);
    r = buf_append_str(out, tb);
    if (r < 0)
        return r;
    va_start(ap, fmt);
    r = buf_vprintf(out, fmt, ap);
    va_end(ap);
    return r;
}

int daytona_user_home(struct daytona_client *c, const char *tb, char *ret, size_t len)
{
    json_object *doc = NULL;
    const char *dir;
    struct buf url;
    int r;

    buf_init(&url, 4096);
    r = tb_url(tb, &url, "/user-home-dir");
    if (r >= 0)
        r = call_json(c, "GET", buf_str(&url), NULL, false, 0, API_ANSWER_MAX, &doc, NULL);
    if (r < 0)
        goto out;
    dir = jsonx_str(doc, "dir");
    if (!dir || dir[0] != '/' || has_ctl(dir) || strlen(dir) >= len || strstr(dir, "/..")) {
        set_message(c, "user-home-dir: no usable dir");
        r = DAYTONA_E_SERVER;
        goto out;
    }
    memcpy(ret, dir, strlen(dir) + 1);
out:
    json_object_put(doc);
    buf_release(&url);
    return r;
}

int daytona_execute(struct daytona_client *c, const char *tb, const char *command,
                    int timeout_s, size_t max_output, int *ret_exit_code, struct buf *ret_output)
{
    json_object *body = json_object_new_object(), *doc = NULL, *res;
    struct buf url;
    int r;

    buf_init(&url, 4096);
    if (!body) {
        r = -ENOMEM;
        goto out;
    }
    json_object_object_add(body, "command", json_object_new_string(command));
    if (timeout_s > 0)
        json_object_object_add(body, "timeout", json_object_new_int(timeout_s));
    r = tb_url(tb, &url, "/process/execute");
    if (r < 0)
        goto out;
    r = call_json(c, "POST", buf_str(&url), body, false,
                  timeout_s > 0 ? (long)timeout_s * 1000 + 30000 : 0, max_output + 65536, &doc,
                  NULL);
    if (r < 0)
        goto out;
    res = jsonx_get(doc, "exitCode");
    if (!res || !json_object_is_type(res, json_type_int)) {
        set_message(c, "execute: no exitCode");
        r = DAYTONA_E_SERVER;
        goto out;
    }
    if (ret_output) {
        const char *text = jsonx_str(doc, "result");

        r = buf_append_str(ret_output, text ? text : "");
        if (r < 0)
            goto out;
    }
    *ret_exit_code = json_object_get_int(res);
    r = 0;
out:
    json_object_put(body);
    json_object_put(doc);
    buf_release(&url);
    return r;
}

int daytona_session_create(struct daytona_client *c, const char *tb, const char *sid)
{
    json_object *body;
    struct buf url;
    int r;

    if (!token_ok(sid))
        return -EINVAL;
    body = json_object_new_object();
    if (!body)
        return -ENOMEM;
    buf_init(&url, 4096);
    json_object_object_add(body, "sessionId", json_object_new_string(sid));
    r = tb_url(tb, &url, "/process/session");
    if (r >= 0)
        r = call_json(c, "POST", buf_str(&url), body, false, 0, API_ANSWER_MAX, NULL, NULL);
    json_object_put(body);
    buf_release(&url);
    return r;
}

int daytona_session_delete(struct daytona_client *c, const char *tb, const char *sid)
{
    struct buf url;
    int r;

    if (!token_ok(sid))
        return -EINVAL;
    buf_init(&url, 4096);
    r = tb_url(tb, &url, "/process/session/%s", sid);
    if (r >= 0)
        r = call_json(c, "DELETE", buf_str(&url), NULL, false, 0, API_ANSWER_MAX, NULL, NULL);
    buf_release(&url);
    return r == -ENOENT ? 0 : r;
}

int daytona_session_exec(struct daytona_client *c, const char *tb, const char *sid,
                         const char *command, bool suppress_input_echo,
                         char ret_cmd_id[DAYTONA_ID_MAX])
{
    json_object *body, *doc = NULL;
    const char *cid;
    struct buf url;
    int r;

    if (!token_ok(sid))
        return -EINVAL;
    body = json_object_new_object();
    if (!body)
        return -ENOMEM;
    buf_init(&url, 4096);
    json_object_object_add(body, "command", json_object_new_string(command));
    json_object_object_add(body, "runAsync", json_object_new_boolean(1));
    if (suppress_input_echo)
        json_object_object_add(body, "suppressInputEcho", json_object_new_boolean(1));
    r = tb_url(tb, &url, "/process/session/%s/exec", sid);
    if (r >= 0)
        r = call_json(c, "POST", buf_str(&url), body, false, 0, API_ANSWER_MAX, &doc, NULL);
    if (r < 0)
        goto out;
    cid = jsonx_str(doc, "cmdId");
    if (!token_ok(cid)) {
        set_message(c, "exec: no usable cmdId");
        r = DAYTONA_E_SERVER;
        goto out;
    }
    snprintf(ret_cmd_id, DAYTONA_ID_MAX, "%s", cid);
out:
    json_object_put(body);
    json_object_put(doc);
    buf_release(&url);
    return r;
}

int daytona_command_status(struct daytona_client *c, const char *tb, const char *sid,
                           const char *cid, int *ret_exit_code)
{
    json_object *doc = NULL, *code;
    struct buf url;
    int r;

    if (!token_ok(sid) || !token_ok(cid))
        return -EINVAL;
    buf_init(&url, 4096);
    r = tb_url(tb, &url, "/process/session/%s/command/%s", sid, cid);
    if (r >= 0)
        r = call_json(c, "GET", buf_str(&url), NULL, true, 0, API_ANSWER_MAX, &doc, NULL);
    if (r < 0)
        goto out;
    code = jsonx_get(doc, "exitCode");
    if (code && json_object_is_type(code, json_type_int)) {
        *ret_exit_code = json_object_get_int(code);
        r = 1;
    } else {
        r = 0;
    }
out:
    json_object_put(doc);
    buf_release(&url);
    return r;
}

int daytona_command_input(struct daytona_client *c, const char *tb, const char *sid,
                          const char *cid, const char *data, size_t len, bool skip_activity)
{
    json_object *body;
    struct buf url;
    int r;

    if (!token_ok(sid) || !token_ok(cid))
        return -EINVAL;
    body = json_object_new_object();
    if (!body)
        return -ENOMEM;
    buf_init(&url, 4096);
    json_object_object_add(body, "data", json_object_new_string_len(data, (int)len));
    r = tb_url(tb, &url, "/process/session/%s/command/%s/input", sid, cid);
    if (r >= 0)
        r = call_json(c, "POST", buf_str(&url), body, skip_activity, 0, API_ANSWER_MAX, NULL,
                      NULL);
    json_object_put(body);
    buf_release(&url);
    return r;
}

static int append_member(json_object *doc, const char *key, struct buf *out)
{
    json_object *v;

    if (!out)
        return 0;
    v = jsonx_get(doc, key);
    if (!v || !json_object_is_type(v, json_type_string))
        return 0;
    return buf_append(out, json_object_get_string(v), (size_t)json_object_get_string_len(v));
}

int daytona_command_logs(struct daytona_client *c, const char *tb, const char *sid,
                         const char *cid, struct buf *ret_raw, struct buf *ret_stdout,
                         struct buf *ret_stderr)
{
    json_object *doc = NULL;
    struct buf url;
    size_t cap = (ret_raw ? ret_raw->max : 0) + (ret_stdout ? ret_stdout->max : 0) +
                 (ret_stderr ? ret_stderr->max : 0);
    int r;

    if (!token_ok(sid) || !token_ok(cid))
        return -EINVAL;
    buf_init(&url, 4096);
    /* the JSON answer holds the log up to three times (escaped): size the cap for that */
    if (cap > BODY_MAX)
        cap = BODY_MAX;
    r = tb_url(tb, &url, "/process/session/%s/command/%s/logs", sid, cid);
    if (r >= 0)
        r = call_json(c, "GET", buf_str(&url), NULL, true, 0, cap * 2 + 65536, &doc, NULL);
    if (r < 0)
        goto out;
    if (!doc || !json_object_is_type(doc, json_type_object)) {
        set_message(c, "logs: not a JSON object (is X-Daytona-SDK-Version honoured?)");
        r = DAYTONA_E_SERVER;
        goto out;
    }
    r = append_member(doc, "output", ret_raw);
    if (r >= 0)
        r = append_member(doc, "stdout", ret_stdout);
    if (r >= 0)
        r = append_member(doc, "stderr", ret_stderr);
out:
    json_object_put(doc);
    buf_release(&url);
    return r;
}

int daytona_command_follow(struct daytona_client *c, const char *tb, const char *sid,
                           const char *cid, bool skip_activity, struct ws_conn **ret, char *err,
                           size_t errlen)
{
    struct ws_options o = {0};
    const char *headers[4];
    struct buf url, auth;
    int r;

    if (!token_ok(sid) || !token_ok(cid))
        return -EINVAL;
    buf_init(&url, 4096);
    buf_init(&auth, DAYTONA_KEY_MAX + 64);
    r = tb_url(tb, &url, "/process/session/%s/command/%s/logs?follow=true", sid, cid);
    if (r >= 0)
        r = buf_printf(&auth, "Authorization: Bearer %s", c->cfg.api_key);
    if (r < 0)
        goto out;
    headers[0] = buf_str(&auth);
    headers[1] = "X-Daytona-SDK-Version: " DAYTONA_SDK_VERSION;
    headers[2] = "X-Daytona-Source: agent-runner";
    headers[3] = "X-Daytona-Skip-Last-Activity-Update: true";
    o.url = buf_str(&url);
    o.headers = headers;
    o.nheaders = skip_activity ? 4 : 3;
    o.ca_file = c->cfg.ca_file[0] ? c->cfg.ca_file : NULL;
    o.connect_timeout_ms = (int)c->cfg.connect_timeout_ms;
    o.max_frame = WS_DEFAULT_MAX_FRAME;
    r = ws_connect(&o, ret, err, errlen);
out:
    if (auth.data)
        explicit_bzero(auth.data, auth.cap);
    buf_release(&auth);
    buf_release(&url);
    return r;
}

int daytona_files_upload(struct daytona_client *c, const char *tb, const struct daytona_file *f,
                         size_t n)
{
    struct request rq = {.method = "POST"};
    curl_mime *mime = NULL;
    json_object *doc = NULL, *errors;
    struct buf url, resp;
    long status = 0;
    char name[48], err[96];
    int r = 0;

    buf_init(&url, 4096);
    buf_init(&resp, API_ANSWER_MAX);
    if (n == 0)
        goto out;
    r = tb_url(tb, &url, "/files/bulk-upload");
    if (r < 0)
        goto out;
    mime = curl_mime_init(c->curl);
    if (!mime) {
        r = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        curl_mimepart *part;

        if (!f[i].path || !f[i].path[0] || has_ctl(f[i].path)) {
            set_message(c, "upload: bad path");
            r = -EINVAL;
            goto out;
        }
        /* the daemon needs the .path part before its .file part */
        part = curl_mime_addpart(mime);
        snprintf(name, sizeof(name), "files[%zu].path", i);
        if (!part || curl_mime_name(part, name) != CURLE_OK ||
            curl_mime_data(part, f[i].path, CURL_ZERO_TERMINATED) != CURLE_OK) {
            r = -ENOMEM;
            goto out;
        }
        part = curl_mime_addpart(mime);
        snprintf(name, sizeof(name), "files[%zu].file", i);
        if (!part || curl_mime_name(part, name) != CURLE_OK ||
            curl_mime_data(part, f[i].len ? f[i].data : "", f[i].len) != CURLE_OK ||
            curl_mime_filename(part, f[i].path) != CURLE_OK ||
            curl_mime_type(part, "application/octet-stream") != CURLE_OK) {
            r = -ENOMEM;
            goto out;
        }
    }
    rq.url = buf_str(&url);
    rq.mime = mime;
    rq.resp = &resp;
    r = perform(c, &rq, &status);
    if (r == -EINVAL && resp.len &&
        jsonx_parse(resp.data, resp.len, 16, &doc, err, sizeof(err)) < 0)
        doc = NULL;
    errors = jsonx_get(doc, "errors");
    if (r == -EINVAL && errors && json_object_is_type(errors, json_type_array) &&
        json_object_array_length(errors) > 0) {
        json_object *e0 = json_object_array_get_idx(errors, 0);
        char msg[DAYTONA_MESSAGE_MAX];

        snprintf(msg, sizeof(msg), "upload of \"%.80s\" failed: %.120s",
                 jsonx_str(e0, "path") ? jsonx_str(e0, "path") : "?",
                 jsonx_str(e0, "error") ? jsonx_str(e0, "error") : "?");
        set_message(c, msg);
        r = -EIO;
    }
out:
    curl_mime_free(mime);
    json_object_put(doc);
    buf_release(&url);
    buf_release(&resp);
    return r;
}

static int files_query(struct daytona_client *c, const char *tb, const char *what,
                       const char *path, const char *mode)
{
    struct buf url;
    char *ep = NULL, *em = NULL;
    int r;

    if (!path || !path[0] || has_ctl(path) || (mode && strspn(mode, "01234567") != strlen(mode)))
        return -EINVAL;
    buf_init(&url, 8192);
    ep = curl_easy_escape(c->curl, path, 0);
    em = mode ? curl_easy_escape(c->curl, mode, 0) : NULL;
    if (!ep || (mode && !em)) {
        r = -ENOMEM;
        goto out;
    }
    r = tb_url(tb, &url, "/files/%s?path=%s%s%s", what, ep, em ? "&mode=" : "", em ? em : "");
    if (r >= 0)
        r = call_json(c, "POST", buf_str(&url), NULL, false, 0, API_ANSWER_MAX, NULL, NULL);
out:
    curl_free(ep);
    curl_free(em);
    buf_release(&url);
    return r;
}

int daytona_files_folder(struct daytona_client *c, const char *tb, const char *path,
                         const char *mode)
{
    return files_query(c, tb, "folder", path, mode ? mode : "755");
}

int daytona_files_chmod(struct daytona_client *c, const char *tb, const char *path,
                        const char *mode)
{
    return files_query(c, tb, "permissions", path, mode);
}

int daytona_files_download(struct daytona_client *c, const char *tb, const char *path,
                           struct buf *ret)
{
    struct request rq = {.method = "GET"};
    struct buf url;
    char *ep;
    long status;
    int r;

    if (!path || !path[0] || has_ctl(path))
        return -EINVAL;
    buf_init(&url, 8192);
    ep = curl_easy_escape(c->curl, path, 0);
    if (!ep) {
        buf_release(&url);
        return -ENOMEM;
    }
    r = tb_url(tb, &url, "/files/download?path=%s", ep);
    if (r >= 0) {
        rq.url = buf_str(&url);
        rq.resp = ret;
        r = perform(c, &rq, &status);
    }
    curl_free(ep);
    buf_release(&url);
    return r;
}
