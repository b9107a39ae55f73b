/* platform: a session run in Agenta's platform, against a scripted fake API (fake_http). */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "agenta/heartbeat.h"
#include "agenta/platform.h"
#include "agenta/records.h"
#include "base/jsonx.h"
#include "base/util.h"
#include "fake_http.h"
#include "harness/harness.h"
#include "request/request.h"
#include "suites.h"
#include "suites_platform.h"

#define CRED "Access run-cred-platform-1"
#define WAIT_MS 10000
#define UUID_A "019c471b-5b91-71d2-9d4b-5486013e6e9b"
#define TURN_UUID "6f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f"

static int parse(const char *json, struct run_request *req)
{
    struct request_limits lim;
    char err[256];

    request_limits_default(&lim);
    lim.allow_scripted = true;
    return request_parse(json, strlen(json), &lim, req, err, sizeof(err));
}

/* ---- pure helpers -------------------------------------------------------------------------- */

static void test_platform_harness_kinds(void)
{
    static const struct {
        const char *name;
        const char *kind;
    } cases[] = {{"pi_core", "pi_core"}, {"pi_agenta", "pi_agenta"}, {"pi", "pi_core"},
                 {"claude", "claude"},   {"codex", "codex"},         {"opencode", "opencode"},
                 {"scripted", NULL}};
    char json[256];

    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct run_request req;
        const char *kind;

        snprintf(json, sizeof(json),
                 "{\"harness\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                 cases[i].name);
        CU_ASSERT_EQUAL_FATAL(parse(json, &req), 0);
        kind = platform_harness_kind(&req);
        if (cases[i].kind) {
            CU_ASSERT_STRING_EQUAL(TEST_STR(kind), cases[i].kind);
        } else {
            CU_ASSERT_PTR_NULL(kind);
        }
        run_request_release(&req);
    }
}


static void test_platform_model_images_reach_pis_model_list(void)
{
    struct harness_paths paths = {.harness_dir = "/nonexistent"};
    const struct harness_ops *pi = harness_get(HARNESS_PI);
    struct run_request req;
    struct sandbox_plan plan;
    json_object *models = NULL;
    const char *content = NULL;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(
        parse("{\"harness\":\"pi_core\",\"model\":\"m1\",\"modelCapabilities\":"
              "{\"inputModalities\":[\"text\",\"image\"]},\"modelConnection\":{\"provider\":"
              "\"openai\",\"deployment\":\"custom\",\"endpoint\":{\"baseUrl\":"
              "\"https://m.example/v1\"},\"credentialMode\":\"env\",\"credentials\":[{\"binding\":"
              "{\"kind\":\"environment\",\"name\":\"OPENAI_API_KEY\"},\"value\":\"sk-1\","
              "\"usage\":\"opaque_http\"}]},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
              &req),
        0);
    CU_ASSERT_TRUE(run_request_model_takes_images(&req));
    sandbox_plan_init(&plan);
    CU_ASSERT_EQUAL_FATAL(pi->plan(&paths, &req, &plan, err, sizeof(err)), 0);
    for (size_t i = 0; i < json_object_array_length(plan.files); i++) {
        json_object *f = json_object_array_get_idx(plan.files, i);
        const char *path = jsonx_str(f, "path");
        if (path && strstr(path, "models.json"))
            content = jsonx_str(f, "content");
    }
    CU_ASSERT_PTR_NOT_NULL_FATAL(content);
    models = test_json(content);
    CU_ASSERT_STRING_EQUAL(
        jsonx_text(jsonx_get(json_object_array_get_idx(
                                 jsonx_path(models, "providers.custom.models"), 0),
                             "input"),
                   NULL),
        "[\"text\",\"image\"]");
    json_object_put(models);
    sandbox_plan_release(&plan);
    run_request_release(&req);
}

/* ---- runs against a scripted API ------------------------------------------------------------ */

struct api_script {
    atomic_bool refuse;
};

static void api_answer(void *ctx, size_t n, const struct fake_request *req,
                       struct fake_response *resp)
{
    struct api_script *s = ctx;
    const char *body = "{}";

