/*
 * keeper_channel: the keeper's end of the tool channel, driven through its poll hooks with a
 * fake worker (an fd flag, a "gone" flag and a queue): the harness's connection is the socket
 * pair it makes; a relayed sandbox's connections come through its listening socket in a temp
 * folder (the first is the harness's, the rest strangers).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../keeper/keeper_channel.h"
#include "base/fstree.h"
#include "base/jsonx.h"
#include "base/util.h"
#include "proto/keeper_proto.h"
#include "proto/tool_channel.h"
#include "suites.h"

#define HELLO                                                                                      \
    "{\"jsonrpc\":\"2.0\",\"id\":\"h\",\"method\":\"hello\",\"params\":{\"client\":"               \
    "\"pi-extension\",\"version\":\"1\",\"gating\":true}}"

struct fixture {
    char dir[64];
    struct keeper_channel kc;
    int worker_fd; /* >= 0: a worker is attached */
    bool gone;     /* it said #park / #await */
    struct buf out;
    int harness; /* the sandbox's end of the harness's connection (-1 when relayed) */
};

static void fx_open(struct fixture *f, bool attached, enum keeper_channel_role role, bool relayed)
{
    char err[256];

    memset(f, 0, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/ar-kchan.XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(f->dir));
    f->worker_fd = attached ? 1 : -1;
    buf_init(&f->out, 1 << 20);
    keeper_channel_init(&f->kc);
    CU_ASSERT_EQUAL_FATAL(
        keeper_channel_open(
            &f->kc, f->dir, role, relayed,
            &(struct keeper_channel_worker){.fd = &f->worker_fd, .gone = &f->gone, .out = &f->out},
            &f->harness, err, sizeof(err)),
        0);
}

static void fx_init(struct fixture *f, bool attached)
{
    fx_open(f, attached, KEEPER_CHANNEL_HARNESS, false);
    CU_ASSERT_TRUE_FATAL(f->harness > STDERR_FILENO);
}

static void fx_release(struct fixture *f)
{
    keeper_channel_close(&f->kc);
    if (f->harness >= 0)
        close(f->harness);
    buf_release(&f->out);
    CU_ASSERT_EQUAL(fstree_remove(f->dir), 0);
}

/* One round of the keeper's loop for this module. */
static void pump(struct fixture *f, int ms)
{
    struct pollfd p[KEEPER_CHANNEL_POLLFDS];
    size_t n = keeper_channel_pollfds(&f->kc, p, KEEPER_CHANNEL_POLLFDS, true);

    /* as the keeper's loop: handled after every wake-up, events or not (deadlines) */
    if (poll(p, (nfds_t)n, ms) >= 0)
        keeper_channel_handle(&f->kc, p, n);
}

/* A connection through a relayed channel's socket, accepted. */
static int client(struct fixture *f)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    size_t before = f->kc.nconns;

    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/channel/channel.sock", f->dir);
    CU_ASSERT_EQUAL(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    for (int i = 0; i < 20 && f->kc.nconns == before; i++)
        pump(f, 50);
    return fd;
}

static void say(int fd, const char *line)
{
    CU_ASSERT_EQUAL(util_write_all(fd, line, strlen(line)), 0);
    CU_ASSERT_EQUAL(util_write_all(fd, "\n", 1), 0);
}

/* The next line the client reads (pumping the channel meanwhile), parsed; NULL at timeout. */
static json_object *hear(struct fixture *f, int fd)
{
    static char pending[1 << 16];
    static size_t npending;
    static int last_fd = -1;
    char err[64];

    if (fd != last_fd)
        npending = 0;
    last_fd = fd;
    for (int i = 0; i < 40; i++) {
        char *nl = memchr(pending, '\n', npending);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        json_object *o = NULL;
        ssize_t n;

        if (nl) {
            size_t len = (size_t)(nl - pending);
            if (jsonx_parse(pending, len, 16, &o, err, sizeof(err)) < 0)
                o = NULL;
            memmove(pending, nl + 1, npending - len - 1);
            npending -= len + 1;
            return o;
        }
        pump(f, 20);
        if (poll(&p, 1, 20) <= 0)
            continue;
        n = read(fd, pending + npending, sizeof(pending) - npending);
        if (n <= 0)
            return NULL;
        npending += (size_t)n;
    }
    return NULL;
}

