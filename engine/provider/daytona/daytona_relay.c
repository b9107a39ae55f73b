#include "provider/daytona/daytona_relay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "proto/acp.h"
#include "proto/tool_channel.h"

_Static_assert(DAYTONA_RELAY_LINE_MAX == TOOL_CHANNEL_LINE_MAX,
               "a relayed line has the keeper channel's limit");

#define ERR_TAIL_MAX 1024
/* reading pauses above half a queue: one read(2) adds far less than the other half */
#define QUEUE_HIGH (DAYTONA_RELAY_QUEUE_MAX / 2)

/* ---- framing ---------------------------------------------------------------------------- */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int daytona_relay_b64_encode(const void *data, size_t len, struct buf *out)
{
    const unsigned char *s = data;
    char q[4];
    int r = 0;

    for (size_t i = 0; r >= 0 && i < len; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        size_t n = len - i < 3 ? len - i : 3;

        if (n > 1)
            v |= (uint32_t)s[i + 1] << 8;
        if (n > 2)
            v |= s[i + 2];
        q[0] = b64_alphabet[(v >> 18) & 63];
        q[1] = b64_alphabet[(v >> 12) & 63];
        q[2] = n > 1 ? b64_alphabet[(v >> 6) & 63] : '=';
        q[3] = n > 2 ? b64_alphabet[v & 63] : '=';
        r = buf_append(out, q, 4);
    }
    return r;
}

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int daytona_relay_b64_decode(const char *text, size_t len, struct buf *out)
{
    int r = 0;

    if (len % 4 != 0)
        return -EINVAL;
    for (size_t i = 0; r >= 0 && i < len; i += 4) {
        bool last = i + 4 == len;
        int pad = 0, v[4];
        unsigned char o[3];
        uint32_t w;

        for (int j = 0; j < 4; j++) {
            if (last && text[i + (size_t)j] == '=' && j >= 2) {
                v[j] = 0;
                pad++;
                continue;
            }
            v[j] = pad ? -1 : b64_value(text[i + (size_t)j]);
            if (v[j] < 0)
                return -EINVAL; /* a bad character, or data after padding */
        }
        w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        o[0] = (unsigned char)(w >> 16);
        o[1] = (unsigned char)(w >> 8);
        o[2] = (unsigned char)w;
        r = buf_append(out, o, (size_t)(3 - pad));
    }
    return r;
}

/* A decimal id 1..DAYTONA_RELAY_ID_MAX without leading zeros: its length, or 0. */
static size_t parse_id(const char *s, size_t len, uint32_t *ret)
{
    uint64_t v = 0;
    size_t n = 0;

    while (n < len && n < 10 && s[n] >= '0' && s[n] <= '9') {
        v = v * 10 + (uint64_t)(s[n] - '0');
        n++;
    }
    if (n == 0 || s[0] == '0' || v > DAYTONA_RELAY_ID_MAX ||
        (n < len && s[n] >= '0' && s[n] <= '9'))
        return 0;
    *ret = (uint32_t)v;
    return n;
}

int daytona_relay_frame_parse(const char *line, size_t len, struct daytona_relay_frame *ret)
{
    struct daytona_relay_frame f = {0};
    size_t n;

    if (len == 5 && memcmp(line, "ready", 5) == 0) {
        f.kind = DAYTONA_RELAY_READY;
        *ret = f;
        return 0;
    }
    if (len < 3 || line[1] != ' ')
        return -EINVAL;
    switch (line[0]) {
    case 'o':
        f.kind = DAYTONA_RELAY_OPEN;
        break;
    case 'd':
        f.kind = DAYTONA_RELAY_DATA;
        break;
    case 'c':
        f.kind = DAYTONA_RELAY_CLOSE;
        break;
    default:
        return -EINVAL;
    }
    n = parse_id(line + 2, len - 2, &f.id);
    if (n == 0)
        return -EINVAL;
    n += 2;
    if (f.kind == DAYTONA_RELAY_DATA) {
        if (n >= len || line[n] != ' ' || (len - n - 1) % 4 != 0)
            return -EINVAL;
        f.payload = line + n + 1;
        f.payload_len = len - n - 1;
    } else if (n != len) {
        return -EINVAL;
    }
    *ret = f;
    return 0;
}

int daytona_relay_frame_data(uint32_t id, const void *data, size_t len, struct buf *out)
{
    size_t mark = out->len;
    int r = buf_printf(out, "d %u ", id);

    if (r >= 0)
        r = daytona_relay_b64_encode(data, len, out);
    if (r >= 0)
        r = buf_append_char(out, '\n');
    if (r < 0 && out->data) {
        out->len = mark; /* nothing half-framed stays queued */
        out->data[mark] = '\0';
    }
    return r;
}

int daytona_relay_frame_close(uint32_t id, struct buf *out)
{
    return buf_printf(out, "c %u\n", id);
}

