/*
 * identity — canonical JSON, the config fingerprint (which request fields shape the
 * environment and which do not), the credential epoch, the history fingerprint and its
 * continuation rule, the pool key and the fresh-user / minimal-history predicates.
 *
 * Requests are built with request_parse from a full base request plus a JSON merge patch
 * (RFC 7386: a null member deletes).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "request/request.h"
#include "session/identity.h"
#include "suites.h"

#define SECRET_ONE "sk-canary-one-5d1f"
#define SECRET_TWO "sk-canary-two-8b2e"

/* modelConnection.credentials entries */
#define CRED_BASE                                                                                  \
    "{\"binding\":{\"kind\":\"environment\",\"name\":\"OPENAI_API_KEY\"},"                         \
    "\"value\":\"" SECRET_ONE "\",\"usage\":\"opaque_http\"}"
#define CRED_ROTATED                                                                               \
    "{\"binding\":{\"kind\":\"environment\",\"name\":\"OPENAI_API_KEY\"},"                         \
    "\"value\":\"" SECRET_TWO "\",\"usage\":\"opaque_http\"}"
#define CRED_RENAMED                                                                               \
    "{\"binding\":{\"kind\":\"environment\",\"name\":\"OTHER_API_KEY\"},"                          \
    "\"value\":\"" SECRET_ONE "\",\"usage\":\"opaque_http\"}"
#define CRED_LOCAL_USE                                                                             \
    "{\"binding\":{\"kind\":\"environment\",\"name\":\"OPENAI_API_KEY\"},"                         \
    "\"value\":\"" SECRET_ONE "\",\"usage\":\"local_use\"}"
#define CRED_EXTRA                                                                                 \
    "{\"binding\":{\"kind\":\"environment\",\"name\":\"EXTRA_KEY\"},"                              \
    "\"value\":\"" SECRET_ONE "\",\"usage\":\"opaque_http\"}"

/* Every field the config fingerprint looks at, and every one it must ignore. */
static const char BASE[] =
    "{\"harness\":\"pi_core\",\"sandbox\":\"local\","
    "\"sessionId\":\"sess-1\",\"turnId\":\"turn-1\",\"projectId\":\"proj-1\","
    "\"model\":\"gpt-4o\",\"harnessMode\":\"agent\","
    "\"connection\":{\"mode\":\"direct\",\"slug\":\"main\"},"
    "\"modelConnection\":{\"provider\":\"openai\",\"deployment\":\"direct\","
    "\"credentialMode\":\"env\",\"endpoint\":{\"baseUrl\":\"https://api.example.com/v1\"},"
    "\"environment\":{\"OPENAI_ORG\":\"org-1\"},"
    "\"credentials\":[" CRED_BASE "]},"
    "\"agentsMd\":\"# agents\",\"systemPrompt\":\"be brief\",\"appendSystemPrompt\":\"and kind\","
    "\"skills\":[{\"name\":\"notes\",\"description\":\"take notes\",\"body\":\"write it down\"}],"
    "\"customTools\":[{\"name\":\"lookup\",\"kind\":\"callback\",\"callRef\":\"tools__lookup\","
    "\"permission\":\"allow\"}],"
    "\"mcpServers\":[{\"name\":\"docs\",\"connection\":{\"type\":\"http\","
    "\"url\":\"https://mcp.example.com/mcp\",\"credentials\":[{\"binding\":{\"kind\":"
    "\"header\",\"name\":\"x-token\"},\"value\":\"" SECRET_ONE "\",\"usage\":\"opaque_http\"}]}}],"
    "\"toolCallback\":{\"endpoint\":\"https://cb.example.com/tools\","
    "\"authorization\":\"Bearer cb-one\"},"
    "\"permissions\":{\"default\":\"ask\",\"rules\":[{\"pattern\":\"bash:*\","
    "\"permission\":\"deny\"}]},"
    "\"sandboxPermission\":{\"network\":{\"mode\":\"on\"}},"
    "\"harnessFiles\":[{\"path\":\"notes/a.md\",\"content\":\"alpha\"}],"
    "\"lifecycle\":{\"mode\":\"warm\",\"idleTimeoutMs\":60000},"
    "\"runContext\":{\"project\":{\"id\":\"proj-1\"},"
    "\"workflow\":{\"artifact\":{\"id\":\"art-1\"}},"
    "\"run\":{\"id\":\"run-1\"},\"revision\":{\"id\":\"rev-1\",\"is_draft\":false}},"
    "\"context\":{\"propagation\":{\"traceparent\":"
    "\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}},"
    "\"telemetry\":{\"exporters\":{\"otlp\":{\"endpoint\":\"https://otel.example.com\"}}},"
    "\"effectiveParameters\":{\"temperature\":0.1},"
    "\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}";

