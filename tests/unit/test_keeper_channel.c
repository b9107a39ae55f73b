/*
 * keeper_channel: the keeper's end of the tool channel on a real socket in a temp folder,
 * driven through its poll hooks, with a fake worker (an fd flag, a "gone" flag and a queue).
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

#define TOKEN "0123456789abcdef0123456789abcdef"
#define HELLO_TOKEN                                                                                \
    "{\"jsonrpc\":\"2.0\",\"id\":\"h\",\"method\":\"hello\",\"params\":{\"client\":"               \
    "\"pi-extension\",\"version\":\"1\",\"gating\":true,\"token\":\"" TOKEN "\"}}"

struct fixture {
    char dir[64];
    struct keeper_channel kc;
    int worker_fd; /* >= 0: a worker is attached */
    bool gone;     /* it said #park / #await */
    struct buf out;
};

static void fx_init(struct fixture *f, bool attached)
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
            &f->kc, f->dir, TOKEN,
            &(struct keeper_channel_worker){.fd = &f->worker_fd, .gone = &f->gone, .out = &f->out},
            err, sizeof(err)),
        0);
}

static void fx_release(struct fixture *f)
{
    keeper_channel_close(&f->kc);
    buf_release(&f->out);
    CU_ASSERT_EQUAL(fstree_remove(f->dir), 0);
}

/* One round of the keeper's loop for this module. */
static void pump(struct fixture *f, int ms)
{
    struct pollfd p[KEEPER_CHANNEL_POLLFDS];
    size_t n = keeper_channel_pollfds(&f->kc, p, KEEPER_CHANNEL_POLLFDS, true);

    if (poll(p, (nfds_t)n, ms) > 0)
        keeper_channel_handle(&f->kc, p, n);
}

static int client(struct fixture *f)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/channel/channel.sock", f->dir);
    CU_ASSERT_EQUAL(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    for (int i = 0; i < 20 && f->kc.nconns == 0; i++)
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
 * A client that said hello with the token and heard the answer: the keeper's own while no
 * worker is attached, else the worker's (the relayed hello must have lost its token).
 */
static int authed_client(struct fixture *f)
{
    size_t before = f->kc.nconns;
    int fd = client(f);
    json_object *a;

    for (int i = 0; i < 20 && f->kc.nconns == before; i++)
        pump(f, 50);
    say(fd, HELLO_TOKEN);
    if (f->worker_fd >= 0 && !f->gone) {
        json_object *w;
        char answer[128];

        for (int i = 0; i < 40 && f->kc.npending == 0; i++)
            pump(f, 20);
        w = worker_lines(f);
        CU_ASSERT_EQUAL_FATAL(json_object_array_length(w), 1);
        CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(json_object_array_get_idx(w, 0), "method")),
                               "hello");
        CU_ASSERT_PTR_NULL(jsonx_path(json_object_array_get_idx(w, 0), "params.token"));
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
    return fd;
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

static void test_keeper_channel_folder_and_socket_modes(void)
{
    struct fixture f;
    char path[128];
    struct stat st;

    fx_init(&f, false);
    snprintf(path, sizeof(path), "%s/channel", f.dir);
    CU_ASSERT_EQUAL_FATAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 07777, 0711);
    snprintf(path, sizeof(path), "%s/channel/channel.sock", f.dir);
    CU_ASSERT_EQUAL_FATAL(stat(path, &st), 0);
    CU_ASSERT_TRUE(S_ISSOCK(st.st_mode));
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0666);
    fx_release(&f);
    CU_ASSERT_NOT_EQUAL(stat(path, &st), 0);
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
    close(fd);
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
    int c1, c2;

    fx_init(&f, true);
    c1 = authed_client(&f);
    c2 = authed_client(&f);
    say(c1, PERMISSION_ID1);
    say(c2, PERMISSION_ID1); /* the same id on another connection */
    say(c2, "{\"jsonrpc\":\"2.0\",\"method\":\"usage\",\"params\":{\"input\":7}}");
    for (int i = 0; i < 40 && f.kc.npending < 2; i++)
        pump(&f, 20);
    pump(&f, 20);
    w = worker_lines(&f);
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(w), 3);
    id1 = json_object_get_int64(jsonx_get(json_object_array_get_idx(w, 0), "id"));
    id2 = json_object_get_int64(jsonx_get(json_object_array_get_idx(w, 1), "id"));
    CU_ASSERT_NOT_EQUAL(id1, id2);
    CU_ASSERT_STRING_EQUAL(
        TEST_STR(jsonx_str(jsonx_get(json_object_array_get_idx(w, 0), "params"), "toolName")),
        "bash");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(json_object_array_get_idx(w, 2), "method")), "usage");
    json_object_put(w);
    /* the answer to the second request goes to c2, under its own id */
    snprintf(answer, sizeof(answer),
             "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"outcome\":\"allow\"}}",
             (long long)id2);
    keeper_channel_from_worker(&f.kc, answer, strlen(answer));
    a = hear(&f, c2);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(a, "id")), 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(a, "result"), "outcome")), "allow");
    json_object_put(a);
    CU_ASSERT_EQUAL(f.kc.npending, 1);
    /* a second answer to the same id, or to an unknown one, reaches nobody */
    keeper_channel_from_worker(&f.kc, answer, strlen(answer));
    keeper_channel_from_worker(&f.kc, "{\"jsonrpc\":\"2.0\",\"id\":999,\"result\":{}}", 38);
    keeper_channel_from_worker(&f.kc, "garbage", 7);
    CU_ASSERT_EQUAL(f.kc.npending, 1);
    /* c1 goes away: its open request has nobody to answer */
    close(c1);
    for (int i = 0; i < 40 && f.kc.nconns > 1; i++)
        pump(&f, 20);
    CU_ASSERT_EQUAL(f.kc.npending, 0);
    close(c2);
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
    close(fd);
    fx_release(&f);
}

