/* records: Agenta's coalescing, stable ids, redaction and the per-session delivery queue. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agenta/records.h"
#include "agenta/records_incomplete.h"
#include "agenta/records_outbox.h"
#include "base/fstree.h"
#include "base/jsonx.h"
#include "base/util.h"
#include "fake_http.h"
#include "request/request.h"
#include "suites.h"
#include "suites_platform.h"
#include "turn/events.h"

#define CRED "Access run-cred-secret-1"
#define INGEST AGENTA_PATH_RECORDS_INGEST
#define WAIT_MS 10000

/* ---- a scriptable API ------------------------------------------------------------------- */

struct api_script {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool gate_closed; /* hold every request until opened */
    int fail_first;   /* answer 503 to this many requests */
    bool always_fail;
    const char *missing; /* answer 404 to this path */
};

static void script_init(struct api_script *s)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
}

static void script_open(struct api_script *s)
{
    pthread_mutex_lock(&s->lock);
    s->gate_closed = false;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

static void script_release(struct api_script *s)
{
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
}

static void handle(void *ctx, size_t n, const struct fake_request *req, struct fake_response *resp)
{
    struct api_script *s = ctx;

    pthread_mutex_lock(&s->lock);
    while (s->gate_closed)
        pthread_cond_wait(&s->cond, &s->lock);
    if (s->always_fail || (int)n < s->fail_first)
        resp->status = 503;
    if (s->missing && strcmp(req->path, s->missing) == 0)
        resp->status = 404;
    pthread_mutex_unlock(&s->lock);
}

struct fixture {
    struct api_script script;
    struct fake_http *http;
    struct agenta_api *api;
    struct redact *rd;
};

static int fixture_start(struct fixture *fx, void (*tune)(struct agenta_config *))
{
    struct agenta_config cfg;

    memset(fx, 0, sizeof(*fx));
    script_init(&fx->script);
    fx->http = fake_http_start(handle, &fx->script);
    if (!fx->http || test_agenta_config(fake_http_url(fx->http), &cfg) < 0)
        return -1;
    cfg.ingest_max_retries = 3;
    if (tune)
        tune(&cfg);
    fx->rd = redact_new();
    if (!fx->rd || redact_add(fx->rd, CRED) < 0 || agenta_api_new(&cfg, CRED, &fx->api) < 0)
        return -1;
    return 0;
}

static void fixture_stop(struct fixture *fx)
{
    script_open(&fx->script);
    CU_ASSERT_EQUAL(records_outbox_drain_all(util_now_ms() + WAIT_MS), 0);
    agenta_api_free(fx->api);
    redact_free(fx->rd);
    fake_http_stop(fx->http);
    script_release(&fx->script);
}

static struct records *emitter(struct fixture *fx, const char *key, const char *turn)
{
    struct records_params p = {.session_key = key,
                               .session_id = strchr(key, ':') ? strchr(key, ':') + 1 : key,
                               .turn_id = turn,
                               .span_id = "b7ad6b7169203331",
                               .backoff_base_ms = 1};
    struct records *r = NULL;

    if (records_new(fx->api, fx->rd, &p, &r) < 0)
        return NULL;
    return r;
}

static void emit(struct records *r, const char *json)
{
    json_object *ev = test_json(json);

    CU_ASSERT_PTR_NOT_NULL_FATAL(ev);
    records_event(r, ev);
    json_object_put(ev);
}

/* The i-th ingested record without its timestamp (checked to be there) */
static json_object *ingested(struct fixture *fx, size_t i)
{
    json_object *o = fake_http_json(fx->http, INGEST, i);
    const char *ts = jsonx_str(o, "timestamp");

    CU_ASSERT_PTR_NOT_NULL(ts);
    CU_ASSERT_TRUE(ts && strlen(ts) == 24 && ts[23] == 'Z');
    if (o)
        json_object_object_del(o, "timestamp");
    return o;
}

static void check_record(struct fixture *fx, size_t i, const char *want)
{
    json_object *o = ingested(fx, i);

    CU_ASSERT_TRUE(test_json_is(o, want));
    json_object_put(o);
}

static void test_records_coalesce_a_turn_like_agenta(void)
{
    const char *req_json = "{\"sessionId\":\"s1\",\"messages\":[{\"role\":\"user\",\"content\":"
                           "[{\"type\":\"text\",\"text\":\"list it, \"},{\"type\":\"attachment\","
                           "\"attachmentId\":\"att-1\",\"filename\":\"a.png\",\"mimeType\":"
                           "\"image/png\",\"size\":12},{\"type\":\"text\",\"text\":\"please\"}]}]}";
    struct request_limits lim;
    struct run_request req;
    struct fixture fx;
    struct records *r;
    json_object *user;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(fixture_start(&fx, NULL), 0);
    r = emitter(&fx, "p1:s1", "t1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    request_limits_default(&lim);
    CU_ASSERT_EQUAL_FATAL(request_parse(req_json, strlen(req_json), &lim, &req, err, sizeof(err)),
                          0);
    CU_ASSERT_EQUAL_FATAL(records_user_message(&req, &user), 0);
    CU_ASSERT_EQUAL(records_persist(r, user, "user"), 0);
    json_object_put(user);
    run_request_release(&req);

    emit(r, "{\"type\":\"turn\",\"turnId\":\"t1\"}");
    emit(r, "{\"type\":\"data\",\"name\":\"agent-status\",\"data\":{\"phase\":"
            "\"environment_starting\"},\"transient\":true}");
    emit(r, "{\"type\":\"data\",\"name\":\"note\",\"data\":{\"k\":1}}");
    emit(r, "{\"type\":\"message_start\",\"id\":\"msg-1\"}");
    emit(r, "{\"type\":\"message_delta\",\"id\":\"msg-1\",\"delta\":\"Hel\"}");
    emit(r, "{\"type\":\"message_delta\",\"id\":\"msg-1\",\"delta\":\"lo, my key is Access run-\"}");
    emit(r, "{\"type\":\"message_delta\",\"id\":\"msg-1\",\"delta\":\"cred-secret-1\"}");
    emit(r, "{\"type\":\"message_end\",\"id\":\"msg-1\"}");
    emit(r, "{\"type\":\"thought_start\",\"id\":\"reason-1\"}");
    emit(r, "{\"type\":\"thought_delta\",\"id\":\"reason-1\",\"delta\":\"think\"}");
    emit(r, "{\"type\":\"thought_end\",\"id\":\"reason-1\"}");
    emit(r, "{\"type\":\"tool_call\",\"id\":\"c1\",\"name\":\"bash\",\"input\":{}}");
    emit(r, "{\"type\":\"tool_call\",\"id\":\"c1\",\"name\":\"bash\",\"input\":{\"command\":\"ls\"}}");
    emit(r, "{\"type\":\"tool_result\",\"id\":\"c1\",\"output\":\"a b\",\"isError\":false}");
    emit(r, "{\"type\":\"interaction_request\",\"id\":\"c1\",\"kind\":\"user_approval\","
            "\"payload\":{\"toolCallId\":\"c1\"}}");
    emit(r, "{\"type\":\"interaction_response\",\"id\":\"c1\",\"kind\":\"user_approval\","
            "\"payload\":{\"approved\":true,\"toolCallId\":\"c1\"}}");
    emit(r, "{\"type\":\"message_delta\",\"id\":\"orphan\",\"delta\":\"x\"}");
    emit(r, "{\"type\":\"usage\",\"input\":1,\"output\":2,\"total\":3,\"cost\":0}");
    emit(r, "{\"type\":\"done\",\"stopReason\":\"end_turn\"}");
    CU_ASSERT_EQUAL(records_flush(r, util_now_ms() + WAIT_MS), 0);
    records_free(r);
    CU_ASSERT_EQUAL_FATAL(fake_http_count_path(fx.http, INGEST), 11);

#define HEAD "\"session_id\":\"s1\",\"turn_id\":\"t1\",\"span_id\":\"b7ad6b7169203331\","
    check_record(&fx, 0, "{" HEAD "\"record_index\":0,\"record_source\":\"user\",\"record_type\":"
                         "\"message\",\"attributes\":{\"type\":\"message\",\"text\":"
                         "\"list it, please\",\"attachments\":[{\"attachmentId\":\"att-1\","
                         "\"filename\":\"a.png\",\"mediaType\":\"image/png\",\"size\":12}]}}");
    check_record(&fx, 1, "{" HEAD "\"record_index\":1,\"record_source\":\"agent\",\"record_type\":"
                         "\"data\",\"attributes\":{\"type\":\"data\",\"name\":\"note\","
                         "\"data\":{\"k\":1}}}");
    check_record(&fx, 2, "{" HEAD "\"record_index\":2,\"record_source\":\"agent\",\"record_type\":"
                         "\"message\",\"attributes\":{\"type\":\"message\",\"text\":"
                         "\"Hello, my key is [ag:redacted:secret:et-1]\"}}");
    check_record(&fx, 3, "{" HEAD "\"record_index\":3,\"record_source\":\"agent\",\"record_type\":"
                         "\"thought\",\"attributes\":{\"type\":\"thought\",\"text\":\"think\"}}");
    check_record(&fx, 4, "{" HEAD "\"record_index\":4,\"record_source\":\"agent\",\"record_type\":"
                         "\"tool_call\",\"record_id\":\"fffbd088-199e-5070-be80-4a3d54ff08fd\","
                         "\"attributes\":{\"type\":\"tool_call\",\"id\":\"c1\",\"name\":\"bash\","
                         "\"input\":{\"command\":\"ls\"}}}");
    check_record(&fx, 5, "{" HEAD "\"record_index\":5,\"record_source\":\"agent\",\"record_type\":"
                         "\"tool_result\",\"record_id\":\"3bfae939-d806-5c12-a99a-6896161771dc\","
                         "\"attributes\":{\"type\":\"tool_result\",\"id\":\"c1\",\"output\":"
                         "\"a b\",\"isError\":false}}");
    check_record(&fx, 6, "{" HEAD "\"record_index\":6,\"record_source\":\"agent\",\"record_type\":"
                         "\"interaction_request\",\"record_id\":"
                         "\"a676871c-f84c-578d-84e5-761d725104de\",\"attributes\":{\"type\":"
                         "\"interaction_request\",\"id\":\"c1\",\"kind\":\"user_approval\","
                         "\"payload\":{\"toolCallId\":\"c1\"}}}");
    check_record(&fx, 7, "{" HEAD "\"record_index\":7,\"record_source\":\"agent\",\"record_type\":"
                         "\"interaction_response\",\"record_id\":"
                         "\"58b9ed33-e2ac-5fcb-aa5a-8f693035e18a\",\"attributes\":{\"type\":"
                         "\"interaction_response\",\"id\":\"c1\",\"kind\":\"user_approval\","
                         "\"payload\":{\"approved\":true,\"toolCallId\":\"c1\"}}}");
    /* a delta without its start is kept as it is, like Agenta's emitter does */
    check_record(&fx, 8, "{" HEAD "\"record_index\":8,\"record_source\":\"agent\",\"record_type\":"
                         "\"message_delta\",\"attributes\":{\"type\":\"message_delta\",\"id\":"
                         "\"orphan\",\"delta\":\"x\"}}");
    check_record(&fx, 9, "{" HEAD "\"record_index\":9,\"record_source\":\"agent\",\"record_type\":"
                         "\"usage\",\"attributes\":{\"type\":\"usage\",\"input\":1,\"output\":2,"
                         "\"total\":3,\"cost\":0}}");
    check_record(&fx, 10, "{" HEAD "\"record_index\":10,\"record_source\":\"agent\",\"record_type\":"
                          "\"done\",\"attributes\":{\"type\":\"done\",\"stopReason\":\"end_turn\"}}");
#undef HEAD
    /* the API saw the credential only where it belongs: the Authorization header */
    CU_ASSERT_FALSE(fake_http_saw(fx.http, "run-cred-secret-1\""));
    {
        json_object *o = fake_http_json(fx.http, INGEST, 2);
        CU_ASSERT_PTR_NULL(strstr(jsonx_text(o, NULL), "run-cred"));
        json_object_put(o);
    }
    fixture_stop(&fx);
}

static void short_ttl(struct agenta_config *cfg)
{
    cfg->record_tool_ttl_ms = 30;
}

static void test_records_tool_call_goes_out_after_idle(void)
{
    struct fixture fx;
    struct records *r;
    json_object *a, *b;

    CU_ASSERT_EQUAL_FATAL(fixture_start(&fx, short_ttl), 0);
    r = emitter(&fx, "p1:s-ttl", "t1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    emit(r, "{\"type\":\"tool_call\",\"id\":\"c1\",\"name\":\"bash\",\"input\":{\"a\":1}}");
    /* nothing else happens: the idle timer sends the snapshot */
    CU_ASSERT_EQUAL(fake_http_wait(fx.http, INGEST, 1, WAIT_MS), 1);
    /* a later snapshot of the same call is a new record with the same stable id */
    emit(r, "{\"type\":\"tool_call\",\"id\":\"c1\",\"name\":\"bash\",\"input\":{\"a\":2}}");
    CU_ASSERT_EQUAL(fake_http_wait(fx.http, INGEST, 2, WAIT_MS), 2);
    a = ingested(&fx, 0);
    b = ingested(&fx, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(a, "record_id")), TEST_STR(jsonx_str(b, "record_id")));
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(a, "record_index")), 0);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(b, "record_index")), 1);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_path(b, "attributes.input.a")), 2);
    json_object_put(a);
    json_object_put(b);
    CU_ASSERT_EQUAL(records_flush(r, util_now_ms() + WAIT_MS), 0);
    records_free(r);
    fixture_stop(&fx);
}

