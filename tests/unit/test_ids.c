/* ids: the UUIDs platform mode writes (name-based v5, record ids, canonical form, trace ids). */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "agenta/ids.h"
#include "suites.h"
#include "suites_platform.h"

#define UUID_A "019c471b-5b91-71d2-9d4b-5486013e6e9b"
#define TURN_UUID "6f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f"

static void test_ids_uuid5_known_vectors(void)
{
    uint8_t dns[16], url[16];
    char out[37];

    /* Python: uuid.uuid5(uuid.NAMESPACE_DNS, "python.org") */
    CU_ASSERT_EQUAL_FATAL(ids_uuid_parse("6ba7b810-9dad-11d1-80b4-00c04fd430c8", dns), 0);
    CU_ASSERT_EQUAL(ids_uuid5(dns, "python.org", 10, out), 0);
    CU_ASSERT_STRING_EQUAL(out, "886313e1-3b8a-5372-9b90-0c9aee199e5d");
    /* uuid.uuid5(uuid.NAMESPACE_URL, "https://agenta.ai/é"): the name is hashed as UTF-8 */
    CU_ASSERT_EQUAL_FATAL(ids_uuid_parse("6ba7b811-9dad-11d1-80b4-00c04fd430c8", url), 0);
    CU_ASSERT_EQUAL(ids_uuid5(url, "https://agenta.ai/\xc3\xa9", 20, out), 0);
    CU_ASSERT_STRING_EQUAL(out, "0200ad65-a4d7-5286-bbe6-edffc170c217");
    /* uuid5(ns, f"{session}:{call}:{type}:{turn}"), ns = uuid5(uuid5(DNS,"agenta"),"records") */
    CU_ASSERT_EQUAL(ids_record_id("sess-1", "call-1", "tool_call", "turn-1", out), 0);
    CU_ASSERT_STRING_EQUAL(out, "0e33e099-1cce-5e44-8084-d4f8c0c1b226");
    CU_ASSERT_EQUAL(ids_record_id("sess-1", "call-1", "tool_result", "turn-1", out), 0);
    CU_ASSERT_STRING_EQUAL(out, "cf3b5db1-3011-5c46-a24b-cd65dd515aa2");
    CU_ASSERT_EQUAL(ids_record_id("sess-1", "call-1", "tool_call", NULL, out), 0);
    CU_ASSERT_STRING_EQUAL(out, "09f60bd2-cddf-5c1c-a767-e86426ea2995");
    CU_ASSERT_EQUAL(ids_uuid_parse("6ba7b810-9dad-11d1-80b4-00c04fd430c", dns), -EINVAL);
    CU_ASSERT_EQUAL(ids_uuid_parse("6ba7b810x9dad-11d1-80b4-00c04fd430c8", dns), -EINVAL);
    CU_ASSERT_EQUAL(ids_uuid_parse("zba7b810-9dad-11d1-80b4-00c04fd430c8", dns), -EINVAL);
}

static void test_ids_canonical_and_trace_uuids(void)
{
    char out[37];

    CU_ASSERT_TRUE(ids_canonical_uuid(UUID_A));
    CU_ASSERT_TRUE(ids_canonical_uuid(TURN_UUID));
    CU_ASSERT_FALSE(ids_canonical_uuid("019C471B-5B91-71D2-9D4B-5486013E6E9B")); /* case */
    CU_ASSERT_FALSE(ids_canonical_uuid("019c471b-5b91-01d2-9d4b-5486013e6e9b")); /* v0 */
    CU_ASSERT_FALSE(ids_canonical_uuid("019c471b-5b91-71d2-7d4b-5486013e6e9b")); /* var */
    CU_ASSERT_FALSE(ids_canonical_uuid("019c471b5b9171d29d4b5486013e6e9b"));
    CU_ASSERT_FALSE(ids_canonical_uuid("../../etc/passwd"));
    CU_ASSERT_FALSE(ids_canonical_uuid(""));
    CU_ASSERT_FALSE(ids_canonical_uuid(NULL));
    CU_ASSERT_EQUAL(ids_trace_uuid("0af7651916cd43dd8448eb211c80319c", out), 0);
    CU_ASSERT_STRING_EQUAL(out, "0af76519-16cd-43dd-8448-eb211c80319c");
    CU_ASSERT_EQUAL(ids_trace_uuid("0af7651916cd43dd8448eb211c80319", out), -EINVAL);
    CU_ASSERT_EQUAL(ids_trace_uuid("0af7651916cd43dd8448eb211c80319z", out), -EINVAL);
}

static void test_ids_span_ids(void)
{
    CU_ASSERT_TRUE(ids_span_id_ok("00f067aa0ba902b7"));
    CU_ASSERT_TRUE(ids_span_id_ok("00F067AA0BA902B7"));
    CU_ASSERT_FALSE(ids_span_id_ok("00f067aa0ba902b"));
    CU_ASSERT_FALSE(ids_span_id_ok("00f067aa0ba902bz"));
    CU_ASSERT_FALSE(ids_span_id_ok(NULL));
}

CU_TestInfo ids_tests[] = {
    {"uuid5_known_vectors", test_ids_uuid5_known_vectors},
    {"canonical_and_trace_uuids", test_ids_canonical_and_trace_uuids},
    {"span_ids", test_ids_span_ids},
    CU_TEST_INFO_NULL,
};
