/*
 * keeper_turn — a turn held for a worker that adopts it (keeper_turn.h).
 */
#include "keeper_turn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "keeper_state.h"
#include "proto/keeper_proto.h"

#define ADOPT_DEFAULT_MS 30000
#define ADOPT_MAX_MS 600000

void keeper_turn_end(struct keeper *k)
{
    struct keeper_turn *t = &k->turn;

    free(t->payload);
    buf_release(&t->log);
    memset(t, 0, sizeof(*t));
}

/* The turn's id and hold window, read from its JSON when they are needed (the worker died). */
static bool read_payload(struct keeper_turn *t)
{
    json_object *o = NULL;
    const char *id;
    char err[64];
    uint64_t ms = ADOPT_DEFAULT_MS;

    if (t->id[0])
        return true;
    if (jsonx_parse(t->payload, t->payload_len, JSONX_DEFAULT_DEPTH + 4, &o, err, sizeof(err)) <
        0) {
        log_debug("a malformed '#turn': %s", err);
        return false;
    }
    id = jsonx_str(o, "turnId");
    if (id && id[0] && strlen(id) < sizeof(t->id))
        snprintf(t->id, sizeof(t->id), "%s", id);
    if (jsonx_get(o, "adoptMs") && json_object_get_int64(jsonx_get(o, "adoptMs")) > 0)
        ms = (uint64_t)json_object_get_int64(jsonx_get(o, "adoptMs"));
    t->adopt_ms = (int64_t)(ms > ADOPT_MAX_MS ? ADOPT_MAX_MS : ms);
    json_object_put(o);
    return t->id[0] != '\0';
}

void keeper_turn_begin(struct keeper *k, const char *json, size_t len)
{
    struct keeper_turn *t = &k->turn;

    keeper_turn_end(k);
    t->payload = malloc(len + 1);
    if (!t->payload)
        return;
    memcpy(t->payload, json, len); /* read only if the worker dies (read_payload) */
    t->payload[len] = '\0';
    t->payload_len = len;
    t->calls_base = k->channel.calls_answered;
    buf_init(&t->log, KEEPER_TURN_LOG_MAX);
    t->active = true;
}

void keeper_turn_keep(struct keeper *k, const char *line, size_t len)
{
    struct keeper_turn *t = &k->turn;

    if (!t->active || t->overflow)
        return;
    if (buf_append(&t->log, line, len) < 0) {
        t->overflow = true; /* too much to replay: the turn can no longer be held */
        buf_release(&t->log);
        log_info("turn '%s' outgrew what the keeper keeps: it ends with its worker", t->id);
    }
}

void keeper_turn_keep_tool(void *ctx, const char *line, size_t len)
{
    keeper_turn_keep(ctx, line, len);
}

bool keeper_turn_hold(struct keeper *k)
{
    struct keeper_turn *t = &k->turn;

    if (!t->active || t->overflow || k->parked || k->channel.calls_answered != t->calls_base ||
        !read_payload(t))
        return false;
    t->held = true;
    t->adopted = false;
    k->deadline = util_now_ms() + t->adopt_ms;
    log_info("worker vanished mid-turn: holding turn '%s' for a worker to adopt (%lldms)", t->id,
             (long long)t->adopt_ms);
    return true;
}

void keeper_turn_adopt(struct keeper *k, const char *id, size_t len)
{
    struct keeper_turn *t = &k->turn;
    struct keeper_msg m = {.kind = KEEPER_MSG_NOTURN};

    if (!t->active || !t->held || len != strlen(t->id) || memcmp(id, t->id, len) != 0) {
        keeper_control_to_client(k, &m);
        return;
    }
    m = (struct keeper_msg){
        .kind = KEEPER_MSG_TURN, .payload = t->payload, .payload_len = t->payload_len};
    keeper_control_to_client(k, &m);
    if (t->log.len && buf_append(&k->client_out, t->log.data, t->log.len) < 0) {
        log_warn("cannot replay turn '%s': queue full", t->id);
        return;
    }
    t->held = false;
    t->adopted = true;
    k->deadline = 0;
    log_info("turn '%s' adopted: %zu bytes replayed", t->id, t->log.len);
}
