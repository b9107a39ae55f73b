#include "provider/daytona/daytona_exec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "base/util.h"
#include "provider/ws_client.h"

#define EXEC_RECONNECTS 3
#define EXEC_LOG_MAX (64u * 1024 * 1024)

static const char *const verbs[] = {"sh",  "bash", "env",  "mkdir",  "rm",   "mv",    "cp",
                                    "ln",  "cat",  "echo", "printf", "test", "chmod", "true",
                                    "tar", "git",  "node", "npm",    "pnpm", "sudo",  "bwrap"};

static const char *const attrs[] = {
    "agent_runner.sandbox.provider",        "agent_runner.sandbox.exec.command",
    "agent_runner.sandbox.exec.exit_code",  "agent_runner.sandbox.exec.wall_ms",
    "agent_runner.sandbox.exec.timed_out",  "agent_runner.sandbox.exec.critical_path",
    "agent_runner.sandbox.exec.reconnects", "agent_runner.sandbox.outcome",
    "agent_runner.sandbox.sandbox_id",
};

struct run {
    const struct daytona_exec_opts *o;
    struct daytona_exec_result *res;
    struct buf delivered[3]; /* what was streamed, per stream (capped like the result) */
    int sink_error;
};

static int hand_out(struct run *run, enum daytona_stream s, const uint8_t *data, size_t len)
{
    int r;

    if (len == 0 || !run->o->on_output)
        return 0;
    r = run->o->on_output(run->o->ctx, s, data, len);
    if (r < 0 && !run->sink_error)
        run->sink_error = r;
    return 0;
}

static int on_demux(void *ctx, enum daytona_stream s, const uint8_t *data, size_t len)
{
    struct run *run = ctx;
    struct buf *d = &run->delivered[s];
    size_t room = d->max - d->len;

    if (buf_append(d, data, len < room ? len : room) < 0 || len > room)
        run->res->truncated = true;
    return hand_out(run, s, data, len);
}

/* The undelivered suffix of one stream, then the final text into the result. */
static void finish_stream(struct run *run, enum daytona_stream s, struct buf *final)
{
    struct buf *d = &run->delivered[s];
    size_t off, n;

    n = daytona_undelivered_suffix((const uint8_t *)d->data, d->len, (const uint8_t *) final->data,
                                   final->len, &off);
    /* a capped delivered copy cannot be compared past its cap: nothing more to hand out */
    if (!(run->res->truncated && d->len == d->max))
        (void)hand_out(run, s, (const uint8_t *) final->data + off, n);
}

/* Follow the command's log once (until it closes, breaks, or the deadline passes). */
static void follow(struct daytona_client *c, const char *tb, const char *sid, const char *cid,
                   int64_t deadline, struct daytona_demux *dm, struct run *run)
{
    struct ws_conn *ws = NULL;
    char err[256];

    if (daytona_toolbox_follow(c, tb, sid, cid, false, &ws, err, sizeof(err)) < 0)
        return; /* the command's status decides what happens next */
    daytona_demux_reconnect(dm);
    for (;;) {
        struct ws_event ev;
        int wait = -1;

        if (deadline) {
            int64_t left = deadline - util_now_ms();

            if (left <= 0)
                break;
            wait = (int)left;
        }
        if (ws_read(ws, wait, &ev) != 1 || ev.type != WS_EV_DATA)
            break; /* closed or broken */
        (void)daytona_demux_feed(dm, ev.data, ev.len, on_demux, run);
    }
    ws_free(ws);
}

/* The command exited: deliver the undelivered suffixes and fill the result. */
static void finish(struct daytona_client *c, const char *tb, const char *sid, const char *cid,
                   struct daytona_demux *dm, struct run *run, size_t cap)
{
    struct daytona_exec_result *ret = run->res;
    struct buf out, errb;

    buf_init(&out, EXEC_LOG_MAX);
    buf_init(&errb, EXEC_LOG_MAX);
    (void)daytona_demux_finish(dm, on_demux, run);
    if (daytona_toolbox_logs(c, tb, sid, cid, NULL, &out, &errb) == 0) {
        finish_stream(run, DAYTONA_STDOUT, &out);
        finish_stream(run, DAYTONA_STDERR, &errb);
        (void)buf_append(&ret->out, out.data, out.len < cap ? out.len : cap);
        (void)buf_append(&ret->err, errb.data, errb.len < cap ? errb.len : cap);
        if (out.len > cap || errb.len > cap)
            ret->truncated = true;
    } else {
        /* no final text: what was streamed is the result */
        (void)buf_append(&ret->out, run->delivered[DAYTONA_STDOUT].data,
                         run->delivered[DAYTONA_STDOUT].len);
        (void)buf_append(&ret->err, run->delivered[DAYTONA_STDERR].data,
                         run->delivered[DAYTONA_STDERR].len);
    }
    buf_release(&out);
    buf_release(&errb);
}

/* 1 and the exit code once GET command shows one (0, 50, 100, 200 ms), 0 while it runs. */
static int exit_status(struct daytona_client *c, const char *tb, const char *sid, const char *cid,
                       int *ret_code)
{
    static const long waits[] = {0, 50, 100, 200};
    int r = 0;

    for (size_t k = 0; k < ARRAY_SIZE(waits); k++) {
        util_sleep_ms(waits[k]);
        r = daytona_toolbox_command_status(c, tb, sid, cid, ret_code);
        if (r != 0)
            break;
    }
    return r;
}

