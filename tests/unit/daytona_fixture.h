/*
 * daytona_fixture — what the Daytona unit suites share: a configuration from a small variable
 * table, a client pointed at a canned server, canned JSON answers, and a sandbox description.
 */
#ifndef AR_TEST_DAYTONA_FIXTURE_H
#define AR_TEST_DAYTONA_FIXTURE_H

#include <json-c/json.h>

#include "canned_server.h"
#include "provider/daytona/daytona_api.h"
#include "provider/daytona/daytona_client.h"

#define DAYTONA_FIXTURE_KEY "k3y-very-secret-0123456789"

/* A stopped sandbox "0b5c7a44-..." with labels and a toolbox URL. */
extern const char *const daytona_fixture_dto;

/* The variable table daytona_fixture_lookup() answers from: URL and key, then extras. */
void daytona_fixture_vars(const char *url, const char *key);
void daytona_fixture_var(const char *name, const char *value);
const char *daytona_fixture_lookup(const char *name);

/* A client for the canned server s (fast retries, 5 s timeout). */
int daytona_fixture_client(const struct canned_server *s, struct daytona_client **ret);

/*
 * daytona_create_body() for cfg and p, asserted (CUnit) to return want; the body (a new
 * reference) or NULL. A mismatch prints the return value and err.
 */
json_object *daytona_fixture_body(const struct daytona_config *cfg,
                                  const struct daytona_create_params *p, int want, char *err,
                                  size_t errlen);

/* "HTTP/1.1 <status>" with a JSON body (malloc'ed, free()). */
char *daytona_fixture_reply(const char *status, const char *extra_headers, const char *body);

#endif