static void test_records_never_block_the_turn(void)
{
    struct fixture fx;
    struct records *r;

    CU_ASSERT_EQUAL_FATAL(fixture_start(&fx, NULL), 0);
    fx.script.gate_closed = true; /* the API holds every request until the gate opens */
    r = emitter(&fx, "p1:s-slow", "t1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    for (int i = 0; i < 50; i++)
        emit(r, "{\"type\":\"data\",\"name\":\"step\",\"data\":{}}");
    /* every event was taken while the API answered nothing: none is delivered yet */
    CU_ASSERT_EQUAL(records_flush(r, util_now_ms() + 50), -ETIMEDOUT);
    script_open(&fx.script);
    /* 0: all of them delivered, none dropped, each in its own request */
    CU_ASSERT_EQUAL(records_flush(r, util_now_ms() + WAIT_MS), 0);
    CU_ASSERT_EQUAL(fake_http_count_path(fx.http, INGEST), 50);
    records_free(r);
    CU_ASSERT_FALSE(records_incomplete_has("p1:s-slow"));
    fixture_stop(&fx);
}

static void test_records_retry_then_drop_and_mark_incomplete(void)
{
    struct fixture fx;
    struct records *r;

    CU_ASSERT_EQUAL_FATAL(fixture_start(&fx, NULL), 0);
    fx.script.fail_first = 2; /* an outage the retries ride out */
    r = emitter(&fx, "p1:s-retry", "t1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    emit(r, "{\"type\":\"done\"}");
    CU_ASSERT_EQUAL(records_flush(r, util_now_ms() + WAIT_MS), 0);
    CU_ASSERT_EQUAL(fake_http_count_path(fx.http, INGEST), 3);
    records_free(r);
    CU_ASSERT_FALSE(records_incomplete_has("p1:s-retry"));

    fx.script.always_fail = true; /* an outage longer than the retries */
    r = emitter(&fx, "p1:s-drop", "t1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    emit(r, "{\"type\":\"done\"}");
    emit(r, "{\"type\":\"done\"}");
    CU_ASSERT_EQUAL(records_flush(r, util_now_ms() + WAIT_MS), -EIO);
    /* both dropped, each after its three tries */
    CU_ASSERT_EQUAL(fake_http_count_path(fx.http, INGEST), 3 + 2 * 3);
    records_free(r);
    CU_ASSERT_TRUE(records_incomplete_has("p1:s-drop"));
    CU_ASSERT_FALSE(records_incomplete_has("p2:s-drop")); /* project-scoped */
    fixture_stop(&fx);
}

static void not_durable(struct agenta_config *cfg)
{
    cfg->records_durable = false;
}

static void test_records_legacy_mode_drops_without_marking(void)
{
    struct fixture fx;
    struct records *r;

    CU_ASSERT_EQUAL_FATAL(fixture_start(&fx, not_durable), 0);
    fx.script.always_fail = true;
    r = emitter(&fx, "p1:s-legacy", "t1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    emit(r, "{\"type\":\"done\"}");
    CU_ASSERT_EQUAL(records_flush(r, util_now_ms() + WAIT_MS), -EIO);
    CU_ASSERT_EQUAL(fake_http_count_path(fx.http, INGEST), 3); /* three tries, linear */
    records_free(r);
    CU_ASSERT_FALSE(records_incomplete_has("p1:s-legacy"));
    fixture_stop(&fx);
}

static void test_records_keep_session_order_across_turns(void)
{
    struct fixture fx;
    struct records *a, *b;
    json_object *body;

    CU_ASSERT_EQUAL_FATAL(fixture_start(&fx, NULL), 0);
    fx.script.gate_closed = true;
    a = emitter(&fx, "p1:s-order", "t1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    emit(a, "{\"type\":\"data\",\"name\":\"a0\",\"data\":{}}");
    emit(a, "{\"type\":\"data\",\"name\":\"a1\",\"data\":{}}");
    body = test_json("{\"session_id\":\"s-order\",\"turn_id\":\"t1\"}");
    CU_ASSERT_EQUAL(records_send(a, AGENTA_PATH_INTERACTIONS_CANCEL_STALE, body, 1), 0);
    json_object_put(body);
    /* the turn ends with its records still queued: they keep going in the background */
    records_free(a);
    b = emitter(&fx, "p1:s-order", "t2");
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    emit(b, "{\"type\":\"data\",\"name\":\"b0\",\"data\":{}}");
    script_open(&fx.script);
    CU_ASSERT_EQUAL(records_flush(b, util_now_ms() + WAIT_MS), 0);
    records_free(b);
    CU_ASSERT_EQUAL(records_outbox_drain_all(util_now_ms() + WAIT_MS), 0);
    CU_ASSERT_EQUAL_FATAL(fake_http_count(fx.http), 4);
    for (size_t i = 0; i < 4; i++) {
        static const char *const want[] = {"a0", "a1", NULL, "b0"};
        struct fake_request req;

        CU_ASSERT_EQUAL_FATAL(fake_http_get(fx.http, i, &req), 0);
        if (want[i]) {
            CU_ASSERT_PTR_NOT_NULL(strstr(req.body, want[i]));
        } else {
            CU_ASSERT_STRING_EQUAL(req.path, AGENTA_PATH_INTERACTIONS_CANCEL_STALE);
        }
        CU_ASSERT_STRING_EQUAL(req.authorization, CRED);
        fake_request_release(&req);
    }
    fixture_stop(&fx);
}

static void test_records_a_failed_call_is_no_hole_in_the_log(void)
{
    struct fixture fx;
    struct records *r;
    json_object *body;

    CU_ASSERT_EQUAL_FATAL(fixture_start(&fx, NULL), 0);
    fx.script.missing = AGENTA_PATH_INTERACTIONS_TRANSITION;
    r = emitter(&fx, "p1:s-call", "t1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    emit(r, "{\"type\":\"done\"}");
    body = agenta_transition_body("s-call", "tok", "approved", "c1");
    CU_ASSERT_EQUAL(records_send(r, AGENTA_PATH_INTERACTIONS_TRANSITION, body, 1), 0);
    json_object_put(body);
    /* the record is delivered, the call dropped after its one try: still 0 */
    CU_ASSERT_EQUAL(records_flush(r, util_now_ms() + WAIT_MS), 0);
    CU_ASSERT_EQUAL(fake_http_count_path(fx.http, INGEST), 1);
    CU_ASSERT_EQUAL(fake_http_count_path(fx.http, AGENTA_PATH_INTERACTIONS_TRANSITION), 1);
    records_free(r);
    CU_ASSERT_FALSE(records_incomplete_has("p1:s-call"));
    fixture_stop(&fx);
}

static int user_message_of(const char *json, json_object **ret)
{
    struct request_limits lim;
    struct run_request req;
    char err[256];
    int r;

    request_limits_default(&lim);
    r = request_parse(json, strlen(json), &lim, &req, err, sizeof(err));
    if (r < 0)
        return r;
    r = records_user_message(&req, ret);
    run_request_release(&req);
    return r;
}

static void test_records_user_message_shape(void)
{
    json_object *g = test_shared_json("run_request.attachment.json"), *ev = NULL;
    struct request_limits lim;
    struct run_request req;
    const char *text;
    char err[256];
    size_t n;

    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    /* the golden attachment request: the golden's credentialMode is runtime_provided, which
     * this runner refuses at parse time, so only its messages are used */
    text = jsonx_text(jsonx_get(g, "messages"), &n);
    {
        struct buf body;

        buf_init(&body, 1 << 20);
        buf_printf(&body, "{\"sessionId\":\"sess-attachment\",\"messages\":%.*s}", (int)n, text);
        request_limits_default(&lim);
        CU_ASSERT_EQUAL_FATAL(request_parse(body.data, body.len, &lim, &req, err, sizeof(err)), 0);
        buf_release(&body);
    }
    CU_ASSERT_EQUAL_FATAL(records_user_message(&req, &ev), 0);
    CU_ASSERT_TRUE(test_json_is(ev,
                                "{\"type\":\"message\",\"text\":\"Describe this image.\","
                                "\"attachments\":[{\"attachmentId\":"
                                "\"019c471b-5b91-71d2-9d4b-5486013e6e9b\",\"filename\":"
                                "\"photo.png\",\"mediaType\":\"image/png\",\"size\":482113}]}"));
    json_object_put(ev);
    run_request_release(&req);
    json_object_put(g);

    CU_ASSERT_EQUAL(user_message_of("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &ev),
                    0);
    CU_ASSERT_TRUE(test_json_is(ev, "{\"type\":\"message\",\"text\":\"hi\",\"attachments\":[]}"));
    json_object_put(ev);
    /* an approval answer, a blank message, an assistant tail: no fresh user message */
    CU_ASSERT_EQUAL(user_message_of("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                                    "\"tool_result\",\"toolCallId\":\"c1\",\"output\":{"
                                    "\"approved\":true}}]}]}",
                                    &ev),
                    -ENOENT);
    CU_ASSERT_EQUAL(user_message_of("{\"messages\":[{\"role\":\"user\",\"content\":\" \\n \"}]}",
                                    &ev),
                    -ENOENT);
    CU_ASSERT_EQUAL(user_message_of("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                                    "{\"role\":\"assistant\",\"content\":\"b\"}]}",
                                    &ev),
                    -ENOENT);
    CU_ASSERT_EQUAL(user_message_of("{\"messages\":[]}", &ev), -ENOENT);
    /* an inline image alone is content */
    CU_ASSERT_EQUAL(user_message_of("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                                    "\"image\",\"data\":\"aGk=\",\"mimeType\":\"image/png\"}]}]}",
                                    &ev),
                    0);
    json_object_put(ev);
}

static void test_records_refuse_bad_parameters(void)
{
    struct records_params p = {.session_key = "", .session_id = "s"};
    struct fixture fx;
    struct records *r = NULL;
    json_object *ev = test_json("{\"text\":\"no type\"}");

    CU_ASSERT_EQUAL_FATAL(fixture_start(&fx, NULL), 0);
    CU_ASSERT_EQUAL(records_new(fx.api, fx.rd, &p, &r), -EINVAL);
    p.session_key = "p:s";
    p.session_id = NULL;
    CU_ASSERT_EQUAL(records_new(fx.api, fx.rd, &p, &r), -EINVAL);
    r = emitter(&fx, "p1:s-bad", "t1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(records_persist(r, ev, "user"), -EINVAL);
    records_event(r, ev); /* ignored: nothing to call it */
    CU_ASSERT_EQUAL(records_send(r, "no-slash", ev, 1), -EINVAL);
    CU_ASSERT_EQUAL(records_flush(r, util_now_ms() + WAIT_MS), 0);
    CU_ASSERT_EQUAL(fake_http_count(fx.http), 0);
    records_free(r);
    records_free(NULL);
    json_object_put(ev);
    fixture_stop(&fx);
}

/* The mark is a file every worker (another process) sees, and names the session inside. */
static void test_records_incomplete_mark_is_shared_by_processes(void)
{
    char dir[] = "/tmp/ar-records-XXXXXX", sub[128], path[512], *data = NULL;
    size_t len = 0, nfiles = 0;
    struct dirent *de;
    pid_t pid;
    int status;
    DIR *d;

    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(sub, sizeof(sub), "%s/platform/incomplete", dir);
    CU_ASSERT_EQUAL(records_incomplete_dir("relative/dir"), -EINVAL);
    CU_ASSERT_EQUAL_FATAL(records_incomplete_dir(sub), 0);
    pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        /* another worker drops a record of this session */
        records_incomplete_note("p9:s-other-worker");
        _exit(records_incomplete_has("p9:s-other-worker") ? 0 : 1);
    }
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CU_ASSERT_TRUE(records_incomplete_has("p9:s-other-worker"));
    CU_ASSERT_FALSE(records_incomplete_has("p9:s-fine"));
    d = opendir(sub);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        nfiles++;
        CU_ASSERT_EQUAL(strlen(de->d_name), 64); /* sha256 in hex: any key is a file name */
        snprintf(path, sizeof(path), "%s/%s", sub, de->d_name);
    }
    closedir(d);
    CU_ASSERT_EQUAL(nfiles, 1);
    CU_ASSERT_EQUAL_FATAL(util_read_file(path, 4096, &data, &len), 0);
    CU_ASSERT_STRING_EQUAL(data, "p9:s-other-worker");
    free(data);
    /* without the folder, only this process's own marks count */
    CU_ASSERT_EQUAL(records_incomplete_dir(NULL), 0);
    CU_ASSERT_FALSE(records_incomplete_has("p9:s-other-worker"));
    CU_ASSERT_EQUAL(fstree_remove(dir), 0);
}

CU_TestInfo records_tests[] = {
    {"coalesce_a_turn_like_agenta", test_records_coalesce_a_turn_like_agenta},
    {"tool_call_goes_out_after_idle", test_records_tool_call_goes_out_after_idle},
    {"never_block_the_turn", test_records_never_block_the_turn},
    {"retry_then_drop_and_mark_incomplete", test_records_retry_then_drop_and_mark_incomplete},
    {"legacy_mode_drops_without_marking", test_records_legacy_mode_drops_without_marking},
    {"keep_session_order_across_turns", test_records_keep_session_order_across_turns},
    {"a_failed_call_is_no_hole_in_the_log", test_records_a_failed_call_is_no_hole_in_the_log},
    {"user_message_shape", test_records_user_message_shape},
    {"refuse_bad_parameters", test_records_refuse_bad_parameters},
    {"incomplete_mark_is_shared_by_processes",
     test_records_incomplete_mark_is_shared_by_processes},
    CU_TEST_INFO_NULL,
};
