#include "proto/keeper_proto.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "core/contracts.h"

/* The spec's keys: the only place they are spelled. */
#define K_ENV_DIR "envDir"
#define K_SOCKET "socket"
#define K_IDLE "idleMs"
#define K_ATTACH "attachTimeoutMs"
#define K_PER_TURN "perTurn"
#define K_PROVIDER "provider"
#define K_BWRAP "bwrap"
#define K_SHM "shm"
#define K_SLOT "slot"
#define K_GENERATION "generation"
#define K_SANDBOX "sandbox"
#define K_SESSION "session"
#define K_HARNESS "harness"
#define K_SHELL "shell"
#define K_CONFINE "confine"
#define K_UID "uid"
#define K_GID "gid"
#define K_SHARED "shared"
#define K_NPROC "nproc"
#define K_CGROUP "cgroup"
#define K_DIR "dir"
#define K_V2 "v2"
#define K_CTRL "ctrl"
#define K_EGRESS "egress"
#define K_GATEWAY "modelGateway"

#define TOOL_TAG "@" KEEPER_PROTO_CHANNEL_TOOL " "

enum shape { NONE, MS, PIDS, STATUS, PAYLOAD, READY };

static const struct verb {
    enum keeper_msg_kind kind;
    const char *text; /* prefix on the wire, without the argument */
    enum shape shape;
} verbs[] = {
    {KEEPER_MSG_PARK, "#park", MS},
    {KEEPER_MSG_AWAIT, "#await", MS},
    {KEEPER_MSG_DESTROY, "#destroy", NONE},
    {KEEPER_MSG_CLAIM, "#claim", PAYLOAD},
    {KEEPER_MSG_HELLO, "#hello", PIDS},
    {KEEPER_MSG_BUSY, "#busy", NONE},
    {KEEPER_MSG_EXIT, "#exit", STATUS},
    {KEEPER_MSG_READY, "ready", READY},
    {KEEPER_MSG_ERROR, "error", PAYLOAD},
    {KEEPER_MSG_FAIL, "#fail", PAYLOAD},
    {KEEPER_MSG_TURN, "#turn", PAYLOAD},
    {KEEPER_MSG_ADOPT, "#adopt", PAYLOAD},
    {KEEPER_MSG_NOTURN, "#noturn", NONE},
    {KEEPER_MSG_LIMITS, "#limits", PAYLOAD},
    {KEEPER_MSG_MODEL, "#model", PAYLOAD},
    {KEEPER_MSG_MODEL_SYNC, "#model-sync", NONE},
    {KEEPER_MSG_MODEL_SYNCED, "#model-synced", NONE},
};

const char *keeper_proto_kind_name(enum keeper_msg_kind kind)
{
    if (kind == KEEPER_MSG_ACP)
        return "acp";
    if (kind == KEEPER_MSG_TOOL)
        return KEEPER_PROTO_CHANNEL_TOOL;
    for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
        if (verbs[i].kind == kind)
            return verbs[i].text[0] == '#' ? verbs[i].text + 1 : verbs[i].text;
    return "unknown";
}

static bool one_line(const char *s, size_t len)
{
    return len > 0 && !memchr(s, '\n', len) && !memchr(s, '\0', len);
}

/* A canonical decimal in [min, max] that is exactly the n bytes at s. */
static int number(const char *s, size_t n, uint64_t min, uint64_t max, uint64_t *ret)
{
    char tmp[24];

    if (n == 0 || n >= sizeof(tmp) || (n > 1 && s[0] == '0'))
        return -EBADMSG; /* one spelling per number: no leading zeros */
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    return util_parse_u64(tmp, min, max, ret) < 0 ? -EBADMSG : 0;
}

