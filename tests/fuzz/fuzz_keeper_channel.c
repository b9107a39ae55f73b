/*
 * fuzz_keeper_channel — the keeper's end of the tool channel (keeper/keeper_channel.c): what a
 * hostile sandbox writes on the channel socket, and what the worker answers.
 *
 * Each input opens a relayed channel in a scratch folder (a remote sandbox's: the first
 * connection accepted is the harness's, every later one a stranger), connects the harness's
 * client to it and plays its lines. Input layout: lines split at '\n', each starting with an
 * opcode byte:
 *   S<line>  the harness writes line      J<line>  the worker's "@tool" answer is line
 *   X<line>  a stranger connects and writes line
 *   W        the worker answers the oldest open request (allow)
 *   A        a worker attaches / detaches  G        the worker says "#park"/"#await" (flip)
 *   D        keeper_channel_detached       anything else: the whole line comes from the harness
 * Properties checked after every step:
 *   - nothing a connection sends before its hello reaches the worker, nor anything a stranger
 *     sends; a stranger is answered and closed;
 *   - every line queued to the worker is "@tool <json>": a request with an integer id the
 *     keeper tracks as open (hello, tool/permission, tool/call) or a usage/error notification;
 *     nothing is queued while no worker takes lines;
 *   - everything the sandbox reads is one '\n'-terminated JSON-RPC 2.0 response (an id, and
 *     exactly one of result / error);
 *   - at most KEEPER_CHANNEL_PENDING_MAX requests are open, each on a live connection; after
 *     keeper_channel_detached none is.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../keeper/keeper_channel.h"
#include "base/fstree.h"
#include "base/jsonx.h"
#include "base/util.h"
#include "fuzz.h"
#include "proto/keeper_proto.h"

static char scratch[64];

static void remove_scratch(void)
{
    (void)fstree_remove(scratch);
}

struct state {
    struct keeper_channel kc;
    int worker_fd;
    bool gone;
    struct buf out;
    int client;
    char heard[1 << 16];
    size_t nheard;
};

static void pump(struct state *s)
{
    for (int i = 0; i < 64; i++) {
        struct pollfd p[KEEPER_CHANNEL_POLLFDS];
        size_t n = keeper_channel_pollfds(&s->kc, p, KEEPER_CHANNEL_POLLFDS, true);

        if (poll(p, (nfds_t)n, 0) <= 0)
            return;
        keeper_channel_handle(&s->kc, p, n);
    }
}

static bool is_open(const struct keeper_channel *kc, int64_t id)
{
    for (size_t i = 0; i < kc->npending; i++)
        if (kc->pending[i].id == id)
            return true;
    return false;
}

static void check_worker_lines(struct state *s)
{
    char *p, *end;
    char err[64];

    if (s->out.len == 0)
        return;
    p = s->out.data;
    end = p + s->out.len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        struct keeper_msg m;
        json_object *o = NULL, *id;
        const char *method;

        FUZZ_CHECK(nl != NULL);
        FUZZ_CHECK(keeper_proto_decode(p, (size_t)(nl - p), &m) == 0);
        FUZZ_CHECK(m.kind == KEEPER_MSG_TOOL);
        FUZZ_CHECK(jsonx_parse(m.payload, m.payload_len, 64, &o, err, sizeof(err)) == 0);
        method = jsonx_str(o, "method");
        FUZZ_CHECK(method != NULL);
        id = jsonx_get(o, "id");
        if (id) {
            FUZZ_CHECK(json_object_is_type(id, json_type_int));
            FUZZ_CHECK(is_open(&s->kc, json_object_get_int64(id)));
            FUZZ_CHECK(strcmp(method, "hello") == 0 || strcmp(method, "tool/permission") == 0 ||
                       strcmp(method, "tool/call") == 0);
        } else {
            FUZZ_CHECK(strcmp(method, "usage") == 0 || strcmp(method, "error") == 0);
        }
        json_object_put(o);
        p = nl + 1;
    }
    buf_reset(&s->out);
}

static void check_heard(struct state *s)
{
    char err[64];
    ssize_t n;

    while ((n = recv(s->client, s->heard + s->nheard, sizeof(s->heard) - s->nheard, MSG_DONTWAIT)) >
           0) {
        char *nl;

        s->nheard += (size_t)n;
        while ((nl = memchr(s->heard, '\n', s->nheard))) {
            size_t len = (size_t)(nl - s->heard);
            json_object *o = NULL;
            bool result, error;

            FUZZ_CHECK(jsonx_parse(s->heard, len, 64, &o, err, sizeof(err)) == 0);
            FUZZ_CHECK(strcmp(jsonx_str(o, "jsonrpc") ? jsonx_str(o, "jsonrpc") : "", "2.0") == 0);
            FUZZ_CHECK(json_object_object_get_ex(o, "id", NULL));
            result = json_object_object_get_ex(o, "result", NULL);
            error = json_object_object_get_ex(o, "error", NULL);
            FUZZ_CHECK(result != error);
            FUZZ_CHECK(!jsonx_get(o, "method"));
            json_object_put(o);
            memmove(s->heard, nl + 1, s->nheard - len - 1);
            s->nheard -= len + 1;
        }
        FUZZ_CHECK(s->nheard < sizeof(s->heard));
    }
}

static void check_open(const struct keeper_channel *kc)
{
    FUZZ_CHECK(kc->npending <= KEEPER_CHANNEL_PENDING_MAX);
    for (size_t i = 0; i < kc->npending; i++) {
        bool live = false;
        for (size_t j = 0; j < kc->nconns; j++)
            live = live || kc->conns[j].serial == kc->pending[i].conn;
        FUZZ_CHECK(live);
    }
}

static void sandbox_says(struct state *s, const char *line, size_t len)
{
    const char nl = '\n';
    size_t done = 0;

    while (done < len) {
        ssize_t n = send(s->client, line + done, len - done, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n <= 0)
            break;
        done += (size_t)n;
        pump(s);
    }
    (void)send(s->client, &nl, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    pump(s);
}

/* A stranger connects, says line, is answered and closed; nothing of it reaches the worker. */
static void stranger_says(struct state *s, const char *line, size_t len)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t before = s->out.len, conns = s->kc.nconns;
    char buf[4096];
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    FUZZ_CHECK(fd >= 0);
    memcpy(sa.sun_path, s->kc.path, strlen(s->kc.path) + 1);
    FUZZ_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    for (int i = 0; i < 8 && s->kc.nconns == conns; i++)
        pump(s);
    if (s->kc.nconns == conns) { /* the table is full: refused at accept */
        close(fd);
        return;
    }
    (void)send(fd, line, len < 4000 ? len : 4000, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)send(fd, "\n", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    for (int i = 0; i < 8 && s->kc.nconns > conns; i++)
        pump(s);
    FUZZ_CHECK(s->kc.nconns == conns);
    FUZZ_CHECK(s->out.len == before);
    (void)recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    close(fd);
}