/* The worker's queue as parsed "@tool" payloads, emptied. */
static json_object *worker_lines(struct fixture *f)
{
    json_object *arr = json_object_new_array();
    char *p = f->out.data;
    char err[64];

    while (f->out.len && p < f->out.data + f->out.len) {
        char *nl = memchr(p, '\n', (size_t)(f->out.data + f->out.len - p));
        struct keeper_msg m;
        json_object *o;

        if (!nl)
            break;
        CU_ASSERT_EQUAL(keeper_proto_decode(p, (size_t)(nl - p), &m), 0);
        CU_ASSERT_EQUAL(m.kind, KEEPER_MSG_TOOL);
        if (jsonx_parse(m.payload, m.payload_len, 16, &o, err, sizeof(err)) == 0)
            json_object_array_add(arr, o);
        p = nl + 1;
    }
    buf_reset(&f->out);
    return arr;
}

/*
 * fd says hello and hears the answer: the keeper's own while no worker is attached, else the
 * worker's (relayed as it was sent).
 */
static void say_hello(struct fixture *f, int fd)
{
    json_object *a;

    say(fd, HELLO);
    if (f->worker_fd >= 0 && !f->gone) {
        json_object *w;
        char answer[128];

        for (int i = 0; i < 40 && f->kc.npending == 0; i++)
            pump(f, 20);
        w = worker_lines(f);
        CU_ASSERT_EQUAL_FATAL(json_object_array_length(w), 1);
        CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(json_object_array_get_idx(w, 0), "method")),
                               "hello");
        CU_ASSERT_PTR_NOT_NULL(jsonx_path(json_object_array_get_idx(w, 0), "params.gating"));
        snprintf(
            answer, sizeof(answer),
            "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{"
            "\"protocol\":1}}",
            (long long)json_object_get_int64(jsonx_get(json_object_array_get_idx(w, 0), "id")));
        json_object_put(w);
        keeper_channel_from_worker(&f->kc, answer, strlen(answer));
    }
    a = hear(f, fd);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(a, "id")), "h");
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(a, "result.protocol")), 1);
    json_object_put(a);
}

/* The harness's connection, after its hello. */
static int authed_client(struct fixture *f)
{
    say_hello(f, f->harness);
    return f->harness;
}

/* True when the keeper closed fd (read sees its end), pumping meanwhile. */
static bool closed_by_keeper(struct fixture *f, int fd)
{
    char c[4096];

    for (int i = 0; i < 40; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t n;

        pump(f, 20);
        if (poll(&p, 1, 20) <= 0)
            continue;
        n = read(fd, c, sizeof(c));
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return true;
    }
    return false;
}

/* A local sandbox's channel is a socket pair and nothing else: no folder, no listening socket;
 * the sandbox's end is a close-on-exec socket. A relayed one listens, for the keeper alone. */
static void test_keeper_channel_pair_or_a_private_socket(void)
{
    struct fixture f;
    char path[128];
    struct stat st;

    fx_init(&f, false);
    CU_ASSERT_EQUAL(f.kc.listen_fd, -1);
    CU_ASSERT_EQUAL(f.kc.nconns, 1);
    CU_ASSERT_EQUAL(f.kc.conns[0].role, KEEPER_CHANNEL_HARNESS);
    CU_ASSERT_EQUAL(fstat(f.harness, &st), 0);
    CU_ASSERT_TRUE(S_ISSOCK(st.st_mode));
    CU_ASSERT_TRUE(fcntl(f.harness, F_GETFD) & FD_CLOEXEC);
    snprintf(path, sizeof(path), "%s/channel", f.dir);
    CU_ASSERT_NOT_EQUAL(stat(path, &st), 0);
    fx_release(&f);
    /* no harness side at all: nothing */
    fx_open(&f, false, KEEPER_CHANNEL_NONE, false);
    CU_ASSERT_EQUAL(f.harness, -1);
    CU_ASSERT_EQUAL(f.kc.nconns, 0);
    fx_release(&f);
    /* relayed: 0700 / 0600, removed on close */
    fx_open(&f, false, KEEPER_CHANNEL_HARNESS, true);
    CU_ASSERT_EQUAL(f.harness, -1);
    CU_ASSERT_EQUAL(f.kc.nconns, 0);
    snprintf(path, sizeof(path), "%s/channel", f.dir);
    CU_ASSERT_EQUAL_FATAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 07777, 0700);
    snprintf(path, sizeof(path), "%s/channel/channel.sock", f.dir);
    CU_ASSERT_EQUAL_FATAL(stat(path, &st), 0);
    CU_ASSERT_TRUE(S_ISSOCK(st.st_mode));
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0600);
    fx_release(&f);
    CU_ASSERT_NOT_EQUAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(keeper_channel_role_of("harness"), KEEPER_CHANNEL_HARNESS);
    CU_ASSERT_EQUAL(keeper_channel_role_of("tools"), KEEPER_CHANNEL_TOOLS);
    CU_ASSERT_EQUAL(keeper_channel_role_of("root"), KEEPER_CHANNEL_NONE);
    CU_ASSERT_EQUAL(keeper_channel_role_of(NULL), KEEPER_CHANNEL_NONE);
}

