/* heartbeat: admission, the timer, the interrupt, the credential refresh, the release. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agenta/heartbeat.h"
#include "base/jsonx.h"
#include "fake_http.h"
#include "request/request.h"
#include "suites.h"
#include "suites_platform.h"

#define BEAT AGENTA_PATH_HEARTBEAT
#define WAIT_MS 10000

static int name_of(const char *json, char *out)
{
    struct request_limits lim;
    struct run_request req;
    char err[256];
    int r;

    request_limits_default(&lim);
    r = request_parse(json, strlen(json), &lim, &req, err, sizeof(err));
    if (r < 0)
        return r;
    r = heartbeat_session_name(&req, out, HEARTBEAT_NAME_MAX);
    run_request_release(&req);
    return r;
}

static void test_heartbeat_session_name(void)
{
    char name[HEARTBEAT_NAME_MAX], json[2048], want[256];
    size_t at;

    CU_ASSERT_EQUAL(name_of("{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\"},"
                            "{\"role\":\"user\",\"content\":\"   \"},"
                            "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
                            "\"  Hello\"},{\"type\":\"text\",\"text\":\" world \\n\"}]},"
                            "{\"role\":\"user\",\"content\":\"later\"}]}",
                            name),
                    0);
    CU_ASSERT_STRING_EQUAL(name, "Hello world");
    /* JavaScript's trim: no-break and ideographic spaces, line separators */
    CU_ASSERT_EQUAL(name_of("{\"messages\":[{\"role\":\"user\",\"content\":"
                            "\"\\u3000\\u00a0 h\\u00e9llo\\u2028\\ufeff\"}]}",
                            name),
                    0);
    CU_ASSERT_STRING_EQUAL(name, "h\xc3\xa9llo");
    /* 60 code points, not bytes */
    at = (size_t)snprintf(json, sizeof(json), "{\"messages\":[{\"role\":\"user\",\"content\":\"");
    for (int i = 0; i < 70; i++)
        at += (size_t)snprintf(json + at, sizeof(json) - at, "\\u00e9");
    snprintf(json + at, sizeof(json) - at, "\"}]}");
    CU_ASSERT_EQUAL(name_of(json, name), 0);
    want[0] = '\0';
    for (int i = 0; i < 60; i++)
        strcat(want, "\xc3\xa9");
    CU_ASSERT_STRING_EQUAL(name, want);
    CU_ASSERT_EQUAL(name_of("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
                            "\"data\":\"aGk=\"}]}]}",
                            name),
                    -ENOENT);
    CU_ASSERT_EQUAL(name_of("{}", name), -ENOENT);
}

struct beat_script {
    atomic_int refuse_from;  /* answer is_current_turn:false from this beat on (-1 never) */
    atomic_int beats;
    const char *fresh;       /* the refreshed credential */
};

static void answer(void *ctx, size_t n, const struct fake_request *req,
                   struct fake_response *resp)
{
    struct beat_script *s = ctx;
    char body[256];
    int k;

    (void)n;
    if (strncmp(req->path, "/access/permissions/check", 25) == 0) {
        snprintf(body, sizeof(body), "{\"credentials\":\"%s\"}", s->fresh ? s->fresh : "");
    } else {
        k = atomic_fetch_add(&s->beats, 1);
        snprintf(body, sizeof(body),
                 "{\"stream\":{\"id\":\"st-1\"},\"replica_id\":\"replica-1\","
                 "\"is_current_turn\":%s}",
                 atomic_load(&s->refuse_from) >= 0 && k >= atomic_load(&s->refuse_from)
                     ? "false"
                     : "true");
    }
    resp->body = strdup(body);
    resp->body_len = strlen(body);
}

struct fixture {
    struct beat_script script;
    struct fake_http *http;
    struct agenta_api *api;
    struct redact *rd;
    atomic_int interrupts;
};

static int fixture_start(struct fixture *fx, int refuse_from, unsigned refresh_every)
{
    struct agenta_config cfg;

    memset(fx, 0, sizeof(*fx));
    atomic_init(&fx->script.refuse_from, refuse_from);
    atomic_init(&fx->script.beats, 0);
    atomic_init(&fx->interrupts, 0);
    fx->http = fake_http_start(answer, &fx->script);
    if (!fx->http || test_agenta_config(fake_http_url(fx->http), &cfg) < 0)
        return -1;
    cfg.refresh_every = refresh_every;
    fx->rd = redact_new();
    if (!fx->rd || redact_add(fx->rd, "Access run-credential-1") < 0 ||
        agenta_api_new(&cfg, "Access run-credential-1", &fx->api) < 0)
        return -1;
    return 0;
}

