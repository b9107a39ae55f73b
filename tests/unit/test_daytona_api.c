/*
 * daytona_api — configuration (required values, plain http only on loopback, snapshot xor
 * image), the create body (labels, env, intervals, every network mapping and its limits),
 * sandbox descriptions (hostile ids and URLs refused), network convergence, and HTTP exchanges
 * against a canned loopback server: 429 backoff on Retry-After(-scope) then success or a
 * capacity error, status mapping, the API key scrubbed from error text, the bulk upload's
 * part order and its partial failure.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../../engine/jsonx.h"
#include "../../engine/provider/daytona_api.h"
#include "../../engine/util.h"
#include "canned_server.h"
#include "suites.h"

#define KEY "k3y-very-secret-0123456789"

static const char *vars[16][2];

static const char *lookup(const char *name)
{
    for (size_t i = 0; i < 16 && vars[i][0]; i++) {
        if (strcmp(vars[i][0], name) == 0)
            return vars[i][1];
    }
    return NULL;
}

static void set_vars(const char *url, const char *key)
{
    memset(vars, 0, sizeof(vars));
    vars[0][0] = "AGENT_RUNNER_DAYTONA_API_URL";
    vars[0][1] = url;
    vars[1][0] = "AGENT_RUNNER_DAYTONA_API_KEY";
    vars[1][1] = key;
}

static void add_var(const char *name, const char *value)
{
    size_t i = 0;

    while (vars[i][0])
        i++;
    vars[i][0] = name;
    vars[i][1] = value;
}

static void test_daytona_api_config(void)
{
    struct daytona_config cfg;
    char err[256];

    set_vars(NULL, KEY);
    CU_ASSERT_EQUAL(daytona_config_load(lookup, &cfg, err, sizeof(err)), -ENOENT);
    CU_ASSERT(strstr(err, "AGENT_RUNNER_DAYTONA_API_URL") != NULL);
    set_vars("https://app.daytona.io/api/", NULL);
    CU_ASSERT_EQUAL(daytona_config_load(lookup, &cfg, err, sizeof(err)), -ENOENT);
    CU_ASSERT(strstr(err, "AGENT_RUNNER_DAYTONA_API_KEY") != NULL);
    set_vars("https://app.daytona.io/api/", KEY);
    CU_ASSERT_EQUAL(daytona_config_load(lookup, &cfg, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(cfg.api_url, "https://app.daytona.io/api");
    CU_ASSERT_EQUAL(cfg.poll_step_ms, 250);
    CU_ASSERT_EQUAL(cfg.max_429_retries, 3);
    daytona_config_wipe(&cfg);
    CU_ASSERT_EQUAL(cfg.api_key[0], '\0');
    /* the key must not cross a network in clear */
    set_vars("http://daytona.example.com/api", KEY);
    CU_ASSERT_EQUAL(daytona_config_load(lookup, &cfg, err, sizeof(err)), -EINVAL);
    CU_ASSERT(strstr(err, "loopback") != NULL);
    CU_ASSERT(strstr(err, KEY) == NULL);
    set_vars("http://127.0.0.1:8080/api", KEY);
    CU_ASSERT_EQUAL(daytona_config_load(lookup, &cfg, err, sizeof(err)), 0);
    set_vars("ftp://x/api", KEY);
    CU_ASSERT_EQUAL(daytona_config_load(lookup, &cfg, err, sizeof(err)), -EINVAL);
    set_vars("https://user@evil/api", KEY);
    CU_ASSERT_EQUAL(daytona_config_load(lookup, &cfg, err, sizeof(err)), -EINVAL);
    set_vars("https://app.daytona.io/api", "bad\nkey");
    CU_ASSERT_EQUAL(daytona_config_load(lookup, &cfg, err, sizeof(err)), -EINVAL);
    set_vars("https://app.daytona.io/api", KEY);
    add_var("AGENT_RUNNER_DAYTONA_SNAPSHOT", "snap");
    add_var("AGENT_RUNNER_DAYTONA_IMAGE", "debian:12");
    CU_ASSERT_EQUAL(daytona_config_load(lookup, &cfg, err, sizeof(err)), -EINVAL);
    CU_ASSERT(strstr(err, "not both") != NULL);
}