static void test_keeper_channel_answers_alone(void)
{
    struct fixture f;
    json_object *a;
    int fd;

    fx_init(&f, false);
    fd = authed_client(&f);
    say(fd, "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"tool/permission\",\"params\":{"
            "\"toolCallId\":\"call_1\",\"toolName\":\"bash\",\"input\":{\"command\":\"ls\"}}}");
    a = hear(&f, fd);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(a, "id")), "p");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(a, "result"), "outcome")), "cancelled");
    json_object_put(a);
    say(fd, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tool/call\",\"params\":{"
            "\"toolCallId\":\"call_2\",\"toolName\":\"lookup\",\"arguments\":{}}}");
    a = hear(&f, fd);
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_path(a, "result.isError")));
    json_object_put(a);
    /* notifications with nobody attached are dropped; malformed lines get an error */
    say(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"usage\",\"params\":{\"input\":1}}");
    say(fd, "this is not json");
    a = hear(&f, fd);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(a, "error.code")), -32600);
    json_object_put(a);
    say(fd, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tool/steal\",\"params\":{}}");
    a = hear(&f, fd);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(a, "error.code")), -32601);
    json_object_put(a);
    say(fd, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tool/permission\",\"params\":{"
            "\"toolCallId\":\"bad id!\",\"toolName\":\"bash\"}}");
    a = hear(&f, fd);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(a, "error.code")), -32602);
    json_object_put(a);
    CU_ASSERT_EQUAL(f.out.len, 0); /* nothing reached a worker */
    CU_ASSERT_TRUE(f.kc.dropped >= 2);
    fx_release(&f);
}

#define PERMISSION_ID1                                                                             \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tool/permission\",\"params\":{\"toolCallId\":"     \
    "\"call_1\",\"toolName\":\"bash\",\"input\":{\"command\":\"ls\"}}}"

