#include "provider/daytona/daytona_bridge.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "proto/acp.h"
#include "provider/daytona/daytona_demux.h"
#include "provider/ws_client.h"

#define UPLOAD_FILES_MAX 4096
#define ENV_FILE_MAX (4u * 1024 * 1024)
#define LAUNCHER_MAX (1u * 1024 * 1024)
#define RECONNECT_TRIES 10
#define TAIL_MAX (64u * 1024 * 1024)

/* ---- launch scripts ------------------------------------------------------------------- */

int daytona_bridge_env_file(json_object *env, struct buf *out, char *err, size_t errlen)
{
    int r = buf_append_str(out, "# agent-runner harness environment (generated)\n");

    if (env && !json_object_is_type(env, json_type_object)) {
        snprintf(err, errlen, "harness env: not an object");
        return -EINVAL;
    }
    json_object_object_foreach(env, name, val)
    {
        if (r < 0)
            break;
        if (!daytona_env_name_ok(name) || !val || !json_object_is_type(val, json_type_string)) {
            snprintf(err, errlen, "harness env: \"%.64s\" is not a valid variable", name);
            return -EINVAL;
        }
        r = buf_printf(out, "%s=", name);
        if (r >= 0)
            r = daytona_shell_quote(json_object_get_string(val), out);
        if (r >= 0)
            r = buf_append_char(out, '\n');
    }
    if (r < 0)
        snprintf(err, errlen, "harness env: too large");
    return r;
}

int daytona_bridge_launcher(const char *env_path, json_object *argv, const char *cwd,
                            struct buf *out, char *err, size_t errlen)
{
    size_t n =
        argv && json_object_is_type(argv, json_type_array) ? json_object_array_length(argv) : 0;
    int r;

    if (n == 0) {
        snprintf(err, errlen, "harness argv: empty");
        return -EINVAL;
    }
    if (!cwd || !daytona_abs_path_ok(cwd) || !daytona_abs_path_ok(env_path)) {
        snprintf(err, errlen, "harness cwd: not an absolute path");
        return -EINVAL;
    }
    r = buf_append_str(out, "# agent-runner harness launcher (generated)\nset -a\n. ");
    if (r >= 0)
        r = daytona_shell_quote(env_path, out);
    if (r >= 0)
        r = buf_append_str(out, "\nset +a\nmkdir -p ");
    if (r >= 0)
        r = daytona_shell_quote(cwd, out);
    if (r >= 0)
        r = buf_append_str(out, " && cd ");
    if (r >= 0)
        r = daytona_shell_quote(cwd, out);
    if (r >= 0)
        r = buf_append_str(out, " || exit 126\nexec");
    for (size_t i = 0; r >= 0 && i < n; i++) {
        json_object *a = json_object_array_get_idx(argv, i);

        if (!a || !json_object_is_type(a, json_type_string)) {
            snprintf(err, errlen, "harness argv[%zu]: not a string", i);
            return -EINVAL;
        }
        r = buf_append_char(out, ' ');
        if (r >= 0)
            r = daytona_shell_quote(json_object_get_string(a), out);
    }
    if (r >= 0)
        r = buf_append_char(out, '\n');
    if (r < 0)
        snprintf(err, errlen, "harness launcher: too large");
    return r;
}

/* ---- the bridge ----------------------------------------------------------------------- */

struct daytona_bridge {
    struct daytona_config cfg;
    char tb[DAYTONA_URL_MAX];
    char sandbox_id[DAYTONA_ID_MAX];
    char sid[DAYTONA_ID_MAX];
    char cid[DAYTONA_ID_MAX];

    int in_rd;  /* lines from the keeper */
    int out_wr; /* harness stdout to the keeper */
    int err_wr;
    int stop_fd; /* eventfd: stop requested */
    int exit_fd; /* eventfd: exit status known */

    pthread_t writer, reader;
    bool writer_started, reader_started;
    pthread_mutex_t lock; /* guards ws */
    struct ws_conn *ws;   /* the reader's stream, for ws_shutdown() */