static json_object *body_for(const struct daytona_config *cfg,
                             const struct daytona_create_params *p, int want, char *err,
                             size_t errlen)
{
    json_object *body = NULL;
    int r = daytona_create_body(cfg, p, &body, err, errlen);

    CU_ASSERT_EQUAL(r, want);
    if (r != want)
        fprintf(stderr, "\n  create body: %d %s\n", r, err);
    return body;
}

static void test_daytona_api_create_body(void)
{
    struct daytona_config cfg = {.snapshot = "agent-sandbox-v1", .target = "eu"};
    struct daytona_kv labels[] = {{"agent-runner-instance", "i1"}, {"agent-runner-pool", "d1"}};
    struct daytona_kv env[] = {{"PI_OFFLINE", "1"}};
    struct daytona_create_params p = {
        .name = "ar-abc",
        .labels = labels,
        .nlabels = 2,
        .env = env,
        .nenv = 1,
        .auto_stop_min = 5,
        .auto_archive_min = 0,
        .auto_delete_min = 1440,
    };
    json_object *b;
    char err[256];

    b = body_for(&cfg, &p, 0, err, sizeof(err));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(b, "name")), "ar-abc");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(b, "snapshot")), "agent-sandbox-v1");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(b, "target")), "eu");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(b, "labels"), "agent-runner-pool")), "d1");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(b, "env"), "PI_OFFLINE")), "1");
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(b, "autoStopInterval")), 5);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(b, "autoArchiveInterval")), 0);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(b, "autoDeleteInterval")), 1440);
    CU_ASSERT_PTR_NULL(jsonx_get(b, "networkBlockAll")); /* network on: no field */
    CU_ASSERT_PTR_NULL(jsonx_get(b, "buildInfo"));
    CU_ASSERT_FALSE(json_object_get_boolean(jsonx_get(b, "public")));
    json_object_put(b);
    /* an image instead of a snapshot */
    memset(cfg.snapshot, 0, sizeof(cfg.snapshot));
    snprintf(cfg.image, sizeof(cfg.image), "debian:12");
    p.auto_archive_min = DAYTONA_INTERVAL_UNSET;
    b = body_for(&cfg, &p, 0, err, sizeof(err));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(b, "buildInfo"), "dockerfileContent")),
                           "FROM debian:12\n");
    CU_ASSERT_PTR_NULL(jsonx_get(b, "autoArchiveInterval"));
    json_object_put(b);
    /* bad names, env names and intervals are refused */
    p.name = "../x";
    b = body_for(&cfg, &p, -EINVAL, err, sizeof(err));
    p.name = "ar-abc";
    env[0].name = "BAD-NAME";
    b = body_for(&cfg, &p, -EINVAL, err, sizeof(err));
    env[0].name = "PI_OFFLINE";
    p.auto_stop_min = -3;
    b = body_for(&cfg, &p, -EINVAL, err, sizeof(err));
    (void)b;
}

