/*
 * auth — the token Agenta's backend presents (AGENT_RUNNER_TOKEN):
 * `X-Agenta-Runner-Token: <t>` (checked first) or `Authorization: Bearer <t>`; constant-time
 * comparison; no configured token means deny.
 */
#ifndef AR_AUTH_H
#define AR_AUTH_H

#include <stdbool.h>

/* header_token: HTTP_X_AGENTA_RUNNER_TOKEN, authorization: HTTP_AUTHORIZATION (either NULL). */
bool auth_ok(const char *expected, const char *header_token, const char *authorization);

#endif
