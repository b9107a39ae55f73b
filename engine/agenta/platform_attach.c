/*
 * platform_attach — attachments in platform mode (platform_attach.h).
 */
#include "agenta/platform_attach.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "agenta/ids.h"
#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"

#define CLAUDE_INLINE_BASE64_MAX (10u * 1024 * 1024) /* Anthropic's inline image cap */
#define MENTIONS_MAX (1024u * 1024)
#define ATTACHMENT_REL_MAX 512

/* The media type without parameters, lower case. */
static void media_base(const char *media_type, char *out, size_t outlen)
{
    size_t n = 0;

    while (media_type && *media_type == ' ')
        media_type++;
    for (; media_type && media_type[n] && media_type[n] != ';' && n + 1 < outlen; n++)
        out[n] = (char)((media_type[n] >= 'A' && media_type[n] <= 'Z') ? media_type[n] + 32
                                                                       : media_type[n]);
    while (n > 0 && out[n - 1] == ' ')
        n--;
    out[n] = '\0';
}

static bool native_image_type(const char *base)
{
    static const char *const types[] = {"image/png", "image/jpeg", "image/gif", "image/webp"};

    for (size_t i = 0; i < ARRAY_SIZE(types); i++)
        if (strcmp(base, types[i]) == 0)
            return true;
    return false;
}

void platform_attach_gate(const struct run_request *req, const struct harness_caps *caps,
                          const char *media_type, size_t len, struct platform_gate *ret)
{
    char base[128];
    bool image;

    media_base(media_type, base, sizeof(base));
    image = native_image_type(base);
    memset(ret, 0, sizeof(*ret));
    ret->outcome = "workspace_only";
    /* documents and audio: no harness here takes them natively */
    if (!image) {
        ret->reason_code = caps->file_attachments ? "adapter_unsupported" : "transport_unsupported";
        return;
    }
    if (!caps->images) {
        ret->reason_code = "transport_unsupported";
        return;
    }
    if (req->harness != HARNESS_PI && req->harness != HARNESS_CLAUDE &&
        req->harness != HARNESS_CODEX) {
        ret->reason_code = "adapter_unsupported";
        return;
    }
    if (!run_request_model_takes_images(req)) {
        ret->reason_code = "model_modality_unknown";
        return;
    }
    if ((req->mc.provider ? strcasecmp(req->mc.provider, "anthropic") == 0
                          : req->harness == HARNESS_CLAUDE) &&
        (len + 2) / 3 * 4 > CLAUDE_INLINE_BASE64_MAX) {
        ret->reason_code = "provider_inline_cap";
        return;
    }
    ret->outcome = "native";
    ret->reason_code = "native_supported";
    ret->image = true;
}

int platform_attach_mention(const char *attachment_id, const char *filename, struct buf *out)
{
    return buf_printf(out, "[attached file: %s at attachments/%s/%s]", filename, attachment_id,
                      filename);
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);

    return m <= n && memcmp(s + n - m, tail, m) == 0;
}

int platform_attach_prompt_text(const char *text, const char *latest, const char *mentions,
                                struct buf *out)
{
    size_t n = strlen(text);
    int r;

    if (!mentions || !mentions[0])
        return buf_append_str(out, text);
    if (latest && latest[0] && ends_with(text, latest)) {
        size_t keep = n - strlen(latest);

        r = buf_append(out, text, keep);
        if (r == 0)
            r = buf_printf(out, "%s\n%s", mentions, latest);
        return r;
    }
    if (n > 0 && text[n - 1] == '\n') /* a replay frame whose new message has no text */
        return buf_printf(out, "%s%s", text, mentions);
    if (n == 0)
        return buf_append_str(out, mentions);
    return buf_printf(out, "%s\n%s", mentions, text);
}

