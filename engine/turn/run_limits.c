#include "turn/run_limits.h"

#include <stdio.h>
#include <string.h>

void run_limits_config_normalize(struct run_limits_config *cfg)
{
    if (cfg->total_ms && cfg->idle_ms >= cfg->total_ms)
        cfg->idle_ms = cfg->total_ms / 2;
}

void run_limits_start(struct run_limits *l, const struct run_limits_config *cfg, int64_t now)
{
    memset(l, 0, sizeof(*l));
    l->cfg = *cfg;
    l->start = now;
    l->last_progress = now;
}

void run_limits_event(struct run_limits *l, int64_t now)
{
    l->first_event_seen = true;
    l->last_progress = now;
}

void run_limits_progress(struct run_limits *l, int64_t now)
{
    if (l->first_event_seen)
        l->last_progress = now;
}

void run_limits_tool_start(struct run_limits *l, const char *id, int64_t now)
{
    for (size_t i = 0; i < l->ntools; i++)
        if (strcmp(l->tools[i].id, id) == 0)
            return;
    if (l->ntools >= RUN_LIMITS_TOOLS_MAX)
        return;
    snprintf(l->tools[l->ntools].id, sizeof(l->tools[0].id), "%s", id);
    l->tools[l->ntools].started = now;
    l->ntools++;
}

void run_limits_tool_end(struct run_limits *l, const char *id)
{
    for (size_t i = 0; i < l->ntools; i++) {
        if (strcmp(l->tools[i].id, id) != 0)
            continue;
        l->tools[i] = l->tools[--l->ntools];
        return;
    }
}

void run_limits_pause(struct run_limits *l)
{
    l->paused = true;
}

static void earliest(int64_t *best, int64_t t)
{
    if (t && (!*best || t < *best))
        *best = t;
}

int64_t run_limits_deadline(const struct run_limits *l)
{
    int64_t best = 0;

    if (l->paused)
        return 0;
    if (l->cfg.total_ms)
        earliest(&best, l->start + (int64_t)l->cfg.total_ms);
    if (!l->first_event_seen && l->cfg.first_event_ms)
        earliest(&best, l->start + (int64_t)l->cfg.first_event_ms);
    if (l->first_event_seen && l->cfg.idle_ms)
        earliest(&best, l->last_progress + (int64_t)l->cfg.idle_ms);
    for (size_t i = 0; l->cfg.tool_call_ms && i < l->ntools; i++)
        earliest(&best, l->tools[i].started + (int64_t)l->cfg.tool_call_ms);
    return best;
}

int run_limits_check(const struct run_limits *l, int64_t now, char *msg, size_t msglen)
{
    if (l->paused)
        return 0;
    if (l->cfg.total_ms && now >= l->start + (int64_t)l->cfg.total_ms) {
        snprintf(msg, msglen, "total run deadline of %llums exceeded",
                 (unsigned long long)l->cfg.total_ms);
        return AR_E_TIMEOUT;
    }
    if (!l->first_event_seen && l->cfg.first_event_ms &&
        now >= l->start + (int64_t)l->cfg.first_event_ms) {
        snprintf(msg, msglen, "no first response within %llums of run start",
                 (unsigned long long)l->cfg.first_event_ms);
        return AR_E_TIMEOUT;
    }
    if (l->first_event_seen && l->cfg.idle_ms &&
        now >= l->last_progress + (int64_t)l->cfg.idle_ms) {
        snprintf(msg, msglen, "idle timeout after %llums with no progress",
                 (unsigned long long)l->cfg.idle_ms);
        return AR_E_TIMEOUT;
    }
    for (size_t i = 0; l->cfg.tool_call_ms && i < l->ntools; i++) {
        if (now >= l->tools[i].started + (int64_t)l->cfg.tool_call_ms) {
            snprintf(msg, msglen, "tool call %s exceeded %llums", l->tools[i].id,
                     (unsigned long long)l->cfg.tool_call_ms);
            return AR_E_TIMEOUT;
        }
    }
    return 0;
}