static void test_keeper_channel_relays_with_keeper_ids_and_routes_answers(void)
{
    struct fixture f;
    json_object *w, *a;
    int64_t id1, id2;
    char answer[256];
    int c;

    fx_init(&f, true);
    c = authed_client(&f);
    say(c, PERMISSION_ID1);
    say(c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tool/call\",\"params\":{"
           "\"toolCallId\":\"call_2\",\"toolName\":\"lookup\",\"arguments\":{}}}");
    say(c, "{\"jsonrpc\":\"2.0\",\"method\":\"usage\",\"params\":{\"input\":7}}");
    for (int i = 0; i < 40 && f.kc.npending < 2; i++)
        pump(&f, 20);
    pump(&f, 20);
    w = worker_lines(&f);
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(w), 3);
    id1 = json_object_get_int64(jsonx_get(json_object_array_get_idx(w, 0), "id"));
    id2 = json_object_get_int64(jsonx_get(json_object_array_get_idx(w, 1), "id"));
    CU_ASSERT_NOT_EQUAL(id1, id2);
    CU_ASSERT_NOT_EQUAL(id2, 2); /* the keeper's own ids, whatever the connection chose */
    CU_ASSERT_STRING_EQUAL(
        TEST_STR(jsonx_str(jsonx_get(json_object_array_get_idx(w, 0), "params"), "toolName")),
        "bash");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(json_object_array_get_idx(w, 2), "method")), "usage");
    json_object_put(w);
    /* the answer to the second request comes back under the connection's own id */
    snprintf(answer, sizeof(answer),
             "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"content\":[],\"isError\":false}}",
             (long long)id2);
    keeper_channel_from_worker(&f.kc, answer, strlen(answer));
    a = hear(&f, c);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(a, "id")), 2);
    CU_ASSERT_PTR_NOT_NULL(jsonx_path(a, "result.content"));
    json_object_put(a);
    CU_ASSERT_EQUAL(f.kc.npending, 1);
    /* a second answer to the same id, or to an unknown one, reaches nobody */
    keeper_channel_from_worker(&f.kc, answer, strlen(answer));
    keeper_channel_from_worker(&f.kc, "{\"jsonrpc\":\"2.0\",\"id\":999,\"result\":{}}", 38);
    keeper_channel_from_worker(&f.kc, "garbage", 7);
    CU_ASSERT_EQUAL(f.kc.npending, 1);
    /* the connection goes away: its open request has nobody to answer */
    close(f.harness);
    f.harness = -1;
    for (int i = 0; i < 40 && f.kc.nconns > 0; i++)
        pump(&f, 20);
    CU_ASSERT_EQUAL(f.kc.nconns, 0);
    CU_ASSERT_EQUAL(f.kc.npending, 0);
    fx_release(&f);
}

static void test_keeper_channel_held_across_await_then_answered_alone(void)
{
    struct fixture f;
    json_object *w, *a;
    char answer[256];
    int64_t id;
    int fd;

    fx_init(&f, true);
    fd = authed_client(&f);
    say(fd, PERMISSION_ID1);
    for (int i = 0; i < 40 && f.kc.npending < 1; i++)
        pump(&f, 20);
    w = worker_lines(&f);
    id = json_object_get_int64(jsonx_get(json_object_array_get_idx(w, 0), "id"));
    json_object_put(w);
    /* "#await": the worker let go; the open request stays open, new ones are answered */
    f.gone = true;
    say(fd, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tool/permission\",\"params\":{"
            "\"toolCallId\":\"call_2\",\"toolName\":\"edit\"}}");
    a = hear(&f, fd);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(a, "id")), 2);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(a, "result"), "outcome")), "cancelled");
    json_object_put(a);
    CU_ASSERT_EQUAL(f.out.len, 0);
    CU_ASSERT_EQUAL(f.kc.npending, 1);
    /* a later worker answers the held request under the id it was given */
    f.gone = false;
    snprintf(answer, sizeof(answer),
             "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"outcome\":\"deny\",\"message\":"
             "\"no\"}}",
             (long long)id);
    keeper_channel_from_worker(&f.kc, answer, strlen(answer));
    a = hear(&f, fd);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(a, "id")), 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(a, "result"), "message")), "no");
    json_object_put(a);
    /* "#park" with a request still open: answered as between turns */
    say(fd, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tool/call\",\"params\":{"
            "\"toolCallId\":\"call_3\",\"toolName\":\"x\"}}");
    for (int i = 0; i < 40 && f.kc.npending < 1; i++)
        pump(&f, 20);
    buf_reset(&f.out);
    keeper_channel_detached(&f.kc);
    a = hear(&f, fd);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(a, "id")), 3);
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_path(a, "result.isError")));
    json_object_put(a);
    CU_ASSERT_EQUAL(f.kc.npending, 0);
    fx_release(&f);
}

/* Write len bytes of c (no newline) to fd while pumping, until written or the keeper closed it. */
static void flood(struct fixture *f, int fd, size_t len, size_t conns)
{
    char chunk[65536];
    size_t done = 0;

    memset(chunk, 'x', sizeof(chunk));
    fcntl(fd, F_SETFL, O_NONBLOCK);
    for (int i = 0; i < 4000 && done < len && f->kc.nconns == conns; i++) {
        size_t want = len - done < sizeof(chunk) ? len - done : sizeof(chunk);
        ssize_t n = send(fd, chunk, want, MSG_NOSIGNAL);

        if (n > 0)
            done += (size_t)n;
        else if (n < 0 && errno != EAGAIN)
            break;
        pump(f, 2);
    }
    for (int i = 0; i < 100 && f->kc.nconns == conns; i++)
        pump(f, 10);
}