static int decode_args(const struct verb *v, const char *arg, size_t n, struct keeper_msg *m)
{
    const char *sp;
    uint64_t a, b;

    switch (v->shape) {
    case NONE:
        return n == 0 ? 0 : -EBADMSG;
    case MS:
        if (number(arg, n, 1, KEEPER_PROTO_WINDOW_MAX_MS, &a) < 0)
            return -EBADMSG;
        m->ms = a;
        return 0;
    case STATUS:
        if (number(arg, n, 0, KEEPER_PROTO_EXIT_MAX, &a) < 0)
            return -EBADMSG;
        m->status = (int)a;
        return 0;
    case READY: /* the pids, then the keeper's stage stamps (telemetry/stages.h) if any */
        sp = memchr(arg, ' ', n);
        sp = sp ? memchr(sp + 1, ' ', n - (size_t)(sp + 1 - arg)) : NULL;
        if (sp) {
            m->payload = sp + 1;
            m->payload_len = n - (size_t)(sp + 1 - arg);
            for (size_t i = 0; i < m->payload_len; i++)
                if (!strchr("0123456789:,", m->payload[i]))
                    return -EBADMSG;
            n = (size_t)(sp - arg);
        }
        /* fall through */
    case PIDS:
        sp = memchr(arg, ' ', n);
        if (!sp || number(arg, (size_t)(sp - arg), 1, INT32_MAX, &a) < 0 ||
            number(sp + 1, n - (size_t)(sp - arg) - 1, 0, INT32_MAX, &b) < 0)
            return -EBADMSG;
        m->keeper_pid = (int32_t)a;
        m->sandbox_pid = (int32_t)b;
        return 0;
    case PAYLOAD:
        if (n == 0 || memchr(arg, '\0', n))
            return -EBADMSG;
        m->payload = arg;
        m->payload_len = n;
        return 0;
    }
    return -EBADMSG;
}

int keeper_proto_decode(const char *line, size_t len, struct keeper_msg *ret)
{
    struct keeper_msg m;

    memset(&m, 0, sizeof(m));
    /* one line of text: a NUL would cut what a C string reader sees ("#hello 1\0junk 5") */
    if (len == 0 || memchr(line, '\n', len) || memchr(line, '\0', len))
        return -EBADMSG;
    if (line[0] == '{') {
        m.kind = KEEPER_MSG_ACP;
        m.payload = line;
        m.payload_len = len;
        *ret = m;
        return 0;
    }
    if (len > strlen(TOOL_TAG) && memcmp(line, TOOL_TAG, strlen(TOOL_TAG)) == 0) {
        m.kind = KEEPER_MSG_TOOL;
        m.payload = line + strlen(TOOL_TAG);
        m.payload_len = len - strlen(TOOL_TAG);
        if (m.payload[0] != '{' || memchr(m.payload, '\0', m.payload_len))
            return -EBADMSG;
        *ret = m;
        return 0;
    }
    for (size_t i = 0; i < ARRAY_SIZE(verbs); i++) {
        const struct verb *v = &verbs[i];
        size_t vn = strlen(v->text);

        if (len < vn || memcmp(line, v->text, vn) != 0)
            continue;
        if (len == vn) {
            if (v->shape != NONE)
                return -EBADMSG;
        } else if (line[vn] != ' ' || v->shape == NONE) {
            continue; /* "#parking" is not "#park" */
        }
        m.kind = v->kind;
        if (decode_args(v, line + vn + (len > vn), len - vn - (len > vn), &m) < 0)
            return -EBADMSG;
        *ret = m;
        return 0;
    }
    return -EBADMSG;
}

static const struct verb *verb_of(enum keeper_msg_kind kind)
{
    for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
        if (verbs[i].kind == kind)
            return &verbs[i];
    return NULL;
}

