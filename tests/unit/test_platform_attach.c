/* platform_attach: how an attachment reaches the harness, and where its mention goes. */
#include <string.h>

#include "agenta/platform_attach.h"
#include "base/buf.h"
#include "harness/harness.h"
#include "request/request.h"
#include "suites.h"
#include "suites_platform.h"

#define UUID_A "019c471b-5b91-71d2-9d4b-5486013e6e9b"

static int parse(const char *json, struct run_request *req)
{
    struct request_limits lim;
    char err[256];

    request_limits_default(&lim);
    lim.allow_scripted = true;
    return request_parse(json, strlen(json), &lim, req, err, sizeof(err));
}

static void gate_of(const char *json, bool images, const char *media, size_t len,
                    struct platform_gate *g)
{
    struct harness_caps caps = {.images = images, .file_attachments = true, .known = true};
    struct run_request req;

    memset(g, 0, sizeof(*g));
    CU_ASSERT_EQUAL_FATAL(parse(json, &req), 0);
    platform_attach_gate(&req, &caps, media, len, g);
    run_request_release(&req);
}

#define PI_IMAGES                                                                                  \
    "{\"harness\":\"pi_core\",\"modelCapabilities\":{\"inputModalities\":[\"text\",\"Image\"]},"   \
    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"

static void test_platform_attach_gate(void)
{
    struct platform_gate g;

    gate_of(PI_IMAGES, true, "image/PNG; charset=binary", 100, &g);
    CU_ASSERT_STRING_EQUAL(g.outcome, "native");
    CU_ASSERT_STRING_EQUAL(g.reason_code, "native_supported");
    CU_ASSERT_TRUE(g.image);
    /* the harness takes no images */
    gate_of(PI_IMAGES, false, "image/png", 100, &g);
    CU_ASSERT_STRING_EQUAL(g.outcome, "workspace_only");
    CU_ASSERT_STRING_EQUAL(g.reason_code, "transport_unsupported");
    CU_ASSERT_FALSE(g.image);
    /* the model does not say it takes images */
    gate_of("{\"harness\":\"pi_core\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", true,
            "image/png", 100, &g);
    CU_ASSERT_STRING_EQUAL(g.reason_code, "model_modality_unknown");
    /* an adapter without native images */
    gate_of("{\"harness\":\"opencode\",\"modelCapabilities\":{\"inputModalities\":[\"image\"]},"
            "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
            true, "image/png", 100, &g);
    CU_ASSERT_STRING_EQUAL(g.reason_code, "adapter_unsupported");
    /* documents are working copies */
    gate_of(PI_IMAGES, true, "application/pdf", 100, &g);
    CU_ASSERT_STRING_EQUAL(g.outcome, "workspace_only");
    CU_ASSERT_STRING_EQUAL(g.reason_code, "adapter_unsupported");
    gate_of(PI_IMAGES, true, "image/svg+xml", 100, &g);
    CU_ASSERT_STRING_EQUAL(g.outcome, "workspace_only");
    /* Anthropic's inline cap: 10 MiB of base64 */
    gate_of("{\"harness\":\"claude\",\"modelCapabilities\":{\"inputModalities\":[\"images\"]},"
            "\"modelConnection\":{\"provider\":\"anthropic\",\"deployment\":\"direct\","
            "\"credentialMode\":\"none\",\"credentials\":[]},"
            "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
            true, "image/jpeg", 8u * 1024 * 1024, &g);
    CU_ASSERT_STRING_EQUAL(g.reason_code, "provider_inline_cap");
}

static void text_of(const char *text, const char *latest, const char *mentions, const char *want)
{
    struct buf out;

    buf_init(&out, 1 << 16);
    CU_ASSERT_EQUAL(platform_attach_prompt_text(text, latest, mentions, &out), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&out), want);
    buf_release(&out);
}

static void test_platform_attach_prompt_text_places_mentions(void)
{
    struct buf m;

    buf_init(&m, 1024);
    CU_ASSERT_EQUAL(platform_attach_mention(UUID_A, "a b.png", &m), 0);
    CU_ASSERT_STRING_EQUAL(buf_str(&m),
                           "[attached file: a b.png at attachments/" UUID_A "/a b.png]");
    buf_release(&m);
    /* before the new message's text, in a plain prompt and in a cold replay */
    text_of("look", "look", "[m1]\n[m2]", "[m1]\n[m2]\nlook");
    text_of("Conversation so far:\nuser: hi\n\nContinue the conversation. The user now says:\nlook",
            "look", "[m]",
            "Conversation so far:\nuser: hi\n\nContinue the conversation. The user now says:\n"
            "[m]\nlook");
    /* a new message without text */
    text_of("", "", "[m]", "[m]");
    text_of("Continue the conversation. The user now says:\n", "", "[m]",
            "Continue the conversation. The user now says:\n[m]");
    /* a text that does not end with it: in front */
    text_of("something else", "look", "[m]", "[m]\nsomething else");
    text_of("look", "look", "", "look");
}

CU_TestInfo platform_attach_tests[] = {
    {"gate", test_platform_attach_gate},
    {"prompt_text_places_mentions", test_platform_attach_prompt_text_places_mentions},
    CU_TEST_INFO_NULL,
};