static void test_keeper_channel_drops_a_connection_over_the_line_limit(void)
{
    struct fixture f;

    fx_init(&f, true);
    flood(&f, f.harness, TOOL_CHANNEL_LINE_MAX + 1024, 1);
    CU_ASSERT_EQUAL(f.kc.nconns, 0);
    CU_ASSERT_EQUAL(f.kc.over, 1);
    CU_ASSERT_EQUAL(f.out.len, 0);
    fx_release(&f);
}

/* What a stranger may send (a relayed sandbox's later connections): whatever it is, it is
 * refused and closed, never relayed; the harness's connection is untouched. */
static void test_keeper_channel_refuses_strangers(void)
{
    static const char *const lines[] = {
        "{\"jsonrpc\":\"2.0\",\"method\":\"usage\",\"params\":{\"input\":1,\"cost\":"
        "99999999.5}}",
        "{\"jsonrpc\":\"2.0\",\"method\":\"error\",\"params\":{\"message\":\"forged\","
        "\"code\":\"model_unavailable\"}}",
        PERMISSION_ID1,
        HELLO,
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{\"client\":"
        "\"pi-extension\",\"token\":\"0123456789abcdef0123456789abcdee\"}}",
        "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tool/call\",\"params\":{"
        "\"toolCallId\":\"c\",\"toolName\":\"lookup\"}}",
        "not json at all",
    };
    struct fixture f;
    json_object *a;
    int good, fd;

    fx_open(&f, true, KEEPER_CHANNEL_HARNESS, true);
    good = client(&f); /* the first one accepted is the harness's */
    CU_ASSERT_EQUAL_FATAL(f.kc.nconns, 1);
    CU_ASSERT_EQUAL(f.kc.conns[0].role, KEEPER_CHANNEL_HARNESS);
    say_hello(&f, good);
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        fd = client(&f);
        CU_ASSERT_EQUAL_FATAL(f.kc.nconns, 2);
        say(fd, lines[i]);
        a = hear(&f, fd);
        CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(a, "error.code")),
                        KEEPER_CHANNEL_UNAUTHORIZED);
        CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(a, "error"), "message")),
                               KEEPER_CHANNEL_STRANGER);
        json_object_put(a);
        CU_ASSERT_TRUE(closed_by_keeper(&f, fd));
        CU_ASSERT_EQUAL(f.kc.nconns, 1);
        close(fd);
        CU_ASSERT_EQUAL(f.kc.refused, i + 1);
    }
    CU_ASSERT_EQUAL(f.out.len, 0); /* nothing reached the worker */
    CU_ASSERT_EQUAL(f.kc.npending, 0);
    /* a stranger that says nothing is closed at its deadline (5 s: moved here, not waited) */
    fd = client(&f);
    {
        int timeout = -1;

        keeper_channel_timeout(&f.kc, util_now_ms(), &timeout);
        CU_ASSERT_TRUE(timeout > 0 && timeout <= KEEPER_CHANNEL_STRANGER_MS);
    }
    for (size_t i = 0; i < f.kc.nconns; i++)
        if (f.kc.conns[i].role == KEEPER_CHANNEL_NONE)
            f.kc.conns[i].deadline = util_now_ms() - 1;
    CU_ASSERT_TRUE(closed_by_keeper(&f, fd));
    close(fd);
    CU_ASSERT_EQUAL(f.kc.nconns, 1);
    CU_ASSERT_EQUAL(f.kc.refused, sizeof(lines) / sizeof(lines[0]) + 1);
    /* a stranger's unfinished line is never buffered: its first bytes end it */
    fd = client(&f);
    flood(&f, fd, 1u << 20, 2);
    CU_ASSERT_EQUAL(f.kc.nconns, 1);
    CU_ASSERT_EQUAL(f.kc.refused, sizeof(lines) / sizeof(lines[0]) + 2);
    CU_ASSERT_EQUAL(f.kc.over, 0);
    close(fd);
    /* the harness's connection still relays */
    say(good, "{\"jsonrpc\":\"2.0\",\"method\":\"usage\",\"params\":{\"input\":7}}");
    for (int i = 0; i < 40 && f.out.len == 0; i++)
        pump(&f, 20);
    a = worker_lines(&f);
    CU_ASSERT_EQUAL(json_object_array_length(a), 1);
    json_object_put(a);
    close(good);
    fx_release(&f);
}

