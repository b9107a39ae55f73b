/*
 * request — AgentRunRequest parsing: the golden fixtures, a table of malformed and hostile
 * requests (each refusal names its field and never echoes a credential), and the small rules
 * (empty body, blank ids, minted turn id, project id precedence, /kill and /cancel bodies).
 */
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "request/request.h"
#include "suites.h"

/* A credential value planted in hostile requests: it must never appear in an error message. */
#define SECRET "sk-CANARY-7f3a9c"

#define CRED_KIND(kind, name)                                                                      \
    "{\"binding\":{\"kind\":\"" kind "\",\"name\":\"" name "\"},\"value\":\"" SECRET               \
    "\",\"usage\":\"opaque_http\"}"
#define CRED(name) CRED_KIND("environment", name)
#define MC(mode, extra)                                                                            \
    "{\"modelConnection\":{\"provider\":\"openai\",\"deployment\":\"direct\","                     \
    "\"credentialMode\":\"" mode "\"" extra "}}"
#define MC_CREDS(creds) MC("env", ",\"credentials\":[" creds "]")
#define MC_URL(url)                                                                                \
    MC("env",                                                                                      \
       ",\"credentials\":[" CRED("OPENAI_API_KEY") "],\"endpoint\":{\"baseUrl\":\"" url "\"}")
#define HF(path) "{\"harnessFiles\":[{\"path\":\"" path "\",\"content\":\"x\"}]}"
#define SKILL(extra)                                                                               \
    "{\"skills\":[{\"name\":\"notes\",\"description\":\"d\",\"body\":\"b\"" extra "}]}"
#define SKILL_NAMED(name)                                                                          \
    "{\"skills\":[{\"name\":\"" name "\",\"description\":\"d\",\"body\":\"b\"}]}"
#define SKILL_FILE(path) SKILL(",\"files\":[{\"path\":\"" path "\",\"content\":\"c\"}]")
#define MCP(name, conn) "{\"mcpServers\":[{\"name\":\"" name "\",\"connection\":" conn "}]}"
#define MCP_HTTP(url) "{\"type\":\"http\",\"url\":\"" url "\"}"
#define NET_ALLOW(entries)                                                                         \
    "{\"sandboxPermission\":{\"network\":{\"mode\":\"allowlist\",\"allowlist\":[" entries "]}}}"
#define LIFE(v) "{\"lifecycle\":{\"idleTimeoutMs\":" v "}}"
#define TRACE(v) "{\"context\":{\"propagation\":{\"traceparent\":\"" v "\"}}}"

#define INVALID AR_E_INVALID_REQUEST
#define BADJSON (-EBADMSG)

struct refusal {
    const char *body;
    int rc;
    const char *field; /* the error message must contain this */
};

