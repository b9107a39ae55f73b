/*
 * turn_model — a measured turn's model calls (turn_model.h).
 */
#include "turn/turn_model.h"

#include <stdio.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "turn/turn_loop.h"

static double price_of(json_object *p, const char *key, double dflt)
{
    json_object *v = jsonx_get(p, key);

    if (!v || (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int)))
        return dflt;
    return json_object_get_double(v);
}

bool turn_model_cost(json_object *prices, const char *model, int64_t input, int64_t output,
                     int64_t cache_read, int64_t cache_write, double *ret)
{
    json_object *p = model ? jsonx_get(prices, model) : NULL;
    double in, cost;
    int64_t plain = input - cache_read - cache_write;

    if (!p || !json_object_is_type(p, json_type_object))
        return false;
    in = price_of(p, "input", 0);
    cost = (double)(plain > 0 ? plain : 0) * in + (double)output * price_of(p, "output", 0) +
           (double)cache_read * price_of(p, "cacheRead", in) +
           (double)cache_write * price_of(p, "cacheWrite", in);
    *ret = cost / 1e6;
    return true;
}

static int64_t count(json_object *o, const char *key)
{
    json_object *v = jsonx_get(o, key);
    int64_t n = v && json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : 0;

    return n > 0 ? n : 0;
}

bool turn_model_usage(json_object *report, json_object *prices, struct run_usage *ret)
{
    json_object *u = jsonx_get(report, "usage");

    if (!u || !json_object_is_type(u, json_type_object))
        return false;
    memset(ret, 0, sizeof(*ret));
    ret->present = true;
    ret->input = count(u, "input");
    ret->output = count(u, "output");
    ret->total = count(u, "total");
    if (!ret->total)
        ret->total = ret->input + ret->output;
    ret->cost_unknown =
        !turn_model_cost(prices, jsonx_str(report, "model"), ret->input, ret->output,
                         count(u, "cacheRead"), count(u, "cacheWrite"), &ret->cost);
    return true;
}

const char *turn_model_error_code(json_object *report)
{
    const char *ev = jsonx_str(report, "event");
    int64_t status = json_object_get_int64(jsonx_get(report, "status"));

    if (ev && strcmp(ev, "refused") == 0)
        return "model_refused";
    if (json_object_get_boolean(jsonx_get(report, "failed")) && status == 0)
        return "model_unavailable";
    if (status == 401 || status == 403)
        return "provider_auth_error";
    if (status == 429)
        return "provider_rate_limited";
    if (status == 502 || status == 504)
        return json_object_get_boolean(jsonx_get(report, "failed")) ? "model_unavailable"
                                                                    : "provider_error";
    if (status >= 400 || json_object_get_boolean(jsonx_get(report, "failed")))
        return "provider_error";
    return NULL;
}

/* One call report: its usage event, or the refusal's error event; the code a failure names. */
static void on_call(struct turn_loop *L, json_object *report)
{
    const char *code = turn_model_error_code(report), *why = jsonx_str(report, "why");
    struct run_usage u;

    if (turn_model_usage(report, L->opt->prices, &u)) {
        L->measured_calls++;
        L->measured.present = true;
        L->measured.input += u.input;
        L->measured.output += u.output;
        L->measured.total += u.total;
        L->measured.cost += u.cost;
        L->measured.cost_unknown |= u.cost_unknown;
        event_emit(L->es, event_usage(&u));
    } else if (!code && !jsonx_get(report, "why") &&
               strcmp(jsonx_str(report, "event") ? jsonx_str(report, "event") : "", "call") == 0) {
        L->unmeasured_calls++;
    }
    if (!code) {
        L->gateway_code = NULL; /* a later call went fine: an earlier failure was retried */
        return;
    }
    L->gateway_code = code;
    if (strcmp(code, "model_refused") == 0) {
        snprintf(L->gateway_why, sizeof(L->gateway_why), "the model gateway refused a call: %s",
                 why ? why : "refused");
        event_emit(L->es, event_error(L->gateway_why, code));
    } else {
        snprintf(L->gateway_why, sizeof(L->gateway_why), "model call failed (status %lld)%s%s",
                 (long long)json_object_get_int64(jsonx_get(report, "status")), why ? ": " : "",
                 why ? why : "");
    }
    log_debug("model gateway: %s", L->gateway_why);
}

bool turn_model_on_message(struct turn_loop *L, const struct acp_msg *m)
{
    if (m->method && strcmp(m->method, TURN_MODEL_CALL) == 0) {
        on_call(L, m->params);
        return false;
    }
    if (m->method && strcmp(m->method, TURN_MODEL_SYNCED) == 0 && L->syncing) {
        L->syncing = false;
        L->synced = true;
        return true;
    }
    return false;
}

bool turn_model_hold(struct turn_loop *L, struct acp_msg *m, int64_t now)
{
    if (!L->opt->measured || !L->te->model_sync || L->syncing || L->synced || L->held.root)
        return false;
    if (L->te->model_sync(L->te->ctx) < 0)
        return false; /* the keeper is gone: what came is what there is */
    L->held = *m;
    memset(m, 0, sizeof(*m));
    L->syncing = true;
    L->sync_deadline = now + TURN_MODEL_SYNC_MS;
    return true;
}

bool turn_model_expired(struct turn_loop *L, int64_t now)
{
    if (!L->syncing || now < L->sync_deadline)
        return false;
    log_debug("the keeper did not answer the model sync within %dms", TURN_MODEL_SYNC_MS);
    L->syncing = false;
    L->synced = true;
    return true;
}

void turn_model_finish(struct turn_loop *L, json_object *prompt_result)
{
    struct run_usage *r = &L->res->usage;
    const struct run_usage *h = &L->st.calls;

    if (!L->opt->measured)
        return;
    if (L->measured_calls == 0 && L->unmeasured_calls > 0) {
        /* every call was of an API the gateway reads no usage from: the harness's own report
         * stands (one event with its totals), and there is nothing to check it against */
        L->st.call_usages = 0;
        turn_finish_usage(&L->st, L->res, prompt_result, L->es);
        return;
    }
    r->input = L->measured.input;
    r->output = L->measured.output;
    r->total = L->measured.total;
    r->cost = L->measured.cost;
    r->cost_unknown = L->measured.cost_unknown;
    r->present = true;
    if (L->st.channel_usage && (h->total != r->total || h->output != r->output)) {
        L->out->usage_mismatch = true;
        L->out->reported = *h;
    }
}