static void test_daytona_api_network_mapping(void)
{
    struct daytona_config cfg = {0};
    const char *allow[12] = {"10.0.0.0/8", " 192.168.1.1 ", "API.Example.com", "*.npmjs.org",
                             "10.0.0.0/8"};
    const char *always[] = {"127.0.0.1"};
    struct daytona_create_params p = {.auto_stop_min = DAYTONA_INTERVAL_UNSET,
                                      .auto_archive_min = DAYTONA_INTERVAL_UNSET,
                                      .auto_delete_min = DAYTONA_INTERVAL_UNSET};
    json_object *b;
    char err[256];

    /* off: block everything */
    p.network = NETWORK_OFF;
    b = body_for(&cfg, &p, 0, err, sizeof(err));
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_get(b, "networkBlockAll")));
    CU_ASSERT_PTR_NULL(jsonx_get(b, "networkAllowList"));
    json_object_put(b);
    /* off, but the model endpoint stays reachable: only it */
    p.always_allow = always;
    p.nalways_allow = 1;
    b = body_for(&cfg, &p, 0, err, sizeof(err));
    CU_ASSERT_FALSE(json_object_get_boolean(jsonx_get(b, "networkBlockAll")));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(b, "networkAllowList")), "127.0.0.1/32");
    json_object_put(b);
    /* allowlist: CIDRs, bare addresses as /32, host names lower-cased, duplicates merged */
    p.network = NETWORK_ALLOWLIST;
    p.allow = allow;
    p.nallow = 5;
    b = body_for(&cfg, &p, 0, err, sizeof(err));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(b, "networkAllowList")),
                           "10.0.0.0/8,192.168.1.1/32,127.0.0.1/32");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(b, "domainAllowList")),
                           "api.example.com,*.npmjs.org");
    json_object_put(b);
    /* an empty allowlist blocks all (Agenta's mapping) */
    p.nallow = 0;
    p.nalways_allow = 0;
    b = body_for(&cfg, &p, 0, err, sizeof(err));
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_get(b, "networkBlockAll")));
    json_object_put(b);
    /* what Daytona cannot enforce is refused, never widened */
    {
        static const char *bad[] = {"::1",          "fe80::/10",         "https://x.com",
                                    "x.com:443",    "10.0.0.0/33",       "300.1.1.1",
                                    "",             "a..b.com",          "-x.com",
                                    "1.2.3.4/",     "x com"};

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            p.allow = &bad[i];
            p.nallow = 1;
            err[0] = '\0';
            b = body_for(&cfg, &p, -EINVAL, err, sizeof(err));
            CU_ASSERT(strstr(err, "sandboxPermission.network.allowlist[0]") != NULL);
        }
    }
    /* at most 10 of each list */
    {
        char nets[11][24];
        const char *many[11];

        for (int i = 0; i < 11; i++) {
            snprintf(nets[i], sizeof(nets[i]), "10.0.%d.0/24", i);
            many[i] = nets[i];
        }
        p.allow = many;
        p.nallow = 10;
        b = body_for(&cfg, &p, 0, err, sizeof(err));
        json_object_put(b);
        p.nallow = 11;
        b = body_for(&cfg, &p, -EINVAL, err, sizeof(err));
        CU_ASSERT(strstr(err, "at most 10") != NULL);
    }
}

static const char *DTO =
    "{\"id\":\"0b5c7a44-1d7e-4f44-9d2a-1a2b3c4d5e6f\",\"name\":\"ar-x\",\"state\":\"stopped\","
    "\"desiredState\":\"stopped\",\"errorReason\":null,\"recoverable\":false,"
    "\"autoStopInterval\":5,\"autoArchiveInterval\":43200,\"autoDeleteInterval\":1440,"
    "\"networkBlockAll\":false,\"networkAllowList\":\"10.0.0.0/8, 127.0.0.1/32\","
    "\"labels\":{\"agent-runner-pool\":\"abc\",\"n\":7},"
    "\"toolboxProxyUrl\":\"http://127.0.0.1:9/toolbox/\"}";

