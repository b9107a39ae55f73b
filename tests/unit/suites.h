/*
 * suites — the unit-test suites (one per engine module) and the helpers they share.
 *
 * Each tests/unit/test_<module>.c defines one NULL-terminated `CU_TestInfo <module>_tests[]`;
 * main.c registers them all. The helpers below live in main.c.
 */
#ifndef AR_TEST_SUITES_H
#define AR_TEST_SUITES_H

#include <stdbool.h>
#include <stddef.h>

#include <CUnit/CUnit.h>
#include <json-c/json.h>

#include "turn/events.h"

extern CU_TestInfo acp_tests[];
extern CU_TestInfo log_tests[];
extern CU_TestInfo util_tests[];
extern CU_TestInfo jsonx_tests[];
extern CU_TestInfo mountinfo_tests[];
extern CU_TestInfo tool_runner_tests[];
extern CU_TestInfo request_tests[];
extern CU_TestInfo request_tools_tests[];
extern CU_TestInfo request_mcp_tests[];
extern CU_TestInfo events_tests[];
extern CU_TestInfo journal_tests[];
extern CU_TestInfo run_turn_tests[];
extern CU_TestInfo run_limits_tests[];
extern CU_TestInfo pool_tests[];
extern CU_TestInfo spare_tests[];
extern CU_TestInfo identity_tests[];
extern CU_TestInfo kept_tests[];
extern CU_TestInfo policy_tests[];
extern CU_TestInfo env_setup_tests[];
extern CU_TestInfo transcript_tests[];
extern CU_TestInfo keeper_proto_tests[];
extern CU_TestInfo keeper_channel_tests[];
extern CU_TestInfo turn_channel_tests[];
extern CU_TestInfo harness_tests[];
extern CU_TestInfo provider_tests[];
extern CU_TestInfo session_tests[];
extern CU_TestInfo admin_tests[];
extern CU_TestInfo engine_config_tests[];
extern CU_TestInfo engine_worker_tests[];
extern CU_TestInfo turn_loop_tests[];
extern CU_TestInfo env_link_tests[];
extern CU_TestInfo httpc_tests[];
extern CU_TestInfo tool_http_tests[];
extern CU_TestInfo ssrf_guard_tests[];
extern CU_TestInfo tool_spec_tests[];
extern CU_TestInfo tool_callback_tests[];
extern CU_TestInfo tool_args_tests[];
extern CU_TestInfo tool_direct_tests[];
extern CU_TestInfo mcp_client_tests[];
extern CU_TestInfo mcp_sse_tests[];
extern CU_TestInfo tool_channel_tests[];
extern CU_TestInfo mcp_bridge_tests[];
extern CU_TestInfo fstree_tests[];
extern CU_TestInfo sandbox_config_tests[];
extern CU_TestInfo sandbox_uid_tests[];
extern CU_TestInfo sandbox_seccomp_tests[];
extern CU_TestInfo sandbox_etc_tests[];
extern CU_TestInfo sandbox_cgroup_tests[];
extern CU_TestInfo sandbox_disk_tests[];
extern CU_TestInfo sandbox_tripwire_tests[];
extern CU_TestInfo local_tests[];
extern CU_TestInfo egress_policy_tests[];
extern CU_TestInfo egress_proxy_tests[];
extern CU_TestInfo sandbox_net_tests[];
extern CU_TestInfo dnsmsg_tests[];
extern CU_TestInfo gateway_http_tests[];
extern CU_TestInfo gateway_usage_tests[];
extern CU_TestInfo gateway_route_tests[];
extern CU_TestInfo model_gateway_tests[];
extern CU_TestInfo turn_model_tests[];
extern CU_TestInfo egress_dns_tests[];
extern CU_TestInfo ws_frame_tests[];
extern CU_TestInfo ws_client_tests[];
extern CU_TestInfo daytona_demux_tests[];
extern CU_TestInfo daytona_client_tests[];
extern CU_TestInfo daytona_network_tests[];
extern CU_TestInfo daytona_api_tests[];
extern CU_TestInfo daytona_toolbox_tests[];
extern CU_TestInfo daytona_lease_tests[];
extern CU_TestInfo daytona_sandbox_tests[];
extern CU_TestInfo daytona_manifest_tests[];
extern CU_TestInfo daytona_bridge_tests[];
extern CU_TestInfo daytona_relay_tests[];
extern CU_TestInfo daytona_exec_tests[];
extern CU_TestInfo login_tests[];
extern CU_TestInfo daytona_provider_tests[];
extern CU_TestInfo sandbox_host_tests[];
extern CU_TestInfo cluster_tests[];

/* A NULL-safe string for CU_ASSERT_STRING_EQUAL (which would crash on NULL). */
#define TEST_STR(s) ((s) ? (s) : "(null)")

#define TEST_SHARED_DEFAULT "tests/fixtures/agenta-golden"

/* The golden-fixture folder: $AR_SHARED, else TEST_SHARED_DEFAULT. */
const char *test_shared_dir(void);
/* Read <shared dir>/name whole (NUL-terminated, malloc'ed). */
int test_read_shared(const char *name, char **ret_data, size_t *ret_len);
/* Parse the fixture <shared dir>/name; NULL when missing or not JSON. */
json_object *test_shared_json(const char *name);
/* Parse a JSON text strictly; NULL on error (or for the literal null). */
json_object *test_json(const char *text);
/* Whether o equals the JSON text want by value; prints both when not. */
bool test_json_is(json_object *o, const char *want);

/*
 * An event sink that records what it is given. Every line is checked to be exactly one
 * '\n'-terminated JSON object (bad_lines counts the others) and kept, parsed, in `records`.
 * From call number fail_at on (1-based; 0 = never) it refuses the line like a gone client.
 */
struct test_sink {
    size_t calls;
    size_t fail_at;
    size_t bad_lines;
    json_object *records;
};

void test_sink_init(struct test_sink *s, size_t fail_at, struct event_sink *ret_sink);
void test_sink_release(struct test_sink *s);
size_t test_sink_count(const struct test_sink *s);
/* The "event" member of record i (borrowed), NULL when out of range. */
json_object *test_sink_event(const struct test_sink *s, size_t i);

#endif
