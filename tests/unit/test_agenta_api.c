/* agenta_api: the retry schedules and real exchanges with an in-test server. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "agenta/agenta_api.h"
#include "base/httpc.h"
#include "base/jsonx.h"
#include "fake_http.h"
#include "suites.h"
#include "suites_platform.h"

/* Agenta's schedules, as agenta_api_call hands them to base/httpc. */
static void test_agenta_api_backoff_schedule(void)
{
    /* durable ingest: 100 * 2^(n-1), capped at an hour */
    CU_ASSERT_EQUAL(httpc_backoff_ms(HTTPC_BACKOFF_EXPONENTIAL, 100, 1, 0), 100);
    CU_ASSERT_EQUAL(httpc_backoff_ms(HTTPC_BACKOFF_EXPONENTIAL, 100, 2, 0), 200);
    CU_ASSERT_EQUAL(httpc_backoff_ms(HTTPC_BACKOFF_EXPONENTIAL, 100, 3, 0), 400);
    CU_ASSERT_EQUAL(httpc_backoff_ms(HTTPC_BACKOFF_EXPONENTIAL, 100, 5, 0), 1600);
    CU_ASSERT_EQUAL(httpc_backoff_ms(HTTPC_BACKOFF_EXPONENTIAL, 100, 11, 0), 102400);
    CU_ASSERT_EQUAL(httpc_backoff_ms(HTTPC_BACKOFF_EXPONENTIAL, 100, 60, 0), 3600000);
    /* legacy ingest and interactions: 100 * n */
    CU_ASSERT_EQUAL(httpc_backoff_ms(HTTPC_BACKOFF_LINEAR, 100, 1, 0), 100);
    CU_ASSERT_EQUAL(httpc_backoff_ms(HTTPC_BACKOFF_LINEAR, 100, 3, 0), 300);
    CU_ASSERT_TRUE(httpc_status_retryable(503));
    CU_ASSERT_TRUE(httpc_status_retryable(429));
    CU_ASSERT_TRUE(httpc_status_retryable(408));
    CU_ASSERT_FALSE(httpc_status_retryable(400));
    CU_ASSERT_FALSE(httpc_status_retryable(401));
    CU_ASSERT_FALSE(httpc_status_retryable(409));
}

/* ---- exchanges -------------------------------------------------------------------------- */

struct script {
    int fail_first;    /* answer 503 to this many requests */
    int status;        /* then this (0 = 200) */
    const char *body;  /* then this (NULL = "{}") */
    const char *ctype; /* NULL = application/json, "" = none */
    const char *extra; /* extra header lines */
    size_t big;        /* answer this many bytes instead */
};

static void scripted(void *ctx, size_t n, const struct fake_request *req,
                     struct fake_response *resp)
{
    const struct script *s = ctx;

    (void)req;
    if ((int)n < s->fail_first) {
        resp->status = 503;
        return;
    }
    if (s->status)
        resp->status = s->status;
    if (s->ctype)
        snprintf(resp->content_type, sizeof(resp->content_type), "%s", s->ctype);
    if (s->extra)
        snprintf(resp->extra_headers, sizeof(resp->extra_headers), "%s", s->extra);
    if (s->big) {
        resp->body = malloc(s->big);
        memset(resp->body, 'x', s->big);
        resp->body_len = s->big;
    } else if (s->body) {
        resp->body = strdup(s->body);
        resp->body_len = strlen(s->body);
    }
}

static struct agenta_api *api_for(struct fake_http *f, const char *cred)
{
    struct agenta_config cfg;
    struct agenta_api *api = NULL;

    if (test_agenta_config(fake_http_url(f), &cfg) < 0)
        return NULL;
    cfg.attachments_timeout_ms = 5000;
    if (agenta_api_new(&cfg, cred, &api) < 0)
        return NULL;
    return api;
}