static void test_daytona_api_sandbox_parse(void)
{
    struct daytona_sandbox sb;
    json_object *o = test_json(DTO);
    char err[128];

    CU_ASSERT_FATAL(o != NULL);
    CU_ASSERT_EQUAL(daytona_sandbox_parse(o, &sb, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(sb.id, "0b5c7a44-1d7e-4f44-9d2a-1a2b3c4d5e6f");
    CU_ASSERT_EQUAL(sb.state, DAYTONA_STATE_STOPPED);
    CU_ASSERT_EQUAL(sb.auto_stop_min, 5);
    CU_ASSERT_STRING_EQUAL(sb.toolbox,
                           "http://127.0.0.1:9/toolbox/0b5c7a44-1d7e-4f44-9d2a-1a2b3c4d5e6f");
    CU_ASSERT_STRING_EQUAL(TEST_STR(daytona_sandbox_label(&sb, "agent-runner-pool")), "abc");
    CU_ASSERT_PTR_NULL(daytona_sandbox_label(&sb, "n")); /* not a string: dropped */
    daytona_sandbox_release(&sb);
    json_object_put(o);
    /* hostile descriptions */
    {
        static const char *bad[] = {
            "{\"id\":\"../../etc\",\"state\":\"started\"}",
            "{\"id\":\"a b\",\"state\":\"started\"}",
            "{\"id\":\"x\"}",
            "{\"id\":\"x\",\"state\":\"started\",\"toolboxProxyUrl\":\"file:///etc\"}",
            "{\"id\":\"x\",\"state\":\"started\",\"toolboxProxyUrl\":\"http://a b\"}",
            "[]",
        };

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            o = test_json(bad[i]);
            CU_ASSERT_EQUAL(daytona_sandbox_parse(o, &sb, err, sizeof(err)), -EBADMSG);
            json_object_put(o);
        }
    }
    o = test_json("{\"id\":\"x\",\"state\":\"hibernating\"}");
    CU_ASSERT_EQUAL(daytona_sandbox_parse(o, &sb, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(sb.state, DAYTONA_STATE_OTHER);
    daytona_sandbox_release(&sb);
    json_object_put(o);
}

static void test_daytona_api_network_convergence(void)
{
    struct daytona_sandbox sb = {0};
    json_object *want = test_json("{\"networkBlockAll\":false,"
                                  "\"networkAllowList\":\"127.0.0.1/32,10.0.0.0/8\"}");
    json_object *settings = NULL;

    snprintf(sb.network_allow_list, sizeof(sb.network_allow_list), " 10.0.0.0/8 ,127.0.0.1/32");
    CU_ASSERT_TRUE(daytona_network_matches(&sb, want));
    snprintf(sb.network_allow_list, sizeof(sb.network_allow_list), "10.0.0.0/8");
    CU_ASSERT_FALSE(daytona_network_matches(&sb, want));
    snprintf(sb.network_allow_list, sizeof(sb.network_allow_list),
             "10.0.0.0/8,127.0.0.1/32,1.1.1.1/32");
    CU_ASSERT_FALSE(daytona_network_matches(&sb, want));
    sb.network_block_all = true;
    CU_ASSERT_FALSE(daytona_network_matches(&sb, want));
    CU_ASSERT_EQUAL(daytona_network_settings(want, &settings), 0);
    CU_ASSERT_FALSE(json_object_get_boolean(jsonx_get(settings, "networkBlockAll")));
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(settings, "networkAllowList")),
                           "127.0.0.1/32,10.0.0.0/8");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(settings, "domainAllowList")), "");
    json_object_put(settings);
    json_object_put(want);
    /* a sandbox created open must not be reused as-is by a run that wants the network off */
    want = test_json("{\"networkBlockAll\":true}");
    sb.network_block_all = false;
    sb.network_allow_list[0] = '\0';
    CU_ASSERT_FALSE(daytona_network_matches(&sb, want));
    CU_ASSERT_EQUAL(daytona_network_settings(want, &settings), 0);
    CU_ASSERT_TRUE(json_object_get_boolean(jsonx_get(settings, "networkBlockAll")));
    json_object_put(settings);
    json_object_put(want);
    want = test_json("{}"); /* network on */
    CU_ASSERT_TRUE(daytona_network_matches(&sb, want));
    json_object_put(want);
}

