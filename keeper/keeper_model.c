/*
 * keeper_model — the sandbox's model calls, to the attached worker (keeper_model.h).
 */
#include "keeper_model.h"

#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "keeper_relay.h"
#include "keeper_state.h"
#include "session/pool.h"

/* The "#model" payload of a report: what the worker reads (turn/model_usage.h). */
static char *encode(const struct model_gateway_report *r)
{
    json_object *o = json_object_new_object(), *u;
    const char *text;
    char *out = NULL;

    if (!o)
        return NULL;
    json_object_object_add(
        o, "event", json_object_new_string(r->event == MODEL_GATEWAY_REFUSED ? "refused" : "call"));
    json_object_object_add(o, "api", json_object_new_string(gateway_api_name(r->api)));
    if (r->model[0])
        json_object_object_add(o, "model", json_object_new_string(r->model));
    json_object_object_add(o, "status", json_object_new_int64(r->status));
    json_object_object_add(o, "stream", json_object_new_boolean(r->stream));
    if (r->event == MODEL_GATEWAY_CALL && r->usage.known) {
        u = json_object_new_object();
        json_object_object_add(u, "input", json_object_new_int64(r->usage.input));
        json_object_object_add(u, "output", json_object_new_int64(r->usage.output));
        json_object_object_add(u, "total", json_object_new_int64(r->usage.total));
        json_object_object_add(u, "cacheRead", json_object_new_int64(r->usage.cache_read));
        json_object_object_add(u, "cacheWrite", json_object_new_int64(r->usage.cache_write));
        json_object_object_add(o, "usage", u);
    }
    if (r->why[0])
        json_object_object_add(o, "why", json_object_new_string(r->why));
    if (r->error)
        json_object_object_add(o, "failed", json_object_new_boolean(1));
    json_object_object_add(o, "ms", json_object_new_int64(r->ms));
    if (r->first_byte_ms >= 0)
        json_object_object_add(o, "firstByteMs", json_object_new_int64(r->first_byte_ms));
    text = jsonx_text(o, NULL);
    if (text)
        out = strdup(text);
    json_object_put(o);
    return out;
}

static void send_line(struct keeper *k, const char *payload)
{
    struct keeper_msg m = {
        .kind = KEEPER_MSG_MODEL, .payload = payload, .payload_len = strlen(payload)};

    keeper_relay_to_worker(k, &m); /* a turn in flight keeps it for an adopter */
}

void keeper_model_report(void *ctx, const struct model_gateway_report *r)
{
    struct keeper *k = ctx;
    struct keeper_model *m = &k->model;
    uint64_t dropped;
    char *line;

    if (k->pool)
        pool_counter_add(k->pool,
                         r->event == MODEL_GATEWAY_REFUSED ? PC_MODEL_REFUSED : PC_MODEL_CALLS, 1);
    if (r->event == MODEL_GATEWAY_REFUSED) {
        bool allowed = log_budget_take(&m->warns, KEEPER_MODEL_WARNS_PER_S, &dropped);
        if (dropped)
            log_warn("model gateway: %llu more refusals not logged", (unsigned long long)dropped);
        if (allowed)
            log_warn("model gateway refused a call (%ld): %s", r->status, r->why);
    } else {
        log_debug("model call: status %ld, %lld ms, usage %s", r->status, (long long)r->ms,
                  r->usage.known ? "read" : "unknown");
    }
    line = encode(r);
    if (!line)
        return;
    if (k->client_fd >= 0 || k->turn.held) {
        send_line(k, line);
        free(line);
    } else if (m->npending < KEEPER_MODEL_PENDING_MAX) {
        m->pending[m->npending++] = line;
    } else {
        m->lost++;
        free(line);
    }
}

void keeper_model_egress(void *ctx, bool connection, const char *dest, const char *why)
{
    struct keeper *k = ctx;

    egress_report_event(&k->egress, connection, dest, why);
}

void keeper_model_attached(struct keeper *k)
{
    struct keeper_model *m = &k->model;

    for (size_t i = 0; i < m->npending; i++) {
        send_line(k, m->pending[i]);
        free(m->pending[i]);
    }
    m->npending = 0;
    if (m->lost)
        log_info("model gateway: %llu call reports were lost while no worker was attached",
                 (unsigned long long)m->lost);
    m->lost = 0;
}

void keeper_model_sync(struct keeper *k)
{
    struct keeper_msg synced = {.kind = KEEPER_MSG_MODEL_SYNCED};

    /* the provider's service delivers every report the gateway queued so far */
    if (k->provider && k->provider->service && k->proc.priv)
        k->provider->service(&k->proc, NULL, 0, util_now_ms());
    keeper_control_to_client(k, &synced);
}

void keeper_model_release(struct keeper_model *m)
{
    for (size_t i = 0; i < m->npending; i++)
        free(m->pending[i]);
    m->npending = 0;
}
