/*
 * unit-tests — runs every CUnit suite (or only the one named in argv[1]) with the basic
 * interface and exits with the number of failed assertions (0 = success, capped at 255).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <CUnit/Basic.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "suites.h"
#include "suites_platform.h"

#define FIXTURE_MAX (16u * 1024 * 1024)

const char *test_shared_dir(void)
{
    static const char *dir;
    const char *env;
    struct stat st;

    if (dir)
        return dir;
    env = getenv("AR_SHARED");
    if (env && env[0] && stat(env, &st) == 0 && S_ISDIR(st.st_mode)) {
        dir = env;
    } else {
        if (env && env[0])
            fprintf(stderr, "unit-tests: AR_SHARED \"%s\" is not a folder, using \"%s\"\n", env,
                    TEST_SHARED_DEFAULT);
        dir = TEST_SHARED_DEFAULT;
    }
    return dir;
}

int test_read_shared(const char *name, char **ret_data, size_t *ret_len)
{
    char path[4096];
    int n = snprintf(path, sizeof(path), "%s/%s", test_shared_dir(), name);

    if (n < 0 || (size_t)n >= sizeof(path))
        return -ENAMETOOLONG;
    return util_read_file(path, FIXTURE_MAX, ret_data, ret_len);
}

json_object *test_json(const char *text)
{
    json_object *o = NULL;
    char err[128];

    if (jsonx_parse(text, strlen(text), JSONX_DEFAULT_DEPTH, &o, err, sizeof(err)) < 0)
        return NULL;
    return o;
}

bool test_json_is(json_object *o, const char *want)
{
    json_object *w = test_json(want);
    bool eq = w && o && json_object_equal(o, w);

    if (!eq)
        fprintf(stderr, "\n  got:  %s\n  want: %s\n", jsonx_text(o, NULL), want);
    json_object_put(w);
    return eq;
}

json_object *test_shared_json(const char *name)
{
    json_object *o;
    char *data;
    size_t len;

    if (test_read_shared(name, &data, &len) < 0)
        return NULL;
    o = test_json(data);
    free(data);
    return o;
}

static int sink_write(void *ctx, const char *line, size_t len)
{
    struct test_sink *s = ctx;
    json_object *rec = NULL;
    char err[128];

    s->calls++;
    if (s->fail_at && s->calls >= s->fail_at)
        return -EPIPE;
    if (len == 0 || line[len - 1] != '\n' || memchr(line, '\n', len - 1) ||
        jsonx_parse(line, len - 1, JSONX_DEFAULT_DEPTH, &rec, err, sizeof(err)) < 0 || !rec ||
        !json_object_is_type(rec, json_type_object)) {
        json_object_put(rec);
        s->bad_lines++;
        return 0;
    }
    json_object_array_add(s->records, rec);
    return 0;
}

void test_sink_init(struct test_sink *s, size_t fail_at, struct event_sink *ret_sink)
{
    memset(s, 0, sizeof(*s));
    s->fail_at = fail_at;
    s->records = json_object_new_array();
    memset(ret_sink, 0, sizeof(*ret_sink));
    ret_sink->write_line = sink_write;
    ret_sink->ctx = s;
}

void test_sink_release(struct test_sink *s)
{
    json_object_put(s->records);
    memset(s, 0, sizeof(*s));
}

size_t test_sink_count(const struct test_sink *s)
{
    return json_object_array_length(s->records);
}

json_object *test_sink_event(const struct test_sink *s, size_t i)
{
    if (i >= json_object_array_length(s->records))
        return NULL;
    return jsonx_get(json_object_array_get_idx(s->records, i), "event");
}

static CU_SuiteInfo suites[] = {
    {"acp", NULL, NULL, NULL, NULL, acp_tests},
    {"request", NULL, NULL, NULL, NULL, request_tests},
    {"request_tools", NULL, NULL, NULL, NULL, request_tools_tests},
    {"request_mcp", NULL, NULL, NULL, NULL, request_mcp_tests},
    {"events", NULL, NULL, NULL, NULL, events_tests},
    {"journal", NULL, NULL, NULL, NULL, journal_tests},
    {"run_turn", NULL, NULL, NULL, NULL, run_turn_tests},
    {"run_limits", NULL, NULL, NULL, NULL, run_limits_tests},
    {"pool", NULL, NULL, NULL, NULL, pool_tests},
    {"cluster", NULL, NULL, NULL, NULL, cluster_tests},
    {"spare", NULL, NULL, NULL, NULL, spare_tests},
    {"identity", NULL, NULL, NULL, NULL, identity_tests},
    {"kept", NULL, NULL, NULL, NULL, kept_tests},
    {"policy", NULL, NULL, NULL, NULL, policy_tests},
    {"env_setup", NULL, NULL, NULL, NULL, env_setup_tests},
    {"transcript", NULL, NULL, NULL, NULL, transcript_tests},
    {"redact", NULL, NULL, NULL, NULL, redact_tests},
    {"agenta_config", NULL, NULL, NULL, NULL, agenta_config_tests},
    {"agenta_bodies", NULL, NULL, NULL, NULL, agenta_bodies_tests},
    {"agenta_disposition", NULL, NULL, NULL, NULL, agenta_disposition_tests},
    {"agenta_api", NULL, NULL, NULL, NULL, agenta_api_tests},
    {"ids", NULL, NULL, NULL, NULL, ids_tests},
    {"records", NULL, NULL, NULL, NULL, records_tests},
    {"reconstruct", NULL, NULL, NULL, NULL, reconstruct_tests},
    {"heartbeat", NULL, NULL, NULL, NULL, heartbeat_tests},
    {"platform", NULL, NULL, NULL, NULL, platform_tests},
    {"platform_attach", NULL, NULL, NULL, NULL, platform_attach_tests},
    {"keeper_proto", NULL, NULL, NULL, NULL, keeper_proto_tests},
    {"keeper_channel", NULL, NULL, NULL, NULL, keeper_channel_tests},
    {"turn_channel", NULL, NULL, NULL, NULL, turn_channel_tests},
    {"harness", NULL, NULL, NULL, NULL, harness_tests},
    {"provider", NULL, NULL, NULL, NULL, provider_tests},
    {"session", NULL, NULL, NULL, NULL, session_tests},
    {"admin", NULL, NULL, NULL, NULL, admin_tests},
    {"engine_config", NULL, NULL, NULL, NULL, engine_config_tests},
    {"engine_worker", NULL, NULL, NULL, NULL, engine_worker_tests},
    {"turn_loop", NULL, NULL, NULL, NULL, turn_loop_tests},
    {"env_link", NULL, NULL, NULL, NULL, env_link_tests},
    {"httpc", NULL, NULL, NULL, NULL, httpc_tests},
    {"tool_http", NULL, NULL, NULL, NULL, tool_http_tests},
    {"ssrf_guard", NULL, NULL, NULL, NULL, ssrf_guard_tests},
    {"tool_spec", NULL, NULL, NULL, NULL, tool_spec_tests},
    {"tool_callback", NULL, NULL, NULL, NULL, tool_callback_tests},
    {"tool_args", NULL, NULL, NULL, NULL, tool_args_tests},
    {"tool_direct", NULL, NULL, NULL, NULL, tool_direct_tests},
    {"mcp_client", NULL, NULL, NULL, NULL, mcp_client_tests},
    {"mcp_sse", NULL, NULL, NULL, NULL, mcp_sse_tests},
    {"tool_channel", NULL, NULL, NULL, NULL, tool_channel_tests},
    {"mcp_bridge", NULL, NULL, NULL, NULL, mcp_bridge_tests},
    {"fstree", NULL, NULL, NULL, NULL, fstree_tests},
    {"sandbox_config", NULL, NULL, NULL, NULL, sandbox_config_tests},
    {"sandbox_uid", NULL, NULL, NULL, NULL, sandbox_uid_tests},
    {"sandbox_seccomp", NULL, NULL, NULL, NULL, sandbox_seccomp_tests},
    {"sandbox_etc", NULL, NULL, NULL, NULL, sandbox_etc_tests},
    {"sandbox_cgroup", NULL, NULL, NULL, NULL, sandbox_cgroup_tests},
    {"sandbox_disk", NULL, NULL, NULL, NULL, sandbox_disk_tests},
    {"sandbox_tripwire", NULL, NULL, NULL, NULL, sandbox_tripwire_tests},
    {"local", NULL, NULL, NULL, NULL, local_tests},
    {"egress_policy", NULL, NULL, NULL, NULL, egress_policy_tests},
    {"egress_proxy", NULL, NULL, NULL, NULL, egress_proxy_tests},
    {"sandbox_net", NULL, NULL, NULL, NULL, sandbox_net_tests},
    {"dnsmsg", NULL, NULL, NULL, NULL, dnsmsg_tests},
    {"gateway_http", NULL, NULL, NULL, NULL, gateway_http_tests},
    {"gateway_usage", NULL, NULL, NULL, NULL, gateway_usage_tests},
    {"gateway_route", NULL, NULL, NULL, NULL, gateway_route_tests},
    {"model_gateway", NULL, NULL, NULL, NULL, model_gateway_tests},
    {"turn_model", NULL, NULL, NULL, NULL, turn_model_tests},
    {"egress_dns", NULL, NULL, NULL, NULL, egress_dns_tests},
    {"ws_frame", NULL, NULL, NULL, NULL, ws_frame_tests},
    {"ws_client", NULL, NULL, NULL, NULL, ws_client_tests},
    {"daytona_demux", NULL, NULL, NULL, NULL, daytona_demux_tests},
    {"daytona_client", NULL, NULL, NULL, NULL, daytona_client_tests},
    {"daytona_network", NULL, NULL, NULL, NULL, daytona_network_tests},
    {"daytona_api", NULL, NULL, NULL, NULL, daytona_api_tests},
    {"daytona_toolbox", NULL, NULL, NULL, NULL, daytona_toolbox_tests},
    {"daytona_lease", NULL, NULL, NULL, NULL, daytona_lease_tests},
    {"daytona_sandbox", NULL, NULL, NULL, NULL, daytona_sandbox_tests},
    {"daytona_manifest", NULL, NULL, NULL, NULL, daytona_manifest_tests},
    {"daytona_bridge", NULL, NULL, NULL, NULL, daytona_bridge_tests},
    {"daytona_relay", NULL, NULL, NULL, NULL, daytona_relay_tests},
    {"daytona_exec", NULL, NULL, NULL, NULL, daytona_exec_tests},
    {"login", NULL, NULL, NULL, NULL, login_tests},
    {"log", NULL, NULL, NULL, NULL, log_tests},
    {"util", NULL, NULL, NULL, NULL, util_tests},
    {"jsonx", NULL, NULL, NULL, NULL, jsonx_tests},
    {"mountinfo", NULL, NULL, NULL, NULL, mountinfo_tests},
    {"tool_runner", NULL, NULL, NULL, NULL, tool_runner_tests},
    {"daytona_provider", NULL, NULL, NULL, NULL, daytona_provider_tests},
    {"sandbox_host", NULL, NULL, NULL, NULL, sandbox_host_tests},
    CU_SUITE_INFO_NULL,
};

/* Every failed assertion again, last, so a log's tail names what failed. */
static void print_failures(void)
{
    const CU_FailureRecord *f;

    for (f = CU_get_failure_list(); f; f = f->pNext)
        printf("FAILED %s/%s %s:%u: %s\n", f->pSuite ? f->pSuite->pName : "?",
               f->pTest ? f->pTest->pName : "?", f->strFileName ? f->strFileName : "?",
               f->uiLineNumber, f->strCondition ? f->strCondition : "?");
}