static const uint8_t KEY_ONE[IDENTITY_KEY_LEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
static const uint8_t KEY_TWO[IDENTITY_KEY_LEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 11};

static int parse_text(const char *json, struct run_request *ret)
{
    struct request_limits lim;
    char err[256] = "";
    int r;

    request_limits_default(&lim);
    r = request_parse(json, strlen(json), &lim, ret, err, sizeof(err));
    if (r < 0)
        fprintf(stderr, "\n  identity: request refused (%d): %s\n", r, err);
    return r;
}

/* RFC 7386 merge patch of target by patch (both objects). */
static void merge_patch(json_object *target, json_object *patch)
{
    json_object_object_foreach(patch, key, val)
    {
        json_object *cur = jsonx_get(target, key);

        if (!val) {
            json_object_object_del(target, key);
        } else if (json_object_is_type(val, json_type_object) && cur &&
                   json_object_is_type(cur, json_type_object)) {
            merge_patch(cur, val);
        } else {
            json_object_object_add(target, key, json_object_get(val));
        }
    }
}

/* The text of base patched by patch (NULL = base as is), malloc'ed. */
static char *patched(const char *base, const char *patch)
{
    json_object *doc = test_json(base), *p;
    char *text;

    if (!doc)
        return NULL;
    if (patch) {
        p = test_json(patch);
        if (!p) {
            json_object_put(doc);
            return NULL;
        }
        merge_patch(doc, p);
        json_object_put(p);
    }
    text = util_xstrdup(jsonx_text(doc, NULL));
    json_object_put(doc);
    return text;
}

/* Parse base + patch into ret (released by the caller). */
static int parse_patched(const char *base, const char *patch, struct run_request *ret)
{
    char *text = patched(base, patch);
    int r;

    if (!text)
        return -EINVAL;
    r = parse_text(text, ret);
    free(text);
    return r;
}

static int config_fp(const char *base, const char *patch, uint8_t ret[IDENTITY_DIGEST_LEN])
{
    struct run_request req;
    int r = parse_patched(base, patch, &req);

    if (r < 0)
        return r;
    r = identity_config_fp(&req, ret);
    run_request_release(&req);
    return r;
}

static int epoch(const char *base, const char *patch, const uint8_t *key,
                 uint8_t ret[IDENTITY_DIGEST_LEN])
{
    struct run_request req;
    int r = parse_patched(base, patch, &req);

    if (r < 0)
        return r;
    r = identity_credential_epoch(&req, key, ret);
    run_request_release(&req);
    return r;
}

/* History fingerprint of a request's messages[0..n) (n = SIZE_MAX: all of them). */
static int history_fp(const char *json, size_t n, const char *const *ids, size_t nids,
                      uint8_t ret[IDENTITY_DIGEST_LEN])
{
    struct run_request req;
    int r = parse_text(json, &req);

    if (r < 0)
        return r;
    if (n == SIZE_MAX)
        n = req.nmessages;
    r = n <= req.nmessages ? identity_history_fp(req.messages, n, ids, nids, ret) : -EINVAL;
    run_request_release(&req);
    return r;
}

static bool same(const uint8_t *a, const uint8_t *b)
{
    return memcmp(a, b, IDENTITY_DIGEST_LEN) == 0;
}

static char *canonical_of(const char *json)
{
    json_object *o = test_json(json);
    struct buf b;
    char *out = NULL;

    if (!o)
        return NULL;
    buf_init(&b, 1u << 20);
    if (identity_canonical(o, &b) == 0)
        out = util_xstrdup(buf_str(&b));
    buf_release(&b);
    json_object_put(o);
    return out;
}

/* A deep copy of o with every object's members in reverse order. */
static json_object *reversed(json_object *o)
{
    json_object *copy;

    if (json_object_is_type(o, json_type_array)) {
        copy = json_object_new_array();
        for (size_t i = 0; i < json_object_array_length(o); i++) {
            json_object *v = json_object_array_get_idx(o, i);
            json_object_array_add(copy, v ? reversed(v) : NULL);
        }
        return copy;
    }
    if (!json_object_is_type(o, json_type_object))
        return json_object_get(o);
    {
        size_t n = (size_t)json_object_object_length(o), k = 0;
        const char **keys = calloc(n ? n : 1, sizeof(*keys));

        copy = json_object_new_object();
        json_object_object_foreach(o, key, val)
        {
            (void)val;
            keys[k++] = key;
        }
        while (k-- > 0) {
            json_object *v = jsonx_get(o, keys[k]);
            json_object_object_add(copy, keys[k], v ? reversed(v) : NULL);
        }
        free(keys);
    }
    return copy;
}

/* ---- canonical JSON -------------------------------------------------------------------- */

static void test_identity_canonical_sorts_and_drops_nulls(void)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"{\"b\":1,\"a\":{\"d\":null,\"c\":[3,1]}}", "{\"a\":{\"c\":[3,1]},\"b\":1}"},
        {"{}", "{}"},
        {"{\"x\":null}", "{}"},
        {"[null,{\"z\":null,\"y\":[]},\"s\"]", "[null,{\"y\":[]},\"s\"]"},
        {"{\"a\":1,\"B\":2,\"_\":3}", "{\"B\":2,\"_\":3,\"a\":1}"}, /* byte order */
        {"{\"k\":[{\"b\":true,\"a\":false}]}", "{\"k\":[{\"a\":false,\"b\":true}]}"},
        {"{\"q\\\"/\":\"v/\\n\"}", "{\"q\\\"/\":\"v/\\n\"}"},
        {"{\"n\":-12,\"e\":\"\"}", "{\"e\":\"\",\"n\":-12}"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *got = canonical_of(cases[i].in);

        CU_ASSERT_PTR_NOT_NULL(got);
        CU_ASSERT_STRING_EQUAL(TEST_STR(got), cases[i].out);
        free(got);
    }
}

static void test_identity_canonical_ignores_key_order(void)
{
    json_object *doc = test_json(BASE), *rev;
    struct buf a, b;

    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    rev = reversed(doc);
    buf_init(&a, 1u << 20);
    buf_init(&b, 1u << 20);
    CU_ASSERT_EQUAL(identity_canonical(doc, &a), 0);
    CU_ASSERT_EQUAL(identity_canonical(rev, &b), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&a), buf_str(&b));
    /* and the reversal really changed the serialisation */
    CU_ASSERT_STRING_NOT_EQUAL(jsonx_text(doc, NULL), jsonx_text(rev, NULL));
    buf_release(&a);
    buf_release(&b);
    json_object_put(rev);
    json_object_put(doc);
}

/* ---- config fingerprint ---------------------------------------------------------------- */

static void test_identity_config_fp_key_order_and_nulls(void)
{
    static const char *const optional[] = {"model",
                                           "harnessMode",
                                           "connection",
                                           "agentsMd",
                                           "systemPrompt",
                                           "appendSystemPrompt",
                                           "skills",
                                           "customTools",
                                           "mcpServers",
                                           "toolCallback",
                                           "permissions",
                                           "sandboxPermission",
                                           "harnessFiles",
                                           "runContext",
                                           "modelConnection",
                                           "modelCapabilities",
                                           "context",
                                           "telemetry",
                                           "effectiveParameters"};
    uint8_t base[IDENTITY_DIGEST_LEN], other[IDENTITY_DIGEST_LEN];
    json_object *doc, *rev, *absent, *nulls;
    char *text;

    CU_ASSERT_EQUAL_FATAL(config_fp(BASE, NULL, base), 0);
    /* deterministic */
    CU_ASSERT_EQUAL(config_fp(BASE, NULL, other), 0);
    CU_ASSERT_TRUE(same(base, other));

    /* the same request with every object's keys reversed */
    doc = test_json(BASE);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    rev = reversed(doc);
    text = util_xstrdup(jsonx_text(rev, NULL));
    CU_ASSERT_EQUAL(config_fp(text, NULL, other), 0);
    CU_ASSERT_TRUE(same(base, other));
    free(text);
    json_object_put(rev);

    /* absent and null are one thing, at the top level ... */
    absent = test_json(BASE);
    nulls = test_json(BASE);
    CU_ASSERT_PTR_NOT_NULL_FATAL(absent);
    CU_ASSERT_PTR_NOT_NULL_FATAL(nulls);
    for (size_t i = 0; i < sizeof(optional) / sizeof(optional[0]); i++) {
        json_object_object_del(absent, optional[i]);
        json_object_object_add(nulls, optional[i], NULL);
    }
    text = util_xstrdup(jsonx_text(absent, NULL));
    CU_ASSERT_EQUAL(config_fp(text, NULL, base), 0);
    free(text);
    text = util_xstrdup(jsonx_text(nulls, NULL));
    CU_ASSERT_EQUAL(config_fp(text, NULL, other), 0);
    free(text);
    CU_ASSERT_TRUE(same(base, other));
    json_object_put(absent);
    json_object_put(nulls);
    json_object_put(doc);

    /* ... and inside the fields that are kept */
    CU_ASSERT_EQUAL(config_fp(BASE, NULL, base), 0);
    nulls = test_json(BASE);
    CU_ASSERT_PTR_NOT_NULL_FATAL(nulls);
    json_object_object_add(jsonx_path(nulls, "modelConnection.endpoint"), "region", NULL);
    json_object_object_add(jsonx_path(nulls, "modelConnection"), "deploymentVersion", NULL);
    json_object_object_add(jsonx_path(nulls, "runContext.workflow.artifact"), "version", NULL);
    json_object_object_add(jsonx_path(nulls, "sandboxPermission.network"), "allowlist", NULL);
    json_object_object_add(jsonx_path(nulls, "connection"), "note", NULL);
    json_object_object_add(json_object_array_get_idx(jsonx_get(nulls, "skills"), 0), "files", NULL);
    json_object_object_add(json_object_array_get_idx(jsonx_path(nulls, "permissions.rules"), 0),
                           "comment", NULL);
    text = util_xstrdup(jsonx_text(nulls, NULL));
    CU_ASSERT_PTR_NOT_NULL(strstr(TEST_STR(text), "\"region\":null"));
    CU_ASSERT_EQUAL(config_fp(text, NULL, other), 0);
    CU_ASSERT_TRUE(same(base, other));
    free(text);
    json_object_put(nulls);
}