int keeper_proto_encode(const struct keeper_msg *m, struct buf *out)
{
    const struct verb *v;
    size_t mark = out->len;
    int r;

    if (m->kind == KEEPER_MSG_ACP || m->kind == KEEPER_MSG_TOOL) {
        if (!m->payload || !one_line(m->payload, m->payload_len) || m->payload[0] != '{')
            return -EINVAL;
        r = m->kind == KEEPER_MSG_TOOL ? buf_append_str(out, TOOL_TAG) : 0;
        if (r == 0)
            r = buf_append(out, m->payload, m->payload_len);
        goto end;
    }
    v = verb_of(m->kind);
    if (!v)
        return -EINVAL;
    switch (v->shape) {
    case NONE:
        r = buf_append_str(out, v->text);
        break;
    case MS:
        if (m->ms < 1 || m->ms > KEEPER_PROTO_WINDOW_MAX_MS)
            return -EINVAL;
        r = buf_printf(out, "%s %" PRIu64, v->text, m->ms);
        break;
    case STATUS:
        if (m->status < 0 || (unsigned)m->status > KEEPER_PROTO_EXIT_MAX)
            return -EINVAL;
        r = buf_printf(out, "%s %d", v->text, m->status);
        break;
    case PIDS:
    case READY:
        if (m->keeper_pid < 1 || m->sandbox_pid < 0)
            return -EINVAL;
        r = buf_printf(out, "%s %d %d", v->text, (int)m->keeper_pid, (int)m->sandbox_pid);
        if (r == 0 && v->shape == READY && m->payload && m->payload_len &&
            one_line(m->payload, m->payload_len)) {
            r = buf_append_char(out, ' ');
            if (r == 0)
                r = buf_append(out, m->payload, m->payload_len);
        }
        break;
    default: /* PAYLOAD */
        if (!m->payload || !one_line(m->payload, m->payload_len))
            return -EINVAL;
        r = buf_printf(out, "%s ", v->text);
        if (r == 0)
            r = buf_append(out, m->payload, m->payload_len);
        break;
    }
end:
    if (r == 0)
        r = buf_append_char(out, '\n');
    if (r < 0) {
        out->len = mark; /* unchanged on failure */
        if (out->data)
            out->data[mark] = '\0';
    }
    return r;
}

static json_object *confine_to_json(const struct sandbox_env *e)
{
    json_object *o = json_object_new_object(), *cg = json_object_new_array();

    json_object_object_add(o, K_UID, json_object_new_int64(e->ids.uid));
    json_object_object_add(o, K_GID, json_object_new_int64(e->ids.gid));
    json_object_object_add(o, K_SHARED, json_object_new_boolean(e->ids.shared));
    json_object_object_add(o, K_NPROC, json_object_new_int64((int64_t)e->nproc));
    for (size_t i = 0; i < e->cg.n; i++) {
        json_object *h = json_object_new_object();

        json_object_object_add(h, K_DIR, json_object_new_string(e->cg.h[i].dir));
        json_object_object_add(h, K_V2, json_object_new_boolean(e->cg.h[i].v2));
        json_object_object_add(h, K_CTRL, json_object_new_int64(e->cg.h[i].ctrl));
        json_object_array_add(cg, h);
    }
    json_object_object_add(o, K_CGROUP, cg);
    return o;
}

