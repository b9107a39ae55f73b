#include "agenta/heartbeat.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/util.h"

struct heartbeat {
    struct agenta_api *api;
    struct redact *rd;
    char *session_id;
    char *turn_id;
    char *name;
    json_object *references;
    void (*on_interrupted)(void *ctx);
    void *ctx;
    uint64_t interval_ms;
    unsigned refresh_every;

    pthread_t thread;
    bool thread_started;
    atomic_bool stop; /* also aborts an in-flight beat */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    /* guarded by lock */
    char stream_id[AGENTA_ID_MAX];
    bool interrupted;
};

static void beat_of(const struct heartbeat *hb, bool running, struct agenta_beat *b)
{
    memset(b, 0, sizeof(*b));
    b->session_id = hb->session_id;
    b->replica_id = agenta_api_config(hb->api)->replica_id;
    b->turn_id = hb->turn_id;
    b->is_running = running;
    b->name = hb->name;
    b->references = hb->references;
}

/* One beat; true when the API answered (then *ret is its answer). */
static bool beat(struct heartbeat *hb, bool running, const atomic_bool *abort,
                 struct agenta_beat_reply *ret)
{
    struct agenta_beat b;
    char err[256];
    int r;

    beat_of(hb, running, &b);
    r = agenta_api_heartbeat(hb->api, &b, abort, ret, err, sizeof(err));
    pthread_mutex_lock(&hb->lock);
    if (r == 0 && ret->stream_id[0])
        memcpy(hb->stream_id, ret->stream_id, sizeof(hb->stream_id));
    pthread_mutex_unlock(&hb->lock);
    if (r < 0)
        log_debug("heartbeat of session \"%s\" failed (fail-open): %s", hb->session_id, err);
    return r == 0;
}

static void refresh(struct heartbeat *hb)
{
    char *fresh = NULL, err[256];
    int r;

    r = agenta_api_refresh_credential(hb->api, &hb->stop, &fresh, err, sizeof(err));
    if (r == 0) {
        /* the new credential is a secret of this run from now on, in every sink */
        if (hb->rd)
            r = redact_add(hb->rd, fresh);
        log_redact_add(fresh);
        if (r == 0)
            r = agenta_api_set_credential(hb->api, fresh);
        explicit_bzero(fresh, strlen(fresh));
        free(fresh);
        if (r == 0)
            return;
        log_debug("credential refresh of session \"%s\" not applied: %s", hb->session_id,
                  ar_strerror(r));
        return;
    }
    log_debug("credential refresh of session \"%s\" failed (keeping the old one): %s",
              hb->session_id, err);
}

static void *timer(void *arg)
{
    struct heartbeat *hb = arg;
    int64_t next = util_now_ms() + (int64_t)hb->interval_ms;
    uint64_t nbeats = 0;
    struct timespec ts;

    pthread_mutex_lock(&hb->lock);
    while (!atomic_load(&hb->stop)) {
        struct agenta_beat_reply rep;
        bool fire = false;

        if (util_now_ms() < next) {
            util_deadline_ts(next, &ts);
            pthread_cond_timedwait(&hb->wake, &hb->lock, &ts);
            continue;
        }
        pthread_mutex_unlock(&hb->lock);
        nbeats++;
        if (hb->refresh_every && nbeats % hb->refresh_every == 0)
            refresh(hb);
        if (!atomic_load(&hb->stop) && beat(hb, true, &hb->stop, &rep) && !rep.is_current_turn) {
            pthread_mutex_lock(&hb->lock);
            fire = !hb->interrupted;
            hb->interrupted = true;
            pthread_mutex_unlock(&hb->lock);
        }
        if (fire && hb->on_interrupted) {
            log_debug("session \"%s\" turn \"%s\" is no longer the current turn: interrupting",
                      hb->session_id, hb->turn_id);
            hb->on_interrupted(hb->ctx);
        }
        pthread_mutex_lock(&hb->lock);
        next = util_now_ms() + (int64_t)hb->interval_ms;
    }
    pthread_mutex_unlock(&hb->lock);
    log_redact_clear(); /* this thread's copies of refreshed credentials */
    return NULL;
}

static void hb_free(struct heartbeat *hb)
{
    pthread_cond_destroy(&hb->wake);
    pthread_mutex_destroy(&hb->lock);
    agenta_api_free(hb->api);
    free(hb->session_id);
    free(hb->turn_id);
    free(hb->name);
    json_object_put(hb->references);
    free(hb);
}

int heartbeat_start(struct agenta_api *api, const struct heartbeat_params *p,
                    struct heartbeat **ret_hb, struct heartbeat_first *ret_first)
{
    const struct agenta_config *cfg = agenta_api_config(api);
    struct heartbeat_first first;
    struct agenta_beat_reply rep;
    pthread_condattr_t attr;
    struct heartbeat *hb;
    int r = -ENOMEM;