struct fp_case {
    const char *name;
    const char *patch_a; /* NULL: the base request */
    const char *patch_b;
};

/* Each pair differs in one field that shapes the environment: the fingerprints differ. */
static const struct fp_case config_changes[] = {
    {"harness", NULL, "{\"harness\":\"claude\"}"},
    {"harness codex", NULL, "{\"harness\":\"codex\"}"},
    {"model", NULL, "{\"model\":\"gpt-4.1\"}"},
    {"model absent", NULL, "{\"model\":null}"},
    {"connection.slug", NULL, "{\"connection\":{\"slug\":\"backup\"}}"},
    {"connection.mode", NULL, "{\"connection\":{\"mode\":\"proxy\"}}"},
    {"modelConnection.provider", NULL, "{\"modelConnection\":{\"provider\":\"azure\"}}"},
    {"modelConnection.deployment", NULL, "{\"modelConnection\":{\"deployment\":\"proxy\"}}"},
    {"modelConnection.endpoint", NULL,
     "{\"modelConnection\":{\"endpoint\":{\"baseUrl\":\"https://eu.example.com/v1\"}}}"},
    {"modelConnection.endpoint.apiVersion", NULL,
     "{\"modelConnection\":{\"endpoint\":{\"apiVersion\":\"2024-10-01\"}}}"},
    {"modelConnection.credentialMode",
     "{\"modelConnection\":{\"credentialMode\":\"none\",\"credentials\":null}}",
     "{\"modelConnection\":{\"credentialMode\":\"runtime_provided\",\"credentials\":null}}"},
    {"modelConnection.environment", NULL,
     "{\"modelConnection\":{\"environment\":{\"OPENAI_ORG\":\"org-2\"}}}"},
    {"modelConnection.environment added", NULL,
     "{\"modelConnection\":{\"environment\":{\"OPENAI_PROJECT\":\"x\"}}}"},
    {"credential binding name", NULL, "{\"modelConnection\":{\"credentials\":[" CRED_RENAMED "]}}"},
    {"credential usage", NULL, "{\"modelConnection\":{\"credentials\":[" CRED_LOCAL_USE "]}}"},
    {"second credential", NULL,
     "{\"modelConnection\":{\"credentials\":[" CRED_BASE "," CRED_EXTRA "]}}"},
    {"agentsMd", NULL, "{\"agentsMd\":\"# other agents\"}"},
    {"agentsMd absent", NULL, "{\"agentsMd\":null}"},
    {"systemPrompt", NULL, "{\"systemPrompt\":\"be verbose\"}"},
    {"appendSystemPrompt", NULL, "{\"appendSystemPrompt\":\"and curt\"}"},
    {"skills", NULL,
     "{\"skills\":[{\"name\":\"notes\",\"description\":\"take notes\",\"body\":\"erase it\"}]}"},
    {"skills absent", NULL, "{\"skills\":null}"},
    {"customTools", NULL,
     "{\"customTools\":[{\"name\":\"lookup\",\"kind\":\"callback\",\"callRef\":\"tools__lookup\","
     "\"permission\":\"ask\"}]}"},
    {"mcpServers url", NULL,
     "{\"mcpServers\":[{\"name\":\"docs\",\"connection\":{\"type\":\"http\","
     "\"url\":\"https://mcp2.example.com/mcp\",\"credentials\":[{\"binding\":{\"kind\":"
     "\"header\",\"name\":\"x-token\"},\"value\":\"" SECRET_ONE "\",\"usage\":\"opaque_http\"}]}}]}"},
    {"mcpServers credential name", NULL,
     "{\"mcpServers\":[{\"name\":\"docs\",\"connection\":{\"type\":\"http\","
     "\"url\":\"https://mcp.example.com/mcp\",\"credentials\":[{\"binding\":{\"kind\":"
     "\"header\",\"name\":\"x-other\"},\"value\":\"" SECRET_ONE "\",\"usage\":\"opaque_http\"}]}}]}"},
    {"toolCallback.endpoint", NULL,
     "{\"toolCallback\":{\"endpoint\":\"https://cb.example.com/other\"}}"},
    {"permissions", NULL, "{\"permissions\":{\"default\":\"allow\"}}"},
    {"permissions rules", NULL, "{\"permissions\":{\"rules\":null}}"},
    {"sandboxPermission", NULL, "{\"sandboxPermission\":{\"network\":{\"mode\":\"off\"}}}"},
    {"harnessFiles", NULL, "{\"harnessFiles\":[{\"path\":\"notes/a.md\",\"content\":\"beta\"}]}"},
    {"harnessFiles path", NULL,
     "{\"harnessFiles\":[{\"path\":\"notes/b.md\",\"content\":\"alpha\"}]}"},
    {"modelCapabilities", NULL, "{\"modelCapabilities\":{\"images\":true}}"},
    {"runContext.workflow.artifact.id", NULL,
     "{\"runContext\":{\"workflow\":{\"artifact\":{\"id\":\"art-2\"}}}}"},
    {"runContext.workflow.artifact.id absent", NULL, "{\"runContext\":{\"workflow\":null}}"},
};

