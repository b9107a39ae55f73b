#include "keeper_channel.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "proto/keeper_proto.h"
#include "proto/tool_channel.h"

#define REPLY_MAX (64u * 1024)
/* idle buffers above this are given back (conn_trim) */
#define KEEPER_CHANNEL_TRIM (256u * 1024)

void keeper_channel_init(struct keeper_channel *kc)
{
    memset(kc, 0, sizeof(*kc));
    kc->listen_fd = -1;
    kc->next_id = 1;
    kc->next_serial = 1;
}

enum keeper_channel_role keeper_channel_role_of(const char *name)
{
    if (name && strcmp(name, "harness") == 0)
        return KEEPER_CHANNEL_HARNESS;
    if (name && strcmp(name, "tools") == 0)
        return KEEPER_CHANNEL_TOOLS;
    return KEEPER_CHANNEL_NONE;
}

static void conn_add(struct keeper_channel *kc, int fd, enum keeper_channel_role role)
{
    struct keeper_channel_conn *c = &kc->conns[kc->nconns++];

    c->fd = fd;
    c->serial = kc->next_serial++;
    c->role = role;
    c->hello = false;
    c->deadline = role == KEEPER_CHANNEL_NONE ? util_now_ms() + KEEPER_CHANNEL_STRANGER_MS : 0;
    acp_lines_init(&c->in, role == KEEPER_CHANNEL_NONE ? KEEPER_CHANNEL_STRANGER_LINE
                                                       : TOOL_CHANNEL_LINE_MAX);
    buf_init(&c->out, KEEPER_CHANNEL_OUT_MAX);
}

/* A relayed sandbox's socket: only the keeper's own relay pump connects to it. */
static int open_listener(struct keeper_channel *kc, const char *env_dir, char *err, size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd, r;

    if ((size_t)snprintf(kc->dir, sizeof(kc->dir), "%s/%s", env_dir, KEEPER_CHANNEL_DIR) >=
            sizeof(kc->dir) ||
        (size_t)snprintf(kc->path, sizeof(kc->path), "%s/%s", kc->dir, KEEPER_CHANNEL_SOCKET) >=
            sizeof(sa.sun_path)) {
        snprintf(err, errlen, "tool channel: the path under '%s' is too long for a unix socket",
                 env_dir);
        return -ENAMETOOLONG;
    }
    if (mkdir(kc->dir, 0700) == -1 && errno != EEXIST) {
        r = -errno;
        snprintf(err, errlen, "tool channel: mkdir '%s': %s", kc->dir, strerror(-r));
        return r;
    }
    if (chmod(kc->dir, 0700) == -1) {
        r = -errno;
        snprintf(err, errlen, "tool channel: chmod '%s': %s", kc->dir, strerror(-r));
        return r;
    }
    /* a backlog for every connection at once: the relay connects them in a burst
     * (daytona_relay), before this loop accepts any */
    fd = util_unix_listen(kc->path, 0600, 2 * KEEPER_CHANNEL_CONNS_MAX);
    if (fd < 0) {
        snprintf(err, errlen, "tool channel: cannot listen on '%s': %s", kc->path, strerror(-fd));
        return fd;
    }
    kc->listen_fd = fd;
    return 0;
}

int keeper_channel_open(struct keeper_channel *kc, const char *env_dir,
                        enum keeper_channel_role role, bool relayed,
                        const struct keeper_channel_worker *w, int *ret_fd, char *err,
                        size_t errlen)
{
    int pair[2], r;

    kc->worker = *w;
    *ret_fd = -1;
    if (relayed) {
        r = open_listener(kc, env_dir, err, errlen);
        if (r == 0)
            kc->first = role;
        return r;
    }
    if (role == KEEPER_CHANNEL_NONE)
        return 0;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == -1) {
        r = -errno;
        snprintf(err, errlen, "tool channel: socketpair: %s", strerror(-r));
        return r;
    }
    util_set_nonblock(pair[0]);
    conn_add(kc, pair[0], role);
    *ret_fd = pair[1];
    return 0;
}