int main(int argc, char **argv)
{
    unsigned failures;
    CU_ErrorCode rc;

    if (argc > 2) {
        fprintf(stderr, "usage: %s [suite]\n", argv[0]);
        return 2;
    }
    if (CU_initialize_registry() != CUE_SUCCESS) {
        fprintf(stderr, "unit-tests: %s\n", CU_get_error_msg());
        return 1;
    }
    if (CU_register_suites(suites) != CUE_SUCCESS) {
        fprintf(stderr, "unit-tests: %s\n", CU_get_error_msg());
        CU_cleanup_registry();
        return 1;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    if (argc == 2) {
        CU_pSuite s = CU_get_suite(argv[1]);

        if (!s) {
            fprintf(stderr, "unit-tests: no suite \"%s\"\n", argv[1]);
            CU_cleanup_registry();
            return 2;
        }
        rc = CU_basic_run_suite(s);
    } else {
        rc = CU_basic_run_tests();
    }
    failures = CU_get_number_of_failures();
    print_failures();
    printf("\nunit-tests: %u suites, %u tests run, %u tests failed, %u failed assertions\n",
           CU_get_number_of_suites_run(), CU_get_number_of_tests_run(),
           CU_get_number_of_tests_failed(), failures);
    if (rc != CUE_SUCCESS && failures == 0)
        failures = 1;
    CU_cleanup_registry();
    return failures > 255 ? 255 : (int)failures;
}