static void fixture_stop(struct fixture *fx)
{
    agenta_api_free(fx->api);
    redact_free(fx->rd);
    fake_http_stop(fx->http);
}

static void on_interrupted(void *ctx)
{
    struct fixture *fx = ctx;

    atomic_fetch_add(&fx->interrupts, 1);
}

static void params_of(struct fixture *fx, uint64_t interval_ms, struct heartbeat_params *p)
{
    memset(p, 0, sizeof(*p));
    p->session_id = "s1";
    p->turn_id = "t1";
    p->rd = fx->rd;
    p->on_interrupted = on_interrupted;
    p->ctx = fx;
    p->interval_ms = interval_ms;
}

static void test_heartbeat_admits_and_releases(void)
{
    json_object *refs = test_json("[{\"id\":\"wf\",\"key\":\"workflow\"}]"), *body;
    struct heartbeat_params p;
    struct heartbeat_first first;
    struct heartbeat *hb = NULL;
    struct fixture fx;
    char stream[64];

    CU_ASSERT_EQUAL_FATAL(fixture_start(&fx, -1, 10), 0);
    params_of(&fx, 600000, &p);
    p.name = "use Access run-credential-1 please";
    p.references = refs;
    CU_ASSERT_EQUAL_FATAL(heartbeat_start(fx.api, &p, &hb, &first), 0);
    CU_ASSERT_TRUE(first.answered);
    CU_ASSERT_TRUE(first.admitted);
    CU_ASSERT_STRING_EQUAL(first.stream_id, "st-1");
    heartbeat_stream_id(hb, stream, sizeof(stream));
    CU_ASSERT_STRING_EQUAL(stream, "st-1");
    CU_ASSERT_EQUAL(atomic_load(&fx.interrupts), 0);
    heartbeat_release(hb);
    CU_ASSERT_EQUAL_FATAL(fake_http_count_path(fx.http, BEAT), 2);
    body = fake_http_json(fx.http, BEAT, 0);
    CU_ASSERT_TRUE(test_json_is(body, "{\"session_id\":\"s1\",\"replica_id\":\"replica-1\","
                                      "\"turn_id\":\"t1\",\"is_running\":true,\"name\":"
                                      "\"use [ag:redacted:secret:al-1] please\",\"references\":"
                                      "[{\"id\":\"wf\",\"key\":\"workflow\"}]}"));
    json_object_put(body);
    body = fake_http_json(fx.http, BEAT, 1);
    CU_ASSERT_EQUAL(json_object_get_boolean(jsonx_get(body, "is_running")), 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(body, "turn_id")), "t1");
    json_object_put(body);
    CU_ASSERT_EQUAL(atomic_load(&fx.interrupts), 0);
    json_object_put(refs);
    heartbeat_release(NULL);
    fixture_stop(&fx);
}

static void test_heartbeat_refuses_a_turn_in_use(void)
{
    struct heartbeat_params p;
    struct heartbeat_first first;
    struct heartbeat *hb = NULL;
    struct fixture fx;
    json_object *body;
    struct timespec ts = {0, 50 * 1000000};

    CU_ASSERT_EQUAL_FATAL(fixture_start(&fx, 0, 10), 0);
    params_of(&fx, 5, &p);
    CU_ASSERT_EQUAL_FATAL(heartbeat_start(fx.api, &p, &hb, &first), 0);
    CU_ASSERT_TRUE(first.answered);
    CU_ASSERT_FALSE(first.admitted);
    /* a refused turn runs no timer: nothing more goes out until the release */
    nanosleep(&ts, NULL);
    CU_ASSERT_EQUAL(fake_http_count_path(fx.http, BEAT), 1);
    heartbeat_release(hb);
    CU_ASSERT_EQUAL(fake_http_count_path(fx.http, BEAT), 2);
    body = fake_http_json(fx.http, BEAT, 1);
    CU_ASSERT_TRUE(test_json_is(body, "{\"session_id\":\"s1\",\"replica_id\":\"replica-1\","
                                      "\"turn_id\":\"t1\",\"is_running\":false}"));
    json_object_put(body);
    /* the refusal is not an interruption */
    CU_ASSERT_EQUAL(atomic_load(&fx.interrupts), 0);
    CU_ASSERT_EQUAL(fake_http_count(fx.http), 2);
    fixture_stop(&fx);
}