/* Anything but a hello first ends even the harness's own connection: it is misbehaving. */
static void test_keeper_channel_hello_first(void)
{
    struct fixture f;
    json_object *a;

    fx_init(&f, true);
    say(f.harness, PERMISSION_ID1);
    a = hear(&f, f.harness);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(a, "error.code")), KEEPER_CHANNEL_UNAUTHORIZED);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(a, "error"), "message")),
                           KEEPER_CHANNEL_HELLO_FIRST);
    json_object_put(a);
    CU_ASSERT_TRUE(closed_by_keeper(&f, f.harness));
    CU_ASSERT_EQUAL(f.out.len, 0);
    fx_release(&f);
    /* a later hello on a good connection is fine (pi's extension reloads and says it again) */
    fx_init(&f, false);
    say_hello(&f, f.harness);
    say_hello(&f, f.harness);
    CU_ASSERT_EQUAL(f.kc.nconns, 1);
    fx_release(&f);
}

/* agent-runner-mcp's connection calls tools and nothing else: no permission requests, no
 * usage or errors reach the worker from it, and it stays open. */
static void test_keeper_channel_tools_role_calls_tools_only(void)
{
    struct fixture f;
    json_object *a, *w;

    fx_open(&f, true, KEEPER_CHANNEL_TOOLS, false);
    say_hello(&f, f.harness);
    say(f.harness, PERMISSION_ID1);
    a = hear(&f, f.harness);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(a, "id")), 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(a, "error"), "message")),
                           KEEPER_CHANNEL_TOOLS_ONLY);
    json_object_put(a);
    say(f.harness, "{\"jsonrpc\":\"2.0\",\"method\":\"error\",\"params\":{\"message\":"
                   "\"forged\",\"code\":\"model_unavailable\"}}");
    say(f.harness, "{\"jsonrpc\":\"2.0\",\"method\":\"usage\",\"params\":{\"cost\":9}}");
    say(f.harness, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tool/call\",\"params\":{"
                   "\"toolCallId\":\"call_2\",\"toolName\":\"lookup\",\"arguments\":{}}}");
    for (int i = 0; i < 40 && f.kc.npending == 0; i++)
        pump(&f, 20);
    w = worker_lines(&f);
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(w), 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(json_object_array_get_idx(w, 0), "method")),
                           "tool/call");
    json_object_put(w);
    CU_ASSERT_EQUAL(f.kc.nconns, 1);
    CU_ASSERT_EQUAL(f.kc.refused, 3);
    fx_release(&f);
}

/* Answers the harness side does not read are bounded: its connection is dropped, the
 * channel's buffers never pass KEEPER_CHANNEL_BUFFERED_MAX. */