static struct keeper_channel_conn *conn_of(struct keeper_channel *kc, uint64_t serial)
{
    for (size_t i = 0; i < kc->nconns; i++)
        if (kc->conns[i].serial == serial)
            return &kc->conns[i];
    return NULL;
}

static void pending_drop(struct keeper_channel *kc, size_t i)
{
    free(kc->pending[i].orig_id);
    kc->pending[i] = kc->pending[--kc->npending];
}

/* Close connection i; its pending requests have nobody left to answer. */
static void conn_close(struct keeper_channel *kc, size_t i)
{
    struct keeper_channel_conn *c = &kc->conns[i];

    for (size_t j = kc->npending; j-- > 0;)
        if (kc->pending[j].conn == c->serial)
            pending_drop(kc, j);
    close(c->fd);
    acp_lines_release(&c->in);
    buf_release(&c->out);
    kc->conns[i] = kc->conns[--kc->nconns];
}

void keeper_channel_close(struct keeper_channel *kc)
{
    while (kc->nconns > 0)
        conn_close(kc, kc->nconns - 1);
    while (kc->npending > 0)
        pending_drop(kc, kc->npending - 1);
    if (kc->listen_fd >= 0) {
        close(kc->listen_fd);
        (void)unlink(kc->path);
    }
    kc->listen_fd = -1;
}

/*
 * Whether a warning the sandbox can provoke may be logged now: at most
 * KEEPER_CHANNEL_WARNS_PER_S a second, the rest summed in one line the next second, so a
 * connect loop inside cannot write thousands of lines a second into the host's log.
 */
static bool warn_allowed(struct keeper_channel *kc)
{
    uint64_t dropped;
    bool ok = log_budget_take(&kc->warns, KEEPER_CHANNEL_WARNS_PER_S, &dropped);

    if (dropped)
        log_warn("tool channel: %llu more warnings not logged", (unsigned long long)dropped);
    return ok;
}

/* What the channel holds in memory now: every connection's line and answer buffers. */
static size_t buffered(const struct keeper_channel *kc)
{
    size_t n = 0;

    for (size_t i = 0; i < kc->nconns; i++)
        n += kc->conns[i].in.in.cap + kc->conns[i].out.cap;
    return n;
}

/* Give back what a connection's idle buffers hold beyond a read's worth (a big line or answer
 * that went through leaves its allocation behind otherwise). */
static void conn_trim(struct keeper_channel_conn *c)
{
    if (c->in.in.len == 0 && c->in.in.cap > KEEPER_CHANNEL_TRIM) {
        size_t max = c->in.in.max;

        buf_release(&c->in.in);
        buf_init(&c->in.in, max);
        c->in.scanned = 0;
    }
    if (c->out.len == 0 && c->out.cap > KEEPER_CHANNEL_TRIM) {
        buf_release(&c->out);
        buf_init(&c->out, KEEPER_CHANNEL_OUT_MAX);
    }
}

/* Drop connection c for going over a bound (what: which), logged through the limiter. */
static void conn_over(struct keeper_channel *kc, struct keeper_channel_conn *c, const char *what)
{
    kc->over++;
    if (warn_allowed(kc))
        log_warn("tool channel: %s: dropping the connection", what);
    shutdown(c->fd, SHUT_RDWR);
    c->deadline = 1; /* closed at the next keeper_channel_handle */
}

/* Queue an encoded line (it ends in '\n') to connection c; a connection that does not read,
 * or whose answers would take the channel over KEEPER_CHANNEL_BUFFERED_MAX, is dropped. */
static void conn_queue(struct keeper_channel *kc, struct keeper_channel_conn *c,
                       const struct buf *line)
{
    if (c->deadline == 1)
        return; /* being dropped */
    if (buffered(kc) - c->out.cap + c->out.len + line->len > KEEPER_CHANNEL_BUFFERED_MAX)
        conn_over(kc, c, "the channel's buffers are full");
    else if (buf_append(&c->out, line->data, line->len) < 0)
        conn_over(kc, c, "a connection does not read its answers");
}