static int client_for(struct canned_server *s, struct daytona_client **ret)
{
    struct daytona_config cfg;
    char url[128], err[256];

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/api", s->port);
    set_vars(url, KEY);
    if (daytona_config_load(lookup, &cfg, err, sizeof(err)) < 0)
        return -EINVAL;
    cfg.retry_cap_ms = 50; /* Retry-After is obeyed up to the cap: keep the test fast */
    cfg.request_timeout_ms = 5000;
    return daytona_client_new(&cfg, ret);
}

static char *reply(const char *status, const char *extra_headers, const char *body)
{
    char *out = NULL;
    size_t n = strlen(body);

    if (asprintf(&out, "HTTP/1.1 %s\r\nContent-Type: application/json\r\n%sContent-Length: "
                       "%zu\r\n\r\n%s",
                 status, extra_headers, n, body) < 0)
        return NULL;
    return out;
}

static void test_daytona_api_429_backoff_then_success(void)
{
    char *r429 = reply("429 Too Many Requests",
                       "Retry-After-sandbox-lifecycle: 1\r\nX-RateLimit-Remaining-sandbox-"
                       "lifecycle: 0\r\n",
                       "{\"statusCode\":429,\"message\":\"Rate limit exceeded\"}");
    char *ok = reply("200 OK", "", DTO);
    struct canned_reply replies[] = {{r429, 0}, {r429, 0}, {ok, 0}};
    struct canned_server s;
    struct daytona_client *c = NULL;
    struct daytona_sandbox sb = {0};

    CU_ASSERT_FATAL(canned_start(&s, replies, 3) == 0);
    CU_ASSERT_FATAL(client_for(&s, &c) == 0);
    CU_ASSERT_EQUAL(daytona_sandbox_start(c, "sb-1", &sb), 0);
    CU_ASSERT_EQUAL(daytona_client_throttled(c), 2);
    CU_ASSERT_EQUAL(sb.state, DAYTONA_STATE_STOPPED);
    daytona_sandbox_release(&sb);
    daytona_client_free(c);
    canned_stop(&s);
    /* three identical POSTs with our headers; the key only as the bearer token */
    {
        const char *req = buf_str(&s.requests), *p = req;
        int n = 0;

        while ((p = strstr(p, "POST /api/sandbox/sb-1/start HTTP/1.1"))) {
            n++;
            p++;
        }
        CU_ASSERT_EQUAL(n, 3);
        CU_ASSERT(strstr(req, "Authorization: Bearer " KEY "\r\n") != NULL);
        CU_ASSERT(strstr(req, "X-Daytona-SDK-Version: 0.198.0\r\n") != NULL);
    }
    canned_release(&s);
    free(r429);
    free(ok);
}

static void test_daytona_api_429_exhausted_is_capacity(void)
{
    char *r429 = reply("429 Too Many Requests", "Retry-After: 1\r\n",
                       "{\"statusCode\":429,\"message\":\"Rate limit exceeded\"}");
    struct canned_reply replies[] = {{r429, 0}, {r429, 0}, {r429, 0}, {r429, 0}};
    struct canned_server s;
    struct daytona_client *c = NULL;

    CU_ASSERT_FATAL(canned_start(&s, replies, 4) == 0);
    CU_ASSERT_FATAL(client_for(&s, &c) == 0);
    CU_ASSERT_EQUAL(daytona_sandbox_stop(c, "sb-1", false), DAYTONA_E_CAPACITY);
    CU_ASSERT_EQUAL(daytona_client_throttled(c), 3);
    CU_ASSERT_EQUAL(daytona_client_status(c), 429);
    CU_ASSERT(strncmp(daytona_strerror(DAYTONA_E_CAPACITY), "sandbox_capacity", 16) == 0);
    daytona_client_free(c);
    canned_stop(&s);
    canned_release(&s);
    free(r429);
}