int keeper_spec_encode(const struct keeper_spec *s, struct buf *out)
{
    json_object *o = json_object_new_object();
    const char *text;
    size_t len;
    int r;

    if (!o)
        return -ENOMEM;
    json_object_object_add(o, K_ENV_DIR, json_object_new_string(s->env_dir));
    json_object_object_add(o, K_SOCKET, json_object_new_string(s->socket));
    json_object_object_add(o, K_IDLE, json_object_new_int64((int64_t)s->idle_ms));
    json_object_object_add(o, K_PER_TURN, json_object_new_boolean(s->per_turn));
    json_object_object_add(o, K_ATTACH, json_object_new_int64((int64_t)s->attach_timeout_ms));
    json_object_object_add(o, K_PROVIDER,
                           json_object_new_string(s->provider ? s->provider : "local"));
    if (s->bwrap)
        json_object_object_add(o, K_BWRAP, json_object_new_string(s->bwrap));
    if (s->has_slot && s->shm) {
        json_object_object_add(o, K_SHM, json_object_new_string(s->shm));
        json_object_object_add(o, K_SLOT, json_object_new_int64(s->slot));
        json_object_object_add(o, K_GENERATION, json_object_new_int64(s->generation));
    }
    if (s->shell)
        json_object_object_add(o, K_SHELL, json_object_new_boolean(true));
    else
        json_object_object_add(o, K_SANDBOX, json_object_get(s->sandbox));
    if (s->session_key)
        json_object_object_add(o, K_SESSION, json_object_new_string(s->session_key));
    if (s->harness)
        json_object_object_add(o, K_HARNESS, json_object_new_string(s->harness));
    if (s->confined)
        json_object_object_add(o, K_CONFINE, confine_to_json(&s->confine));
    if (s->egress)
        json_object_object_add(o, K_EGRESS, json_object_get(s->egress));
    if (s->gateway)
        json_object_object_add(o, K_GATEWAY, json_object_get(s->gateway));
    text = jsonx_text(o, &len);
    r = text ? buf_append(out, text, len) : -ENOMEM;
    json_object_put(o);
    return r;
}

/* A non-negative integer member within [min, max]; absent: dflt (or an error when dflt < 0). */
static int spec_u64(json_object *root, const char *key, uint64_t min, uint64_t max, int64_t dflt,
                    uint64_t *ret, char *err, size_t errlen)
{
    json_object *v = jsonx_get(root, key);
    int64_t n;

    if (!v) {
        if (dflt < 0) {
            snprintf(err, errlen, "keeper spec: %s is missing", key);
            return -EINVAL;
        }
        *ret = (uint64_t)dflt;
        return 0;
    }
    n = json_object_get_int64(v);
    if (!json_object_is_type(v, json_type_int) || n < 0 || (uint64_t)n < min || (uint64_t)n > max) {
        snprintf(err, errlen, "keeper spec: %s must be an integer in [%llu, %llu]", key,
                 (unsigned long long)min, (unsigned long long)max);
        return -EINVAL;
    }
    *ret = (uint64_t)n;
    return 0;
}

