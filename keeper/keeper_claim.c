#include "keeper_claim.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/log.h"

int keeper_claim_apply(const struct keeper_spec *spec, const struct provider_ops *provider,
                       struct provider_process *proc, const char *payload, size_t len,
                       struct keeper_claim *ret, char *err, size_t errlen)
{
    json_tokener *tok = json_tokener_new();
    json_object *doc = NULL, *idle, *per_turn, *egress, *route;
    const char *key;
    int64_t ms;
    int r = -EINVAL;

    if (!tok) {
        snprintf(err, errlen, "%s", strerror(ENOMEM));
        return -ENOMEM;
    }
    if (spec->session_key && spec->session_key[0]) {
        snprintf(err, errlen, "this environment is not a spare");
        goto out;
    }
    doc = len <= KEEPER_SPEC_MAX ? json_tokener_parse_ex(tok, payload, (int)len) : NULL;
    if (!doc || !json_object_is_type(doc, json_type_object)) {
        snprintf(err, errlen, "the claim is not a JSON object");
        goto out;
    }
    idle = jsonx_get(doc, "idleMs");
    per_turn = jsonx_get(doc, "perTurn");
    egress = jsonx_get(doc, "egress");
    route = jsonx_get(doc, "modelGateway");
    key = jsonx_str(doc, "sessionKey");
    ms = idle && json_object_is_type(idle, json_type_int) ? json_object_get_int64(idle) : 0;
    if (ms <= 0 || (uint64_t)ms > KEEPER_PROTO_WINDOW_MAX_MS) {
        snprintf(err, errlen, "idleMs must be in 1..%llu",
                 (unsigned long long)KEEPER_PROTO_WINDOW_MAX_MS);
        goto out;
    }
    if (!per_turn || !json_object_is_type(per_turn, json_type_boolean) || !key) {
        snprintf(err, errlen, "the claim needs perTurn and sessionKey");
        goto out;
    }
    if (route && (!json_object_is_type(route, json_type_object) || !egress)) {
        snprintf(err, errlen, "the claim's modelGateway needs an object and an egress policy");
        goto out;
    }
    ret->sandbox = NULL;
    if (spec->shell) {
        json_object *sb = jsonx_get(doc, "sandbox");
        const char *h = jsonx_str(doc, "harness");

        if (!sb || !json_object_is_type(sb, json_type_object) || !h || strlen(h) >= 32) {
            snprintf(err, errlen, "a shell's claim needs sandbox and harness");
            goto out;
        }
        snprintf(ret->harness, sizeof(ret->harness), "%s", h);
    }
    if (egress || spec->egress) {
        if (!egress || !json_object_is_type(egress, json_type_object)) {
            snprintf(err, errlen, "the claim names no egress policy for a confined sandbox");
            goto out;
        }
        if (!provider || !provider->claim) {
            snprintf(err, errlen, "the sandbox provider cannot rebind a sandbox");
            r = -ENOTSUP;
            goto out;
        }
        r = provider->claim(proc, egress, route, err, errlen);
        if (r < 0)
            goto out;
    }
    if (key[0])
        log_ctx_set(NULL, key, NULL, spec->shell ? ret->harness : spec->harness);
    log_info(spec->shell ? "shell claimed" : "spare claimed");
    ret->idle_ms = (uint64_t)ms;
    ret->per_turn = json_object_get_boolean(per_turn);
    if (spec->shell)
        ret->sandbox = json_object_get(jsonx_get(doc, "sandbox"));
    r = 0;
out:
    json_object_put(doc);
    json_tokener_free(tok);
    return r;
}
