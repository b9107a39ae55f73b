#include "daytona_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

const char *const daytona_fixture_dto =
    "{\"id\":\"0b5c7a44-1d7e-4f44-9d2a-1a2b3c4d5e6f\",\"name\":\"ar-x\",\"state\":\"stopped\","
    "\"desiredState\":\"stopped\",\"errorReason\":null,\"recoverable\":false,"
    "\"autoStopInterval\":5,\"autoArchiveInterval\":43200,\"autoDeleteInterval\":1440,"
    "\"networkBlockAll\":false,\"networkAllowList\":\"10.0.0.0/8, 127.0.0.1/32\","
    "\"labels\":{\"agent-runner-pool\":\"abc\",\"n\":7},"
    "\"toolboxProxyUrl\":\"http://127.0.0.1:9/toolbox/\"}";

static const char *vars[16][2];

const char *daytona_fixture_lookup(const char *name)
{
    for (size_t i = 0; i < 16 && vars[i][0]; i++) {
        if (strcmp(vars[i][0], name) == 0)
            return vars[i][1];
    }
    return NULL;
}

void daytona_fixture_vars(const char *url, const char *key)
{
    memset(vars, 0, sizeof(vars));
    vars[0][0] = "AGENT_RUNNER_DAYTONA_API_URL";
    vars[0][1] = url;
    vars[1][0] = "AGENT_RUNNER_DAYTONA_API_KEY";
    vars[1][1] = key;
}

void daytona_fixture_var(const char *name, const char *value)
{
    size_t i = 0;

    while (i < 15 && vars[i][0])
        i++;
    vars[i][0] = name;
    vars[i][1] = value;
}

int daytona_fixture_client(const struct canned_server *s, struct daytona_client **ret)
{
    struct daytona_config cfg;
    char url[128], err[256];

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/api", s->port);
    daytona_fixture_vars(url, DAYTONA_FIXTURE_KEY);
    if (daytona_config_load(daytona_fixture_lookup, &cfg, err, sizeof(err)) < 0)
        return -1;
    cfg.retry_cap_ms = 50; /* Retry-After is obeyed up to the cap: keep the tests fast */
    cfg.request_timeout_ms = 5000;
    return daytona_client_new(&cfg, ret);
}

char *daytona_fixture_reply(const char *status, const char *extra_headers, const char *body)
{
    char *out = NULL;

    if (asprintf(&out,
                 "HTTP/1.1 %s\r\nContent-Type: application/json\r\n%sContent-Length: "
                 "%zu\r\n\r\n%s",
                 status, extra_headers, strlen(body), body) < 0)
        return NULL;
    return out;
}

json_object *daytona_fixture_body(const struct daytona_config *cfg,
                                  const struct daytona_create_params *p, int want, char *err,
                                  size_t errlen)
{
    json_object *body = NULL;
    int r = daytona_create_body(cfg, p, &body, err, errlen);

    CU_ASSERT_EQUAL(r, want);
    if (r != want)
        fprintf(stderr, "\n  create body: %d %s\n", r, err);
    return body;
}
