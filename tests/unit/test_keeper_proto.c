/* keeper_proto: the worker <-> keeper lines and the keeper spec. */
#include <errno.h>
#include <string.h>

#include "proto/keeper_proto.h"
#include "suites.h"

static int decode(const char *line, struct keeper_msg *m)
{
    return keeper_proto_decode(line, strlen(line), m);
}

/* Encode m and decode the line back (without its '\n'). */
static int roundtrip(const struct keeper_msg *m, struct buf *line, struct keeper_msg *back)
{
    int r;

    buf_reset(line);
    r = keeper_proto_encode(m, line);
    if (r < 0)
        return r;
    if (line->len == 0 || line->data[line->len - 1] != '\n')
        return -EPROTO;
    return keeper_proto_decode(line->data, line->len - 1, back);
}

static void test_keeper_proto_control_lines(void)
{
    struct keeper_msg m;

    CU_ASSERT_EQUAL(decode("#park 60000", &m), 0);
    CU_ASSERT_EQUAL(m.kind, KEEPER_MSG_PARK);
    CU_ASSERT_EQUAL(m.ms, 60000);
    CU_ASSERT_EQUAL(decode("#await 1", &m), 0);
    CU_ASSERT_EQUAL(m.kind, KEEPER_MSG_AWAIT);
    CU_ASSERT_EQUAL(m.ms, 1);
    CU_ASSERT_EQUAL(decode("#destroy", &m), 0);
    CU_ASSERT_EQUAL(m.kind, KEEPER_MSG_DESTROY);
    CU_ASSERT_EQUAL(decode("#hello 123 456", &m), 0);
    CU_ASSERT_EQUAL(m.kind, KEEPER_MSG_HELLO);
    CU_ASSERT_EQUAL(m.keeper_pid, 123);
    CU_ASSERT_EQUAL(m.sandbox_pid, 456);
    CU_ASSERT_EQUAL(decode("#busy", &m), 0);
    CU_ASSERT_EQUAL(m.kind, KEEPER_MSG_BUSY);
    CU_ASSERT_EQUAL(decode("#exit 137", &m), 0);
    CU_ASSERT_EQUAL(m.kind, KEEPER_MSG_EXIT);
    CU_ASSERT_EQUAL(m.status, 137);
    CU_ASSERT_EQUAL(decode("ready 7 8", &m), 0);
    CU_ASSERT_EQUAL(m.kind, KEEPER_MSG_READY);
    CU_ASSERT_EQUAL(m.keeper_pid, 7);
    CU_ASSERT_EQUAL(m.sandbox_pid, 8);
    CU_ASSERT_EQUAL(decode("error bwrap: no such file", &m), 0);
    CU_ASSERT_EQUAL(m.kind, KEEPER_MSG_ERROR);
    CU_ASSERT_EQUAL(m.payload_len, strlen("bwrap: no such file"));
    CU_ASSERT_EQUAL(memcmp(m.payload, "bwrap: no such file", m.payload_len), 0);
    CU_ASSERT_EQUAL(decode("#claim {\"envDir\":\"/x\"}", &m), 0);
    CU_ASSERT_EQUAL(m.kind, KEEPER_MSG_CLAIM);
    CU_ASSERT_EQUAL(decode("#fail harness output line over 67108864 bytes", &m), 0);
    CU_ASSERT_EQUAL(m.kind, KEEPER_MSG_FAIL);
    CU_ASSERT_EQUAL(m.payload_len, strlen("harness output line over 67108864 bytes"));
    CU_ASSERT_EQUAL(decode("#fail", &m), -EBADMSG); /* a reason is required */
    CU_ASSERT_STRING_EQUAL(keeper_proto_kind_name(KEEPER_MSG_FAIL), "fail");
}

