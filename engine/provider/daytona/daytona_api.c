#include "provider/daytona/daytona_api.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"

#define API_ANSWER_MAX (4u * 1024 * 1024)
#define LIST_PAGE_MAX (16u * 1024 * 1024)
#define LIST_PAGE_LIMIT 100
#define LIST_PAGES_MAX 200

/* ---- states ------------------------------------------------------------------------- */

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

/* ---- sandbox DTO ---------------------------------------------------------------------- */

/* The string member key into dst (cut to cap - 1 bytes; "" when absent). */
static void str_member(json_object *o, const char *key, char *dst, size_t cap)
{
    const char *v = jsonx_str(o, key);

    snprintf(dst, cap, "%s", v ? v : "");
}

static int int_member(json_object *o, const char *key, int dflt)
{
    json_object *v = jsonx_get(o, key);

    if (!v || !json_object_is_type(v, json_type_int))
        return dflt;
    return json_object_get_int(v);
}

int daytona_sandbox_parse(json_object *dto, struct daytona_sandbox *ret, char *err, size_t errlen)
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
    if (!daytona_id_ok(id)) {
        snprintf(err, errlen, "sandbox description: bad id");
        return -EBADMSG;
    }
    snprintf(sb.id, sizeof(sb.id), "%s", id);
    str_member(dto, "name", sb.name, sizeof(sb.name));
    state = jsonx_str(dto, "state");
    if (!state) {
        snprintf(err, errlen, "sandbox description: no state");
        return -EBADMSG;
    }
    sb.state = daytona_state_parse(state);
    sb.desired = daytona_state_parse(jsonx_str(dto, "desiredState"));
    str_member(dto, "errorReason", sb.error_reason, sizeof(sb.error_reason));
    sb.recoverable = json_object_get_boolean(jsonx_get(dto, "recoverable"));
    sb.auto_stop_min = int_member(dto, "autoStopInterval", DAYTONA_INTERVAL_UNSET);
    sb.auto_archive_min = int_member(dto, "autoArchiveInterval", DAYTONA_INTERVAL_UNSET);
    sb.auto_delete_min = int_member(dto, "autoDeleteInterval", DAYTONA_INTERVAL_UNSET);
    sb.network_block_all = json_object_get_boolean(jsonx_get(dto, "networkBlockAll"));
    str_member(dto, "networkAllowList", sb.network_allow_list, sizeof(sb.network_allow_list));
    str_member(dto, "domainAllowList", sb.domain_allow_list, sizeof(sb.domain_allow_list));
    tb = jsonx_str(dto, "toolboxProxyUrl");
    if (tb) {
        if (!daytona_url_ok(tb)) {
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
    json_object_object_foreach(jsonx_get(dto, "labels") ? jsonx_get(dto, "labels") : labels, k, v)
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

static int map_object(const struct daytona_kv *kv, size_t n, bool env, const char *field,
                      json_object **ret, char *err, size_t errlen)
{
    json_object *o = json_object_new_object();

    if (!o)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!kv[i].name || !kv[i].name[0] || !kv[i].value ||
            (env && !daytona_env_name_ok(kv[i].name))) {
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
    json_object *body = NULL, *o = NULL;
    int r;

    body = json_object_new_object();
    if (!body) {
        r = -ENOMEM;
        goto out;
    }
    if (p->name) {
        if (!daytona_id_ok(p->name)) {
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
        json_object_object_add(
            body, "autoDeleteInterval",
            json_object_new_int(p->auto_delete_min < 0 ? -1 : p->auto_delete_min));
    r = daytona_network_fields(p->network, p->allow, p->nallow, p->always_allow, p->nalways_allow,
                               body, err, errlen);
    if (r < 0)
        goto out;
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
    return r;
}

bool daytona_sandbox_network_matches(const struct daytona_sandbox *sb, json_object *body)
{
    return daytona_network_matches(sb->network_block_all, sb->network_allow_list,
                                   sb->domain_allow_list, body);
}

/* url = api_url + path (path printf-style). */
static int api_url(struct daytona_client *c, char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int api_url(struct daytona_client *c, char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    size_t n = strlen(daytona_client_config(c)->api_url);
    int m;

    if (n >= cap)
        return -ENAMETOOLONG;
    memcpy(out, daytona_client_config(c)->api_url, n);
    va_start(ap, fmt);
    m = vsnprintf(out + n, cap - n, fmt, ap);
    va_end(ap);
    if (m < 0 || (size_t)m >= cap - n)
        return -ENAMETOOLONG;
    return 0;
}

static int sandbox_from(struct daytona_client *c, json_object *doc, struct daytona_sandbox *ret)
{
    char err[96];
    int r;

    r = daytona_sandbox_parse(doc, ret, err, sizeof(err));
    if (r < 0) {
        daytona_client_set_message(c, err);
        return DAYTONA_E_SERVER;
    }
    return 0;
}

/* ---- sandbox lifecycle ---------------------------------------------------------------- */

/*
 * method /sandbox/{id}[/what] with a JSON body (or NULL); the answer, a Sandbox, is parsed
 * into ret when ret is given.
 */
static int sandbox_call(struct daytona_client *c, const char *method, const char *id,
                        const char *what, json_object *body, struct daytona_sandbox *ret)
{
    struct daytona_request rq = {.method = method, .body = body, .answer_max = API_ANSWER_MAX};
    json_object *doc = NULL;
    char url[DAYTONA_URL_MAX + 160];
    int r;

    if (!daytona_id_ok(id))
        return -EINVAL;
    r = api_url(c, url, sizeof(url), "/sandbox/%s%s%s", id, what ? "/" : "", what ? what : "");
    if (r < 0)
        return r;
    rq.url = url;
    r = daytona_client_call(c, &rq, ret ? &doc : NULL, NULL);
    if (r >= 0 && ret)
        r = sandbox_from(c, doc, ret);
    json_object_put(doc);
    return r;
}

int daytona_sandbox_get(struct daytona_client *c, const char *id, struct daytona_sandbox *ret)
{
    return sandbox_call(c, "GET", id, NULL, NULL, ret);
}

int daytona_sandbox_wait(struct daytona_client *c, const char *id, uint32_t want, long timeout_ms,
                         struct daytona_sandbox *ret)
{
    int64_t deadline = util_now_ms() + timeout_ms;
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
            daytona_client_set_message(c, sb.error_reason[0] ? sb.error_reason
                                                             : "sandbox in error state");
            r = DAYTONA_E_SANDBOX_FAILED;
            break;
        }
        if (sb.state == DAYTONA_STATE_DESTROYED) {
            r = -ENOENT;
            break;
        }
        if (util_now_ms() >= deadline) {
            char msg[64];

            snprintf(msg, sizeof(msg), "sandbox still %s", daytona_state_name(sb.state));
            daytona_client_set_message(c, msg);
            r = -ETIMEDOUT;
            break;
        }
        util_sleep_ms(daytona_client_config(c)->poll_step_ms);
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
    int64_t start = util_now_ms();
    struct daytona_request rq = {.method = "POST", .answer_max = API_ANSWER_MAX};
    struct daytona_sandbox sb = {0};
    json_object *body = NULL, *doc = NULL;
    char url[DAYTONA_URL_MAX + 32];
    long status = 0, left;
    int r;

    r = daytona_create_body(daytona_client_config(c), p, &body, err, errlen);
    if (r < 0)
        return r;
    r = api_url(c, url, sizeof(url), "/sandbox");
    if (r < 0)
        goto out;
    rq.url = url;
    rq.body = body;
    /* the server holds the answer while it creates: wait that long when it is longer */
    if (create_timeout_ms > daytona_client_config(c)->request_timeout_ms)
        rq.timeout_ms = create_timeout_ms;
    r = daytona_client_call(c, &rq, &doc, &status);
    if (r == DAYTONA_E_SERVER || r == -ECONNRESET || r == -ETIMEDOUT) {
        snprintf(err, errlen, "Daytona create: %s (the sandbox may exist)",
                 daytona_client_message(c)[0] ? daytona_client_message(c) : daytona_strerror(r));
        r = DAYTONA_E_UNCERTAIN;
        goto out;
    }
    if (r == -EINVAL && strncmp(daytona_client_message(c), "Sandbox failed to start", 23) == 0) {
        snprintf(err, errlen, "Daytona: %s", daytona_client_message(c));
        if (p->name)
            (void)daytona_sandbox_delete(c, p->name);
        r = DAYTONA_E_SANDBOX_FAILED;
        goto out;
    }
    if (r < 0) {
        snprintf(err, errlen, "Daytona create: %s",
                 daytona_client_message(c)[0] ? daytona_client_message(c) : daytona_strerror(r));
        goto out;
    }
    r = sandbox_from(c, doc, &sb);
    if (r < 0) {
        snprintf(err, errlen, "Daytona create: %s", daytona_client_message(c));
        goto out;
    }
    if (sb.state != DAYTONA_STATE_STARTED) {
        struct daytona_sandbox now = {0};

        left = create_timeout_ms - (util_now_ms() - start);
        r = daytona_sandbox_wait(c, sb.id, DAYTONA_BIT(DAYTONA_STATE_STARTED), left > 0 ? left : 0,
                                 &now);
        if (r < 0) {
            snprintf(err, errlen, "Daytona create: sandbox did not start: %s",
                     daytona_client_message(c)[0] ? daytona_client_message(c)
                                                  : daytona_strerror(r));
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

int daytona_sandbox_list(struct daytona_client *c, const struct daytona_kv *labels, size_t nlabels,
                         size_t max_items, daytona_list_fn fn, void *ctx)
{
    struct daytona_request rq = {.method = "GET", .answer_max = LIST_PAGE_MAX};
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
    enc = daytona_client_escape(c, jsonx_text(lab, NULL));
    if (!enc) {
        r = -ENOMEM;
        goto out;
    }
    for (int page = 0; page < LIST_PAGES_MAX && count < max_items; page++) {
        json_object *items, *next;
        const char *nc;

        buf_reset(&url);
        r = buf_printf(&url, "%s/sandbox?labels=%s&limit=%d%s%s", daytona_client_config(c)->api_url,
                       enc, LIST_PAGE_LIMIT, cursor[0] ? "&cursor=" : "", cursor);
        if (r < 0)
            goto out;
        json_object_put(doc);
        doc = NULL;
        rq.url = buf_str(&url);
        r = daytona_client_call(c, &rq, &doc, NULL);
        if (r < 0)
            goto out;
        /* {items, nextCursor}; an older server answers a bare array */
        items = json_object_is_type(doc, json_type_array) ? doc : jsonx_get(doc, "items");
        if (!items || !json_object_is_type(items, json_type_array)) {
            daytona_client_set_message(c, "list: no items");
            r = DAYTONA_E_SERVER;
            goto out;
        }
        for (size_t i = 0; i < json_object_array_length(items) && count < max_items; i++) {
            struct daytona_sandbox sb;

            if (daytona_sandbox_parse(json_object_array_get_idx(items, i), &sb, err, sizeof(err)) <
                0)
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
        if (!nc || !nc[0] || !daytona_id_ok(nc) || strcmp(nc, cursor) == 0)
            break;
        snprintf(cursor, sizeof(cursor), "%s", nc);
    }
    r = count > 0x7fffffff ? 0x7fffffff : (int)count;
out:
    free(enc);
    json_object_put(lab);
    json_object_put(doc);
    buf_release(&url);
    return r;
}

int daytona_sandbox_start(struct daytona_client *c, const char *id, struct daytona_sandbox *ret)
{
    return sandbox_call(c, "POST", id, "start", NULL, ret);
}

int daytona_sandbox_stop(struct daytona_client *c, const char *id, bool force)
{
    return sandbox_call(c, "POST", id, force ? "stop?force=true" : "stop", NULL, NULL);
}

int daytona_sandbox_recover(struct daytona_client *c, const char *id)
{
    return sandbox_call(c, "POST", id, "recover", NULL, NULL);
}

int daytona_sandbox_set_network(struct daytona_client *c, const char *id, json_object *settings,
                                struct daytona_sandbox *ret)
{
    return sandbox_call(c, "POST", id, "network-settings", settings, ret);
}

int daytona_sandbox_set_labels(struct daytona_client *c, const char *id,
                               const struct daytona_kv *labels, size_t n)
{
    json_object *body = json_object_new_object(), *lo = json_object_new_object();
    int r;

    for (size_t i = 0; i < n; i++)
        json_object_object_add(lo, labels[i].name, json_object_new_string(labels[i].value));
    json_object_object_add(body, "labels", lo);
    r = sandbox_call(c, "PUT", id, "labels", body, NULL);
    json_object_put(body);
    return r;
}

int daytona_sandbox_mark_activity(struct daytona_client *c, const char *id)
{
    return sandbox_call(c, "POST", id, "last-activity", NULL, NULL);
}

int daytona_sandbox_delete(struct daytona_client *c, const char *id)
{
    int r = sandbox_call(c, "DELETE", id, NULL, NULL, NULL);

    return r == -ENOENT ? 0 : r;
}