json_object *platform_attach_event(const char *id, const char *outcome, const char *reason,
                                   const char *working_path)
{
    json_object *ev = event_new("attachment_delivery");

    if (!ev)
        return NULL;
    json_object_object_add(ev, "attachmentId", json_object_new_string(id));
    json_object_object_add(ev, "outcome", json_object_new_string(outcome));
    json_object_object_add(ev, "reasonCode", json_object_new_string(reason));
    if (working_path)
        json_object_object_add(ev, "workingPath", json_object_new_string(working_path));
    return ev;
}

/* ---- attachments --------------------------------------------------------------------------- */

static char *base64_of(const uint8_t *data, size_t len)
{
    size_t n = 4 * ((len + 2) / 3);
    char *out = malloc(n + 1);

    if (!out)
        return NULL;
    if (EVP_EncodeBlock((unsigned char *)out, data, (int)len) != (int)n) {
        free(out);
        return NULL;
    }
    out[n] = '\0';
    return out;
}

/* Fetch one attachment and write its working copy; *ret_rel names it under the workspace. */
static int materialize(struct agenta_api *api, const char *session_id, const char *workspace,
                       const char *id, struct agenta_attachment *att, char *rel, size_t rellen,
                       bool *ret_fetched)
{
    char err[256];
    int r, n;

    *ret_fetched = false;
    r = agenta_api_attachment_content(api, session_id, id, att, err, sizeof(err));
    if (r < 0) {
        log_debug("platform: session \"%s\" attachment \"%s\" not fetched: %s", session_id, id,
                  err);
        return r;
    }
    *ret_fetched = true;
    n = snprintf(rel, rellen, "attachments/%s/%s", id, att->filename);
    if (n < 0 || (size_t)n >= rellen)
        return -ENAMETOOLONG;
    /* a symlink the sandbox planted on the way makes this fail (ELOOP), never redirect it */
    r = util_write_file_beneath(workspace, rel, att->data, att->len, 0644);
    if (r < 0)
        log_debug("platform: session \"%s\" attachment \"%s\" not written: %s", session_id, id,
                  ar_strerror(r));
    return r;
}

/* Earlier messages' attachments get their working copies back in a fresh workspace. */
static void restore_history(struct agenta_api *api, const char *session_id,
                            const struct run_request *req, const char *workspace)
{
    size_t restored = 0;

    for (size_t i = 0; i + 1 < req->nmessages && restored < PLATFORM_RESTORE_MAX; i++) {
        const struct chat_message *m = &req->messages[i];

        if (!m->role || strcmp(m->role, "user") != 0)
            continue;
        for (size_t j = 0; j < m->nblocks && restored < PLATFORM_RESTORE_MAX; j++) {
            const struct content_block *b = &m->blocks[j];
            struct agenta_attachment att;
            char rel[ATTACHMENT_REL_MAX];
            bool fetched;

            if (b->type != BLOCK_ATTACHMENT || !ids_canonical_uuid(b->attachment_id))
                continue;
            memset(&att, 0, sizeof(att));
            (void)materialize(api, session_id, workspace, b->attachment_id, &att, rel, sizeof(rel),
                              &fetched);
            if (fetched)
                agenta_attachment_release(&att);
            restored++;
        }
    }
}

static json_object *image_block(const char *data_b64, const char *media_type)
{
    json_object *b = json_object_new_object();
    char base[128];

    media_base(media_type, base, sizeof(base));
    json_object_object_add(b, "type", json_object_new_string("image"));
    json_object_object_add(b, "data", json_object_new_string(data_b64));
    json_object_object_add(b, "mimeType", json_object_new_string(base));
    return b;
}