    (void)n;
    if (strcmp(req->path, AGENTA_PATH_HEARTBEAT) == 0)
        body = atomic_load(&s->refuse)
                   ? "{\"stream\":null,\"replica_id\":\"other\",\"is_current_turn\":false,"
                     "\"admitted\":false}"
                   : "{\"stream\":{\"id\":\"7a1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f\"},"
                     "\"replica_id\":\"replica-1\",\"is_current_turn\":true,\"admitted\":true}";
    else if (strcmp(req->path, AGENTA_PATH_TURNS_QUERY) == 0)
        body = "{\"count\":1,\"turns\":[{\"turn_index\":4,\"end_time\":\"2026-01-01T00:00:00Z\"}]}";
    resp->body = strdup(body);
    resp->body_len = strlen(body);
}

struct run_fixture {
    struct api_script script;
    struct fake_http *http;
    struct agenta_config acfg;
    struct engine_config cfg;
    struct run_request req;
    struct event_stream es;
    struct run_result res;
};

#define RUN_REQUEST                                                                             \
    "{\"harness\":\"pi_core\",\"sessionId\":\"s1\",\"projectId\":\"p1\",\"turnId\":\"" TURN_UUID \
    "\",\"telemetry\":{\"exporters\":{\"otlp\":{\"headers\":{\"authorization\":\"" CRED "\"}}}},"  \
    "\"effectiveParameters\":{\"t\":1},\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":" \
    "\"text\",\"text\":\"Hello " CRED "\"}]}]}"

/* A cold turn whose new message answers an approval of an earlier turn. */
#define ANSWER_REQUEST                                                                          \
    "{\"harness\":\"pi_core\",\"sessionId\":\"s1\",\"turnId\":\"" TURN_UUID "\","             \
    "\"messages\":[{\"role\":\"user\",\"content\":\"go\"},{\"role\":\"user\",\"content\":"     \
    "[{\"type\":\"tool_result\",\"toolCallId\":\"old\",\"output\":{\"approved\":true,"           \
    "\"interactionToken\":\"tok-old\"}}]}]}"

static int run_fixture_start(struct run_fixture *fx, bool refuse, const char *request)
{
    memset(fx, 0, sizeof(*fx));
    atomic_init(&fx->script.refuse, refuse);
    fx->http = fake_http_start(api_answer, &fx->script);
    if (!fx->http || test_agenta_config(fake_http_url(fx->http), &fx->acfg) < 0)
        return -1;
    fx->cfg.agenta = &fx->acfg;
    fx->cfg.state_dir = "/nonexistent";
    event_stream_init(&fx->es, NULL);
    run_result_init(&fx->res);
    return parse(request, &fx->req);
}

static void run_fixture_stop(struct run_fixture *fx)
{
    CU_ASSERT_EQUAL(platform_worker_stop(util_now_ms() + WAIT_MS), 0);
    run_result_release(&fx->res);
    event_stream_release(&fx->es);
    run_request_release(&fx->req);
    fake_http_stop(fx->http);
}

static void test_platform_off_makes_no_call(void)
{
    struct run_fixture fx;
    struct platform *p = (struct platform *)&fx;
    json_object *evs;

    CU_ASSERT_EQUAL_FATAL(run_fixture_start(&fx, false, RUN_REQUEST), 0);
    fx.cfg.agenta = NULL; /* no AGENTA_API_INTERNAL_URL / AGENTA_API_URL */
    CU_ASSERT_EQUAL(platform_start(&fx.cfg, &fx.req, "p1:s1", "", &fx.es, &fx.res, &p), 0);
    CU_ASSERT_PTR_NULL(p);
    /* every other call is a no-op on NULL */
    platform_event(NULL, NULL);
    platform_turn_begins(NULL, &fx.req, NULL, 0, false);
    CU_ASSERT_EQUAL(platform_rebuild(NULL, &fx.req, NULL, NULL, 0), 0);
    CU_ASSERT_FALSE(platform_interrupted(NULL));
    platform_finish(NULL, &fx.res, NULL);
    platform_free(NULL);
    /* a run without a session takes no part either */
    fx.cfg.agenta = &fx.acfg;
    fx.req.session_id = NULL;
    CU_ASSERT_EQUAL(platform_start(&fx.cfg, &fx.req, "", "", &fx.es, &fx.res, &p), 0);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_EQUAL(fake_http_count(fx.http), 0);
    evs = event_stream_take(&fx.es);
    CU_ASSERT_EQUAL(json_object_array_length(evs), 0);
    json_object_put(evs);
    run_fixture_stop(&fx);
}