static const struct refusal refusals[] = {
    /* wrong types for each top-level field */
    {"{\"harness\":5}", INVALID, "harness: expected a string"},
    {"{\"sandbox\":[]}", INVALID, "sandbox: expected a string"},
    {"{\"sessionId\":{}}", INVALID, "sessionId: expected a string"},
    {"{\"turnId\":1}", INVALID, "turnId: expected a string"},
    {"{\"projectId\":true}", INVALID, "projectId: expected a string"},
    {"{\"agentsMd\":1}", INVALID, "agentsMd: expected a string"},
    {"{\"systemPrompt\":[]}", INVALID, "systemPrompt: expected a string"},
    {"{\"appendSystemPrompt\":{}}", INVALID, "appendSystemPrompt: expected a string"},
    {"{\"model\":7}", INVALID, "model: expected a string"},
    {"{\"harnessMode\":1}", INVALID, "harnessMode: expected a string"},
    {"{\"connection\":\"x\"}", INVALID, "connection: expected an object"},
    {"{\"modelConnection\":\"x\"}", INVALID, "modelConnection: expected an object"},
    {"{\"messages\":{}}", INVALID, "messages: expected an array"},
    {"{\"harnessFiles\":\"x\"}", INVALID, "harnessFiles: expected an array"},
    {"{\"skills\":{}}", INVALID, "skills: expected an array"},
    {"{\"customTools\":{}}", INVALID, "customTools: expected an array"},
    {"{\"mcpServers\":\"x\"}", INVALID, "mcpServers: expected an array"},
    {"{\"toolCallback\":[]}", INVALID, "toolCallback: expected an object"},
    {"{\"permissions\":\"allow\"}", INVALID, "permissions: expected an object"},
    {"{\"sandboxPermission\":1}", INVALID, "sandboxPermission: expected an object"},
    {"{\"lifecycle\":[]}", INVALID, "lifecycle: expected an object"},
    {"{\"telemetry\":\"x\"}", INVALID, "telemetry: expected an object"},
    {"{\"context\":1}", INVALID, "context: expected an object"},
    {"{\"runContext\":[]}", INVALID, "runContext: expected an object"},
    {"{\"runContext\":{\"project\":\"p\"}}", INVALID, "runContext.project"},
    {"{\"messages\":[1]}", INVALID, "messages[0]: expected an object"},
    {"{\"messages\":[{\"content\":\"hi\"}]}", INVALID, "messages[0].role"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":5}]}", INVALID, "messages[0].content"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":{}}]}",
     INVALID, "messages[1].content"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", INVALID,
     "messages[0].content[0].text"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}", INVALID,
     "messages[0].content[0].type"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}", INVALID,
     "messages[0].content[0]"},

    /* values out of their set */
    {"{\"harness\":\"gemini\"}", INVALID, "harness: unsupported"},
    {"{\"harness\":\"scripted\"}", INVALID, "harness: unsupported"}, /* not configured */
    {"{\"sandbox\":\"daytona\"}", INVALID, "sandbox: "},
    {"{\"sandbox\":\"docker\"}", INVALID, "sandbox: unsupported"},
    {"{\"harnessMode\":\"yolo\"}", INVALID, "harnessMode: unsupported"},
    {"{\"model\":\"\"}", INVALID, "model: "},
    {"{\"sessionId\":\"s\\u0001\"}", INVALID, "sessionId: contains control characters"},

    /* retired top-level credential fields */
    {"{\"secrets\":{\"OPENAI_API_KEY\":\"" SECRET "\"}}", INVALID, "secrets"},
    {"{\"provider\":\"openai\"}", INVALID, "provider"},
    {"{\"deployment\":\"direct\"}", INVALID, "deployment"},
    {"{\"credentialMode\":\"env\"}", INVALID, "credentialMode"},
    {"{\"endpoint\":{\"baseUrl\":\"https://api.openai.com\"}}", INVALID, "endpoint"},
    {"{\"endpoint\":null}", INVALID, "endpoint"}, /* present at all is refused */

    /* modelConnection */
    {"{\"modelConnection\":{\"deployment\":\"direct\",\"credentialMode\":\"none\"}}", INVALID,
     "modelConnection.provider"},
    {"{\"modelConnection\":{\"provider\":\"openai\",\"credentialMode\":\"none\"}}", INVALID,
     "modelConnection.deployment"},
    {MC("magic", ""), INVALID, "modelConnection.credentialMode"},
    {MC_CREDS(CRED("OPENAI_API_KEY") "," CRED("OPENAI_API_KEY")), INVALID,
     "modelConnection.credentials[1].binding.name"},
    {MC_CREDS(CRED_KIND("file", "OPENAI_API_KEY")), INVALID,
     "modelConnection.credentials[0].binding.kind"},
    {MC_CREDS(CRED("PATH")), INVALID, "modelConnection.credentials[0].binding.name"},
    {MC_CREDS(CRED("LD_PRELOAD")), INVALID, "modelConnection.credentials[0].binding.name"},
    {MC_CREDS(CRED("AGENT_RUNNER_TOKEN")), INVALID, "modelConnection.credentials[0].binding.name"},
    {MC_CREDS(CRED("openai_key")), INVALID, "modelConnection.credentials[0].binding.name"},
    {MC_CREDS("{\"binding\":{\"kind\":\"environment\",\"name\":\"K\"},\"value\":\"" SECRET
              "\\n\",\"usage\":\"opaque_http\"}"),
     INVALID, "modelConnection.credentials[0].value"},
    {MC_CREDS("{\"binding\":{\"kind\":\"environment\",\"name\":\"K\"},\"value\":\"" SECRET
              "\",\"usage\":\"bearer\"}"),
     INVALID, "modelConnection.credentials[0].usage"},
    {MC_CREDS("\"" SECRET "\""), INVALID, "modelConnection.credentials[0]"},
    {MC("env", ""), INVALID, "modelConnection.credentials"},
    {MC("env", ",\"credentials\":[]"), INVALID, "modelConnection.credentials"},
    {MC("none", ",\"credentials\":[" CRED("OPENAI_API_KEY") "]"), INVALID,
     "modelConnection.credentials"},
    {MC("runtime_provided", ",\"environment\":{\"LD_PRELOAD\":\"/tmp/x.so\"}"), INVALID,
     "modelConnection.environment"},
    {MC("env",
        ",\"environment\":{\"OPENAI_API_KEY\":\"x\"},\"credentials\":[" CRED("OPENAI_API_KEY") "]"),
     INVALID, "modelConnection.credentials[0].binding.name"},
    {MC_URL("http://api.example.com/v1"), INVALID, "modelConnection.endpoint.baseUrl"},
    {MC_URL("http://10.0.0.1:8080"), INVALID, "modelConnection.endpoint.baseUrl"},
    {MC_URL("http://127.0.0.1.evil.example/v1"), INVALID, "modelConnection.endpoint.baseUrl"},
    {MC_URL("https://user:" SECRET "@api.example.com"), INVALID,
     "modelConnection.endpoint.baseUrl"},
    {MC_URL("ftp://api.example.com"), INVALID, "modelConnection.endpoint.baseUrl"},
    {MC_URL("https://"), INVALID, "modelConnection.endpoint.baseUrl"},

    /* harness files: paths stay inside the workspace */
    {HF("../x"), INVALID, "harnessFiles[0].path"},
    {HF("/etc/passwd"), INVALID, "harnessFiles[0].path"},
    {HF("a/../../b"), INVALID, "harnessFiles[0].path"},
    {HF("a//b"), INVALID, "harnessFiles[0].path"},
    {HF("./a"), INVALID, "harnessFiles[0].path"},
    {HF("a/"), INVALID, "harnessFiles[0].path"},
    {HF(""), INVALID, "harnessFiles[0].path"},
    {HF("a\\\\b"), INVALID, "harnessFiles[0].path"},
    {"{\"harnessFiles\":[{\"path\":\"a\",\"content\":\"x\"},{\"path\":\"a\",\"content\":\"y\"}]}",
     INVALID, "harnessFiles[1].path"},
    {"{\"harnessFiles\":[{\"path\":\"a\"}]}", INVALID, "harnessFiles[0].content"},

    /* skills */
    {SKILL_FILE("../evil.sh"), INVALID, "skills[0].files[0].path"},
    {SKILL_FILE("/etc/cron.d/x"), INVALID, "skills[0].files[0].path"},
    {SKILL_FILE("a/../../b"), INVALID, "skills[0].files[0].path"},
    {SKILL_FILE("SKILL.md"), INVALID, "skills[0].files[0].path"},
    {SKILL(",\"files\":[{\"path\":\"run.sh\",\"content\":\"c\",\"executable\":true}]"), INVALID,
     "skills[0].files[0].executable"},
    {SKILL_NAMED("Bad_Name"), INVALID, "skills[0].name"},
    {SKILL_NAMED("-lead"), INVALID, "skills[0].name"},
    {SKILL_NAMED("a--b"), INVALID, "skills[0].name"},
    {SKILL_NAMED("trail-"), INVALID, "skills[0].name"},
    {"{\"skills\":[{\"name\":\"a\",\"description\":\"d\",\"body\":\"b\"},"
     "{\"name\":\"a\",\"description\":\"d\",\"body\":\"b\"}]}",
     INVALID, "skills[1].name"},
    {"{\"skills\":[{\"name\":\"a\",\"body\":\"b\"}]}", INVALID, "skills[0].description"},
    {"{\"skills\":[{\"name\":\"a\",\"description\":\"d\"}]}", INVALID, "skills[0].body"},

    /* custom tools and MCP servers */
    {"{\"customTools\":[{\"name\":\"t\",\"kind\":\"code\"}]}", INVALID, "customTools[0].kind"},
    {"{\"customTools\":[{\"name\":\"t\"},{\"name\":\"u\"},{\"name\":\"t\"}]}", INVALID,
     "customTools[2].name"},
    {"{\"customTools\":[{\"name\":\"a b\"}]}", INVALID, "customTools[0].name"},
    {"{\"customTools\":[{\"name\":\"t\",\"callRef\":\"r\",\"call\":{\"method\":\"GET\","
     "\"path\":\"/\"}}]}",
     INVALID, "customTools[0]"},
    {MCP("agenta-tools", MCP_HTTP("https://mcp.example/mcp")), INVALID, "mcpServers[0].name"},
    {MCP("files", "{\"type\":\"stdio\",\"command\":\"sh\"}"), INVALID,
     "mcpServers[0].connection.type"},
    {MCP("files", "{\"type\":\"sse\",\"url\":\"https://mcp.example/sse\"}"), INVALID,
     "mcpServers[0].connection.type"},
    {MCP("files", MCP_HTTP("ftp://mcp.example/mcp")), INVALID, "mcpServers[0].connection.url"},
    {"{\"toolCallback\":{\"endpoint\":\"http://tools.example/call\"}}", INVALID,
     "toolCallback.endpoint"},
    {"{\"toolCallback\":{}}", INVALID, "toolCallback.endpoint"},

    /* permissions, sandbox, lifecycle, telemetry, trace context */
    {"{\"permissions\":{\"default\":\"sometimes\"}}", INVALID, "permissions.default"},
    {"{\"permissions\":{\"rules\":[{\"permission\":\"allow\"}]}}", INVALID,
     "permissions.rules[0].pattern"},
    {"{\"sandboxPermission\":{\"filesystem\":{\"mode\":\"ro\"}}}", INVALID,
     "sandboxPermission.filesystem"},
    {"{\"sandboxPermission\":{\"network\":{\"mode\":\"maybe\"}}}", INVALID,
     "sandboxPermission.network.mode"},
    /* allowlist entries: a CIDR range or one address, each malformed one named */
    {NET_ALLOW("\"10.0.0.1/8\""), INVALID,
     "sandboxPermission.network.allowlist[0]: "
     "\"10.0.0.1/8\": host bits set"},
    /* a host name parses (the provider decides whether it can enforce names); junk does not */
    {NET_ALLOW("\"10.0.0.0/8\",\"exa mple.com\""), INVALID,
     "sandboxPermission.network.allowlist[1]"},
    {NET_ALLOW("\"-bad.example.com\""), INVALID, "sandboxPermission.network.allowlist[0]"},
    {NET_ALLOW("\"1.2.3.999\""), INVALID, "sandboxPermission.network.allowlist[0]"},
    {NET_ALLOW("\"10.0.0.0/33\""), INVALID, "sandboxPermission.network.allowlist[0]"},
    {NET_ALLOW("\"fe80::1%eth0\""), INVALID, "sandboxPermission.network.allowlist[0]"},
    {NET_ALLOW("\" 10.0.0.0/8\""), INVALID, "sandboxPermission.network.allowlist[0]"},
    {NET_ALLOW("8"), INVALID, "sandboxPermission.network.allowlist[0]: expected a string"},
    {"{\"sandboxPermission\":{\"network\":{\"mode\":\"allowlist\",\"allowlist\":\"10/8\"}}}",
     INVALID, "sandboxPermission.network.allowlist: expected an array"},
    {LIFE("0"), INVALID, "lifecycle.idleTimeoutMs"},
    {LIFE("86400001"), INVALID, "lifecycle.idleTimeoutMs"},
    {LIFE("-5"), INVALID, "lifecycle.idleTimeoutMs"},
    {LIFE("\"100\""), INVALID, "lifecycle.idleTimeoutMs"},
    {LIFE("1.5"), INVALID, "lifecycle.idleTimeoutMs"},
    {"{\"lifecycle\":{\"mode\":\"forever\"}}", INVALID, "lifecycle.mode"},
    {"{\"telemetry\":{\"exporters\":{\"otlp\":{\"endpoint\":\"not a url\"}}}}", INVALID,
     "telemetry.exporters.otlp.endpoint"},
    {TRACE("00-xyz"), INVALID, "context.propagation.traceparent"},
    {TRACE("00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01"), INVALID,
     "context.propagation.traceparent"},
    {TRACE("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x"), INVALID,
     "context.propagation.traceparent"},
    {TRACE("00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01"), INVALID,
     "context.propagation.traceparent"},

    /* project ids are part of pool keys: ':' is the separator */
    {"{\"projectId\":\"a:b\"}", INVALID, "projectId"},
    {"{\"projectId\":\"ok\",\"runContext\":{\"project\":{\"id\":\"p:1\"}}}", INVALID, "projectId"},

    /* not a JSON object at all */
    {"[]", INVALID, "request: expected a JSON object"},
    {"[{\"harness\":\"pi_core\"}]", INVALID, "request: expected a JSON object"},
    {"\"pi_core\"", INVALID, "request: expected a JSON object"},
    {"null", INVALID, "request: expected a JSON object"}, /* a complete document */
    {"42", INVALID, "request: expected a JSON object"},
    {"true", INVALID, "request: expected a JSON object"},
    {"nul", BADJSON, "Invalid JSON"},
    {"{} x", BADJSON, "Invalid JSON"},
    {"{\"harness\":\"pi_core\"}{}", BADJSON, "Invalid JSON"},
    {"{\"harness\":", BADJSON, "Invalid JSON"},
    {"{'harness':'pi_core'}", BADJSON, "Invalid JSON"},
    {"{\"harness\":\"pi\xff\"}", BADJSON, "Invalid JSON"},
};