static void test_heartbeat_fails_open(void)
{
    struct heartbeat_params p;
    struct heartbeat_first first;
    struct heartbeat *hb = NULL;
    struct agenta_config cfg;
    struct fixture fx;

    memset(&fx, 0, sizeof(fx));
    CU_ASSERT_EQUAL_FATAL(test_agenta_config("http://127.0.0.1:1", &cfg), 0);
    CU_ASSERT_EQUAL_FATAL(agenta_api_new(&cfg, "Access x-credential", &fx.api), 0);
    params_of(&fx, 600000, &p);
    p.rd = NULL;
    CU_ASSERT_EQUAL_FATAL(heartbeat_start(fx.api, &p, &hb, &first), 0);
    CU_ASSERT_FALSE(first.answered);
    CU_ASSERT_TRUE(first.admitted);
    CU_ASSERT_STRING_EQUAL(first.stream_id, "");
    heartbeat_release(hb);
    p.turn_id = NULL;
    CU_ASSERT_EQUAL(heartbeat_start(fx.api, &p, &hb, &first), -EINVAL);
    agenta_api_free(fx.api);
}

static void wait_for(atomic_int *v, int n)
{
    struct timespec ts = {0, 5 * 1000000};

    for (int waited = 0; atomic_load(v) < n && waited < WAIT_MS; waited += 5)
        nanosleep(&ts, NULL);
}

static void test_heartbeat_interrupts_once(void)
{
    struct heartbeat_params p;
    struct heartbeat_first first;
    struct heartbeat *hb = NULL;
    struct fixture fx;

    /* admitted by beat 0, then the platform takes the turn back from beat 3 on */
    CU_ASSERT_EQUAL_FATAL(fixture_start(&fx, 3, 1000), 0);
    params_of(&fx, 5, &p);
    CU_ASSERT_EQUAL_FATAL(heartbeat_start(fx.api, &p, &hb, &first), 0);
    CU_ASSERT_TRUE(first.admitted);
    wait_for(&fx.interrupts, 1);
    CU_ASSERT_EQUAL(atomic_load(&fx.interrupts), 1);
    /* later beats say the same: the callback does not fire again */
    wait_for(&fx.script.beats, 8);
    CU_ASSERT_TRUE(atomic_load(&fx.script.beats) >= 8);
    CU_ASSERT_EQUAL(atomic_load(&fx.interrupts), 1);
    heartbeat_release(hb);
    CU_ASSERT_EQUAL(atomic_load(&fx.interrupts), 1);
    fixture_stop(&fx);
}

static void test_heartbeat_refreshes_the_credential(void)
{
    struct heartbeat_params p;
    struct heartbeat_first first;
    struct heartbeat *hb = NULL;
    struct fixture fx;
    struct buf out;
    bool used = false;
    struct timespec ts = {0, 5 * 1000000};

    CU_ASSERT_EQUAL_FATAL(fixture_start(&fx, -1, 2), 0);
    fx.script.fresh = "Access fresh-credential-2";
    params_of(&fx, 5, &p);
    CU_ASSERT_EQUAL_FATAL(heartbeat_start(fx.api, &p, &hb, &first), 0);
    /* every second timer beat refreshes; the next beats carry the new credential */
    for (int waited = 0; !used && waited < WAIT_MS; waited += 5) {
        size_t n = fake_http_count(fx.http);

        for (size_t i = 0; i < n && !used; i++) {
            struct fake_request req;

            if (fake_http_get(fx.http, i, &req) < 0)
                continue;
            used = strcmp(req.path, BEAT) == 0 &&
                   strcmp(req.authorization, "Access fresh-credential-2") == 0;
            fake_request_release(&req);
        }
        if (!used)
            nanosleep(&ts, NULL);
    }
    CU_ASSERT_TRUE(used);
    CU_ASSERT_TRUE(fake_http_count_path(fx.http, "/access/permissions/check") >= 1);
    /* the first beat and at least one timer beat */
    CU_ASSERT_TRUE(fake_http_count_path(fx.http, BEAT) >= 2);
    heartbeat_release(hb);
    /* the refreshed credential is a secret of the run from now on */
    buf_init(&out, 1024);
    CU_ASSERT_EQUAL(redact_text(fx.rd, "fresh-credential-2", 18, &out), 1);
    CU_ASSERT_STRING_EQUAL(buf_str(&out), "[ag:redacted:secret:al-2]");
    buf_release(&out);
    fixture_stop(&fx);
}

CU_TestInfo heartbeat_tests[] = {
    {"session_name", test_heartbeat_session_name},
    {"admits_and_releases", test_heartbeat_admits_and_releases},
    {"refuses_a_turn_in_use", test_heartbeat_refuses_a_turn_in_use},
    {"fails_open", test_heartbeat_fails_open},
    {"interrupts_once", test_heartbeat_interrupts_once},
    {"refreshes_the_credential", test_heartbeat_refreshes_the_credential},
    CU_TEST_INFO_NULL,
};
