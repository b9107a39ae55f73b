/*
 * tool_runner — one run's tools on the worker: the set, its MCP clients, and the thread a call
 * runs on (tool_runner.h).
 */
#include "tools/tool_runner.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "base/httpc.h"
#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "tools/mcp_client.h"
#include "tools/tool_callback.h"

#define STOP_POLL_MS 100

struct tool_runner {
    const struct tools_config *cfg;
    const struct run_request *req; /* borrowed: the runner lives within its request */
    struct tool_set *set;
    struct mcp_client **clients;       /* set->nservers, NULL until connected */
    bool *listed;                      /* set->nservers: its tools joined the set */
    bool connected;
    int connect_rc;                    /* a failed connect is not tried again in this turn */
    char connect_err[1024];
    CURL *curl;
    atomic_int cancel;
};

/* ---- the test-only resolver override ------------------------------------------------------ */

int tool_runner_resolve_parse(const char *spec, struct tool_runner_resolve *ret, char *err,
                              size_t errlen)
{
    struct tool_runner_resolve m;
    const char *p = spec;

    memset(&m, 0, sizeof(m));
    while (p && *p) {
        size_t n = strcspn(p, ","), h;
        const char *eq = memchr(p, '=', n);
        unsigned char probe[16];

        if (!eq || eq == p || (size_t)(eq - p) >= sizeof(m.host[0]) ||
            n - (size_t)(eq - p) - 1 >= sizeof(m.addr[0]) || m.n >= TOOL_RUNNER_RESOLVE_MAX) {
            snprintf(err, errlen, "entry %zu: expected name=address (at most %d entries)",
                     m.n + 1, TOOL_RUNNER_RESOLVE_MAX);
            return -EINVAL;
        }
        h = (size_t)(eq - p);
        memcpy(m.host[m.n], p, h);
        memcpy(m.addr[m.n], eq + 1, n - h - 1);
        if (inet_pton(AF_INET, m.addr[m.n], probe) != 1 &&
            inet_pton(AF_INET6, m.addr[m.n], probe) != 1) {
            snprintf(err, errlen, "entry %zu: \"%s\" is not an IP address", m.n + 1, m.addr[m.n]);
            return -EINVAL;
        }
        m.n++;
        p += n;
        if (*p == ',')
            p++;
    }
    *ret = m;
    return 0;
}

