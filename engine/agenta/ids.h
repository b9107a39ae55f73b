/*
 * ids — the identifiers platform mode writes to Agenta's API: RFC 4122 version 5 (name-based,
 * SHA-1) UUIDs and the stable record ids made from them, so a retried or re-sent record
 * upserts one row; the canonical UUID form the API accepts for attachment and turn ids; a
 * W3C trace id as a UUID and a span id checked. Pure functions, any thread.
 */
#ifndef AR_IDS_H
#define AR_IDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The version 5 UUID of name under ns, as 36 characters + NUL. -ENOMEM, -EIO. */
int ids_uuid5(const uint8_t ns[16], const char *name, size_t len, char out[37]);
/* Parse a textual UUID (either case, with its dashes) into 16 bytes; -EINVAL when it is not one. */
int ids_uuid_parse(const char *text, uint8_t out[16]);
/*
 * The stable id of a tool-family record (tool_call, tool_result, interaction_request,
 * interaction_response): uuid5("<session>:<id>:<type>:<turn>", uuid5("records",
 * uuid5("agenta", NAMESPACE_DNS))), the id Agenta's own runner gives it; NULL counts as "".
 */
int ids_record_id(const char *session_id, const char *tool_call_id, const char *record_type,
                  const char *turn_id, char out[37]);
/* A canonical UUID (lower case, 8-4-4-4-12, version 1-8, RFC 4122 variant). */
bool ids_canonical_uuid(const char *s);
/* The 32 hex digits of a trace id as a UUID (8-4-4-4-12); -EINVAL when it is not 32 hex. */
int ids_trace_uuid(const char *trace_id, char out[37]);
/* A span id: 16 hex digits (either case). */
bool ids_span_id_ok(const char *s);

#endif