    atomic_bool stopping;
    atomic_bool stopped;
    atomic_int exit_status; /* -EAGAIN while running */
    atomic_bool busy;
    atomic_llong last_traffic; /* monotonic ms */
    atomic_ullong lines_in, bytes_out;
    atomic_uint reconnects, activity_marks;
    long activity_ms;
    struct daytona_manifest_stats sync;
    long start_ms;
    struct daytona_demux demux;
};

static void block_signals(void)
{
    sigset_t all;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
}

static void post_exit(struct daytona_bridge *b, int status)
{
    uint64_t one = 1;
    int expected = -EAGAIN;

    if (!atomic_compare_exchange_strong(&b->exit_status, &expected, status))
        return;
    if (b->out_wr >= 0) {
        close(b->out_wr);
        b->out_wr = -1;
    }
    if (b->err_wr >= 0) {
        close(b->err_wr);
        b->err_wr = -1;
    }
    (void)!write(b->exit_fd, &one, sizeof(one));
}

/* Deliver demultiplexed bytes to the keeper; a keeper that closed its end just loses them. */
static int deliver(void *ctx, enum daytona_stream s, const uint8_t *data, size_t len)
{
    struct daytona_bridge *b = ctx;
    int fd = s == DAYTONA_STDERR ? b->err_wr : b->out_wr;

    atomic_fetch_add(&b->bytes_out, len);
    atomic_store(&b->last_traffic, util_now_ms());
    if (fd >= 0 && util_write_all(fd, data, len) < 0) {
        if (s == DAYTONA_STDERR) {
            close(b->err_wr);
            b->err_wr = -1;
        } else {
            close(b->out_wr);
            b->out_wr = -1;
        }
    }
    return 0;
}

/* After a stream ended: 1 exited (*ret_code), 0 still running, < 0 the command is gone. */
static int confirm_exit(struct daytona_bridge *b, struct daytona_client *c, int *ret_code)
{
    static const long waits[] = {0, 50, 100, 200};
    int r = 0;

    for (size_t i = 0; i < ARRAY_SIZE(waits); i++) {
        util_sleep_ms(waits[i]);
        r = daytona_toolbox_command_status(c, b->tb, b->sid, b->cid, ret_code);
        if (r != 0)
            break;
    }
    return r;
}

static void *reader_main(void *arg)
{
    struct daytona_bridge *b = arg;
    struct daytona_client *c = NULL;
    unsigned failures = 0;
    int status = DAYTONA_BRIDGE_LOST;
    char err[256];

    block_signals();
    if (daytona_client_new(&b->cfg, &c) < 0)
        goto done;
    for (;;) {
        struct ws_conn *ws = NULL;
        bool clean = false;
        int code, r;

        if (atomic_load(&b->stopping))
            goto done;
        r = daytona_toolbox_follow(c, b->tb, b->sid, b->cid, true, &ws, err, sizeof(err));
        if (r == 0) {
            pthread_mutex_lock(&b->lock);
            b->ws = ws;
            pthread_mutex_unlock(&b->lock);
            if (atomic_load(&b->stopping))
                ws_shutdown(ws);
            daytona_demux_reconnect(&b->demux);
            for (;;) {
                struct ws_event ev;

                r = ws_read(ws, -1, &ev);
                if (r == 1 && ev.type == WS_EV_DATA) {
                    failures = 0;
                    (void)daytona_demux_feed(&b->demux, ev.data, ev.len, deliver, b);
                    continue;
                }
                clean = r == 1 && ev.type == WS_EV_CLOSE && ev.close_code == WS_CLOSE_NORMAL;
                break;
            }
            pthread_mutex_lock(&b->lock);
            b->ws = NULL;
            pthread_mutex_unlock(&b->lock);
            ws_free(ws);
        } else {
            log_debug("daytona bridge: log stream of \"%s\": %s", b->cid, err);
        }
        if (atomic_load(&b->stopping))
            goto done;
        r = confirm_exit(b, c, &code);
        if (r == 1) {
            if (!clean) {
                /* the stream broke: the tail it missed comes from the non-follow log */
                struct buf raw;

                buf_init(&raw, TAIL_MAX);
                if (daytona_toolbox_logs(c, b->tb, b->sid, b->cid, &raw, NULL, NULL) == 0) {
                    daytona_demux_reconnect(&b->demux);
                    (void)daytona_demux_feed(&b->demux, (const uint8_t *)raw.data, raw.len, deliver,
                                             b);
                }
                buf_release(&raw);
            }
            (void)daytona_demux_finish(&b->demux, deliver, b);
            status = code < 0 || code > 255 ? DAYTONA_BRIDGE_LOST : code;
            goto done;
        }
        if (r < 0) {
            log_debug("daytona bridge: command \"%s\" is gone: %s", b->cid, daytona_strerror(r));
            goto done;
        }
        /* still running: reopen the stream (it replays from byte 0; the demuxer skips) */
        if (++failures > RECONNECT_TRIES)
            goto done;
        atomic_fetch_add(&b->reconnects, 1);
        util_sleep_ms(failures > 1 ? 100L << (failures > 6 ? 6 : failures - 1) : 0);
    }
done:
    daytona_client_free(c);
    post_exit(b, status);
    return NULL;
}

