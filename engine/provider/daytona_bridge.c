#include "daytona_bridge.h"

#include <ctype.h>
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
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "../acp.h"
#include "../jsonx.h"
#include "../log.h"
#include "../util.h"
#include "daytona_demux.h"
#include "ws_client.h"

#define MANIFEST_MAX 8192
#define UPLOAD_FILES_MAX 4096
#define ENV_FILE_MAX (4u * 1024 * 1024)
#define LAUNCHER_MAX (1u * 1024 * 1024)
#define RECONNECT_TRIES 10
#define TAIL_MAX (64u * 1024 * 1024)
#define CHMOD_COMMAND_MAX (256u * 1024)

/* ---- manifest ------------------------------------------------------------------------- */

struct manifest_entry {
    char *path;
    char digest[65];
};

struct daytona_manifest {
    struct manifest_entry *e;
    size_t n, cap;
};

int daytona_manifest_new(struct daytona_manifest **ret)
{
    struct daytona_manifest *m = calloc(1, sizeof(*m));

    if (!m)
        return -ENOMEM;
    *ret = m;
    return 0;
}

void daytona_manifest_clear(struct daytona_manifest *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->e[i].path);
    m->n = 0;
}

void daytona_manifest_free(struct daytona_manifest *m)
{
    if (!m)
        return;
    daytona_manifest_clear(m);
    free(m->e);
    free(m);
}

size_t daytona_manifest_count(const struct daytona_manifest *m)
{
    return m->n;
}