/* Parse body and check the refusal: return code, the field in the message, no secret. */
static void expect_refused(const char *body, size_t len, const struct request_limits *lim, int rc,
                           const char *field)
{
    struct run_request req;
    char err[512] = "";
    int r = request_parse(body, len, lim, &req, err, sizeof(err));

    CU_ASSERT_EQUAL(r, rc);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, field));
    CU_ASSERT_PTR_NULL(strstr(err, SECRET));
    CU_ASSERT_PTR_NULL(strstr(err, "CANARY"));
    if (r != rc || !strstr(err, field))
        fprintf(stderr, "\n  request %.120s\n  -> %d \"%s\" (want %d naming \"%s\")\n", body, r,
                err, rc, field);
    if (r == 0)
        run_request_release(&req);
}

static void test_request_refusals_name_the_field(void)
{
    struct request_limits lim;

    request_limits_default(&lim);
    CU_ASSERT(ARRAY_SIZE(refusals) >= 40);
    for (size_t i = 0; i < ARRAY_SIZE(refusals); i++)
        expect_refused(refusals[i].body, strlen(refusals[i].body), &lim, refusals[i].rc,
                       refusals[i].field);
}

static void test_request_deep_nesting_is_bad_json(void)
{
    struct request_limits lim;
    struct buf b;

    request_limits_default(&lim);
    buf_init(&b, 4096);
    buf_append_str(&b, "{\"x\":");
    for (int i = 0; i < 200; i++)
        buf_append_char(&b, '[');
    for (int i = 0; i < 200; i++)
        buf_append_char(&b, ']');
    CU_ASSERT_EQUAL_FATAL(buf_append_char(&b, '}'), 0);
    expect_refused(b.data, b.len, &lim, -EBADMSG, "Invalid JSON");
    buf_release(&b);
}

