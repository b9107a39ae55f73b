/*
 * identity — what makes a live environment reusable for a follow-up turn (a warm session is
 * reused only when the follow-up's key, config fingerprint and credential epoch all match):
 *
 *   pool key          "<projectId>:<sessionId>", project from runContext.project.id or
 *                     projectId; no key = the run is per-turn and never parked
 *   config fingerprint  SHA-256 of the canonical JSON of exactly the fields that shape the
 *                     environment (list in identity.c), plus runContext.workflow.artifact.id
 *                     and the run's tool set (customTools as sent, the callback
 *                     endpoint, each MCP server's name, url, policy and header names:
 *                     never a credential value, nor the tools the servers list)
 *   history fingerprint SHA-256 of the canonical user texts, inline media digests, tool-call
 *                     ids and prompt count of a conversation (assistant text is ignored)
 *   credential epoch  HMAC-SHA256, keyed per master boot, of the credential material the
 *                     sandbox holds (model credentials and environment); only the digest is
 *                     ever stored. Tool credentials (toolCallback.authorization, MCP headers)
 *                     stay with the runner and are applied per turn: rotating one keeps the
 *                     warm session
 *
 * Canonical JSON: object keys sorted recursively, null members dropped (absent == null),
 * compact separators.
 */
#ifndef AR_IDENTITY_H
#define AR_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "core/contracts.h"

#define IDENTITY_DIGEST_LEN 32
#define IDENTITY_KEY_LEN 32

/* Canonical JSON text of o appended to out. */
int identity_canonical(json_object *o, struct buf *out);

/* Pool key into ret (size >= 272): -ENOENT when the run has no session or no project. */
int identity_pool_key(const struct run_request *req, char *ret, size_t size);
/* "<projectId>:<sessionId>": the one place a pool key is spelled. -ENAMETOOLONG when cut. */
int identity_session_key(const char *project_id, const char *session_id, char *ret,
                         size_t size);

int identity_config_fp(const struct run_request *req, uint8_t ret[IDENTITY_DIGEST_LEN]);

/*
 * History fingerprint of messages[0..n) with extra_tool_ids (the tool calls the turn made,
 * may be NULL) appended as a synthetic assistant message when n_extra > 0.
 */
int identity_history_fp(const struct chat_message *messages, size_t n,
                        const char *const *extra_tool_ids, size_t n_extra,
                        uint8_t ret[IDENTITY_DIGEST_LEN]);

/*
 * The user side of a history only (user texts, media, attachment ids, prompt count; no tool-call
 * ids): what a history rebuilt from another record of the conversation (platform mode's record
 * log, whose tool-call ids are its own) still shares with the conversation a harness kept.
 */
int identity_user_fp(const struct chat_message *messages, size_t n,
                     uint8_t ret[IDENTITY_DIGEST_LEN]);

int identity_credential_epoch(const struct run_request *req, const uint8_t key[IDENTITY_KEY_LEN],
                              uint8_t ret[IDENTITY_DIGEST_LEN]);

/* The tail message is a user message with text or media and no tool_call/tool_result block. */
bool identity_tail_is_fresh_user(const struct run_request *req);
/* Exactly one message and it is a fresh user message. */
bool identity_minimal_history(const struct run_request *req);

#endif