static void test_daytona_api_errors_mapped_and_key_scrubbed(void)
{
    char *e404 = reply("404 Not Found", "", "{\"statusCode\":404,\"message\":\"Sandbox with ID or "
                                            "name x not found\"}");
    char *e409 = reply("409 Conflict", "", "{\"message\":\"Sandbox state change in progress\"}");
    char *e400 = reply("400 Bad Request", "",
                       "{\"message\":[\"invalid token " KEY " for org\"],\"error\":\"Bad\"}");
    char *e500 = reply("500 Internal Server Error", "", "not json");
    struct canned_reply replies[] = {{e404, 0}, {e404, 0}, {e409, 0}, {e400, 0}, {e500, 0}};
    struct canned_server s;
    struct daytona_client *c = NULL;
    struct daytona_sandbox sb = {0};

    CU_ASSERT_FATAL(canned_start(&s, replies, 5) == 0);
    CU_ASSERT_FATAL(client_for(&s, &c) == 0);
    CU_ASSERT_EQUAL(daytona_sandbox_get(c, "x", &sb), -ENOENT);
    CU_ASSERT(strstr(daytona_client_message(c), "not found") != NULL);
    CU_ASSERT_EQUAL(daytona_sandbox_delete(c, "x"), 0); /* 404 = deleted */
    CU_ASSERT_EQUAL(daytona_sandbox_start(c, "x", NULL), -EBUSY);
    CU_ASSERT_EQUAL(daytona_sandbox_archive(c, "x"), -EINVAL);
    CU_ASSERT(strstr(daytona_client_message(c), KEY) == NULL);
    CU_ASSERT(strstr(daytona_client_message(c), "invalid token *** for org") != NULL);
    CU_ASSERT_EQUAL(daytona_sandbox_recover(c, "x"), DAYTONA_E_SERVER);
    CU_ASSERT_EQUAL(daytona_client_status(c), 500);
    /* ids that would change the URL are refused before any request */
    CU_ASSERT_EQUAL(daytona_sandbox_get(c, "../x", &sb), -EINVAL);
    CU_ASSERT_EQUAL(daytona_sandbox_delete(c, "x?y"), -EINVAL);
    daytona_client_free(c);
    canned_stop(&s);
    canned_release(&s);
    free(e404);
    free(e409);
    free(e400);
    free(e500);
}

static void test_daytona_api_bulk_upload(void)
{
    char *ok = reply("200 OK", "", "{\"files\":[]}");
    char *partial = reply("400 Bad Request", "",
                          "{\"errors\":[{\"path\":\"/home/daytona/b\",\"error\":\"permission "
                          "denied\"}],\"files\":[]}");
    struct canned_reply replies[] = {{ok, 0}, {partial, 0}};
    struct daytona_file files[] = {{"/home/daytona/a.json", "{\"a\":1}", 7},
                                   {"/home/daytona/b", "bee", 3}};
    struct canned_server s;
    struct daytona_client *c = NULL;
    const char *req, *p0, *f0, *p1, *f1;

    CU_ASSERT_FATAL(canned_start(&s, replies, 2) == 0);
    CU_ASSERT_FATAL(client_for(&s, &c) == 0);
    CU_ASSERT_EQUAL(daytona_files_upload(c, "http://127.0.0.1:1/x", files, 2), -ECONNREFUSED);
    {
        char tb[128];

        snprintf(tb, sizeof(tb), "http://127.0.0.1:%d/toolbox/sb-1", s.port);
        CU_ASSERT_EQUAL(daytona_files_upload(c, tb, files, 2), 0);
        CU_ASSERT_EQUAL(daytona_files_upload(c, tb, files, 2), -EIO);
        CU_ASSERT(strstr(daytona_client_message(c), "/home/daytona/b") != NULL);
        CU_ASSERT(strstr(daytona_client_message(c), "permission denied") != NULL);
    }
    daytona_client_free(c);
    canned_stop(&s);
    req = buf_str(&s.requests);
    CU_ASSERT(strstr(req, "POST /toolbox/sb-1/files/bulk-upload HTTP/1.1") != NULL);
    p0 = strstr(req, "name=\"files[0].path\"");
    f0 = strstr(req, "name=\"files[0].file\"; filename=\"/home/daytona/a.json\"");
    p1 = strstr(req, "name=\"files[1].path\"");
    f1 = strstr(req, "name=\"files[1].file\"; filename=\"/home/daytona/b\"");
    CU_ASSERT(p0 && f0 && p1 && f1);
    CU_ASSERT(p0 < f0 && f0 < p1 && p1 < f1); /* each .path before its .file */
    canned_release(&s);
    free(ok);
    free(partial);
}