/* ---- the pump --------------------------------------------------------------------------- */

struct relay_conn {
    uint32_t id;
    int fd;
    bool closing; /* the relay closed it: close once out is written */
    struct acp_lines in;
    struct buf out;
};

struct daytona_relay {
    int to_fd, from_fd, err_fd;
    char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
    bool ready, dead;
    struct acp_lines frames; /* from the relay */
    struct buf out;          /* frames for the relay */
    char err_tail[ERR_TAIL_MAX];
    size_t err_len;
    struct relay_conn conns[DAYTONA_RELAY_CONNS_MAX];
    size_t nconns;
    struct daytona_relay_stats st;
    /* the poll set of the last daytona_relay_pollfds: which fd each slot was */
    int polled[DAYTONA_RELAY_POLLFDS];
    size_t npolled;
};

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

int daytona_relay_new(int to_fd, int from_fd, int err_fd, const char *channel_sock,
                      struct daytona_relay **ret)
{
    struct daytona_relay *r = NULL;

    if (!channel_sock || strlen(channel_sock) >= sizeof(r->sock)) {
        close_fd(&to_fd);
        close_fd(&from_fd);
        close_fd(&err_fd);
        return -ENAMETOOLONG;
    }
    r = calloc(1, sizeof(*r));
    if (!r) {
        close_fd(&to_fd);
        close_fd(&from_fd);
        close_fd(&err_fd);
        return -ENOMEM;
    }
    r->to_fd = to_fd;
    r->from_fd = from_fd;
    r->err_fd = err_fd;
    util_set_nonblock(to_fd);
    util_set_nonblock(from_fd);
    util_set_nonblock(err_fd);
    snprintf(r->sock, sizeof(r->sock), "%s", channel_sock);
    acp_lines_init(&r->frames, DAYTONA_RELAY_FRAME_MAX);
    buf_init(&r->out, DAYTONA_RELAY_QUEUE_MAX);
    *ret = r;
    return 0;
}

static void conn_release(struct relay_conn *c)
{
    close_fd(&c->fd);
    acp_lines_release(&c->in);
    buf_release(&c->out);
}

/* Drop connection i (closing its local socket); tell the relay when tell. */
static void conn_drop(struct daytona_relay *r, size_t i, bool tell)
{
    uint32_t id = r->conns[i].id;

    conn_release(&r->conns[i]);
    r->conns[i] = r->conns[--r->nconns];
    if (tell && !r->dead && daytona_relay_frame_close(id, &r->out) < 0)
        r->dead = true; /* the relay does not read: nothing can be relayed any more */
}

static struct relay_conn *conn_find(struct daytona_relay *r, uint32_t id, size_t *ret_i)
{
    for (size_t i = 0; i < r->nconns; i++) {
        if (r->conns[i].id == id) {
            *ret_i = i;
            return &r->conns[i];
        }
    }
    return NULL;
}

/* The relay is gone: every local connection closes (the keeper channel sees EOF). */
static void relay_died(struct daytona_relay *r, const char *why)
{
    if (!r->dead)
        log_debug("daytona relay: %s: %zu connection(s) closed", why, r->nconns);
    r->dead = true;
    while (r->nconns)
        conn_drop(r, r->nconns - 1, false);
    buf_reset(&r->out);
    close_fd(&r->to_fd);
    close_fd(&r->from_fd);
}

void daytona_relay_free(struct daytona_relay *r)
{
    if (!r)
        return;
    relay_died(r, "stopped");
    close_fd(&r->err_fd);
    acp_lines_release(&r->frames);
    buf_release(&r->out);
    free(r);
}

static void open_conn(struct daytona_relay *r, uint32_t id)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct relay_conn *c;
    size_t i;
    int fd;

    if (conn_find(r, id, &i) || r->nconns == DAYTONA_RELAY_CONNS_MAX) {
        r->st.refused++;
        if (daytona_relay_frame_close(id, &r->out) < 0)
            r->dead = true;
        return;
    }
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", r->sock);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    /* a unix connect never waits: it is accepted into the backlog or refused (EAGAIN) */
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1) {
        log_debug("daytona relay: cannot reach the keeper channel: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        r->st.refused++;
        if (daytona_relay_frame_close(id, &r->out) < 0)
            r->dead = true;
        return;
    }
    c = &r->conns[r->nconns++];
    memset(c, 0, sizeof(*c));
    c->id = id;
    c->fd = fd;
    acp_lines_init(&c->in, DAYTONA_RELAY_LINE_MAX);
    buf_init(&c->out, DAYTONA_RELAY_QUEUE_MAX);
    r->st.opened++;
}