int daytona_manifest_digest(const char *path, unsigned mode, const void *data, size_t len,
                            char ret[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    char head[32];
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok;

    if (!ctx)
        return -ENOMEM;
    snprintf(head, sizeof(head), "%c%o%c", 0, mode, 0);
    ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
         EVP_DigestUpdate(ctx, path, strlen(path)) == 1 &&
         EVP_DigestUpdate(ctx, head, 2 + strlen(head + 1)) == 1 &&
         EVP_DigestUpdate(ctx, data, len) == 1 && EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 &&
         mdlen == 32;
    EVP_MD_CTX_free(ctx);
    if (!ok)
        return -EIO;
    hex_encode(md, 32, ret);
    return 0;
}

static struct manifest_entry *manifest_find(const struct daytona_manifest *m, const char *path)
{
    for (size_t i = 0; i < m->n; i++) {
        if (strcmp(m->e[i].path, path) == 0)
            return &m->e[i];
    }
    return NULL;
}

bool daytona_manifest_has(const struct daytona_manifest *m, const char *path,
                          const char *digest)
{
    const struct manifest_entry *e = manifest_find(m, path);

    return e && strcmp(e->digest, digest) == 0;
}

int daytona_manifest_put(struct daytona_manifest *m, const char *path, const char *digest)
{
    struct manifest_entry *e = manifest_find(m, path);

    if (strlen(digest) != 64)
        return -EINVAL;
    if (!e) {
        if (m->n == MANIFEST_MAX)
            return -E2BIG;
        if (m->n == m->cap) {
            size_t cap = m->cap ? m->cap * 2 : 32;
            struct manifest_entry *grown = realloc(m->e, cap * sizeof(*grown));

            if (!grown)
                return -ENOMEM;
            m->e = grown;
            m->cap = cap;
        }
        e = &m->e[m->n];
        e->path = strdup(path);
        if (!e->path)
            return -ENOMEM;
        m->n++;
    }
    memcpy(e->digest, digest, 65);
    return 0;
}

/* ---- sync ----------------------------------------------------------------------------- */

static bool abs_path_ok(const char *p)
{
    if (!p || p[0] != '/' || strlen(p) > 4000)
        return false;
    for (const char *s = p; *s; s++) {
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    }
    /* no "." or ".." components: the upload lands exactly where it says */
    for (const char *s = strchr(p, '/'); s; s = strchr(s + 1, '/')) {
        if ((s[1] == '.' && (s[2] == '/' || s[2] == '\0')) ||
            (s[1] == '.' && s[2] == '.' && (s[3] == '/' || s[3] == '\0')))
            return false;
    }
    return true;
}

/*
 * The bulk upload writes 0644: set the other modes with one `chmod` command per mode, all in
 * one execute round trip (one permissions call per file when the command would be too long).
 */
static int fix_modes(struct daytona_client *c, const char *tb, const struct daytona_upload *files,
                     const size_t *idx, size_t ns, char *err, size_t errlen)
{
    struct buf cmd, out;
    bool any = false;
    int code = 0, r = 0;

    buf_init(&cmd, CHMOD_COMMAND_MAX);
    buf_init(&out, 4096);
    for (size_t k = 0; k < ns && r >= 0; k++) {
        unsigned mode = files[idx[k]].mode;
        bool first = true;

        if (mode == 0644)
            continue;
        /* one chmod per distinct mode, listing every file with it */
        for (size_t j = 0; j < k; j++) {
            if (files[idx[j]].mode == mode)
                first = false;
        }
        if (!first)
            continue;
        r = buf_printf(&cmd, "%schmod %o --", any ? " && " : "", mode);
        for (size_t j = k; r >= 0 && j < ns; j++) {
            if (files[idx[j]].mode != mode)
                continue;
            r = buf_append_char(&cmd, ' ');
            if (r >= 0)
                r = daytona_shell_quote(files[idx[j]].path, &cmd);
        }
        any = true;
    }
    if (!any)
        goto out;
    if (r == -E2BIG) {
        for (size_t k = 0; k < ns; k++) {
            char mode[8];

            if (files[idx[k]].mode == 0644)
                continue;
            snprintf(mode, sizeof(mode), "%o", files[idx[k]].mode);
            r = daytona_files_chmod(c, tb, files[idx[k]].path, mode);
            if (r < 0) {
                snprintf(err, errlen, "chmod \"%.200s\": %s", files[idx[k]].path,
                         daytona_client_message(c));
                goto out;
            }
        }
        r = 0;
        goto out;
    }
    if (r < 0)
        goto out;
    r = daytona_execute(c, tb, buf_str(&cmd), 60, out.max, &code, &out);
    if (r >= 0 && code != 0)
        r = -EIO;
    if (r < 0)
        snprintf(err, errlen, "chmod after upload: %s",
                 r == -EIO ? buf_str(&out) : daytona_client_message(c));
out:
    buf_release(&cmd);
    buf_release(&out);
    return r;
}

int daytona_sync(struct daytona_client *c, const char *tb, struct daytona_manifest *m,
                 const struct daytona_upload *files, size_t n, struct daytona_sync_stats *ret,
                 char *err, size_t errlen)
{
    int64_t t0 = now_ms();
    struct daytona_sync_stats st = {.files = (unsigned)n};
    struct daytona_file *send = NULL;
    char (*dig)[65] = NULL;
    size_t *idx = NULL, ns = 0;
    int r = 0;

    if (n > UPLOAD_FILES_MAX) {
        snprintf(err, errlen, "too many files to upload (%zu, at most %d)", n, UPLOAD_FILES_MAX);
        return -E2BIG;
    }
    send = calloc(n ? n : 1, sizeof(*send));
    dig = calloc(n ? n : 1, sizeof(*dig));
    idx = calloc(n ? n : 1, sizeof(*idx));
    if (!send || !dig || !idx) {
        r = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (!abs_path_ok(files[i].path) || files[i].mode > 07777) {
            snprintf(err, errlen, "upload: bad path or mode for file #%zu", i);
            r = -EINVAL;
            goto out;
        }
        r = daytona_manifest_digest(files[i].path, files[i].mode, files[i].data, files[i].len,
                                    dig[i]);
        if (r < 0)
            goto out;
        if (daytona_manifest_has(m, files[i].path, dig[i]))
            continue;
        send[ns] = (struct daytona_file){files[i].path, files[i].data, files[i].len};
        idx[ns++] = i;
        st.bytes += files[i].len;
    }
    if (ns > 0) {
        r = daytona_files_upload(c, tb, send, ns);
        if (r < 0) {
            snprintf(err, errlen, "upload: %s", daytona_client_message(c)[0]
                                                    ? daytona_client_message(c)
                                                    : daytona_strerror(r));
            goto out;
        }
        r = fix_modes(c, tb, files, idx, ns, err, errlen);
        if (r < 0)
            goto out;
        for (size_t k = 0; k < ns; k++) {
            r = daytona_manifest_put(m, files[idx[k]].path, dig[idx[k]]);
            if (r < 0)
                goto out;
        }
    }
    st.uploaded = (unsigned)ns;
    st.ms = (long)(now_ms() - t0);
    if (ret)
        *ret = st;
    r = 0;
out:
    free(send);
    free(dig);
    free(idx);
    return r;
}

/* ---- launch scripts ------------------------------------------------------------------- */

int daytona_shell_quote(const char *s, struct buf *out)
{
    int r = buf_append_char(out, '\'');

    for (; r >= 0 && *s; s++) {
        if (*s == '\'')
            r = buf_append_str(out, "'\\''");
        else
            r = buf_append_char(out, *s);
    }
    if (r >= 0)
        r = buf_append_char(out, '\'');
    return r;
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
        if (!env_name_ok(name) || !val || !json_object_is_type(val, json_type_string)) {
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
    size_t n = argv && json_object_is_type(argv, json_type_array)
                   ? json_object_array_length(argv)
                   : 0;
    int r;

    if (n == 0) {
        snprintf(err, errlen, "harness argv: empty");
        return -EINVAL;
    }
    if (!cwd || !abs_path_ok(cwd) || !abs_path_ok(env_path)) {
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
    struct daytona_sync_stats sync;
    long start_ms;
    struct daytona_demux demux;
};

static void block_signals(void)
{
    sigset_t all;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
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
    atomic_store(&b->last_traffic, now_ms());
    if (fd >= 0 && write_all(fd, data, len) < 0) {
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
        sleep_ms(waits[i]);
        r = daytona_command_status(c, b->tb, b->sid, b->cid, ret_code);
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
        r = daytona_command_follow(c, b->tb, b->sid, b->cid, true, &ws, err, sizeof(err));
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
                if (daytona_command_logs(c, b->tb, b->sid, b->cid, &raw, NULL, NULL) == 0) {
                    daytona_demux_reconnect(&b->demux);
                    (void)daytona_demux_feed(&b->demux, (const uint8_t *)raw.data, raw.len,
                                             deliver, b);
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
        sleep_ms(failures > 1 ? 100L << (failures > 6 ? 6 : failures - 1) : 0);
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
    int64_t last_mark = now_ms();
    bool eof = false;

    block_signals();
    acp_lines_init(&lines, DAYTONA_BRIDGE_LINE_MAX);
    if (daytona_client_new(&b->cfg, &c) < 0)
        goto out;
    while (!atomic_load(&b->stopping)) {
        struct pollfd p[2] = {{.fd = b->stop_fd, .events = POLLIN},
                              {.fd = eof ? -1 : b->in_rd, .events = POLLIN}};
        int64_t now = now_ms(), left = last_mark + b->activity_ms - now;
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
            r = daytona_command_input(c, b->tb, b->sid, b->cid, line, len, false);
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
            atomic_store(&b->last_traffic, now_ms());
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

int daytona_bridge_start(const struct daytona_config *cfg, const struct daytona_sandbox *sb,
                         const struct daytona_harness *h, struct daytona_manifest *m,
                         struct daytona_bridge **ret, struct daytona_bridge_fds *ret_fds,
                         char *err, size_t errlen)
{
    struct daytona_bridge *b = NULL;
    struct daytona_client *c = NULL;
    struct daytona_upload *up = NULL;
    struct buf envf, launch, cmd;
    int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1};
    size_t nfiles = h->files && json_object_is_type(h->files, json_type_array)
                        ? json_object_array_length(h->files)
                        : 0;
    size_t nup = 0;
    const char *dir = h->state_dir && h->state_dir[0] ? h->state_dir : DAYTONA_BRIDGE_DIR;
    char rnd[17], folder_digest[65], env_path[4200], launch_path[4200], folder_key[4200];
    int64_t t0;
    int r;

    buf_init(&envf, ENV_FILE_MAX);
    buf_init(&launch, LAUNCHER_MAX);
    buf_init(&cmd, 4096);
    if (!sb->toolbox[0]) {
        snprintf(err, errlen, "sandbox \"%s\" has no toolbox URL", sb->id);
        r = -EINVAL;
        goto fail;
    }
    if (nfiles > UPLOAD_FILES_MAX - 2) {
        snprintf(err, errlen, "harness files: too many");
        r = -E2BIG;
        goto fail;
    }
    r = daytona_bridge_env_file(h->env, &envf, err, errlen);
    if (r < 0)
        goto fail;
    if (!abs_path_ok(dir) || strlen(dir) > 4000) {
        snprintf(err, errlen, "harness state folder: not an absolute path");
        r = -EINVAL;
        goto fail;
    }
    snprintf(env_path, sizeof(env_path), "%s/harness.env", dir);
    snprintf(launch_path, sizeof(launch_path), "%s/launch.sh", dir);
    snprintf(folder_key, sizeof(folder_key), "%s/", dir);
    r = daytona_bridge_launcher(env_path, h->argv, h->cwd, &launch, err, errlen);
    if (r < 0)
        goto fail;
    up = calloc(nfiles + 2, sizeof(*up));
    b = calloc(1, sizeof(*b));
    if (!up || !b) {
        r = -ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < nfiles; i++) {
        json_object *f = json_object_array_get_idx(h->files, i);
        json_object *mode = jsonx_get(f, "mode");
        const char *content = jsonx_str(f, "content");

        if (!jsonx_str(f, "path") || !content) {
            snprintf(err, errlen, "harness files[%zu]: needs path and content", i);
            r = -EINVAL;
            goto fail;
        }
        up[nup++] = (struct daytona_upload){
            jsonx_str(f, "path"), content, (size_t)json_object_get_string_len(jsonx_get(f, "content")),
            mode && json_object_is_type(mode, json_type_int) ? (unsigned)json_object_get_int(mode)
                                                              : 0644};
    }
    up[nup++] = (struct daytona_upload){env_path, envf.data, envf.len, 0600};
    up[nup++] = (struct daytona_upload){launch_path, launch.data, launch.len, 0700};

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
    if (r < 0)
        goto fail;
    /* our folder first, 0700, so the env file is never readable on the way */
    r = daytona_manifest_digest(folder_key, 0700, "", 0, folder_digest);
    if (r < 0)
        goto fail;
    if (!daytona_manifest_has(m, folder_key, folder_digest)) {
        r = daytona_files_folder(c, b->tb, dir, "700");
        if (r < 0) {
            snprintf(err, errlen, "create \"%.200s\": %s", dir, daytona_client_message(c));
            goto fail;
        }
        r = daytona_manifest_put(m, folder_key, folder_digest);
        if (r < 0)
            goto fail;
    }
    r = daytona_sync(c, b->tb, m, up, nup, &b->sync, err, errlen);
    if (r < 0)
        goto fail;

    t0 = now_ms();
    r = random_hex(rnd, 8);
    if (r < 0)
        goto fail;
    snprintf(b->sid, sizeof(b->sid), "ar-h-%s", rnd);
    r = daytona_session_create(c, b->tb, b->sid);
    if (r < 0) {
        snprintf(err, errlen, "session: %s", daytona_client_message(c));
        goto fail;
    }
    r = buf_append_str(&cmd, "env -i /bin/sh ");
    if (r >= 0)
        r = daytona_shell_quote(launch_path, &cmd);
    if (r < 0)
        goto fail_session;
    r = daytona_session_exec(c, b->tb, b->sid, buf_str(&cmd), true, b->cid);
    if (r < 0) {
        snprintf(err, errlen, "start the harness: %s", daytona_client_message(c));
        goto fail_session;
    }
    if (make_pipe(in) < 0 || make_pipe(out) < 0 || make_pipe(errp) < 0) {
        r = -errno;
        goto fail_session;
    }
    b->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    b->exit_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (b->stop_fd < 0 || b->exit_fd < 0) {
        r = -errno;
        goto fail_session;
    }
    b->in_rd = in[0];
    b->out_wr = out[1];
    b->err_wr = errp[1];
    in[0] = out[1] = errp[1] = -1;
    r = -pthread_create(&b->reader, NULL, reader_main, b);
    if (r < 0)
        goto fail_session;
    b->reader_started = true;
    r = -pthread_create(&b->writer, NULL, writer_main, b);
    if (r < 0)
        goto fail_session;
    b->writer_started = true;
    b->start_ms = (long)(now_ms() - t0);
    ret_fds->stdin_fd = in[1];
    ret_fds->stdout_fd = out[0];
    ret_fds->stderr_fd = errp[0];
    ret_fds->exit_fd = b->exit_fd;
    *ret = b;
    b = NULL;
    r = 0;
    goto out;
fail_session:
    if (b && b->sid[0])
        (void)daytona_session_delete(c, b->tb, b->sid);
fail:
    if (b) {
        b->sid[0] = '\0'; /* already deleted */
        daytona_bridge_free(b);
        b = NULL;
    }
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
out:
    daytona_client_free(c);
    free(up);
    if (envf.data)
        explicit_bzero(envf.data, envf.cap);
    buf_release(&envf);
    buf_release(&launch);
    buf_release(&cmd);
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
            (void)daytona_session_delete(c, b->tb, b->sid);
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