/* Each pair differs only in fields that do not shape the environment: same fingerprint. */
static const struct fp_case config_same[] = {
    {"messages", NULL,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"},{\"role\":\"assistant\","
     "\"content\":\"hi\"},{\"role\":\"user\",\"content\":\"more\"}]}"},
    {"turnId", NULL, "{\"turnId\":\"turn-2\"}"},
    {"turnId absent (minted)", NULL, "{\"turnId\":null}"},
    {"sessionId", NULL, "{\"sessionId\":\"sess-2\"}"},
    {"projectId", NULL, "{\"projectId\":\"proj-2\"}"},
    {"runContext.project.id", NULL, "{\"runContext\":{\"project\":{\"id\":\"proj-9\"}}}"},
    {"context", NULL, "{\"context\":null}"},
    {"context traceparent", NULL,
     "{\"context\":{\"propagation\":{\"traceparent\":"
     "\"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\"}}}"},
    {"telemetry", NULL,
     "{\"telemetry\":{\"exporters\":{\"otlp\":{\"endpoint\":\"https://otel2.example.com\"}}}}"},
    {"credential value", NULL, "{\"modelConnection\":{\"credentials\":[" CRED_ROTATED "]}}"},
    {"mcp credential value", NULL,
     "{\"mcpServers\":[{\"name\":\"docs\",\"connection\":{\"type\":\"http\","
     "\"url\":\"https://mcp.example.com/mcp\",\"credentials\":[{\"binding\":{\"kind\":"
     "\"header\",\"name\":\"x-token\"},\"value\":\"" SECRET_TWO "\",\"usage\":\"opaque_http\"}]}}]}"},
    {"toolCallback.authorization", NULL,
     "{\"toolCallback\":{\"authorization\":\"Bearer cb-two\"}}"},
    {"runContext.run", NULL, "{\"runContext\":{\"run\":{\"id\":\"run-2\"}}}"},
    {"runContext.revision", NULL,
     "{\"runContext\":{\"revision\":{\"id\":\"rev-2\",\"is_draft\":true}}}"},
    {"effectiveParameters", NULL, "{\"effectiveParameters\":{\"temperature\":0.9}}"},
    {"lifecycle", NULL, "{\"lifecycle\":{\"mode\":\"per_turn\",\"idleTimeoutMs\":5}}"},
    {"harness alias pi_agenta", NULL, "{\"harness\":\"pi_agenta\"}"},
    {"harness default", NULL, "{\"harness\":null}"},
    {"harnessMode on pi", NULL, "{\"harnessMode\":\"read-only\"}"},
    {"harnessMode absent on pi", NULL, "{\"harnessMode\":null}"},
    {"sandbox default", NULL, "{\"sandbox\":null}"},
};

static void run_fp_cases(const struct fp_case *cases, size_t n, bool expect_change)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t a[IDENTITY_DIGEST_LEN], b[IDENTITY_DIGEST_LEN];
        int ra = config_fp(BASE, cases[i].patch_a, a);
        int rb = config_fp(BASE, cases[i].patch_b, b);

        CU_ASSERT_EQUAL(ra, 0);
        CU_ASSERT_EQUAL(rb, 0);
        if (ra == 0 && rb == 0 && same(a, b) == expect_change)
            fprintf(stderr, "\n  config fingerprint case \"%s\": expected %s", cases[i].name,
                    expect_change ? "a change" : "no change");
        CU_ASSERT_TRUE(ra == 0 && rb == 0 && same(a, b) != expect_change);
    }
}

static void test_identity_config_fp_changes(void)
{
    run_fp_cases(config_changes, sizeof(config_changes) / sizeof(config_changes[0]), true);
}

static void test_identity_config_fp_ignores(void)
{
    run_fp_cases(config_same, sizeof(config_same) / sizeof(config_same[0]), false);
}

static void test_identity_config_fp_harness_mode_codex_only(void)
{
    uint8_t full[IDENTITY_DIGEST_LEN], dflt[IDENTITY_DIGEST_LEN], agent[IDENTITY_DIGEST_LEN];
    uint8_t ro[IDENTITY_DIGEST_LEN], pi_a[IDENTITY_DIGEST_LEN], pi_b[IDENTITY_DIGEST_LEN];

    CU_ASSERT_EQUAL(config_fp(BASE, "{\"harness\":\"codex\",\"harnessMode\":\"agent\"}", agent), 0);
    CU_ASSERT_EQUAL(config_fp(BASE, "{\"harness\":\"codex\",\"harnessMode\":\"read-only\"}", ro),
                    0);
    CU_ASSERT_EQUAL(
        config_fp(BASE, "{\"harness\":\"codex\",\"harnessMode\":\"agent-full-access\"}", full), 0);
    CU_ASSERT_EQUAL(config_fp(BASE, "{\"harness\":\"codex\",\"harnessMode\":null}", dflt), 0);
    CU_ASSERT_FALSE(same(agent, ro));
    CU_ASSERT_FALSE(same(agent, full));
    CU_ASSERT_FALSE(same(ro, full));
    /* codex normalises an absent mode to its default */
    CU_ASSERT_TRUE(same(full, dflt));

    /* pi has no harness modes: the field is ignored */
    CU_ASSERT_EQUAL(config_fp(BASE, "{\"harnessMode\":\"agent\"}", pi_a), 0);
    CU_ASSERT_EQUAL(config_fp(BASE, "{\"harnessMode\":\"agent-full-access\"}", pi_b), 0);
    CU_ASSERT_TRUE(same(pi_a, pi_b));
    CU_ASSERT_EQUAL(config_fp(BASE, "{\"harness\":\"claude\",\"harnessMode\":\"agent\"}", pi_a), 0);
    CU_ASSERT_EQUAL(config_fp(BASE, "{\"harness\":\"claude\",\"harnessMode\":\"read-only\"}", pi_b),
                    0);
    CU_ASSERT_TRUE(same(pi_a, pi_b));
}

/*
 * The sandbox is fingerprinted as the request resolved it: an absent sandbox is "local", the
 * same environment as an explicit "local" (this failed before identity.c used req->sandbox).
 */
static void test_identity_config_fp_sandbox(void)
{
    uint8_t expl[IDENTITY_DIGEST_LEN], absent[IDENTITY_DIGEST_LEN], other[IDENTITY_DIGEST_LEN];
    struct run_request req;

    CU_ASSERT_EQUAL(config_fp(BASE, NULL, expl), 0);
    CU_ASSERT_EQUAL(config_fp(BASE, "{\"sandbox\":null}", absent), 0);
    CU_ASSERT_TRUE(same(expl, absent));
    CU_ASSERT_EQUAL(config_fp(BASE, "{\"sandbox\":\"\"}", absent), 0);
    CU_ASSERT_TRUE(same(expl, absent));

    /* another provider is another environment (only "local" parses today: set it by hand) */
    CU_ASSERT_EQUAL_FATAL(parse_patched(BASE, NULL, &req), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(req.sandbox), "local");
    req.sandbox = "daytona";
    CU_ASSERT_EQUAL(identity_config_fp(&req, other), 0);
    CU_ASSERT_FALSE(same(expl, other));
    run_request_release(&req);
}