static void data_for_conn(struct daytona_relay *r, const struct daytona_relay_frame *f)
{
    struct relay_conn *c;
    size_t i, mark;
    int e;

    c = conn_find(r, f->id, &i);
    if (!c || c->closing) {
        r->st.dropped++; /* it closed on our side: the relay hears "c" */
        return;
    }
    mark = c->out.len;
    e = daytona_relay_b64_decode(f->payload, f->payload_len, &c->out);
    if (e >= 0 && c->out.len - mark > DAYTONA_RELAY_LINE_MAX)
        e = -E2BIG;
    if (e >= 0)
        e = buf_append_char(&c->out, '\n');
    if (e < 0) {
        /* a broken frame or an overflowing queue: this connection cannot go on */
        log_debug("daytona relay: connection %u: %s", f->id, strerror(-e));
        conn_drop(r, i, true);
    }
}

static void handle_frame(struct daytona_relay *r, const char *line, size_t len)
{
    struct daytona_relay_frame f;
    size_t i;

    if (len == 0)
        return;
    if (daytona_relay_frame_parse(line, len, &f) < 0) {
        r->st.dropped++;
        return;
    }
    r->st.frames_in++;
    switch (f.kind) {
    case DAYTONA_RELAY_READY:
        r->ready = true;
        break;
    case DAYTONA_RELAY_OPEN:
        open_conn(r, f.id);
        break;
    case DAYTONA_RELAY_DATA:
        data_for_conn(r, &f);
        break;
    case DAYTONA_RELAY_CLOSE:
        if (conn_find(r, f.id, &i)) {
            r->conns[i].closing = true;
            if (r->conns[i].out.len == 0)
                conn_drop(r, i, false);
        } else {
            r->st.dropped++;
        }
        break;
    }
}

/* Frames queued towards any connection are above the high mark: stop reading the relay. */
static bool conns_full(const struct daytona_relay *r)
{
    for (size_t i = 0; i < r->nconns; i++) {
        if (r->conns[i].out.len >= QUEUE_HIGH)
            return true;
    }
    return false;
}

/* Handle every complete frame buffered so far. */
static int drain_frames(struct daytona_relay *r)
{
    char *line;
    size_t len;
    int e;

    while (!r->dead && (e = acp_lines_next(&r->frames, &line, &len)) == 1) {
        handle_frame(r, line, len);
        free(line);
    }
    return r->dead ? 0 : e;
}

static void read_frames(struct daytona_relay *r)
{
    ssize_t n = acp_lines_fill(&r->frames, r->from_fd);
    int e;

    if (n == -EAGAIN)
        return;
    e = drain_frames(r);
    if (n == -E2BIG || e == -E2BIG)
        relay_died(r, "a frame over the limit");
    else if (n == 0)
        relay_died(r, "the relay ended");
    else if (n < 0 || e < 0)
        relay_died(r, strerror(n < 0 ? (int)-n : -e));
}

static void read_err(struct daytona_relay *r)
{
    char chunk[4096];
    ssize_t n;

    for (;;) {
        n = read(r->err_fd, chunk, sizeof(chunk));
        if (n == -1 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n && r->err_len < sizeof(r->err_tail) - 1; i++)
            r->err_tail[r->err_len++] = chunk[i] >= 0x20 && chunk[i] < 0x7f ? chunk[i] : ' ';
        r->err_tail[r->err_len] = '\0';
    }
    if (n == 0 || (n == -1 && errno != EAGAIN))
        close_fd(&r->err_fd);
}

/* Write what is queued for fd; false when fd broke. */
static bool flush(int fd, struct buf *b)
{
    while (b->len) {
        ssize_t n = write(fd, b->data, b->len);

        if (n == -1 && errno == EINTR)
            continue;
        if (n == -1)
            return errno == EAGAIN;
        buf_consume(b, (size_t)n);
    }
    return true;
}

static void read_conn(struct daytona_relay *r, size_t i)
{
    struct relay_conn *c = &r->conns[i];
    ssize_t n;
    char *line;
    size_t len;
    int e;

    n = acp_lines_fill(&c->in, c->fd);
    if (n == -EAGAIN)
        return;
    while ((e = acp_lines_next(&c->in, &line, &len)) == 1) {
        int q = daytona_relay_frame_data(c->id, line, len, &r->out);

        free(line);
        if (q < 0) {
            /* reading pauses long before the queue is full: the relay does not read */
            relay_died(r, "the relay does not read");
            return;
        }
        r->st.frames_out++;
    }
    if (n <= 0 || e < 0)
        conn_drop(r, i, true); /* EOF, an error, or a line over the limit */
}