static void test_keeper_proto_rejects_malformed(void)
{
    static const char *const bad[] = {
        "",
        "#park",
        "#park 0",
        "#park 86400001",
        "#park -1",
        "#park 12x",
        "#park  5",
        "#await",
        "#destroy now",
        "#destroyer",
        "#parking 5",
        "#hello 1",
        "#hello 0 5",
        "#hello 1 2 3",
        "#hello a b",
        "#busy 1",
        "#exit",
        "#exit 1001",
        "#exit 1 2",
        "ready",
        "ready 1",
        "error",
        "error ",
        "#claim",
        "#unknown",
        "hello 1 2",
        "[1,2]",
        "@tool",
        "@tool ",
        "@tool [1]",
        "@other {}",
        "#park 99999999999999999999999",
        "#park 06",
        "#hello 01 2",
        "#exit +1",
        "#exit 00",
    };
    struct keeper_msg m;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int r = decode(bad[i], &m);
        if (r != -EBADMSG)
            fprintf(stderr, "  line \"%s\" -> %d\n", bad[i], r);
        CU_ASSERT_EQUAL(r, -EBADMSG);
    }
    /* an embedded newline is never one line */
    CU_ASSERT_EQUAL(keeper_proto_decode("{\"a\":1}\n{}", 10, &m), -EBADMSG);
    /* nor is a NUL: "#hello 1\0junk 5" must not read as pids 1 and 5 (found by the fuzzer) */
    CU_ASSERT_EQUAL(keeper_proto_decode("#hello 1\0junk 5", 16, &m), -EBADMSG);
    CU_ASSERT_EQUAL(keeper_proto_decode("#park 5\0", 8, &m), -EBADMSG);
    CU_ASSERT_EQUAL(keeper_proto_decode("{\"a\":\"\0\"}", 10, &m), -EBADMSG);
}

static void test_keeper_proto_acp_and_tool_lines(void)
{
    struct keeper_msg m;
    const char *acp = "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\"}";

    CU_ASSERT_EQUAL(decode(acp, &m), 0);
    CU_ASSERT_EQUAL(m.kind, KEEPER_MSG_ACP);
    CU_ASSERT_PTR_EQUAL(m.payload, acp);
    CU_ASSERT_EQUAL(m.payload_len, strlen(acp));
    CU_ASSERT_EQUAL(decode("@tool {\"jsonrpc\":\"2.0\",\"id\":1}", &m), 0);
    CU_ASSERT_EQUAL(m.kind, KEEPER_MSG_TOOL);
    CU_ASSERT_EQUAL(m.payload_len, strlen("{\"jsonrpc\":\"2.0\",\"id\":1}"));
    CU_ASSERT_EQUAL(m.payload[0], '{');
}

static void test_keeper_proto_roundtrip(void)
{
    const struct keeper_msg msgs[] = {
        {.kind = KEEPER_MSG_PARK, .ms = 86400000},
        {.kind = KEEPER_MSG_AWAIT, .ms = 600000},
        {.kind = KEEPER_MSG_DESTROY},
        {.kind = KEEPER_MSG_HELLO, .keeper_pid = 2147483647, .sandbox_pid = 0},
        {.kind = KEEPER_MSG_BUSY},
        {.kind = KEEPER_MSG_EXIT, .status = 0},
        {.kind = KEEPER_MSG_READY, .keeper_pid = 10, .sandbox_pid = 11},
        {.kind = KEEPER_MSG_ERROR, .payload = "cannot listen", .payload_len = 13},
        {.kind = KEEPER_MSG_ACP, .payload = "{\"id\":1}", .payload_len = 8},
        {.kind = KEEPER_MSG_TOOL, .payload = "{\"id\":2}", .payload_len = 8},
        {.kind = KEEPER_MSG_CLAIM, .payload = "{\"idleMs\":5}", .payload_len = 12},
        {.kind = KEEPER_MSG_TURN, .payload = "{\"turnId\":\"t\"}", .payload_len = 14},
        {.kind = KEEPER_MSG_ADOPT, .payload = "turn-1", .payload_len = 6},
        {.kind = KEEPER_MSG_NOTURN},
    };
    struct keeper_msg back;
    struct buf line;

    buf_init(&line, 4096);
    for (size_t i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++) {
        memset(&back, 0xff, sizeof(back));
        CU_ASSERT_EQUAL_FATAL(roundtrip(&msgs[i], &line, &back), 0);
        CU_ASSERT_EQUAL(back.kind, msgs[i].kind);
        CU_ASSERT_EQUAL(back.ms, msgs[i].ms);
        CU_ASSERT_EQUAL(back.keeper_pid, msgs[i].keeper_pid);
        CU_ASSERT_EQUAL(back.sandbox_pid, msgs[i].sandbox_pid);
        CU_ASSERT_EQUAL(back.status, msgs[i].status);
        CU_ASSERT_EQUAL(back.payload_len, msgs[i].payload_len);
        if (msgs[i].payload)
            CU_ASSERT_EQUAL(memcmp(back.payload, msgs[i].payload, back.payload_len), 0);
    }
    CU_ASSERT_STRING_EQUAL(keeper_proto_kind_name(KEEPER_MSG_PARK), "park");
    CU_ASSERT_STRING_EQUAL(keeper_proto_kind_name(KEEPER_MSG_READY), "ready");
    CU_ASSERT_STRING_EQUAL(keeper_proto_kind_name(KEEPER_MSG_TOOL), "tool");
    CU_ASSERT_STRING_EQUAL(keeper_proto_kind_name(KEEPER_MSG_ADOPT), "adopt");
    /* "#turning" is not "#turn", "#noturn x" carries nothing, "#adopt" needs its turn */
    CU_ASSERT_EQUAL(keeper_proto_decode("#turning {}", 11, &back), -EBADMSG);
    CU_ASSERT_EQUAL(keeper_proto_decode("#noturn x", 9, &back), -EBADMSG);
    CU_ASSERT_EQUAL(keeper_proto_decode("#adopt", 6, &back), -EBADMSG);
    buf_release(&line);
}