static void test_identity_config_fp_minimal_requests(void)
{
    uint8_t a[IDENTITY_DIGEST_LEN], b[IDENTITY_DIGEST_LEN];

    /* the empty request fingerprints as the default pi harness on local */
    CU_ASSERT_EQUAL(config_fp("{}", NULL, a), 0);
    CU_ASSERT_EQUAL(config_fp("{\"harness\":\"pi_core\",\"sandbox\":\"local\"}", NULL, b), 0);
    CU_ASSERT_TRUE(same(a, b));
    CU_ASSERT_EQUAL(config_fp("{\"harness\":\"opencode\"}", NULL, b), 0);
    CU_ASSERT_FALSE(same(a, b));
}

/* ---- credential epoch ------------------------------------------------------------------ */

static void test_identity_credential_epoch(void)
{
    static const char rotate[] = "{\"modelConnection\":{\"credentials\":[" CRED_ROTATED "]}}";
    static const char rotate_mcp[] =
        "{\"mcpServers\":[{\"name\":\"docs\",\"connection\":{\"type\":\"http\","
        "\"url\":\"https://mcp.example.com/mcp\",\"credentials\":[{\"binding\":{\"kind\":"
        "\"header\",\"name\":\"x-token\"},\"value\":\"" SECRET_TWO "\",\"usage\":\"opaque_http\"}]}}]}";
    uint8_t e1[IDENTITY_DIGEST_LEN], e2[IDENTITY_DIGEST_LEN], e3[IDENTITY_DIGEST_LEN];
    uint8_t c1[IDENTITY_DIGEST_LEN], c2[IDENTITY_DIGEST_LEN];

    /* same key, same request: same epoch */
    CU_ASSERT_EQUAL(epoch(BASE, NULL, KEY_ONE, e1), 0);
    CU_ASSERT_EQUAL(epoch(BASE, NULL, KEY_ONE, e2), 0);
    CU_ASSERT_TRUE(same(e1, e2));
    /* ... whatever the fields around the credentials do */
    CU_ASSERT_EQUAL(epoch(BASE, "{\"turnId\":\"t-9\",\"agentsMd\":\"x\"}", KEY_ONE, e2), 0);
    CU_ASSERT_TRUE(same(e1, e2));

    /* a rotated model credential: new epoch, same config */
    CU_ASSERT_EQUAL(epoch(BASE, rotate, KEY_ONE, e2), 0);
    CU_ASSERT_FALSE(same(e1, e2));
    CU_ASSERT_EQUAL(config_fp(BASE, NULL, c1), 0);
    CU_ASSERT_EQUAL(config_fp(BASE, rotate, c2), 0);
    CU_ASSERT_TRUE(same(c1, c2));

    /* a rotated MCP credential: same epoch, same config — the runner applies it per turn and
     * it never enters the sandbox, so the warm session stays */
    CU_ASSERT_EQUAL(epoch(BASE, rotate_mcp, KEY_ONE, e3), 0);
    CU_ASSERT_TRUE(same(e1, e3));
    CU_ASSERT_EQUAL(config_fp(BASE, rotate_mcp, c2), 0);
    CU_ASSERT_TRUE(same(c1, c2));

    /* the model environment is credential material too */
    CU_ASSERT_EQUAL(epoch(BASE,
                          "{\"modelConnection\":{\"environment\":{\"OPENAI_ORG\":\"org-2\"}}}",
                          KEY_ONE, e3),
                    0);
    CU_ASSERT_FALSE(same(e1, e3));

    /* another boot's key: another epoch for the same request */
    CU_ASSERT_EQUAL(epoch(BASE, NULL, KEY_TWO, e3), 0);
    CU_ASSERT_FALSE(same(e1, e3));

    /* no credentials at all still has a (stable) epoch */
    CU_ASSERT_EQUAL(epoch("{}", NULL, KEY_ONE, e2), 0);
    CU_ASSERT_EQUAL(epoch("{}", NULL, KEY_ONE, e3), 0);
    CU_ASSERT_TRUE(same(e2, e3));
    CU_ASSERT_FALSE(same(e1, e2));
}

static void test_identity_credential_epoch_hides_value(void)
{
    static const char *const secrets[] = {SECRET_ONE, SECRET_TWO};
    uint8_t e[IDENTITY_DIGEST_LEN], fp[IDENTITY_DIGEST_LEN];
    char hex[2 * IDENTITY_DIGEST_LEN + 1];
    const char *patch = "{\"modelConnection\":{\"credentials\":[" CRED_ROTATED "]}}";

    for (size_t i = 0; i < 2; i++) {
        const char *p = i ? patch : NULL;
        size_t n = strlen(secrets[i]);

        CU_ASSERT_EQUAL(epoch(BASE, p, KEY_ONE, e), 0);
        util_hex_encode(e, sizeof(e), hex);
        CU_ASSERT_EQUAL(strlen(hex), 2 * IDENTITY_DIGEST_LEN);
        CU_ASSERT_PTR_NULL(memmem(e, sizeof(e), secrets[i], n));
        CU_ASSERT_PTR_NULL(memmem(e, sizeof(e), secrets[i], 8)); /* not even a prefix */
        CU_ASSERT_PTR_NULL(strstr(hex, secrets[i]));
        CU_ASSERT_PTR_NULL(strstr(hex, "canary"));
        /* nor does the config fingerprint carry it */
        CU_ASSERT_EQUAL(config_fp(BASE, p, fp), 0);
        CU_ASSERT_PTR_NULL(memmem(fp, sizeof(fp), secrets[i], 8));
    }
}

/* ---- history fingerprint --------------------------------------------------------------- */

#define MSG_USER(text) "{\"role\":\"user\",\"content\":\"" text "\"}"
#define MSG_ASSISTANT(text) "{\"role\":\"assistant\",\"content\":\"" text "\"}"
#define MSGS(list) "{\"messages\":[" list "]}"