static void test_agenta_api_heartbeat_exchange(void)
{
    struct script s = {.body = "{\"stream\":{\"id\":\"st-9\"},\"is_current_turn\":true}"};
    struct fake_http *f = fake_http_start(scripted, &s);
    struct agenta_beat b = {
        .session_id = "s1", .replica_id = "replica-1", .turn_id = "t1", .is_running = true};
    struct agenta_beat_reply rep;
    struct fake_request req;
    struct agenta_api *api;
    char err[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    api = api_for(f, "Access tok-123");
    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL(agenta_api_heartbeat(api, &b, NULL, &rep, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(rep.stream_id, "st-9");
    CU_ASSERT_TRUE(rep.admitted);
    CU_ASSERT_EQUAL_FATAL(fake_http_get(f, 0, &req), 0);
    CU_ASSERT_STRING_EQUAL(req.method, "POST");
    CU_ASSERT_STRING_EQUAL(req.path, "/sessions/streams/heartbeat");
    CU_ASSERT_STRING_EQUAL(req.authorization, "Access tok-123");
    CU_ASSERT_PTR_NOT_NULL(strstr(req.body, "\"turn_id\":\"t1\""));
    fake_request_release(&req);

    /* a refreshed credential is used from the next call on */
    CU_ASSERT_EQUAL(agenta_api_set_credential(api, "Access tok-456"), 0);
    CU_ASSERT_EQUAL(agenta_api_heartbeat(api, &b, NULL, &rep, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(fake_http_get(f, 1, &req), 0);
    CU_ASSERT_STRING_EQUAL(req.authorization, "Access tok-456");
    fake_request_release(&req);
    /* header injection through a credential is refused */
    CU_ASSERT_EQUAL(agenta_api_set_credential(api, "Access x\r\nX-Evil: 1"), -EINVAL);
    agenta_api_free(api);
    fake_http_stop(f);
}

static void test_agenta_api_retries_transient_failures_only(void)
{
    struct script s = {.fail_first = 2};
    struct fake_http *f = fake_http_start(scripted, &s);
    struct agenta_api *api = api_for(f, "Access tok-123");
    struct agenta_call call = {.method = AGENTA_POST,
                               .path = "/sessions/records/ingest",
                               .body = "{}",
                               .body_len = 2,
                               .attempts = 3,
                               .backoff = AGENTA_BACKOFF_EXPONENTIAL,
                               .backoff_base_ms = 1};
    struct agenta_response res;
    char err[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL(agenta_api_call(api, &call, &res, err, sizeof(err)), 200);
    CU_ASSERT_EQUAL(res.attempts, 3);
    agenta_response_release(&res);
    CU_ASSERT_EQUAL(fake_http_count(f), 3);

    /* one attempt short: the last answer (503) comes back */
    s.fail_first = 100;
    call.attempts = 2;
    CU_ASSERT_EQUAL(agenta_api_call(api, &call, &res, err, sizeof(err)), 503);
    CU_ASSERT_EQUAL(res.attempts, 2);
    agenta_response_release(&res);

    /* a 4xx is final */
    s.fail_first = 0;
    s.status = 422;
    call.attempts = 5;
    CU_ASSERT_EQUAL(agenta_api_call(api, &call, &res, err, sizeof(err)), 422);
    CU_ASSERT_EQUAL(res.attempts, 1);
    agenta_response_release(&res);
    CU_ASSERT_EQUAL(fake_http_count(f), 6);
    agenta_api_free(api);
    fake_http_stop(f);
}

static void test_agenta_api_failures_are_named_without_the_credential(void)
{
    struct script s = {.big = 2u * 1024 * 1024};
    struct fake_http *f = fake_http_start(scripted, &s);
    struct agenta_api *api = api_for(f, "Access secret-credential-value");
    struct agenta_call call = {.method = AGENTA_GET, .path = "/x", .response_max = 1024};
    struct agenta_response res;
    struct agenta_config cfg;
    json_object *records = NULL;
    char err[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL(agenta_api_call(api, &call, &res, err, sizeof(err)), -E2BIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "GET /x"));
    CU_ASSERT_PTR_NULL(strstr(err, "secret-credential"));

    s.big = 0;
    s.status = 500;
    CU_ASSERT_EQUAL(agenta_api_records_query(api, "s1", &records, err, sizeof(err)), -EREMOTEIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "HTTP 500"));
    CU_ASSERT_PTR_NULL(strstr(err, "secret-credential"));
    agenta_api_free(api);
    fake_http_stop(f);

    /* nobody listens there any more */
    CU_ASSERT_EQUAL(test_agenta_config("http://127.0.0.1:1", &cfg), 0);
    CU_ASSERT_EQUAL_FATAL(agenta_api_new(&cfg, "Access secret-credential-value", &api), 0);
    CU_ASSERT_EQUAL(agenta_api_records_query(api, "s1", &records, err, sizeof(err)), -ECONNREFUSED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/sessions/records/query"));
    CU_ASSERT_PTR_NULL(strstr(err, "secret-credential"));
    agenta_api_free(api);
}

static void delayed(void *ctx, size_t n, const struct fake_request *req, struct fake_response *resp)
{
    struct timespec ts = {1, 0};

    (void)ctx;
    (void)n;
    (void)req;
    (void)resp;
    nanosleep(&ts, NULL);
}

static void test_agenta_api_times_out_and_aborts(void)
{
    struct fake_http *f = fake_http_start(delayed, NULL);
    struct agenta_api *api = api_for(f, "");
    struct agenta_call call = {.method = AGENTA_GET, .path = "/slow", .timeout_ms = 100};
    struct agenta_response res;
    atomic_bool stop;
    char err[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL(agenta_api_call(api, &call, &res, err, sizeof(err)), -ETIMEDOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "timed out"));
    atomic_init(&stop, true);
    call.timeout_ms = 5000;
    call.abort = &stop;
    CU_ASSERT_EQUAL(agenta_api_call(api, &call, &res, err, sizeof(err)), -ECANCELED);
    agenta_api_free(api);
    fake_http_stop(f);
}

/* POST a body the way the records queue delivers a row (records.c): the final HTTP status. */
static int post_row(struct agenta_api *api, const char *path, json_object *body, unsigned attempts)
{
    struct agenta_call call = {.method = AGENTA_POST,
                               .path = path,
                               .attempts = attempts,
                               .backoff = AGENTA_BACKOFF_LINEAR,
                               .backoff_base_ms = AGENTA_RETRY_BASE_MS};
    struct agenta_response res;
    char err[256];
    int r;

    call.body = jsonx_text(body, &call.body_len);
    r = agenta_api_call(api, &call, &res, err, sizeof(err));
    if (r > 0)
        agenta_response_release(&res);
    json_object_put(body);
    return r;
}

static void test_agenta_api_turn_ledger_and_interactions(void)
{
    struct script s = {.status = 409};
    struct fake_http *f = fake_http_start(scripted, &s);
    struct agenta_api *api = api_for(f, "Access tok-123");
    struct agenta_turn t = {
        .session_id = "s1", .stream_id = "st", .turn_index = 1, .harness_kind = "pi"};
    struct agenta_interaction it = {.session_id = "s1",
                                    .turn_id = "t1",
                                    .token = "tok",
                                    .kind = "user_approval",
                                    .tool = "bash"};
    struct agenta_turn_row row;
    char err[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL(agenta_api_turn_create(api, &t, err, sizeof(err)), 1); /* 409: benign */
    t.stream_id = NULL;
    CU_ASSERT_EQUAL(agenta_api_turn_create(api, &t, err, sizeof(err)), -EINVAL);
    s.status = 0;
    s.body = "{\"turns\":[{\"turn_index\":1,\"harness_kind\":\"pi\",\"agent_session_id\":\"a\"}]}";
    CU_ASSERT_EQUAL(agenta_api_turn_query_latest(api, "s1", "pi", &row, err, sizeof(err)), 0);
    CU_ASSERT_TRUE(row.found);
    CU_ASSERT_FALSE(row.ended);
    s.body = NULL;
    CU_ASSERT_EQUAL(
        agenta_api_turn_complete(api, "s1", 1, "a", "2026-11-30T10:00:00.000Z", err, sizeof(err)),
        0);
    /* interaction rows (platform.c queues them): 3 attempts on a failing API */
    s.fail_first = 1000;
    CU_ASSERT_EQUAL(post_row(api, AGENTA_PATH_INTERACTIONS, agenta_interaction_body(&it),
                             AGENTA_INTERACTION_ATTEMPTS),
                    503);
    CU_ASSERT_EQUAL(fake_http_count_path(f, "/sessions/interactions/"), 3);
    s.fail_first = 0;
    CU_ASSERT_EQUAL(post_row(api, AGENTA_PATH_INTERACTIONS_TRANSITION,
                             agenta_transition_body("s1", "tok", "denied", "c1"), 1),
                    200);
    CU_ASSERT_EQUAL(post_row(api, AGENTA_PATH_INTERACTIONS_CANCEL_STALE,
                             agenta_cancel_stale_body("s1", "t1", NULL, 0), 1),
                    200);
    CU_ASSERT_EQUAL(fake_http_count_path(f, "/sessions/interactions/transition"), 1);
    CU_ASSERT_EQUAL(fake_http_count_path(f, "/sessions/interactions/cancel-stale"), 1);
    agenta_api_free(api);
    fake_http_stop(f);
}

static void test_agenta_api_attachments(void)
{
    struct script s = {.body = "PNGDATA",
                       .ctype = "Image/PNG; charset=binary",
                       .extra = "Content-Disposition: attachment; filename=\"photo.png\"\r\n"};
    struct fake_http *f = fake_http_start(scripted, &s);
    struct agenta_api *api = api_for(f, "Access tok-123");
    const char *ids[] = {"att/1"};
    struct agenta_attachment a;
    struct fake_request req;
    char err[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL_FATAL(agenta_api_attachment_content(api, "s 1", "att/1", &a, err, sizeof(err)),
                          0);
    CU_ASSERT_EQUAL(a.len, 7);
    CU_ASSERT_EQUAL(memcmp(a.data, "PNGDATA", 7), 0);
    CU_ASSERT_STRING_EQUAL(a.media_type, "image/png");
    CU_ASSERT_STRING_EQUAL(a.filename, "photo.png");
    agenta_attachment_release(&a);
    CU_ASSERT_EQUAL_FATAL(fake_http_get(f, 0, &req), 0);
    CU_ASSERT_STRING_EQUAL(req.path, "/sessions/attachments/att%2F1/content?session_id=s%201");
    fake_request_release(&req);
    /* the API must name the file */
    s.extra = NULL;
    CU_ASSERT_EQUAL(agenta_api_attachment_content(api, "s1", "a", &a, err, sizeof(err)), -EBADMSG);
    CU_ASSERT_EQUAL(post_row(api, AGENTA_PATH_ATTACHMENTS_REFERENCE,
                             agenta_attachments_reference_body("s1", ids, 1), 1),
                    200);
    CU_ASSERT_EQUAL(fake_http_count_path(f, "/sessions/attachments/reference"), 1);
    agenta_api_free(api);
    fake_http_stop(f);
}

CU_TestInfo agenta_api_tests[] = {
    {"backoff_schedule", test_agenta_api_backoff_schedule},
    {"heartbeat_exchange", test_agenta_api_heartbeat_exchange},
    {"retries_transient_failures_only", test_agenta_api_retries_transient_failures_only},
    {"failures_are_named_without_the_credential",
     test_agenta_api_failures_are_named_without_the_credential},
    {"times_out_and_aborts", test_agenta_api_times_out_and_aborts},
    {"turn_ledger_and_interactions", test_agenta_api_turn_ledger_and_interactions},
    {"attachments", test_agenta_api_attachments},
    CU_TEST_INFO_NULL,
};