/* {"skills":[{"name":"notes","description":<desc>,"body":<body>}]} with generated strings. */
static void skill_request(struct buf *b, const char *desc_unit, size_t ndesc, size_t nbody)
{
    buf_reset(b);
    buf_append_str(b, "{\"skills\":[{\"name\":\"notes\",\"description\":\"");
    for (size_t i = 0; i < ndesc; i++)
        buf_append_str(b, desc_unit);
    buf_append_str(b, "\",\"body\":\"");
    for (size_t i = 0; i < nbody; i++)
        buf_append_char(b, 'b');
    buf_append_str(b, "\"}]}");
}

static void test_request_skill_size_limits(void)
{
    struct request_limits lim;
    struct run_request req;
    char err[512];
    struct buf b;

    request_limits_default(&lim);
    buf_init(&b, 1u << 20);

    skill_request(&b, "d", 1, 50001);
    expect_refused(b.data, b.len, &lim, INVALID, "skills[0].body");
    skill_request(&b, "d", 1, 50000);
    CU_ASSERT_EQUAL(request_parse(b.data, b.len, &lim, &req, err, sizeof(err)), 0);
    run_request_release(&req);

    /* code points, not bytes: 1025 two-byte characters are too many, 1024 are fine */
    skill_request(&b, "\xc3\xa9", 1025, 1);
    expect_refused(b.data, b.len, &lim, INVALID, "skills[0].description");
    skill_request(&b, "\xc3\xa9", 1024, 1);
    CU_ASSERT_EQUAL(request_parse(b.data, b.len, &lim, &req, err, sizeof(err)), 0);
    if (req.nskills == 1)
        CU_ASSERT_EQUAL(strlen(req.skills[0].description), 2048);
    run_request_release(&req);
    skill_request(&b, "x", 1025, 1);
    expect_refused(b.data, b.len, &lim, INVALID, "skills[0].description");
    buf_release(&b);
}

static void test_request_strings_over_max_string(void)
{
    struct request_limits lim;
    struct run_request req;
    char err[512], *big;
    struct buf b;

    request_limits_default(&lim);
    lim.max_string = 1024;
    big = malloc(1026);
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    memset(big, 'z', 1025);
    big[1025] = '\0';
    buf_init(&b, 1u << 20);

    buf_printf(&b, "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", big);
    expect_refused(b.data, b.len, &lim, INVALID, "messages[0].content");
    buf_reset(&b);
    buf_printf(&b,
               "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"%s\"}"
               "]}]}",
               big);
    expect_refused(b.data, b.len, &lim, INVALID, "messages[0].content[0].text");

    /* exactly max_string is fine */
    big[1024] = '\0';
    buf_reset(&b);
    buf_printf(&b, "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", big);
    CU_ASSERT_EQUAL(request_parse(b.data, b.len, &lim, &req, err, sizeof(err)), 0);
    run_request_release(&req);

    /* more messages than max_messages */
    lim.max_messages = 2;
    buf_reset(&b);
    buf_append_str(&b, "{\"messages\":[{\"role\":\"user\"},{\"role\":\"user\"},"
                       "{\"role\":\"user\"}]}");
    expect_refused(b.data, b.len, &lim, INVALID, "messages: more than 2");
    buf_release(&b);
    free(big);
}

/* Parse a request that must be accepted. */
static int parse_ok(const char *body, const struct request_limits *lim, struct run_request *req)
{
    char err[512] = "";
    int r = request_parse(body, strlen(body), lim, req, err, sizeof(err));

    if (r != 0)
        fprintf(stderr, "\n  request %.120s\n  -> %d \"%s\" (want 0)\n", body, r, err);
    return r;
}

static void test_request_http_base_url_only_to_loopback(void)
{
    static const char *const ok[] = {
        MC_URL("http://127.0.0.1:8080/v1"),
        MC_URL("http://localhost:11434"),
        MC_URL("http://[::1]:8000/v1"),
        MC_URL("https://api.example.com/v1"),
        MCP("files", MCP_HTTP("http://127.0.0.1:9000/mcp")),
        "{\"toolCallback\":{\"endpoint\":\"http://localhost:7000/call\"}}",
    };
    struct request_limits lim;
    struct run_request req;

    request_limits_default(&lim);
    for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
        CU_ASSERT_EQUAL(parse_ok(ok[i], &lim, &req), 0);
        run_request_release(&req);
    }
    CU_ASSERT_EQUAL_FATAL(parse_ok(MC_URL("http://127.0.0.1:8080/v1"), &lim, &req), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.mc.base_url), "http://127.0.0.1:8080/v1");
    run_request_release(&req);
}

static void test_request_scripted_needs_allow_scripted(void)
{
    static const char scripted[] = "{\"harness\":\"scripted\"}";
    struct request_limits lim;
    struct run_request req;

    request_limits_default(&lim);
    CU_ASSERT_FALSE(lim.allow_scripted);
    expect_refused(scripted, strlen(scripted), &lim, INVALID, "harness");
    lim.allow_scripted = true;
    CU_ASSERT_EQUAL_FATAL(parse_ok("{\"harness\":\"scripted\"}", &lim, &req), 0);
    CU_ASSERT_EQUAL(req.harness, HARNESS_SCRIPTED);
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.harness_name), "scripted");
    run_request_release(&req);
}