static void test_identity_history_fp_rules(void)
{
    uint8_t a[IDENTITY_DIGEST_LEN], b[IDENTITY_DIGEST_LEN];

    /* assistant text is ignored */
    CU_ASSERT_EQUAL(
        history_fp(MSGS(MSG_USER("q1") "," MSG_ASSISTANT("answer one") "," MSG_USER("q2")),
                   SIZE_MAX, NULL, 0, a),
        0);
    CU_ASSERT_EQUAL(
        history_fp(MSGS(MSG_USER("q1") "," MSG_ASSISTANT("a different answer") "," MSG_USER("q2")),
                   SIZE_MAX, NULL, 0, b),
        0);
    CU_ASSERT_TRUE(same(a, b));
    /* even an assistant message with no content at all */
    CU_ASSERT_EQUAL(history_fp(MSGS(MSG_USER("q1") ",{\"role\":\"assistant\"}," MSG_USER("q2")),
                               SIZE_MAX, NULL, 0, b),
                    0);
    CU_ASSERT_TRUE(same(a, b));

    /* user text counts */
    CU_ASSERT_EQUAL(
        history_fp(MSGS(MSG_USER("q1") "," MSG_ASSISTANT("answer one") "," MSG_USER("q2!")),
                   SIZE_MAX, NULL, 0, b),
        0);
    CU_ASSERT_FALSE(same(a, b));

    /* the prompt count counts: one more user prompt, even an empty one */
    CU_ASSERT_EQUAL(history_fp(MSGS(MSG_USER("q1")), SIZE_MAX, NULL, 0, a), 0);
    CU_ASSERT_EQUAL(history_fp(MSGS(MSG_USER("q1") ",{\"role\":\"user\",\"content\":[]}"), SIZE_MAX,
                               NULL, 0, b),
                    0);
    CU_ASSERT_FALSE(same(a, b));
    CU_ASSERT_EQUAL(history_fp(MSGS(MSG_USER("q1") "," MSG_USER("q1")), SIZE_MAX, NULL, 0, b), 0);
    CU_ASSERT_FALSE(same(a, b));

    /* tool call ids count, wherever they appear */
    CU_ASSERT_EQUAL(
        history_fp(MSGS(MSG_USER("q1") ",{\"role\":\"assistant\",\"content\":[{\"type\":"
                                       "\"tool_call\",\"toolCallId\":\"call_a\"}]}"),
                   SIZE_MAX, NULL, 0, a),
        0);
    CU_ASSERT_EQUAL(
        history_fp(MSGS(MSG_USER("q1") ",{\"role\":\"assistant\",\"content\":[{\"type\":"
                                       "\"tool_call\",\"toolCallId\":\"call_b\"}]}"),
                   SIZE_MAX, NULL, 0, b),
        0);
    CU_ASSERT_FALSE(same(a, b));
    CU_ASSERT_EQUAL(history_fp(MSGS(MSG_USER("q1")), SIZE_MAX, NULL, 0, b), 0);
    CU_ASSERT_FALSE(same(a, b));

    /* inline media is digested: other bytes, other fingerprint */
    CU_ASSERT_EQUAL(history_fp(MSGS("{\"role\":\"user\",\"content\":[{\"type\":\"image\","
                                    "\"mimeType\":\"image/png\",\"data\":\"AAAA\"}]}"),
                               SIZE_MAX, NULL, 0, a),
                    0);
    CU_ASSERT_EQUAL(history_fp(MSGS("{\"role\":\"user\",\"content\":[{\"type\":\"image\","
                                    "\"mimeType\":\"image/png\",\"data\":\"BBBB\"}]}"),
                               SIZE_MAX, NULL, 0, b),
                    0);
    CU_ASSERT_FALSE(same(a, b));

    /* the empty history is a fingerprint like any other, and deterministic */
    CU_ASSERT_EQUAL(identity_history_fp(NULL, 0, NULL, 0, a), 0);
    CU_ASSERT_EQUAL(identity_history_fp(NULL, 0, NULL, 0, b), 0);
    CU_ASSERT_TRUE(same(a, b));
}

static void test_identity_history_fp_continuation(void)
{
    static const char *const ids[] = {"call_1", "call_2"};
    static const char *const one_id[] = {"call_1"};
    static const char *const with_null[] = {"call_1", NULL, "call_2", "call_1"};
    /* turn 1: the request the runner ran; its turn made two tool calls */
    static const char turn1[] = MSGS(MSG_USER("list the files"));
    /* turn 2: the client sends the conversation back, with the tool calls and their results */
    static const char turn2[] =
        MSGS(MSG_USER("list the files") ","
                                        "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
                                        "\"text\":\"running ls\"},"
                                        "{\"type\":\"tool_call\",\"toolCallId\":\"call_1\","
                                        "\"toolName\":\"bash\"},"
                                        "{\"type\":\"tool_call\",\"toolCallId\":\"call_2\","
                                        "\"toolName\":\"bash\"}]},"
                                        "{\"role\":\"tool\",\"content\":[{\"type\":\"tool_result\","
                                        "\"toolCallId\":\"call_1\","
                                        "\"output\":\"a b c\"}]}," MSG_USER("now count them"));
    uint8_t parked[IDENTITY_DIGEST_LEN], prior[IDENTITY_DIGEST_LEN], other[IDENTITY_DIGEST_LEN];
    struct run_request req;

    CU_ASSERT_EQUAL(history_fp(turn1, SIZE_MAX, ids, 2, parked), 0);
    CU_ASSERT_EQUAL_FATAL(parse_text(turn2, &req), 0);
    CU_ASSERT_EQUAL_FATAL(req.nmessages, 4);
    /* the prior conversation: everything but the trailing user message */
    CU_ASSERT_EQUAL(identity_history_fp(req.messages, req.nmessages - 1, NULL, 0, prior), 0);
    CU_ASSERT_TRUE(same(parked, prior));
    /* the whole of turn 2 is another history */
    CU_ASSERT_EQUAL(identity_history_fp(req.messages, req.nmessages, NULL, 0, other), 0);
    CU_ASSERT_FALSE(same(parked, other));
    run_request_release(&req);

    /* a turn that reported fewer tool calls does not match */
    CU_ASSERT_EQUAL(history_fp(turn1, SIZE_MAX, one_id, 1, other), 0);
    CU_ASSERT_FALSE(same(other, prior));
    /* NULL and repeated ids are skipped */
    CU_ASSERT_EQUAL(history_fp(turn1, SIZE_MAX, with_null, 4, other), 0);
    CU_ASSERT_TRUE(same(other, parked));
    /* ids already in the messages are not counted twice */
    CU_ASSERT_EQUAL(history_fp(turn2, 3, NULL, 0, prior), 0);
    CU_ASSERT_EQUAL(history_fp(turn2, 3, ids, 2, other), 0);
    CU_ASSERT_TRUE(same(prior, other));
    /* n_extra 0 ignores the list */
    CU_ASSERT_EQUAL(history_fp(turn1, SIZE_MAX, ids, 0, other), 0);
    CU_ASSERT_EQUAL(history_fp(turn1, SIZE_MAX, NULL, 0, prior), 0);
    CU_ASSERT_TRUE(same(prior, other));
}

/* ---- pool key -------------------------------------------------------------------------- */