static void test_platform_refused_turn_has_no_side_effect(void)
{
    struct run_fixture fx;
    struct platform *p = NULL;
    json_object *evs, *beat;

    CU_ASSERT_EQUAL_FATAL(run_fixture_start(&fx, true, RUN_REQUEST), 0);
    CU_ASSERT_EQUAL(platform_start(&fx.cfg, &fx.req, "p1:s1", "", &fx.es, &fx.res, &p), -EBUSY);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_FALSE(fx.res.ok);
    CU_ASSERT_STRING_EQUAL(TEST_STR(fx.res.error), HEARTBEAT_REFUSED_MESSAGE);
    evs = event_stream_take(&fx.es);
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(evs), 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(json_object_array_get_idx(evs, 0), "code")),
                           HEARTBEAT_REFUSED_CODE);
    json_object_put(evs);
    /* the first beat and the final one, nothing else */
    CU_ASSERT_EQUAL(fake_http_count(fx.http), 2);
    CU_ASSERT_EQUAL(fake_http_count_path(fx.http, AGENTA_PATH_HEARTBEAT), 2);
    beat = fake_http_json(fx.http, AGENTA_PATH_HEARTBEAT, 1);
    CU_ASSERT_FALSE(json_object_get_boolean(jsonx_get(beat, "is_running")));
    json_object_put(beat);
    run_fixture_stop(&fx);
}

static json_object *event_of(const char *json)
{
    return test_json(json);
}