static bool is_uuid(const char *s)
{
    if (!s || strlen(s) != 36)
        return false;
    for (size_t i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !strchr("0123456789abcdef", s[i]))
            return false;
    }
    return s[14] == '4';
}

static void test_request_empty_body_is_empty_object(void)
{
    static const char *const bodies[] = {"", "  \n\t\r\n", "{}"};
    struct request_limits lim;

    request_limits_default(&lim);
    for (size_t i = 0; i < ARRAY_SIZE(bodies); i++) {
        struct run_request req;
        char err[256] = "";

        CU_ASSERT_EQUAL_FATAL(
            request_parse(bodies[i], strlen(bodies[i]), &lim, &req, err, sizeof(err)), 0);
        CU_ASSERT_PTR_NOT_NULL(req.root);
        CU_ASSERT_EQUAL(req.harness, HARNESS_PI);
        CU_ASSERT_STRING_EQUAL(TEST_STR(req.harness_name), "pi_core");
        CU_ASSERT_STRING_EQUAL(TEST_STR(req.sandbox), "local");
        CU_ASSERT_PTR_NULL(req.session_id);
        CU_ASSERT_PTR_NULL(req.project_id);
        CU_ASSERT_PTR_NULL(req.model);
        CU_ASSERT_FALSE(req.mc.present);
        CU_ASSERT_EQUAL(req.nmessages, 0);
        CU_ASSERT_EQUAL(req.network, NETWORK_ON);
        CU_ASSERT_TRUE(req.network_strict);
        CU_ASSERT_TRUE(is_uuid(req.turn_id));
        run_request_release(&req);
    }
}

static void test_request_blank_session_id_is_absent(void)
{
    static const char *const bodies[] = {
        "{\"sessionId\":\"\"}",    "{\"sessionId\":\"   \"}", "{\"sessionId\":\" \\t \"}",
        "{\"sessionId\":\"\\n\"}", "{\"sessionId\":null}",
    };
    struct request_limits lim;
    struct run_request req;

    request_limits_default(&lim);
    for (size_t i = 0; i < ARRAY_SIZE(bodies); i++) {
        CU_ASSERT_EQUAL_FATAL(parse_ok(bodies[i], &lim, &req), 0);
        CU_ASSERT_PTR_NULL(req.session_id);
        run_request_release(&req);
    }
    CU_ASSERT_EQUAL_FATAL(parse_ok("{\"sessionId\":\" s-1\"}", &lim, &req), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.session_id), " s-1");
    run_request_release(&req);
}

static void test_request_turn_id_minted_when_absent(void)
{
    struct request_limits lim;
    struct run_request a, b;

    request_limits_default(&lim);
    CU_ASSERT_EQUAL_FATAL(parse_ok("{}", &lim, &a), 0);
    CU_ASSERT_EQUAL_FATAL(parse_ok("{\"turnId\":\"  \"}", &lim, &b), 0);
    CU_ASSERT_TRUE(is_uuid(a.turn_id));
    CU_ASSERT_TRUE(is_uuid(b.turn_id));
    CU_ASSERT_STRING_NOT_EQUAL(TEST_STR(a.turn_id), TEST_STR(b.turn_id));
    /* the minted id lives in the caller's struct, not in the parser's stack frame */
    CU_ASSERT_PTR_EQUAL(a.turn_id, a.turn_id_buf);
    CU_ASSERT_PTR_EQUAL(b.turn_id, b.turn_id_buf);
    run_request_release(&a);
    run_request_release(&b);

    CU_ASSERT_EQUAL_FATAL(parse_ok("{\"turnId\":\"turn-7\"}", &lim, &a), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(a.turn_id), "turn-7");
    run_request_release(&a);
}

static void test_request_run_context_project_overrides_project_id(void)
{
    struct request_limits lim;
    struct run_request req;

    request_limits_default(&lim);
    CU_ASSERT_EQUAL_FATAL(
        parse_ok("{\"projectId\":\"p-top\",\"runContext\":{\"project\":{\"id\":\"p-ctx\"}}}", &lim,
                 &req),
        0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.project_id), "p-ctx");
    run_request_release(&req);

    CU_ASSERT_EQUAL_FATAL(parse_ok("{\"projectId\":\"p-top\"}", &lim, &req), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.project_id), "p-top");
    run_request_release(&req);

    /* an empty runContext.project.id does not erase projectId */
    CU_ASSERT_EQUAL_FATAL(
        parse_ok("{\"projectId\":\"p-top\",\"runContext\":{\"project\":{\"id\":\"\"}}}", &lim,
                 &req),
        0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.project_id), "p-top");
    run_request_release(&req);

    CU_ASSERT_EQUAL_FATAL(
        parse_ok("{\"runContext\":{\"project\":{\"id\":\"only-ctx\"}}}", &lim, &req), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.project_id), "only-ctx");
    run_request_release(&req);
}