static void test_keeper_channel_drops_a_connection_over_the_line_limit(void)
{
    struct fixture f;
    size_t len = TOOL_CHANNEL_LINE_MAX + 1024, done = 0;
    char *big = malloc(len);
    int fd;

    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    memset(big, 'x', len);
    fx_init(&f, true);
    fd = client(&f);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    for (int i = 0; i < 2000 && done < len && f.kc.nconns == 1; i++) {
        ssize_t n = write(fd, big + done, len - done);
        if (n > 0)
            done += (size_t)n;
        pump(&f, 5);
    }
    for (int i = 0; i < 100 && f.kc.nconns == 1; i++)
        pump(&f, 10);
    CU_ASSERT_EQUAL(f.kc.nconns, 0);
    CU_ASSERT_EQUAL(f.out.len, 0);
    free(big);
    close(fd);
    fx_release(&f);
}

/* What tool code that connects on its own may send first: each is refused and closed. */
static void test_keeper_channel_refuses_connections_without_the_token(void)
{
    static const struct {
        const char *line;
        const char *why;
    } cases[] = {
        {"{\"jsonrpc\":\"2.0\",\"method\":\"usage\",\"params\":{\"input\":1,\"cost\":"
         "99999999.5}}",
         KEEPER_CHANNEL_HELLO_FIRST},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"error\",\"params\":{\"message\":\"forged\","
         "\"code\":\"model_unavailable\"}}",
         KEEPER_CHANNEL_HELLO_FIRST},
        {PERMISSION_ID1, KEEPER_CHANNEL_HELLO_FIRST},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{\"client\":"
         "\"pi-extension\",\"gating\":true}}",
         KEEPER_CHANNEL_HELLO_FIRST},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{\"client\":"
         "\"pi-extension\",\"token\":\"0123456789abcdef0123456789abcdee\"}}",
         "channel: wrong token"},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{\"client\":"
         "\"pi-extension\",\"token\":\"" TOKEN "0\"}}",
         "channel: wrong token"},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{\"client\":"
         "\"pi-extension\",\"token\":\"\"}}",
         "channel: wrong token"},
        {"not json at all", KEEPER_CHANNEL_HELLO_FIRST},
    };
    struct fixture f;
    json_object *a;
    int good, fd;

    fx_init(&f, true);
    good = authed_client(&f);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fd = client(&f);
        for (int j = 0; j < 20 && f.kc.nconns < 2; j++)
            pump(&f, 50);
        say(fd, cases[i].line);
        a = hear(&f, fd);
        CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(a, "error.code")),
                        KEEPER_CHANNEL_UNAUTHORIZED);
        CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(a, "error"), "message")), cases[i].why);
        json_object_put(a);
        CU_ASSERT_TRUE(closed_by_keeper(&f, fd));
        CU_ASSERT_EQUAL(f.kc.nconns, 1);
        close(fd);
        CU_ASSERT_EQUAL(f.kc.refused, i + 1);
    }
    CU_ASSERT_EQUAL(f.out.len, 0); /* nothing reached the worker */
    CU_ASSERT_EQUAL(f.kc.npending, 0);
    /* the authenticated connection is untouched and still relays */
    say(good, "{\"jsonrpc\":\"2.0\",\"method\":\"usage\",\"params\":{\"input\":7}}");
    for (int i = 0; i < 40 && f.out.len == 0; i++)
        pump(&f, 20);
    a = worker_lines(&f);
    CU_ASSERT_EQUAL(json_object_array_length(a), 1);
    json_object_put(a);
    /* a later hello on it with a wrong token ends it too */
    say(good, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"hello\",\"params\":{\"client\":"
              "\"x\",\"token\":\"ffffffffffffffffffffffffffffffff\"}}");
    a = hear(&f, good);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(a, "error"), "message")),
                           "channel: wrong token");
    json_object_put(a);
    CU_ASSERT_TRUE(closed_by_keeper(&f, good));
    close(good);
    fx_release(&f);
}