static void *writer_main(void *arg)
{
    struct daytona_bridge *b = arg;
    struct daytona_client *c = NULL;
    struct acp_lines lines;
    int64_t last_mark = util_now_ms();
    bool eof = false;

    block_signals();
    acp_lines_init(&lines, DAYTONA_BRIDGE_LINE_MAX);
    if (daytona_client_new(&b->cfg, &c) < 0)
        goto out;
    while (!atomic_load(&b->stopping)) {
        struct pollfd p[2] = {{.fd = b->stop_fd, .events = POLLIN},
                              {.fd = eof ? -1 : b->in_rd, .events = POLLIN}};
        int64_t now = util_now_ms(), left = last_mark + b->activity_ms - now;
        char *line;
        size_t len;
        int r;

        if (left <= 0) {
            /* keep the sandbox alive while a turn runs or lines flow; idle lets it stop */
            if (atomic_load(&b->busy) || atomic_load(&b->last_traffic) > last_mark) {
                if (daytona_sandbox_mark_activity(c, b->sandbox_id) == 0)
                    atomic_fetch_add(&b->activity_marks, 1);
            }
            last_mark = now;
            left = b->activity_ms;
        }
        r = poll(p, 2, (int)left);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0 || (p[0].revents & POLLIN))
            continue;
        if (!(p[1].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        r = (int)acp_lines_fill(&lines, b->in_rd);
        if (r == 0 || (r < 0 && r != -EAGAIN && r != -EINTR)) {
            eof = true; /* the keeper closed stdin: nothing more to send */
            if (r < 0)
                log_debug("daytona bridge: input: %s", strerror(-r));
            continue;
        }
        while ((r = acp_lines_next(&lines, &line, &len)) == 1) {
            r = daytona_toolbox_input(c, b->tb, b->sid, b->cid, line, len, false);
            free(line);
            if (r < 0) {
                /* 410: the harness ended (the reader reports it); anything else loses the
                 * line, and a lost ACP line breaks the session: give up on the harness */
                if (r != -EPIPE)
                    log_debug("daytona bridge: input lost: %s", daytona_strerror(r));
                eof = true;
                if (r != -EPIPE) {
                    atomic_store(&b->stopping, true);
                    pthread_mutex_lock(&b->lock);
                    ws_shutdown(b->ws);
                    pthread_mutex_unlock(&b->lock);
                }
                break;
            }
            atomic_fetch_add(&b->lines_in, 1);
            atomic_store(&b->last_traffic, util_now_ms());
        }
        if (r < 0 && r != -EPIPE && !eof) {
            log_debug("daytona bridge: input line: %s", strerror(-r));
            eof = true;
        }
    }
out:
    acp_lines_release(&lines);
    daytona_client_free(c);
    return NULL;
}

static int make_pipe(int fds[2])
{
    return pipe2(fds, O_CLOEXEC) == -1 ? -errno : 0;
}

/* What a start uploads: the harness files, the env file and the launcher. */
struct launch_files {
    char dir[4100];
    char env_path[4200];
    char launch_path[4200];
    struct buf envf, launch;
    struct daytona_manifest_file *up;
    size_t nup;
};

static void launch_files_release(struct launch_files *lf)
{
    if (lf->envf.data)
        explicit_bzero(lf->envf.data, lf->envf.cap); /* it holds the harness's credentials */
    buf_release(&lf->envf);
    buf_release(&lf->launch);
    free(lf->up);
}

static int launch_files_plan(const struct daytona_harness *h, struct launch_files *lf, char *err,
                             size_t errlen)
{
    size_t nfiles = h->files && json_object_is_type(h->files, json_type_array)
                        ? json_object_array_length(h->files)
                        : 0;
    const char *dir = h->state_dir && h->state_dir[0] ? h->state_dir : DAYTONA_BRIDGE_DIR;
    int r;

    buf_init(&lf->envf, ENV_FILE_MAX);
    buf_init(&lf->launch, LAUNCHER_MAX);
    if (nfiles > UPLOAD_FILES_MAX - 2) {
        snprintf(err, errlen, "harness files: too many");
        return -E2BIG;
    }
    if (!daytona_abs_path_ok(dir) || strlen(dir) > 4000) {
        snprintf(err, errlen, "harness state folder: not an absolute path");
        return -EINVAL;
    }
    snprintf(lf->dir, sizeof(lf->dir), "%s", dir);
    snprintf(lf->env_path, sizeof(lf->env_path), "%s/harness.env", dir);
    snprintf(lf->launch_path, sizeof(lf->launch_path), "%s/launch.sh", dir);
    r = daytona_bridge_env_file(h->env, &lf->envf, err, errlen);
    if (r >= 0)
        r = daytona_bridge_launcher(lf->env_path, h->argv, h->cwd, &lf->launch, err, errlen);
    if (r < 0)
        return r;
    lf->up = calloc(nfiles + 2, sizeof(*lf->up));
    if (!lf->up)
        return -ENOMEM;
    for (size_t i = 0; i < nfiles; i++) {
        json_object *f = json_object_array_get_idx(h->files, i);
        json_object *mode = jsonx_get(f, "mode"), *content = jsonx_get(f, "content");

        if (!jsonx_str(f, "path") || !content || !json_object_is_type(content, json_type_string)) {
            snprintf(err, errlen, "harness files[%zu]: needs path and content", i);
            return -EINVAL;
        }
        lf->up[lf->nup++] = (struct daytona_manifest_file){
            jsonx_str(f, "path"), json_object_get_string(content),
            (size_t)json_object_get_string_len(content),
            mode && json_object_is_type(mode, json_type_int) ? (unsigned)json_object_get_int(mode)
                                                             : 0644};
    }
    lf->up[lf->nup++] =
        (struct daytona_manifest_file){lf->env_path, lf->envf.data, lf->envf.len, 0600};
    lf->up[lf->nup++] =
        (struct daytona_manifest_file){lf->launch_path, lf->launch.data, lf->launch.len, 0700};
    return 0;
}

/* Our folder first (0700, so the env file is never readable on the way), then the files. */
static int upload(struct daytona_client *c, struct daytona_bridge *b, struct daytona_manifest *m,
                  const struct launch_files *lf, char *err, size_t errlen)
{
    char key[4200], digest[65];
    int r;

    snprintf(key, sizeof(key), "%s/", lf->dir);
    r = daytona_manifest_digest(key, 0700, "", 0, digest);
    if (r < 0)
        return r;
    if (!daytona_manifest_has(m, key, digest)) {
        r = daytona_toolbox_folder(c, b->tb, lf->dir, "700");
        if (r < 0) {
            snprintf(err, errlen, "create \"%.200s\": %s", lf->dir, daytona_client_message(c));
            return r;
        }
        r = daytona_manifest_put(m, key, digest);
        if (r < 0)
            return r;
    }
    return daytona_manifest_sync(c, b->tb, m, lf->up, lf->nup, &b->sync, err, errlen);
}

/* A new session with the harness started in it (env -i: only the env file's variables). */
static int start_session(struct daytona_client *c, struct daytona_bridge *b,
                         const char *launch_path, const char *command, char *err, size_t errlen)
{
    struct buf cmd;
    char rnd[17];
    int r;

    r = util_random_hex(rnd, 8);
    if (r < 0)
        return r;
    snprintf(b->sid, sizeof(b->sid), "ar-h-%s", rnd);
    r = daytona_toolbox_session_create(c, b->tb, b->sid);
    if (r < 0) {
        snprintf(err, errlen, "session: %s", daytona_client_message(c));
        b->sid[0] = '\0';
        return r;
    }
    buf_init(&cmd, 8192);
    if (command) {
        r = buf_append_str(&cmd, command);
    } else {
        r = buf_append_str(&cmd, "env -i /bin/sh ");
        if (r >= 0)
            r = daytona_shell_quote(launch_path, &cmd);
    }
    if (r >= 0) {
        r = daytona_toolbox_exec(c, b->tb, b->sid, buf_str(&cmd), true, b->cid);
        if (r < 0)
            snprintf(err, errlen, "start the harness: %s", daytona_client_message(c));
    }
    buf_release(&cmd);
    return r;
}

/* The pipes and event fds, then the two threads; the keeper's ends go to ret_fds. */
static int start_threads(struct daytona_bridge *b, struct daytona_bridge_fds *ret_fds)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1};
    int r = 0;

    if (make_pipe(in) < 0 || make_pipe(out) < 0 || make_pipe(errp) < 0) {
        r = -errno;
        goto out;
    }
    b->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    b->exit_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (b->stop_fd < 0 || b->exit_fd < 0) {
        r = -errno;
        goto out;
    }
    b->in_rd = in[0];
    b->out_wr = out[1];
    b->err_wr = errp[1];
    in[0] = out[1] = errp[1] = -1;
    r = -pthread_create(&b->reader, NULL, reader_main, b);
    if (r < 0)
        goto out;
    b->reader_started = true;
    r = -pthread_create(&b->writer, NULL, writer_main, b);
    if (r < 0)
        goto out;
    b->writer_started = true;
    ret_fds->stdin_fd = in[1];
    ret_fds->stdout_fd = out[0];
    ret_fds->stderr_fd = errp[0];
    ret_fds->exit_fd = b->exit_fd;
    in[1] = out[0] = errp[0] = -1;
out:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
    return r;
}

int daytona_bridge_start(const struct daytona_config *cfg, const struct daytona_sandbox *sb,
                         const struct daytona_harness *h, struct daytona_manifest *m,
                         struct daytona_bridge **ret, struct daytona_bridge_fds *ret_fds, char *err,
                         size_t errlen)
{
    struct daytona_bridge *b = NULL;
    struct daytona_client *c = NULL;
    struct launch_files lf;
    int64_t t0;
    int r;

    memset(&lf, 0, sizeof(lf));
    if (!sb->toolbox[0]) {
        snprintf(err, errlen, "sandbox \"%s\" has no toolbox URL", sb->id);
        return -EINVAL;
    }
    if (h->command && (!h->command[0] || strlen(h->command) > 4096)) {
        snprintf(err, errlen, "harness command: empty or too long");
        return -EINVAL;
    }
    r = h->command ? 0 : launch_files_plan(h, &lf, err, errlen);
    if (r < 0)
        goto out;
    b = calloc(1, sizeof(*b));
    if (!b) {
        r = -ENOMEM;
        goto out;
    }
    b->cfg = *cfg;
    b->activity_ms = h->activity_ms > 0 ? h->activity_ms : DAYTONA_BRIDGE_ACTIVITY_MS;
    b->in_rd = b->out_wr = b->err_wr = b->stop_fd = b->exit_fd = -1;
    atomic_init(&b->exit_status, -EAGAIN);
    atomic_init(&b->last_traffic, 0);
    pthread_mutex_init(&b->lock, NULL);
    daytona_demux_init(&b->demux);
    snprintf(b->tb, sizeof(b->tb), "%s", sb->toolbox);
    snprintf(b->sandbox_id, sizeof(b->sandbox_id), "%s", sb->id);
    r = daytona_client_new(cfg, &c);
    if (r >= 0 && !h->command)
        r = upload(c, b, m, &lf, err, errlen);
    if (r < 0)
        goto out;
    if (h->before_start) {
        r = h->before_start(h->before_start_ctx, err, errlen);
        if (r < 0)
            goto out;
    }
    t0 = util_now_ms();
    r = start_session(c, b, lf.launch_path, h->command, err, errlen);
    if (r >= 0)
        r = start_threads(b, ret_fds);
    if (r < 0)
        goto out;
    b->start_ms = (long)(util_now_ms() - t0);
    *ret = b;
    b = NULL;
out:
    if (b) {
        /* the threads (if any) stop, the session and its harness go */
        daytona_bridge_stop(b, true);
        daytona_bridge_free(b);
    }
    daytona_client_free(c);
    launch_files_release(&lf);
    return r;
}