static void test_request_session_ref(void)
{
    static const struct refusal bad[] = {
        {"{\"projectId\":\"p\"}", INVALID, "sessionId"},
        {"{\"sessionId\":\"  \",\"projectId\":\"p\"}", INVALID, "sessionId"},
        {"{\"sessionId\":\"s\"}", INVALID, "projectId"},
        {"{\"sessionId\":\"s\",\"projectId\":\"\"}", INVALID, "projectId"},
        {"{\"sessionId\":\"s\",\"projectId\":\"a:b\"}", INVALID, "projectId"},
        {"{\"sessionId\":5,\"projectId\":\"p\"}", INVALID, "sessionId"},
        {"{\"sessionId\":\"s\",\"projectId\":\"p\",\"targetTurnId\":[]}", INVALID, "targetTurnId"},
        {"[]", INVALID, "request"},
        {"", BADJSON, "Invalid JSON"},
        {"{\"sessionId\":", BADJSON, "Invalid JSON"},
    };
    struct session_ref ref;
    char err[256];
    const char *body = "{\"sessionId\":\"s-1\",\"projectId\":\"p-1\",\"targetTurnId\":\"t-1\"}";

    CU_ASSERT_EQUAL_FATAL(request_parse_session_ref(body, strlen(body), &ref, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(ref.session_id, "s-1");
    CU_ASSERT_STRING_EQUAL(ref.project_id, "p-1");
    CU_ASSERT_STRING_EQUAL(ref.target_turn_id, "t-1");

    body = "{\"sessionId\":\"s-2\",\"projectId\":\"p-2\"}";
    CU_ASSERT_EQUAL_FATAL(request_parse_session_ref(body, strlen(body), &ref, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(ref.session_id, "s-2");
    CU_ASSERT_STRING_EQUAL(ref.target_turn_id, "");

    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        err[0] = '\0';
        memset(&ref, 'q', sizeof(ref));
        CU_ASSERT_EQUAL(
            request_parse_session_ref(bad[i].body, strlen(bad[i].body), &ref, err, sizeof(err)),
            bad[i].rc);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, bad[i].field));
        CU_ASSERT_EQUAL(ref.session_id[0], 'q'); /* untouched on failure */
    }
}

static void test_request_host_is_loopback(void)
{
    char scheme[8], host[64];
    unsigned port = 0;

    CU_ASSERT_TRUE(request_host_is_loopback("127.0.0.1"));
    CU_ASSERT_TRUE(request_host_is_loopback("127.1.2.3"));
    CU_ASSERT_TRUE(request_host_is_loopback("localhost"));
    CU_ASSERT_TRUE(request_host_is_loopback("[::1]"));
    CU_ASSERT_FALSE(request_host_is_loopback("127.0.0.1.nip.io"));
    CU_ASSERT_FALSE(request_host_is_loopback("localhost.example"));
    CU_ASSERT_FALSE(request_host_is_loopback("10.0.0.1"));
    CU_ASSERT_FALSE(request_host_is_loopback("128.0.0.1"));

    CU_ASSERT_EQUAL(request_parse_url("http://127.0.0.1:8080/v1", scheme, sizeof(scheme), host,
                                      sizeof(host), &port),
                    0);
    CU_ASSERT_STRING_EQUAL(scheme, "http");
    CU_ASSERT_STRING_EQUAL(host, "127.0.0.1");
    CU_ASSERT_EQUAL(port, 8080);
    CU_ASSERT_EQUAL(
        request_parse_url("https://[::1]/x", scheme, sizeof(scheme), host, sizeof(host), &port), 0);
    CU_ASSERT_STRING_EQUAL(host, "[::1]");
    CU_ASSERT_EQUAL(port, 443);
    CU_ASSERT_EQUAL(
        request_parse_url("https://u:p@h/", scheme, sizeof(scheme), host, sizeof(host), &port),
        -EINVAL);
    CU_ASSERT_EQUAL(
        request_parse_url("https://h:99999/", scheme, sizeof(scheme), host, sizeof(host), &port),
        -EINVAL);
    CU_ASSERT_EQUAL(
        request_parse_url("https://h:/", scheme, sizeof(scheme), host, sizeof(host), &port),
        -EINVAL);
}

/* ---- golden fixtures ---- */

/* Length of a JSON array, 0 for anything else (json-c asserts on a non-array). */
static size_t arr_len(json_object *a)
{
    return a && json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;
}

static void check_pi_core(const struct run_request *r)
{
    CU_ASSERT_EQUAL(r->harness, HARNESS_PI);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->harness_name), "pi_core");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->model), "openai-codex/gpt-5.5");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->session_id), "sess-1");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->agents_md), "You are a helpful assistant.");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->system_prompt), "You are Pi.");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->append_system_prompt), "Be terse.");
    CU_ASSERT_TRUE(r->mc.present);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->mc.provider), "openai-codex");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->mc.deployment), "direct");
    CU_ASSERT_EQUAL(r->mc.credential_mode, CREDENTIAL_MODE_ENV);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->mc.base_url), "https://api.openai.com/v1");
    CU_ASSERT_EQUAL_FATAL(r->mc.ncredentials, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->mc.credentials[0].name), "OPENAI_API_KEY");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->mc.credentials[0].value), "sk-test");
    CU_ASSERT_EQUAL(r->mc.credentials[0].usage, CREDENTIAL_USAGE_OPAQUE_HTTP);
    CU_ASSERT_EQUAL_FATAL(r->nmessages, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->messages[0].role), "user");
    CU_ASSERT_EQUAL_FATAL(r->messages[0].nblocks, 1);
    CU_ASSERT_EQUAL(r->messages[0].blocks[0].type, BLOCK_TEXT);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->messages[0].blocks[0].text), "hi");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->traceparent),
                           "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    CU_ASSERT_EQUAL(r->network, NETWORK_OFF);
    CU_ASSERT_TRUE(r->network_strict);
    CU_ASSERT_EQUAL(arr_len(r->custom_tools), 2);
    CU_ASSERT_PTR_NOT_NULL(r->tools.callback_endpoint);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(r->permissions, "default")), "allow_reads");
    CU_ASSERT_EQUAL_FATAL(r->nskills, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->skills[0].name), "release-notes");
    CU_ASSERT_TRUE(r->skills[0].disable_model_invocation);
    CU_ASSERT_TRUE(r->skills[0].allow_executable_files);
    CU_ASSERT_EQUAL_FATAL(r->skills[0].nfiles, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->skills[0].files[0].path), "scripts/draft.py");
    CU_ASSERT_TRUE(r->skills[0].files[0].executable);
}

static void check_claude(const struct run_request *r)
{
    CU_ASSERT_EQUAL(r->harness, HARNESS_CLAUDE);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->harness_name), "claude");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->model), "claude-sonnet-4-6");
    CU_ASSERT_PTR_NULL(r->session_id); /* "sessionId": null */
    CU_ASSERT_TRUE(r->mc.present);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->mc.provider), "anthropic");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->mc.deployment), "direct");
    CU_ASSERT_EQUAL(r->mc.credential_mode, CREDENTIAL_MODE_ENV);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->mc.base_url), "https://api.anthropic.com");
    CU_ASSERT_EQUAL_FATAL(r->mc.ncredentials, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->mc.credentials[0].name), "ANTHROPIC_API_KEY");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->mc.credentials[0].value), "sk-ant");
    CU_ASSERT_EQUAL_FATAL(r->nmessages, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->messages[0].role), "user");
    CU_ASSERT_EQUAL_FATAL(r->messages[0].nblocks, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->messages[0].blocks[0].text), "hi");
    CU_ASSERT_EQUAL_FATAL(r->nharness_files, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->harness_files[0].path), ".claude/settings.json");
    CU_ASSERT_PTR_NOT_NULL(strstr(TEST_STR(r->harness_files[0].content), "acceptEdits"));
    CU_ASSERT_EQUAL(arr_len(jsonx_get(r->permissions, "rules")), 3);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_path(r->run_context, "run"), "kind")), "test");
}

