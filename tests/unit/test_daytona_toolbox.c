/*
 * daytona_toolbox — requests against a canned loopback server: the bulk upload's part order
 * and its partial failure, session exec and command status, input after the command ended,
 * JSON logs, and ids that would change the URL.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "daytona_fixture.h"
#include "provider/daytona/daytona_toolbox.h"
#include "suites.h"

static void test_daytona_toolbox_bulk_upload(void)
{
    char *ok = daytona_fixture_reply("200 OK", "", "{\"files\":[]}");
    char *partial =
        daytona_fixture_reply("400 Bad Request", "",
                              "{\"errors\":[{\"path\":\"/home/daytona/b\",\"error\":\"permission "
                              "denied\"}],\"files\":[]}");
    struct canned_reply replies[] = {{ok, 0}, {partial, 0}};
    struct daytona_toolbox_file files[] = {{"/home/daytona/a.json", "{\"a\":1}", 7},
                                           {"/home/daytona/b", "bee", 3}};
    struct canned_server s;
    struct daytona_client *c = NULL;
    const char *req, *p0, *f0, *p1, *f1;

    CU_ASSERT_FATAL(canned_start(&s, replies, 2) == 0);
    CU_ASSERT_FATAL(daytona_fixture_client(&s, &c) == 0);
    CU_ASSERT_EQUAL(daytona_toolbox_upload(c, "http://127.0.0.1:1/x", files, 2), -ECONNREFUSED);
    {
        char tb[128];

        snprintf(tb, sizeof(tb), "http://127.0.0.1:%d/toolbox/sb-1", s.port);
        CU_ASSERT_EQUAL(daytona_toolbox_upload(c, tb, files, 2), 0);
        CU_ASSERT_EQUAL(daytona_toolbox_upload(c, tb, files, 2), -EIO);
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

/* exec -> cmdId; status without exitCode while running, with it after; input after the end
 * is -EPIPE; the JSON logs give the raw log and the split streams. */
static void test_daytona_toolbox_session_calls(void)
{
    char *created = daytona_fixture_reply("201 Created", "", "");
    char *exec = daytona_fixture_reply("202 Accepted", "",
                                       "{\"cmdId\":\"c-1\",\"output\":null,\"exitCode\":null}");
    char *running = daytona_fixture_reply("200 OK", "", "{\"id\":\"c-1\",\"command\":\"x\"}");
    char *done = daytona_fixture_reply("200 OK", "", "{\"id\":\"c-1\",\"exitCode\":3}");
    char *gone = daytona_fixture_reply("410 Gone", "", "{\"message\":\"command finished\"}");
    char *logs = daytona_fixture_reply("200 OK", "",
                                       "{\"output\":\"\\u0001\\u0001\\u0001hi\\n\","
                                       "\"stdout\":\"hi\\n\",\"stderr\":\"\"}");
    char *bad_id = daytona_fixture_reply("202 Accepted", "", "{\"cmdId\":\"../../x\"}");
    struct canned_reply replies[] = {{created, 0}, {exec, 0}, {running, 0}, {done, 0},
                                     {gone, 0},    {logs, 0}, {bad_id, 0}};
    struct canned_server s;
    struct daytona_client *c = NULL;
    char tb[128], cid[DAYTONA_ID_MAX];
    struct buf raw, out;
    int code = -1;

    CU_ASSERT_FATAL(canned_start(&s, replies, 7) == 0);
    CU_ASSERT_FATAL(daytona_fixture_client(&s, &c) == 0);
    snprintf(tb, sizeof(tb), "http://127.0.0.1:%d/toolbox/sb-1", s.port);
    buf_init(&raw, 4096);
    buf_init(&out, 4096);
    CU_ASSERT_EQUAL(daytona_toolbox_session_create(c, tb, "s-1"), 0);
    CU_ASSERT_EQUAL(daytona_toolbox_exec(c, tb, "s-1", "echo hi", true, cid), 0);
    CU_ASSERT_STRING_EQUAL(cid, "c-1");
    CU_ASSERT_EQUAL(daytona_toolbox_command_status(c, tb, "s-1", cid, &code), 0);
    CU_ASSERT_EQUAL(daytona_toolbox_command_status(c, tb, "s-1", cid, &code), 1);
    CU_ASSERT_EQUAL(code, 3);
    CU_ASSERT_EQUAL(daytona_toolbox_input(c, tb, "s-1", cid, "{}", 2, true), -EPIPE);
    CU_ASSERT_EQUAL(daytona_toolbox_logs(c, tb, "s-1", cid, &raw, &out, NULL), 0);
    CU_ASSERT_EQUAL(raw.len, 6);
    CU_ASSERT(memcmp(raw.data, "\x01\x01\x01hi\n", 6) == 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&out), "hi\n");
    /* a command id that would change the URL is refused */
    CU_ASSERT_EQUAL(daytona_toolbox_exec(c, tb, "s-1", "x", true, cid), DAYTONA_E_SERVER);
    /* ids and URLs checked before any request */
    CU_ASSERT_EQUAL(daytona_toolbox_session_create(c, tb, "a/b"), -EINVAL);
    CU_ASSERT_EQUAL(daytona_toolbox_session_create(c, "file:///etc", "s"), -EINVAL);
    daytona_client_free(c);
    canned_stop(&s);
    {
        const char *req = buf_str(&s.requests);

        CU_ASSERT(strstr(req, "POST /toolbox/sb-1/process/session HTTP/1.1") != NULL);
        CU_ASSERT(strstr(req, "\"runAsync\":true") != NULL);
        CU_ASSERT(strstr(req, "\"suppressInputEcho\":true") != NULL);
        CU_ASSERT(strstr(req, "GET /toolbox/sb-1/process/session/s-1/command/c-1 HTTP") != NULL);
        /* input marked as not being activity when asked */
        CU_ASSERT(strstr(req, "X-Daytona-Skip-Last-Activity-Update: true") != NULL);
    }
    canned_release(&s);
    buf_release(&raw);
    buf_release(&out);
    free(created);
    free(exec);
    free(running);
    free(done);
    free(gone);
    free(logs);
    free(bad_id);
}

static void test_daytona_toolbox_shell_quote(void)
{
    struct buf b;

    buf_init(&b, 1024);
    CU_ASSERT_EQUAL(daytona_shell_quote("plain", &b), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&b), "'plain'");
    buf_reset(&b);
    CU_ASSERT_EQUAL(daytona_shell_quote("it's $(rm -rf /) `x`", &b), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&b), "'it'\\''s $(rm -rf /) `x`'");
    buf_reset(&b);
    CU_ASSERT_EQUAL(daytona_shell_quote("", &b), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&b), "''");
    buf_release(&b);
}

CU_TestInfo daytona_toolbox_tests[] = {
    {"test_daytona_toolbox_shell_quote", test_daytona_toolbox_shell_quote},
    {"test_daytona_toolbox_bulk_upload", test_daytona_toolbox_bulk_upload},
    {"test_daytona_toolbox_session_calls", test_daytona_toolbox_session_calls},
    CU_TEST_INFO_NULL,
};