static void answer_error(struct keeper_channel *kc, struct keeper_channel_conn *c, json_object *id,
                         int code, const char *message)
{
    struct buf out;

    buf_init(&out, REPLY_MAX);
    if (acp_encode_error(&out, id, code, message) == 0)
        conn_queue(kc, c, &out);
    buf_release(&out);
}

/* The keeper's own answer to a request, as when no worker is attached. */
static void answer_alone(struct keeper_channel *kc, struct keeper_channel_conn *c, json_object *id,
                         enum tool_channel_kind kind)
{
    struct buf out;
    int r;

    buf_init(&out, REPLY_MAX);
    if (kind == TOOL_CHANNEL_HELLO)
        r = tool_channel_encode_hello_result(&out, id);
    else if (kind == TOOL_CHANNEL_PERMISSION)
        r = tool_channel_encode_permission_result(&out, id, TOOL_CHANNEL_CANCELLED, NULL);
    else
        r = tool_channel_encode_call_result(&out, id,
                                            "agent-runner: no turn is running to take this "
                                            "tool call",
                                            true);
    if (r == 0)
        conn_queue(kc, c, &out);
    buf_release(&out);
}

static bool worker_holding(const struct keeper_channel *kc)
{
    return kc->worker.holding && *kc->worker.holding;
}

static bool worker_attached(const struct keeper_channel *kc)
{
    return (kc->worker.fd && *kc->worker.fd >= 0 && !*kc->worker.gone) || worker_holding(kc);
}

/* Queue one "@tool <json>" line to the worker (held: only kept): -E2BIG when its queue is full. */
static int to_worker(struct keeper_channel *kc, const char *json, size_t len)
{
    struct keeper_msg m = {.kind = KEEPER_MSG_TOOL, .payload = json, .payload_len = len};
    struct buf *out = kc->worker.out;
    size_t mark = out->len;
    int r = 0;

    if (!worker_holding(kc))
        r = keeper_proto_encode(&m, out);
    else if (kc->worker.keep) {
        struct buf line;

        buf_init(&line, TOOL_CHANNEL_LINE_MAX + 16);
        r = keeper_proto_encode(&m, &line);
        if (r == 0)
            kc->worker.keep(kc->worker.ctx, line.data, line.len);
        buf_release(&line);
        return r;
    }
    if (r == 0 && kc->worker.keep)
        kc->worker.keep(kc->worker.ctx, out->data + mark, out->len - mark);
    return r;
}

/* msg as one line with its id replaced by id (the root is changed in place). */
static int relay_with_id(struct keeper_channel *kc, json_object *root, json_object *id)
{
    const char *text;
    size_t len;

    json_object_object_add(root, "id", id);
    text = jsonx_text(root, &len);
    return to_worker(kc, text, len);
}

/* A request of connection c for the worker: relayed under a fresh keeper-wide id. */
static void relay_request(struct keeper_channel *kc, struct keeper_channel_conn *c,
                          const struct acp_msg *m, enum tool_channel_kind kind)
{
    struct keeper_channel_pending *p;
    int64_t id;

    if (kc->npending >= KEEPER_CHANNEL_PENDING_MAX) {
        answer_error(kc, c, m->id, -32000, "agent-runner: too many tool requests are open");
        return;
    }
    p = &kc->pending[kc->npending];
    p->orig_id = strdup(jsonx_text(m->id, NULL));
    if (!p->orig_id) {
        answer_alone(kc, c, m->id, kind);
        return;
    }
    id = kc->next_id++;
    p->id = id;
    p->conn = c->serial;
    p->kind = (int)kind;
    kc->npending++;
    if (relay_with_id(kc, m->root, json_object_new_int64(id)) < 0) {
        pending_drop(kc, kc->npending - 1);
        answer_alone(kc, c, m->id, kind);
    }
}

/* Whether a role may send a message of kind (a stranger may send nothing). */
static bool role_allows(enum keeper_channel_role role, enum tool_channel_kind kind)
{
    if (role == KEEPER_CHANNEL_HARNESS)
        return true;
    return role == KEEPER_CHANNEL_TOOLS &&
           (kind == TOOL_CHANNEL_HELLO || kind == TOOL_CHANNEL_CALL);
}