void daytona_bridge_set_busy(struct daytona_bridge *b, bool busy)
{
    atomic_store(&b->busy, busy);
}

int daytona_bridge_exit_status(const struct daytona_bridge *b)
{
    return atomic_load(&((struct daytona_bridge *)b)->exit_status);
}

void daytona_bridge_stats(const struct daytona_bridge *b, struct daytona_bridge_stats *ret)
{
    struct daytona_bridge *m = (struct daytona_bridge *)b;

    memset(ret, 0, sizeof(*ret));
    ret->sync = b->sync;
    ret->start_ms = b->start_ms;
    ret->lines_in = atomic_load(&m->lines_in);
    ret->bytes_out = atomic_load(&m->bytes_out);
    ret->reconnects = atomic_load(&m->reconnects);
    ret->activity_marks = atomic_load(&m->activity_marks);
}

void daytona_bridge_stop(struct daytona_bridge *b, bool kill_harness)
{
    uint64_t one = 1;

    if (!b || atomic_exchange(&b->stopped, true))
        return;
    atomic_store(&b->stopping, true);
    if (b->stop_fd >= 0)
        (void)!write(b->stop_fd, &one, sizeof(one));
    pthread_mutex_lock(&b->lock);
    ws_shutdown(b->ws);
    pthread_mutex_unlock(&b->lock);
    if (b->writer_started)
        pthread_join(b->writer, NULL);
    if (b->reader_started)
        pthread_join(b->reader, NULL);
    b->writer_started = b->reader_started = false;
    if (kill_harness && b->sid[0]) {
        struct daytona_client *c = NULL;

        if (daytona_client_new(&b->cfg, &c) == 0) {
            (void)daytona_toolbox_session_delete(c, b->tb, b->sid);
            daytona_client_free(c);
        }
    }
    post_exit(b, DAYTONA_BRIDGE_LOST);
}

void daytona_bridge_free(struct daytona_bridge *b)
{
    if (!b)
        return;
    daytona_bridge_stop(b, false);
    if (b->in_rd >= 0)
        close(b->in_rd);
    if (b->out_wr >= 0)
        close(b->out_wr);
    if (b->err_wr >= 0)
        close(b->err_wr);
    if (b->stop_fd >= 0)
        close(b->stop_fd);
    if (b->exit_fd >= 0)
        close(b->exit_fd);
    pthread_mutex_destroy(&b->lock);
    daytona_config_wipe(&b->cfg);
    free(b);
}