static void test_identity_pool_key(void)
{
    static const struct {
        const char *json;
        int rc;
        const char *key;
    } cases[] = {
        {"{\"sessionId\":\"s1\",\"projectId\":\"p1\"}", 0, "p1:s1"},
        {"{\"sessionId\":\"s1\",\"projectId\":\"p1\",\"runContext\":{\"project\":"
         "{\"id\":\"rc\"}}}",
         0, "rc:s1"},
        {"{\"sessionId\":\"s1\",\"runContext\":{\"project\":{\"id\":\"rc\"}}}", 0, "rc:s1"},
        {"{\"sessionId\":\"s1\",\"projectId\":\"p1\",\"runContext\":{\"project\":{}}}", 0, "p1:s1"},
        {"{\"sessionId\":\"s1\"}", -ENOENT, NULL},
        {"{\"projectId\":\"p1\"}", -ENOENT, NULL},
        {"{\"runContext\":{\"project\":{\"id\":\"rc\"}}}", -ENOENT, NULL},
        {"{\"sessionId\":\"   \",\"projectId\":\"p1\"}", -ENOENT, NULL},
        {"{}", -ENOENT, NULL},
    };
    struct run_request req;
    char key[272]; /* identity_pool_key wants room for a pool key */

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CU_ASSERT_EQUAL_FATAL(parse_text(cases[i].json, &req), 0);
        memcpy(key, "untouched", sizeof("untouched"));
        CU_ASSERT_EQUAL(identity_pool_key(&req, key, sizeof(key)), cases[i].rc);
        CU_ASSERT_STRING_EQUAL(key, cases[i].key ? cases[i].key : "untouched");
        run_request_release(&req);
    }

    /* a buffer too small is an error, never a truncated key */
    CU_ASSERT_EQUAL_FATAL(parse_text("{\"sessionId\":\"session\",\"projectId\":\"project\"}", &req),
                          0);
    CU_ASSERT_EQUAL(identity_pool_key(&req, key, 10), -ENAMETOOLONG);
    CU_ASSERT_EQUAL(identity_pool_key(&req, key, sizeof("project:session")), 0);
    CU_ASSERT_STRING_EQUAL(key, "project:session");
    run_request_release(&req);
}

/* ---- fresh user / minimal history ------------------------------------------------------ */

static void test_identity_fresh_user_and_minimal_history(void)
{
    static const struct {
        const char *json;
        bool fresh, minimal;
    } cases[] = {
        {MSGS(MSG_USER("hi")), true, true},
        {MSGS(MSG_USER("hi") "," MSG_ASSISTANT("yo") "," MSG_USER("again")), true, false},
        {MSGS(MSG_USER("hi") "," MSG_ASSISTANT("yo")), false, false},
        {MSGS(MSG_ASSISTANT("yo")), false, false},
        {"{}", false, false},
        {"{\"messages\":[]}", false, false},
        {MSGS(MSG_USER("")), false, false},
        {MSGS("{\"role\":\"user\",\"content\":[]}"), false, false},
        {MSGS("{\"role\":\"user\"}"), false, false},
        /* a tool result tail is not a fresh user turn, whatever its role */
        {MSGS("{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"toolCallId\":\"c1\","
              "\"output\":\"ok\"}]}"),
         false, false},
        {MSGS(MSG_USER("hi") ",{\"role\":\"tool\",\"content\":[{\"type\":\"tool_result\","
                             "\"toolCallId\":\"c1\",\"output\":\"ok\"}]}"),
         false, false},
        {MSGS("{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"approve\"},"
              "{\"type\":\"tool_result\",\"toolCallId\":\"c1\",\"output\":{\"approved\":true}}]}"),
         false, false},
        {MSGS("{\"role\":\"user\",\"content\":[{\"type\":\"tool_call\",\"toolCallId\":\"c1\"},"
              "{\"type\":\"text\",\"text\":\"x\"}]}"),
         false, false},
        /* media alone is content */
        {MSGS("{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"mimeType\":\"image/png\","
              "\"data\":\"AAAA\"}]}"),
         true, true},
        {MSGS("{\"role\":\"user\",\"content\":[{\"type\":\"attachment\",\"uri\":\"file:///a\"}]}"),
         true, true},
        {MSGS("{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\"},"
              "{\"type\":\"text\",\"text\":\"second\"}]}"),
         true, true},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct run_request req;

        CU_ASSERT_EQUAL_FATAL(parse_text(cases[i].json, &req), 0);
        if (identity_tail_is_fresh_user(&req) != cases[i].fresh ||
            identity_minimal_history(&req) != cases[i].minimal)
            fprintf(stderr, "\n  fresh/minimal case %zu: %s", i, cases[i].json);
        CU_ASSERT_EQUAL(identity_tail_is_fresh_user(&req), cases[i].fresh);
        CU_ASSERT_EQUAL(identity_minimal_history(&req), cases[i].minimal);
        run_request_release(&req);
    }
}

/* The config fingerprint of a request that differs only in its tool sections. */
static void fp(const char *custom, const char *callback, const char *servers, uint8_t out[32])
{
    char text[2048];

    snprintf(text, sizeof(text),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"customTools\":%s,"
             "\"toolCallback\":%s,\"mcpServers\":%s}",
             custom, callback, servers);
    CU_ASSERT_EQUAL_FATAL(config_fp(text, NULL, out), 0);
}

static void test_identity_config_fp_tool_set(void)
{
    uint8_t a[32], b[32];
    const char *tools = "[{\"name\":\"t\",\"callRef\":\"r\",\"timeoutMs\":5}]";
    const char *srv = "[{\"name\":\"s\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/\","
                      "\"headers\":{\"X-Key\":\"one\"}}}]";

    fp(tools, "{\"endpoint\":\"https://a/tools/call\",\"authorization\":\"Access one\"}", srv, a);
    /* a rotated authorization and a changed header value keep the fingerprint */
    fp(tools, "{\"endpoint\":\"https://a/tools/call\",\"authorization\":\"Access two\"}",
       "[{\"name\":\"s\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/\","
       "\"headers\":{\"x-key\":\"two\"}}}]",
       b);
    CU_ASSERT_EQUAL(memcmp(a, b, 32), 0);
    /* key order does not matter */
    fp("[{\"timeoutMs\":5,\"callRef\":\"r\",\"name\":\"t\"}]",
       "{\"authorization\":\"z\",\"endpoint\":\"https://a/tools/call\"}", srv, b);
    CU_ASSERT_EQUAL(memcmp(a, b, 32), 0);
    /* the tool set, the endpoint, a header name and the server policy do */
    fp("[{\"name\":\"t\",\"callRef\":\"r\",\"timeoutMs\":6}]",
       "{\"endpoint\":\"https://a/tools/call\"}", srv, b);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, 32), 0);
    fp(tools, "{\"endpoint\":\"https://b/tools/call\"}", srv, b);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, 32), 0);
    fp(tools, "{\"endpoint\":\"https://a/tools/call\"}",
       "[{\"name\":\"s\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/\","
       "\"headers\":{\"X-Other\":\"one\"}}}]",
       b);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, 32), 0);
    fp(tools, "{\"endpoint\":\"https://a/tools/call\"}",
       "[{\"name\":\"s\",\"connection\":{\"type\":\"http\",\"url\":\"https://x/\","
       "\"headers\":{\"X-Key\":\"one\"}},\"policy\":{\"permission\":\"deny\"}}]",
       b);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, 32), 0);
}

/*
 * Vectors: the digest of requests with every tool section shape (include lists, header names in
 * mixed case, credentials, policies, a null policy), as the runner has always computed it: a
 * warm session's follow-up must keep matching across runner versions.
 */