    if (!p->session_id || !p->session_id[0] || !p->turn_id || !p->turn_id[0])
        return -EINVAL;
    hb = calloc(1, sizeof(*hb));
    if (!hb)
        return -ENOMEM;
    pthread_mutex_init(&hb->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&hb->wake, &attr);
    pthread_condattr_destroy(&attr);
    atomic_init(&hb->stop, false);
    hb->api = agenta_api_ref(api);
    hb->rd = p->rd;
    hb->on_interrupted = p->on_interrupted;
    hb->ctx = p->ctx;
    hb->interval_ms = p->interval_ms ? p->interval_ms : cfg->heartbeat_interval_ms;
    if (hb->interval_ms == 0)
        hb->interval_ms = 30000;
    hb->refresh_every = cfg->refresh_every;
    hb->session_id = strdup(p->session_id);
    hb->turn_id = strdup(p->turn_id);
    if (!hb->session_id || !hb->turn_id)
        goto fail;
    if (p->name && p->name[0]) {
        struct buf clean;

        /* a name is stored by the platform: it gets the run's redaction like a record */
        buf_init(&clean, HEARTBEAT_NAME_MAX * 64);
        if (p->rd ? redact_text(p->rd, p->name, strlen(p->name), &clean) < 0
                  : buf_append_str(&clean, p->name) < 0) {
            buf_release(&clean);
            goto fail;
        }
        if (buf_steal(&clean, &hb->name) < 0) {
            buf_release(&clean);
            goto fail;
        }
    }
    if (p->references) {
        if (json_object_deep_copy(p->references, &hb->references, NULL) != 0)
            goto fail;
    }

    memset(&first, 0, sizeof(first));
    first.admitted = true;
    if (beat(hb, true, NULL, &rep)) {
        first.answered = true;
        first.admitted = rep.admitted;
        memcpy(first.stream_id, rep.stream_id, sizeof(first.stream_id));
    }
    if (first.admitted) {
        r = pthread_create(&hb->thread, NULL, timer, hb);
        if (r != 0) {
            r = -r;
            goto fail;
        }
        hb->thread_started = true;
    }
    *ret_hb = hb;
    *ret_first = first;
    return 0;
fail:
    hb_free(hb);
    return r;
}

void heartbeat_stream_id(struct heartbeat *hb, char *out, size_t outlen)
{
    if (outlen == 0)
        return;
    pthread_mutex_lock(&hb->lock);
    snprintf(out, outlen, "%s", hb->stream_id);
    pthread_mutex_unlock(&hb->lock);
}

void heartbeat_release(struct heartbeat *hb)
{
    struct agenta_beat_reply rep;

    if (!hb)
        return;
    if (hb->thread_started) {
        pthread_mutex_lock(&hb->lock);
        atomic_store(&hb->stop, true);
        pthread_cond_signal(&hb->wake);
        pthread_mutex_unlock(&hb->lock);
        pthread_join(hb->thread, NULL);
    }
    /* best effort: the platform's orphan sweep ends the stream row if this one is lost */
    (void)beat(hb, false, NULL, &rep);
    hb_free(hb);
}

/* ---- the session name ------------------------------------------------------------------- */

/* The code point at s (n bytes left) and its length; a broken sequence counts as one byte. */
static uint32_t decode(const unsigned char *s, size_t n, size_t *ret_len)
{
    size_t k = 0;
    uint32_t cp;

    if (s[0] < 0x80) {
        *ret_len = 1;
        return s[0];
    }
    if ((s[0] & 0xe0) == 0xc0) {
        k = 1;
        cp = s[0] & 0x1f;
    } else if ((s[0] & 0xf0) == 0xe0) {
        k = 2;
        cp = s[0] & 0x0f;
    } else if ((s[0] & 0xf8) == 0xf0) {
        k = 3;
        cp = s[0] & 0x07;
    } else {
        *ret_len = 1;
        return 0xfffd;
    }
    if (k >= n) {
        *ret_len = 1;
        return 0xfffd;
    }
    for (size_t i = 1; i <= k; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *ret_len = 1;
            return 0xfffd;
        }
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    *ret_len = k + 1;
    return cp;
}

/* JavaScript's String.prototype.trim white space and line terminators. */
static bool js_space(uint32_t cp)
{
    return cp == 0x09 || cp == 0x0a || cp == 0x0b || cp == 0x0c || cp == 0x0d || cp == 0x20 ||
           cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000 || cp == 0xfeff;
}

int heartbeat_session_name(const struct run_request *req, char *out, size_t outlen)
{
    for (size_t i = 0; i < req->nmessages; i++) {
        const struct chat_message *m = &req->messages[i];
        struct buf text;
        size_t start = 0, end, at, cps = 0, len;

        if (!m->role || strcmp(m->role, "user") != 0)
            continue;
        buf_init(&text, RUN_OUTPUT_MAX);
        for (size_t j = 0; j < m->nblocks; j++)
            if (m->blocks[j].type == BLOCK_TEXT && m->blocks[j].text &&
                buf_append_str(&text, m->blocks[j].text) < 0)
                break;
        /* trim: leading white space, then find where trailing white space starts */
        while (start < text.len) {
            uint32_t cp = decode((const unsigned char *)text.data + start, text.len - start, &len);
            if (!js_space(cp))
                break;
            start += len;
        }
        end = start;
        for (at = start; at < text.len; at += len) {
            uint32_t cp = decode((const unsigned char *)text.data + at, text.len - at, &len);
            if (!js_space(cp))
                end = at + len;
        }
        if (end == start) {
            buf_release(&text);
            continue;
        }
        /* the first 60 code points */
        for (at = start; at < end && cps < HEARTBEAT_NAME_MAX_CODEPOINTS; at += len, cps++)
            (void)decode((const unsigned char *)text.data + at, end - at, &len);
        if (at - start + 1 > outlen) {
            buf_release(&text);
            return -E2BIG;
        }
        memcpy(out, text.data + start, at - start);
        out[at - start] = '\0';
        buf_release(&text);
        return 0;
    }
    return -ENOENT;
}