/* A refusal the sandbox provoked: counted, answered with why, logged through the limiter. */
static void refuse(struct keeper_channel *kc, struct keeper_channel_conn *c, json_object *id,
                   const char *why)
{
    kc->refused++;
    answer_error(kc, c, id, KEEPER_CHANNEL_UNAUTHORIZED, why);
    if (warn_allowed(kc))
        log_warn("tool channel: refused: %s", why);
}

/*
 * The gate before the relay. False when the line ends the connection (it was answered with an
 * error naming the problem): anything from a stranger, anything but a hello first. A request
 * its role may not send is answered with an error (true, *ret_done); such a notification is
 * dropped.
 */
static bool admit(struct keeper_channel *kc, struct keeper_channel_conn *c, const struct acp_msg *m,
                  const struct tool_channel_msg *tm, int decoded, bool *ret_done)
{
    json_object *id = m->kind == ACP_REQUEST ? m->id : NULL;

    *ret_done = false;
    if (c->role == KEEPER_CHANNEL_NONE) {
        refuse(kc, c, id, KEEPER_CHANNEL_STRANGER);
        return false;
    }
    if (decoded == 0 && tm->kind == TOOL_CHANNEL_HELLO) {
        c->hello = true;
        return true;
    }
    if (!c->hello) {
        refuse(kc, c, id, KEEPER_CHANNEL_HELLO_FIRST);
        return false;
    }
    if (decoded == 0 && !role_allows(c->role, tm->kind)) {
        *ret_done = true;
        if (id)
            refuse(kc, c, id, KEEPER_CHANNEL_TOOLS_ONLY);
        else
            kc->refused++;
    }
    return true;
}

/* One line of connection c; false when the connection is to be closed. */
static bool on_line(struct keeper_channel *kc, struct keeper_channel_conn *c, const char *line,
                    size_t len)
{
    struct tool_channel_msg tm;
    struct acp_msg m;
    char err[256];
    bool done;
    int r;

    if (acp_decode(line, len, &m, err, sizeof(err)) < 0) {
        kc->dropped++;
        if (c->role == KEEPER_CHANNEL_NONE || !c->hello) {
            refuse(kc, c, NULL,
                   c->role == KEEPER_CHANNEL_NONE ? KEEPER_CHANNEL_STRANGER
                                                  : KEEPER_CHANNEL_HELLO_FIRST);
            return false;
        }
        answer_error(kc, c, NULL, ACP_INVALID_REQUEST, err);
        return true;
    }
    memset(&tm, 0, sizeof(tm));
    r = tool_channel_decode(&m, &tm, err, sizeof(err));
    if (!admit(kc, c, &m, &tm, r, &done)) {
        acp_msg_release(&m);
        return false;
    }
    if (done) {
        /* refused for its role: answered already */
    } else if (r == -EBADMSG) {
        kc->dropped++; /* a response: the runner asked nothing */
    } else if (r < 0 && m.kind == ACP_REQUEST) {
        answer_error(kc, c, m.id, r == -ENOENT ? ACP_METHOD_NOT_FOUND : ACP_INVALID_PARAMS, err);
    } else if (r < 0) {
        kc->dropped++; /* an unknown notification */
    } else if (m.kind == ACP_NOTIFICATION) {
        if (!worker_attached(kc) || to_worker(kc, line, len) < 0)
            kc->dropped++;
    } else if (worker_attached(kc)) {
        relay_request(kc, c, &m, tm.kind);
    } else {
        answer_alone(kc, c, m.id, tm.kind);
    }
    acp_msg_release(&m);
    return true;
}

static bool conn_flush(struct keeper_channel *kc, size_t i);

/* Connection i went over a bound while reading: closed, logged through the limiter. */
static void conn_read_over(struct keeper_channel *kc, size_t i, const char *what)
{
    kc->over++;
    if (warn_allowed(kc))
        log_warn("tool channel: %s: dropping the connection", what);
    conn_close(kc, i);
}