static void test_platform_admitted_run_writes_log_rows_and_ledger(void)
{
    struct run_fixture fx;
    struct platform *p = NULL;
    struct approval_gate parked[1];
    json_object *evs, *o, *ev;
    char trace[] = "0af7651916cd43dd8448eb211c80319c";

    CU_ASSERT_EQUAL_FATAL(run_fixture_start(&fx, false, RUN_REQUEST), 0);
    CU_ASSERT_EQUAL_FATAL(platform_start(&fx.cfg, &fx.req, "p1:s1", trace, &fx.es, &fx.res, &p),
                          0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    /* the live-only turn event first */
    evs = event_stream_take(&fx.es);
    CU_ASSERT_EQUAL_FATAL(json_object_array_length(evs), 1);
    CU_ASSERT_STRING_EQUAL(jsonx_text(json_object_array_get_idx(evs, 0), NULL),
                           "{\"type\":\"turn\",\"turnId\":\"" TURN_UUID "\"}");
    json_object_put(evs);

    memset(parked, 0, sizeof(parked));
    snprintf(parked[0].tool_call_id, sizeof(parked[0].tool_call_id), "w1");
    snprintf(parked[0].token, sizeof(parked[0].token), "tok-w1");
    platform_turn_begins(p, &fx.req, parked, 1, true);

    ev = event_of("{\"type\":\"interaction_request\",\"id\":\"w2\",\"kind\":\"user_approval\","
                  "\"payload\":{\"toolCallId\":\"w2\",\"interactionToken\":\"tok-w2\","
                  "\"toolCall\":{\"toolCallId\":\"w2\",\"resolvedName\":\"Write\",\"rawInput\":"
                  "{\"path\":\"a\",\"key\":\"" CRED "\"}}}}");
    platform_event(p, ev);
    json_object_put(ev);
    /* the parked gate's answer: its token comes from the parked gates */
    ev = event_of("{\"type\":\"interaction_response\",\"id\":\"w1\",\"kind\":\"user_approval\","
                  "\"payload\":{\"approved\":false,\"toolCallId\":\"w1\"}}");
    platform_event(p, ev);
    json_object_put(ev);
    /* once ids are tokens, the id is enough */
    ev = event_of("{\"type\":\"interaction_response\",\"id\":\"tok-w2\",\"kind\":\"user_approval\","
                  "\"payload\":{\"approved\":true,\"toolCallId\":\"w2\"}}");
    platform_event(p, ev);
    json_object_put(ev);
    fx.res.ok = true;
    fx.res.stop_reason = strdup("end_turn");
    platform_finish(p, &fx.res, "acp-1");
    platform_free(p);
    CU_ASSERT_EQUAL(platform_worker_stop(util_now_ms() + WAIT_MS), 0);

    /* the user's message first, redacted */
    o = fake_http_json(fx.http, AGENTA_PATH_RECORDS_INGEST, 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(o, "record_source")), "user");
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(o, "record_index")), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(TEST_STR(jsonx_str(jsonx_get(o, "attributes"), "text")),
                                  "[ag:redacted:secret:"));
    json_object_put(o);
    CU_ASSERT_FALSE(fake_http_saw(fx.http, "run-cred-platform-1\""));
    CU_ASSERT_FALSE(fake_http_saw(fx.http, "\"Hello " CRED));
    /* cancel-stale spares the parked gate */
    o = fake_http_json(fx.http, AGENTA_PATH_INTERACTIONS_CANCEL_STALE, 0);
    CU_ASSERT_STRING_EQUAL(jsonx_text(o, NULL), "{\"session_id\":\"s1\",\"turn_id\":\"" TURN_UUID
                                                "\",\"tokens\":[\"tok-w1\"]}");
    json_object_put(o);
    /* the row of the new gate, its arguments redacted */
    o = fake_http_json(fx.http, AGENTA_PATH_INTERACTIONS, 0);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(o, "token")), "tok-w2");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_path(o, "data.request"), "tool")), "Write");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_path(o, "data.request"), "tool_call_id")),
                           "w2");
    CU_ASSERT_PTR_NOT_NULL(strstr(jsonx_text(jsonx_path(o, "data.request.args"), NULL),
                                  "[ag:redacted:secret:"));
    CU_ASSERT_STRING_EQUAL(jsonx_text(jsonx_path(o, "data.parameters"), NULL), "{\"t\":1}");
    json_object_put(o);
    /* both answers resolve their rows */
    CU_ASSERT_EQUAL(fake_http_count_path(fx.http, AGENTA_PATH_INTERACTIONS_TRANSITION), 2);
    o = fake_http_json(fx.http, AGENTA_PATH_INTERACTIONS_TRANSITION, 0);
    CU_ASSERT_STRING_EQUAL(jsonx_text(o, NULL),
                           "{\"session_id\":\"s1\",\"token\":\"tok-w1\",\"status\":\"resolved\","
                           "\"resolution\":{\"verdict\":\"denied\",\"tool_call_id\":\"w1\"}}");
    json_object_put(o);
    o = fake_http_json(fx.http, AGENTA_PATH_INTERACTIONS_TRANSITION, 1);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(o, "token")), "tok-w2");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(jsonx_get(o, "resolution"), "verdict")),
                           "approved");
    json_object_put(o);
    /* the ledger: the latest row was completed (index 4), so this turn is 5, then complete */
    o = fake_http_json(fx.http, AGENTA_PATH_TURNS, 0);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(o, "turn_index")), 5);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(o, "harness_kind")), "pi_core");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(o, "turn_id")), TURN_UUID);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(o, "stream_id")),
                           "7a1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f");
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(o, "trace_id")),
                           "0af76519-16cd-43dd-8448-eb211c80319c");
    json_object_put(o);
    o = fake_http_json(fx.http, AGENTA_PATH_TURNS_COMPLETE, 0);
    CU_ASSERT_EQUAL(json_object_get_int(jsonx_get(o, "turn_index")), 5);
    CU_ASSERT_STRING_EQUAL(TEST_STR(jsonx_str(o, "agent_session_id")), "acp-1");
    CU_ASSERT_PTR_NOT_NULL(jsonx_str(o, "end_time"));
    json_object_put(o);
    /* the final beat */
    o = fake_http_json(fx.http, AGENTA_PATH_HEARTBEAT,
                       fake_http_count_path(fx.http, AGENTA_PATH_HEARTBEAT) - 1);
    CU_ASSERT_FALSE(json_object_get_boolean(jsonx_get(o, "is_running")));
    json_object_put(o);
    run_fixture_stop(&fx);
}