int tool_runner_resolve_fn(void *ctx, const char *host, struct sockaddr_storage *out, size_t max,
                           size_t *ret_n)
{
    const struct tool_runner_resolve *m = ctx;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    size_t n = 0;
    int r;

    for (size_t i = 0; m && i < m->n && max > 0; i++) {
        struct sockaddr_in *v4 = (struct sockaddr_in *)out;
        struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;

        if (strcasecmp(m->host[i], host) != 0)
            continue;
        memset(out, 0, sizeof(*out));
        if (inet_pton(AF_INET, m->addr[i], &v4->sin_addr) == 1) {
            v4->sin_family = AF_INET;
        } else if (inet_pton(AF_INET6, m->addr[i], &v6->sin6_addr) == 1) {
            v6->sin6_family = AF_INET6;
        } else {
            return -EINVAL;
        }
        *ret_n = 1;
        return 0;
    }
    r = getaddrinfo(host, NULL, &hints, &res);
    if (r != 0)
        return r == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
    for (struct addrinfo *a = res; a && n < max; a = a->ai_next) {
        if (a->ai_addrlen > sizeof(*out))
            continue;
        memset(&out[n], 0, sizeof(out[n]));
        memcpy(&out[n], a->ai_addr, a->ai_addrlen);
        n++;
    }
    freeaddrinfo(res);
    if (n == 0)
        return -EHOSTUNREACH;
    *ret_n = n;
    return 0;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

int tool_runner_new(const struct tools_config *cfg, const struct run_request *req,
                    struct tool_runner **ret, char *err, size_t errlen)
{
    struct tool_runner *r;
    size_t n;
    int rc;

    *ret = NULL;
    if (req->tools.ncustom == 0 && req->tools.nservers == 0)
        return 0;
    r = calloc(1, sizeof(*r));
    if (!r)
        goto nomem;
    r->cfg = cfg;
    r->req = req;
    atomic_init(&r->cancel, 0);
    rc = tool_set_new(&req->tools, &r->set);
    if (rc < 0)
        goto nomem;
    n = r->set->nservers;
    r->clients = calloc(n ? n : 1, sizeof(*r->clients));
    r->listed = calloc(n ? n : 1, sizeof(*r->listed));
    if (!r->clients || !r->listed)
        goto nomem;
    *ret = r;
    return 0;
nomem:
    snprintf(err, errlen, "out of memory");
    tool_runner_free(r);
    return -ENOMEM;
}

void tool_runner_free(struct tool_runner *r)
{
    if (!r)
        return;
    for (size_t i = 0; r->clients && i < r->set->nservers; i++)
        mcp_client_close(r->clients[i]);
    free(r->clients);
    free(r->listed);
    tool_set_free(r->set);
    if (r->curl)
        curl_easy_cleanup(r->curl);
    free(r);
}

bool tool_runner_any(const struct tool_runner *r)
{
    return r && (r->set->ntools > 0 || r->set->nservers > 0);
}

/* Every MCP credential and the callback's authorization: this thread's log never shows them. */
static void redact_secrets(const struct tool_runner *r)
{
    const struct run_tools *t = &r->req->tools;

    log_redact_add(t->callback_authorization);
    for (size_t i = 0; i < t->nservers; i++)
        for (size_t j = 0; j < t->servers[i].nheaders; j++)
            if (t->servers[i].headers[j].secret)
                log_redact_add(t->servers[i].headers[j].value);
}

int tool_runner_connect(struct tool_runner *r, char *err, size_t errlen)
{
    struct mcp_client_options opt = {
        .ssrf = {.allowlist = r->cfg ? r->cfg->mcp_allowlist : NULL,
                 .resolve = r->cfg && r->cfg->test_resolve ? tool_runner_resolve_fn : NULL,
                 .resolve_ctx = r->cfg ? (void *)r->cfg->test_resolve : NULL},
        .ca_file = r->cfg ? r->cfg->ca_file : NULL,
    };
    char why[768];
    int rc = 0;

    if (r->connected)
        return 0;
    if (r->connect_rc < 0) {
        snprintf(err, errlen, "%s", r->connect_err);
        return r->connect_rc;
    }
    redact_secrets(r);
    for (size_t i = 0; i < r->set->nservers; i++) {
        json_object *listed = NULL;

        if (r->listed[i])
            continue;
        if (!r->clients[i])
            rc = mcp_client_open(&r->req->tools.servers[i], &opt, &r->clients[i], why, sizeof(why));
        if (rc == 0)
            rc = mcp_client_list_tools(r->clients[i], &listed, why, sizeof(why));
        if (rc == 0)
            rc = tool_set_add_mcp_tools(r->set, i, listed, why, sizeof(why));
        json_object_put(listed);
        if (rc < 0) {
            snprintf(r->connect_err, sizeof(r->connect_err), "mcpServers[%zu] \"%s\": %s", i,
                     r->set->servers[i].name, why);
            snprintf(err, errlen, "%s", r->connect_err);
            r->connect_rc = rc;
            return rc;
        }
        r->listed[i] = true;
        log_debug("mcp server '%s': %s, session %s", r->set->servers[i].name,
                  mcp_client_protocol(r->clients[i]),
                  mcp_client_session(r->clients[i])[0] ? "held" : "none");
    }
    r->connected = true;
    return 0;
}

int tool_runner_public_json(const struct tool_runner *r, struct buf *out)
{
    return tool_set_public_json(r->set, out);
}

int tool_runner_find(struct tool_runner *r, const char *name, const struct tool_spec **ret,
                     char *err, size_t errlen)
{
    const struct tool_spec *t = tool_set_find(r->set, name);
    int rc;

    if (!t && !r->connected && r->set->nservers > 0) {
        rc = tool_runner_connect(r, err, errlen);
        if (rc < 0)
            return rc;
        t = tool_set_find(r->set, name);
    }
    if (!t) {
        snprintf(err, errlen, "no tool named \"%.128s\" in this run", name);
        return -ENOENT;
    }
    *ret = t;
    return 0;
}

/* ---- one call --------------------------------------------------------------------------- */

static int exec_now(struct tool_runner *r, const struct tool_spec *spec, const char *call_id,
                    json_object *args, const char *session_id, struct tool_result *ret)
{
    struct tool_call_ctx ctx = {
        .endpoint = r->set->callback_endpoint,
        .authorization = r->req->tools.callback_authorization,
        .run_context = r->req->run_context,
        .session_id = session_id,
        .cancel = &r->cancel,
    };
    struct buf missing;
    int rc;

    switch (spec->exec) {
    case TOOL_EXEC_CALLBACK:
    case TOOL_EXEC_DIRECT:
        if (!r->curl)
            r->curl = httpc_handle_new();
        ctx.curl = r->curl;
        return tool_callback_run(&ctx, spec, call_id, args, ret);
    case TOOL_EXEC_MCP:
        buf_init(&missing, 64 * 1024);
        rc = tool_spec_check_required(spec, args, &missing);
        if (rc == 1) /* the model's mistake: a tool error before any request */
            rc = tool_result_set(ret, true, buf_str(&missing)) < 0 ? -ENOMEM : 1;
        buf_release(&missing);
        if (rc != 0)
            return rc < 0 ? rc : 0;
        if (spec->server >= r->set->nservers || !r->clients[spec->server]) {
            char msg[320];

            snprintf(msg, sizeof(msg), "MCP server \"%s\" is not connected",
                     spec->server < r->set->nservers ? r->set->servers[spec->server].name : "?");
            return tool_result_set(ret, true, msg);
        }
        return mcp_client_call(r->clients[spec->server], spec->remote_name, args, 0, &r->cancel,
                               0, ret);
    case TOOL_EXEC_CLIENT:
        break;
    }
    return -EINVAL;
}

struct exec_job {
    struct tool_runner *r;
    const struct tool_spec *spec;
    const char *call_id;
    json_object *args;
    const char *session_id;
    struct tool_result res;
    int rc;
    bool done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void *exec_main(void *arg)
{
    struct exec_job *j = arg;
    int rc;

    redact_secrets(j->r);
    rc = exec_now(j->r, j->spec, j->call_id, j->args, j->session_id, &j->res);
    log_redact_clear(); /* this thread's copies of the credentials */
    pthread_mutex_lock(&j->mu);
    j->rc = rc;
    j->done = true;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

int tool_runner_exec(struct tool_runner *r, const struct tool_spec *spec, const char *call_id,
                     json_object *args, const char *session_id, bool (*stop)(void *ctx),
                     void *stop_ctx, struct tool_result *ret)
{
    struct exec_job j = {.r = r, .spec = spec, .call_id = call_id, .args = args,
                         .session_id = session_id};
    pthread_condattr_t ca;
    pthread_t th;
    int rc;

    if (spec->exec == TOOL_EXEC_CLIENT)
        return -EINVAL;
    atomic_store(&r->cancel, 0);
    if (!stop) {
        redact_secrets(r);
        return exec_now(r, spec, call_id, args, session_id, ret);
    }
    pthread_mutex_init(&j.mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j.cv, &ca);
    pthread_condattr_destroy(&ca);
    rc = pthread_create(&th, NULL, exec_main, &j);
    if (rc != 0) {
        /* no thread to spare: run it here (no cancel while it runs) */
        redact_secrets(r);
        rc = exec_now(r, spec, call_id, args, session_id, ret);
        goto out;
    }
    pthread_mutex_lock(&j.mu);
    while (!j.done) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += STOP_POLL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        (void)pthread_cond_timedwait(&j.cv, &j.mu, &ts);
        if (!j.done && atomic_load(&r->cancel) == 0) {
            pthread_mutex_unlock(&j.mu);
            if (stop(stop_ctx))
                atomic_store(&r->cancel, 1);
            pthread_mutex_lock(&j.mu);
        }
    }
    pthread_mutex_unlock(&j.mu);
    pthread_join(th, NULL);
    rc = j.rc;
    if (rc == 0) {
        *ret = j.res;
        memset(&j.res, 0, sizeof(j.res));
    }
out:
    tool_result_release(&j.res);
    pthread_cond_destroy(&j.cv);
    pthread_mutex_destroy(&j.mu);
    return rc;
}
