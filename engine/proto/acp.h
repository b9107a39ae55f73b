/*
 * acp — the Agent Client Protocol (v1, agentclientprotocol.com) wire layer: JSON-RPC 2.0
 * messages, one per '\n'-terminated line.
 *
 * Decoding classifies a line as a request (method + id), a notification (method, no id) or a
 * response (id + result|error, no method). The agent's requests carry ids from its own id
 * space: they are answered by echoing the id back verbatim, and never matched against our
 * pending requests (only responses are). Unknown agent requests must be answered with -32601
 * (acp_encode_error(..., ACP_METHOD_NOT_FOUND, ...)) or the agent may hang.
 *
 * struct acp_lines frames a byte stream into lines with a hard per-line maximum: a longer line
 * is an error (-E2BIG), never truncated.
 */
#ifndef AR_ACP_H
#define AR_ACP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/buf.h"

#define ACP_PROTOCOL_VERSION 1
#define ACP_LINE_MAX_DEFAULT (64u * 1024 * 1024)

enum {
    ACP_PARSE_ERROR = -32700,
    ACP_INVALID_REQUEST = -32600,
    ACP_METHOD_NOT_FOUND = -32601,
    ACP_INVALID_PARAMS = -32602,
    ACP_INTERNAL_ERROR = -32603,
    ACP_REQUEST_CANCELLED = -32800,
};

enum acp_kind { ACP_REQUEST = 1, ACP_NOTIFICATION, ACP_RESPONSE };

struct acp_msg {
    enum acp_kind kind;
    json_object *root;   /* owned reference to the whole message */
    json_object *id;     /* borrowed; requests and responses */
    const char *method;  /* requests and notifications */
    json_object *params; /* borrowed, may be NULL */
    json_object *result; /* responses: borrowed, NULL for a null result */
    json_object *error;  /* responses: borrowed, NULL on success */
};

/*
 * Decode one line (without its '\n'). -EBADMSG when it is not a JSON-RPC 2.0 object of one of
 * the three kinds; err then says why. *ret is written only on success.
 */
int acp_decode(const char *line, size_t len, struct acp_msg *ret, char *err, size_t errlen);
void acp_msg_release(struct acp_msg *m);

/* Integer id of a response (our ids are integers); -EINVAL for any other id. */
int acp_msg_int_id(const struct acp_msg *m, int64_t *ret);
/* error.message of a response, or "unknown error". */
const char *acp_msg_error_message(const struct acp_msg *m);

/* Encoders append exactly one line, '\n' included. params/result are borrowed (may be NULL). */
int acp_encode_request(struct buf *out, int64_t id, const char *method, json_object *params);
int acp_encode_notification(struct buf *out, const char *method, json_object *params);
int acp_encode_result(struct buf *out, json_object *id, json_object *result);
int acp_encode_error(struct buf *out, json_object *id, int code, const char *message);

struct acp_lines {
    struct buf in;
    size_t max_line;
    size_t scanned; /* bytes of `in` known to hold no '\n' */
};

void acp_lines_init(struct acp_lines *l, size_t max_line);
void acp_lines_release(struct acp_lines *l);
/*
 * Read what fd has (one read(2)). Returns the byte count, 0 on end of file, -EAGAIN when a
 * non-blocking fd has nothing, -E2BIG when the pending line exceeds max_line, -errno otherwise.
 */
ssize_t acp_lines_fill(struct acp_lines *l, int fd);
/*
 * Take the next complete line: 1 and a malloc'ed NUL-terminated copy without the '\n'
 * (a trailing '\r' is dropped too), 0 when no complete line is buffered, -E2BIG when the
 * buffered partial line is already longer than max_line.
 */
int acp_lines_next(struct acp_lines *l, char **ret_line, size_t *ret_len);

#endif