/* https: the CA file is honoured, and without it a self-signed server is refused. */
static void test_daytona_api_https(void)
{
    char dir[] = "/tmp/ar-unit-https-XXXXXX", cert[512], key[512], url[128], err[256];
    char *ok = reply("200 OK", "", DTO);
    struct canned_reply replies[] = {{ok, 0}};
    struct canned_server s;
    struct daytona_config cfg;
    struct daytona_client *c = NULL;
    struct daytona_sandbox sb = {0};

    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
    CU_ASSERT_FATAL(canned_make_cert(dir, "api", "IP:127.0.0.1", cert, key) == 0);
    for (int round = 0; round < 2; round++) {
        CU_ASSERT_FATAL(canned_start_tls(&s, replies, 1, cert, key) == 0);
        snprintf(url, sizeof(url), "https://127.0.0.1:%d/api", s.port);
        set_vars(url, KEY);
        if (round == 0)
            add_var("AGENT_RUNNER_DAYTONA_CA_FILE", cert);
        CU_ASSERT_FATAL(daytona_config_load(lookup, &cfg, err, sizeof(err)) == 0);
        cfg.request_timeout_ms = 5000;
        CU_ASSERT_FATAL(daytona_client_new(&cfg, &c) == 0);
        if (round == 0) {
            CU_ASSERT_EQUAL(daytona_sandbox_get(c, "sb-1", &sb), 0);
            CU_ASSERT_EQUAL(sb.state, DAYTONA_STATE_STOPPED);
            daytona_sandbox_release(&sb);
        } else {
            CU_ASSERT_EQUAL(daytona_sandbox_get(c, "sb-1", &sb), -EPROTO);
            CU_ASSERT(strstr(daytona_client_message(c), KEY) == NULL);
        }
        daytona_client_free(c);
        canned_stop(&s); /* after a refused handshake the server gives up after 5 s */
        if (round == 0)
            CU_ASSERT(strstr(buf_str(&s.requests), "GET /api/sandbox/sb-1 HTTP/1.1") != NULL);
        canned_release(&s);
    }
    free(ok);
    (void)rm_rf(dir);
}

CU_TestInfo daytona_api_tests[] = {
    {"test_daytona_api_https", test_daytona_api_https},
    {"test_daytona_api_config", test_daytona_api_config},
    {"test_daytona_api_create_body", test_daytona_api_create_body},
    {"test_daytona_api_network_mapping", test_daytona_api_network_mapping},
    {"test_daytona_api_sandbox_parse", test_daytona_api_sandbox_parse},
    {"test_daytona_api_network_convergence", test_daytona_api_network_convergence},
    {"test_daytona_api_429_backoff_then_success", test_daytona_api_429_backoff_then_success},
    {"test_daytona_api_429_exhausted_is_capacity", test_daytona_api_429_exhausted_is_capacity},
    {"test_daytona_api_errors_mapped_and_key_scrubbed",
     test_daytona_api_errors_mapped_and_key_scrubbed},
    {"test_daytona_api_bulk_upload", test_daytona_api_bulk_upload},
    CU_TEST_INFO_NULL,
};