static void test_platform_paused_turn_is_not_completed(void)
{
    struct run_fixture fx;
    struct platform *p = NULL;

    CU_ASSERT_EQUAL_FATAL(run_fixture_start(&fx, false, ANSWER_REQUEST), 0);
    CU_ASSERT_EQUAL_FATAL(platform_start(&fx.cfg, &fx.req, "", "", &fx.es, &fx.res, &p), 0);
    platform_turn_begins(p, &fx.req, NULL, 0, false);
    fx.res.ok = true;
    fx.res.stop_reason = strdup("paused");
    platform_finish(p, &fx.res, NULL);
    platform_free(p);
    CU_ASSERT_EQUAL(platform_worker_stop(util_now_ms() + WAIT_MS), 0);
    CU_ASSERT_EQUAL(fake_http_count_path(fx.http, AGENTA_PATH_TURNS), 1);
    CU_ASSERT_EQUAL(fake_http_count_path(fx.http, AGENTA_PATH_TURNS_COMPLETE), 0);
    /* a cold turn answers the request's approvals in band: the row is resolved now, and
     * spared by the sweep */
    CU_ASSERT_EQUAL(fake_http_count_path(fx.http, AGENTA_PATH_INTERACTIONS_TRANSITION), 1);
    CU_ASSERT_TRUE(fake_http_saw(fx.http, "\"token\":\"tok-old\""));
    CU_ASSERT_TRUE(fake_http_saw(fx.http, "\"tokens\":[\"tok-old\"]"));
    /* an approval answer is no new user message: nothing is persisted as one */
    CU_ASSERT_FALSE(fake_http_saw(fx.http, "\"record_source\":\"user\""));
    run_fixture_stop(&fx);
}

static void test_platform_refuses_bad_attachment_lists_before_any_call(void)
{
    struct run_fixture fx;
    struct platform *p = NULL;
    struct buf json;

    CU_ASSERT_EQUAL_FATAL(
        run_fixture_start(&fx, false,
                          "{\"sessionId\":\"s1\",\"messages\":[{\"role\":\"user\",\"content\":"
                          "[{\"type\":\"attachment\",\"attachmentId\":\"not-a-uuid\"}]}]}"),
        0);
    CU_ASSERT_EQUAL(platform_start(&fx.cfg, &fx.req, "", "", &fx.es, &fx.res, &p),
                    AR_E_INVALID_REQUEST);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_PTR_NOT_NULL(strstr(TEST_STR(fx.res.error), "Attachment reference is invalid"));
    run_request_release(&fx.req);
    /* more than AGENTA_ATTACHMENTS_MAX_PER_TURN */
    fx.acfg.attachments_max_per_turn = 2;
    buf_init(&json, 1 << 16);
    buf_append_str(&json, "{\"sessionId\":\"s1\",\"messages\":[{\"role\":\"user\",\"content\":[");
    for (int i = 0; i < 3; i++)
        buf_printf(&json, "%s{\"type\":\"attachment\",\"attachmentId\":\"%s\"}", i ? "," : "",
                   UUID_A);
    buf_append_str(&json, "]}]}");
    CU_ASSERT_EQUAL_FATAL(parse(buf_str(&json), &fx.req), 0);
    buf_release(&json);
    run_result_release(&fx.res);
    run_result_init(&fx.res);
    CU_ASSERT_EQUAL(platform_start(&fx.cfg, &fx.req, "", "", &fx.es, &fx.res, &p),
                    AR_E_INVALID_REQUEST);
    CU_ASSERT_STRING_EQUAL(TEST_STR(fx.res.error), "A user turn may carry at most 2 attachments.");
    CU_ASSERT_EQUAL(fake_http_count(fx.http), 0);
    run_fixture_stop(&fx);
}

CU_TestInfo platform_tests[] = {
    {"harness_kinds", test_platform_harness_kinds},
    {"model_images_reach_pis_model_list", test_platform_model_images_reach_pis_model_list},
    {"off_makes_no_call", test_platform_off_makes_no_call},
    {"refused_turn_has_no_side_effect", test_platform_refused_turn_has_no_side_effect},
    {"admitted_run_writes_log_rows_and_ledger",
     test_platform_admitted_run_writes_log_rows_and_ledger},
    {"paused_turn_is_not_completed", test_platform_paused_turn_is_not_completed},
    {"refuses_bad_attachment_lists_before_any_call",
     test_platform_refuses_bad_attachment_lists_before_any_call},
    CU_TEST_INFO_NULL,
};
