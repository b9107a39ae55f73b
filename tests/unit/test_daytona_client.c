/*
 * daytona_client — configuration (required values, plain http only on loopback, snapshot xor
 * image), https with a given CA, and exchanges against a canned loopback server: 429 backoff
 * on Retry-After(-scope) then success or a capacity error, status mapping, the API key
 * scrubbed from error text.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fstree.h"
#include "base/jsonx.h"
#include "base/util.h"
#include "daytona_fixture.h"
#include "provider/daytona/daytona_api.h"
#include "suites.h"

static void test_daytona_client_config(void)
{
    struct daytona_config cfg;
    char err[256];

    daytona_fixture_vars(NULL, DAYTONA_FIXTURE_KEY);
    CU_ASSERT_EQUAL(daytona_config_load(daytona_fixture_lookup, &cfg, err, sizeof(err)), -ENOENT);
    CU_ASSERT(strstr(err, "AGENT_RUNNER_DAYTONA_API_URL") != NULL);
    daytona_fixture_vars("https://app.daytona.io/api/", NULL);
    CU_ASSERT_EQUAL(daytona_config_load(daytona_fixture_lookup, &cfg, err, sizeof(err)), -ENOENT);
    CU_ASSERT(strstr(err, "AGENT_RUNNER_DAYTONA_API_KEY") != NULL);
    daytona_fixture_vars("https://app.daytona.io/api/", DAYTONA_FIXTURE_KEY);
    CU_ASSERT_EQUAL(daytona_config_load(daytona_fixture_lookup, &cfg, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(cfg.api_url, "https://app.daytona.io/api");
    CU_ASSERT_EQUAL(cfg.poll_step_ms, 250);
    CU_ASSERT_EQUAL(cfg.max_429_retries, 3);
    daytona_config_wipe(&cfg);
    CU_ASSERT_EQUAL(cfg.api_key[0], '\0');
    /* the key must not cross a network in clear */
    daytona_fixture_vars("http://daytona.example.com/api", DAYTONA_FIXTURE_KEY);
    CU_ASSERT_EQUAL(daytona_config_load(daytona_fixture_lookup, &cfg, err, sizeof(err)), -EINVAL);
    CU_ASSERT(strstr(err, "loopback") != NULL);
    CU_ASSERT(strstr(err, DAYTONA_FIXTURE_KEY) == NULL);
    daytona_fixture_vars("http://127.0.0.1:8080/api", DAYTONA_FIXTURE_KEY);
    CU_ASSERT_EQUAL(daytona_config_load(daytona_fixture_lookup, &cfg, err, sizeof(err)), 0);
    daytona_fixture_vars("ftp://x/api", DAYTONA_FIXTURE_KEY);
    CU_ASSERT_EQUAL(daytona_config_load(daytona_fixture_lookup, &cfg, err, sizeof(err)), -EINVAL);
    daytona_fixture_vars("https://user@evil/api", DAYTONA_FIXTURE_KEY);
    CU_ASSERT_EQUAL(daytona_config_load(daytona_fixture_lookup, &cfg, err, sizeof(err)), -EINVAL);
    daytona_fixture_vars("https://app.daytona.io/api", "bad\nkey");
    CU_ASSERT_EQUAL(daytona_config_load(daytona_fixture_lookup, &cfg, err, sizeof(err)), -EINVAL);
    daytona_fixture_vars("https://app.daytona.io/api", DAYTONA_FIXTURE_KEY);
    daytona_fixture_var("AGENT_RUNNER_DAYTONA_SNAPSHOT", "snap");
    daytona_fixture_var("AGENT_RUNNER_DAYTONA_IMAGE", "debian:12");
    CU_ASSERT_EQUAL(daytona_config_load(daytona_fixture_lookup, &cfg, err, sizeof(err)), -EINVAL);
    CU_ASSERT(strstr(err, "not both") != NULL);
}