static void test_keeper_channel_drops_a_connection_that_does_not_read(void)
{
    struct fixture f;
    size_t big = TOOL_CHANNEL_LINE_MAX - 4096;
    char *text = malloc(big + 128);
    int n;

    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    fx_init(&f, true);
    say_hello(&f, f.harness);
    for (n = 0; n < 8 && f.kc.nconns == 1; n++) {
        json_object *w;
        int64_t id;
        char call[256];
        int len;

        snprintf(call, sizeof(call),
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tool/call\",\"params\":{"
                 "\"toolCallId\":\"c%d\",\"toolName\":\"lookup\",\"arguments\":{}}}",
                 n + 10, n);
        say(f.harness, call);
        for (int i = 0; i < 40 && f.kc.npending == 0; i++)
            pump(&f, 20);
        w = worker_lines(&f);
        if (json_object_array_length(w) != 1) {
            json_object_put(w);
            break;
        }
        id = json_object_get_int64(jsonx_get(json_object_array_get_idx(w, 0), "id"));
        json_object_put(w);
        len = snprintf(text, 128, "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"t\":\"",
                       (long long)id);
        memset(text + len, 'y', big - (size_t)len - 4);
        memcpy(text + big - 4, "\"}}", 4);
        keeper_channel_from_worker(&f.kc, text, big - 1);
        pump(&f, 5);
        CU_ASSERT_TRUE(f.kc.nconns == 0 || f.kc.conns[0].in.in.cap + f.kc.conns[0].out.cap <=
                                               KEEPER_CHANNEL_BUFFERED_MAX);
    }
    for (int i = 0; i < 40 && f.kc.nconns > 0; i++)
        pump(&f, 10);
    CU_ASSERT_EQUAL(f.kc.nconns, 0);
    CU_ASSERT_EQUAL(f.kc.over, 1);
    free(text);
    fx_release(&f);
}

/* A flood of refused connections logs at most the limiter's allowance: KEEPER_CHANNEL_WARNS_PER_S
 * lines a second and one line a second saying how many were not logged. */
static void test_keeper_channel_refusal_flood_logs_within_the_budget(void)
{
    char path[] = "/tmp/ar-kchan-log.XXXXXX";
    int logfd = mkstemp(path), saved = dup(STDERR_FILENO), good, fd;
    int64_t t0 = util_now_ms(), secs;
    struct fixture f;
    char *text = NULL;
    size_t len = 0, lines = 0;
    const unsigned flood = 300;

    CU_ASSERT_TRUE_FATAL(logfd >= 0 && saved >= 0);
    fx_open(&f, false, KEEPER_CHANNEL_HARNESS, true);
    good = client(&f);
    fflush(stderr);
    dup2(logfd, STDERR_FILENO);
    for (unsigned i = 0; i < flood; i++) {
        fd = client(&f);
        say(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"usage\",\"params\":{\"cost\":1}}");
        for (int j = 0; j < 20 && f.kc.nconns > 1; j++)
            pump(&f, 5);
        close(fd);
    }
    secs = (util_now_ms() - t0) / 1000 + 1;
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    CU_ASSERT_EQUAL(f.kc.refused, flood);
    CU_ASSERT_EQUAL(util_read_file(path, 1 << 20, &text, &len), 0);
    for (const char *p = text; p && (p = strstr(p, "tool channel:")); p++)
        lines++;
    printf("[%zu lines for %u refusals in ~%llds] ", lines, flood, (long long)secs);
    CU_ASSERT_TRUE(lines >= 1);
    CU_ASSERT_TRUE(lines <= (size_t)secs * (KEEPER_CHANNEL_WARNS_PER_S + 1));
    free(text);
    close(logfd);
    unlink(path);
    close(good);
    fx_release(&f);
}

CU_TestInfo keeper_channel_tests[] = {
    {"test_keeper_channel_refusal_flood_logs_within_the_budget",
     test_keeper_channel_refusal_flood_logs_within_the_budget},
    {"test_keeper_channel_pair_or_a_private_socket", test_keeper_channel_pair_or_a_private_socket},
    {"test_keeper_channel_refuses_strangers", test_keeper_channel_refuses_strangers},
    {"test_keeper_channel_hello_first", test_keeper_channel_hello_first},
    {"test_keeper_channel_tools_role_calls_tools_only",
     test_keeper_channel_tools_role_calls_tools_only},
    {"test_keeper_channel_answers_alone", test_keeper_channel_answers_alone},
    {"test_keeper_channel_relays_with_keeper_ids_and_routes_answers",
     test_keeper_channel_relays_with_keeper_ids_and_routes_answers},
    {"test_keeper_channel_held_across_await_then_answered_alone",
     test_keeper_channel_held_across_await_then_answered_alone},
    {"test_keeper_channel_drops_a_connection_over_the_line_limit",
     test_keeper_channel_drops_a_connection_over_the_line_limit},
    {"test_keeper_channel_drops_a_connection_that_does_not_read",
     test_keeper_channel_drops_a_connection_that_does_not_read},
    CU_TEST_INFO_NULL,
};