static void step(struct state *s, const char *line, size_t len)
{
    size_t before = s->out.len;
    bool takes = s->worker_fd >= 0 && !s->gone;
    char answer[128];

    switch (len ? line[0] : '\0') {
    case 'J':
        keeper_channel_from_worker(&s->kc, line + 1, len - 1);
        pump(s);
        break;
    case 'W':
        if (s->kc.npending > 0) {
            snprintf(answer, sizeof(answer),
                     "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"outcome\":\"allow\"}}",
                     (long long)s->kc.pending[0].id);
            keeper_channel_from_worker(&s->kc, answer, strlen(answer));
            pump(s);
        }
        break;
    case 'A':
        s->worker_fd = s->worker_fd >= 0 ? -1 : 1;
        break;
    case 'G':
        s->gone = !s->gone;
        break;
    case 'D':
        keeper_channel_detached(&s->kc);
        FUZZ_CHECK(s->kc.npending == 0);
        pump(s);
        break;
    case 'X':
        stranger_says(s, line + 1, len - 1);
        break;
    case 'S':
    default: {
        bool hello = s->kc.nconns > 0 && s->kc.conns[0].hello;

        if (line[0] == 'S')
            sandbox_says(s, line + 1, len - 1);
        else
            sandbox_says(s, line, len);
        if (!hello && !(s->kc.nconns > 0 && s->kc.conns[0].hello))
            FUZZ_CHECK(s->out.len == before);
        break;
    }
    }
    if (!takes)
        FUZZ_CHECK(s->out.len == before);
    check_open(&s->kc);
    check_worker_lines(s);
    check_heard(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    const char *p = (const char *)data, *end = p + size;
    struct state *s = calloc(1, sizeof(*s));
    char err[256];
    int none;

    if (!s)
        return 0;
    if (!scratch[0]) {
        snprintf(scratch, sizeof(scratch), "/tmp/ar-fuzz-kchan.XXXXXX");
        FUZZ_CHECK(mkdtemp(scratch) != NULL);
        atexit(remove_scratch);
    }
    keeper_channel_init(&s->kc);
    s->worker_fd = 1;
    buf_init(&s->out, 64u << 20);
    FUZZ_CHECK(keeper_channel_open(&s->kc, scratch, KEEPER_CHANNEL_HARNESS, true,
                                   &(struct keeper_channel_worker){
                                       .fd = &s->worker_fd, .gone = &s->gone, .out = &s->out},
                                   &none, err, sizeof(err)) == 0);
    FUZZ_CHECK(strlen(s->kc.path) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, s->kc.path, strlen(s->kc.path) + 1);
    s->client = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(connect(s->client, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    pump(s);
    FUZZ_CHECK(s->kc.nconns == 1 && s->kc.conns[0].role == KEEPER_CHANNEL_HARNESS);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);

        step(s, p, len);
        p += len + (nl ? 1 : 0);
    }
    /* the sandbox hangs up: its open requests go with it */
    close(s->client);
    for (int i = 0; i < 8 && s->kc.nconns > 0; i++) {
        struct pollfd q[KEEPER_CHANNEL_POLLFDS];
        size_t n = keeper_channel_pollfds(&s->kc, q, KEEPER_CHANNEL_POLLFDS, true);
        if (poll(q, (nfds_t)n, 50) > 0)
            keeper_channel_handle(&s->kc, q, n);
    }
    FUZZ_CHECK(s->kc.nconns == 0 && s->kc.npending == 0);
    keeper_channel_close(&s->kc);
    buf_release(&s->out);
    free(s);
    return 0;
}
