/*
 * turn_model — a gateway report's usage and cost, and the code a failed call names.
 */
#include <math.h>
#include <string.h>

#include "suites.h"
#include "turn/turn_model.h"

static void test_turn_model_cost(void)
{
    json_object *prices = json_tokener_parse(
        "{\"m\":{\"input\":2.0,\"output\":10,\"cacheRead\":0.5},\"n\":{\"input\":1,\"output\":1}}");
    double c = -1;

    /* 1000 prompt tokens of which 400 read from the cache and 100 written, 200 out */
    CU_ASSERT_TRUE(turn_model_cost(prices, "m", 1000, 200, 400, 100, &c));
    CU_ASSERT_TRUE(fabs(c - (500 * 2.0 + 400 * 0.5 + 100 * 2.0 + 200 * 10.0) / 1e6) < 1e-12);
    CU_ASSERT_FALSE(turn_model_cost(prices, "unknown", 1, 1, 0, 0, &c));
    CU_ASSERT_FALSE(turn_model_cost(NULL, "m", 1, 1, 0, 0, &c));
    json_object_put(prices);
}

static void test_turn_model_usage_and_codes(void)
{
    json_object *prices = json_tokener_parse("{\"fake\":{\"input\":1,\"output\":2}}");
    json_object *call = json_tokener_parse(
        "{\"event\":\"call\",\"model\":\"fake\",\"status\":200,\"usage\":{\"input\":10,"
        "\"output\":5,\"total\":15,\"cacheRead\":0,\"cacheWrite\":0}}");
    json_object *none = json_tokener_parse("{\"event\":\"call\",\"model\":\"x\",\"status\":200}");
    struct run_usage u;
    const struct {
        const char *report;
        const char *code;
    } codes[] = {
        {"{\"event\":\"refused\",\"status\":403}", "model_refused"},
        {"{\"event\":\"call\",\"status\":401}", "provider_auth_error"},
        {"{\"event\":\"call\",\"status\":429}", "provider_rate_limited"},
        {"{\"event\":\"call\",\"status\":500}", "provider_error"},
        {"{\"event\":\"call\",\"status\":0,\"failed\":true}", "model_unavailable"},
        {"{\"event\":\"call\",\"status\":502,\"failed\":true}", "model_unavailable"},
        {"{\"event\":\"call\",\"status\":200}", NULL},
    };

    CU_ASSERT_TRUE(turn_model_usage(call, prices, &u));
    CU_ASSERT_EQUAL(u.input, 10);
    CU_ASSERT_EQUAL(u.total, 15);
    CU_ASSERT_FALSE(u.cost_unknown);
    CU_ASSERT_TRUE(fabs(u.cost - 20.0 / 1e6) < 1e-12);
    CU_ASSERT_FALSE(turn_model_usage(none, prices, &u));
    CU_ASSERT_TRUE(turn_model_usage(call, NULL, &u));
    CU_ASSERT_TRUE(u.cost_unknown);
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        json_object *r = json_tokener_parse(codes[i].report);
        const char *got = turn_model_error_code(r);

        if (codes[i].code) {
            CU_ASSERT_STRING_EQUAL(got ? got : "", codes[i].code);
        } else {
            CU_ASSERT_PTR_NULL(got);
        }
        json_object_put(r);
    }
    json_object_put(prices);
    json_object_put(call);
    json_object_put(none);
}

CU_TestInfo turn_model_tests[] = {
    {"test_turn_model_cost", test_turn_model_cost},
    {"test_turn_model_usage_and_codes", test_turn_model_usage_and_codes},
    CU_TEST_INFO_NULL,
};