int daytona_exec(struct daytona_client *c, const char *tb, const char *command,
                 const struct daytona_exec_opts *o, struct daytona_exec_result *ret, char *err,
                 size_t errlen)
{
    size_t cap = o->max_output ? o->max_output : DAYTONA_EXEC_OUTPUT_MAX;
    int64_t t0 = util_now_ms(), deadline = o->timeout_ms > 0 ? t0 + o->timeout_ms : 0;
    struct daytona_demux dm;
    struct run run = {.o = o, .res = ret};
    struct buf wrapped;
    char sid[DAYTONA_ID_MAX], cid[DAYTONA_ID_MAX], rnd[17];
    bool session = false;
    int r;

    memset(ret, 0, sizeof(*ret));
    buf_init(&ret->out, cap);
    buf_init(&ret->err, cap);
    for (int i = 0; i < 3; i++)
        buf_init(&run.delivered[i], cap);
    buf_init(&wrapped, strlen(command) + 16);
    daytona_demux_init(&dm);
    r = buf_printf(&wrapped, "(\n%s\n)", command); /* a top-level exit cannot end the shell */
    if (r >= 0)
        r = util_random_hex(rnd, 8);
    if (r < 0)
        goto out;
    snprintf(sid, sizeof(sid), "ar-x-%s", rnd);
    r = daytona_toolbox_session_create(c, tb, sid);
    if (r < 0) {
        snprintf(err, errlen, "exec session: %s", daytona_client_message(c));
        goto out;
    }
    session = true;
    r = daytona_toolbox_exec(c, tb, sid, buf_str(&wrapped), true, cid);
    if (r < 0) {
        snprintf(err, errlen, "exec: %s", daytona_client_message(c));
        goto out;
    }
    for (unsigned attempt = 0;; attempt++) {
        int code = 0;

        follow(c, tb, sid, cid, deadline, &dm, &run);
        if (deadline && util_now_ms() >= deadline) {
            /* deleting the session kills the command's whole process group */
            (void)daytona_toolbox_session_delete(c, tb, sid);
            session = false;
            ret->timed_out = true;
            r = 0;
            break;
        }
        r = exit_status(c, tb, sid, cid, &code);
        if (r == 1) {
            ret->exited = true;
            ret->exit_code = code;
            finish(c, tb, sid, cid, &dm, &run, cap);
            r = 0;
            break;
        }
        if (r < 0 || attempt >= EXEC_RECONNECTS) {
            snprintf(err, errlen, "exec: lost the command: %s",
                     r < 0 ? daytona_strerror(r) : "its log stream keeps closing");
            r = r < 0 ? r : -EIO;
            break;
        }
        ret->reconnects++;
    }
out:
    if (session)
        (void)daytona_toolbox_session_delete(c, tb, sid);
    ret->wall_ms = (double)(util_now_ms() - t0);
    for (int i = 0; i < 3; i++)
        buf_release(&run.delivered[i]);
    buf_release(&wrapped);
    if (r >= 0 && run.sink_error)
        r = run.sink_error;
    return r;
}

void daytona_exec_result_release(struct daytona_exec_result *r)
{
    buf_release(&r->out);
    buf_release(&r->err);
}

const char *daytona_exec_command_label(const char *command)
{
    const char *p = command, *e, *base;
    size_t n;

    if (!p)
        return "other";
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '(')
        p++;
    e = p + strcspn(p, " \t\n;&|()<>");
    base = p;
    for (const char *q = p; q < e; q++) {
        if (*q == '/')
            base = q + 1;
    }
    n = (size_t)(e - base);
    for (size_t i = 0; i < ARRAY_SIZE(verbs); i++) {
        if (strlen(verbs[i]) == n && strncmp(verbs[i], base, n) == 0)
            return verbs[i];
    }
    return "other";
}

bool daytona_exec_attr_allowed(const char *key)
{
    for (size_t i = 0; key && i < ARRAY_SIZE(attrs); i++) {
        if (strcmp(attrs[i], key) == 0)
            return true;
    }
    return false;
}

int daytona_hash_id(const char *id, char ret[13])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;

    if (!id || EVP_Digest(id, strlen(id), md, &n, EVP_sha256(), NULL) != 1 || n < 6)
        return -EINVAL;
    util_hex_encode(md, 6, ret);
    return 0;
}

static void put(json_object *o, const char *key, json_object *v)
{
    if (v && daytona_exec_attr_allowed(key))
        json_object_object_add(o, key, v);
    else
        json_object_put(v);
}

static void put_number(json_object *o, const char *key, double v)
{
    if (isfinite(v))
        put(o, key, json_object_new_double(v));
}

int daytona_exec_span_attrs(const char *sandbox_id, const char *command,
                            const struct daytona_exec_result *res, bool critical_path,
                            json_object **ret)
{
    json_object *o = json_object_new_object();
    bool ok;
    char h[13];

    if (!o)
        return -ENOMEM;
    put(o, "agent_runner.sandbox.provider", json_object_new_string("daytona"));
    put(o, "agent_runner.sandbox.exec.command",
        json_object_new_string(daytona_exec_command_label(command)));
    put(o, "agent_runner.sandbox.exec.critical_path", json_object_new_boolean(critical_path));
    if (sandbox_id && daytona_hash_id(sandbox_id, h) == 0)
        put(o, "agent_runner.sandbox.sandbox_id", json_object_new_string(h));
    ok = res && res->exited && res->exit_code == 0 && !res->timed_out;
    if (res) {
        if (res->exited)
            put(o, "agent_runner.sandbox.exec.exit_code", json_object_new_int(res->exit_code));
        put_number(o, "agent_runner.sandbox.exec.wall_ms", res->wall_ms);
        put(o, "agent_runner.sandbox.exec.timed_out", json_object_new_boolean(res->timed_out));
        put(o, "agent_runner.sandbox.exec.reconnects", json_object_new_int((int)res->reconnects));
    }
    put(o, "agent_runner.sandbox.outcome", json_object_new_string(ok ? "ok" : "failed"));
    *ret = o;
    return 0;
}