size_t daytona_relay_pollfds(struct daytona_relay *r, struct pollfd *p, size_t max)
{
    size_t n = 0;

    r->npolled = 0;
#define ADD(fd_, ev_)                                                                              \
    do {                                                                                           \
        if (n < max && n < DAYTONA_RELAY_POLLFDS) {                                                \
            p[n] = (struct pollfd){.fd = (fd_), .events = (short)(ev_)};                           \
            r->polled[n++] = (fd_);                                                                \
        }                                                                                          \
    } while (0)
    if (r->err_fd >= 0)
        ADD(r->err_fd, POLLIN);
    if (!r->dead) {
        if (r->to_fd >= 0 && r->out.len)
            ADD(r->to_fd, POLLOUT);
        if (r->from_fd >= 0 && !conns_full(r))
            ADD(r->from_fd, POLLIN);
        for (size_t i = 0; i < r->nconns; i++) {
            struct relay_conn *c = &r->conns[i];
            short ev = (short)((c->out.len ? POLLOUT : 0) |
                               (!c->closing && r->out.len < QUEUE_HIGH ? POLLIN : 0));

            if (ev)
                ADD(c->fd, ev);
        }
    }
#undef ADD
    r->npolled = n;
    return n;
}

void daytona_relay_handle(struct daytona_relay *r, const struct pollfd *p, size_t n)
{
    if (n > r->npolled)
        n = r->npolled;
    for (size_t k = 0; k < n; k++) {
        short ev = p[k].revents;
        int fd = r->polled[k];
        size_t i;

        if (!ev || fd < 0)
            continue;
        if (fd == r->err_fd) {
            read_err(r);
            continue;
        }
        if (r->dead)
            continue;
        if (fd == r->from_fd) {
            read_frames(r);
            continue;
        }
        if (fd == r->to_fd) {
            if (!flush(r->to_fd, &r->out))
                relay_died(r, "its input broke");
            continue;
        }
        for (i = 0; i < r->nconns && r->conns[i].fd != fd; i++)
            ;
        if (i == r->nconns)
            continue; /* dropped since the poll */
        if ((ev & (POLLOUT | POLLERR | POLLHUP)) && r->conns[i].out.len &&
            !flush(r->conns[i].fd, &r->conns[i].out)) {
            conn_drop(r, i, !r->conns[i].closing);
            continue;
        }
        if (r->conns[i].closing && r->conns[i].out.len == 0) {
            conn_drop(r, i, false);
            continue;
        }
        if ((ev & (POLLIN | POLLHUP | POLLERR)) && !r->conns[i].closing)
            read_conn(r, i);
    }
    /* frames queued above go out now rather than after the next poll */
    if (!r->dead && r->to_fd >= 0 && r->out.len && !flush(r->to_fd, &r->out))
        relay_died(r, "its input broke");
}

int daytona_relay_wait_ready(struct daytona_relay *r, int timeout_ms, char *err, size_t errlen)
{
    int64_t deadline = util_now_ms() + timeout_ms;
    int e = 0;

    while (!r->ready) {
        struct pollfd p[2] = {{.fd = r->from_fd, .events = POLLIN},
                              {.fd = r->err_fd, .events = POLLIN}};
        int64_t left = deadline - util_now_ms();
        char *line = NULL;
        size_t len;
        ssize_t n;

        if (r->dead || r->from_fd < 0) {
            e = -EPIPE;
            break;
        }
        if (left <= 0) {
            e = -ETIMEDOUT;
            break;
        }
        if (poll(p, 2, (int)left) < 0 && errno != EINTR) {
            e = -errno;
            break;
        }
        if (r->err_fd >= 0 && p[1].revents)
            read_err(r);
        if (!p[0].revents)
            continue;
        n = acp_lines_fill(&r->frames, r->from_fd);
        if (n == -EAGAIN)
            continue;
        if (acp_lines_next(&r->frames, &line, &len) == 1) {
            bool ok = len == 5 && memcmp(line, "ready", 5) == 0;

            free(line);
            if (!ok) {
                e = -EPROTO;
                break;
            }
            r->ready = true;
            if (drain_frames(r) < 0) /* what followed "ready" in the same read */
                e = -EPROTO;
            break;
        }
        if (n <= 0) {
            e = -EPIPE;
            break;
        }
    }
    if (e < 0) {
        /* what it said on stderr so far (it may still be writing) */
        if (r->err_fd >= 0)
            read_err(r);
        snprintf(err, errlen, "the keeper channel relay %s%s%.300s",
                 e == -ETIMEDOUT ? "did not say ready in time"
                 : e == -EPROTO  ? "said something else than ready"
                 : e == -EPIPE   ? "ended before it was ready"
                                 : strerror(-e),
                 r->err_len ? ": " : "", r->err_tail);
        relay_died(r, "it did not start");
    }
    return e;
}

bool daytona_relay_dead(const struct daytona_relay *r)
{
    return r->dead;
}

size_t daytona_relay_conns(const struct daytona_relay *r)
{
    return r->nconns;
}

void daytona_relay_stats(const struct daytona_relay *r, struct daytona_relay_stats *ret)
{
    *ret = r->st;
}