static void check_codex(const struct run_request *r)
{
    CU_ASSERT_EQUAL(r->harness, HARNESS_CODEX);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->harness_name), "codex");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->model), "gpt-5.6-luna");
    CU_ASSERT_TRUE(r->mc.present);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->mc.provider), "openai");
    CU_ASSERT_EQUAL(r->mc.credential_mode, CREDENTIAL_MODE_ENV);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->mc.base_url), "https://api.openai.com/v1");
    CU_ASSERT_EQUAL_FATAL(r->mc.ncredentials, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->mc.credentials[0].name), "OPENAI_API_KEY");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->mc.credentials[0].value), "sk-openai");
    CU_ASSERT_EQUAL_FATAL(r->nmessages, 1);
    CU_ASSERT_EQUAL_FATAL(r->messages[0].nblocks, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->messages[0].blocks[0].text), "hi");
    CU_ASSERT_EQUAL_FATAL(r->nharness_files, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->harness_files[0].path), ".codex/config.toml");
    CU_ASSERT_PTR_NOT_NULL(strstr(TEST_STR(r->harness_files[0].content), "OPENAI_API_KEY"));
}

static void check_attachment(const struct run_request *r)
{
    CU_ASSERT_EQUAL(r->harness, HARNESS_PI);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->session_id), "sess-attachment");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->model), "anthropic/claude-sonnet-4-6");
    CU_ASSERT_TRUE(r->mc.present);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->mc.provider), "anthropic");
    CU_ASSERT_EQUAL(r->mc.credential_mode, CREDENTIAL_MODE_RUNTIME);
    CU_ASSERT_EQUAL(r->mc.ncredentials, 0);
    CU_ASSERT_PTR_NULL(r->mc.base_url);
    CU_ASSERT_EQUAL_FATAL(r->nmessages, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->messages[0].role), "user");
    CU_ASSERT_EQUAL_FATAL(r->messages[0].nblocks, 2);
    CU_ASSERT_EQUAL(r->messages[0].blocks[0].type, BLOCK_ATTACHMENT);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->messages[0].blocks[0].mime_type), "image/png");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->messages[0].blocks[0].attachment_id),
                           "019c471b-5b91-71d2-9d4b-5486013e6e9b");
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->messages[0].blocks[0].filename), "photo.png");
    CU_ASSERT_EQUAL(r->messages[0].blocks[1].type, BLOCK_TEXT);
    CU_ASSERT_STRING_EQUAL(TEST_STR(r->messages[0].blocks[1].text), "Describe this image.");
    CU_ASSERT_EQUAL(arr_len(r->custom_tools), 0);
    CU_ASSERT_PTR_NULL(r->tools.callback_endpoint); /* "toolCallback": null */
}

static const struct {
    const char *file;
    void (*check)(const struct run_request *r);
} golden[] = {
    {"run_request.pi_core.json", check_pi_core},
    {"run_request.claude.json", check_claude},
    {"run_request.codex.json", check_codex},
    {"run_request.attachment.json", check_attachment},
};

static bool str_eq(const char *a, const char *b)
{
    return a && b ? strcmp(a, b) == 0 : a == b;
}

/* Cross-check the parsed request against the document read independently. */
static void check_against_document(const struct run_request *r, json_object *doc)
{
    json_object *mc = jsonx_get(doc, "modelConnection"), *msgs = jsonx_get(doc, "messages");
    json_object *creds = jsonx_get(mc, "credentials");
    const char *harness = jsonx_str(doc, "harness");

    CU_ASSERT_TRUE(str_eq(r->harness_name, harness ? harness : "pi_core"));
    CU_ASSERT_TRUE(str_eq(r->model, jsonx_str(doc, "model")));
    CU_ASSERT_EQUAL(r->mc.present, mc != NULL);
    CU_ASSERT_TRUE(str_eq(r->mc.provider, jsonx_str(mc, "provider")));
    CU_ASSERT_TRUE(str_eq(r->mc.deployment, jsonx_str(mc, "deployment")));
    CU_ASSERT_TRUE(str_eq(r->mc.base_url, jsonx_str(jsonx_get(mc, "endpoint"), "baseUrl")));
    CU_ASSERT_EQUAL_FATAL(r->mc.ncredentials, arr_len(creds));
    for (size_t i = 0; i < r->mc.ncredentials; i++) {
        json_object *c = json_object_array_get_idx(creds, i);
        CU_ASSERT_TRUE(
            str_eq(r->mc.credentials[i].name, jsonx_str(jsonx_get(c, "binding"), "name")));
        CU_ASSERT_TRUE(str_eq(r->mc.credentials[i].value, jsonx_str(c, "value")));
    }
    CU_ASSERT_EQUAL_FATAL(r->nmessages, arr_len(msgs));
    for (size_t i = 0; i < r->nmessages; i++) {
        json_object *m = json_object_array_get_idx(msgs, i), *content = jsonx_get(m, "content");
        CU_ASSERT_TRUE(str_eq(r->messages[i].role, jsonx_str(m, "role")));
        if (content && json_object_is_type(content, json_type_string)) {
            CU_ASSERT_EQUAL_FATAL(r->messages[i].nblocks, 1);
            CU_ASSERT_TRUE(str_eq(r->messages[i].blocks[0].text, json_object_get_string(content)));
        } else if (content) {
            CU_ASSERT_EQUAL(r->messages[i].nblocks, arr_len(content));
        }
    }
}

