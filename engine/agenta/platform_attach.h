/*
 * platform_attach — attachments in platform mode. The new message's `attachment` blocks are
 * fetched (/sessions/attachments/{id}/content), written to <workspace>/attachments/<id>/<file
 * name> (name sanitised, no symlink followed, at most AGENTA_ATTACHMENT_MAX bytes), announced
 * with an attachment_delivery event and given to the harness: as an image block when it takes
 * images and the model declares the modality (modelCapabilities.inputModalities), else as a
 * mention of the working copy in the prompt text. On a cold replay the attachments of earlier
 * messages get their working copies back too. Runs on the turn's thread (the fetches are
 * bounded by their configured timeouts); a failed attachment never fails the turn.
 */
#ifndef AR_PLATFORM_ATTACH_H
#define AR_PLATFORM_ATTACH_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "agenta/agenta_api.h"
#include "base/buf.h"
#include "core/contracts.h"
#include "turn/events.h"

#define PLATFORM_RESTORE_MAX 100 /* working copies of earlier attachments restored */

/*
 * Deliver the attachments of m (the request's new user message; NULL: none) into workspace
 * (the host path of the sandbox's /workspace) and prompt (the turn's ACP content blocks,
 * changed in place), fetching through api for session_id. restore: a fresh workspace, give
 * earlier messages' attachments their working copies back. A failed attachment is announced
 * (outcome "failed") and mentioned as no longer available.
 */
void platform_attach_deliver(struct agenta_api *api, const char *session_id,
                             const struct run_request *req, const struct chat_message *m,
                             const char *workspace, const struct harness_caps *caps, bool restore,
                             json_object *prompt, struct event_stream *es);

/* An attachment_delivery event (a new object, NULL when out of memory); working_path may be
 * NULL. */
json_object *platform_attach_event(const char *id, const char *outcome, const char *reason,
                                   const char *working_path);

/* How an attachment reaches the harness (Agenta's capability gate). */
struct platform_gate {
    const char *outcome;     /* "native", "workspace_only" */
    const char *reason_code; /* native_supported, transport_unsupported, adapter_unsupported,
                                model_modality_unknown, provider_inline_cap */
    bool image;              /* delivered as an image block */
};
void platform_attach_gate(const struct run_request *req, const struct harness_caps *caps,
                          const char *media_type, size_t len, struct platform_gate *ret);
/* "[attached file: <name> at attachments/<id>/<name>]" into out. */
int platform_attach_mention(const char *attachment_id, const char *filename, struct buf *out);
/*
 * Put the mentions (lines) into prompt text: before the latest user text when the text ends
 * with it, else in front. out receives the new text.
 */
int platform_attach_prompt_text(const char *text, const char *latest, const char *mentions,
                                struct buf *out);

#endif