static void test_keeper_channel_open_refuses_a_bad_token(void)
{
    struct keeper_channel kc;
    bool gone = false;
    int wfd = -1;
    struct buf out;
    char err[256];

    buf_init(&out, 1024);
    keeper_channel_init(&kc);
    CU_ASSERT_EQUAL(
        keeper_channel_open(&kc, "/tmp", NULL,
                            &(struct keeper_channel_worker){.fd = &wfd, .gone = &gone, .out = &out},
                            err, sizeof(err)),
        -EINVAL);
    CU_ASSERT_EQUAL(
        keeper_channel_open(&kc, "/tmp", "short",
                            &(struct keeper_channel_worker){.fd = &wfd, .gone = &gone, .out = &out},
                            err, sizeof(err)),
        -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "token"));
    CU_ASSERT_EQUAL(kc.listen_fd, -1);
    buf_release(&out);
}

CU_TestInfo keeper_channel_tests[] = {
    {"test_keeper_channel_refuses_connections_without_the_token",
     test_keeper_channel_refuses_connections_without_the_token},
    {"test_keeper_channel_open_refuses_a_bad_token", test_keeper_channel_open_refuses_a_bad_token},
    {"test_keeper_channel_folder_and_socket_modes", test_keeper_channel_folder_and_socket_modes},
    {"test_keeper_channel_answers_alone", test_keeper_channel_answers_alone},
    {"test_keeper_channel_relays_with_keeper_ids_and_routes_answers",
     test_keeper_channel_relays_with_keeper_ids_and_routes_answers},
    {"test_keeper_channel_held_across_await_then_answered_alone",
     test_keeper_channel_held_across_await_then_answered_alone},
    {"test_keeper_channel_drops_a_connection_over_the_line_limit",
     test_keeper_channel_drops_a_connection_over_the_line_limit},
    CU_TEST_INFO_NULL,
};