static void test_request_golden_fixtures_parse(void)
{
    struct request_limits lim;
    bool seen[ARRAY_SIZE(golden)] = {false};
    char pattern[4096];
    glob_t g;
    int r;

    request_limits_default(&lim);
    lim.allow_scripted = true; /* a fixture may drive the scripted test agent */
    snprintf(pattern, sizeof(pattern), "%s/run_request.*.json", test_shared_dir());
    r = glob(pattern, 0, NULL, &g);
    CU_ASSERT_EQUAL_FATAL(r, 0);
    CU_ASSERT(g.gl_pathc >= ARRAY_SIZE(golden));
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *path = g.gl_pathv[i], *base = strrchr(path, '/');
        struct run_request req;
        json_object *doc;
        char *data, err[512] = "";
        size_t len;

        base = base ? base + 1 : path;
        CU_ASSERT_EQUAL_FATAL(util_read_file(path, 16u << 20, &data, &len), 0);
        r = request_parse(data, len, &lim, &req, err, sizeof(err));
        CU_ASSERT_EQUAL(r, 0);
        if (r != 0) {
            fprintf(stderr, "\n  %s: %d \"%s\"\n", base, r, err);
            free(data);
            continue;
        }
        doc = test_json(data);
        CU_ASSERT_PTR_NOT_NULL(doc);
        if (doc)
            check_against_document(&req, doc);
        for (size_t k = 0; k < ARRAY_SIZE(golden); k++) {
            if (strcmp(base, golden[k].file) != 0)
                continue;
            seen[k] = true;
            golden[k].check(&req);
        }
        json_object_put(doc);
        run_request_release(&req);
        free(data);
    }
    for (size_t k = 0; k < ARRAY_SIZE(golden); k++)
        CU_ASSERT_TRUE(seen[k]);
    globfree(&g);
}

/* Allowlists that parse keep their entries for the egress policy. */
static void test_request_allowlist_accepted(void)
{
    static const char body[] = NET_ALLOW("\"10.0.0.0/8\",\"2001:db8::/32\",\"127.0.0.2\"");
    struct request_limits lim;
    struct run_request req;
    char err[256] = "";

    request_limits_default(&lim);
    CU_ASSERT_EQUAL_FATAL(request_parse(body, strlen(body), &lim, &req, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(req.network, NETWORK_ALLOWLIST);
    CU_ASSERT_PTR_NOT_NULL_FATAL(req.network_allowlist);
    CU_ASSERT_EQUAL(json_object_array_length(req.network_allowlist), 3);
    run_request_release(&req);
}

/*
 * An amplification body (8 MiB of {"x":[{},{},...]}: 2.8 million objects) is refused on its
 * text, before json-c builds anything; a body within the budget parses.
 */
static void test_request_element_budget(void)
{
    size_t n = 8u << 20, len;
    char *body = malloc(n + 16), err[256] = "";
    struct request_limits lim;
    struct run_request req;

    CU_ASSERT_PTR_NOT_NULL_FATAL(body);
    len = (size_t)snprintf(body, n, "{\"x\":[");
    while (len + 4 < n) {
        memcpy(body + len, "{},", 3);
        len += 3;
    }
    memcpy(body + len - 1, "]}", 3);
    len += 1;
    request_limits_default(&lim);
    CU_ASSERT_EQUAL(request_parse(body, len, &lim, &req, err, sizeof(err)), AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "more than 250000 JSON elements"));
    /* brackets, commas and quotes inside strings are text, not elements */
    {
        static const char text[] = "{\"a\":\"[[[,,,{{{\\\"]]]\"}";

        CU_ASSERT_EQUAL(jsonx_check_budget(text, strlen(text), 3, 2, err, sizeof(err)), 0);
        CU_ASSERT_EQUAL(jsonx_check_budget(text, strlen(text), 2, 2, err, sizeof(err)), -E2BIG);
    }
    CU_ASSERT_EQUAL(jsonx_check_budget("[1,2,3,4]", 9, 4, 8, err, sizeof(err)), -E2BIG);
    CU_ASSERT_EQUAL(jsonx_check_budget("[1,2,3,4]", 9, 5, 8, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(jsonx_check_budget("[[[]]]", 6, 10, 2, err, sizeof(err)), -ELOOP);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "deeper than 2"));
    free(body);
}

/* modelGateway.allowedModels: names only, kept for the gateway's route; anything else named. */
static void test_request_model_gateway_allowlist(void)
{
    struct request_limits lim;
    struct run_request req;
    const char *bad[] = {"{\"modelGateway\":{\"allowedModels\":\"m\"}}",
                         "{\"modelGateway\":{\"allowedModels\":[]}}",
                         "{\"modelGateway\":{\"allowedModels\":[\"m\",1]}}",
                         "{\"modelGateway\":{\"allowedModels\":[\"\"]}}", "{\"modelGateway\":[]}"};

    request_limits_default(&lim);
    CU_ASSERT_EQUAL_FATAL(
        parse_ok("{\"modelGateway\":{\"allowedModels\":[\"a\",\"b\"]}}", &lim, &req), 0);
    CU_ASSERT_EQUAL(json_object_array_length(req.gateway_models), 2);
    run_request_release(&req);
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        expect_refused(bad[i], strlen(bad[i]), &lim, AR_E_INVALID_REQUEST, "modelGateway");
}

CU_TestInfo request_tests[] = {
    {"test_request_model_gateway_allowlist", test_request_model_gateway_allowlist},
    {"test_request_allowlist_accepted", test_request_allowlist_accepted},
    {"test_request_element_budget", test_request_element_budget},
    {"test_request_golden_fixtures_parse", test_request_golden_fixtures_parse},
    {"test_request_refusals_name_the_field", test_request_refusals_name_the_field},
    {"test_request_deep_nesting_is_bad_json", test_request_deep_nesting_is_bad_json},
    {"test_request_skill_size_limits", test_request_skill_size_limits},
    {"test_request_strings_over_max_string", test_request_strings_over_max_string},
    {"test_request_http_base_url_only_to_loopback", test_request_http_base_url_only_to_loopback},
    {"test_request_scripted_needs_allow_scripted", test_request_scripted_needs_allow_scripted},
    {"test_request_empty_body_is_empty_object", test_request_empty_body_is_empty_object},
    {"test_request_blank_session_id_is_absent", test_request_blank_session_id_is_absent},
    {"test_request_turn_id_minted_when_absent", test_request_turn_id_minted_when_absent},
    {"test_request_run_context_project_overrides_project_id",
     test_request_run_context_project_overrides_project_id},
    {"test_request_session_ref", test_request_session_ref},
    {"test_request_host_is_loopback", test_request_host_is_loopback},
    CU_TEST_INFO_NULL,
};