/* https: the CA file is honoured, and without it a self-signed server is refused. */
static void test_daytona_client_https(void)
{
    char dir[] = "/tmp/ar-unit-https-XXXXXX", cert[512], key[512], url[128], err[256];
    char *ok = daytona_fixture_reply("200 OK", "", daytona_fixture_dto);
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
        daytona_fixture_vars(url, DAYTONA_FIXTURE_KEY);
        if (round == 0)
            daytona_fixture_var("AGENT_RUNNER_DAYTONA_CA_FILE", cert);
        CU_ASSERT_FATAL(daytona_config_load(daytona_fixture_lookup, &cfg, err, sizeof(err)) == 0);
        cfg.request_timeout_ms = 5000;
        CU_ASSERT_FATAL(daytona_client_new(&cfg, &c) == 0);
        if (round == 0) {
            CU_ASSERT_EQUAL(daytona_sandbox_get(c, "sb-1", &sb), 0);
            CU_ASSERT_EQUAL(sb.state, DAYTONA_STATE_STOPPED);
            daytona_sandbox_release(&sb);
        } else {
            CU_ASSERT_EQUAL(daytona_sandbox_get(c, "sb-1", &sb), -EPROTO);
            CU_ASSERT(strstr(daytona_client_message(c), DAYTONA_FIXTURE_KEY) == NULL);
        }
        daytona_client_free(c);
        canned_stop(&s); /* after a refused handshake the server gives up after 5 s */
        if (round == 0)
            CU_ASSERT(strstr(buf_str(&s.requests), "GET /api/sandbox/sb-1 HTTP/1.1") != NULL);
        canned_release(&s);
    }
    free(ok);
    (void)fstree_remove(dir);
}

static void test_daytona_client_429_backoff_then_success(void)
{
    char *r429 =
        daytona_fixture_reply("429 Too Many Requests",
                              "Retry-After-sandbox-lifecycle: 1\r\nX-RateLimit-Remaining-sandbox-"
                              "lifecycle: 0\r\n",
                              "{\"statusCode\":429,\"message\":\"Rate limit exceeded\"}");
    char *ok = daytona_fixture_reply("200 OK", "", daytona_fixture_dto);
    struct canned_reply replies[] = {{r429, 0}, {r429, 0}, {ok, 0}};
    struct canned_server s;
    struct daytona_client *c = NULL;
    struct daytona_sandbox sb = {0};

    CU_ASSERT_FATAL(canned_start(&s, replies, 3) == 0);
    CU_ASSERT_FATAL(daytona_fixture_client(&s, &c) == 0);
    CU_ASSERT_EQUAL(daytona_sandbox_start(c, "sb-1", &sb), 0);
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
        CU_ASSERT(strstr(req, "Authorization: Bearer " DAYTONA_FIXTURE_KEY "\r\n") != NULL);
        CU_ASSERT(strstr(req, "X-Daytona-SDK-Version: 0.198.0\r\n") != NULL);
    }
    canned_release(&s);
    free(r429);
    free(ok);
}

static void test_daytona_client_429_exhausted_is_capacity(void)
{
    char *r429 = daytona_fixture_reply("429 Too Many Requests", "Retry-After: 1\r\n",
                                       "{\"statusCode\":429,\"message\":\"Rate limit exceeded\"}");
    struct canned_reply replies[] = {{r429, 0}, {r429, 0}, {r429, 0}, {r429, 0}};
    struct canned_server s;
    struct daytona_client *c = NULL;

    CU_ASSERT_FATAL(canned_start(&s, replies, 4) == 0);
    CU_ASSERT_FATAL(daytona_fixture_client(&s, &c) == 0);
    CU_ASSERT_EQUAL(daytona_sandbox_stop(c, "sb-1", false), DAYTONA_E_CAPACITY);
    CU_ASSERT(strstr(daytona_client_message(c), "retries exhausted") != NULL);
    CU_ASSERT(strncmp(daytona_strerror(DAYTONA_E_CAPACITY), "sandbox_capacity", 16) == 0);
    daytona_client_free(c);
    canned_stop(&s);
    /* three waits: four identical POSTs */
    {
        const char *p = buf_str(&s.requests);
        int n = 0;

        while ((p = strstr(p, "POST /api/sandbox/sb-1/stop HTTP/1.1"))) {
            n++;
            p++;
        }
        CU_ASSERT_EQUAL(n, 4);
    }
    canned_release(&s);
    free(r429);
}