static void conn_read(struct keeper_channel *kc, size_t i)
{
    struct keeper_channel_conn *c = &kc->conns[i];
    ssize_t n = acp_lines_fill(&c->in, c->fd);
    char *line;
    size_t len;
    int r;

    if (n == -EAGAIN)
        return;
    if (n == -E2BIG) {
        conn_read_over(kc, i, "a line is too long");
        return;
    }
    if (n <= 0) {
        if (n < 0 && n != -ECONNRESET)
            log_debug("tool channel: dropping a connection: %s", strerror((int)-n));
        conn_close(kc, i);
        return;
    }
    if (c->role == KEEPER_CHANNEL_NONE) {
        /* a stranger says nothing the keeper listens to: whatever came, it is refused */
        refuse(kc, c, NULL, KEEPER_CHANNEL_STRANGER);
        if (conn_flush(kc, i))
            conn_close(kc, i);
        return;
    }
    if (buffered(kc) > KEEPER_CHANNEL_BUFFERED_MAX) {
        conn_read_over(kc, i, "the channel's buffers are full");
        return;
    }
    while ((r = acp_lines_next(&c->in, &line, &len)) == 1) {
        bool keep = len == 0 || on_line(kc, c, line, len);

        free(line);
        if (!keep) {
            /* the error that says why goes out first (conn_flush closes a broken one) */
            if (conn_flush(kc, i))
                conn_close(kc, i);
            return;
        }
    }
    if (r < 0) {
        conn_read_over(kc, i, "a line is too long");
        return;
    }
    conn_trim(c);
}

/* Write what is queued; false when the connection broke (it is closed then). */
static bool conn_flush(struct keeper_channel *kc, size_t i)
{
    struct keeper_channel_conn *c = &kc->conns[i];

    while (c->out.len > 0) {
        ssize_t n = send(c->fd, c->out.data, c->out.len, MSG_NOSIGNAL);

        if (n == -1 && errno == EINTR)
            continue;
        if (n == -1 && errno == EAGAIN)
            return true;
        if (n == -1) {
            conn_close(kc, i);
            return false;
        }
        buf_consume(&c->out, (size_t)n);
    }
    conn_trim(c);
    return true;
}