/* prompt = [images..., its own blocks with the text changed] */
static void rewrite_prompt(json_object *prompt, const char *latest, const char *mentions,
                           json_object *images)
{
    json_object *old = json_object_new_array(), *text_block = NULL;
    size_t n = json_object_array_length(prompt);
    struct buf text;

    if (!old)
        return;
    for (size_t i = 0; i < n; i++)
        json_object_array_add(old, json_object_get(json_object_array_get_idx(prompt, i)));
    json_object_array_del_idx(prompt, 0, n);
    for (size_t i = 0; i < json_object_array_length(images); i++)
        json_object_array_add(prompt, json_object_get(json_object_array_get_idx(images, i)));
    for (size_t i = 0; i < n; i++) {
        json_object *b = json_object_array_get_idx(old, i);
        const char *type = jsonx_str(b, "type");

        if (!text_block && type && strcmp(type, "text") == 0)
            text_block = b;
        json_object_array_add(prompt, json_object_get(b));
    }
    if (!text_block && mentions[0]) {
        text_block = json_object_new_object();
        json_object_object_add(text_block, "type", json_object_new_string("text"));
        json_object_object_add(text_block, "text", json_object_new_string(""));
        json_object_array_add(prompt, text_block);
    }
    buf_init(&text, PROMPT_TEXT_MAX);
    if (text_block && mentions[0] &&
        platform_attach_prompt_text(jsonx_str(text_block, "text") ? jsonx_str(text_block, "text")
                                                                  : "",
                                    latest, mentions, &text) == 0)
        json_object_object_add(text_block, "text",
                               json_object_new_string_len(buf_str(&text), (int)text.len));
    buf_release(&text);
    json_object_put(old);
}

void platform_attach_deliver(struct agenta_api *api, const char *session_id,
                             const struct run_request *req, const struct chat_message *m,
                             const char *workspace, const struct harness_caps *caps, bool restore,
                             json_object *prompt, struct event_stream *es)
{
    json_object *images;
    struct buf mentions, latest;

    if (!workspace || !prompt)
        return;
    if (restore)
        restore_history(api, session_id, req, workspace);
    if (!m)
        return;
    images = json_object_new_array();
    buf_init(&mentions, MENTIONS_MAX);
    buf_init(&latest, REPLAY_LATEST_MAX);
    for (size_t i = 0; images && i < m->nblocks; i++) {
        const struct content_block *b = &m->blocks[i];
        struct agenta_attachment att;
        struct platform_gate gate;
        char rel[ATTACHMENT_REL_MAX], shown[256];
        bool fetched;
        int r;

        if (b->type != BLOCK_ATTACHMENT || !b->attachment_id)
            continue;
        if (mentions.len)
            buf_append_char(&mentions, '\n');
        memset(&att, 0, sizeof(att));
        r = materialize(api, session_id, workspace, b->attachment_id, &att, rel, sizeof(rel),
                        &fetched);
        if (r < 0) {
            event_emit(es, platform_attach_event(b->attachment_id, "failed",
                                                 fetched ? "materialize_failed" : "fetch_failed",
                                                 NULL));
            if (fetched)
                snprintf(shown, sizeof(shown), "%s", att.filename);
            else if (!b->filename ||
                     agenta_sanitize_filename(b->filename, shown, sizeof(shown)) < 0)
                snprintf(shown, sizeof(shown), "attachment");
            buf_printf(&mentions, "[attached file: %s - no longer available]", shown);
            if (fetched)
                agenta_attachment_release(&att);
            continue;
        }
        platform_attach_gate(req, caps, att.media_type, att.len, &gate);
        event_emit(es,
                   platform_attach_event(b->attachment_id, gate.outcome, gate.reason_code, rel));
        platform_attach_mention(b->attachment_id, att.filename, &mentions);
        if (gate.image) {
            char *b64 = base64_of(att.data, att.len);

            if (b64)
                json_object_array_add(images, image_block(b64, att.media_type));
            free(b64);
        }
        agenta_attachment_release(&att);
    }
    if (mentions.len) {
        (void)run_request_prompt_text(req, &latest);
        rewrite_prompt(prompt, buf_str(&latest), buf_str(&mentions), images);
    }
    buf_release(&latest);
    buf_release(&mentions);
    json_object_put(images);
}