/* A harness line that is not an ACP object is never relayed as one: it could pose as "#exit". */
static void test_keeper_proto_encode_refuses_what_would_not_decode(void)
{
    const struct keeper_msg bad[] = {
        {.kind = KEEPER_MSG_ACP, .payload = "#exit 0", .payload_len = 7},
        {.kind = KEEPER_MSG_ACP, .payload = "@tool {}", .payload_len = 8},
        {.kind = KEEPER_MSG_ACP, .payload = "{\"a\":1}\n#exit 0", .payload_len = 15},
        {.kind = KEEPER_MSG_ACP, .payload = "", .payload_len = 0},
        {.kind = KEEPER_MSG_TOOL, .payload = "[]", .payload_len = 2},
        {.kind = KEEPER_MSG_ERROR, .payload = "two\nlines", .payload_len = 9},
        {.kind = KEEPER_MSG_PARK, .ms = 0},
        {.kind = KEEPER_MSG_AWAIT, .ms = 86400001},
        {.kind = KEEPER_MSG_EXIT, .status = -1},
        {.kind = KEEPER_MSG_HELLO, .keeper_pid = 0, .sandbox_pid = 1},
        {.kind = KEEPER_MSG_KIND_COUNT},
    };
    struct buf line;

    buf_init(&line, 4096);
    buf_append_str(&line, "kept");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CU_ASSERT_EQUAL(keeper_proto_encode(&bad[i], &line), -EINVAL);
        CU_ASSERT_STRING_EQUAL(buf_str(&line), "kept");
    }
    buf_release(&line);
    /* a full buffer is -E2BIG and leaves it unchanged */
    buf_init(&line, 8);
    {
        struct keeper_msg m = {.kind = KEEPER_MSG_HELLO, .keeper_pid = 12345, .sandbox_pid = 6};
        CU_ASSERT_EQUAL(keeper_proto_encode(&m, &line), -E2BIG);
        CU_ASSERT_EQUAL(line.len, 0);
    }
    buf_release(&line);
}