static void accept_conn(struct keeper_channel *kc)
{
    int fd = accept4(kc->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

    if (fd == -1)
        return;
    if (kc->nconns >= KEEPER_CHANNEL_CONNS_MAX) {
        kc->refused++;
        if (warn_allowed(kc))
            log_warn("tool channel: %d connections are open: refusing another",
                     KEEPER_CHANNEL_CONNS_MAX);
        close(fd);
        return;
    }
    /* the relay's first connection is the harness's; every later one a stranger */
    conn_add(kc, fd, kc->first);
    kc->first = KEEPER_CHANNEL_NONE;
}

size_t keeper_channel_pollfds(struct keeper_channel *kc, struct pollfd *p, size_t max, bool reading)
{
    size_t n = 0;

    kc->npolled = 0;
    if (max == 0)
        return 0;
    /* slot 0 is the listener's, -1 (ignored by poll) when there is none */
    p[n] = (struct pollfd){.fd = kc->listen_fd, .events = POLLIN};
    kc->polled[n++] = kc->listen_fd;
    for (size_t i = 0; i < kc->nconns && n < max; i++) {
        struct keeper_channel_conn *c = &kc->conns[i];
        short ev = (short)((reading ? POLLIN : 0) | (c->out.len ? POLLOUT : 0));

        p[n] = (struct pollfd){.fd = c->fd, .events = ev};
        kc->polled[n++] = c->fd;
    }
    kc->npolled = n;
    return n;
}

void keeper_channel_timeout(const struct keeper_channel *kc, int64_t now, int *timeout_ms)
{
    for (size_t i = 0; i < kc->nconns; i++) {
        int64_t left = kc->conns[i].deadline - now;

        if (!kc->conns[i].deadline)
            continue;
        if (left < 0)
            left = 0;
        if (*timeout_ms < 0 || left < *timeout_ms)
            *timeout_ms = (int)left;
    }
}

static ssize_t conn_index(const struct keeper_channel *kc, int fd)
{
    for (size_t i = 0; i < kc->nconns; i++)
        if (kc->conns[i].fd == fd)
            return (ssize_t)i;
    return -1;
}

/* Close the connections whose deadline passed: silent strangers, dropped ones. */
static void expire(struct keeper_channel *kc, int64_t now)
{
    for (size_t i = kc->nconns; i-- > 0;) {
        struct keeper_channel_conn *c = &kc->conns[i];

        if (!c->deadline || c->deadline > now)
            continue;
        if (c->role == KEEPER_CHANNEL_NONE && c->deadline != 1)
            kc->refused++; /* said nothing in time */
        conn_close(kc, i);
    }
}

void keeper_channel_handle(struct keeper_channel *kc, const struct pollfd *p, size_t n)
{
    /* connections first: the listener may add one, and a closed one moves another */
    for (size_t j = 1; j < n && j < kc->npolled; j++) {
        ssize_t i = conn_index(kc, kc->polled[j]);

        if (i < 0 || p[j].fd != kc->polled[j])
            continue;
        if ((p[j].revents & POLLOUT) && !conn_flush(kc, (size_t)i))
            continue;
        if (p[j].revents & (POLLIN | POLLHUP | POLLERR))
            conn_read(kc, (size_t)i);
    }
    /* answers queued while reading go out now, not at the next wake-up */
    for (size_t i = kc->nconns; i-- > 0;)
        if (kc->conns[i].out.len)
            (void)conn_flush(kc, i);
    expire(kc, util_now_ms());
    if (n > 0 && kc->npolled > 0 && kc->listen_fd >= 0 && (p[0].revents & POLLIN))
        accept_conn(kc);
}

void keeper_channel_from_worker(struct keeper_channel *kc, const char *json, size_t len)
{
    struct keeper_channel_conn *c;
    json_object *orig = NULL;
    struct acp_msg m;
    char err[128];
    int64_t id;
    size_t i;

    if (acp_decode(json, len, &m, err, sizeof(err)) < 0) {
        log_debug("tool channel: dropping a malformed worker line: %s", err);
        return;
    }
    if (m.kind != ACP_RESPONSE || acp_msg_int_id(&m, &id) < 0) {
        log_debug("tool channel: dropping a worker line that answers nothing");
        acp_msg_release(&m);
        return;
    }
    for (i = 0; i < kc->npending && kc->pending[i].id != id; i++)
        ;
    if (i == kc->npending) {
        log_debug("tool channel: dropping an answer to id %lld: nobody waits for it",
                  (long long)id);
        acp_msg_release(&m);
        return;
    }
    if (kc->pending[i].kind == TOOL_CHANNEL_CALL)
        kc->calls_answered++;
    c = conn_of(kc, kc->pending[i].conn);
    if (c && jsonx_parse(kc->pending[i].orig_id, strlen(kc->pending[i].orig_id), 4, &orig, err,
                         sizeof(err)) == 0) {
        struct buf out;
        const char *text;
        size_t tlen;

        json_object_object_add(m.root, "id", orig);
        text = jsonx_text(m.root, &tlen);
        buf_init(&out, TOOL_CHANNEL_LINE_MAX);
        if (buf_append(&out, text, tlen) == 0 && buf_append_char(&out, '\n') == 0)
            conn_queue(kc, c, &out);
        buf_release(&out);
    }
    pending_drop(kc, i);
    acp_msg_release(&m);
}

void keeper_channel_detached(struct keeper_channel *kc)
{
    for (size_t i = kc->npending; i-- > 0;) {
        struct keeper_channel_pending *p = &kc->pending[i];
        struct keeper_channel_conn *c;
        json_object *id = NULL;
        char err[64];

        c = conn_of(kc, p->conn);
        if (c && jsonx_parse(p->orig_id, strlen(p->orig_id), 4, &id, err, sizeof(err)) == 0) {
            answer_alone(kc, c, id, (enum tool_channel_kind)p->kind);
            json_object_put(id);
        }
        pending_drop(kc, i);
    }
    for (size_t i = kc->nconns; i-- > 0;)
        if (kc->conns[i].out.len)
            (void)conn_flush(kc, i);
}