static const char TOOLS_VECTOR_SERVERS[] =
    "{\"harness\": \"pi_core\", \"sessionId\": \"s1\", \"projectId\": \"p1\", \"messages\": ["
    "{\"role\": \"user\", \"content\": \"hi\"}], \"mcpServers\": [{\"name\": \"gh\", \"connec"
    "tion\": {\"type\": \"http\", \"url\": \"https://mcp.gh/mcp\", \"headers\": {\"X-Org\": \""
    "acme\", \"b-Second\": \"2\", \"A-first\": \"1\"}, \"credentials\": [{\"binding\": {\"kin"
    "d\": \"header\", \"name\": \"Authorization\"}, \"value\": \"Bearer s\", \"usage\": \"opa"
    "que_http\"}, {\"binding\": {\"kind\": \"header\", \"name\": \"x-Zed\"}, \"value\": \"v\""
    "}]}, \"policy\": {\"tools\": {\"mode\": \"include\", \"names\": [\"a\", \"b.c\"]}, \"per"
    "mission\": \"ask\"}}, {\"name\": \"docs\", \"connection\": {\"type\": \"http\", \"url\":"
    " \"https://mcp.docs/mcp\"}, \"policy\": {\"tools\": {\"mode\": \"all\", \"names\": [\"ig"
    "nored\"]}}}, {\"name\": \"inc_empty\", \"connection\": {\"type\": \"http\", \"url\": \"h"
    "ttps://mcp.e/mcp\"}, \"policy\": {\"tools\": {\"mode\": \"include\"}, \"permission\": \""
    "deny\"}}, {\"name\": \"pol_null\", \"connection\": {\"type\": \"http\", \"url\": \"https"
    "://mcp.f/mcp\", \"headers\": {}}, \"policy\": null}, {\"name\": \"perm_only\", \"connect"
    "ion\": {\"type\": \"http\", \"url\": \"https://mcp.g/mcp\", \"credentials\": []}, \"poli"
    "cy\": {\"permission\": \"allow\"}}]}";
static const char TOOLS_VECTOR_ALL[] =
    "{\"harness\": \"pi_core\", \"sessionId\": \"s1\", \"projectId\": \"p1\", \"messages\": ["
    "{\"role\": \"user\", \"content\": \"hi\"}], \"toolCallback\": {\"endpoint\": \"https://c"
    "b.example.com/tools/call\", \"authorization\": \"Bearer x\"}, \"customTools\": [{\"name\""
    ": \"a\", \"callRef\": \"r\"}], \"mcpServers\": [{\"name\": \"s\", \"connection\": {\"typ"
    "e\": \"http\", \"url\": \"https://x/\", \"headers\": {\"X-Key\": \"one\"}}}]}";

static void test_identity_config_fp_tool_vectors(void)
{
    static const struct {
        const char *request;
        const char *hex;
    } vectors[] = {
        {TOOLS_VECTOR_SERVERS, "1fd29fd889f5bcef1c132b5f89657bd74e57b35acd1b26d6c78ffc739df4e21d"},
        {TOOLS_VECTOR_ALL, "6d492fe2f01e1990940517c058d4f4bc1962eb88f044ae2656870caa14865e86"},
    };
    uint8_t d[IDENTITY_DIGEST_LEN];
    char hex[2 * IDENTITY_DIGEST_LEN + 1];

    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
        CU_ASSERT_EQUAL_FATAL(config_fp(vectors[i].request, NULL, d), 0);
        util_hex_encode(d, sizeof(d), hex);
        CU_ASSERT_STRING_EQUAL(hex, vectors[i].hex);
    }
}

/* The user side of a history: tool-call ids (another record's own) do not count, user text does. */
static void test_identity_user_fp(void)
{
    uint8_t a[IDENTITY_DIGEST_LEN], b[IDENTITY_DIGEST_LEN];
    struct run_request req;

    CU_ASSERT_EQUAL_FATAL(
        parse_text(
            MSGS(MSG_USER("q1") ",{\"role\":\"assistant\",\"content\":[{\"type\":"
                                "\"tool_call\",\"toolCallId\":\"call_a\"}]}," MSG_USER("q2")),
            &req),
        0);
    CU_ASSERT_EQUAL(identity_user_fp(req.messages, req.nmessages, a), 0);
    run_request_release(&req);
    CU_ASSERT_EQUAL_FATAL(
        parse_text(
            MSGS(MSG_USER("q1") ",{\"role\":\"assistant\",\"content\":[{\"type\":"
                                "\"tool_call\",\"toolCallId\":\"uuid5-of-it\"}]}," MSG_USER("q2")),
            &req),
        0);
    CU_ASSERT_EQUAL(identity_user_fp(req.messages, req.nmessages, b), 0);
    CU_ASSERT_TRUE(same(a, b));
    /* the full history fingerprint tells them apart */
    CU_ASSERT_EQUAL(identity_history_fp(req.messages, req.nmessages, NULL, 0, b), 0);
    CU_ASSERT_FALSE(same(a, b));
    run_request_release(&req);
    CU_ASSERT_EQUAL_FATAL(parse_text(MSGS(MSG_USER("q1") "," MSG_USER("q2!")), &req), 0);
    CU_ASSERT_EQUAL(identity_user_fp(req.messages, req.nmessages, b), 0);
    CU_ASSERT_FALSE(same(a, b));
    run_request_release(&req);
}

CU_TestInfo identity_tests[] = {
    {"test_identity_canonical_sorts_and_drops_nulls",
     test_identity_canonical_sorts_and_drops_nulls},
    {"test_identity_canonical_ignores_key_order", test_identity_canonical_ignores_key_order},
    {"test_identity_config_fp_key_order_and_nulls", test_identity_config_fp_key_order_and_nulls},
    {"test_identity_config_fp_changes", test_identity_config_fp_changes},
    {"test_identity_config_fp_ignores", test_identity_config_fp_ignores},
    {"test_identity_config_fp_harness_mode_codex_only",
     test_identity_config_fp_harness_mode_codex_only},
    {"test_identity_config_fp_sandbox", test_identity_config_fp_sandbox},
    {"test_identity_config_fp_minimal_requests", test_identity_config_fp_minimal_requests},
    {"test_identity_config_fp_tool_set", test_identity_config_fp_tool_set},
    {"test_identity_config_fp_tool_vectors", test_identity_config_fp_tool_vectors},
    {"test_identity_credential_epoch", test_identity_credential_epoch},
    {"test_identity_credential_epoch_hides_value", test_identity_credential_epoch_hides_value},
    {"test_identity_history_fp_rules", test_identity_history_fp_rules},
    {"test_identity_history_fp_continuation", test_identity_history_fp_continuation},
    {"test_identity_user_fp", test_identity_user_fp},
    {"test_identity_pool_key", test_identity_pool_key},
    {"test_identity_fresh_user_and_minimal_history", test_identity_fresh_user_and_minimal_history},
    CU_TEST_INFO_NULL,
};