static void test_keeper_proto_spec_roundtrip(void)
{
    json_object *sb = test_json("{\"workspace\":\"/w\",\"argv\":[\"x\"]}");
    struct keeper_spec in = {.env_dir = "/state/envs/e1",
                             .socket = "/state/envs/e1/keeper.sock",
                             .idle_ms = 60000,
                             .attach_timeout_ms = 2000,
                             .per_turn = true,
                             .provider = "local",
                             .bwrap = "/usr/bin/bwrap",
                             .has_slot = true,
                             .shm = "/agent-runner.t",
                             .slot = 7,
                             .generation = 99,
                             .sandbox = sb};
    struct keeper_spec out;
    struct buf text;
    char err[256];

    buf_init(&text, KEEPER_SPEC_MAX);
    CU_ASSERT_EQUAL_FATAL(keeper_spec_encode(&in, &text), 0);
    CU_ASSERT_EQUAL_FATAL(keeper_spec_decode(text.data, text.len, &out, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(out.env_dir, in.env_dir);
    CU_ASSERT_STRING_EQUAL(out.socket, in.socket);
    CU_ASSERT_EQUAL(out.idle_ms, 60000);
    CU_ASSERT_EQUAL(out.attach_timeout_ms, 2000);
    CU_ASSERT_TRUE(out.per_turn);
    CU_ASSERT_STRING_EQUAL(out.provider, "local");
    CU_ASSERT_STRING_EQUAL(out.bwrap, "/usr/bin/bwrap");
    CU_ASSERT_TRUE(out.has_slot);
    CU_ASSERT_STRING_EQUAL(out.shm, "/agent-runner.t");
    CU_ASSERT_EQUAL(out.slot, 7);
    CU_ASSERT_EQUAL(out.generation, 99);
    CU_ASSERT_TRUE(json_object_equal(out.sandbox, sb));
    CU_ASSERT_FALSE(out.confined);
    keeper_spec_release(&out);
    CU_ASSERT_PTR_NULL(out.root);
    CU_ASSERT_EQUAL_FATAL(keeper_spec_decode(text.data, text.len, &out, err, sizeof(err)), 0);
    CU_ASSERT_FALSE(out.confined);
    CU_ASSERT_PTR_NULL(out.egress);
    keeper_spec_release(&out);
    /* the local sandbox's confinement, egress policy and log labels */
    {
        json_object *eg = test_json("{\"mode\":\"off\",\"endpoints\":[]}");

        in.session_key = "p:s";
        in.harness = "pi";
        in.confined = true;
        in.confine.ids.uid = 2000000007;
        in.confine.ids.gid = 2000000007;
        in.confine.nproc = 1024;
        in.confine.cg.n = 2;
        snprintf(in.confine.cg.h[0].dir, sizeof(in.confine.cg.h[0].dir), "/sys/fs/cgroup/p/x");
        in.confine.cg.h[0].ctrl = 1;
        snprintf(in.confine.cg.h[1].dir, sizeof(in.confine.cg.h[1].dir), "/sys/fs/cgroup/u/x");
        in.confine.cg.h[1].v2 = true;
        in.egress = eg;
        buf_reset(&text);
        CU_ASSERT_EQUAL_FATAL(keeper_spec_encode(&in, &text), 0);
        CU_ASSERT_EQUAL_FATAL(keeper_spec_decode(text.data, text.len, &out, err, sizeof(err)), 0);
        CU_ASSERT_STRING_EQUAL(TEST_STR(out.session_key), "p:s");
        CU_ASSERT_STRING_EQUAL(TEST_STR(out.harness), "pi");
        CU_ASSERT_TRUE(out.confined);
        CU_ASSERT_EQUAL(out.confine.ids.uid, 2000000007);
        CU_ASSERT_EQUAL(out.confine.ids.gid, 2000000007);
        CU_ASSERT_FALSE(out.confine.ids.shared);
        CU_ASSERT_EQUAL(out.confine.nproc, 1024);
        CU_ASSERT_EQUAL(out.confine.cg.n, 2);
        CU_ASSERT_STRING_EQUAL(out.confine.cg.h[1].procs, "/sys/fs/cgroup/u/x/cgroup.procs");
        CU_ASSERT_TRUE(out.confine.cg.h[1].v2);
        CU_ASSERT_EQUAL(out.confine.cg.h[0].ctrl, 1);
        CU_ASSERT_TRUE(json_object_equal(out.egress, eg));
        keeper_spec_release(&out);
        json_object_put(eg);
        in.confined = false;
        in.egress = NULL;
    }
    /* a spare: no slot */
    in.has_slot = false;
    buf_reset(&text);
    CU_ASSERT_EQUAL_FATAL(keeper_spec_encode(&in, &text), 0);
    CU_ASSERT_EQUAL_FATAL(keeper_spec_decode(text.data, text.len, &out, err, sizeof(err)), 0);
    CU_ASSERT_FALSE(out.has_slot);
    keeper_spec_release(&out);
    buf_release(&text);
    json_object_put(sb);
}

static void test_keeper_proto_spec_refusals_name_the_key(void)
{
    static const struct {
        const char *json;
        const char *names;
    } cases[] = {
        {"[]", "not a JSON object"},
        {"{\"socket\":\"/s\",\"idleMs\":1,\"sandbox\":{}}", "envDir"},
        {"{\"envDir\":\"rel\",\"socket\":\"/s\",\"idleMs\":1,\"sandbox\":{}}", "envDir"},
        {"{\"envDir\":\"/e\",\"socket\":\"/s\",\"idleMs\":0,\"sandbox\":{}}", "idleMs"},
        {"{\"envDir\":\"/e\",\"socket\":\"/s\",\"sandbox\":{}}", "idleMs"},
        {"{\"envDir\":\"/e\",\"socket\":\"/s\",\"idleMs\":\"5\",\"sandbox\":{}}", "idleMs"},
        {"{\"envDir\":\"/e\",\"socket\":\"/s\",\"idleMs\":5}", "sandbox"},
        {"{\"envDir\":\"/e\",\"socket\":\"/s\",\"idleMs\":5,\"sandbox\":{},\"perTurn\":1}",
         "perTurn"},
        {"{\"envDir\":\"/e\",\"socket\":\"/s\",\"idleMs\":5,\"sandbox\":{},\"shm\":\"/x\"}",
         "slot"},
        {"{\"envDir\":\"/e\",\"socket\":\"/s\",\"idleMs\":5,\"sandbox\":{},\"shm\":\"/x\","
         "\"slot\":1,\"generation\":-1}",
         "generation"},
        /* a confined sandbox never runs as uid 0 unless it shares the (non-root) runner's */
        {"{\"envDir\":\"/e\",\"socket\":\"/s\",\"idleMs\":5,\"sandbox\":{},"
         "\"confine\":{\"uid\":0,\"gid\":5}}",
         "uid"},
        {"{\"envDir\":\"/e\",\"socket\":\"/s\",\"idleMs\":5,\"sandbox\":{},"
         "\"confine\":{\"uid\":5,\"gid\":5,\"cgroup\":[{\"dir\":\"rel\"}]}}",
         "confine.cgroup[0]"},
        {"{\"envDir\":\"/e\",\"socket\":\"/s\",\"idleMs\":5,\"sandbox\":{},\"egress\":[]}",
         "egress"},
    };
    struct keeper_spec out;
    char err[256];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        err[0] = '\0';
        CU_ASSERT(keeper_spec_decode(cases[i].json, strlen(cases[i].json), &out, err, sizeof(err)) <
                  0);
        if (!strstr(err, cases[i].names))
            fprintf(stderr, "  spec %s -> \"%s\"\n", cases[i].json, err);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, cases[i].names));
    }
}

CU_TestInfo keeper_proto_tests[] = {
    {"test_keeper_proto_control_lines", test_keeper_proto_control_lines},
    {"test_keeper_proto_rejects_malformed", test_keeper_proto_rejects_malformed},
    {"test_keeper_proto_acp_and_tool_lines", test_keeper_proto_acp_and_tool_lines},
    {"test_keeper_proto_roundtrip", test_keeper_proto_roundtrip},
    {"test_keeper_proto_encode_refuses_what_would_not_decode",
     test_keeper_proto_encode_refuses_what_would_not_decode},
    {"test_keeper_proto_spec_roundtrip", test_keeper_proto_spec_roundtrip},
    {"test_keeper_proto_spec_refusals_name_the_key", test_keeper_proto_spec_refusals_name_the_key},
    CU_TEST_INFO_NULL,
};