static void test_daytona_client_errors_mapped_and_key_scrubbed(void)
{
    char *e404 = daytona_fixture_reply("404 Not Found", "",
                                       "{\"statusCode\":404,\"message\":\"Sandbox with ID or "
                                       "name x not found\"}");
    char *e409 = daytona_fixture_reply("409 Conflict", "",
                                       "{\"message\":\"Sandbox state change in progress\"}");
    char *e400 = daytona_fixture_reply("400 Bad Request", "",
                                       "{\"message\":[\"invalid token " DAYTONA_FIXTURE_KEY
                                       " for org\"],\"error\":\"Bad\"}");
    char *e500 = daytona_fixture_reply("500 Internal Server Error", "", "not json");
    struct canned_reply replies[] = {{e404, 0}, {e404, 0}, {e409, 0}, {e400, 0}, {e500, 0}};
    struct canned_server s;
    struct daytona_client *c = NULL;
    struct daytona_sandbox sb = {0};

    CU_ASSERT_FATAL(canned_start(&s, replies, 5) == 0);
    CU_ASSERT_FATAL(daytona_fixture_client(&s, &c) == 0);
    CU_ASSERT_EQUAL(daytona_sandbox_get(c, "x", &sb), -ENOENT);
    CU_ASSERT(strstr(daytona_client_message(c), "not found") != NULL);
    CU_ASSERT_EQUAL(daytona_sandbox_delete(c, "x"), 0); /* 404 = deleted */
    CU_ASSERT_EQUAL(daytona_sandbox_start(c, "x", NULL), -EBUSY);
    CU_ASSERT_EQUAL(daytona_sandbox_stop(c, "x", false), -EINVAL);
    CU_ASSERT(strstr(daytona_client_message(c), DAYTONA_FIXTURE_KEY) == NULL);
    CU_ASSERT(strstr(daytona_client_message(c), "invalid token *** for org") != NULL);
    CU_ASSERT_EQUAL(daytona_sandbox_recover(c, "x"), DAYTONA_E_SERVER);
    CU_ASSERT_STRING_EQUAL(daytona_client_message(c), "HTTP 500");
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

static void test_daytona_client_names_and_paths_checked(void)
{
    char long_path[4100];

    CU_ASSERT_TRUE(daytona_id_ok("sb-1.x_Y"));
    CU_ASSERT_FALSE(daytona_id_ok(".."));
    CU_ASSERT_FALSE(daytona_id_ok("a/b"));
    memset(long_path, 'a', 64);
    long_path[64] = '\0';
    CU_ASSERT_FALSE(daytona_id_ok(long_path)); /* 63 characters at most */
    long_path[63] = '\0';
    CU_ASSERT_TRUE(daytona_id_ok(long_path));

    CU_ASSERT_TRUE(daytona_env_name_ok("_A1"));
    CU_ASSERT_TRUE(daytona_env_name_ok("PATH"));
    CU_ASSERT_FALSE(daytona_env_name_ok("1A"));
    CU_ASSERT_FALSE(daytona_env_name_ok("A-B"));
    CU_ASSERT_FALSE(daytona_env_name_ok(""));
    CU_ASSERT_FALSE(daytona_env_name_ok(NULL));

    CU_ASSERT_TRUE(daytona_abs_path_ok("/"));
    CU_ASSERT_TRUE(daytona_abs_path_ok("/home/daytona/.agent-runner/..x/a..b"));
    CU_ASSERT_FALSE(daytona_abs_path_ok(NULL));
    CU_ASSERT_FALSE(daytona_abs_path_ok("home"));
    CU_ASSERT_FALSE(daytona_abs_path_ok("/a/./b"));
    CU_ASSERT_FALSE(daytona_abs_path_ok("/a/.."));
    CU_ASSERT_FALSE(daytona_abs_path_ok("/a/."));
    CU_ASSERT_FALSE(daytona_abs_path_ok("/a\nb"));
    CU_ASSERT_FALSE(daytona_abs_path_ok("/a\x7f"));
    long_path[0] = '/';
    memset(long_path + 1, 'a', 3999);
    long_path[4000] = '\0';
    CU_ASSERT_TRUE(daytona_abs_path_ok(long_path));
    long_path[4000] = 'a';
    long_path[4001] = '\0';
    CU_ASSERT_FALSE(daytona_abs_path_ok(long_path));
}

CU_TestInfo daytona_client_tests[] = {
    {"test_daytona_client_names_and_paths_checked", test_daytona_client_names_and_paths_checked},
    {"test_daytona_client_config", test_daytona_client_config},
    {"test_daytona_client_https", test_daytona_client_https},
    {"test_daytona_client_429_backoff_then_success", test_daytona_client_429_backoff_then_success},
    {"test_daytona_client_429_exhausted_is_capacity",
     test_daytona_client_429_exhausted_is_capacity},
    {"test_daytona_client_errors_mapped_and_key_scrubbed",
     test_daytona_client_errors_mapped_and_key_scrubbed},
    CU_TEST_INFO_NULL,
};