/* The cgroup folders of "confine": absolute, short enough, at most SANDBOX_CG_HIER_MAX. */
static int confine_cgroup(json_object *arr, struct sandbox_cgroup *cg, char *err, size_t errlen)
{
    size_t n = arr ? json_object_array_length(arr) : 0;

    if (arr && !json_object_is_type(arr, json_type_array))
        n = SANDBOX_CG_HIER_MAX + 1;
    if (n > SANDBOX_CG_HIER_MAX) {
        snprintf(err, errlen, "keeper spec: %s.%s must be an array of at most %d folders",
                 K_CONFINE, K_CGROUP, SANDBOX_CG_HIER_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        json_object *h = json_object_array_get_idx(arr, i);
        const char *dir = jsonx_str(h, K_DIR);
        uint64_t ctrl;

        if (!dir || dir[0] != '/' || strlen(dir) >= sizeof(cg->h[0].dir) ||
            spec_u64(h, K_CTRL, 0, 0xff, 0, &ctrl, err, errlen) < 0) {
            snprintf(err, errlen, "keeper spec: %s.%s[%zu] is not a cgroup folder", K_CONFINE,
                     K_CGROUP, i);
            return -EINVAL;
        }
        cg->h[i].v2 = json_object_get_boolean(jsonx_get(h, K_V2));
        cg->h[i].ctrl = (unsigned)ctrl;
        snprintf(cg->h[i].dir, sizeof(cg->h[i].dir), "%s", dir);
        snprintf(cg->h[i].procs, sizeof(cg->h[i].procs), "%s/cgroup.procs", dir);
    }
    cg->n = n;
    return 0;
}

/* "confine": the sandbox user (never uid or gid 0 unless shared), nproc, the cgroup. */
static int spec_confine(json_object *o, struct keeper_spec *s, char *err, size_t errlen)
{
    struct sandbox_env e;
    uint64_t uid, gid;
    int r;

    memset(&e, 0, sizeof(e));
    if (!json_object_is_type(o, json_type_object)) {
        snprintf(err, errlen, "keeper spec: %s must be an object", K_CONFINE);
        return -EINVAL;
    }
    e.ids.shared = json_object_get_boolean(jsonx_get(o, K_SHARED));
    r = spec_u64(o, K_UID, e.ids.shared ? 0 : 1, UINT32_MAX - 1, -1, &uid, err, errlen);
    if (r == 0)
        r = spec_u64(o, K_GID, e.ids.shared ? 0 : 1, UINT32_MAX - 1, -1, &gid, err, errlen);
    if (r == 0)
        r = spec_u64(o, K_NPROC, 0, UINT32_MAX, 0, &e.nproc, err, errlen);
    if (r == 0)
        r = confine_cgroup(jsonx_get(o, K_CGROUP), &e.cg, err, errlen);
    if (r < 0)
        return r;
    e.ids.uid = (uid_t)uid;
    e.ids.gid = (gid_t)gid;
    s->confined = true;
    s->confine = e;
    return 0;
}

static int spec_fields(json_object *root, struct keeper_spec *s, char *err, size_t errlen)
{
    json_object *pt = jsonx_get(root, K_PER_TURN);
    uint64_t slot, gen;
    int r;

    s->env_dir = jsonx_str(root, K_ENV_DIR);
    s->socket = jsonx_str(root, K_SOCKET);
    s->sandbox = jsonx_get(root, K_SANDBOX);
    s->provider = jsonx_str(root, K_PROVIDER);
    s->bwrap = jsonx_str(root, K_BWRAP);
    s->shm = jsonx_str(root, K_SHM);
    s->session_key = jsonx_str(root, K_SESSION);
    s->harness = jsonx_str(root, K_HARNESS);
    s->egress = jsonx_get(root, K_EGRESS);
    if (s->egress && !json_object_is_type(s->egress, json_type_object)) {
        snprintf(err, errlen, "keeper spec: %s must be an object", K_EGRESS);
        return -EINVAL;
    }
    s->gateway = jsonx_get(root, K_GATEWAY);
    if (s->gateway && !json_object_is_type(s->gateway, json_type_object)) {
        snprintf(err, errlen, "keeper spec: %s must be an object", K_GATEWAY);
        return -EINVAL;
    }
    if (jsonx_get(root, K_CONFINE)) {
        r = spec_confine(jsonx_get(root, K_CONFINE), s, err, errlen);
        if (r < 0)
            return r;
    }
    if (!s->provider)
        s->provider = "local";
    if (!s->env_dir || s->env_dir[0] != '/' || !s->socket || s->socket[0] != '/') {
        snprintf(err, errlen, "keeper spec: %s and %s must be absolute paths", K_ENV_DIR, K_SOCKET);
        return -EINVAL;
    }
    s->shell = json_object_get_boolean(jsonx_get(root, K_SHELL));
    if (s->shell && s->sandbox) {
        snprintf(err, errlen, "keeper spec: a shell has no %s yet", K_SANDBOX);
        return -EINVAL;
    }
    if (!s->shell && (!s->sandbox || !json_object_is_type(s->sandbox, json_type_object))) {
        snprintf(err, errlen, "keeper spec: %s must be an object", K_SANDBOX);
        return -EINVAL;
    }
    if (pt && !json_object_is_type(pt, json_type_boolean)) {
        snprintf(err, errlen, "keeper spec: %s must be a boolean", K_PER_TURN);
        return -EINVAL;
    }
    s->per_turn = pt && json_object_get_boolean(pt);
    r = spec_u64(root, K_IDLE, 1, KEEPER_PROTO_WINDOW_MAX_MS, -1, &s->idle_ms, err, errlen);
    if (r == 0)
        r = spec_u64(root, K_ATTACH, 1, KEEPER_PROTO_WINDOW_MAX_MS, KEEPER_SPEC_ATTACH_DEFAULT_MS,
                     &s->attach_timeout_ms, err, errlen);
    if (r < 0 || !s->shm)
        return r;
    r = spec_u64(root, K_SLOT, 0, UINT32_MAX, -1, &slot, err, errlen);
    if (r == 0)
        r = spec_u64(root, K_GENERATION, 0, UINT32_MAX, -1, &gen, err, errlen);
    if (r < 0)
        return r;
    s->has_slot = true;
    s->slot = (uint32_t)slot;
    s->generation = (uint32_t)gen;
    return 0;
}

int keeper_spec_decode(const char *text, size_t len, struct keeper_spec *ret, char *err,
                       size_t errlen)
{
    struct keeper_spec s;
    json_object *root = NULL;
    int r;

    memset(&s, 0, sizeof(s));
    if (len > KEEPER_SPEC_MAX) {
        snprintf(err, errlen, "keeper spec: larger than %u bytes", KEEPER_SPEC_MAX);
        return -E2BIG;
    }
    r = jsonx_parse(text, len, JSONX_DEFAULT_DEPTH, &root, err, errlen);
    if (r < 0)
        return r;
    if (!root || !json_object_is_type(root, json_type_object)) {
        snprintf(err, errlen, "keeper spec: not a JSON object");
        r = -EINVAL;
        goto out;
    }
    r = spec_fields(root, &s, err, errlen);
    if (r < 0)
        goto out;
    s.root = root;
    root = NULL;
    *ret = s;
out:
    json_object_put(root);
    return r;
}

void keeper_spec_release(struct keeper_spec *s)
{
    if (s->root)
        json_object_put(s->root);
    memset(s, 0, sizeof(*s));
}

int keeper_proto_write(int fd, const struct keeper_msg *m)
{
    struct buf line;
    int r;

    buf_init(&line, KEEPER_PROTO_LINE_MAX);
    r = keeper_proto_encode(m, &line);
    if (r == 0)
        r = util_write_all(fd, line.data, line.len);
    buf_release(&line);
    return r;
}

int keeper_proto_start_error(int fd, const char *text)
{
    struct keeper_msg m = {.kind = KEEPER_MSG_ERROR};
    char line[512];

    snprintf(line, sizeof(line), "%s", text && text[0] ? text : "unknown error");
    for (char *p = line; *p; p++)
        if (*p == '\n')
            *p = ' ';
    m.payload = line;
    m.payload_len = strlen(line);
    return keeper_proto_write(fd, &m);
}

int keeper_proto_start_ready(int fd, int32_t keeper_pid, int32_t sandbox_pid, const char *stamps)
{
    struct keeper_msg m = {.kind = KEEPER_MSG_READY,
                           .keeper_pid = keeper_pid,
                           .sandbox_pid = sandbox_pid,
                           .payload = stamps,
                           .payload_len = stamps ? strlen(stamps) : 0};

    return keeper_proto_write(fd, &m);
}

int keeper_spec_read(int fd, struct keeper_spec *ret, char *err, size_t errlen)
{
    struct buf b;
    char chunk[65536];
    int r;

    buf_init(&b, KEEPER_SPEC_MAX);
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n == -1 && errno == EINTR)
            continue;
        if (n == -1) {
            r = -errno;
            snprintf(err, errlen, "cannot read the keeper spec: %s", strerror(-r));
            goto out;
        }
        if (n == 0)
            break;
        r = buf_append(&b, chunk, (size_t)n);
        if (r < 0) {
            snprintf(err, errlen, "the keeper spec is larger than %u bytes", KEEPER_SPEC_MAX);
            goto out;
        }
    }
    r = keeper_spec_decode(buf_str(&b), b.len, ret, err, errlen);
out:
    buf_release(&b);
    return r;
}
